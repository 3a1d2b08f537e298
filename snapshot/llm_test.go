package snapshot_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/snapshot"
)

// TestLLMSummarizer: the model is asked once, in one user message holding
// the prompt, the earlier summary and the span's lines; its text is the
// summary, which covers prev.FromSeq..the last event and records the model.
func TestLLMSummarizer(t *testing.T) {
	m := scripted.New(scripted.Options{})
	m.Push("c", &messages.AssistantMessage{Model: "gpt-test", Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: "  The user asked for a refund.  "}}}})
	s := snapshot.LLM{Model: m, Prompt: "Summarize."}
	prev := &messages.Summary{FromSeq: 1, ToSeq: 4, Content: "The user is Alice.", Version: "llm/1:gpt-test"}
	sum, err := s.Summarize(context.Background(), "c", prev, log(5, user("refund please"), asst("which order?")))
	require.NoError(t, err)
	assert.Equal(t, uint64(1), sum.GetFromSeq())
	assert.Equal(t, uint64(6), sum.GetToSeq())
	assert.Equal(t, "The user asked for a refund.", sum.GetContent())
	assert.Equal(t, "llm/1:gpt-test", sum.GetVersion())
	assert.Equal(t, "gpt-test", snapshot.SummaryModel(sum))

	turns := m.Turns("c")
	require.Len(t, turns, 1)
	assert.Empty(t, turns[0].Tools, "no tools are offered")
	require.Len(t, turns[0].Context, 1)
	asked := turns[0].Context[0].GetUserMsg().GetContent()[0].GetText()
	assert.True(t, strings.HasPrefix(asked, "Summarize.\n\nEarlier summary:\nThe user is Alice.\n\nConversation:\n"), asked)
	assert.Contains(t, asked, "[5] user: refund please")
	assert.Contains(t, asked, "[6] assistant: which order?")
}

func TestLLMSummarizerFailures(t *testing.T) {
	boom := errors.New("boom")
	cases := []struct {
		name  string
		reply *messages.AssistantMessage
		err   error // pushed instead of reply
		model bool  // false: no model at all
		evs   []*messages.Event
		want  error
	}{
		{name: "no model", evs: log(1, user("x")), want: journal.ErrInvalid},
		{name: "empty span", model: true, want: journal.ErrInvalid},
		{name: "model error", model: true, err: boom, evs: log(1, user("x")), want: boom},
		{name: "no text", model: true, reply: scripted.Text("   "), evs: log(1, user("x")), want: journal.ErrInvalid},
		{name: "a tool call", model: true, reply: scripted.Reply("s", scripted.Call("t", "{}")), evs: log(1, user("x")), want: journal.ErrInvalid},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var s snapshot.LLM
			if tc.model {
				m := scripted.New(scripted.Options{})
				if tc.err != nil {
					m.PushError("c", tc.err)
				} else if tc.reply != nil {
					m.Push("c", tc.reply)
				}
				s.Model = m
			}
			sum, err := s.Summarize(context.Background(), "c", nil, tc.evs)
			require.ErrorIs(t, err, tc.want)
			assert.Nil(t, sum)
		})
	}
}

// TestLLMSummarizerBoundsItsInput: with MaxInputBytes, the oldest lines of
// the span are dropped from what the model is sent.
func TestLLMSummarizerBoundsItsInput(t *testing.T) {
	m := scripted.New(scripted.Options{})
	evs := log(1, user(strings.Repeat("a", 500)), user("newest"))
	_, err := snapshot.LLM{Model: m, MaxInputBytes: 200}.Summarize(context.Background(), "c", nil, evs)
	require.NoError(t, err)
	asked := m.Turns("c")[0].Context[0].GetUserMsg().GetContent()[0].GetText()
	assert.Contains(t, asked, "[2] user: newest")
	assert.NotContains(t, asked, strings.Repeat("a", 200))
}

