package lazarus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// Reschedule replaces the deadline of a pending human tool call: the call
// now expires at at (at once if at is in the past), and no longer at its
// old deadline; a zero at removes the deadline, so the call waits for an
// answer forever. It returns once the change is durable: the call's row
// (PendingCalls, Store().ToolCall) shows the new deadline from then on, and
// the expiry actor's timer follows the same commit, even if the runtime
// restarts before it fires.
//
// Rescheduling replaces, it does not add up: the last Reschedule decides.
// A call that is unknown (also one of a deleted conversation), already
// answered or expired gets an error wrapping journal.ErrStale and nothing
// is written; so does a call answered or expired while the Reschedule is
// being written, as the Store checks that it is still pending in the same
// atomic write. A call whose old deadline passed while the expiry is under
// way goes to whichever commits first: if the Reschedule does, the expiry
// applies only if the new deadline is due as well (its write carries
// AppendRequest.DueBy), else it changes nothing and the call expires at
// the new time; if the expiry does, Reschedule gets ErrStale. A
// server call (the runtime runs it; it has no deadline), an ill-formed id,
// or a time outside the years 1 to 9999 is refused with an error wrapping
// journal.ErrInvalid.
//
// A Reschedule whose write's outcome is unknown returns an error wrapping
// ErrUnknownOutcome; the call then expires at whichever time the Store
// holds, the new one if the write landed, else the old one: the expiry
// actor keeps both and arms the earlier, and an expire sent for a time the
// deadline is not at changes nothing.
func (r *Runtime) Reschedule(ctx context.Context, toolCallID string, at time.Time) error {
	if err := r.enter(ctx); err != nil {
		return fmt.Errorf("lazarus: reschedule %q: %w", clipID(toolCallID), err)
	}
	if err := journal.ValidateID("tool call id", toolCallID); err != nil {
		return fmt.Errorf("lazarus: reschedule: %w", err)
	}
	stamp := journal.Timestamp(at)
	if stamp != nil {
		if err := stamp.CheckValid(); err != nil {
			return fmt.Errorf("lazarus: reschedule %q: %w", clipID(toolCallID), journal.Invalidf("deadline %v: %v", at, err))
		}
	}
	row, err := r.store.ToolCall(ctx, toolCallID)
	switch {
	case errors.Is(err, journal.ErrNotFound):
		return fmt.Errorf("lazarus: reschedule %q: no such tool call: %w (%w)", clipID(toolCallID), journal.ErrStale, err)
	case err != nil:
		return r.callErr(fmt.Sprintf("lazarus: reschedule %q", clipID(toolCallID)), err)
	case row.GetExecutor() != messages.Executor_EXECUTOR_HUMAN:
		return fmt.Errorf("lazarus: reschedule %q: %w", clipID(toolCallID), journal.Invalidf("tool %q is not a human tool; its calls have no deadline", row.GetName()))
	case row.GetStatus() != messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING:
		return fmt.Errorf("lazarus: reschedule %q: already %v: %w", clipID(toolCallID), row.GetStatus(), journal.ErrStale)
	}
	conv := row.GetConversationId()
	// In a cluster, the owner writes it: its expiry actor holds the deadline.
	if _, ran, err := r.forwardOp(ctx, conv, &messages.ClusterRequest{Op: &messages.ClusterRequest_Reschedule{
		Reschedule: &messages.ClusterReschedule{ToolCallId: toolCallID, At: stamp}}}, false); ran {
		if err != nil {
			return r.callErr(fmt.Sprintf("lazarus: reschedule %q", clipID(toolCallID)), err)
		}
		return nil
	}
	req := &messages.AppendRequest{ConversationId: conv, Unfenced: true, Reschedule: []*messages.Deadline{{
		ConversationId: conv, ToolCallId: toolCallID, At: stamp,
	}}}
	if err := r.journalWrite(ctx, req); err != nil {
		if errors.Is(err, journal.ErrDeleted) {
			// The conversation was deleted since the row was read: the
			// call is gone with it.
			return fmt.Errorf("lazarus: reschedule %q: no such tool call: %w (%w)", clipID(toolCallID), journal.ErrStale, err)
		}
		return r.callErr(fmt.Sprintf("lazarus: reschedule %q", clipID(toolCallID)), err)
	}
	return nil
}
