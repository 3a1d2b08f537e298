package lazarus

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

// readLog is a Store that records the EventQuery and the bytes (proto.Size
// summed) of each Events read of conversation conv.
type readLog struct {
	journal.Store
	conv    string
	mu      sync.Mutex
	queries []journal.EventQuery
	sizes   []int
}

func (s *readLog) Events(ctx context.Context, conv string, q journal.EventQuery) ([]*messages.Event, error) {
	evs, err := s.Store.Events(ctx, conv, q)
	n := 0
	for _, ev := range evs {
		n += proto.Size(ev)
	}
	if conv == s.conv {
		s.mu.Lock()
		s.queries, s.sizes = append(s.queries, q), append(s.sizes, n)
		s.mu.Unlock()
	}
	return evs, err
}

func (s *readLog) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queries, s.sizes = nil, nil
}

// readBoundsRuntime opens a Runtime on a readLog of conversation "c", which
// holds 2*turns events of about 1 KB each.
func readBoundsRuntime(t *testing.T, turns int) (*Runtime, *readLog) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store := &readLog{Store: memjournal.New(memjournal.Options{}), conv: "c"}
	model := scripted.New(scripted.Options{})
	rt, err := Open(Options{Store: store, Model: model, IdleTimeout: -1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = rt.Close() })
	big := strings.Repeat("x", 1000)
	for i := range turns {
		model.Push("c", scripted.Text(fmt.Sprintf("answer %d %s", i, big)))
		_, err := rt.SendAndWait(ctx, "c", fmt.Sprintf("question %d %s", i, big), agent.Scope{UserID: "u"})
		require.NoError(t, err)
	}
	store.reset()
	return rt, store
}

// TestHistoryWithinBoundsTheStoreRead: HistoryWithin passes its bound to
// the Store's read (journal.EventQuery.MaxBytes), which keeps the newest
// events within it, one at least; 0 is History's read; a negative bound
// wraps journal.ErrInvalid.
func TestHistoryWithinBoundsTheStoreRead(t *testing.T) {
	ctx := context.Background()
	rt, store := readBoundsRuntime(t, 3)
	all, err := rt.History(ctx, "c", 0, 0)
	require.NoError(t, err)
	require.Len(t, all, 6)
	bound := proto.Size(all[4]) + proto.Size(all[5]) + proto.Size(all[3])/2

	store.reset()
	evs, err := rt.HistoryWithin(ctx, "c", 0, 5, bound)
	require.NoError(t, err)
	require.Equal(t, []uint64{5, 6}, seqsOf(evs), "the newest within the bound")
	evs, err = rt.HistoryWithin(ctx, "c", 5, 5, bound)
	require.NoError(t, err)
	require.Equal(t, []uint64{3, 4}, seqsOf(evs), "paging on before the oldest")
	evs, err = rt.HistoryWithin(ctx, "c", 0, 0, 1)
	require.NoError(t, err)
	require.Equal(t, []uint64{6}, seqsOf(evs), "one event at least")
	store.mu.Lock()
	require.Equal(t, []journal.EventQuery{
		{Limit: 5, MaxBytes: bound}, {Before: 5, Limit: 5, MaxBytes: bound}, {Limit: math.MaxInt, MaxBytes: 1},
	}, store.queries, "the bound reaches the Store")
	require.LessOrEqual(t, store.sizes[0], bound)
	store.mu.Unlock()

	evs, err = rt.HistoryWithin(ctx, "c", 0, 0, 0)
	require.NoError(t, err)
	require.Equal(t, seqsOf(all), seqsOf(evs), "0 is no bound")
	_, err = rt.HistoryWithin(ctx, "c", 0, 0, -1)
	require.ErrorIs(t, err, journal.ErrInvalid)
}

// TestForkReadBoundedByMaxForkBytes: Fork reads the events it copies
// within journal.MaxForkBytes, so a copy too large to write is refused
// without reading the whole of it first.
func TestForkReadBoundedByMaxForkBytes(t *testing.T) {
	ctx := context.Background()
	rt, store := readBoundsRuntime(t, 2)
	require.NoError(t, rt.Fork(ctx, "c", 4, "f"))
	store.mu.Lock()
	require.Contains(t, store.queries, journal.EventQuery{Before: 5, MaxBytes: journal.MaxForkBytes}, "the copy's read carries the bound: %v", store.queries)
	store.mu.Unlock()
	forked, err := rt.History(ctx, "f", 0, 0)
	require.NoError(t, err)
	require.Equal(t, []uint64{1, 2, 3, 4}, seqsOf(forked), "a copy within the bound is whole")
}

// TestForkPointRefusesPastItsBound: the read of the events a fork copies
// stops at its bound, and a copy past it is refused with an error wrapping
// journal.ErrInvalid; a copy that fits it exactly is read whole.
func TestForkPointRefusesPastItsBound(t *testing.T) {
	ctx := context.Background()
	rt, store := readBoundsRuntime(t, 3)
	all, err := rt.History(ctx, "c", 0, 0)
	require.NoError(t, err)
	total := 0
	for _, ev := range all[:5] {
		total += proto.Size(ev)
	}

	store.reset()
	_, _, _, err = forkPoint(ctx, store, "c", 5, total-1)
	require.ErrorIs(t, err, journal.ErrInvalid)
	require.ErrorContains(t, err, "more than a fork copies")
	store.mu.Lock()
	require.Less(t, store.sizes[0], total, "the read stopped at the bound")
	store.mu.Unlock()

	sum, evs, _, err := forkPoint(ctx, store, "c", 5, total)
	require.NoError(t, err)
	require.Nil(t, sum)
	require.Equal(t, []uint64{1, 2, 3, 4, 5}, seqsOf(evs))
}

func seqsOf(evs []*messages.Event) []uint64 {
	seqs := make([]uint64, len(evs))
	for i, ev := range evs {
		seqs[i] = ev.GetSeq()
	}
	return seqs
}
