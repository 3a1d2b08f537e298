package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// ErrStopped is returned by calls made after Stop.
var ErrStopped = errors.New("supervisor: stopped")

// ErrMoved: a command's activation stopped under it, and Config.Owns says
// this node no longer owns the conversation, so Ask spawned no new
// activation here to send it again (see Ask): its owner runs it.
var ErrMoved = errors.New("supervisor: the conversation moved to another node")

// Config configures a Supervisor.
type Config struct {
	// Store is the Store the journal actor writes and the agents read.
	// Required.
	Store journal.Store
	// Agent returns the configuration of a new activation of conversation
	// id. The supervisor fills in ID, Store, Journal, Clock, Retire,
	// Stopped, Fenced, Goroutines, Dispatcher, ModelGate and ToolGate. Required.
	// It runs on the supervisor actor's goroutine; a panic of it fails
	// that activation's spawn (Ask answers an error wrapping
	// agent.ErrPanicked), not the supervisor.
	Agent func(id string) actors.ConversationConfig
	// Clock supplies time to the expiry actor and the agents. Default
	// actors.SystemClock().
	Clock actors.Clock
	// Journal configures the journal actor. Its Committed hook, if set, is
	// called for every committed request before the supervisor's own (which
	// tells the expiry actor of deadline changes), and its Unknown hook for
	// every request of unknown outcome before the supervisor's own (which
	// arms the deadlines it schedules and the times it reschedules them
	// to, see actors.ExpiryUnsure); a panic of either is logged and
	// recovered.
	Journal actors.JournalOptions
	// ExpiryRetryAfter is how long the expiry actor waits before retrying
	// an expiry whose write failed. Default: the expiry actor's default.
	ExpiryRetryAfter time.Duration
	// FireSchedule is the expiry actor's actors.ExpiryOptions.Fire: an
	// occurrence of a scheduled wake-up is due. It runs on the expiry
	// actor's goroutine and must not block; a panic of it is logged and
	// recovered (that occurrence is not fired). Default: schedules never
	// fire.
	FireSchedule func(conversationID, scheduleID string, occurrence time.Time)
	// CallTimeout bounds one request to an agent (a Send waiting for its
	// user message to be durable). Zero or less means 30s.
	CallTimeout time.Duration
	// Logger receives lifecycle and failure logs. Default: discard.
	Logger *slog.Logger
	// Activated, if set, is called each time a conversation actor is
	// spawned (a first activation or a revival), once it exists: a spawn
	// that failed is none. It runs on the supervisor actor's goroutine
	// and must not block; a panic of it is logged and recovered.
	Activated func()
	// Passivated, if set, is called each time an idle conversation actor
	// passivates (not for kills or failures), on that actor's goroutine; it
	// must not block. A panic of it is logged and recovered.
	Passivated func()
	// ExpiredLanded, if set, is called each time an expire whose write
	// was reported journal.ErrUnknownOutcome is found to have landed (its
	// retry was stale and the call's row is EXPIRED), before the expiry is
	// delivered: the journal reported no commit of it, so a count of
	// committed expiries misses it. It runs on a goroutine of the
	// supervisor's and must not block. A panic of it is logged and
	// recovered.
	ExpiredLanded func()
	// Owns, in a cluster, says whether this node owns a conversation:
	// the expiry actor arms only the deadlines of owned conversations
	// (actors.ExpiryOptions.Owns), and an activation fenced off by another
	// writer is woken again here only if this node still owns it (else its
	// owner has it), and Ask spawns no new activation here for a command
	// whose activation stopped under it (ErrMoved). Default nil: every
	// conversation is this node's. A panic of it is logged and recovered:
	// Ask then answers an error wrapping agent.ErrPanicked; the expiry
	// actor and a re-wake count the conversation as owned, as a nil Owns
	// would (a deadline is not dropped; the Store fences a write of a
	// node that does not own the conversation).
	Owns func(conversationID string) bool
	// Fenced, if set, is called each time an activation retires because a
	// write of its failed with journal.ErrConflict: another writer (a
	// killed predecessor's late write, another member that owns the
	// conversation) moved its log on, and the Store refused the write
	// whole. It runs on that activation's goroutine and must not block. A
	// panic of it is logged and recovered.
	Fenced func(conversationID string)
	// Terminated, if set, is called each time a conversation actor has
	// terminated (it passivated, was fenced off or found stale, failed,
	// panicked, was stopped by a delete or StopUnowned), before any
	// new activation of that conversation is created, except for one that
	// Kill stopped with a then, which is called instead, and one that a
	// Delete stopped and whose delete succeeded (the delete ends the
	// conversation's subscriptions itself). What it publishes
	// comes after the last delta of the actor's model call (the actor
	// cancelled it as it stopped) and before anything a successor does.
	// It runs on the supervisor actor's goroutine (for an actor a Delete
	// stopped, on Delete's once del failed) and must not block; a
	// panic of it is logged and recovered.
	Terminated func(conversationID string)
}

