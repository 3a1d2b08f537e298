package actors

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/snapshot"
)

// ErrAgentStopped is returned to a caller whose command reached a
// conversation actor that stopped (killed, passivated, or fenced off by
// another writer) before answering it. The command was not applied; it is
// safe to retry on a new activation.
var ErrAgentStopped = errors.New("actors: conversation actor stopped")

// Command is an entry call delivered to a conversation actor: an AgentSend or
// an AgentResolved, with the caller's scope. It is local-only: the scope is
// ambient state (user, permissions, handles) that is never persisted and
// never leaves the process.
type Command struct {
	// Msg is *messages.AgentSend, *messages.AgentResolved or
	// *messages.AgentWake.
	Msg proto.Message
	// Scope is the caller's scope. The scope of an AgentSend becomes the
	// requester's once its message is in the log: the work of the turn it
	// starts runs with it, and its identity is recorded as the message's
	// author. The scope of an AgentResolved is the resolver's: its identity
	// is recorded in the resolution; the work that follows still runs for
	// the requester.
	Scope agent.Scope
}

// Update is one thing that happened in a conversation, as live subscribers
// see it.
type Update struct {
	// ConversationID names the conversation.
	ConversationID string
	// Event is a durable event (nil for deltas and errors). It is shared by
	// every subscriber and must not be modified.
	Event *messages.Event
	// Delta is streamed text of the model call in flight. It is not durable:
	// the assistant_msg event that follows is what counts.
	Delta string
	// Err reports a model call that failed and will be retried (Retry is
	// set), or a write of the conversation that failed (its activation
	// stopped; TurnEnd is set unless the write lost a race to another
	// writer, ErrConflict, and the turn goes on in a new activation). A
	// turn that fails for good is a durable turn_failed event instead.
	Err error
	// Retry, when set, says the model call that failed with Err is retried
	// after Retry.Delay (see RetryPolicy). Nothing of the failed call was
	// written.
	Retry *Retry
	// TurnEnd, when set, says a turn is over (see TurnEndOf). The runtime
	// sets it on the update of the event that ends the turn, and on the
	// update of a failed or cancelled turn.
	TurnEnd *TurnEnd
	// Restart says the deltas streamed since the conversation's last event
	// are void: the model call that streamed them was abandoned (a kill, a
	// newer message, a failure to be retried, a lost write race), and the
	// deltas that follow are a new call's, from its first. A subscriber
	// showing an answer as it streams drops what it has. The runtime sets
	// it on the update that abandons the call (with TurnEnd cancelled, with
	// Retry, or alone) when deltas were streamed.
	Restart bool
	// Agent is the agent whose model streamed Delta ("" for the default
	// agent). A durable event names its agent itself (Event.agent).
	Agent string
	// After is, on a Delta, the seq of the conversation's newest event
	// when the model call that streams it began (the same on every delta
	// of the call). Any event after it ends that call: an answer, a turn
	// end, a message that cancelled it. On the cancelled end of a kill
	// (TurnEnd cancelled, no Event), it is the seq of the conversation's
	// last event at the kill, and on a failed write (Err, no Event) the
	// seq of the last event the writing activation held (0 for an empty
	// log, a position all the same): the end is that of the turn in
	// progress then, never of the turn of a later message, and the
	// runtime does not deliver it to a subscription that has already
	// delivered an event after it (the write itself, landed though its
	// outcome was reported unknown, or a later activation's). 0 on other
	// updates, and on the updates a cluster subscription relays from
	// another member.
	After uint64
}

