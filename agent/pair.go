package agent

import (
	"google.golang.org/protobuf/proto"

	"github.com/lazarusrt/lazarus/messages"
)

// CodeMissing is the code of the error result PairResults gives a tool
// call that has no result in a turn's context; the model reads
// MissingResultMessage.
const CodeMissing = "missing"

// MissingResultMessage is the message of a CodeMissing result.
const MissingResultMessage = "no result was recorded for this call"

// PairResults returns the events of a turn's context with every tool call
// the model sees paired with exactly one result, as providers require (they
// refuse any other history, 400, and would on every later turn). A log the
// runtime wrote alone never needs it; a damaged or imported log, or one a
// Store writer wrote, may. It decides from evs alone, deterministically,
// and compares ids as a provider sees them: a call's Id, or its ProviderId
// when the Id is empty.
//
//   - A tool_result whose call no earlier assistant message of evs made (an
//     orphan: its call rewound, summarized or never made) is left out.
//   - Of two or more results for one call, the first after the call stands
//     and the others are left out: the first result closes a call (snapshot
//     OpenCalls and SafePoint), so it is the one the runtime counts as the
//     call's.
//   - A call with no result in evs gets a synthetic error result of code
//     CodeMissing and message MissingResultMessage, which the model reads.
//     The runtime calls the model only when it owes no call a result, so
//     such a call never ran and never will: the log holds it without its
//     tool_call event. The result is placed before the next assistant
//     message (or at the end), after the events that follow the call, in
//     the order of the calls; it carries the seq and time of the event
//     before it and the agent and audience of the call's message.
//   - A call whose id an earlier call of evs already made (a damaged log:
//     the runtime mints every id once) is left out of its message, which
//     both OpenAI and Anthropic require (they refuse a context holding
//     one call id twice): the first call is the one the results answer. A
//     message left with neither content nor calls is left out.
//
// The results that stand stay where they are: a provider adapter moves them
// right after their calls (openai.ResultsAfterCalls). PairResults returns evs itself when nothing
// changes, and otherwise a new slice that shares evs' events (an
// assistant message that loses a call is a copy); it never modifies them.
func PairResults(evs []*messages.Event) []*messages.Event {
	// First pass: which results stand, and whether any call lacks one.
	var (
		answered map[string]bool // id -> whether a result stands, for the calls made so far
		drop     map[int]bool    // indexes of the results left out
		missing  bool
		dup      bool // a call id made twice
	)
	for i, ev := range evs {
		if tr := ev.GetToolResult(); tr != nil {
			if done, ok := answered[tr.GetToolCallId()]; !ok || done {
				if drop == nil {
					drop = map[int]bool{}
				}
				drop[i] = true // an orphan, or a second result
				continue
			}
			answered[tr.GetToolCallId()] = true
			continue
		}
		for _, tc := range ev.GetAssistantMsg().GetToolCalls() {
			if answered == nil {
				answered = map[string]bool{}
			}
			if _, ok := answered[CallID(tc)]; !ok {
				answered[CallID(tc)] = false
			} else {
				dup = true
			}
		}
	}
	for _, done := range answered {
		missing = missing || !done
	}
	if len(drop) == 0 && !missing && !dup {
		return evs
	}
	var made map[string]bool // the calls made so far, when some id is made twice
	out := make([]*messages.Event, 0, len(evs)+4)
	var owe []*messages.ToolCall // the calls of the last assistant message that have no result
	var by *messages.Event       // that message
	flush := func() {
		for _, tc := range owe {
			prev := out[len(out)-1]
			out = append(out, &messages.Event{
				Seq: prev.GetSeq(), Time: prev.GetTime(), Agent: by.GetAgent(), Audience: by.GetAudience(),
				Body: &messages.Event_ToolResult{ToolResult: &messages.ToolResultEvent{
					ToolCallId: CallID(tc), Name: tc.GetName(),
					Outcome: &messages.ToolOutcome{Outcome: &messages.ToolOutcome_Error{Error: &messages.ToolError{
						Code: CodeMissing, Message: MissingResultMessage}}},
				}},
			})
		}
		owe, by = owe[:0], nil
	}
	for i, ev := range evs {
		if drop[i] {
			continue
		}
		if a := ev.GetAssistantMsg(); a != nil {
			flush()
			if dup {
				if ev = withoutMadeCalls(ev, &made); ev == nil {
					continue // it held only calls made before
				}
				a = ev.GetAssistantMsg()
			}
			for _, tc := range a.GetToolCalls() {
				if id := CallID(tc); !answered[id] {
					answered[id] = true // owed once, by the first message making it
					owe, by = append(owe, tc), ev
				}
			}
		}
		out = append(out, ev)
	}
	flush()
	return out
}

// withoutMadeCalls returns ev, an assistant message, without its calls
// whose ids *made holds or an earlier call of ev made (a copy if it
// leaves any out), and adds the ids of those it keeps to *made. It returns
// nil if that leaves the message with neither content nor calls.
func withoutMadeCalls(ev *messages.Event, made *map[string]bool) *messages.Event {
	if *made == nil {
		*made = map[string]bool{}
	}
	calls := ev.GetAssistantMsg().GetToolCalls()
	var kept []*messages.ToolCall // nil while every call is kept
	for i, tc := range calls {
		id := CallID(tc)
		if !(*made)[id] {
			(*made)[id] = true
			if kept != nil {
				kept = append(kept, tc)
			}
			continue
		}
		if kept == nil {
			kept = append(make([]*messages.ToolCall, 0, len(calls)), calls[:i]...)
		}
	}
	if kept == nil {
		return ev
	}
	if len(kept) == 0 && len(ev.GetAssistantMsg().GetContent()) == 0 {
		return nil
	}
	a := proto.CloneOf(ev.GetAssistantMsg())
	a.ToolCalls = kept
	out := proto.CloneOf(ev)
	out.Body = &messages.Event_AssistantMsg{AssistantMsg: a}
	return out
}

// CallID is the id a call carries in the history sent to a provider: the
// runtime's id, or the provider's when the runtime minted none.
func CallID(tc *messages.ToolCall) string {
	if id := tc.GetId(); id != "" {
		return id
	}
	return tc.GetProviderId()
}
