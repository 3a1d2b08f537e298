package lazarus_test

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/actors/actorstest"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

// TestMetricsHooks: a turn that suspends on a human call whose deadline
// then passes reports its commits, appends, activation, model calls,
// subscription and the expiry to Options.Metrics.
func TestMetricsHooks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var commits, requests, appends, events, expired, activated, modelCalls, modelErrs, subs, maxSubs atomic.Int64
	clock := actorstest.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	model := scripted.New(scripted.Options{})
	rt, err := lazarus.Open(lazarus.Options{
		Model: model, Clock: clock, IdleTimeout: -1,
		Tools: []agent.Tool{{Name: "ask", Executor: messages.Executor_EXECUTOR_HUMAN, Timeout: time.Minute}},
		Metrics: lazarus.Metrics{
			Commit: func(n int, took time.Duration) {
				commits.Add(1)
				requests.Add(int64(n))
			},
			Appended: func(n int) {
				appends.Add(1)
				events.Add(int64(n))
			},
			Expired:   func() { expired.Add(1) },
			Activated: func() { activated.Add(1) },
			ModelCall: func(_ time.Duration, err error) {
				modelCalls.Add(1)
				if err != nil {
					modelErrs.Add(1)
				}
			},
			Subscribers: func(d int) {
				if n := subs.Add(int64(d)); n > maxSubs.Load() {
					maxSubs.Store(n)
				}
			},
		},
	})
	require.NoError(t, err)
	defer rt.Close()

	model.Push("c", scripted.Reply("asking", scripted.Call("ask", `{}`)), scripted.Text("done"))
	end, err := rt.SendAndWait(ctx, "c", "hi", agent.Scope{UserID: "u"})
	require.NoError(t, err)
	require.Equal(t, lazarus.TurnSuspended, end.Outcome)

	updates, err := rt.Subscribe(ctx, "c", 0)
	require.NoError(t, err)
	clock.Advance(2 * time.Minute) // the deadline passes: the call expires, the turn goes on
	for u := range updates {
		if u.TurnEnd != nil && u.TurnEnd.Outcome == lazarus.TurnAnswered {
			break
		}
	}
	require.EqualValues(t, 1, expired.Load())
	require.EqualValues(t, 1, activated.Load())
	require.EqualValues(t, 2, modelCalls.Load())
	require.Zero(t, modelErrs.Load())
	require.Positive(t, commits.Load())
	// Every event is reported once, by the Appended of the request that
	// committed it (a write after the answer may still be between its
	// commit and its report). Commit counts every request a batch carried,
	// failed ones too (under load the expiry actor can hand a resolution
	// over again; the second is refused as stale), so Appended reports at
	// most as many requests as Commit carried.
	seq, err := rt.Store().LastSeq(ctx, "c")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return events.Load() == int64(seq) }, 10*time.Second, time.Millisecond,
		"every event is counted once")
	require.LessOrEqual(t, appends.Load(), requests.Load(), "no request is reported that no batch carried")
	require.Positive(t, appends.Load())
	require.GreaterOrEqual(t, maxSubs.Load(), int64(1))
	cancel()
	for range updates {
	}
	require.Eventually(t, func() bool { return subs.Load() == 0 }, 10*time.Second, time.Millisecond,
		"an ended subscription is reported")
}

// TestPassivationMetric: an idle conversation that passivates on the clock
// is reported by Metrics.Passivated; a kill is not a passivation, and the
// next command's revival is an activation.
func TestPassivationMetric(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var activated, passivated atomic.Int64
	clock := actorstest.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	model := scripted.New(scripted.Options{})
	rt, err := lazarus.Open(lazarus.Options{
		Model: model, Clock: clock, IdleTimeout: time.Minute,
		Metrics: lazarus.Metrics{Activated: func() { activated.Add(1) }, Passivated: func() { passivated.Add(1) }},
	})
	require.NoError(t, err)
	defer rt.Close()

	_, err = rt.SendAndWait(ctx, "c", "hi", agent.Scope{UserID: "u"})
	require.NoError(t, err)
	require.True(t, rt.Kill("c"))
	require.Zero(t, passivated.Load(), "a kill is not a passivation")
	_, err = rt.SendAndWait(ctx, "c", "again", agent.Scope{UserID: "u"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		clock.Advance(time.Minute)
		return !rt.IsActive("c")
	}, 20*time.Second, 5*time.Millisecond, "the idle actor passivates")
	require.EqualValues(t, 1, passivated.Load())
	require.EqualValues(t, 2, activated.Load())
}

