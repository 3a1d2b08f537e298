package main

import (
	"context"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// Sizes of the payloads of one turn, in bytes of text.
const (
	userBytes      = 400  // the user's message
	callTextBytes  = 600  // the assistant's text before its tool call
	callArgsBytes  = 200  // the tool call's JSON arguments
	resultBytes    = 2048 // the server tool's JSON result
	finalTextBytes = 800  // the assistant's final answer
)

// Tool names of the workload.
const (
	searchTool  = "search"  // a server tool: runs in-process, returns ~2 KB
	approveTool = "approve" // a human tool: a simulated human answers it
)

// humanMarker starts the text of a user message whose turn calls the
// human tool instead of the server tool.
const humanMarker = "[needs approval] "

// turnEvents is the number of events of a turn with a server call:
// user_msg, assistant_msg, tool_call, tool_result, assistant_msg.
const turnEvents = 5

// convTimes are the instants the load generator needs to measure the ack
// latency of the events of one conversation: when the content of its next
// event became known to the runtime. One model call or tool run is in
// flight per conversation at a time.
type convTimes struct {
	modelAt   atomic.Int64 // Unix ns: the model returned its answer
	toolAt    atomic.Int64 // Unix ns: the server tool returned
	resolveAt atomic.Int64 // Unix ns: the simulated human called Resolve
}

// workload is the scripted model and tools of a run.
type workload struct {
	think time.Duration
	times func(conversationID string) *convTimes // nil: nothing recorded
}

// userMessage is a ~400 B user message; a human turn's starts with
// humanMarker.
func userMessage(human bool) *messages.UserMessage {
	text := text(userBytes)
	if human {
		text = humanMarker + text[len(humanMarker):]
	}
	return &messages.UserMessage{Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: text}}}}
}

func textParts(text string) []*messages.ContentPart {
	return []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: text}}}
}

// callMessage is the assistant's first answer of a turn: text and one call.
func callMessage(tool string) *messages.AssistantMessage {
	args := `{"query":"` + text(callArgsBytes-12) + `"}`
	return &messages.AssistantMessage{
		Content:   textParts(text(callTextBytes)),
		ToolCalls: []*messages.ToolCall{{Name: tool, Arguments: args}},
	}
}

// finalMessage is the assistant's final answer of a turn.
func finalMessage() *messages.AssistantMessage {
	return &messages.AssistantMessage{Content: textParts(text(finalTextBytes))}
}

// Generate is the scripted model: after the think time (uniform between
// half and one and a half times Think), it answers a user
// message with a call (of the human tool if the message asks for approval,
// else of the server tool), and a tool result with a final answer. The
// text is streamed as one delta.
func (w *workload) Generate(ctx context.Context, turn agent.Turn, onDelta func(string)) (*messages.AssistantMessage, error) {
	if w.think > 0 {
		// Uniform in [think/2, 3*think/2): the mean is the think time, and
		// conversations do not answer in lockstep.
		t := time.NewTimer(w.think/2 + rand.N(w.think))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
	}
	var msg *messages.AssistantMessage
	last := turn.Context[len(turn.Context)-1]
	switch {
	case last.GetUserMsg() != nil:
		tool := searchTool
		if strings.HasPrefix(last.GetUserMsg().GetContent()[0].GetText(), humanMarker) {
			tool = approveTool
		}
		msg = callMessage(tool)
	default:
		msg = finalMessage()
	}
	if onDelta != nil {
		onDelta(msg.GetContent()[0].GetText())
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if w.times != nil {
		if t := w.times(turn.ConversationID); t != nil {
			t.modelAt.Store(time.Now().UnixNano())
		}
	}
	return msg, nil
}

// search is the server tool: a ~2 KB JSON result.
func (w *workload) search(ctx context.Context, inv agent.Invocation) (string, error) {
	out := jsonResult(resultBytes)
	if w.times != nil {
		if t := w.times(inv.ConversationID); t != nil {
			t.toolAt.Store(time.Now().UnixNano())
		}
	}
	return out, ctx.Err()
}

// tools returns the workload's tools: the server search and the human
// approval (whose deadline is far enough never to fire during a run).
func (w *workload) tools() []agent.Tool {
	return []agent.Tool{
		{
			Name: searchTool, Description: "search offers", Executor: messages.Executor_EXECUTOR_SERVER,
			Run: w.search,
		},
		{
			Name: approveTool, Description: "a human approves", Executor: messages.Executor_EXECUTOR_HUMAN,
			Timeout: time.Hour,
		},
	}
}

// turnLog returns the events of n complete server-call turns as a
// conversation's log would hold them (tool call ids unique per turn, with
// prefix), for filling a long conversation directly in the Store and for
// the raw-Pebble baseline.
func turnLog(prefix string, firstTurn, n int) []*messages.Event {
	evs := make([]*messages.Event, 0, n*turnEvents)
	now := time.Now()
	for i := range n {
		id := prefix + "-" + strconv.Itoa(firstTurn+i)
		call := callMessage(searchTool)
		call.ToolCalls[0].Id = id
		evs = append(evs,
			&messages.Event{Body: &messages.Event_UserMsg{UserMsg: userMessage(false)}},
			&messages.Event{Body: &messages.Event_AssistantMsg{AssistantMsg: call}},
			&messages.Event{Body: &messages.Event_ToolCall{ToolCall: &messages.ToolCallEvent{Call: call.ToolCalls[0], Executor: messages.Executor_EXECUTOR_SERVER}}},
			&messages.Event{Body: &messages.Event_ToolResult{ToolResult: &messages.ToolResultEvent{
				ToolCallId: id, Name: searchTool,
				Outcome: &messages.ToolOutcome{Outcome: &messages.ToolOutcome_Content{Content: jsonResult(resultBytes)}},
			}}},
			&messages.Event{Body: &messages.Event_AssistantMsg{AssistantMsg: finalMessage()}},
		)
	}
	for _, ev := range evs {
		ev.Time = journal.Timestamp(now)
	}
	return evs
}

// callRows returns the row of each tool_call event of evs, resolved (the
// turn's tool_result follows it), which a Store requires in the append
// that carries the event.
func callRows(conv string, evs []*messages.Event) []*messages.ToolCallRecord {
	var rows []*messages.ToolCallRecord
	for _, ev := range evs {
		if tc := ev.GetToolCall(); tc != nil {
			rows = append(rows, &messages.ToolCallRecord{Id: tc.GetCall().GetId(), ConversationId: conv, Name: tc.GetCall().GetName(),
				Executor: tc.GetExecutor(), Status: messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED, Args: tc.GetCall().GetArguments()})
		}
	}
	return rows
}
