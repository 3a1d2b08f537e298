package supervisor_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/actors/actorstest"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/supervisor"
)

// Tell delivers cmd to the conversation, activating it, without waiting:
// the send it carries is written.
func TestBBTellActivatesAndDelivers(t *testing.T) {
	cfg := validConfig()
	s, err := supervisor.Start(newSystem(t), cfg)
	require.NoError(t, err)
	defer s.Stop()
	s.Tell("c", send("r1", "hi"))
	require.Eventually(t, func() bool {
		evs, err := cfg.Store.Events(context.Background(), "c", journal.EventQuery{})
		return err == nil && len(evs) > 0 && evs[0].GetUserMsg() != nil
	}, 10*time.Second, time.Millisecond, "the told send is written")
	assert.True(t, s.IsActive("c"))
}

// Config.Passivated is called each time an idle conversation actor
// passivates, not for a kill; Config.Activated once per spawned actor.
func TestBBPassivatedAndActivatedHooks(t *testing.T) {
	clock := actorstest.NewManualClock(time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC))
	model := scripted.New(scripted.Options{})
	var passivated, activated atomic.Int32
	s, err := supervisor.Start(newSystem(t), supervisor.Config{
		Store:       memjournal.New(memjournal.Options{}),
		Clock:       clock,
		CallTimeout: time.Minute,
		Agent: func(string) actors.ConversationConfig {
			return actors.ConversationConfig{Model: model, IdleTimeout: time.Minute}
		},
		Passivated: func() { passivated.Add(1) },
		Activated:  func() { activated.Add(1) },
	})
	require.NoError(t, err)
	defer s.Stop()
	ctx := context.Background()

	_, err = s.Ask(ctx, "k", send("r1", "hi"))
	require.NoError(t, err)
	require.True(t, s.Kill("k", nil))
	assert.Zero(t, passivated.Load(), "a kill is no passivation")

	_, err = s.Ask(ctx, "c", send("r2", "hi"))
	require.NoError(t, err)
	assert.Equal(t, int32(2), activated.Load())
	// The idle timer is armed once the actor is quiescent (its turn done).
	require.Eventually(t, func() bool { return clock.Timers() == 1 }, 10*time.Second, time.Millisecond)
	clock.Advance(time.Minute)
	require.Eventually(t, func() bool { return passivated.Load() == 1 }, 10*time.Second, time.Millisecond)
	require.Eventually(t, func() bool { return !s.IsActive("c") }, 10*time.Second, time.Millisecond)
	assert.Zero(t, s.Active())

	// The next command revives it: one more activation.
	_, err = s.Ask(ctx, "c", send("r3", "again"))
	require.NoError(t, err)
	assert.Equal(t, int32(3), activated.Load())
	assert.Equal(t, int32(1), passivated.Load())
}

// conflictStore refuses every write with journal.ErrConflict.
type conflictStore struct{ journal.Store }

func (conflictStore) Append(context.Context, *messages.AppendRequest) (journal.AppendResult, error) {
	return journal.AppendResult{}, fmt.Errorf("moved on: %w", journal.ErrConflict)
}

func (conflictStore) AppendBatch(_ context.Context, reqs []*messages.AppendRequest) []journal.AppendResult {
	out := make([]journal.AppendResult, len(reqs))
	for i := range out {
		out[i].Err = fmt.Errorf("moved on: %w", journal.ErrConflict)
	}
	return out
}

// Config.Fenced is called, with the conversation's id, when an activation
// retires because a write of its failed with journal.ErrConflict; Ask,
// whose every activation is fenced off, says why it gave up.
func TestBBFencedHook(t *testing.T) {
	model := scripted.New(scripted.Options{})
	fenced := make(chan string, 64)
	s, err := supervisor.Start(newSystem(t), supervisor.Config{
		Store:       conflictStore{memjournal.New(memjournal.Options{})},
		CallTimeout: time.Minute,
		Agent:       func(string) actors.ConversationConfig { return actors.ConversationConfig{Model: model} },
		Fenced: func(id string) {
			select {
			case fenced <- id:
			default:
			}
		},
	})
	require.NoError(t, err)
	defer s.Stop()
	_, err = s.Ask(context.Background(), "c", send("r1", "hi"))
	require.ErrorIs(t, err, supervisor.ErrNoAnswer)
	require.ErrorIs(t, err, actors.ErrAgentStopped)
	require.ErrorIs(t, err, journal.ErrConflict)
	select {
	case id := <-fenced:
		assert.Equal(t, "c", id)
	case <-time.After(10 * time.Second):
		t.Fatal("Fenced was not called")
	}
}

