package actors

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/snapshot"
)

// The core's decisions with named agents, case by case (see core_test.go
// for the words; "model@a" is a model call of agent a).

func handoffCall(id, to string) *messages.ToolCall {
	return &messages.ToolCall{Id: id, Name: HandoffToolName, Arguments: `{"agent":"` + to + `","message":"over to you"}`}
}

func agentWords(effs []effect) []string {
	out := words(effs)
	i := 0
	for _, e := range effs {
		switch e := e.(type) {
		case effStartModel:
			for out[i] != "model" {
				i++
			}
			if e.in.Agent != "" {
				out[i] = "model@" + e.in.Agent
			}
		}
	}
	return out
}

func newAgentsCore(t *testing.T, log []*messages.Event) *core {
	t.Helper()
	tools, err := agent.NewRegistry(
		agent.Tool{Name: "lookup", Executor: server, Run: func(context.Context, agent.Invocation) (string, error) { return "", nil }},
		HandoffTool(),
	)
	require.NoError(t, err)
	c := newCore(coreConfig{ID: "c", Tools: tools, Policy: snapshot.Policy{}.WithDefaults(),
		Retry: RetryPolicy{}.WithDefaults(), MaxInvalidToolAnswers: 1,
		NewID:  func(time.Time) string { return "call_x" },
		Agents: map[string]AgentConfig{"a": {Settings: agent.Settings{SystemPrompt: "I am a"}}}},
		slog.New(slog.DiscardHandler))
	for i, ev := range log {
		ev.Seq = uint64(i + 1)
	}
	ws, err := snapshot.Rebuild(nil, log)
	require.NoError(t, err)
	require.Empty(t, words(c.step(t0, &inLoaded{ws: ws, rows: map[string]*messages.ToolCallRecord{}, scope: agent.SystemScope})), "no work before a command")
	return c
}

func TestCoreHandoffLeftOpenIsFinishedByTheRevival(t *testing.T) {
	hc := handoffCall("call_h", "a")
	c := newAgentsCore(t, []*messages.Event{
		user("r1"), answer(hc),
		{Body: &messages.Event_ToolCall{ToolCall: &messages.ToolCallEvent{Call: hc, Executor: server}}},
	})
	effs := c.step(t0, wake(false))
	require.Equal(t, []string{"reply", "write[ToolResult Handoff]+1 resolutions"}, agentWords(effs),
		"the core answers the handoff itself: no tool run, one write")
	w := effs[1].(effWrite).req
	require.Equal(t, "", w.GetEvents()[0].GetAgent(), "the result is the caller's")
	require.Equal(t, "a", w.GetEvents()[1].GetAgent(), "the handoff is the next agent's")
	want := &messages.Handoff{From: "", To: "a", Message: "over to you", ToolCallId: "call_h"}
	require.True(t, proto.Equal(want, w.GetEvents()[1].GetHandoff()), "%v", w.GetEvents()[1].GetHandoff())
	effs = c.step(t0, ok(1))
	require.Equal(t, []string{"model@a"}, agentWords(effs))
	in := effs[0].(effStartModel).in
	require.Equal(t, "I am a", in.Settings.SystemPrompt)
	require.Len(t, in.Context, 1, "agent a sees the handoff only")
	require.Equal(t, "[handoff from agent default] over to you", in.Context[0].GetUserMsg().GetContent()[0].GetText())
	require.Equal(t, []string{HandoffToolName}, []string{in.Tools[0].Name}, "agent a has no tool but the handoff")

	// The model of a answers: the turn is over; nothing more is owed.
	effs = c.step(t0, &inModelDone{turn: 1, msg: agent.Text("done")})
	require.Equal(t, []string{"write[" + wAnswer + "]"}, agentWords(effs))
	require.Equal(t, "a", effs[0].(effWrite).req.GetEvents()[0].GetAgent())
	require.Nil(t, agentWords(c.step(t0, ok(2))))
}

func TestCoreSendToANamedAgent(t *testing.T) {
	c := newAgentsCore(t, []*messages.Event{user("r1"), answer()})
	cmd := send("r2")
	cmd.cmd.Msg.(*messages.AgentSend).To = &messages.AgentAddress{Agent: "a"}
	effs := c.step(t0, cmd)
	require.Equal(t, []string{"write[" + wUser + "]"}, agentWords(effs))
	require.Equal(t, "a", effs[0].(effWrite).req.GetEvents()[0].GetAgent())
	effs = c.step(t0, ok(1))
	require.Equal(t, []string{"reply seq=3", "model@a"}, agentWords(effs))
	require.Len(t, effs[1].(effStartModel).in.Context, 1, "a does not see the default agent's events")
}

