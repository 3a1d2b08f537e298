// Package render turns the records of a conversation into readable text:
// one line per event, as the lazarus command prints them, for logs, tools
// and tests. Every piece of user or model text is quoted, so a rendering
// never spans lines.
package render

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/messages"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// ClipRunes is how much of a text, prompt or result (in runes) a rendering
// shows unless full is asked for.
const ClipRunes = 120

// Event renders one event as one line of text: seq, time, type and a
// summary. Every piece of user or model text is quoted, so the line never
// breaks.
func Event(ev *messages.Event, full bool) string {
	return fmt.Sprintf("%6d  %-20s  %-13s  %s", ev.GetSeq(), Stamp(ev.GetTime()), EventType(ev), EventDetail(ev, full))
}

// EventType names the event's body as the design does (user_msg, ...).
func EventType(ev *messages.Event) string {
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
	case *messages.Event_TurnFailed:
		return "turn_failed"
	case *messages.Event_Handoff:
		return "handoff"
	}
	return "unknown"
}

// EventDetail renders what the event says, without its seq, time and
// type: texts and ids quoted when needed, long values clipped unless full.
func EventDetail(ev *messages.Event, full bool) string {
	switch b := ev.GetBody().(type) {
	case *messages.Event_UserMsg:
		if a := ev.GetAuthor(); a != nil {
			return content(b.UserMsg.GetContent(), full) + " from " + Identity(a)
		}
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
				calls = append(calls, fmt.Sprintf("%s(%s)", toolName(tc.GetName(), full), ID(tc.GetId())))
			}
			parts = append(parts, "calls "+strings.Join(calls, " "))
		}
		if len(parts) == 0 {
			return "(empty)"
		}
		return strings.Join(parts, " ")
	case *messages.Event_ToolCall:
		tc := b.ToolCall.GetCall()
		return fmt.Sprintf("%s id=%s %s args=%s", toolName(tc.GetName(), full), ID(tc.GetId()),
			Executor(b.ToolCall.GetExecutor()), jsonText(tc.GetArguments(), full))
	case *messages.Event_ToolResult:
		r := b.ToolResult
		return fmt.Sprintf("%s id=%s -> %s", toolName(r.GetName(), full), ID(r.GetToolCallId()), outcome(r.GetOutcome(), full))
	case *messages.Event_Suspension:
		waits := make([]string, 0, len(b.Suspension.GetPending()))
		for _, p := range b.Suspension.GetPending() {
			waits = append(waits, fmt.Sprintf("%s id=%s %s", ID(p.GetKind()), ID(p.GetToolCallId()), Quote(p.GetPrompt(), full)))
		}
		return "waiting on " + strings.Join(waits, "; ")
	case *messages.Event_Resolution:
		r := b.Resolution
		by := ID(r.GetBy())
		if r.GetResolver() != nil {
			by = Identity(r.GetResolver())
		}
		return fmt.Sprintf("id=%s %s by %s", ID(r.GetToolCallId()), ToolCallStatus(r.GetStatus()), by)
	case *messages.Event_Rewind:
		return fmt.Sprintf("to seq %d %s", b.Rewind.GetToSeq(), Quote(b.Rewind.GetReason(), full))
	case *messages.Event_TurnFailed:
		f := b.TurnFailed
		return fmt.Sprintf("%s after %d attempt(s): %s", ID(f.GetCode()), f.GetAttempts(), Quote(f.GetMessage(), full))
	case *messages.Event_Handoff:
		h := b.Handoff
		return fmt.Sprintf("%s -> %s id=%s %s", agentName(h.GetFrom()), agentName(h.GetTo()), ID(h.GetToolCallId()), Quote(h.GetMessage(), full))
	}
	return "(an event type this build does not know)"
}

// Identity renders who asked or answered: the user id, then the roles in
// brackets if any ("bob[approver,oncall]"); anonymous for an empty user id.
// Each id is rendered as ID renders it, and also quoted when it holds '[',
// ']' or ',' (or is a user id spelled "anonymous"), so that a rendering
// names one identity: a user "bob[x]" is "bob[x]" quoted, not bob with the
// role x, and a role "a,b" is one role.
func Identity(id *messages.Identity) string {
	name := "anonymous"
	if id.GetUserId() != "" {
		name = identityPart(id.GetUserId())
		if name == "anonymous" {
			name = strconv.Quote(name)
		}
	}
	if len(id.GetRoles()) == 0 {
		return name
	}
	roles := make([]string, 0, len(id.GetRoles()))
	for _, r := range id.GetRoles() {
		roles = append(roles, identityPart(r))
	}
	return name + "[" + strings.Join(roles, ",") + "]"
}

// identityPart renders a user id or a role as ID does, quoted also when
// it holds a character Identity uses to list roles.
func identityPart(s string) string {
	out := ID(s)
	if out == s && strings.ContainsAny(s, "[],") {
		return strconv.Quote(s)
	}
	return out
}

// toolName renders the name of a called tool as an ID, clipped unless
// full: a model may call a tool by any name, and the call is recorded as
// made. (Ids are never clipped: a command takes them as shown.)
func toolName(name string, full bool) string {
	if !full {
		name = clip(name)
	}
	return ID(name)
}

