package snapshot

import (
	"context"
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// WorkingSet is a conversation rebuilt from (latest summary, events after
// it). Its fields are kept consistent by Rebuild, Append and Compact; read
// them, do not assign them. The events are shared, not copied: neither the
// WorkingSet nor its caller may modify them. A WorkingSet caches its head
// and what Render returns, so even its read methods must not be called
// concurrently, and it must not be copied.
type WorkingSet struct {
	// Summary is the summary the working set starts from, nil if none.
	Summary *messages.Summary
	// Events are the events after Summary.ToSeq (after 0 without a
	// summary), ascending and contiguous, as stored: including suspension,
	// resolution, rewind and turn_failed events (never rendered), and events of types this version does
	// not know (no body), which are kept and never rendered.
	Events []*messages.Event
	// LastSeq is the seq of the last event; Summary.ToSeq if there are no
	// events after it; 0 for an empty conversation.
	LastSeq uint64

	cache view // see view
	bare  bare // see SummaryFor
}

// span is the indexes lo..hi-1 of WorkingSet.Events.
type span struct{ lo, hi int }

// view is what a WorkingSet derives from (Summary, Events): its head and
// what it renders. It is valid for the Events and Summary it was built from
// and can be extended with events appended after them (see
// WorkingSet.view).
type view struct {
	built       bool
	n           int               // len(Events) it was built from
	first, last *messages.Event   // Events[0] and Events[n-1] then
	summary     *messages.Summary // Summary then
	spans       []span            // the head, ascending
	below       uint64            // the target of an effective rewind below the summary's ToSeq
	isBelow     bool              // whether there is one
	rendered    []*messages.Event // the rendered events on the head; never changed below len, as Render shares it
	tokens      int               // EstimateTokens(rendered[:counted])
	counted     int
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
		if p := journal.SummaryAgentsProblem(summary); p != "" {
			return nil, journal.Corruptf("snapshot: summary ending at seq %d: %s", summary.GetToSeq(), p)
		}
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

// view returns the working set's view, built or extended from Events and
// Summary as they are now: it is extended in place when events were only
// appended (without rewinds) since it was built, and built again otherwise.
func (w *WorkingSet) view() *view {
	v := &w.cache
	n := len(w.Events)
	same := v.built && v.summary == w.Summary && v.n <= n &&
		(v.n == 0 || (w.Events[0] == v.first && w.Events[v.n-1] == v.last))
	if same && v.n < n {
		for _, ev := range w.Events[v.n:] {
			if ev.GetRewind() != nil {
				same = false
				break
			}
		}
	}
	switch {
	case !same:
		w.build()
	case v.n < n:
		// The walk back from the new last event passes through the new
		// events, none a rewind, then goes on as it did from the old one.
		if len(v.spans) == 0 {
			v.spans = append(v.spans, span{v.n, n})
		} else {
			v.spans[len(v.spans)-1].hi = n
		}
		for _, ev := range w.Events[v.n:] {
			if rendered(ev) {
				v.rendered = append(v.rendered, ev) // after the len of every slice Render returned
			}
		}
		v.n, v.last = n, w.Events[n-1]
	}
	return v
}

// build builds the view from scratch. The head is found by walking back from
// the newest event, a rewind jumping the walk to its target (see the package
// doc).
func (w *WorkingSet) build() {
	v := &w.cache
	base := w.base()
	v.spans, v.below, v.isBelow = v.spans[:0], 0, false
	hi := len(w.Events)
	for i := hi - 1; i >= 0; {
		rw := w.Events[i].GetRewind()
		if rw == nil {
			i--
			continue
		}
		v.spans = append(v.spans, span{i, hi}) // the rewind is on the head
		t := rw.GetToSeq()
		if t <= base {
			if t < base {
				v.below, v.isBelow = t, true
			}
			hi = 0
			break
		}
		hi = int(t - base) // Append checked t < ev.Seq: this goes backwards
		i = hi - 1
	}
	if hi > 0 {
		v.spans = append(v.spans, span{0, hi})
	}
	slices.Reverse(v.spans)
	count := 0
	for _, sp := range v.spans {
		for _, ev := range w.Events[sp.lo:sp.hi] {
			if rendered(ev) {
				count++
			}
		}
	}
	// A new array: the old one may still be read through Render's results.
	v.rendered = make([]*messages.Event, 0, count+8)
	for _, sp := range v.spans {
		for _, ev := range w.Events[sp.lo:sp.hi] {
			if rendered(ev) {
				v.rendered = append(v.rendered, ev)
			}
		}
	}
	v.tokens, v.counted = 0, 0
	v.built, v.n, v.summary = true, len(w.Events), w.Summary
	v.first, v.last = nil, nil
	if v.n > 0 {
		v.first, v.last = w.Events[0], w.Events[v.n-1]
	}
}

// renderedTokens returns EstimateTokens(w.Render()), counting only the
// events rendered since the last call.
func (w *WorkingSet) renderedTokens() int {
	v := w.view()
	v.tokens += EstimateTokens(v.rendered[v.counted:])
	v.counted = len(v.rendered)
	return v.tokens
}

func rendered(ev *messages.Event) bool {
	switch ev.GetBody().(type) {
	case *messages.Event_UserMsg, *messages.Event_AssistantMsg, *messages.Event_ToolResult, *messages.Event_Handoff:
		return true
	}
	return false
}

// Render returns what the model sees after the summary: the user_msg,
// assistant_msg, tool_result and handoff events on the head, ascending (a
// conversation with named agents renders each agent's part with RenderFor). Rewound spans
// are skipped and rewind events are not rendered (see the package doc). If
// the head was rewound below the summary's ToSeq (RewoundPastSummary), the
// summary still stands for events the head no longer includes: the caller
// should rebuild from an earlier summary. The events are as the log holds
// them: before a model call the runtime makes the tool calls and results a
// valid pairing (agent.PairResults), which a damaged log may not hold.
//
// The slice and the events are the working set's, and the caller must not
// modify them. The working set never changes a slice it returned, so the
// caller may keep it and read it from another goroutine while the working
// set changes; its capacity is its length, so appending to it copies. Render
// does not allocate unless the working set changed since the last call (and
// then only when a rewind or Compact changed the head, or the cached slice
// must grow). To learn only the last rendered event, use LastRendered.
func (w *WorkingSet) Render() []*messages.Event {
	r := w.view().rendered
	return r[:len(r):len(r)]
}

// LastRendered returns the last event Render would return, or nil if it
// would return none. It walks back from the newest event, following rewinds
// as Render does, and does not allocate.
func (w *WorkingSet) LastRendered() *messages.Event {
	base := w.base()
	for i := len(w.Events) - 1; i >= 0; {
		ev := w.Events[i]
		rw := ev.GetRewind()
		if rw == nil {
			if rendered(ev) {
				return ev
			}
			i--
			continue
		}
		t := rw.GetToSeq()
		if t <= base {
			return nil
		}
		i = int(t - base - 1) // Append checked t < ev.Seq: this goes backwards
	}
	return nil
}

// Evicted names the spans of the log that the context rendered now leaves
// out, for the audit (ModelCall.evictions), in ascending seq:
// "summary:1-N" when the summary stands for events 1 to N, and
// "rewound:A-B" for each span of events A to B after it that a rewind on
// the head skipped. Nil when the context is the whole log.
func (w *WorkingSet) Evicted() []string {
	v := w.view()
	base := w.base()
	var out []string
	if base > 0 {
		out = append(out, fmt.Sprintf("summary:1-%d", base))
	}
	lo := 0 // the first index not yet accounted for
	for _, sp := range v.spans {
		if sp.lo > lo {
			out = append(out, fmt.Sprintf("rewound:%d-%d", base+uint64(lo)+1, base+uint64(sp.lo)))
		}
		lo = sp.hi
	}
	return out
}

// RewoundPastSummary reports whether an effective rewind moved the head to
// a seq toSeq below the summary's ToSeq. The summary then covers events that
// are no longer on the head; the caller should rebuild the working set from
// the latest summary with ToSeq <= toSeq (journal SummaryBefore(toSeq+1)),
// or from no summary, and the events after it.
func (w *WorkingSet) RewoundPastSummary() (toSeq uint64, rewound bool) {
	v := w.view()
	return v.below, v.isBelow
}

// RewoundBelow reports whether a rewind on the head after seq moved the
// head to a seq below seq: a summary ending at seq would stand for events
// the head no longer includes (as RewoundPastSummary reports of the
// working set's own summary). seq must be at least the summary's ToSeq.
// It walks back from the newest event as LastRendered does and does not
// allocate.
func (w *WorkingSet) RewoundBelow(seq uint64) bool {
	base := w.base()
	for i := len(w.Events) - 1; i >= 0; {
		ev := w.Events[i]
		if ev.GetSeq() <= seq {
			return false
		}
		rw := ev.GetRewind()
		if rw == nil {
			i--
			continue
		}
		t := rw.GetToSeq()
		if t < seq {
			return true
		}
		i = int(t-base) - 1 // t >= seq >= base, and Append checked t < ev.Seq: this goes backwards
	}
	return false
}

// OpenCalls returns the tool_call events on the head that have no
// tool_result on the head, in log order: the calls the agent still owes the
// model. A call in a rewound span is not open. Each call is listed once, by
// the first tool_call event on the head that names it: a log that holds
// two for one id (a damaged one: ids are unique) still owes that call one
// result. The records are the working set's.
func (w *WorkingSet) OpenCalls() []*messages.ToolCallEvent {
	v := w.view()
	var done map[string]bool
	for _, sp := range v.spans {
		for _, ev := range w.Events[sp.lo:sp.hi] {
			if tr := ev.GetToolResult(); tr != nil {
				if done == nil {
					done = make(map[string]bool)
				}
				done[tr.GetToolCallId()] = true
			}
		}
	}
	var open []*messages.ToolCallEvent
	for _, sp := range v.spans {
		for _, ev := range w.Events[sp.lo:sp.hi] {
			tc := ev.GetToolCall()
			if tc == nil {
				continue
			}
			id := tc.GetCall().GetId()
			if done[id] {
				continue
			}
			if done == nil {
				done = make(map[string]bool)
			}
			done[id] = true // listed: a later event naming it adds nothing
			open = append(open, tc)
		}
	}
	return open
}

// EndsWithUserMsg reports whether the last rendered event is a user_msg: a
// model turn is owed.
func (w *WorkingSet) EndsWithUserMsg() bool {
	return w.LastRendered().GetUserMsg() != nil
}

// lastSafe returns the highest seq s <= limit on the head after which no
// call is open, or 0 if there is none, counting calls as CallTracker does
// (callStep).
func (w *WorkingSet) lastSafe(limit uint64) uint64 {
	var buf [8]OpenCall
	open := buf[:0] // few at once
	var safe uint64
	for _, sp := range w.view().spans {
		for _, ev := range w.Events[sp.lo:sp.hi] {
			if ev.GetSeq() > limit {
				return safe
			}
			open, _ = callStep(open, ev, true, nil)
			if len(open) == 0 {
				safe = ev.GetSeq()
			}
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
// at or before s, except a call an assistant_msg names whose tool_call event
// is not among those right after it (a damaged log: nothing owes it), which
// stops counting at the first other event.
func (w *WorkingSet) SafePoint(keepRecent int) uint64 {
	keep := uint64(max(keepRecent, 0))
	if keep >= w.LastSeq {
		return 0
	}
	return w.lastSafe(w.LastSeq - keep)
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
	if !w.OnHead(toSeq) {
		return journal.Invalidf("snapshot: rewind to seq %d, which an earlier rewind skipped", toSeq)
	}
	if w.lastSafe(toSeq) != toSeq {
		return journal.Invalidf("snapshot: rewind to seq %d, where a tool call is still open", toSeq)
	}
	return nil
}

// OnHead reports whether the event at seq, one after the summary (Summary.ToSeq
// < seq <= LastSeq), is on the head: no rewind skipped it. It is false for
// any other seq.
func (w *WorkingSet) OnHead(seq uint64) bool {
	base := w.base()
	if seq <= base || seq > w.LastSeq {
		return false
	}
	at := int(seq - base - 1) // its index in Events
	for _, sp := range w.view().spans {
		if sp.lo <= at && at < sp.hi {
			return true
		}
	}
	return false
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
	if p := journal.SummaryAgentsProblem(s); p != "" {
		return journal.Invalidf("snapshot: summary ending at seq %d: %s", s.GetToSeq(), p)
	}
	w.Events = slices.Clone(w.Events[s.GetToSeq()-w.base():])
	w.Summary = s
	return nil
}

// Plan is the input of one summarization, taken on the actor's goroutine
// and safe to hand to another: its records are the working set's, which
// nobody modifies (see WorkingSet), so they are shared, not copied.
type Plan struct {
	// Prev is the working set's summary, nil if none.
	Prev *messages.Summary
	// Events are the rendered events in (Prev.ToSeq, ToSeq], in a slice of
	// the plan's own. They may be empty (all rewound, or none rendered).
	Events []*messages.Event
	// FromSeq and ToSeq are the span the new summary covers: Prev.FromSeq
	// (1 without Prev) to the safe point.
	FromSeq, ToSeq uint64
	// Requests are the idempotency keys the new summary carries (Run sets
	// them): Prev's, then those of the events up to ToSeq, rendered or not,
	// the newest MaxSummaryRequests of them within MaxSummaryRequestBytes.
	Requests []*messages.RequestRef
	// Requester is the identity the new summary carries (Run sets it): the
	// author of the newest user message up to ToSeq, else Prev's.
	Requester *messages.Identity
	// Agent is the named agent whose view the plan covers: "" for the
	// plan itself (the default agent's), a name for each of Agents.
	Agent string
	// Agents are the plans of the named agents' summaries at the same
	// ToSeq, by name (see PlanAgents): each with that agent's summary as
	// Prev and only the events it sees. Empty in a conversation without
	// named agents.
	Agents []Plan
	// Owed is what the new summary records as owed to agents
	// (Summary.owed; Run sets it). The plan leaves it empty: which event
	// owes an agent a turn is the caller's rule, which fills it in.
	Owed []*messages.AgentOwed
}

// Bounds of the idempotency keys a summary carries (Summary.Requests), so
// that a retried send whose message a summary folded away is still
// recognised: the newest MaxSummaryRequests keys it covers, at most
// MaxSummaryRequestBytes of them (a longer key is not carried). The
// runtime's keys are ids (at most journal.MaxIDBytes each), so the newest
// MaxSummaryRequests of them always fit.
const (
	MaxSummaryRequests     = 32
	MaxSummaryRequestBytes = MaxSummaryRequests * journal.MaxIDBytes
)

// Plan returns the plan of a summary ending at SafePoint(keepRecent), and
// false if there is no safe point. Its events are those the default agent
// sees (all of them without named agents); the named agents' summaries the
// working set's summary holds are carried on (see PlanAgents).
func (w *WorkingSet) Plan(keepRecent int) (Plan, bool) {
	return w.plan(keepRecent, nil)
}

func (w *WorkingSet) plan(keepRecent int, names []string) (Plan, bool) {
	to := w.SafePoint(keepRecent)
	if to == 0 {
		return Plan{}, false
	}
	p := Plan{FromSeq: 1, ToSeq: to}
	if w.Summary != nil {
		p.Prev = w.SummaryFor("")
		p.FromSeq = w.Summary.GetFromSeq()
	}
	r := w.Render()
	n := 0
	for n < len(r) && r[n].GetSeq() <= to {
		n++
	}
	p.Events = upTo(w.RenderFor(""), to) // Render itself when nothing is shared
	p.Requests = foldRequests(w.Summary.GetRequests(), w.Events, to)
	p.Requester = w.Summary.GetRequester()
	for i := n - 1; i >= 0; i-- {
		if r[i].GetUserMsg() != nil {
			p.Requester = r[i].GetAuthor()
			break
		}
	}
	if names == nil && len(w.Summary.GetAgents()) == 0 {
		return p, true
	}
	w.planAgents(&p, names)
	return p, true
}

// Requester returns who the conversation works for: the author of the
// newest user message the model sees, or, when the summary folded every
// user message away, the summary's requester. Nil when unknown (an
// anonymous send, or a log written before authors were recorded).
func (w *WorkingSet) Requester() *messages.Identity {
	r := w.Render()
	for i := len(r) - 1; i >= 0; i-- {
		if r[i].GetUserMsg() != nil {
			return r[i].GetAuthor()
		}
	}
	return w.Summary.GetRequester()
}

// foldRequests returns the refs of prev followed by those of the events up
// to seq to that carry a request id, cut to the newest that fit the bounds
// of Summary.Requests. It returns a new slice; the refs are shared.
func foldRequests(prev []*messages.RequestRef, events []*messages.Event, to uint64) []*messages.RequestRef {
	all := slices.Clone(prev)
	for _, ev := range events {
		if ev.GetSeq() > to {
			break
		}
		if rid := ev.GetRequestId(); rid != "" {
			all = append(all, &messages.RequestRef{RequestId: rid, Seq: ev.GetSeq()})
		}
	}
	var kept []*messages.RequestRef
	size := 0
	for i := len(all) - 1; i >= 0 && len(kept) < MaxSummaryRequests; i-- {
		n := len(all[i].GetRequestId())
		if size+n > MaxSummaryRequestBytes {
			continue // a shorter, older key may still fit
		}
		size += n
		kept = append(kept, all[i])
	}
	slices.Reverse(kept)
	return kept
}

// Run summarizes the plan with s and returns the new summary, covering
// exactly p.FromSeq..p.ToSeq (Run sets both, so the summary ends at the
// safe point even when the last rendered event is before it). Run sets them,
// and the plan's keys, requester and agents, on a copy of what s returns:
// s may return a record it shares (prev itself, when it has nothing to
// add), which keeps its fields. With no events to fold it does not call s:
// the new summary carries Prev's content and version (empty without Prev).
// An error of s is returned as is;
// a nil s with events to fold, or an s that returns neither a summary nor
// an error, is an error wrapping journal.ErrInvalid. So is a plan (or one
// of its Agents) whose span no summary may cover: FromSeq 0, FromSeq after
// ToSeq, Prev ending after ToSeq, or an event after ToSeq; s is then not
// called (the plans Plan and PlanAgents return are all valid).
func (p Plan) Run(ctx context.Context, s Summarizer, conversationID string) (*messages.Summary, error) {
	if err := p.checkSpan(); err != nil {
		return nil, err
	}
	var out *messages.Summary
	if len(p.Events) == 0 {
		out = &messages.Summary{Content: p.Prev.GetContent(), Version: p.Prev.GetVersion()}
	} else {
		if s == nil {
			return nil, journal.Invalidf("snapshot: no summarizer for %q", conversationID)
		}
		sum, err := s.Summarize(ctx, conversationID, p.Prev, p.Events)
		if err != nil {
			return nil, err
		}
		if sum == nil {
			return nil, journal.Invalidf("snapshot: summarizer returned no summary for %q", conversationID)
		}
		// A copy: s may return a record it shares (prev, the working
		// set's own, when it has nothing to add; one it caches), which
		// must keep its span.
		out = proto.Clone(sum).(*messages.Summary)
	}
	out.FromSeq, out.ToSeq = p.FromSeq, p.ToSeq
	out.Requests = p.Requests
	out.Requester = p.Requester
	out.Agent, out.Agents, out.Owed = p.Agent, nil, p.Owed
	for _, a := range p.Agents {
		sub, err := a.Run(ctx, s, conversationID)
		if err != nil {
			return nil, err
		}
		out.Agents = append(out.Agents, sub)
	}
	return out, nil
}

// checkSpan checks that p and its Agents cover a span a summary may:
// 1 <= FromSeq <= ToSeq, Prev ending at or before ToSeq, every event at or
// before ToSeq.
func (p Plan) checkSpan() error {
	switch {
	case p.FromSeq < 1 || p.FromSeq > p.ToSeq:
		return journal.Invalidf("snapshot: plan of agent %q covers seq %d..%d", p.Agent, p.FromSeq, p.ToSeq)
	case p.Prev.GetToSeq() > p.ToSeq:
		return journal.Invalidf("snapshot: plan of agent %q ends at seq %d, before its previous summary's end %d", p.Agent, p.ToSeq, p.Prev.GetToSeq())
	}
	for _, ev := range p.Events {
		if ev.GetSeq() > p.ToSeq {
			return journal.Invalidf("snapshot: plan of agent %q ends at seq %d, before its event %d", p.Agent, p.ToSeq, ev.GetSeq())
		}
	}
	for _, a := range p.Agents {
		if err := a.checkSpan(); err != nil {
			return err
		}
	}
	return nil
}
