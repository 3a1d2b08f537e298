package crash

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

// failingReads is a Store whose revival reads fail once failed is set, as
// a Pebble store's do after a fatal I/O error.
type failingReads struct {
	journal.Store
	failed atomic.Bool
}

var errReadFailed = fmt.Errorf("crash: injected read failure; reopen the store: %w", journal.ErrClosed)

func (s *failingReads) Conversation(ctx context.Context, id string) (*messages.Conversation, error) {
	if s.failed.Load() {
		return nil, errReadFailed
	}
	return s.Store.Conversation(ctx, id)
}

func (s *failingReads) LoadSince(ctx context.Context, id string) (*messages.Summary, []*messages.Event, error) {
	if s.failed.Load() {
		return nil, nil, errReadFailed
	}
	return s.Store.LoadSince(ctx, id)
}

// openFailingRevival returns a Runtime whose conversation "c" exists but
// can no longer be revived: its store refuses revival reads, as a Pebble
// store does after a fatal I/O error.
func openFailingRevival(t *testing.T, callTimeout time.Duration) *lazarus.Runtime {
	store := &failingReads{Store: memjournal.New(memjournal.Options{})}
	rt, err := lazarus.Open(lazarus.Options{Store: store, Model: scripted.New(scripted.Options{}),
		IdleTimeout: -1, NoResume: true, CallTimeout: callTimeout})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, closeWithin(t, "Runtime.Close", rt.Close)) })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = rt.Send(ctx, "c", "hello", agent.Scope{UserID: "u"})
	require.NoError(t, err)
	require.True(t, rt.Kill("c"))
	store.failed.Store(true)
	return rt
}

// sendWithin sends to "c" and returns Send's error, failing the test if
// Send does not return within bound.
func sendWithin(t *testing.T, rt *lazarus.Runtime, bound time.Duration, i int) error {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := rt.Send(ctx, "c", "again", agent.Scope{UserID: "u"})
		errc <- err
	}()
	timer := time.NewTimer(bound)
	defer timer.Stop()
	select {
	case err := <-errc:
		return err
	case <-timer.C:
		t.Fatalf("send %d to a conversation that cannot be revived did not return within %v", i, bound)
		return nil
	}
}

// TestFailedRevivalNeverWedgesItsID: an activation whose revival fails
// stops at once, possibly before the goroutine that asked for it has
// registered it. The supervisor must still learn that it terminated;
// otherwise every later command to the id waits forever for a predecessor
// that is gone (ignoring its context). Each send here must return within a
// few call timeouts, whatever it returns.
func TestFailedRevivalNeverWedgesItsID(t *testing.T) {
	rt := openFailingRevival(t, 200*time.Millisecond)
	for i := range 100 {
		require.Error(t, sendWithin(t, rt, 10*time.Second, i))
	}
}

// TestFailedRevivalRefusesPromptly: every command to a conversation that
// cannot be revived fails promptly with the store's error (here one
// wrapping journal.ErrClosed), time after time. A command that reaches the
// actor's mailbox while it stops must be answered, not dropped (which would
// leave its caller waiting for the whole call timeout, then failing with a
// timeout that says nothing of the cause).
func TestFailedRevivalRefusesPromptly(t *testing.T) {
	rt := openFailingRevival(t, 0) // the default call timeout: 30s
	for i := range 100 {
		require.ErrorIs(t, sendWithin(t, rt, 10*time.Second, i), journal.ErrClosed, "send %d", i)
	}
}
