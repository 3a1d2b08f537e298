package tests

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// TestRevivalRefusesAnOpenCallItCanNeitherRunNorAwait: a log whose open
// tool_call event has a call id no row can have (empty, oversized), an
// executor that is neither server nor human, no row, or the row of another
// conversation (no write of the runtime leaves one: the row is written
// with its event; a damaged store or a foreign writer does) is damage: the
// revival fails with an error wrapping journal.ErrCorrupt naming the
// event's seq, every command is refused so, and nothing is written, no
// tool runs, the model is not called. The revival failed on the bad ids
// with journal.ErrInvalid (the Store refused the row lookup), which the
// Runtime retried until it gave up with "outcome unknown"; it took the
// others, wrote the next message and never ran its turn: a server call
// without a row ran again on every command and its result was refused as
// stale, a human call without one could never be answered, a call whose
// row is another conversation's took that conversation's answer.
func TestRevivalRefusesAnOpenCallItCanNeitherRunNorAwait(t *testing.T) {
	cases := map[string]struct {
		call     *messages.ToolCall
		executor messages.Executor
		noRow    bool   // the tool_call event is written without its row
		otherRow string // the call's row is written first, by this other conversation
		want     string
	}{
		"server call without its row": {
			call:     &messages.ToolCall{Id: "call-norow-1", Name: "lookup_order", Arguments: `{"id":42}`},
			executor: messages.Executor_EXECUTOR_SERVER,
			noRow:    true,
			want:     "seq 3",
		},
		"human call without its row": {
			call:     &messages.ToolCall{Id: "call-norow-2", Name: "approve_refund", Arguments: `{"amount":5}`},
			executor: messages.Executor_EXECUTOR_HUMAN,
			noRow:    true,
			want:     "seq 3",
		},
		"call whose row is another conversation's": {
			call:     &messages.ToolCall{Id: "call-other-1", Name: "lookup_order", Arguments: `{"id":42}`},
			executor: messages.Executor_EXECUTOR_SERVER,
			otherRow: "d",
			want:     "seq 3",
		},
		"no call id": {
			call:     &messages.ToolCall{Name: "lookup_order", Arguments: `{"id":42}`},
			executor: messages.Executor_EXECUTOR_SERVER,
			want:     "seq 3",
		},
		"oversized call id": {
			call:     &messages.ToolCall{Id: strings.Repeat("x", journal.MaxIDBytes+1), Name: "lookup_order", Arguments: `{"id":42}`},
			executor: messages.Executor_EXECUTOR_SERVER,
			want:     "seq 3",
		},
		"unspecified executor": {
			call:     &messages.ToolCall{Id: "call-unspecified-1", Name: "lookup_order", Arguments: `{"id":42}`},
			executor: messages.Executor_EXECUTOR_UNSPECIFIED,
			want:     "seq 3",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			forEachStore(t, func(t *testing.T, kind string) {
				store := openStore(t, kind)
				ctx := ctxT(t)
				now := time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)
				req := &messages.AppendRequest{
					ConversationId: "c",
					Events: []*messages.Event{
						{Seq: 1, Time: journal.Timestamp(now), RequestId: "r1", Body: &messages.Event_UserMsg{UserMsg: &messages.UserMessage{
							Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: "look order 42 up"}}}}}},
						{Seq: 2, Time: journal.Timestamp(now), Body: &messages.Event_AssistantMsg{AssistantMsg: &messages.AssistantMessage{
							ToolCalls: []*messages.ToolCall{tc.call}}}},
						{Seq: 3, Time: journal.Timestamp(now), Body: &messages.Event_ToolCall{ToolCall: &messages.ToolCallEvent{
							Call: tc.call, Executor: tc.executor}}},
					},
					Status: messages.ConversationStatus_CONVERSATION_STATUS_IDLE,
				}
				row := &messages.ToolCallRecord{
					Id: tc.call.GetId(), ConversationId: "c", Name: tc.call.GetName(), Executor: tc.executor,
					Status: messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING, Args: tc.call.GetArguments(), Created: journal.Timestamp(now),
				}
				switch {
				case tc.otherRow != "":
					// The other conversation's call, answered: the revival
					// of "c" must not take its result.
					row.ConversationId = tc.otherRow
					row.Status = messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED
					row.Result = &messages.ToolOutcome{Outcome: &messages.ToolOutcome_Content{Content: `{"of":"d"}`}}
					_, err := store.Append(ctx, &messages.AppendRequest{ConversationId: tc.otherRow, Unfenced: true, ToolCalls: []*messages.ToolCallRecord{row}})
					require.NoError(t, err)
				case !tc.noRow && journal.ValidateID("tool call id", tc.call.GetId()) == nil:
					req.ToolCalls = []*messages.ToolCallRecord{row}
				}
				_, err := store.Append(ctx, req)
				require.NoError(t, err)

				h := newHarness(t, store, nil)
				for range 2 {
					_, err = h.rt.Send(ctx, "c", "are you there?", user)
					require.ErrorIs(t, err, journal.ErrCorrupt)
					require.Contains(t, err.Error(), tc.want)
					require.ErrorIs(t, h.rt.Wake(ctx, "c"), journal.ErrCorrupt)
				}
				require.Len(t, h.history("c"), 3, "nothing is written")
				require.Zero(t, h.model.Calls("c"), "the model is not called")
				require.Empty(t, h.runs.of("lookup_order"), "no tool runs")
			})
		})
	}
}
