package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/lazarusrt/lazarus/messages"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// clipRunes is how much of a text, prompt or result one event line shows
// unless --full is given.
const clipRunes = 120

// eventLine renders one event as one line of text: seq, time, type and a
// summary. Every piece of user or model text is quoted, so the line never
// breaks.
func eventLine(ev *messages.Event, full bool) string {
	return fmt.Sprintf("%6d  %-20s  %-13s  %s", ev.GetSeq(), stamp(ev.GetTime()), eventType(ev), eventDetail(ev, full))
}

// eventType names the event's body as the design does (user_msg, ...).
func eventType(ev *messages.Event) string {
	switch ev.GetBody().(type) {
	case *messages.Event_UserMsg:
		return "user_msg"
	case *messages.Event_AssistantMsg:
		return "assistant_msg"
	case *messages.Event_ToolCall:
		return "tool_call"
	case *messages.Event_ToolResult:
		return "tool_result"
	case *messages.Event_Suspension:
		return "suspension"
	case *messages.Event_Resolution:
		return "resolution"
	case *messages.Event_Rewind:
		return "rewind"
	}
	return "unknown"
}

func eventDetail(ev *messages.Event, full bool) string {
	switch b := ev.GetBody().(type) {
	case *messages.Event_UserMsg:
		return content(b.UserMsg.GetContent(), full)
	case *messages.Event_AssistantMsg:
		m := b.AssistantMsg
		var parts []string
		if c := content(m.GetContent(), full); c != "" {
			parts = append(parts, c)
		}
		if len(m.GetToolCalls()) > 0 {
			calls := make([]string, 0, len(m.GetToolCalls()))
			for _, tc := range m.GetToolCalls() {
				calls = append(calls, fmt.Sprintf("%s(%s)", displayID(tc.GetName()), displayID(tc.GetId())))
			}
			parts = append(parts, "calls "+strings.Join(calls, " "))
		}
		if len(parts) == 0 {
			return "(empty)"
		}
		return strings.Join(parts, " ")
	case *messages.Event_ToolCall:
		tc := b.ToolCall.GetCall()
		return fmt.Sprintf("%s id=%s %s args=%s", displayID(tc.GetName()), displayID(tc.GetId()),
			executorName(b.ToolCall.GetExecutor()), jsonText(tc.GetArguments(), full))
	case *messages.Event_ToolResult:
		r := b.ToolResult
		return fmt.Sprintf("%s id=%s -> %s", displayID(r.GetName()), displayID(r.GetToolCallId()), outcome(r.GetOutcome(), full))
	case *messages.Event_Suspension:
		waits := make([]string, 0, len(b.Suspension.GetPending()))
		for _, p := range b.Suspension.GetPending() {
			waits = append(waits, fmt.Sprintf("%s id=%s %s", displayID(p.GetKind()), displayID(p.GetToolCallId()), quote(p.GetPrompt(), full)))
		}
		return "waiting on " + strings.Join(waits, "; ")
	case *messages.Event_Resolution:
		r := b.Resolution
		return fmt.Sprintf("id=%s %s by %s", displayID(r.GetToolCallId()), callStatusName(r.GetStatus()), displayID(r.GetBy()))
	case *messages.Event_Rewind:
		return fmt.Sprintf("to seq %d %s", b.Rewind.GetToSeq(), quote(b.Rewind.GetReason(), full))
	}
	return "(an event type this build does not know)"
}

// content renders message parts: quoted text, and a bracketed note for
// each image or file.
func content(parts []*messages.ContentPart, full bool) string {
	out := make([]string, 0, len(parts))
	for _, p := range parts {
		switch x := p.GetPart().(type) {
		case *messages.ContentPart_Text:
			out = append(out, quote(x.Text, full))
		case *messages.ContentPart_Image:
			out = append(out, blob("image", x.Image))
		case *messages.ContentPart_File:
			out = append(out, blob("file", x.File))
		}
	}
	return strings.Join(out, " ")
}

