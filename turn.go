package lazarus

import (
	"context"
	"errors"
	"fmt"

	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/messages"
)

// ErrTurnCancelled is the Err of a TurnCancelled end: the conversation's
// actor was killed while its turn was in progress. The Err of the end of a
// turn a Rewind or an Edit took back wraps it.
var ErrTurnCancelled = actors.ErrTurnCancelled

// ErrTurnFailed wraps the error SendAndWait returns for a failed turn.
var ErrTurnFailed = errors.New("lazarus: turn failed")

// SendAndWait sends text as Send does, then waits for the end of the turn
// its message takes part in, and returns that end: answered (with the
// answer's seq and text), suspended on human calls (with the pending
// calls), failed or cancelled. A failed turn also returns an error wrapping
// ErrTurnFailed and the turn's error (a *TurnError read from its
// turn_failed event); a cancelled one an error wrapping ErrTurnCancelled.
// A turn is cancelled by a Kill while it is in progress (not by one that
// the send waited for: its message then starts a turn after the kill),
// and also by a Rewind or an Edit that lands after the message and before
// the turn's end (a rewind owes no turn): the end is then TurnCancelled
// with the rewind event's seq, as subscribers see it.
// Retries of the model call (Update.Retry) do not end the wait. The wait
// follows the conversation's durable log, so an answer or a failure that
// lands while the actor is being revived, or after it was killed, is not
// missed.
//
// ctx bounds the whole call: when it ends, SendAndWait returns an error
// wrapping ctx.Err() (the send's own contract applies while it sends; once
// the message is durable, the turn goes on without the caller). If the
// runtime is closed meanwhile, the error wraps ErrClosed. The wait is a
// subscription to the conversation (see Options.MaxSubscriptions): one
// this Runtime's cap refuses fails the call with an error wrapping
// ErrTooManySubscriptions before anything is written. In cluster mode, on
// a member that does not own the conversation, the wait is forwarded to
// the owner, whose cap refuses it only after the message was written (and
// so may a new owner's, the wait following the conversation across a
// membership change): the error wraps ErrTooManySubscriptions too, but the
// message is durable and its turn goes on. A caller that retries on
// ErrTooManySubscriptions should therefore send with a
// SendOptions.RequestID (SendMessageAndWait) and retry with the same one:
// a message already written is not written again, and the retry waits for
// its turn's end (it may be refused again while the owner stays at its
// cap).
func (r *Runtime) SendAndWait(ctx context.Context, conversationID, text string, scope agent.Scope) (TurnEnd, error) {
	return r.SendMessageAndWait(ctx, conversationID, agent.UserMessage(agent.TextPart(text)), SendOptions{}, scope)
}

// SendMessageAndWait is SendAndWait for a message of several parts, with
// options (see SendMessage). A send that repeats an earlier RequestID
// waits for the end of the first turn after the message it was first
// written as, found in the log (its answer, suspension or turn_failed
// event).
func (r *Runtime) SendMessageAndWait(ctx context.Context, conversationID string, msg *messages.UserMessage, opts SendOptions, scope agent.Scope) (TurnEnd, error) {
	if err := r.enter(ctx); err != nil {
		// Before any read: a ctx that ended reads and writes nothing.
		return TurnEnd{}, fmt.Errorf("lazarus: send to %q: %w", clipID(conversationID), err)
	}
	// Subscribe before sending, so that a failed write of the turn
	// (published live, never written) cannot fall before the subscription.
	last, err := r.store.LastSeq(ctx, conversationID)
	if err != nil {
		last = 0 // an invalid id, say: the send reports it
	}
	subCtx, cancelSub := context.WithCancel(ctx)
	updates, subErr := r.Subscribe(subCtx, conversationID, last)
	cancel := r.endsWith(cancelSub, updates)
	defer func() { cancel() }()
	if errors.Is(subErr, ErrTooManySubscriptions) {
		// Refused before anything is written: the caller may retry.
		return TurnEnd{}, fmt.Errorf("lazarus: wait for %q: %w", clipID(conversationID), subErr)
	}
	seq, err := r.SendMessage(ctx, conversationID, msg, opts, scope)
	if err != nil {
		if r.isClosed() && !errors.Is(err, ErrClosed) {
			// Close stopped the actor before its answer reached us.
			return TurnEnd{}, fmt.Errorf("%w (%w)", ErrClosed, err)
		}
		return TurnEnd{}, err
	}
	if subErr != nil {
		return TurnEnd{}, fmt.Errorf("lazarus: wait for %q: %w", clipID(conversationID), subErr)
	}
	w := turnWait{r: r, conv: conversationID, seq: seq, updates: updates, cancel: cancel, after: last}
	if seq <= last {
		// A repeated RequestID: its message is older than the
		// subscription's start. Follow the log from the message instead.
		if err := w.resubscribe(ctx, seq); err != nil {
			return TurnEnd{}, err
		}
	}
	return w.wait(ctx)
}

