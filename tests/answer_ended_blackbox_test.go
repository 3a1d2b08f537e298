package tests

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

// TestAnswerToACallOfAnEndedConversationIsRefused: a call left pending in
// an ENDED conversation (an import cut short) cannot reopen it: Resolve is
// refused with ErrEnded, the call stays pending, the row ENDED, and no
// turn runs.
func TestAnswerToACallOfAnEndedConversationIsRefused(t *testing.T) {
	store := memjournal.New(memjournal.Options{})
	ctx := ctxT(t)
	_, err := store.Append(ctx, endedWithOpenCall(false))
	require.NoError(t, err)
	h := newHarness(t, store, nil)

	require.ErrorIs(t, h.rt.Resolve(ctx, "tc-1", `{"approved":true}`, agent.Scope{UserID: "bob"}), journal.ErrEnded)
	rec, err := store.ToolCall(ctx, "tc-1")
	require.NoError(t, err)
	require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING, rec.GetStatus(), "nothing written")
	row, err := store.Conversation(ctx, "c")
	require.NoError(t, err)
	require.Equal(t, messages.ConversationStatus_CONVERSATION_STATUS_ENDED, row.GetStatus())
	require.NoError(t, h.rt.End(ctx, "c"))
	require.Len(t, h.history("c"), 3)
	require.Zero(t, h.model.Calls("c"))
}

// endedWithOpenCall is what an import cut short leaves of conversation c:
// a user message, the model's answer calling the human tool
// approve_refund (call tc-1), the tool_call event and its PENDING row,
// with the call's answer (answered) but no tool_result, status ENDED.
func endedWithOpenCall(answered bool) *messages.AppendRequest {
	call := &messages.ToolCall{Id: "tc-1", Name: "approve_refund", Arguments: `{}`}
	req := &messages.AppendRequest{
		ConversationId: "c",
		Events: []*messages.Event{
			{Body: &messages.Event_UserMsg{UserMsg: &messages.UserMessage{Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: "refund"}}}}}},
			{Body: &messages.Event_AssistantMsg{AssistantMsg: &messages.AssistantMessage{ToolCalls: []*messages.ToolCall{call}}}},
			{Body: &messages.Event_ToolCall{ToolCall: &messages.ToolCallEvent{Call: call, Executor: messages.Executor_EXECUTOR_HUMAN}}},
		},
		ToolCalls: []*messages.ToolCallRecord{{Id: "tc-1", ConversationId: "c", Name: "approve_refund",
			Executor: messages.Executor_EXECUTOR_HUMAN, Status: messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING}},
		Status: messages.ConversationStatus_CONVERSATION_STATUS_ENDED,
	}
	if answered {
		req.Resolutions = []*messages.ToolResolution{{ToolCallId: "tc-1", Status: messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED,
			Result: &messages.ToolOutcome{Outcome: &messages.ToolOutcome_Content{Content: `{"approved":true}`}}}}
	}
	return req
}
