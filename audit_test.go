package lazarus_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

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

// plainStore hides every method but journal.Store's: a third-party adapter
// that does not report its audit setting.
type plainStore struct{ journal.Store }

// TestOpenAuditMustAgreeWithStore: a Store given in Options decides whether
// audit rows are kept, so Options.Audit.Enabled must agree with what it
// reports; Open refuses a contradiction instead of ignoring one of them.
func TestOpenAuditMustAgreeWithStore(t *testing.T) {
	cases := []struct {
		name           string
		storeAudit     bool
		hide           bool // the Store does not implement journal.AuditReporter
		optsAudit      bool
		refused        bool
		wantModelCalls int
	}{
		{name: "both off", wantModelCalls: 0},
		{name: "both on", storeAudit: true, optsAudit: true, wantModelCalls: 1},
		{name: "options on, store off", optsAudit: true, refused: true},
		{name: "options off, store on", storeAudit: true, refused: true},
		{name: "a store that does not say: options on", storeAudit: true, hide: true, optsAudit: true, wantModelCalls: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			mem := memjournal.New(memjournal.Options{Audit: tc.storeAudit})
			defer mem.Close()
			var store journal.Store = mem
			if tc.hide {
				store = plainStore{mem}
			}
			model := scripted.New(scripted.Options{})
			rt, err := lazarus.Open(lazarus.Options{Store: store, Model: model, Audit: lazarus.AuditOptions{Enabled: tc.optsAudit}})
			if tc.refused {
				require.ErrorIs(t, err, journal.ErrInvalid)
				require.Nil(t, rt)
				_, err := mem.Conversation(ctx, "c")
				require.ErrorIs(t, err, journal.ErrNotFound, "the Store is left open and untouched")
				return
			}
			require.NoError(t, err)
			defer rt.Close()
			model.Push("c", scripted.Text("hello"))
			end, err := rt.SendAndWait(ctx, "c", "hi", agent.Scope{UserID: "u"})
			require.NoError(t, err)
			require.Equal(t, "hello", end.Text)
			calls, err := mem.ModelCalls(ctx, "c")
			require.NoError(t, err)
			require.Len(t, calls, tc.wantModelCalls)
		})
	}
}

// TestAuditTTLSweepsOldRows: with Options.Audit.TTL, the runtime deletes
// the audit rows older than the TTL, on its clock, every TTL/2, in every
// conversation (the seeds' TTL-based GC of model_calls), and keeps the
// newer ones.
func TestAuditTTLSweepsOldRows(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	clock := actorstest.NewManualClock(time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC))
	mem := memjournal.New(memjournal.Options{Audit: true})
	defer mem.Close()
	model := scripted.New(scripted.Options{})
	rt, err := lazarus.Open(lazarus.Options{Store: mem, Model: model, Clock: clock,
		Audit: lazarus.AuditOptions{Enabled: true, TTL: time.Hour}})
	require.NoError(t, err)
	defer rt.Close()
	user := agent.Scope{UserID: "u"}
	rows := func(conv string) int {
		calls, err := mem.ModelCalls(ctx, conv)
		require.NoError(t, err)
		return len(calls)
	}

	model.Push("old", scripted.Text("first"))
	_, err = rt.SendAndWait(ctx, "old", "hi", user)
	require.NoError(t, err)
	require.Equal(t, 1, rows("old"))

	clock.Advance(45 * time.Minute) // a sweep at 30m: the row is 30m old
	require.Equal(t, 1, rows("old"), "a row younger than the TTL stays")

	model.Push("new", scripted.Text("second"))
	_, err = rt.SendAndWait(ctx, "new", "hi", user)
	require.NoError(t, err)
	require.Equal(t, 1, rows("new"))

	clock.Advance(46 * time.Minute) // sweeps at 60m (cutoff: the row's time) and 90m
	require.Equal(t, 0, rows("old"), "a row older than the TTL is deleted")
	require.Equal(t, 1, rows("new"), "the other conversation's newer row stays")

	clock.Advance(time.Hour)
	require.Equal(t, 0, rows("new"))
	n, err := rt.GCAudit(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "nothing left to delete")
}

