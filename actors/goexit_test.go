package actors_test

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/snapshot"
)

// A server tool that ends its goroutine with runtime.Goexit (t.FailNow in
// a test tool) never returns from RunServer, but the call still ends: its
// result is a tool error of code agent.CodePanic, the model sees it, and
// the tool gate is left, so a later run of the same call id is not
// blocked. Before, no result was reported (the turn waited for ever) and
// the gate stayed held for the call id.
func TestToolGoexitEndsTheCall(t *testing.T) {
	sys := newTestSystem(t)
	store := memjournal.New(memjournal.Options{})
	journalPID := sys.Root.Spawn(actors.NewJournal(store, actors.JournalOptions{}))
	var runs atomic.Int32
	tools, err := agent.NewRegistry(agent.Tool{
		Name: "fail", Description: "ends its goroutine", Executor: messages.Executor_EXECUTOR_SERVER,
		Run: func(context.Context, agent.Invocation) (string, error) {
			runs.Add(1)
			runtime.Goexit()
			return `{}`, nil
		},
	})
	require.NoError(t, err)
	seen := make(chan *messages.ToolResultEvent, 1)
	model := agent.ModelFunc(func(_ context.Context, turn agent.Turn, _ func(string)) (*messages.AssistantMessage, error) {
		if r := turn.Context[len(turn.Context)-1].GetToolResult(); r != nil {
			seen <- r
			return agent.Text("done"), nil
		}
		return &messages.AssistantMessage{ToolCalls: []*messages.ToolCall{{Name: "fail", Arguments: "{}"}}}, nil
	})
	gate := &actors.ToolGate{}
	pid := sys.Root.Spawn(actors.NewConversation(actors.ConversationConfig{
		ID: "c", Store: store, Journal: journalPID, Model: model, Tools: tools, ToolGate: gate,
	}))
	t.Cleanup(func() { _ = sys.Root.StopFuture(pid).Wait() })
	res, err := sys.Root.RequestFuture(pid, userSend("r1", "fail"), replyWait).Result()
	require.NoError(t, err)
	require.Nil(t, res.(*messages.AgentSendReply).GetError())

	var r *messages.ToolResultEvent
	select {
	case r = <-seen:
	case <-time.After(replyWait):
		t.Fatal("the model never saw the call's result")
	}
	require.Equal(t, agent.CodePanic, r.GetOutcome().GetError().GetCode())
	require.Contains(t, r.GetOutcome().GetError().GetMessage(), "runtime.Goexit")
	require.Eventually(t, func() bool {
		evs, err := store.Events(t.Context(), "c", journal.EventQuery{})
		return err == nil && len(evs) == 5 && evs[4].GetAssistantMsg().GetContent() != nil
	}, replyWait, time.Millisecond, "the turn ended with the model's answer to the error")
	require.Equal(t, int32(1), runs.Load())

	ctx, cancel := context.WithTimeout(t.Context(), replyWait)
	defer cancel()
	leave, err := actors.EnterToolForTesting(gate, ctx, "c", r.GetToolCallId())
	require.NoError(t, err, "a second run of the call is not blocked by the gate")
	leave()
	require.Zero(t, gate.InFlightForTesting())
}

