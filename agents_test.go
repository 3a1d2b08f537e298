package lazarus_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/snapshot"
)

// agentsRuntime opens a runtime whose conversations hold the default agent
// (model def, every tool) and the agent "critic" (model crit, its own
// system prompt, the tool "lookup" only).
func agentsRuntime(t *testing.T, def, crit *scripted.Model) *lazarus.Runtime {
	t.Helper()
	lookup := agent.Tool{Name: "lookup", Executor: messages.Executor_EXECUTOR_SERVER,
		Run: func(context.Context, agent.Invocation) (string, error) { return `{"found":true}`, nil }}
	secret := agent.Tool{Name: "secret", Executor: messages.Executor_EXECUTOR_SERVER,
		Run: func(context.Context, agent.Invocation) (string, error) { return `{"secret":1}`, nil }}
	rt, err := lazarus.Open(lazarus.Options{
		Model: def, Tools: []agent.Tool{lookup, secret},
		Settings: agent.Settings{SystemPrompt: "you are the assistant"},
		Agents:   []lazarus.Agent{{Name: "critic", Model: crit, Settings: agent.Settings{SystemPrompt: "you are the critic"}, Tools: []string{"lookup"}}},
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = rt.Close() })
	return rt
}

func TestSendToANamedAgentAndPerAgentViews(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	def, crit := scripted.New(scripted.Options{}), scripted.New(scripted.Options{})
	def.Push("c", scripted.Text("hi"), scripted.Text("noted"))
	crit.Push("c", scripted.Text("looks fine"), scripted.Text("me too"))
	rt := agentsRuntime(t, def, crit)
	u := agent.Scope{UserID: "u"}

	end, err := rt.SendAndWait(ctx, "c", "hello", u) // 1, 2: the default agent's
	require.NoError(t, err)
	require.Equal(t, "hi", end.Text)
	end, err = rt.SendMessageAndWait(ctx, "c", textMsg("review"), lazarus.SendOptions{Agent: "critic"}, u) // 3, 4
	require.NoError(t, err)
	require.Equal(t, "looks fine", end.Text)
	end, err = rt.SendMessageAndWait(ctx, "c", textMsg("all hear this"), lazarus.SendOptions{Broadcast: true}, u) // 5, 6
	require.NoError(t, err)
	require.Equal(t, "noted", end.Text)
	end, err = rt.SendMessageAndWait(ctx, "c", textMsg("and you?"), lazarus.SendOptions{Agent: "critic"}, u) // 7, 8
	require.NoError(t, err)
	require.Equal(t, "me too", end.Text)

	ct := crit.Turns("c")
	require.Len(t, ct, 2)
	require.Equal(t, "critic", ct[0].Agent)
	require.Equal(t, "you are the critic", ct[0].Settings.SystemPrompt)
	require.Equal(t, []string{"handoff", "lookup"}, specNames(ct[0].Tools), "the critic's own tools and the handoff")
	require.Equal(t, []string{"u:review"}, texts(ct[0].Context), "the critic does not see the default agent's events")
	require.Equal(t, []string{"u:review", "a:looks fine", "u:all hear this", "u:and you?"}, texts(ct[1].Context))
	dt := def.Turns("c")
	require.Len(t, dt, 2)
	require.Equal(t, "", dt[1].Agent)
	require.Equal(t, "you are the assistant", dt[1].Settings.SystemPrompt)
	require.Equal(t, []string{"u:hello", "a:hi", "u:all hear this"}, texts(dt[1].Context), "nor the default agent the critic's")
	require.Equal(t, []string{"handoff", "lookup", "secret"}, specNames(dt[1].Tools))

	evs, err := rt.History(ctx, "c", 0, 0)
	require.NoError(t, err)
	var owners []string
	for _, ev := range evs {
		owners = append(owners, ev.GetAgent())
	}
	require.Equal(t, []string{"", "", "critic", "critic", "", "", "critic", "critic"}, owners)
	require.Equal(t, []string{"*"}, evs[4].GetAudience(), "a broadcast is shared with every agent")

	view, err := rt.HistoryView(ctx, "c", lazarus.HistoryOptions{Agent: lazarus.ViewOf("critic")})
	require.NoError(t, err)
	var seqs []uint64
	for _, e := range view {
		seqs = append(seqs, e.Event.GetSeq())
	}
	require.Equal(t, []uint64{3, 4, 5, 7, 8}, seqs)

	_, err = rt.SendMessage(ctx, "c", textMsg("anyone?"), lazarus.SendOptions{Agent: "nobody"}, u)
	require.ErrorIs(t, err, lazarus.ErrUnknownAgent)
	after, err := rt.History(ctx, "c", 0, 0)
	require.NoError(t, err)
	require.Len(t, after, len(evs), "nothing is written for an unknown agent")
}

