package actors_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/actors"
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
