package supervisor

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

// TestAskWhoseContextEndsDuringItsSpawn: an Ask that spawns the
// conversation's activation used to wait for that spawn whatever its
// context (up to CallTimeout, here an hour: the spawn is held in
// Config.Agent). It returns its context's error at once, nothing handed
// over; the spawn completes without it, and the activation is the one a
// later Ask uses: one activation, answering.
func TestAskWhoseContextEndsDuringItsSpawn(t *testing.T) {
	system := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	model := scripted.New(scripted.Options{})
	entered, hold := make(chan struct{}, 1), make(chan struct{})
	s, err := Start(system, Config{
		Store: memjournal.New(memjournal.Options{}),
		Agent: func(string) actors.ConversationConfig {
			select {
			case entered <- struct{}{}:
				<-hold
			default:
			}
			return actors.ConversationConfig{Model: model}
		},
		CallTimeout: time.Hour,
	})
	require.NoError(t, err)
	released := false
	release := func() {
		if !released {
			released = true
			close(hold)
		}
	}
	t.Cleanup(func() {
		release()
		s.Stop()
		system.Shutdown()
	})

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := s.Ask(ctx, "c", &actors.Command{Msg: &messages.AgentWake{}})
		done <- err
	}()
	select { // the spawn is under way, held in Config.Agent
	case <-entered:
	case <-time.After(time.Minute):
		t.Fatal("Config.Agent was never called")
	}
	cancel()
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.Canceled)
		require.NotErrorIs(t, err, ErrNoAnswer, "nothing was handed over")
	case <-time.After(10 * time.Second):
		t.Fatal("Ask still waits for its spawn after its context ended")
	}

	release()
	require.Eventually(t, func() bool { return s.IsActive("c") }, 10*time.Second, time.Millisecond,
		"the spawn completed without its caller")
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = s.Ask(ctx, "c", &actors.Command{Msg: &messages.AgentWake{}})
	require.NoError(t, err)
	require.Equal(t, 1, s.Active())
}
