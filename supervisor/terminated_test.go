package supervisor

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

// told is one report of Config.Terminated: the conversation, and whether
// its activation was still registered then.
type told struct {
	id         string
	registered bool
}

// TestTerminatedIsToldOfEveryStop: Config.Terminated hears of an
// activation that stopped while its model call streamed without
// publishing anything (a panic of its Receive, a stale wake), of one that
// passivated, and of one a Kill without then stopped, while it is still
// registered (no successor can exist yet), and of one a failed delete
// stopped, once del failed; a Kill with a then calls that instead, and a
// delete that succeeded calls nothing. The runtime voids the answer in
// progress there.
func TestTerminatedIsToldOfEveryStop(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	streaming := make(chan string, 1)
	model := agent.ModelFunc(func(ctx context.Context, turn agent.Turn, onDelta func(string)) (*messages.AssistantMessage, error) {
		onDelta("partial")
		streaming <- turn.ConversationID
		<-ctx.Done()
		return nil, ctx.Err()
	})
	terminated := make(chan told, 16)
	var s *Supervisor
	system := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	s, err := Start(system, Config{Store: memjournal.New(memjournal.Options{}), CallTimeout: 5 * time.Second,
		Agent: func(id string) actors.ConversationConfig {
			idle := time.Duration(-1)
			if id == "idle" {
				idle = time.Millisecond
			}
			return actors.ConversationConfig{Model: model, IdleTimeout: idle, Publish: func(actors.Update) {}}
		},
		Terminated: func(id string) {
			a := s.reg.lookup(id)
			terminated <- told{id: id, registered: a != nil && a.pid != nil}
		},
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		s.Stop()
		system.Shutdown()
	})
	// seen holds every report read so far, in order. A report of another
	// conversation may come between two that a step waits for (a
	// conversation woken again by the supervisor, say, which then stops
	// too); what each step checks is the reports of its own conversation.
	var seen []told
	drain := func() {
		for {
			select {
			case got := <-terminated:
				seen = append(seen, got)
			default:
				return
			}
		}
	}
	toldOf := func(id string) (n int) {
		for _, got := range seen {
			if got.id == id {
				require.True(t, got.registered, "%s told while unregistered", id)
				n++
			}
		}
		return n
	}
	expect := func(id string) {
		t.Helper()
		for toldOf(id) == 0 {
			select {
			case got := <-terminated:
				seen = append(seen, got)
			case <-ctx.Done():
				t.Fatalf("Terminated never heard of %s (heard %v)", id, seen)
			}
		}
		require.Equal(t, 1, toldOf(id), "told once of %s", id)
	}
	stream := func(id string) *activation {
		t.Helper()
		_, err := s.Ask(ctx, id, sendCmd("hi"))
		require.NoError(t, err)
		require.Equal(t, id, <-streaming)
		return s.reg.lookup(id)
	}

	// A panic of Receive (a bug: here a nil command).
	a := stream("panic")
	s.system.Root.Send(a.pid, (*actors.Command)(nil))
	expect("panic")

	// A wake that finds the activation stale: another writer moved the
	// log on. Its successor runs the turn the log owes.
	stream("stale")
	last, err := s.cfg.Store.LastSeq(ctx, "stale")
	require.NoError(t, err)
	_, err = s.cfg.Store.Append(ctx, &messages.AppendRequest{ConversationId: "stale", ExpectedLast: last,
		Status: messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE,
		Events: []*messages.Event{{Body: &messages.Event_UserMsg{UserMsg: sendCmd("more").Msg.(*messages.AgentSend).GetMessage()}}}})
	require.NoError(t, err)
	_, err = s.Ask(ctx, "stale", &actors.Command{Msg: &messages.AgentWake{LogLast: last + 1}})
	require.NoError(t, err)
	expect("stale")
	require.Equal(t, "stale", <-streaming, "the successor runs the turn")

	// Passivation.
	_, err = s.Ask(ctx, "idle", &actors.Command{Msg: &messages.AgentWake{}})
	require.NoError(t, err)
	expect("idle")

	// A delete that fails: Terminated hears of it once del has failed,
	// before Delete returns (no successor can exist yet); one that
	// succeeds is not told (its end ends the subscriptions).
	stream("undeleted")
	boom := errors.New("boom")
	require.ErrorIs(t, s.Delete(ctx, "undeleted", func(context.Context) error {
		drain()
		require.Zero(t, len(onlyOf(seen, "undeleted")), "not told before del fails: %v", seen)
		return boom
	}), boom)
	drain()
	require.Equal(t, []told{{id: "undeleted"}}, onlyOf(seen, "undeleted"),
		"told once del failed (before Delete returned), the actor unregistered, no successor")
	stream("deleted")
	require.NoError(t, s.Delete(ctx, "deleted", func(context.Context) error { return nil }))

	// A kill with a then: then is told, not Terminated; the next one
	// Terminated hears of is the kill without then.
	stream("killed")
	then := 0
	require.True(t, s.Kill("killed", func() { then++ }))
	require.Equal(t, 1, then)
	stream("killed-quietly")
	require.True(t, s.Kill("killed-quietly", nil))
	expect("killed-quietly")
	drain()
	require.Zero(t, len(onlyOf(seen, "deleted")), "a delete that succeeded is not told: %v", seen)
	require.Zero(t, len(onlyOf(seen, "killed")), "a kill with a then is not told: %v", seen)
}

// onlyOf returns the reports of conversation id among got, in order.
func onlyOf(got []told, id string) []told {
	var out []told
	for _, g := range got {
		if g.id == id {
			out = append(out, g)
		}
	}
	return out
}

// TestPanickingTerminatedHookIsRecovered: a panic of Config.Terminated is
// logged and recovered on the supervisor actor: the activation is still
// unregistered, its successor is created, and the other conversations
// keep theirs.
func TestPanickingTerminatedHookIsRecovered(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	system := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	s, err := Start(system, Config{Store: memjournal.New(memjournal.Options{}), CallTimeout: 5 * time.Second,
		Agent:      func(string) actors.ConversationConfig { return actors.ConversationConfig{IdleTimeout: -1} },
		Terminated: func(string) { panic("Terminated: injected") },
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		s.Stop()
		system.Shutdown()
	})
	wake := &actors.Command{Msg: &messages.AgentWake{}}
	for _, id := range []string{"a", "b"} {
		_, err := s.Ask(ctx, id, wake)
		require.NoError(t, err)
	}
	old := s.reg.lookup("a")
	require.True(t, s.Kill("a", nil))
	_, err = s.Ask(ctx, "a", wake)
	require.NoError(t, err)
	require.NotSame(t, old, s.reg.lookup("a"), "a successor")
	require.True(t, s.IsActive("a"))
	require.True(t, s.IsActive("b"))
}
