package supervisor

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

// TestAskLiveNeverActivates: AskLive delivers a command to a live
// activation and returns its reply; with no live activation it says not
// delivered (ok false, no error) and spawns none; an activation that
// retires rather than apply the command (a stale wake) is not delivered
// to either. A bad id or a nil command is refused with journal.ErrInvalid,
// and after Stop it answers ErrStopped.
func TestAskLiveNeverActivates(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	model := agent.ModelFunc(func(context.Context, agent.Turn, func(string)) (*messages.AssistantMessage, error) {
		return agent.Text("ok"), nil
	})
	system := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	defer system.Shutdown()
	store := memjournal.New(memjournal.Options{})
	s, err := Start(system, Config{Store: store, CallTimeout: 5 * time.Second,
		Agent: func(string) actors.ConversationConfig {
			return actors.ConversationConfig{Model: model, IdleTimeout: -1, Publish: func(actors.Update) {}}
		},
	})
	require.NoError(t, err)
	wake := func(last uint64) *actors.Command { return &actors.Command{Msg: &messages.AgentWake{LogLast: last}} }

	// Not live: nothing delivered, nothing spawned.
	res, ok, err := s.AskLive(ctx, "c", wake(0))
	require.NoError(t, err)
	require.False(t, ok)
	require.Nil(t, res)
	require.False(t, s.IsActive("c"))
	require.Zero(t, s.Active())

	// Live: delivered, and answered.
	_, err = s.Ask(ctx, "c", sendCmd("hi"))
	require.NoError(t, err)
	require.True(t, s.IsActive("c"))
	res, ok, err = s.AskLive(ctx, "c", wake(0))
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, journal.ErrorFromProto(res.(*messages.AgentReply).GetError()))

	// Stale (the log moved on behind it): it retires without applying
	// the wake, which is not delivered.
	require.Eventually(t, func() bool {
		row, err := store.Conversation(ctx, "c")
		return err == nil && row.GetStatus() == messages.ConversationStatus_CONVERSATION_STATUS_IDLE
	}, 10*time.Second, time.Millisecond, "the turn ended")
	last, err := store.LastSeq(ctx, "c")
	require.NoError(t, err)
	res, ok, err = s.AskLive(ctx, "c", wake(last+1))
	require.NoError(t, err)
	require.False(t, ok, "a stale activation retires rather than take it")
	require.Nil(t, res)

	// Bad input.
	_, _, err = s.AskLive(ctx, "", wake(0))
	require.ErrorIs(t, err, journal.ErrInvalid)
	_, _, err = s.AskLive(ctx, "c", nil)
	require.ErrorIs(t, err, journal.ErrInvalid)

	s.Stop()
	_, ok, err = s.AskLive(ctx, "c", wake(0))
	require.ErrorIs(t, err, ErrStopped)
	require.False(t, ok)
}
