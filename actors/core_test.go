package actors

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/snapshot"
)

// The decisions of the core, one case per recovery rule (DESIGN section 6,
// the lifecycle of ARCHITECTURE.md). Each case revives a core from a log
// (and the tool-call rows the Store holds), feeds it inputs, and lists the
// effects of each input in words: "write[user_msg]" is a journal write
// with those events, "model" a model call started, "tool call_1" a server
// run, "reply seq=N" an acknowledged send, "cancel-model", "cancel-tool call_1", "arm-retry",
// "publish", "retire", "halt", "fenced", "unknown committed=B". The idle timer's touches are left
// out.

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func user(rid string) *messages.Event {
	return &messages.Event{RequestId: rid, Author: &messages.Identity{UserId: "ann"},
		Body: &messages.Event_UserMsg{UserMsg: &messages.UserMessage{Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: rid}}}}}}
}

func answer(calls ...*messages.ToolCall) *messages.Event {
	return &messages.Event{Body: &messages.Event_AssistantMsg{AssistantMsg: &messages.AssistantMessage{ToolCalls: calls,
		Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: "ok"}}}}}}
}

func call(id string, ex messages.Executor) *messages.Event {
	name := "lookup"
	if ex == messages.Executor_EXECUTOR_HUMAN {
		name = "approve"
	}
	return &messages.Event{Body: &messages.Event_ToolCall{ToolCall: &messages.ToolCallEvent{Executor: ex,
		Call: &messages.ToolCall{Id: id, Name: name, Arguments: "{}"}}}}
}

func result(id string) *messages.Event {
	return &messages.Event{Body: &messages.Event_ToolResult{ToolResult: &messages.ToolResultEvent{ToolCallId: id, Name: "lookup",
		Outcome: &messages.ToolOutcome{Outcome: &messages.ToolOutcome_Content{Content: "done"}}}}}
}

func failed() *messages.Event {
	return &messages.Event{Body: &messages.Event_TurnFailed{TurnFailed: &messages.TurnFailed{Message: "boom"}}}
}

var (
	server = messages.Executor_EXECUTOR_SERVER
	human  = messages.Executor_EXECUTOR_HUMAN
)

func send(rid string) *inCommand {
	return &inCommand{sender: "caller " + rid, cmd: &Command{Scope: agent.Scope{UserID: "ann"},
		Msg: &messages.AgentSend{RequestId: rid, Message: &messages.UserMessage{Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: rid}}}}}}}
}

func wake(explicit bool) *inCommand {
	return &inCommand{sender: "waker", cmd: &Command{Scope: agent.SystemScope, Msg: &messages.AgentWake{Explicit: explicit}}}
}

// ok is the journal's reply to the core's write number n.
func ok(n uint64) *inWriteReply { return &inWriteReply{id: n} }

// words renders effects as the cases list them.
func words(effs []effect) []string {
	var out []string
	for _, e := range effs {
		switch e := e.(type) {
		case effWrite:
			var kinds []string
			for _, ev := range e.req.GetEvents() {
				kind := strings.TrimPrefix(fmt.Sprintf("%T", ev.GetBody()), "*messages.Event_")
				if ev.GetRewind().GetCancelledTurn() {
					kind += "+turn" // the rewind takes back a turn in progress
				}
				kinds = append(kinds, kind)
			}
			w := "write[" + strings.Join(kinds, " ") + "]"
			if len(e.req.GetResolutions()) > 0 {
				w += fmt.Sprintf("+%d resolutions", len(e.req.GetResolutions()))
			}
			if e.req.GetScheduleFire() != nil {
				w += "+fire"
			}
			out = append(out, w)
		case effStartModel:
			out = append(out, "model")
		case effCancelModel:
			out = append(out, "cancel-model")
		case effRunTool:
			out = append(out, "tool "+e.inv.ToolCallID+" as "+e.inv.Scope.UserID)
		case effCancelTool:
			out = append(out, "cancel-tool "+e.id)
		case effReply:
			switch r := e.msg.(type) {
			case *messages.AgentSendReply:
				if r.GetError() != nil {
					out = append(out, fmt.Sprintf("reply error retry=%v", r.GetRetry()))
				} else {
					out = append(out, fmt.Sprintf("reply seq=%d", r.GetSeq()))
				}
			case *messages.AgentReply:
				if r.GetError() != nil && r.GetRetry() {
					out = append(out, "reply error retry=true")
				} else if r.GetError() != nil {
					out = append(out, "reply error")
				} else {
					out = append(out, "reply")
				}
			default:
				out = append(out, "reply")
			}
		case effArmRetry:
			out = append(out, "arm-retry")
		case effCancelRetry:
			out = append(out, "cancel-retry")
		case effPublish:
			out = append(out, "publish")
		case effRetire:
			out = append(out, "retire")
		case effHalt:
			out = append(out, "halt")
		case effFenced:
			out = append(out, "fenced")
		case effUnknown:
			out = append(out, fmt.Sprintf("unknown committed=%v", e.committed))
		case effSummarize:
			out = append(out, "summarize")
		}
	}
	return out
}

// The names of the write kinds as words renders them.
const (
	wUser   = "UserMsg"
	wAnswer = "AssistantMsg"
)

type coreCase struct {
	name string
	// log is the log the core revives from (seqs are set from 1).
	log []*messages.Event
	// rows are the tool-call rows the Store holds, by id (pending if absent).
	rows map[string]*messages.ToolCallRecord
	// conv is the Store's conversation row (none if nil).
	conv *messages.Conversation
	// steps are the inputs after the revival, each with the effects it must
	// produce (the revival's own effects come first, under the input nil).
	steps []coreStep
}

