package crash

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

// checkedWorld is a store holding one conversation as the runtime writes
// it, with what was acknowledged and the work tool's runs: verifyStore
// finds nothing wrong with it until a case breaks it.
type checkedWorld struct {
	store      journal.Store
	in         checkInput
	conv       string
	work, ask  string // the server call and the human call of its first turn
	keyW, keyA string
}

func newCheckedWorld(t *testing.T) *checkedWorld {
	ctx := context.Background()
	w := &checkedWorld{store: memjournal.New(memjournal.Options{}), conv: "c", work: actors.NewToolCallID(), ask: actors.NewToolCallID()}
	w.keyW, w.keyA = decisionKey(w.conv, 1, 0, 0), decisionKey(w.conv, 1, 0, 1)
	at := journal.Timestamp(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	workCall := &messages.ToolCall{Id: w.work, Name: toolWork, Arguments: `{"key":"` + w.keyW + `"}`}
	askCall := &messages.ToolCall{Id: w.ask, Name: toolApprove, Arguments: `{"key":"` + w.keyA + `"}`}
	done := &messages.ToolOutcome{Outcome: &messages.ToolOutcome_Content{Content: `{"done":true}`}}
	yes := &messages.ToolOutcome{Outcome: &messages.ToolOutcome_Content{Content: `{"approved":true}`}}
	resolved := messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED
	appendOK := func(req *messages.AppendRequest) {
		req.ConversationId = w.conv
		if !req.GetUnfenced() {
			last, err := w.store.LastSeq(ctx, w.conv)
			require.NoError(t, err)
			req.ExpectedLast = last
		}
		_, err := w.store.Append(ctx, req)
		require.NoError(t, err)
	}
	appendOK(&messages.AppendRequest{Events: []*messages.Event{{RequestId: "r1", Body: &messages.Event_UserMsg{UserMsg: userMessage("mixed 1")}}}})
	appendOK(&messages.AppendRequest{
		Events: []*messages.Event{
			{Body: &messages.Event_AssistantMsg{AssistantMsg: &messages.AssistantMessage{ToolCalls: []*messages.ToolCall{workCall, askCall}}}},
			{Body: &messages.Event_ToolCall{ToolCall: &messages.ToolCallEvent{Call: workCall, Executor: messages.Executor_EXECUTOR_SERVER}}},
			{Body: &messages.Event_ToolCall{ToolCall: &messages.ToolCallEvent{Call: askCall, Executor: messages.Executor_EXECUTOR_HUMAN}}},
			{Body: &messages.Event_Suspension{Suspension: &messages.Suspension{Pending: []*messages.PendingCall{{ToolCallId: w.ask}}}}},
		},
		ToolCalls: []*messages.ToolCallRecord{
			{Id: w.work, ConversationId: w.conv, Name: toolWork, Executor: messages.Executor_EXECUTOR_SERVER, Args: workCall.GetArguments()},
			{Id: w.ask, ConversationId: w.conv, Name: toolApprove, Executor: messages.Executor_EXECUTOR_HUMAN, Args: askCall.GetArguments(), Deadline: at},
		},
		Schedule: []*messages.Deadline{{ConversationId: w.conv, ToolCallId: w.ask, At: at}},
	})
	appendOK(&messages.AppendRequest{
		Events:      []*messages.Event{{Body: &messages.Event_ToolResult{ToolResult: &messages.ToolResultEvent{ToolCallId: w.work, Name: toolWork, Outcome: done}}}},
		Resolutions: []*messages.ToolResolution{{ToolCallId: w.work, Status: resolved, Result: done}},
	})
	appendOK(&messages.AppendRequest{Unfenced: true, Resolutions: []*messages.ToolResolution{{ToolCallId: w.ask, Status: resolved, Result: yes}}})
	appendOK(&messages.AppendRequest{Events: []*messages.Event{
		{Body: &messages.Event_Resolution{Resolution: &messages.Resolution{ToolCallId: w.ask, Status: resolved, By: "user"}}},
		{Body: &messages.Event_ToolResult{ToolResult: &messages.ToolResultEvent{ToolCallId: w.ask, Name: toolApprove, Outcome: yes}}},
	}})
	appendOK(&messages.AppendRequest{Status: messages.ConversationStatus_CONVERSATION_STATUS_IDLE,
		Events: []*messages.Event{{Body: &messages.Event_AssistantMsg{AssistantMsg: &messages.AssistantMessage{
			Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: "done"}}}}}}}})

	evs, err := w.store.Events(ctx, w.conv, journal.EventQuery{})
	require.NoError(t, err)
	l := newLedger()
	l.ackSend(w.conv, 1, "r1")
	for _, ev := range evs {
		l.ackEvent(w.conv, ev)
	}
	l.ackResolve(w.ask, resolved)
	w.in = checkInput{convs: []string{w.conv}, ledger: l, side: []sideRecord{{conv: w.conv, id: w.work, key: w.keyW, cycle: 1}}, final: true, keys: true}
	return w
}