// Request to an actor that was gone before it got the message is
// actor.ErrDeadLetter, not ErrNoAnswer.
func TestBBRequestToAGoneActor(t *testing.T) {
	system := newSystem(t)
	s, err := supervisor.Start(system, validConfig())
	require.NoError(t, err)
	defer s.Stop()
	pid := system.Root.Spawn(actor.PropsFromFunc(func(actor.Context) {}))
	require.NoError(t, system.Root.StopFuture(pid).Wait())
	_, err = s.Request(context.Background(), pid, &messages.JournalWrite{})
	require.ErrorIs(t, err, actor.ErrDeadLetter)
	require.NotErrorIs(t, err, supervisor.ErrNoAnswer, "the message was not handed over")
	require.NotErrorIs(t, err, supervisor.ErrStopped)
}

// Concurrent Kills of one conversation: exactly one finds its live actor
// (and calls then, once); the others report none.
func TestBBConcurrentKills(t *testing.T) {
	s, err := supervisor.Start(newSystem(t), validConfig())
	require.NoError(t, err)
	defer s.Stop()
	_, err = s.Ask(context.Background(), "c", send("r1", "hi"))
	require.NoError(t, err)
	var killed, thens atomic.Int32
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			if s.Kill("c", func() { thens.Add(1) }) {
				killed.Add(1)
			}
		})
	}
	wg.Wait()
	assert.Equal(t, int32(1), killed.Load())
	assert.Equal(t, int32(1), thens.Load())
	assert.False(t, s.IsActive("c"))
}

