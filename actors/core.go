package actors

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/snapshot"
)

// core holds the decisions of one conversation as a pure state machine, in
// the manner of etcd's raft: the driver (the conversation actor, or the
// simulator of the tests) feeds it one input at a time with step, and
// performs the effects step returns, in order. The core starts no
// goroutine, reads no clock (the time comes with each step), talks to no
// actor and does no I/O: given the same inputs it returns the same effects.
//
// This file holds the core's state, inputs and effects; core_write.go holds
// the writes it builds.
type core struct {
	cfg coreConfig
	log *slog.Logger
	now time.Time // the time of the step in progress

	out []effect // the effects of the step in progress; see step

	loaded   bool
	buffered []*inCommand // commands that arrived before the revival
	stopping bool
	cause    error // why this activation stopped; nil for passivation

	ws    *snapshot.WorkingSet
	state messages.AgentState
	calls map[string]*openCall
	order []string // open call ids in log order
	seen  map[string]uint64

	// requester is the scope the conversation's next work runs with (a
	// server call takes it when its answer is written; see
	// openCall.scope): that of the Send whose message is the newest in
	// the log, when this activation wrote it; else the one the revival
	// rebuilt from the log's requester identity (the ScopeLoader), or
	// SystemScope. Answers
	// (Resolve, Reject, expiries) never change it: tools act for whoever
	// asked for the turn, not for whoever answered a call.
	requester agent.Scope
	asked     bool // a command arrived; see advance
	processed uint64

	nextWrite uint64
	inflight  *pendingWrite
	// committed: a write of this activation landed (see effUnknown and
	// effFenced).
	committed bool
	// rowStatus is the conversation row's status as this activation read
	// or last wrote it (see setRow).
	rowStatus messages.ConversationStatus
	// rowAwaiting: the row's fsm_state cache, as this activation read or
	// last wrote it, says awaiting_input (see setRow).
	rowAwaiting bool
	sends       []*queuedSend

	turn      uint64
	modelBusy bool
	answer    *inModelDone // a model answer waiting for the write in flight
	// attempts counts the failed model calls of the current step of the
	// turn; retryArmed says a retry waits for its timer (see modelFailed),
	// and retryGen tells its tick from an abandoned one's.
	attempts   int
	retryArmed bool
	retryGen   uint64
	// retryNotBefore is when the armed retry may call the model;
	// retryToWrite says it is still to be written to the row
	// (FSMState.retry_not_before, see writeRetryTime).
	retryNotBefore time.Time
	retryToWrite   bool
	// failure is a turn failure waiting to be written (turn_failed).
	failure *messages.TurnFailed
	// rerun: an explicit wake asked to run again a turn whose log ends in
	// turn_failed (see turnOwed).
	rerun bool
	// invalidAnswers counts the model answers in a row, in this turn, that
	// contained invalid tool calls.
	invalidAnswers int

	summarizing bool
	// summaryAt is the log's last seq when the summary in flight (or the
	// last one) was planned: the log that attempt saw.
	summaryAt uint64
	// summaryFailedAt is the log's last seq when the summary that last
	// failed was planned (0: none did; see summaryAt): the next is tried
	// only once the log has grown past it, so a summarizer that keeps
	// failing (a model down, a summary the Store refuses) costs one attempt
	// per write, not one per command. Not the log's last seq when the
	// failure arrives: an event written while the summary was made (the
	// answer of the turn that waited for it at the ModelGate) is one the
	// failed attempt never saw, so the summary is due again at once.
	summaryFailedAt uint64

	// rowSettings are the conversation's own settings, as its row holds
	// them; settings, those over the configured defaults, are what model
	// calls get (see setSettings).
	rowSettings map[string]string
	settings    agent.Settings
	configs     []*queuedConfig
	rewinds     []*queuedRewind
	ends        []*queuedEnd // Ends waiting for the write in flight; see onEnd
	wakes       []*queuedWake

	specs []agent.ToolSpec // the tools as the model is told of them; see startModel

	// Named agents (core_agents.go): the agent whose turn is owed
	// (agentOwed), the agent of the model call in progress or last made,
	// and each named agent's tools.
	nextAgent, turnAgent string
	agentSpecs           map[string][]agent.ToolSpec
}

// coreConfig is what the core needs of ConversationConfig: no clock, no
// store, no actor.
type coreConfig struct {
	ID                    string
	Tools                 *agent.Registry
	HumanTimeout          time.Duration
	Policy                snapshot.Policy // with its defaults
	Summarize             bool            // a Summarizer is configured
	Settings              agent.Settings  // the default model settings
	Retry                 RetryPolicy     // with its defaults
	MaxInvalidToolAnswers int
	// AppendBudget bounds the bytes of the events and resolutions that
	// one append of several requests gathers (writeSends, writeResults).
	// Zero means defaultAppendBudget; tests lower it.
	AppendBudget int
	// NewID mints a tool call id at a time. Nil means NewToolCallIDAt.
	NewID func(time.Time) string
	// Agents are the named agents (see AgentConfig). Nil: the default
	// agent alone, as before agents existed.
	Agents map[string]AgentConfig
	// Audit: model calls are audited, so each model call carries what its
	// context leaves out (effStartModel.evicted).
	Audit bool
}

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
	// agent is the agent that made the call; its result is that agent's.
	agent string
	// scope is what a server call runs with: its turn's requester's (the
	// activation's requester when its answer was written, or, on a
	// revival, rebuilt from its row's requester). A message of another
	// user written after the answer does not change it.
	scope agent.Scope
}

// queuedConfig is an AgentConfigure waiting for its write.
type queuedConfig struct {
	sender any
	msg    *messages.AgentConfigure
}

// queuedWake is an AgentWake whose log_last is past the activation's view,
// waiting for the write in flight (see decideWakes).
type queuedWake struct {
	sender any
	msg    *messages.AgentWake
}

// queuedRewind is an AgentRewind (a rewind, or an edit) waiting for its
// write.
type queuedRewind struct {
	sender any
	msg    *messages.AgentRewind
	scope  agent.Scope
}