func specNames(specs []agent.ToolSpec) []string {
	var out []string
	for _, s := range specs {
		out = append(out, s.Name)
	}
	return out
}

func TestHandoffPassesTheTurn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	def, crit := scripted.New(scripted.Options{}), scripted.New(scripted.Options{})
	def.Push("c",
		scripted.Reply("to someone", scripted.Call("handoff", `{"agent":"nobody"}`)),
		scripted.Reply("passing", scripted.Call("handoff", `{"agent":"critic","message":"check the draft"}`)),
		scripted.Text("thanks"))
	crit.Push("c",
		scripted.Reply("let me try", scripted.Call("secret", `{}`)),
		scripted.Reply("done", scripted.Call("handoff", `{"agent":"default","message":"it is fine"}`)))
	rt := agentsRuntime(t, def, crit)

	end, err := rt.SendAndWait(ctx, "c", "write a draft", agent.Scope{UserID: "u"})
	require.NoError(t, err)
	require.Equal(t, "thanks", end.Text, "the turn came back to the default agent")

	evs, err := rt.History(ctx, "c", 0, 0)
	require.NoError(t, err)
	var got []string
	for _, ev := range evs {
		got = append(got, ev.GetAgent()+":"+kind(ev))
	}
	require.Equal(t, []string{
		":user_msg", ":assistant_msg", ":tool_call", ":tool_result:invalid", // an unknown agent: the model sees the error
		":assistant_msg", ":tool_call", ":tool_result:ok", "critic:handoff",
		"critic:assistant_msg", "critic:tool_call", "critic:tool_result:invalid", // not the critic's tool
		"critic:assistant_msg", "critic:tool_call", "critic:tool_result:ok", ":handoff",
		":assistant_msg",
	}, got)
	h := evs[7].GetHandoff()
	require.Equal(t, "", h.GetFrom())
	require.Equal(t, "critic", h.GetTo())
	require.Equal(t, "check the draft", h.GetMessage())
	require.Equal(t, evs[5].GetToolCall().GetCall().GetId(), h.GetToolCallId())

	ct := crit.Turns("c")
	require.Len(t, ct, 2)
	require.Equal(t, []string{"u:[handoff from agent default] check the draft"}, texts(ct[0].Context),
		"the critic sees the handoff as a user message, and nothing private of the default agent")
	dt := def.Turns("c")
	require.Len(t, dt, 3)
	last := texts(dt[2].Context)
	require.Equal(t, "u:[handoff from agent critic] it is fine", last[len(last)-1])
	for _, line := range last {
		require.NotContains(t, line, "let me try", "the critic's answers stay the critic's")
	}
}

// kind names an event's type, and a tool result's outcome.
func kind(ev *messages.Event) string {
	switch b := ev.GetBody().(type) {
	case *messages.Event_UserMsg:
		return "user_msg"
	case *messages.Event_AssistantMsg:
		return "assistant_msg"
	case *messages.Event_ToolCall:
		return "tool_call"
	case *messages.Event_ToolResult:
		if e := b.ToolResult.GetOutcome().GetError(); e != nil {
			return "tool_result:" + e.GetCode()
		}
		return "tool_result:ok"
	case *messages.Event_Handoff:
		return "handoff"
	}
	return "other"
}