// ConversationConfig configures one activation of a conversation actor.
type ConversationConfig struct {
	// ID is the conversation id. Required.
	ID string
	// Store is read on activation (revival) and by the summarizer. All log
	// writes go through Journal. Required.
	Store journal.Store
	// Journal is the journal actor. Required.
	Journal *actor.PID
	// Model answers turns. Required.
	Model agent.Model
	// Tools is the tool registry. Nil means no tools.
	Tools *agent.Registry
	// Checkpoints, if set, gives each server tool run its
	// agent.Checkpointer (Invocation.Files). Default nil: none. If it
	// panics, the call ends with a tool error of code agent.CodePanic, as
	// when the tool's Run panics, and the tool is not run.
	Checkpoints func(inv agent.Invocation) agent.Checkpointer
	// Agents are the named agents of the conversation, by name (see
	// AgentConfig); with any, Tools must hold HandoffTool. Nil: the
	// default agent alone, as before agents existed.
	Agents map[string]AgentConfig
	// Clock supplies time. Default SystemClock().
	Clock Clock
	// IdleTimeout passivates the actor after this long without work. Zero
	// or negative means never.
	IdleTimeout time.Duration
	// HumanTimeout is the deadline of a human call whose tool sets none.
	// Zero or negative means no deadline.
	HumanTimeout time.Duration
	// Policy decides when to summarize. It is asked when the
	// conversation comes to rest, not between the model calls of a turn.
	Policy snapshot.Policy
	// Summarizer writes summaries. Nil means never summarize.
	Summarizer snapshot.Summarizer
	// Settings are the default model settings of every conversation: a
	// conversation's own (AgentConfigure, kept in its row) override them
	// field by field, and each model call gets the result in agent.Turn.
	Settings agent.Settings
	// ScopeLoader rebuilds the requester's scope from its identity when a
	// revived activation resumes work that no command of its own asked
	// for (see agent.ScopeLoader). Nil means such work runs under
	// agent.SystemScope.
	ScopeLoader agent.ScopeLoader
	// Audit records every model call that returned, an answer or an error,
	// with Store.PutModelCall: what was rendered to the model, and for a
	// failed call its error (ModelCall.error: message and code, as
	// TurnFailureCode gives it; latency set, usage and model empty). A
	// retry of the turn replaces the failed call's row (the same TurnRef),
	// so a turn that fails for good keeps its last call's. A call cancelled
	// before it returned (a newer message restarts the turn, a kill, the
	// actor stopping) records nothing, whatever the model returned: its
	// outcome is void. So does a call that gave up at the gate without
	// calling the model.
	Audit bool
	// Retry is the retry policy of failed model calls. The zero value is
	// the defaults (see RetryPolicy).
	Retry RetryPolicy
	// ModelTimeout bounds each model call (one Generate, each retry on its
	// own), measured on Clock from the call's start past the gate: when it
	// passes, the call's context is cancelled, and once Generate returns
	// the call fails with an error wrapping context.DeadlineExceeded (code
	// CodeTimeout, retried under DefaultRetryable; the model's own error
	// is in its text only), unless Generate returned an answer first.
	// Recorded as any failed call (Audit, the retry, turn_failed). Zero or
	// negative means no bound: a call ends only when it returns, or is
	// cancelled (a newer message, a rewind, a kill, the actor stopping).
	// It bounds each call of Summarizer (each Summarize of a summary
	// plan, past the gate) the same way: the summary then fails, as any
	// failed summary does (tried again once the log grows), and the gate
	// it held is left.
	ModelTimeout time.Duration
	// ToolTimeout bounds each run of a server tool whose
	// agent.Tool.RunTimeout is 0, measured on Clock from the run's start
	// past the ToolGate: when it passes, the run's context ends with
	// context.DeadlineExceeded, and an error the tool then returns is
	// recorded as the call's result, a tool error of code
	// agent.CodeTimeout the model sees (a result it returns all the same
	// stands). Zero or negative means no bound: a run ends only when it
	// returns, or is cancelled (a kill, the actor stopping).
	ToolTimeout time.Duration
	// MaxInvalidToolAnswers is how many model answers in a row, within one
	// turn, may contain invalid tool calls (an unknown tool, arguments that
	// are not a JSON object): each is recorded with an error result the
	// model sees on its next call. The next such answer fails the turn
	// (ErrInvalidToolCalls). 0 means DefaultMaxInvalidToolAnswers; less
	// than 0 fails the turn on the first one.
	MaxInvalidToolAnswers int
	// ModelGate keeps the conversation's model calls from overlapping (see
	// ModelGate). Activations of one conversation must share it, so that a
	// new activation's first call waits for the call a killed one left
	// winding down; the supervisor passes its own. Nil means a gate of
	// these props' own, which serialises the calls of their activations
	// only.
	ModelGate *ModelGate
	// ToolGate keeps the runs of each server tool call from overlapping
	// (see ToolGate). Activations of one conversation must share it, so
	// that a new activation's re-dispatch of an open call waits for the
	// run of that call a killed one left winding down; the supervisor
	// passes its own. Nil means a gate of these props' own, which
	// serialises the runs of their activations only.
	ToolGate *ToolGate
	// Publish receives the retries of the actor's model calls and its
	// failed writes, on the actor's goroutine, and the model's text deltas, on the goroutine
	// of the model call that streams them (onDelta's caller), straight from
	// the model: a delta does not pass through the actor's mailbox. Each
	// turn's deltas come before Generate returns, so before the turn's
	// answer is written; deltas of a turn already cancelled (a kill, a
	// stop, a newer message) are dropped, and the cancel waits for a delta
	// whose publication is under way, so no delta of a call comes after
	// the Restart that voids it. It must not block and must be safe for concurrent
	// use. Nil means none. Durable events are not published here: an event
	// written by an activation that is killed before the write's reply
	// arrives would never be; the runtime publishes every committed event
	// from the journal actor's commits instead (JournalOptions.Committed).
	// A panic of it is logged and recovered: that update is lost.
	Publish func(Update)
	// Retire is the passivation handshake with the activation registry: it
	// is asked whether this activation may stop, given how many commands it
	// has processed; when it returns true no more commands will be sent to
	// it. force retires unconditionally (the actor is stopping anyway). Nil
	// means the actor never passivates.
	Retire func(processed uint64, force bool) bool
	// Stopped, if set, is told why the actor stops itself (its revival or
	// a write failed, it was killed), just before it retires: a command
	// that then finds the activation retired is answered with this cause,
	// as the actor would have answered it. Nil means nobody is told.
	Stopped func(cause error)
	// Fenced, if set, is called when a write of this activation failed with
	// ErrConflict (another writer, such as a killed predecessor whose last
	// write landed late, moved the log on), or once a rewind took the log
	// below its summary; committed reports whether a write of this
	// activation landed before it, as Unknown's does. The activation
	// stops; the runtime wakes the conversation again once it has, so work
	// it owed does not wait for the next command (the supervisor bounds
	// the re-wakes in a row of activations that committed nothing).
	Fenced func(committed bool)
	// Unknown, if set, is called when a write of this activation ended
	// with journal.ErrUnknownOutcome (the Store cannot tell whether it
	// landed); committed reports whether a write of this activation
	// landed before it. The activation stops; the runtime wakes the
	// conversation again once it has, so a new activation reads from the
	// log whether the write landed and does the work owed (if it did not,
	// the work again: the write's fence keeps it once in the log) without
	// waiting for the next command. A write that meets the journal actor
	// gone (a dead letter: it was stopped, as Supervisor.Stop stops it
	// once the conversations are stopped; a restart keeps its mailbox and
	// answers what it held) is of unknown outcome too, but calls neither
	// Unknown nor Fenced: the activation stops, its callers are told to
	// retry, and the work it owed waits for the next command or the resume
	// scan (a new activation's writes would meet the same dead letter).
	Unknown func(committed bool)
	// Revived, if set, is called on the actor's goroutine each time its
	// revival read of the log succeeded, with the seq of the log's last
	// event it read (0: none), before the activation publishes or writes
	// anything: the log holds every event up to it, a predecessor's write
	// reported journal.ErrUnknownOutcome that landed included, which the
	// journal actor never reported committed (JournalOptions.Committed).
	// The runtime has its subscribers that are behind that seq read the
	// events up to it from the Store. It must not block. A panic of it is
	// logged and recovered.
	Revived func(lastSeq uint64)
	// Goroutines tracks the goroutines the actor starts (model calls, tool
	// runs, loads, summaries), so their owner can wait for them on close.
	// Nil means untracked.
	Goroutines *sync.WaitGroup
	// Dispatcher runs the actor's mailbox. Nil means protoactor's default
	// (a new goroutine each time the mailbox gets work); the supervisor
	// passes its WorkerDispatcher.
	Dispatcher actor.Dispatcher
	// Logger receives diagnostics. Default: discard.
	Logger *slog.Logger
}

