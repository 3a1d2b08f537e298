package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/server"
)

// appendsAfterLastSeq appends one event to conv right after the first
// LastSeq of it returns: a live node's write while show reads.
type appendsAfterLastSeq struct {
	journal.Store
	t    *testing.T
	conv string
	once sync.Once
}

func (s *appendsAfterLastSeq) LastSeq(ctx context.Context, id string) (uint64, error) {
	last, err := s.Store.LastSeq(ctx, id)
	if err == nil && id == s.conv {
		s.once.Do(func() {
			_, aerr := s.Store.Append(ctx, &messages.AppendRequest{ConversationId: id, ExpectedLast: last,
				Events: []*messages.Event{userEvent("meanwhile")}})
			require.NoError(s.t, aerr)
		})
	}
	return last, err
}

// Close leaves the Store open: the test reads it after the command.
func (s *appendsAfterLastSeq) Close() error { return nil }

func userEvent(text string) *messages.Event {
	return &messages.Event{Time: timestamppb.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)), Body: &messages.Event_UserMsg{UserMsg: &messages.UserMessage{
		Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: text}}}}}}
}

// fiveEvents are the log of the tests' conversation "c".
func fiveEvents() []*messages.Event {
	var evs []*messages.Event
	for i := range 5 {
		evs = append(evs, userEvent(fmt.Sprintf("message %d", i+1)))
	}
	return evs
}

// requireSecondPage checks show's output of --from 1 --limit 2 on the log
// of fiveEvents and one event appended while show ran.
func requireSecondPage(t *testing.T, st journal.Store, code int, stdout, stderr string) {
	t.Helper()
	require.Equal(t, exitOK, code, "stderr: %s", stderr)
	last, err := st.LastSeq(ctxT(t), "c")
	require.NoError(t, err)
	require.Equal(t, uint64(6), last, "the event was appended during show")
	lines := outLines(stdout)
	require.Len(t, lines, 4, "two events and the pages around them: %q", stdout)
	require.True(t, strings.HasPrefix(lines[0], "     2  "), lines[0])
	require.True(t, strings.HasPrefix(lines[1], "     3  "), lines[1])
	require.Equal(t, "-- older: --before 2", lines[2])
	require.Equal(t, "-- newer: --from 3", lines[3])
}

// TestShowForwardPageWhileTheLogGrows: show --from reads the last seq,
// then counts the events the log holds; an event appended between the two
// (a live node writing the same PostgreSQL) made the count exceed the last
// seq read first, the log's first seq wrapped round, and the forward page
// became every event after --from, with no page before it: here seqs 2 to
// 6 rather than 2 and 3.
func TestShowForwardPageWhileTheLogGrows(t *testing.T) {
	ctx := ctxT(t)
	base := memStore(t)
	_, err := base.Append(ctx, &messages.AppendRequest{ConversationId: "c", Events: fiveEvents(), Status: messages.ConversationStatus_CONVERSATION_STATUS_IDLE})
	require.NoError(t, err)

	var out, errb bytes.Buffer
	c := newCLI(strings.NewReader(""), &out, &errb)
	st := &appendsAfterLastSeq{Store: base, t: t, conv: "c"}
	c.open = func(string, bool) (journal.Store, error) { return st, nil }
	code := c.run(ctx, []string{"show", "c", "--dir", t.TempDir(), "--from", "1", "--limit", "2"})
	requireSecondPage(t, base, code, out.String(), errb.String())
}

// TestShowOnANodeForwardPageWhileTheLogGrows: as above on a live node
// (show --server), whose conversation gets an event between show's read
// of its last seq and its count of the events: the forward page was the
// newest two events (5 and 6), with no page before them.
func TestShowOnANodeForwardPageWhileTheLogGrows(t *testing.T) {
	ctx := ctxT(t)
	st := memjournal.New(memjournal.Options{})
	_, err := st.Append(ctx, &messages.AppendRequest{ConversationId: "c", Events: fiveEvents(), Status: messages.ConversationStatus_CONVERSATION_STATUS_IDLE})
	require.NoError(t, err)
	rt, err := lazarus.Open(lazarus.Options{Store: st, Model: scripted.New(scripted.Options{}), NoResume: true})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, rt.Close()) })
	tokens, err := server.NewBearerTokens(map[string]agent.Identity{"ops-token": {UserID: "ops", Roles: []string{"operator"}}})
	require.NoError(t, err)
	api := server.New(rt, server.Options{Authenticator: tokens})
	var once sync.Once
	node := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		api.ServeHTTP(w, r)
		if strings.HasSuffix(r.URL.Path, "/c/events") {
			// After the first read of the log (show's last seq).
			once.Do(func() {
				_, err := st.Append(ctx, &messages.AppendRequest{ConversationId: "c", ExpectedLast: 5, Events: []*messages.Event{userEvent("meanwhile")}})
				require.NoError(t, err)
			})
		}
	}))
	t.Cleanup(node.Close)

	var out, errb bytes.Buffer
	c := newCLI(strings.NewReader(""), &out, &errb)
	code := c.run(ctx, []string{"show", "c", "--server", node.URL, "--token", "ops-token", "--from", "1", "--limit", "2"})
	requireSecondPage(t, st, code, out.String(), errb.String())
}