// TestAuditRecordsEvictions: each audit row names what its context left
// out (the seeds' "what was evicted"): the span the summary stands for,
// and the spans a rewind skipped.
func TestAuditRecordsEvictions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	mem := memjournal.New(memjournal.Options{Audit: true})
	defer mem.Close()
	model := scripted.New(scripted.Options{})
	model.Push("c", scripted.Text("one"), scripted.Text("two"), scripted.Text("three"), scripted.Text("four"), scripted.Text("five"))
	rt, err := lazarus.Open(lazarus.Options{Store: mem, Model: model, Audit: lazarus.AuditOptions{Enabled: true},
		Summarizer: snapshot.Deterministic{}, Summary: snapshot.Policy{MaxEvents: 4, MaxTokens: -1, KeepRecent: 1}})
	require.NoError(t, err)
	defer rt.Close()
	u := agent.Scope{UserID: "u"}
	for _, text := range []string{"first", "second"} { // seqs 1-4
		_, err := rt.SendAndWait(ctx, "c", text, u)
		require.NoError(t, err)
	}
	rows := func() []*messages.ModelCall {
		calls, err := mem.ModelCalls(ctx, "c")
		require.NoError(t, err)
		return calls
	}
	require.Len(t, rows(), 2)
	require.Empty(t, rows()[0].GetEvictions(), "the first turn saw the whole log")

	require.NoError(t, rt.Rewind(ctx, "c", 2, lazarus.RewindOptions{}, u)) // 5: skips 3-4
	_, err = rt.SendAndWait(ctx, "c", "third", u)                          // 6, 7
	require.NoError(t, err)
	calls := rows()
	require.Len(t, calls, 3)
	require.Equal(t, []string{"rewound:3-4"}, calls[2].GetEvictions())
	_, err = rt.SendAndWait(ctx, "c", "fourth", u) // 8, 9
	require.NoError(t, err)

	require.Eventually(t, func() bool {
		s, err := mem.LatestSummary(ctx, "c")
		return err == nil && s.GetToSeq() > 0
	}, 10*time.Second, 5*time.Millisecond, "a summary is written")
	s, err := mem.LatestSummary(ctx, "c")
	require.NoError(t, err)
	rt.Kill("c") // revived from the summary: the next turn starts from it
	_, err = rt.SendAndWait(ctx, "c", "fifth", u)
	require.NoError(t, err)
	calls = rows()
	require.Len(t, calls, 5)
	last := calls[4]
	require.Equal(t, s.GetToSeq(), last.GetSummary().GetToSeq(), "the turn started from the summary")
	require.Equal(t, fmt.Sprintf("summary:1-%d", s.GetToSeq()), last.GetEvictions()[0])
}

// TestAuditSweepRunsAtMostOnceASecond: the first sweep is due as the
// runtime opens; then a TTL below two seconds arms the next a second ahead,
// not TTL/2: a TTL of a nanosecond armed it at once
// after each sweep, a sweep of every conversation without end.
func TestAuditSweepRunsAtMostOnceASecond(t *testing.T) {
	for _, ttl := range []time.Duration{time.Nanosecond, time.Millisecond, time.Second} {
		start := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
		clock := actorstest.NewManualClock(start)
		rt, err := lazarus.Open(lazarus.Options{Model: scripted.New(scripted.Options{}), Clock: clock, IdleTimeout: -1, NoResume: true,
			Audit: lazarus.AuditOptions{Enabled: true, TTL: ttl}})
		require.NoError(t, err)
		require.Equal(t, []time.Time{start}, clock.Dues(), "TTL %v: the first sweep is due as the runtime opens", ttl)
		clock.Advance(0) // runs it: it arms the next
		dues := clock.Dues()
		require.NotEmpty(t, dues, "the next sweep is armed")
		for _, due := range dues {
			require.False(t, due.Before(start.Add(time.Second)), "TTL %v: a timer due %v after the first sweep", ttl, due.Sub(start))
		}
		require.NoError(t, rt.Close())
	}
}

