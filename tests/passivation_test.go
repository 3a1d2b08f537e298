package tests

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/messages"
)

// TestIdlePassivationWaitsForAServerToolNotForAHumanCall: an activation
// whose server tool runs is not passivated however long the tool takes
// (the idle timer is armed only once the result is written and the turn
// ended), while one that awaits a human answer is passivated after
// IdleTimeout with the call pending and fsm_state awaiting_input, and the
// answer revives it and the turn goes on. ToolTimeout is off: the clock
// moves by more than its default while the tool runs, and the tool's own
// result, not a timeout, is what the turn goes on with.
func TestIdlePassivationWaitsForAServerToolNotForAHumanCall(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), func(o *lazarus.Options) {
			o.IdleTimeout = time.Minute
			o.ToolTimeout = -1
		})
		h.chargeGate = make(chan struct{})
		ctx := ctxT(t)

		h.model.Push("tool", scripted.Reply("charging", scripted.Call("charge", `{"amount":5}`)), scripted.Text("charged"))
		_, err := h.rt.Send(ctx, "tool", "charge me", user)
		require.NoError(t, err)
		recv(t, h.chargeStarted, "charge started")
		h.clock.Advance(10 * time.Minute)
		require.True(t, h.rt.IsActive("tool"), "not passivated while its server tool runs")
		close(h.chargeGate)
		h.awaitEvent("tool", 0, isAssistantText("charged"))
		var result *messages.ToolOutcome
		for _, ev := range h.history("tool") {
			if ev.GetToolResult().GetName() == "charge" {
				result = ev.GetToolResult().GetOutcome()
			}
		}
		require.NotNil(t, result)
		require.Nil(t, result.GetError(), "the charge's own result, not a timeout")
		require.Contains(t, result.GetContent(), `"charged":true`)
		require.Eventually(t, func() bool { return h.clock.Timers() == 1 }, wait, time.Millisecond, "the idle timer is armed once the turn ended")
		h.clock.Advance(time.Minute)
		require.Eventually(t, func() bool { return !h.rt.IsActive("tool") }, wait, time.Millisecond, "passivated once idle")
		require.Len(t, h.runs.of("charge"), 1)

		h.model.Push("human", scripted.Reply("asking", scripted.Call("approve_refund", `{"amount":5}`)), scripted.Text("approved"))
		_, err = h.rt.Send(ctx, "human", "refund me", user)
		require.NoError(t, err)
		callID := pendingCallID(t, h.awaitEvent("human", 0, isSuspension))
		// The call's deadline (an hour) and the idle timer.
		require.Eventually(t, func() bool { return h.clock.Timers() == 2 }, wait, time.Millisecond, "the idle timer is armed while the call is pending")
		h.clock.Advance(time.Minute)
		require.Eventually(t, func() bool { return !h.rt.IsActive("human") }, wait, time.Millisecond, "passivated while awaiting the answer")
		conv, err := h.store.Conversation(ctx, "human")
		require.NoError(t, err)
		require.Equal(t, messages.AgentState_AGENT_STATE_AWAITING_INPUT, conv.GetFsmState().GetState())
		require.Contains(t, conv.GetFsmState().GetPending(), callID)

		require.NoError(t, h.rt.Resolve(ctx, callID, `{"approved":true}`, user))
		h.awaitEvent("human", 0, isAssistantText("approved"))
		requireGapFree(t, h.history("human"))
	})
}