// Supervisor is the root of a runtime's actors. It owns, and outlives, the
// journal actor, the expiry actor and every conversation actor; it activates
// conversations on demand (one activation per id), lets idle ones passivate,
// stops crashing ones (the next command revives them from the log) and
// restarts the journal and expiry actors when they fail.
type Supervisor struct {
	cfg    Config
	system *actor.ActorSystem
	log    *slog.Logger
	reg    *registry
	pid    *actor.PID
	wg     sync.WaitGroup // goroutines of the agents
	// mailboxes runs the conversation actors' mailboxes; closed by Stop
	// once they are all stopped.
	mailboxes *actors.WorkerDispatcher
	// models is shared by every activation, so that a new activation's
	// model call waits for one a killed predecessor left winding down.
	models actors.ModelGate
	// tools is shared by every activation, so that a new activation's run
	// of an open tool call waits for the run of that call a killed
	// predecessor left winding down.
	tools actors.ToolGate

	journal, expiry *actor.PID

	mu      sync.Mutex
	stopped bool
	// halted is closed by Stop once every actor has stopped (and answered
	// what it was going to answer): callers still waiting stop waiting.
	halted chan struct{}
	// life is the expiry actor's (actors.ExpiryOptions.Context): Stop
	// ends it first, so that it does not wait for a rebuild of the
	// expiry actor's timers from the Store.
	life    context.Context
	endLife context.CancelFunc

	// startErr is why the supervisor actor could not spawn its journal or
	// expiry actor; set before started closes.
	startErr error

	// beforeSend, if set (tests only), runs in the supervisor actor
	// between a delivery's claim of a live activation and its send.
	beforeSend func(a *activation)
}

// Name is the name of the supervisor actor in its actor system: one
// Supervisor per system. Start on a system where an actor has it, or has
// the name of its journal or expiry actor (Name+"/journal",
// Name+"/expiry"), fails with an error wrapping actor.ErrNameExists, and
// leaves nothing running.
const Name = "lazarus"

// Start spawns the supervisor actor, with its journal and expiry actors, on
// system. The expiry actor rebuilds its timers from the Store on its own
// goroutine, as it starts: Start does not wait for the rebuild (a deadline
// or schedule already due fires once it is read). A nil system, or a Config without its Store or Agent, is refused
// with an error wrapping journal.ErrInvalid.
func Start(system *actor.ActorSystem, cfg Config) (*Supervisor, error) {
	if system == nil {
		return nil, fmt.Errorf("supervisor: an actor system is required: %w", journal.ErrInvalid)
	}
	if cfg.Store == nil || cfg.Agent == nil {
		return nil, fmt.Errorf("supervisor: Store and Agent are required: %w", journal.ErrInvalid)
	}
	if cfg.Clock == nil {
		cfg.Clock = actors.SystemClock()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = 30 * time.Second
	}
	if cfg.Journal.Logger == nil {
		cfg.Journal.Logger = cfg.Logger
	}
	s := &Supervisor{cfg: cfg, system: system, log: cfg.Logger, reg: newRegistry(), mailboxes: actors.NewWorkerDispatcher(0),
		halted: make(chan struct{})}
	s.life, s.endLife = context.WithCancel(context.Background())
	s.reg.gens = generationsOf(system)
	started := make(chan struct{})
	props := actor.PropsFromProducer(func() actor.Actor { return &root{s: s, started: started} },
		actor.WithSupervisor(&strategy{s: s}))
	pid, err := system.Root.SpawnNamed(props, Name)
	if err != nil {
		s.mailboxes.Close()
		s.endLife()
		return nil, fmt.Errorf("supervisor: spawn %q: %w", Name, err)
	}
	s.pid = pid
	<-started
	if s.startErr != nil {
		_ = system.Root.StopFuture(pid).Wait()
		s.mailboxes.Close()
		s.endLife()
		return nil, s.startErr
	}
	return s, nil
}

// Repartition tells the expiry actor that what Config.Owns answers has
// changed: it drops its timers and arms the deadlines it now owns, read
// from the Store (an expire in flight is still delivered here once
// written; see actors.ExpiryRebuild).
func (s *Supervisor) Repartition() {
	s.mu.Lock()
	stopped := s.stopped
	s.mu.Unlock()
	if !stopped && s.expiry != nil {
		s.system.Root.Send(s.expiry, &actors.ExpiryRebuild{})
	}
}

// Journal returns the journal actor's PID.
func (s *Supervisor) Journal() *actor.PID { return s.journal }

// Active returns how many conversation actors are live.
func (s *Supervisor) Active() int { return s.reg.active() }

// IsActive reports whether conversation id has a live actor.
func (s *Supervisor) IsActive(id string) bool { return s.reg.isLive(id) }

// spawnAgent asks the supervisor actor to spawn an activation as its child.
type spawnAgent struct{ a *activation }

// spawnReply answers spawnAgent.
type spawnReply struct {
	pid *actor.PID
	err error
}

// expired is the expiry actor's delivery: a call of conversation was
// resolved as expired in the Store; its agent must hear of it.
type expired struct{ conversation, toolCallID string }

