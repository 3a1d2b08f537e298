package snapshot

import (
	"context"
	"fmt"
	"slices"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"google.golang.org/protobuf/proto"
)

// WorkingSet is a conversation rebuilt from (latest summary, events after
// it). Its fields are kept consistent by Rebuild, Append and Compact; read
// them, do not assign them. The events are shared, not copied: neither the
// WorkingSet nor its caller may modify them.
type WorkingSet struct {
	// Summary is the summary the working set starts from, nil if none.
	Summary *messages.Summary
	// Events are the events after Summary.ToSeq (after 0 without a
	// summary), ascending and contiguous, as stored: including suspension,
	// resolution and rewind events, and events of types this version does
	// not know (no body), which are kept and never rendered.
	Events []*messages.Event
	// LastSeq is the seq of the last event; Summary.ToSeq if there are no
	// events after it; 0 for an empty conversation.
	LastSeq uint64
}

// Rebuild returns the working set of (summary, events), as a journal
// LoadSince returns them. It checks that the summary covers 1 <= FromSeq <=
// ToSeq, that events are non-nil with seqs strictly ascending and contiguous
// from summary.ToSeq+1 (from 1 without a summary), and that every rewind
// targets a seq before its own. Otherwise it returns an error wrapping
// journal.ErrCorrupt that names the offending seq. Rebuild keeps summary and
// the events (not the slice).
func Rebuild(summary *messages.Summary, events []*messages.Event) (*WorkingSet, error) {
	w := &WorkingSet{Summary: summary}
	if summary != nil {
		if summary.GetFromSeq() < 1 || summary.GetFromSeq() > summary.GetToSeq() {
			return nil, journal.Corruptf("snapshot: summary covers seq %d..%d", summary.GetFromSeq(), summary.GetToSeq())
		}
		w.LastSeq = summary.GetToSeq()
	}
	if err := w.Append(events...); err != nil {
		return nil, err
	}
	return w, nil
}

// Append adds events that were durably appended after LastSeq. They must
// follow the same rules as Rebuild's (contiguous from LastSeq+1, rewinds
// backwards); otherwise Append returns an error wrapping journal.ErrCorrupt
// naming the seq, and adds nothing. Append keeps the events.
func (w *WorkingSet) Append(evs ...*messages.Event) error {
	want := w.LastSeq + 1
	for i, ev := range evs {
		if ev == nil {
			return journal.Corruptf("snapshot: event %d of %d is nil (want seq %d)", i, len(evs), want)
		}
		if ev.GetSeq() != want {
			return journal.Corruptf("snapshot: event %d of %d has seq %d, want %d", i, len(evs), ev.GetSeq(), want)
		}
		if rw := ev.GetRewind(); rw != nil && rw.GetToSeq() >= ev.GetSeq() {
			return journal.Corruptf("snapshot: rewind at seq %d targets seq %d, not an earlier one", ev.GetSeq(), rw.GetToSeq())
		}
		want++
	}
	w.Events = append(w.Events, evs...)
	w.LastSeq = want - 1
	return nil
}

// base is the seq the events follow.
func (w *WorkingSet) base() uint64 { return w.Summary.GetToSeq() }

// head returns the indexes in w.Events of the events on the head, ascending,
// and the target of an effective rewind below the summary's ToSeq, if any.
func (w *WorkingSet) head() (idx []int, below uint64, isBelow bool) {
	base := w.base()
	i := len(w.Events) - 1
	for i >= 0 {
		ev := w.Events[i]
		idx = append(idx, i)
		rw := ev.GetRewind()
		if rw == nil {
			i--
			continue
		}
		t := rw.GetToSeq()
		if t <= base {
			if t < base {
				below, isBelow = t, true
			}
			break
		}
		i = int(t - base - 1) // Append checked t < ev.Seq: this goes backwards
	}
	slices.Reverse(idx)
	return idx, below, isBelow
}

func rendered(ev *messages.Event) bool {
	switch ev.GetBody().(type) {
	case *messages.Event_UserMsg, *messages.Event_AssistantMsg, *messages.Event_ToolResult:
		return true
	}
	return false
}

