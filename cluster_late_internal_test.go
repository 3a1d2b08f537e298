package lazarus

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

// An unsubscribe that reaches the owner's gateway right after its
// subscribe (a follower whose subscribe timed out sends one) ends the
// stream, time after time, so that it frees its slot of the conversation.
// The gateway registered the stream on the stream's goroutine: an
// unsubscribe it took first was ignored (an unknown id), and the stream,
// registered after it, held a slot of the conversation until its first
// update found no follower (here, with no gateway on the subscriber's
// member, until that member left).
func TestUnsubscribeRightAfterSubscribeEndsTheStream(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store := memjournal.New(memjournal.Options{})
	model := agent.ModelFunc(func(context.Context, agent.Turn, func(string)) (*messages.AssistantMessage, error) {
		return agent.Text("ok"), nil
	})
	const ownerAddr, memberAddr = "owner.test:1", "member.test:1"
	net := &fakeNet{sys: map[string]*actor.ActorSystem{}}
	ownerSys := quietSystem(t, ownerAddr)
	owner, err := Open(Options{Store: store, Model: model, ActorSystem: ownerSys, NoResume: true, MaxSubscriptions: 1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = owner.Close() })
	net.join(ownerSys)
	memberSys := quietSystem(t, memberAddr) // no gateway: the stream's updates reach nobody
	net.join(memberSys)
	const conv = "conv-late"
	_, err = owner.Send(ctx, conv, "hi", agent.Scope{UserID: "u"})
	require.NoError(t, err)
	waitTurnEnded(t, ctx, store, conv, 2, "the first turn ended")
	gw := actor.NewPID(ownerAddr, GatewayName)
	for i := range 50 {
		id := fmt.Sprintf("%s/late/%d", memberAddr, i)
		memberSys.Root.RequestWithCustomSender(gw, &messages.ClusterSubscribe{RequestId: uint64(i + 1), SubscriptionId: id,
			ConversationId: conv, ReplyAddress: memberAddr}, actor.NewPID(memberAddr, "box"))
		memberSys.Root.RequestWithCustomSender(gw, &messages.ClusterUnsubscribe{SubscriptionId: id}, actor.NewPID(memberAddr, GatewayName))
		require.Eventually(t, func() bool {
			owner.gw.mu.Lock()
			served := len(owner.gw.serving)
			owner.gw.mu.Unlock()
			return served == 0 && slotsOf(owner, conv) == 0
		}, 5*time.Second, time.Millisecond, "stream %d ended and freed its slot", i)
	}
}
