package lazarus

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/internal/leakcheck"
	"github.com/lazarusrt/lazarus/journal/memjournal"
)

// blockedIn reports whether a goroutine's stack has a call of fn made
// from caller (function names as runtime.Stack prints them).
func blockedIn(fn, caller string) bool {
	for _, g := range leakcheck.Stacks() {
		if i := strings.Index(g, fn+"("); i >= 0 && strings.Contains(g[i:], caller+"(") {
			return true
		}
	}
	return false
}

// requireFreedBeforeClosed cancels the subscription of conv on r (its
// cancel and its updates) while holding r's hub lock, so that whatever
// frees its slot (hub.free, from caller) waits; once it does, the
// subscription's channel must still be open: a reader that sees it closed
// finds the slot free. Then the lock is released, the channel read to its
// close, and the slot is free.
func requireFreedBeforeClosed(t *testing.T, r *Runtime, conv string, cancel context.CancelFunc, updates <-chan Update, caller string) {
	t.Helper()
	r.hub.mu.Lock()
	var unlock sync.Once
	defer unlock.Do(r.hub.mu.Unlock)
	cancel()
	require.Eventually(t, func() bool { return blockedIn("lazarus.(*hub).free", caller) }, 10*time.Second, time.Millisecond,
		"the ended subscription frees its slot")
	for open := true; open; {
		select {
		case _, ok := <-updates:
			require.True(t, ok, "the channel was closed before the slot was freed")
		default:
			open = false
		}
	}
	unlock.Do(r.hub.mu.Unlock)
	for range updates {
	}
	require.Zero(t, slotsOf(r, conv), "the slot is free once the channel is closed")
}

// TestSubscriptionFreesItsSlotBeforeItsChannelCloses: a subscription
// frees its slot of Options.MaxSubscriptions before it closes its
// channel, so that a reader that saw the channel closed subscribes again
// at once, at a cap of 1.
func TestSubscriptionFreesItsSlotBeforeItsChannelCloses(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	store := memjournal.New(memjournal.Options{})
	r := openRuntime(t, Options{Store: store, Model: okModel(), NoResume: true, MaxSubscriptions: 1})
	const conv = "c"
	firstTurn(t, ctx, r, store, conv)
	sctx, scancel := context.WithCancel(ctx)
	defer scancel()
	updates, err := r.Subscribe(sctx, conv, 0)
	require.NoError(t, err)
	requireFreedBeforeClosed(t, r, conv, scancel, updates, "lazarus.(*hub).pump")
	again, err := r.Subscribe(ctx, conv, 0)
	require.NoError(t, err, "subscribed again at once")
	require.NotNil(t, again)
}

// TestFollowerFreesItsSlotBeforeItsChannelCloses: a subscription on a
// member that does not own the conversation (a cluster follower) frees
// its slot of the member's Options.MaxSubscriptions before it closes its
// channel, so that a reader that saw the channel closed subscribes again
// at once: at the owner's cap of 1, it is served.
func TestFollowerFreesItsSlotBeforeItsChannelCloses(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	owner, member, conv, _ := subcapCluster(t, ctx, 1)
	sctx, scancel := context.WithCancel(ctx)
	defer scancel()
	updates, err := member.Subscribe(sctx, conv, 0)
	require.NoError(t, err)
	select {
	case u := <-updates:
		require.NoError(t, u.Err)
		require.EqualValues(t, 1, u.Event.GetSeq(), "served")
	case <-ctx.Done():
		t.Fatal("the subscription got nothing")
	}
	requireFreedBeforeClosed(t, member, conv, scancel, updates, "lazarus.(*clusterNode).runFollower")
	require.Zero(t, slotsOf(owner, conv), "and the owner's")
	again, err := member.Subscribe(ctx, conv, 0)
	require.NoError(t, err, "subscribed again at once")
	select {
	case u := <-again:
		require.NoError(t, u.Err, "served within the owner's cap")
		require.EqualValues(t, 1, u.Event.GetSeq())
	case <-ctx.Done():
		t.Fatal("the new subscription got nothing")
	}
}
