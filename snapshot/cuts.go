package snapshot

import (
	"cmp"
	"slices"

	"github.com/lazarusrt/lazarus/messages"
)

// This file holds the one rule for a summary that ends inside a tool call:
// a summary may end at seq s only where no call is open on the head just
// after s, as SafePoint counts calls (issued by an assistant_msg naming
// its id or by a tool_call event, whichever comes first; closed by its
// tool_result; a rewind to t brings back the calls open at t). A call an
// assistant_msg names whose tool_call event does not follow it (among the
// tool_call events right after it, where the runtime writes them) is
// owed nothing and closes at the first other event: nothing dispatched
// it, and the model's context gives it a missing result
// (agent.PairResults). The
// runtime's summaries end at a SafePoint; a Store takes any. CallTracker
// decides it from the log read from its start (import, export, lazarus
// check); WorkingSet.CutsACall decides it from the events after the summary
// and the calls the Store owes (a revival, a fork), without the log before
// the summary.

// OpenCall is a tool call issued at Seq and not answered on the head.
type OpenCall struct {
	ID  string
	Seq uint64

	bare bool // named by an assistant_msg, its tool_call event not read yet
}

// CallTracker follows a log event by event, from seq 1 or from a point
// where no call is open, and tells the calls open on its head just after
// any seq read so far, as SafePoint counts them. It keeps the open calls at
// each seq where they changed, not the events. The zero value is ready to
// use.
type CallTracker struct {
	cur   []OpenCall // never changed in place: marks share it
	marks []openMark // ascending seq
}

type openMark struct {
	seq  uint64
	open []OpenCall
}

// Add reads the event after the last one read (the caller keeps the seqs
// ascending and contiguous). Calls with an empty id are ignored.
func (o *CallTracker) Add(ev *messages.Event) {
	if next, changed := callStep(o.cur, ev, false, o.At); changed {
		o.cur = next
		o.marks = append(o.marks, openMark{ev.GetSeq(), next})
	}
}

// callStep is the one rule of how an event opens and closes tool calls on
// the head, for CallTracker and SafePoint: an assistant_msg issues the calls
// it names and a tool_call event its call (a call is issued once, by the
// first that names it), a tool_result closes its call, any event but a
// tool_call closes the calls an assistant_msg issued whose tool_call event
// has not followed it (a damaged log: nothing owes them), and a rewind to t
// brings back the calls open just after t, which at returns. Calls with an
// empty id are ignored. open holds the calls open just before ev, in the
// order they were issued; callStep returns those open just after it, and
// whether they changed (a rewind always changes them). If own, callStep
// may write in open's array; otherwise it leaves it as it is. A caller
// that walks only the head passes a nil at: there the event before a
// rewind to t is t, so open already holds the calls open just after t.
func callStep(open []OpenCall, ev *messages.Event, own bool, at func(uint64) []OpenCall) ([]OpenCall, bool) {
	changed := false
	issue := func(id string, bare bool) {
		if id == "" {
			return
		}
		if k := slices.IndexFunc(open, func(c OpenCall) bool { return c.ID == id }); k >= 0 {
			if open[k].bare && !bare { // its tool_call event
				if !own {
					open, own = slices.Clone(open), true
				}
				open[k].bare, changed = false, true
			}
			return
		}
		if !own {
			open, own = slices.Clip(open), true // append copies it
		}
		open, changed = append(open, OpenCall{ID: id, Seq: ev.GetSeq(), bare: bare}), true
	}
	if ev.GetToolCall() == nil && ev.GetRewind() == nil && slices.ContainsFunc(open, func(c OpenCall) bool { return c.bare }) {
		// The calls of the assistant_msg before whose tool_call events
		// did not follow it: nothing owes them.
		open, own, changed = slices.DeleteFunc(slices.Clone(open), func(c OpenCall) bool { return c.bare }), true, true
	}
	switch {
	case ev.GetRewind() != nil:
		if at == nil {
			return open, false
		}
		return at(ev.GetRewind().GetToSeq()), true
	case ev.GetAssistantMsg() != nil:
		for _, c := range ev.GetAssistantMsg().GetToolCalls() {
			issue(c.GetId(), true)
		}
	case ev.GetToolCall() != nil:
		issue(ev.GetToolCall().GetCall().GetId(), false)
	case ev.GetToolResult() != nil:
		id := ev.GetToolResult().GetToolCallId()
		if k := slices.IndexFunc(open, func(c OpenCall) bool { return c.ID == id }); k >= 0 {
			if !own {
				open = slices.Clone(open)
			}
			open, changed = slices.Delete(open, k, k+1), true
		}
	}
	return open, changed
}

