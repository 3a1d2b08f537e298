package supervisor

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

// TestActivatedCountsOnlySpawnedActors: Config.Activated is called for an
// activation whose actor was spawned, not for one whose spawn failed
// (here its actor's name is taken already): the command fails, nothing
// is counted, and the next command's activation is counted once.
func TestActivatedCountsOnlySpawnedActors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var activated atomic.Int64
	system := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	s, err := Start(system, Config{Store: memjournal.New(memjournal.Options{}), CallTimeout: 5 * time.Second,
		Activated: func() { activated.Add(1) },
		Agent: func(string) actors.ConversationConfig {
			return actors.ConversationConfig{Model: scripted.New(scripted.Options{})}
		}})
	require.NoError(t, err)
	t.Cleanup(func() {
		s.Stop()
		system.Shutdown()
	})
	// The first activation's actor is the supervisor's child conv-1.
	_, err = system.Root.SpawnNamed(actor.PropsFromFunc(func(actor.Context) {}), Name+"/conv-1")
	require.NoError(t, err)

	_, err = s.Ask(ctx, "c", &actors.Command{Msg: &messages.AgentWake{}})
	require.ErrorIs(t, err, actor.ErrNameExists)
	require.Zero(t, activated.Load(), "a spawn that failed is no activation")

	_, err = s.Ask(ctx, "c", &actors.Command{Msg: &messages.AgentWake{}})
	require.NoError(t, err)
	require.EqualValues(t, 1, activated.Load())
	require.EqualValues(t, 1, s.Active())
}