// TestFencedMetric: another writer moves a conversation's log on under its
// live activation; the activation's next write is refused by the Store's
// fence (ErrConflict), which Metrics.Fenced reports once, and the send it
// carried is applied by a new activation, once, at the seq it returns.
func TestFencedMetric(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var fenced atomic.Int64
	model := scripted.New(scripted.Options{})
	rt, err := lazarus.Open(lazarus.Options{
		Model: model, IdleTimeout: -1,
		Metrics: lazarus.Metrics{Fenced: func() { fenced.Add(1) }},
	})
	require.NoError(t, err)
	defer rt.Close()

	model.Push("c", scripted.Text("one"), scripted.Text("two"))
	_, err = rt.SendAndWait(ctx, "c", "hi", agent.Scope{UserID: "u"})
	require.NoError(t, err)
	require.Zero(t, fenced.Load(), "no other writer yet")
	require.True(t, rt.IsActive("c"))

	// Another writer (a member that took the conversation over, say).
	last, err := rt.Store().LastSeq(ctx, "c")
	require.NoError(t, err)
	_, err = rt.Store().Append(ctx, &messages.AppendRequest{ConversationId: "c", ExpectedLast: last, Events: []*messages.Event{{
		RequestId: "elsewhere",
		Body:      &messages.Event_UserMsg{UserMsg: agent.UserMessage(agent.TextPart("from elsewhere"))},
	}}})
	require.NoError(t, err)

	seq, err := rt.SendMessage(ctx, "c", agent.UserMessage(agent.TextPart("again")), lazarus.SendOptions{RequestID: "again"}, agent.Scope{UserID: "u"})
	require.NoError(t, err)
	require.EqualValues(t, 1, fenced.Load(), "the stale activation's write was fenced")
	// The new activation owes a turn to the other writer's message, so its
	// answer may land before the send: the send is after that message.
	require.Greater(t, seq, last+1, "applied after the other writer's event")
	evs, err := rt.History(ctx, "c", 0, 0)
	require.NoError(t, err)
	require.Equal(t, "again", evs[seq-1].GetRequestId(), "the send is at the seq it returned")
	ids := map[string]int{}
	for _, ev := range evs {
		ids[ev.GetRequestId()]++
	}
	require.Equal(t, 1, ids["elsewhere"])
	require.Equal(t, 1, ids["again"])
}

// timingOutStore fails the next append request it is armed for as a Store
// call that timed out (context.DeadlineExceeded, no journal sentinel), and
// writes nothing of it.
type timingOutStore struct {
	journal.Store
	armed atomic.Bool
}

func (s *timingOutStore) AppendBatch(ctx context.Context, reqs []*messages.AppendRequest) []journal.AppendResult {
	if s.armed.CompareAndSwap(true, false) {
		out := make([]journal.AppendResult, len(reqs))
		for i := range out {
			out[i].Err = fmt.Errorf("store: append: timeout: %w", context.DeadlineExceeded)
		}
		return out
	}
	return s.Store.AppendBatch(ctx, reqs)
}