// content renders message parts: quoted text, and a bracketed note for
// each image or file.
func content(parts []*messages.ContentPart, full bool) string {
	out := make([]string, 0, len(parts))
	for _, p := range parts {
		switch x := p.GetPart().(type) {
		case *messages.ContentPart_Text:
			out = append(out, Quote(x.Text, full))
		case *messages.ContentPart_Image:
			out = append(out, blob("image", x.Image, full))
		case *messages.ContentPart_File:
			out = append(out, blob("file", x.File, full))
		}
	}
	return strings.Join(out, " ")
}

// blob renders an image or a file: its media type, name and URI (each
// clipped unless full: a data: URI is as long as its data), and the size
// of its data.
func blob(kind string, b *messages.Blob, full bool) string {
	desc := []string{kind}
	for _, s := range []string{b.GetMediaType(), b.GetName(), b.GetUri()} {
		if s == "" {
			continue
		}
		if !full {
			s = clip(s)
		}
		desc = append(desc, ID(s))
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
		return fmt.Sprintf("error(%s): %s", ID(x.Error.GetCode()), Quote(x.Error.GetMessage(), full))
	}
	return "(no outcome)"
}

// jsonText renders a JSON value compacted onto one line (clipped unless
// full); text that is not JSON is quoted.
func jsonText(s string, full bool) string {
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(s)); err != nil || !utf8.Valid(b.Bytes()) {
		return Quote(s, full)
	}
	out := escapeUnprintable(b.String())
	if full {
		return out
	}
	return clip(out)
}

// escapeUnprintable writes each rune of compact JSON that is not printable
// (DEL, C1 controls, line and paragraph separators, bidirectional
// overrides, ...) as a \u escape. JSON allows them raw only inside
// strings, where the escape means the same: the value is unchanged and the
// line shows no control character.
func escapeUnprintable(s string) string {
	if !strings.ContainsFunc(s, unprintable) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if !unprintable(r) {
			b.WriteRune(r)
			continue
		}
		if r1, r2 := utf16.EncodeRune(r); r1 != utf8.RuneError {
			fmt.Fprintf(&b, `\u%04x\u%04x`, r1, r2)
		} else {
			fmt.Fprintf(&b, `\u%04x`, r)
		}
	}
	return b.String()
}

func unprintable(r rune) bool { return r != ' ' && !unicode.IsPrint(r) }

// Quote quotes s in Go syntax (one line, every control character escaped),
// clipped unless full.
func Quote(s string, full bool) string {
	if !full {
		s = clip(s)
	}
	return strconv.Quote(s)
}

// clip cuts s to ClipRunes runes, marking the cut with "...".
func clip(s string) string {
	if utf8.RuneCountInString(s) <= ClipRunes {
		return s
	}
	n := 0
	for i := range s {
		if n == ClipRunes {
			return s[:i] + "..."
		}
		n++
	}
	return s
}

// ID renders an id as is when it is plain (printable, no spaces or
// quotes), else quoted, so that every id stays one visible token.
func ID(id string) string {
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

// Stamp formats a timestamp in UTC to the second, or "-" if unset.
func Stamp(ts *timestamppb.Timestamp) string {
	if ts == nil {
		return "-"
	}
	return ts.AsTime().UTC().Format(time.RFC3339)
}

// ConversationStatus names a conversation status in lower case without
// its prefix ("suspended").
func ConversationStatus(s messages.ConversationStatus) string {
	return enumName(s.String(), "CONVERSATION_STATUS_")
}

// ToolCallStatus names a tool call status in lower case ("pending").
func ToolCallStatus(s messages.ToolCallStatus) string {
	return enumName(s.String(), "TOOL_CALL_STATUS_")
}

// Executor names an executor in lower case ("human").
func Executor(e messages.Executor) string {
	return enumName(e.String(), "EXECUTOR_")
}

func enumName(s, prefix string) string {
	return strings.ToLower(strings.TrimPrefix(s, prefix))
}

// Update renders one update of a subscription as one line: its event (see
// Event), a streamed delta, an error, and the end of a turn when it
// carries one.
func Update(u actors.Update, full bool) string {
	var parts []string
	switch {
	case u.Event != nil:
		parts = append(parts, Event(u.Event, full))
	case u.Delta != "":
		parts = append(parts, "delta "+Quote(u.Delta, full))
	case u.Err != nil:
		parts = append(parts, "error "+Quote(u.Err.Error(), full))
	}
	if u.Restart {
		parts = append(parts, "restart: the deltas so far are void")
	}
	if r := u.Retry; r != nil {
		parts = append(parts, fmt.Sprintf("retry: attempt %d failed, next in %s", r.Attempt, r.Delay))
	}
	if e := u.TurnEnd; e != nil {
		end := "turn " + e.Outcome.String()
		if e.Err != nil && u.Err == nil && u.Event == nil { // an event says it itself
			end += " " + Quote(e.Err.Error(), full)
		}
		parts = append(parts, end)
	}
	if len(parts) == 0 {
		return "(empty update)"
	}
	return strings.Join(parts, "  ")
}

// agentName names an agent of a multi-agent conversation; "" is the
// default agent.
func agentName(name string) string {
	if name == "" {
		return "default"
	}
	return ID(name)
}
