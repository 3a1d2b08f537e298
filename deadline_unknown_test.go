package lazarus_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/actors/actorstest"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

// TestDeadlineOfUnknownOutcomeThatLandedExpires: the model's answer that
// opens a human call with a deadline lands while the Store reports
// journal.ErrUnknownOutcome. The activation stops and its successor,
// revived from the log, awaits the call; the deadline is durable and must
// be armed all the same, so that the call expires and the turn after it
// runs. The expiry actor learned of deadlines only from commits it saw
// succeed: this one was never armed, and the conversation waited for an
// answer for ever (until a restart rebuilt the timers).
func TestDeadlineOfUnknownOutcomeThatLandedExpires(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	clock := actorstest.NewManualClock(time.Unix(1_700_000_000, 0))
	model := scripted.New(scripted.Options{})
	// The first write that schedules a deadline lands, its reply lost.
	store := &lostReplyStore{Store: memjournal.New(memjournal.Options{}), lose: func(req *messages.AppendRequest) bool { return len(req.GetSchedule()) > 0 }}
	rt, err := lazarus.Open(lazarus.Options{Store: store, Model: model, Clock: clock, IdleTimeout: -1,
		Tools: []agent.Tool{{Name: toolApprove, Executor: messages.Executor_EXECUTOR_HUMAN, Timeout: time.Minute}}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = rt.Close() })
	model.Push("h", scripted.Reply("", scripted.Call(toolApprove, `{}`)), scripted.Text("too late"))
	_, err = rt.Send(ctx, "h", "may I?", user)
	require.NoError(t, err)
	require.Eventually(t, store.lost.Load, 20*time.Second, time.Millisecond, "the answer written, its outcome reported unknown")

	deadline := clock.Now().Add(time.Minute)
	require.Eventually(t, func() bool {
		next, ok := clock.Next()
		return ok && next.Equal(deadline)
	}, 10*time.Second, time.Millisecond, "the deadline armed")
	clock.Advance(time.Minute)
	require.Eventually(t, func() bool {
		evs, err := rt.History(ctx, "h", 0, 0)
		require.NoError(t, err)
		last := evs[len(evs)-1].GetAssistantMsg()
		return last != nil && len(last.GetToolCalls()) == 0
	}, 20*time.Second, 10*time.Millisecond, "the call expired and the turn after it ran")
	evs, err := rt.History(ctx, "h", 0, 0)
	require.NoError(t, err)
	var expired int
	for _, ev := range evs {
		if ev.GetResolution().GetStatus() == messages.ToolCallStatus_TOOL_CALL_STATUS_EXPIRED {
			expired++
		}
	}
	require.Equal(t, 1, expired, "one expiry recorded")
}

// TestRescheduleOfUnknownOutcomeThatLandedFiresAtItsNewTime: a
// Reschedule whose write lands while the Store reports
// journal.ErrUnknownOutcome returns ErrUnknownOutcome, and the call
// expires at the new time all the same, moved later or earlier. The
// expiry actor heard only of reschedules it saw commit: moved later, the
// old time fired, its expire was stale, and the call never expired (until
// a restart rebuilt the timers); moved earlier, it expired at the old
// time.
func TestRescheduleOfUnknownOutcomeThatLandedFiresAtItsNewTime(t *testing.T) {
	for _, tc := range []struct {
		name string
		move time.Duration // from the first deadline, a minute away
	}{{"later", 9 * time.Minute}, {"earlier", -50 * time.Second}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			clock := actorstest.NewManualClock(time.Unix(1_700_000_000, 0))
			model := scripted.New(scripted.Options{})
			store := &lostReplyStore{Store: memjournal.New(memjournal.Options{}), lose: func(req *messages.AppendRequest) bool { return len(req.GetReschedule()) > 0 }}
			rt, err := lazarus.Open(lazarus.Options{Store: store, Model: model, Clock: clock, IdleTimeout: -1,
				Tools: []agent.Tool{{Name: toolApprove, Executor: messages.Executor_EXECUTOR_HUMAN, Timeout: time.Minute}}})
			require.NoError(t, err)
			t.Cleanup(func() { _ = rt.Close() })
			first := clock.Now().Add(time.Minute)
			id := suspend(ctx, t, rt, model, "h")
			require.Eventually(t, func() bool {
				next, ok := clock.Next()
				return ok && next.Equal(first)
			}, 10*time.Second, time.Millisecond, "the first deadline armed")

			model.Push("h", scripted.Text("too late"))
			sub, err := rt.Subscribe(ctx, "h", 0)
			require.NoError(t, err)
			at := first.Add(tc.move)
			require.ErrorIs(t, rt.Reschedule(ctx, id, at), lazarus.ErrUnknownOutcome)
			require.True(t, store.lost.Load())
			if tc.move > 0 {
				clock.Advance(time.Minute) // the old time: its expire is stale
				require.Eventually(t, func() bool {
					next, ok := clock.Next()
					return ok && next.Equal(first.Add(actors.MaxTimerSpan))
				}, 10*time.Second, time.Millisecond, "the new deadline armed once the old one's expire was stale")
			} else {
				require.Eventually(t, func() bool {
					next, ok := clock.Next()
					return ok && next.Equal(at)
				}, 10*time.Second, time.Millisecond, "the new, earlier deadline armed")
			}
			clock.Advance(at.Sub(clock.Now()))
			awaitFinalAnswer(t, sub)
			evs, err := rt.History(ctx, "h", 0, 0)
			require.NoError(t, err)
			var expired int
			for _, ev := range evs {
				if r := ev.GetResolution(); r.GetToolCallId() == id {
					require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_EXPIRED, r.GetStatus())
					expired++
				}
			}
			require.Equal(t, 1, expired, "one expiry recorded")
		})
	}
}
