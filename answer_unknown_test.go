package lazarus_test

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/actors/actorstest"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

// lostReplyStore writes the first request lose picks and then reports it
// as journal.ErrUnknownOutcome: a COMMIT that landed and whose reply was
// lost.
type lostReplyStore struct {
	journal.Store
	lose func(*messages.AppendRequest) bool
	lost atomic.Bool
}

func (s *lostReplyStore) AppendBatch(ctx context.Context, reqs []*messages.AppendRequest) []journal.AppendResult {
	out := s.Store.AppendBatch(ctx, reqs)
	for i, req := range reqs {
		if out[i].Err == nil && s.lose(req) && s.lost.CompareAndSwap(false, true) {
			out[i] = journal.AppendResult{Err: fmt.Errorf("test: connection lost during COMMIT: %w", journal.ErrUnknownOutcome)}
		}
	}
	return out
}

// answerLostReplyStore loses the reply of the first write that answers a
// tool call (Runtime.Resolve's: resolutions, no events).
func answerLostReplyStore() *lostReplyStore {
	return &lostReplyStore{Store: memjournal.New(memjournal.Options{}), lose: func(req *messages.AppendRequest) bool {
		return len(req.GetResolutions()) > 0 && len(req.GetEvents()) == 0
	}}
}

// expireLostReplyStore loses the reply of the first write that expires a
// tool call.
func expireLostReplyStore() *lostReplyStore {
	return &lostReplyStore{Store: memjournal.New(memjournal.Options{}), lose: func(req *messages.AppendRequest) bool {
		return slices.ContainsFunc(req.GetResolutions(), func(res *messages.ToolResolution) bool {
			return res.GetStatus() == messages.ToolCallStatus_TOOL_CALL_STATUS_EXPIRED
		})
	}}
}

// resultsOf counts the resolution and tool_result events of call id.
func resultsOf(evs []*messages.Event, id string) (resolutions, results int) {
	for _, ev := range evs {
		if ev.GetResolution().GetToolCallId() == id {
			resolutions++
		}
		if ev.GetToolResult().GetToolCallId() == id {
			results++
		}
	}
	return resolutions, results
}

// awaitFinalAnswer waits for an assistant message with no tool call: the
// turn after the answer ran.
func awaitFinalAnswer(t *testing.T, sub <-chan lazarus.Update) {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case u, ok := <-sub:
			require.True(t, ok, "the subscription ended")
			if a := u.Event.GetAssistantMsg(); a != nil && len(a.GetToolCalls()) == 0 {
				return
			}
		case <-timeout:
			t.Fatal("the answer was not recorded: the conversation still waits for it")
		}
	}
}

// TestResolveOfUnknownOutcomeThatLandedIsRecorded: an answer whose write
// landed while the Store reported journal.ErrUnknownOutcome (a COMMIT
// whose reply was lost), to a live activation awaiting it. Resolve returns
// ErrUnknownOutcome, and the conversation, with no retry, records the
// answer once and runs its turn. The answer was never delivered: Resolve
// delivered only after a write it saw succeed, and a retry found the row
// answered and returned; the live activation, which does not read the row
// again, kept waiting for an answer given (with passivation off, for ever,
// and a user message then waited behind it too).
func TestResolveOfUnknownOutcomeThatLandedIsRecorded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	model := scripted.New(scripted.Options{})
	store := answerLostReplyStore()
	rt := openContract(t, store, model, time.Hour)
	callID := suspend(ctx, t, rt, model, "h")
	require.True(t, rt.IsActive("h"))

	model.Push("h", scripted.Text("thanks"))
	sub, err := rt.Subscribe(ctx, "h", 0)
	require.NoError(t, err)
	err = rt.Resolve(ctx, callID, `{"approved":true}`, user)
	require.ErrorIs(t, err, lazarus.ErrUnknownOutcome)
	require.True(t, store.lost.Load())
	// No retry is needed: the runtime delivers what the row holds.
	awaitFinalAnswer(t, sub)
	err = rt.Resolve(ctx, callID, `{"approved":false}`, user)
	require.ErrorIs(t, err, journal.ErrStale, "a retry: already answered")
	evs, err := rt.History(ctx, "h", 0, 0)
	require.NoError(t, err)
	res, results := resultsOf(evs, callID)
	require.Equal(t, 1, res, "one resolution")
	require.Equal(t, 1, results, "one tool_result")
	for _, ev := range evs {
		if r := ev.GetToolResult(); r.GetToolCallId() == callID {
			require.JSONEq(t, `{"approved":true}`, r.GetOutcome().GetContent(), "the first answer, the one that landed")
		}
	}
}

