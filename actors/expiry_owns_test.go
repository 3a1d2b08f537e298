package actors_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
)

// An expiry actor arms only the deadlines its member owns (ExpiryOptions.Owns),
// from the Store and from ScheduleExpiry; after the ownership changes,
// ExpiryRebuild arms what it owns now, read from the Store.
func TestExpiryArmsOnlyOwnedDeadlines(t *testing.T) {
	store := memjournal.New(memjournal.Options{})
	pendingHumanCall(t, store, "mine", "call-mine", expiryT0.Add(time.Minute))
	pendingHumanCall(t, store, "theirs", "call-theirs", expiryT0.Add(30*time.Second))
	var theirsToo atomic.Bool
	h := newExpiryHarness(t, store, withRealJournal(t, store))
	h.opts.Owns = func(conv string) bool { return conv == "mine" || theirsToo.Load() }
	h.start()
	h.waitArmed(t, expiryT0.Add(time.Minute))
	// A deadline scheduled for a conversation of another member is not armed.
	h.schedule("theirs", "call-theirs", expiryT0.Add(20*time.Second))
	h.clock.Advance(time.Minute)
	require.Equal(t, delivery{"mine", "call-mine"}, h.nextDelivery(t))
	requireExpired(t, store, "call-mine")
	// Had it been armed, its expire (due earlier, so sent first to the same
	// journal actor) would have committed before or with the one delivered.
	require.Equal(t, []string{"call-theirs"}, storedDeadlines(t, store), "a deadline of another member's conversation fired")
	require.Empty(t, h.deliveries)

	// The membership changed: this member owns "theirs" now.
	theirsToo.Store(true)
	h.sys.Root.Send(h.pid, &actors.ExpiryRebuild{})
	require.Equal(t, delivery{"theirs", "call-theirs"}, h.nextDelivery(t))
	requireExpired(t, store, "call-theirs")
}

// An expire in flight when the membership changes keeps its reply: once
// the journal says it was written, its resolution is delivered, whether
// this member still owns the conversation or not (ExpiryRebuild dropped
// the expires in flight with the timers, so a call expired durably and
// its turn never went on: the conversation's live activation still
// awaited it, and the owner's resume scan could read the row before the
// expire marked it ACTIVE). One whose conversation this member no longer
// owns is not sent again after a failure: its owner's expiry actor holds
// the deadline.
func TestExpiryInFlightSurvivesRebuild(t *testing.T) {
	for _, c := range []struct {
		name    string
		moved   bool
		outcome error
	}{{"kept", false, nil}, {"moved", true, nil}, {"moved-failed", true, errors.New("connection reset")}} {
		t.Run(c.name, func(t *testing.T) {
			store := memjournal.New(memjournal.Options{})
			pendingHumanCall(t, store, "conv", "call", expiryT0)
			var j *fakeJournal
			h := newExpiryHarness(t, store, func(sys *actor.ActorSystem) *actor.PID {
				j = newFakeJournal(t, sys, nil)
				return j.pid
			})
			var gone atomic.Bool
			h.opts.Owns = func(conv string) bool { return conv == "other" || !gone.Load() }
			h.start()
			first := j.next(t)
			require.Equal(t, "call", resolvedCall(t, first.w))
			gone.Store(c.moved)
			// Handled before the reply: both are sent from here.
			h.sys.Root.Send(h.pid, &actors.ExpiryRebuild{})
			if !c.moved {
				// The rebuild reads the deadline again (the expire is
				// not written yet) and sends another attempt.
				second := j.next(t)
				require.Equal(t, "call", resolvedCall(t, second.w))
				j.answer(first, nil)
				require.Equal(t, delivery{"conv", "call"}, h.nextDelivery(t))
				j.answer(second, journal.ErrStale)
				require.Eventually(t, func() bool { return h.clock.Timers() == 0 }, replyWait, time.Millisecond)
				require.Empty(t, h.deliveries, "delivered once")
				return
			}
			j.answer(first, c.outcome)
			if c.outcome == nil {
				require.Equal(t, delivery{"conv", "call"}, h.nextDelivery(t))
				return
			}
			// No retry armed: the next timer is another conversation's.
			h.schedule("other", "call-other", expiryT0.Add(time.Hour))
			h.waitArmed(t, expiryT0.Add(time.Hour))
			j.requireNone(t)
			require.Empty(t, h.deliveries)
		})
	}
}
