package actors

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
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
	// Clock supplies time. Default SystemClock().
	Clock Clock
	// IdleTimeout passivates the actor after this long without work. Zero
	// or negative means never.
	IdleTimeout time.Duration
	// HumanTimeout is the deadline of a human call whose tool sets none.
	// Zero or negative means no deadline.
	HumanTimeout time.Duration
	// Policy decides when to summarize.
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
	// Audit records every model call with Store.PutModelCall.
	Audit bool
	// Retry is the retry policy of failed model calls. The zero value is
	// the defaults (see RetryPolicy).
	Retry RetryPolicy
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
	// Publish receives the retries of the actor's model calls and its
	// failed writes, on the actor's goroutine, and the model's text deltas, on the goroutine
	// of the model call that streams them (onDelta's caller), straight from
	// the model: a delta does not pass through the actor's mailbox. Each
	// turn's deltas come before Generate returns, so before the turn's
	// answer is written; deltas of a turn already cancelled (a kill, a
	// stop) are dropped. It must not block and must be safe for concurrent
	// use. Nil means none. Durable events are not published here: an event
	// written by an activation that is killed before the write's reply
	// arrives would never be; the runtime publishes every committed event
	// from the journal actor's commits instead (JournalOptions.Committed).
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
	// write landed late, moved the log on). The activation stops; the
	// runtime wakes the conversation again once it has, so work it owed
	// does not wait for the next command.
	Fenced func()
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
		return &conversation{cfg: cfg, log: cfg.Logger.With("conversation", cfg.ID)}
	}, opts...)
}

// Local-only notifications from goroutines the actor owns.
type (
	loaded struct {
		ws   *snapshot.WorkingSet
		rows map[string]*messages.ToolCallRecord
		conv *messages.Conversation
		// scope is the requester's, for work the revival resumes: rebuilt
		// by the ScopeLoader, else SystemScope.
		scope agent.Scope
		err   error
	}
	modelDone struct {
		turn uint64
		msg  *messages.AssistantMessage
		err  error
	}
	toolDone struct {
		id      string
		outcome *messages.ToolOutcome
	}
	summaryDone struct {
		summary *messages.Summary
		err     error
	}
	idleTick struct{ gen uint64 }
	// retryTick ends the wait before a retry of the model call.
	retryTick struct{ gen uint64 }
	// releaseProcessRef is sent by a stopped actor to itself; see Receive.
	releaseProcessRef struct{}
)

// IgnoreDeadLetterLogging keeps protoactor from logging releaseProcessRef,
// which always ends as a dead letter.
func (releaseProcessRef) IgnoreDeadLetterLogging() {}

// openCall is a tool call issued in the working set with no tool_result yet.
type openCall struct {
	ev         *messages.ToolCallEvent
	dispatched bool // a server tool run was started by this activation
	// prompt is what a human is asked (human calls only), as in the row; the
	// fsm_state's pending entries carry it.
	prompt string
	// ready holds the outcome once known and not yet written.
	ready    *messages.ToolOutcome
	status   messages.ToolCallStatus
	by       string
	resolver *messages.Identity
	// inStore: the row is already terminal in the Store, so the write that
	// records the result must not resolve it again.
	inStore bool
}

// queuedConfig is an AgentConfigure waiting for its write.
type queuedConfig struct {
	sender *actor.PID
	msg    *messages.AgentConfigure
}

type queuedSend struct {
	sender *actor.PID
	msg    *messages.AgentSend
	scope  agent.Scope // the sender's: the requester once the message lands
}

type pendingWrite struct {
	id    uint64
	req   *messages.AppendRequest
	sends []*queuedSend
	// answer marks the write of a model answer (see onWriteReply).
	answer bool
	// after runs on success, once the events are in the working set.
	after func(ctx actor.Context)
	// requester, if set, is the scope of the newest user message the write
	// appends: the conversation works for it once the write lands.
	requester *agent.Scope
	// configs are the AgentConfigures whose settings the write carries.
	configs []*queuedConfig
}

// carries reports whether the write appends the user message of request id
// rid.
func (w *pendingWrite) carries(rid string) bool {
	for _, q := range w.sends {
		if q.msg.GetRequestId() == rid {
			return true
		}
	}
	return false
}

type conversation struct {
	cfg ConversationConfig
	log *slog.Logger

	goCtx    context.Context
	goCancel context.CancelFunc

	loaded   bool
	barrier  bool // waiting for JournalBarrierDone before loading
	buffered []*actor.MessageEnvelope
	stopping bool
	cause    error // why stop stopped this activation; nil for passivation

	ws    *snapshot.WorkingSet
	state messages.AgentState
	calls map[string]*openCall
	order []string // open call ids in log order
	seen  map[string]uint64

	// requester is the scope the conversation's work (tool runs) runs
	// with: that of the Send whose message is the newest in the log, when
	// this activation wrote it; else the one the revival rebuilt from the
	// log's requester identity (the ScopeLoader), or SystemScope. Answers
	// (Resolve, Reject, expiries) never change it: tools act for whoever
	// asked for the turn, not for whoever answered a call.
	requester agent.Scope
	asked     bool // a command arrived; see advance
	processed uint64

	nextWrite uint64
	inflight  *pendingWrite
	// rowStatus is the conversation row's status as this activation read
	// or last wrote it (see setRow).
	rowStatus messages.ConversationStatus
	sends     []*queuedSend

	turn        uint64
	modelBusy   bool
	answer      *modelDone // a model answer waiting for the write in flight
	modelCancel context.CancelFunc
	// attempts counts the failed model calls of the current step of the
	// turn; retryStop, while set, stops the timer of the next attempt (see
	// retryModel), and retryGen tells its tick from an abandoned one's.
	attempts  int
	retryStop func() bool
	retryGen  uint64
	// failure is a turn failure waiting to be written (turn_failed).
	failure *messages.TurnFailed
	// rerun: an explicit wake asked to run again a turn whose log ends in
	// turn_failed (see turnOwed).
	rerun bool
	// invalidAnswers counts the model answers in a row, in this turn, that
	// contained invalid tool calls.
	invalidAnswers int

	summarizing bool

	// rowSettings are the conversation's own settings, as its row holds
	// them; settings, those over the configured defaults, are what model
	// calls get (see setSettings).
	rowSettings map[string]string
	settings    agent.Settings
	configs     []*queuedConfig

	idleGen  uint64
	idleStop func() bool

	specs []agent.ToolSpec // the tools as the model is told of them; see startModel
}