// TestExpiryOfUnknownOutcomeThatLandedIsRecorded: an expire whose write
// landed while the Store reported journal.ErrUnknownOutcome, for a call a
// live activation awaits (passivation off). The expiry actor writes it
// again after its retry delay, the Store refuses that as stale (the call
// expired), and the conversation records the expiry once and runs its
// turn. The stale retry delivered nothing (stale meant "a human answered
// first" to the expiry actor), and the live activation waited for an
// answer the Store held.
func TestExpiryOfUnknownOutcomeThatLandedIsRecorded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	clock := actorstest.NewManualClock(time.Unix(1_700_000_000, 0))
	model := scripted.New(scripted.Options{})
	store := expireLostReplyStore()
	rt, err := lazarus.Open(lazarus.Options{Store: store, Model: model, Clock: clock, IdleTimeout: -1,
		Tools: []agent.Tool{{Name: toolApprove, Executor: messages.Executor_EXECUTOR_HUMAN, Timeout: time.Minute}}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = rt.Close() })
	callID := suspend(ctx, t, rt, model, "h")
	model.Push("h", scripted.Text("too late"))
	sub, err := rt.Subscribe(ctx, "h", 0)
	require.NoError(t, err)

	deadline := clock.Now().Add(time.Minute)
	require.Eventually(t, func() bool {
		next, ok := clock.Next()
		return ok && next.Equal(deadline)
	}, 20*time.Second, time.Millisecond, "the deadline armed")
	clock.Advance(time.Minute)
	require.Eventually(t, store.lost.Load, 20*time.Second, time.Millisecond, "the expire written, its outcome reported unknown")
	// The expiry actor writes it again after its retry delay (a second on
	// its clock), and the Store says stale.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		clock.Advance(time.Second)
		row, err := rt.Store().ToolCall(ctx, callID)
		require.NoError(c, err)
		assert.Equal(c, messages.ToolCallStatus_TOOL_CALL_STATUS_EXPIRED, row.GetStatus())
		assert.Zero(c, clock.Timers())
	}, 20*time.Second, 10*time.Millisecond, "the retry answered")

	awaitFinalAnswer(t, sub)
	evs, err := rt.History(ctx, "h", 0, 0)
	require.NoError(t, err)
	res, results := resultsOf(evs, callID)
	require.Equal(t, 1, res, "one resolution")
	require.Equal(t, 1, results, "one tool_result")
}

// TestResolveWhoseCallerLeftIsRecorded: a Resolve whose context ends
// while its write is held in the Store returns ErrUnknownOutcome at once;
// the write then lands, and the live activation awaiting the answer
// (passivation off) records it and runs its turn with no retry of the
// Resolve. Nothing delivered it: the delivery followed only a write the
// caller saw succeed.
func TestResolveWhoseCallerLeftIsRecorded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	model := scripted.New(scripted.Options{})
	store := newGatedStore()
	rt := openContract(t, store, model, time.Hour)
	callID := suspend(ctx, t, rt, model, "h")
	model.Push("h", scripted.Text("thanks"))
	sub, err := rt.Subscribe(ctx, "h", 0)
	require.NoError(t, err)

	release := store.hold(resolving(callID))
	defer release()
	callCtx, cancelCall := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- rt.Resolve(callCtx, callID, `{"approved":true}`, user) }()
	awaitEntered(t, store)
	cancelCall()
	err = await(t, done, "Resolve")
	require.ErrorIs(t, err, lazarus.ErrUnknownOutcome)
	release()

	awaitFinalAnswer(t, sub)
	evs, err := rt.History(ctx, "h", 0, 0)
	require.NoError(t, err)
	res, results := resultsOf(evs, callID)
	require.Equal(t, 1, res, "one resolution")
	require.Equal(t, 1, results, "one tool_result")
}

// TestResolveRetriedAfterCallTimeoutIsRecordedOnce: an answer whose write
// is held in the Store past Options.CallTimeout: Resolve returns an error
// wrapping ErrUnknownOutcome and context.DeadlineExceeded (the delivery
// it starts, bounded by CallTimeout too, may give up with it). The write
// then lands, and the caller retries as ErrUnknownOutcome says, twice,
// the second time with another answer: each retry is ErrStale (and
// ErrInvalid), the row holds the first answer, and the live activation
// records it once (one resolution, one tool_result, however many
// deliveries reached it) and runs its turn once.
func TestResolveRetriedAfterCallTimeoutIsRecordedOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	model := scripted.New(scripted.Options{})
	store := newGatedStore()
	// Long enough for a turn on a busy machine; the held write below
	// outlives it whatever its length.
	rt := openContract(t, store, model, 2*time.Second)
	callID := suspend(ctx, t, rt, model, "h")
	model.Push("h", scripted.Text("thanks"), scripted.Text("later"))
	sub, err := rt.Subscribe(ctx, "h", 0)
	require.NoError(t, err)

	release := store.hold(resolving(callID))
	defer release()
	err = rt.Resolve(context.Background(), callID, `{"approved":true}`, user)
	require.ErrorIs(t, err, lazarus.ErrUnknownOutcome)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	release()

	for _, retry := range []string{`{"approved":true}`, `{"approved":false}`} {
		err = rt.Resolve(ctx, callID, retry, user)
		require.ErrorIs(t, err, journal.ErrStale, "the retry %s: already answered", retry)
		require.ErrorIs(t, err, journal.ErrInvalid)
	}
	row, err := rt.Store().ToolCall(ctx, callID)
	require.NoError(t, err)
	require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED, row.GetStatus())
	require.JSONEq(t, `{"approved":true}`, row.GetResult().GetContent(), "the first answer is the one recorded")

	awaitFinalAnswer(t, sub)
	// A later turn: one model call of a conversation at a time, its turns
	// in order, so once it answered no delivery can run the first again.
	_, err = rt.SendAndWait(ctx, "h", "and now?", user)
	require.NoError(t, err)
	require.Equal(t, 3, model.Calls("h"), "the call's turn, the answer's turn and the later one: no turn twice")
	evs, err := rt.History(ctx, "h", 0, 0)
	require.NoError(t, err)
	res, results := resultsOf(evs, callID)
	require.Equal(t, 1, res, "one resolution")
	require.Equal(t, 1, results, "one tool_result")
	require.JSONEq(t, `{"approved":true}`, toolResultOf(evs, callID), "the answer that landed")
}

// toolResultOf returns the content of call id's tool_result event.
func toolResultOf(evs []*messages.Event, id string) string {
	for _, ev := range evs {
		if r := ev.GetToolResult(); r.GetToolCallId() == id {
			return r.GetOutcome().GetContent()
		}
	}
	return ""
}
