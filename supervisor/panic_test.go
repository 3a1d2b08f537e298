package supervisor

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/messages"
)

// TestSupervisorActorSurvivesAPanic: a panic in the supervisor actor's
// Receive (a bug) must not restart it. A restart stopped the journal and
// expiry actors and every conversation, and its Started closed the started
// channel a second time and panicked again, until protoactor gave up and
// the runtime answered nothing. The message is dropped (a spawn request is
// answered with an error), and everything else goes on as before.
func TestSupervisorActorSurvivesAPanic(t *testing.T) {
	s := startForTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wake := &actors.Command{Msg: &messages.AgentWake{}}
	_, err := s.Ask(ctx, "live", wake)
	require.NoError(t, err)
	live := s.reg.lookup("live")
	journalPID, expiryPID := s.journal, s.expiry

	// A delivery that panics.
	var once sync.Once
	panicked := make(chan struct{})
	s.beforeSend = func(*activation) {
		once.Do(func() {
			close(panicked)
			panic("injected")
		})
	}
	s.system.Root.Send(s.pid, &rewake{conversation: "other"})
	select {
	case <-panicked:
	case <-time.After(time.Minute):
		t.Fatal("the injected panic never ran")
	}
	// A spawn request that panics (no activation) is answered.
	res, err := s.system.Root.RequestFuture(s.pid, &spawnAgent{}, 5*time.Second).Result()
	require.NoError(t, err)
	require.ErrorIs(t, res.(*spawnReply).err, agent.ErrPanicked)

	// Nothing was stopped, and the runtime still answers.
	require.Same(t, live, s.reg.lookup("live"), "the live conversation was not stopped")
	require.True(t, s.IsActive("live"))
	for _, pid := range []*actor.PID{journalPID, expiryPID} {
		_, alive := s.system.ProcessRegistry.GetLocal(pid.Id)
		require.True(t, alive, "%s was stopped", pid.Id)
	}
	for _, id := range []string{"live", "other", "new"} {
		res, err := s.Ask(ctx, id, wake)
		require.NoError(t, err, id)
		require.Nil(t, res.(*messages.AgentReply).GetError(), id)
	}
	require.Same(t, live, s.reg.lookup("live"))
	_, err = s.system.Root.RequestFuture(s.journal, &messages.JournalWrite{RequestId: 1}, 5*time.Second).Result()
	require.NoError(t, err, "the journal actor answers")
}
