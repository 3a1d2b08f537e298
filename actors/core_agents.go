package actors

import (
	"encoding/json"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/snapshot"
)

// The core's part of multi-agent conversations (see agents.go). Without
// named agents (cfg.Agents empty) none of it changes a decision: every
// event is the default agent's, and the core behaves as before agents.

// maxHandoffMessageBytes bounds the message a handoff event carries.
const maxHandoffMessageBytes = 64 << 10

func (c *core) agentsOn() bool { return len(c.cfg.Agents) > 0 }

// knownAgent reports whether name is the default agent or a configured one.
func (c *core) knownAgent(name string) bool {
	_, ok := c.cfg.Agents[name]
	return name == "" || ok
}

// owes reports whether ev, the last event on the head an agent owns, owes
// that agent a turn: a user message or a handoff addressed to it, or the
// result of one of its calls other than a handoff it made (a handoff ends
// the turn of the agent that passes it).
func owes(ev *messages.Event) bool {
	switch b := ev.GetBody().(type) {
	case *messages.Event_UserMsg, *messages.Event_Handoff:
		return true
	case *messages.Event_ToolResult:
		return b.ToolResult.GetName() != HandoffToolName || b.ToolResult.GetOutcome().GetError() != nil
	}
	return false
}

// agentOwed is turnOwed with named agents, or on a log they wrote (then
// only the default agent is known): see owedAgent. It sets nextAgent to the
// agent that gets the turn, if one is owed.
func (c *core) agentOwed() bool {
	next, found := owedAgent(c.ws, c.knownAgent)
	if found {
		c.nextAgent = next
	}
	return found
}

// owedAgent reports which agent owes a turn at the end of ws, the agents
// known by known: each agent owes a turn when the last rendered event it
// owns (Event.agent) owes one (see owes), or, when none of its events
// follows the summary, when the summary says so (Summary.owed); of those,
// the agent whose owed event is the oldest gets the turn. Events of agents
// no longer configured owe nothing. A tool_result that answers no call (an
// orphan or a second result, see lastSeen) is not an agent's last event:
// the one before it decides.
func owedAgent(ws *snapshot.WorkingSet, known func(string) bool) (string, bool) {
	r := ws.Render()
	seen := map[string]bool{}
	next, found := "", false
	var stray map[*messages.Event]bool // the full scan's, once a fast check fails
	for i := len(r) - 1; i >= 0; i-- {
		ev := r[i]
		a := ev.GetAgent()
		if seen[a] {
			continue
		}
		if ev.GetToolResult() != nil && !answersAt(ws, r, i) {
			if stray == nil {
				stray = strayResults(ws)
			}
			if stray[ev] {
				continue
			}
		}
		seen[a] = true
		if owes(ev) && known(a) {
			next, found = a, true // walking back: the last found is the oldest
		}
	}
	// What the summary says is owed is older than any event after it.
	var oldest uint64
	for _, o := range ws.Summary.GetOwed() {
		if a := o.GetAgent(); !seen[a] && known(a) && (oldest == 0 || o.GetSeq() < oldest) {
			next, oldest, found = a, o.GetSeq(), true
		}
	}
	return next, found
}

// owedTurn is turnOwed on ws past the conversation's own state (ended, a
// re-run asked for): whether the model owes an answer at the end of ws, and
// with named agents (agentsOn) or on a log they wrote, which agent
// (owedAgent, known naming the configured agents). A rewind at the end owes
// no turn; a send (or an edit) after it does.
func owedTurn(ws *snapshot.WorkingSet, agentsOn bool, known func(string) bool) (string, bool) {
	if n := len(ws.Events); n > 0 && ws.Events[n-1].GetRewind() != nil {
		return "", false
	}
	last := ws.LastRendered()
	if agentsOn || last == nil || last.GetAgent() != "" || last.GetHandoff() != nil {
		// With named agents, or a log they wrote (agents configured
		// before): each agent's own events decide, and those of agents no
		// longer configured owe nothing.
		return owedAgent(ws, known)
	}
	if last.GetToolResult() != nil {
		last = lastSeen(ws)
	}
	switch last.GetBody().(type) {
	case *messages.Event_UserMsg, *messages.Event_ToolResult:
		return "", true
	}
	return "", false
}

// lastSeen returns the last rendered event of ws that decides whether a
// turn is owed, nil if none: a tool_result counts only if it answers a
// call, the first result after an assistant_msg or a tool_call event
// named the call. Others, an orphan (its call is nowhere) or a second
// result, answer nothing: the model's context leaves them out
// (agent.PairResults). Only a damaged or imported log holds them.
func lastSeen(ws *snapshot.WorkingSet) *messages.Event {
	if last, ok := lastAnswers(ws); ok {
		return last
	}
	return lastSeenScan(ws)
}