// NewConversation returns the props of a conversation actor. The actor
// revives itself from the Store when it starts, then serves Commands.
func NewConversation(cfg ConversationConfig) *actor.Props {
	if cfg.Clock == nil {
		cfg.Clock = SystemClock()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Goroutines == nil {
		cfg.Goroutines = new(sync.WaitGroup)
	}
	if cfg.ModelGate == nil {
		cfg.ModelGate = new(ModelGate)
	}
	if cfg.ToolGate == nil {
		cfg.ToolGate = new(ToolGate)
	}
	if publish, log := cfg.Publish, cfg.Logger; publish != nil {
		// A subscriber's failure must not stop the conversation, nor cut
		// short the step whose update it was (see callback).
		cfg.Publish = func(u Update) { callback(log, "ConversationConfig.Publish", func() { publish(u) }) }
	}
	if revived, log := cfg.Revived, cfg.Logger; revived != nil {
		cfg.Revived = func(seq uint64) { callback(log, "ConversationConfig.Revived", func() { revived(seq) }) }
	}
	cfg.Policy = cfg.Policy.WithDefaults()
	cfg.Retry = cfg.Retry.WithDefaults()
	if cfg.MaxInvalidToolAnswers == 0 {
		cfg.MaxInvalidToolAnswers = DefaultMaxInvalidToolAnswers
	}
	var opts []actor.PropsOption
	if cfg.Dispatcher != nil {
		opts = append(opts, actor.WithDispatcher(cfg.Dispatcher))
	}
	return actor.PropsFromProducer(func() actor.Actor {
		log := cfg.Logger.With("conversation", cfg.ID)
		return &conversation{cfg: cfg, log: log, core: newCore(coreConfig{
			ID: cfg.ID, Tools: cfg.Tools, HumanTimeout: cfg.HumanTimeout, Policy: cfg.Policy,
			Summarize: cfg.Summarizer != nil, Settings: cfg.Settings, Retry: cfg.Retry, MaxInvalidToolAnswers: cfg.MaxInvalidToolAnswers,
			Agents: cfg.Agents, Audit: cfg.Audit,
		}, log)}
	}, opts...)
}

// Local-only notifications from the timers the actor arms. The goroutines
// it owns send the core's inputs (inLoaded, inModelDone, inToolDone,
// inSummaryDone) straight to it.
type (
	idleTick struct{ gen uint64 }
	// retryTick ends the wait before a retry of the model call.
	retryTick struct{ gen uint64 }
	// releaseProcessRef is sent by a stopped actor to itself; see Receive.
	releaseProcessRef struct{}
)

// IgnoreDeadLetterLogging keeps protoactor from logging releaseProcessRef,
// which always ends as a dead letter.
func (releaseProcessRef) IgnoreDeadLetterLogging() {}

// conversation is the actor of one conversation: a thin driver of its core
// (core.go), which decides everything. The driver turns what arrives in
// the mailbox into the core's inputs, and performs the effects the core
// returns: journal writes, model calls, tool runs and summaries on
// goroutines it owns, replies, publications and timers.
type conversation struct {
	cfg  ConversationConfig
	log  *slog.Logger
	core *core

	goCtx    context.Context
	goCancel context.CancelFunc

	barrier    bool // waiting for JournalBarrierDone before loading
	passivated bool

	modelCancel context.CancelFunc
	retryStop   func() bool
	// toolRuns are the server runs in flight, by tool call id (see
	// effCancelTool); an entry leaves when its run reports back.
	toolRuns map[string]toolRun

	idleGen  uint64
	idleStop func() bool
}

func (c *conversation) Receive(ctx actor.Context) {
	defer c.recoverReceive(ctx)
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		c.start(ctx)
	case *actor.Stopping:
		c.apply(ctx, &inStop{cause: fmt.Errorf("conversation %q: %w", c.cfg.ID, ErrAgentStopped)})
	case *actor.Stopped:
		// protoactor keeps removed children's PIDs in the backing array of
		// the parent's PIDSet, and a PID caches a reference to its actor's
		// process: left alone, every passivated actor stays reachable, with
		// its whole working set. A message to the dead PID makes protoactor
		// drop that cached reference (it is then a dead letter, not logged).
		ctx.Send(ctx.Self(), releaseProcessRef{})
	case *actor.Restarting:
	case *JournalBarrierDone:
		if c.barrier {
			c.startLoad(ctx)
		}
	case *Command:
		in := &inCommand{cmd: msg}
		if s := ctx.Sender(); s != nil {
			in.sender = s
		}
		c.apply(ctx, in)
	case *messages.AgentStop:
		// The kill order: everything queued before it has been processed.
		c.apply(ctx, &inStop{cause: fmt.Errorf("conversation %q killed: %w", c.cfg.ID, ErrAgentStopped), retire: true})
	case *messages.JournalWriteReply:
		c.apply(ctx, &inWriteReply{id: msg.GetRequestId(), err: journal.ErrorFromProto(msg.GetReply().GetError())})
	case *actor.DeadLetterResponse:
		if c.barrier {
			// The journal actor is gone: it answered what it held before
			// it stopped, so nothing is left to wait for.
			c.startLoad(ctx)
			return
		}
		// The journal actor is gone (restarting, or the runtime is closing):
		// the write's outcome is unknown, so the core stops and the next
		// command revives from the log.
		c.apply(ctx, &inJournalGone{})
	case *inLoaded:
		if msg.err == nil && c.cfg.Revived != nil {
			// Before the step: what the activation publishes comes after.
			c.cfg.Revived(msg.ws.LastSeq)
		}
		c.apply(ctx, msg)
	case *inToolDone:
		c.endToolRun(msg.id, false)
		c.apply(ctx, msg)
	case *inModelDone, *inSummaryDone:
		c.apply(ctx, msg)
	case *idleTick:
		c.onIdle(ctx, msg)
	case *retryTick:
		c.apply(ctx, &inRetryTick{gen: msg.gen})
	}
}

// apply steps the core with in and performs its effects in order, the
// idle timer's touch first (see idleFirst).
func (c *conversation) apply(ctx actor.Context, in any) {
	for _, e := range idleFirst(c.core.step(c.cfg.Clock.Now(), in)) {
		c.perform(ctx, e)
	}
}

// idleFirst returns a step's effects with its idle timer touches made one,
// performed first. touchIdle reads only the core's state after the step,
// the same for every touch of it, and each touch replaces the timer armed
// before, so one is enough; done first, whoever hears of the step (a
// caller's answer, a subscriber's update) finds the idle timer it left
// already armed, not one about to be replaced. Under a manual clock,
// advancing past the timer seen then fires the one that passivates.
func idleFirst(effs []effect) []effect {
	touch := func(e effect) bool { _, ok := e.(effTouchIdle); return ok }
	if !slices.ContainsFunc(effs, touch) {
		return effs
	}
	return slices.Insert(slices.DeleteFunc(effs, touch), 0, effect(effTouchIdle{}))
}

func (c *conversation) perform(ctx actor.Context, e effect) {
	switch e := e.(type) {
	case effReply:
		ctx.Send(e.to.(*actor.PID), e.msg)
	case effWrite:
		ctx.Request(c.cfg.Journal, &messages.JournalWrite{RequestId: e.id, Request: e.req})
	case effStartModel:
		c.startModel(ctx, e)
	case effCancelModel:
		if c.modelCancel != nil {
			c.modelCancel()
		}
	case effRunTool:
		c.runTool(ctx, e.inv)
	case effCancelTool:
		c.endToolRun(e.id, true)
	case effSummarize:
		c.summarize(ctx, e.plan)
	case effArmRetry:
		gen, send := e.gen, tell(ctx)
		c.retryStop = c.cfg.Clock.AfterFunc(e.delay, func() { send(&retryTick{gen: gen}) })
	case effCancelRetry:
		c.cancelRetry()
	case effPublish:
		if c.cfg.Publish != nil {
			c.cfg.Publish(e.u)
		}
	case effTouchIdle:
		c.touchIdle(ctx)
	case effRetire:
		if c.cfg.Stopped != nil {
			c.cfg.Stopped(e.cause)
		}
		if c.cfg.Retire != nil {
			c.cfg.Retire(c.core.processed, true)
		}
	case effHalt:
		c.cancelGoroutines()
		c.disarmIdle()
		if e.poison {
			ctx.Poison(ctx.Self())
		}
	case effFenced:
		if c.cfg.Fenced != nil {
			c.cfg.Fenced(e.committed)
		}
	case effUnknown:
		if c.cfg.Unknown != nil {
			c.cfg.Unknown(e.committed)
		}
	}
}

