package supervisor

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/actors/actorstest"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

// TestInternalWakeDoesNotRerunAFailedTurn: an activation whose log ends in
// turn_failed starts no model call on the runtime's own wakes (an
// AgentWake without explicit, as resume on Open sends, and the re-wake
// after a fenced write), even if the row were still ACTIVE; an explicit
// wake (Runtime.Wake) runs the turn again.
func TestInternalWakeDoesNotRerunAFailedTurn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	store := memjournal.New(memjournal.Options{})
	_, err := store.Append(ctx, &messages.AppendRequest{ConversationId: "c",
		Status: messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE,
		Events: []*messages.Event{
			{Body: &messages.Event_UserMsg{UserMsg: &messages.UserMessage{Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: "hi"}}}}}},
			{Body: &messages.Event_TurnFailed{TurnFailed: &messages.TurnFailed{Message: "model unavailable", Code: actors.CodeUnavailable, Attempts: 3}}},
		}})
	require.NoError(t, err)
	model := scripted.New(scripted.Options{})
	entered := model.Hold("c") // a model call would stay in flight
	clock := actorstest.NewManualClock(time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC))
	system := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	s, err := Start(system, Config{Store: store, Clock: clock, CallTimeout: 5 * time.Second,
		Agent: func(string) actors.ConversationConfig {
			return actors.ConversationConfig{Model: model, IdleTimeout: time.Minute}
		}})
	require.NoError(t, err)
	t.Cleanup(func() {
		model.Release("c")
		s.Stop()
		system.Shutdown()
	})
	require.Equal(t, 0, clock.Timers())

	for _, wake := range []func(){
		func() {
			_, err := s.Ask(ctx, "c", &actors.Command{Msg: &messages.AgentWake{}})
			require.NoError(t, err)
		},
		func() { s.system.Root.Send(s.pid, &rewake{conversation: "c"}) },
	} {
		// A fresh activation each time, as after a restart or a fence.
		s.Kill("c", nil)
		require.Equal(t, 0, clock.Timers())
		wake()
		// The idle timer is armed only once the actor is quiescent: had
		// the wake started a model call, held, it never would be.
		require.Eventually(t, func() bool { return clock.Timers() == 1 }, 5*time.Second, time.Millisecond)
		require.Equal(t, 0, model.Calls("c"))
	}

	_, err = s.Ask(ctx, "c", &actors.Command{Msg: &messages.AgentWake{Explicit: true}})
	require.NoError(t, err)
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("an explicit wake did not run the failed turn again")
	}
	require.Equal(t, 1, model.Calls("c"))
}
