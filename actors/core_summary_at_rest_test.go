package actors

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/snapshot"
)

// TestCoreSummarizesOnlyAtRest: the policy is checked when the
// conversation comes to rest, not between the model calls of a turn. A turn
// whose server calls take its rendered events well past the policy makes
// no summary until its last answer is written; then one is planned. (The
// docs of Policy, TokenBudget and Options.Summary say so: a long turn's
// model calls are not bounded by the policy.)
func TestCoreSummarizesOnlyAtRest(t *testing.T) {
	tools, err := agent.NewRegistry(agent.Tool{Name: "lookup", Executor: server,
		Run: func(context.Context, agent.Invocation) (string, error) { return "", nil }})
	require.NoError(t, err)
	n := 0
	c := newCore(coreConfig{ID: "c", Tools: tools, Summarize: true,
		Policy: snapshot.Policy{MaxEvents: 2, KeepRecent: -1}.WithDefaults(),
		Retry:  RetryPolicy{}.WithDefaults(), MaxInvalidToolAnswers: 1,
		NewID: func(time.Time) string { n++; return fmt.Sprintf("call_%d", n) }}, slog.New(slog.DiscardHandler))
	ws, err := snapshot.Rebuild(nil, nil)
	require.NoError(t, err)
	require.Empty(t, words(c.step(t0, &inLoaded{ws: ws, rows: map[string]*messages.ToolCallRecord{}, scope: agent.SystemScope})))

	var all []string
	step := func(in any) []string {
		w := words(c.step(t0, in))
		all = append(all, w...)
		return w
	}
	write := uint64(0)
	step(send("r1"))
	write++
	require.Contains(t, step(ok(write)), "model")
	const rounds = 4
	for i := 1; i <= rounds; i++ {
		require.Equal(t, []string{"write[AssistantMsg ToolCall]"}, step(&inModelDone{turn: c.turn,
			msg: &messages.AssistantMessage{ToolCalls: []*messages.ToolCall{{Name: "lookup", Arguments: "{}"}}}}))
		write++
		require.Equal(t, []string{fmt.Sprintf("tool call_%d as ann", i)}, step(ok(write)))
		step(&inToolDone{id: fmt.Sprintf("call_%d", i), outcome: &messages.ToolOutcome{Outcome: &messages.ToolOutcome_Content{Content: "done"}}})
		write++
		require.Equal(t, []string{"model"}, step(ok(write)))
	}
	require.Greater(t, len(c.ws.Render()), 2*rounds, "the turn's rendered events are past the policy")
	require.False(t, slices.Contains(all, "summarize"), "no summary between the model calls of a turn")

	require.Equal(t, []string{"write[AssistantMsg]"}, words(c.step(t0, &inModelDone{turn: c.turn, msg: answer().GetAssistantMsg()})))
	write++
	require.Contains(t, words(c.step(t0, ok(write))), "summarize", "the turn is over: the summary is planned")
}