func TestCoreHandoffRefused(t *testing.T) {
	for _, to := range []string{"ghost", "default", ""} {
		hc := handoffCall("call_h", to)
		c := newAgentsCore(t, []*messages.Event{
			user("r1"), answer(hc),
			{Body: &messages.Event_ToolCall{ToolCall: &messages.ToolCallEvent{Call: hc, Executor: server}}},
		})
		effs := c.step(t0, wake(false))
		require.Equal(t, []string{"reply", "write[ToolResult]+1 resolutions"}, agentWords(effs), "to %q", to)
		require.NotNil(t, effs[1].(effWrite).req.GetEvents()[0].GetToolResult().GetOutcome().GetError(), "to %q", to)
		require.Equal(t, []string{"model"}, agentWords(c.step(t0, ok(1))), "to %q: the same agent sees the error", to)
	}
}

// TestCoreAgentOwedByAFoldedEvent: a summary folded the default agent's
// message (seq 3) while its answer (seq 4) followed the summary; a rewind to
// the summary's end removed the answer. The summary records that the
// default agent was owed a turn at seq 3 (Summary.owed), so the next
// message, to agent a, gives the turn to the default agent first (its owed
// event is the oldest), as it would without the summary.
func TestCoreAgentOwedByAFoldedEvent(t *testing.T) {
	c := newAgentsCore(t, nil)
	sum := &messages.Summary{FromSeq: 1, ToSeq: 3, Content: "folded", Owed: []*messages.AgentOwed{{Agent: "", Seq: 3}}}
	evs := []*messages.Event{answer(), {Body: &messages.Event_Rewind{Rewind: &messages.Rewind{ToSeq: 3}}}}
	for i, ev := range evs {
		ev.Seq = uint64(4 + i)
	}
	ws, err := snapshot.Rebuild(sum, evs)
	require.NoError(t, err)
	c = newCore(c.cfg, slog.New(slog.DiscardHandler))
	require.Empty(t, words(c.step(t0, &inLoaded{ws: ws, rows: map[string]*messages.ToolCallRecord{}, scope: agent.SystemScope})))

	require.Equal(t, []string{"reply"}, agentWords(c.step(t0, wake(false))), "a rewind owes no turn")
	cmd := send("r2")
	cmd.cmd.Msg.(*messages.AgentSend).To = &messages.AgentAddress{Agent: "a"}
	require.Equal(t, []string{"write[" + wUser + "]"}, agentWords(c.step(t0, cmd)))
	require.Equal(t, []string{"reply seq=6", "model"}, agentWords(c.step(t0, ok(1))),
		"the default agent's folded message is the oldest owed")

	// The plan of the next summary carries what is still owed: the
	// default agent's seq 3 (no event of it follows), and a's message.
	require.Equal(t, []*messages.AgentOwed{{Agent: "", Seq: 3}, {Agent: "a", Seq: 6}}, c.owedUpTo(6))
}

// TestCoreAgentRemovedOwesNoTurn: a runtime without named agents revives a
// log left by one with them. Events of agents no longer configured owe no
// turn (they stay private, and the default agent's model would answer a
// message it does not see); the default agent's own events still do.
func TestCoreAgentRemovedOwesNoTurn(t *testing.T) {
	of := func(a string, evs ...*messages.Event) []*messages.Event {
		for _, ev := range evs {
			ev.Agent = a
		}
		return evs
	}
	lookup := &messages.ToolCall{Id: "call_1", Name: "lookup", Arguments: "{}"}
	called := func() []*messages.Event {
		return of("a", user("r1"), answer(lookup), &messages.Event{Body: &messages.Event_ToolCall{ToolCall: &messages.ToolCallEvent{Call: lookup, Executor: server}}}, result("call_1"))
	}
	hc := handoffCall("call_h", "default")
	handedOff := of("a", user("r1"), answer(hc), &messages.Event{Body: &messages.Event_ToolCall{ToolCall: &messages.ToolCallEvent{Call: hc, Executor: server}}},
		&messages.Event{Body: &messages.Event_ToolResult{ToolResult: &messages.ToolResultEvent{ToolCallId: "call_h", Name: HandoffToolName,
			Outcome: &messages.ToolOutcome{Outcome: &messages.ToolOutcome_Content{Content: `{"handed_off_to":"default"}`}}}}})
	handedOff = append(handedOff, &messages.Event{Body: &messages.Event_Handoff{Handoff: &messages.Handoff{From: "a", To: "", Message: "over to you", ToolCallId: "call_h"}}})
	for _, tc := range []struct {
		name string
		log  []*messages.Event
		want []string
	}{
		{"a message to a removed agent", append([]*messages.Event{user("r1"), answer()}, of("a", user("r2"))...), []string{"reply"}},
		{"a removed agent's call result", called(), []string{"reply"}},
		{"the default agent's message before it", append([]*messages.Event{user("r1")}, of("a", user("r2"))...), []string{"reply", "model"}},
		{"a handoff to the default agent", handedOff, []string{"reply", "model"}},
		{"the default agent's own message", append(called(), user("r2")), []string{"reply", "model"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i, ev := range tc.log {
				ev.Seq = uint64(i + 1)
			}
			ws, err := snapshot.Rebuild(nil, tc.log)
			require.NoError(t, err)
			c := newCore(coreConfig{ID: "c", Policy: snapshot.Policy{}.WithDefaults(), Retry: RetryPolicy{}.WithDefaults()}, slog.New(slog.DiscardHandler))
			require.Empty(t, words(c.step(t0, &inLoaded{ws: ws, rows: map[string]*messages.ToolCallRecord{}, scope: agent.SystemScope})))
			effs := c.step(t0, wake(false))
			require.Equal(t, tc.want, words(effs))
			for _, e := range effs {
				sm, ok := e.(effStartModel)
				if !ok {
					continue
				}
				in := sm.in
				require.NotEmpty(t, in.Context)
				for _, ev := range in.Context {
					require.Empty(t, ev.GetAgent(), "the default agent's view only")
				}
			}
		})
	}
}