// Ask delivers cmd to conversation id, activating it if needed, and waits
// for the agent's reply. If the activation retires or stops before
// answering, Ask activates the conversation again and resends: commands are
// idempotent (AgentSend carries a request id; AgentResolved is a no-op for a
// call already recorded).
//
// Ask waits at most Config.CallTimeout in all, and returns at once when ctx
// ends or the supervisor stops (then with ErrStopped). Once cmd was handed
// to an activation, an error without the agent's answer wraps ErrNoAnswer:
// the command may or may not have been applied. An activation whose spawn
// it began is spawned still when ctx ends (nothing is left half-done), and
// passivates once idle.
//
// With Config.Owns set, only the first attempt may spawn an activation of
// a conversation Owns rejects (the caller decided where it runs); a later
// one, after the activation it was sent to stopped (StopUnowned, say),
// returns an error wrapping ErrMoved instead (and ErrNoAnswer if cmd was
// handed over): the caller sends it to the conversation's owner, if
// sending it again is safe.
//
// When every attempt meets an activation that stops before answering, Ask
// gives up with an error that wraps ErrNoAnswer (if cmd was handed over)
// and the last activation's reason: actors.ErrAgentStopped, with the
// error its retry reply carried or it stopped with (its text and
// sentinels, journal.ErrConflict of a fenced write, say).
//
// A nil cmd, or an id journal.ValidateID refuses (empty, too long, not
// UTF-8), is refused at once with an error wrapping journal.ErrInvalid:
// nothing is activated or sent.
func (s *Supervisor) Ask(ctx context.Context, id string, cmd *actors.Command) (proto.Message, error) {
	if err := journal.ValidateID("conversation id", id); err != nil {
		return nil, fmt.Errorf("supervisor: %w", err)
	}
	if cmd == nil {
		return nil, fmt.Errorf("supervisor: conversation %q: a nil command: %w", id, journal.ErrInvalid)
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
	defer cancel()
	what := fmt.Sprintf("conversation %q", id)
	const attempts = 8
	var last error
	handed := false
	for attempt := range attempts {
		if err := s.ended(ctx); err != nil {
			return nil, noAnswer(what, handed, err)
		}
		var owns func(string) bool
		var ownsErr error // a panic of Config.Owns
		if attempt > 0 && s.cfg.Owns != nil {
			owns = func(id string) bool {
				owned, err := s.owns(id)
				ownsErr = err
				return owned
			}
		}
		a, err := s.reg.ensureOwned(ctx, id, owns, s.spawnFromOutside)
		switch {
		case ownsErr != nil:
			return nil, noAnswer(what, handed, ownsErr)
		case err != nil && (ctx.Err() != nil || s.isStopped()):
			return nil, noAnswer(what, handed, s.ended(ctx))
		case errors.Is(err, ErrMoved):
			return nil, noAnswer(what, handed, err)
		case errors.Is(err, errGone):
			return nil, fmt.Errorf("supervisor: %s: %w", what, err)
		case err != nil:
			return nil, err
		}
		p := s.newReply()
		err = s.reg.send(a, func(pid *actor.PID) { s.system.Root.RequestWithCustomSender(pid, cmd, p.pid) })
		if errors.Is(err, errRetired) {
			p.release()
			// An actor that stopped itself for a reason a new activation
			// cannot fix (its store refuses reads) would have answered this
			// command with that reason; so does Ask, rather than spawn
			// activations that fail the same way until it gives up.
			cause := a.stopCause()
			if cause != nil && !retryOnNewActivation(cause) {
				return nil, fmt.Errorf("supervisor: conversation %q: %w", id, cause)
			}
			last = fmt.Errorf("%w: %w", err, stoppedError(cause))
			continue
		}
		handed = true
		res, err := p.wait(ctx)
		p.release()
		switch {
		case errors.Is(err, actor.ErrDeadLetter):
			last = err
			continue
		case err != nil:
			return nil, noAnswer(what, true, err)
		}
		if retryable(res) {
			last = retryError(res)
			continue
		}
		return res.(proto.Message), nil
	}
	if handed {
		return nil, fmt.Errorf("supervisor: conversation %q: no activation answered after %d attempts: %w: %w", id, attempts, ErrNoAnswer, last)
	}
	return nil, fmt.Errorf("supervisor: conversation %q: no activation answered after %d attempts: %w", id, attempts, last)
}

// AskLive delivers cmd to conversation id's live activation and waits for
// the agent's reply, as Ask does, but never activates the conversation: ok
// is false, and cmd was not applied, when no live activation took it
// (there is none, or the one there is retires, or stops before answering,
// or answers that cmd was not applied because it stopped). An activation
// still spawning is waited for. The caller decides what to do then (a
// wake that is owed nothing once the activation is gone does nothing).
//
// AskLive waits at most Config.CallTimeout, and returns at once when ctx
// ends or the supervisor stops (then with ErrStopped); once cmd was handed
// to the activation, such an error wraps ErrNoAnswer. A nil cmd, or an id
// journal.ValidateID refuses, is refused at once with an error wrapping
// journal.ErrInvalid: nothing is sent.
func (s *Supervisor) AskLive(ctx context.Context, id string, cmd *actors.Command) (res proto.Message, ok bool, err error) {
	if err := journal.ValidateID("conversation id", id); err != nil {
		return nil, false, fmt.Errorf("supervisor: %w", err)
	}
	if cmd == nil {
		return nil, false, fmt.Errorf("supervisor: conversation %q: a nil command: %w", id, journal.ErrInvalid)
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
	defer cancel()
	what := fmt.Sprintf("conversation %q", id)
	if err := s.ended(ctx); err != nil {
		return nil, false, noAnswer(what, false, err)
	}
	a := s.reg.lookup(id)
	if a == nil {
		return nil, false, nil
	}
	select {
	case <-a.ready: // a failed spawn is retired: send says so
	case <-ctx.Done():
		return nil, false, noAnswer(what, false, s.ended(ctx))
	case <-s.halted:
		return nil, false, noAnswer(what, false, ErrStopped)
	}
	p := s.newReply()
	defer p.release()
	if err := s.reg.send(a, func(pid *actor.PID) { s.system.Root.RequestWithCustomSender(pid, cmd, p.pid) }); errors.Is(err, errRetired) {
		return nil, false, nil
	}
	reply, err := p.wait(ctx)
	switch {
	case errors.Is(err, actor.ErrDeadLetter):
		return nil, false, nil
	case err != nil:
		return nil, false, noAnswer(what, true, err)
	case retryable(reply):
		return nil, false, nil
	}
	return reply.(proto.Message), true, nil
}

// retryOnNewActivation reports whether a command that failed with err may
// succeed on a new activation: the rule of the conversation actor's replies
// (a write of unknown outcome stopped it: the new activation reads from the
// log whether it landed).
func retryOnNewActivation(err error) bool {
	return errors.Is(err, actors.ErrAgentStopped) || errors.Is(err, journal.ErrConflict) || errors.Is(err, journal.ErrUnknownOutcome)
}

// retryError is the error of an agent's reply that says to retry
// (retryable): actors.ErrAgentStopped, and the reply's own error, whose
// text and journal sentinels cross the actor boundary (ErrAgentStopped
// does not).
func retryError(res any) error {
	var e *messages.Error
	switch r := res.(type) {
	case *messages.AgentSendReply:
		e = r.GetError()
	case *messages.AgentReply:
		e = r.GetError()
	}
	return stoppedError(journal.ErrorFromProto(e))
}

// stoppedError is the error of an activation that stopped (a retry
// reply's, or a retired activation's stop cause, err) as Ask's attempts
// record it: actors.ErrAgentStopped, and err if not nil.
func stoppedError(err error) error {
	if err == nil {
		return actors.ErrAgentStopped
	}
	return stoppedReply{err}
}

// stoppedReply is an activation's stop error: it wraps the error and
// actors.ErrAgentStopped, and names the latter once.
type stoppedReply struct{ err error }

func (e stoppedReply) Error() string {
	if msg := e.err.Error(); strings.Contains(msg, actors.ErrAgentStopped.Error()) {
		return msg
	}
	return e.err.Error() + ": " + actors.ErrAgentStopped.Error()
}

func (e stoppedReply) Unwrap() []error { return []error{e.err, actors.ErrAgentStopped} }

// retryable reports whether an agent's reply says the command was not
// applied because its activation stopped.
func retryable(res any) bool {
	switch r := res.(type) {
	case *messages.AgentSendReply:
		return r.GetRetry()
	case *messages.AgentReply:
		return r.GetRetry()
	}
	return false
}

// spawnFromOutside asks the supervisor actor to spawn a, and waits for its
// answer however long it takes: a spawn the supervisor actor may still
// perform must not be abandoned (its actor would be registered to no
// activation, and a successor spawned beside it). The answer always comes
// (the supervisor actor answers every spawnAgent, and once it is gone a
// dead letter answers for it), or Stop ends the wait. It watches no
// caller's context: ensure runs it on a goroutine of its own, and its
// callers stop waiting when their context ends.
func (s *Supervisor) spawnFromOutside(a *activation) (*actor.PID, error) {
	p := s.newReply()
	defer p.release()
	s.system.Root.RequestWithCustomSender(s.pid, &spawnAgent{a: a}, p.pid)
	res, err := p.wait(context.Background())
	if err != nil { // ErrStopped, or a dead letter: the supervisor actor is gone
		return nil, fmt.Errorf("supervisor: spawn conversation %q: %w", a.id, ErrStopped)
	}
	r := res.(*spawnReply)
	return r.pid, r.err
}

// Kill stops the actor of conversation id, as a crash would, and waits until
// it is gone. It reports whether there was a live one. The actor first
// answers the commands queued before the kill order; work in flight (a model
// call, a tool run) is abandoned and recovered by the next activation. A
// re-wake the killed actor asks for (after a write of its that lost a race
// or whose outcome is unknown) is dropped: the conversation stays without
// an activation until its next command or the resume scan.
//
// If there was one and then is not nil, Kill calls then once the actor has
// terminated, before any new activation of id is created: as during a
// Delete, a command that would create one (an Ask, a delivery of the
// supervisor's own) waits until then has returned. So then sees the log as
// the killed actor left it, no write of a successor in it (a write the
// actor had sent may still land: the journal actor answers it in its own
// time), and what then publishes comes before anything a successor does.
// then must not wait for a command to id, which would wait for it.
func (s *Supervisor) Kill(id string, then func()) bool {
	release, _ := s.reg.block(context.Background(), id) // fails only when its context ends
	defer func() {
		release(false)
		s.system.Root.Send(s.pid, &unblocked{conversation: id})
	}()
	a := s.reg.lookup(id)
	if a == nil {
		return false
	}
	<-a.ready
	if a.pid == nil {
		return false
	}
	killed := s.reg.kill(a, func(pid *actor.PID) {
		a.thenTold = then != nil // a.mu is held: see Config.Terminated
		s.system.Root.Send(pid, &messages.AgentStop{})
	})
	<-a.done
	if killed && then != nil {
		then()
	}
	return killed
}

// StopUnowned stops, without waiting, every live conversation actor whose
// conversation owns rejects (Config.Owns once the membership changed), as
// Kill does but quietly: nothing is published or written (Kill's then has
// no counterpart; Config.Terminated is told of the stop, as of any), and
// the conversation's log and row stay as the actor
// left them for its owner to revive. The actor first answers the commands
// queued before its kill order (those waiting on it are told to retry,
// and Ask sends them to no new activation here: see ErrMoved); its model
// call's context ends, and it writes nothing more (a write it had already
// handed to the journal actor may still land, fenced as any write). owns
// is asked under the registry's lock, which a spawn of a new activation
// by Ask's retries takes too: such an activation is either stopped here
// or was created for an id owns accepts by then. A panic of owns is
// logged and recovered, and counts the conversation as owned (its actor is
// not stopped), as a panic of Config.Owns does for the expiry actor and a
// re-wake. It returns how many actors it stopped: none for a nil owns, or
// after Stop.
func (s *Supervisor) StopUnowned(owns func(conversationID string) bool) int {
	if owns == nil || s.isStopped() {
		return 0
	}
	owned := func(id string) (owned bool) {
		defer func() {
			if p := recover(); p != nil {
				owned = true
				s.log.Error("StopUnowned: owns panicked; the conversation counts as owned", "conversation", id, "panic", p, "stack", string(debug.Stack()))
			}
		}()
		return owns(id)
	}
	return s.reg.stopUnowned(owned, func(pid *actor.PID) { s.system.Root.Send(pid, &messages.AgentStop{}) }, s.goUnlessStopped)
}

// goUnlessStopped runs f on a goroutine that Stop waits for, unless Stop
// has begun: it then runs nothing (Stop stops every actor itself). The
// check and the WaitGroup's Add are under the lock Stop takes before it
// waits, so no Add can come after that Wait has begun.
func (s *Supervisor) goUnlessStopped(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.stopped {
		s.wg.Go(f)
	}
}

// Stop stops every agent, then the expiry and journal actors (which answer
// every request they hold), and waits for the agents' goroutines. A
// rebuild of the expiry actor's timers from the Store in progress (after
// Start or Repartition) is cut, not waited for: the next Start rebuilds.
// The Store is not closed. Stop is idempotent.
func (s *Supervisor) Stop() {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return
	}
	s.stopped = true
	s.mu.Unlock()
	s.endLife() // a rebuild of the expiry actor's timers in progress is cut
	_ = s.system.Root.StopFuture(s.pid).Wait()
	s.reg.releaseAll()
	close(s.halted)
	s.wg.Wait()
	s.mailboxes.Close()
}

func (s *Supervisor) isStopped() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopped
}

