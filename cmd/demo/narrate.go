package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/lazarusrt/lazarus/messages"
)

// record is one line of the --json transcript. Kind says which fields are
// set:
//
//	act       act, title
//	step      act, text                      (narration; not with --quiet)
//	event     act, conversation, seq, event, text, and for tool events
//	          tool, tool_call_id, executor, status, by; process is "child"
//	          for an event the child process reported as acknowledged
//	tool_run  act, tool, tool_call_id, conversation, process, pid
//	check     act, check, ok, detail
//	revival   act, conversation, trigger, ms
//	summary   summary: events, conversations, revivals, checks, failed, elapsed_ms
//	result    ok, reason (when not ok)
type record struct {
	Kind         string   `json:"kind"`
	Act          int      `json:"act,omitempty"`
	Title        string   `json:"title,omitempty"`
	Conversation string   `json:"conversation,omitempty"`
	Seq          uint64   `json:"seq,omitempty"`
	Event        string   `json:"event,omitempty"`
	Tool         string   `json:"tool,omitempty"`
	ToolCallID   string   `json:"tool_call_id,omitempty"`
	Executor     string   `json:"executor,omitempty"`
	Status       string   `json:"status,omitempty"`
	By           string   `json:"by,omitempty"`
	Text         string   `json:"text,omitempty"`
	Process      string   `json:"process,omitempty"`
	PID          int      `json:"pid,omitempty"`
	Check        string   `json:"check,omitempty"`
	OK           *bool    `json:"ok,omitempty"`
	Detail       string   `json:"detail,omitempty"`
	Trigger      string   `json:"trigger,omitempty"`
	Millis       float64  `json:"ms,omitempty"`
	Reason       string   `json:"reason,omitempty"`
	Summary      *summary `json:"summary,omitempty"`
}

// summary closes the transcript.
type summary struct {
	Events        int       `json:"events"`
	Conversations int       `json:"conversations"`
	Revivals      []revival `json:"revivals"`
	Checks        int       `json:"checks"`
	Failed        int       `json:"failed"`
	ElapsedMillis float64   `json:"elapsed_ms"`
}

// revival is one measured revival: from what woke a dead conversation to
// the first event its revived agent appended.
type revival struct {
	Act          int     `json:"act"`
	Conversation string  `json:"conversation"`
	Trigger      string  `json:"trigger"`
	Millis       float64 `json:"ms"`
}

// reporter writes the transcript, for a person (text) or a program
// (--json). It is safe for concurrent use: events arrive from subscription
// goroutines while the acts narrate.
type reporter struct {
	mu     sync.Mutex
	w      io.Writer
	json   bool
	quiet  bool
	act    int
	checks []record
	werr   error // the first write error; later writes are dropped
}

func newReporter(w io.Writer, jsonLines, quiet bool) *reporter {
	return &reporter{w: w, json: jsonLines, quiet: quiet}
}

// emit writes rec as JSON, or text as a line, whichever the mode asks.
// r.mu must be held. An empty text writes nothing in text mode.
func (r *reporter) emit(rec record, text string) {
	if r.werr != nil {
		return
	}
	if r.json {
		b, err := json.Marshal(rec)
		if err != nil {
			r.werr = err
			return
		}
		_, r.werr = r.w.Write(append(b, '\n'))
		return
	}
	if text != "" {
		_, r.werr = io.WriteString(r.w, text+"\n")
	}
}

// header introduces the run (text mode only).
func (r *reporter) header(dir string, temp bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.json || r.quiet {
		return
	}
	where := "kept at the end"
	if temp {
		where = "a new temporary directory, removed at the end unless --keep"
	}
	r.emit(record{}, "Lazarus: the kill-and-revive demo\n"+
		"A scripted support agent runs on the embedded Pebble store in\n    "+dir+"\n"+
		"("+where+").\n"+
		"Each event is printed as it becomes durable: conversation, #seq, type, details.")
}

func (r *reporter) beginAct(n int, title string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.act = n
	if r.quiet && !r.json {
		return
	}
	r.emit(record{Kind: "act", Act: n, Title: title}, fmt.Sprintf("\nAct %d. %s\n", n, title))
}

// say narrates one step.
func (r *reporter) say(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.quiet {
		return
	}
	text := fmt.Sprintf(format, args...)
	r.emit(record{Kind: "step", Act: r.act, Text: text}, text)
}

