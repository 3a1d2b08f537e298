package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/server"
)

// cursorNode is a node whose listings (calls, conversations, a
// conversation's schedules) page by next: the next cursor of the page
// after cursor, one row a page. After 20 pages it answers a last page, so
// that a client that does not check its cursors ends too.
func cursorNode(t *testing.T, next map[string]string) (base string, pages *atomic.Int64) {
	t.Helper()
	pages = &atomic.Int64{}
	node := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cursor := r.URL.Query().Get("cursor")
		n, ok := next[cursor]
		if pages.Add(1) > 20 || !ok {
			n = ""
		}
		var page any
		switch r.URL.Path {
		case "/v1/calls":
			page = server.CallList{Calls: []server.Call{{ID: "call_" + cursor}}, NextCursor: n}
		case "/v1/conversations":
			page = server.ConversationList{Conversations: []server.Conversation{{ID: "c" + cursor}}, NextCursor: n}
		case "/v1/conversations/c/schedules":
			page = server.ScheduleList{Schedules: []server.Schedule{{ID: "s" + cursor}}, NextCursor: n}
		default:
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(page)
	}))
	t.Cleanup(node.Close)
	return node.URL, pages
}

// TestRemoteListingsRefuseAStuckCursor: a node that answers a listing's
// page with a next cursor it gave before (the same one again, or a cycle)
// fails the calls and conversations listings with an error wrapping
// errCursorStuck after the page that repeats it, rather than paging for
// ever (they read every page the node gave); the schedules listing, whose
// cursors are ordered ids, also refuses one that goes back. A listing
// whose cursors move on is read whole.
func TestRemoteListingsRefuseAStuckCursor(t *testing.T) {
	ctx := context.Background()
	listings := []struct {
		name string
		list func(r *remote) (rows int, err error)
	}{
		{"calls", func(r *remote) (int, error) {
			calls, err := r.pendingCalls(ctx)
			return len(calls), err
		}},
		{"conversations", func(r *remote) (int, error) {
			n := 0
			err := r.eachConversation(ctx, func(server.Conversation) error { n++; return nil })
			return n, err
		}},
		{"schedules", func(r *remote) (int, error) {
			var out bytes.Buffer
			c := newCLI(strings.NewReader(""), &out, &bytes.Buffer{})
			none := ""
			err := c.remoteSchedules(ctx, r, "c", &none)
			return strings.Count(out.String(), "\n"), err
		}},
	}
	for _, l := range listings {
		t.Run(l.name, func(t *testing.T) {
			for _, c := range []struct {
				name  string
				next  map[string]string
				pages int64
			}{
				{"same cursor again", map[string]string{"": "a", "a": "a"}, 2},
				{"a cycle", map[string]string{"": "a", "a": "b", "b": "a"}, 3},
			} {
				base, pages := cursorNode(t, c.next)
				_, err := l.list(&remote{base: base, hc: http.DefaultClient})
				require.ErrorIs(t, err, errCursorStuck, c.name)
				require.Contains(t, err.Error(), "node "+base+": "+l.name+": next cursor", c.name)
				require.Equal(t, c.pages, pages.Load(), "%s: no page read after the repeated cursor", c.name)
				require.Equal(t, exitError, exitCode(err))
			}
			base, pages := cursorNode(t, map[string]string{"": "a", "a": "b"})
			rows, err := l.list(&remote{base: base, hc: http.DefaultClient})
			require.NoError(t, err)
			require.EqualValues(t, 3, pages.Load())
			require.Equal(t, 3, rows, "every page's row")
		})
	}
	base, pages := cursorNode(t, map[string]string{"": "b", "b": "a"})
	var out bytes.Buffer
	none := ""
	err := newCLI(strings.NewReader(""), &out, &bytes.Buffer{}).remoteSchedules(ctx, &remote{base: base, hc: http.DefaultClient}, "c", &none)
	require.True(t, errors.Is(err, errCursorStuck), "a schedules cursor that goes back: %v", err)
	require.EqualValues(t, 2, pages.Load())
	require.Empty(t, out.String(), "nothing printed of a listing that failed")
}

// TestRemoteHistoryRefusesANextBeforeThatDoesNotGoBack: a node whose
// history page answers a next_before not below the page's own before
// (the same one again, or a later one) fails the read with an error
// wrapping errCursorStuck, rather than paging for ever; one that goes
// back is read to its first event.
func TestRemoteHistoryRefusesANextBeforeThatDoesNotGoBack(t *testing.T) {
	ctx := context.Background()
	node := func(next func(before uint64) uint64) (string, *atomic.Int64) {
		pages := &atomic.Int64{}
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			before, _ := strconv.ParseUint(r.URL.Query().Get("before"), 10, 64)
			if pages.Add(1) > 20 || r.URL.Path != "/v1/conversations/c/events" {
				http.NotFound(w, r)
				return
			}
			seq := before - 1
			if before == 0 {
				seq = 5
			}
			ev, err := protojson.Marshal(&messages.Event{Seq: seq, Body: &messages.Event_UserMsg{UserMsg: &messages.UserMessage{
				Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: "hi"}}}}}})
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(server.EventPage{Events: []json.RawMessage{ev}, NextBefore: next(seq)})
		}))
		t.Cleanup(srv.Close)
		return srv.URL, pages
	}
	for name, next := range map[string]func(uint64) uint64{
		"the same again": func(seq uint64) uint64 { return 5 },
		"a later one":    func(seq uint64) uint64 { return seq + 2 },
	} {
		base, pages := node(next)
		_, err := (&remote{base: base, hc: http.DefaultClient}).events(ctx, "c", 0, 0, 0)
		require.ErrorIs(t, err, errCursorStuck, name)
		require.LessOrEqual(t, pages.Load(), int64(2), "%s: no page read after the one that did not go back", name)
	}
	base, _ := node(func(seq uint64) uint64 {
		if seq == 1 {
			return 0
		}
		return seq
	})
	evs, err := (&remote{base: base, hc: http.DefaultClient}).events(ctx, "c", 0, 0, 0)
	require.NoError(t, err)
	require.Len(t, evs, 5)
	for i, ev := range evs {
		require.EqualValues(t, i+1, ev.GetSeq())
	}
}
