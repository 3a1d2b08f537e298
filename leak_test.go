package lazarus_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/actors/actorstest"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/internal/leakcheck"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

// blocked hears from the "block" tool of liveRuntime each time it runs;
// the tool then waits for its context to end.
var blocked = make(chan struct{}, 16)

// leakWithin bounds the wait for goroutines stopped by a call that
// returned to end: their last instructions after they signalled it.
const leakWithin = 20 * time.Second

// liveRuntime opens a Runtime with a manual clock, a server tool "lookup"
// and a human tool "approve" (an hour to answer), on the Store or
// directory opts names.
func liveRuntime(t *testing.T, opts lazarus.Options) (*lazarus.Runtime, *scripted.Model, *actorstest.ManualClock) {
	t.Helper()
	model := scripted.New(scripted.Options{Chunk: 2})
	clock := actorstest.NewManualClock(schedT0)
	opts.Model, opts.Clock = model, clock
	opts.Tools = []agent.Tool{
		{Name: "lookup", Executor: messages.Executor_EXECUTOR_SERVER, Run: func(context.Context, agent.Invocation) (string, error) { return "found", nil }},
		{Name: "approve", Executor: messages.Executor_EXECUTOR_HUMAN, Timeout: time.Hour},
		{Name: "block", Executor: messages.Executor_EXECUTOR_SERVER, Run: func(ctx context.Context, _ agent.Invocation) (string, error) {
			blocked <- struct{}{}
			<-ctx.Done()
			return "", ctx.Err()
		}},
	}
	rt, err := lazarus.Open(opts)
	require.NoError(t, err)
	return rt, model, clock
}

// live drives a Runtime through a life: subscriptions (one cancelled, one
// left to Close), turns with a server tool, a human call resolved and one
// expired, a schedule fired, a SendAndWait whose ctx ends mid-turn, a Kill
// and a revival, and a turn still running.
func live(ctx context.Context, t *testing.T, rt *lazarus.Runtime, model *scripted.Model, clock *actorstest.ManualClock) {
	t.Helper()
	subCtx, cancelSub := context.WithCancel(ctx)
	sub, err := rt.Subscribe(subCtx, "c", 0)
	require.NoError(t, err)
	_, err = rt.Subscribe(context.Background(), "c", 0) // Close ends it
	require.NoError(t, err)

	model.Push("c", scripted.Reply("", scripted.Call("lookup", `{}`)), scripted.Text("found it"))
	end, err := rt.SendAndWait(ctx, "c", "look it up", user)
	require.NoError(t, err)
	require.Equal(t, lazarus.TurnAnswered, end.Outcome)
	require.Equal(t, "found it", end.Text)
	for u := range sub {
		if u.TurnEnd != nil {
			break
		}
	}
	cancelSub()
	for range sub {
	}

	model.Push("h", scripted.Reply("", scripted.Call("approve", `{}`)))
	end, err = rt.SendAndWait(ctx, "h", "may I?", user)
	require.NoError(t, err)
	require.Equal(t, lazarus.TurnSuspended, end.Outcome)
	require.NoError(t, rt.Resolve(ctx, end.Pending[0].GetToolCallId(), `"yes"`, user))
	require.NoError(t, model.WaitCalls(ctx, "h", 2), "the resolved call's turn goes on")

	_, err = rt.Schedule(ctx, "c", lazarus.ScheduleSpec{After: 10 * time.Minute, Text: "remind me"}, user)
	require.NoError(t, err)
	advanceWhenArmed(t, clock, schedT0.Add(10*time.Minute))
	require.NoError(t, model.WaitCalls(ctx, "c", 3), "the schedule's turn")

	model.Push("x", scripted.Reply("", scripted.Call("approve", `{}`)))
	expires := clock.Now().Add(time.Hour) // the clock stands still meanwhile
	end, err = rt.SendAndWait(ctx, "x", "may I?", user)
	require.NoError(t, err)
	require.Equal(t, lazarus.TurnSuspended, end.Outcome)
	advanceWhenArmed(t, clock, expires)
	require.NoError(t, model.WaitCalls(ctx, "x", 2), "the expired call's turn goes on")

	entered := model.Hold("c")
	waitCtx, cancelWait := context.WithCancel(ctx)
	waited := make(chan error, 1)
	go func() {
		_, err := rt.SendAndWait(waitCtx, "c", "slow", user)
		waited <- err
	}()
	<-entered
	cancelWait()
	require.ErrorIs(t, <-waited, context.Canceled)
	model.Release("c")
	require.NoError(t, model.WaitCalls(ctx, "c", 4))

	require.True(t, rt.Kill("c"))
	end, err = rt.SendAndWait(ctx, "c", "still there?", user)
	require.NoError(t, err, "the killed conversation revives")
	require.Equal(t, lazarus.TurnAnswered, end.Outcome)

	model.Hold("h")
	_, err = rt.Send(ctx, "h", "one more", user)
	require.NoError(t, err)
	<-model.Entered("h") // Close cancels this model call
	model.Push("b", scripted.Reply("", scripted.Call("block", `{}`)))
	_, err = rt.Send(ctx, "b", "run it", user)
	require.NoError(t, err)
	<-blocked // and this tool run
}