type coreStep struct {
	in   any
	want []string
}

func TestCoreRecoveryRules(t *testing.T) {
	pending := func(id string, st messages.ToolCallStatus) map[string]*messages.ToolCallRecord {
		return map[string]*messages.ToolCallRecord{id: {Id: id, Status: st, Executor: human,
			Result: &messages.ToolOutcome{Outcome: &messages.ToolOutcome_Content{Content: "yes"}}}}
	}
	rewind := func(to uint64) *inCommand {
		return &inCommand{sender: "s", cmd: &Command{Scope: agent.Scope{UserID: "ann"}, Msg: &messages.AgentRewind{ToSeq: to}}}
	}
	rewindID := func(to uint64, rid string) *inCommand {
		return &inCommand{sender: "s", cmd: &Command{Scope: agent.Scope{UserID: "ann"}, Msg: &messages.AgentRewind{ToSeq: to, RequestId: rid}}}
	}
	edit := func(seq uint64) *inCommand {
		return &inCommand{sender: "s", cmd: &Command{Scope: agent.Scope{UserID: "ann"}, Msg: &messages.AgentRewind{EditSeq: seq, RequestId: "e1",
			Message: &messages.UserMessage{Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: "new"}}}}}}}
	}
	resolved := func(id string) *inCommand {
		return &inCommand{sender: "bob", cmd: &Command{Scope: agent.Scope{UserID: "bob"}, Msg: &messages.AgentResolved{ToolCallId: id,
			Status: messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED, Result: &messages.ToolOutcome{}, By: "user"}}}
	}
	end := &inCommand{sender: "ender", cmd: &Command{Scope: agent.SystemScope, Msg: &messages.EndConversation{}}}
	configure := &inCommand{sender: "configurer", cmd: &Command{Scope: agent.SystemScope, Msg: &messages.AgentConfigure{Settings: map[string]string{"model": "m2"}}}}
	scheduled := func(rid string) *inCommand {
		return &inCommand{sender: "waker " + rid, cmd: &Command{Scope: agent.SystemScope, Msg: &messages.ScheduleWake{RequestId: rid,
			Message: &messages.UserMessage{Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: rid}}}},
			Fire:    &messages.ScheduleFire{ScheduleId: "s1", Occurrence: journal.Timestamp(t0)}}}}
	}
	stale := func(n uint64) *inWriteReply { return &inWriteReply{id: n, err: journal.ErrStale} }
	wakeAt := func(last uint64) *inCommand {
		return &inCommand{sender: "waker", cmd: &Command{Scope: agent.SystemScope, Msg: &messages.AgentWake{LogLast: last}}}
	}
	cases := []coreCase{{
		name: "a wake that says the log is past this activation's view retires it and is told to retry; one at or before its view is answered",
		log:  []*messages.Event{user("r1"), answer()},
		steps: []coreStep{
			{nil, nil},
			{wakeAt(2), []string{"reply"}},
			{wakeAt(1), []string{"reply"}},
			{wakeAt(3), []string{"retire", "halt", "reply error retry=true"}},
			{send("r2"), []string{"reply error retry=true"}},
		},
	}, {
		name: "a wake that says the log is past the view while a write is in flight waits for it; a fenced write retires the activation and the wake is told to retry",
		log:  []*messages.Event{user("r1"), answer()},
		steps: []coreStep{
			{nil, nil},
			{send("r2"), []string{"write[" + wUser + "]"}},
			{wakeAt(5), nil},
			{&inWriteReply{id: 1, err: journal.ErrConflict}, []string{"reply error retry=true", "publish", "retire", "reply error retry=true", "halt", "fenced"}},
		},
	}, {
		name: "a wake that says the log is past the view while a write is in flight retires the activation once the write lands short of it (another writer wrote after it), before any turn starts",
		log:  []*messages.Event{user("r1"), answer()},
		steps: []coreStep{
			{nil, nil},
			{send("r2"), []string{"write[" + wUser + "]"}},
			{wakeAt(4), nil},
			{wakeAt(3), nil},
			{ok(1), []string{"reply seq=3", "retire", "reply error retry=true", "halt", "reply error retry=true"}},
		},
	}, {
		name: "a wake that says the log is past the view while a write is in flight is answered once the write brings the view to it",
		log:  []*messages.Event{user("r1"), answer()},
		steps: []coreStep{
			{nil, nil},
			{send("r2"), []string{"write[" + wUser + "]"}},
			{wakeAt(3), nil},
			{ok(1), []string{"reply seq=3", "reply", "model"}},
		},
	}, {
		name: "an end at rest writes the status alone; then sends and rewinds are refused, and no wake runs a turn",
		log:  []*messages.Event{user("r1"), answer(), user("r2"), failed()},
		steps: []coreStep{
			{nil, nil},
			{end, []string{"write[]"}},
			{ok(1), []string{"reply"}},
			{send("r3"), []string{"reply error retry=false"}},
			{rewind(2), []string{"reply error retry=false"}},
			{wake(true), []string{"reply"}},
			{end, []string{"reply"}},
		},
	}, {
		name: "an end while a call is open, or a turn is owed, is refused and writes nothing",
		log:  []*messages.Event{user("r1"), answer(), call("call_1", human)},
		steps: []coreStep{
			{nil, nil},
			{end, []string{"reply error"}},
			{resolved("call_1"), []string{"reply", "write[Resolution ToolResult]"}},
			{ok(1), []string{"model"}},
			{end, []string{"reply error"}},
		},
	}, {
		name: "an end that meets the turn's last write in flight waits for it, then ends; a second one succeeds once the first lands",
		log:  []*messages.Event{user("r1")},
		steps: []coreStep{
			{nil, nil},
			{wake(false), []string{"reply", "model"}},
			{&inModelDone{turn: 1, msg: &messages.AssistantMessage{}}, []string{"write[AssistantMsg]"}},
			{end, nil},
			{end, nil},
			{ok(1), []string{"write[]"}},
			{ok(2), []string{"reply", "reply"}},
			{send("r2"), []string{"reply error retry=false"}},
		},
	}, {
		name: "a configure that arrives while the end's write is in flight is refused once it lands, and so is a later one; nothing written",
		log:  []*messages.Event{user("r1"), answer()},
		steps: []coreStep{
			{nil, nil},
			{end, []string{"write[]"}},
			{configure, nil},
			{ok(1), []string{"reply", "reply error"}},
			{configure, []string{"reply error"}},
		},
	}, {
		name: "an ended conversation holding an open server call (an import cut short) does not run it",
		log:  []*messages.Event{user("r1"), answer(), call("call_1", server)},
		conv: &messages.Conversation{Status: messages.ConversationStatus_CONVERSATION_STATUS_ENDED},
		steps: []coreStep{
			{nil, nil},
			{wake(true), []string{"reply"}},
			{send("r2"), []string{"reply error retry=false"}},
		},
	}, {
		name: "an ended conversation holding a call answered in the Store does not record the answer",
		log:  []*messages.Event{user("r1"), answer(), call("call_1", human)},
		rows: pending("call_1", messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED),
		conv: &messages.Conversation{Status: messages.ConversationStatus_CONVERSATION_STATUS_ENDED},
		steps: []coreStep{
			{nil, nil},
			{wake(true), []string{"reply"}},
			{end, []string{"reply"}},
		},
	}, {
		name: "an end that waited for a write opening a call is refused once it lands",
		log:  []*messages.Event{user("r1")},
		steps: []coreStep{
			{nil, nil},
			{wake(false), []string{"reply", "model"}},
			{&inModelDone{turn: 1, msg: &messages.AssistantMessage{ToolCalls: []*messages.ToolCall{{Name: "approve", Arguments: "{}"}}}},
				[]string{"write[AssistantMsg ToolCall Suspension]"}},
			{end, nil},
			{ok(1), []string{"reply error"}},
		},
	}, {
		name: "a write of unknown outcome stops the activation; a send queued or arriving after is told to retry on a new one",
		log:  []*messages.Event{user("r1"), answer()},
		steps: []coreStep{
			{nil, nil},
			{send("r2"), []string{"write[" + wUser + "]"}},
			{send("r3"), nil},
			{&inWriteReply{id: 1, err: fmt.Errorf("store: timeout: %w", journal.ErrUnknownOutcome)},
				[]string{"reply error retry=false", "publish", "retire", "reply error retry=true", "halt", "unknown committed=false"}},
			{send("r4"), []string{"reply error retry=true"}},
		},
	}, {
		name: "a model answer of unknown outcome stops the activation and asks for a re-wake, saying a write of it landed before",
		log:  []*messages.Event{user("r1"), answer()},
		steps: []coreStep{
			{nil, nil},
			{send("r2"), []string{"write[" + wUser + "]"}},
			{ok(1), []string{"reply seq=3", "model"}},
			{&inModelDone{turn: 1, msg: &messages.AssistantMessage{Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: "hi"}}}}},
				[]string{"write[" + wAnswer + "]"}},
			{&inWriteReply{id: 2, err: fmt.Errorf("store: timeout: %w", journal.ErrUnknownOutcome)},
				[]string{"publish", "retire", "halt", "unknown committed=true"}},
		},
	}, {
		name: "the journal actor gone under a model answer's write stops the activation with no re-wake: the owed turn waits for the next command or the resume scan",
		log:  []*messages.Event{user("r1"), answer()},
		steps: []coreStep{
			{nil, nil},
			{send("r2"), []string{"write[" + wUser + "]"}},
			{ok(1), []string{"reply seq=3", "model"}},
			{&inModelDone{turn: 1, msg: &messages.AssistantMessage{Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: "hi"}}}}},
				[]string{"write[" + wAnswer + "]"}},
			{send("r3"), nil},
			{&inJournalGone{}, []string{"retire", "reply error retry=true", "halt"}},
			{send("r4"), []string{"reply error retry=true"}},
		},
	}, {
		name: "a write the Store refuses as bad input stops the activation; a send queued behind it is told to retry on a new one, not given that write's error",
		log:  []*messages.Event{user("r1"), answer()},
		steps: []coreStep{
			{nil, nil},
			{send("r2"), []string{"write[" + wUser + "]"}},
			{send("r3"), nil},
			{&inWriteReply{id: 1, err: journal.Invalidf("event cannot be encoded")},
				[]string{"reply error retry=false", "publish", "retire", "reply error retry=true", "halt"}},
		},
	}, {
		name: "a scheduled wake is written alone with its fire; a stale one fails only itself and the activation goes on",
		log:  []*messages.Event{user("r1"), answer()},
		steps: []coreStep{
			{nil, nil},
			{send("r2"), []string{"write[" + wUser + "]"}},
			{scheduled("w1"), nil},
			{send("r3"), nil},
			{ok(1), []string{"reply seq=3", "write[" + wUser + "]+fire"}},
			{stale(2), []string{"reply error retry=false", "write[" + wUser + "]"}},
			{ok(3), []string{"reply seq=4", "model"}},
			{scheduled("w2"), []string{"cancel-model", "publish", "write[" + wUser + "]+fire"}},
		},
	}, {
		name: "a scheduled wake already in the log is answered with its seq and not written again",
		log:  []*messages.Event{user("r1"), answer(), user("w1")},
		steps: []coreStep{
			{nil, nil},
			{scheduled("w1"), []string{"reply seq=3", "model"}},
		},
	}, {
		name: "a rewind cancels the calls open in the rewound span in its own write, and owes no turn; a late answer is ignored",
		log:  []*messages.Event{user("r1"), answer(), user("r2"), answer(), call("call_1", human)},
		steps: []coreStep{
			{nil, nil},
			{rewind(2), []string{"write[Rewind]+1 resolutions"}},
			{ok(1), []string{"reply seq=6"}},
			{resolved("call_1"), []string{"reply"}},
			{send("r3"), []string{"write[" + wUser + "]"}},
			{ok(2), []string{"reply seq=7", "model"}},
		},
	}, {
		name: "a rewind while the model runs cancels the call and voids what it streamed",
		log:  []*messages.Event{user("r1")},
		steps: []coreStep{
			{nil, nil},
			{wake(false), []string{"reply", "model"}},
			{rewind(0), []string{"cancel-model", "publish", "write[Rewind+turn]"}},
			{&inModelDone{turn: 1, msg: &messages.AssistantMessage{}}, nil},
			{ok(1), []string{"reply seq=2"}},
		},
	}, {
		name: "a rewind records that it took back a turn in progress: an edit while the model runs, a rewind while a server call runs",
		log:  []*messages.Event{user("r1"), answer(), user("r2")},
		steps: []coreStep{
			{nil, nil},
			{wake(false), []string{"reply", "model"}},
			{edit(3), []string{"cancel-model", "publish", "write[Rewind+turn " + wUser + "]"}},
		},
	}, {
		name: "a rewind while a server call of the turn runs takes the turn back, and once durable cancels the run; its late outcome is ignored",
		log:  []*messages.Event{user("r1"), answer(), user("r2"), call("call_1", server)},
		steps: []coreStep{
			{nil, nil},
			{wake(false), []string{"reply", "tool call_1 as ann"}},
			{rewind(2), []string{"write[Rewind+turn]+1 resolutions"}},
			{ok(1), []string{"cancel-tool call_1", "reply seq=5"}},
			{&inToolDone{id: "call_1", outcome: agent.ErrorOutcome(agent.CodeCanceled, "context canceled")}, nil},
		},
	}, {
		name: "a rewind after a turn's end (answered, failed, suspended) takes no turn back",
		log:  []*messages.Event{user("r1"), answer(), user("r2"), failed()},
		steps: []coreStep{
			{nil, nil},
			{rewind(2), []string{"write[Rewind]"}},
			{ok(1), []string{"reply seq=5"}},
			{rewind(0), []string{"write[Rewind]"}},
		},
	}, {
		name: "a refused rewind leaves the model call running",
		log:  []*messages.Event{user("r1")},
		steps: []coreStep{
			{nil, nil},
			{wake(false), []string{"reply", "model"}},
			{rewind(5), []string{"reply error retry=false"}},
		},
	}, {
		name: "an edit writes the rewind and the new message together, then the model is called",
		log:  []*messages.Event{user("r1"), answer()},
		steps: []coreStep{
			{nil, nil},
			{edit(1), []string{"write[Rewind " + wUser + "]"}},
			{ok(1), []string{"reply seq=4", "model"}},
			{edit(1), []string{"reply seq=4"}}, // a retry of the same edit (request id) is not written again
		},
	}, {
		name: "a rewind whose cancellation meets a call answered in the Store first is refused as stale; the activation goes on and records the answer",
		log:  []*messages.Event{user("r1"), answer(), user("r2"), answer(), call("call_1", human)},
		steps: []coreStep{
			{nil, nil},
			{rewind(2), []string{"write[Rewind]+1 resolutions"}},
			{stale(1), []string{"reply error retry=false"}},
			{resolved("call_1"), []string{"reply", "write[Resolution ToolResult]"}},
			{ok(2), []string{"model"}},
		},
	}, {
		name: "a plain rewind carries its request id: a retry is answered from the log, also by a revived activation",
		log:  []*messages.Event{user("r1"), answer(), user("r2"), answer()},
		steps: []coreStep{
			{nil, nil},
			{rewindID(2, "rw1"), []string{"write[Rewind]"}},
			{ok(1), []string{"reply seq=5"}},
			{rewindID(2, "rw1"), []string{"reply seq=5"}},
		},
	}, {
		name: "a rewind written by an activation that died before answering is not written again by the retry",
		log: []*messages.Event{user("r1"), answer(), user("r2"), answer(),
			{RequestId: "rw1", Body: &messages.Event_Rewind{Rewind: &messages.Rewind{ToSeq: 2}}}},
		steps: []coreStep{
			{nil, nil},
			{rewindID(2, "rw1"), []string{"reply seq=5"}},
		},
	}, {
		name: "a rewind to a point where a call is open, or after the log, and an edit of an answer are refused; nothing is written",
		log:  []*messages.Event{user("r1"), answer(), call("call_1", server), result("call_1"), answer()},
		steps: []coreStep{
			{nil, nil},
			{rewind(3), []string{"reply error retry=false"}},
			{rewind(6), []string{"reply error retry=false"}},
			{edit(2), []string{"reply error retry=false"}},
		},
	}, {
		name: "an edit of a user message an earlier rewind skipped is refused, also while a write is in flight; nothing is written",
		log: []*messages.Event{user("r1"), answer(), user("r2"), answer(),
			{Body: &messages.Event_Rewind{Rewind: &messages.Rewind{ToSeq: 2}}}},
		steps: []coreStep{
			{nil, nil},
			{edit(3), []string{"reply error retry=false"}},
			{send("r3"), []string{"write[" + wUser + "]"}},
			{edit(3), nil},
			{ok(1), []string{"reply seq=6", "reply error retry=false", "model"}},
		},
	}, {
		name: "a user message is durable before anything else, then the model is called",
		steps: []coreStep{
			{nil, nil},
			{send("r1"), []string{"write[" + wUser + "]"}},
			{ok(1), []string{"reply seq=1", "model"}},
		},
	}, {
		name: "the log ends in a user message: the revival re-runs that turn, once a command says who asked",
		log:  []*messages.Event{user("r1")},
		steps: []coreStep{
			{nil, nil}, // no work before the first command
			{wake(false), []string{"reply", "model"}},
		},
	}, {
		name: "the log ends in a tool_result with no call open: the model owes a turn",
		log:  []*messages.Event{user("r1"), answer(), call("call_1", server), result("call_1")},
		steps: []coreStep{
			{nil, nil},
			{wake(false), []string{"reply", "model"}},
		},
	}, {
		name: "a server call without a result is dispatched again with its id, under the requester; the model is not called",
		log:  []*messages.Event{user("r1"), answer(), call("call_1", server)},
		steps: []coreStep{
			{nil, nil},
			{wake(false), []string{"reply", "tool call_1 as ann"}},
			{&inToolDone{id: "call_1", outcome: &messages.ToolOutcome{Outcome: &messages.ToolOutcome_Content{Content: "done"}}}, []string{"write[ToolResult]+1 resolutions"}},
			{ok(1), []string{"model"}},
		},
	}, {
		name: "a server call whose tool_call event a damaged log holds twice is owed once: one run, one tool_result",
		log:  []*messages.Event{user("r1"), answer(), call("call_1", server), call("call_1", server)},
		steps: []coreStep{
			{nil, nil},
			{wake(false), []string{"reply", "tool call_1 as ann"}},
			{&inToolDone{id: "call_1", outcome: &messages.ToolOutcome{Outcome: &messages.ToolOutcome_Content{Content: "done"}}}, []string{"write[ToolResult]+1 resolutions"}},
			{ok(1), []string{"model"}},
		},
	}, {
		name: "the log ends in a tool_result while another server call is open: that call runs again, the model is not called",
		log:  []*messages.Event{user("r1"), answer(), call("call_1", server), call("call_2", server), result("call_1")},
		steps: []coreStep{
			{nil, nil},
			{wake(false), []string{"reply", "tool call_2 as ann"}},
			{&inToolDone{id: "call_2", outcome: &messages.ToolOutcome{Outcome: &messages.ToolOutcome_Content{Content: "done"}}}, []string{"write[ToolResult]+1 resolutions"}},
			{ok(1), []string{"model"}},
		},
	}, {
		name: "the log ends in a tool_result while a human call is open: nothing is done until it is answered",
		log:  []*messages.Event{user("r1"), answer(), call("call_1", server), call("call_2", human), result("call_1")},
		steps: []coreStep{
			{nil, nil},
			{wake(true), []string{"reply"}},
		},
	}, {
		name: "the log ends in a rewind to a user message: nothing is owed, even on an explicit wake; the next send starts a turn",
		log: []*messages.Event{user("r1"), answer(), user("r2"), answer(),
			{Body: &messages.Event_Rewind{Rewind: &messages.Rewind{ToSeq: 1}}}},
		steps: []coreStep{
			{nil, nil},
			{wake(false), []string{"reply"}},
			{wake(true), []string{"reply"}},
			{send("r3"), []string{"write[" + wUser + "]"}},
			{ok(1), []string{"reply seq=6", "model"}},
		},
	}, {
		name: "a human call still pending stays pending: nothing is done",
		log:  []*messages.Event{user("r1"), answer(), call("call_1", human)},
		steps: []coreStep{
			{nil, nil},
			{wake(false), []string{"reply"}},
		},
	}, {
		name: "a call resolved in the Store but not in the log is recorded from its row (not resolved again)",
		log:  []*messages.Event{user("r1"), answer(), call("call_1", human)},
		rows: pending("call_1", messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED),
		steps: []coreStep{
			{nil, nil},
			{wake(false), []string{"reply", "write[Resolution ToolResult]"}},
			{ok(1), []string{"model"}},
		},
	}, {
		name: "an answer to a human call is recorded, then the model is called again",
		log:  []*messages.Event{user("r1"), answer(), call("call_1", human)},
		steps: []coreStep{
			{nil, nil},
			{&inCommand{sender: "bob", cmd: &Command{Scope: agent.Scope{UserID: "bob"}, Msg: &messages.AgentResolved{ToolCallId: "call_1",
				Status: messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED, Result: &messages.ToolOutcome{}, By: "user"}}},
				[]string{"reply", "write[Resolution ToolResult]"}},
			{ok(1), []string{"model"}},
		},
	}, {
		name: "the log ends in turn_failed: the runtime's own wake does nothing, an explicit one runs the turn again",
		log:  []*messages.Event{user("r1"), failed()},
		steps: []coreStep{
			{nil, nil},
			{wake(false), []string{"reply"}},
			{wake(true), []string{"reply", "model"}},
		},
	}, {
		name: "a retried send whose write is in flight joins it: appended once, both answered",
		steps: []coreStep{
			{nil, nil},
			{send("r1"), []string{"write[" + wUser + "]"}},
			{send("r1"), nil},
			{ok(1), []string{"reply seq=1", "reply seq=1", "model"}},
			{send("r1"), []string{"reply seq=1"}},
		},
	}, {
		name: "a retried send already in the log, the first command of a revival, is answered and starts the turn it owes",
		log:  []*messages.Event{user("r1")},
		steps: []coreStep{
			{nil, nil},
			{send("r1"), []string{"reply seq=1", "model"}},
		},
	}, {
		name: "an answer that overtakes the reply of the write opening its call is kept for the call",
		log:  []*messages.Event{user("r1")},
		steps: []coreStep{
			{nil, nil},
			{wake(false), []string{"reply", "model"}},
			{&inModelDone{turn: 1, msg: &messages.AssistantMessage{ToolCalls: []*messages.ToolCall{{Name: "approve", Arguments: "{}"}}}},
				[]string{"write[AssistantMsg ToolCall Suspension]"}},
			{&inCommand{sender: "bob", cmd: &Command{Scope: agent.Scope{UserID: "bob"}, Msg: &messages.AgentResolved{ToolCallId: "call_x",
				Status: messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED, Result: &messages.ToolOutcome{}, By: "user"}}},
				[]string{"reply"}},
			{ok(1), []string{"write[Resolution ToolResult]"}},
			{ok(2), []string{"model"}},
		},
	}, {
		name: "a new message cancels the model call in flight; the next call waits for its write",
		log:  []*messages.Event{user("r1")},
		steps: []coreStep{
			{nil, nil},
			{wake(false), []string{"reply", "model"}},
			{send("r2"), []string{"cancel-model", "publish", "write[" + wUser + "]"}}, // the publication voids what the call streamed
			{&inModelDone{turn: 1, msg: &messages.AssistantMessage{}}, nil},           // the cancelled call returns late: ignored
			{ok(1), []string{"reply seq=2", "model"}},
		},
	}, {
		name: "a retryable model failure waits for the retry timer, then calls again",
		log:  []*messages.Event{user("r1")},
		steps: []coreStep{
			{nil, nil},
			{wake(false), []string{"reply", "model"}},
			{&inModelDone{turn: 1, err: agent.ErrRateLimited}, []string{"arm-retry", "publish"}},
			{&inRetryTick{gen: 1}, []string{"model"}},
		},
	}, {
		name: "a permanent model failure writes turn_failed (the row leaves ACTIVE)",
		log:  []*messages.Event{user("r1")},
		steps: []coreStep{
			{nil, nil},
			{wake(false), []string{"reply", "model"}},
			{&inModelDone{turn: 1, err: agent.ErrRefused}, []string{"write[TurnFailed]"}},
			{ok(1), nil},
		},
	}, {
		name: "an answer with calls is one write: the answer and its tool_call events; server calls then run",
		log:  []*messages.Event{user("r1")},
		steps: []coreStep{
			{nil, nil},
			{wake(false), []string{"reply", "model"}},
			{&inModelDone{turn: 1, msg: &messages.AssistantMessage{ToolCalls: []*messages.ToolCall{{Name: "lookup", Arguments: "{}"}}}},
				[]string{"write[AssistantMsg ToolCall]"}},
			{ok(1), []string{"tool call_x as ann"}}, // the requester the revival rebuilt, not the waker
		},
	}, {
		name: "a server call runs for its turn's requester, not for the sender of a message written after its answer",
		log:  []*messages.Event{user("r1")},
		steps: []coreStep{
			{nil, nil},
			{wake(false), []string{"reply", "model"}},
			{&inModelDone{turn: 1, msg: &messages.AssistantMessage{ToolCalls: []*messages.ToolCall{{Name: "lookup", Arguments: "{}"}}}},
				[]string{"write[AssistantMsg ToolCall]"}},
			{&inCommand{sender: "bob", cmd: &Command{Scope: agent.Scope{UserID: "bob"}, Msg: &messages.AgentSend{RequestId: "r2",
				Message: &messages.UserMessage{Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: "r2"}}}}}}}, nil},
			{ok(1), []string{"write[" + wUser + "]"}},
			{ok(2), []string{"reply seq=4", "tool call_x as ann"}},
		},
	}, {
		name: "an answer with a human call suspends in the same write",
		log:  []*messages.Event{user("r1")},
		steps: []coreStep{
			{nil, nil},
			{wake(false), []string{"reply", "model"}},
			{&inModelDone{turn: 1, msg: &messages.AssistantMessage{ToolCalls: []*messages.ToolCall{{Name: "approve", Arguments: "{}"}}}},
				[]string{"write[AssistantMsg ToolCall Suspension]"}},
			{ok(1), nil},
		},
	}, {
		name: "a call of an unknown tool is recorded with an error result in the same write",
		log:  []*messages.Event{user("r1")},
		steps: []coreStep{
			{nil, nil},
			{wake(false), []string{"reply", "model"}},
			{&inModelDone{turn: 1, msg: &messages.AssistantMessage{ToolCalls: []*messages.ToolCall{{Name: "nosuch", Arguments: "{}"}}}},
				[]string{"write[AssistantMsg ToolCall ToolResult]+1 resolutions"}},
			{ok(1), []string{"model"}},
		},
	}, {
		name: "a nil entry among an answer's calls is recorded as an empty, invalid call with its error result, not a panic",
		log:  []*messages.Event{user("r1")},
		steps: []coreStep{
			{nil, nil},
			{wake(false), []string{"reply", "model"}},
			{&inModelDone{turn: 1, msg: &messages.AssistantMessage{ToolCalls: []*messages.ToolCall{nil}}},
				[]string{"write[AssistantMsg ToolCall ToolResult]+1 resolutions"}},
			{ok(1), []string{"model"}},
		},
	}, {
		name: "a failed write stops the activation; its caller is told to retry",
		steps: []coreStep{
			{nil, nil},
			{send("r1"), []string{"write[" + wUser + "]"}},
			{&inWriteReply{id: 1, err: journal.ErrUnavailable}, []string{"reply error retry=false", "publish", "retire", "halt"}},
		},
	}, {
		name: "a write that meets another writer stops the activation and asks to be woken again",
		steps: []coreStep{
			{nil, nil},
			{send("r1"), []string{"write[" + wUser + "]"}},
			{&inWriteReply{id: 1, err: journal.ErrConflict}, []string{"reply error retry=true", "publish", "retire", "halt", "fenced"}},
		},
	}, {
		name: "a kill answers the callers waiting (retry) and abandons the work in flight",
		log:  []*messages.Event{user("r1")},
		steps: []coreStep{
			{nil, nil},
			{send("r2"), []string{"write[" + wUser + "]"}},
			{&inStop{cause: ErrAgentStopped, retire: true}, []string{"retire", "reply error retry=true", "halt"}},
			{ok(1), nil}, // the write's late reply is ignored
		},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tools, err := agent.NewRegistry(
				agent.Tool{Name: "lookup", Executor: server, Run: func(context.Context, agent.Invocation) (string, error) { return "", nil }},
				agent.Tool{Name: "approve", Executor: human, Timeout: time.Minute},
			)
			require.NoError(t, err)
			c := newCore(coreConfig{ID: "c", Tools: tools, Policy: snapshot.Policy{}.WithDefaults(),
				Retry: RetryPolicy{}.WithDefaults(), MaxInvalidToolAnswers: 1,
				NewID: func(time.Time) string { return "call_x" }}, slog.New(slog.DiscardHandler))
			for i, ev := range tc.log {
				ev.Seq = uint64(i + 1)
			}
			ws, err := snapshot.Rebuild(nil, tc.log)
			require.NoError(t, err)
			scope := agent.SystemScope
			if id := agent.IdentityOf(ws.Requester()); id.UserID != "" {
				scope = agent.ScopeOf(id)
			}
			rows := tc.rows
			if rows == nil {
				rows = map[string]*messages.ToolCallRecord{}
			}
			for i, st := range tc.steps {
				in := st.in
				if i == 0 {
					in = &inLoaded{ws: ws, rows: rows, conv: tc.conv, scope: scope}
				}
				got := words(c.step(t0, in))
				require.Equal(t, st.want, got, "step %d (%T)", i, in)
			}
		})
	}
}

