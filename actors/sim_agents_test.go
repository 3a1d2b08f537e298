package actors

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/snapshot"
)

// The simulator with named agents: clients address their messages to the
// default agent, "a" or "b", some broadcast; models answer with handoffs
// (to known agents, to themselves, to unknown ones) besides the usual
// calls; kills, faults, rewinds and summaries go on as in TestSimulation.
// A simple model of the views, written apart from the core (simHead,
// simVisible, simOwes), is checked at every model call: the context is
// exactly the events on the head that the agent owns or that are shared
// with it (so no agent ever sees another's private events), and the turn
// goes to the agent the model says owes the oldest turn. After every step
// the log's agents are checked (a call's events and result belong to the
// agent that made it; a handoff follows its call's result, once).

const simAgentSeeds = 250

func TestSimulationAgents(t *testing.T) {
	n, first := simAgentSeeds, uint64(1)
	switch {
	case *simSeed > 0: // a replay of one seed
		n, first = 1, *simSeed
	case *simSeeds > 0: // a soak (make soak): the seeds it asks for
		n, first = *simSeeds, *simFirst
	case testing.Short():
		n = 60
	}
	var handoffs, summaries int
	for seed := first; seed < first+uint64(n); seed++ {
		s := newAgentSim(seed)
		s.run(simStepsSeed)
		if s.failure != "" {
			t.Fatalf("seed %d: step %d: %s\nreplay: go test ./actors -run TestSimulationAgents -sim.seed=%d -v\ntrace (last steps):\n%s",
				seed, s.step, s.failure, seed, strings.Join(s.tail(), "\n"))
		}
		for _, ev := range s.events() {
			if ev.GetHandoff() != nil {
				handoffs++
			}
		}
		summaries += s.stats.AgentSummaries
	}
	if *simSeed > 0 {
		return // one seed replayed: it need not explore everything
	}
	if handoffs == 0 {
		t.Fatalf("%d seeds made no handoff: the simulator explores nothing of agents", n)
	}
	if summaries == 0 {
		t.Fatalf("%d seeds made no model call of a named agent from its summary: per-agent summaries are not explored", n)
	}
	t.Logf("%d seeds, %d handoffs, %d model calls of named agents from their summaries", n, handoffs, summaries)
}

const noAgent = "\x00none"

var simAgentNames = []string{"", "a", "b"}

func newAgentSim(seed uint64) *sim {
	s := newSim(seed)
	tools, err := agent.NewRegistry(
		agent.Tool{Name: "lookup", Executor: messages.Executor_EXECUTOR_SERVER,
			Run: func(context.Context, agent.Invocation) (string, error) { return "", nil }},
		agent.Tool{Name: "approve", Executor: messages.Executor_EXECUTOR_HUMAN, Timeout: time.Minute},
		HandoffTool(),
	)
	if err != nil {
		panic(err)
	}
	s.tools, s.agents, s.addr = tools, true, map[string]*messages.AgentAddress{}
	return s
}

func (s *sim) agentConfigs() map[string]AgentConfig {
	if !s.agents {
		return nil
	}
	return map[string]AgentConfig{"a": {Tools: []string{"lookup"}}, "b": {Tools: []string{"approve", "lookup"}}}
}

// address is where a send of request id rid goes: nil without agents;
// else the address its first send drew (a resend is the same message).
func (s *sim) address(rid string) *messages.AgentAddress {
	if !s.agents {
		return nil
	}
	if a, ok := s.addr[rid]; ok {
		return a
	}
	a := &messages.AgentAddress{Agent: simAgentNames[s.rng.IntN(len(simAgentNames))], Broadcast: s.chance(0.2)}
	s.addr[rid] = a
	return a
}

func (s *sim) handoffAnswer(msg *messages.AssistantMessage) *messages.AssistantMessage {
	to := []string{"default", "a", "b", "ghost", ""}[s.rng.IntN(5)]
	msg.ToolCalls = []*messages.ToolCall{{Name: HandoffToolName, Arguments: fmt.Sprintf(`{"agent":%q,"message":"m%d"}`, to, s.step)}}
	if s.chance(0.2) {
		msg.ToolCalls = append(msg.ToolCalls, &messages.ToolCall{Name: "lookup", Arguments: "{}"})
	}
	return msg
}

// simHead returns the events of a whole log on its head: walking back
// from the newest, a rewind jumps the walk to its target.
func simHead(evs []*messages.Event) []*messages.Event {
	var out []*messages.Event
	for pos := uint64(len(evs)); pos > 0; {
		ev := evs[pos-1]
		out = append(out, ev)
		if rw := ev.GetRewind(); rw != nil && rw.GetToSeq() < pos {
			pos = rw.GetToSeq()
			continue
		}
		pos--
	}
	slices.Reverse(out)
	return out
}

func simRendered(ev *messages.Event) bool {
	switch ev.GetBody().(type) {
	case *messages.Event_UserMsg, *messages.Event_AssistantMsg, *messages.Event_ToolResult, *messages.Event_Handoff:
		return true
	}
	return false
}

