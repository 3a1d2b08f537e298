package actors

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/snapshot"
)

// TestSummaryKeepsAFailedTurnOwed: a log that ends in turn_failed owes the
// failed turn to an explicit wake (turnOwed). A summary is a derived
// artifact and must not change that decision: the core does not fold the
// failed turn's message away (nothing after it would owe the turn), neither
// in the activation that wrote the failure nor in a later one, so an
// explicit wake still runs the turn again, and a plain one still does not.
func TestSummaryKeepsAFailedTurnOwed(t *testing.T) {
	for _, keep := range []int{1, -1} { // the summary may end at the message, or at the failure
		t.Run(map[int]string{1: "keep one event", -1: "keep none"}[keep], func(t *testing.T) {
			c := newCore(coreConfig{ID: "c", Summarize: true,
				Policy: snapshot.Policy{MaxEvents: 1, KeepRecent: keep}.WithDefaults(),
				Retry:  RetryPolicy{}.WithDefaults(), MaxInvalidToolAnswers: 1}, slog.New(slog.DiscardHandler))
			log := []*messages.Event{user("r1"), answer(), user("r2")}
			for i, ev := range log {
				ev.Seq = uint64(i + 1)
			}
			ws, err := snapshot.Rebuild(nil, log)
			require.NoError(t, err)
			require.Empty(t, words(c.step(t0, &inLoaded{ws: ws, rows: map[string]*messages.ToolCallRecord{}, scope: agent.SystemScope})))
			require.Equal(t, []string{"reply", "model"}, words(c.step(t0, wake(false))))
			require.Equal(t, []string{"write[TurnFailed]"}, words(c.step(t0, &inModelDone{turn: 1, err: agent.ErrRefused})))
			for _, e := range c.step(t0, ok(1)) {
				if s, ok := e.(effSummarize); ok {
					// Were one planned, it lands before the wake.
					sum, err := s.plan.Run(context.Background(), snapshot.Deterministic{}, "c")
					require.NoError(t, err)
					c.step(t0, &inSummaryDone{summary: sum})
				}
			}
			require.Equal(t, []string{"reply"}, words(c.step(t0, wake(false))), "a plain wake runs no failed turn")
			require.Equal(t, []string{"reply", "model"}, words(c.step(t0, wake(true))), "an explicit wake runs the failed turn again")
		})
	}
}

// TestCoreFailedSummaryDueAgainAfterAnEventItNeverSaw: a summary starts
// while the conversation is idle; a message sent meanwhile is written and
// its turn waits at the ModelGate, which it passes as soon as the summary
// leaves it, so its answer may be written before the summary's failure (or
// its failed compaction) reaches the core. Those events are ones the failed
// attempt never saw: the summary is due again at once, not only after yet
// another write.
func TestCoreFailedSummaryDueAgainAfterAnEventItNeverSaw(t *testing.T) {
	for name, done := range map[string]*inSummaryDone{
		"summary failed": {err: errors.New("model down")},
		// A summary the working set refuses: compaction fails.
		"compaction failed": {summary: &messages.Summary{FromSeq: 0, ToSeq: 5}},
	} {
		t.Run(name, func(t *testing.T) {
			c := summarizingCore(t, false, []*messages.Event{user("r1"), answer(), user("r2"), answer(), user("r3"), answer()})
			effs := c.step(t0, wake(false))
			require.Equal(t, []string{"reply", "summarize"}, words(effs))
			require.Equal(t, uint64(5), effs[1].(effSummarize).plan.ToSeq)

			require.Equal(t, []string{"write[" + wUser + "]"}, words(c.step(t0, send("r4"))))
			require.Equal(t, []string{"reply seq=7", "model"}, words(c.step(t0, ok(1))))
			require.Equal(t, []string{"write[" + wAnswer + "]"}, words(c.step(t0, &inModelDone{turn: c.turn, msg: answer().GetAssistantMsg()})))
			require.Empty(t, words(c.step(t0, ok(2))), "a summary is in flight")
			require.Equal(t, uint64(8), c.ws.LastSeq)

			effs = c.step(t0, done)
			require.Equal(t, []string{"summarize"}, words(effs), "events were written after the failed attempt was planned: tried again")
			require.Equal(t, uint64(7), effs[0].(effSummarize).plan.ToSeq)

			require.Empty(t, words(c.step(t0, &inSummaryDone{err: errors.New("model down")})))
			require.Equal(t, []string{"reply"}, words(c.step(t0, wake(false))), "the log this attempt saw: no summary")
		})
	}
}
