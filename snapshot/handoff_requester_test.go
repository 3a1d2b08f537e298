package snapshot_test

import (
	"context"
	"strings"
	"testing"

	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/snapshot"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func by(ev *messages.Event, user string) *messages.Event {
	ev.Author = &messages.Identity{UserId: user}
	return ev
}

// TestRequesterFollowsTheHead: the requester is the author of the newest
// user message on the head (not one a rewind skipped), else the summary's;
// Plan and Run carry it.
func TestRequesterFollowsTheHead(t *testing.T) {
	ws, err := snapshot.Rebuild(nil, log(1, by(user("a"), "alice"), asst("x"), by(user("b"), "bob"), asst("y"), rewind(2)))
	require.NoError(t, err)
	assert.Equal(t, "alice", ws.Requester().GetUserId(), "bob's message was rewound")
	p, ok := ws.Plan(-1)
	require.True(t, ok)
	assert.Equal(t, uint64(5), p.ToSeq)
	assert.Equal(t, "alice", p.Requester.GetUserId())

	s := summary(1, 2)
	s.Requester = &messages.Identity{UserId: "carol"}
	ws, err = snapshot.Rebuild(s, log(3, asst("z")))
	require.NoError(t, err)
	assert.Equal(t, "carol", ws.Requester().GetUserId())
	p, ok = ws.Plan(-1)
	require.True(t, ok)
	assert.Equal(t, "carol", p.Requester.GetUserId())
	out, err := p.Run(context.Background(), snapshot.Deterministic{}, "c")
	require.NoError(t, err)
	assert.Equal(t, "carol", out.GetRequester().GetUserId())
}

// TestAgentHelpers: VisibleTo, HandoffMessage, HoldsAgents and a handoff
// rendered for its receiver as a user message, the working set's event
// unchanged.
func TestAgentHelpers(t *testing.T) {
	mine := user("hi")
	mine.Agent = "critic"
	shared := asst("all")
	shared.Audience = []string{snapshot.Broadcast}
	assert.True(t, snapshot.VisibleTo(mine, "critic"))
	assert.False(t, snapshot.VisibleTo(mine, ""))
	assert.True(t, snapshot.VisibleTo(shared, "x"))
	assert.True(t, snapshot.VisibleTo(rewind(1), "x"))

	m := snapshot.HandoffMessage(&messages.Handoff{Message: "check it"})
	require.Len(t, m.GetContent(), 1)
	assert.Equal(t, "[handoff from agent default] check it", m.GetContent()[0].GetText())

	ho := &messages.Event{Agent: "critic", Body: &messages.Event_Handoff{Handoff: &messages.Handoff{From: "writer", Message: "go"}}}
	ws, err := snapshot.Rebuild(nil, log(1, user("a"), ho))
	require.NoError(t, err)
	assert.True(t, ws.HoldsAgents())
	r := ws.RenderFor("critic")
	require.Len(t, r, 1)
	assert.Equal(t, "[handoff from agent writer] go", r[0].GetUserMsg().GetContent()[0].GetText())
	assert.NotNil(t, ho.GetHandoff(), "the working set's event is unchanged")
}

// TestDeterministicHandoffLine: a handoff, a rendered event, is written
// with who passed the turn and what it said, not as an unknown event.
func TestDeterministicHandoffLine(t *testing.T) {
	ho := func(from, msg string) *messages.Event {
		return &messages.Event{Agent: "critic", Body: &messages.Event_Handoff{Handoff: &messages.Handoff{From: from, Message: msg}}}
	}
	tf := &messages.Event{Body: &messages.Event_TurnFailed{TurnFailed: &messages.TurnFailed{Code: "x"}}}
	s, err := snapshot.Deterministic{}.Summarize(context.Background(), "c", nil,
		log(1, ho("writer", "check\nthis"), ho("", ""), tf, suspension("a"), rewind(1), unknown()))
	require.NoError(t, err)
	_, body, _ := strings.Cut(s.GetContent(), "\n")
	assert.Equal(t, `[1] handoff from writer: check this
[2] handoff from default: 
[3] turn failed (x)
[4] suspension
[5] rewind to 1
[6] unknown`, body)
}