func TestAgentsOptionsAreValidated(t *testing.T) {
	m := scripted.New(scripted.Options{})
	for name, agents := range map[string][]lazarus.Agent{
		"empty name":    {{Name: ""}},
		"default name":  {{Name: "default"}},
		"bad character": {{Name: "a b"}},
		"twice":         {{Name: "a"}, {Name: "a"}},
		"unknown tool":  {{Name: "a", Tools: []string{"nope"}}},
		"bad settings":  {{Name: "a", Settings: agent.Settings{MaxTokens: -1}}},
	} {
		_, err := lazarus.Open(lazarus.Options{Model: m, Agents: agents})
		require.ErrorIs(t, err, journal.ErrInvalid, name)
	}
	clash := agent.Tool{Name: "handoff", Executor: messages.Executor_EXECUTOR_HUMAN}
	_, err := lazarus.Open(lazarus.Options{Model: m, Tools: []agent.Tool{clash}, Agents: []lazarus.Agent{{Name: "a"}}})
	require.Error(t, err, "a tool may not take the handoff tool's name")

	rt, err := lazarus.Open(lazarus.Options{Model: m, Tools: []agent.Tool{clash}})
	require.NoError(t, err, "without agents, the name is free: nothing changes for existing users")
	require.NoError(t, rt.Close())
}

func TestSubscribeWithAnAgentView(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	def, crit := scripted.New(scripted.Options{}), scripted.New(scripted.Options{})
	def.Push("c", scripted.Text("hi"))
	crit.Push("c", scripted.Text("looks fine"))
	rt := agentsRuntime(t, def, crit)
	u := agent.Scope{UserID: "u"}
	ch, err := rt.SubscribeWith(ctx, "c", 0, lazarus.SubscribeOptions{Agent: lazarus.ViewOf("critic")})
	require.NoError(t, err)
	_, err = rt.SendAndWait(ctx, "c", "hello", u)
	require.NoError(t, err)
	_, err = rt.SendMessageAndWait(ctx, "c", textMsg("review"), lazarus.SendOptions{Agent: "critic"}, u)
	require.NoError(t, err)
	var seqs []uint64
	for u := range ch {
		if u.Delta != "" {
			require.Equal(t, "critic", u.Agent, "only the critic's deltas")
		}
		if u.Event == nil {
			continue
		}
		require.Equal(t, "critic", u.Event.GetAgent())
		seqs = append(seqs, u.Event.GetSeq())
		if u.Event.GetSeq() == 4 {
			break
		}
	}
	require.Equal(t, []uint64{3, 4}, seqs, "the default agent's events are not in the critic's stream")
}

func TestAgentsRemovedFromOptionsKeepTheirEventsPrivate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	store := memjournal.New(memjournal.Options{})
	crit := scripted.New(scripted.Options{})
	crit.Push("c", scripted.Text("private critique"))
	rt, err := lazarus.Open(lazarus.Options{Store: store, Model: scripted.New(scripted.Options{}),
		Agents: []lazarus.Agent{{Name: "critic", Model: crit}}})
	require.NoError(t, err)
	_, err = rt.SendMessageAndWait(ctx, "c", textMsg("review"), lazarus.SendOptions{Agent: "critic"}, agent.Scope{UserID: "u"})
	require.NoError(t, err)
	require.NoError(t, rt.Close())

	def := scripted.New(scripted.Options{})
	def.Push("c", scripted.Text("hello"))
	rt, err = lazarus.Open(lazarus.Options{Store: store, Model: def})
	require.NoError(t, err)
	defer func() { _ = rt.Close() }()
	end, err := rt.SendAndWait(ctx, "c", "hi", agent.Scope{UserID: "u"})
	require.NoError(t, err)
	require.Equal(t, "hello", end.Text)
	turns := def.Turns("c")
	require.Len(t, turns, 1)
	require.Equal(t, []string{"u:hi"}, texts(turns[0].Context), "without the agent configured, its events stay its own")
	_, err = rt.SendMessage(ctx, "c", textMsg("still there?"), lazarus.SendOptions{Agent: "critic"}, agent.Scope{UserID: "u"})
	require.ErrorIs(t, err, lazarus.ErrUnknownAgent)
}

