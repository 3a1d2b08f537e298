package lazarus_test

import (
	"context"
	"fmt"
	"testing"
	"time"

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

// hangingTool is a server tool whose runs never return until their
// context ends, then return an error wrapping the context's. Each run
// reports its context on started, and the error its context ended with
// on ended.
type hangingTool struct {
	started chan context.Context
	ended   chan error
}

func newHangingTool() *hangingTool {
	return &hangingTool{started: make(chan context.Context, 8), ended: make(chan error, 8)}
}

func (h *hangingTool) tool(name string, runTimeout time.Duration) agent.Tool {
	return agent.Tool{Name: name, Executor: messages.Executor_EXECUTOR_SERVER, RunTimeout: runTimeout,
		Run: func(ctx context.Context, _ agent.Invocation) (string, error) {
			h.started <- ctx
			<-ctx.Done()
			h.ended <- ctx.Err()
			return "", fmt.Errorf("lookup gave up: %w", ctx.Err())
		}}
}

// testingT is what toolResults needs of its test: a *testing.T, or the
// *assert.CollectT of a require.EventuallyWithT condition, which runs on
// a goroutine of its own, where the test's FailNow must not be called.
type testingT interface {
	require.TestingT
	Helper()
}

// toolResults returns the tool_result events of conversation c.
func toolResults(t testingT, ctx context.Context, store journal.Store, c string) []*messages.ToolResultEvent {
	t.Helper()
	evs, err := store.Events(ctx, c, journal.EventQuery{})
	require.NoError(t, err)
	var out []*messages.ToolResultEvent
	for _, ev := range evs {
		if r := ev.GetToolResult(); r != nil {
			out = append(out, r)
		}
	}
	return out
}

// TestServerToolThatNeverReturnsTimesOut: a server tool whose run never
// returns (until its context ends) is ended by Options.ToolTimeout, on
// the Clock: its context ends with context.DeadlineExceeded (a context
// derived from it too), and the error it then returns is recorded once as
// the call's result, a tool error of code agent.CodeTimeout naming the
// bound, with the call's row errored; the model sees it on its next call
// and the turn is answered. The call is not run again.
func TestServerToolThatNeverReturnsTimesOut(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	mem := memjournal.New(memjournal.Options{})
	defer mem.Close()
	clock := actorstest.NewManualClock(time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC))
	model := scripted.New(scripted.Options{})
	model.Push("c", scripted.Reply("looking", scripted.Call("lookup", `{}`)), scripted.Text("it timed out"))
	tool := newHangingTool()
	rt, err := lazarus.Open(lazarus.Options{Store: mem, Model: model, Clock: clock, IdleTimeout: -1, ModelTimeout: -1,
		ToolTimeout: time.Minute, Tools: []agent.Tool{tool.tool("lookup", 0)}})
	require.NoError(t, err)
	defer rt.Close()
	sub, err := rt.Subscribe(ctx, "c", 0)
	require.NoError(t, err)
	_, err = rt.Send(ctx, "c", "hi", agent.Scope{UserID: "u"})
	require.NoError(t, err)

	run := recv(t, ctx, tool.started, "the run")
	clock.Advance(time.Minute - time.Nanosecond)
	require.NoError(t, run.Err(), "the run goes on until its bound")
	clock.Advance(time.Nanosecond)
	require.ErrorIs(t, recv(t, ctx, tool.ended, "end of the run"), context.DeadlineExceeded, "the tool sees its deadline pass")
	child, cancelChild := context.WithCancel(run)
	defer cancelChild()
	require.Equal(t, context.DeadlineExceeded, child.Err(), "a context derived from the run's says so too")
	require.Equal(t, context.DeadlineExceeded, context.Cause(run))

	end := awaitUpdate(t, sub, func(u lazarus.Update) bool { return u.TurnEnd != nil }).TurnEnd
	require.Equal(t, lazarus.TurnAnswered, end.Outcome, "the turn goes on")
	require.Equal(t, "it timed out", end.Text)
	results := toolResults(t, ctx, mem, "c")
	require.Len(t, results, 1, "the result is recorded once")
	e := results[0].GetOutcome().GetError()
	require.Equal(t, agent.CodeTimeout, e.GetCode())
	require.Contains(t, e.GetMessage(), "1m0s")
	require.Contains(t, e.GetMessage(), context.DeadlineExceeded.Error())
	require.Contains(t, e.GetMessage(), "lookup gave up", "what the tool returned")
	row, err := mem.ToolCall(ctx, results[0].GetToolCallId())
	require.NoError(t, err)
	require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_ERRORED, row.GetStatus())
	require.Equal(t, agent.CodeTimeout, row.GetResult().GetError().GetCode())

	turns := model.Turns("c")
	require.Len(t, turns, 2)
	require.Contains(t, fmt.Sprint(turns[1].Context), "no result within the tool timeout", "the model sees the error")
	select {
	case <-tool.started:
		t.Fatal("the call ran again")
	default:
	}
	require.Zero(t, clock.Timers(), "no timer is left armed")
}

