package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// TestImportOfASuspendedRowOverAnAnswer: a conversation row exported
// SUSPENDED whose fsm_state names pending a call whose row is resolved
// (its answer durable, its tool_result not yet in the log: the answer's
// delivery was lost) is imported ACTIVE, not SUSPENDED, as any append
// stating SUSPENDED over such an answer is written (journal.StatusWritten),
// so that a runtime opening the target resumes the conversation and its
// revival records the answer; SUSPENDED would leave the answer waiting for
// the conversation's next command. A Store writes such a row ACTIVE
// itself, so only an export edited by hand or made before that rule shows
// it. A row whose fsm_state names only calls still pending is imported
// SUSPENDED, as exported.
func TestImportOfASuspendedRowOverAnAnswer(t *testing.T) {
	ctx := ctxT(t)
	at := timestamppb.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	src := memStore(t)
	for _, conv := range []string{"answered", "waiting"} {
		id := "tc-" + conv
		call := &messages.ToolCall{Id: id, Name: "approve", Arguments: `{}`}
		_, err := src.Append(ctx, &messages.AppendRequest{
			ConversationId: conv,
			Events: []*messages.Event{
				{Time: at, Body: &messages.Event_UserMsg{UserMsg: &messages.UserMessage{Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: "hi"}}}}}},
				{Time: at, Body: &messages.Event_AssistantMsg{AssistantMsg: &messages.AssistantMessage{ToolCalls: []*messages.ToolCall{call}}}},
				{Time: at, Body: &messages.Event_ToolCall{ToolCall: &messages.ToolCallEvent{Call: call, Executor: messages.Executor_EXECUTOR_HUMAN}}},
			},
			ToolCalls: []*messages.ToolCallRecord{{Id: id, ConversationId: conv, Name: "approve",
				Executor: messages.Executor_EXECUTOR_HUMAN, Status: messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING, Created: at}},
			Status:   messages.ConversationStatus_CONVERSATION_STATUS_SUSPENDED,
			FsmState: &messages.FSMState{LastSeq: 3, Pending: map[string]*messages.PendingCall{id: {}}},
		})
		require.NoError(t, err)
	}
	// The answer's write, its delivery lost: the Store's row is ACTIVE.
	_, err := src.Append(ctx, &messages.AppendRequest{ConversationId: "answered", Unfenced: true,
		Status: messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE,
		Resolutions: []*messages.ToolResolution{{ToolCallId: "tc-answered", Status: messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED,
			Result: &messages.ToolOutcome{Outcome: &messages.ToolOutcome_Content{Content: `{"approved":true}`}}, At: at}}})
	require.NoError(t, err)

	in := exportOfStore(t, src, "answered", "waiting")
	const active, suspended = `"status":"CONVERSATION_STATUS_ACTIVE"`, `"status":"CONVERSATION_STATUS_SUSPENDED"`
	require.Equal(t, 1, strings.Count(in, active), "the answered conversation is exported ACTIVE")
	for name, input := range map[string]string{"as exported": in, "edited SUSPENDED": strings.Replace(in, active, suspended, 1)} {
		t.Run(name, func(t *testing.T) {
			dst := memStore(t)
			require.NoError(t, importInto(ctx, dst, strings.NewReader(input), importOptions{}))
			for conv, want := range map[string]messages.ConversationStatus{
				"answered": messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE,
				"waiting":  messages.ConversationStatus_CONVERSATION_STATUS_SUSPENDED,
			} {
				row, err := dst.Conversation(context.Background(), conv)
				require.NoError(t, err)
				require.Equal(t, want, row.GetStatus(), conv)
				require.Len(t, row.GetFsmState().GetPending(), 1, "%s: the fsm_state as exported", conv)
			}
			rec, err := dst.ToolCall(ctx, "tc-answered")
			require.NoError(t, err)
			require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED, rec.GetStatus())
		})
	}
}

