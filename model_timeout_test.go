package lazarus_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/actors/actorstest"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/snapshot"
)

// hangingModel streams "par" and then never answers, until its context
// ends, for its first hang calls; later calls answer "back". Each call
// reports its context on started, and the error of a call that ended on
// ended.
type hangingModel struct {
	hang    int32
	calls   atomic.Int32
	started chan context.Context
	ended   chan error
}

func newHangingModel(hang int32) *hangingModel {
	return &hangingModel{hang: hang, started: make(chan context.Context, 8), ended: make(chan error, 8)}
}

func (m *hangingModel) Generate(ctx context.Context, _ agent.Turn, onDelta func(string)) (*messages.AssistantMessage, error) {
	if m.calls.Add(1) > m.hang {
		m.started <- ctx
		return agent.Text("back"), nil
	}
	if onDelta != nil {
		onDelta("par")
	}
	// Once the delta is out: a test that then runs the clock past the
	// bound finds the call has streamed.
	m.started <- ctx
	<-ctx.Done()
	m.ended <- ctx.Err()
	return nil, ctx.Err()
}

func recv[T any](t *testing.T, ctx context.Context, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-ctx.Done():
		t.Fatalf("no %s before the test's bound", what)
		var zero T
		return zero
	}
}

// TestModelCallThatNeverAnswersTimesOut: a model call that never answers
// (a provider that accepted the request and keeps the connection open) is
// ended by Options.ModelTimeout, on the Clock: its context is cancelled,
// the call fails with an error wrapping context.DeadlineExceeded (code
// timeout) that the default retry policy retries (subscribers see the
// retry, with Restart for the deltas it streamed), each attempt gets the
// whole bound, the failed calls have their audit rows, and once the
// attempts run out the turn fails durably (turn_failed). The conversation
// then answers the next message.
func TestModelCallThatNeverAnswersTimesOut(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	mem := memjournal.New(memjournal.Options{Audit: true})
	defer mem.Close()
	clock := actorstest.NewManualClock(time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC))
	model := newHangingModel(2)
	rt, err := lazarus.Open(lazarus.Options{Store: mem, Model: model, Clock: clock, IdleTimeout: -1,
		Audit: lazarus.AuditOptions{Enabled: true}, ModelTimeout: time.Minute,
		ModelRetry: lazarus.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 2}})
	require.NoError(t, err)
	defer rt.Close()
	sub, err := rt.Subscribe(ctx, "c", 0)
	require.NoError(t, err)
	_, err = rt.Send(ctx, "c", "hi", agent.Scope{UserID: "u"})
	require.NoError(t, err)

	first := recv(t, ctx, model.started, "first call")
	clock.Advance(time.Minute - time.Nanosecond)
	require.NoError(t, first.Err(), "the call runs until its bound")
	clock.Advance(time.Nanosecond)
	retry := awaitUpdate(t, sub, func(u lazarus.Update) bool { return u.Retry != nil })
	require.ErrorIs(t, recv(t, ctx, model.ended, "end of the first call"), context.Canceled, "the model saw its context end")
	require.ErrorIs(t, retry.Err, context.DeadlineExceeded)
	require.Contains(t, retry.Err.Error(), "1m0s")
	require.Equal(t, actors.CodeTimeout, actors.TurnFailureCode(retry.Err))
	require.Equal(t, 1, retry.Retry.Attempt)
	require.True(t, retry.Restart, "the deltas the call streamed are void")
	rows, err := mem.ModelCalls(ctx, "c")
	require.NoError(t, err)
	require.Len(t, rows, 1, "the timed-out call has its row")
	require.Equal(t, actors.CodeTimeout, rows[0].GetError().GetCode())
	require.Equal(t, int64(time.Minute), rows[0].GetLatencyNanos())

	clock.Advance(time.Second) // the retry's delay
	second := recv(t, ctx, model.started, "second call")
	clock.Advance(time.Minute - time.Nanosecond)
	require.NoError(t, second.Err(), "the retry gets the whole bound")
	clock.Advance(time.Nanosecond)
	end := awaitUpdate(t, sub, func(u lazarus.Update) bool { return u.TurnEnd != nil }).TurnEnd
	require.Equal(t, lazarus.TurnFailed, end.Outcome)
	require.ErrorIs(t, end.Err, context.DeadlineExceeded, "read back from turn_failed")
	var te *lazarus.TurnError
	require.True(t, errors.As(end.Err, &te))
	require.Equal(t, actors.CodeTimeout, te.Code)
	require.Equal(t, 2, te.Attempts)
	evs, err := mem.Events(ctx, "c", journal.EventQuery{})
	require.NoError(t, err)
	require.NotNil(t, evs[len(evs)-1].GetTurnFailed(), "the failure is durable")

	// The conversation goes on.
	turnEnd, err := rt.SendAndWait(ctx, "c", "again", agent.Scope{UserID: "u"})
	require.NoError(t, err)
	require.Equal(t, lazarus.TurnAnswered, turnEnd.Outcome)
	require.Equal(t, "back", turnEnd.Text)
}