// event shows one durable event of conversation conv. process is "" for
// events this process saw, "child" for those the child reported.
func (r *reporter) event(conv string, ev *messages.Event, process string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec := eventRecord(conv, ev)
	rec.Act, rec.Process = r.act, process
	if r.quiet && !r.json {
		return
	}
	r.emit(rec, formatEvent(rec))
}

// toolRan shows one execution of a server tool.
func (r *reporter) toolRan(run toolRun) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.quiet && !r.json {
		return
	}
	r.emit(record{Kind: "tool_run", Act: r.act, Tool: run.Tool, ToolCallID: run.ToolCallID, Conversation: run.Conversation, Process: run.Process, PID: run.PID},
		fmt.Sprintf("      (%s runs in process %d, tool call %s)", run.Tool, run.PID, run.ToolCallID))
}

// check records one expectation and reports whether it held.
func (r *reporter) check(name string, ok bool, detail string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec := record{Kind: "check", Act: r.act, Check: name, OK: &ok, Detail: detail}
	r.checks = append(r.checks, rec)
	if r.quiet && !r.json && ok {
		return ok
	}
	mark := "✓"
	if !ok {
		mark = "✗ FAILED:"
	}
	text := fmt.Sprintf("  %s %s", mark, name)
	if detail != "" {
		text += " (" + detail + ")"
	}
	r.emit(rec, text)
	return ok
}

// failedCheck returns the first failed check of act n, if any.
func (r *reporter) failedCheck(n int) (record, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.checks {
		if c.Act == n && !*c.OK {
			return c, true
		}
	}
	return record{}, false
}

func (r *reporter) revived(rv revival) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.emit(record{Kind: "revival", Act: rv.Act, Conversation: rv.Conversation, Trigger: rv.Trigger, Millis: rv.Millis}, "")
}

// counts returns how many checks ran and how many failed.
func (r *reporter) counts() (checks, failed int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.checks {
		if !*c.OK {
			failed++
		}
	}
	return len(r.checks), failed
}

func (r *reporter) summarize(s summary) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.json {
		r.emit(record{Kind: "summary", Summary: &s}, "")
		return
	}
	var times []string
	var total float64
	for _, rv := range s.Revivals {
		times = append(times, fmt.Sprintf("%s: %s", rv.Trigger, millis(rv.Millis)))
		total += rv.Millis
	}
	avg := 0.0
	if len(s.Revivals) > 0 {
		avg = total / float64(len(s.Revivals))
	}
	if r.quiet {
		r.emit(record{}, fmt.Sprintf("demo: %d checks passed; %d events in %d conversations; %d revivals, %s on average; %s",
			s.Checks-s.Failed, s.Events, s.Conversations, len(s.Revivals), millis(avg), seconds(s.ElapsedMillis)))
		return
	}
	r.emit(record{}, fmt.Sprintf("\nSummary\n"+
		"  events written   %d, in %d conversations\n"+
		"  revivals         %d, %s on average (from what woke the agent to its first new event)\n"+
		"                   %s\n"+
		"  checks           %d passed, %d failed\n"+
		"  elapsed          %s",
		s.Events, s.Conversations, len(s.Revivals), millis(avg), strings.Join(times, "\n                   "),
		s.Checks-s.Failed, s.Failed, seconds(s.ElapsedMillis)))
}

// result closes the transcript: ok, or the reason it is not. It returns
// the first error writing the transcript met.
func (r *reporter) result(err error, interrupted bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	ok := err == nil
	rec := record{Kind: "result", OK: &ok}
	text := "\nEvery check held: the agent was killed three times and lost nothing."
	switch {
	case interrupted:
		rec.Reason, text = "interrupted", "\nInterrupted."
	case err != nil:
		rec.Reason = err.Error()
		text = "\nThe demo FAILED: " + err.Error()
	}
	if r.quiet && !r.json {
		text = ""
	}
	r.emit(rec, text)
	return r.werr
}

func millis(ms float64) string { return fmt.Sprintf("%.1f ms", ms) }

func seconds(ms float64) string { return fmt.Sprintf("%.1f s", ms/1000) }