// recoverReceive, deferred by Receive, stops the activation the ordinary
// way when Receive panics (a bug): every command it holds or that is queued
// behind the message is answered with ErrAgentStopped, which tells callers
// to retry on a new activation, and that one revives from the log. Left to
// protoactor, the panic would stop the actor with its queued commands
// unanswered, their callers waiting out their timeout. A panic while
// stopping is left to the supervisor's strategy, which stops the actor.
func (c *conversation) recoverReceive(ctx actor.Context) {
	if c.core.stopped() {
		return
	}
	p := recover()
	if p == nil {
		return
	}
	c.log.Error("conversation actor panicked; stopping it", "panic", p, "stack", string(debug.Stack()))
	c.apply(ctx, &inStop{cause: fmt.Errorf("conversation %q: actor panicked: %v: %w", c.cfg.ID, p, ErrAgentStopped), retire: true})
}

// cancelGoroutines cancels the context of every goroutine the actor owns:
// goCtx, and the model call's, which is not derived from it; and the timer
// of a model call's retry.
func (c *conversation) cancelGoroutines() {
	c.goCancel()
	if c.modelCancel != nil {
		c.modelCancel()
	}
	c.cancelRetry()
}

// cancelRetry stops the timer of a retry.
func (c *conversation) cancelRetry() {
	if c.retryStop != nil {
		c.retryStop()
		c.retryStop = nil
	}
}

// goOwned runs f on a goroutine owned by this actor: it gets a context that
// is cancelled when the actor stops, and its owner's WaitGroup tracks it.
func (c *conversation) goOwned(f func(ctx context.Context)) {
	c.cfg.Goroutines.Add(1)
	go func() {
		defer c.cfg.Goroutines.Done()
		f(c.goCtx)
	}()
}

// tell sends a local notification to the actor from one of its goroutines.
func tell(ctx actor.Context) func(msg any) {
	self, root := ctx.Self(), ctx.ActorSystem().Root
	return func(msg any) { root.Send(self, msg) }
}

// start reads the log once the journal actor has answered every write of
// the conversation it holds (JournalBarrier): a write that a killed
// predecessor left there lands first, and the revival reads it.
func (c *conversation) start(ctx actor.Context) {
	c.goCtx, c.goCancel = context.WithCancel(context.Background())
	if c.cfg.Journal == nil {
		c.startLoad(ctx)
		return
	}
	c.barrier = true
	ctx.Request(c.cfg.Journal, &JournalBarrier{ConversationID: c.cfg.ID})
}

// startLoad starts the revival read. It runs once: from start, or on the
// first answer to the barrier (which clears c.barrier).
func (c *conversation) startLoad(ctx actor.Context) {
	c.barrier = false
	if c.core.stopped() {
		return
	}
	send := tell(ctx)
	store, id, loader, log := c.cfg.Store, c.cfg.ID, c.cfg.ScopeLoader, c.log
	c.goOwned(func(gctx context.Context) {
		l := load(gctx, store, id)
		if l.err == nil {
			l.scope = resumeScope(gctx, l.ws, loader, log)
			l.callScopes = callScopes(gctx, l, loader, log)
		}
		send(l)
	})
}

func (c *conversation) runTool(ctx actor.Context, inv agent.Invocation) {
	send := tell(ctx)
	tools, gate, clock := c.cfg.Tools, c.cfg.ToolGate, c.cfg.Clock
	timeout := runTimeout(tools, inv.Name, c.cfg.ToolTimeout)
	var hookErr error
	if c.cfg.Checkpoints != nil {
		inv.Files, hookErr = checkpointsOf(c.cfg.Checkpoints, inv, c.log)
	}
	// The run's own context: cancelled by a rewind that cancels its call
	// (effCancelTool) and when the activation stops (goCtx). It is not a
	// child of goCtx, so that a run that returned is forgotten without
	// cancelling the context the tool saw (its Cause stays the bound's).
	runCtx, cancel := context.WithCancel(context.Background())
	if c.toolRuns == nil {
		c.toolRuns = map[string]toolRun{}
	}
	c.toolRuns[inv.ToolCallID] = toolRun{cancel: cancel, unlink: context.AfterFunc(c.goCtx, cancel)}
	c.goOwned(func(gctx context.Context) {
		var out *messages.ToolOutcome
		if hookErr != nil {
			// The tool is not run: its outcome is the panic's, as when
			// its Run panics.
			out = agent.ErrorOutcome(agent.CodePanic, hookErr.Error())
		} else if tools == nil {
			out = &messages.ToolOutcome{Outcome: &messages.ToolOutcome_Error{Error: &messages.ToolError{Code: "tool", Message: "no tools are registered"}}}
		} else {
			// A run of this call by a killed activation may still be
			// winding down: a tool never runs twice at once for one id.
			// An activation that stops while it waits runs nothing; its
			// successor dispatches the call again. A run whose call a
			// rewind cancels while it waits runs nothing either.
			leave, err := gate.enter(runCtx, inv.ConversationID, inv.ToolCallID)
			if err != nil {
				return // stopped, or its call cancelled (a rewind): nothing ran
			}
			release := func() bool { return false }
			defer func() {
				if out == nil {
					// The tool ended this goroutine (runtime.Goexit, as
					// t.FailNow does): RunServer never returned, but
					// deferred calls run. The call ends as for a panic,
					// and the gate is left: else the turn waited for ever
					// and so did every later run of the call.
					release()
					cancel()
					leave()
					out = agent.ErrorOutcome(agent.CodePanic, fmt.Sprintf("tool %s ended its run with runtime.Goexit", inv.Name))
					if gctx.Err() == nil {
						send(&inToolDone{id: inv.ToolCallID, outcome: out})
					}
				}
			}()
			if timeout > 0 {
				// The bound starts past the gate, as the model's does.
				var rctx context.Context
				rctx, release = withClockTimeout(runCtx, clock, timeout)
				out = tools.RunServer(rctx, inv) // recovers the tool's panics
				if release() && out.GetError().GetCode() == agent.CodeCanceled {
					// The bound ended the run: a tool error the model
					// sees. A result returned all the same stands.
					out = timedOutOutcome(inv.Name, timeout, out)
				}
			} else {
				out = tools.RunServer(runCtx, inv)
				cancel() // ended at its return, as release ends a bounded one
			}
			leave()
		}
		if gctx.Err() == nil {
			send(&inToolDone{id: inv.ToolCallID, outcome: out})
		}
	})
}

// toolRun is a server run in flight: cancel ends its context, unlink
// stops the activation's stop from cancelling it.
type toolRun struct {
	cancel context.CancelFunc
	unlink func() bool
}

// endToolRun forgets the server run of call id, if one is in flight, and
// cancels its context if abandon: its call was cancelled. A run that
// returned is forgotten with its context left as the tool last saw it.
func (c *conversation) endToolRun(id string, abandon bool) {
	if r, ok := c.toolRuns[id]; ok {
		if abandon {
			r.cancel()
		}
		r.unlink()
		delete(c.toolRuns, id)
	}
}

// checkpointsOf runs the Checkpoints hook for inv, recovering its panic
// into an error wrapping agent.ErrPanicked. Left to recoverReceive, a
// panic stopped the activation, and each next one dispatched the open
// call again and panicked alike: the conversation was stuck for good.
func checkpointsOf(hook func(agent.Invocation) agent.Checkpointer, inv agent.Invocation, log *slog.Logger) (cp agent.Checkpointer, err error) {
	defer recoverInto(&err, log, "file checkpoints of tool "+inv.Name)
	return hook(inv), nil
}

