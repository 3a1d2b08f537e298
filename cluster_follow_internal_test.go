package lazarus

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

// A follower takes the updates of its stream only: of the conversation it
// follows, from the gateway of the member it subscribed to. It took every
// update sent to its subscription id, from anyone, and kept the update's
// conversation id: an update of another conversation (from the owner, or
// from another member or actor) reached its subscriber as one of the
// followed conversation, or as one of another conversation. Such updates
// are dropped now (with a debug log), and the stream goes on.
func TestFollowerTakesOnlyItsStreamsUpdates(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	store := memjournal.New(memjournal.Options{})
	model := agent.ModelFunc(func(context.Context, agent.Turn, func(string)) (*messages.AssistantMessage, error) {
		return agent.Text("ok"), nil
	})
	const ownerAddr, memberAddr, otherAddr = "owner.test:1", "member.test:1", "other.test:1"
	members := []string{ownerAddr, memberAddr}
	slices.Sort(members)
	net := &fakeNet{sys: map[string]*actor.ActorSystem{}}

	ownerSys := quietSystem(t, ownerAddr)
	owner, err := Open(Options{Store: store, Model: model, ActorSystem: ownerSys, NoResume: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = owner.Close() })
	net.join(ownerSys)
	member, err := Open(Options{Store: store, Model: model, NoResume: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = member.Close() })
	n := netMember(t, net, member, memberAddr, members)
	// Another actor system on the network: not a member of
	// ConversationKind, but it reaches the member's gateway.
	otherSys := quietSystem(t, otherAddr)
	net.join(otherSys)

	conv := firstConv(func(id string) bool { return n.owner(id) == ownerAddr })
	otherConv := firstConv(func(id string) bool { return id != conv })
	scope := agent.Scope{UserID: "u"}
	_, err = owner.Send(ctx, conv, "hi", scope)
	require.NoError(t, err)
	waitTurnEnded(t, ctx, store, conv, 2, "the first turn ended")

	updates, err := member.Subscribe(ctx, conv, 0)
	require.NoError(t, err)
	// next returns the next update with an event, failing the test if the
	// subscription ends or ctx does first.
	next := func() Update {
		t.Helper()
		for {
			select {
			case u, ok := <-updates:
				require.True(t, ok, "the subscription ended")
				require.NoError(t, u.Err)
				require.Equal(t, conv, u.ConversationID, "an update of another conversation")
				if u.Event != nil {
					return u
				}
			case <-ctx.Done():
				t.Fatal("no update arrived")
				return Update{}
			}
		}
	}
	require.EqualValues(t, 1, next().Event.GetSeq())
	require.EqualValues(t, 2, next().Event.GetSeq())
	ids := followIDs(n)
	require.Len(t, ids, 1)
	id := ids[0]

	memberGW := actor.NewPID(memberAddr, GatewayName)
	bogus := func(conv string) *messages.ClusterUpdate {
		return &messages.ClusterUpdate{SubscriptionId: id, ConversationId: conv,
			Event: &messages.Event{Seq: 3, Body: &messages.Event_UserMsg{UserMsg: agent.UserMessage(agent.TextPart("bogus"))}}}
	}
	// Another conversation's update, from the owner's gateway.
	ownerSys.Root.RequestWithCustomSender(memberGW, bogus(otherConv), actor.NewPID(ownerAddr, GatewayName))
	// The followed conversation's, from another member's gateway, and
	// from another actor on the owner's member.
	otherSys.Root.RequestWithCustomSender(memberGW, bogus(conv), actor.NewPID(otherAddr, GatewayName))
	ownerSys.Root.RequestWithCustomSender(memberGW, bogus(conv), actor.NewPID(ownerAddr, "someone"))
	// A final one, which would end the stream.
	final := bogus(conv)
	final.Event, final.Final = nil, true
	otherSys.Root.RequestWithCustomSender(memberGW, final, actor.NewPID(otherAddr, GatewayName))

	// The fake network delivers in order: the bogus updates are in the
	// member's gateway before the stream's next ones.
	_, err = owner.Send(ctx, conv, "again", scope)
	require.NoError(t, err)
	u := next()
	require.EqualValues(t, 3, u.Event.GetSeq())
	require.Equal(t, "again", u.Event.GetUserMsg().GetContent()[0].GetText(), "the stream's own event")
	require.EqualValues(t, 4, next().Event.GetSeq())
	require.Equal(t, []string{id}, followIDs(n), "the stream goes on")
}