func (c *conversation) Receive(ctx actor.Context) {
	defer c.recoverReceive(ctx)
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		c.start(ctx)
	case *actor.Stopping:
		c.stopping = true
		c.cancelGoroutines()
		c.disarmIdle()
		c.failAll(ctx, fmt.Errorf("conversation %q: %w", c.cfg.ID, ErrAgentStopped))
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
	case *loaded:
		c.onLoaded(ctx, msg)
	case *Command:
		if !c.loaded && !c.stopping {
			c.buffered = append(c.buffered, &actor.MessageEnvelope{Message: msg, Sender: ctx.Sender()})
			return
		}
		c.onCommand(ctx, msg, ctx.Sender())
	case *messages.AgentStop:
		// The kill order: everything queued before it has been processed.
		c.stop(ctx, fmt.Errorf("conversation %q killed: %w", c.cfg.ID, ErrAgentStopped))
	case *messages.JournalWriteReply:
		c.onWriteReply(ctx, msg)
	case *actor.DeadLetterResponse:
		if c.barrier {
			// The journal actor is gone: it answered what it held before
			// it stopped, so nothing is left to wait for.
			c.startLoad(ctx)
			return
		}
		// The journal actor is gone (restarting, or the runtime is closing):
		// the write's outcome is unknown, so stop and let the next command
		// revive from the log.
		if c.inflight != nil {
			c.stop(ctx, fmt.Errorf("conversation %q: journal unavailable: %w", c.cfg.ID, ErrAgentStopped))
		}
	case *modelDone:
		c.onModelDone(ctx, msg)
	case *toolDone:
		if call, ok := c.calls[msg.id]; ok && call.ready == nil {
			call.ready = msg.outcome
			call.status = messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED
			if msg.outcome.GetError() != nil {
				call.status = messages.ToolCallStatus_TOOL_CALL_STATUS_ERRORED
			}
		}
		c.advance(ctx)
	case *summaryDone:
		c.onSummary(ctx, msg)
	case *idleTick:
		c.onIdle(ctx, msg)
	case *retryTick:
		if msg.gen == c.retryGen && c.retryStop != nil && !c.stopping {
			c.retryStop = nil
			c.advance(ctx)
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
	if c.stopping {
		return
	}
	p := recover()
	if p == nil {
		return
	}
	c.log.Error("conversation actor panicked; stopping it", "panic", p, "stack", string(debug.Stack()))
	c.stop(ctx, fmt.Errorf("conversation %q: actor panicked: %v: %w", c.cfg.ID, p, ErrAgentStopped))
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
	c.requester = agent.SystemScope
	c.calls = map[string]*openCall{}
	c.seen = map[string]uint64{}
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
	if c.stopping {
		return
	}
	send := tell(ctx)
	store, id, loader, log := c.cfg.Store, c.cfg.ID, c.cfg.ScopeLoader, c.log
	c.goOwned(func(gctx context.Context) {
		l := load(gctx, store, id)
		if l.err == nil {
			l.scope = resumeScope(gctx, l.ws, loader, log)
		}
		send(l)
	})
}

// resumeScope returns the scope work resumed by a revival runs with: the
// loader's rebuild of the requester's identity, or SystemScope when there
// is no loader, no named requester, nothing to resume, or the loader fails.
func resumeScope(ctx context.Context, ws *snapshot.WorkingSet, loader agent.ScopeLoader, log *slog.Logger) (scope agent.Scope) {
	id := agent.IdentityOf(ws.Requester())
	if loader == nil || id.UserID == "" || id.UserID == agent.SystemUserID {
		return agent.SystemScope
	}
	if len(ws.OpenCalls()) == 0 && !ws.EndsWithUserMsg() && ws.LastRendered().GetToolResult() == nil {
		return agent.SystemScope // nothing to resume: the loader is not needed
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

// load is the revival read: the conversation row, the latest summary and the
// events after it, and the rows of the calls still open in that span.
func load(ctx context.Context, store journal.Store, id string) *loaded {
	conv, err := store.Conversation(ctx, id)
	if err != nil && !errors.Is(err, journal.ErrNotFound) {
		return &loaded{err: err}
	}
	summary, events, err := store.LoadSince(ctx, id)
	if err != nil {
		return &loaded{err: err}
	}
	ws, err := snapshot.Rebuild(summary, events)
	if err != nil {
		return &loaded{err: err}
	}
	rows := map[string]*messages.ToolCallRecord{}
	for _, call := range ws.OpenCalls() {
		row, err := store.ToolCall(ctx, call.GetCall().GetId())
		switch {
		case errors.Is(err, journal.ErrNotFound):
			// The row is written with its tool_call event; treat a missing
			// one as pending so the call is retried or awaited, never lost.
		case err != nil:
			return &loaded{err: err}
		default:
			rows[row.GetId()] = row
		}
	}
	return &loaded{ws: ws, rows: rows, conv: conv}
}

func (c *conversation) onLoaded(ctx actor.Context, l *loaded) {
	if l.err != nil {
		if errors.Is(l.err, journal.ErrDeleted) {
			// The caller is told; a deleted conversation is not a fault.
			c.log.Debug("revival refused: the conversation was deleted")
		} else {
			c.log.Error("revival failed", "err", l.err)
		}
		c.stop(ctx, fmt.Errorf("revive conversation %q: %w", c.cfg.ID, l.err))
		return
	}
	c.ws = l.ws
	c.rememberRequests()
	for _, ev := range c.ws.OpenCalls() {
		call := &openCall{ev: ev}
		row := l.rows[ev.GetCall().GetId()]
		call.prompt = row.GetPrompt()
		if row != nil && journal.IsTerminal(row.GetStatus()) {
			// Resolved in the Store, but the result never reached the log:
			// the actor died in between. Record it now.
			call.ready, call.status, call.by, call.inStore = row.GetResult(), row.GetStatus(), resolvedBy(row.GetStatus()), true
			call.resolver = row.GetResolver()
		}
		c.calls[ev.GetCall().GetId()] = call
		c.order = append(c.order, ev.GetCall().GetId())
	}
	c.requester = l.scope
	c.rowStatus = l.conv.GetStatus()
	c.setSettings(l.conv.GetSettings())
	if st := l.conv.GetFsmState(); st != nil && st.GetLastSeq() != c.ws.LastSeq {
		c.log.Debug("fsm_state disagrees with the log; the log wins",
			"cached_last_seq", st.GetLastSeq(), "log_last_seq", c.ws.LastSeq)
	}
	c.loaded = true
	c.log.Debug("revived", "last_seq", c.ws.LastSeq, "open_calls", len(c.order))
	buffered := c.buffered
	c.buffered = nil
	for _, env := range buffered {
		c.onCommand(ctx, env.Message.(*Command), env.Sender)
	}
	c.advance(ctx)
}

func (c *conversation) onCommand(ctx actor.Context, cmd *Command, sender *actor.PID) {
	c.processed++
	if c.stopping {
		err := c.cause
		if err == nil {
			err = fmt.Errorf("conversation %q: %w", c.cfg.ID, ErrAgentStopped)
		}
		c.reply(ctx, sender, cmd.Msg, 0, err)
		return
	}
	c.asked = true
	switch m := cmd.Msg.(type) {
	case *messages.AgentSend:
		if seq, ok := c.seen[m.GetRequestId()]; ok && m.GetRequestId() != "" {
			c.reply(ctx, sender, m, seq, nil)
			return
		}
		if w := c.inflight; w != nil && m.GetRequestId() != "" && w.carries(m.GetRequestId()) {
			// A retry of a send whose write is in flight (a client retrying
			// after a timeout): it joins that write, and is answered with
			// its seq or its error when the write lands.
			w.sends = append(w.sends, &queuedSend{sender: sender, msg: m, scope: cmd.Scope})
			return
		}
		for _, q := range c.sends {
			if q.msg.GetRequestId() == m.GetRequestId() && m.GetRequestId() != "" {
				// A retry of a send that is queued or being written: answer
				// both when it lands.
				c.sends = append(c.sends, &queuedSend{sender: sender, msg: m, scope: cmd.Scope})
				return
			}
		}
		c.sends = append(c.sends, &queuedSend{sender: sender, msg: m, scope: cmd.Scope})
		c.answer = nil
		c.restartTurn()
		if c.modelBusy {
			// The model is answering a context without this message: cancel
			// it and answer again once the message is in the log. What it
			// streamed is void.
			c.cancelModel()
			c.publish(Update{Restart: true})
		}
	case *messages.AgentWake:
		// Activation alone applies the recovery rules. Only an explicit
		// wake runs a failed turn again (see turnOwed).
		if m.GetExplicit() {
			c.rerun = true
		}
		if sender != nil {
			ctx.Send(sender, &messages.AgentReply{})
		}
	case *messages.AgentConfigure:
		// Answered once its write lands (writeConfigs).
		c.configs = append(c.configs, &queuedConfig{sender: sender, msg: m})
	case *messages.AgentResolved:
		if call, ok := c.calls[m.GetToolCallId()]; ok && call.ready == nil {
			call.ready, call.status, call.by, call.inStore = m.GetResult(), m.GetStatus(), m.GetBy(), true
			call.resolver = m.GetResolver()
		}
		if sender != nil {
			ctx.Send(sender, &messages.AgentReply{})
		}
	default:
		if sender != nil {
			ctx.Send(sender, &messages.AgentReply{Error: journal.ErrorToProto(
				journal.Invalidf("conversation actor: unexpected command %T", cmd.Msg))})
		}
		return
	}
	c.advance(ctx)
}

// reply answers a command. A command that failed because this activation
// stopped (ErrAgentStopped) or lost the log to another writer (ErrConflict)
// was not applied, and its reply says to retry on a new activation.
func (c *conversation) reply(ctx actor.Context, sender *actor.PID, msg proto.Message, seq uint64, err error) {
	if sender == nil {
		return
	}
	retry := errors.Is(err, ErrAgentStopped) || errors.Is(err, journal.ErrConflict)
	switch m := msg.(type) {
	case *messages.AgentSend:
		ctx.Send(sender, &messages.AgentSendReply{RequestId: m.GetRequestId(), Seq: seq, Error: journal.ErrorToProto(err), Retry: retry})
	default:
		ctx.Send(sender, &messages.AgentReply{Error: journal.ErrorToProto(err), Retry: retry})
	}
}

// advance is the reconciler: from the working set, the open calls and what
// is in flight, it starts the next step. Every recovery rule follows from it:
// a log ending in a user message owes a model turn; an open server call
// with a pending row is dispatched again with the same id; an open human
// call waits; a call resolved in the Store but not in the log is recorded.
//
// It starts nothing before the first command (every activation is spawned
// for one): the revival may finish before the command that woke the actor
// arrives, and the work must run with that command's scope.
func (c *conversation) advance(ctx actor.Context) {
	if !c.loaded || !c.asked || c.stopping || c.inflight != nil {
		c.touchIdle(ctx)
		return
	}
	switch {
	case c.failure != nil:
		c.writeFailure(ctx)
	case c.answer != nil:
		d := c.answer
		c.answer = nil
		c.writeAnswer(ctx, d)
	case len(c.configs) > 0:
		c.writeConfigs(ctx)
	case len(c.sends) > 0 && c.writeSends(ctx):
		// Otherwise every queued send was already in the log: go on.
	case c.hasReady():
		c.writeResults(ctx)
	case len(c.order) > 0:
		c.dispatchServerCalls(ctx)
		c.state = messages.AgentState_AGENT_STATE_EXECUTING_TOOLS
		if c.humanPending() {
			c.state = messages.AgentState_AGENT_STATE_AWAITING_INPUT
		}
	case c.turnOwed():
		if !c.modelBusy && c.retryStop == nil {
			c.startModel(ctx)
		}
	default:
		c.state = messages.AgentState_AGENT_STATE_IDLE
		c.maybeSummarize(ctx)
	}
	c.touchIdle(ctx)
}

func (c *conversation) hasReady() bool {
	for _, id := range c.order {
		if c.calls[id].ready != nil {
			return true
		}
	}
	return false
}

func (c *conversation) humanPending() bool {
	for _, id := range c.order {
		if call := c.calls[id]; call.ready == nil && call.ev.GetExecutor() == messages.Executor_EXECUTOR_HUMAN {
			return true
		}
	}
	return false
}

// turnOwed reports whether the model owes an answer: the last event it would
// see is a user message or a tool result, and the log does not end in
// turn_failed (a failed turn runs again only on a new message, or on an
// explicit wake: rerun).
func (c *conversation) turnOwed() bool {
	if n := len(c.ws.Events); n > 0 && c.ws.Events[n-1].GetTurnFailed() != nil && !c.rerun {
		return false
	}
	switch c.ws.LastRendered().GetBody().(type) {
	case *messages.Event_UserMsg, *messages.Event_ToolResult:
		return true
	}
	return false
}

func (c *conversation) now() time.Time { return c.cfg.Clock.Now() }

func (c *conversation) event(body func(*messages.Event)) *messages.Event {
	ev := &messages.Event{Time: journal.Timestamp(c.now())}
	body(ev)
	return ev
}

// setRow fills in what req, a write with status st that leaves extra
// calls open besides the actor's, changes in the conversation row: the
// status and the fsm_state cache (the state the actor will be in once the
// write lands, and the calls it still owes). A write in the middle of a
// turn (the conversation stays active, and is not awaiting input) leaves
// the row alone: DESIGN persists fsm_state only as idle or awaiting_input,
// and a kill mid-turn is recovered from the log, which wins over the row.
// That is two row rewrites fewer per turn with a server tool call.
func (c *conversation) setRow(req *messages.AppendRequest, st messages.ConversationStatus, extra []*openCall) {
	if st == messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE && c.rowStatus == st && !c.awaitingInput(extra) {
		return
	}
	req.Status = st
	req.FsmState = c.fsmState(c.ws.LastSeq+uint64(len(req.GetEvents())), extra)
}

// awaitingInput reports whether a human call is open without a result,
// among the actor's calls and extra.
func (c *conversation) awaitingInput(extra []*openCall) bool {
	human := func(call *openCall) bool {
		return call.ready == nil && call.ev.GetExecutor() == messages.Executor_EXECUTOR_HUMAN
	}
	for _, id := range c.order {
		if human(c.calls[id]) {
			return true
		}
	}
	return slices.ContainsFunc(extra, human)
}

func (c *conversation) fsmState(lastSeq uint64, extra []*openCall) *messages.FSMState {
	st := &messages.FSMState{State: messages.AgentState_AGENT_STATE_IDLE, LastSeq: lastSeq, Pending: map[string]*messages.PendingCall{}}
	add := func(call *openCall) {
		if call.ready != nil {
			return
		}
		tc := call.ev.GetCall()
		st.Pending[tc.GetId()] = &messages.PendingCall{ToolCallId: tc.GetId(), Executor: call.ev.GetExecutor(), Kind: tc.GetName(), Prompt: call.prompt}
		if call.ev.GetExecutor() == messages.Executor_EXECUTOR_HUMAN {
			st.State = messages.AgentState_AGENT_STATE_AWAITING_INPUT
		}
	}
	for _, id := range c.order {
		add(c.calls[id])
	}
	for _, call := range extra {
		add(call)
	}
	return st
}

// write sends one fenced append to the journal actor. Only one write is in
// flight at a time, so expected_last is always the working set's last seq.
func (c *conversation) write(ctx actor.Context, w *pendingWrite) {
	w.req.ConversationId = c.cfg.ID
	if !w.req.GetUnfenced() {
		w.req.ExpectedLast = c.ws.LastSeq
	}
	for i, ev := range w.req.GetEvents() {
		ev.Seq = c.ws.LastSeq + uint64(i) + 1
	}
	c.nextWrite++
	w.id = c.nextWrite
	c.inflight = w
	ctx.Request(c.cfg.Journal, &messages.JournalWrite{RequestId: w.id, Request: w.req})
}

// writeSends writes the queued sends, each request id once, and reports
// whether it started a write. A send whose request id the log already holds
// is answered with its seq and not appended again: onCommand checks the
// same, and this check keeps the write path from trusting that it did.
func (c *conversation) writeSends(ctx actor.Context) bool {
	queued := c.sends
	c.sends = nil
	req := &messages.AppendRequest{}
	written := map[string]bool{}
	var sends []*queuedSend
	var requester *agent.Scope
	for _, q := range queued {
		rid := q.msg.GetRequestId()
		if seq, ok := c.seen[rid]; ok && rid != "" {
			c.reply(ctx, q.sender, q.msg, seq, nil)
			continue
		}
		sends = append(sends, q)
		if rid != "" && written[rid] {
			continue
		}
		written[rid] = true
		req.Events = append(req.Events, c.event(func(ev *messages.Event) {
			ev.RequestId = rid
			ev.Author = q.scope.Identity().Proto()
			ev.Body = &messages.Event_UserMsg{UserMsg: q.msg.GetMessage()}
		}))
		requester = &q.scope
	}
	if len(req.Events) == 0 {
		return false
	}
	c.setRow(req, messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE, nil)
	c.write(ctx, &pendingWrite{req: req, sends: sends, requester: requester})
	return true
}

func (c *conversation) writeResults(ctx actor.Context) {
	req := &messages.AppendRequest{}
	var done []string
	for _, id := range c.order {
		call := c.calls[id]
		if call.ready == nil {
			continue
		}
		tc := call.ev.GetCall()
		if call.ev.GetExecutor() == messages.Executor_EXECUTOR_HUMAN {
			req.Events = append(req.Events, c.event(func(ev *messages.Event) {
				ev.Body = &messages.Event_Resolution{Resolution: &messages.Resolution{ToolCallId: id, Status: call.status, By: call.by, Resolver: call.resolver}}
			}))
		}
		req.Events = append(req.Events, c.event(func(ev *messages.Event) {
			ev.Body = &messages.Event_ToolResult{ToolResult: &messages.ToolResultEvent{ToolCallId: id, Name: tc.GetName(), Outcome: call.ready}}
		}))
		if !call.inStore {
			req.Resolutions = append(req.Resolutions, &messages.ToolResolution{
				ToolCallId: id, Status: call.status, Result: call.ready, At: journal.Timestamp(c.now()),
			})
		}
		done = append(done, id)
	}
	// A turn is owed once these results land: the conversation is active,
	// unless a human call is still open. Calls with a ready result are left
	// out of the pending map: the fsm_state written is the one after they
	// leave the open set.
	status := messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE
	if c.awaitingInput(nil) {
		status = messages.ConversationStatus_CONVERSATION_STATUS_SUSPENDED
	}
	c.setRow(req, status, nil)
	c.write(ctx, &pendingWrite{req: req, after: func(ctx actor.Context) {
		for _, id := range done {
			delete(c.calls, id)
		}
		c.order = remove(c.order, done)
	}})
}

func remove(ids, gone []string) []string {
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		keep := true
		for _, g := range gone {
			if id == g {
				keep = false
				break
			}
		}
		if keep {
			out = append(out, id)
		}
	}
	return out
}

func (c *conversation) dispatchServerCalls(ctx actor.Context) {
	send := tell(ctx)
	for _, id := range c.order {
		call := c.calls[id]
		if call.dispatched || call.ready != nil || call.ev.GetExecutor() != messages.Executor_EXECUTOR_SERVER {
			continue
		}
		call.dispatched = true
		inv := agent.Invocation{
			ConversationID: c.cfg.ID,
			ToolCallID:     id,
			Name:           call.ev.GetCall().GetName(),
			Arguments:      call.ev.GetCall().GetArguments(),
			Scope:          c.requester,
		}
		tools := c.cfg.Tools
		c.goOwned(func(gctx context.Context) {
			var out *messages.ToolOutcome
			if tools == nil {
				out = &messages.ToolOutcome{Outcome: &messages.ToolOutcome_Error{Error: &messages.ToolError{Code: "tool", Message: "no tools are registered"}}}
			} else {
				out = tools.RunServer(gctx, inv)
			}
			if gctx.Err() == nil {
				send(&toolDone{id: inv.ToolCallID, outcome: out})
			}
		})
	}
}

func (c *conversation) startModel(ctx actor.Context) {
	c.turn++
	c.modelBusy = true
	c.state = messages.AgentState_AGENT_STATE_STREAMING
	// Not a child of goCtx: registering one with it on every turn cost ~1%
	// of the CPU per event. cancelGoroutines cancels both.
	turnCtx, cancel := context.WithCancel(context.Background())
	c.modelCancel = cancel
	turn := agent.Turn{ConversationID: c.cfg.ID, Summary: c.ws.Summary, Context: c.ws.Render(), Settings: c.settings}
	if c.cfg.Tools != nil {
		if c.specs == nil {
			// One copy per activation: a Model must not modify its Turn
			// (agent.Turn), so every turn can share it.
			c.specs = c.cfg.Tools.Specs()
		}
		turn.Tools = c.specs
	}
	id, model, store, audit, clock, gate := c.turn, c.cfg.Model, c.cfg.Store, c.cfg.Audit, c.cfg.Clock, c.cfg.ModelGate
	lastSeq := c.ws.LastSeq
	send := tell(ctx)
	log := c.log
	var onDelta func(string)
	if publish, conv := c.cfg.Publish, c.cfg.ID; publish != nil {
		onDelta = func(text string) {
			if turnCtx.Err() == nil {
				publish(Update{ConversationID: conv, Delta: text})
			}
		}
	}
	c.goOwned(func(context.Context) {
		defer cancel()
		// The previous call of the conversation may still be winding down
		// (cancelled by a newer message or a kill): Generate is never
		// called twice at once for one conversation.
		leave, err := gate.enter(turnCtx, turn.ConversationID)
		if err != nil {
			send(&modelDone{turn: id, err: err}) // a cancelled turn: ignored
			return
		}
		began := clock.Now()
		msg, err := generate(turnCtx, log, model, turn, onDelta)
		leave()
		if err == nil && msg == nil {
			err = errors.New("model returned no message")
		}
		if err == nil && audit {
			mc := &messages.ModelCall{
				ConversationId: turn.ConversationID, TurnRef: lastSeq, RenderedContext: turn.Context,
				Model: msg.GetModel(), Usage: msg.GetUsage(), LatencyNanos: int64(clock.Now().Sub(began)),
				Summary: turn.Summary, SummaryVersion: turn.Summary.GetVersion(), Created: journal.Timestamp(clock.Now()),
			}
			if aerr := store.PutModelCall(turnCtx, mc); aerr != nil {
				log.Warn("audit write failed", "err", aerr)
			}
		}
		send(&modelDone{turn: id, msg: msg, err: err})
	})
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

// recoverInto, deferred around a call of user code, turns its panic into
// *err and logs the panic's stack.
func recoverInto(err *error, log *slog.Logger, what string) {
	if p := recover(); p != nil {
		*err = fmt.Errorf("%s: %w: %v", what, agent.ErrPanicked, p)
		log.Error(what+" panicked", "panic", p, "stack", string(debug.Stack()))
	}
}

func (c *conversation) cancelModel() {
	if c.modelBusy {
		c.modelCancel()
		c.modelBusy = false
		c.turn++
	}
}

func (c *conversation) onModelDone(ctx actor.Context, d *modelDone) {
	if d.turn != c.turn || !c.modelBusy || c.stopping {
		return // a cancelled turn
	}
	c.modelBusy = false
	if d.err != nil {
		c.modelFailed(ctx, fmt.Errorf("conversation %q: model: %w", c.cfg.ID, d.err))
		return
	}
	c.attempts = 0
	if c.inflight != nil {
		// One write at a time: the answer waits for the write in flight.
		c.answer = d
		return
	}
	c.writeAnswer(ctx, d)
}

// writeAnswer writes a model answer (see turnWrite).
func (c *conversation) writeAnswer(ctx actor.Context, d *modelDone) {
	req, calls, err := c.turnWrite(d.msg)
	if err != nil {
		c.failTurn(ctx, err, c.invalidAnswers)
		return
	}
	c.write(ctx, &pendingWrite{req: req, answer: true, after: func(ctx actor.Context) {
		for _, call := range calls {
			id := call.ev.GetCall().GetId()
			c.calls[id] = call
			c.order = append(c.order, id)
		}
	}})
}

// modelFailed handles a failed model call (or an answer the Store
// refused): it retries the call after the policy's delay, or fails the
// turn.
func (c *conversation) modelFailed(ctx actor.Context, err error) {
	c.attempts++
	p := c.cfg.Retry
	if !p.retry(err, c.attempts) {
		c.failTurn(ctx, err, c.attempts)
		return
	}
	delay := p.Delay(c.attempts)
	c.log.Info("model call failed; retrying", "err", err, "attempt", c.attempts, "delay", delay)
	c.retryGen++
	gen, send := c.retryGen, tell(ctx)
	// Armed before the update is published: a subscriber that sees it
	// may move a test's clock on at once.
	c.retryStop = c.cfg.Clock.AfterFunc(delay, func() { send(&retryTick{gen: gen}) })
	c.publish(Update{Err: err, Retry: &Retry{Attempt: c.attempts, Delay: delay}})
	c.advance(ctx)
}

// cancelRetry abandons a retry waiting its delay.
func (c *conversation) cancelRetry() {
	if c.retryStop != nil {
		c.retryStop()
		c.retryStop = nil
	}
}

// restartTurn abandons what the current turn owed (a retry, a failure not
// yet written, the count of attempts and of invalid answers): a new
// message restarts the turn.
func (c *conversation) restartTurn() {
	c.cancelRetry()
	c.failure = nil
	c.attempts = 0
	c.invalidAnswers = 0
}

// failTurn gives the turn up: a turn_failed event (written by advance, see
// writeFailure) records err and how many attempts were made, and the
// conversation is idle until a new message or an explicit wake.
func (c *conversation) failTurn(ctx actor.Context, err error, attempts int) {
	c.log.Warn("turn failed", "err", err, "attempts", attempts)
	c.failure = &messages.TurnFailed{Message: turnErrorText(err), Code: TurnFailureCode(err), Attempts: uint32(max(attempts, 0))}
	c.attempts, c.invalidAnswers, c.rerun = 0, 0, false
	c.state = messages.AgentState_AGENT_STATE_IDLE
	c.advance(ctx)
}

// writeFailure writes the turn_failed event of a failed turn, and moves the
// conversation row out of ACTIVE (to IDLE), so that a restart does not
// resume the turn.
func (c *conversation) writeFailure(ctx actor.Context) {
	f := c.failure
	c.failure = nil
	req := &messages.AppendRequest{Events: []*messages.Event{c.event(func(ev *messages.Event) {
		ev.Body = &messages.Event_TurnFailed{TurnFailed: f}
	})}}
	c.setRow(req, messages.ConversationStatus_CONVERSATION_STATUS_IDLE, nil)
	c.write(ctx, &pendingWrite{req: req})
}

// turnWrite builds the atomic write of one model answer: the assistant
// message, a tool_call event and a pending row per call, and for human calls
// a suspension, their deadlines and the fsm_state awaiting_input. A call to
// an unknown tool or with arguments that are not a JSON object is recorded
// too, as a server call the runtime answered itself: its row is resolved
// (errored) and its tool_result, an error of code agent.CodeInvalid the
// model sees on its next call, are in the same write; the answer's valid
// calls proceed as usual. Past cfg.MaxInvalidToolAnswers such answers in a
// row, it returns an error wrapping ErrInvalidToolCalls and nothing is
// written.
func (c *conversation) turnWrite(msg *messages.AssistantMessage) (*messages.AppendRequest, []*openCall, error) {
	// msg is the runtime's (agent.Model's contract): its tool calls get
	// their ids in place.
	req := &messages.AppendRequest{ConversationId: c.cfg.ID}
	var calls []*openCall
	var suspension []*messages.PendingCall
	invalid := map[int]string{} // index of the call -> what is wrong with it
	for i, tc := range msg.GetToolCalls() {
		if problem := c.checkCall(tc); problem != "" {
			invalid[i] = problem
		}
	}
	if len(invalid) == 0 {
		c.invalidAnswers = 0
	} else {
		c.invalidAnswers++
		if c.invalidAnswers > max(c.cfg.MaxInvalidToolAnswers, 0) {
			return nil, nil, fmt.Errorf("conversation %q: %w (%d; the last: %s)", c.cfg.ID, ErrInvalidToolCalls, c.invalidAnswers, firstProblem(invalid))
		}
	}
	now := c.now()
	requester := c.ws.Requester()
	results := make([]*messages.ToolOutcome, len(msg.GetToolCalls()))
	for i, tc := range msg.GetToolCalls() {
		if tc.GetId() != "" && tc.GetProviderId() == "" {
			tc.ProviderId = tc.GetId()
		}
		tc.Id = NewToolCallIDAt(now)
		row := &messages.ToolCallRecord{
			Id: tc.GetId(), ConversationId: c.cfg.ID, Name: tc.GetName(), Executor: messages.Executor_EXECUTOR_SERVER,
			Status: messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING, Args: tc.GetArguments(), Created: journal.Timestamp(now),
			Requester: requester,
		}
		req.ToolCalls = append(req.ToolCalls, row)
		if problem, bad := invalid[i]; bad {
			results[i] = agent.ErrorOutcome(agent.CodeInvalid, problem)
			req.Resolutions = append(req.Resolutions, &messages.ToolResolution{
				ToolCallId: tc.GetId(), Status: messages.ToolCallStatus_TOOL_CALL_STATUS_ERRORED, Result: results[i], At: journal.Timestamp(now),
			})
			continue
		}
		tool, _ := c.cfg.Tools.Lookup(tc.GetName())
		row.Executor = tool.Executor
		if tool.Executor == messages.Executor_EXECUTOR_HUMAN {
			row.Prompt = tc.GetName() + " " + tc.GetArguments()
			if tool.Prompt != nil {
				row.Prompt = tool.Prompt(tc.GetArguments())
			}
			if tool.Timeout == 0 { // filled in by a Registry's Lookup; else the config decides
				if tool.Timeout = c.cfg.HumanTimeout; tool.Timeout == 0 {
					tool.Timeout = -1
				}
			}
			if at := tool.CallDeadline(tc.GetArguments(), now); !at.IsZero() {
				row.Deadline = journal.Timestamp(at)
				req.Schedule = append(req.Schedule, &messages.Deadline{ConversationId: c.cfg.ID, ToolCallId: tc.GetId(), At: row.GetDeadline()})
			}
			suspension = append(suspension, &messages.PendingCall{ToolCallId: tc.GetId(), Executor: tool.Executor, Kind: tc.GetName(), Prompt: row.GetPrompt()})
		}
	}
	req.Events = append(req.Events, c.event(func(ev *messages.Event) {
		ev.Body = &messages.Event_AssistantMsg{AssistantMsg: msg}
	}))
	for i, tc := range msg.GetToolCalls() {
		ev := &messages.ToolCallEvent{Call: tc, Executor: req.ToolCalls[i].GetExecutor()}
		req.Events = append(req.Events, c.event(func(e *messages.Event) {
			e.Body = &messages.Event_ToolCall{ToolCall: ev}
		}))
		if results[i] == nil {
			calls = append(calls, &openCall{ev: ev, prompt: req.ToolCalls[i].GetPrompt()})
		}
	}
	for i, tc := range msg.GetToolCalls() {
		if results[i] != nil {
			req.Events = append(req.Events, c.event(func(ev *messages.Event) {
				ev.Body = &messages.Event_ToolResult{ToolResult: &messages.ToolResultEvent{ToolCallId: tc.GetId(), Name: tc.GetName(), Outcome: results[i]}}
			}))
		}
	}
	var status messages.ConversationStatus
	if len(suspension) > 0 {
		req.Events = append(req.Events, c.event(func(ev *messages.Event) {
			ev.Body = &messages.Event_Suspension{Suspension: &messages.Suspension{Pending: suspension}}
		}))
		status = messages.ConversationStatus_CONVERSATION_STATUS_SUSPENDED
	} else if len(msg.GetToolCalls()) > 0 {
		// Calls run, or the model sees the errors of invalid ones.
		status = messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE
	} else {
		// The turn is answered: nothing is owed until the next command.
		status = messages.ConversationStatus_CONVERSATION_STATUS_IDLE
	}
	c.setRow(req, status, calls)
	// What the Store checks (text that is not UTF-8, records over the
	// limits) it checks before writing anything; onWriteReply fails the
	// turn when it refuses an answer. Checking here too would encode the
	// answer once more on every turn.
	return req, calls, nil
}

// checkCall returns what is wrong with a call the model issued (an unknown
// tool, arguments that are not a JSON object), in words the model can act
// on, or "" if nothing is. A name or arguments that are not valid UTF-8
// are made so in place (the call is recorded as it was asked for, and the
// Store takes only UTF-8).
func (c *conversation) checkCall(tc *messages.ToolCall) string {
	tc.Name = strings.ToValidUTF8(tc.GetName(), "\uFFFD")
	tc.Arguments = strings.ToValidUTF8(tc.GetArguments(), "\uFFFD")
	if c.cfg.Tools == nil {
		return fmt.Sprintf("unknown tool %q: no tools are available", tc.GetName())
	}
	err := c.cfg.Tools.CheckCall(tc.GetName(), tc.GetArguments())
	if err == nil {
		return ""
	}
	// The model reads this: leave out the Go package and sentinel.
	msg := strings.TrimSuffix(err.Error(), ": "+journal.ErrInvalid.Error())
	return strings.TrimPrefix(msg, "agent: ")
}

// firstProblem returns the problem of the lowest call index in invalid.
func firstProblem(invalid map[int]string) string {
	first := -1
	for i := range invalid {
		if first < 0 || i < first {
			first = i
		}
	}
	return invalid[first]
}

func (c *conversation) onWriteReply(ctx actor.Context, r *messages.JournalWriteReply) {
	w := c.inflight
	if w == nil || r.GetRequestId() != w.id {
		return // a reply meant for an earlier activation
	}
	c.inflight = nil
	if err := journal.ErrorFromProto(r.GetReply().GetError()); err != nil {
		if len(w.configs) > 0 && errors.Is(err, journal.ErrInvalid) {
			// The Store refused the settings before writing anything: the
			// log and the row are what this actor holds.
			for _, q := range w.configs {
				c.reply(ctx, q.sender, q.msg, 0, fmt.Errorf("conversation %q: settings: %w", c.cfg.ID, err))
			}
			c.advance(ctx)
			return
		}
		if w.answer && errors.Is(err, journal.ErrInvalid) {
			// The Store refused the model's answer before writing any of
			// it, so the log is still what this actor holds: the model
			// call failed (see modelFailed).
			c.modelFailed(ctx, fmt.Errorf("conversation %q: model answer rejected: %w", c.cfg.ID, err))
			return
		}
		// The log and this actor's view may now differ (another writer,
		// a failed disk): stop, and let the next command revive from the log.
		err = fmt.Errorf("conversation %q: write: %w", c.cfg.ID, err)
		c.log.Warn("write failed; stopping", "err", err)
		for _, q := range w.sends {
			c.reply(ctx, q.sender, q.msg, 0, err)
		}
		for _, q := range w.configs {
			c.reply(ctx, q.sender, q.msg, 0, err)
		}
		c.publish(Update{Err: err})
		// Retire first (stop), then ask for the wake-up: a wake-up that
		// found this activation still live would be sent to it, and lost
		// with it.
		c.stop(ctx, err)
		if errors.Is(err, journal.ErrConflict) && c.cfg.Fenced != nil {
			c.cfg.Fenced()
		}
		return
	}
	if st := w.req.GetStatus(); st != messages.ConversationStatus_CONVERSATION_STATUS_UNSPECIFIED {
		c.rowStatus = st
	}
	events := w.req.GetEvents()
	if err := c.ws.Append(events...); err != nil {
		c.stop(ctx, err)
		return
	}
	for _, ev := range events {
		if rid := ev.GetRequestId(); rid != "" {
			c.seen[rid] = ev.GetSeq()
		}
	}
	for _, q := range w.sends {
		c.reply(ctx, q.sender, q.msg, c.seen[q.msg.GetRequestId()], nil)
	}
	if kv := w.req.GetSettings(); len(kv) > 0 {
		c.setSettings(journal.MergeSettings(c.rowSettings, kv))
	}
	for _, q := range w.configs {
		c.reply(ctx, q.sender, q.msg, 0, nil)
	}
	if w.requester != nil {
		c.requester = *w.requester
	}
	if w.after != nil {
		w.after(ctx)
	}
	c.advance(ctx)
}

func (c *conversation) publish(u Update) {
	if c.cfg.Publish != nil {
		u.ConversationID = c.cfg.ID
		c.cfg.Publish(u)
	}
}

func (c *conversation) maybeSummarize(ctx actor.Context) {
	if c.cfg.Summarizer == nil || c.summarizing || !c.cfg.Policy.Due(c.ws) {
		return
	}
	plan, ok := c.ws.Plan(c.cfg.Policy.KeepRecent)
	if !ok {
		return
	}
	c.summarizing = true
	id, store, summarizer, log := c.cfg.ID, c.cfg.Store, c.cfg.Summarizer, c.log
	send := tell(ctx)
	c.goOwned(func(gctx context.Context) {
		s, err := summarize(gctx, log, plan, summarizer, id)
		if err == nil {
			// Derived data: written directly, never through the log.
			err = store.PutSummary(gctx, id, s)
		}
		send(&summaryDone{summary: s, err: err})
	})
}

func (c *conversation) onSummary(ctx actor.Context, d *summaryDone) {
	c.summarizing = false
	if d.err != nil {
		c.log.Warn("summary failed", "err", d.err)
		return
	}
	if err := c.ws.Compact(d.summary); err != nil {
		c.log.Error("compaction after summary failed", "err", err)
		return
	}
	c.rememberRequests()
	c.log.Debug("summarized", "to_seq", d.summary.GetToSeq())
	c.advance(ctx)
}

// rememberRequests sets the idempotency keys the activation recognises to
// the working set's: those its summary carries (the newest it folded away;
// see snapshot.MaxSummaryRequests) and those of the events after it.
func (c *conversation) rememberRequests() {
	clear(c.seen)
	for _, r := range c.ws.Summary.GetRequests() {
		c.seen[r.GetRequestId()] = r.GetSeq()
	}
	for _, ev := range c.ws.Events {
		if rid := ev.GetRequestId(); rid != "" {
			c.seen[rid] = ev.GetSeq()
		}
	}
}

// quiescent: nothing in flight, so the actor may passivate.
func (c *conversation) quiescent() bool {
	if !c.loaded || c.inflight != nil || c.modelBusy || c.answer != nil || c.summarizing || len(c.sends) > 0 ||
		c.retryStop != nil || c.failure != nil || len(c.configs) > 0 {
		return false
	}
	for _, id := range c.order {
		call := c.calls[id]
		if call.ready != nil || (call.dispatched && call.ev.GetExecutor() == messages.Executor_EXECUTOR_SERVER) {
			return false
		}
	}
	return true
}

func (c *conversation) touchIdle(ctx actor.Context) {
	if c.cfg.IdleTimeout <= 0 || c.cfg.Retire == nil || c.stopping {
		return
	}
	c.disarmIdle()
	if !c.quiescent() {
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
	if t.gen != c.idleGen || !c.quiescent() || c.stopping {
		return
	}
	if c.cfg.Retire(c.processed, false) {
		c.log.Debug("passivated")
		c.stopping = true
		ctx.Stop(ctx.Self())
	}
	// Otherwise a command is on its way; it will re-arm the timer.
}

// stop retires this activation and stops the actor once it has answered
// every command already in its mailbox, with cause (which says whether to
// retry on a new activation). The registry sends nothing after the retire,
// so the poison pill queued here comes after all of them; a Stop would jump
// the queue, and protoactor would drop them, leaving their callers waiting
// for the whole call timeout. Work in flight is abandoned at once.
func (c *conversation) stop(ctx actor.Context, cause error) {
	if c.stopping {
		return
	}
	if c.cfg.Stopped != nil {
		c.cfg.Stopped(cause)
	}
	if c.cfg.Retire != nil {
		c.cfg.Retire(c.processed, true)
	}
	c.failAll(ctx, cause)
	c.stopping = true
	c.cause = cause
	c.cancelGoroutines()
	c.disarmIdle()
	ctx.Poison(ctx.Self())
}

// failAll answers every caller still waiting on this activation.
func (c *conversation) failAll(ctx actor.Context, cause error) {
	for _, q := range c.sends {
		c.reply(ctx, q.sender, q.msg, 0, cause)
	}
	c.sends = nil
	if w := c.inflight; w != nil {
		// The write may still land; the caller learns the outcome by retrying
		// with the same request id.
		for _, q := range w.sends {
			c.reply(ctx, q.sender, q.msg, 0, fmt.Errorf("%w (write outcome unknown)", cause))
		}
		w.sends = nil
	}
	for _, q := range c.configs {
		c.reply(ctx, q.sender, q.msg, 0, cause)
	}
	c.configs = nil
	if w := c.inflight; w != nil {
		// Settings are merged, so a retry is safe whatever became of it.
		for _, q := range w.configs {
			c.reply(ctx, q.sender, q.msg, 0, fmt.Errorf("%w (write outcome unknown)", cause))
		}
		w.configs = nil
	}
	for _, env := range c.buffered {
		c.reply(ctx, env.Sender, env.Message.(*Command).Msg, 0, cause)
	}
	c.buffered = nil
}

// setSettings sets the conversation's own settings, as its row holds them,
// and the settings of its model calls: those over the configured defaults.
func (c *conversation) setSettings(row map[string]string) {
	c.rowSettings = row
	c.settings = agent.SettingsOf(row).Over(c.cfg.Settings)
}

// writeConfigs writes the settings of every queued AgentConfigure, merged
// in order, into the conversation row, in order with the actor's other
// writes. A conversation that has no row yet gets one, idle.
func (c *conversation) writeConfigs(ctx actor.Context) {
	queued := c.configs
	c.configs = nil
	kv := map[string]string{}
	for _, q := range queued {
		for k, v := range q.msg.GetSettings() {
			kv[k] = v
		}
	}
	req := &messages.AppendRequest{Settings: kv}
	if c.rowStatus == messages.ConversationStatus_CONVERSATION_STATUS_UNSPECIFIED {
		req.Status = messages.ConversationStatus_CONVERSATION_STATUS_IDLE
	}
	c.write(ctx, &pendingWrite{req: req, configs: queued})
}

// resolvedBy says who resolved a human call, from its terminal status: only
// the expiry actor (the system) expires a call; Resolve and Reject are a
// user's.
func resolvedBy(status messages.ToolCallStatus) string {
	if status == messages.ToolCallStatus_TOOL_CALL_STATUS_EXPIRED {
		return "system"
	}
	return "user"
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
// back), which lets pebblejournal check that a new id is unclaimed without
// reading any table; ordering is never needed for correctness.
func NewToolCallIDAt(at time.Time) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(at.UnixNano()))
	_, _ = rand.Read(b[8:])
	return "call_" + idEncoding.EncodeToString(b[:])
}
