package snapshot_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/snapshot"
)

// of sets the agent and audience of ev.
func of(ev *messages.Event, agent string, audience ...string) *messages.Event {
	ev.Agent, ev.Audience = agent, audience
	return ev
}

// seqSummarizer writes the seqs it folds after prev's content.
type seqSummarizer struct{ calls int }

func (s *seqSummarizer) Summarize(_ context.Context, _ string, prev *messages.Summary, evs []*messages.Event) (*messages.Summary, error) {
	s.calls++
	parts := []string{prev.GetContent()}
	for _, ev := range evs {
		parts = append(parts, fmt.Sprint(ev.GetSeq()))
	}
	return &messages.Summary{Content: strings.TrimSpace(strings.Join(parts, " ")), Version: "seqs"}, nil
}

// TestPlanAgentsFoldsEachAgentsOwnView: PlanAgents plans one summary per
// agent at one seq, each of the events that agent sees (its own, those
// shared with it or everyone); the record holds the named agents' entries,
// SummaryFor gives each agent its own, and the next plan starts each agent
// from its own entry (one that saw nothing new is carried without a call).
func TestPlanAgentsFoldsEachAgentsOwnView(t *testing.T) {
	evs := log(1,
		user("d1"), asst("d2"),
		of(user("c3"), "critic"), of(asst("c4"), "critic"),
		of(user("all5"), "", snapshot.Broadcast), asst("d6"),
		of(user("c7"), "critic"), of(asst("c8"), "critic"),
	)
	ws, err := snapshot.Rebuild(nil, evs)
	require.NoError(t, err)
	p, ok := ws.PlanAgents(2, []string{"critic", "writer"})
	require.True(t, ok)
	require.Equal(t, uint64(6), p.ToSeq)
	require.Equal(t, []uint64{1, 2, 5, 6}, seqs(p.Events))
	require.Len(t, p.Agents, 2)
	require.Equal(t, "critic", p.Agents[0].Agent)
	require.Equal(t, []uint64{3, 4, 5}, seqs(p.Agents[0].Events))
	require.Equal(t, "writer", p.Agents[1].Agent)
	require.Equal(t, []uint64{5}, seqs(p.Agents[1].Events), "a broadcast reaches every agent")

	s := &seqSummarizer{}
	sum, err := p.Run(t.Context(), s, "c")
	require.NoError(t, err)
	require.Equal(t, "1 2 5 6", sum.GetContent())
	require.Empty(t, sum.GetAgent())
	require.Len(t, sum.GetAgents(), 2)
	require.Equal(t, "3 4 5", sum.GetAgents()[0].GetContent())
	require.Equal(t, "critic", sum.GetAgents()[0].GetAgent())
	require.Equal(t, uint64(6), sum.GetAgents()[0].GetToSeq())
	require.NoError(t, journal.ValidateSummary("c", sum, 8))
	require.NoError(t, ws.Compact(sum))

	def := ws.SummaryFor("")
	require.Equal(t, "1 2 5 6", def.GetContent())
	require.Empty(t, def.GetAgents(), "the default agent's summary holds no other agent's")
	require.Same(t, def, ws.SummaryFor(""), "cached")
	require.Len(t, ws.Summary.GetAgents(), 2, "the record keeps the entries")
	require.Equal(t, "3 4 5", ws.SummaryFor("critic").GetContent())
	require.Nil(t, ws.SummaryFor("ghost"))
	require.Equal(t, []uint64{7, 8}, seqs(ws.RenderFor("critic")))
	require.Empty(t, ws.RenderFor("writer"))

	// The next summary: the critic folds 7, 8 and 9 onto its own; the
	// writer saw nothing new and is carried as it was, without a call.
	require.NoError(t, ws.Append(log(9, of(user("c9"), "critic"), asst("d10"), asst("d11"))...))
	p, ok = ws.PlanAgents(0, []string{"critic", "writer"})
	require.True(t, ok)
	require.Equal(t, uint64(11), p.ToSeq)
	require.Same(t, def, p.Prev, "the default agent starts from its own summary")
	s.calls = 0
	sum, err = p.Run(t.Context(), s, "c")
	require.NoError(t, err)
	require.Equal(t, 2, s.calls, "the default agent and the critic; not the writer")
	require.Equal(t, "1 2 5 6 10 11", sum.GetContent())
	require.Equal(t, "3 4 5 7 8 9", sum.GetAgents()[0].GetContent())
	require.Equal(t, "5", sum.GetAgents()[1].GetContent())
	require.Equal(t, uint64(11), sum.GetAgents()[1].GetToSeq())
}

// TestPlanWithoutAgentsIsUnchanged: a log without named agents plans as
// before agents: no entries, the summary itself as Prev, every event.
func TestPlanWithoutAgentsIsUnchanged(t *testing.T) {
	prev := summary(1, 2)
	ws, err := snapshot.Rebuild(prev, log(3, user("u"), asst("a"), user("v"), asst("b")))
	require.NoError(t, err)
	require.Same(t, prev, ws.SummaryFor(""))
	p, ok := ws.Plan(1)
	require.True(t, ok)
	require.Same(t, prev, p.Prev)
	require.Empty(t, p.Agents)
	require.Equal(t, []uint64{3, 4, 5}, seqs(p.Events))
	sum, err := p.Run(t.Context(), &seqSummarizer{}, "c")
	require.NoError(t, err)
	require.Empty(t, sum.GetAgents())
}

// TestRebuildRefusesBadAgentEntries: a stored summary whose named agents'
// entries do not end at its seq is corrupt.
func TestRebuildRefusesBadAgentEntries(t *testing.T) {
	s := summary(1, 4)
	s.Agents = []*messages.Summary{{Agent: "critic", FromSeq: 1, ToSeq: 3}}
	_, err := snapshot.Rebuild(s, nil)
	require.ErrorIs(t, err, journal.ErrCorrupt)
	ws, err := snapshot.Rebuild(summary(1, 2), log(3, user("u"), asst("a")))
	require.NoError(t, err)
	s = summary(1, 4)
	s.Agents = []*messages.Summary{{Agent: "", FromSeq: 1, ToSeq: 4}}
	require.ErrorIs(t, ws.Compact(s), journal.ErrInvalid)
}