func (c *conversation) startModel(ctx actor.Context, e effStartModel) {
	// Not a child of goCtx: registering one with it on every turn cost ~1%
	// of the CPU per event. cancelGoroutines cancels both. The model
	// timeout cancels it with the cause errModelTimedOut; any other
	// cancel (the actor's) with context.Canceled.
	turnCtx, cancelCause := context.WithCancelCause(context.Background())
	cancel := func() { cancelCause(nil) }
	// deltaMu is held while a delta is published: the cancel waits for
	// one under way, so that no delta of the call is published once the
	// cancel has returned (after the Restart that voids the call, say).
	var deltaMu sync.Mutex
	c.modelCancel = func() {
		cancel()
		deltaMu.Lock()
		//lint:ignore SA2001 a barrier: it waits for a delta under way
		deltaMu.Unlock()
	}
	turn := e.in
	id, model, store, audit, clock, gate, timeout := e.turn, c.cfg.Model, c.cfg.Store, c.cfg.Audit, c.cfg.Clock, c.cfg.ModelGate, c.cfg.ModelTimeout
	if m := c.cfg.Agents[turn.Agent].Model; turn.Agent != "" && m != nil {
		model = m
	}
	lastSeq := e.lastSeq
	send := tell(ctx)
	log := c.log
	var onDelta func(string)
	if publish, conv := c.cfg.Publish, c.cfg.ID; publish != nil {
		onDelta = func(text string) {
			deltaMu.Lock()
			defer deltaMu.Unlock()
			if turnCtx.Err() == nil {
				publish(Update{ConversationID: conv, Delta: text, Agent: turn.Agent, After: lastSeq})
			}
		}
	}
	c.goOwned(func(gctx context.Context) {
		defer cancel()
		// The previous call of the conversation may still be winding down
		// (cancelled by a newer message or a kill): Generate is never
		// called twice at once for one conversation.
		leave, err := gate.enter(turnCtx, turn.ConversationID)
		if err != nil {
			send(&inModelDone{turn: id, err: err}) // a cancelled turn: ignored
			return
		}
		began := clock.Now()
		stopTimer := func() bool { return false }
		if timeout > 0 {
			stopTimer = clock.AfterFunc(timeout, func() { cancelCause(errModelTimedOut) })
		}
		returned := false
		defer func() {
			if !returned {
				// The model ended this goroutine (runtime.Goexit):
				// deferred calls run. The turn fails as for a panic,
				// and the gate is left for the turns after it.
				log.Error("model " + errGoexit.Error())
				stopTimer()
				leave()
				send(&inModelDone{turn: id, err: fmt.Errorf("model: %w: %v", agent.ErrPanicked, errGoexit)})
			}
		}()
		msg, err := generate(turnCtx, log, model, turn, onDelta)
		returned = true
		// The timer fired (its cancel may still be on its way: it is
		// made here too). It ended the call unless the actor's own
		// cancel came first, which voids the call.
		expired := timeout > 0 && !stopTimer()
		if expired {
			cancelCause(errModelTimedOut)
		}
		timedOut := expired && context.Cause(turnCtx) == errModelTimedOut
		if err == nil && msg == nil {
			err = errors.New("model returned no message")
		}
		if timedOut && err != nil {
			// Whatever the model made of the cancel: the bound ended it.
			// An answer it returned all the same stands.
			err = fmt.Errorf("no answer within the model timeout, %v: %w (the model returned: %v)", timeout, context.DeadlineExceeded, err)
		}
		// A call cancelled before it returned is void: no row. The row is
		// written before the gate is left, so that the rows of one
		// conversation's calls are written in the order of the calls (a
		// retry's row replaces its failed call's, never the reverse).
		if audit && (turnCtx.Err() == nil || timedOut) {
			now := clock.Now()
			mc := &messages.ModelCall{
				ConversationId: turn.ConversationID, TurnRef: lastSeq, RenderedContext: turn.Context, LatencyNanos: int64(now.Sub(began)),
				Summary: turn.Summary, SummaryVersion: turn.Summary.GetVersion(), Evictions: e.evicted, Created: journal.Timestamp(now),
				Settings: auditSettings(turn.Settings), Tools: toolNames(turn.Tools), Agent: turn.Agent,
			}
			if err != nil {
				mc.Error = &messages.ModelCallError{Message: turnErrorText(err), Code: TurnFailureCode(err)}
			} else {
				mc.Model, mc.Usage = msg.GetModel(), msg.GetUsage()
			}
			wctx := turnCtx
			if timedOut {
				wctx = gctx // turnCtx is done; the actor's stop still ends the write
			}
			putModelCall(wctx, store, log, mc)
		}
		leave()
		send(&inModelDone{turn: id, msg: msg, err: err})
	})
}

// auditSettings returns the settings a model call was made with, as an
// audit row keeps them: the fields that are set.
func auditSettings(s agent.Settings) map[string]string {
	m := s.Map()
	maps.DeleteFunc(m, func(_, v string) bool { return v == "" })
	if len(m) == 0 {
		return nil
	}
	return m
}

// toolNames returns the names of the tools offered to the model, in their
// order (Turn.Tools is sorted by name).
func toolNames(specs []agent.ToolSpec) []string {
	if len(specs) == 0 {
		return nil
	}
	names := make([]string, len(specs))
	for i, spec := range specs {
		names[i] = spec.Name
	}
	return names
}

func (c *conversation) summarize(ctx actor.Context, plan snapshot.Plan) {
	id, store, summarizer, log, gate := c.cfg.ID, c.cfg.Store, c.cfg.Summarizer, c.log, c.cfg.ModelGate
	if summarizer != nil && c.cfg.ModelTimeout > 0 {
		// A summarizer that calls a model holds the gate: unbounded, a
		// model that never answers would hold every later turn.
		summarizer = timedSummarizer{s: summarizer, clock: c.cfg.Clock, timeout: c.cfg.ModelTimeout}
	}
	send := tell(ctx)
	c.goOwned(func(gctx context.Context) {
		// The summarizer may call a model (snapshot.LLM, often the
		// conversation's own): it takes its turn at the gate, so that
		// Generate is never called twice at once for one conversation.
		leave, err := gate.enter(gctx, id)
		if err != nil {
			send(&inSummaryDone{err: err})
			return
		}
		returned := false
		defer func() {
			if !returned {
				// The summarizer ended this goroutine (runtime.Goexit):
				// the summary is skipped as for a panic, the gate left.
				log.Error("summarizer " + errGoexit.Error())
				leave()
				send(&inSummaryDone{err: fmt.Errorf("summarizer: %w: %v", agent.ErrPanicked, errGoexit)})
			}
		}()
		s, err := summarize(gctx, log, plan, summarizer, id)
		returned = true
		leave()
		if err == nil {
			// Derived data: written directly, never through the log.
			err = store.PutSummary(gctx, id, s)
		}
		send(&inSummaryDone{summary: s, err: err})
	})
}