// BenchmarkCoreTurn is the core's own cost of one turn without tools: a
// send, its write's reply, the model's answer, its write's reply (four
// steps, three events).
func BenchmarkCoreTurn(b *testing.B) {
	fresh := func() *core {
		c := newCore(coreConfig{ID: "c", Policy: snapshot.Policy{}.WithDefaults(), Retry: RetryPolicy{}.WithDefaults()},
			slog.New(slog.DiscardHandler))
		ws, err := snapshot.Rebuild(nil, nil)
		require.NoError(b, err)
		c.step(t0, &inLoaded{ws: ws, scope: agent.SystemScope})
		return c
	}
	c := fresh()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		c.step(t0, send(fmt.Sprint("r", i)))
		c.step(t0, &inWriteReply{id: c.inflight.id})
		c.step(t0, &inModelDone{turn: c.turn, msg: &messages.AssistantMessage{}})
		c.step(t0, &inWriteReply{id: c.inflight.id})
		if i%50 == 49 { // a short conversation, as summaries keep the working set
			b.StopTimer()
			c = fresh()
			b.StartTimer()
		}
	}
}

// TestRevivalRunsACallForItsRequester: a revival runs an open server call
// again for the requester its row records, rebuilt by the ScopeLoader,
// though a message of another user landed after the answer that made it;
// the work the newer message owes is that user's.
func TestRevivalRunsACallForItsRequester(t *testing.T) {
	tools, err := agent.NewRegistry(agent.Tool{Name: "lookup", Executor: server, Run: func(context.Context, agent.Invocation) (string, error) { return "", nil }})
	require.NoError(t, err)
	c := newCore(coreConfig{ID: "c", Tools: tools, Policy: snapshot.Policy{}.WithDefaults(), Retry: RetryPolicy{}.WithDefaults(),
		MaxInvalidToolAnswers: 1, NewID: func(time.Time) string { return "call_x" }}, slog.New(slog.DiscardHandler))
	bob := user("r2")
	bob.Author = &messages.Identity{UserId: "bob"}
	log := []*messages.Event{user("r1"), answer(&messages.ToolCall{Id: "c1", Name: "lookup", Arguments: "{}"}), call("c1", server), bob}
	for i, ev := range log {
		ev.Seq = uint64(i + 1)
	}
	ws, err := snapshot.Rebuild(nil, log)
	require.NoError(t, err)
	rows := map[string]*messages.ToolCallRecord{"c1": {Id: "c1", ConversationId: "c", Executor: server,
		Status: messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING, Requester: &messages.Identity{UserId: "ann"}}}
	var asked []string
	loader := func(_ context.Context, id agent.Identity) (agent.Scope, error) {
		asked = append(asked, id.UserID)
		return agent.Scope{UserID: id.UserID, Permissions: []string{"loaded"}}, nil
	}
	l := &inLoaded{ws: ws, rows: rows}
	quiet := slog.New(slog.DiscardHandler)
	l.scope = resumeScope(t.Context(), ws, loader, quiet)
	l.callScopes = callScopes(t.Context(), l, loader, quiet)
	require.Equal(t, []string{"bob", "ann"}, asked, "the log's requester, then the call's")

	var run *agent.Invocation
	require.Empty(t, words(c.step(t0, l)))
	for _, e := range c.step(t0, wake(false)) {
		if r, ok := e.(effRunTool); ok {
			run = &r.inv
		}
	}
	require.NotNil(t, run, "the open call runs again")
	require.Equal(t, "c1", run.ToolCallID)
	require.Equal(t, agent.Scope{UserID: "ann", Permissions: []string{"loaded"}}, run.Scope, "for its own requester, rebuilt")
	require.Equal(t, "bob", c.requester.UserID, "the newest message's work is bob's")
}

