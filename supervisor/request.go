package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// ErrNoAnswer: a command (or request) was handed over to its actor, but no
// answer came before the caller's context ended, the call timed out
// (Config.CallTimeout) or the supervisor stopped: it may or may not have
// taken effect. The error wraps the reason too: ctx.Err(),
// context.DeadlineExceeded for the call timeout, or ErrStopped.
var ErrNoAnswer = errors.New("supervisor: no answer")

// pendingReply is the reply box of one request (an actors.ReplyBox, so
// that a caller can stop waiting when its context ends or the supervisor
// stops, without waiting out a timeout as a Future would), and its
// supervisor.
type pendingReply struct {
	s   *Supervisor
	box *actors.ReplyBox
	pid *actor.PID
	ch  <-chan any
}

func (s *Supervisor) newReply() *pendingReply {
	box := actors.NewReplyBox(s.system, "ask")
	return &pendingReply{s: s, box: box, pid: box.PID(), ch: box.Answer()}
}

// release unregisters the reply box: an answer sent later is a dead
// letter.
func (p *pendingReply) release() { p.box.Release() }

// wait returns the answer, or why none came: ctx.Err(), ErrStopped once
// the supervisor has stopped every actor (an actor that was going to
// answer has answered by then), or actor.ErrDeadLetter when the target was
// gone before it got the request.
func (p *pendingReply) wait(ctx context.Context) (any, error) {
	select {
	case m := <-p.ch:
		return answer(m)
	case <-ctx.Done():
	case <-p.s.halted:
	}
	select { // an answer that came with the end wins
	case m := <-p.ch:
		return answer(m)
	default:
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return nil, ErrStopped
}

func answer(m any) (any, error) { return actors.AnswerOf(m) }

// ended returns why a call must not start (or go on): ErrStopped after
// Stop, else ctx.Err().
func (s *Supervisor) ended(ctx context.Context) error {
	if s.isStopped() {
		return ErrStopped
	}
	return ctx.Err()
}

// noAnswer is the error of a call that ended (cause: ctx.Err() or
// ErrStopped) before an answer; handed says whether its command had been
// handed over, making its outcome unknown.
func noAnswer(what string, handed bool, cause error) error {
	if handed {
		return fmt.Errorf("supervisor: %s: %w: %w", what, ErrNoAnswer, cause)
	}
	return fmt.Errorf("supervisor: %s: %w", what, cause)
}

// Request sends msg to pid (the journal actor, say) and waits for its
// answer, with the contract of Ask: it waits at most Config.CallTimeout,
// returns at once when ctx ends or the supervisor stops, and an error
// after the message was handed over wraps ErrNoAnswer. A target that was
// gone (stopped) before it got msg is ErrStopped after Stop, else
// actor.ErrDeadLetter. A nil pid or a nil msg is refused at once with an
// error wrapping journal.ErrInvalid; so is a msg the supervisor's own
// actors do not answer when pid is one of them (the journal actor answers
// a *messages.JournalWrite and an *actors.JournalBarrier; the supervisor
// and expiry actors answer no request of a caller's), rather than waited
// for until CallTimeout.
func (s *Supervisor) Request(ctx context.Context, pid *actor.PID, msg any) (any, error) {
	if pid == nil {
		return nil, fmt.Errorf("supervisor: a request to a nil pid: %w", journal.ErrInvalid)
	}
	if msg == nil {
		return nil, fmt.Errorf("supervisor: a nil request to %s: %w", pid.GetId(), journal.ErrInvalid)
	}
	if !s.answers(pid, msg) {
		return nil, fmt.Errorf("supervisor: a request to %s that it does not answer (%T): %w", pid.GetId(), msg, journal.ErrInvalid)
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
	defer cancel()
	what := "request to " + pid.GetId()
	if err := s.ended(ctx); err != nil {
		return nil, noAnswer(what, false, err)
	}
	p := s.newReply()
	defer p.release()
	s.system.Root.RequestWithCustomSender(pid, msg, p.pid)
	res, err := p.wait(ctx)
	switch {
	case errors.Is(err, actor.ErrDeadLetter) && s.isStopped():
		return nil, noAnswer(what, false, ErrStopped)
	case errors.Is(err, actor.ErrDeadLetter):
		return nil, fmt.Errorf("supervisor: %s: %w", what, err)
	case err != nil:
		return nil, noAnswer(what, true, err)
	}
	return res, nil
}

// answers reports whether pid answers a request of msg's type, as far as
// the supervisor knows: it knows its own actors (the journal actor's
// Receive answers what is listed here), and takes any other actor's word.
func (s *Supervisor) answers(pid *actor.PID, msg any) bool {
	switch {
	case pid.Equal(s.journal):
		switch msg.(type) {
		case *messages.JournalWrite, *actors.JournalBarrier:
			return true
		}
		return false
	case pid.Equal(s.pid), pid.Equal(s.expiry):
		return false
	}
	return true
}

// Tell delivers cmd to conversation id through the supervisor actor,
// activating it if needed, and does not wait: for a delivery whose caller
// could not wait for it (its context ended) but that must not be lost to
// a live activation. It does nothing after Stop, for a nil cmd, or for an
// id journal.ValidateID refuses.
func (s *Supervisor) Tell(id string, cmd *actors.Command) {
	if cmd == nil || journal.ValidateID("conversation id", id) != nil || s.isStopped() {
		return
	}
	s.system.Root.Send(s.pid, &redeliver{conversation: id, cmd: cmd})
}

// DeliverAnswer tells the live activation of conversation conv, if there
// is one, the answer the Store holds for its tool call id (resolved,
// errored or expired), as read from the call's row. It is for a writer of
// an answer that cannot tell whether its write landed (an error wrapping
// journal.ErrUnknownOutcome) or that found the call answered: a live
// activation does not read the row again, and would wait for an answer
// the Store holds. A second delivery of an answer already recorded is a
// no-op; a conversation with no live activation is left alone (its
// revival records what the row holds). It returns at once: on a goroutine
// Stop waits for, it waits until the journal actor has answered every
// write of conv it holds (a JournalBarrier: the answer's write, if its
// caller stopped waiting for it, lands or fails first), then reads the
// row, each attempt bounded by Config.CallTimeout. An attempt that fails
// (the barrier unanswered, the Store unavailable for a moment) is made
// again after a backoff on Config.Clock (100ms, doubling up to 2s) for as
// long as conv has a live activation, until Stop; a read that no retry can
// fix (the call or its conversation gone, the row damaged) delivers
// nothing. A row still PENDING is read again alike, about 30 s at most (20
// reads): the answer's write, its outcome unknown, may land after the
// barrier (a PostgreSQL COMMIT whose reply was lost may still be running
// on the server); one that lands later waits for the activation's next
// command or its revival. The first failure of the Store that is retried
// is logged at warn level (Config.Logger), and the end of the retries at
// info level; pending reads at debug level.
func (s *Supervisor) DeliverAnswer(conv, id string) {
	if journal.ValidateID("conversation id", conv) != nil || journal.ValidateID("tool call id", id) != nil {
		return
	}
	pendingReads := 0
	s.goUnlessStopped(func() {
		s.retryUntilDone("answer delivery", conv, id, func(ctx context.Context) (bool, error) {
			if _, err := s.Request(ctx, s.journal, &actors.JournalBarrier{ConversationID: conv}); err != nil {
				return !s.reg.isLive(conv), err
			}
			if !s.reg.isLive(conv) {
				return true, nil
			}
			row, err := s.cfg.Store.ToolCall(ctx, id)
			if err != nil {
				return !readMayRecover(err), err
			}
			if row.GetConversationId() != conv {
				return true, nil
			}
			if row.GetStatus() == messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING {
				// An answer's write of unknown outcome may land after
				// the barrier and this read (a PostgreSQL COMMIT whose
				// reply was lost may still be running on the server).
				pendingReads++
				return pendingReads >= deliverPendingReads, errRowPending
			}
			if m := actors.ResolvedFromRow(row); m != nil {
				s.Tell(conv, &actors.Command{Scope: agent.SystemScope, Msg: m})
			}
			return true, nil
		})
	})
}

// The backoff between the attempts of retryUntilDone: the first retry
// waits deliverRetryMin, each next one twice as long, up to
// deliverRetryMax (as a pgjournal Store's reconnects do by default: a
// retry sooner than the Store's next reconnect fails alike).
const (
	deliverRetryMin = 100 * time.Millisecond
	deliverRetryMax = 2 * time.Second
)

// deliverPendingReads is how many times DeliverAnswer reads a row that
// is still PENDING after its barrier (about 30 s with the backoff): an
// answer's write of unknown outcome may still land.
const deliverPendingReads = 20

// errRowPending fails an attempt of DeliverAnswer that read the call's
// row PENDING.
var errRowPending = errors.New("the call's row is still pending")

// retryUntilDone runs attempt, each time under a context bounded by
// Config.CallTimeout that Stop ends, until it returns true, waiting
// between attempts on Config.Clock (deliverRetryMin, doubling up to
// deliverRetryMax). It returns at once when Stop has begun. An attempt
// returns the error that failed it, if any. The first failure of the
// Store that is tried again is logged at warn level (the first
// errRowPending at debug level), and the end of the run after it at info
// level (recovered, or given up with the last error; debug level after
// pending rows only), naming what (the work retried) and the call.
func (s *Supervisor) retryUntilDone(what, conv, call string, attempt func(ctx context.Context) (done bool, err error)) {
	wait := deliverRetryMin
	failed := 0
	warned, pending := false, false // logged a failure of the Store, a pending row
	for {
		ctx, cancel := context.WithTimeout(s.life, s.cfg.CallTimeout)
		done, err := attempt(ctx)
		cancel()
		if s.life.Err() != nil {
			return // Stop cut it: no failure of the Store's
		}
		if err != nil {
			failed++
		}
		if done {
			level := slog.LevelInfo
			if !warned {
				level = slog.LevelDebug
			}
			switch {
			case !warned && !pending:
				// Never tried again.
			case err == nil:
				s.log.Log(s.life, level, what+": recovered", "conversation", conv, "tool_call", call, "failed_attempts", failed)
			default:
				s.log.Log(s.life, level, what+": given up", "conversation", conv, "tool_call", call, "failed_attempts", failed, "err", err)
			}
			return
		}
		switch {
		case err == nil:
		case errors.Is(err, errRowPending):
			if !pending {
				pending = true
				s.log.Debug(what+": the call is still pending; reading it again with backoff", "conversation", conv, "tool_call", call)
			}
		case !warned:
			warned = true
			s.log.Warn(what+": failed; trying again with backoff", "conversation", conv, "tool_call", call, "err", err)
		}
		fired := make(chan struct{})
		stop := s.cfg.Clock.AfterFunc(wait, func() { close(fired) })
		select {
		case <-fired:
		case <-s.life.Done():
			stop()
			return
		}
		wait = min(2*wait, deliverRetryMax)
	}
}

// readMayRecover reports whether a Store read that failed with err may
// succeed if made again (unavailable, closed for a moment, timed out), as
// the expiry actor retries a write: not when the record or its
// conversation is gone, the request is invalid, or the record is damaged.
func readMayRecover(err error) bool {
	switch {
	case errors.Is(err, journal.ErrNotFound), errors.Is(err, journal.ErrDeleted),
		errors.Is(err, journal.ErrInvalid), errors.Is(err, journal.ErrCorrupt):
		return false
	}
	return true
}