func (c *conversation) touchIdle(ctx actor.Context) {
	if c.cfg.IdleTimeout <= 0 || c.cfg.Retire == nil || c.core.stopped() || c.passivated {
		return
	}
	c.disarmIdle()
	if !c.core.quiescent() {
		return
	}
	c.idleGen++
	gen, send := c.idleGen, tell(ctx)
	c.idleStop = c.cfg.Clock.AfterFunc(c.cfg.IdleTimeout, func() { send(&idleTick{gen: gen}) })
}

func (c *conversation) disarmIdle() {
	if c.idleStop != nil {
		c.idleStop()
		c.idleStop = nil
	}
}

func (c *conversation) onIdle(ctx actor.Context, t *idleTick) {
	if t.gen != c.idleGen || !c.core.quiescent() || c.core.stopped() || c.passivated {
		return
	}
	if c.cfg.Retire(c.core.processed, false) {
		c.log.Debug("passivated")
		c.passivated = true
		ctx.Stop(ctx.Self())
	}
	// Otherwise a command is on its way; it will re-arm the timer.
}

// resumeScope returns the scope work resumed by a revival runs with: the
// loader's rebuild of the requester's identity, or SystemScope when there
// is no loader, no named requester, nothing to resume, or the loader fails.
func resumeScope(ctx context.Context, ws *snapshot.WorkingSet, loader agent.ScopeLoader, log *slog.Logger) (scope agent.Scope) {
	if len(ws.OpenCalls()) == 0 && !ws.EndsWithUserMsg() && ws.LastRendered().GetToolResult() == nil &&
		!ws.HoldsAgents() && len(ws.Summary.GetOwed()) == 0 {
		// Nothing to resume: the loader is not needed. With named agents'
		// events the turn owed need not follow the last event (a handoff,
		// an older message of another agent, Summary.owed): it is loaded.
		return agent.SystemScope
	}
	return loadScope(ctx, agent.IdentityOf(ws.Requester()), loader, log)
}

// putModelCall writes the audit row mc, logging a failure: the audit never
// fails a turn. A panic of the Store is logged as a failure too, so the
// model call goroutine always goes on to leave the conversation's gate.
func putModelCall(ctx context.Context, store journal.Audit, log *slog.Logger, mc *messages.ModelCall) {
	defer func() {
		if p := recover(); p != nil {
			log.Error("audit write panicked", "panic", p, "stack", string(debug.Stack()))
		}
	}()
	if err := store.PutModelCall(ctx, mc); err != nil {
		log.Warn("audit write failed", "err", err)
	}
}

// loadScope rebuilds id's scope with loader, or returns SystemScope when
// id names nobody or the loader fails or panics.
func loadScope(ctx context.Context, id agent.Identity, loader agent.ScopeLoader, log *slog.Logger) (scope agent.Scope) {
	if loader == nil || id.UserID == "" || id.UserID == agent.SystemUserID {
		return agent.SystemScope
	}
	defer func() {
		if p := recover(); p != nil {
			log.Error("scope loader panicked; resumed work runs under the system scope", "panic", p, "stack", string(debug.Stack()))
			scope = agent.SystemScope
		}
	}()
	scope, err := loader(ctx, id)
	if err != nil {
		log.Warn("scope loader failed; resumed work runs under the system scope", "user", id.UserID, "err", err)
		return agent.SystemScope
	}
	return scope
}

// callScopes returns the scopes of the open server calls a revival runs
// again whose requester (their row's) is not the log's: a message of
// another user may have landed after the answer that made them. Each
// runs for its own requester; the others run with scope, the log's.
func callScopes(ctx context.Context, l *inLoaded, loader agent.ScopeLoader, log *slog.Logger) map[string]agent.Scope {
	newest := agent.IdentityOf(l.ws.Requester())
	var out map[string]agent.Scope
	byUser := map[string]agent.Scope{}
	for _, ev := range l.ws.OpenCalls() {
		row := l.rows[ev.GetCall().GetId()]
		if ev.GetExecutor() != messages.Executor_EXECUTOR_SERVER || row == nil || journal.IsTerminal(row.GetStatus()) ||
			row.GetRequester() == nil {
			continue // not run again, or a row that names no requester (an anonymous one's): the log's
		}
		id := agent.IdentityOf(row.GetRequester())
		if id.UserID == newest.UserID && slices.Equal(id.Roles, newest.Roles) {
			continue
		}
		key := id.UserID + "\x00" + strings.Join(id.Roles, "\x00")
		scope, ok := byUser[key]
		if !ok {
			scope = loadScope(ctx, id, loader, log)
			byUser[key] = scope
		}
		if out == nil {
			out = map[string]agent.Scope{}
		}
		out[ev.GetCall().GetId()] = scope
	}
	return out
}

// load is the revival read: the latest summary and the events after it,
// the conversation row, and the rows of the calls still open in that span.
//
// The row is read after the log, never before: the activation trusts the
// row's status (setRow does not state ACTIVE again over a row it read
// ACTIVE), and a row read before another writer's commit (a member that
// still believed it owned the conversation) would say ACTIVE over a log
// whose turn that commit answered, and the activation's next send would
// leave the row IDLE with a turn owed, which no resume scan finds. A row
// read after the log is as new as it or newer; newer only if some write
// landed in between, which fences this activation's first write.
func load(ctx context.Context, store journal.Store, id string) *inLoaded {
	summary, events, err := store.LoadSince(ctx, id)
	if err != nil {
		return &inLoaded{err: err}
	}
	if err := checkTail(ctx, store, id, summary, events); err != nil {
		return &inLoaded{err: err}
	}
	conv, err := store.Conversation(ctx, id)
	if err != nil && !errors.Is(err, journal.ErrNotFound) {
		return &inLoaded{err: err}
	}
	ws, err := snapshot.Rebuild(summary, events)
	if err != nil {
		return &inLoaded{err: err}
	}
	var owed map[string]bool // read once, if a summary needs the look
	for {
		// A rewind moved the head below the summary: the working set
		// starts from the latest summary ending at or before its target
		// (none: from the start), so the next summary is made of the
		// effective history. That summary may itself lie in a span an
		// earlier rewind skipped (it was made before that rewind): then
		// the walk from the head meets that rewind below it, and an
		// earlier one is taken again. A summary that ends inside a tool
		// call (snapshot.WorkingSet.CutsACall, with the calls the Store
		// owes) is passed over for an earlier one too.
		// Each round starts from a summary ending before the last one's,
		// so this ends.
		if to, below := ws.RewoundPastSummary(); below {
			if ws, err = rebuildBefore(ctx, store, id, to); err != nil {
				return &inLoaded{err: err}
			}
			continue
		}
		if ws.Summary == nil {
			break
		}
		if owed == nil {
			if owed, err = owedCalls(ctx, store, id, conv); err != nil {
				return &inLoaded{err: err}
			}
		}
		if !ws.CutsACall(owed) {
			break
		}
		if ws, err = rebuildBefore(ctx, store, id, ws.Summary.GetToSeq()-1); err != nil {
			return &inLoaded{err: err}
		}
	}
	rows, err := openCallRows(ctx, store, id, ws)
	if err != nil {
		return &inLoaded{err: err}
	}
	return &inLoaded{ws: ws, rows: rows, conv: conv}
}