// TestCoreArmsNoRetryOnceStopped: an answer the Store refuses, whose reply
// comes after a kill stopped the activation, fails the model call of an
// activation that is gone: nothing follows, no retry timer is armed and
// nothing is published. (The refusal went through the model-failure path
// as if the activation were live: a policy that retries the refusal had a
// timer armed after the halt that stopped the others, and subscribers
// told of a retry that never came.)
func TestCoreArmsNoRetryOnceStopped(t *testing.T) {
	retry := RetryPolicy{Retryable: func(error) bool { return true }}.WithDefaults()
	c := newCore(coreConfig{ID: "c", Policy: snapshot.Policy{}.WithDefaults(), Retry: retry,
		NewID: func(time.Time) string { return "call_x" }}, slog.New(slog.DiscardHandler))
	log := []*messages.Event{user("r1")}
	log[0].Seq = 1
	ws, err := snapshot.Rebuild(nil, log)
	require.NoError(t, err)
	steps := []coreStep{
		{&inLoaded{ws: ws, rows: map[string]*messages.ToolCallRecord{}, scope: agent.SystemScope}, nil},
		{wake(false), []string{"reply", "model"}},
		{&inModelDone{turn: 1, msg: &messages.AssistantMessage{}}, []string{"write[" + wAnswer + "]"}},
		{&inStop{cause: ErrAgentStopped, retire: true}, []string{"retire", "halt"}},
		{&inWriteReply{id: 1, err: journal.Invalidf("refused")}, nil},
	}
	for i, st := range steps {
		require.Equal(t, st.want, words(c.step(t0, st.in)), "step %d (%T)", i, st.in)
	}
}

