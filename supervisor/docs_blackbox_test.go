package supervisor_test

// Black-box tests of the package's godoc: each test names the promise it
// checks, and uses only the exported API.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/supervisor"
)

func newSystem(t *testing.T) *actor.ActorSystem {
	t.Helper()
	system := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	t.Cleanup(system.Shutdown)
	return system
}

func validConfig() supervisor.Config {
	model := scripted.New(scripted.Options{})
	return supervisor.Config{
		Store:       memjournal.New(memjournal.Options{}),
		Agent:       func(string) actors.ConversationConfig { return actors.ConversationConfig{Model: model} },
		CallTimeout: time.Minute,
	}
}

func send(rid, text string) *actors.Command {
	return &actors.Command{Msg: &messages.AgentSend{RequestId: rid, Message: agent.UserMessage(agent.TextPart(text))},
		Scope: agent.Scope{UserID: "u"}}
}

// Config.Store and Config.Agent are required, and Start needs a system:
// without them it fails with an error wrapping journal.ErrInvalid, never a
// panic.
func TestBBStartRequiresItsConfig(t *testing.T) {
	system := newSystem(t)
	cfg := validConfig()
	noStore := cfg
	noStore.Store = nil
	_, err := supervisor.Start(system, noStore)
	require.ErrorIs(t, err, journal.ErrInvalid)
	noAgent := cfg
	noAgent.Agent = nil
	_, err = supervisor.Start(system, noAgent)
	require.ErrorIs(t, err, journal.ErrInvalid)
	_, err = supervisor.Start(nil, cfg)
	require.ErrorIs(t, err, journal.ErrInvalid)
}

// One Supervisor per system: a second Start fails with an error wrapping
// actor.ErrNameExists, and the first goes on working.
func TestBBStartTwiceOnOneSystem(t *testing.T) {
	system := newSystem(t)
	s, err := supervisor.Start(system, validConfig())
	require.NoError(t, err)
	defer s.Stop()
	_, err = supervisor.Start(system, validConfig())
	require.ErrorIs(t, err, actor.ErrNameExists)
	_, err = s.Ask(context.Background(), "c", send("r1", "hi"))
	require.NoError(t, err)
	assert.True(t, s.IsActive("c"))
	assert.Equal(t, 1, s.Active())
}

// Start on a system where another actor has the name of the journal or
// the expiry actor fails with an error wrapping actor.ErrNameExists (it
// used to panic in the supervisor actor, which failed alike on every
// restart, and Start waited forever), leaves nothing running, and a
// Start once the name is free works.
func TestBBStartWhereAChildsNameIsTaken(t *testing.T) {
	for _, child := range []string{"journal", "expiry"} {
		system := newSystem(t)
		taken, err := system.Root.SpawnNamed(actor.PropsFromFunc(func(actor.Context) {}), supervisor.Name+"/"+child)
		require.NoError(t, err)
		done := make(chan error, 1)
		go func() {
			_, err := supervisor.Start(system, validConfig())
			done <- err
		}()
		select {
		case err = <-done:
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: Start still waiting", child)
		}
		require.ErrorIs(t, err, actor.ErrNameExists, child)
		require.NoError(t, system.Root.StopFuture(taken).Wait())
		s, err := supervisor.Start(system, validConfig())
		require.NoError(t, err, "%s: nothing of the failed Start is left", child)
		_, err = s.Ask(context.Background(), "c", send("r1", "hi"))
		require.NoError(t, err)
		s.Stop()
	}
}

// After Stop: Ask, Request and Delete return ErrStopped; Tell,
// ArmSchedule, DisarmSchedule and Repartition do nothing; Kill finds no
// live actor; Stop is idempotent.
func TestBBAfterStop(t *testing.T) {
	s, err := supervisor.Start(newSystem(t), validConfig())
	require.NoError(t, err)
	_, err = s.Ask(context.Background(), "c", send("r1", "hi"))
	require.NoError(t, err)
	s.Stop()
	s.Stop()
	_, err = s.Ask(context.Background(), "c", send("r2", "hi"))
	require.ErrorIs(t, err, supervisor.ErrStopped)
	_, err = s.Request(context.Background(), s.Journal(), &messages.JournalWrite{})
	require.ErrorIs(t, err, supervisor.ErrStopped)
	err = s.Delete(context.Background(), "c", func(context.Context) error { t.Error("del called after Stop"); return nil })
	require.ErrorIs(t, err, supervisor.ErrStopped)
	s.Tell("c", send("r3", "hi"))
	require.NoError(t, s.ArmSchedule("c", "s", "", time.Now().Add(time.Hour)))
	require.NoError(t, s.DisarmSchedule("c", "s", ""))
	s.Repartition()
	assert.False(t, s.Kill("c", func() { t.Error("then called without a live actor") }))
	assert.Zero(t, s.StopUnowned(func(string) bool { return false }))
	assert.Zero(t, s.Active())
}