// queuedSend is a send waiting for its write, with its caller.
type queuedSend struct {
	sender any // the caller's address, opaque to the core (nil: nobody waits)
	msg    *messages.AgentSend
	scope  agent.Scope // the sender's: the requester once the message lands
	// fire is the schedule occurrence a scheduled wake records with its
	// message (nil for a plain send); such a send is written alone.
	fire *messages.ScheduleFire
}

// writeKind says what a write records; the core acts on its reply by it.
type writeKind uint8

const (
	writeSends writeKind = iota + 1
	writeAnswer
	writeResults
	writeFailure
	writeConfigs
	writeRewind
	writeEnd
	writeRetryTime
)

type pendingWrite struct {
	id    uint64
	kind  writeKind
	req   *messages.AppendRequest
	sends []*queuedSend
	// calls are the calls of an answer (writeAnswer), open once it lands;
	// done are the calls whose results a writeResults records.
	calls []*openCall
	done  []string
	// requester, if set, is the scope of the newest user message the write
	// appends: the conversation works for it once the write lands.
	requester *agent.Scope
	// configs are the AgentConfigures whose settings the write carries.
	configs []*queuedConfig
	// rewind is the AgentRewind the write records (writeRewind).
	rewind *queuedRewind
	// end is the EndConversation the write records (writeEnd).
	end *queuedEnd
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

// The inputs of the core.
type (
	// inLoaded: the revival read finished.
	inLoaded struct {
		ws   *snapshot.WorkingSet
		rows map[string]*messages.ToolCallRecord
		conv *messages.Conversation
		// scope is the requester's, for work the revival resumes: rebuilt
		// by the ScopeLoader, else SystemScope.
		scope agent.Scope
		// callScopes are the scopes of the open server calls whose
		// requester (their row's) is not the log's, by call id (see
		// callScopes); the others run with scope.
		callScopes map[string]agent.Scope
		err        error
	}
	// inCommand: a command from a caller (sender, opaque; nil when nobody
	// waits for the reply).
	inCommand struct {
		cmd    *Command
		sender any
	}
	// inStop: the activation stops, with cause: a kill (retire true: the
	// core asks to retire), or the actor is stopping anyway (retire false).
	inStop struct {
		cause  error
		retire bool
	}
	// inWriteReply: the journal answered the write id (err nil: durable).
	inWriteReply struct {
		id  uint64
		err error
	}
	// inJournalGone: the journal actor is gone; a write in flight has an
	// unknown outcome.
	inJournalGone struct{}
	// inModelDone: the model call of turn returned.
	inModelDone struct {
		turn uint64
		msg  *messages.AssistantMessage
		err  error
	}
	// inToolDone: a server tool run returned.
	inToolDone struct {
		id      string
		outcome *messages.ToolOutcome
	}
	// inSummaryDone: a summary was written (or failed).
	inSummaryDone struct {
		summary *messages.Summary
		err     error
	}
	// inRetryTick: the wait before the retry gen of a model call ended.
	inRetryTick struct{ gen uint64 }
)

// The effects of a step, performed by the driver in the order given.
type (
	effect interface{ isEffect() }
	// effReply answers a caller (to, as the command's sender) with msg.
	effReply struct {
		to  any
		msg proto.Message
	}
	// effWrite sends a fenced (or unfenced) append to the journal.
	effWrite struct {
		id  uint64
		req *messages.AppendRequest
	}
	// effStartModel starts the model call of turn, with lastSeq the seq of
	// the last event it sees.
	effStartModel struct {
		turn    uint64
		in      agent.Turn
		lastSeq uint64
		// evicted is what the context leaves out (WorkingSet.Evicted), for
		// the audit row; only with coreConfig.Audit.
		evicted []string
	}
	// effCancelModel cancels the model call in flight.
	effCancelModel struct{}
	// effRunTool runs a server tool.
	effRunTool struct{ inv agent.Invocation }
	// effCancelTool cancels the context of the run of server call id, if
	// one is in flight: its call was cancelled (a rewind).
	effCancelTool struct{ id string }
	// effSummarize runs a summary plan and stores its summary.
	effSummarize struct{ plan snapshot.Plan }
	// effArmRetry arms the timer of retry gen, after delay.
	effArmRetry struct {
		gen   uint64
		delay time.Duration
	}
	// effCancelRetry stops the timer of a retry.
	effCancelRetry struct{}
	// effPublish tells live subscribers u.
	effPublish struct{ u Update }
	// effTouchIdle (re)arms the idle timer if the core is quiescent.
	effTouchIdle struct{}
	// effRetire tells the runtime why the activation stops (Stopped) and
	// retires it (force), before its callers are answered.
	effRetire struct{ cause error }
	// effHalt abandons the work in flight (goroutines, timers); poison
	// also stops the actor once its mailbox is drained.
	effHalt struct{ poison bool }
	// effFenced asks for the conversation to be woken again (ErrConflict,
	// or a rewind below the summary); committed: a write of this
	// activation landed before it (as effUnknown's).
	effFenced struct{ committed bool }
	// effUnknown asks for the conversation to be woken again after a
	// write of unknown outcome; committed: a write of this activation
	// landed before it (the runtime bounds the re-wakes of activations
	// that committed nothing).
	effUnknown struct{ committed bool }
)

func (effReply) isEffect()       {}
func (effWrite) isEffect()       {}
func (effStartModel) isEffect()  {}
func (effCancelModel) isEffect() {}
func (effRunTool) isEffect()     {}
func (effCancelTool) isEffect()  {}
func (effSummarize) isEffect()   {}
func (effArmRetry) isEffect()    {}
func (effCancelRetry) isEffect() {}
func (effPublish) isEffect()     {}
func (effTouchIdle) isEffect()   {}
func (effRetire) isEffect()      {}
func (effHalt) isEffect()        {}
func (effFenced) isEffect()      {}
func (effUnknown) isEffect()     {}

func newCore(cfg coreConfig, log *slog.Logger) *core {
	if cfg.NewID == nil {
		cfg.NewID = NewToolCallIDAt
	}
	return &core{
		cfg: cfg, log: log,
		requester: agent.SystemScope,
		calls:     map[string]*openCall{},
		seen:      map[string]uint64{},
	}
}

// step feeds one input at time now and returns the effects to perform, in
// order. The returned slice is the core's and is valid until the next step.
func (c *core) step(now time.Time, in any) []effect {
	c.now = now
	c.out = c.out[:0]
	switch m := in.(type) {
	case *inLoaded:
		c.onLoaded(m)
	case *inCommand:
		if !c.loaded && !c.stopping {
			c.buffered = append(c.buffered, m)
			break
		}
		c.onCommand(m.cmd, m.sender)
	case *inStop:
		if m.retire {
			c.stop(m.cause)
			break
		}
		if !c.stopping {
			c.stopping = true
			c.emit(effHalt{})
			c.failAll(m.cause)
		}
	case *inWriteReply:
		c.onWriteReply(m)
	case *inJournalGone:
		if c.inflight != nil {
			c.stop(fmt.Errorf("conversation %q: journal unavailable: %w", c.cfg.ID, ErrAgentStopped))
		}
	case *inModelDone:
		c.onModelDone(m)
	case *inToolDone:
		if call, ok := c.calls[m.id]; ok && call.ready == nil {
			call.ready = m.outcome
			call.status = messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED
			if m.outcome.GetError() != nil {
				call.status = messages.ToolCallStatus_TOOL_CALL_STATUS_ERRORED
			}
		}
		c.advance()
	case *inSummaryDone:
		c.onSummary(m)
	case *inRetryTick:
		if m.gen == c.retryGen && c.retryArmed && !c.stopping {
			c.retryArmed = false
			c.advance()
		}
	}
	return c.out
}

func (c *core) emit(e effect) { c.out = append(c.out, e) }

// stopped reports whether the activation stops (or stopped).
func (c *core) stopped() bool { return c.stopping }

func (c *core) onLoaded(l *inLoaded) {
	if c.stopping {
		return
	}
	if l.err != nil {
		if errors.Is(l.err, journal.ErrDeleted) {
			// The caller is told; a deleted conversation is not a fault.
			c.log.Debug("revival refused: the conversation was deleted")
		} else {
			c.log.Error("revival failed", "err", l.err)
		}
		c.stop(fmt.Errorf("revive conversation %q: %w", c.cfg.ID, l.err))
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
		call.scope = l.scope
		if s, ok := l.callScopes[ev.GetCall().GetId()]; ok {
			call.scope = s
		}
		c.calls[ev.GetCall().GetId()] = call
		c.order = append(c.order, ev.GetCall().GetId())
	}
	c.loadCallAgents()
	c.resolveHandoffs()
	c.requester = l.scope
	c.rowStatus = l.conv.GetStatus()
	c.rowAwaiting = l.conv.GetFsmState().GetState() == messages.AgentState_AGENT_STATE_AWAITING_INPUT
	c.setSettings(l.conv.GetSettings())
	// Before the buffered commands: a new message among them abandons
	// the retry, as it does a live one.
	c.armRevivedRetry(l.conv.GetFsmState())
	if st := l.conv.GetFsmState(); st != nil && st.GetLastSeq() != c.ws.LastSeq {
		c.log.Debug("fsm_state disagrees with the log; the log wins",
			"cached_last_seq", st.GetLastSeq(), "log_last_seq", c.ws.LastSeq)
	}
	c.loaded = true
	c.log.Debug("revived", "last_seq", c.ws.LastSeq, "open_calls", len(c.order))
	buffered := c.buffered
	c.buffered = nil
	for _, m := range buffered {
		c.onCommand(m.cmd, m.sender)
	}
	c.advance()
}

func (c *core) onCommand(cmd *Command, sender any) {
	c.processed++
	if c.stopping {
		c.reply(sender, cmd.Msg, 0, c.notApplied(c.cause))
		return
	}
	c.asked = true
	switch m := cmd.Msg.(type) {
	case *messages.EndConversation:
		c.onEnd(sender, m)
		return
	case *messages.ScheduleWake:
		if !c.onSend(sender, &messages.AgentSend{RequestId: m.GetRequestId(), Message: m.GetMessage()}, cmd.Scope, m.GetFire()) {
			return
		}
	case *messages.AgentSend:
		if !c.onSend(sender, m, cmd.Scope, nil) {
			return
		}
	case *messages.AgentWake:
		if m.GetLogLast() > c.ws.LastSeq && c.inflight != nil {
			// The log may be past this activation's view by the write in
			// flight (the waker read it after it landed) or by another
			// writer's, before or after it: decided once it is answered
			// (see decideWakes; a fenced write retires the activation).
			c.wakes = append(c.wakes, &queuedWake{sender: sender, msg: m})
			return
		}
		if c.staleWake(sender, m) {
			return
		}
	case *messages.AgentConfigure:
		if c.ended() {
			// Settings are for the turns an ended conversation never
			// runs again: refused, as a send is, and nothing written.
			c.reply(sender, m, 0, c.endedErr())
			c.advance()
			return
		}
		// Answered once its write lands (writeConfigs).
		c.configs = append(c.configs, &queuedConfig{sender: sender, msg: m})
	case *messages.AgentRewind:
		if seq, ok := c.seen[m.GetRequestId()]; ok && m.GetRequestId() != "" {
			// A retried edit or rewind whose write landed: answered with
			// the seq of the edit's message (of a rewind's event); nothing
			// changes (see writeRewind).
			c.reply(sender, m, seq, nil)
			c.advance()
			return
		}
		if c.ended() {
			c.reply(sender, m, 0, c.endedErr())
			c.advance()
			return
		}
		if c.inflight == nil && len(c.rewinds) == 0 && len(c.configs) == 0 && len(c.sends) == 0 {
			// Nothing is written before it: a target refused now is
			// refused before it cancels anything.
			if _, err := c.rewindTarget(m); err != nil {
				c.reply(sender, m, 0, err)
				c.advance()
				return
			}
		}
		q := &queuedRewind{sender: sender, msg: m, scope: cmd.Scope}
		if err := c.checkWrite(0, c.rewindEvents(q, rewindTo(m))...); err != nil {
			// Events that do not fit as they would be written now are
			// refused before they restart the turn under way, which goes
			// on (writeRewind checks them again as it writes them).
			c.reply(sender, m, 0, err)
			c.advance()
			return
		}
		// Written (or refused) by advance, before queued sends; answered
		// once its write lands. The model is answering a context the
		// rewind changes: cancel it, what it streamed is void.
		c.rewinds = append(c.rewinds, q)
		c.answer = nil
		c.restartTurn()
		if c.modelBusy {
			c.cancelModel()
			c.publish(Update{Restart: true})
		}
	case *messages.AgentResolved:
		if call := c.openCall(m.GetToolCallId()); call != nil && call.ready == nil {
			call.ready, call.status, call.by, call.inStore = m.GetResult(), m.GetStatus(), m.GetBy(), true
			call.resolver = m.GetResolver()
			// The answer's write, which this delivery follows, made the
			// row ACTIVE (see setRow), unless the row is ENDED: an expiry
			// leaves an ENDED row's status alone (End is for good), and
			// the activation must not forget it, or it would record the
			// answer in the ended log and run turns there.
			if !c.ended() {
				c.rowStatus = messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE
			}
		}
		if sender != nil {
			c.emit(effReply{to: sender, msg: &messages.AgentReply{}})
		}
	default:
		if sender != nil {
			c.emit(effReply{to: sender, msg: &messages.AgentReply{Error: journal.ErrorToProto(
				journal.Invalidf("conversation actor: unexpected command %T", cmd.Msg))}})
		}
		return
	}
	c.advance()
}

// openCall returns the open call id: one the log holds, or one the answer
// being written opens. An answer can arrive before the reply of the write
// that opened its call (the write landed, the call was answered at once,
// and its delivery overtook the reply): it is kept for when the call opens,
// not dropped, which would leave the call open in this activation while its
// row is terminal. Nil if there is no such call.
func (c *core) openCall(id string) *openCall {
	if call, ok := c.calls[id]; ok {
		return call
	}
	if w := c.inflight; w != nil && w.kind == writeAnswer {
		for _, call := range w.calls {
			if call.ev.GetCall().GetId() == id {
				return call
			}
		}
	}
	return nil
}

// onSend queues a user message (with the schedule occurrence it records,
// for a scheduled wake), unless the log or a write in flight already has
// its request id, or its event does not fit journal.MaxEventBytes as it
// would be written (refused with journal.ErrInvalid, the conversation left
// as it was). It reports whether the caller must advance.
func (c *core) onSend(sender any, m *messages.AgentSend, scope agent.Scope, fire *messages.ScheduleFire) bool {
	if seq, ok := c.seen[m.GetRequestId()]; ok && m.GetRequestId() != "" {
		// Already in the log: answered with its seq. It may still be
		// the first command of a revived activation, which then does
		// the work the log owes (the turn of that very message, when
		// the activation that wrote it was killed before answering).
		c.reply(sender, m, seq, nil)
		return true
	}
	if w := c.inflight; w != nil && m.GetRequestId() != "" && w.carries(m.GetRequestId()) {
		// A retry of a send whose write is in flight (a client retrying
		// after a timeout): it joins that write, and is answered with
		// its seq or its error when the write lands.
		w.sends = append(w.sends, &queuedSend{sender: sender, msg: m, scope: scope, fire: fire})
		return false
	}
	for _, q := range c.sends {
		if q.msg.GetRequestId() == m.GetRequestId() && m.GetRequestId() != "" {
			// A retry of a send that is queued or being written: answer
			// both when it lands.
			c.sends = append(c.sends, &queuedSend{sender: sender, msg: m, scope: scope, fire: fire})
			return false
		}
	}
	if c.ended() {
		c.reply(sender, m, 0, c.endedErr())
		c.advance()
		return false
	}
	q := &queuedSend{sender: sender, msg: m, scope: scope, fire: fire}
	if err := c.checkWrite(len(c.sends), c.sendEvent(q)); err != nil {
		// A message that does not fit as it would be written now is
		// refused before it restarts the turn under way, which goes on
		// (writeSends checks it again as it writes it).
		c.reply(sender, m, 0, err)
		c.advance()
		return false
	}
	c.sends = append(c.sends, q)
	c.answer = nil
	c.restartTurn()
	if c.modelBusy {
		// The model is answering a context without this message: cancel
		// it and answer again once the message is in the log. What it
		// streamed is void.
		c.cancelModel()
		c.publish(Update{Restart: true})
	}
	return true
}

// reply answers a command. A command that failed because this activation
// stopped (ErrAgentStopped) or lost the log to another writer (ErrConflict)
// was not applied, and its reply says to retry on a new activation.
func (c *core) reply(sender any, msg proto.Message, seq uint64, err error) {
	if sender == nil {
		return
	}
	retry := errors.Is(err, ErrAgentStopped) || errors.Is(err, journal.ErrConflict)
	switch m := msg.(type) {
	case *messages.AgentSend:
		c.emit(effReply{to: sender, msg: &messages.AgentSendReply{RequestId: m.GetRequestId(), Seq: seq, Error: journal.ErrorToProto(err), Retry: retry}})
	case *messages.AgentRewind:
		c.emit(effReply{to: sender, msg: &messages.AgentSendReply{RequestId: m.GetRequestId(), Seq: seq, Error: journal.ErrorToProto(err), Retry: retry}})
	default:
		c.emit(effReply{to: sender, msg: &messages.AgentReply{Error: journal.ErrorToProto(err), Retry: retry}})
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
func (c *core) advance() {
	if !c.loaded || !c.asked || c.stopping || c.inflight != nil {
		c.emit(effTouchIdle{})
		return
	}
	if c.decideWakes() {
		return // stale: retired
	}
	if c.decideEnds(); c.inflight != nil {
		c.emit(effTouchIdle{})
		return
	}
	switch {
	case c.failure != nil:
		c.writeFailure()
	case c.answer != nil:
		d := c.answer
		c.answer = nil
		c.writeAnswer(d)
	case c.retryToWrite && c.retryArmed:
		c.writeRetryTime()
	case len(c.configs) > 0:
		c.writeConfigs()
	case len(c.rewinds) > 0 && c.writeRewind():
		// Otherwise the rewind was refused (answered): go on.
	case len(c.sends) > 0 && c.writeSends():
		// Otherwise every queued send was already in the log: go on.
	case c.ended() && len(c.order) > 0:
		// An ended conversation's log never grows: a call it holds open
		// (an import cut short leaves one) is neither run nor recorded.
		c.state = messages.AgentState_AGENT_STATE_IDLE
	case c.hasReady():
		c.writeResults()
	case len(c.order) > 0:
		c.dispatchServerCalls()
		c.state = messages.AgentState_AGENT_STATE_EXECUTING_TOOLS
		if c.humanPending() {
			c.state = messages.AgentState_AGENT_STATE_AWAITING_INPUT
		}
	case c.turnOwed():
		if !c.modelBusy && !c.retryArmed {
			c.startModel()
		}
	default:
		c.state = messages.AgentState_AGENT_STATE_IDLE
		c.maybeSummarize()
	}
	c.emit(effTouchIdle{})
}

// staleWake answers wake m, with no write in flight, and reports whether
// it found this activation stale: its log_last past the activation's view
// (another writer moved the log on while it sat idle: in a cluster, a
// member that owned the conversation meanwhile), where a turn that writer
// left owed would wait for the next command. A stale activation retires
// first, then answers "retry": the wake goes to a new activation, which
// revives from the log and applies the recovery rules. Otherwise the
// activation alone applies them; only an explicit wake runs a failed turn
// again (see turnOwed).
func (c *core) staleWake(sender any, m *messages.AgentWake) bool {
	if last := m.GetLogLast(); last > c.ws.LastSeq {
		err := fmt.Errorf("conversation %q: the log is at seq %d, this activation's view at %d: %w", c.cfg.ID, last, c.ws.LastSeq, journal.ErrConflict)
		c.stop(err)
		c.reply(sender, m, 0, err)
		return true
	}
	if m.GetExplicit() {
		c.rerun = true
	}
	if sender != nil {
		c.emit(effReply{to: sender, msg: &messages.AgentReply{}})
	}
	return false
}

// decideWakes answers the wakes held for a write (see onCommand), now
// that none is in flight, and reports whether one found this activation
// stale, which then retired: the write landed (or was refused whole) and
// the view is still short of a wake's log_last, so another writer wrote
// after it. They were answered at once, and the activation, its write
// landed, stayed stale with the turn that writer left owed unrun.
func (c *core) decideWakes() bool {
	for len(c.wakes) > 0 {
		q := c.wakes[0]
		c.wakes = c.wakes[1:]
		if c.staleWake(q.sender, q.msg) {
			return true // stopping answered the others
		}
	}
	c.wakes = nil
	return false
}

func (c *core) hasReady() bool {
	for _, id := range c.order {
		if c.calls[id].ready != nil {
			return true
		}
	}
	return false
}

func (c *core) humanPending() bool {
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
func (c *core) turnOwed() bool {
	if c.ended() {
		return false // an ended conversation runs no turn, even on an explicit wake
	}
	if n := len(c.ws.Events); n > 0 && c.ws.Events[n-1].GetTurnFailed() != nil && !c.rerun {
		return false
	}
	next, owed := owedTurn(c.ws, c.agentsOn(), c.knownAgent)
	if owed {
		c.nextAgent = next // used with named agents only
	}
	return owed
}

func (c *core) dispatchServerCalls() {
	for _, id := range c.order {
		call := c.calls[id]
		if call.dispatched || call.ready != nil || call.ev.GetExecutor() != messages.Executor_EXECUTOR_SERVER {
			continue
		}
		call.dispatched = true
		c.emit(effRunTool{inv: agent.Invocation{
			ConversationID: c.cfg.ID,
			ToolCallID:     id,
			Name:           call.ev.GetCall().GetName(),
			Arguments:      call.ev.GetCall().GetArguments(),
			Scope:          call.scope,
			Seq:            c.callSeq(id),
		}})
	}
}

// callSeq returns the seq of the tool_call event of call id in the working
// set, 0 if it is not there. Calls are dispatched right after their event
// is written or loaded, so the walk back is short.
func (c *core) callSeq(id string) uint64 {
	for i := len(c.ws.Events) - 1; i >= 0; i-- {
		if tc := c.ws.Events[i].GetToolCall(); tc != nil && tc.GetCall().GetId() == id {
			return c.ws.Events[i].GetSeq()
		}
	}
	return 0
}

func (c *core) startModel() {
	c.turn++
	c.modelBusy = true
	c.state = messages.AgentState_AGENT_STATE_STREAMING
	turn := agent.Turn{ConversationID: c.cfg.ID, Summary: c.ws.SummaryFor(""), Context: c.ws.Render(), Settings: c.settings}
	if c.cfg.Tools != nil {
		if c.specs == nil {
			// One copy per activation: a Model must not modify its Turn
			// (agent.Turn), so every turn can share it.
			c.specs = c.cfg.Tools.Specs()
		}
		turn.Tools = c.specs
	}
	if c.agentsOn() {
		c.turnAgent = c.nextAgent
		c.agentTurn(&turn)
	} else {
		// Render itself, unless the log holds agents' events (agents
		// configured before): the default agent's view.
		turn.Context = c.ws.RenderFor("")
	}
	// A damaged or imported log may hold a result without its call, two
	// for one call, or a call with neither result nor tool_call event:
	// every provider refuses such a context, on every later turn.
	turn.Context = agent.PairResults(turn.Context)
	var evicted []string
	if c.cfg.Audit {
		evicted = c.ws.Evicted()
	}
	c.emit(effStartModel{turn: c.turn, in: turn, lastSeq: c.ws.LastSeq, evicted: evicted})
}

func (c *core) cancelModel() {
	if c.modelBusy {
		c.emit(effCancelModel{})
		c.modelBusy = false
		c.turn++
	}
}

func (c *core) onModelDone(d *inModelDone) {
	if d.turn != c.turn || !c.modelBusy || c.stopping {
		return // a cancelled turn
	}
	c.modelBusy = false
	if d.err != nil {
		c.modelFailed(fmt.Errorf("conversation %q: model: %w", c.cfg.ID, d.err))
		return
	}
	c.attempts = 0
	if c.inflight != nil {
		// One write at a time: the answer waits for the write in flight.
		c.answer = d
		return
	}
	c.writeAnswer(d)
}

// modelFailed handles a failed model call (or an answer the Store
// refused): it retries the call after the policy's delay (or the wait the
// error names, when longer), or fails the turn. When the error names a
// wait (agent.RetryAfter), the time of the retry is written to the row
// (writeRetryTime), and an activation revived before then waits for it
// too (see armRevivedRetry).
func (c *core) modelFailed(err error) {
	c.attempts++
	p := c.cfg.Retry
	delay, ok := p.retry(err, c.attempts)
	if !ok {
		c.failTurn(err, c.attempts)
		return
	}
	c.log.Info("model call failed; retrying", "err", err, "attempt", c.attempts, "delay", delay)
	c.retryGen++
	c.retryArmed = true
	c.retryNotBefore = c.now.Add(delay)
	// A wait the provider asked for outlives the activation: written to
	// the row (by advance), so that a revival does not call sooner.
	_, c.retryToWrite = agent.RetryAfter(err)
	// Armed before the update is published: a subscriber that sees it
	// may move a test's clock on at once.
	c.emit(effArmRetry{gen: c.retryGen, delay: delay})
	c.publish(Update{Err: err, Retry: &Retry{Attempt: c.attempts, Delay: delay}})
	c.advance()
}

// cancelRetry abandons a retry waiting its delay.
func (c *core) cancelRetry() {
	if c.retryArmed {
		c.emit(effCancelRetry{})
		c.retryArmed = false
	}
	c.retryToWrite = false
}

// armRevivedRetry arms, on revival, the retry the row's fsm_state names
// (retry_not_before, see writeRetryTime) while it is still in the future
// and the log is still where it was written (last_seq: anything written
// since, a new message say, voids it). The owed turn then runs once the
// wait is over, not at once; attempts count from 1 again.
func (c *core) armRevivedRetry(st *messages.FSMState) {
	ts := st.GetRetryNotBefore()
	if ts == nil || ts.CheckValid() != nil || st.GetLastSeq() != c.ws.LastSeq {
		return
	}
	at := ts.AsTime()
	if !at.After(c.now) {
		return
	}
	c.log.Debug("revived waiting for a retry", "retry_not_before", at)
	c.retryGen++
	c.retryArmed = true
	c.retryNotBefore = at
	c.emit(effArmRetry{gen: c.retryGen, delay: at.Sub(c.now)})
}

// restartTurn abandons what the current turn owed (a retry, a failure not
// yet written, the count of attempts and of invalid answers): a new
// message restarts the turn.
func (c *core) restartTurn() {
	c.cancelRetry()
	c.failure = nil
	c.attempts = 0
	c.invalidAnswers = 0
}

// failTurn gives the turn up: a turn_failed event (written by advance, see
// writeFailure) records err and how many attempts were made, and the
// conversation is idle until a new message or an explicit wake.
func (c *core) failTurn(err error, attempts int) {
	c.log.Warn("turn failed", "err", err, "attempts", attempts)
	c.failure = &messages.TurnFailed{Message: turnErrorText(err), Code: TurnFailureCode(err), Attempts: uint32(max(attempts, 0))}
	c.attempts, c.invalidAnswers, c.rerun = 0, 0, false
	c.state = messages.AgentState_AGENT_STATE_IDLE
	c.advance()
}

func (c *core) onWriteReply(r *inWriteReply) {
	w := c.inflight
	if w == nil || r.id != w.id {
		return // a reply meant for an earlier activation
	}
	c.inflight = nil
	if err := r.err; err != nil {
		if what, ok := refusedWhole(w, err); ok {
			// The Store refused the write before writing any of it, so the
			// log and the row are what this core holds: its callers get the
			// refusal, and the activation goes on.
			c.log.Debug("write refused", "what", what, "err", err)
			c.replyWrite(w, fmt.Errorf("conversation %q: %s: %w", c.cfg.ID, what, err))
			c.advance()
			return
		}
		if w.kind == writeAnswer && errors.Is(err, journal.ErrInvalid) {
			// The Store refused the model's answer before writing any of
			// it, so the log is still what this actor holds: the model
			// call failed (see modelFailed). Once the activation stops
			// (its callers were answered then), nothing follows: no retry
			// is armed after the halt, and the next activation runs the
			// turn from the log.
			if c.stopping {
				return
			}
			c.modelFailed(fmt.Errorf("conversation %q: model answer rejected: %w", c.cfg.ID, err))
			return
		}
		// The log and this actor's view may now differ (another writer,
		// a failed disk): stop, and let the next command revive from the log.
		err = fmt.Errorf("conversation %q: write: %w", c.cfg.ID, err)
		c.log.Warn("write failed; stopping", "err", err)
		c.replyWrite(w, err)
		// The end of the turn in progress as this activation saw the log
		// (After): a subscription that has delivered a later event (this
		// write, landed though reported unknown; a later activation's)
		// does not get it as the end of a later turn.
		c.publish(Update{Err: err, After: c.ws.LastSeq})
		// Retire first (stop), then ask for the wake-up: a wake-up that
		// found this activation still live would be sent to it, and lost
		// with it. After a fenced write or one of unknown outcome the
		// next activation reads from the log what it holds and does the
		// work owed (an answer, a tool's result, the turn's next step),
		// which must not wait for the next command.
		c.stop(err)
		switch {
		case errors.Is(err, journal.ErrConflict):
			c.emit(effFenced{committed: c.committed})
		case errors.Is(err, journal.ErrUnknownOutcome):
			c.emit(effUnknown{committed: c.committed})
		}
		return
	}
	c.committed = true
	if st := w.req.GetStatus(); st != messages.ConversationStatus_CONVERSATION_STATUS_UNSPECIFIED {
		c.rowStatus = st
	}
	if st := w.req.GetFsmState(); st != nil {
		c.rowAwaiting = st.GetState() == messages.AgentState_AGENT_STATE_AWAITING_INPUT
	}
	events := w.req.GetEvents()
	if err := c.ws.Append(events...); err != nil {
		c.stop(err)
		return
	}
	for _, ev := range events {
		if rid := ev.GetRequestId(); rid != "" {
			c.seen[rid] = ev.GetSeq()
		}
	}
	for _, q := range w.sends {
		c.reply(q.sender, q.msg, c.seen[q.msg.GetRequestId()], nil)
	}
	if kv := w.req.GetSettings(); len(kv) > 0 {
		c.setSettings(journal.MergeSettings(c.rowSettings, kv))
	}
	for _, q := range w.configs {
		c.reply(q.sender, q.msg, 0, nil)
	}
	if w.requester != nil {
		c.requester = *w.requester
	}
	switch w.kind {
	case writeEnd:
		c.reply(w.end.sender, w.end.msg, 0, nil)
		c.refuseQueuedAfterEnd()
	case writeAnswer:
		for _, call := range w.calls {
			id := call.ev.GetCall().GetId()
			call.scope = c.requester // the turn's: any later message waits for this write
			c.calls[id] = call
			c.order = append(c.order, id)
		}
		c.resolveHandoffs()
	case writeResults:
		for _, id := range w.done {
			delete(c.calls, id)
		}
		c.order = remove(c.order, w.done)
	case writeRewind:
		// Every open call was in the rewound span (CheckRewind refuses a
		// point where one is open), and the write resolved it. A server
		// run still in flight is for a call now canceled: its context is
		// cancelled, as a kill's is, and its outcome ignored.
		for _, id := range c.order {
			if call := c.calls[id]; call.dispatched && call.ready == nil {
				c.emit(effCancelTool{id: id})
			}
		}
		c.calls = map[string]*openCall{}
		c.order = nil
		if m := w.rewind.msg; m.GetMessage() != nil {
			c.requester = w.rewind.scope
		}
		c.reply(w.rewind.sender, w.rewind.msg, w.req.GetEvents()[len(w.req.GetEvents())-1].GetSeq(), nil)
		if _, below := c.ws.RewoundPastSummary(); below {
			// The summary covers events no longer on the head: a new
			// activation revives from an earlier one (see load). Retire,
			// then ask for the wake-up that does the work owed (an
			// edit's turn).
			c.stop(fmt.Errorf("conversation %q: rewound below its summary, reviving: %w", c.cfg.ID, ErrAgentStopped))
			c.emit(effFenced{committed: true})
			return
		}
	}
	c.advance()
}

// refusedWhole reports whether err refuses write w before the Store wrote
// any of it, in a way the activation survives, and names what was
// refused: settings the Store found invalid, a scheduled wake whose
// occurrence is stale (recorded already, or the schedule is gone), or a
// rewind whose cancellation met a call answered in the Store first (the
// answer won the race; its delivery follows).
func refusedWhole(w *pendingWrite, err error) (string, bool) {
	switch {
	case w.kind == writeConfigs && errors.Is(err, journal.ErrInvalid):
		return "settings", true
	case w.kind == writeSends && w.req.GetScheduleFire() != nil && errors.Is(err, journal.ErrStale):
		return "scheduled wake", true
	case w.kind == writeRewind && errors.Is(err, journal.ErrStale):
		return "rewind: a call it cancels was answered first", true
	case w.kind == writeRetryTime && errors.Is(err, journal.ErrInvalid):
		return "retry time", true
	}
	return "", false
}

// replyWrite answers every caller waiting on write w with err.
func (c *core) replyWrite(w *pendingWrite, err error) {
	for _, q := range w.sends {
		c.reply(q.sender, q.msg, 0, err)
	}
	for _, q := range w.configs {
		c.reply(q.sender, q.msg, 0, err)
	}
	if q := w.rewind; q != nil {
		c.reply(q.sender, q.msg, 0, err)
		w.rewind = nil
	}
	if q := w.end; q != nil {
		c.reply(q.sender, q.msg, 0, err)
		w.end = nil
	}
}

func (c *core) publish(u Update) {
	u.ConversationID = c.cfg.ID
	c.emit(effPublish{u: u})
}

func (c *core) maybeSummarize() {
	if !c.cfg.Summarize || c.summarizing || (c.summaryFailedAt != 0 && c.summaryFailedAt == c.ws.LastSeq) ||
		!c.cfg.Policy.Due(c.ws) || (!c.agentsOn() && c.ws.HoldsAgents()) {
		return
	}
	plan, ok := c.planSummary()
	if !ok {
		return
	}
	c.summarizing = true
	c.summaryAt = c.ws.LastSeq
	c.emit(effSummarize{plan: plan})
}

func (c *core) onSummary(d *inSummaryDone) {
	c.summarizing = false
	if d.err != nil {
		c.log.Warn("summary failed; tried again once the log grows", "err", d.err)
		c.summaryFailedAt = c.summaryAt
		c.advance() // nothing else may be left: the idle timer runs again
		return
	}
	if c.ws.RewoundBelow(d.summary.GetToSeq()) {
		// A rewind written while the summary was made moved the head below
		// its end: the summary stands for events no longer on the head. It
		// stays in the Store (a revival passes over it, see load); the
		// working set, which still holds the events of the head, is kept
		// as it is, so the turn in flight goes on.
		c.log.Debug("summary passed over: rewound below it", "to_seq", d.summary.GetToSeq())
		c.advance()
		return
	}
	if err := c.ws.Compact(d.summary); err != nil {
		c.log.Error("compaction after summary failed; tried again once the log grows", "err", err)
		c.summaryFailedAt = c.summaryAt
		c.advance()
		return
	}
	c.rememberRequests()
	c.log.Debug("summarized", "to_seq", d.summary.GetToSeq())
	c.advance()
}

// rememberRequests sets the idempotency keys the activation recognises to
// the working set's: those its summary carries (the newest it folded away;
// see snapshot.MaxSummaryRequests) and those of the events after it.
func (c *core) rememberRequests() {
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
func (c *core) quiescent() bool {
	if !c.loaded || c.inflight != nil || c.modelBusy || c.answer != nil || c.summarizing || len(c.sends) > 0 ||
		c.retryArmed || c.failure != nil || len(c.configs) > 0 || len(c.ends) > 0 {
		return false
	}
	if c.ended() {
		return true // its open calls are neither run nor recorded (see advance)
	}
	for _, id := range c.order {
		call := c.calls[id]
		if call.ready != nil || (call.dispatched && call.ev.GetExecutor() == messages.Executor_EXECUTOR_SERVER) {
			return false
		}
	}
	return true
}

// stop retires this activation: the runtime is told why (effRetire), every
// caller still waiting is answered with cause (which says whether to retry
// on a new activation), and the work in flight is abandoned (effHalt, which
// also stops the actor once the commands already in its mailbox are
// answered).
func (c *core) stop(cause error) {
	if c.stopping {
		return
	}
	c.emit(effRetire{cause: cause})
	c.failAll(cause)
	c.stopping = true
	c.cause = cause
	c.modelBusy = false
	c.retryArmed = false
	c.emit(effHalt{poison: true})
}

// failAll answers every caller still waiting on this activation: those
// whose command is queued with cause, those whose write is in flight with
// cause and journal.ErrUnknownOutcome (the write may still land: a send or
// a configure is safe to retry; a rewind's caller reads the history). The
// retry flag of either answer is cause's (ErrAgentStopped: retry on a new
// activation, which reads from the log whether the write landed).
func (c *core) failAll(cause error) {
	if cause == nil {
		cause = c.notApplied(nil)
	}
	unknown := cause
	if !errors.Is(cause, journal.ErrUnknownOutcome) {
		unknown = fmt.Errorf("%w (%w)", cause, journal.ErrUnknownOutcome)
	}
	cause = c.notApplied(cause)
	w := c.inflight
	if w == nil {
		w = &pendingWrite{}
	}
	for _, q := range c.sends {
		c.reply(q.sender, q.msg, 0, cause)
	}
	for _, q := range w.sends {
		c.reply(q.sender, q.msg, 0, unknown)
	}
	for _, q := range c.configs {
		c.reply(q.sender, q.msg, 0, cause)
	}
	for _, q := range w.configs {
		c.reply(q.sender, q.msg, 0, unknown)
	}
	for _, q := range c.rewinds {
		c.reply(q.sender, q.msg, 0, cause)
	}
	if w.rewind != nil {
		c.reply(w.rewind.sender, w.rewind.msg, 0, unknown)
	}
	if w.end != nil {
		c.reply(w.end.sender, w.end.msg, 0, unknown)
	}
	for _, q := range c.ends {
		c.reply(q.sender, q.msg, 0, cause)
	}
	for _, m := range c.buffered {
		c.reply(m.sender, m.cmd.Msg, 0, cause)
	}
	for _, q := range c.wakes {
		c.reply(q.sender, q.msg, 0, cause)
	}
	c.sends, c.configs, c.rewinds, c.ends, c.buffered, c.wakes = nil, nil, nil, nil, nil, nil
	w.sends, w.configs, w.rewind, w.end = nil, nil, nil, nil
}

// notApplied is the answer to a command this activation stopped without
// applying, given why it stopped: the cause itself when a new activation
// would meet it too (a Store that refuses reads, say), else an error
// wrapping ErrAgentStopped, which tells the caller to retry on a new
// activation: after a passivation or a kill (no cause), and after a write
// whose outcome is unknown (a timeout: the new activation reads from the
// log whether it landed, and a retried send finds its request id there).
func (c *core) notApplied(cause error) error {
	switch {
	case cause == nil:
		return fmt.Errorf("conversation %q: %w", c.cfg.ID, ErrAgentStopped)
	case errors.Is(cause, journal.ErrUnknownOutcome) && !errors.Is(cause, ErrAgentStopped):
		return fmt.Errorf("conversation %q: %w (it stopped after a write of unknown outcome: %v)", c.cfg.ID, ErrAgentStopped, cause)
	case errors.Is(cause, journal.ErrInvalid) && !errors.Is(cause, ErrAgentStopped):
		// A write the Store refused as bad input: that write's own fault,
		// which a command queued behind it does not share.
		return fmt.Errorf("conversation %q: %w (it stopped after a write the Store refused: %v)", c.cfg.ID, ErrAgentStopped, cause)
	}
	return cause
}

// checkCall returns what is wrong with a call the model issued (an unknown
// tool, arguments that are not a JSON object), in words the model can act
// on, or "" if nothing is. A name or arguments that are not valid UTF-8
// are made so in place (the call is recorded as it was asked for, and the
// Store takes only UTF-8).
func (c *core) checkCall(tc *messages.ToolCall) string {
	tc.Name = strings.ToValidUTF8(tc.GetName(), "\uFFFD")
	tc.Arguments = strings.ToValidUTF8(tc.GetArguments(), "\uFFFD")
	if c.cfg.Tools == nil {
		return fmt.Sprintf("unknown tool %q: no tools are available", tc.GetName())
	}
	err := c.cfg.Tools.CheckCall(tc.GetName(), tc.GetArguments())
	if err == nil {
		return c.agentToolProblem(tc.GetName())
	}
	// The model reads this: leave out the Go package and sentinel.
	msg := strings.TrimSuffix(err.Error(), ": "+journal.ErrInvalid.Error())
	return strings.TrimPrefix(msg, "agent: ")
}

// awaitingInput reports whether a human call is open without a result,
// among the core's calls and extra.
func (c *core) awaitingInput(extra []*openCall) bool {
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

// setSettings sets the conversation's own settings, as its row holds them,
// and the settings of its model calls: those over the configured defaults.
func (c *core) setSettings(row map[string]string) {
	c.rowSettings = row
	c.settings = agent.SettingsOf(row).Over(c.cfg.Settings)
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

// ResolvedFromRow returns the delivery of the answer that tool call row
// holds (its status, result and resolver, as a revival records them), or
// nil if the row is not terminal.
func ResolvedFromRow(row *messages.ToolCallRecord) *messages.AgentResolved {
	if !journal.IsTerminal(row.GetStatus()) {
		return nil
	}
	return &messages.AgentResolved{ToolCallId: row.GetId(), Status: row.GetStatus(), Result: row.GetResult(),
		By: resolvedBy(row.GetStatus()), Resolver: row.GetResolver()}
}