// A model that ends its goroutine with runtime.Goexit fails the turn as a
// panic does (code panicked), and leaves the model gate: the next message
// is answered. Before, the turn never ended and every later model call of
// the conversation waited at the gate.
func TestModelGoexitFailsTheTurn(t *testing.T) {
	sys := newTestSystem(t)
	store := memjournal.New(memjournal.Options{})
	journalPID := sys.Root.Spawn(actors.NewJournal(store, actors.JournalOptions{}))
	var calls atomic.Int32
	model := agent.ModelFunc(func(context.Context, agent.Turn, func(string)) (*messages.AssistantMessage, error) {
		if calls.Add(1) == 1 {
			runtime.Goexit()
		}
		return agent.Text("hello"), nil
	})
	pid := sys.Root.Spawn(actors.NewConversation(actors.ConversationConfig{
		ID: "c", Store: store, Journal: journalPID, Model: model,
	}))
	t.Cleanup(func() { _ = sys.Root.StopFuture(pid).Wait() })
	// events takes the test's t, or the CollectT of an EventuallyWithT.
	events := func(c require.TestingT) []*messages.Event {
		evs, err := store.Events(t.Context(), "c", journal.EventQuery{})
		require.NoError(c, err)
		return evs
	}
	res, err := sys.Root.RequestFuture(pid, userSend("r1", "one"), replyWait).Result()
	require.NoError(t, err)
	require.Nil(t, res.(*messages.AgentSendReply).GetError())
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Len(c, events(c), 2) }, replyWait, time.Millisecond, "the turn failed")
	f := events(t)[1].GetTurnFailed()
	require.NotNil(t, f)
	require.Equal(t, actors.CodePanicked, f.GetCode())
	require.Contains(t, f.GetMessage(), "runtime.Goexit")

	res, err = sys.Root.RequestFuture(pid, userSend("r2", "two"), replyWait).Result()
	require.NoError(t, err)
	require.Nil(t, res.(*messages.AgentSendReply).GetError())
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		evs := events(c)
		require.Len(c, evs, 4)
		assert.NotNil(c, evs[3].GetAssistantMsg().GetContent())
	}, replyWait, time.Millisecond, "the next message was answered")
	require.Equal(t, int32(2), calls.Load())
}

// goexitSummarizer ends its goroutine with runtime.Goexit on its first
// call, then summarizes as snapshot.Deterministic does.
type goexitSummarizer struct{ calls *atomic.Int32 }

func (s goexitSummarizer) Summarize(ctx context.Context, id string, prev *messages.Summary, events []*messages.Event) (*messages.Summary, error) {
	if s.calls.Add(1) == 1 {
		runtime.Goexit()
	}
	return snapshot.Deterministic{}.Summarize(ctx, id, prev, events)
}

// A summarizer that ends its goroutine with runtime.Goexit has its summary
// skipped, as a panicking one does, and leaves the model gate: the next
// message is answered, and a later summary is made. Before, the gate
// stayed held and the next turn's model call waited for ever.
func TestSummarizerGoexitSkipsTheSummary(t *testing.T) {
	sys := newTestSystem(t)
	store := memjournal.New(memjournal.Options{})
	journalPID := sys.Root.Spawn(actors.NewJournal(store, actors.JournalOptions{}))
	var calls atomic.Int32
	model := agent.ModelFunc(func(context.Context, agent.Turn, func(string)) (*messages.AssistantMessage, error) {
		return agent.Text("hello"), nil
	})
	pid := sys.Root.Spawn(actors.NewConversation(actors.ConversationConfig{
		ID: "c", Store: store, Journal: journalPID, Model: model,
		Policy: snapshot.Policy{MaxEvents: 2, KeepRecent: 1}, Summarizer: goexitSummarizer{calls: &calls},
	}))
	t.Cleanup(func() { _ = sys.Root.StopFuture(pid).Wait() })
	answered := func(n int) {
		t.Helper()
		require.Eventually(t, func() bool {
			evs, err := store.Events(t.Context(), "c", journal.EventQuery{})
			return err == nil && len(evs) == 2*n && evs[2*n-1].GetAssistantMsg().GetContent() != nil
		}, replyWait, time.Millisecond, "message %d was answered", n)
	}
	for i, text := range []string{"one", "two"} {
		res, err := sys.Root.RequestFuture(pid, userSend(fmt.Sprint("r", i), text), replyWait).Result()
		require.NoError(t, err)
		require.Nil(t, res.(*messages.AgentSendReply).GetError())
		answered(i + 1)
	}
	require.Eventually(t, func() bool { return calls.Load() >= 1 }, replyWait, time.Millisecond, "a summary was due")

	res, err := sys.Root.RequestFuture(pid, userSend("r3", "three"), replyWait).Result()
	require.NoError(t, err)
	require.Nil(t, res.(*messages.AgentSendReply).GetError())
	answered(3)
	require.Eventually(t, func() bool {
		s, err := store.LatestSummary(t.Context(), "c")
		return err == nil && s != nil
	}, replyWait, time.Millisecond, "a later summary was made")
	require.GreaterOrEqual(t, calls.Load(), int32(2))
}