// TestToolRunTimeoutOverridesToolTimeout: a tool's RunTimeout replaces
// Options.ToolTimeout for its runs: a positive one bounds them where the
// runtime sets no bound, a negative one leaves them unbounded where it
// sets one.
func TestToolRunTimeoutOverridesToolTimeout(t *testing.T) {
	for _, tc := range []struct {
		name            string
		runtime, tool   time.Duration
		bound           time.Duration // 0: none
		wantTimersArmed int
	}{
		{name: "tool bound", runtime: -1, tool: time.Second, bound: time.Second, wantTimersArmed: 1},
		{name: "tool unbounded", runtime: time.Second, tool: -1, wantTimersArmed: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			clock := actorstest.NewManualClock(time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC))
			model := scripted.New(scripted.Options{})
			model.Push("c", scripted.Reply("looking", scripted.Call("lookup", `{}`)), scripted.Text("done"))
			tool := newHangingTool()
			rt, err := lazarus.Open(lazarus.Options{Model: model, Clock: clock, IdleTimeout: -1, ModelTimeout: -1,
				ToolTimeout: tc.runtime, Tools: []agent.Tool{tool.tool("lookup", tc.tool)}})
			require.NoError(t, err)
			defer rt.Close()
			sub, err := rt.Subscribe(ctx, "c", 0)
			require.NoError(t, err)
			_, err = rt.Send(ctx, "c", "hi", agent.Scope{})
			require.NoError(t, err)
			run := recv(t, ctx, tool.started, "the run")
			require.Equal(t, tc.wantTimersArmed, clock.Timers())
			if tc.bound == 0 {
				clock.Advance(24 * time.Hour)
				require.NoError(t, run.Err(), "nothing on the clock ends the run")
				require.True(t, rt.Kill("c"))
				require.ErrorIs(t, recv(t, ctx, tool.ended, "end of the run"), context.Canceled)
				return
			}
			clock.Advance(tc.bound - time.Nanosecond)
			require.NoError(t, run.Err())
			clock.Advance(time.Nanosecond)
			require.ErrorIs(t, recv(t, ctx, tool.ended, "end of the run"), context.DeadlineExceeded)
			end := awaitUpdate(t, sub, func(u lazarus.Update) bool { return u.TurnEnd != nil }).TurnEnd
			require.Equal(t, lazarus.TurnAnswered, end.Outcome)
		})
	}
}

