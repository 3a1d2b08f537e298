package pgjournal

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/pgjournal/pgtest"
	"github.com/lazarusrt/lazarus/messages"
)

// TestInvalidDeadlineColumnsAreCorrupt: a deadline row whose at_s, at_n
// columns are not a valid time (nanos out of range; no write stores one)
// is journal.ErrCorrupt naming the call on an expiry that checks it
// (AppendRequest.due_by), and the call stays pending. The expiry read it
// as another time (AsTime normalizes it) and expired the call.
func TestInvalidDeadlineColumnsAreCorrupt(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	s := open(t, dsn, Options{})
	conn, err := pgx.Connect(t.Context(), dsn)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	ctx := t.Context()
	const conv, call = "c", "tc"
	at := time.Unix(10_000, 0)
	tc := &messages.ToolCall{Id: call, Name: "ask_human", Arguments: `{}`}
	_, err = s.Append(ctx, &messages.AppendRequest{ConversationId: conv,
		Events: []*messages.Event{
			{Body: &messages.Event_AssistantMsg{AssistantMsg: &messages.AssistantMessage{ToolCalls: []*messages.ToolCall{tc}}}},
			{Body: &messages.Event_ToolCall{ToolCall: &messages.ToolCallEvent{Call: tc, Executor: messages.Executor_EXECUTOR_HUMAN}}},
		},
		ToolCalls: []*messages.ToolCallRecord{{Id: call, ConversationId: conv, Name: "ask_human", Executor: messages.Executor_EXECUTOR_HUMAN, Args: `{}`}},
		Schedule:  []*messages.Deadline{{ConversationId: conv, ToolCallId: call, At: timestamppb.New(at)}},
	})
	require.NoError(t, err)
	// Nanos of 2e9: AsTime reads at+2s.
	_, err = conn.Exec(ctx, "UPDATE lz_deadlines SET at_n = 2000000000 WHERE call = $1", []byte(call))
	require.NoError(t, err)
	_, err = s.Append(ctx, &messages.AppendRequest{ConversationId: conv, Unfenced: true, DueBy: timestamppb.New(at.Add(3 * time.Second)),
		Resolutions: []*messages.ToolResolution{{ToolCallId: call, Status: messages.ToolCallStatus_TOOL_CALL_STATUS_EXPIRED,
			Result: &messages.ToolOutcome{Outcome: &messages.ToolOutcome_Error{Error: &messages.ToolError{Code: "expired", Message: "no answer"}}},
			At:     timestamppb.New(at.Add(3 * time.Second))}}})
	require.ErrorIs(t, err, journal.ErrCorrupt)
	require.ErrorContains(t, err, `"tc"`)
	row, err := s.ToolCall(ctx, call)
	require.NoError(t, err)
	require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING, row.GetStatus(), "nothing written")
}
