package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

// TestDeleteHoldsBackActivations: while Delete's write runs, the
// conversation's actor is gone and no activation can be claimed (a caller
// would wait); when the write fails, a delivery the supervisor actor got
// meanwhile goes out once Delete returns.
func TestDeleteHoldsBackActivations(t *testing.T) {
	s := startForTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := s.Ask(ctx, "c", &actors.Command{Msg: &messages.AgentWake{}})
	require.NoError(t, err)
	require.True(t, s.IsActive("c"))

	boom := errors.New("boom")
	ran := false
	err = s.Delete(ctx, "c", func(context.Context) error {
		ran = true
		require.False(t, s.IsActive("c"), "the actor is stopped before the write")
		a, mine, wait := s.reg.claim("c")
		require.Nil(t, a)
		require.False(t, mine)
		require.NotNil(t, wait, "a caller waits for the delete")
		s.system.Root.Send(s.pid, &rewake{conversation: "c"})
		return boom
	})
	require.ErrorIs(t, err, boom)
	require.True(t, ran)
	require.Eventually(t, func() bool { return s.IsActive("c") }, 5*time.Second, time.Millisecond,
		"the delivery held back during the failed delete goes out after it")
}

// TestDeleteDropsWhatWaitedOnIt: once the delete succeeded, neither a
// delivery held back during it nor a later caller revives the deleted
// conversation: the delivery is dropped, the caller is told it was deleted.
func TestDeleteDropsWhatWaitedOnIt(t *testing.T) {
	s := startForTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := s.Ask(ctx, "c", &actors.Command{Msg: &messages.AgentWake{}})
	require.NoError(t, err)

	asked := make(chan error, 1)
	err = s.Delete(ctx, "c", func(context.Context) error {
		s.system.Root.Send(s.pid, &rewake{conversation: "c"})
		go func() {
			_, err := s.Ask(ctx, "c", &actors.Command{Msg: &messages.AgentWake{}})
			asked <- err
		}()
		require.Eventually(t, func() bool {
			s.reg.mu.Lock()
			defer s.reg.mu.Unlock()
			return len(s.reg.blocked) == 1
		}, 5*time.Second, time.Millisecond)
		return nil
	})
	require.NoError(t, err)
	require.ErrorIs(t, <-asked, journal.ErrDeleted, "a caller that waited on the delete")
	_, err = s.Ask(ctx, "c", &actors.Command{Msg: &messages.AgentWake{}})
	require.ErrorIs(t, err, journal.ErrDeleted, "a caller after it")

	// The supervisor actor handles its mailbox in order: once a later
	// delivery to another conversation has gone out, the held-back one
	// to c has been handled too.
	s.system.Root.Send(s.pid, &rewake{conversation: "d"})
	require.Eventually(t, func() bool { return s.IsActive("d") }, 5*time.Second, time.Millisecond)
	require.False(t, s.IsActive("c"), "the held-back delivery was dropped")
	require.Equal(t, 1, s.Active(), "only d is live")
}

// TestRegistryForgetsTheOldestDeleted: the registry keeps goneKept
// deleted ids, and forgets the oldest first.
func TestRegistryForgetsTheOldestDeleted(t *testing.T) {
	r := newRegistry()
	r.mu.Lock()
	for i := range goneKept + 1 {
		r.forget(fmt.Sprintf("c%d", i))
	}
	r.forget("c5") // known: not recorded twice
	r.mu.Unlock()
	require.Len(t, r.gone, goneKept)
	a, mine, wait := r.claim("c0")
	require.True(t, mine, "the oldest was forgotten")
	require.NotNil(t, a)
	require.Nil(t, wait)
	a, mine, wait = r.claim("c1")
	require.Nil(t, a)
	require.False(t, mine)
	require.Nil(t, wait, "c1 is still known as deleted")
}

