package actors_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

// A panic of ConversationConfig.Checkpoints ends only the call it was run
// for: the call's result is a tool error of code agent.CodePanic, as when
// the tool's Run panics, the tool is not run, the model sees the error
// and the conversation goes on. It stopped the activation, and each next
// one dispatched the open call again and panicked alike.
func TestConversationRecoversCheckpointsPanic(t *testing.T) {
	sys := newTestSystem(t)
	store := memjournal.New(memjournal.Options{})
	journalPID := sys.Root.Spawn(actors.NewJournal(store, actors.JournalOptions{}))
	var runs, hooks atomic.Int32
	tools, err := agent.NewRegistry(agent.Tool{
		Name: "edit", Description: "edits a file", Executor: messages.Executor_EXECUTOR_SERVER,
		Run: func(context.Context, agent.Invocation) (string, error) {
			runs.Add(1)
			return `{}`, nil
		},
	})
	require.NoError(t, err)
	seen := make(chan *messages.ToolResultEvent, 1)
	model := agent.ModelFunc(func(_ context.Context, turn agent.Turn, _ func(string)) (*messages.AssistantMessage, error) {
		last := turn.Context[len(turn.Context)-1]
		if r := last.GetToolResult(); r != nil {
			seen <- r
			return agent.Text("done"), nil
		}
		return &messages.AssistantMessage{ToolCalls: []*messages.ToolCall{{Name: "edit", Arguments: "{}"}}}, nil
	})
	pid := sys.Root.Spawn(actors.NewConversation(actors.ConversationConfig{
		ID: "c", Store: store, Journal: journalPID, Model: model, Tools: tools,
		Checkpoints: func(agent.Invocation) agent.Checkpointer {
			hooks.Add(1)
			panic("Checkpoints: injected")
		},
	}))
	t.Cleanup(func() { _ = sys.Root.StopFuture(pid).Wait() })
	res, err := sys.Root.RequestFuture(pid, userSend("r1", "edit it"), replyWait).Result()
	require.NoError(t, err)
	require.Nil(t, res.(*messages.AgentSendReply).GetError())

	var r *messages.ToolResultEvent
	select {
	case r = <-seen:
	case <-time.After(replyWait):
		t.Fatal("the model never saw the call's result")
	}
	require.Equal(t, "edit", r.GetName())
	require.Equal(t, agent.CodePanic, r.GetOutcome().GetError().GetCode())
	require.Contains(t, r.GetOutcome().GetError().GetMessage(), "Checkpoints: injected")
	require.Eventually(t, func() bool {
		evs, err := store.Events(t.Context(), "c", journal.EventQuery{})
		return err == nil && len(evs) == 5 && evs[4].GetAssistantMsg().GetContent() != nil
	}, replyWait, time.Millisecond, "the model's answer to the error was written")
	require.Zero(t, runs.Load(), "the tool was not run")
	require.Equal(t, int32(1), hooks.Load(), "the call was dispatched once")
}
