package lazarus

import (
	"context"
	"errors"
	"fmt"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/supervisor"
)

// Delete deletes the conversation while the runtime runs: it stops the
// conversation's actor (work in flight, a model call or a tool run, is
// abandoned), cancels the timers of its pending calls' deadlines, and
// removes every record of it (its schedules too) from the Store in one atomic write that leaves
// a tombstone (Store.DeleteConversation). The id can never be written
// again: later calls naming it fail with an error wrapping
// journal.ErrDeleted. A call on the same id that runs concurrently either
// lands before the delete (and is deleted with the rest) or waits for it
// and then fails. Deleting an unknown conversation (nothing stored under
// its id: no row, metadata, tool call, deadline or audit record) returns an
// error wrapping journal.ErrNotFound; deleting it again, journal.ErrDeleted
// where the Store's Conversation reports tombstones (else ErrNotFound).
// Subscriptions to the conversation end: each delivers the events it had,
// then an update whose Err wraps journal.ErrDeleted, and its channel closes.
func (r *Runtime) Delete(ctx context.Context, conversationID string) error {
	if err := r.enter(ctx); err != nil {
		return fmt.Errorf("lazarus: delete %q: %w", clipID(conversationID), err)
	}
	if err := journal.ValidateID("conversation id", conversationID); err != nil {
		return fmt.Errorf("lazarus: delete: %w", err)
	}
	if _, ran, err := r.forwardOp(ctx, conversationID, &messages.ClusterRequest{Op: &messages.ClusterRequest_Delete{Delete: &messages.ClusterDelete{}}}, false); ran {
		if err != nil {
			return r.callErr(fmt.Sprintf("lazarus: delete %q", clipID(conversationID)), err)
		}
		return nil
	}
	var schedules []*messages.Schedule
	err := r.sup.Delete(ctx, conversationID, func(ctx context.Context) error {
		schedules = r.schedulesBeforeDelete(ctx, conversationID)
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
		return r.callErr(fmt.Sprintf("lazarus: delete %q", clipID(conversationID)), err)
	}
	for _, sc := range schedules {
		r.disarmSchedule(conversationID, sc.GetId(), "")
	}
	r.endDeleted(conversationID)
	return nil
}

// endDeleted ends the subscriptions of a deleted conversation with an
// error wrapping journal.ErrDeleted.
func (r *Runtime) endDeleted(conv string) {
	r.hub.end(conv, fmt.Errorf("lazarus: conversation %q: %w", clipID(conv), journal.ErrDeleted))
}

// subscribeLocal registers a subscription with this member's hub. A Delete
// that lands between the caller's check and the registration ends the
// subscriptions it finds, not this one: the check is made again once it is
// registered, and such a subscription ends as the others did. With slot,
// the caller holds a slot of conv (hub.take), which the subscription frees
// when it ends; if it fails, the caller still holds it.
func (r *Runtime) subscribeLocal(ctx context.Context, conv string, after uint64, slot bool) (<-chan Update, error) {
	updates, err := r.hub.open(ctx, conv, after, slot)
	if err != nil {
		return nil, err
	}
	if r.deleted(ctx, conv) != nil {
		r.endDeleted(conv)
	}
	return updates, nil
}

// end ends every subscription of conv: each delivers what it has queued,
// then an update carrying err, then closes its channel.
func (h *hub) end(conv string, err error) {
	h.mu.Lock()
	subs := h.subs[conv]
	delete(h.answers, conv)
	h.mu.Unlock()
	for _, s := range subs {
		s.mu.Lock()
		s.ended, s.idle = err, false
		s.mu.Unlock()
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// DefaultPendingPage is the page size of PendingCalls when limit is 0.
const DefaultPendingPage = 100

// PendingCalls returns up to limit pending human tool calls (limit 0 means
// DefaultPendingPage) of every conversation, ordered by conversation id
// then tool call id, after cursor ("" for the first page), and the cursor
// of the next page ("" when there is none; a page may be followed by an
// empty last one). Each row names its conversation, tool, prompt,
// arguments, creation time and deadline; answer it with Resolve or Reject.
// It reads the Store's index of pending calls (Store.ListPendingToolCalls),
// so its cost depends on the pending calls, not on the number of
// conversations. A negative limit or a cursor that no page returned is
// refused with an error wrapping journal.ErrInvalid.
func (r *Runtime) PendingCalls(ctx context.Context, cursor string, limit int) ([]*messages.ToolCallRecord, string, error) {
	if err := r.enter(ctx); err != nil {
		return nil, "", fmt.Errorf("lazarus: pending calls: %w", err)
	}
	switch {
	case limit < 0:
		return nil, "", fmt.Errorf("lazarus: pending calls: %w", journal.Invalidf("negative limit"))
	case limit == 0:
		limit = DefaultPendingPage
	}
	var out []*messages.ToolCallRecord
	for {
		// Server calls are pending while they run; they are few, and
		// skipped here.
		rows, next, err := r.store.ListPendingToolCalls(ctx, cursor, limit-len(out))
		if err != nil {
			return nil, "", r.callErr("lazarus: pending calls", err)
		}
		for _, row := range rows {
			if row.GetExecutor() == messages.Executor_EXECUTOR_HUMAN {
				out = append(out, row)
			}
		}
		switch {
		case next == "":
			return out, "", nil
		case len(out) == limit:
			last := out[len(out)-1]
			return out, journal.PendingCursor(last.GetConversationId(), last.GetId()), nil
		}
		cursor = next
	}
}

// Metadata returns the conversation's metadata: the key/value pairs the
// application attached to it with MergeMetadata (an empty map if none).
// An unknown conversation is an error wrapping journal.ErrNotFound; a
// deleted one, journal.ErrDeleted where the Store's lookup reports
// tombstones.
func (r *Runtime) Metadata(ctx context.Context, conversationID string) (map[string]string, error) {
	if err := r.checkConversation(ctx, "metadata", conversationID); err != nil {
		return nil, err
	}
	md, err := r.store.Metadata(ctx, conversationID)
	if err != nil {
		return nil, r.callErr(fmt.Sprintf("lazarus: metadata of %q", clipID(conversationID)), err)
	}
	return md, nil
}

// MergeMetadata merges kv into the conversation's metadata, key by key, in
// one write: a key with an empty value is removed, the others are set. Keys
// follow the rules of ids, values are UTF-8, and the metadata the merge
// leaves holds at most journal.MaxRecordBytes of keys and values, however
// many merges made it (so Fork can always copy it); else it is refused with
// an error wrapping journal.ErrInvalid and nothing is written. The
// conversation must exist (journal.ErrNotFound) and not be deleted
// (journal.ErrDeleted). Metadata is not part of the log: History and
// Subscribe do not show it, and a summary does not fold it away.
func (r *Runtime) MergeMetadata(ctx context.Context, conversationID string, kv map[string]string) error {
	if err := r.checkConversation(ctx, "merge metadata", conversationID); err != nil {
		return err
	}
	if err := journal.ValidateMetadata(conversationID, kv); err != nil {
		return fmt.Errorf("lazarus: merge metadata of %q: %w", clipID(conversationID), err)
	}
	if len(kv) == 0 {
		return nil
	}
	if err := r.store.PutMetadata(ctx, conversationID, kv); err != nil {
		return r.callErr(fmt.Sprintf("lazarus: merge metadata of %q", clipID(conversationID)), err)
	}
	return nil
}

// checkConversation is the prologue of the metadata calls: the runtime is
// open, ctx has not ended, the id is valid and the conversation's row
// exists.
func (r *Runtime) checkConversation(ctx context.Context, op, conversationID string) error {
	if err := r.enter(ctx); err != nil {
		return fmt.Errorf("lazarus: %s of %q: %w", op, clipID(conversationID), err)
	}
	if err := journal.ValidateID("conversation id", conversationID); err != nil {
		return fmt.Errorf("lazarus: %s: %w", op, err)
	}
	if _, err := r.store.Conversation(ctx, conversationID); err != nil {
		return r.callErr(fmt.Sprintf("lazarus: %s of %q", op, clipID(conversationID)), err)
	}
	return nil
}
