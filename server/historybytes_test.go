package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/server"
)

// TestHistoryPageBoundedByBytes: a history page holds, of the events its
// limit asks for, the newest whose JSON fits Options.MaxPageBytes, at least
// one, and its next_before resumes before the oldest it holds: paging
// backwards reads the whole log, each event once, in order.
func TestHistoryPageBoundedByBytes(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	big := strings.Repeat("x", 1000)
	// Two events' JSON fit, a third does not.
	n := startNode(t, model, server.Options{MaxPageBytes: 2500})
	conv := n.create(t, tokAlice, nil)
	alice := agent.ScopeOf(agent.Identity{UserID: "alice"})
	for i := range 3 { // 6 events of about 1 KB of JSON each
		model.Push(conv.ID, scripted.Text(fmt.Sprintf("answer %d %s", i, big)))
		_, err := n.rt.SendAndWait(ctx, conv.ID, fmt.Sprintf("question %d %s", i, big), alice)
		require.NoError(t, err)
	}
	last, err := n.rt.History(ctx, conv.ID, 0, 1)
	require.NoError(t, err)
	require.EqualValues(t, 6, last[0].GetSeq())

	var seqs []string
	var sizes []int
	path := "/v1/conversations/" + conv.ID + "/events?limit=50"
	for {
		var page server.EventPage
		n.must(t, http.StatusOK, "GET", path, tokAlice, nil, &page)
		require.NotEmpty(t, page.Events, "every page makes progress")
		bytes := 0
		for i := len(page.Events) - 1; i >= 0; i-- {
			bytes += len(page.Events[i])
			var ev struct {
				Seq string `json:"seq"`
			}
			require.NoError(t, json.Unmarshal(page.Events[i], &ev))
			seqs = append(seqs, ev.Seq)
		}
		require.LessOrEqual(t, bytes, 2500, "the page's events fit MaxPageBytes")
		sizes = append(sizes, len(page.Events))
		if page.NextBefore == 0 {
			break
		}
		path = fmt.Sprintf("/v1/conversations/%s/events?limit=50&before=%d", conv.ID, page.NextBefore)
	}
	require.Equal(t, []string{"6", "5", "4", "3", "2", "1"}, seqs, "every event once, newest first")
	require.Equal(t, []int{2, 2, 2}, sizes)

	// A bound below one event still returns one event a page.
	one := startNode(t, model, server.Options{MaxPageBytes: 1})
	conv = one.create(t, tokAlice, nil)
	model.Push(conv.ID, scripted.Text("answer"))
	_, err = one.rt.SendAndWait(ctx, conv.ID, "question", alice)
	require.NoError(t, err)
	var page server.EventPage
	one.must(t, http.StatusOK, "GET", "/v1/conversations/"+conv.ID+"/events", tokAlice, nil, &page)
	require.Len(t, page.Events, 1)
	require.EqualValues(t, 2, page.NextBefore)
	one.must(t, http.StatusOK, "GET", "/v1/conversations/"+conv.ID+"/events?before=2", tokAlice, nil, &page)
	require.Len(t, page.Events, 1)
	require.Zero(t, page.NextBefore)
}

// queryLog is a Store that records the EventQuery and the bytes (proto.Size
// summed) of each Events read of conversation conv, once set.
type queryLog struct {
	journal.Store
	mu      sync.Mutex
	conv    string
	queries []journal.EventQuery
	sizes   []int
}

