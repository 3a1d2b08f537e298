package journaltest

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

var agentCases = []suiteCase{
	{name: "AgentAudienceAndHandoffRoundTrip", run: testAgentsRoundTrip},
	{name: "AgentSummariesShareTheirSeqInOneRecord", run: testAgentSummaries},
	{name: "AgentSummariesBadEntriesRefused", run: testAgentSummariesRefused},
}

// testAgentsRoundTrip: the agent and audience of events (multi-agent
// conversations) and handoff events are stored and read back as written,
// by Events and by LoadSince; an event without them reads back without
// them (the default agent's own).
func testAgentsRoundTrip(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	evs := userEvs(1, 3)
	evs[1].Agent = "critic"
	evs[1].Audience = []string{"*"}
	evs[2].Agent = "critic"
	evs[2].Body = &messages.Event_Handoff{Handoff: &messages.Handoff{From: "", To: "critic", Message: "check it", ToolCallId: "call-1"}}
	appendOK(t, s, &messages.AppendRequest{ConversationId: "c", Events: evs, Status: statusIdle})

	got, err := s.Events(ctx, "c", journal.EventQuery{})
	require.NoError(t, err)
	require.Len(t, got, 3)
	for i := range evs {
		require.True(t, proto.Equal(evs[i], got[i]), "event %d: wrote %v, read %v", i+1, evs[i], got[i])
	}
	require.Empty(t, got[0].GetAgent())
	require.Empty(t, got[0].GetAudience())
	_, loaded, err := s.LoadSince(ctx, "c")
	require.NoError(t, err)
	require.Len(t, loaded, 3)
	require.Equal(t, "critic", loaded[2].GetAgent())
	require.Equal(t, "check it", loaded[2].GetHandoff().GetMessage())
}

// agentSummary is a summary of 1..to holding the named agents' entries.
func agentSummary(to uint64, content string, agents ...string) *messages.Summary {
	s := &messages.Summary{FromSeq: 1, ToSeq: to, Content: content, Version: "v1",
		Requests: []*messages.RequestRef{{RequestId: "r1", Seq: 1}}}
	for _, a := range agents {
		s.Agents = append(s.Agents, &messages.Summary{Agent: a, FromSeq: 1, ToSeq: to, Content: content + " of " + a, Version: "v1"})
	}
	return s
}

// testAgentSummaries: the named agents' summaries at a seq are entries of
// the one record kept for that seq (Summary.agents), so the Store keeps one
// summary per ToSeq as before: LatestSummary, SummaryBefore and LoadSince
// read the entries back as written, a later record replaces them whole,
// and a record without entries (a conversation without named agents)
// reads back without them.
func testAgentSummaries(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	appendOK(t, s, &messages.AppendRequest{ConversationId: "c", Events: userEvs(1, 6), Status: statusIdle})
	plain := agentSummary(2, "plain")
	require.NoError(t, s.PutSummary(ctx, "c", plain))
	first := agentSummary(4, "first", "critic", "writer")
	require.NoError(t, s.PutSummary(ctx, "c", first))

	got, err := s.LatestSummary(ctx, "c")
	require.NoError(t, err)
	require.True(t, proto.Equal(first, got), "wrote %v, read %v", first, got)
	sum, evs, err := s.LoadSince(ctx, "c")
	require.NoError(t, err)
	require.True(t, proto.Equal(first, sum))
	require.Len(t, evs, 2)
	before, err := s.SummaryBefore(ctx, "c", 4)
	require.NoError(t, err)
	require.True(t, proto.Equal(plain, before))
	require.Empty(t, before.GetAgents())

	// The same seq again: the record is replaced whole, entries included.
	again := agentSummary(4, "again", "critic")
	again.Owed = []*messages.AgentOwed{{Agent: "", Seq: 3}, {Agent: "critic", Seq: 4}} // kept as written
	require.NoError(t, s.PutSummary(ctx, "c", again))
	got, err = s.LatestSummary(ctx, "c")
	require.NoError(t, err)
	require.True(t, proto.Equal(again, got), "wrote %v, read %v", again, got)
	require.Len(t, got.GetAgents(), 1)
}

// testAgentSummariesRefused: a record whose named agents' entries are
// malformed (the record names an agent, an entry names none or the same
// agent twice, ends at another seq, or nests entries; an agent owed a turn
// at a seq the summary does not cover, named twice, or in an entry) is
// refused with ErrInvalid, and nothing is stored.
func testAgentSummariesRefused(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	appendOK(t, s, &messages.AppendRequest{ConversationId: "c", Events: userEvs(1, 6), Status: statusIdle})
	good := agentSummary(2, "good", "critic")
	require.NoError(t, s.PutSummary(ctx, "c", good))
	bad := map[string]*messages.Summary{
		"record names an agent": func() *messages.Summary { b := agentSummary(4, "b", "critic"); b.Agent = "critic"; return b }(),
		"entry names no agent":  agentSummary(4, "b", ""),
		"agent twice":           agentSummary(4, "b", "critic", "critic"),
		"entry at another seq":  func() *messages.Summary { b := agentSummary(4, "b", "critic"); b.Agents[0].ToSeq = 3; return b }(),
		"nested entries": func() *messages.Summary {
			b := agentSummary(4, "b", "critic")
			b.Agents[0].Agents = []*messages.Summary{{Agent: "x", FromSeq: 1, ToSeq: 4}}
			return b
		}(),
		"owed past the summary's end": func() *messages.Summary {
			b := agentSummary(4, "b", "critic")
			b.Owed = []*messages.AgentOwed{{Agent: "critic", Seq: 5}}
			return b
		}(),
		"owed twice": func() *messages.Summary {
			b := agentSummary(4, "b", "critic")
			b.Owed = []*messages.AgentOwed{{Agent: "critic", Seq: 2}, {Agent: "critic", Seq: 3}}
			return b
		}(),
		"owed in an entry": func() *messages.Summary {
			b := agentSummary(4, "b", "critic")
			b.Agents[0].Owed = []*messages.AgentOwed{{Agent: "critic", Seq: 2}}
			return b
		}(),
	}
	for name, b := range bad {
		requireSentinel(t, s.PutSummary(ctx, "c", b), journal.ErrInvalid, name)
		got, err := s.LatestSummary(ctx, "c")
		require.NoError(t, err)
		require.True(t, proto.Equal(good, got), "%s: the refused summary was stored", name)
	}
}
