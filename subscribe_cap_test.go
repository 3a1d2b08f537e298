package lazarus_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
)

// TestSubscriptionCap: Options.MaxSubscriptions subscriptions to one
// conversation are served, one more is refused with
// ErrTooManySubscriptions (so is SendAndWait's wait, before anything is
// written), other conversations are not held to it, and a subscription
// that ended frees its slot by the time its channel is closed.
func TestSubscriptionCap(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const max = 3
	model := scripted.New(scripted.Options{})
	rt, err := lazarus.Open(lazarus.Options{Model: model, IdleTimeout: -1, MaxSubscriptions: max})
	require.NoError(t, err)
	defer rt.Close()
	_, err = rt.SendAndWait(ctx, "c", "hi", agent.Scope{UserID: "u"})
	require.NoError(t, err)

	cancels := make([]context.CancelFunc, max)
	subs := make([]<-chan lazarus.Update, max)
	for i := range max {
		var sctx context.Context
		sctx, cancels[i] = context.WithCancel(ctx)
		defer cancels[i]()
		subs[i], err = rt.Subscribe(sctx, "c", 0)
		require.NoError(t, err, "subscription %d of %d", i+1, max)
	}
	_, err = rt.Subscribe(ctx, "c", 0)
	require.ErrorIs(t, err, lazarus.ErrTooManySubscriptions, "one past the cap")
	_, err = rt.SubscribeWith(ctx, "c", 0, lazarus.SubscribeOptions{})
	require.ErrorIs(t, err, lazarus.ErrTooManySubscriptions, "SubscribeWith: one past the cap")
	last, err := rt.Store().LastSeq(ctx, "c")
	require.NoError(t, err)
	_, err = rt.SendAndWait(ctx, "c", "again", agent.Scope{UserID: "u"})
	require.ErrorIs(t, err, lazarus.ErrTooManySubscriptions, "SendAndWait's wait is a subscription")
	now, err := rt.Store().LastSeq(ctx, "c")
	require.NoError(t, err)
	require.Equal(t, last, now, "a refused SendAndWait writes nothing")

	other, err := rt.Subscribe(ctx, "d", 0)
	require.NoError(t, err, "the cap is per conversation")
	require.NotNil(t, other)

	// The subscriptions still open get every update: the refusals took
	// nothing from them.
	for i, sub := range subs {
		select {
		case u := <-sub:
			require.NoError(t, u.Err, "subscription %d", i)
			require.EqualValues(t, 1, u.Event.GetSeq(), "subscription %d", i)
		case <-ctx.Done():
			t.Fatalf("subscription %d: no history", i)
		}
	}

	cancels[0]()
	for range subs[0] { // to its close
	}
	again, err := rt.Subscribe(ctx, "c", 0)
	require.NoError(t, err, "a subscription that ended freed its slot")
	require.NotNil(t, again)
	_, err = rt.Subscribe(ctx, "c", 0)
	require.ErrorIs(t, err, lazarus.ErrTooManySubscriptions, "and only its own")
}

// TestSubscriptionCapNegativeIsNone: a negative MaxSubscriptions puts no
// cap on the subscriptions to a conversation.
func TestSubscriptionCapNegativeIsNone(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rt, err := lazarus.Open(lazarus.Options{Model: scripted.New(scripted.Options{}), MaxSubscriptions: -1})
	require.NoError(t, err)
	defer rt.Close()
	for i := range lazarus.DefaultMaxSubscriptions + 1 {
		_, err := rt.Subscribe(ctx, "c", 0)
		require.NoError(t, err, "subscription %d", i+1)
	}
}