// Render returns what the model sees after the summary: the user_msg,
// assistant_msg and tool_result events on the head, ascending. Rewound spans
// are skipped and rewind events are not rendered (see the package doc). If
// the head was rewound below the summary's ToSeq (RewoundPastSummary), the
// summary still stands for events the head no longer includes: the caller
// should rebuild from an earlier summary. The slice is the caller's; the
// events are the working set's.
func (w *WorkingSet) Render() []*messages.Event {
	idx, _, _ := w.head()
	out := make([]*messages.Event, 0, len(idx))
	for _, i := range idx {
		if ev := w.Events[i]; rendered(ev) {
			out = append(out, ev)
		}
	}
	return out
}

// RewoundPastSummary reports whether an effective rewind moved the head to
// a seq toSeq below the summary's ToSeq. The summary then covers events that
// are no longer on the head; the caller should rebuild the working set from
// the latest summary with ToSeq <= toSeq (journal SummaryBefore(toSeq+1)),
// or from no summary, and the events after it.
func (w *WorkingSet) RewoundPastSummary() (toSeq uint64, rewound bool) {
	_, t, ok := w.head()
	return t, ok
}

// OpenCalls returns the tool_call events on the head that have no
// tool_result on the head, in log order: the calls the agent still owes the
// model. A call in a rewound span is not open. The records are the working
// set's.
func (w *WorkingSet) OpenCalls() []*messages.ToolCallEvent {
	idx, _, _ := w.head()
	done := make(map[string]bool)
	for _, i := range idx {
		if tr := w.Events[i].GetToolResult(); tr != nil {
			done[tr.GetToolCallId()] = true
		}
	}
	var open []*messages.ToolCallEvent
	for _, i := range idx {
		if tc := w.Events[i].GetToolCall(); tc != nil && !done[tc.GetCall().GetId()] {
			open = append(open, tc)
		}
	}
	return open
}

// EndsWithUserMsg reports whether the last rendered event is a user_msg: a
// model turn is owed.
func (w *WorkingSet) EndsWithUserMsg() bool {
	r := w.Render()
	return len(r) > 0 && r[len(r)-1].GetUserMsg() != nil
}

// safeSeqs returns, ascending, the seqs on the head after which no call is
// open. A call is issued by an assistant_msg naming its id or by a tool_call
// event, whichever comes first, and is closed by its tool_result. Calls
// with an empty id are ignored.
func (w *WorkingSet) safeSeqs() []uint64 {
	idx, _, _ := w.head()
	open := make(map[string]bool)
	var safe []uint64
	for _, i := range idx {
		ev := w.Events[i]
		switch {
		case ev.GetAssistantMsg() != nil:
			for _, c := range ev.GetAssistantMsg().GetToolCalls() {
				if c.GetId() != "" {
					open[c.GetId()] = true
				}
			}
		case ev.GetToolCall() != nil:
			if id := ev.GetToolCall().GetCall().GetId(); id != "" {
				open[id] = true
			}
		case ev.GetToolResult() != nil:
			delete(open, ev.GetToolResult().GetToolCallId())
		}
		if len(open) == 0 {
			safe = append(safe, ev.GetSeq())
		}
	}
	return safe
}

// SafePoint returns the highest seq s with Summary.ToSeq < s <= LastSeq -
// keepRecent (keepRecent < 0 counts as 0) at which a summary may end, or 0
// if there is none. s is on the head (never inside a rewound span: a summary
// ending there would leave a rewind after it that targets a seq inside it;
// the rewind event itself may end a summary), and every tool call issued at
// or before s, by an assistant_msg or a tool_call event, has its tool_result
// at or before s.
func (w *WorkingSet) SafePoint(keepRecent int) uint64 {
	keep := uint64(max(keepRecent, 0))
	if keep >= w.LastSeq {
		return 0
	}
	limit := w.LastSeq - keep
	safe := w.safeSeqs()
	for i := len(safe) - 1; i >= 0; i-- {
		if safe[i] <= limit {
			return safe[i]
		}
	}
	return 0
}