// TestWriteTimeoutIsUnknownOutcome: a send whose write the Store timed out
// fails with an error wrapping journal.ErrUnknownOutcome (the write may or
// may not have landed), never an unclassified one; retried with its
// request id, it lands once.
func TestWriteTimeoutIsUnknownOutcome(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := &timingOutStore{Store: memjournal.New(memjournal.Options{})}
	model := scripted.New(scripted.Options{})
	rt, err := lazarus.Open(lazarus.Options{Model: model, Store: st, IdleTimeout: -1})
	require.NoError(t, err)
	defer rt.Close()

	model.Push("c", scripted.Text("one"))
	_, err = rt.SendAndWait(ctx, "c", "hi", agent.Scope{UserID: "u"})
	require.NoError(t, err)
	st.armed.Store(true)
	msg := agent.UserMessage(agent.TextPart("again"))
	_, err = rt.SendMessage(ctx, "c", msg, lazarus.SendOptions{RequestID: "again"}, agent.Scope{UserID: "u"})
	require.ErrorIs(t, err, journal.ErrUnknownOutcome)
	require.ErrorIs(t, err, lazarus.ErrUnknownOutcome, "the facade's sentinel too")
	model.Push("c", scripted.Text("two"))
	seq, err := rt.SendMessage(ctx, "c", msg, lazarus.SendOptions{RequestID: "again"}, agent.Scope{UserID: "u"})
	require.NoError(t, err)
	evs, err := rt.History(ctx, "c", 0, 0)
	require.NoError(t, err)
	n := 0
	for _, ev := range evs {
		if ev.GetRequestId() == "again" {
			n++
			require.Equal(t, seq, ev.GetSeq())
		}
	}
	require.Equal(t, 1, n)
}

// TestExpiredMetricCountsOnlyDeadlines: Metrics.Expired counts the human
// calls a deadline expired, not a call an application resolves or rejects
// with agent.SystemScope (the system's identity, which an expiry also
// records).
func TestExpiredMetricCountsOnlyDeadlines(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var expired atomic.Int64
	clock := actorstest.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	model := scripted.New(scripted.Options{})
	rt, err := lazarus.Open(lazarus.Options{
		Model: model, Clock: clock, IdleTimeout: -1,
		Tools:   []agent.Tool{{Name: "ask", Executor: messages.Executor_EXECUTOR_HUMAN, Timeout: time.Hour}},
		Metrics: lazarus.Metrics{Expired: func() { expired.Add(1) }},
	})
	require.NoError(t, err)
	defer rt.Close()

	for i, answer := range []func(id string) error{
		func(id string) error { return rt.Resolve(ctx, id, `"yes"`, agent.SystemScope) },
		func(id string) error { return rt.Reject(ctx, id, "no", agent.SystemScope) },
	} {
		conv := fmt.Sprintf("c%d", i)
		model.Push(conv, scripted.Reply("asking", scripted.Call("ask", `{}`)), scripted.Text("done"))
		end, err := rt.SendAndWait(ctx, conv, "hi", agent.Scope{UserID: "u"})
		require.NoError(t, err)
		require.Equal(t, lazarus.TurnSuspended, end.Outcome)
		calls, _, err := rt.PendingCalls(ctx, "", 10)
		require.NoError(t, err)
		require.Len(t, calls, 1)
		require.NoError(t, answer(calls[0].GetId()))
		require.Eventually(t, func() bool { return model.Calls(conv) == 2 }, 10*time.Second, time.Millisecond)
	}
	require.Zero(t, expired.Load(), "an answer by the system scope is no expiry")

	model.Push("d", scripted.Reply("asking", scripted.Call("ask", `{}`)), scripted.Text("done"))
	end, err := rt.SendAndWait(ctx, "d", "hi", agent.Scope{UserID: "u"})
	require.NoError(t, err)
	require.Equal(t, lazarus.TurnSuspended, end.Outcome)
	clock.Advance(2 * time.Hour)
	require.Eventually(t, func() bool { return expired.Load() == 1 }, 10*time.Second, time.Millisecond,
		"the deadline's expiry is counted")
}

// TestModelCallMetricCountsAPanic: a Model whose Generate panics is a
// model call that failed: Metrics.ModelCall reports it, with an error
// wrapping agent.ErrPanicked (the turn fails with it).
func TestModelCallMetricCountsAPanic(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var calls atomic.Int64
	errs := make(chan error, 10)
	model := agent.ModelFunc(func(context.Context, agent.Turn, func(string)) (*messages.AssistantMessage, error) {
		panic("model bug")
	})
	rt, err := lazarus.Open(lazarus.Options{
		Model: model, IdleTimeout: -1,
		Metrics: lazarus.Metrics{ModelCall: func(_ time.Duration, err error) {
			calls.Add(1)
			errs <- err
		}},
	})
	require.NoError(t, err)
	defer rt.Close()

	_, err = rt.SendAndWait(ctx, "c", "hi", agent.Scope{UserID: "u"})
	require.ErrorIs(t, err, lazarus.ErrTurnFailed)
	require.ErrorIs(t, err, agent.ErrPanicked)
	require.EqualValues(t, 1, calls.Load(), "the panicked call is reported, once")
	require.ErrorIs(t, <-errs, agent.ErrPanicked)
}