func durationMillis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// eventRecord describes ev in the transcript's terms.
func eventRecord(conv string, ev *messages.Event) record {
	rec := record{Kind: "event", Conversation: conv, Seq: ev.GetSeq()}
	switch b := ev.GetBody().(type) {
	case *messages.Event_UserMsg:
		rec.Event, rec.Text = "user_msg", texts(b.UserMsg.GetContent())
	case *messages.Event_AssistantMsg:
		rec.Event, rec.Text = "assistant_msg", texts(b.AssistantMsg.GetContent())
	case *messages.Event_ToolCall:
		call := b.ToolCall.GetCall()
		rec.Event, rec.Tool, rec.ToolCallID, rec.Text = "tool_call", call.GetName(), call.GetId(), call.GetArguments()
		rec.Executor = enumName(b.ToolCall.GetExecutor().String(), "EXECUTOR_")
	case *messages.Event_ToolResult:
		res := b.ToolResult
		rec.Event, rec.Tool, rec.ToolCallID = "tool_result", res.GetName(), res.GetToolCallId()
		if e := res.GetOutcome().GetError(); e != nil {
			rec.Status, rec.Text = "error", e.GetCode()+": "+e.GetMessage()
		} else {
			rec.Status, rec.Text = "ok", res.GetOutcome().GetContent()
		}
	case *messages.Event_Suspension:
		rec.Event = "suspension"
		var prompts []string
		for _, p := range b.Suspension.GetPending() {
			prompts = append(prompts, p.GetPrompt())
			rec.Tool, rec.ToolCallID = p.GetKind(), p.GetToolCallId()
		}
		rec.Text = strings.Join(prompts, "; ")
	case *messages.Event_Resolution:
		res := b.Resolution
		// Who answered: the resolver's user id the log records; the coarse
		// by ("user", "system") only for a log without one.
		rec.Event, rec.ToolCallID, rec.By = "resolution", res.GetToolCallId(), res.GetBy()
		if u := res.GetResolver().GetUserId(); u != "" {
			rec.By = u
		}
		rec.Status = enumName(res.GetStatus().String(), "TOOL_CALL_STATUS_")
	case *messages.Event_Rewind:
		rec.Event, rec.Text = "rewind", fmt.Sprintf("to #%d: %s", b.Rewind.GetToSeq(), b.Rewind.GetReason())
	case *messages.Event_TurnFailed:
		rec.Event, rec.Text = "turn_failed", b.TurnFailed.GetCode()+": "+b.TurnFailed.GetMessage()
	case *messages.Event_Handoff:
		rec.Event, rec.ToolCallID, rec.Text = "handoff", b.Handoff.GetToolCallId(), b.Handoff.GetTo()+": "+b.Handoff.GetMessage()
	default:
		rec.Event = "unknown"
	}
	return rec
}

// formatEvent is the one-line text form of an event record.
func formatEvent(rec record) string {
	var detail string
	switch rec.Event {
	case "user_msg", "assistant_msg":
		detail = quote(rec.Text)
	case "tool_call":
		detail = fmt.Sprintf("%s %s  [%s, %s]", rec.Tool, rec.Text, rec.Executor, shortID(rec.ToolCallID))
	case "tool_result":
		detail = fmt.Sprintf("%s -> %s  [%s]", rec.Tool, rec.Text, shortID(rec.ToolCallID))
	case "suspension":
		detail = fmt.Sprintf("waiting for a human: %s", rec.Text)
	case "resolution":
		detail = fmt.Sprintf("%s by %s  [%s]", rec.Status, rec.By, shortID(rec.ToolCallID))
	default:
		detail = rec.Text
	}
	from := ""
	if rec.Process == processChild {
		from = "  (acknowledged by the child)"
	}
	return fmt.Sprintf("    %-14s #%-2d %-13s %s%s", rec.Conversation, rec.Seq, rec.Event, detail, from)
}

func texts(parts []*messages.ContentPart) string {
	var out []string
	for _, p := range parts {
		if t := p.GetText(); t != "" {
			out = append(out, t)
		}
	}
	return strings.Join(out, " ")
}

func quote(s string) string {
	if s == "" {
		return "(no text)"
	}
	return "\u201c" + s + "\u201d"
}

// shortID abbreviates a tool call id for the text transcript.
func shortID(id string) string {
	const keep = len("call_") + 8
	if len(id) <= keep {
		return id
	}
	return id[:keep] + "…"
}

func enumName(s, prefix string) string { return strings.ToLower(strings.TrimPrefix(s, prefix)) }
