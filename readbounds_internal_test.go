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
	"github.com/lazarusrt/lazarus/snapshot"
)

// readLog is a Store that records the EventQuery and the bytes (proto.Size
// summed) of each Events read of conversation conv.
type readLog struct {
	journal.Store
	conv    string
	mu      sync.Mutex
	queries []journal.EventQuery
	sizes   []int
	seqs    map[uint64]int // how many reads returned each seq
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
		if s.seqs == nil {
			s.seqs = map[uint64]int{}
		}
		for _, ev := range evs {
			s.seqs[ev.GetSeq()]++
		}
		s.mu.Unlock()
	}
	return evs, err
}

func (s *readLog) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queries, s.sizes, s.seqs = nil, nil, nil
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

// rewoundRuntime is readBoundsRuntime with rewinds: seqs 1 to 19, of which
// 9 (to 4), 14 (to 2) and 17 (to 15) are rewinds, so the head is 1, 2, 14,
// 15, 17, 18, 19.
func rewoundRuntime(t *testing.T) (*Runtime, *readLog) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rt, store := readBoundsRuntime(t, 4)
	model := rt.opts.Model.(*scripted.Model)
	big := strings.Repeat("x", 1000)
	turn := func(i int) {
		model.Push("c", scripted.Text(fmt.Sprintf("answer %d %s", i, big)))
		_, err := rt.SendAndWait(ctx, "c", fmt.Sprintf("question %d %s", i, big), agent.Scope{UserID: "u"})
		require.NoError(t, err)
	}
	scope := agent.Scope{UserID: "u"}
	require.NoError(t, rt.Rewind(ctx, "c", 4, RewindOptions{}, scope))
	turn(4)
	turn(5)
	require.NoError(t, rt.Rewind(ctx, "c", 2, RewindOptions{}, scope))
	turn(6)
	require.NoError(t, rt.Rewind(ctx, "c", 15, RewindOptions{}, scope))
	turn(7)
	store.reset()
	return rt, store
}

// wholeLogView is HistoryView as it was computed from the whole log: the
// head marked from its newest event back, then the selection, then the
// Limit and MaxBytes cuts.
func wholeLogView(evs []*messages.Event, opts HistoryOptions) []HistoryEntry {
	on := make([]bool, len(evs))
	off := evs[0].GetSeq() - 1
	for pos := off + uint64(len(evs)); pos > off; {
		on[pos-off-1] = true
		if rw := evs[pos-off-1].GetRewind(); rw != nil && rw.GetToSeq() < pos {
			pos = rw.GetToSeq()
		} else {
			pos--
		}
	}
	var out []HistoryEntry
	for i, ev := range evs {
		if (opts.Before != 0 && ev.GetSeq() >= opts.Before) || (opts.Effective && (!on[i] || ev.GetRewind() != nil)) ||
			(opts.Agent != nil && !snapshot.VisibleTo(ev, opts.Agent.Name)) {
			continue
		}
		out = append(out, HistoryEntry{Event: ev, Rewound: !on[i]})
	}
	if opts.Limit > 0 && len(out) > opts.Limit {
		out = out[len(out)-opts.Limit:]
	}
	if opts.MaxBytes > 0 {
		size, i := 0, len(out)
		for i > 0 && (i == len(out) || size+proto.Size(out[i-1].Event) <= opts.MaxBytes) {
			size += proto.Size(out[i-1].Event)
			i--
		}
		out = out[i:]
	}
	return out
}

// TestHistoryViewPagesThroughTheStore: HistoryView reads the log backwards
// a bounded page at a time (Runtime.viewPageBytes, one event at least) and
// returns what the whole log gave it, for every selection: pages before
// any seq, limits, byte bounds, the effective view and an agent's.
func TestHistoryViewPagesThroughTheStore(t *testing.T) {
	ctx := context.Background()
	rt, store := rewoundRuntime(t)
	all, err := rt.History(ctx, "c", 0, 0)
	require.NoError(t, err)
	require.Len(t, all, 19)
	head, err := rt.HistoryView(ctx, "c", HistoryOptions{Effective: true})
	require.NoError(t, err)
	require.Equal(t, []uint64{1, 2, 15, 18, 19}, seqsOf(entryEvents(head)), "the head is 1, 2, 14, 15, 17, 18, 19")

	largest := 0
	for _, ev := range all {
		largest = max(largest, proto.Size(ev))
	}
	for _, pageBytes := range []int{historyPageBytes, 2500, 1} {
		rt.viewPageBytes = pageBytes
		for _, before := range []uint64{0, 1, 2, 3, 10, 15, 16, 17, 19, 20} {
			for _, limit := range []int{0, 1, 2, 5} {
				for _, maxBytes := range []int{0, 1, 2500} {
					for _, effective := range []bool{false, true} {
						for _, view := range []*AgentView{nil, ViewOf("")} {
							opts := HistoryOptions{Before: before, Limit: limit, MaxBytes: maxBytes, Effective: effective, Agent: view}
							store.reset()
							got, err := rt.HistoryView(ctx, "c", opts)
							require.NoError(t, err)
							require.Equal(t, wholeLogView(all, opts), got, "page bytes %d, %+v", pageBytes, opts)
							store.mu.Lock()
							for i, n := range store.sizes {
								require.LessOrEqual(t, n, max(pageBytes, largest), "read %d of %+v", i, opts)
								require.LessOrEqual(t, store.queries[i].MaxBytes, pageBytes, "the read is bounded")
								require.Positive(t, store.queries[i].Limit, "the read is bounded")
							}
							store.mu.Unlock()
						}
					}
				}
			}
		}
	}
	_, err = rt.HistoryView(ctx, "c", HistoryOptions{MaxBytes: -1})
	require.ErrorIs(t, err, journal.ErrInvalid)
}

