package tests

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/messages"
)

// TestFSMStatePendingCarriesThePrompt: each pending entry of the fsm_state
// cache is {executor, kind, prompt}, the prompt being what the row says the
// human is asked; both when the answer that asks is written and when a
// revived activation rewrites the cache (one of two calls answered while
// the conversation was dead).
func TestFSMStatePendingCarriesThePrompt(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), nil)
		ctx := ctxT(t)
		h.model.Push("c", scripted.Reply("two approvals",
			scripted.Call("approve_refund", `{"amount":5}`), scripted.Call("approve_refund", `{"amount":7}`)))
		_, err := h.rt.Send(ctx, "c", "refund twice", user)
		require.NoError(t, err)
		pending := h.awaitEvent("c", 0, isSuspension).GetSuspension().GetPending()
		require.Len(t, pending, 2)

		requirePending := func(ids ...string) {
			t.Helper()
			conv, err := h.store.Conversation(ctx, "c")
			require.NoError(t, err)
			st := conv.GetFsmState()
			require.Equal(t, messages.AgentState_AGENT_STATE_AWAITING_INPUT, st.GetState())
			require.Len(t, st.GetPending(), len(ids))
			for _, id := range ids {
				row, err := h.store.ToolCall(ctx, id)
				require.NoError(t, err)
				require.NotEmpty(t, row.GetPrompt())
				p := st.GetPending()[id]
				require.NotNil(t, p, "call %s is pending", id)
				require.Equal(t, row.GetPrompt(), p.GetPrompt(), "the cache carries the row's prompt")
				require.Equal(t, messages.Executor_EXECUTOR_HUMAN, p.GetExecutor())
				require.Equal(t, "approve_refund", p.GetKind())
			}
		}
		first, second := pending[0].GetToolCallId(), pending[1].GetToolCallId()
		requirePending(first, second)

		// Answered while the conversation is dead: the revived activation
		// records the answer and rewrites the cache from what it revived.
		require.True(t, h.rt.Kill("c"))
		require.NoError(t, h.rt.Resolve(ctx, first, `{"approved":true}`, user))
		h.awaitEvent("c", 0, func(ev *messages.Event) bool { return ev.GetToolResult().GetToolCallId() == first })
		requirePending(second)
	})
}
