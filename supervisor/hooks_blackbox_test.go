package supervisor_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/supervisor"
)

// A panic of Config.Journal.Committed (user code, run on the journal
// actor's goroutine as it answers a batch) used to fail the journal
// actor mid-batch: the write it was answering landed but was never
// answered, and its Ask waited out CallTimeout. It is logged and
// recovered: every write is answered, and the runtime goes on.
func TestBBPanickingCommittedHookLeavesWritesAnswered(t *testing.T) {
	cfg := validConfig()
	cfg.Journal.Committed = func(*messages.AppendRequest) { panic("metrics hook failed") }
	s, err := supervisor.Start(newSystem(t), cfg)
	require.NoError(t, err)
	defer s.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, id := range []string{"a", "b"} {
		res, err := s.Ask(ctx, id, send("r1", "hi"))
		require.NoError(t, err, "%s: answered, not timed out", id)
		require.Nil(t, res.(*messages.AgentSendReply).GetError())
	}
}

// A panic of Config.Fenced (run on the activation's goroutine as it
// stops for a fenced write) used to escape the activation's own stop:
// protoactor failed the actor, and the commands it held were never
// answered (their Ask waited out CallTimeout). It is logged and
// recovered: Ask gives up as it does with a quiet hook, with the reason.
func TestBBPanickingFencedHookLeavesCommandsAnswered(t *testing.T) {
	model := scripted.New(scripted.Options{})
	s, err := supervisor.Start(newSystem(t), supervisor.Config{
		Store:       conflictStore{memjournal.New(memjournal.Options{})},
		CallTimeout: time.Minute,
		Agent:       func(string) actors.ConversationConfig { return actors.ConversationConfig{Model: model} },
		Fenced:      func(string) { panic("metrics hook failed") },
	})
	require.NoError(t, err)
	defer s.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err = s.Ask(ctx, "c", send("r1", "hi"))
	require.ErrorIs(t, err, journal.ErrConflict)
	require.ErrorIs(t, err, actors.ErrAgentStopped)
	require.NoError(t, ctx.Err(), "answered, not timed out")
}