// Ask with hostile input (an empty, huge or invalid UTF-8 id, a nil
// command or message) answers an error, never a panic, and the
// supervisor keeps answering.
func TestBBAskHostileInput(t *testing.T) {
	s, err := supervisor.Start(newSystem(t), validConfig())
	require.NoError(t, err)
	defer s.Stop()
	ctx := context.Background()
	for _, id := range []string{"", "\xff", strings.Repeat("x", 1<<20)} {
		_, err := s.Ask(ctx, id, send("r", "hi"))
		require.True(t, errors.Is(err, journal.ErrInvalid), "id %.10q: %.300v", id, err)
		require.False(t, errors.Is(err, supervisor.ErrNoAnswer), "id %.10q: nothing was handed over: %.300v", id, err)
		assert.Less(t, len(err.Error()), 1<<10, "the error does not echo a huge id")
		s.Tell(id, send("r", "hi"))
	}
	assert.Zero(t, s.Active(), "no activation of an invalid id")
	// A nil command is refused at once (it used to wait out CallTimeout
	// and answer ErrNoAnswer), and Tell drops it.
	_, err = s.Ask(ctx, "c", nil)
	require.ErrorIs(t, err, journal.ErrInvalid)
	require.NotErrorIs(t, err, supervisor.ErrNoAnswer, "nothing was handed over")
	s.Tell("c", nil)
	// A command without a message is answered by the agent: a reply that
	// carries an invalid-input error.
	res, err := s.Ask(ctx, "c", &actors.Command{})
	require.NoError(t, err)
	require.NotNil(t, res)
	_, err = s.Ask(ctx, "c", send("r1", "hi"))
	require.NoError(t, err)
}

// Kill reports whether there was a live actor, and calls then once it has
// terminated.
func TestBBKill(t *testing.T) {
	s, err := supervisor.Start(newSystem(t), validConfig())
	require.NoError(t, err)
	defer s.Stop()
	assert.False(t, s.Kill("c", nil))
	_, err = s.Ask(context.Background(), "c", send("r1", "hi"))
	require.NoError(t, err)
	called := false
	assert.True(t, s.Kill("c", func() { called = true }))
	assert.True(t, called)
	assert.False(t, s.IsActive("c"))
}

// Delete and Request with hostile input: a nil del, an invalid id, a nil
// pid are refused at once with journal.ErrInvalid (they used to panic, or
// reach the Store); the conversation is left as it was.
func TestBBDeleteAndRequestHostileInput(t *testing.T) {
	s, err := supervisor.Start(newSystem(t), validConfig())
	require.NoError(t, err)
	defer s.Stop()
	ctx := context.Background()
	_, err = s.Ask(ctx, "c", send("r1", "hi"))
	require.NoError(t, err)
	require.ErrorIs(t, s.Delete(ctx, "c", nil), journal.ErrInvalid)
	assert.True(t, s.IsActive("c"), "nothing was stopped")
	for _, id := range []string{"", "\xff", strings.Repeat("x", journal.MaxIDBytes+1)} {
		err := s.Delete(ctx, id, func(context.Context) error { t.Error("del called"); return nil })
		require.ErrorIs(t, err, journal.ErrInvalid)
	}
	_, err = s.Request(ctx, nil, &messages.JournalWrite{})
	require.ErrorIs(t, err, journal.ErrInvalid)
	require.NotErrorIs(t, err, supervisor.ErrNoAnswer)
	_, err = s.Ask(ctx, "c", send("r2", "again"))
	require.NoError(t, err, "the conversation still answers")
	// Kill and StopUnowned with hostile input find nothing to stop; a nil
	// owns stops nothing; ArmSchedule, DisarmSchedule and
	// DisarmFiredSchedule refuse bad ids, revisions and times with
	// ErrInvalid.
	assert.False(t, s.Kill("\xff", nil))
	assert.Zero(t, s.StopUnowned(func(string) bool { return true }))
	assert.Zero(t, s.StopUnowned(nil))
	assert.True(t, s.IsActive("c"))
	long := strings.Repeat("x", journal.MaxIDBytes+1)
	later := time.Now().Add(time.Hour)
	for _, ids := range [][2]string{{"", "s"}, {"c", ""}, {"\xff", "s"}, {"c", "\xff"}, {long, "s"}, {"c", long}} {
		require.ErrorIs(t, s.ArmSchedule(ids[0], ids[1], "", later), journal.ErrInvalid, "arm %q", ids)
		require.ErrorIs(t, s.DisarmSchedule(ids[0], ids[1], ""), journal.ErrInvalid, "disarm %q", ids)
		require.ErrorIs(t, s.DisarmFiredSchedule(ids[0], ids[1], later), journal.ErrInvalid, "disarm fired %q", ids)
	}
	require.ErrorIs(t, s.DisarmFiredSchedule("c", "s", time.Time{}), journal.ErrInvalid, "a zero occurrence")
	for _, rev := range []string{"\xff", long} {
		require.ErrorIs(t, s.ArmSchedule("c", "s", rev, later), journal.ErrInvalid, "arm of revision %q", rev)
		require.ErrorIs(t, s.DisarmSchedule("c", "s", rev), journal.ErrInvalid, "disarm of revision %q", rev)
	}
	require.ErrorIs(t, s.ArmSchedule("c", "s", "", time.Time{}), journal.ErrInvalid, "a zero time")
	require.ErrorIs(t, s.ArmSchedule("c", "s", "", time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)), journal.ErrInvalid, "past year 9999")
	_, err = s.Ask(ctx, "c", send("r3", "still"))
	require.NoError(t, err)
}

// Ask ensures one live activation per conversation even under concurrent
// callers.
func TestBBAskConcurrentCallersShareOneActivation(t *testing.T) {
	s, err := supervisor.Start(newSystem(t), validConfig())
	require.NoError(t, err)
	defer s.Stop()
	errs := make(chan error, 16)
	for i := range 16 {
		go func() {
			conv := []string{"a", "b"}[i%2]
			_, err := s.Ask(context.Background(), conv, send(fmt.Sprint("r", i), "hi"))
			errs <- err
		}()
	}
	for range 16 {
		require.NoError(t, <-errs)
	}
	assert.Equal(t, 2, s.Active())
	assert.True(t, s.IsActive("a"))
	assert.True(t, s.IsActive("b"))
}