// At returns the calls open on the head just after the event at seq, in the
// order they were issued: a summary ending at seq ends inside the first if
// there is one. The slice is shared; the caller must not modify it.
func (o *CallTracker) At(seq uint64) []OpenCall {
	k, _ := slices.BinarySearchFunc(o.marks, seq+1, func(m openMark, s uint64) int { return cmp.Compare(m.seq, s) })
	if k == 0 {
		return nil
	}
	return o.marks[k-1].open
}

// CutsACall reports whether w's summary ends inside a tool call, as far as
// the events after it (all of them, rewound or not) and owed, the calls
// the Store owes results for (its pending rows, and the calls its
// fsm_state cache lists as pending), can tell without the log before it: a
// call in owed is issued by no assistant_msg after the summary, or a
// tool_call or tool_result event after the summary names a call no
// assistant_msg after it issued before (the runtime writes a call's
// tool_call event in the append of the assistant_msg that issues it, so
// that call was issued at or before the summary's end). It is false
// without a summary. It errs on the side of true: a call owed by a stale
// cache, or a result with no call anywhere, makes it true where
// CallTracker finds no call open; it misses a call open at the summary's
// end that no event after it names and the Store does not owe. The
// runtime never writes such a log (it writes a call's tool_call event with
// its assistant_msg, and lists a call in its fsm_state cache until its
// tool_result is in the log), but a Store's writers can, each write
// valid: an assistant_msg whose call has no tool_call event (ValidateAppend
// does not ask for one; the summary then ends at that message), a call
// resolved by ResolveToolCall with no
// tool_result event yet and no fsm_state listing it, or an answer rewound
// away by a rewind to a point where the call was open (which CheckRewind
// refuses), each followed by a PutSummary ending after the call. Import
// refuses such a summary and Check reports it (CallTracker reads the log
// before it), except the summary a fork copied, which they decide as here;
// a revival or a fork takes it. Revived from a summary
// that cuts a call, an activation would not owe the call (neither run it
// again nor record its answer, which would be lost) or would show the
// model a result without its call: a revival and a fork pass it over for
// an earlier summary.
func (w *WorkingSet) CutsACall(owed map[string]bool) bool {
	if w.Summary == nil {
		return false
	}
	var f CutFinder
	for _, ev := range w.Events {
		f.Add(ev)
	}
	return f.Cuts(owed)
}

// CutFinder is WorkingSet.CutsACall read event by event, for a caller that
// does not hold the events after the summary (a fork's base summary in an
// import, lazarus check): Add each event after the summary, in order, then
// ask Cuts. It keeps the ids of the calls issued after the summary, not the
// events. The zero value is ready to use.
type CutFinder struct {
	issued map[string]bool
	cut    bool
}

// Add reads the next event after the summary.
func (f *CutFinder) Add(ev *messages.Event) {
	for _, tc := range ev.GetAssistantMsg().GetToolCalls() {
		if f.issued == nil {
			f.issued = make(map[string]bool)
		}
		f.issued[tc.GetId()] = true
	}
	if tc := ev.GetToolCall(); tc != nil && !f.issued[tc.GetCall().GetId()] {
		f.cut = true
	}
	if tr := ev.GetToolResult(); tr != nil && !f.issued[tr.GetToolCallId()] {
		f.cut = true
	}
}

// Cuts reports whether the summary ends inside a tool call, as CutsACall
// decides it from the events read so far and owed, the calls the Store
// owes results for.
func (f *CutFinder) Cuts(owed map[string]bool) bool {
	if f.cut {
		return true
	}
	for id := range owed {
		if !f.issued[id] {
			return true
		}
	}
	return false
}
