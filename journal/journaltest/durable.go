package journaltest

import (
	"cmp"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var durableCases = []suiteCase{
	{name: "ReopenKeepsEverything", run: testReopen, durable: true},
	{name: "CloseThenReopen", run: testCloseReopen, durable: true},
	{name: "Crash", run: testCrash, durable: true},
}

// populateMany populates several conversations with tricky ids, deletes one,
// and returns the conversation ids (the deleted one included) and tool call
// ids involved.
func populateMany(t testing.TB, s journal.Store, audit bool) (convs, calls []string) {
	t.Helper()
	convs = append(append([]string{}, trickyIDs[:5]...), "deleted")
	for _, id := range convs {
		calls = append(calls, populate(t, s, id, audit)...)
	}
	require.NoError(t, s.DeleteConversation(t.Context(), "deleted"))
	require.NoError(t, s.PutMetadata(t.Context(), "metadata-only", map[string]string{"k": "v"}))
	schedule(t, s, deadline("rowless", "rowless/tc", 7))
	return append(convs, "metadata-only", "rowless"), calls
}

func testReopen(t *testing.T, e env) {
	h := e.open(t)
	s := h.Store
	ctx := t.Context()
	convs, calls := populateMany(t, s, e.feat.Audit)
	before := snapshotOf(t, s, convs, calls)

	s = h.Reopen(t)
	requireSameSnapshot(t, before, snapshotOf(t, s, convs, calls), "after Reopen")

	// The rules hold on the reopened store: tombstones, fences, pending
	// calls, the id index.
	_, err := s.Append(ctx, &messages.AppendRequest{ConversationId: "deleted", Events: userEvs(1, 1)})
	requireSentinel(t, err, journal.ErrDeleted, "the tombstone survives")
	last := lastSeq(t, s, "a")
	_, err = s.Append(ctx, &messages.AppendRequest{ConversationId: "a", ExpectedLast: last - 1, Events: userEvs(1, 1)})
	requireSentinel(t, err, journal.ErrConflict, "the fence survives")
	res := appendOK(t, s, &messages.AppendRequest{ConversationId: "a", ExpectedLast: last, Events: userEvs(30, 1)})
	assert.Equal(t, journal.AppendResult{FirstSeq: last + 1, LastSeq: last + 1}, res, "seqs continue")
	_, err = s.ResolveToolCall(ctx, "a/tc-1", resolved, contentOutcome("late"), tm(40))
	require.NoError(t, err, "a pending call is still pending")
	_, err = s.ResolveToolCall(ctx, "a/tc-1", resolved, contentOutcome("again"), tm(41))
	requireSentinel(t, err, journal.ErrStale)
	requireSentinel(t, s.UpsertToolCall(ctx, humanCall("ab", "a/tc-2")), journal.ErrConflict, "the tool call id index survives")
	_, err = s.ResolveToolCall(ctx, "deleted/tc-1", resolved, nil, tm(42))
	requireSentinel(t, err, journal.ErrStale, "a deleted conversation's calls stay gone")

	// And what was written after the reopen survives the next one.
	before = snapshotOf(t, s, convs, calls)
	s = h.Reopen(t)
	requireSameSnapshot(t, before, snapshotOf(t, s, convs, calls), "after the second Reopen")
}

func testCloseReopen(t *testing.T, e env) {
	h := e.open(t)
	convs, calls := populateMany(t, h.Store, e.feat.Audit)
	before := snapshotOf(t, h.Store, convs, calls)
	require.NoError(t, h.Store.Close())
	s := h.Reopen(t)
	requireSameSnapshot(t, before, snapshotOf(t, s, convs, calls), "Close flushes everything")
}

func testDeadlinesReopen(t *testing.T, e env) {
	h := e.open(t)
	schedule(t, h.Store, deadline("c", "tc-3", 30), deadline("c", "tc-1", 10), deadline("d", "tc-2", 20), deadline("c", "tc-4", 40))
	schedule(t, h.Store, deadline("c", "tc-4", 5)) // replaced
	require.NoError(t, h.Store.CancelDeadline(t.Context(), "c", "tc-3"))
	want := []*messages.Deadline{deadline("c", "tc-4", 5), deadline("c", "tc-1", 10), deadline("d", "tc-2", 20)}
	requireProtos(t, want, allDeadlines(t, h.Store))
	s := h.Reopen(t)
	requireProtos(t, want, allDeadlines(t, s), "deadlines survive Reopen, replaced and cancelled ones included")
	var due []*messages.Deadline
	require.NoError(t, s.Deadlines(t.Context(), tm(10), func(d *messages.Deadline) error { due = append(due, d); return nil }))
	requireProtos(t, want[:2], due)
}

// testCrash runs rounds of a concurrent workload (each worker owns its
// conversations, as actors do), then crashes the store while no call is in
// flight, and checks that every write that returned nil survived, whole.
func testCrash(t *testing.T, e env) {
	sd := seed(t)
	rng := newRand(sd)
	h := e.open(t)
	s := h.Store
	const workers, convsPerWorker, rounds, opsPerRound = 4, 3, 6, 40
	ws := make([]*crashWorker, workers)
	for i := range ws {
		ws[i] = newCrashWorker(i, convsPerWorker, newRand(sd+uint64(i)+1))
	}
	for round := range rounds {
		var wg sync.WaitGroup
		for _, w := range ws {
			wg.Go(func() { w.run(t, s, opsPerRound) })
		}
		wg.Wait()
		for _, w := range ws {
			require.NoError(t, w.err, "round %d, worker %d (seed %d)", round, w.id, sd)
		}
		s = h.Crash(t, rng)
		for _, w := range ws {
			w.verify(t, s, fmt.Sprintf("after crash %d (seed %d)", round+1, sd))
		}
	}
}

// crashWorker writes to its own conversations and keeps what was
// acknowledged.
type crashWorker struct {
	id    int
	rng   *rand.Rand
	convs []string
	sec   int
	calls int
	err   error

	events    map[string][]*messages.Event
	rows      map[string]*messages.ToolCallRecord
	deadlines map[string]*messages.Deadline // by tool call id
	summary   map[string]*messages.Summary  // the latest
	meta      map[string]map[string]string
	fsm       map[string]*messages.FSMState
	status    map[string]messages.ConversationStatus
}

func newCrashWorker(id, convs int, rng *rand.Rand) *crashWorker {
	w := &crashWorker{
		id: id, rng: rng,
		events: map[string][]*messages.Event{}, rows: map[string]*messages.ToolCallRecord{},
		deadlines: map[string]*messages.Deadline{}, summary: map[string]*messages.Summary{},
		meta: map[string]map[string]string{}, fsm: map[string]*messages.FSMState{},
		status: map[string]messages.ConversationStatus{},
	}
	for j := range convs {
		w.convs = append(w.convs, fmt.Sprintf("crash/w%d/c%d", id, j))
	}
	return w
}

func (w *crashWorker) last(conv string) uint64 { return uint64(len(w.events[conv])) }

func (w *crashWorker) pendingOf(conv string) []string {
	out := []string{}
	for id, r := range w.rows {
		if r.GetConversationId() == conv && r.GetStatus() == pending {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// acked records a successful append of req.
func (w *crashWorker) acked(req *messages.AppendRequest, res journal.AppendResult) {
	conv := req.GetConversationId()
	w.events[conv] = append(w.events[conv], withSeqs(res.FirstSeq, req.GetEvents())...)
	if _, ok := w.status[conv]; !ok {
		w.status[conv] = statusActive
	}
	for _, tc := range req.GetToolCalls() {
		row := cloneOf(tc)
		row.Status = pending
		w.rows[tc.GetId()] = row
	}
	for _, r := range req.GetResolutions() {
		row := w.rows[r.GetToolCallId()]
		row.Status, row.Result, row.Resolved = r.GetStatus(), r.GetResult(), r.GetAt()
		delete(w.deadlines, r.GetToolCallId())
	}
	if req.GetFsmState() != nil {
		w.fsm[conv] = req.GetFsmState()
	}
	if st := req.GetStatus(); st != 0 {
		st, _ = journal.StatusWritten(w.status[conv], st, req.GetFsmState(), func(id string) (bool, error) {
			r := w.rows[id]
			return r != nil && r.GetConversationId() == conv && journal.IsTerminal(r.GetStatus()), nil
		})
		w.status[conv] = st
	}
	for _, d := range req.GetSchedule() {
		w.deadlines[d.GetToolCallId()] = d
	}
}

func (w *crashWorker) fail(format string, args ...any) {
	if w.err == nil {
		w.err = fmt.Errorf(format, args...)
	}
}

// requestFor builds one append for conv: a user turn, a model turn asking
// for calls, or an answer to a pending call.
func (w *crashWorker) requestFor(conv string) *messages.AppendRequest {
	w.sec++
	last := w.last(conv)
	req := &messages.AppendRequest{ConversationId: conv, ExpectedLast: last}
	pend := w.pendingOf(conv)
	switch k := w.rng.IntN(3); {
	case k == 2 && len(pend) > 0:
		id := pend[w.rng.IntN(len(pend))]
		out := contentOutcome(fmt.Sprintf(`"answer %d"`, w.sec))
		req.Events = []*messages.Event{resolutionEv(w.sec, id, resolved), toolResultEv(w.sec, id, out.GetContent())}
		req.Resolutions = []*messages.ToolResolution{{ToolCallId: id, Status: resolved, Result: out, At: ts(w.sec)}}
		req.FsmState = idleState(last + 2)
	case k == 1:
		n := 1 + w.rng.IntN(2)
		var ids []string
		for range n {
			w.calls++
			ids = append(ids, fmt.Sprintf("%s/tc-%d", conv, w.calls))
		}
		req.Events = []*messages.Event{assistantEv(w.sec, textLike(w.rng, 200), ids...)}
		for _, id := range ids {
			req.Events = append(req.Events, toolCallEv(w.sec, id))
			req.ToolCalls = append(req.ToolCalls, humanCall(conv, id))
			req.Schedule = append(req.Schedule, deadline(conv, id, w.sec+100+w.rng.IntN(1000)))
		}
		req.FsmState = awaiting(last+uint64(len(req.Events)), ids...)
		req.Status = statusSuspended
	default:
		for range 1 + w.rng.IntN(3) {
			req.Events = append(req.Events, userEv(w.sec, textLike(w.rng, 50+w.rng.IntN(1000))))
		}
		req.FsmState = idleState(last + uint64(len(req.Events)))
		req.Status = statusActive
	}
	return req
}

func (w *crashWorker) run(t testing.TB, s journal.Store, ops int) {
	ctx := t.Context()
	for range ops {
		if w.err != nil {
			return
		}
		conv := w.convs[w.rng.IntN(len(w.convs))]
		switch k := w.rng.IntN(10); {
		case k < 5:
			req := w.requestFor(conv)
			res, err := s.Append(ctx, req)
			if err != nil {
				w.fail("append to %s: %v", conv, err)
				return
			}
			w.acked(req, res)
		case k < 6:
			reqs := make([]*messages.AppendRequest, len(w.convs))
			for i, c := range w.convs {
				reqs[i] = w.requestFor(c)
			}
			for i, res := range s.AppendBatch(ctx, reqs) {
				if res.Err != nil {
					w.fail("batch append to %s: %v", reqs[i].GetConversationId(), res.Err)
					return
				}
				w.acked(reqs[i], res)
			}
		case k < 7:
			pend := w.pendingOf(conv)
			if len(pend) == 0 {
				continue
			}
			id := pend[w.rng.IntN(len(pend))]
			w.sec++
			row, err := s.ResolveToolCall(ctx, id, expired, errorOutcome("expired", "no answer"), tm(w.sec))
			if err != nil {
				w.fail("resolve %s: %v", id, err)
				return
			}
			w.rows[id] = row
			delete(w.deadlines, id)
		case k < 8:
			pend := w.pendingOf(conv)
			if len(pend) == 0 {
				continue
			}
			id := pend[w.rng.IntN(len(pend))]
			if w.rng.IntN(3) == 0 {
				if err := s.CancelDeadline(ctx, conv, id); err != nil {
					w.fail("cancel %s: %v", id, err)
					return
				}
				delete(w.deadlines, id)
				continue
			}
			d := deadline(conv, id, w.sec+w.rng.IntN(2000))
			if err := s.ScheduleDeadline(ctx, d); err != nil {
				w.fail("schedule %s: %v", id, err)
				return
			}
			w.deadlines[id] = d
		case k < 9:
			last := w.last(conv)
			if last == 0 {
				continue
			}
			to := 1 + w.rng.Uint64N(last)
			sum := &messages.Summary{FromSeq: 1, ToSeq: to, Content: textLike(w.rng, 300), Version: "v1", Created: ts(w.sec)}
			if err := s.PutSummary(ctx, conv, sum); err != nil {
				w.fail("summary of %s: %v", conv, err)
				return
			}
			if cur := w.summary[conv]; cur == nil || cur.GetToSeq() <= to {
				w.summary[conv] = sum
			}
		default:
			kv := map[string]string{fmt.Sprint("k", w.rng.IntN(4)): fmt.Sprint(w.sec)}
			if err := s.PutMetadata(ctx, conv, kv); err != nil {
				w.fail("metadata of %s: %v", conv, err)
				return
			}
			if w.meta[conv] == nil {
				w.meta[conv] = map[string]string{}
			}
			maps.Copy(w.meta[conv], kv)
		}
	}
}

// verify checks the store holds exactly what the worker saw acknowledged.
func (w *crashWorker) verify(t *testing.T, s journal.Store, when string) {
	t.Helper()
	ctx := t.Context()
	var wantDeadlines []*messages.Deadline
	for _, d := range w.deadlines {
		wantDeadlines = append(wantDeadlines, d)
	}
	slices.SortFunc(wantDeadlines, func(a, b *messages.Deadline) int {
		return cmp.Or(a.GetAt().AsTime().Compare(b.GetAt().AsTime()), cmp.Compare(a.GetToolCallId(), b.GetToolCallId()))
	})
	var gotDeadlines []*messages.Deadline
	for _, conv := range w.convs {
		evs := allEvents(t, s, conv)
		for i, ev := range evs {
			require.Equal(t, uint64(i+1), ev.GetSeq(), "%s: %s: seqs are not gap-free", when, conv)
		}
		// No half of an atomic append: the rows of the log's calls exist,
		// and resolved ones are resolved.
		for _, ev := range evs {
			if id := ev.GetToolCall().GetCall().GetId(); id != "" {
				_, err := s.ToolCall(ctx, id)
				require.NoError(t, err, "%s: %s: event %d issued call %s but its row is missing", when, conv, ev.GetSeq(), id)
			}
			if id := ev.GetResolution().GetToolCallId(); id != "" {
				row, err := s.ToolCall(ctx, id)
				require.NoError(t, err, "%s: %s: resolution of a missing row %s", when, conv, id)
				require.True(t, journal.IsTerminal(row.GetStatus()), "%s: %s: event %d resolved %s but its row is %v", when, conv, ev.GetSeq(), id, row.GetStatus())
			}
		}
		requireProtos(t, w.events[conv], evs, "%s: %s: acknowledged events", when, conv)
		sum, since := loadSince(t, s, conv)
		requireProto(t, w.summary[conv], sum, "%s: %s: latest summary", when, conv)
		from := w.summary[conv].GetToSeq()
		requireProtos(t, w.events[conv][from:], since, "%s: %s: LoadSince events", when, conv)
		pend, err := s.PendingToolCalls(ctx, conv)
		require.NoError(t, err)
		assert.Equal(t, w.pendingOf(conv), callIDs(pend), "%s: %s: pending calls", when, conv)
		md, err := s.Metadata(ctx, conv)
		require.NoError(t, err)
		want := w.meta[conv]
		if want == nil {
			want = map[string]string{}
		}
		assert.Equal(t, want, md, "%s: %s: metadata", when, conv)
		if len(w.events[conv]) > 0 {
			row := conversation(t, s, conv)
			requireProto(t, w.fsm[conv], row.GetFsmState(), "%s: %s: fsm_state", when, conv)
			assert.Equal(t, w.status[conv], row.GetStatus(), "%s: %s: status", when, conv)
		}
		gotDeadlines = append(gotDeadlines, deadlinesOf(t, s, conv)...)
	}
	for _, id := range slices.Sorted(maps.Keys(w.rows)) {
		requireProto(t, w.rows[id], toolCall(t, s, id), "%s: tool call %s", when, id)
	}
	slices.SortStableFunc(gotDeadlines, func(a, b *messages.Deadline) int {
		return cmp.Or(a.GetAt().AsTime().Compare(b.GetAt().AsTime()), cmp.Compare(a.GetToolCallId(), b.GetToolCallId()))
	})
	requireProtos(t, wantDeadlines, gotDeadlines, "%s: worker %d: deadlines", when, w.id)
}

// textLike returns about n bytes of word-like text (compressible the way
// chat text is, unlike zeros or random bytes).
func textLike(rng *rand.Rand, n int) string {
	b := make([]byte, 0, n+12)
	for len(b) < n {
		if len(b) > 0 {
			b = append(b, ' ')
		}
		b = append(b, words[rng.IntN(len(words))]...)
	}
	return string(b[:n])
}

var words = []string{
	"the", "agent", "will", "book", "a", "flight", "to", "Lisbon", "on", "Tuesday", "morning",
	"please", "confirm", "budget", "hotel", "near", "river", "and", "late", "checkout", "if",
	"possible", "price", "is", "within", "limits", "tool", "call", "result", "user", "said",
	"yes", "no", "maybe", "weather", "forecast", "sunny", "with", "light", "wind", "summary",
	"conversation", "durable", "journal", "actor", "revived", "pending", "human", "answer",
}