func TestEditOfANamedAgentsMessageStaysItsOwn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	def, crit := scripted.New(scripted.Options{}), scripted.New(scripted.Options{})
	crit.Push("c", scripted.Text("first"), scripted.Text("second"))
	rt := agentsRuntime(t, def, crit)
	u := agent.Scope{UserID: "u"}
	_, err := rt.SendMessageAndWait(ctx, "c", textMsg("review v1"), lazarus.SendOptions{Agent: "critic", Broadcast: true}, u) // 1, 2
	require.NoError(t, err)
	seq, err := rt.Edit(ctx, "c", 1, "review v2", u) // 3 rewind, 4 user_msg
	require.NoError(t, err)
	require.Equal(t, uint64(4), seq)
	require.Eventually(t, func() bool { return crit.Calls("c") == 2 }, 10*time.Second, time.Millisecond)
	evs, err := rt.History(ctx, "c", 0, 0)
	require.NoError(t, err)
	require.Equal(t, "critic", evs[3].GetAgent(), "the edit is addressed as the message it replaces")
	require.Equal(t, []string{"*"}, evs[3].GetAudience())
	require.Equal(t, []string{"u:review v2"}, texts(crit.Turns("c")[1].Context))
	require.Zero(t, def.Calls("c"), "the default agent owes nothing")
}

// TestBroadcastWithoutAgentsChangesNothing: without Options.Agents a
// broadcast is a plain message (no audience), so the conversation is
// summarized as any other (an audience held its summaries back for good).
func TestBroadcastWithoutAgentsChangesNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	mem := memjournal.New(memjournal.Options{})
	rt, err := lazarus.Open(lazarus.Options{Store: mem, Model: scripted.New(scripted.Options{}),
		Summarizer: snapshot.Deterministic{}, Summary: snapshot.Policy{MaxEvents: 4, MaxTokens: -1, KeepRecent: 1}})
	require.NoError(t, err)
	defer rt.Close()
	u := agent.Scope{UserID: "u"}
	for _, text := range []string{"first", "second", "third", "fourth"} {
		_, err := rt.SendMessageAndWait(ctx, "c", textMsg(text), lazarus.SendOptions{Broadcast: true}, u)
		require.NoError(t, err)
	}
	evs, err := rt.History(ctx, "c", 0, 0)
	require.NoError(t, err)
	require.Empty(t, evs[0].GetAudience())
	require.Eventually(t, func() bool {
		s, err := mem.LatestSummary(ctx, "c")
		return err == nil && s.GetToSeq() > 0
	}, 10*time.Second, 5*time.Millisecond, "a summary is written, as without Broadcast")
}

// TestEditBelowASummaryOfANamedAgentsMessageStaysItsOwn: an edit of a
// message a summary folded away is addressed as the message it replaces,
// as one after the summary is.
func TestEditBelowASummaryOfANamedAgentsMessageStaysItsOwn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	def, crit := scripted.New(scripted.Options{}), scripted.New(scripted.Options{})
	crit.Push("c", scripted.Text("one"), scripted.Text("two"), scripted.Text("three"), scripted.Text("edited"))
	mem := memjournal.New(memjournal.Options{})
	rt, err := lazarus.Open(lazarus.Options{Store: mem, Model: def,
		Agents:     []lazarus.Agent{{Name: "critic", Model: crit}},
		Summarizer: snapshot.Deterministic{}, Summary: snapshot.Policy{MaxEvents: 3, MaxTokens: -1, KeepRecent: 1}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = rt.Close() })
	u := agent.Scope{UserID: "u"}
	for _, text := range []string{"first", "second", "third"} { // seqs 1-6
		_, err := rt.SendMessageAndWait(ctx, "c", textMsg(text), lazarus.SendOptions{Agent: "critic", Broadcast: true}, u)
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		s, err := mem.LatestSummary(ctx, "c")
		return err == nil && s.GetToSeq() >= 3
	}, 10*time.Second, 5*time.Millisecond, "a summary covers seq 1")

	seq, err := rt.Edit(ctx, "c", 1, "premier", u) // 7 rewind, 8 user_msg
	require.NoError(t, err)
	require.Equal(t, uint64(8), seq)
	require.Eventually(t, func() bool { return crit.Calls("c") == 4 }, 10*time.Second, time.Millisecond, "the critic answers the edit")
	evs, err := rt.History(ctx, "c", 0, 0)
	require.NoError(t, err)
	require.Equal(t, "critic", evs[seq-1].GetAgent(), "the edit is addressed as the message it replaces")
	require.Equal(t, []string{"*"}, evs[seq-1].GetAudience())
	require.Equal(t, []string{"u:premier"}, texts(crit.Turns("c")[3].Context))
	require.Zero(t, def.Calls("c"), "the default agent owes nothing")
}

