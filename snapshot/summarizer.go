package snapshot

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// Summarizer folds events into a summary: an LLM call in production,
// Deterministic in tests and the demo. Implementations must be safe for
// concurrent use.
type Summarizer interface {
	// Summarize folds prev (may be nil) and events (ascending, the rendered
	// span to cover, after prev.ToSeq) into a new summary covering
	// prev.FromSeq (or the first event's seq) .. the last event's seq, with
	// its Version set. Called off the actor's goroutine; it must honour
	// ctx. It must not modify prev or events. Plan.Run calls it and then
	// sets the span the summary really covers.
	Summarize(ctx context.Context, conversationID string, prev *messages.Summary, events []*messages.Event) (*messages.Summary, error)
}

// DeterministicVersion is the Version of Deterministic's summaries.
const DeterministicVersion = "deterministic/1"

// DefaultDeterministicMaxBytes is Deterministic's MaxBytes when zero.
const DefaultDeterministicMaxBytes = 4096

// Deterministic is a Summarizer for tests and the demo; it calls no model.
// Its content is a header line
//
//	deterministic summary of seq <from>..<to>, sha256 <16 hex digits>
//
// followed by one line per folded event, oldest first: the body of prev's
// content (without its header, when prev is a Deterministic summary; all of
// it otherwise), then one line per event:
//
//	[3] user: <text>
//	[4] assistant: <text> [call <name> <arguments>]...
//	[6] tool <name>: <content>            or  tool <name> error (<code>): <message>
//
// with newlines in texts replaced by spaces (other event types give
// "[n] <type>"). The digest is of the full body, so it changes with any
// folded event even when the body is cut. When the content would exceed
// MaxBytes, the oldest lines are dropped (the body then starts with "...").
// The same inputs always give the same content. Created is left unset.
type Deterministic struct {
	// MaxBytes bounds the content (the header line is always kept). 0
	// means DefaultDeterministicMaxBytes; < 0 means no bound.
	MaxBytes int
}

var _ Summarizer = Deterministic{}

// Summarize implements Summarizer. It returns an error wrapping
// journal.ErrInvalid when events is empty, holds a nil event, or is not
// strictly ascending after prev.ToSeq; and ctx.Err() when ctx is done.
func (d Deterministic) Summarize(ctx context.Context, conversationID string, prev *messages.Summary, events []*messages.Event) (*messages.Summary, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(events) == 0 {
		return nil, journal.Invalidf("snapshot: nothing to summarize for %q", conversationID)
	}
	after := prev.GetToSeq()
	for i, ev := range events {
		if ev == nil {
			return nil, journal.Invalidf("snapshot: event %d of the span of %q is nil", i, conversationID)
		}
		if ev.GetSeq() <= after {
			return nil, journal.Invalidf("snapshot: event %d of the span of %q has seq %d, not after %d", i, conversationID, ev.GetSeq(), after)
		}
		after = ev.GetSeq()
	}
	from := events[0].GetSeq()
	if prev != nil {
		from = prev.GetFromSeq()
	}
	to := events[len(events)-1].GetSeq()

	var b strings.Builder
	if prev != nil {
		body := prev.GetContent()
		if prev.GetVersion() == DeterministicVersion {
			if _, rest, ok := strings.Cut(body, "\n"); ok {
				body = rest
			} else {
				body = ""
			}
		}
		if body != "" {
			b.WriteString(body)
			b.WriteByte('\n')
		}
	}
	for _, ev := range events {
		b.WriteString(describe(ev))
		b.WriteByte('\n')
	}
	body := strings.TrimSuffix(b.String(), "\n")
	sum := sha256.Sum256([]byte(body))
	header := fmt.Sprintf("deterministic summary of seq %d..%d, sha256 %s", from, to, hex.EncodeToString(sum[:8]))

	limit := d.MaxBytes
	if limit == 0 {
		limit = DefaultDeterministicMaxBytes
	}
	if room := limit - len(header) - 1; limit > 0 && len(body) > room {
		body = cutFront(body, room)
	}
	content := header
	if body != "" {
		content += "\n" + body
	}
	return &messages.Summary{FromSeq: from, ToSeq: to, Content: content, Version: DeterministicVersion}, nil
}

// cutFront keeps at most room bytes of the end of body: whole lines after a
// "..." line when it can, else a rune-aligned tail.
func cutFront(body string, room int) string {
	const mark = "...\n"
	if room <= len(mark) {
		return ""
	}
	start := len(body) - (room - len(mark))
	if body[start-1] != '\n' {
		if i := strings.IndexByte(body[start:], '\n'); i >= 0 {
			start += i + 1 // drop the partial line
		} else {
			for start < len(body) && !utf8.RuneStart(body[start]) {
				start++
			}
		}
	}
	return mark + body[start:]
}

func oneLine(s string) string { return strings.ReplaceAll(s, "\n", " ") }

func text(parts []*messages.ContentPart) string {
	var b strings.Builder
	for _, p := range parts {
		switch {
		case p.GetImage() != nil:
			b.WriteString("<image>")
		case p.GetFile() != nil:
			b.WriteString("<file>")
		default:
			b.WriteString(p.GetText())
		}
	}
	return oneLine(b.String())
}

func describe(ev *messages.Event) string {
	prefix := fmt.Sprintf("[%d] ", ev.GetSeq())
	switch body := ev.GetBody().(type) {
	case *messages.Event_UserMsg:
		return prefix + "user: " + text(body.UserMsg.GetContent())
	case *messages.Event_AssistantMsg:
		s := prefix + "assistant: " + text(body.AssistantMsg.GetContent())
		for _, c := range body.AssistantMsg.GetToolCalls() {
			s += fmt.Sprintf(" [call %s %s]", c.GetName(), oneLine(c.GetArguments()))
		}
		return s
	case *messages.Event_ToolResult:
		tr := body.ToolResult
		if e := tr.GetOutcome().GetError(); e != nil {
			return fmt.Sprintf("%stool %s error (%s): %s", prefix, tr.GetName(), e.GetCode(), oneLine(e.GetMessage()))
		}
		return fmt.Sprintf("%stool %s: %s", prefix, tr.GetName(), oneLine(tr.GetOutcome().GetContent()))
	case *messages.Event_ToolCall:
		c := body.ToolCall.GetCall()
		return fmt.Sprintf("%scall %s %s", prefix, c.GetName(), oneLine(c.GetArguments()))
	case *messages.Event_Suspension:
		return prefix + "suspension"
	case *messages.Event_Resolution:
		return prefix + "resolution"
	case *messages.Event_Rewind:
		return fmt.Sprintf("%srewind to %d", prefix, body.Rewind.GetToSeq())
	default:
		return prefix + "unknown"
	}
}