// TestResumeScopeWithAgents: a revival owing a named agent's turn loads the
// requester's scope as one owing the default agent's does; the shortcut
// that skips the loader when nothing is owed must not skip it when the
// owed turn follows a handoff, precedes another agent's answer, or is one
// a summary records (Summary.owed).
func TestResumeScopeWithAgents(t *testing.T) {
	loaded := agent.Scope{UserID: "ann", Permissions: []string{"loaded"}}
	loader := func(context.Context, agent.Identity) (agent.Scope, error) { return loaded, nil }
	hc := handoffCall("call_h", "a")
	for _, tc := range []struct {
		name    string
		summary *messages.Summary
		log     []*messages.Event
	}{
		{"a handoff", nil, []*messages.Event{user("r1"), answer(hc),
			{Body: &messages.Event_ToolCall{ToolCall: &messages.ToolCallEvent{Call: hc, Executor: server}}},
			{Body: &messages.Event_ToolResult{ToolResult: &messages.ToolResultEvent{ToolCallId: "call_h", Name: HandoffToolName,
				Outcome: &messages.ToolOutcome{Outcome: &messages.ToolOutcome_Content{Content: `{"handed_off_to":"a"}`}}}}},
			{Agent: "a", Body: &messages.Event_Handoff{Handoff: &messages.Handoff{From: "", To: "a", ToolCallId: "call_h"}}}}},
		{"another agent answered last", nil, []*messages.Event{{Agent: "a", Body: user("r1").Body, Author: user("r1").Author}, user("r2"), answer()}},
		{"owed in the summary", &messages.Summary{FromSeq: 1, ToSeq: 1, Owed: []*messages.AgentOwed{{Agent: "a", Seq: 1}}},
			[]*messages.Event{user("r2"), answer()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i, ev := range tc.log {
				ev.Seq = tc.summary.GetToSeq() + uint64(i+1)
			}
			ws, err := snapshot.Rebuild(tc.summary, tc.log)
			require.NoError(t, err)
			require.Equal(t, loaded, resumeScope(context.Background(), ws, loader, slog.New(slog.DiscardHandler)))
		})
	}
}

// TestCoreOpenCallKeepsTheAgentOfItsOwnEvent: a damaged log holds an open
// call's tool_call event twice, the first agent a's, the second the default
// agent's. The revival owes the call once, by the first event
// (snapshot.WorkingSet.OpenCalls), and its result is agent a's, as that
// event says, not the later duplicate's.
func TestCoreOpenCallKeepsTheAgentOfItsOwnEvent(t *testing.T) {
	lookup := &messages.ToolCall{Id: "call_1", Name: "lookup", Arguments: "{}"}
	ofA := answer(lookup)
	ofA.Agent = "a"
	c := newAgentsCore(t, []*messages.Event{
		user("r1"), ofA,
		{Agent: "a", Body: &messages.Event_ToolCall{ToolCall: &messages.ToolCallEvent{Call: lookup, Executor: server}}},
		{Body: &messages.Event_ToolCall{ToolCall: &messages.ToolCallEvent{Call: lookup, Executor: server}}},
	})
	require.Equal(t, []string{"reply", "tool call_1 as system"}, agentWords(c.step(t0, wake(false))))
	effs := c.step(t0, &inToolDone{id: "call_1", outcome: &messages.ToolOutcome{Outcome: &messages.ToolOutcome_Content{Content: "done"}}})
	require.Equal(t, []string{"write[ToolResult]+1 resolutions"}, agentWords(effs))
	require.Equal(t, "a", effs[0].(effWrite).req.GetEvents()[0].GetAgent(), "the result is the agent's whose event the call is owed by")
}
