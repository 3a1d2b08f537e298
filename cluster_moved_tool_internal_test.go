package lazarus

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/cluster"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

// TestMovedConversationsToolResultIsNotWrittenByTheOldOwner: a member
// whose conversation moved to another member while a server tool of it
// ran (a tool that ignores its context, as a payment API call in flight
// does) stops that activation; when the tool then returns, with success,
// its result is not written by the old member: the log ends in the
// tool_call and the call's row is still pending, for the new owner to run
// under the same id (runs in two processes are not kept apart; two
// recorded results would be). The activation's stop waits for nothing
// here: Close, which waits for every goroutine the agents started, comes
// after the tool returned.
func TestMovedConversationsToolResultIsNotWrittenByTheOldOwner(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	started, release := make(chan string, 4), make(chan struct{})
	returned := make(chan struct{}, 4)
	pay := agent.Tool{Name: "pay", Description: "pay", Executor: messages.Executor_EXECUTOR_SERVER,
		Run: func(_ context.Context, inv agent.Invocation) (string, error) {
			started <- inv.ToolCallID
			<-release // the context is ignored: the payment goes through
			defer func() { returned <- struct{}{} }()
			return `{"paid":true}`, nil
		}}
	model := scripted.New(scripted.Options{})
	store := memjournal.New(memjournal.Options{})
	rt, err := Open(Options{Store: store, Model: model, Tools: []agent.Tool{pay}, NoResume: true, ResumeInterval: -1, IdleTimeout: -1})
	require.NoError(t, err)
	closed := false
	defer func() {
		if !closed {
			close(release)
			_ = rt.Close()
		}
	}()
	n := newNode(rt, rt.system)
	n.attach(rt.sup, n.generation())

	joined := &cluster.Member{Id: "joined", Host: "10.0.0.1", Port: 7001, Kinds: []string{ConversationKind}}
	after := testNode(n.self, joined.Address())
	moved := ""
	for i := 0; moved == ""; i++ {
		if id := fmt.Sprintf("conv-%d", i); after.owner(id) == joined.Address() {
			moved = id
		}
	}
	model.Push(moved, scripted.Reply("paying", scripted.Call("pay", `{"amount":5}`)), scripted.Text("paid"))
	_, err = rt.Send(ctx, moved, "pay it", agent.Scope{UserID: "u"})
	require.NoError(t, err)
	var id string
	select {
	case id = <-started:
	case <-ctx.Done():
		t.Fatal("the tool did not start")
	}

	n.onTopology([]*cluster.Member{joined})
	require.Eventually(t, func() bool { return !rt.IsActive(moved) }, 10*time.Second, time.Millisecond,
		"the moved conversation's activation is still live")
	close(release)
	select {
	case <-returned:
	case <-ctx.Done():
		t.Fatal("the tool did not return")
	}
	closed = true
	require.NoError(t, rt.Close()) // waits for the run's goroutine, and what it would have sent

	evs, err := store.Events(ctx, moved, journal.EventQuery{})
	require.NoError(t, err)
	require.Len(t, evs, 3, "user_msg, assistant_msg, tool_call: no result written by the old owner")
	require.Equal(t, id, evs[2].GetToolCall().GetCall().GetId())
	row, err := store.ToolCall(ctx, id)
	require.NoError(t, err)
	require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING, row.GetStatus(), "owed to the new owner, under the same id")
	conv, err := store.Conversation(ctx, moved)
	require.NoError(t, err)
	require.Equal(t, messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE, conv.GetStatus(), "the new owner's resume scan runs it")
	require.Equal(t, 1, model.Calls(moved), "the model was not asked again")
}
