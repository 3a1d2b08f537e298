package supervisor

import (
	"context"
	"errors"
	"fmt"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// unblocked tells the supervisor actor that a delete or a kill of
// conversation has ended, or that an activation of it whose spawn failed
// is gone: the deliveries it deferred meanwhile go out.
type unblocked struct{ conversation string }

// Delete deletes conversation id while the runtime runs. While it works, no
// activation of id is created: callers that would create one (Ask, the
// supervisor's own deliveries) wait until it returns. It stops the live
// activation, if any, and waits until it has terminated; waits until the
// journal actor has answered every write of id it holds (a write the
// activation left lands before the delete, or fails after it); then calls
// del, which must write the tombstone (Store.DeleteConversation), and, if
// del succeeded, cancels the expiry actor's timers of the conversation's
// pending calls. It returns del's error, or one wrapping ctx's error or
// ErrStopped (ErrNoAnswer and context.DeadlineExceeded when the journal
// actor did not answer within Config.CallTimeout). A nil del, or an id
// journal.ValidateID refuses, is refused at once with an error wrapping
// journal.ErrInvalid: nothing is stopped or held back; so is a ctx that
// has already ended, with an error wrapping its error.
//
// Config.Terminated is told of the stopped actor's end only if del did not
// succeed (before any successor of it is created): a delete that succeeded
// ends the conversation's subscriptions itself, and a Restart before that
// end would be spurious.
//
// Once del has succeeded (or said journal.ErrDeleted), no activation of id
// is created again: the deliveries held back meanwhile are dropped, and
// Ask answers an error wrapping journal.ErrDeleted, as the activation
// would once it had read the tombstone. The registry remembers the last
// 4096 ids so; for older ones an activation reads the tombstone and
// stops.
func (s *Supervisor) Delete(ctx context.Context, id string, del func(context.Context) error) error {
	if err := journal.ValidateID("conversation id", id); err != nil {
		return fmt.Errorf("supervisor: delete: %w", err)
	}
	if del == nil {
		return fmt.Errorf("supervisor: delete %q: a nil del: %w", id, journal.ErrInvalid)
	}
	if s.isStopped() {
		return ErrStopped
	}
	if err := ctx.Err(); err != nil {
		// Before anything is stopped: a select below that finds the
		// activation ready and ctx ended alike may pick either.
		return fmt.Errorf("supervisor: delete %q: %w", id, err)
	}
	release, err := s.reg.block(ctx, id)
	if err != nil { // ctx ended while another delete or kill held id
		return fmt.Errorf("supervisor: delete %q: %w", id, err)
	}
	deleted, succeeded := false, false
	var held *activation // whose end Config.Terminated is told of here, if at all
	defer func() {
		if held != nil && held.releaseEnd() && !succeeded && s.cfg.Terminated != nil {
			// Still blocked: before any successor.
			s.hook("Terminated", func() { s.cfg.Terminated(id) })
		}
		release(deleted)
		s.system.Root.Send(s.pid, &unblocked{conversation: id})
	}()
	if a := s.reg.lookup(id); a != nil {
		select {
		case <-a.ready:
		case <-ctx.Done():
			return fmt.Errorf("supervisor: delete %q: %w", id, ctx.Err())
		}
		if a.pid != nil {
			held = a
			a.holdEnd()
			s.reg.kill(a, func(pid *actor.PID) { s.system.Root.Send(pid, &messages.AgentStop{}) })
		}
		select {
		case <-a.done:
		case <-ctx.Done():
			return fmt.Errorf("supervisor: delete %q: %w", id, ctx.Err())
		}
	}
	// Request, not a Future: it stops waiting when ctx ends or the
	// supervisor stops, and its errors wrap ctx's, ErrNoAnswer or
	// ErrStopped (a Future's timeout wraps nothing).
	if _, err := s.Request(ctx, s.journal, &actors.JournalBarrier{ConversationID: id}); err != nil {
		return fmt.Errorf("supervisor: delete %q: the journal actor did not answer: %w", id, err)
	}
	pending, err := s.cfg.Store.PendingToolCalls(ctx, id)
	if err != nil {
		return err
	}
	if err := del(ctx); err != nil {
		deleted = errors.Is(err, journal.ErrDeleted)
		return err
	}
	deleted, succeeded = true, true
	for _, p := range pending {
		if p.GetDeadline() != nil {
			s.system.Root.Send(s.expiry, &messages.CancelExpiry{ConversationId: id, ToolCallId: p.GetId()})
		}
	}
	return nil
}

// block marks id as held (being deleted, or killed: see Delete and Kill),
// after any other hold of id has ended, and returns the function that ends
// the mark. No activation of id is created while it is held. Its release
// says whether a delete succeeded: the id is then gone (no activation of it
// is created again, see registry.gone).
func (r *registry) block(ctx context.Context, id string) (release func(deleted bool), err error) {
	for {
		r.mu.Lock()
		if ch, ok := r.blocked[id]; ok {
			r.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		if r.blocked == nil {
			r.blocked = map[string]chan struct{}{}
		}
		ch := make(chan struct{})
		r.blocked[id] = ch
		r.mu.Unlock()
		return func(deleted bool) {
			r.mu.Lock()
			delete(r.blocked, id)
			if deleted {
				r.forget(id)
			}
			r.mu.Unlock()
			close(ch)
		}, nil
	}
}

// forget records id as deleted (see registry.gone), dropping the oldest
// record once goneKept are kept. r.mu must be held.
func (r *registry) forget(id string) {
	if _, ok := r.gone[id]; ok {
		return
	}
	if r.gone == nil {
		r.gone = map[string]struct{}{}
		r.goneRing = make([]string, goneKept)
	}
	if old := r.goneRing[r.goneNext]; old != "" {
		delete(r.gone, old)
	}
	r.goneRing[r.goneNext] = id
	r.goneNext = (r.goneNext + 1) % goneKept
	r.gone[id] = struct{}{}
}
