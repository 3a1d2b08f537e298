package lazarus

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/actors/actorstest"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
)

// sizesForTesting returns how many conversations the hub holds
// subscriptions and answers in progress of.
func (h *hub) sizesForTesting() (subs, answers int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs), len(h.answers)
}

// TestHubHoldsNothingOfFinishedConversations: a thousand conversations
// each stream a turn to a subscriber, whose subscription then ends; they
// passivate (IdleTimeout on a manual clock); half are then deleted, with
// a subscription open on each, which the delete ends. The hub holds no
// subscription and no answer in progress of any of them.
func TestHubHoldsNothingOfFinishedConversations(t *testing.T) {
	const n = 1000
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	clock := actorstest.NewManualClock(time.Unix(1_700_000_000, 0))
	rt, err := Open(Options{Clock: clock, IdleTimeout: time.Minute, Model: scripted.New(scripted.Options{Chunk: 3})})
	require.NoError(t, err)
	t.Cleanup(func() { _ = rt.Close() })
	subs, answers := rt.hub.sizesForTesting()
	require.Zero(t, subs+answers, "baseline")

	for i := range n {
		conv := fmt.Sprintf("c%d", i)
		sctx, end := context.WithCancel(ctx)
		ch, err := rt.Subscribe(sctx, conv, 0)
		require.NoError(t, err)
		_, err = rt.Send(ctx, conv, "hi", agent.Scope{UserID: "u"})
		require.NoError(t, err)
		deltas := 0
		for u := range ch {
			if u.Delta != "" {
				deltas++
			}
			if u.TurnEnd != nil {
				break
			}
		}
		require.Positive(t, deltas, "%s: the answer was streamed", conv)
		end()
		for range ch { // the pump ends on the cancelled context
		}
	}
	require.Eventually(t, func() bool { return clock.Timers() == n }, time.Minute, time.Millisecond, "every conversation idle")
	clock.Advance(time.Minute)
	require.Eventually(t, func() bool { return rt.sup.Active() == 0 }, time.Minute, time.Millisecond, "passivated")
	require.Eventually(t, func() bool { s, a := rt.hub.sizesForTesting(); return s+a == 0 }, time.Minute, time.Millisecond,
		"subscriptions ended, answers done")

	for i := range n / 2 {
		conv := fmt.Sprintf("c%d", i)
		ch, err := rt.Subscribe(ctx, conv, 0)
		require.NoError(t, err)
		require.NoError(t, rt.Delete(ctx, conv))
		for range ch { // ended by the delete
		}
	}
	require.Eventually(t, func() bool { s, a := rt.hub.sizesForTesting(); return s+a == 0 }, time.Minute, time.Millisecond,
		"deleted: nothing held")
}
