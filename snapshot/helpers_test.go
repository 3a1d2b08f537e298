package snapshot_test

import (
	"github.com/lazarusrt/lazarus/messages"
)

// Event builders. log assigns seqs from a start; ids name tool calls.

func user(text string) *messages.Event {
	return &messages.Event{Body: &messages.Event_UserMsg{UserMsg: &messages.UserMessage{
		Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: text}}},
	}}}
}

func asst(text string, callIDs ...string) *messages.Event {
	msg := &messages.AssistantMessage{}
	if text != "" {
		msg.Content = []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: text}}}
	}
	for _, id := range callIDs {
		msg.ToolCalls = append(msg.ToolCalls, &messages.ToolCall{Id: id, Name: "tool_" + id, Arguments: `{}`})
	}
	return &messages.Event{Body: &messages.Event_AssistantMsg{AssistantMsg: msg}}
}

func call(id string) *messages.Event {
	return &messages.Event{Body: &messages.Event_ToolCall{ToolCall: &messages.ToolCallEvent{
		Call:     &messages.ToolCall{Id: id, Name: "tool_" + id, Arguments: `{}`},
		Executor: messages.Executor_EXECUTOR_SERVER,
	}}}
}

func result(id, content string) *messages.Event {
	return &messages.Event{Body: &messages.Event_ToolResult{ToolResult: &messages.ToolResultEvent{
		ToolCallId: id, Name: "tool_" + id,
		Outcome: &messages.ToolOutcome{Outcome: &messages.ToolOutcome_Content{Content: content}},
	}}}
}

func suspension(id string) *messages.Event {
	return &messages.Event{Body: &messages.Event_Suspension{Suspension: &messages.Suspension{
		Pending: []*messages.PendingCall{{ToolCallId: id}},
	}}}
}

func resolution(id string) *messages.Event {
	return &messages.Event{Body: &messages.Event_Resolution{Resolution: &messages.Resolution{
		ToolCallId: id, Status: messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED, By: "user",
	}}}
}

func rewind(to uint64) *messages.Event {
	return &messages.Event{Body: &messages.Event_Rewind{Rewind: &messages.Rewind{ToSeq: to}}}
}

// unknown is an event of a type a newer version wrote: no body.
func unknown() *messages.Event { return &messages.Event{} }

// log numbers evs from start.
func log(start uint64, evs ...*messages.Event) []*messages.Event {
	for i, ev := range evs {
		ev.Seq = start + uint64(i)
	}
	return evs
}

func seqs(evs []*messages.Event) []uint64 {
	out := []uint64{}
	for _, ev := range evs {
		out = append(out, ev.GetSeq())
	}
	return out
}

func summary(from, to uint64) *messages.Summary {
	return &messages.Summary{FromSeq: from, ToSeq: to, Content: "earlier", Version: "test/1"}
}

// lastOf returns the last of evs, nil if none.
func lastOf(evs []*messages.Event) *messages.Event {
	if len(evs) == 0 {
		return nil
	}
	return evs[len(evs)-1]
}
