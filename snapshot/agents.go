package snapshot

import (
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/lazarusrt/lazarus/messages"
)

// Broadcast is the audience entry (Event.audience) that shares an event with
// every agent of a conversation.
const Broadcast = "*"

// VisibleTo reports whether the event belongs to, or is shared with, the
// agent name ("" is the default agent): its agent is name, or its audience
// names name or Broadcast. A rewind is structural (it moves every agent's
// head), so it is visible to every agent. For a conversation without named
// agents (every event's agent empty), every event is visible to the default
// agent.
func VisibleTo(ev *messages.Event, name string) bool {
	if ev.GetAgent() == name || ev.GetRewind() != nil {
		return true
	}
	for _, a := range ev.GetAudience() {
		if a == name || a == Broadcast {
			return true
		}
	}
	return false
}

// RenderFor returns what the model of agent name sees after the summary:
// the events of Render visible to it (VisibleTo), in order, a handoff to
// it rendered as a user message (HandoffMessage). When every event of the
// working set is the default agent's own and name is the default agent,
// it is Render itself, which the caller must not modify (see Render);
// otherwise the slice is the caller's. The events are shared (see Render),
// except the user messages made of handoffs.
func (w *WorkingSet) RenderFor(name string) []*messages.Event {
	all := w.Render()
	if name == "" && !slices.ContainsFunc(all, shared) {
		return all
	}
	out := make([]*messages.Event, 0, len(all))
	for _, ev := range all {
		if !VisibleTo(ev, name) {
			continue
		}
		if h := ev.GetHandoff(); h != nil {
			ev = &messages.Event{
				Seq: ev.GetSeq(), Time: ev.GetTime(), Agent: ev.GetAgent(), Audience: ev.GetAudience(),
				Body: &messages.Event_UserMsg{UserMsg: HandoffMessage(h)},
			}
		}
		out = append(out, ev)
	}
	return out
}

// shared reports whether ev is not the default agent's own.
func shared(ev *messages.Event) bool {
	return ev.GetAgent() != "" || len(ev.GetAudience()) > 0 || ev.GetHandoff() != nil
}

// HoldsAgents reports whether an event of the working set after its summary
// belongs to a named agent or is shared with one. A runtime without named
// agents does not summarize such a working set (Plan would fold only the
// default agent's view); one with them plans per agent (PlanAgents).
func (w *WorkingSet) HoldsAgents() bool {
	return slices.ContainsFunc(w.Events, shared)
}

// HandoffMessage is the user message the receiving agent's model sees for
// a handoff: who passed the turn, and what it said.
func HandoffMessage(h *messages.Handoff) *messages.UserMessage {
	from := h.GetFrom()
	if from == "" {
		from = "default"
	}
	text := "[handoff from agent " + from + "]"
	if m := h.GetMessage(); m != "" {
		text += " " + m
	}
	return &messages.UserMessage{Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: text}}}}
}

// bare caches the default agent's part of a summary that holds named
// agents' entries (SummaryFor("")).
type bare struct{ of, s *messages.Summary }

// SummaryFor returns the summary agent name's model starts from ("" is the
// default agent): for the default agent the working set's summary, without
// the named agents' entries (Summary.Agents) when it has some; for a named
// agent its entry, or nil if it has none (nothing it saw is folded). The
// record is the working set's; the caller must not modify it.
func (w *WorkingSet) SummaryFor(name string) *messages.Summary {
	s := w.Summary
	if name == "" {
		if len(s.GetAgents()) == 0 {
			return s
		}
		if w.bare.of != s {
			c := proto.Clone(s).(*messages.Summary)
			c.Agents = nil
			w.bare = bare{of: s, s: c}
		}
		return w.bare.s
	}
	for _, a := range s.GetAgents() {
		if a.GetAgent() == name {
			return a
		}
	}
	return nil
}

// PlanAgents is Plan for a conversation with named agents: besides the
// default agent's summary, it plans one summary per named agent at the same
// ToSeq (Plan.Agents), each made of that agent's previous summary
// (SummaryFor) and only the rendered events it sees up to ToSeq (RenderFor),
// so no summarizer is ever given another agent's private event. The agents
// are names, those the working set's summary has entries for and those the
// events up to ToSeq belong to or name in their audience; an agent with
// neither a previous summary nor an event to fold gets no entry.
func (w *WorkingSet) PlanAgents(keepRecent int, names []string) (Plan, bool) {
	if names == nil {
		names = []string{}
	}
	return w.plan(keepRecent, names)
}

// planAgents adds the named agents' plans to p (see PlanAgents).
func (w *WorkingSet) planAgents(p *Plan, names []string) {
	set := map[string]bool{}
	for _, n := range names {
		set[n] = true
	}
	for _, a := range w.Summary.GetAgents() {
		set[a.GetAgent()] = true
	}
	for _, ev := range w.Events {
		if ev.GetSeq() > p.ToSeq {
			break
		}
		set[ev.GetAgent()] = true
		for _, a := range ev.GetAudience() {
			set[a] = true
		}
	}
	delete(set, "")
	delete(set, Broadcast)
	all := make([]string, 0, len(set))
	for n := range set {
		all = append(all, n)
	}
	slices.Sort(all)
	for _, n := range all {
		prev, evs := w.SummaryFor(n), upTo(w.RenderFor(n), p.ToSeq)
		if prev == nil && len(evs) == 0 {
			continue
		}
		p.Agents = append(p.Agents, Plan{Agent: n, Prev: prev, Events: evs, FromSeq: p.FromSeq, ToSeq: p.ToSeq})
	}
}

// upTo returns a copy of the events of r (ascending) up to seq to, nil if
// none.
func upTo(r []*messages.Event, to uint64) []*messages.Event {
	n := 0
	for n < len(r) && r[n].GetSeq() <= to {
		n++
	}
	if n == 0 {
		return nil
	}
	return slices.Clone(r[:n])
}
