package actors

import (
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/snapshot"
)

// summarizingCore is a core that summarizes past 4 events, keeping 1,
// loaded with log; with agents, agent "a" is configured.
func summarizingCore(t *testing.T, agents bool, log []*messages.Event) *core {
	t.Helper()
	cfg := coreConfig{ID: "c", Policy: snapshot.Policy{MaxEvents: 4, KeepRecent: 1}.WithDefaults(), Summarize: true,
		Retry: RetryPolicy{}.WithDefaults(), MaxInvalidToolAnswers: 1,
		NewID: func(time.Time) string { return "call_x" }}
	if agents {
		cfg.Agents = map[string]AgentConfig{"a": {}}
	}
	c := newCore(cfg, slog.New(slog.DiscardHandler))
	for i, ev := range log {
		ev.Seq = uint64(i + 1)
	}
	ws, err := snapshot.Rebuild(nil, log)
	require.NoError(t, err)
	require.Empty(t, words(c.step(t0, &inLoaded{ws: ws, rows: map[string]*messages.ToolCallRecord{}, scope: agent.SystemScope})))
	return c
}

func ofAgent(ev *messages.Event, name string) *messages.Event {
	ev.Agent = name
	return ev
}

// TestCoreSummarizesEachAgentsView: with named agents, a working set past
// the policy is summarized once per agent at one seq, each agent's part of
// its own events only; the summary's record, once written, gives each
// agent's next model call its own summary.
func TestCoreSummarizesEachAgentsView(t *testing.T) {
	c := summarizingCore(t, true, []*messages.Event{
		user("r1"), answer(), ofAgent(user("r2"), "a"), ofAgent(answer(), "a"), user("r3"), answer(),
	})
	effs := c.step(t0, wake(false))
	require.Equal(t, []string{"reply", "summarize"}, words(effs))
	plan := effs[1].(effSummarize).plan
	require.Equal(t, uint64(5), plan.ToSeq)
	require.Equal(t, []uint64{1, 2, 5}, seqsOf(plan.Events))
	require.Len(t, plan.Agents, 1)
	require.Equal(t, "a", plan.Agents[0].Agent)
	require.Equal(t, []uint64{3, 4}, seqsOf(plan.Agents[0].Events))

	sum, err := plan.Run(t.Context(), snapshot.Deterministic{}, "c")
	require.NoError(t, err)
	require.Empty(t, words(c.step(t0, &inSummaryDone{summary: sum})))
	cmd := send("r4")
	cmd.cmd.Msg.(*messages.AgentSend).To = &messages.AgentAddress{Agent: "a"}
	require.Equal(t, []string{"write[" + wUser + "]"}, words(c.step(t0, cmd)))
	effs = c.step(t0, ok(1))
	require.Equal(t, []string{"reply seq=7", "model"}, words(effs))
	in := effs[1].(effStartModel).in
	require.Equal(t, "a", in.Agent)
	require.Equal(t, "a", in.Summary.GetAgent(), "agent a starts from its own summary")
	require.Contains(t, in.Summary.GetContent(), "r2")
	require.NotContains(t, in.Summary.GetContent(), "r1")
	require.Equal(t, []uint64{7}, seqsOf(in.Context))
}

// TestCoreAgentsKeepAnOwedTurnUnsummarized: after a failed turn nothing is
// run, but the failed agent still owes the turn a later message may give
// it; with named agents the core does not fold that message away (which
// would change who gets the next turn). Without agents the same log is not
// summarized either (an explicit Wake runs the failed turn again: see
// TestSummaryKeepsAFailedTurnOwed); once the log no longer ends in the
// failure, it is.
func TestCoreAgentsKeepAnOwedTurnUnsummarized(t *testing.T) {
	log := func() []*messages.Event {
		return []*messages.Event{user("r1"), answer(), user("r2"), answer(), user("r3"), failed()}
	}
	c := summarizingCore(t, true, log())
	require.Equal(t, []string{"reply"}, words(c.step(t0, wake(false))), "no turn, and no summary")
	c = summarizingCore(t, false, log())
	require.Equal(t, []string{"reply"}, words(c.step(t0, wake(false))), "no turn, and no summary")
	require.Equal(t, []string{"write[" + wUser + "]"}, words(c.step(t0, send("r4"))))
	require.Equal(t, []string{"reply seq=7", "model"}, words(c.step(t0, ok(1))))
	require.Equal(t, []string{"write[" + wAnswer + "]"}, words(c.step(t0, &inModelDone{turn: c.turn, msg: answer().GetAssistantMsg()})))
	require.Equal(t, []string{"summarize"}, words(c.step(t0, ok(2))), "the turn answered: summarized")
}