// simVisible: an agent sees its own events, and those whose audience names
// it or everyone.
func simVisible(ev *messages.Event, name string) bool {
	return ev.GetAgent() == name || slices.Contains(ev.GetAudience(), name) || slices.Contains(ev.GetAudience(), "*")
}

// simOwes: the last rendered event an agent owns owes it a turn when it is
// a message or a handoff to it, or a result of its calls other than a
// handoff that succeeded (which ended its turn).
func simOwes(ev *messages.Event) bool {
	if ev.GetUserMsg() != nil || ev.GetHandoff() != nil {
		return true
	}
	tr := ev.GetToolResult()
	return tr != nil && (tr.GetName() != HandoffToolName || tr.GetOutcome().GetError() != nil)
}

// owingAgent is the model's choice of the agent that has the turn: of the
// agents whose last rendered event owes a turn, the one whose event is the
// oldest; noAgent if none.
func (s *sim) owingAgent(*snapshot.WorkingSet) string {
	last := map[string]*messages.Event{}
	for _, ev := range simHead(s.events()) {
		if simRendered(ev) {
			last[ev.GetAgent()] = ev
		}
	}
	best, bestSeq := noAgent, uint64(0)
	for _, name := range simAgentNames {
		if ev, ok := last[name]; ok && simOwes(ev) && (best == noAgent || ev.GetSeq() < bestSeq) {
			best, bestSeq = name, ev.GetSeq()
		}
	}
	return best
}

// checkView checks a model call against the model of the views.
func (s *sim) checkView(a *simAct, e effStartModel) {
	name := e.in.Agent
	if want := s.owingAgent(nil); want != noAgent && want != name {
		s.fail("a%d gave the turn to agent %q; the oldest turn owed is agent %q's", a.n, name, want)
	}
	base := a.core.ws.Summary.GetToSeq()
	var want []*messages.Event
	var wantFolded []string
	for _, ev := range simHead(s.events()) {
		if !simRendered(ev) || !simVisible(ev, name) {
			continue
		}
		if ev.GetSeq() <= base {
			wantFolded = append(wantFolded, fmt.Sprint(ev.GetSeq()))
			continue
		}
		want = append(want, ev)
	}
	// The summary the model starts from is the agent's own, at the working
	// set's base, and folds exactly the events of its view up to there
	// (simSeqSummarizer writes their seqs), so no other agent's private
	// event reaches it through a summary either.
	sum := e.in.Summary
	if folded := strings.Fields(sum.GetContent()); !slices.Equal(folded, wantFolded) {
		s.fail("agent %q's summary folds seqs %v; its view up to seq %d is %v", name, folded, base, wantFolded)
	}
	if sum != nil && (sum.GetToSeq() != base || sum.GetAgent() != name || len(sum.GetAgents()) > 0) {
		s.fail("agent %q's model starts from a summary of agent %q ending at seq %d with %d agents' entries; want its own, at seq %d",
			name, sum.GetAgent(), sum.GetToSeq(), len(sum.GetAgents()), base)
	}
	if sum != nil && name != "" {
		s.stats.AgentSummaries++ // a named agent's model starts from its summary
	}
	got := e.in.Context
	for _, ev := range got {
		if !simVisible(ev, name) {
			s.fail("agent %q's model sees seq %d, agent %q's private event", name, ev.GetSeq(), ev.GetAgent())
		}
	}
	if len(got) != len(want) {
		s.fail("agent %q's model sees %d events; its view has %d", name, len(got), len(want))
		return
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.GetSeq() != w.GetSeq() {
			s.fail("agent %q's context[%d] is seq %d; its view has seq %d", name, i, g.GetSeq(), w.GetSeq())
		}
		if w.GetHandoff() != nil && g.GetUserMsg() == nil {
			s.fail("agent %q's model sees the handoff at seq %d as %T, not a user message", name, w.GetSeq(), g.GetBody())
		}
		if w.GetHandoff() == nil && !proto.Equal(g, w) {
			s.fail("agent %q's context[%d] is not the logged event", name, i)
		}
	}
	for _, spec := range e.in.Tools {
		if name != "" && spec.Name != HandoffToolName && !slices.Contains(s.agentConfigs()[name].Tools, spec.Name) {
			s.fail("agent %q is offered tool %q, not its own", name, spec.Name)
		}
	}
}