// root is the supervisor actor. Its Receive does nothing that can panic on
// input: a restarting parent would stop all its children. A panic of a bug
// is recovered all the same (recoverReceive).
type root struct {
	s        *Supervisor
	started  chan struct{}
	stopping bool
	// answered is set once the spawnAgent being handled is answered (see
	// recoverReceive).
	answered bool
	// deferred holds deliveries (expiries, re-wakes) for conversations whose
	// previous activation is still stopping, or that a delete or a kill
	// holds (see registry.block); they go out once it has terminated, or
	// the hold has ended.
	deferred map[string][]*actors.Command
	// failed counts, per conversation, the re-wakes in a row after a
	// fenced write or one of unknown outcome by activations that committed
	// nothing before it (see rewake); an activation of the conversation
	// that terminates for another reason ends the run.
	failed map[string]int
}

// maxFailedRewakes bounds the re-wakes in a row after fenced writes
// (journal.ErrConflict) or writes of unknown outcome whose activations
// committed nothing before them: a Store that keeps failing so (another
// writer that keeps winning, a damaged row whose fence never holds) does
// not have the conversation revived (and its model called) again and
// again. One warning is logged; the next command, or the resume scan,
// runs the work owed then.
const maxFailedRewakes = 3

// rewake asks the supervisor to wake a conversation whose activation was
// fenced off by another writer, or whose write ended with
// journal.ErrUnknownOutcome (unknown), once that activation has stopped:
// the work it owed (an answer, a tool result) must not wait for the next
// command. committed: the activation had a write land before it (the
// Store works; the run of re-wakes starts again).
type rewake struct {
	conversation       string
	unknown, committed bool
	// from is the activation that asked for it, if one did: a re-wake
	// asked for by an activation Kill stopped is dropped, so that a kill
	// leaves the conversation dead until its next command or the resume
	// scan, as Kill promises.
	from *activation
}