// TestEndRefusedForACommandQueuedBehindIt: an End that waits for the
// turn's last write in flight, then finds a configure or a send that
// arrived after it queued to be written, is refused (journal.ErrInvalid)
// saying so, not that a turn is in progress or a call open: the turn is
// over and no call is open. Nothing is written for the End; the queued
// command goes on.
func TestEndRefusedForACommandQueuedBehindIt(t *testing.T) {
	configure := &inCommand{sender: "configurer", cmd: &Command{Scope: agent.SystemScope, Msg: &messages.AgentConfigure{Settings: map[string]string{"model": "m2"}}}}
	for _, queued := range []*inCommand{configure, send("r2")} {
		t.Run(fmt.Sprintf("%T", queued.cmd.Msg), func(t *testing.T) {
			c := newCore(coreConfig{ID: "c", Policy: snapshot.Policy{}.WithDefaults(), Retry: RetryPolicy{}.WithDefaults()},
				slog.New(slog.DiscardHandler))
			log := []*messages.Event{user("r1")}
			log[0].Seq = 1
			ws, err := snapshot.Rebuild(nil, log)
			require.NoError(t, err)
			c.step(t0, &inLoaded{ws: ws, rows: map[string]*messages.ToolCallRecord{}, scope: agent.SystemScope})
			require.Equal(t, []string{"reply", "model"}, words(c.step(t0, wake(false))))
			require.Equal(t, []string{"write[AssistantMsg]"}, words(c.step(t0, &inModelDone{turn: 1, msg: &messages.AssistantMessage{}})))
			end := &inCommand{sender: "ender", cmd: &Command{Scope: agent.SystemScope, Msg: &messages.EndConversation{}}}
			require.Empty(t, words(c.step(t0, end)))
			require.Empty(t, words(c.step(t0, queued)))
			var endErr error
			var writes int
			for _, e := range c.step(t0, ok(1)) {
				switch e := e.(type) {
				case effReply:
					if e.to == "ender" {
						r, isReply := e.msg.(*messages.AgentReply)
						require.True(t, isReply, "%T", e.msg)
						endErr = journal.ErrorFromProto(r.GetError())
					}
				case effWrite:
					writes++
					require.NotEqual(t, messages.ConversationStatus_CONVERSATION_STATUS_ENDED, e.req.GetStatus(), "the End writes nothing")
				}
			}
			require.ErrorIs(t, endErr, journal.ErrInvalid)
			require.Contains(t, endErr.Error(), "arrived while it waited and is not written yet")
			require.NotContains(t, endErr.Error(), "turn is in progress")
			require.Equal(t, 1, writes, "the queued command is written")
			require.False(t, c.ended())
		})
	}
}