// SummaryCutsACall reports whether sum, a summary of conversation id,
// ends inside a tool call as a revival decides it (load passes such a
// summary over): events are the events right after it that the caller
// read, in order (ToSeq+1 on); it reads the rest of the log and the calls
// the conversation owes. A fork takes the history before such a summary
// from an earlier one: copied with it, the fork would owe no call open at
// the fork point, or start with a result whose call it does not hold.
// It reads the rest a bounded page at a time (cutReadPage events,
// cutReadBytes, one event at least), keeping the ids of the calls issued
// (snapshot.CutFinder), not the events.
func SummaryCutsACall(ctx context.Context, store journal.Store, id string, sum *messages.Summary, events []*messages.Event) (bool, error) {
	return summaryCutsACall(ctx, store, id, sum, events, cutReadBytes)
}

// cutReadPage and cutReadBytes bound each read of SummaryCutsACall.
const (
	cutReadPage  = 512
	cutReadBytes = 16 << 20
)

func summaryCutsACall(ctx context.Context, store journal.Store, id string, sum *messages.Summary, events []*messages.Event, pageBytes int) (bool, error) {
	ws, err := snapshot.Rebuild(sum, events)
	if err != nil {
		return false, err
	}
	var f snapshot.CutFinder
	for _, ev := range events {
		f.Add(ev)
	}
	for after := ws.LastSeq; ; {
		page, err := store.Events(ctx, id, journal.EventQuery{After: after, Before: after + cutReadPage + 1, MaxBytes: pageBytes})
		if err != nil {
			return false, err
		}
		if len(page) == 0 {
			break
		}
		// Checked as Rebuild checks the events it is given: contiguous
		// from the last seq read, rewinds backwards.
		if err := (&snapshot.WorkingSet{LastSeq: after}).Append(page...); err != nil {
			return false, err
		}
		for _, ev := range page {
			f.Add(ev)
		}
		after = page[len(page)-1].GetSeq()
	}
	conv, err := store.Conversation(ctx, id)
	if err != nil {
		return false, err
	}
	owed, err := owedCalls(ctx, store, id, conv)
	if err != nil {
		return false, err
	}
	return sum != nil && f.Cuts(owed), nil
}

// owedCalls returns the ids of the calls conversation id owes results for,
// as the Store says outside the log: its pending rows, and the calls its
// fsm_state cache (conv's) lists as pending, which include those answered
// in the Store whose answer the log does not hold yet. The cache may be
// stale; CutsACall only asks whether each was issued after the summary.
func owedCalls(ctx context.Context, store journal.Store, id string, conv *messages.Conversation) (map[string]bool, error) {
	rows, err := store.PendingToolCalls(ctx, id)
	if err != nil {
		return nil, err
	}
	owed := make(map[string]bool, len(rows)+len(conv.GetFsmState().GetPending()))
	for _, row := range rows {
		owed[row.GetId()] = true
	}
	for call := range conv.GetFsmState().GetPending() {
		owed[call] = true
	}
	return owed, nil
}

// checkTail returns an error wrapping journal.ErrCorrupt, naming the
// conversation and both seqs, if the latest summary ends after the log's
// last event: the store lost events the summary covers (a lost tail, as
// lazarus check reports it). Taken as it is, the activation would expect
// the summary's end as the log's last seq, and the Store would refuse its
// every write as a conflict. Only a summary no event follows needs the
// look (one LastSeq read): when events follow it, the adapter's revival
// read already checks that the first is its ToSeq+1. The log only grows
// while the conversation exists, so a LastSeq below the summary's end is
// damage, unless the conversation was deleted since the first read.
func checkTail(ctx context.Context, store journal.Store, id string, summary *messages.Summary, events []*messages.Event) error {
	if summary == nil || len(events) > 0 {
		return nil
	}
	last, err := store.LastSeq(ctx, id)
	if err != nil {
		return err
	}
	if last >= summary.GetToSeq() {
		return nil
	}
	if _, err := store.Conversation(ctx, id); errors.Is(err, journal.ErrDeleted) {
		return err
	}
	return journal.Corruptf("conversation %q: its latest summary ends at seq %d, the log at seq %d: the store lost events %d..%d (a lost tail; run lazarus check)",
		id, summary.GetToSeq(), last, last+1, summary.GetToSeq())
}

// openCallRows returns the rows of the calls open in ws, by id. An open
// call a revival can neither run again nor wait on is damage, and the
// error wraps journal.ErrCorrupt naming its tool_call event's seq: the
// event has a call id no row can have (empty, oversized), or an executor
// that is neither server nor human, or the call has no row of its own (the
// row is written with the event, so it was lost, or the id is another
// conversation's), or its row is damaged (the Store's ErrCorrupt, say a
// status that is not a value of its enum, wrapped with the seq). No write of the runtime leaves one; taken as it is, the
// activation would owe a result nobody can give (an answer needs the row),
// run a server call again on every command only to have its result
// refused, or take another conversation's result.
func openCallRows(ctx context.Context, store journal.Store, id string, ws *snapshot.WorkingSet) (map[string]*messages.ToolCallRecord, error) {
	open := ws.OpenCalls()
	rows := make(map[string]*messages.ToolCallRecord, len(open))
	if len(open) == 0 {
		return rows, nil
	}
	isOpen := make(map[*messages.ToolCallEvent]bool, len(open))
	for _, tc := range open {
		isOpen[tc] = true
	}
	for _, ev := range ws.Events {
		tc := ev.GetToolCall()
		if tc == nil || !isOpen[tc] {
			continue
		}
		call := tc.GetCall().GetId()
		switch tc.GetExecutor() {
		case messages.Executor_EXECUTOR_SERVER, messages.Executor_EXECUTOR_HUMAN:
		default:
			return nil, journal.Corruptf("tool_call event at seq %d (call %q) has executor %v, neither server nor human", ev.GetSeq(), call, tc.GetExecutor())
		}
		if err := journal.ValidateID("tool call id", call); err != nil {
			return nil, journal.Corruptf("tool_call event at seq %d: %v", ev.GetSeq(), err)
		}
		row, err := store.ToolCall(ctx, call)
		switch {
		case errors.Is(err, journal.ErrNotFound):
			return nil, journal.Corruptf("open call %q of the tool_call event at seq %d has no row", call, ev.GetSeq())
		case errors.Is(err, journal.ErrCorrupt):
			// The row is damaged (the Store's error names its key).
			return nil, fmt.Errorf("open call %q of the tool_call event at seq %d: %w", call, ev.GetSeq(), err)
		case err != nil:
			return nil, err
		case row.GetConversationId() != id:
			return nil, journal.Corruptf("open call %q of the tool_call event at seq %d has the row of conversation %q", call, ev.GetSeq(), row.GetConversationId())
		}
		rows[call] = row
	}
	return rows, nil
}

// generate calls the model, recovering a panic into an error wrapping
// agent.ErrPanicked: the turn then fails as for any model error.
func generate(ctx context.Context, log *slog.Logger, model agent.Model, turn agent.Turn, onDelta func(string)) (msg *messages.AssistantMessage, err error) {
	defer recoverInto(&err, log, "model")
	return model.Generate(ctx, turn, onDelta)
}