// TestModelTimeoutDefault: a zero Options.ModelTimeout is
// DefaultModelTimeout.
func TestModelTimeoutDefault(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	clock := actorstest.NewManualClock(time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC))
	model := newHangingModel(1)
	rt, err := lazarus.Open(lazarus.Options{Model: model, Clock: clock, IdleTimeout: -1,
		ModelRetry: lazarus.RetryPolicy{MaximumAttempts: 1}})
	require.NoError(t, err)
	defer rt.Close()
	sub, err := rt.Subscribe(ctx, "c", 0)
	require.NoError(t, err)
	_, err = rt.Send(ctx, "c", "hi", agent.Scope{})
	require.NoError(t, err)
	call := recv(t, ctx, model.started, "the call")
	clock.Advance(lazarus.DefaultModelTimeout - time.Nanosecond)
	require.NoError(t, call.Err())
	clock.Advance(time.Nanosecond)
	end := awaitUpdate(t, sub, func(u lazarus.Update) bool { return u.TurnEnd != nil }).TurnEnd
	require.Equal(t, lazarus.TurnFailed, end.Outcome)
	require.ErrorIs(t, end.Err, context.DeadlineExceeded)
}

// TestHungModelCallWithoutATimeout: with a negative Options.ModelTimeout a
// call is not bounded (no timer is armed), and a call that never answers
// holds only its turn: the conversation's mailbox is not blocked (a Send
// is answered at once), and a new message, a rewind, a kill or Close
// cancels the call's context.
func TestHungModelCallWithoutATimeout(t *testing.T) {
	for _, end := range []string{"message", "rewind", "kill", "close"} {
		t.Run(end, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			clock := actorstest.NewManualClock(time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC))
			model := newHangingModel(1)
			rt, err := lazarus.Open(lazarus.Options{Model: model, Clock: clock, IdleTimeout: -1, ModelTimeout: -1})
			require.NoError(t, err)
			defer rt.Close()
			seq, err := rt.Send(ctx, "c", "hi", agent.Scope{})
			require.NoError(t, err)
			call := recv(t, ctx, model.started, "the call")
			require.Zero(t, clock.Timers(), "no bound is armed")
			clock.Advance(24 * time.Hour)
			require.NoError(t, call.Err(), "nothing on the clock ends the call")
			switch end {
			case "message":
				turnEnd, err := rt.SendAndWait(ctx, "c", "again", agent.Scope{})
				require.NoError(t, err)
				require.Equal(t, "back", turnEnd.Text, "the new message's turn is answered")
			case "rewind":
				require.NoError(t, rt.Rewind(ctx, "c", seq-1, lazarus.RewindOptions{}, agent.Scope{}))
			case "kill":
				require.True(t, rt.Kill("c"))
			case "close":
				require.NoError(t, rt.Close())
			}
			<-call.Done()
			require.ErrorIs(t, recv(t, ctx, model.ended, "end of the call"), context.Canceled)
		})
	}
}