func (s *queryLog) Events(ctx context.Context, conv string, q journal.EventQuery) ([]*messages.Event, error) {
	evs, err := s.Store.Events(ctx, conv, q)
	n := 0
	for _, ev := range evs {
		n += proto.Size(ev)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if conv == s.conv {
		s.queries, s.sizes = append(s.queries, q), append(s.sizes, n)
	}
	return evs, err
}

// TestHistoryPageReadBoundedByBytes: the Store read behind a history page
// carries Options.MaxPageBytes (journal.EventQuery.MaxBytes), so it stops
// there: a page of large events is not read whole and then cut.
func TestHistoryPageReadBoundedByBytes(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	store := &queryLog{Store: memjournal.New(memjournal.Options{})}
	n := startNodeIn(t, "", model, server.Options{MaxPageBytes: 2500}, func(o *lazarus.Options) { o.Store = store })
	conv := n.create(t, tokAlice, nil)
	alice := agent.ScopeOf(agent.Identity{UserID: "alice"})
	big := strings.Repeat("x", 1000)
	for i := range 5 { // 10 events of about 1 KB each
		model.Push(conv.ID, scripted.Text(fmt.Sprintf("answer %d %s", i, big)))
		_, err := n.rt.SendAndWait(ctx, conv.ID, fmt.Sprintf("question %d %s", i, big), alice)
		require.NoError(t, err)
	}

	store.mu.Lock()
	store.conv = conv.ID
	store.mu.Unlock()
	var page server.EventPage
	n.must(t, http.StatusOK, "GET", "/v1/conversations/"+conv.ID+"/events?limit=50", tokAlice, nil, &page)
	require.Len(t, page.Events, 2)
	require.EqualValues(t, 9, page.NextBefore)

	store.mu.Lock()
	defer store.mu.Unlock()
	require.NotEmpty(t, store.queries)
	q := store.queries[0]
	require.Equal(t, journal.EventQuery{Limit: 51, MaxBytes: 2500}, q, "the page's read carries its byte bound")
	require.LessOrEqual(t, store.sizes[0], 2500, "the Store stopped at the bound: %v", store.sizes)
}

// TestHistoryViewPageReadBoundedByBytes: an agent's or the effective view's
// history page is read within a bound too (lazarus.HistoryOptions.MaxBytes:
// Options.MaxPageBytes, or one event if that is less, and one event more),
// not from the whole log, and pages as the full log's does: paging
// backwards returns every entry once, in order, and the last page says
// there is nothing before it.
func TestHistoryViewPageReadBoundedByBytes(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	store := &queryLog{Store: memjournal.New(memjournal.Options{})}
	n := startNodeIn(t, "", model, server.Options{MaxPageBytes: 2500}, func(o *lazarus.Options) { o.Store = store })
	conv := n.create(t, tokAlice, nil)
	alice := agent.ScopeOf(agent.Identity{UserID: "alice"})
	big := strings.Repeat("x", 300_000)
	for i := range 5 { // 10 events of about 300 KB each
		model.Push(conv.ID, scripted.Text(fmt.Sprintf("answer %d %s", i, big)))
		_, err := n.rt.SendAndWait(ctx, conv.ID, fmt.Sprintf("question %d %s", i, big), alice)
		require.NoError(t, err)
	}
	all, err := n.rt.History(ctx, conv.ID, 0, 0)
	require.NoError(t, err)
	total := 0
	for _, ev := range all {
		total += proto.Size(ev)
	}
	bound := 2 * (journal.MaxEventBytes + 16)
	require.Greater(t, total, bound)

	for _, query := range []string{"view=effective", "agent=default", "view=effective&agent=default"} {
		var seqs []string
		path := "/v1/conversations/" + conv.ID + "/events?limit=50&" + query
		for {
			store.mu.Lock()
			store.conv, store.queries, store.sizes = conv.ID, nil, nil
			store.mu.Unlock()
			var page server.EventPage
			n.must(t, http.StatusOK, "GET", path, tokAlice, nil, &page)
			require.Len(t, page.Events, 1, "%s: an event's JSON does not fit a page but alone", query)
			var ev struct {
				Seq string `json:"seq"`
			}
			require.NoError(t, json.Unmarshal(page.Events[0], &ev))
			seqs = append(seqs, ev.Seq)

			store.mu.Lock()
			require.NotEmpty(t, store.queries, query)
			read := 0
			for i, q := range store.queries {
				require.Positive(t, q.MaxBytes, "%s: read %d is bounded", query, i)
				read += store.sizes[i]
			}
			if len(seqs) == 1 {
				// The newest page: the view's walk back to the head starts
				// there (a later page reads the log after it again, a
				// bounded read at a time).
				require.LessOrEqual(t, store.queries[0].MaxBytes, bound, "%s: the page's read carries its bound", query)
				require.LessOrEqual(t, read, bound+journal.MaxEventBytes, "%s: the page read at most its bound, and one event past it: %v", query, store.sizes)
			}
			store.mu.Unlock()
			if page.NextBefore == 0 {
				break
			}
			path = fmt.Sprintf("/v1/conversations/%s/events?limit=50&before=%d&%s", conv.ID, page.NextBefore, query)
		}
		require.Equal(t, []string{"10", "9", "8", "7", "6", "5", "4", "3", "2", "1"}, seqs, "%s: every event once, newest first", query)
	}
}