// endsWith returns the function that ends a wait's subscription: it
// cancels the subscription's context and, on a runtime of one member,
// reads updates to their end, so that the wait's subscription is gone
// (from the subscriptions gauge too) once the wait has returned. A
// cluster's subscription may be in a request to its owner, which would
// hold the wait until the request's timeout: it is left to end on its own
// (its owner's slot is free once its channel is closed: see Subscribe),
// but for a resubscribe, which waits for that.
func (r *Runtime) endsWith(cancel context.CancelFunc, updates <-chan Update) context.CancelFunc {
	return func() {
		cancel()
		if updates == nil || r.cl != nil {
			return
		}
		for range updates {
		}
	}
}

// turnWait follows a subscription until the end of the turn of the user
// message at seq.
type turnWait struct {
	r       *Runtime
	conv    string
	seq     uint64 // the user message
	updates <-chan Update
	cancel  context.CancelFunc // ends the subscription (endsWith)
	after   uint64             // the last seq received
	seen    bool               // the message was received: the next end is its turn's
	lastErr error
}

func (w *turnWait) resubscribe(ctx context.Context, after uint64) error {
	w.cancel()
	// Ended before the new one starts, so that the two never hold two
	// slots of the conversation (in a cluster, two of its owner's): a
	// conversation one below its cap is not refused the new one. endsWith
	// does not drain a cluster's subscription: a cancelled one ends once
	// its owner has ended its stream, or within the cluster's request
	// timeouts of an owner out of reach; one cancelled during its
	// subscribe ends at once, and the next waits for its stream's end
	// (see Subscribe).
	for range w.updates {
	}
	subCtx, cancel := context.WithCancel(ctx)
	updates, err := w.r.Subscribe(subCtx, w.conv, after)
	if err != nil {
		cancel()
		return fmt.Errorf("lazarus: wait for %q: %w", clipID(w.conv), err)
	}
	w.updates, w.cancel, w.after = updates, w.r.endsWith(cancel, updates), after
	w.seen = w.seen || after >= w.seq
	return nil
}

func (w *turnWait) wait(ctx context.Context) (TurnEnd, error) {
	defer func() { w.cancel() }()
	for {
		u, ok := <-w.updates
		if !ok {
			switch {
			case ctx.Err() != nil:
				return TurnEnd{}, ctx.Err()
			case w.r.isClosed():
				return TurnEnd{}, ErrClosed
			case w.lastErr != nil:
				return TurnEnd{}, fmt.Errorf("lazarus: wait for %q: %w", clipID(w.conv), w.lastErr)
			}
			return TurnEnd{}, fmt.Errorf("lazarus: wait for %q: subscription ended", clipID(w.conv))
		}
		if ev := u.Event; ev != nil {
			w.after = ev.GetSeq()
			if ev.GetSeq() >= w.seq {
				w.seen = true
			}
		}
		if u.TurnEnd != nil && w.seen && (u.Event == nil || u.Event.GetSeq() > w.seq) {
			end := *u.TurnEnd
			switch end.Outcome {
			case TurnFailed:
				return end, fmt.Errorf("lazarus: turn of %q: %w: %w", clipID(w.conv), ErrTurnFailed, end.Err)
			case TurnCancelled:
				return end, fmt.Errorf("lazarus: turn of %q: %w", clipID(w.conv), end.Err)
			}
			return end, nil
		}
		if u.Err != nil && u.TurnEnd == nil && u.Retry == nil {
			if errors.Is(u.Err, ErrLagged) {
				if err := w.resubscribe(ctx, w.after); err != nil {
					return TurnEnd{}, err
				}
				continue
			}
			w.lastErr = u.Err // a store error ends the subscription next
		}
	}
}

// publishCancelled tells the subscribers of a conversation whose actor was
// just killed that its turn, if one was in progress (status ACTIVE), is
// cancelled. It runs before any new activation of the conversation can
// write (see killLocal), so the log's last seq is the kill's position: the
// end carries it (Update.After), and it is the end of the turn of a message
// at or before it, never of a later one (the hub drops it for a
// subscription that has delivered an event past it). The last seq is read
// before the status: a write the actor had already sent that lands between
// the two is after the position (an answer: the status is no longer
// ACTIVE, nothing is cancelled). Such a write may also land after the end.
// Commands wait for it: its reads are bounded by Options.CallTimeout.
// When no end is published (nothing was in progress, or a read failed),
// the deltas a model call of the killed actor streamed are voided all the
// same (Update.Restart, if any were streamed): the hub would otherwise keep
// them as the answer in progress until the conversation's next model call.
func (r *Runtime) publishCancelled(conv string) {
	ctx, cancel := context.WithTimeout(r.life, r.opts.CallTimeout)
	defer cancel()
	void := func() { r.hub.publish(actors.Update{ConversationID: conv, Restart: true}) }
	last, err := r.store.LastSeq(ctx, conv)
	if err != nil {
		void()
		return
	}
	c, err := r.store.Conversation(ctx, conv)
	if err != nil || c.GetStatus() != messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE {
		void()
		return
	}
	r.hub.publish(actors.Update{ConversationID: conv, After: last,
		TurnEnd: &actors.TurnEnd{Outcome: actors.TurnCancelled, Err: ErrTurnCancelled}})
}