func blob(kind string, b *messages.Blob) string {
	desc := []string{kind}
	if b.GetMediaType() != "" {
		desc = append(desc, displayID(b.GetMediaType()))
	}
	if b.GetName() != "" {
		desc = append(desc, displayID(b.GetName()))
	}
	if b.GetUri() != "" {
		desc = append(desc, displayID(b.GetUri()))
	}
	if len(b.GetData()) > 0 {
		desc = append(desc, fmt.Sprintf("%d bytes", len(b.GetData())))
	}
	return "[" + strings.Join(desc, " ") + "]"
}

// outcome renders a tool outcome: JSON content, or error(code): message.
func outcome(o *messages.ToolOutcome, full bool) string {
	switch x := o.GetOutcome().(type) {
	case *messages.ToolOutcome_Content:
		return jsonText(x.Content, full)
	case *messages.ToolOutcome_Error:
		return fmt.Sprintf("error(%s): %s", displayID(x.Error.GetCode()), quote(x.Error.GetMessage(), full))
	}
	return "(no outcome)"
}

// jsonText renders a JSON value compacted onto one line (clipped unless
// full); text that is not JSON is quoted.
func jsonText(s string, full bool) string {
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(s)); err != nil || !utf8.Valid(b.Bytes()) {
		return quote(s, full)
	}
	if full {
		return b.String()
	}
	return clip(b.String())
}

// quote quotes s in Go syntax (one line, every control character escaped),
// clipped unless full.
func quote(s string, full bool) string {
	if !full {
		s = clip(s)
	}
	return strconv.Quote(s)
}

// clip cuts s to clipRunes runes, marking the cut with "...".
func clip(s string) string {
	if utf8.RuneCountInString(s) <= clipRunes {
		return s
	}
	n := 0
	for i := range s {
		if n == clipRunes {
			return s[:i] + "..."
		}
		n++
	}
	return s
}

// displayID prints an id as is when it is plain (printable, no spaces or
// quotes), else quoted, so that every id stays one visible token.
func displayID(id string) string {
	if id == "" {
		return `""`
	}
	for _, r := range id {
		if r == utf8.RuneError || r == '"' || r == '\\' || unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return strconv.Quote(id)
		}
	}
	return id
}

// stamp formats a timestamp in UTC to the second, or "-" if unset.
func stamp(ts *timestamppb.Timestamp) string {
	if ts == nil {
		return "-"
	}
	return ts.AsTime().UTC().Format(time.RFC3339)
}

// age formats a non-negative duration rounded to the second ("3h2m1s").
func age(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	return d.Round(time.Second).String()
}

// deadlineText says when a deadline falls relative to now: "in 23h59m",
// "overdue by 5s", or "none".
func deadlineText(ts *timestamppb.Timestamp, now time.Time) string {
	if ts == nil {
		return "none"
	}
	d := ts.AsTime().Sub(now)
	if d < 0 {
		return fmt.Sprintf("%s (overdue by %s)", stamp(ts), age(-d))
	}
	return fmt.Sprintf("%s (in %s)", stamp(ts), age(d))
}

// statusName is a conversation status in lower case without its prefix
// ("suspended").
func statusName(s messages.ConversationStatus) string {
	return enumName(s.String(), "CONVERSATION_STATUS_")
}

func callStatusName(s messages.ToolCallStatus) string {
	return enumName(s.String(), "TOOL_CALL_STATUS_")
}

func executorName(e messages.Executor) string {
	return enumName(e.String(), "EXECUTOR_")
}

func enumName(s, prefix string) string {
	return strings.ToLower(strings.TrimPrefix(s, prefix))
}

// jsonOpts encode records for --json output and for the export format:
// field names as in the .proto files.
var jsonOpts = protojson.MarshalOptions{UseProtoNames: true}

// protoJSON encodes m with jsonOpts, compacted (protojson varies its
// whitespace on purpose; this makes the output stable).
func protoJSON(m proto.Message) (json.RawMessage, error) {
	b, err := jsonOpts.Marshal(m)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// writeJSON writes v as one indented JSON document.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