// appendTurn appends a turn whose answer is a human call: with a deadline
// unless noDeadline; key is the decision key its call carries.
func (w *checkedWorld) appendTurn(t *testing.T, key string, noDeadline bool) string {
	ctx := context.Background()
	id := actors.NewToolCallID()
	call := &messages.ToolCall{Id: id, Name: toolApprove, Arguments: `{"key":"` + key + `"}`}
	last, err := w.store.LastSeq(ctx, w.conv)
	require.NoError(t, err)
	req := &messages.AppendRequest{ConversationId: w.conv, ExpectedLast: last,
		Events: []*messages.Event{
			{Body: &messages.Event_UserMsg{UserMsg: userMessage("human 2")}},
			{Body: &messages.Event_AssistantMsg{AssistantMsg: &messages.AssistantMessage{ToolCalls: []*messages.ToolCall{call}}}},
			{Body: &messages.Event_ToolCall{ToolCall: &messages.ToolCallEvent{Call: call, Executor: messages.Executor_EXECUTOR_HUMAN}}},
		},
		ToolCalls: []*messages.ToolCallRecord{{Id: id, ConversationId: w.conv, Name: toolApprove, Executor: messages.Executor_EXECUTOR_HUMAN, Args: call.GetArguments()}},
	}
	if !noDeadline {
		req.Schedule = []*messages.Deadline{{ConversationId: w.conv, ToolCallId: id, At: journal.Timestamp(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))}}
	}
	_, err = w.store.Append(ctx, req)
	require.NoError(t, err)
	return id
}

// dropEvent is a store whose log has lost one event.
type dropEvent struct {
	journal.Store
	seq uint64
}

func (s dropEvent) Events(ctx context.Context, id string, q journal.EventQuery) ([]*messages.Event, error) {
	evs, err := s.Store.Events(ctx, id, q)
	var out []*messages.Event
	for _, ev := range evs {
		if ev.GetSeq() != s.seq {
			out = append(out, ev)
		}
	}
	return out, err
}

// TestVerifyStoreCatchesViolations: the invariant check is not vacuous.
// A world written as the runtime writes it passes; each case breaks one
// promise and must be caught, with a message that says which.
func TestVerifyStoreCatchesViolations(t *testing.T) {
	w0 := newCheckedWorld(t)
	require.Empty(t, verifyStore(context.Background(), w0.store, w0.in).violations, "a sound world passes")

	cases := []struct {
		name    string
		breakIt func(t *testing.T, w *checkedWorld)
		want    string
	}{
		{"acknowledged event missing", func(t *testing.T, w *checkedWorld) { w.in.ledger.events[w.conv][42] = "x" }, "acknowledged event 42 is missing"},
		{"acknowledged event changed", func(t *testing.T, w *checkedWorld) { w.in.ledger.events[w.conv][2] = "x" }, "differs from the one a subscriber saw"},
		{"acknowledged send elsewhere", func(t *testing.T, w *checkedWorld) { w.in.ledger.sends[w.conv][0].seq = 2 }, "is not the acknowledged send"},
		{"gap in the log", func(t *testing.T, w *checkedWorld) { w.store = dropEvent{Store: w.store, seq: 3} }, "gap"},
		{"tool ran for an id no log holds", func(t *testing.T, w *checkedWorld) {
			w.in.side = append(w.in.side, sideRecord{conv: w.conv, id: "call_ghost", key: decisionKey(w.conv, 9, 0, 0), cycle: 1})
		}, "which no log holds"},
		{"one decision ran under two ids", func(t *testing.T, w *checkedWorld) {
			w.in.side = append(w.in.side, sideRecord{conv: w.conv, id: "call_other", key: w.keyW, cycle: 2})
		}, "ran under 2 tool call ids"},
		{"tool ran twice in one process", func(t *testing.T, w *checkedWorld) {
			w.in.side = append(w.in.side, w.in.side[0])
		}, "ran 2 times in one process"},
		{"server result without a run", func(t *testing.T, w *checkedWorld) { w.in.side = []sideRecord{} }, "its tool never ran"},
		{"two results for one call", func(t *testing.T, w *checkedWorld) {
			last, _ := w.store.LastSeq(context.Background(), w.conv)
			_, err := w.store.Append(context.Background(), &messages.AppendRequest{ConversationId: w.conv, ExpectedLast: last,
				Events: []*messages.Event{{Body: &messages.Event_ToolResult{ToolResult: &messages.ToolResultEvent{ToolCallId: w.work, Name: toolWork}}}}})
			require.NoError(t, err)
		}, "has 2 tool_results"},
		{"answered twice", func(t *testing.T, w *checkedWorld) {
			w.in.ledger.ackResolve(w.ask, messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED)
		}, "answered successfully 2 times"},
		{"acknowledged answer lost to the expiry", func(t *testing.T, w *checkedWorld) {
			w.in.ledger.resolves[w.ask] = []string{messages.ToolCallStatus_TOOL_CALL_STATUS_ERRORED.String()}
		}, "the acknowledged answer was"},
		{"summary cuts an open call", func(t *testing.T, w *checkedWorld) {
			require.NoError(t, w.store.PutSummary(context.Background(), w.conv, &messages.Summary{FromSeq: 1, ToSeq: 3, Content: "x"}))
		}, "cuts call"},
		{"one decision twice in the log", func(t *testing.T, w *checkedWorld) { w.appendTurn(t, w.keyA, false) }, "is in the log twice"},
		{"pending human call without a deadline", func(t *testing.T, w *checkedWorld) {
			w.in.final = false
			w.appendTurn(t, decisionKey(w.conv, 10, 0, 0), true)
		}, "has no deadline"},
		{"call without a result once settled", func(t *testing.T, w *checkedWorld) { w.appendTurn(t, decisionKey(w.conv, 10, 0, 0), false) }, "never got its tool_result"},
		{"a conversation nobody wrote", func(t *testing.T, w *checkedWorld) {
			_, err := w.store.Append(context.Background(), &messages.AppendRequest{ConversationId: "stranger",
				Events: []*messages.Event{{Body: &messages.Event_UserMsg{UserMsg: userMessage("hi")}}}})
			require.NoError(t, err)
		}, "the workload never wrote it"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := newCheckedWorld(t)
			tc.breakIt(t, w)
			v := verifyStore(context.Background(), w.store, w.in)
			require.NotEmpty(t, v.violations, "not caught")
			require.Contains(t, strings.Join(v.violations, "\n"), tc.want)
		})
	}
}