// TestTurnAndToolCallMetrics: Metrics.TurnEnded reports each turn end the
// log records, once, with its outcome (answered, suspended, failed, a
// rewind's cancelled), and not a turn a kill stopped, which ends when it
// runs again; Metrics.ToolCalled reports each tool call with its executor.
func TestTurnAndToolCallMetrics(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var mu sync.Mutex
	turns := map[lazarus.TurnOutcome]int{}
	tools := map[messages.Executor]int{}
	model := scripted.New(scripted.Options{})
	rt, err := lazarus.Open(lazarus.Options{
		Model: model, IdleTimeout: -1,
		Tools: []agent.Tool{
			{Name: "ask", Executor: messages.Executor_EXECUTOR_HUMAN, Timeout: time.Hour},
			{Name: "add", Executor: messages.Executor_EXECUTOR_SERVER,
				Run: func(context.Context, agent.Invocation) (string, error) { return `3`, nil }},
		},
		Metrics: lazarus.Metrics{
			TurnEnded: func(o lazarus.TurnOutcome) {
				mu.Lock()
				defer mu.Unlock()
				turns[o]++
			},
			ToolCalled: func(e messages.Executor) {
				mu.Lock()
				defer mu.Unlock()
				tools[e]++
			},
		},
	})
	require.NoError(t, err)
	defer rt.Close()
	user := agent.Scope{UserID: "u"}
	counts := func() (map[lazarus.TurnOutcome]int, map[messages.Executor]int) {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(turns), maps.Clone(tools)
	}

	// A server tool, then an answer: one turn, answered.
	model.Push("c", scripted.Reply("adding", scripted.Call("add", `{}`)), scripted.Text("3"))
	_, err = rt.SendAndWait(ctx, "c", "1+2?", user)
	require.NoError(t, err)
	// A human call: suspended; answered: answered.
	model.Push("c", scripted.Reply("asking", scripted.Call("ask", `{}`)), scripted.Text("ok"))
	end, err := rt.SendAndWait(ctx, "c", "ask", user)
	require.NoError(t, err)
	require.Equal(t, lazarus.TurnSuspended, end.Outcome)
	calls, _, err := rt.PendingCalls(ctx, "", 10)
	require.NoError(t, err)
	require.Len(t, calls, 1)
	updates, err := rt.Subscribe(ctx, "c", end.Seq)
	require.NoError(t, err)
	require.NoError(t, rt.Resolve(ctx, calls[0].GetId(), `"yes"`, user))
	for u := range updates {
		if u.TurnEnd != nil {
			require.Equal(t, lazarus.TurnAnswered, u.TurnEnd.Outcome)
			break
		}
	}
	// A refusal: failed.
	model.PushError("c", fmt.Errorf("provider: %w", agent.ErrRefused))
	_, err = rt.SendAndWait(ctx, "c", "again", user)
	require.ErrorIs(t, err, lazarus.ErrTurnFailed)

	// A kill while the model is called: no turn end; the revival's
	// answer is one.
	held := model.Hold("c")
	_, err = rt.Send(ctx, "c", "slow", user)
	require.NoError(t, err)
	<-held
	require.True(t, rt.Kill("c"))
	model.Push("c", scripted.Text("late"))
	end, err = rt.SendAndWait(ctx, "c", "go on", user)
	require.NoError(t, err)
	require.Equal(t, lazarus.TurnAnswered, end.Outcome)

	// A rewind of a turn in progress: cancelled.
	seq, err := rt.Store().LastSeq(ctx, "c")
	require.NoError(t, err)
	held = model.Hold("c")
	_, err = rt.Send(ctx, "c", "to take back", user)
	require.NoError(t, err)
	<-held
	require.NoError(t, rt.Rewind(ctx, "c", seq, lazarus.RewindOptions{Reason: "no"}, user))
	model.Release("c")

	require.Eventually(t, func() bool {
		turns, _ := counts()
		return turns[lazarus.TurnCancelled] == 1
	}, 10*time.Second, time.Millisecond)
	gotTurns, gotTools := counts()
	require.Equal(t, map[lazarus.TurnOutcome]int{
		lazarus.TurnAnswered: 3, lazarus.TurnSuspended: 1, lazarus.TurnFailed: 1, lazarus.TurnCancelled: 1,
	}, gotTurns)
	require.Equal(t, map[messages.Executor]int{
		messages.Executor_EXECUTOR_SERVER: 1, messages.Executor_EXECUTOR_HUMAN: 1,
	}, gotTools)
}

