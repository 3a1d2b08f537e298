package snapshot

import "github.com/lazarusrt/lazarus/messages"

// Defaults of Policy's zero fields.
const (
	DefaultMaxEvents  = 200
	DefaultMaxTokens  = 32_000
	DefaultKeepRecent = 20
)

// Policy decides when to summarize. The zero value is the defaults.
//
// The runtime asks it (Due) when a conversation comes to rest: its turn
// is over and nothing is owed, in flight or awaited (no human call open).
// It does not ask between the model calls of one turn: a turn that goes on
// through many server calls sends each model call everything written since
// the last summary, past MaxEvents or MaxTokens, and is summarized once it
// ends.
type Policy struct {
	// MaxEvents: summarize when the rendered events since the last summary
	// are more than this. 0 means DefaultMaxEvents; < 0 never.
	MaxEvents int
	// MaxTokens: summarize when the estimated tokens (EstimateTokens) of
	// the rendered events since the last summary are more than this. 0
	// means DefaultMaxTokens; < 0 never.
	MaxTokens int
	// KeepRecent is how many of the newest events (by seq, rendered or not)
	// a new summary leaves after it, verbatim. 0 means DefaultKeepRecent;
	// < 0 keeps none.
	KeepRecent int
}

// WithDefaults returns p with its zero fields set to the defaults.
func (p Policy) WithDefaults() Policy {
	if p.MaxEvents == 0 {
		p.MaxEvents = DefaultMaxEvents
	}
	if p.MaxTokens == 0 {
		p.MaxTokens = DefaultMaxTokens
	}
	if p.KeepRecent == 0 {
		p.KeepRecent = DefaultKeepRecent
	}
	return p
}

// Due reports whether a summary is due and possible: the rendered events of
// w exceed MaxEvents or their estimated tokens exceed MaxTokens, and w has a
// SafePoint(KeepRecent) to end it at. Zero fields mean their defaults.
// It estimates the tokens only of the events rendered since its last call
// on w (the working set keeps the sum), so calling it after every append
// costs time in the new events, not in the whole working set, while w is
// under both bounds; once over one, it looks for the safe point, which
// walks the head (as SafePoint does). A nil w is never due.
func (p Policy) Due(w *WorkingSet) bool {
	if w == nil {
		return false
	}
	p = p.WithDefaults()
	over := (p.MaxEvents > 0 && len(w.Render()) > p.MaxEvents) ||
		(p.MaxTokens > 0 && w.renderedTokens() > p.MaxTokens)
	return over && w.SafePoint(p.KeepRecent) > 0
}

// Token estimate constants; see EstimateTokens.
const (
	bytesPerToken  = 4
	tokensPerEvent = 4
	tokensPerBlob  = 1024
)

// EstimateTokens estimates the tokens evs cost a model, without a tokenizer:
// about 4 bytes of text per token (rounded up, per event) plus 4 tokens of
// framing per event, and a flat 1024 tokens per image or file part. Text is
// every text part, tool call name and arguments, tool result name, content
// or error message, and a handoff's sender and message (what its receiver's
// model reads, see HandoffMessage); events of other types cost the framing
// only. It is a heuristic for Policy, not a bill.
func EstimateTokens(evs []*messages.Event) int {
	total := 0
	for _, ev := range evs {
		bytes, blobs := 0, 0
		parts := func(ps []*messages.ContentPart) {
			for _, p := range ps {
				if p.GetImage() != nil || p.GetFile() != nil {
					blobs++
				} else {
					bytes += len(p.GetText())
				}
			}
		}
		switch {
		case ev.GetUserMsg() != nil:
			parts(ev.GetUserMsg().GetContent())
		case ev.GetAssistantMsg() != nil:
			parts(ev.GetAssistantMsg().GetContent())
			for _, c := range ev.GetAssistantMsg().GetToolCalls() {
				bytes += len(c.GetName()) + len(c.GetArguments())
			}
		case ev.GetToolCall() != nil:
			c := ev.GetToolCall().GetCall()
			bytes += len(c.GetName()) + len(c.GetArguments())
		case ev.GetToolResult() != nil:
			tr := ev.GetToolResult()
			bytes += len(tr.GetName()) + len(tr.GetOutcome().GetContent()) + len(tr.GetOutcome().GetError().GetMessage())
		case ev.GetHandoff() != nil:
			h := ev.GetHandoff()
			bytes += len(h.GetFrom()) + len(h.GetMessage())
		}
		total += (bytes+bytesPerToken-1)/bytesPerToken + tokensPerEvent + blobs*tokensPerBlob
	}
	return total
}