// TestHistoryViewReadsWhatThePageNeeds: a page of the newest events reads
// just them, within its limit and bytes; the effective view does not read
// the spans its walk skips; a page far back reads the log within the page
// bound a read, never whole.
func TestHistoryViewReadsWhatThePageNeeds(t *testing.T) {
	ctx := context.Background()
	rt, store := rewoundRuntime(t)

	got, err := rt.HistoryView(ctx, "c", HistoryOptions{Limit: 2})
	require.NoError(t, err)
	require.Equal(t, []uint64{18, 19}, seqsOf(entryEvents(got)))
	store.mu.Lock()
	require.Equal(t, []journal.EventQuery{{Limit: 2, MaxBytes: historyPageBytes}}, store.queries, "the page's limit reaches the Store")
	store.mu.Unlock()

	store.reset()
	got, err = rt.HistoryView(ctx, "c", HistoryOptions{MaxBytes: 1500})
	require.NoError(t, err)
	require.Equal(t, []uint64{19}, seqsOf(entryEvents(got)))
	store.mu.Lock()
	require.Equal(t, []journal.EventQuery{{Limit: historyPage, MaxBytes: 1500}}, store.queries, "the page's bytes reach the Store")
	store.mu.Unlock()

	rt.viewPageBytes = 1 // one event a read
	store.reset()
	got, err = rt.HistoryView(ctx, "c", HistoryOptions{Effective: true})
	require.NoError(t, err)
	require.Equal(t, []uint64{1, 2, 15, 18, 19}, seqsOf(entryEvents(got)))
	store.mu.Lock()
	for seq := uint64(3); seq <= 13; seq++ {
		require.Zero(t, store.seqs[seq], "seq %d, which a rewind skipped, was read", seq)
	}
	store.mu.Unlock()

	rt.viewPageBytes = 2500
	store.reset()
	got, err = rt.HistoryView(ctx, "c", HistoryOptions{Before: 3, Limit: 1})
	require.NoError(t, err)
	require.Equal(t, []uint64{2}, seqsOf(entryEvents(got)))
	store.mu.Lock()
	require.Greater(t, len(store.sizes), 1, "paged")
	for i, n := range store.sizes {
		require.LessOrEqual(t, n, 2500, "read %d", i)
	}
	store.mu.Unlock()
}

func entryEvents(entries []HistoryEntry) []*messages.Event {
	evs := make([]*messages.Event, len(entries))
	for i, e := range entries {
		evs[i] = e.Event
	}
	return evs
}

func seqsOf(evs []*messages.Event) []uint64 {
	seqs := make([]uint64, len(evs))
	for i, ev := range evs {
		seqs[i] = ev.GetSeq()
	}
	return seqs
}

// TestChaptersWithinBoundsTheStoreRead: ChaptersWithin passes its bound to
// the Store's read of the chapter, keeps the newest events within it (one
// at least), says the chapter is cut and resumes it before the oldest it
// holds, with the same summary, until the chapter's first event, whose
// page is Chapters' own; 0 is Chapters' read; a negative bound wraps
// journal.ErrInvalid.
func TestChaptersWithinBoundsTheStoreRead(t *testing.T) {
	ctx := context.Background()
	rt, store := readBoundsRuntime(t, 4)
	sum := &messages.Summary{FromSeq: 1, ToSeq: 2, Content: "the first turn"}
	require.NoError(t, store.PutSummary(ctx, "c", sum))
	whole, err := rt.Chapters(ctx, "c", 0)
	require.NoError(t, err)
	require.Equal(t, []uint64{3, 4, 5, 6, 7, 8}, seqsOf(whole.Events))
	require.EqualValues(t, 3, whole.Prev)
	require.False(t, whole.Cut)
	bound := proto.Size(whole.Events[5]) + proto.Size(whole.Events[4]) + proto.Size(whole.Events[3])/2

	store.reset()
	var got []uint64
	before := uint64(0)
	for pages := 0; ; pages++ {
		require.Less(t, pages, 10, "paging gets on")
		ch, err := rt.ChaptersWithin(ctx, "c", before, bound)
		require.NoError(t, err)
		require.True(t, proto.Equal(sum, ch.Summary), "every part of the chapter has its summary")
		got = append(seqsOf(ch.Events), got...)
		if !ch.Cut {
			require.EqualValues(t, 3, ch.Prev, "the chapter's last part says where the previous chapter ends")
			break
		}
		require.Equal(t, ch.Events[0].GetSeq(), ch.Prev, "a cut chapter resumes before the oldest event it holds")
		require.Len(t, ch.Events, 2, "two events fit the bound")
		before = ch.Prev
	}
	require.Equal(t, seqsOf(whole.Events), got, "the parts make the chapter, each event once")
	store.mu.Lock()
	for i, q := range store.queries {
		if q.After == 2 {
			require.Equal(t, bound, q.MaxBytes, "read %d carries the bound", i)
			require.LessOrEqual(t, store.sizes[i], bound, "read %d stopped at the bound", i)
		}
	}
	store.mu.Unlock()

	ch, err := rt.ChaptersWithin(ctx, "c", 0, 1)
	require.NoError(t, err)
	require.Equal(t, []uint64{8}, seqsOf(ch.Events), "one event at least")
	require.True(t, ch.Cut)
	ch, err = rt.ChaptersWithin(ctx, "c", 0, 0)
	require.NoError(t, err)
	require.Equal(t, seqsOf(whole.Events), seqsOf(ch.Events), "0 is no bound")
	require.Equal(t, whole.Prev, ch.Prev)
	require.False(t, ch.Cut)
	_, err = rt.ChaptersWithin(ctx, "c", 0, -1)
	require.ErrorIs(t, err, journal.ErrInvalid)
}