// TestActivatedMetricCountsOnlySpawnedActors: Metrics.Activated is not
// called for an activation whose actor could not be spawned (here its
// name is taken already in Options.ActorSystem), only once one exists.
func TestActivatedMetricCountsOnlySpawnedActors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	defer sys.Shutdown()
	var activated atomic.Int64
	model := scripted.New(scripted.Options{})
	rt, err := lazarus.Open(lazarus.Options{Model: model, ActorSystem: sys, IdleTimeout: -1,
		Metrics: lazarus.Metrics{Activated: func() { activated.Add(1) }}})
	require.NoError(t, err)
	defer rt.Close()
	// The Runtime's first activation is the actor lazarus/conv-1.
	_, err = sys.Root.SpawnNamed(actor.PropsFromFunc(func(actor.Context) {}), "lazarus/conv-1")
	require.NoError(t, err)

	_, err = rt.SendMessage(ctx, "c", agent.UserMessage(agent.TextPart("hi")), lazarus.SendOptions{}, user)
	require.ErrorIs(t, err, actor.ErrNameExists)
	require.Zero(t, activated.Load(), "a spawn that failed is no activation")
	require.Zero(t, rt.Active())

	model.Push("c", scripted.Text("hello"))
	_, err = rt.SendAndWait(ctx, "c", "hi", user)
	require.NoError(t, err)
	require.EqualValues(t, 1, activated.Load())
}

// schedulesReadFail is a Store whose next read of a conversation's
// schedules fails (journal.ErrUnavailable) once armed.
type schedulesReadFail struct {
	*memjournal.Store
	armed atomic.Bool
}

func (s *schedulesReadFail) ConversationSchedules(ctx context.Context, conv string) ([]*messages.Schedule, error) {
	if s.armed.CompareAndSwap(true, false) {
		return nil, fmt.Errorf("schedulesReadFail: %w", journal.ErrUnavailable)
	}
	return s.Store.ConversationSchedules(ctx, conv)
}