func TestTokenBudget(t *testing.T) {
	p := snapshot.TokenBudget(100)
	assert.Equal(t, -1, p.MaxEvents, "the number of events never triggers a summary")
	assert.Equal(t, 100, p.MaxTokens)
	assert.Equal(t, snapshot.DefaultKeepRecent, p.WithDefaults().KeepRecent)
	assert.Empty(t, snapshot.SummaryModel(&messages.Summary{Version: snapshot.DeterministicVersion}))

	// 0 is the default budget, a negative one never summarizes, however
	// many events: 400 events of about 100 tokens each.
	assert.Equal(t, snapshot.DefaultMaxTokens, snapshot.TokenBudget(0).WithDefaults().MaxTokens)
	var evs []*messages.Event
	for range 400 {
		evs = append(evs, user(strings.Repeat("word ", 80)))
	}
	w, err := snapshot.Rebuild(nil, log(1, evs...))
	require.NoError(t, err)
	assert.True(t, snapshot.TokenBudget(0).Due(w), "past DefaultMaxTokens")
	assert.True(t, snapshot.TokenBudget(1000).Due(w))
	assert.False(t, snapshot.TokenBudget(-1).Due(w), "a negative budget never summarizes")
	assert.False(t, snapshot.TokenBudget(1_000_000).Due(w), "under the budget: the number of events does not count")
}

var _ agent.Model = (*scripted.Model)(nil)

// TestLLMSummarizerInputBoundIsTheSpans: MaxInputBytes is the room of the
// span's lines, not of them and the header line Deterministic renders
// before them (which is not sent): a bound that holds the newest line
// sends it, and no more than the bound. A bound that holds none of the span
// fails the summary, without asking the model to summarize nothing (it
// was asked, and the span was folded away unread).
func TestLLMSummarizerInputBoundIsTheSpans(t *testing.T) {
	evs := log(41, user(strings.Repeat("a", 100)), user("newest"))
	for _, limit := range []int{30, 60, 80} {
		m := scripted.New(scripted.Options{})
		_, err := snapshot.LLM{Model: m, Prompt: "P", MaxInputBytes: limit}.Summarize(context.Background(), "c", nil, evs)
		require.NoError(t, err)
		asked := m.Turns("c")[0].Context[0].GetUserMsg().GetContent()[0].GetText()
		_, span, ok := strings.Cut(asked, "Conversation:\n")
		require.True(t, ok, asked)
		assert.Equal(t, "...\n[42] user: newest", span, "limit %d", limit)
	}
	m := scripted.New(scripted.Options{})
	_, err := snapshot.LLM{Model: m, MaxInputBytes: 20}.Summarize(context.Background(), "c", nil, evs)
	require.NoError(t, err)
	_, span, _ := strings.Cut(m.Turns("c")[0].Context[0].GetUserMsg().GetContent()[0].GetText(), "Conversation:\n")
	assert.Equal(t, "...\n42] user: newest", span, "the end of the newest line, within the bound")
	assert.LessOrEqual(t, len(span), 20)

	for _, limit := range []int{1, 4, 5} {
		m := scripted.New(scripted.Options{})
		sum, err := snapshot.LLM{Model: m, MaxInputBytes: limit}.Summarize(context.Background(), "c", nil, log(1, user("é")))
		require.ErrorIs(t, err, journal.ErrInvalid, "limit %d", limit)
		assert.Nil(t, sum)
		assert.Zero(t, m.Calls("c"), "the model is not asked")
	}
	// MinLLMMaxInputBytes is the least bound that sends anything: the mark
	// and one byte of the shortest line's end; one less sends nothing.
	m = scripted.New(scripted.Options{})
	_, err = snapshot.LLM{Model: m, MaxInputBytes: snapshot.MinLLMMaxInputBytes}.Summarize(context.Background(), "c", nil, log(1, user("")))
	require.NoError(t, err)
	_, span, _ = strings.Cut(m.Turns("c")[0].Context[0].GetUserMsg().GetContent()[0].GetText(), "Conversation:\n")
	assert.Equal(t, "...\n ", span)
	_, err = snapshot.LLM{Model: m, MaxInputBytes: snapshot.MinLLMMaxInputBytes - 1}.Summarize(context.Background(), "c", nil, log(1, user("")))
	require.ErrorIs(t, err, journal.ErrInvalid)
}