// TestAuditRecordsWhatTheModelWasGiven: an audit row holds what was
// rendered to the model on its turn (the seeds' rendered context, "exactly
// what was sent to the model"): the context and the summary, and also the
// settings (the system prompt among them) and the tools the model was
// offered, as the Model received them in its agent.Turn.
func TestAuditRecordsWhatTheModelWasGiven(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	mem := memjournal.New(memjournal.Options{Audit: true})
	defer mem.Close()
	turns := make(chan agent.Turn, 2)
	model := agent.ModelFunc(func(_ context.Context, turn agent.Turn, _ func(string)) (*messages.AssistantMessage, error) {
		turns <- turn
		return agent.Text("ok"), nil
	})
	noop := func(context.Context, agent.Invocation) (string, error) { return `{}`, nil }
	rt, err := lazarus.Open(lazarus.Options{Store: mem, Model: model, Audit: lazarus.AuditOptions{Enabled: true},
		Settings: agent.Settings{SystemPrompt: "be brief", MaxTokens: 100},
		Tools: []agent.Tool{
			{Name: "zeta", Executor: messages.Executor_EXECUTOR_SERVER, Run: noop},
			{Name: "alpha", Executor: messages.Executor_EXECUTOR_HUMAN},
		}})
	require.NoError(t, err)
	defer rt.Close()
	u := agent.Scope{UserID: "u"}
	temp := 0.5
	require.NoError(t, rt.Configure(ctx, "c", agent.Settings{SystemPrompt: "be kind", Temperature: &temp}))
	_, err = rt.SendAndWait(ctx, "c", "hello", u)
	require.NoError(t, err)
	turn := <-turns

	calls, err := mem.ModelCalls(ctx, "c")
	require.NoError(t, err)
	require.Len(t, calls, 1)
	mc := calls[0]
	require.Len(t, mc.GetRenderedContext(), len(turn.Context))
	for i, ev := range turn.Context {
		require.True(t, proto.Equal(ev, mc.GetRenderedContext()[i]), "the rendered context, event %d", i)
	}
	require.Equal(t, map[string]string{"system_prompt": "be kind", "temperature": "0.5", "max_tokens": "100"}, mc.GetSettings(),
		"the settings the call was made with: the conversation's over the defaults, unset ones absent")
	require.Equal(t, agent.SettingsOf(mc.GetSettings()), turn.Settings)
	var names []string
	for _, spec := range turn.Tools {
		names = append(names, spec.Name)
	}
	require.Equal(t, []string{"alpha", "zeta"}, names)
	require.Equal(t, names, mc.GetTools(), "the tools offered, sorted")
	require.Empty(t, mc.GetAgent(), "the default agent's turn")
}

// awaitUpdate returns the first update of ch that matches, failing the test
// when ch closes (its context ended) first.
func awaitUpdate(t *testing.T, ch <-chan lazarus.Update, match func(lazarus.Update) bool) lazarus.Update {
	t.Helper()
	for u := range ch {
		if match(u) {
			return u
		}
	}
	t.Fatal("no matching update")
	return lazarus.Update{}
}

// TestAuditRecordsAFailedCall: with audit on, a model call that fails
// records its row as an answered call does (the rendered context, the
// settings, the latency), with its error (message and code) and neither
// usage nor model: a turn that fails for good (turn_failed) keeps the row
// of its last call, a retry replacing the row of the call before it. A
// retry that answers replaces the failed call's row.
func TestAuditRecordsAFailedCall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	mem := memjournal.New(memjournal.Options{Audit: true})
	defer mem.Close()
	clock := actorstest.NewManualClock(time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC))
	// Each call takes 250ms on the clock; the first three fail.
	var calls atomic.Int32
	turns := make(chan agent.Turn, 4)
	model := agent.ModelFunc(func(_ context.Context, turn agent.Turn, _ func(string)) (*messages.AssistantMessage, error) {
		turns <- turn
		clock.Jump(250 * time.Millisecond)
		if n := calls.Add(1); n <= 3 {
			return nil, fmt.Errorf("call %d: upstream 503: %w", n, agent.ErrUnavailable)
		}
		msg := agent.Text("back")
		msg.Model, msg.Usage = "m1", &messages.Usage{InputTokens: 7, OutputTokens: 2}
		return msg, nil
	})
	rt, err := lazarus.Open(lazarus.Options{Store: mem, Model: model, Clock: clock, IdleTimeout: -1,
		Audit: lazarus.AuditOptions{Enabled: true}, Settings: agent.Settings{SystemPrompt: "be brief"},
		ModelRetry: lazarus.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 2}})
	require.NoError(t, err)
	defer rt.Close()
	sub, err := rt.Subscribe(ctx, "c", 0)
	require.NoError(t, err)
	isRetry := func(u lazarus.Update) bool { return u.Retry != nil }
	isEnd := func(u lazarus.Update) bool { return u.TurnEnd != nil }
	_, err = rt.Send(ctx, "c", "hi", agent.Scope{UserID: "u"})
	require.NoError(t, err)

	// The first call failed: its row is there before the retry.
	awaitUpdate(t, sub, isRetry)
	rows, err := mem.ModelCalls(ctx, "c")
	require.NoError(t, err)
	require.Len(t, rows, 1, "the failed call has its row")
	require.Contains(t, rows[0].GetError().GetMessage(), "call 1: upstream 503")
	clock.Advance(time.Second)

	// The retry failed too: the turn failed for good.
	end := awaitUpdate(t, sub, isEnd).TurnEnd
	require.Equal(t, lazarus.TurnFailed, end.Outcome)
	<-turns
	second := <-turns
	rows, err = mem.ModelCalls(ctx, "c")
	require.NoError(t, err)
	require.Len(t, rows, 1, "the retry's row replaced the first call's")
	mc := rows[0]
	require.Equal(t, uint64(1), mc.GetTurnRef())
	require.Equal(t, actors.CodeUnavailable, mc.GetError().GetCode())
	require.Equal(t, "call 2: upstream 503: "+agent.ErrUnavailable.Error(), mc.GetError().GetMessage(), "the error the model returned")
	require.Len(t, mc.GetRenderedContext(), len(second.Context))
	for i, ev := range second.Context {
		require.True(t, proto.Equal(ev, mc.GetRenderedContext()[i]), "the rendered context, event %d", i)
	}
	require.Equal(t, map[string]string{"system_prompt": "be brief"}, mc.GetSettings())
	require.Equal(t, int64(250*time.Millisecond), mc.GetLatencyNanos())
	require.Nil(t, mc.GetUsage(), "no usage for a failed call")
	require.Empty(t, mc.GetModel())

	// A wake runs the turn again: its first call fails, its retry answers
	// and replaces that row.
	require.NoError(t, rt.Wake(ctx, "c"))
	awaitUpdate(t, sub, isRetry)
	rows, err = mem.ModelCalls(ctx, "c")
	require.NoError(t, err)
	require.Len(t, rows, 2)
	require.Equal(t, end.Seq, rows[1].GetTurnRef(), "the context ends at the turn_failed event")
	require.Contains(t, rows[1].GetError().GetMessage(), "call 3: upstream 503")
	clock.Advance(time.Second)
	end = awaitUpdate(t, sub, isEnd).TurnEnd
	require.Equal(t, lazarus.TurnAnswered, end.Outcome)
	rows, err = mem.ModelCalls(ctx, "c")
	require.NoError(t, err)
	require.Len(t, rows, 2)
	require.NotNil(t, rows[0].GetError(), "the failed turn's row stays")
	require.Nil(t, rows[1].GetError(), "the answered retry replaced the failed row")
	require.Equal(t, "m1", rows[1].GetModel())
	require.Equal(t, int64(7), rows[1].GetUsage().GetInputTokens())
}