// redeliver is a delivery that met an activation still being spawned by a
// caller outside the supervisor actor; see deliver.
type redeliver struct {
	conversation string
	cmd          *actors.Command
}

func (r *root) Receive(ctx actor.Context) {
	defer r.recoverReceive(ctx)
	s := r.s
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		r.start(ctx)
	case *actor.Stopping, *actor.Restarting:
		r.stopping = true
	case *spawnAgent:
		pid, err := r.spawn(ctx, msg.a)
		r.answered = true
		ctx.Respond(&spawnReply{pid: pid, err: err})
	case *expired:
		r.deliver(ctx, msg.conversation, &actors.Command{Scope: agent.SystemScope, Msg: &messages.AgentResolved{
			ToolCallId: msg.toolCallID,
			Status:     messages.ToolCallStatus_TOOL_CALL_STATUS_EXPIRED,
			Result:     actors.ExpiredOutcome(),
			By:         "system",
			Resolver:   actors.SystemIdentity(),
		}})
	case *rewake:
		if msg.from != nil && msg.from.wasKilled() {
			s.log.Debug("a killed activation's re-wake is dropped", "conversation", msg.conversation)
			return
		}
		if owned, err := s.owns(msg.conversation); !owned && err == nil {
			return
		}
		if !r.allowRewake(msg) {
			return
		}
		r.deliver(ctx, msg.conversation, &actors.Command{Scope: agent.SystemScope, Msg: &messages.AgentWake{}})
	case *redeliver:
		r.deliver(ctx, msg.conversation, msg.cmd)
	case *unblocked:
		waiting := r.deferred[msg.conversation]
		delete(r.deferred, msg.conversation)
		for _, cmd := range waiting {
			r.deliver(ctx, msg.conversation, cmd)
		}
	case *actor.Terminated:
		if a := s.reg.lookupPID(msg.Who); a != nil && s.cfg.Terminated != nil && a.tellTerminated() {
			// Before terminated unregisters it: until then no successor
			// of it is created.
			s.hook("Terminated", func() { s.cfg.Terminated(a.id) })
		}
		if a := s.reg.terminated(msg.Who); a != nil {
			s.log.Debug("conversation actor stopped", "conversation", a.id)
			if cause := a.stopCause(); !errors.Is(cause, journal.ErrUnknownOutcome) && !errors.Is(cause, journal.ErrConflict) {
				delete(r.failed, a.id)
			}
			waiting := r.deferred[a.id]
			delete(r.deferred, a.id)
			for _, cmd := range waiting {
				r.deliver(ctx, a.id, cmd)
			}
		}
	}
}

