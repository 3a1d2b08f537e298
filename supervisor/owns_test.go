package supervisor

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

// TestPanickingOwnsLeavesTheSupervisorRunning: Config.Owns is user code,
// asked on the supervisor actor's goroutine (a re-wake) and on a caller's
// (Ask's later attempts). Its panic used to restart the supervisor actor
// (which stopped every conversation and left the supervisor answering
// nothing) or to escape from Ask into its caller. It is recovered: the
// re-wake counts the conversation as owned and wakes it, Ask answers an
// error wrapping agent.ErrPanicked, and the other conversations live on.
func TestPanickingOwnsLeavesTheSupervisorRunning(t *testing.T) {
	system := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	model := scripted.New(scripted.Options{})
	s, err := Start(system, Config{
		Store:       memjournal.New(memjournal.Options{}),
		Agent:       func(string) actors.ConversationConfig { return actors.ConversationConfig{Model: model} },
		CallTimeout: 5 * time.Second,
		Owns: func(id string) bool {
			if strings.HasPrefix(id, "boom") {
				panic("membership unknown")
			}
			return true
		},
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		s.Stop()
		system.Shutdown()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	wake := &actors.Command{Msg: &messages.AgentWake{}}
	_, err = s.Ask(ctx, "ok", wake)
	require.NoError(t, err)

	s.system.Root.Send(s.pid, &rewake{conversation: "boom"})
	require.Eventually(t, func() bool { return s.IsActive("boom") }, 10*time.Second, time.Millisecond,
		"the re-wake counted the conversation as owned")
	require.True(t, s.IsActive("ok"), "the supervisor actor did not restart")
	_, err = s.Ask(ctx, "ok", wake)
	require.NoError(t, err, "the supervisor still answers")

	// An activation that retires and tells Ask to retry: the retry asks
	// Owns, which panics.
	a, mine, wait := s.reg.claim("boom-retry")
	require.True(t, mine)
	require.Nil(t, wait)
	retiring := system.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		if _, ok := c.Message().(*actors.Command); ok {
			s.reg.retire(a, 0, true)
			s.reg.terminated(c.Self())
			c.Respond(&messages.AgentReply{Retry: true})
		}
	}))
	s.reg.spawned(a, func(*activation) (*actor.PID, error) { return retiring, nil })
	_, err = s.Ask(ctx, "boom-retry", wake)
	require.ErrorIs(t, err, agent.ErrPanicked)
	require.ErrorIs(t, err, ErrNoAnswer, "the command was handed over")
	require.NoError(t, ctx.Err(), "answered at once")
	require.False(t, s.IsActive("boom-retry"), "nothing was spawned")
}