// CheckRewind validates a rewind of the head to toSeq before it is appended:
// toSeq must be at most LastSeq, not below the summary's ToSeq (that needs a
// working set built from an earlier summary), on the head, and a point where
// no tool call is open (so the model never sees a call without its result).
// Rewinding to the summary's ToSeq (0 without a summary) is always valid.
// Errors wrap journal.ErrInvalid and name the problem.
func (w *WorkingSet) CheckRewind(toSeq uint64) error {
	base := w.base()
	switch {
	case toSeq > w.LastSeq:
		return journal.Invalidf("snapshot: rewind to seq %d after the last seq %d", toSeq, w.LastSeq)
	case toSeq < base:
		return journal.Invalidf("snapshot: rewind to seq %d inside the summary ending at seq %d", toSeq, base)
	case toSeq == base:
		return nil
	}
	idx, _, _ := w.head()
	onHead := false
	for _, i := range idx {
		if w.Events[i].GetSeq() == toSeq {
			onHead = true
			break
		}
	}
	if !onHead {
		return journal.Invalidf("snapshot: rewind to seq %d, which an earlier rewind skipped", toSeq)
	}
	if !slices.Contains(w.safeSeqs(), toSeq) {
		return journal.Invalidf("snapshot: rewind to seq %d, where a tool call is still open", toSeq)
	}
	return nil
}

// Compact makes s the working set's summary and drops the events it covers.
// s must cover 1 <= FromSeq <= ToSeq with Summary.ToSeq <= s.ToSeq <=
// LastSeq; otherwise Compact returns an error wrapping journal.ErrInvalid
// and changes nothing. s should end at a SafePoint (Plan does). Compact
// keeps s.
func (w *WorkingSet) Compact(s *messages.Summary) error {
	switch {
	case s == nil:
		return journal.Invalidf("snapshot: compact with a nil summary")
	case s.GetFromSeq() < 1 || s.GetFromSeq() > s.GetToSeq():
		return journal.Invalidf("snapshot: summary covers seq %d..%d", s.GetFromSeq(), s.GetToSeq())
	case s.GetToSeq() < w.base() || s.GetToSeq() > w.LastSeq:
		return journal.Invalidf("snapshot: summary ends at seq %d, outside %d..%d", s.GetToSeq(), w.base(), w.LastSeq)
	}
	w.Events = slices.Clone(w.Events[s.GetToSeq()-w.base():])
	w.Summary = s
	return nil
}

// Plan is the input of one summarization: copies of what a Summarizer needs,
// taken on the actor's goroutine and safe to hand to another.
type Plan struct {
	// Prev is a copy of the working set's summary, nil if none.
	Prev *messages.Summary
	// Events are copies of the rendered events in (Prev.ToSeq, ToSeq].
	// They may be empty (all rewound, or none rendered).
	Events []*messages.Event
	// FromSeq and ToSeq are the span the new summary covers: Prev.FromSeq
	// (1 without Prev) to the safe point.
	FromSeq, ToSeq uint64
}

// Plan returns the plan of a summary ending at SafePoint(keepRecent), and
// false if there is no safe point.
func (w *WorkingSet) Plan(keepRecent int) (Plan, bool) {
	to := w.SafePoint(keepRecent)
	if to == 0 {
		return Plan{}, false
	}
	p := Plan{FromSeq: 1, ToSeq: to}
	if w.Summary != nil {
		p.Prev = proto.Clone(w.Summary).(*messages.Summary)
		p.FromSeq = w.Summary.GetFromSeq()
	}
	for _, ev := range w.Render() {
		if ev.GetSeq() > to {
			break
		}
		p.Events = append(p.Events, proto.Clone(ev).(*messages.Event))
	}
	return p, true
}

// Run summarizes the plan with s and returns the new summary, covering
// exactly p.FromSeq..p.ToSeq (Run sets both on what s returns, so the summary
// ends at the safe point even when the last rendered event is before it).
// With no events to fold it does not call s: the new summary carries Prev's
// content and version (empty without Prev). An error of s is returned as is.
func (p Plan) Run(ctx context.Context, s Summarizer, conversationID string) (*messages.Summary, error) {
	var out *messages.Summary
	if len(p.Events) == 0 {
		out = &messages.Summary{Content: p.Prev.GetContent(), Version: p.Prev.GetVersion()}
	} else {
		sum, err := s.Summarize(ctx, conversationID, p.Prev, p.Events)
		if err != nil {
			return nil, err
		}
		if sum == nil {
			return nil, fmt.Errorf("snapshot: summarizer returned no summary for %q", conversationID)
		}
		out = sum
	}
	out.FromSeq, out.ToSeq = p.FromSeq, p.ToSeq
	return out, nil
}