// allowRewake counts a re-wake after a fenced write or one of unknown
// outcome and reports whether it goes out: at most maxFailedRewakes in a
// row whose activations committed nothing before the write. The one held
// back is logged as a warning, once per run.
func (r *root) allowRewake(msg *rewake) bool {
	if r.failed == nil {
		r.failed = map[string]int{}
	}
	n := r.failed[msg.conversation] + 1
	if msg.committed {
		n = 1
	}
	if n > maxFailedRewakes {
		delete(r.failed, msg.conversation)
		what := "writes fenced off in a row (journal.ErrConflict)"
		if msg.unknown {
			what = "writes of unknown outcome in a row"
		}
		r.s.log.Warn(what+"; the conversation is not woken again until its next command or the resume scan",
			"conversation", msg.conversation, "rewakes", maxFailedRewakes)
		return false
	}
	r.failed[msg.conversation] = n
	return true
}

// recoverReceive, deferred by Receive, logs and recovers a panic of it (a
// bug): the supervisor actor must not restart, which would stop the
// journal and expiry actors and every conversation, and whose Started
// would not bring them back. The message is lost, except that a
// spawnAgent not yet answered is answered with an error wrapping
// agent.ErrPanicked, and a panic while starting fails Start.
func (r *root) recoverReceive(ctx actor.Context) {
	answered := r.answered
	r.answered = false
	p := recover()
	if p == nil {
		return
	}
	err := fmt.Errorf("supervisor: the supervisor actor panicked: %w: %v", agent.ErrPanicked, p)
	r.s.log.Error("supervisor actor panicked; the message is dropped", "message", fmt.Sprintf("%T", ctx.Message()), "panic", p, "stack", string(debug.Stack()))
	switch ctx.Message().(type) {
	case *spawnAgent:
		if !answered {
			ctx.Respond(&spawnReply{err: err})
		}
	case *actor.Started:
		if r.s.startErr == nil && (r.s.journal == nil || r.s.expiry == nil) {
			r.s.startErr = err
		}
		r.signalStarted()
	}
}

// signalStarted closes started, unless it is closed: every incarnation
// shares it, and only the supervisor actor's goroutine closes it.
func (r *root) signalStarted() {
	select {
	case <-r.started:
	default:
		close(r.started)
	}
}

// deliver sends cmd to a conversation, activating it if needed. The
// supervisor actor must never block, so when the previous activation is
// still stopping the delivery waits in deferred until its Terminated
// arrives.
func (r *root) deliver(ctx actor.Context, conv string, cmd *actors.Command) {
	s := r.s
	if r.stopping {
		return
	}
	a, mine, wait := s.reg.claim(conv)
	if a == nil && wait == nil {
		s.log.Debug("delivery dropped: the conversation was deleted", "conversation", conv)
		return
	}
	if wait != nil {
		if r.deferred == nil {
			r.deferred = map[string][]*actors.Command{}
		}
		r.deferred[conv] = append(r.deferred[conv], cmd)
		return
	}
	if mine {
		s.reg.spawned(a, func(a *activation) (*actor.PID, error) { return r.spawn(ctx, a) })
	}
	select {
	case <-a.ready:
	default:
		// A caller outside is spawning this activation: its spawnAgent is
		// queued behind this message, so its pid is not set yet. The
		// supervisor must not wait (nor send to a nil pid, which panics
		// and would restart it and stop every conversation): deliver
		// again once the activation is ready.
		self, sys := ctx.Self(), ctx.ActorSystem()
		s.wg.Go(func() {
			<-a.ready
			sys.Root.Send(self, &redeliver{conversation: conv, cmd: cmd})
		})
		return
	}
	if a.err != nil {
		s.log.Error("delivery: activation failed", "conversation", conv, "err", a.err)
		return
	}
	if s.beforeSend != nil {
		s.beforeSend(a)
	}
	// An activation that retired since the claim (it passivated, it was
	// killed) did not get the command: deliver again, which waits for it
	// to stop and then spawns its successor. Dropping it would leave the
	// work the delivery owes (the turn after an expiry) waiting for the
	// conversation's next command.
	if err := s.reg.send(a, func(pid *actor.PID) { ctx.Send(pid, cmd) }); errors.Is(err, errRetired) {
		r.deliver(ctx, conv, cmd)
	}
}

