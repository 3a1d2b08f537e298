package lazarus_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/internal/leakcheck"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

// TestClusterMemberCloseLeavesNoGoroutine: a cluster member (one, on the
// application's actor system: two in one process race inside protoactor
// and grpc, see TestDocsTwoMembersForwardACall) that served sends,
// subscriptions and a stream to an application actor through its gateway
// leaves no goroutine of its own or of protoactor's (its cluster, its
// remote, the automanaged provider) once Close returned, a subscription
// and a stream still open then (but protoactor's cluster log throttles,
// which nothing can stop).
func TestClusterMemberCloseLeavesNoGoroutine(t *testing.T) {
	if !leakcheck.Isolate(t) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	base := leakcheck.Take()
	model := agent.ModelFunc(func(context.Context, agent.Turn, func(string)) (*messages.AssistantMessage, error) {
		return agent.Text("ok"), nil
	})
	var sys *actor.ActorSystem
	rt := lazarus.OpenAutoManagedMembers(t, 1, func(_, am int, seeds []string) (*lazarus.Runtime, error) {
		sys = actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
			return slog.New(slog.DiscardHandler)
		}))
		return lazarus.Open(lazarus.Options{Store: memjournal.New(memjournal.Options{}), Model: model, ActorSystem: sys, IdleTimeout: -1,
			Logger:  slog.New(slog.DiscardHandler),
			Cluster: &lazarus.ClusterOptions{AutoManagedPort: am, Seeds: seeds}})
	})[0]
	_, err := rt.SendAndWait(ctx, "a", "hi", user)
	require.NoError(t, err)
	updates, err := rt.Subscribe(context.Background(), "a", 0)
	require.NoError(t, err)
	<-updates

	// An application actor's stream through the gateway, left open.
	streamed := make(chan *messages.ClusterUpdate, 16)
	_, err = sys.Root.SpawnNamed(actor.PropsFromFunc(func(c actor.Context) {
		if u, ok := c.Message().(*messages.ClusterUpdate); ok {
			streamed <- u
		}
	}), "app")
	require.NoError(t, err)
	gateway := actor.NewPID(sys.Address(), lazarus.GatewayName)
	res, err := sys.Root.RequestFuture(gateway, &messages.ClusterSubscribe{RequestId: 1, SubscriptionId: "app-1", ConversationId: "a",
		ReplyAddress: sys.Address(), ReplyId: "app"}, 10*time.Second).Result()
	require.NoError(t, err)
	require.Nil(t, res.(*messages.ClusterReply).GetError())
	<-streamed

	require.NoError(t, rt.Close())
	for range updates {
	}
	base.Check(t, leakWithin, clusterThrottles...)
}

// clusterThrottles are the stacks of the log throttles of protoactor's
// cluster (the gossiper's, the gossip actor's): the first log of a period
// starts a goroutine that waits out the period, 60 s, on a ticker, which
// nothing stops; it holds nothing of the member's.
var clusterThrottles = []string{
	"protoactor-go/cluster.(*Gossiper).StartGossiping.NewThrottle",
	"protoactor-go/cluster.NewGossipActor.NewThrottleWithLogger",
}