func TestForkAtAHandoffRunsTheNextAgentsTurn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	def, crit := scripted.New(scripted.Options{}), scripted.New(scripted.Options{})
	def.Push("c", scripted.Reply("passing", scripted.Call("handoff", `{"agent":"critic","message":"check the draft"}`)))
	crit.Push("c", scripted.Text("looks fine"))
	crit.Push("f", scripted.Text("looks fine in the fork"))
	rt := agentsRuntime(t, def, crit)
	u := agent.Scope{UserID: "u"}

	end, err := rt.SendAndWait(ctx, "c", "write a draft", u) // 1-6
	require.NoError(t, err)
	require.Equal(t, "looks fine", end.Text)
	evs, err := rt.History(ctx, "c", 0, 0)
	require.NoError(t, err)
	require.Len(t, evs, 6)
	require.NotNil(t, evs[4].GetHandoff(), "seq 5 is the handoff to the critic")

	// The history at seq 5 ends with the handoff: the critic owes a turn,
	// as the conversation's core decides, so the fork runs it.
	require.NoError(t, rt.Fork(ctx, "c", 5, "f"))
	requireCriticAnswers(t, ctx, rt, "f", 6, "looks fine in the fork")
}

// requireCriticAnswers waits for conversation id's history to hold n
// events, the last the critic's answer text.
func requireCriticAnswers(t *testing.T, ctx context.Context, rt *lazarus.Runtime, id string, n int, text string) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		evs, err := rt.History(ctx, id, 0, 0)
		require.NoError(c, err)
		assert.Len(c, evs, n)
	}, 10*time.Second, 10*time.Millisecond, "the critic's turn runs in %s", id)
	evs, err := rt.History(ctx, id, 0, 0)
	require.NoError(t, err)
	require.Equal(t, "critic", evs[n-1].GetAgent())
	require.Equal(t, text, evs[n-1].GetAssistantMsg().GetContent()[0].GetText())
}

// TestForkOwesTheTurnOfAWaitingAgent: a fork whose history ends with one
// agent's answer while another's message waits owes that agent its turn,
// as the conversation's core decides it, and runs it.
func TestForkOwesTheTurnOfAWaitingAgent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	store := memjournal.New(memjournal.Options{})
	text := func(s string) []*messages.ContentPart {
		return []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: s}}}
	}
	_, err := store.Append(ctx, &messages.AppendRequest{ConversationId: "c", Status: messages.ConversationStatus_CONVERSATION_STATUS_IDLE, Events: []*messages.Event{
		{Body: &messages.Event_UserMsg{UserMsg: &messages.UserMessage{Content: text("hi")}}},                      // 1
		{Agent: "critic", Body: &messages.Event_UserMsg{UserMsg: &messages.UserMessage{Content: text("review")}}}, // 2, waits
		{Body: &messages.Event_AssistantMsg{AssistantMsg: &messages.AssistantMessage{Content: text("hello")}}},    // 3
	}})
	require.NoError(t, err)
	crit := scripted.New(scripted.Options{})
	crit.Push("f", scripted.Text("critique"))
	rt, err := lazarus.Open(lazarus.Options{Store: store, Model: scripted.New(scripted.Options{}),
		Agents: []lazarus.Agent{{Name: "critic", Model: crit}}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = rt.Close() })

	require.NoError(t, rt.Fork(ctx, "c", 3, "f"))
	requireCriticAnswers(t, ctx, rt, "f", 4, "critique")
}