func (r *root) start(ctx actor.Context) {
	s := r.s
	self, root := ctx.Self(), ctx.ActorSystem().Root
	s.reg.mu.Lock()
	s.reg.spawnFailed = func(id string) { root.Send(self, &unblocked{conversation: id}) }
	s.reg.mu.Unlock()
	if s.journal == nil {
		// The expiry actor learns of deadlines from the commits themselves:
		// a conversation killed between its write and its next message
		// cannot leave a durable deadline unarmed.
		var expiryPID atomic.Pointer[actor.PID]
		sys := ctx.ActorSystem()
		jopts := s.cfg.Journal
		also := jopts.Committed
		jopts.Committed = func(req *messages.AppendRequest) {
			if also != nil {
				s.hook("Journal.Committed", func() { also(req) })
			}
			to := expiryPID.Load()
			if to == nil {
				return
			}
			for _, d := range req.GetSchedule() {
				sys.Root.Send(to, &messages.ScheduleExpiry{Deadline: d})
			}
			for _, id := range req.GetCancel() {
				sys.Root.Send(to, &messages.CancelExpiry{ConversationId: req.GetConversationId(), ToolCallId: id})
			}
			for _, r := range req.GetResolutions() {
				sys.Root.Send(to, &messages.CancelExpiry{ConversationId: req.GetConversationId(), ToolCallId: r.GetToolCallId()})
			}
			if f := req.GetScheduleFire(); f != nil {
				sys.Root.Send(to, scheduleAfterFire(req.GetConversationId(), f))
			}
			for _, d := range req.GetReschedule() {
				if d.GetAt() == nil {
					sys.Root.Send(to, &messages.CancelExpiry{ConversationId: req.GetConversationId(), ToolCallId: d.GetToolCallId()})
					continue
				}
				sys.Root.Send(to, &messages.ScheduleExpiry{Deadline: d})
			}
		}
		// A write of unknown outcome may have landed, and then Committed
		// never hears of it: the deadlines it schedules are armed all the
		// same (the activation that wrote it stops, and its successor
		// awaits the call it opened if it landed). If it did not, the
		// call does not exist and its expire is stale. The time a
		// reschedule moves a deadline to is armed too, the old one kept
		// (actors.ExpiryUnsure): whichever the Store holds fires, the
		// other's expire is stale. Its cancels, and a reschedule that
		// removes a deadline, are left alone: a deadline still armed
		// gives a stale expire at worst.
		alsoUnknown := jopts.Unknown
		jopts.Unknown = func(req *messages.AppendRequest) {
			if alsoUnknown != nil {
				s.hook("Journal.Unknown", func() { alsoUnknown(req) })
			}
			if to := expiryPID.Load(); to != nil {
				for _, d := range req.GetSchedule() {
					sys.Root.Send(to, &messages.ScheduleExpiry{Deadline: d})
				}
				for _, d := range req.GetReschedule() {
					if d.GetAt() != nil {
						sys.Root.Send(to, &actors.ExpiryUnsure{Deadline: d})
					}
				}
			}
		}
		pid, err := ctx.SpawnNamed(actors.NewJournal(s.cfg.Store, jopts), "journal")
		if err != nil {
			// Not a panic: the supervisor actor would restart, fail alike,
			// and Start would wait for it forever. Start stops it.
			s.startErr = fmt.Errorf("supervisor: spawn journal actor %q: %w", ctx.Self().Id+"/journal", err)
			r.signalStarted()
			return
		}
		s.journal = pid
		self := ctx.Self()
		expiry, err := ctx.SpawnNamed(actors.NewExpiry(actors.ExpiryOptions{
			Store:      s.cfg.Store,
			Journal:    pid,
			Clock:      s.cfg.Clock,
			RetryAfter: s.cfg.ExpiryRetryAfter,
			Logger:     s.log,
			// The expiry actor recovers a panic of either itself (one
			// of Owns counts as owned).
			Owns:    s.cfg.Owns,
			Fire:    s.cfg.FireSchedule,
			Context: s.life,
			Deliver: func(conversationID, toolCallID string) {
				sys.Root.Send(self, &expired{conversation: conversationID, toolCallID: toolCallID})
			},
			DeliverIfExpired: func(conversationID, toolCallID string) {
				// A read that failed is made again (as DeliverAnswer's)
				// while a live activation, which does not read the row
				// again, may await the expiry; a revival reads the row.
				s.goUnlessStopped(func() {
					s.retryUntilDone("expiry delivery", conversationID, toolCallID, func(ctx context.Context) (bool, error) {
						row, err := s.cfg.Store.ToolCall(ctx, toolCallID)
						if err != nil {
							return !readMayRecover(err) || !s.reg.isLive(conversationID), err
						}
						if row.GetConversationId() == conversationID &&
							row.GetStatus() == messages.ToolCallStatus_TOOL_CALL_STATUS_EXPIRED {
							if s.cfg.ExpiredLanded != nil {
								s.hook("ExpiredLanded", s.cfg.ExpiredLanded)
							}
							sys.Root.Send(self, &expired{conversation: conversationID, toolCallID: toolCallID})
						}
						return true, nil
					})
				})
			},
		}), "expiry")
		if err != nil {
			s.startErr = fmt.Errorf("supervisor: spawn expiry actor %q: %w", ctx.Self().Id+"/expiry", err)
			r.signalStarted()
			return
		}
		s.expiry = expiry
		expiryPID.Store(expiry)
	}
	r.signalStarted()
}