// TestAuditRecordsNothingForACancelledCall: a model call cancelled before
// it returned (here by a newer message, which restarts the turn) records
// no row, whatever the model returned: its outcome is void. The call the
// newer message starts records its own.
func TestAuditRecordsNothingForACancelledCall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	mem := memjournal.New(memjournal.Options{Audit: true})
	defer mem.Close()
	started := make(chan struct{}, 1)
	var calls atomic.Int32
	model := agent.ModelFunc(func(ctx context.Context, _ agent.Turn, _ func(string)) (*messages.AssistantMessage, error) {
		if calls.Add(1) == 1 {
			started <- struct{}{}
			<-ctx.Done()
			return nil, fmt.Errorf("%w: %w", agent.ErrInterrupted, ctx.Err())
		}
		return agent.Text("ok"), nil
	})
	rt, err := lazarus.Open(lazarus.Options{Store: mem, Model: model, Audit: lazarus.AuditOptions{Enabled: true}})
	require.NoError(t, err)
	defer rt.Close()
	u := agent.Scope{UserID: "u"}
	_, err = rt.Send(ctx, "c", "first", u)
	require.NoError(t, err)
	<-started
	end, err := rt.SendAndWait(ctx, "c", "second", u)
	require.NoError(t, err)
	require.Equal(t, lazarus.TurnAnswered, end.Outcome)
	// The newer message's call entered the gate after the cancelled one
	// left it, so the cancelled call's row, had it one, would be written.
	rows, err := mem.ModelCalls(ctx, "c")
	require.NoError(t, err)
	require.Len(t, rows, 1, "only the call that answered")
	require.Equal(t, uint64(2), rows[0].GetTurnRef())
	require.Nil(t, rows[0].GetError())
}

// panickingAudit is a Store whose audit write panics.
type panickingAudit struct {
	*memjournal.Store
	puts atomic.Int32
}

func (s *panickingAudit) PutModelCall(context.Context, *messages.ModelCall) error {
	s.puts.Add(1)
	panic("audit store broke")
}

