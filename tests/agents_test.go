package tests

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// withCritic adds the named agent "critic", answered by crit, with the
// lookup_order tool.
func withCritic(crit *scripted.Model) func(*lazarus.Options) {
	return func(o *lazarus.Options) {
		o.Agents = []lazarus.Agent{{Name: "critic", Model: crit, Tools: []string{"lookup_order"}}}
	}
}

// agentKinds lists each event as agent:type.
func agentKinds(evs []*messages.Event) []string {
	out := types(evs)
	for i, ev := range evs {
		if ev.GetHandoff() != nil {
			out[i] = "handoff"
		}
		out[i] = ev.GetAgent() + ":" + out[i]
	}
	return out
}

// TestHandoffKilledBeforeItsResultIsFinishedOnce: a process killed right
// after the model's answer with a handoff call was written (the call's row
// pending, no result in the log) leaves the handoff to the next process,
// which finishes it once, on every store: one result, one handoff event,
// the next agent answers, and later wakes and kills write nothing more.
func TestHandoffKilledBeforeItsResultIsFinishedOnce(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		store := openStore(t, kind)
		ctx := ctxT(t)
		now := time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)
		call := &messages.ToolCall{Id: "call-handoff-1", Name: lazarus.HandoffToolName, Arguments: `{"agent":"critic","message":"check it"}`}
		// The log and rows a process leaves when it is killed between the
		// answer's write and the write of the call's result.
		_, err := store.Append(ctx, &messages.AppendRequest{
			ConversationId: "c",
			Events: []*messages.Event{
				{Seq: 1, Time: journal.Timestamp(now), RequestId: "r1", Body: &messages.Event_UserMsg{UserMsg: &messages.UserMessage{
					Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: "draft a refund"}}}}}},
				{Seq: 2, Time: journal.Timestamp(now), Body: &messages.Event_AssistantMsg{AssistantMsg: &messages.AssistantMessage{
					Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: "passing"}}}, ToolCalls: []*messages.ToolCall{call}}}},
				{Seq: 3, Time: journal.Timestamp(now), Body: &messages.Event_ToolCall{ToolCall: &messages.ToolCallEvent{
					Call: call, Executor: messages.Executor_EXECUTOR_SERVER}}},
			},
			ToolCalls: []*messages.ToolCallRecord{{
				Id: call.GetId(), ConversationId: "c", Name: call.GetName(), Executor: messages.Executor_EXECUTOR_SERVER,
				Status: messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING, Args: call.GetArguments(), Created: journal.Timestamp(now),
			}},
			Status: messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE,
		})
		require.NoError(t, err)

		crit := scripted.New(scripted.Options{})
		crit.Push("c", scripted.Text("checked"))
		// Open resumes the ACTIVE conversation: the revival finishes the
		// handoff, then the critic has the turn.
		h := newHarness(t, store, withCritic(crit))
		h.awaitEvent("c", 0, isAssistantText("checked"))
		want := []string{
			":user_msg", ":assistant_msg", ":tool_call:handoff", ":tool_result:handoff", "critic:handoff", "critic:assistant_msg",
		}
		require.Equal(t, want, agentKinds(h.history("c")))
		row, err := store.ToolCall(ctx, call.GetId())
		require.NoError(t, err)
		require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED, row.GetStatus())
		turns := crit.Turns("c")
		require.Len(t, turns, 1)
		require.Equal(t, "critic", turns[0].Agent)
		require.Len(t, turns[0].Context, 1, "the critic sees the handoff only")
		require.Equal(t, "[handoff from agent default] check it", turns[0].Context[0].GetUserMsg().GetContent()[0].GetText())

		// Nothing is owed any more: a kill and a wake write nothing.
		h.rt.Kill("c")
		require.NoError(t, h.rt.Wake(ctx, "c"))
		require.Equal(t, want, agentKinds(h.history("c")))
		require.Equal(t, 0, h.model.Calls("c"), "the default agent's model was never called")
		require.Equal(t, 1, crit.Calls("c"))
		requireGapFree(t, h.history("c"))
	})
}

// TestHandoffThenKillThenRevive: the default agent hands off; the
// activation is killed while the critic's model answers; the revival calls
// the critic again and does not repeat the handoff.
func TestHandoffThenKillThenRevive(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		crit := scripted.New(scripted.Options{})
		h := newHarness(t, openStore(t, kind), withCritic(crit))
		ctx := ctxT(t)
		h.model.Push("c", scripted.Reply("passing", scripted.Call(lazarus.HandoffToolName, `{"agent":"critic","message":"look"}`)))
		crit.Push("c", scripted.Text("after the kill")) // a cancelled call leaves its reply queued
		entered := crit.Hold("c")
		_, err := h.rt.Send(ctx, "c", "hello", user)
		require.NoError(t, err)
		recv(t, entered, "model call entered")
		require.True(t, h.rt.Kill("c"))
		crit.Release("c")
		require.NoError(t, h.rt.Wake(ctx, "c"))
		h.awaitEvent("c", 0, isAssistantText("after the kill"))
		require.Equal(t, []string{
			":user_msg", ":assistant_msg", ":tool_call:handoff", ":tool_result:handoff", "critic:handoff", "critic:assistant_msg",
		}, agentKinds(h.history("c")))
		require.Equal(t, 2, crit.Calls("c"), "the killed call, then the revival's")
		require.Equal(t, 1, h.model.Calls("c"))
	})
}

// TestSendToNamedAgentOnEveryStore: the agent and audience of events
// survive every store, and an unknown agent is refused.
func TestSendToNamedAgentOnEveryStore(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		crit := scripted.New(scripted.Options{})
		h := newHarness(t, openStore(t, kind), withCritic(crit))
		ctx := ctxT(t)
		crit.Push("c", scripted.Text("hi from the critic"))
		msg := &messages.UserMessage{Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: "hello all"}}}}
		_, err := h.rt.SendMessage(ctx, "c", msg, lazarus.SendOptions{Agent: "critic", Broadcast: true}, user)
		require.NoError(t, err)
		h.awaitEvent("c", 0, isAssistantText("hi from the critic"))
		h.rt.Kill("c")
		evs := h.history("c")
		require.Equal(t, []string{"critic:user_msg", "critic:assistant_msg"}, agentKinds(evs))
		require.Equal(t, []string{"*"}, evs[0].GetAudience())
		_, err = h.rt.SendMessage(ctx, "c", msg, lazarus.SendOptions{Agent: "ghost"}, user)
		require.ErrorIs(t, err, lazarus.ErrUnknownAgent)
		require.Len(t, h.history("c"), 2)
	})
}