// summarize runs a summary plan, recovering a panic of the summarizer into
// an error wrapping agent.ErrPanicked: the summary is then skipped.
func summarize(ctx context.Context, log *slog.Logger, plan snapshot.Plan, s snapshot.Summarizer, id string) (sum *messages.Summary, err error) {
	defer recoverInto(&err, log, "summarizer")
	return plan.Run(ctx, s, id)
}

// timedSummarizer bounds each Summarize of s (one per agent of a summary
// plan; snapshot.LLM makes one model call in each) by timeout on clock, as
// ModelTimeout bounds a model call: when it passes, the call's context is
// cancelled (cause errModelTimedOut), and an error the summarizer then
// returns is wrapped as context.DeadlineExceeded. A summary it returned
// all the same stands.
type timedSummarizer struct {
	s       snapshot.Summarizer
	clock   Clock
	timeout time.Duration
}

func (t timedSummarizer) Summarize(ctx context.Context, id string, prev *messages.Summary, events []*messages.Event) (*messages.Summary, error) {
	ctx, cancelCause := context.WithCancelCause(ctx)
	defer cancelCause(nil)
	stop := t.clock.AfterFunc(t.timeout, func() { cancelCause(errModelTimedOut) })
	defer stop() // a panic of s: the timer is not left armed
	sum, err := t.s.Summarize(ctx, id, prev, events)
	if !stop() {
		cancelCause(errModelTimedOut) // the timer fired; its cancel may be on its way
	}
	if err != nil && context.Cause(ctx) == errModelTimedOut {
		err = fmt.Errorf("summary: no answer within the model timeout, %v: %w (the summarizer returned: %v)", t.timeout, context.DeadlineExceeded, err)
	}
	return sum, err
}

// recoverInto, deferred around a call of user code, turns its panic into
// *err and logs the panic's stack.
// errGoexit is what a model, summarizer or tool that ended its goroutine
// with runtime.Goexit (as t.FailNow does) did instead of returning.
var errGoexit = errors.New("ended its goroutine with runtime.Goexit")

func recoverInto(err *error, log *slog.Logger, what string) {
	if p := recover(); p != nil {
		*err = fmt.Errorf("%s: %w: %v", what, agent.ErrPanicked, p)
		log.Error(what+" panicked", "panic", p, "stack", string(debug.Stack()))
	}
}

// idEncoding is base32 with an alphabet in byte order, so that the
// encodings of equal-length byte strings sort as the bytes do.
var idEncoding = base32.NewEncoding("234567abcdefghijklmnopqrstuvwxyz").WithPadding(base32.NoPadding)

// NewToolCallID mints a tool call id at the wall clock's time: see
// NewToolCallIDAt.
func NewToolCallID() string { return NewToolCallIDAt(time.Now()) }

// NewToolCallIDAt mints a tool call id: "call_" and 26 characters encoding
// at in nanoseconds (64 bits, big-endian) and 64 random bits; the
// conversation actor passes its Clock's time. The
// runtime mints its own ids, unique across conversations, rather than trust
// a provider's (local models often number their calls from zero). Ids
// minted later sort after earlier ones (while the clock does not step
// back, and for times from 1970 to 2262: an int64 of nanoseconds since
// 1970, as an unsigned number), which lets pebblejournal check that a new id
// is unclaimed without reading any table; ordering is never needed for
// correctness. Any time gives a well-formed id.
func NewToolCallIDAt(at time.Time) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(at.UnixNano()))
	_, _ = rand.Read(b[8:])
	return "call_" + idEncoding.EncodeToString(b[:])
}

// rebuildBefore builds the working set of conversation id from the latest
// summary ending at or before seq to (from the start without one) and the
// events after it.
func rebuildBefore(ctx context.Context, store journal.Store, id string, to uint64) (*snapshot.WorkingSet, error) {
	summary, err := store.SummaryBefore(ctx, id, to+1)
	if errors.Is(err, journal.ErrNotFound) {
		summary, err = nil, nil
	}
	if err != nil {
		return nil, err
	}
	events, err := store.Events(ctx, id, journal.EventQuery{After: summary.GetToSeq()})
	if err != nil {
		return nil, err
	}
	return snapshot.Rebuild(summary, events)
}

// CheckRewindInLog checks a rewind of conversation id to toSeq (an edit of
// editSeq, if not 0) that its latest summary covers: a conversation's
// working set starts after that summary, so its core cannot check such a
// target, and trusts that its caller did. It reads the whole log and checks
// it as the working set would (snapshot.WorkingSet.CheckRewind; an edited
// seq must be a user message on the head), and reports checked true: the
// AgentRewind may then set checked_in_log, and, for an edit, carry the
// agent and audience of edited, the edited message's event (edit_agent,
// edit_audience), which the working set no longer holds. A target at or
// after the latest summary's end is left to the core (false, nil, nil).
// Refused targets wrap journal.ErrInvalid; Store errors are returned as
// they are.
func CheckRewindInLog(ctx context.Context, store journal.Store, id string, toSeq, editSeq uint64) (checked bool, edited *messages.Event, err error) {
	s, err := store.LatestSummary(ctx, id)
	if errors.Is(err, journal.ErrNotFound) || (err == nil && toSeq >= s.GetToSeq()) {
		return false, nil, nil
	}
	if err != nil {
		return false, nil, err
	}
	evs, err := store.Events(ctx, id, journal.EventQuery{})
	if err != nil {
		return false, nil, err
	}
	// A fork's log starts after the summary it copied: the working set
	// starts from that summary, and a target inside it is refused.
	var base *messages.Summary
	if len(evs) > 0 && evs[0].GetSeq() > 1 {
		if base, err = store.SummaryBefore(ctx, id, evs[0].GetSeq()); err != nil {
			return false, nil, err
		}
	}
	ws, err := snapshot.Rebuild(base, evs)
	if err != nil {
		return false, nil, err
	}
	if err := ws.CheckRewind(toSeq); err != nil {
		return false, nil, err
	}
	if editSeq == 0 {
		return true, nil, nil
	}
	first := base.GetToSeq() + 1
	if editSeq < first || editSeq-first >= uint64(len(evs)) || evs[editSeq-first].GetUserMsg() == nil || !onHead(evs, editSeq) {
		return false, nil, journal.Invalidf("seq %d is not a user message on the head", editSeq)
	}
	return true, evs[editSeq-first], nil
}

// onHead reports whether seq is on the head of a whole log (evs[i] has
// seq first+i, first being 1, or for a fork the seq after its summary):
// walking back from the newest event, a rewind jumps the walk to its
// target.
func onHead(evs []*messages.Event, seq uint64) bool {
	if len(evs) == 0 {
		return false
	}
	off := evs[0].GetSeq() - 1
	pos := off + uint64(len(evs))
	for pos >= seq && pos > off {
		if pos == seq {
			return true
		}
		if rw := evs[pos-off-1].GetRewind(); rw != nil && rw.GetToSeq() < pos {
			pos = rw.GetToSeq()
			continue
		}
		pos--
	}
	return false
}
