package lazarus_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
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