// answeredBeforeStatus is a target Store on which the answer of call
// (an expiry of a runtime that armed the deadlines the import wrote, on
// a shared PostgreSQL target) lands just before the import gives its
// conversation the status SUSPENDED: after the import read the call
// pending, while the row is still ENDED, so the answer's own write leaves
// the status alone.
type answeredBeforeStatus struct {
	journal.Store
	conv, call string
	at         *timestamppb.Timestamp
}

func (s *answeredBeforeStatus) PutConversation(ctx context.Context, u journal.ConversationUpdate) error {
	if u.ID == s.conv && u.Status == messages.ConversationStatus_CONVERSATION_STATUS_SUSPENDED {
		_, err := s.Store.Append(ctx, &messages.AppendRequest{ConversationId: s.conv, Unfenced: true,
			Status: messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE,
			Resolutions: []*messages.ToolResolution{{ToolCallId: s.call, Status: messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED,
				Result: &messages.ToolOutcome{Outcome: &messages.ToolOutcome_Content{Content: `{"approved":true}`}}, At: s.at}}})
		if err != nil {
			return err
		}
		row, err := s.Store.Conversation(ctx, s.conv)
		if err != nil {
			return err
		}
		if row.GetStatus() != messages.ConversationStatus_CONVERSATION_STATUS_ENDED {
			return fmt.Errorf("test: the row is %v before the import's status, not ENDED", row.GetStatus())
		}
	}
	return s.Store.PutConversation(ctx, u)
}

// TestImportOfASuspendedRowAnsweredDuringTheImport: a conversation
// exported SUSPENDED on a pending call whose answer lands in the target
// while the import writes it (the row still ENDED, which the answer's
// write leaves so, after the import read the call pending) is left
// ACTIVE, not SUSPENDED: a runtime then resumes it and its revival records
// the answer, where SUSPENDED would leave the answer waiting for the
// conversation's next command.
func TestImportOfASuspendedRowAnsweredDuringTheImport(t *testing.T) {
	ctx := ctxT(t)
	at := timestamppb.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	src := memStore(t)
	call := &messages.ToolCall{Id: "tc-waiting", Name: "approve", Arguments: `{}`}
	_, err := src.Append(ctx, &messages.AppendRequest{
		ConversationId: "waiting",
		Events: []*messages.Event{
			{Time: at, Body: &messages.Event_UserMsg{UserMsg: &messages.UserMessage{Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: "hi"}}}}}},
			{Time: at, Body: &messages.Event_AssistantMsg{AssistantMsg: &messages.AssistantMessage{ToolCalls: []*messages.ToolCall{call}}}},
			{Time: at, Body: &messages.Event_ToolCall{ToolCall: &messages.ToolCallEvent{Call: call, Executor: messages.Executor_EXECUTOR_HUMAN}}},
		},
		ToolCalls: []*messages.ToolCallRecord{{Id: "tc-waiting", ConversationId: "waiting", Name: "approve",
			Executor: messages.Executor_EXECUTOR_HUMAN, Status: messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING, Created: at}},
		Status:   messages.ConversationStatus_CONVERSATION_STATUS_SUSPENDED,
		FsmState: &messages.FSMState{LastSeq: 3, Pending: map[string]*messages.PendingCall{"tc-waiting": {}}},
	})
	require.NoError(t, err)
	in := exportOfStore(t, src, "waiting")

	dst := memStore(t)
	require.NoError(t, importInto(ctx, &answeredBeforeStatus{Store: dst, conv: "waiting", call: "tc-waiting", at: at}, strings.NewReader(in), importOptions{}))
	rec, err := dst.ToolCall(ctx, "tc-waiting")
	require.NoError(t, err)
	require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED, rec.GetStatus(), "the answer landed")
	row, err := dst.Conversation(ctx, "waiting")
	require.NoError(t, err)
	require.Equal(t, messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE, row.GetStatus(), "resumed by the next runtime, not SUSPENDED over the answer")
	require.Len(t, row.GetFsmState().GetPending(), 1, "the fsm_state as exported")
}