// lastSeenScan is lastSeen by a full scan of ws.
func lastSeenScan(ws *snapshot.WorkingSet) *messages.Event {
	stray := strayResults(ws)
	r := ws.Render()
	for i := len(r) - 1; i >= 0; i-- {
		if !stray[r[i]] {
			return r[i]
		}
	}
	return nil
}

// strayResults returns the rendered tool_results of ws that answer no call
// (see lastSeen), by a full scan; an empty, non-nil map when there are none.
func strayResults(ws *snapshot.WorkingSet) map[*messages.Event]bool {
	var logged map[string]uint64 // call id -> seq of its first tool_call event
	for _, ev := range ws.Events {
		if tc := ev.GetToolCall(); tc != nil {
			if logged == nil {
				logged = map[string]uint64{}
			}
			if _, ok := logged[tc.GetCall().GetId()]; !ok {
				logged[tc.GetCall().GetId()] = ev.GetSeq()
			}
		}
	}
	named, answered, stray := map[string]bool{}, map[string]bool{}, map[*messages.Event]bool{}
	for _, ev := range ws.Render() {
		for _, tc := range ev.GetAssistantMsg().GetToolCalls() {
			named[agent.CallID(tc)] = true
		}
		if tr := ev.GetToolResult(); tr != nil {
			id := tr.GetToolCallId()
			at, ok := logged[id]
			if answered[id] || !named[id] && (!ok || at > ev.GetSeq()) {
				stray[ev] = true
				continue
			}
			answered[id] = true
		}
	}
	return stray
}

// lastAnswers is lastSeen's fast path, taken on every log that is not
// damaged, without allocating: it reports the last rendered event, a
// tool_result, and true when that result answers its call (answersAt);
// false when only the full scan can tell.
func lastAnswers(ws *snapshot.WorkingSet) (*messages.Event, bool) {
	rendered := ws.Render()
	if len(rendered) == 0 || rendered[len(rendered)-1].GetToolResult() == nil {
		return nil, false
	}
	if !answersAt(ws, rendered, len(rendered)-1) {
		return nil, false
	}
	return rendered[len(rendered)-1], true
}

// answersAt reports, without allocating, true when the tool_result
// rendered[i] (rendered is ws.Render()) answers its call: no earlier
// rendered result has its call id, and an earlier assistant_msg or a
// tool_call event up to its seq named the call; false when only the full
// scan (strayResults) can tell.
func answersAt(ws *snapshot.WorkingSet, rendered []*messages.Event, i int) bool {
	res := rendered[i]
	id := res.GetToolResult().GetToolCallId()
	named := false
	for _, ev := range rendered[:i] {
		if r := ev.GetToolResult(); r != nil && r.GetToolCallId() == id {
			return false // a second result, or one before: the full scan decides
		}
		if !named {
			for _, tc := range ev.GetAssistantMsg().GetToolCalls() {
				if agent.CallID(tc) == id {
					named = true
					break
				}
			}
		}
	}
	if named {
		return true
	}
	for _, ev := range ws.Events {
		if ev.GetSeq() > res.GetSeq() {
			break
		}
		if tc := ev.GetToolCall(); tc != nil && tc.GetCall().GetId() == id {
			return true
		}
	}
	return false
}

// OwesTurn reports whether a conversation whose working set is ws owes a
// turn, as its core decides on activation with the named agents agents
// (the names of the Runtime's Options.Agents, nil without them): not after
// a turn_failed or a rewind at the end; otherwise the last event the model
// sees is a user message or a tool result (one that answers no call, an
// orphan or a second result, is not seen), or with named agents (or on a
// log they wrote), some configured agent's last own event (again not one
// that answers no call) is a user message, a handoff to it or a result of
// its call other than a handoff it made (a summary's owed entries count
// for agents without later events). A nil ws (no conversation) owes
// nothing.
func OwesTurn(ws *snapshot.WorkingSet, agents []string) bool {
	if ws == nil {
		return false
	}
	if n := len(ws.Events); n > 0 && ws.Events[n-1].GetTurnFailed() != nil {
		return false
	}
	_, owed := owedTurn(ws, len(agents) > 0, func(name string) bool { return name == "" || slices.Contains(agents, name) })
	return owed
}

