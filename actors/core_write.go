package actors

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

func (c *core) event(body func(*messages.Event)) *messages.Event {
	ev := &messages.Event{Time: journal.Timestamp(c.now)}
	body(ev)
	return ev
}

// setRow fills in what req, a write with status st that leaves extra
// calls open besides the actor's, changes in the conversation row: the
// status and the fsm_state cache (the state the actor will be in once the
// write lands, and the calls it still owes). A write in the middle of a
// turn (the conversation stays active, is not awaiting input, and its row
// does not say it is) leaves the row alone: DESIGN persists fsm_state only
// as idle or awaiting_input, and a kill mid-turn is recovered from the
// log, which wins over the row. That is two row rewrites fewer per turn
// with a server tool call. A row that says awaiting_input is rewritten by
// the first write after the last human call is answered, even when its
// status is ACTIVE already (the answer's own write, Runtime.Resolve's or
// an expiry's, made it so): it would otherwise name an answered call as
// pending until the turn ends.
//
// A write that leaves a SUSPENDED row suspended does not restate the
// status. The only writes of the row besides this activation's are
// answers' (Runtime.Resolve's, an expiry's): each makes it ACTIVE, so that
// the next Open resumes the conversation if the answer's delivery is lost,
// and a message, or a server call's result, written while the human call
// is still open in this activation's view must not undo that. Once an
// answer is delivered, rowStatus is ACTIVE (see onCommand), so the write
// that records it states the status it leaves: SUSPENDED while another
// human call is open. An answer to that other call may have been written
// just before it and not yet delivered; the Store then writes ACTIVE
// instead (journal.StatusWritten: a call the fsm_state names pending is
// terminal), deciding in the write's own atomic commit, so the mark stands
// even if the process dies as the write lands. rowStatus then says
// SUSPENDED over an ACTIVE row, which costs at most a later write stating
// a status the row already has.
func (c *core) setRow(req *messages.AppendRequest, st messages.ConversationStatus, extra []*openCall) {
	if st == messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE && c.rowStatus == st && !c.rowAwaiting && !c.awaitingInput(extra) {
		return
	}
	if st != messages.ConversationStatus_CONVERSATION_STATUS_SUSPENDED || c.rowStatus != st {
		req.Status = st
	}
	req.FsmState = c.fsmState(c.ws.LastSeq+uint64(len(req.GetEvents())), extra)
}