// Callers that Ask while Stop runs get an answer or an error wrapping
// ErrStopped (with ErrNoAnswer if their command was handed over), never
// another error, a panic or a hang; concurrent Stops all return.
func TestBBAskDuringStop(t *testing.T) {
	s, err := supervisor.Start(newSystem(t), validConfig())
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := make(chan error, 8)
	var asked sync.WaitGroup
	asked.Add(8)
	for i := range 8 {
		go func() {
			for n := 0; ; n++ {
				_, err := s.Ask(ctx, fmt.Sprint("c", i%3), send(fmt.Sprint("r", i, "-", n), "hi"))
				if n == 0 {
					asked.Done()
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	asked.Wait()
	var stops sync.WaitGroup
	for range 3 {
		stops.Go(s.Stop)
	}
	for range 8 {
		err := <-errs
		require.True(t, errors.Is(err, supervisor.ErrStopped), "%v", err)
	}
	stops.Wait()
	require.NoError(t, ctx.Err(), "nobody waited out a timeout")
	assert.Zero(t, s.Active())
}

// ArmSchedule arms the expiry actor's timer of a schedule: once due,
// Config.FireSchedule is called with the conversation, the schedule and
// the occurrence. DisarmSchedule removes one: it never fires.
func TestBBArmAndDisarmSchedule(t *testing.T) {
	start := time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)
	clock := actorstest.NewManualClock(start)
	type fire struct {
		conv, id string
		at       time.Time
	}
	fires := make(chan fire, 8)
	cfg := validConfig()
	cfg.Clock = clock
	cfg.FireSchedule = func(conv, id string, at time.Time) { fires <- fire{conv, id, at.UTC()} }
	s, err := supervisor.Start(newSystem(t), cfg)
	require.NoError(t, err)
	defer s.Stop()
	dueAt := func(at time.Time) func() bool {
		return func() bool {
			dues := clock.Dues()
			return len(dues) == 1 && dues[0].Equal(at)
		}
	}
	require.NoError(t, s.ArmSchedule("c", "gone", "", start.Add(30*time.Second)))
	require.Eventually(t, dueAt(start.Add(30*time.Second)), 10*time.Second, time.Millisecond)
	require.NoError(t, s.DisarmSchedule("c", "gone", ""))
	require.NoError(t, s.ArmSchedule("c", "s1", "", start.Add(45*time.Second)))
	// The timer moves to s1's time only once "gone" is disarmed.
	require.Eventually(t, dueAt(start.Add(45*time.Second)), 10*time.Second, time.Millisecond, "dues: %v", clock.Dues())
	clock.Advance(45 * time.Second)
	select {
	case f := <-fires:
		assert.Equal(t, fire{"c", "s1", start.Add(45 * time.Second)}, f)
	case <-time.After(10 * time.Second):
		t.Fatal("the armed schedule did not fire")
	}
	select {
	case f := <-fires:
		t.Fatalf("unexpected fire %+v", f)
	default:
	}
}

// Delete stops the live activation before it calls del, returns del's
// error as is, and once del succeeded (or said journal.ErrDeleted) no
// activation of the id is created again: Ask answers journal.ErrDeleted
// and Tell is dropped. A del that failed otherwise leaves the
// conversation as it was; a Delete whose context has ended stops nothing
// and calls no del.
func TestBBDelete(t *testing.T) {
	s, err := supervisor.Start(newSystem(t), validConfig())
	require.NoError(t, err)
	defer s.Stop()
	ctx := context.Background()
	for _, id := range []string{"ok", "said-deleted", "failed", "ended"} {
		_, err := s.Ask(ctx, id, send("r1", "hi"))
		require.NoError(t, err)
	}

	calls := 0
	require.NoError(t, s.Delete(ctx, "ok", func(context.Context) error {
		calls++
		assert.False(t, s.IsActive("ok"), "del runs once the activation has terminated")
		return nil
	}))
	assert.Equal(t, 1, calls)

	err = s.Delete(ctx, "said-deleted", func(context.Context) error { return fmt.Errorf("tombstone: %w", journal.ErrDeleted) })
	require.ErrorIs(t, err, journal.ErrDeleted)

	boom := errors.New("store refused")
	err = s.Delete(ctx, "failed", func(context.Context) error { return boom })
	require.ErrorIs(t, err, boom, "del's error is returned")

	ended, cancel := context.WithCancel(ctx)
	cancel()
	err = s.Delete(ended, "ended", func(context.Context) error { t.Error("del called with an ended context"); return nil })
	require.ErrorIs(t, err, context.Canceled)
	assert.True(t, s.IsActive("ended"), "a Delete whose context had ended stops nothing")

	for _, id := range []string{"ok", "said-deleted"} {
		_, err := s.Ask(ctx, id, send("r2", "again"))
		require.ErrorIs(t, err, journal.ErrDeleted, id)
		require.NotErrorIs(t, err, supervisor.ErrNoAnswer, "%s: nothing was handed over", id)
		s.Tell(id, send("r3", "again"))
		assert.False(t, s.IsActive(id), id)
	}
	for _, id := range []string{"failed", "ended"} {
		_, err := s.Ask(ctx, id, send("r2", "again"))
		require.NoError(t, err, "%s: not deleted, it still answers", id)
	}
}

// A panic of Config.Agent (user code, run on the supervisor actor's
// goroutine) fails that activation's spawn: Ask answers at once with an
// error wrapping agent.ErrPanicked, and the supervisor, with every other
// conversation, goes on. A panic of Config.Activated is recovered too.
func TestBBPanickingHooksLeaveTheSupervisorRunning(t *testing.T) {
	cfg := validConfig()
	good := cfg.Agent
	cfg.Agent = func(id string) actors.ConversationConfig {
		if id == "boom" {
			panic("no config for boom")
		}
		return good(id)
	}
	var activations atomic.Int32
	cfg.Activated = func() {
		if activations.Add(1) == 2 {
			panic("metrics hook failed")
		}
	}
	s, err := supervisor.Start(newSystem(t), cfg)
	require.NoError(t, err)
	defer s.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = s.Ask(ctx, "ok", send("r1", "hi"))
	require.NoError(t, err)

	_, err = s.Ask(ctx, "boom", send("r1", "hi"))
	require.ErrorIs(t, err, agent.ErrPanicked)
	require.NotErrorIs(t, err, supervisor.ErrNoAnswer, "nothing was handed over")
	require.NoError(t, ctx.Err(), "answered at once, not at a timeout")
	assert.False(t, s.IsActive("boom"))
	_, err = s.Ask(ctx, "boom", send("r2", "hi"))
	require.ErrorIs(t, err, agent.ErrPanicked, "a later Ask tries again, and fails alike")
	assert.True(t, s.IsActive("ok"), "the other conversations live on")

	_, err = s.Ask(ctx, "second", send("r1", "hi")) // its Activated panics
	require.NoError(t, err)
	assert.True(t, s.IsActive("second"))
	_, err = s.Ask(ctx, "ok", send("r2", "again"))
	require.NoError(t, err, "the supervisor still answers")
	assert.Equal(t, 2, s.Active())
}

// Request with a nil message is refused at once with an error wrapping
// journal.ErrInvalid, as a nil pid is (it used to be sent, ignored, and
// waited for until CallTimeout, then answer ErrNoAnswer).
func TestBBRequestOfANilMessage(t *testing.T) {
	cfg := validConfig()
	cfg.CallTimeout = time.Hour
	s, err := supervisor.Start(newSystem(t), cfg)
	require.NoError(t, err)
	defer s.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = s.Request(ctx, s.Journal(), nil)
	require.ErrorIs(t, err, journal.ErrInvalid)
	require.NotErrorIs(t, err, supervisor.ErrNoAnswer, "nothing was handed over")
	require.NoError(t, ctx.Err(), "refused at once")
	_, err = s.Ask(ctx, "c", send("r1", "hi"))
	require.NoError(t, err)
}

// Request of a message the journal actor (or the supervisor actor) does
// not answer is refused at once with an error wrapping journal.ErrInvalid
// (it used to be sent, ignored, and waited for until CallTimeout, then
// answer ErrNoAnswer); the requests the journal actor answers are served.
func TestBBRequestOfAMessageItsTargetIgnores(t *testing.T) {
	cfg := validConfig()
	cfg.CallTimeout = time.Hour
	system := newSystem(t)
	s, err := supervisor.Start(system, cfg)
	require.NoError(t, err)
	defer s.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, to := range []*actor.PID{s.Journal(), system.NewLocalPID(supervisor.Name)} {
		_, err = s.Request(ctx, to, &messages.AgentWake{})
		require.ErrorIs(t, err, journal.ErrInvalid, to.GetId())
		require.NotErrorIs(t, err, supervisor.ErrNoAnswer, "nothing was handed over")
		require.NoError(t, ctx.Err(), "refused at once")
	}
	res, err := s.Request(ctx, s.Journal(), &actors.JournalBarrier{ConversationID: "c"})
	require.NoError(t, err)
	require.IsType(t, &actors.JournalBarrierDone{}, res)
	res, err = s.Request(ctx, s.Journal(), &messages.JournalWrite{RequestId: 1})
	require.NoError(t, err)
	require.NotNil(t, res.(*messages.JournalWriteReply).GetReply().GetError(), "a write without a request is answered, refused")
}

// Kill, Delete, Tell, StopUnowned and Repartition racing Stop neither
// panic nor hang (under -race), and a Delete either deletes or ends with
// ErrStopped.
func TestBBCallsRacingStop(t *testing.T) {
	s, err := supervisor.Start(newSystem(t), validConfig())
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := range 6 {
		_, err := s.Ask(ctx, fmt.Sprint("c", i), send("r1", "hi"))
		require.NoError(t, err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for i := range 6 {
		id := fmt.Sprint("c", i)
		if i%2 == 0 {
			wg.Go(func() { s.Kill(id, nil) })
		} else {
			wg.Go(func() { errs <- s.Delete(ctx, id, func(context.Context) error { return nil }) })
		}
		wg.Go(func() {
			s.Tell(id, send("r2", "more"))
			s.StopUnowned(func(string) bool { return false })
			s.Repartition()
		})
	}
	wg.Go(s.Stop)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("a call racing Stop hung")
	}
	close(errs)
	for err := range errs {
		if err != nil {
			require.ErrorIs(t, err, supervisor.ErrStopped)
		}
	}
	assert.Zero(t, s.Active())
}
