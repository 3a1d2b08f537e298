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