// checkAgents checks the agents of the log: a call's events, result and
// resolution belong to the agent whose answer made it; a handoff follows
// its call's successful result, at most once per call, and belongs to the
// agent it passes the turn to, a known one other than the passing one;
// every successful handoff result is followed by its handoff; a client's
// message belongs where it was sent.
func (s *sim) checkAgents(evs []*messages.Event) {
	issuer := map[string]string{}
	callAgent := map[string]string{}
	handed := map[string]bool{}
	for i, ev := range evs {
		switch b := ev.GetBody().(type) {
		case *messages.Event_AssistantMsg:
			for _, c := range b.AssistantMsg.GetToolCalls() {
				issuer[c.GetId()] = ev.GetAgent()
			}
		case *messages.Event_ToolCall:
			id := b.ToolCall.GetCall().GetId()
			if ev.GetAgent() != issuer[id] {
				s.fail("tool_call %s at seq %d is agent %q's; agent %q's answer made it", id, ev.GetSeq(), ev.GetAgent(), issuer[id])
			}
			callAgent[id] = ev.GetAgent()
		case *messages.Event_ToolResult:
			id := b.ToolResult.GetToolCallId()
			if ev.GetAgent() != callAgent[id] {
				s.fail("tool_result of %s at seq %d is agent %q's; the call is agent %q's", id, ev.GetSeq(), ev.GetAgent(), callAgent[id])
			}
			if b.ToolResult.GetName() == HandoffToolName && b.ToolResult.GetOutcome().GetError() == nil &&
				(i+1 >= len(evs) || evs[i+1].GetHandoff().GetToolCallId() != id) {
				s.fail("the successful handoff result at seq %d is not followed by its handoff", ev.GetSeq())
			}
		case *messages.Event_Resolution:
			if id := b.Resolution.GetToolCallId(); ev.GetAgent() != callAgent[id] {
				s.fail("resolution of %s at seq %d is agent %q's; the call is agent %q's", id, ev.GetSeq(), ev.GetAgent(), callAgent[id])
			}
		case *messages.Event_Handoff:
			h := b.Handoff
			prev := evs[i-1].GetToolResult()
			switch {
			case prev.GetToolCallId() != h.GetToolCallId() || prev.GetOutcome().GetError() != nil:
				s.fail("the handoff at seq %d does not follow its call's successful result", ev.GetSeq())
			case handed[h.GetToolCallId()]:
				s.fail("call %s handed off twice", h.GetToolCallId())
			case ev.GetAgent() != h.GetTo() || h.GetFrom() != callAgent[h.GetToolCallId()] || h.GetTo() == h.GetFrom() || !slices.Contains(simAgentNames, h.GetTo()):
				s.fail("the handoff at seq %d (%q -> %q, event of %q) does not match its call (agent %q)", ev.GetSeq(), h.GetFrom(), h.GetTo(), ev.GetAgent(), callAgent[h.GetToolCallId()])
			}
			handed[h.GetToolCallId()] = true
		case *messages.Event_UserMsg:
			a, ok := s.addr[ev.GetRequestId()]
			if !ok {
				// An edit: addressed as the message it replaces, after
				// the summary or folded in it.
				if rw := evs[i-1].GetRewind(); rw != nil && ev.GetRequestId() != "" {
					if old := evs[rw.GetToSeq()]; ev.GetAgent() != old.GetAgent() || !slices.Equal(ev.GetAudience(), old.GetAudience()) {
						s.fail("edit %s at seq %d is agent %q's (audience %v); it replaces seq %d, agent %q's (audience %v)",
							ev.GetRequestId(), ev.GetSeq(), ev.GetAgent(), ev.GetAudience(), old.GetSeq(), old.GetAgent(), old.GetAudience())
					}
				}
				continue
			}
			want := []string(nil)
			if a.GetBroadcast() {
				want = []string{"*"}
			}
			if ev.GetAgent() != a.GetAgent() || !slices.Equal(ev.GetAudience(), want) {
				s.fail("message %s at seq %d is agent %q's (audience %v); it was sent to %v", ev.GetRequestId(), ev.GetSeq(), ev.GetAgent(), ev.GetAudience(), a)
			}
		}
	}
}

// simSeqSummarizer writes the seqs of the events it folds after prev's, so
// that checkView can tell which events a summary stands for.
type simSeqSummarizer struct{}

func (simSeqSummarizer) Summarize(_ context.Context, _ string, prev *messages.Summary, evs []*messages.Event) (*messages.Summary, error) {
	b := strings.Builder{}
	b.WriteString(prev.GetContent())
	for _, ev := range evs {
		fmt.Fprintf(&b, " %d", ev.GetSeq())
	}
	return &messages.Summary{Content: b.String(), Version: "sim-seqs"}, nil
}

// checkPlan checks a summary plan with agents: each agent's part is given
// only the events it sees, and its own previous summary.
func (s *sim) checkPlan(p snapshot.Plan) {
	for _, part := range append([]snapshot.Plan{p}, p.Agents...) {
		for _, ev := range part.Events {
			if !simVisible(ev, part.Agent) {
				s.fail("the summary of agent %q would fold seq %d, agent %q's private event", part.Agent, ev.GetSeq(), ev.GetAgent())
			}
		}
		if part.Prev != nil && (part.Prev.GetAgent() != part.Agent || len(part.Prev.GetAgents()) > 0) {
			s.fail("the summary of agent %q starts from agent %q's with %d entries", part.Agent, part.Prev.GetAgent(), len(part.Prev.GetAgents()))
		}
	}
}
