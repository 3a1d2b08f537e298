package journaltest

import (
	"fmt"
	"sync"
	"testing"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testAppendConcurrentFence: writers racing to append after the same last
// seq, as two activations of one conversation do in a split brain. In each
// round exactly one wins; every other fails with ErrConflict and writes
// nothing of its request (no event, no tool call row, no deadline, no
// fsm_state), and the log stays gap-free, each append's events contiguous.
func testAppendConcurrentFence(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	const writers, rounds = 8, 10
	callID := func(r, w int) string { return fmt.Sprintf("tc-%02d-%d", r, w) }
	request := func(last uint64, r, w int) *messages.AppendRequest {
		id := callID(r, w)
		return &messages.AppendRequest{
			ConversationId: "c", ExpectedLast: last,
			Events:    []*messages.Event{assistantEv(w, fmt.Sprintf("writer %d", w), id), toolCallEv(w, id)},
			ToolCalls: []*messages.ToolCallRecord{humanCall("c", id)},
			FsmState:  awaiting(last+2, id),
			Status:    statusSuspended,
			Schedule:  []*messages.Deadline{deadline("c", id, 100+r)},
		}
	}
	var wantEvents []*messages.Event
	var wantPending []string
	var wantDeadlines []*messages.Deadline
	for r := range rounds {
		last := lastSeq(t, s, "c")
		errs := make([]error, writers)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for w := range writers {
			wg.Go(func() {
				<-start
				_, errs[w] = s.Append(ctx, request(last, r, w))
			})
		}
		close(start)
		wg.Wait()
		winner := -1
		for w, err := range errs {
			if err == nil {
				require.Equal(t, -1, winner, "round %d: writers %d and %d both appended after seq %d", r, winner, w, last)
				winner = w
				continue
			}
			requireSentinel(t, err, journal.ErrConflict, "round %d, writer %d", r, w)
		}
		require.NotEqual(t, -1, winner, "round %d: no writer appended after seq %d", r, last)
		won := request(last, r, winner)
		wantEvents = append(wantEvents, won.GetEvents()...)
		wantPending = append(wantPending, callID(r, winner))
		wantDeadlines = append(wantDeadlines, won.GetSchedule()...)
		for w := range writers {
			if w == winner {
				continue
			}
			_, err := s.ToolCall(ctx, callID(r, w))
			requireSentinel(t, err, journal.ErrNotFound, "round %d: the losing writer %d wrote its tool call row", r, w)
		}
		requireProto(t, won.GetFsmState(), conversation(t, s, "c").GetFsmState(), "round %d: the winner's fsm_state", r)
	}
	requireProtos(t, withSeqs(1, wantEvents), allEvents(t, s, "c"), "the winners' events only, gap-free, each append contiguous")
	pend, err := s.PendingToolCalls(ctx, "c")
	require.NoError(t, err)
	assert.Equal(t, wantPending, callIDs(pend), "the winners' tool call rows only")
	requireProtos(t, wantDeadlines, allDeadlines(t, s), "the winners' deadlines only")
}

// testAppendConcurrentResolutions: the two ways a pending call is answered,
// ResolveToolCall (Runtime.Resolve) and an Append carrying its resolution
// (the journal actor of this or another node), racing on the same calls:
// for each call exactly one wins, every other fails with ErrStale and
// changes nothing, and the row holds the winner's status and result with
// its deadline gone.
func testAppendConcurrentResolutions(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	const calls, racers = 20, 4 // racers per call: even ones ResolveToolCall, odd ones Append
	ids := make([]string, calls)
	for i := range ids {
		ids[i] = fmt.Sprintf("tc-%02d", i)
	}
	suspend(t, s, "c", ids...)
	statuses := []messages.ToolCallStatus{resolved, errored, expired}
	outcome := func(i, k int) *messages.ToolOutcome { return contentOutcome(fmt.Sprintf("call %d racer %d", i, k)) }
	errs := make([][]error, calls)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, id := range ids {
		errs[i] = make([]error, racers)
		for k := range racers {
			st := statuses[k%len(statuses)]
			wg.Go(func() {
				<-start
				if k%2 == 0 {
					_, errs[i][k] = s.ResolveToolCall(ctx, id, st, outcome(i, k), tm(200+k))
					return
				}
				_, errs[i][k] = s.Append(ctx, &messages.AppendRequest{ConversationId: "c", Unfenced: true,
					Resolutions: []*messages.ToolResolution{{ToolCallId: id, Status: st, Result: outcome(i, k), At: ts(200 + k)}}})
			})
		}
	}
	close(start)
	wg.Wait()
	for i, id := range ids {
		winner := -1
		for k, err := range errs[i] {
			if err == nil {
				require.Equal(t, -1, winner, "%s: racers %d and %d both resolved it", id, winner, k)
				winner = k
				continue
			}
			requireSentinel(t, err, journal.ErrStale, "%s, racer %d", id, k)
		}
		require.NotEqual(t, -1, winner, "%s: no racer resolved it", id)
		row := toolCall(t, s, id)
		assert.Equal(t, statuses[winner%len(statuses)], row.GetStatus(), "%s: the winner's status", id)
		requireProto(t, outcome(i, winner), row.GetResult(), "%s: the winner's result", id)
	}
	pend, err := s.PendingToolCalls(ctx, "c")
	require.NoError(t, err)
	assert.Empty(t, pend)
	assert.Empty(t, allDeadlines(t, s), "every resolution removed its call's deadline")
}
