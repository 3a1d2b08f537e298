package supervisor

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
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

// heldAppends holds every write, once armed, until released; held is
// closed when the first one arrives.
type heldAppends struct {
	journal.Store
	armed   atomic.Bool
	held    chan struct{}
	release chan struct{}
	once    sync.Once
}

func (s *heldAppends) hold() {
	if s.armed.Load() {
		s.once.Do(func() { close(s.held) })
		<-s.release
	}
}

func (s *heldAppends) Append(ctx context.Context, req *messages.AppendRequest) (journal.AppendResult, error) {
	s.hold()
	return s.Store.Append(ctx, req)
}

func (s *heldAppends) AppendBatch(ctx context.Context, reqs []*messages.AppendRequest) []journal.AppendResult {
	s.hold()
	return s.Store.AppendBatch(ctx, reqs)
}

// TestStopUnownedSendsNoCommandToANewActivation: StopUnowned stops the
// activation of a conversation this node no longer owns while a send's
// write is in flight on it. The send's Ask, told to retry, spawns no new
// activation here (which would run the conversation beside its owner): it
// ends with ErrMoved, and ErrNoAnswer (its write may land), and the
// conversation has no activation here any more. It sent the command again
// to a new activation here.
func TestStopUnownedSendsNoCommandToANewActivation(t *testing.T) {
	var owned atomic.Bool
	owned.Store(true)
	owns := func(string) bool { return owned.Load() }
	store := &heldAppends{Store: memjournal.New(memjournal.Options{}), held: make(chan struct{}), release: make(chan struct{})}
	system := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	model := scripted.New(scripted.Options{})
	s, err := Start(system, Config{
		Store:       store,
		Agent:       func(string) actors.ConversationConfig { return actors.ConversationConfig{Model: model} },
		CallTimeout: 10 * time.Second,
		Owns:        owns,
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		close(store.release)
		s.Stop()
		system.Shutdown()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err = s.Ask(ctx, "c", &actors.Command{Msg: &messages.AgentWake{}})
	require.NoError(t, err)
	require.Equal(t, 0, s.StopUnowned(owns), "owned: nothing stops")
	require.True(t, s.IsActive("c"))

	store.armed.Store(true)
	done := make(chan error, 1)
	go func() {
		_, err := s.Ask(ctx, "c", &actors.Command{Msg: &messages.AgentSend{RequestId: "r1", Message: &messages.UserMessage{
			Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: "hi"}}}}}})
		done <- err
	}()
	select {
	case <-store.held:
	case <-ctx.Done():
		t.Fatal("the send's write never reached the Store")
	}
	owned.Store(false)
	require.Equal(t, 1, s.StopUnowned(owns))
	select {
	case err = <-done:
	case <-ctx.Done():
		t.Fatal("the send's Ask did not return")
	}
	require.ErrorIs(t, err, ErrMoved)
	require.ErrorIs(t, err, ErrNoAnswer, "its write may land")
	require.Eventually(t, func() bool { return s.reg.lookup("c") == nil }, 10*time.Second, time.Millisecond,
		"an activation of the moved conversation is still registered")
	require.False(t, s.IsActive("c"))
}

// TestStopUnownedStopsAnActivationStillSpawning: an activation claimed but
// not yet spawned when StopUnowned runs is retired at once (no command
// reaches it) and gets its kill order once its actor exists; one of an
// owned conversation is left alone. A claim with owns that rejects the id
// creates nothing.
func TestStopUnownedStopsAnActivationStillSpawning(t *testing.T) {
	r := newRegistry()
	var spawns atomic.Int64
	owns := func(id string) bool { return id == "mine" }
	kept, err := r.ensure(t.Context(), "mine", pidSpawner(&spawns))
	require.NoError(t, err)
	a, mine, wait := r.claim("c")
	require.True(t, mine)
	require.Nil(t, wait)

	stopped := make(chan *actor.PID, 2)
	later := make(chan func(), 1)
	require.Equal(t, 1, r.stopUnowned(owns, func(pid *actor.PID) { stopped <- pid }, func(f func()) { later <- f }))
	require.False(t, r.isLive("c"))
	require.True(t, r.isLive("mine"))
	require.ErrorIs(t, r.send(a, func(*actor.PID) {}), errRetired)
	require.Len(t, stopped, 0, "no actor to tell yet")

	f := <-later
	go f()
	r.spawned(a, pidSpawner(&spawns))
	select {
	case pid := <-stopped:
		require.Equal(t, a.pid.String(), pid.String())
	case <-time.After(10 * time.Second):
		t.Fatal("the activation spawned after the stop got no kill order")
	}
	require.NoError(t, r.send(kept, func(*actor.PID) {}))

	got, mine, wait, moved := r.claimOwned("c", owns)
	require.Nil(t, got)
	require.False(t, mine)
	require.NotNil(t, wait, "the stopped activation is still registered until it terminates")
	require.False(t, moved)
	r.terminated(a.pid)
	got, mine, wait, moved = r.claimOwned("c", owns)
	require.Nil(t, got)
	require.False(t, mine)
	require.Nil(t, wait)
	require.True(t, moved, "no activation of an id owns rejects")
	_, err = r.ensureOwned(t.Context(), "c", owns, pidSpawner(&spawns))
	require.ErrorIs(t, err, ErrMoved)
	require.Equal(t, int64(2), spawns.Load())
}

// TestStopUnownedRecoversAPanicOfOwns: a panic of StopUnowned's owns does
// not reach its caller; it counts that conversation as owned (its actor
// keeps running), as a panic of Config.Owns does elsewhere, and the other
// conversations are judged as usual.
func TestStopUnownedRecoversAPanicOfOwns(t *testing.T) {
	s := startForTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, id := range []string{"panics", "moved", "kept"} {
		_, err := s.Ask(ctx, id, &actors.Command{Msg: &messages.AgentWake{}})
		require.NoError(t, err)
	}
	owns := func(id string) bool {
		if id == "panics" {
			panic("owns: injected")
		}
		return id == "kept"
	}
	var n int
	require.NotPanics(t, func() { n = s.StopUnowned(owns) })
	require.Equal(t, 1, n, "only the conversation owns rejected")
	require.True(t, s.IsActive("panics"), "a panic of owns counts as owned")
	require.True(t, s.IsActive("kept"))
	require.False(t, s.IsActive("moved"))
	_, err := s.Ask(ctx, "panics", &actors.Command{Msg: &messages.AgentWake{}})
	require.NoError(t, err, "the supervisor still answers")
}
