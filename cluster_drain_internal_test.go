package lazarus

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/journal"
)

// hubSubOf returns r's one hub subscription of conv, once there is one.
func hubSubOf(t *testing.T, r *Runtime, conv string) *subscription {
	t.Helper()
	var s *subscription
	require.Eventually(t, func() bool {
		r.hub.mu.Lock()
		defer r.hub.mu.Unlock()
		if subs := r.hub.subs[conv]; len(subs) == 1 {
			s = subs[0]
		}
		return s != nil
	}, 10*time.Second, time.Millisecond, "the follower subscribed to the hub")
	return s
}

// A follower on the owner itself reads the local hub. When the membership
// changed, it left that subscription and drained its channel, dropping
// what the channel still held: its events came again from the next
// stream, but the updates that carry no event never did, among them a
// failed write's turn end, which a SendAndWait waiting for its turn's end
// then missed. Now what the channel holds is delivered, in order, before
// the follower subscribes again.
func TestLocalFollowerDeliversWhatItsHubChannelHeldOnAMembershipChange(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r := openRuntime(t, Options{Model: okModel(), NoResume: true})
	n := newNode(r, quietSystem(t, "solo.test:1")) // the one member: it owns every conversation
	r.cl = n
	const conv = "conv-drain"

	updates, err := r.Subscribe(ctx, conv, 0)
	require.NoError(t, err)
	s := hubSubOf(t, r, conv)
	require.Eventually(t, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.idle
	}, 10*time.Second, time.Millisecond, "the hub subscription caught up")

	// The subscriber does not read: the follower's channel fills (16),
	// the follower holds one more, and the hub's channel holds the rest,
	// the failed write's end last.
	const followerOut, inHub = 16, 15
	deltas := followerOut + 1 + inHub - 1
	for i := range deltas {
		r.hub.publish(actors.Update{ConversationID: conv, Delta: fmt.Sprintf("d%d", i)})
	}
	failed := fmt.Errorf("write: %w", journal.ErrUnknownOutcome)
	r.hub.publish(actors.Update{ConversationID: conv, Err: failed})
	require.Eventually(t, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(updates) == followerOut && len(s.out) == inHub && len(s.queue) == 0 && s.held.Load() == 0
	}, 10*time.Second, time.Millisecond, "the follower's and the hub's channels are full")

	n.mu.Lock()
	close(n.changed)
	n.changed = make(chan struct{})
	n.mu.Unlock()

	for i := range deltas {
		select {
		case u, ok := <-updates:
			require.True(t, ok, "the subscription ended")
			require.NoError(t, u.Err)
			require.Equal(t, fmt.Sprintf("d%d", i), u.Delta, "the deltas in order")
		case <-ctx.Done():
			t.Fatalf("delta %d did not arrive", i)
		}
	}
	select {
	case u, ok := <-updates:
		require.True(t, ok, "the subscription ended")
		require.ErrorIs(t, u.Err, journal.ErrUnknownOutcome, "the failed write's end, after the deltas")
		require.NotNil(t, u.TurnEnd)
		require.Equal(t, actors.TurnFailed, u.TurnEnd.Outcome)
		require.Zero(t, u.After)
	case <-ctx.Done():
		t.Fatal("the failed write's end did not arrive")
	}

	// The follower goes on, on its new subscription of the hub.
	require.Eventually(t, func() bool {
		r.hub.mu.Lock()
		defer r.hub.mu.Unlock()
		subs := r.hub.subs[conv]
		return len(subs) == 1 && subs[0] != s
	}, 10*time.Second, time.Millisecond, "the follower subscribed again")
	r.hub.publish(actors.Update{ConversationID: conv, Delta: "after"})
	select {
	case u := <-updates:
		require.NoError(t, u.Err)
		require.Equal(t, "after", u.Delta)
	case <-ctx.Done():
		t.Fatal("the follower's new subscription got nothing")
	}
}