// TestAuditWriteThatPanicsFailsNoTurn: a Store whose PutModelCall panics
// neither crashes the process nor fails the turn, and the conversation's
// next model call is not kept waiting at its gate (the row is written
// before the call leaves it): both turns answer.
func TestAuditWriteThatPanicsFailsNoTurn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	mem := memjournal.New(memjournal.Options{Audit: true})
	defer mem.Close()
	store := &panickingAudit{Store: mem}
	rt, err := lazarus.Open(lazarus.Options{Store: store, Model: scripted.New(scripted.Options{}), IdleTimeout: -1,
		Audit: lazarus.AuditOptions{Enabled: true}})
	require.NoError(t, err)
	defer rt.Close()
	for i := range 2 {
		end, err := rt.SendAndWait(ctx, "c", fmt.Sprintf("hi %d", i), agent.Scope{UserID: "u"})
		require.NoError(t, err)
		require.Equal(t, lazarus.TurnAnswered, end.Outcome, "turn %d", i)
	}
	require.Equal(t, int32(2), store.puts.Load(), "each call tried its row")
}

// gcHeld is an in-memory Store whose GCModelCalls waits until its ctx ends
// (or the test ends): an audit sweep that never finishes by itself.
type gcHeld struct {
	*memjournal.Store
	entered chan struct{}
	done    chan struct{}
}

func (s *gcHeld) GCModelCalls(ctx context.Context, conv string, olderThan time.Time) (int, error) {
	select {
	case s.entered <- struct{}{}:
	default:
	}
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-s.done:
		return s.Store.GCModelCalls(ctx, conv, olderThan)
	}
}

// TestCloseEndsAnAuditSweepInProgress: Close cancels the audit sweep
// (Options.Audit.TTL) it finds running and returns, as it does the blob
// sweep and the resume scan; the sweep ran under context.Background, so
// Close waited for it to go through every conversation of the Store.
func TestCloseEndsAnAuditSweepInProgress(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	clock := actorstest.NewManualClock(time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC))
	store := &gcHeld{Store: memjournal.New(memjournal.Options{Audit: true}), entered: make(chan struct{}, 1), done: make(chan struct{})}
	model := scripted.New(scripted.Options{})
	rt, err := lazarus.Open(lazarus.Options{Store: store, Model: model, Clock: clock,
		Audit: lazarus.AuditOptions{Enabled: true, TTL: time.Hour}})
	require.NoError(t, err)
	defer rt.Close()
	defer close(store.done) // first: a sweep still held ends
	model.Push("c", scripted.Text("hi"))
	_, err = rt.SendAndWait(ctx, "c", "hi", agent.Scope{UserID: "u"})
	require.NoError(t, err)

	go clock.Advance(30 * time.Minute) // the sweep runs in Advance
	select {
	case <-store.entered:
	case <-ctx.Done():
		t.Fatal("the audit sweep never ran")
	}
	closed := make(chan error, 1)
	go func() { closed <- rt.Close() }()
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-ctx.Done():
		t.Fatal("Close waits for the audit sweep")
	}
}

// TestAuditSweepRunsWhenTheRuntimeOpens: a process that never runs for
// TTL/2 (a command, frequent deploys) still sweeps: the first sweep runs
// as the runtime opens, and takes the rows an earlier run left past the
// TTL.
func TestAuditSweepRunsWhenTheRuntimeOpens(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	mem := memjournal.New(memjournal.Options{Audit: true})
	defer mem.Close()
	start := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	open := func(clock lazarus.Clock, model agent.Model) *lazarus.Runtime {
		rt, err := lazarus.Open(lazarus.Options{Store: mem, Model: model, Clock: clock, IdleTimeout: -1, NoResume: true,
			Audit: lazarus.AuditOptions{Enabled: true, TTL: time.Hour}})
		require.NoError(t, err)
		return rt
	}
	model := scripted.New(scripted.Options{})
	model.Push("c", scripted.Text("hi"))
	rt := open(actorstest.NewManualClock(start), model)
	_, err := rt.SendAndWait(ctx, "c", "hi", agent.Scope{UserID: "u"})
	require.NoError(t, err)
	require.NoError(t, rt.Close()) // before any sweep was due
	calls, err := mem.ModelCalls(ctx, "c")
	require.NoError(t, err)
	require.Len(t, calls, 1)

	clock := actorstest.NewManualClock(start.Add(2 * time.Hour))
	rt = open(clock, scripted.New(scripted.Options{}))
	defer rt.Close()
	clock.Advance(0) // runs what is due now, synchronously: not the periodic sweep
	calls, err = mem.ModelCalls(ctx, "c")
	require.NoError(t, err)
	require.Empty(t, calls, "the row older than the TTL was swept as the runtime opened")
}
