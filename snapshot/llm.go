package snapshot

import (
	"context"
	"fmt"
	"strings"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// LLMVersion starts the Version of the summaries LLM writes:
// "llm/1:<model>", the model being the one that wrote it (the assistant
// message's Model). SummaryModel reads it back.
const LLMVersion = "llm/1"

// DefaultSummaryPrompt is LLM's Prompt when empty.
const DefaultSummaryPrompt = "Summarize the conversation below for your own later use: it will replace the " +
	"conversation in your context. Keep every fact, decision, name, number, commitment, open question and " +
	"tool result that may matter later; drop pleasantries. If an earlier summary is given, fold it in. " +
	"Answer with the summary only."

// DefaultLLMMaxInputBytes is LLM's MaxInputBytes when zero.
const DefaultLLMMaxInputBytes = 256 << 10

// MinLLMMaxInputBytes is the smallest positive MaxInputBytes that can send
// any of a span: the cut mark "...\n" and one byte. Every rendered line is
// longer than the mark, so a smaller bound fails every summary, and
// lazarus.Open refuses it.
const MinLLMMaxInputBytes = len(cutMark) + 1

// LLM is a Summarizer that asks a model (any agent.Model: a provider such as
// agent/openai, often the conversation's own model) to write the summary.
// The span to cover is rendered as text, one line per event as Deterministic
// renders them, after Prompt and the previous summary, in one user message
// of a turn without tools; the model's text is the summary's Content. Run
// by the runtime's summary Policy (for a token budget:
// Policy{MaxTokens: n}), it keeps a revival's cost bounded without a
// hand-written Summarizer. The runtime runs a summary in its conversation's
// turn at the model (as a model call: actors.ModelGate), so Model may be the
// conversation's own and is still never called twice at once for one
// conversation; a turn's model call waits while a summary is written, which
// the runtime bounds as a model call (actors.ConversationConfig.ModelTimeout).
type LLM struct {
	// Model writes the summaries. Required: without it every summary
	// fails (ErrInvalid), and lazarus.Open refuses such an LLM.
	Model agent.Model
	// Prompt is what the model is asked. Empty means DefaultSummaryPrompt.
	Prompt string
	// MaxInputBytes bounds the rendered span sent: the oldest lines are
	// dropped first, and the start of the newest if it alone does not
	// fit; a line "..." (counted) marks the cut. 0 means
	// DefaultLLMMaxInputBytes; < 0 no bound. A bound too small to hold
	// the mark and a character of the span fails the summary (ErrInvalid):
	// one below MinLLMMaxInputBytes fails every summary, and lazarus.Open
	// refuses it.
	MaxInputBytes int
}

var _ Summarizer = LLM{}

// Summarize implements Summarizer. Errors: those of Deterministic for a bad
// span (journal.ErrInvalid), the model's error, and an error wrapping
// journal.ErrInvalid when MaxInputBytes leaves no room for the span (the
// model is not asked) or the model answers with no text or with tool calls.
func (l LLM) Summarize(ctx context.Context, conversationID string, prev *messages.Summary, events []*messages.Event) (*messages.Summary, error) {
	if l.Model == nil {
		return nil, journal.Invalidf("snapshot: LLM summarizer has no model")
	}
	limit := l.MaxInputBytes
	if limit == 0 {
		limit = DefaultLLMMaxInputBytes
	}
	if limit > 0 && len(events) > 0 && events[len(events)-1] != nil {
		// Deterministic's bound counts its header line, which is not
		// sent: the span's lines get limit bytes of their own.
		limit += len(appendHeader(nil, 0, events[len(events)-1].GetSeq())) + digestLen + 1
	}
	// Deterministic validates the span and renders it; a previous summary
	// goes in separately, whole.
	span, err := Deterministic{MaxBytes: limit}.Summarize(ctx, conversationID, &messages.Summary{ToSeq: prev.GetToSeq()}, events)
	if err != nil {
		return nil, err
	}
	_, lines, _ := strings.Cut(span.GetContent(), "\n")
	if strings.TrimPrefix(lines, cutMark) == "" {
		// Not even the newest line's end fits: the model would write a
		// summary of nothing, and the span would be folded away unread.
		return nil, journal.Invalidf("snapshot: summary of %q: MaxInputBytes %d leaves no room for the span", conversationID, l.MaxInputBytes)
	}
	prompt := l.Prompt
	if prompt == "" {
		prompt = DefaultSummaryPrompt
	}
	var b strings.Builder
	b.WriteString(prompt)
	if prev.GetContent() != "" {
		b.WriteString("\n\nEarlier summary:\n")
		b.WriteString(prev.GetContent())
	}
	b.WriteString("\n\nConversation:\n")
	b.WriteString(lines)
	last := events[len(events)-1].GetSeq()
	turn := agent.Turn{ConversationID: conversationID, Context: []*messages.Event{{
		Seq:  last,
		Body: &messages.Event_UserMsg{UserMsg: &messages.UserMessage{Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: b.String()}}}}},
	}}}
	msg, err := l.Model.Generate(ctx, turn, nil)
	if err != nil {
		return nil, fmt.Errorf("snapshot: summary of %q: %w", conversationID, err)
	}
	var text strings.Builder
	for _, p := range msg.GetContent() {
		text.WriteString(p.GetText())
	}
	content := strings.TrimSpace(text.String())
	switch {
	case len(msg.GetToolCalls()) > 0:
		return nil, journal.Invalidf("snapshot: summary of %q: the model called a tool", conversationID)
	case content == "":
		return nil, journal.Invalidf("snapshot: summary of %q: the model wrote no text", conversationID)
	}
	from := events[0].GetSeq()
	if prev != nil {
		from = prev.GetFromSeq()
	}
	return &messages.Summary{FromSeq: from, ToSeq: last, Content: content, Version: LLMVersion + ":" + msg.GetModel()}, nil
}

// SummaryModel returns the model that wrote s, if an LLM summarizer did
// (its Version is "llm/1:<model>"), and "" otherwise.
func SummaryModel(s *messages.Summary) string {
	if m, ok := strings.CutPrefix(s.GetVersion(), LLMVersion+":"); ok {
		return m
	}
	return ""
}

// TokenBudget is the summary Policy that summarizes when the estimated
// tokens (EstimateTokens) of the rendered events since the last summary pass
// budget, whatever their number, keeping the default KeepRecent events
// verbatim. With LLM as the Summarizer it keeps what a revival reads and
// what model calls are sent near the budget: summaries are made when the
// conversation comes to rest (see Policy), so a turn's model calls are
// also sent all that the turn has written so far.
// A budget of 0 is DefaultMaxTokens (as Policy.MaxTokens 0 is); a negative
// one never summarizes.
func TokenBudget(budget int) Policy {
	return Policy{MaxEvents: -1, MaxTokens: budget}
}