// TestScheduleFiredMetric: Metrics.ScheduleFired reports each due
// occurrence once with what became of it: an occurrence whose message is
// committed is delivered; a delivery that fails (the Store could not be
// read) is failed, and the same occurrence handed again after the expiry
// actor's reply timeout is then delivered; an occurrence of an ended
// conversation is dropped.
func TestScheduleFiredMetric(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var mu sync.Mutex
	fired := map[lazarus.ScheduleOutcome]int{}
	counts := func() map[lazarus.ScheduleOutcome]int {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(fired)
	}
	want := func(delivered, dropped, failed int, msg string) {
		t.Helper()
		w := map[lazarus.ScheduleOutcome]int{}
		for o, n := range map[lazarus.ScheduleOutcome]int{lazarus.ScheduleDelivered: delivered, lazarus.ScheduleDropped: dropped, lazarus.ScheduleFailed: failed} {
			if n > 0 {
				w[o] = n
			}
		}
		require.Eventually(t, func() bool { return maps.Equal(counts(), w) }, 20*time.Second, time.Millisecond, "%s: %v", msg, counts())
	}
	// noRehand waits until the expiry actor has dropped the timer that
	// would hand the occurrence fired at at again (its reply timeout, 30 s
	// after the fire): the commit report removes it.
	noRehand := func(clock *actorstest.ManualClock, at time.Time) {
		t.Helper()
		rehand := at.Add(30 * time.Second)
		require.Eventually(t, func() bool { return !slices.ContainsFunc(clock.Dues(), rehand.Equal) }, 20*time.Second, time.Millisecond)
	}
	st := &schedulesReadFail{Store: memjournal.New(memjournal.Options{})}
	rt, model, clock := scheduleConversation(ctx, t, lazarus.Options{Store: st, Metrics: lazarus.Metrics{
		ScheduleFired: func(o lazarus.ScheduleOutcome) {
			mu.Lock()
			defer mu.Unlock()
			fired[o]++
		},
	}}, agent.Scope{})

	// Delivered.
	_, err := rt.Schedule(ctx, "c", lazarus.ScheduleSpec{After: 10 * time.Minute, Text: "one"}, agent.Scope{})
	require.NoError(t, err)
	clock.Advance(10*time.Minute - time.Second)
	at := schedT0.Add(10 * time.Minute)
	advanceWhenArmed(t, clock, at)
	require.NoError(t, model.WaitCalls(ctx, "c", 2))
	want(1, 0, 0, "the occurrence is delivered")
	noRehand(clock, at)

	// Failed, then delivered when handed again.
	_, err = rt.Schedule(ctx, "c", lazarus.ScheduleSpec{After: 10 * time.Minute, Text: "two"}, agent.Scope{})
	require.NoError(t, err)
	clock.Advance(10*time.Minute - time.Second)
	st.armed.Store(true)
	at = at.Add(10 * time.Minute)
	advanceWhenArmed(t, clock, at)
	want(1, 0, 1, "the failed delivery is counted")
	require.False(t, st.armed.Load(), "the delivery read the schedule")
	advanceWhenArmed(t, clock, at.Add(30*time.Second)) // the expiry actor hands it again
	require.NoError(t, model.WaitCalls(ctx, "c", 3))
	want(2, 0, 1, "handed again, the occurrence is delivered")
	require.Equal(t, []string{"one", "two"}, wakes(ctx, t, rt, "c"))
	// A re-hand of "two" still armed (nothing is armed to fail now) finds
	// the schedule gone and counts nothing.

	// Dropped: the conversation ended before the occurrence.
	_, err = rt.Schedule(ctx, "c", lazarus.ScheduleSpec{After: 10 * time.Minute, Text: "three"}, agent.Scope{})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return rt.End(ctx, "c") == nil }, 20*time.Second, time.Millisecond, "ends once at rest")
	clock.Advance(10*time.Minute - time.Second)
	advanceWhenArmed(t, clock, at.Add(30*time.Second+10*time.Minute))
	want(2, 1, 1, "the occurrence of an ended conversation is dropped")
	// The drop is counted before the schedule is removed.
	require.Eventually(t, func() bool {
		listed, err := rt.Schedules(ctx, "c")
		return err == nil && len(listed) == 0
	}, 20*time.Second, time.Millisecond, "the schedule of an ended conversation goes")
	require.Equal(t, []string{"one", "two"}, wakes(ctx, t, rt, "c"))
}

// TestMetricsCountAWakeOfUnknownOutcome: a schedule's wake whose write
// landed while the Store reported journal.ErrUnknownOutcome is delivered
// once (the retry finds its message in the log and writes nothing), so
// no hook fed from commits counts it: Metrics.ScheduleFired counts it as
// ScheduleUnknown and Metrics.AppendUnknown counts its write. Before,
// nothing counted it at all.
func TestMetricsCountAWakeOfUnknownOutcome(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var mu sync.Mutex
	fired := map[lazarus.ScheduleOutcome]int{}
	var unknown atomic.Int64
	st := &fireLostReplyStore{Store: memjournal.New(memjournal.Options{})}
	rt, model, clock := scheduleConversation(ctx, t, lazarus.Options{Store: st, Metrics: lazarus.Metrics{
		AppendUnknown: func() { unknown.Add(1) },
		ScheduleFired: func(o lazarus.ScheduleOutcome) {
			mu.Lock()
			defer mu.Unlock()
			fired[o]++
		},
	}}, agent.Scope{})

	_, err := rt.Schedule(ctx, "c", lazarus.ScheduleSpec{After: 10 * time.Minute, Text: "one"}, agent.Scope{})
	require.NoError(t, err)
	clock.Advance(10*time.Minute - time.Second)
	advanceWhenArmed(t, clock, schedT0.Add(10*time.Minute))
	require.NoError(t, model.WaitCalls(ctx, "c", 2), "the wake's turn runs")
	require.True(t, st.lost.Load(), "the wake's write was reported of unknown outcome")
	require.Equal(t, []string{"one"}, wakes(ctx, t, rt, "c"), "delivered once")
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return maps.Equal(fired, map[lazarus.ScheduleOutcome]int{lazarus.ScheduleUnknown: 1}) && unknown.Load() == 1
	}, 20*time.Second, time.Millisecond, "counted once, as unknown")
	require.Equal(t, "unknown", lazarus.ScheduleUnknown.String())
	require.Equal(t, "invalid", lazarus.ScheduleOutcome(0).String())
}