func seqsOf(evs []*messages.Event) []uint64 {
	out := []uint64{}
	for _, ev := range evs {
		out = append(out, ev.GetSeq())
	}
	return out
}

// TestCoreSummaryBelowAnEditIsPassedOver: an edit written while a summary
// is made takes back events the summary covers. When the summary comes
// back, the activation keeps its working set and its turn in flight (the
// edit's); it neither compacts with that summary nor retires, which would
// run the edit's model call a second time on the next activation.
func TestCoreSummaryBelowAnEditIsPassedOver(t *testing.T) {
	c := summarizingCore(t, false, []*messages.Event{user("r1"), answer(), user("r2"), answer(), user("r3"), answer()})
	effs := c.step(t0, wake(false))
	require.Equal(t, []string{"reply", "summarize"}, words(effs))
	plan := effs[1].(effSummarize).plan
	require.Equal(t, uint64(5), plan.ToSeq)

	edit := &inCommand{sender: "s", cmd: &Command{Scope: agent.Scope{UserID: "ann"}, Msg: &messages.AgentRewind{EditSeq: 1, RequestId: "e1",
		Message: &messages.UserMessage{Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: "new"}}}}}}}
	require.Equal(t, []string{"write[Rewind " + wUser + "]"}, words(c.step(t0, edit)))
	require.Equal(t, []string{"reply seq=8", "model"}, words(c.step(t0, ok(1))))

	sum, err := plan.Run(t.Context(), snapshot.Deterministic{}, "c")
	require.NoError(t, err)
	effs = c.step(t0, &inSummaryDone{summary: sum})
	require.NotContains(t, words(effs), "retire")
	require.NotContains(t, words(effs), "fenced")
	require.Nil(t, c.ws.Summary, "the summary stands for events the edit took back")
	require.Equal(t, []uint64{8}, seqsOf(c.ws.Render()), "the head is the edit's message")

	effs = c.step(t0, &inModelDone{turn: c.turn, msg: answer().GetAssistantMsg()})
	require.Equal(t, []string{"write[" + wAnswer + "]"}, words(effs), "the edit's turn ends on this activation")
}

// TestCoreFailedSummaryWaitsForTheLogToGrow: after a summary fails, the
// commands that find the log as it was start no other (each would cost a
// model call with an LLM summarizer, for the same span); the next write
// lets the summary be tried again.
func TestCoreFailedSummaryWaitsForTheLogToGrow(t *testing.T) {
	c := summarizingCore(t, false, []*messages.Event{user("r1"), answer(), user("r2"), answer(), user("r3"), answer()})
	require.Equal(t, []string{"reply", "summarize"}, words(c.step(t0, wake(false))))
	require.Empty(t, words(c.step(t0, &inSummaryDone{err: errors.New("model down")})))
	require.Equal(t, []string{"reply"}, words(c.step(t0, wake(false))), "the same log: no summary")
	require.Equal(t, []string{"reply"}, words(c.step(t0, wake(false))))

	require.Equal(t, []string{"write[" + wUser + "]"}, words(c.step(t0, send("r4"))))
	require.Equal(t, []string{"reply seq=7", "model"}, words(c.step(t0, ok(1))))
	require.Equal(t, []string{"write[" + wAnswer + "]"}, words(c.step(t0, &inModelDone{turn: c.turn, msg: answer().GetAssistantMsg()})))
	require.Equal(t, []string{"summarize"}, words(c.step(t0, ok(2))), "the log grew: tried again")
}