func (r *root) spawn(ctx actor.Context, a *activation) (*actor.PID, error) {
	s := r.s
	if r.stopping {
		return nil, ErrStopped
	}
	cfg, err := r.agentConfig(a.id)
	if err != nil {
		return nil, err
	}
	cfg.ID = a.id
	cfg.Store = s.cfg.Store
	cfg.Journal = s.journal
	cfg.Clock = s.cfg.Clock
	cfg.Goroutines = &s.wg
	cfg.Dispatcher = s.mailboxes
	cfg.ModelGate = &s.models
	cfg.ToolGate = &s.tools
	passivated := s.cfg.Passivated
	cfg.Retire = func(processed uint64, force bool) bool {
		ok := s.reg.retire(a, processed, force)
		if ok && !force && passivated != nil {
			s.hook("Passivated", passivated)
		}
		return ok
	}
	self, root := ctx.Self(), ctx.ActorSystem().Root
	cfg.Fenced = func(committed bool) {
		root.Send(self, &rewake{conversation: a.id, committed: committed, from: a})
	}
	cfg.Unknown = func(committed bool) {
		root.Send(self, &rewake{conversation: a.id, unknown: true, committed: committed, from: a})
	}
	cfg.Stopped = a.stopped
	if fenced := s.cfg.Fenced; fenced != nil {
		cfg.Stopped = func(cause error) {
			a.stopped(cause)
			if errors.Is(cause, journal.ErrConflict) {
				s.hook("Fenced", func() { fenced(a.id) })
			}
		}
	}
	pid, err := ctx.SpawnNamed(actors.NewConversation(cfg), fmt.Sprintf("conv-%d", a.gen))
	if err == nil {
		s.reg.register(a, pid)
		if s.cfg.Activated != nil {
			s.hook("Activated", s.cfg.Activated)
		}
	}
	return pid, err
}

// agentConfig returns Config.Agent's configuration of conversation id, or,
// if it panicked, an error wrapping agent.ErrPanicked: user code on the
// supervisor actor's goroutine must not fail the supervisor (a restart
// would stop every conversation).
func (r *root) agentConfig(id string) (cfg actors.ConversationConfig, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("supervisor: conversation %q: Config.Agent: %w: %v", id, agent.ErrPanicked, p)
			r.s.log.Error("Config.Agent panicked", "conversation", id, "panic", p, "stack", string(debug.Stack()))
		}
	}()
	return r.s.cfg.Agent(id), nil
}

// owns asks Config.Owns whether this node owns conversation id (true for
// a nil Owns). A panic of it is logged and recovered, and answered as an
// error wrapping agent.ErrPanicked (owned false): user code must fail
// neither the supervisor actor (a restart would stop every conversation)
// nor a caller of Ask.
func (s *Supervisor) owns(id string) (owned bool, err error) {
	if s.cfg.Owns == nil {
		return true, nil
	}
	defer func() {
		if p := recover(); p != nil {
			owned, err = false, fmt.Errorf("supervisor: conversation %q: Config.Owns: %w: %v", id, agent.ErrPanicked, p)
			s.log.Error("Config.Owns panicked", "conversation", id, "panic", p, "stack", string(debug.Stack()))
		}
	}()
	return s.cfg.Owns(id), nil
}

// hook runs a hook of Config, logging and recovering its panic: user code
// must fail neither the actor it runs on (the supervisor actor, whose
// restart would stop every conversation; the journal actor, mid-way
// through answering a batch; the expiry actor; an activation, in the
// middle of its stop) nor the process (a goroutine of the supervisor's).
func (s *Supervisor) hook(name string, f func()) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("Config."+name+" panicked", "panic", p, "stack", string(debug.Stack()))
		}
	}()
	f()
}

// strategy restarts the journal and expiry actors when they fail and stops a
// failing conversation actor: its next command revives it from the log.
type strategy struct{ s *Supervisor }

func (st *strategy) HandleFailure(_ *actor.ActorSystem, sup actor.Supervisor, child *actor.PID, _ *actor.RestartStatistics, reason, _ any) {
	s := st.s
	if child.Equal(s.journal) || child.Equal(s.expiry) {
		s.log.Error("runtime actor failed; restarting it", "actor", child.GetId(), "reason", fmt.Sprint(reason))
		sup.RestartChildren(child)
		return
	}
	s.log.Warn("conversation actor failed; stopping it", "actor", child.GetId(), "reason", fmt.Sprint(reason))
	sup.StopChildren(child)
}
