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

func startForTest(t *testing.T) *Supervisor {
	t.Helper()
	system := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	model := scripted.New(scripted.Options{})
	s, err := Start(system, Config{
		Store:       memjournal.New(memjournal.Options{}),
		Agent:       func(string) actors.ConversationConfig { return actors.ConversationConfig{Model: model} },
		CallTimeout: 5 * time.Second,
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		s.Stop()
		system.Shutdown()
	})
	return s
}

// TestDeliveryWhileAnOutsiderSpawns: the supervisor actor delivers a re-wake
// to a conversation whose activation a caller outside is still spawning
// (claimed, its spawn request queued behind the re-wake, no pid yet). It
// must neither wait nor send to the missing pid (a panic that restarted the
// supervisor and stopped every conversation, which then answered nothing):
// the wake reaches the activation once it is ready, and the conversation
// keeps answering.
func TestDeliveryWhileAnOutsiderSpawns(t *testing.T) {
	s := startForTest(t)
	a, mine, wait := s.reg.claim("c")
	require.True(t, mine)
	require.Nil(t, wait)
	s.system.Root.Send(s.pid, &rewake{conversation: "c"})
	s.reg.spawned(a, s.spawnFromOutside)
	require.NoError(t, a.err)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := s.Ask(ctx, "c", &actors.Command{Msg: &messages.AgentWake{}})
	require.NoError(t, err, "the conversation still answers")
	require.Nil(t, res.(*messages.AgentReply).GetError())
	require.True(t, s.IsActive("c"))
	require.Eventually(t, func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.sent == 2
	}, 5*time.Second, time.Millisecond, "the activation got the re-wake as well as the Ask")
}