// TestAnswerReturnedAtTheModelTimeoutStands: a model that returns a whole
// answer although the bound cancelled its context (it was done as the
// timer fired) has that answer recorded: the bound fails a call that has
// no answer, it does not throw one away.
func TestAnswerReturnedAtTheModelTimeoutStands(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	clock := actorstest.NewManualClock(time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC))
	started := make(chan struct{}, 1)
	model := agent.ModelFunc(func(ctx context.Context, _ agent.Turn, _ func(string)) (*messages.AssistantMessage, error) {
		started <- struct{}{}
		<-ctx.Done()
		return agent.Text("late"), nil
	})
	rt, err := lazarus.Open(lazarus.Options{Model: model, Clock: clock, IdleTimeout: -1, ModelTimeout: time.Minute})
	require.NoError(t, err)
	defer rt.Close()
	sub, err := rt.Subscribe(ctx, "c", 0)
	require.NoError(t, err)
	_, err = rt.Send(ctx, "c", "hi", agent.Scope{})
	require.NoError(t, err)
	recv(t, ctx, started, "the call")
	clock.Advance(time.Minute)
	end := awaitUpdate(t, sub, func(u lazarus.Update) bool { return u.TurnEnd != nil || u.Retry != nil })
	require.Nil(t, end.Retry, "no retry")
	require.Equal(t, lazarus.TurnAnswered, end.TurnEnd.Outcome)
	require.Equal(t, "late", end.TurnEnd.Text)
}

// logTail is an io.Writer of log lines, safe for concurrent writes.
type logTail struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logTail) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logTail) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestSummaryModelThatNeverAnswersTimesOut: a summary holds the
// conversation's turn at the model (ModelGate) while its Summarizer runs,
// so a summarizing model that never answers would hold every later turn.
// Options.ModelTimeout bounds it as it bounds a model call, on the Clock
// from the summary's start past the gate: its context is cancelled, the
// summary fails (logged, with an error naming the bound), the turn that
// waited at the gate is answered, and the summary is tried again once the
// log has grown past the failure, which now succeeds.
func TestSummaryModelThatNeverAnswersTimesOut(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	clock := actorstest.NewManualClock(time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC))
	writer := scripted.New(scripted.Options{Default: func(string, agent.Turn) (*messages.AssistantMessage, error) {
		return scripted.Text("They said hi."), nil
	}})
	held := writer.Hold("c") // the first summary call blocks until its context ends
	started := make(chan context.Context, 4)
	summaryModel := agent.ModelFunc(func(ctx context.Context, turn agent.Turn, onDelta func(string)) (*messages.AssistantMessage, error) {
		select {
		case started <- ctx:
		default: // later summaries: not awaited
		}
		return writer.Generate(ctx, turn, onDelta)
	})
	var logs logTail
	rt, err := lazarus.Open(lazarus.Options{Model: scripted.New(scripted.Options{}), Clock: clock, IdleTimeout: -1,
		ModelTimeout: time.Minute, Summarizer: snapshot.LLM{Model: summaryModel},
		Summary: snapshot.Policy{MaxEvents: 2, KeepRecent: -1},
		Logger:  slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err)
	defer rt.Close()
	sub, err := rt.Subscribe(ctx, "c", 0)
	require.NoError(t, err)
	for range 2 {
		_, err := rt.SendAndWait(ctx, "c", "hi", agent.Scope{UserID: "u"})
		require.NoError(t, err)
	}
	call := recv(t, ctx, started, "the summary call")
	recv(t, ctx, (<-chan struct{})(held), "the held summary call")

	// A turn's model call now waits at the gate the summary holds.
	seq, err := rt.Send(ctx, "c", "still there?", agent.Scope{UserID: "u"})
	require.NoError(t, err)
	clock.Advance(time.Minute - time.Nanosecond)
	require.NoError(t, call.Err(), "the summary runs until its bound")
	clock.Advance(time.Nanosecond)
	recv(t, ctx, call.Done(), "end of the summary call")
	end := awaitUpdate(t, sub, func(u lazarus.Update) bool { return u.TurnEnd != nil && u.TurnEnd.Seq > seq }).TurnEnd
	require.Equal(t, lazarus.TurnAnswered, end.Outcome, "the turn that waited goes on")

	// The failure is handled (logged, and charged to the log the summary
	// saw: the answer above, written before or after the failure reached
	// the actor, makes it due again). Once the log has grown past it, the
	// summary is tried again, and the model answers.
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "summary failed") }, 10*time.Second, time.Millisecond)
	require.Contains(t, logs.String(), "no answer within the model timeout, 1m0s")
	_, err = rt.SendAndWait(ctx, "c", "once more", agent.Scope{UserID: "u"})
	require.NoError(t, err)
	recv(t, ctx, started, "the summary's second call")
	require.Eventually(t, func() bool {
		sum, err := rt.Store().LatestSummary(ctx, "c")
		return err == nil && sum.GetContent() == "They said hi."
	}, 10*time.Second, time.Millisecond, "the summary is written")
}
