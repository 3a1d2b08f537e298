package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/actors/actorstest"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal/memjournal"
)

// sizes is what a Supervisor holds per conversation: none of it may grow
// with the conversations it ever served.
type sizes struct{ byID, byPID, blocked, gone, models, tools int }

func (s *Supervisor) sizesForTesting() sizes {
	s.reg.mu.Lock()
	z := sizes{byID: len(s.reg.byID), byPID: len(s.reg.byPID), blocked: len(s.reg.blocked), gone: len(s.reg.gone)}
	s.reg.mu.Unlock()
	z.models = s.models.InFlightForTesting()
	z.tools = s.tools.InFlightForTesting()
	return z
}

// TestSupervisorHoldsNothingOfFinishedConversations: a thousand
// conversations each run a turn, then passivate (IdleTimeout on a manual
// clock), then half of them are deleted: the registry holds no activation
// of any of them, no hold of a delete, and remembers the deleted ids
// (bounded by goneKept); the model and tool gates hold nothing.
func TestSupervisorHoldsNothingOfFinishedConversations(t *testing.T) {
	const n = 1000
	clock := actorstest.NewManualClock(time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC))
	model := scripted.New(scripted.Options{Chunk: 2})
	system := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	t.Cleanup(system.Shutdown)
	s, err := Start(system, Config{
		Store:       memjournal.New(memjournal.Options{}),
		Clock:       clock,
		CallTimeout: time.Minute,
		Agent: func(string) actors.ConversationConfig {
			return actors.ConversationConfig{Model: model, IdleTimeout: time.Minute}
		},
	})
	require.NoError(t, err)
	t.Cleanup(s.Stop)
	require.Equal(t, sizes{}, s.sizesForTesting(), "baseline")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	for i := range n {
		_, err := s.Ask(ctx, fmt.Sprintf("c%d", i), sendCmd("hi"))
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return clock.Timers() == n }, time.Minute, time.Millisecond, "every conversation idle")
	clock.Advance(time.Minute)
	require.Eventually(t, func() bool { return s.sizesForTesting() == sizes{} }, time.Minute, time.Millisecond,
		"passivated: nothing held (%+v)", s.sizesForTesting())

	for i := range n / 2 {
		require.NoError(t, s.Delete(ctx, fmt.Sprintf("c%d", i), func(context.Context) error { return nil }))
	}
	require.Equal(t, sizes{gone: n / 2}, s.sizesForTesting(), "deleted: only the ids kept to refuse a wake")
}

// TestDeliveryDeferredBehindAFailedSpawnGoesOut: a delivery (an expiry)
// that meets an activation retired while it is still being spawned
// (StopUnowned, a membership change) waits in the supervisor actor for
// that activation to terminate. Its spawn then fails: no actor ever ran,
// so no Terminated comes, and the delivery was kept for good (one list
// per such conversation) and never sent. It goes out once the spawn has
// failed, to a new activation.
func TestDeliveryDeferredBehindAFailedSpawnGoesOut(t *testing.T) {
	s := startForTest(t)
	a, mine, wait := s.reg.claim("c")
	require.True(t, mine)
	require.Nil(t, wait)
	require.Equal(t, 1, s.reg.stopUnowned(func(string) bool { return false }, func(*actor.PID) {}, func(f func()) { go f() }))
	// The delivery finds the activation retired and registered: deferred.
	s.system.Root.Send(s.pid, &expired{conversation: "c", toolCallID: "call-1"})
	// A wake of another conversation, sent after it, is handled after it.
	s.system.Root.Send(s.pid, &rewake{conversation: "d"})
	require.Eventually(t, func() bool { return s.IsActive("d") }, 10*time.Second, time.Millisecond)
	require.False(t, s.IsActive("c"))

	s.reg.spawned(a, func(*activation) (*actor.PID, error) { return nil, errors.New("spawn failed") })
	require.ErrorContains(t, a.err, "spawn failed")
	require.Eventually(t, func() bool { return s.IsActive("c") }, 10*time.Second, time.Millisecond,
		"the deferred delivery went out to a new activation")
}
