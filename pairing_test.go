package lazarus_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/openai"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

// strictPairing checks a context as the providers' APIs do (they answer
// 400 otherwise): the calls of an assistant message are each answered by
// exactly one tool result, right after it, and a tool result answers a
// call of the assistant message before it. (An adapter sends results right
// after their calls: openai.ResultsAfterCalls.)
func strictPairing(evs []*messages.Event) error {
	var owed []string
	for _, ev := range evs {
		if tr := ev.GetToolResult(); tr != nil {
			k := -1
			for i, id := range owed {
				if id == tr.GetToolCallId() {
					k = i
				}
			}
			if k < 0 {
				return fmt.Errorf("seq %d: a result for %q, which no call before it awaits", ev.GetSeq(), tr.GetToolCallId())
			}
			owed = append(owed[:k], owed[k+1:]...)
			continue
		}
		if len(owed) > 0 {
			return fmt.Errorf("seq %d: calls %v have no result", ev.GetSeq(), owed)
		}
		for _, tc := range ev.GetAssistantMsg().GetToolCalls() {
			owed = append(owed, tc.GetId())
		}
	}
	if len(owed) > 0 {
		return fmt.Errorf("calls %v have no result", owed)
	}
	return nil
}

// TestDamagedToolPairingStillReachesTheModel: a log (damaged, imported,
// or written by a Store writer) holding a result whose call is not on the
// head, a second result for one call, and a call with neither result nor
// tool_call event (so nothing owes it one) still lets the next turn reach
// the model with a context a provider accepts: the orphan and the second
// result are left out, and the call without a result is answered with an
// error result of code missing. The context was sent as the log held it,
// which every provider refuses, on this turn and every later one.
func TestDamagedToolPairingStillReachesTheModel(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store := memjournal.New(memjournal.Options{})
	now := journal.Timestamp(time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC))
	call := &messages.ToolCall{Id: "call-1", Name: "lookup", Arguments: `{}`}
	lost := &messages.ToolCall{Id: "call-lost", Name: "lookup", Arguments: `{}`}
	result := func(seq uint64, id, content string) *messages.Event {
		return &messages.Event{Seq: seq, Time: now, Body: &messages.Event_ToolResult{ToolResult: &messages.ToolResultEvent{
			ToolCallId: id, Name: "lookup", Outcome: &messages.ToolOutcome{Outcome: &messages.ToolOutcome_Content{Content: content}}}}}
	}
	evs := []*messages.Event{
		{Seq: 1, Time: now, RequestId: "r1", Body: &messages.Event_UserMsg{UserMsg: agent.UserMessage(agent.TextPart("look it up"))}},
		{Seq: 2, Time: now, Body: &messages.Event_AssistantMsg{AssistantMsg: agent.Reply("", call)}},
		{Seq: 3, Time: now, Body: &messages.Event_ToolCall{ToolCall: &messages.ToolCallEvent{Call: call, Executor: messages.Executor_EXECUTOR_SERVER}}},
		result(4, "call-1", `{"first":true}`),
		result(5, "call-1", `{"second":true}`),
		{Seq: 6, Time: now, Body: &messages.Event_AssistantMsg{AssistantMsg: agent.Reply("again", lost)}},
		{Seq: 7, Time: now, Body: &messages.Event_UserMsg{UserMsg: agent.UserMessage(agent.TextPart("well?"))}},
		{Seq: 8, Time: now, Body: &messages.Event_AssistantMsg{AssistantMsg: agent.Text("done")}},
		result(9, "call-gone", `{"orphan":true}`),
	}
	row := &messages.ToolCallRecord{Id: call.GetId(), ConversationId: "c", Name: call.GetName(), Executor: messages.Executor_EXECUTOR_SERVER,
		Status: messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED, Args: call.GetArguments(), Created: now,
		Result: &messages.ToolOutcome{Outcome: &messages.ToolOutcome_Content{Content: `{"first":true}`}}}
	_, err := store.Append(ctx, &messages.AppendRequest{ConversationId: "c", Events: evs, ToolCalls: []*messages.ToolCallRecord{row},
		Status: messages.ConversationStatus_CONVERSATION_STATUS_IDLE})
	require.NoError(t, err)

	var (
		mu    sync.Mutex
		turns [][]*messages.Event
	)
	model := agent.ModelFunc(func(_ context.Context, turn agent.Turn, _ func(string)) (*messages.AssistantMessage, error) {
		mu.Lock()
		turns = append(turns, turn.Context)
		mu.Unlock()
		// What both adapters send: the results moved right after their
		// calls.
		if err := strictPairing(openai.ResultsAfterCalls(turn.Context)); err != nil {
			return nil, fmt.Errorf("%w: 400 invalid tool pairing: %v", agent.ErrRequest, err)
		}
		return agent.Text("ok"), nil
	})
	rt, err := lazarus.Open(lazarus.Options{Model: model, Store: store, IdleTimeout: -1, NoResume: true})
	require.NoError(t, err)
	defer rt.Close()

	end, err := rt.SendMessageAndWait(ctx, "c", agent.UserMessage(agent.TextPart("next")), lazarus.SendOptions{RequestID: "r2"}, agent.Scope{UserID: "u"})
	require.NoError(t, err)
	require.Equal(t, lazarus.TurnAnswered, end.Outcome, "%v", end.Err)

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, turns, 1, "one model call")
	var got []string
	for _, ev := range turns[0] {
		switch {
		case ev.GetToolResult() != nil:
			tr := ev.GetToolResult()
			got = append(got, fmt.Sprintf("result %s %s", tr.GetToolCallId(), openai.ResultText(tr.GetOutcome())))
		default:
			got = append(got, fmt.Sprintf("%d", ev.GetSeq()))
		}
	}
	require.Equal(t, []string{"1", "2", `result call-1 {"first":true}`, "6", "7", "result call-lost error (missing): no result was recorded for this call", "8", "10"}, got)
}
