package tests

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/messages"
)

// TestRewindCancelsTheServerRunOfACallItCancels: a rewind over a server
// call whose tool is running records the call as canceled and cancels the
// run's context, as a kill or Delete does, so that a tool that honours it
// stops before its effect. The run was left going: it went on to charge
// for a call the log says was canceled, and a tool that never returns held
// its run until the Runtime closed.
func TestRewindCancelsTheServerRunOfACallItCancels(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		started := make(chan string, 1)
		ended := make(chan error, 1)
		slow := agent.Tool{
			Name: "slow_charge", Description: "charges once its context allows", Executor: messages.Executor_EXECUTOR_SERVER,
			Run: func(ctx context.Context, inv agent.Invocation) (string, error) {
				started <- inv.ToolCallID
				<-ctx.Done()
				ended <- ctx.Err()
				return "", ctx.Err()
			},
		}
		h := newHarness(t, openStore(t, kind), func(o *lazarus.Options) { o.Tools = append(o.Tools, slow) })
		ctx := ctxT(t)
		h.model.Push("c", scripted.Reply("charging", scripted.Call("slow_charge", `{}`)))
		seq, err := h.rt.Send(ctx, "c", "charge me", user)
		require.NoError(t, err)
		var id string
		select {
		case id = <-started:
		case <-ctx.Done():
			t.Fatal("the tool never started")
		}

		require.NoError(t, h.rt.Rewind(ctx, "c", seq, lazarus.RewindOptions{}, user))
		row, err := h.rt.Store().ToolCall(ctx, id)
		require.NoError(t, err)
		require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_ERRORED, row.GetStatus())
		require.Equal(t, agent.CodeCanceled, row.GetResult().GetError().GetCode())
		select {
		case err := <-ended:
			require.ErrorIs(t, err, context.Canceled, "the run's context is cancelled")
		case <-ctx.Done():
			t.Fatal("the run of the canceled call was not cancelled")
		}
		require.True(t, h.rt.IsActive("c"), "the activation goes on")
		require.Equal(t, 1, h.model.Calls("c"), "no turn is owed after the rewind")
		require.Equal(t, []string{"user_msg", "assistant_msg", "tool_call:slow_charge", "rewind"}, types(h.history("c")),
			"the late outcome of the cancelled run is not recorded")
	})
}