// TestExpiredMetricCountsAnExpiryOfUnknownOutcome: an expire whose write
// landed while the Store reported journal.ErrUnknownOutcome (a lost COMMIT
// reply) expired the call: its retry is refused as stale, the row says
// EXPIRED and the conversation records the expiry. Metrics.Expired counts
// it once, although no write was reported committed.
func TestExpiredMetricCountsAnExpiryOfUnknownOutcome(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var expired atomic.Int64
	clock := actorstest.NewManualClock(time.Unix(1_700_000_000, 0))
	model := scripted.New(scripted.Options{})
	store := expireLostReplyStore()
	rt, err := lazarus.Open(lazarus.Options{Store: store, Model: model, Clock: clock, IdleTimeout: -1,
		Tools:   []agent.Tool{{Name: toolApprove, Executor: messages.Executor_EXECUTOR_HUMAN, Timeout: time.Minute}},
		Metrics: lazarus.Metrics{Expired: func() { expired.Add(1) }}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = rt.Close() })
	callID := suspend(ctx, t, rt, model, "h")
	model.Push("h", scripted.Text("too late"))
	sub, err := rt.Subscribe(ctx, "h", 0)
	require.NoError(t, err)

	deadline := clock.Now().Add(time.Minute)
	require.Eventually(t, func() bool {
		next, ok := clock.Next()
		return ok && next.Equal(deadline)
	}, 20*time.Second, time.Millisecond, "the deadline armed")
	clock.Advance(time.Minute)
	require.Eventually(t, store.lost.Load, 20*time.Second, time.Millisecond, "the expire written, its outcome reported unknown")
	require.Zero(t, expired.Load(), "a write of unknown outcome is not counted yet")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		clock.Advance(time.Second)
		row, err := rt.Store().ToolCall(ctx, callID)
		require.NoError(c, err)
		assert.Equal(c, messages.ToolCallStatus_TOOL_CALL_STATUS_EXPIRED, row.GetStatus())
		assert.Zero(c, clock.Timers())
	}, 20*time.Second, 10*time.Millisecond, "the retry answered")
	awaitFinalAnswer(t, sub)
	require.EqualValues(t, 1, expired.Load(), "the expiry that landed is counted, once")
}

// TestSendAndWaitLeavesNoSubscription: SendAndWait follows the turn with a
// subscription of its own, which has ended, for Metrics.Subscribers too,
// once it returns: the gauge reads what the caller opened.
func TestSendAndWaitLeavesNoSubscription(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var subs atomic.Int64
	rt, err := lazarus.Open(lazarus.Options{
		Model:   scripted.New(scripted.Options{}),
		Metrics: lazarus.Metrics{Subscribers: func(d int) { subs.Add(int64(d)) }},
	})
	require.NoError(t, err)
	defer rt.Close()
	for i := range 50 {
		_, err := rt.SendAndWait(ctx, "c", fmt.Sprintf("hi %d", i), agent.Scope{UserID: "u"})
		require.NoError(t, err)
		require.Zero(t, subs.Load(), "turn %d: SendAndWait's subscription still counted after it returned", i)
	}
	sctx, scancel := context.WithCancel(ctx)
	_, err = rt.Subscribe(sctx, "c", 0)
	require.NoError(t, err)
	require.EqualValues(t, 1, subs.Load())
	scancel()
	require.Eventually(t, func() bool { return subs.Load() == 0 }, 10*time.Second, time.Millisecond)
}
