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

// A Supervisor stopped and another started on the same actor system (a
// Runtime closed and opened again on an application's system) named its
// activations from the same counter, conv-1 first: a message still on its
// way to an activation of the first (a timer's tick sent as it stopped)
// reached the second's activation of that name, which took it for its own
// (a tick of the same generation). Now activation names are unique in the
// process: a message to the old PID is a dead letter.
func TestActivationNamesAreNotReusedOnTheSameSystem(t *testing.T) {
	system := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	t.Cleanup(system.Shutdown)
	store := memjournal.New(memjournal.Options{})
	model := scripted.New(scripted.Options{})
	start := func() *Supervisor {
		s, err := Start(system, Config{Store: store, CallTimeout: 5 * time.Second,
			Agent: func(string) actors.ConversationConfig { return actors.ConversationConfig{Model: model} }})
		require.NoError(t, err)
		return s
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pidOf := func(s *Supervisor) *actor.PID {
		_, err := s.Ask(ctx, "c", &actors.Command{Msg: &messages.AgentWake{}})
		require.NoError(t, err)
		s.reg.mu.Lock()
		defer s.reg.mu.Unlock()
		a := s.reg.byID["c"]
		require.NotNil(t, a)
		return a.pid
	}

	first := start()
	old := actor.NewPID(system.Address(), pidOf(first).GetId()) // as a late sender holds it
	first.Stop()
	second := start()
	defer second.Stop()
	cur := pidOf(second)

	// A command sent to the first Supervisor's activation is not run by
	// the second's.
	p := second.newReply()
	defer p.release()
	system.Root.RequestWithCustomSender(old, &actors.Command{Msg: &messages.AgentWake{}}, p.pid)
	_, err := p.wait(ctx)
	require.ErrorIs(t, err, actor.ErrDeadLetter, "a command to %s (the first Supervisor's activation) reached %s", old.GetId(), cur.GetId())
}
