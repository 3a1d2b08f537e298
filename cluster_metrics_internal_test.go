package lazarus

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/journal/memjournal"
)

// TestClusterSubscriptionIsCountedOnTheOwner: in cluster mode,
// Metrics.Subscribers counts a subscription on the member that owns its
// conversation (which serves it), as its doc says, not on the member it
// was made on, whose hook is not called; each subscription counts once,
// and once it has ended the owner's count is back to zero, never below.
func TestClusterSubscriptionIsCountedOnTheOwner(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	store := memjournal.New(memjournal.Options{})
	model := okModel()
	var ownerSubs, memberSubs, ownerLow atomic.Int64
	count := func(n *atomic.Int64) func(int) {
		return func(d int) {
			if v := n.Add(int64(d)); v < ownerLow.Load() {
				ownerLow.Store(v)
			}
		}
	}
	net, members := pairNet()
	owner, _ := openOwner(t, net, Options{Store: store, Model: model, NoResume: true, Metrics: Metrics{Subscribers: count(&ownerSubs)}})
	member := openRuntime(t, Options{Store: store, Model: model, NoResume: true, Metrics: Metrics{Subscribers: count(&memberSubs)}})
	n := netMember(t, net, member, memberAddr, members)
	conv := ownedBy(n, ownerAddr)
	firstTurn(t, ctx, owner, store, conv)

	sctx, scancel := context.WithCancel(ctx)
	var streams []<-chan Update
	for range 2 {
		updates, err := member.Subscribe(sctx, conv, 0)
		require.NoError(t, err)
		readConvTo(t, ctx, updates, conv, 2)
		streams = append(streams, updates)
	}
	require.EqualValues(t, 2, ownerSubs.Load(), "each follower's stream is a subscription on the owner")
	require.Zero(t, memberSubs.Load(), "the member's hook does not count them")

	scancel()
	for _, updates := range streams {
		for range updates {
		}
	}
	// A follower's channel closes once the owner ended its stream; the
	// owner counts it out as its pump ends.
	require.Eventually(t, func() bool { return ownerSubs.Load() == 0 }, 10*time.Second, time.Millisecond)
	require.Zero(t, memberSubs.Load())
	require.Zero(t, ownerLow.Load(), "never below zero")
}
