package actors_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

// logSignal is a slog handler that signals each record whose message is
// msg, on the goroutine that logs it.
type logSignal struct {
	msg string
	ch  chan struct{}
}

func (h *logSignal) Enabled(context.Context, slog.Level) bool { return true }
func (h *logSignal) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *logSignal) WithGroup(string) slog.Handler            { return h }
func (h *logSignal) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		select {
		case h.ch <- struct{}{}:
		default:
		}
	}
	return nil
}

// seedOpenServerCall writes a conversation whose log ends in a call of
// server tool name that has no result: a revival owes its dispatch.
// The user message is authored by author (nil: anonymous).
func seedOpenServerCall(t *testing.T, store journal.Store, conv, name string, author *messages.Identity) {
	t.Helper()
	now := journal.Timestamp(time.Now())
	tc := &messages.ToolCall{Id: actors.NewToolCallID(), Name: name, Arguments: `{}`}
	user := &messages.Event{Seq: 1, Time: now, Author: author, Body: &messages.Event_UserMsg{UserMsg: &messages.UserMessage{
		Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: "go"}}}}}}
	answer := &messages.Event{Seq: 2, Time: now, Body: &messages.Event_AssistantMsg{AssistantMsg: &messages.AssistantMessage{ToolCalls: []*messages.ToolCall{tc}}}}
	call := &messages.Event{Seq: 3, Time: now, Body: &messages.Event_ToolCall{ToolCall: &messages.ToolCallEvent{Call: tc, Executor: messages.Executor_EXECUTOR_SERVER}}}
	_, err := store.Append(context.Background(), &messages.AppendRequest{
		ConversationId: conv, Events: []*messages.Event{user, answer, call},
		Status: messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE,
		ToolCalls: []*messages.ToolCallRecord{{
			Id: tc.GetId(), ConversationId: conv, Name: name, Executor: messages.Executor_EXECUTOR_SERVER,
			Status: messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING, Args: `{}`, Created: now, Requester: author,
		}},
	})
	require.NoError(t, err)
}

// TestResumedWorkRunsForTheRequester: an activation revived with a server
// call owed starts no work until a command arrives, and then runs the call
// for the requester recorded in the log (the author of the turn's user
// message), rebuilt by the ScopeLoader, never with the scope of the command
// that woke it; without a loader, under SystemScope.
func TestResumedWorkRunsForTheRequester(t *testing.T) {
	alice := &messages.Identity{UserId: "alice", Roles: []string{"buyer"}}
	loader := func(_ context.Context, id agent.Identity) (agent.Scope, error) {
		return agent.Scope{UserID: id.UserID, Roles: id.Roles, Permissions: []string{"loaded"}}, nil
	}
	for _, tc := range []struct {
		name   string
		loader agent.ScopeLoader
		author *messages.Identity
		want   agent.Scope
	}{
		{"loader", loader, alice, agent.Scope{UserID: "alice", Roles: []string{"buyer"}, Permissions: []string{"loaded"}}},
		{"no loader", nil, alice, agent.SystemScope},
		{"anonymous requester", loader, nil, agent.SystemScope},
		{"loader fails", func(context.Context, agent.Identity) (agent.Scope, error) {
			return agent.Scope{}, errors.New("directory down")
		}, alice, agent.SystemScope},
		{"loader panics", func(context.Context, agent.Identity) (agent.Scope, error) { panic("boom") }, alice, agent.SystemScope},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := resumedScope(t, tc.loader, tc.author)
			require.Equal(t, tc.want, got, "the owed call runs for the requester, not for the command that woke the actor")
		})
	}
}

// resumedScope revives a conversation that owes a server call made for
// author, wakes it with bob's scope once revived, and returns the scope the
// call ran with.
func resumedScope(t *testing.T, loader agent.ScopeLoader, author *messages.Identity) agent.Scope {
	t.Helper()
	sys := newTestSystem(t)
	store := memjournal.New(memjournal.Options{})
	seedOpenServerCall(t, store, "c", "probe", author)
	scopes := make(chan agent.Scope, 8)
	tools, err := agent.NewRegistry(agent.Tool{
		Name: "probe", Description: "records its scope", Executor: messages.Executor_EXECUTOR_SERVER,
		Run: func(_ context.Context, inv agent.Invocation) (string, error) {
			scopes <- inv.Scope
			return `{}`, nil
		},
	})
	require.NoError(t, err)
	revived := &logSignal{msg: "revived", ch: make(chan struct{}, 1)}
	journalPID := sys.Root.Spawn(actors.NewJournal(store, actors.JournalOptions{}))
	pid := sys.Root.Spawn(actors.NewConversation(actors.ConversationConfig{
		ID: "c", Store: store, Journal: journalPID, Tools: tools, Logger: slog.New(revived), ScopeLoader: loader,
		Model: agent.ModelFunc(func(context.Context, agent.Turn, func(string)) (*messages.AssistantMessage, error) {
			return &messages.AssistantMessage{Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: "ok"}}}}, nil
		}),
	}))
	t.Cleanup(func() { _ = sys.Root.StopFuture(pid).Wait() })

	select {
	case <-revived.ch:
	case <-time.After(10 * time.Second):
		t.Fatal("the actor never revived")
	}
	require.Empty(t, scopes, "no work before a command arrived")
	bob := agent.Scope{UserID: "bob", Roles: []string{"approver"}}
	res, err := sys.Root.RequestFuture(pid, &actors.Command{Scope: bob, Msg: &messages.AgentWake{}}, 10*time.Second).Result()
	require.NoError(t, err)
	require.Nil(t, res.(*messages.AgentReply).GetError())
	select {
	case got := <-scopes:
		return got
	case <-time.After(10 * time.Second):
		t.Fatal("the owed call was never dispatched")
	}
	return agent.Scope{}
}