func (c *core) fsmState(lastSeq uint64, extra []*openCall) *messages.FSMState {
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
func (c *core) write(w *pendingWrite) {
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
	c.emit(effWrite{id: w.id, req: w.req})
}

// cutAtFire splits the queued sends before what writeSends writes now and
// what stays queued: a scheduled wake (a send with a schedule fire) not yet
// in the log is written alone, so that a stale fire (the occurrence was
// recorded, or the schedule cancelled) fails no other send.
func (c *core) cutAtFire(queued []*queuedSend) (now, rest []*queuedSend) {
	unseen := false
	for i, q := range queued {
		rid := q.msg.GetRequestId()
		if _, ok := c.seen[rid]; ok && rid != "" {
			continue
		}
		if q.fire != nil {
			if unseen {
				return queued[:i], queued[i:]
			}
			return queued[:i+1], queued[i+1:]
		}
		unseen = true
	}
	return queued, nil
}

// answerIfLogged answers a queued send whose request id the log already
// holds with that message's seq, and reports whether it did.
func (c *core) answerIfLogged(q *queuedSend) bool {
	rid := q.msg.GetRequestId()
	seq, ok := c.seen[rid]
	if !ok || rid == "" {
		return false
	}
	c.reply(q.sender, q.msg, seq, nil)
	return true
}

// defaultAppendBudget bounds the bytes of the events and resolutions that
// writeSends and writeResults gather into one append (coreConfig.AppendBudget):
// half of journal.MaxAppendBytes, the rest left for the row and fsm_state
// that setRow adds, so that no append the core builds of several requests
// is one the Store refuses.
const defaultAppendBudget = journal.MaxAppendBytes / 2

// appendBudget is cfg.AppendBudget, defaulted.
func (c *core) appendBudget() int {
	if c.cfg.AppendBudget > 0 {
		return c.cfg.AppendBudget
	}
	return defaultAppendBudget
}

// fieldBytes is what m adds to the encoding of the message holding it in
// a repeated field (tag, length and body; its tag is one byte).
func fieldBytes(m proto.Message) int { return 1 + protowire.SizeBytes(proto.Size(m)) }

// checkWrite checks evs as write gives them to the Store, as the events
// of the append from index from on (with the seqs write gives them), and
// returns an error wrapping journal.ErrInvalid for the first one the Store
// would refuse. The callers check what they are given (a message, a
// reason), but not the time, request id, author, address and seq added
// here: an event that does not fit journal.MaxEventBytes as written is
// refused before the write, which would otherwise fail, stop the
// activation and lose the turn under way.
func (c *core) checkWrite(from int, evs ...*messages.Event) error {
	for i, ev := range evs {
		ev.Seq = c.ws.LastSeq + uint64(from+i) + 1
		if err := journal.ValidateEvent(ev); err != nil {
			return fmt.Errorf("conversation %q: %w", c.cfg.ID, err)
		}
	}
	return nil
}

// sendEvent is the user message event of q, as writeSends writes it now.
func (c *core) sendEvent(q *queuedSend) *messages.Event {
	return c.event(func(ev *messages.Event) {
		ev.RequestId = q.msg.GetRequestId()
		ev.Author = q.scope.Identity().Proto()
		ev.Agent, ev.Audience = addressOf(q.msg.GetTo())
		ev.Body = &messages.Event_UserMsg{UserMsg: q.msg.GetMessage()}
	})
}

// writeSends writes the queued sends, each request id once, as many as one
// append may carry (journal.MaxEventsPerAppend events, appendBudget bytes;
// advance writes the rest next, in the order they arrived), and reports
// whether it started a write. A send whose request id the log already
// holds is answered with its seq and not appended again: onCommand checks
// the same, and this check keeps the write path from trusting that it did.
func (c *core) writeSends() bool {
	queued, rest := c.cutAtFire(c.sends)
	c.sends = rest
	req := &messages.AppendRequest{}
	written := map[string]bool{}
	var sends []*queuedSend
	var requester *agent.Scope
	size := 0
	for i, q := range queued {
		if c.answerIfLogged(q) {
			continue
		}
		rid := q.msg.GetRequestId()
		if rid != "" && written[rid] {
			// A retry of a send in this append: answered with it.
			sends = append(sends, q)
			continue
		}
		ev := c.sendEvent(q)
		if err := c.checkWrite(len(req.Events), ev); err != nil {
			// Refused alone: the other sends are written, and a retry
			// of its request id in this append is judged on its own.
			c.reply(q.sender, q.msg, 0, err)
			continue
		}
		n := fieldBytes(ev)
		if len(req.Events) == journal.MaxEventsPerAppend || len(req.Events) > 0 && size+n > c.appendBudget() {
			// A full append: the rest waits for the next write (a retry
			// of a send in this one joins it there, or is answered from
			// the log).
			c.sends = append(queued[i:len(queued):len(queued)], c.sends...)
			break
		}
		sends = append(sends, q)
		written[rid] = true
		if q.fire != nil {
			req.ScheduleFire = q.fire
		}
		req.Events = append(req.Events, ev)
		size += n
		requester = &q.scope
	}
	if len(req.Events) == 0 {
		return false
	}
	// A turn is owed once the messages land, unless a human call is open:
	// the model is called once its result is in the log (advance), so the
	// conversation stays suspended on it, awaiting input.
	status := messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE
	if c.awaitingInput(nil) {
		status = messages.ConversationStatus_CONVERSATION_STATUS_SUSPENDED
	}
	c.setRow(req, status, nil)
	c.write(&pendingWrite{kind: writeSends, req: req, sends: sends, requester: requester})
	return true
}

// writeResults writes the results that are ready, in log order, as many as
// one append may carry (journal.MaxEventsPerAppend events, appendBudget
// bytes); advance writes the rest next.
func (c *core) writeResults() {
	req := &messages.AppendRequest{}
	var done []string
	size := 0
	for _, id := range c.order {
		call := c.calls[id]
		if call.ready == nil {
			continue
		}
		tc := call.ev.GetCall()
		var evs []*messages.Event
		if call.ev.GetExecutor() == messages.Executor_EXECUTOR_HUMAN {
			evs = append(evs, c.event(func(ev *messages.Event) {
				ev.Agent = call.agent
				ev.Body = &messages.Event_Resolution{Resolution: &messages.Resolution{ToolCallId: id, Status: call.status, By: call.by, Resolver: call.resolver}}
			}))
		}
		evs = append(evs, c.event(func(ev *messages.Event) {
			ev.Agent = call.agent
			ev.Body = &messages.Event_ToolResult{ToolResult: &messages.ToolResultEvent{ToolCallId: id, Name: tc.GetName(), Outcome: call.ready}}
		}))
		if ev := c.handoffEvent(call); ev != nil {
			evs = append(evs, ev)
		}
		var res *messages.ToolResolution
		n := 0
		if !call.inStore {
			res = &messages.ToolResolution{ToolCallId: id, Status: call.status, Result: call.ready, At: journal.Timestamp(c.now)}
			n += fieldBytes(res)
		}
		for _, ev := range evs {
			n += fieldBytes(ev)
		}
		if len(done) > 0 && (len(req.Events)+len(evs) > journal.MaxEventsPerAppend || size+n > c.appendBudget()) {
			break
		}
		req.Events = append(req.Events, evs...)
		if res != nil {
			req.Resolutions = append(req.Resolutions, res)
		}
		size += n
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
	c.write(&pendingWrite{kind: writeResults, req: req, done: done})
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

// writeAnswer writes a model answer (see turnWrite).
func (c *core) writeAnswer(d *inModelDone) {
	req, calls, err := c.turnWrite(d.msg)
	if err != nil {
		c.failTurn(err, c.invalidAnswers)
		return
	}
	c.write(&pendingWrite{kind: writeAnswer, req: req, calls: calls})
}

// writeFailure writes the turn_failed event of a failed turn, and moves the
// conversation row out of ACTIVE (to IDLE), so that a restart does not
// resume the turn.
func (c *core) writeFailure() {
	f := c.failure
	c.failure = nil
	req := &messages.AppendRequest{Events: []*messages.Event{c.event(func(ev *messages.Event) {
		ev.Agent = c.turnAgent
		ev.Body = &messages.Event_TurnFailed{TurnFailed: f}
	})}}
	c.setRow(req, messages.ConversationStatus_CONVERSATION_STATUS_IDLE, nil)
	c.write(&pendingWrite{kind: writeFailure, req: req})
}

// writeRetryTime writes the time of the armed retry to the row
// (FSMState.retry_not_before, over the log's last seq), so that an
// activation revived before then waits for it (armRevivedRetry). The log
// is not written: nothing of the failed call is recorded.
func (c *core) writeRetryTime() {
	c.retryToWrite = false
	st := c.fsmState(c.ws.LastSeq, nil)
	st.RetryNotBefore = journal.Timestamp(c.retryNotBefore)
	c.write(&pendingWrite{kind: writeRetryTime, req: &messages.AppendRequest{FsmState: st}})
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
func (c *core) turnWrite(msg *messages.AssistantMessage) (*messages.AppendRequest, []*openCall, error) {
	// msg is the runtime's (agent.Model's contract): its tool calls get
	// their ids in place.
	req := &messages.AppendRequest{ConversationId: c.cfg.ID}
	var calls []*openCall
	var suspension []*messages.PendingCall
	invalid := map[int]string{} // index of the call -> what is wrong with it
	for i, tc := range msg.GetToolCalls() {
		if tc == nil {
			// A nil entry is what its encoding reads back as: an empty
			// call (no tool, no arguments), an invalid one.
			tc = &messages.ToolCall{}
			msg.ToolCalls[i] = tc
		}
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
	now := c.now
	requester := c.ws.Requester()
	results := make([]*messages.ToolOutcome, len(msg.GetToolCalls()))
	for i, tc := range msg.GetToolCalls() {
		if tc.GetId() != "" && tc.GetProviderId() == "" {
			tc.ProviderId = tc.GetId()
		}
		tc.Id = c.cfg.NewID(now)
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
			calls = append(calls, &openCall{ev: ev, prompt: req.ToolCalls[i].GetPrompt(), agent: c.turnAgent})
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
	stampAgent(req.Events, c.turnAgent)
	c.setRow(req, status, calls)
	// What the Store checks (text that is not UTF-8, records over the
	// limits) it checks before writing anything; onWriteReply fails the
	// turn when it refuses an answer. Checking here too would encode the
	// answer once more on every turn.
	return req, calls, nil
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

// writeConfigs writes the settings of every queued AgentConfigure, merged
// in order, into the conversation row, in order with the core's other
// writes. A conversation that has no row yet gets one, idle.
func (c *core) writeConfigs() {
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
	c.write(&pendingWrite{kind: writeConfigs, req: req, configs: queued})
}

// writeRewind writes the first queued AgentRewind, and reports whether it
// started a write; a refused one (a point CheckRewind refuses, an edit of
// something other than a user message on the head, an event that does not
// fit journal.MaxEventBytes as written) is answered with an error wrapping
// journal.ErrInvalid and nothing is written. The write is atomic: the
// rewind event, every call still open (all in the rewound span) resolved
// as errored with code agent.CodeCanceled (the Store drops their
// deadlines, and a late answer is stale), and for an edit the new user
// message after the rewind.
func (c *core) writeRewind() bool {
	q := c.rewinds[0]
	c.rewinds = c.rewinds[1:]
	m := q.msg
	if seq, ok := c.seen[m.GetRequestId()]; ok && m.GetRequestId() != "" {
		// A retried edit or rewind whose write landed (its activation
		// died before answering): answered from the log, not written
		// again.
		c.reply(q.sender, m, seq, nil)
		return false
	}
	to, err := c.rewindTarget(m)
	if err != nil {
		c.reply(q.sender, m, 0, err)
		return false
	}
	req := &messages.AppendRequest{Events: c.rewindEvents(q, to)}
	for _, id := range c.order {
		if call := c.calls[id]; call.ready == nil || !call.inStore {
			out := agent.ErrorOutcome(agent.CodeCanceled, "lazarus: the call was rewound")
			req.Resolutions = append(req.Resolutions, &messages.ToolResolution{
				ToolCallId: id, Status: messages.ToolCallStatus_TOOL_CALL_STATUS_ERRORED, Result: out, At: journal.Timestamp(c.now),
			})
		}
	}
	status := messages.ConversationStatus_CONVERSATION_STATUS_IDLE
	if m.GetMessage() != nil {
		status = messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE
	}
	if err := c.checkWrite(0, req.Events...); err != nil {
		c.reply(q.sender, m, 0, err)
		return false
	}
	req.Status = status
	req.FsmState = &messages.FSMState{State: messages.AgentState_AGENT_STATE_IDLE, LastSeq: c.ws.LastSeq + uint64(len(req.Events)), Pending: map[string]*messages.PendingCall{}}
	c.write(&pendingWrite{kind: writeRewind, req: req, rewind: q})
	return true
}

// rewindEvents are the events of the write of rewind q to seq to, as
// writeRewind writes them now: the rewind event and, for an edit, the new
// user message after it.
func (c *core) rewindEvents(q *queuedRewind, to uint64) []*messages.Event {
	m := q.msg
	evs := []*messages.Event{c.event(func(ev *messages.Event) {
		if m.GetMessage() == nil {
			// A plain rewind carries its request id, so that a retry of it
			// (its activation died before answering) is answered from the
			// log instead of written again; an edit's is on its message.
			ev.RequestId = m.GetRequestId()
		}
		ev.Body = &messages.Event_Rewind{Rewind: &messages.Rewind{ToSeq: to, Reason: m.GetReason(), CancelledTurn: c.turnInProgress()}}
	})}
	if m.GetMessage() != nil {
		evs = append(evs, c.event(func(ev *messages.Event) {
			ev.RequestId = m.GetRequestId()
			ev.Author = q.scope.Identity().Proto()
			ev.Agent, ev.Audience = c.editAddress(m)
			ev.Body = &messages.Event_UserMsg{UserMsg: m.GetMessage()}
		}))
	}
	return evs
}

// rewindTo is the seq rewind m moves the head to if it is accepted (see
// rewindTarget): its to_seq, or for an edit the seq before the message it
// replaces.
func rewindTo(m *messages.AgentRewind) uint64 {
	if m.GetMessage() != nil {
		return m.GetEditSeq() - 1
	}
	return m.GetToSeq()
}

// turnInProgress reports whether a turn is under way, one a rewind written
// now takes back (Rewind.cancelled_turn): the model owes an answer, or an
// open call is a server call or has its answer. A turn whose open calls
// all wait on humans has ended (suspended).
func (c *core) turnInProgress() bool {
	if c.turnOwed() {
		return true
	}
	for _, id := range c.order {
		if call := c.calls[id]; call.ready != nil || call.ev.GetExecutor() != messages.Executor_EXECUTOR_HUMAN {
			return true
		}
	}
	return false
}

// rewindTarget returns the seq an AgentRewind moves the head to, or why it
// is refused (an error wrapping journal.ErrInvalid), against the working
// set as it is now.
func (c *core) rewindTarget(m *messages.AgentRewind) (uint64, error) {
	to := rewindTo(m)
	base := c.ws.Summary.GetToSeq()
	if m.GetMessage() != nil {
		es := m.GetEditSeq()
		// The edited message must be on the head, as CheckRewindInLog
		// requires of one the summary covers: its seq-1 may be on the head
		// while a rewind skipped the message itself.
		if es == 0 || es > c.ws.LastSeq || (es > base && (c.ws.Events[es-base-1].GetUserMsg() == nil || !c.ws.OnHead(es))) || (es <= base && !m.GetCheckedInLog()) {
			return 0, fmt.Errorf("conversation %q: edit of seq %d: %w", c.cfg.ID, es,
				journal.Invalidf("not a user message on the head after the summary (last seq %d)", c.ws.LastSeq))
		}
	}
	// Below the summary the working set does not hold the events to check
	// the target against: accepted only if the caller checked it against
	// the log (checked_in_log; a summary that landed since the caller's
	// check makes the target refused); once written, the activation
	// revives from the log (see onWriteReply).
	if err := c.ws.CheckRewind(to); err != nil && (to >= base || !m.GetCheckedInLog()) {
		return 0, fmt.Errorf("conversation %q: %w", c.cfg.ID, err)
	}
	return to, nil
}
