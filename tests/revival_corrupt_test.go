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
// tool_call event has a call id no row can have (empty, oversized), or an
// executor that is neither server nor human (no write of the runtime
// makes one; a damaged record or a foreign writer does), is damage: the revival fails with an error
// wrapping journal.ErrCorrupt naming the event's seq, every command is
// refused so, and nothing is written, the model is not called. The
// revival took the first two and failed with journal.ErrInvalid (the
// Store refused the row lookup's id), which the Runtime retried until it
// gave up with "outcome unknown"; it took the last as a call nobody runs
// or answers, wrote the next message and never ran its turn.
func TestRevivalRefusesAnOpenCallItCanNeitherRunNorAwait(t *testing.T) {
	cases := map[string]struct {
		call     *messages.ToolCall
		executor messages.Executor
		want     string
	}{
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
				if journal.ValidateID("tool call id", tc.call.GetId()) == nil {
					req.ToolCalls = []*messages.ToolCallRecord{{
						Id: tc.call.GetId(), ConversationId: "c", Name: tc.call.GetName(), Executor: tc.executor,
						Status: messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING, Args: tc.call.GetArguments(), Created: journal.Timestamp(now),
					}}
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