// agentTurn fills in turn for the agent that has it (turnAgent): its
// summary and the events after it it sees, its settings over the
// conversation's, its tools, and its name.
func (c *core) agentTurn(turn *agent.Turn) {
	name := c.turnAgent
	turn.Agent = name
	turn.Context = c.ws.RenderFor(name)
	if name == "" {
		return
	}
	turn.Summary = c.ws.SummaryFor(name)
	cfg := c.cfg.Agents[name]
	turn.Settings = cfg.Settings.Over(c.settings)
	if c.agentSpecs == nil {
		c.agentSpecs = map[string][]agent.ToolSpec{}
	}
	specs, ok := c.agentSpecs[name]
	if !ok {
		for _, s := range c.specs {
			if s.Name == HandoffToolName || slices.Contains(cfg.Tools, s.Name) {
				specs = append(specs, s)
			}
		}
		c.agentSpecs[name] = specs
	}
	turn.Tools = specs
}

// agentToolProblem says why the agent that has the turn may not call the
// tool name ("" if it may): a named agent calls only its own tools and the
// handoff tool.
func (c *core) agentToolProblem(name string) string {
	if c.turnAgent == "" || name == HandoffToolName {
		return ""
	}
	if slices.Contains(c.cfg.Agents[c.turnAgent].Tools, name) {
		return ""
	}
	return "unknown tool \"" + name + "\": agent " + c.turnAgent + " has no such tool"
}

// planSummary plans the next summary: without named agents the working
// set's Plan (the default agent's view, which is every event); with them
// one summary per agent at the same seq, each of that agent's view alone
// (snapshot.PlanAgents), so every agent's working set stays bounded. It
// plans none while a turn is owed that nobody runs now (see turnOwed): a
// summary never changes which turn is owed.
func (c *core) planSummary() (snapshot.Plan, bool) {
	if n := len(c.ws.Events); !c.agentsOn() && n > 0 && c.ws.Events[n-1].GetTurnFailed() != nil {
		// The failed turn is owed to an explicit wake (turnOwed): folding
		// its message (or result) away would leave nothing on the head to
		// owe it. Wait, as agents do below, for the next message.
		return snapshot.Plan{}, false
	}
	if !c.agentsOn() {
		return c.ws.Plan(c.cfg.Policy.KeepRecent)
	}
	// An agent may still owe a turn nobody runs now (after a failed turn
	// or a rewind at the end): folding its owed event away would change
	// which agent a later message gives the turn to (agentOwed). Wait.
	next := c.nextAgent
	owed := c.agentOwed()
	c.nextAgent = next
	if owed {
		return snapshot.Plan{}, false
	}
	p, ok := c.ws.PlanAgents(c.cfg.Policy.KeepRecent, c.agentNames()[1:])
	if ok {
		p.Owed = c.owedUpTo(p.ToSeq)
	}
	return p, ok
}

// owedUpTo returns what a summary up to seq to records as owed to agents
// (Summary.owed): the working set's summary's, then, walking the rendered
// events up to to, each agent's last event decides (see owes).
func (c *core) owedUpTo(to uint64) []*messages.AgentOwed {
	owed := map[string]uint64{}
	for _, o := range c.ws.Summary.GetOwed() {
		owed[o.GetAgent()] = o.GetSeq()
	}
	for _, ev := range c.ws.Render() {
		if ev.GetSeq() > to {
			break
		}
		if owes(ev) {
			owed[ev.GetAgent()] = ev.GetSeq()
		} else {
			delete(owed, ev.GetAgent())
		}
	}
	out := make([]*messages.AgentOwed, 0, len(owed))
	for a, seq := range owed {
		out = append(out, &messages.AgentOwed{Agent: a, Seq: seq})
	}
	slices.SortFunc(out, func(x, y *messages.AgentOwed) int { return strings.Compare(x.GetAgent(), y.GetAgent()) })
	return out
}

// stampAgent sets the agent of the events that name none to name.
func stampAgent(evs []*messages.Event, name string) {
	if name == "" {
		return
	}
	for _, ev := range evs {
		if ev.GetAgent() == "" {
			ev.Agent = name
		}
	}
}

// addressOf returns the agent and audience of a user message sent to to.
func addressOf(to *messages.AgentAddress) (string, []string) {
	if to.GetBroadcast() {
		return to.GetAgent(), []string{snapshot.Broadcast}
	}
	return to.GetAgent(), nil
}