// TestCloseLeavesNoGoroutine: a Runtime that lived (turns, tools, human
// calls resolved and expired, a schedule, subscriptions, a kill and a
// revival, a turn in flight), on memjournal and on Pebble, leaves no
// goroutine of its own, of protoactor's or of Pebble's once Close
// returned. Run in a process of its own, so that no other test's goroutine
// is counted.
func TestCloseLeavesNoGoroutine(t *testing.T) {
	if !leakcheck.Isolate(t) {
		return
	}
	audit := lazarus.AuditOptions{Enabled: true, TTL: time.Hour}
	for name, opts := range map[string]func() lazarus.Options{
		"memjournal": func() lazarus.Options {
			return lazarus.Options{Store: memjournal.New(memjournal.Options{Audit: true}), Audit: audit, ResumeInterval: lazarus.MinResumeInterval}
		},
		"pebblejournal": func() lazarus.Options {
			return lazarus.Options{Dir: t.TempDir(), Audit: audit, ResumeInterval: lazarus.MinResumeInterval}
		},
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			base := leakcheck.Take()
			rt, model, clock := liveRuntime(t, opts())
			live(ctx, t, rt, model, clock)
			// A caller still waiting for a turn when Close comes.
			entered := model.Hold("w")
			waited := make(chan error, 1)
			go func() {
				_, err := rt.SendAndWait(ctx, "w", "wait for me", user)
				waited <- err
			}()
			<-entered
			require.NoError(t, rt.Close())
			require.ErrorIs(t, <-waited, lazarus.ErrClosed)
			base.Check(t, leakWithin)
		})
	}
}

// TestCancelledSubscriptionLeavesNoGoroutine: a subscription whose context
// ends (while it waits, and while it is behind) leaves nothing running,
// the Runtime still open.
func TestCancelledSubscriptionLeavesNoGoroutine(t *testing.T) {
	if !leakcheck.Isolate(t) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rt, model, _ := liveRuntime(t, lazarus.Options{})
	defer rt.Close()
	_, err := rt.SendAndWait(ctx, "c", "hi", user)
	require.NoError(t, err)
	base := leakcheck.Take()

	idleCtx, cancelIdle := context.WithCancel(ctx)
	idle, err := rt.Subscribe(idleCtx, "c", 0)
	require.NoError(t, err)
	behindCtx, cancelBehind := context.WithCancel(ctx)
	_, err = rt.Subscribe(behindCtx, "c", 0) // never read
	require.NoError(t, err)
	_, err = rt.SubscribeWith(behindCtx, "c", 0, lazarus.SubscribeOptions{Agent: lazarus.ViewOf("")}) // never read
	require.NoError(t, err)
	view, err := rt.SubscribeWith(idleCtx, "c", 0, lazarus.SubscribeOptions{Agent: lazarus.ViewOf("")})
	require.NoError(t, err)
	for u := range view {
		if u.TurnEnd != nil {
			break
		}
	}
	for u := range idle {
		if u.TurnEnd != nil {
			break
		}
	}
	for range 3 {
		_, err = rt.SendAndWait(ctx, "c", "more", user)
		require.NoError(t, err)
	}
	cancelIdle()
	cancelBehind()
	for range idle {
	}
	for range view {
	}

	// Calls whose context ended, before or during them.
	ended, cancelEnded := context.WithCancel(ctx)
	cancelEnded()
	_, err = rt.Subscribe(ended, "c", 0)
	require.ErrorIs(t, err, context.Canceled)
	_, err = rt.Send(ended, "c", "no", user)
	require.ErrorIs(t, err, context.Canceled)
	_, err = rt.SendAndWait(ended, "c", "no", user)
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, rt.Wake(ended, "c"), context.Canceled)
	_, err = rt.History(ended, "c", 0, 0)
	require.ErrorIs(t, err, context.Canceled)
	for range 20 {
		racing, cancelRacing := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = rt.SendAndWait(racing, "c", "racing", user)
		}()
		cancelRacing()
		<-done
	}
	_, err = rt.SendAndWait(ctx, "c", "after", user)
	require.NoError(t, err)
	require.Positive(t, model.Calls("c"))
	// The activation of "c" is alive; it and its mailbox worker are not
	// the subscriptions'. Kill it so that only what they started counts.
	rt.Kill("c")
	base.Check(t, leakWithin)
}

// TestCloseEndsAnAgentViewNeverRead: a subscription with an agent view
// (SubscribeWith, SubscribeOptions.Agent) whose reader stops reading and
// whose context never ends is ended by Close, as a plain subscription is:
// its goroutine, which hands the view's updates on, waited for good to
// hand one to a reader that never came.
func TestCloseEndsAnAgentViewNeverRead(t *testing.T) {
	if !leakcheck.Isolate(t) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	base := leakcheck.Take()
	rt, _, _ := liveRuntime(t, lazarus.Options{})
	view, err := rt.SubscribeWith(context.Background(), "c", 0, lazarus.SubscribeOptions{Agent: lazarus.ViewOf("")})
	require.NoError(t, err)
	end, err := rt.SendAndWait(ctx, "c", "hi", user)
	require.NoError(t, err)
	require.Equal(t, lazarus.TurnAnswered, end.Outcome)
	require.NoError(t, rt.Close())
	base.Check(t, leakWithin)
	// What the view had in hand is still read, then the channel is closed.
	for range view {
	}
}
