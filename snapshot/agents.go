package snapshot

import (
	"slices"

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
// it is Render itself. The slice is the caller's; the events are shared
// (see Render), except the user messages made of handoffs.
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
// belongs to a named agent or is shared with one. Such a working set is
// not summarized: a summary would mix the agents' views.
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
