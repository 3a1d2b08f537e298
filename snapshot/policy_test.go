package snapshot_test

import (
	"strings"
	"testing"

	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/snapshot"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPolicyWithDefaults(t *testing.T) {
	cases := []struct {
		name string
		in   snapshot.Policy
		want snapshot.Policy
	}{
		{"zero", snapshot.Policy{}, snapshot.Policy{MaxEvents: 200, MaxTokens: 32_000, KeepRecent: 20}},
		{"set fields kept", snapshot.Policy{MaxEvents: 5, MaxTokens: 7, KeepRecent: 1}, snapshot.Policy{MaxEvents: 5, MaxTokens: 7, KeepRecent: 1}},
		{"negative fields kept", snapshot.Policy{MaxEvents: -1, MaxTokens: -1, KeepRecent: -1}, snapshot.Policy{MaxEvents: -1, MaxTokens: -1, KeepRecent: -1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, tc.in.WithDefaults())
		})
	}
}

// chat returns n events alternating user and assistant messages of text.
func chat(n int, text string) []*messages.Event {
	evs := make([]*messages.Event, n)
	for i := range evs {
		if i%2 == 0 {
			evs[i] = user(text)
		} else {
			evs[i] = asst(text)
		}
	}
	return log(1, evs...)
}

func TestPolicyDue(t *testing.T) {
	long := strings.Repeat("x", 400) // 100 tokens + 4 framing per event
	cases := []struct {
		name   string
		policy snapshot.Policy
		events []*messages.Event
		want   bool
	}{
		{"under both limits", snapshot.Policy{MaxEvents: 10, MaxTokens: 1000, KeepRecent: 2}, chat(10, "hi"), false},
		{"too many events", snapshot.Policy{MaxEvents: 10, MaxTokens: 1000, KeepRecent: 2}, chat(11, "hi"), true},
		{"too many tokens", snapshot.Policy{MaxEvents: 10, MaxTokens: 1000, KeepRecent: 2}, chat(10, long), true},
		{"exactly at the token limit", snapshot.Policy{MaxEvents: 10, MaxTokens: 1040, KeepRecent: 2}, chat(10, long), false},
		{"event limit disabled", snapshot.Policy{MaxEvents: -1, MaxTokens: 1000, KeepRecent: 2}, chat(50, "hi"), false},
		{"token limit disabled", snapshot.Policy{MaxEvents: 100, MaxTokens: -1, KeepRecent: 2}, chat(10, long), false},
		{"defaults: 200 events is not over", snapshot.Policy{}, chat(200, "hi"), false},
		{"defaults: 201 events is over", snapshot.Policy{}, chat(201, "hi"), true},
		{"over, but keep covers everything", snapshot.Policy{MaxEvents: 1, KeepRecent: 5}, chat(5, "hi"), false},
		{"over, but an open call from the start", snapshot.Policy{MaxEvents: 1, KeepRecent: -1},
			log(1, asst("", "h"), call("h"), user("a"), user("b")), false},
		{"rewound events do not count", snapshot.Policy{MaxEvents: 3, KeepRecent: -1},
			append(chat(6, "hi"), log(7, rewind(1), user("again"))...), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w, err := snapshot.Rebuild(nil, tc.events)
			require.NoError(t, err)
			assert.Equal(t, tc.want, tc.policy.Due(w))
		})
	}
}

func TestEstimateTokens(t *testing.T) {
	image := &messages.Event{Body: &messages.Event_UserMsg{UserMsg: &messages.UserMessage{Content: []*messages.ContentPart{
		{Part: &messages.ContentPart_Text{Text: "what is this?"}}, // 13 bytes
		{Part: &messages.ContentPart_Image{Image: &messages.Blob{MediaType: "image/png", Data: make([]byte, 1<<20)}}},
	}}}}
	toolErr := &messages.Event{Body: &messages.Event_ToolResult{ToolResult: &messages.ToolResultEvent{
		Name: "abcd", Outcome: &messages.ToolOutcome{Outcome: &messages.ToolOutcome_Error{Error: &messages.ToolError{Message: "1234"}}},
	}}}
	cases := []struct {
		name string
		evs  []*messages.Event
		want int
	}{
		{"none", nil, 0},
		{"empty user message is framing only", []*messages.Event{user("")}, 4},
		{"4 bytes is one token", []*messages.Event{user("abcd")}, 5},
		{"5 bytes round up", []*messages.Event{user("abcde")}, 6},
		{"assistant text and calls", []*messages.Event{asst("abcd", "c")}, 1 + 2 + 4}, // "abcd" + "tool_c{}" (8 bytes) -> 12 bytes
		{"tool result content", []*messages.Event{result("c", `12345678`)}, 4 + 4},    // "tool_c" + 8 -> 14 bytes -> 4
		{"tool result error", []*messages.Event{toolErr}, 2 + 4},
		{"images are flat", []*messages.Event{image}, 4 + 4 + 1024},
		{"other events are framing only", []*messages.Event{suspension("h"), rewind(0), unknown()}, 12},
		{"sums events", []*messages.Event{user("abcd"), user("abcd")}, 10},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, snapshot.EstimateTokens(tc.evs))
		})
	}
}

// TestTokenBudgetCountsHandoffs: a handoff's message is text its receiver's
// model reads (as a user message), so it counts toward the token budget: a
// handoff of 4000 bytes was framing only, and a budget of 100 tokens was
// never due however long the messages handed over.
func TestTokenBudgetCountsHandoffs(t *testing.T) {
	ho := &messages.Event{Agent: "critic", Body: &messages.Event_Handoff{Handoff: &messages.Handoff{
		From: "writer", To: "critic", Message: strings.Repeat("x", 4000)}}}
	assert.Equal(t, (6+4000+3)/4+4, snapshot.EstimateTokens([]*messages.Event{ho}))

	w, err := snapshot.Rebuild(nil, log(1, user("go"), ho, asst("ok")))
	require.NoError(t, err)
	p := snapshot.TokenBudget(100)
	p.KeepRecent = -1
	assert.True(t, p.Due(w), "the handoff's message passes the budget")
}