// TestToolTimeoutDefault: a zero Options.ToolTimeout is
// DefaultToolTimeout.
func TestToolTimeoutDefault(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	clock := actorstest.NewManualClock(time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC))
	model := scripted.New(scripted.Options{})
	model.Push("c", scripted.Reply("looking", scripted.Call("lookup", `{}`)), scripted.Text("done"))
	tool := newHangingTool()
	rt, err := lazarus.Open(lazarus.Options{Model: model, Clock: clock, IdleTimeout: -1, ModelTimeout: -1,
		Tools: []agent.Tool{tool.tool("lookup", 0)}})
	require.NoError(t, err)
	defer rt.Close()
	_, err = rt.Send(ctx, "c", "hi", agent.Scope{})
	require.NoError(t, err)
	run := recv(t, ctx, tool.started, "the run")
	clock.Advance(lazarus.DefaultToolTimeout - time.Nanosecond)
	require.NoError(t, run.Err())
	clock.Advance(time.Nanosecond)
	require.ErrorIs(t, recv(t, ctx, tool.ended, "end of the run"), context.DeadlineExceeded)
}

// TestResultReturnedAtTheToolTimeoutStands: a tool that returns a result
// although the bound ended its context has that result recorded: the
// bound fails a run that has none, it does not throw one away.
func TestResultReturnedAtTheToolTimeoutStands(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	mem := memjournal.New(memjournal.Options{})
	defer mem.Close()
	clock := actorstest.NewManualClock(time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC))
	model := scripted.New(scripted.Options{})
	model.Push("c", scripted.Reply("looking", scripted.Call("lookup", `{}`)), scripted.Text("done"))
	started := make(chan struct{}, 1)
	tool := agent.Tool{Name: "lookup", Executor: messages.Executor_EXECUTOR_SERVER, Run: func(ctx context.Context, _ agent.Invocation) (string, error) {
		started <- struct{}{}
		<-ctx.Done()
		return `{"late":true}`, nil
	}}
	rt, err := lazarus.Open(lazarus.Options{Store: mem, Model: model, Clock: clock, IdleTimeout: -1, ModelTimeout: -1,
		ToolTimeout: time.Minute, Tools: []agent.Tool{tool}})
	require.NoError(t, err)
	defer rt.Close()
	_, err = rt.Send(ctx, "c", "hi", agent.Scope{})
	require.NoError(t, err)
	recv(t, ctx, started, "the run")
	clock.Advance(time.Minute)
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Len(c, toolResults(c, ctx, mem, "c"), 1) }, 10*time.Second, time.Millisecond)
	require.Equal(t, `{"late":true}`, toolResults(t, ctx, mem, "c")[0].GetOutcome().GetContent())
}

// TestHungServerToolWithoutATimeout: with a negative Options.ToolTimeout
// a run is not bounded (no timer is armed), and a run that never returns
// holds its turn, however far the clock moves: the activation is not
// passivated; a kill, Delete or Close cancels the run's context.
func TestHungServerToolWithoutATimeout(t *testing.T) {
	for _, end := range []string{"kill", "delete", "close"} {
		t.Run(end, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			clock := actorstest.NewManualClock(time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC))
			model := scripted.New(scripted.Options{})
			model.Push("c", scripted.Reply("looking", scripted.Call("lookup", `{}`)), scripted.Text("done"))
			tool := newHangingTool()
			rt, err := lazarus.Open(lazarus.Options{Model: model, Clock: clock, IdleTimeout: time.Minute, ModelTimeout: -1,
				ToolTimeout: -1, Tools: []agent.Tool{tool.tool("lookup", 0)}})
			require.NoError(t, err)
			defer rt.Close()
			_, err = rt.Send(ctx, "c", "hi", agent.Scope{})
			require.NoError(t, err)
			run := recv(t, ctx, tool.started, "the run")
			require.Zero(t, clock.Timers(), "no bound is armed (and no idle timer while the tool runs)")
			clock.Advance(24 * time.Hour)
			require.NoError(t, run.Err(), "nothing on the clock ends the run")
			require.True(t, rt.IsActive("c"), "not passivated")
			switch end {
			case "kill":
				require.True(t, rt.Kill("c"))
			case "delete":
				require.NoError(t, rt.Delete(ctx, "c"))
			case "close":
				require.NoError(t, rt.Close())
			}
			recv(t, ctx, run.Done(), "the run's context ended")
			require.ErrorIs(t, recv(t, ctx, tool.ended, "end of the run"), context.Canceled)
		})
	}
}
