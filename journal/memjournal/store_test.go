package memjournal_test

import (
	"context"
	"testing"
	"time"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// TestSmoke walks the main paths once; the conformance suite covers the rest.
func TestSmoke(t *testing.T) {
	ctx := context.Background()
	s := memjournal.New(memjournal.Options{})
	t.Cleanup(func() { require.NoError(t, s.Close()) })

	pending := &messages.ToolCallRecord{Id: "tc1", ConversationId: "c", Name: "ask", Executor: messages.Executor_EXECUTOR_HUMAN}
	ev := userMsg("hi")
	res, err := s.Append(ctx, &messages.AppendRequest{
		ConversationId: "c",
		Events:         []*messages.Event{ev},
		ToolCalls:      []*messages.ToolCallRecord{pending},
		Schedule:       []*messages.Deadline{{ConversationId: "c", ToolCallId: "tc1", At: timestamppb.New(time.Unix(100, 0))}},
	})
	require.NoError(t, err)
	require.Equal(t, journal.AppendResult{FirstSeq: 1, LastSeq: 1}, res)
	require.Equal(t, uint64(1), ev.GetSeq(), "Append sets Seq on the caller's event")
	require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_UNSPECIFIED, pending.GetStatus(), "the caller's record is not changed")

	row, err := s.ToolCall(ctx, "tc1")
	require.NoError(t, err)
	require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING, row.GetStatus())

	// Conflict: nothing written, not even the tool call row.
	_, err = s.Append(ctx, &messages.AppendRequest{
		ConversationId: "c",
		Events:         []*messages.Event{userMsg("late")},
		ToolCalls:      []*messages.ToolCallRecord{{Id: "tc2", ConversationId: "c", Executor: messages.Executor_EXECUTOR_HUMAN}},
	})
	require.ErrorIs(t, err, journal.ErrConflict)
	_, err = s.ToolCall(ctx, "tc2")
	require.ErrorIs(t, err, journal.ErrNotFound)

	// Resolution in an append removes the deadline; a second one is stale.
	resolve := &messages.AppendRequest{
		ConversationId: "c", ExpectedLast: 1,
		Resolutions: []*messages.ToolResolution{{ToolCallId: "tc1", Status: messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED}},
	}
	_, err = s.Append(ctx, resolve)
	require.NoError(t, err)
	_, err = s.Append(ctx, resolve)
	require.ErrorIs(t, err, journal.ErrStale)
	n := 0
	require.NoError(t, s.Deadlines(ctx, time.Time{}, func(*messages.Deadline) error { n++; return nil }))
	require.Zero(t, n)

	require.NoError(t, s.DeleteConversation(ctx, "c"))
	require.ErrorIs(t, s.PutFSMState(ctx, "c", &messages.FSMState{}), journal.ErrDeleted)
	require.ErrorIs(t, s.DeleteConversation(ctx, "c"), journal.ErrNotFound)

	require.NoError(t, s.Close())
	_, err = s.LastSeq(ctx, "c")
	require.ErrorIs(t, err, journal.ErrClosed)
}