// TestEditOfARemovedAgentsMessageIsRefused: an edit is addressed as the
// message it replaces; when that message's agent is no longer in
// Options.Agents, the edit is refused as a send to it is (ErrUnknownAgent,
// ErrInvalid) and writes nothing: it would be a message no agent answers.
func TestEditOfARemovedAgentsMessageIsRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	store := memjournal.New(memjournal.Options{})
	crit := scripted.New(scripted.Options{})
	crit.Push("c", scripted.Text("private critique"))
	rt, err := lazarus.Open(lazarus.Options{Store: store, Model: scripted.New(scripted.Options{}),
		Agents: []lazarus.Agent{{Name: "critic", Model: crit}}})
	require.NoError(t, err)
	_, err = rt.SendMessageAndWait(ctx, "c", textMsg("review"), lazarus.SendOptions{Agent: "critic"}, agent.Scope{UserID: "u"}) // 1, 2
	require.NoError(t, err)
	require.NoError(t, rt.Close())

	rt, err = lazarus.Open(lazarus.Options{Store: store, Model: scripted.New(scripted.Options{})})
	require.NoError(t, err)
	defer func() { _ = rt.Close() }()
	_, err = rt.Edit(ctx, "c", 1, "review again", agent.Scope{UserID: "u"})
	require.ErrorIs(t, err, lazarus.ErrUnknownAgent)
	require.ErrorIs(t, err, journal.ErrInvalid)
	evs, err := rt.History(ctx, "c", 0, 0)
	require.NoError(t, err)
	require.Len(t, evs, 2, "nothing written")
	row, err := store.Conversation(ctx, "c")
	require.NoError(t, err)
	require.NotEqual(t, messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE, row.GetStatus(), "no turn is owed")
}

// TestAViewOfAnUnknownAgentIsRefused: HistoryView and SubscribeWith refuse
// the view of an agent not in Options.Agents (never configured, or removed
// though its events are in the log, or "default", which names the default
// agent only in the handoff tool's arguments) with ErrUnknownAgent and
// journal.ErrInvalid, as the HTTP layer refuses such an agent= name; the
// default agent's view ("") and a configured agent's are served.
func TestAViewOfAnUnknownAgentIsRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	store := memjournal.New(memjournal.Options{})
	crit := scripted.New(scripted.Options{})
	crit.Push("c", scripted.Text("private critique"))
	rt, err := lazarus.Open(lazarus.Options{Store: store, Model: scripted.New(scripted.Options{}),
		Agents: []lazarus.Agent{{Name: "critic", Model: crit}}})
	require.NoError(t, err)
	_, err = rt.SendMessageAndWait(ctx, "c", textMsg("review"), lazarus.SendOptions{Agent: "critic"}, agent.Scope{UserID: "u"})
	require.NoError(t, err)
	for _, name := range []string{"nobody", lazarus.DefaultAgentName} {
		_, err = rt.HistoryView(ctx, "c", lazarus.HistoryOptions{Agent: lazarus.ViewOf(name)})
		require.ErrorIs(t, err, lazarus.ErrUnknownAgent, name)
		require.ErrorIs(t, err, journal.ErrInvalid, name)
		_, err = rt.SubscribeWith(ctx, "c", 0, lazarus.SubscribeOptions{Agent: lazarus.ViewOf(name)})
		require.ErrorIs(t, err, lazarus.ErrUnknownAgent, name)
		require.ErrorIs(t, err, journal.ErrInvalid, name)
	}
	for _, name := range []string{"", "critic"} {
		_, err := rt.HistoryView(ctx, "c", lazarus.HistoryOptions{Agent: lazarus.ViewOf(name)})
		require.NoError(t, err, name)
		sctx, scancel := context.WithCancel(ctx)
		_, err = rt.SubscribeWith(sctx, "c", 0, lazarus.SubscribeOptions{Agent: lazarus.ViewOf(name)})
		require.NoError(t, err, name)
		scancel()
	}
	require.NoError(t, rt.Close())

	// The critic removed: its events are in the log, its view is refused.
	rt, err = lazarus.Open(lazarus.Options{Store: store, Model: scripted.New(scripted.Options{})})
	require.NoError(t, err)
	defer func() { _ = rt.Close() }()
	_, err = rt.HistoryView(ctx, "c", lazarus.HistoryOptions{Agent: lazarus.ViewOf("critic")})
	require.ErrorIs(t, err, lazarus.ErrUnknownAgent)
	require.ErrorIs(t, err, journal.ErrInvalid)
	_, err = rt.SubscribeWith(ctx, "c", 0, lazarus.SubscribeOptions{Agent: lazarus.ViewOf("critic")})
	require.ErrorIs(t, err, lazarus.ErrUnknownAgent)
	require.ErrorIs(t, err, journal.ErrInvalid)
	_, err = rt.HistoryView(ctx, "c", lazarus.HistoryOptions{Agent: lazarus.ViewOf("")})
	require.NoError(t, err)
}
