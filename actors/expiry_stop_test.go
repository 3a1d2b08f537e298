package actors_test

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

// slowRebuild is a Store whose listings of deadlines after the first hang
// until their context ends (or the test ends), as a listing of millions
// takes seconds.
type slowRebuild struct {
	journal.Store
	reads   atomic.Int32
	entered chan struct{}
	release chan struct{}
}

func (s *slowRebuild) Deadlines(ctx context.Context, dueBy time.Time, fn func(*messages.Deadline) error) error {
	if s.reads.Add(1) == 1 {
		return s.Store.Deadlines(ctx, dueBy, fn)
	}
	s.entered <- struct{}{}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-s.release:
		return context.Canceled
	}
}

// TestExpiryStopCutsARebuild: an expiry actor whose rebuild (here on
// ExpiryRebuild, a cluster's membership change) is reading the Store stops
// at once when its ExpiryOptions.Context ends, and logs no failure: the
// rebuild ran under context.Background in its Receive, so the stop waited
// for it to list every deadline.
func TestExpiryStopCutsARebuild(t *testing.T) {
	mem := memjournal.New(memjournal.Options{})
	store := &slowRebuild{Store: mem, entered: make(chan struct{}, 1), release: make(chan struct{})}
	t.Cleanup(func() { close(store.release) })
	pendingHumanCall(t, mem, "conv", "call", expiryT0.Add(time.Hour))
	h := newExpiryHarness(t, store, withRealJournal(t, mem))
	life, end := context.WithCancel(context.Background())
	defer end()
	h.opts.Context = life
	log := &errorLog{}
	h.opts.Logger = slog.New(log)
	h.start()
	h.waitArmed(t, expiryT0.Add(time.Hour))
	h.sys.Root.Send(h.pid, &actors.ExpiryRebuild{})
	select {
	case <-store.entered:
	case <-time.After(20 * time.Second):
		t.Fatal("the rebuild never read the Store")
	}
	end()
	stopped := make(chan error, 1)
	go func() { stopped <- h.sys.Root.StopFuture(h.pid).Wait() }()
	select {
	case err := <-stopped:
		require.NoError(t, err, "the stop waited for the rebuild")
	case <-time.After(20 * time.Second):
		t.Fatal("the stop waits for the rebuild")
	}
	require.Empty(t, log.lines(), "a rebuild cut as the actor stops is no failure")
	require.Equal(t, int32(2), store.reads.Load())
}
