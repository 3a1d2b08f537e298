package lazarus_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

// hangingEvents is an in-memory Store whose reads of one conversation's
// events hang until their context ends (a Store that does not answer).
type hangingEvents struct {
	journal.Store
	conv    string
	entered chan struct{}
}

func (s *hangingEvents) Events(ctx context.Context, conv string, q journal.EventQuery) ([]*messages.Event, error) {
	if conv != s.conv {
		return s.Store.Events(ctx, conv, q)
	}
	select {
	case s.entered <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestCloseEndsASubscriptionsCatchUpRead: a subscription whose context
// never ends, its catch-up read of the Store hanging, is ended by Close,
// which returns; the read ran under the subscriber's context alone, and
// Close waited for it for good. The subscription's channel closes without
// reporting the read Close cut as an error.
func TestCloseEndsASubscriptionsCatchUpRead(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store := &hangingEvents{Store: memjournal.New(memjournal.Options{}), conv: "held", entered: make(chan struct{}, 1)}
	rt, err := lazarus.Open(lazarus.Options{Store: store, Model: scripted.New(scripted.Options{}), IdleTimeout: -1})
	require.NoError(t, err)
	closing := false
	defer func() {
		if !closing { // a Close that hangs is not waited for again
			_ = rt.Close()
		}
	}()
	sub, err := rt.Subscribe(context.Background(), "held", 0) // never ends
	require.NoError(t, err)
	select {
	case <-store.entered:
	case <-ctx.Done():
		t.Fatal("the catch-up read never reached the Store")
	}
	closed := make(chan error, 1)
	closing = true
	go func() { closed <- rt.Close() }()
	require.NoError(t, await(t, closed, "Close"))
	for u := range sub {
		t.Fatalf("an update after Close: %+v", u)
	}
}

// hangingDeadlines is an in-memory Store whose listing of deadlines (the
// expiry actor's rebuild) hangs until its context ends, as a listing of
// millions does for seconds.
type hangingDeadlines struct {
	journal.Store
	entered  chan struct{}
	returned chan struct{} // closed when the listing returns
	release  chan struct{} // closed when the test ends
}

func (s *hangingDeadlines) Deadlines(ctx context.Context, before time.Time, f func(*messages.Deadline) error) error {
	s.entered <- struct{}{}
	defer close(s.returned)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-s.release:
		return context.Canceled
	}
}

// TestCloseCutsTheExpiryRebuild: a Close while the expiry actor rebuilds
// its timers from the Store (after Open, or a cluster's membership change)
// cuts the rebuild and returns: the rebuild ran under
// context.Background in the actor's Receive, and Close, stopping the
// actor, waited for it to list every deadline (about 1.2 s a million; up
// to the 10 s of the stop's future, after which the rebuild ran on after
// Close). Nothing is lost: the next Open rebuilds.
func TestCloseCutsTheExpiryRebuild(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store := &hangingDeadlines{Store: memjournal.New(memjournal.Options{}), entered: make(chan struct{}, 1),
		returned: make(chan struct{}), release: make(chan struct{})}
	defer close(store.release)
	rt, err := lazarus.Open(lazarus.Options{Store: store, Model: scripted.New(scripted.Options{})})
	require.NoError(t, err)
	closing := false
	defer func() {
		if !closing { // a Close that hangs is not waited for again
			_ = rt.Close()
		}
	}()
	select {
	case <-store.entered:
	case <-ctx.Done():
		t.Fatal("the expiry actor never read the deadlines")
	}
	closed := make(chan error, 1)
	closing = true
	go func() { closed <- rt.Close() }()
	require.NoError(t, await(t, closed, "Close"))
	select {
	case <-store.returned:
	default:
		t.Fatal("the rebuild runs on after Close")
	}
}
