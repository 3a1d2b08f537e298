package lazarus

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

// A Resolve retried on a member that does not own the conversation, after
// its first attempt's outcome was unknown (its write landed, and no
// delivery reached the owner's live activation: the first attempt ran on
// a member that believed it owned the conversation, say), finds the call
// answered in the Store. It told its own supervisor, which has no
// activation of the conversation, and the owner's live activation (no
// passivation, no resume scan here) waited for an answer the Store held.
// Now the member tells the owner, which delivers the Store's answer to
// its activation: the conversation records it once and runs its turn.
func TestResolveStaleOnAnotherMemberReachesTheOwnersActivation(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store := memjournal.New(memjournal.Options{})
	model := scripted.New(scripted.Options{})
	opts := Options{Store: store, Model: model, NoResume: true, IdleTimeout: -1,
		Tools: []agent.Tool{{Name: "approve", Executor: messages.Executor_EXECUTOR_HUMAN, Timeout: time.Hour}}}

	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	t.Cleanup(sys.Shutdown)
	ownerOpts := opts
	ownerOpts.ActorSystem = sys
	owner, err := Open(ownerOpts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = owner.Close() })
	caller, err := Open(opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = caller.Close() })
	n := newNode(caller, sys) // requests leave through the owner's system
	n.opts.RequestTimeout = time.Hour
	n.self = "caller.invalid:1"
	members := []string{n.self, sys.Address()}
	slices.Sort(members)
	n.members.Store(&members)
	caller.cl, caller.gw = n, n
	conv := firstConv(func(id string) bool { return n.owner(id) == sys.Address() })

	// The owner's activation suspends on a human call.
	model.Push(conv, scripted.Reply("", scripted.Call("approve", `{}`)))
	sub, err := owner.Subscribe(ctx, conv, 0)
	require.NoError(t, err)
	_, err = owner.Send(ctx, conv, "may I?", agent.Scope{UserID: "u"})
	require.NoError(t, err)
	var callID string
	for callID == "" {
		select {
		case u, ok := <-sub:
			require.True(t, ok, "the subscription ended")
			if p := u.Event.GetSuspension().GetPending(); len(p) == 1 {
				callID = p[0].GetToolCallId()
			}
		case <-ctx.Done():
			t.Fatal("no suspension")
		}
	}
	require.True(t, owner.IsActive(conv), "the owner's activation is live")

	// The first attempt's answer landed, and was delivered to no one.
	by := agent.Scope{UserID: "u"}
	_, err = store.Append(ctx, &messages.AppendRequest{ConversationId: conv, Unfenced: true,
		Status: messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE, Resolutions: []*messages.ToolResolution{{
			ToolCallId: callID, Status: messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED,
			Result: &messages.ToolOutcome{Outcome: &messages.ToolOutcome_Content{Content: `{"approved":true}`}},
			At:     journal.Timestamp(time.Now()), By: by.Identity().Proto(),
		}}})
	require.NoError(t, err)
	model.Push(conv, scripted.Text("thanks"))

	// The retry, on the caller, is stale.
	err = caller.Resolve(ctx, callID, `{"approved":true}`, by)
	require.ErrorIs(t, err, journal.ErrStale)

	// The owner's activation records the answer and runs its turn.
	bound := time.After(10 * time.Second)
	for {
		select {
		case u, ok := <-sub:
			require.True(t, ok, "the subscription ended")
			if u.Event.GetAssistantMsg() == nil {
				continue // the second one: the first came before the suspension
			}
			evs, err := owner.History(ctx, conv, 0, 0)
			require.NoError(t, err)
			results := 0
			for _, ev := range evs {
				if ev.GetToolResult().GetToolCallId() == callID {
					results++
				}
			}
			require.Equal(t, 1, results, "one tool_result of the call")
			return
		case <-bound:
			t.Fatal("the owner's live activation never got the answer the Store holds")
		}
	}
}