// TestDeleteReturnsTheWriteError: a failed write is Delete's error, and
// the conversation is usable again afterwards.
func TestDeleteReturnsTheWriteError(t *testing.T) {
	s := startForTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	boom := errors.New("boom")
	require.ErrorIs(t, s.Delete(ctx, "c", func(context.Context) error { return boom }), boom)
	_, err := s.Ask(ctx, "c", &actors.Command{Msg: &messages.AgentWake{}})
	require.NoError(t, err)
	s.Stop()
	require.ErrorIs(t, s.Delete(ctx, "c", func(context.Context) error { return nil }), ErrStopped)
}

// heldStore is a memory Store whose AppendBatch waits until release is
// closed, telling held when it starts waiting.
type heldStore struct {
	*memjournal.Store
	held    chan struct{}
	release chan struct{}
}

func (s *heldStore) AppendBatch(ctx context.Context, reqs []*messages.AppendRequest) []journal.AppendResult {
	select {
	case s.held <- struct{}{}:
	default:
	}
	<-s.release
	return s.Store.AppendBatch(ctx, reqs)
}

// TestDeleteEndsWithItsContextWhileAWriteIsHeld: a Delete whose ctx ends
// while it waits for the journal actor to answer the conversation's writes
// (one is held in the Store) returns at once with an error wrapping ctx's,
// as its doc says: it waited out the call timeout, then returned a
// timeout of its own that wrapped nothing.
func TestDeleteEndsWithItsContextWhileAWriteIsHeld(t *testing.T) {
	store := &heldStore{Store: memjournal.New(memjournal.Options{}), held: make(chan struct{}, 1), release: make(chan struct{})}
	system := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	model := scripted.New(scripted.Options{})
	s, err := Start(system, Config{
		Store:       store,
		Agent:       func(string) actors.ConversationConfig { return actors.ConversationConfig{Model: model} },
		CallTimeout: time.Minute,
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		close(store.release)
		s.Stop()
		system.Shutdown()
	})

	// A write of c the journal actor holds, so its barrier waits.
	go func() {
		_, _ = s.Request(context.Background(), s.journal, &messages.JournalWrite{RequestId: 1, Request: &messages.AppendRequest{
			ConversationId: "c", Unfenced: true, Settings: map[string]string{"k": "v"}}})
	}()
	<-store.held

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	ran := false
	go func() {
		done <- s.Delete(ctx, "c", func(context.Context) error { ran = true; return nil })
	}()
	require.Eventually(t, func() bool {
		s.reg.mu.Lock()
		defer s.reg.mu.Unlock()
		return len(s.reg.blocked) == 1
	}, 5*time.Second, time.Millisecond, "Delete started")
	cancel()
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(10 * time.Second):
		t.Fatal("Delete did not return when its context ended")
	}
	require.False(t, ran, "nothing was deleted")
}

// TestDeleteEndedByItsContextNamesTheConversation: a Delete whose ctx ends
// while another delete of the same conversation holds it returns an error
// wrapping ctx's that names the conversation, as Delete's other errors do
// (it was ctx's error alone); the first delete is not disturbed.
func TestDeleteEndedByItsContextNamesTheConversation(t *testing.T) {
	s := startForTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	inDel, release := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		first <- s.Delete(ctx, "conv-held", func(context.Context) error {
			close(inDel)
			<-release
			return nil
		})
	}()
	<-inDel
	inner, stop := context.WithCancel(ctx)
	second := &doneWatch{Context: inner, asked: make(chan struct{})}
	done := make(chan error, 1)
	go func() {
		done <- s.Delete(second, "conv-held", func(context.Context) error { return errors.New("the second delete ran") })
	}()
	<-second.asked // it waits for the first delete, past its check of ctx
	stop()
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.Canceled)
		require.Contains(t, err.Error(), `supervisor: delete "conv-held"`)
	case <-time.After(10 * time.Second):
		t.Fatal("Delete did not return when its context ended")
	}
	close(release)
	require.NoError(t, <-first)
}

// doneWatch is a context that tells asked when its Done is first called:
// a Delete calls it once it waits for another hold of its conversation.
type doneWatch struct {
	context.Context
	once  sync.Once
	asked chan struct{}
}

func (c *doneWatch) Done() <-chan struct{} {
	c.once.Do(func() { close(c.asked) })
	return c.Context.Done()
}