// loadCallAgents sets the agent of each open call from its tool_call event
// (a revival: the working set's open calls carry no header).
func (c *core) loadCallAgents() {
	if !c.agentsOn() || len(c.calls) == 0 {
		return
	}
	for _, ev := range c.ws.Events {
		if tc := ev.GetToolCall(); tc != nil {
			// The call's own event (OpenCalls'), not another naming its id
			// (a rewound one, or a duplicate in a damaged log).
			if call, ok := c.calls[tc.GetCall().GetId()]; ok && call.ev == tc {
				call.agent = ev.GetAgent()
			}
		}
	}
}

// handoffArgs are the arguments of a handoff call.
type handoffArgs struct {
	Agent   string `json:"agent"`
	Message string `json:"message"`
}

// handoffTarget parses a handoff call's arguments: the agent it passes the
// turn to ("" for the default agent) and its message, or what is wrong.
func (c *core) handoffTarget(call *openCall) (to, msg, problem string) {
	var a handoffArgs
	if err := json.Unmarshal([]byte(call.ev.GetCall().GetArguments()), &a); err != nil {
		return "", "", "the arguments must be {\"agent\": name, \"message\": text}"
	}
	to = a.Agent
	if to == DefaultAgentName {
		to = ""
	}
	switch {
	case a.Agent == "":
		return "", "", "name the agent to pass the turn to (\"agent\")"
	case !c.knownAgent(to):
		return "", "", "unknown agent \"" + a.Agent + "\"; the agents are: " + strings.Join(c.agentNames(), ", ")
	case to == call.agent:
		return "", "", "agent \"" + a.Agent + "\" already has the turn"
	}
	msg = a.Message
	if len(msg) > maxHandoffMessageBytes {
		msg = msg[:maxHandoffMessageBytes]
		for !utf8.ValidString(msg) {
			msg = msg[:len(msg)-1]
		}
	}
	return to, msg, ""
}

func (c *core) agentNames() []string {
	names := []string{DefaultAgentName}
	for n := range c.cfg.Agents {
		names = append(names, n)
	}
	sort.Strings(names[1:])
	return names
}

// resolveHandoffs answers the open handoff calls that have no outcome yet:
// the core is their executor. The outcome is written by writeResults, with
// the handoff event (handoffEvent), in one atomic write; a revival that
// finds such a call still open answers it again, the same way.
func (c *core) resolveHandoffs() {
	if !c.agentsOn() {
		return
	}
	for _, id := range c.order {
		call := c.calls[id]
		if call.ready != nil || call.ev.GetCall().GetName() != HandoffToolName || call.ev.GetExecutor() != messages.Executor_EXECUTOR_SERVER {
			continue
		}
		to, _, problem := c.handoffTarget(call)
		if problem != "" {
			call.ready, call.status = agent.ErrorOutcome(agent.CodeInvalid, problem), messages.ToolCallStatus_TOOL_CALL_STATUS_ERRORED
			continue
		}
		name := to
		if name == "" {
			name = DefaultAgentName
		}
		b, _ := json.Marshal(map[string]string{"handed_off_to": name})
		call.ready = &messages.ToolOutcome{Outcome: &messages.ToolOutcome_Content{Content: string(b)}}
		call.status = messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED
	}
}

// handoffEvent returns the handoff event that follows the result of call,
// a successful handoff call, or nil for any other call.
func (c *core) handoffEvent(call *openCall) *messages.Event {
	if !c.agentsOn() || call.ev.GetCall().GetName() != HandoffToolName || call.ready.GetError() != nil || call.ready == nil {
		return nil
	}
	to, msg, problem := c.handoffTarget(call)
	if problem != "" {
		return nil
	}
	return c.event(func(ev *messages.Event) {
		ev.Agent = to
		ev.Body = &messages.Event_Handoff{Handoff: &messages.Handoff{From: call.agent, To: to, Message: msg, ToolCallId: call.ev.GetCall().GetId()}}
	})
}

// editAddress returns the agent and audience of the user message at seq es
// that edit m replaces, so the edit is addressed the same way: the working
// set's event, or, for one its summary covers, what m carries from the log
// (edit_agent, edit_audience; see CheckRewindInLog).
func (c *core) editAddress(m *messages.AgentRewind) (string, []string) {
	es := m.GetEditSeq()
	base := c.ws.Summary.GetToSeq()
	if es <= base && m.GetCheckedInLog() {
		return m.GetEditAgent(), slices.Clone(m.GetEditAudience())
	}
	if es <= base || es > c.ws.LastSeq {
		return "", nil
	}
	ev := c.ws.Events[es-base-1]
	return ev.GetAgent(), ev.GetAudience()
}
