package lazarus

import (
	"context"
	"errors"
	"fmt"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/supervisor"
)

// Delete deletes the conversation while the runtime runs: it stops the
// conversation's actor (work in flight, a model call or a tool run, is
// abandoned), cancels the timers of its pending calls' deadlines, and
// removes every record of it from the Store in one atomic write that leaves
// a tombstone (Store.DeleteConversation). The id can never be written
// again: later calls naming it fail with an error wrapping
// journal.ErrDeleted. A call on the same id that runs concurrently either
// lands before the delete (and is deleted with the rest) or waits for it
// and then fails. Deleting an unknown conversation returns an error
// wrapping journal.ErrNotFound; deleting it again, journal.ErrDeleted
// where the Store's Conversation reports tombstones (else ErrNotFound).
func (r *Runtime) Delete(ctx context.Context, conversationID string) error {
	if r.isClosed() {
		return ErrClosed
	}
	if err := journal.ValidateID("conversation id", conversationID); err != nil {
		return fmt.Errorf("lazarus: delete: %w", err)
	}
	err := r.sup.Delete(ctx, conversationID, func(ctx context.Context) error {
		err := r.store.DeleteConversation(ctx, conversationID)
		if errors.Is(err, journal.ErrNotFound) {
			// A tombstone has no row either: say deleted where the Store's
			// lookup tells the two apart.
			if _, lerr := r.store.Conversation(ctx, conversationID); errors.Is(lerr, journal.ErrDeleted) {
				return lerr
			}
		}
		return err
	})
	switch {
	case errors.Is(err, supervisor.ErrStopped):
		return ErrClosed
	case err != nil:
		return fmt.Errorf("lazarus: delete %q: %w", conversationID, err)
	}
	return nil
}
