package server_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/actors/actorstest"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/server"
)

// seriesValue reads one series of reg: a counter's or a gauge's value, a
// histogram's count of observations. The series has no labels.
func seriesValue(t testingT, reg prometheus.Gatherer, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		require.Len(t, mf.GetMetric(), 1, "%s is one series", name)
		m := mf.GetMetric()[0]
		require.Empty(t, m.GetLabel(), "%s has no labels", name)
		switch {
		case m.GetCounter() != nil:
			return m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			return m.GetGauge().GetValue()
		case m.GetHistogram() != nil:
			return float64(m.GetHistogram().GetSampleCount())
		}
		t.Errorf("%s: unexpected type %v", name, mf.GetType())
		t.FailNow()
	}
	t.Errorf("no series %s", name)
	t.FailNow()
	return 0
}

// labeledValue reads the counter of name whose one label is value.
func labeledValue(t testingT, reg prometheus.Gatherer, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			require.Len(t, m.GetLabel(), 1, "%s has one label", name)
			if l := m.GetLabel()[0]; l.GetName() == label && l.GetValue() == value {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Errorf("no series %s{%s=%q}", name, label, value)
	t.FailNow()
	return 0
}

// metricsRuntime opens a Runtime on a manual clock that feeds a new
// Metrics, with a human tool "ask" of a one-hour deadline, idle actors
// passivating after a minute, and a Server made with the Metrics (which
// its scrape-time gauges read).
func metricsRuntime(t *testing.T) (*lazarus.Runtime, *server.Metrics, *scripted.Model, *actorstest.ManualClock) {
	t.Helper()
	m := server.NewMetrics()
	clock := actorstest.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	model := scripted.New(scripted.Options{})
	rt, err := lazarus.Open(lazarus.Options{
		Model: model, Clock: clock, IdleTimeout: time.Minute, Metrics: m.Hooks(),
		Tools: []agent.Tool{{Name: "ask", Executor: messages.Executor_EXECUTOR_HUMAN, Timeout: time.Hour}},
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = rt.Close() })
	_ = server.New(rt, server.Options{Metrics: m})
	return rt, m, model, clock
}

// TestMetricsCountALife: the series of a Metrics hold what a Runtime did,
// read with their values: activations and revivals after a kill, a
// deadline's expiry, model calls and their errors, subscriptions that end,
// every event appended once; once every conversation has passivated, the
// live and active conversations and the pending calls read zero, and
// every activation is either passivated or killed.
func TestMetricsCountALife(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rt, m, model, clock := metricsRuntime(t)
	reg := m.Registry()
	val := func(name string) float64 { return seriesValue(t, reg, "lazarus_"+name) }
	user := agent.Scope{UserID: "u"}

	model.Push("a", scripted.Text("one"), scripted.Text("two"))
	_, err := rt.SendAndWait(ctx, "a", "hi", user)
	require.NoError(t, err)
	require.EqualValues(t, 1, val("conversation_activations_total"))
	require.EqualValues(t, 1, val("conversations_live"))
	require.EqualValues(t, 1, val("model_call_seconds"))
	require.Zero(t, val("model_call_errors_total"))

	require.True(t, rt.Kill("a"))
	require.Zero(t, val("conversations_live"), "a killed actor is out of memory")
	require.Zero(t, val("conversation_passivations_total"), "a kill is not a passivation")
	_, err = rt.SendAndWait(ctx, "a", "again", user)
	require.NoError(t, err)
	require.EqualValues(t, 2, val("conversation_activations_total"), "the revival is an activation")

	// A model error fails a turn (a refusal is not retried).
	model.PushError("e", fmt.Errorf("provider: %w", agent.ErrRefused))
	_, err = rt.SendAndWait(ctx, "e", "hi", user)
	require.ErrorIs(t, err, lazarus.ErrTurnFailed)
	require.EqualValues(t, 3, val("model_call_seconds"))
	require.EqualValues(t, 1, val("model_call_errors_total"))

	// A human call whose deadline passes.
	model.Push("b", scripted.Reply("asking", scripted.Call("ask", `{}`)), scripted.Text("done"))
	end, err := rt.SendAndWait(ctx, "b", "hi", user)
	require.NoError(t, err)
	require.Equal(t, lazarus.TurnSuspended, end.Outcome)
	require.EqualValues(t, 1, val("human_calls_pending"))
	updates, err := rt.Subscribe(ctx, "b", 0)
	require.NoError(t, err)
	require.EqualValues(t, 1, val("subscriptions"))
	clock.Advance(2 * time.Hour)
	for u := range updates {
		if u.TurnEnd != nil && u.TurnEnd.Outcome == lazarus.TurnAnswered {
			break
		}
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.EqualValues(c, 1, seriesValue(c, reg, "lazarus_human_calls_expired_total"))
	}, 10*time.Second, time.Millisecond)
	require.EqualValues(t, 5, val("model_call_seconds"))
	require.EqualValues(t, 1, val("model_call_errors_total"))
	cancel()
	for range updates {
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Zero(c, seriesValue(c, reg, "lazarus_subscriptions")) },
		10*time.Second, time.Millisecond, "an ended subscription is counted out")

	// Everything passivates: the gauges return to zero.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		clock.Advance(time.Minute)
		assert.Zero(c, seriesValue(c, reg, "lazarus_conversations_live"))
	}, 20*time.Second, 5*time.Millisecond, "the idle actors passivate")
	require.Zero(t, val("conversations_active"))
	require.Zero(t, val("human_calls_pending"))
	activations := val("conversation_activations_total")
	require.GreaterOrEqual(t, activations, 4.0, "a, its revival, e and b (the expiry may revive b once more)")
	require.Equal(t, activations-1, val("conversation_passivations_total"), "every activation but the killed one passivated")
	require.Zero(t, val("conversation_fenced_total"))
	turns := func(outcome string) float64 { return labeledValue(t, reg, "lazarus_turns_total", "outcome", outcome) }
	require.EqualValues(t, 3, turns("answered"), "a's two and b's after the expiry")
	require.EqualValues(t, 1, turns("suspended"))
	require.EqualValues(t, 1, turns("failed"))
	require.Zero(t, turns("cancelled"))
	require.EqualValues(t, 1, labeledValue(t, reg, "lazarus_tool_calls_total", "executor", "human"))
	require.Zero(t, labeledValue(t, reg, "lazarus_tool_calls_total", "executor", "server"))

	// Every event is counted once; every commit observed.
	var events float64
	for _, c := range []string{"a", "b", "e"} {
		last, err := rt.Store().LastSeq(context.Background(), c)
		require.NoError(t, err)
		events += float64(last)
	}
	require.Equal(t, events, val("journal_events_total"))
	require.Positive(t, val("journal_appends_total"))
	require.Positive(t, val("journal_commit_seconds"))
	require.Equal(t, val("journal_commit_seconds"), val("journal_commit_requests"), "one observation of each per commit")
}

// TestScheduleMetrics: a scrape counts the schedules the Store holds,
// every conversation's; an occurrence that fires is counted delivered in
// lazarus_schedule_fires_total, and a one-shot schedule, gone once fired,
// leaves the gauge.
func TestScheduleMetrics(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rt, m, model, clock := metricsRuntime(t)
	reg := m.Registry()
	fires := func(outcome string) float64 {
		return labeledValue(t, reg, "lazarus_schedule_fires_total", "outcome", outcome)
	}
	user := agent.Scope{UserID: "u"}
	require.Zero(t, seriesValue(t, reg, "lazarus_schedules"))
	for _, c := range []string{"a", "b"} {
		model.Push(c, scripted.Text("one"), scripted.Text("woken"))
		_, err := rt.SendAndWait(ctx, c, "hi", user)
		require.NoError(t, err)
	}
	t0 := clock.Now()
	_, err := rt.Schedule(ctx, "a", lazarus.ScheduleSpec{After: 10 * time.Minute, Text: "once"}, user)
	require.NoError(t, err)
	_, err = rt.Schedule(ctx, "a", lazarus.ScheduleSpec{Every: time.Hour, Text: "hourly"}, user)
	require.NoError(t, err)
	_, err = rt.Schedule(ctx, "b", lazarus.ScheduleSpec{Cron: "0 9 * * *", Text: "daily"}, user)
	require.NoError(t, err)
	require.EqualValues(t, 3, seriesValue(t, reg, "lazarus_schedules"), "every conversation's schedules")
	for _, o := range []string{"delivered", "dropped", "failed"} {
		require.Zero(t, fires(o), o)
	}

	// The one-shot fires: the clock moves to its time once the expiry
	// actor armed its timer for it (and not for the one-minute cap).
	clock.Advance(10*time.Minute - time.Second)
	at := t0.Add(10 * time.Minute)
	require.Eventually(t, func() bool { return slices.ContainsFunc(clock.Dues(), at.Equal) }, 20*time.Second, time.Millisecond, "armed")
	clock.Advance(at.Sub(clock.Now()))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.EqualValues(c, 1, labeledValue(c, reg, "lazarus_schedule_fires_total", "outcome", "delivered"))
	}, 20*time.Second, time.Millisecond, "the fire is counted")
	require.EqualValues(t, 2, seriesValue(t, reg, "lazarus_schedules"), "the one-shot schedule is gone")
	require.Zero(t, fires("dropped"))
	require.Zero(t, fires("failed"))
}

// TestMetricsNaming: every lazarus_ series passes the Prometheus linter
// (counters end in _total, units are base units named in the suffix, help
// is set), and only turns_total, tool_calls_total and schedule_fires_total
// have a label, whose values are a fixed few: no series grows with
// conversations or users.
func TestMetricsNaming(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rt, m, model, _ := metricsRuntime(t)
	model.Push("a", scripted.Text("one"))
	_, err := rt.SendAndWait(ctx, "a", "hi", agent.Scope{UserID: "u"})
	require.NoError(t, err)
	mfs, err := m.Registry().Gather()
	require.NoError(t, err)
	var names []string
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "lazarus_") {
			continue
		}
		names = append(names, mf.GetName())
		var values []string
		for _, s := range mf.GetMetric() {
			for _, l := range s.GetLabel() {
				values = append(values, l.GetName()+"="+l.GetValue())
			}
		}
		switch mf.GetName() {
		case "lazarus_turns_total":
			require.ElementsMatch(t, []string{"outcome=answered", "outcome=suspended", "outcome=failed", "outcome=cancelled"}, values)
		case "lazarus_tool_calls_total":
			require.ElementsMatch(t, []string{"executor=server", "executor=human"}, values)
		case "lazarus_schedule_fires_total":
			require.ElementsMatch(t, []string{"outcome=delivered", "outcome=dropped", "outcome=failed", "outcome=unknown", "outcome=refused"}, values)
		default:
			require.Empty(t, values, "%s has a label", mf.GetName())
		}
	}
	require.Len(t, names, 19, "the series the doc of Metrics lists: %v", names)
	problems, err := testutil.GatherAndLint(m.Registry(), names...)
	require.NoError(t, err)
	require.Empty(t, problems)
}

// TestMetricsOfTwoRuntimes: two Runtimes in one process, each with a
// Metrics of its own, register without conflict, and each Metrics counts
// its own Runtime only. A collector registered again in a Metrics'
// registry is refused with an error, not a panic.
func TestMetricsOfTwoRuntimes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rt1, m1, model1, _ := metricsRuntime(t)
	rt2, m2, _, _ := metricsRuntime(t)
	model1.Push("a", scripted.Text("one"))
	_, err := rt1.SendAndWait(ctx, "a", "hi", agent.Scope{UserID: "u"})
	require.NoError(t, err)
	require.EqualValues(t, 1, seriesValue(t, m1.Registry(), "lazarus_conversation_activations_total"))
	require.EqualValues(t, 1, seriesValue(t, m1.Registry(), "lazarus_conversations_live"))
	require.Zero(t, seriesValue(t, m2.Registry(), "lazarus_conversation_activations_total"))
	require.Zero(t, seriesValue(t, m2.Registry(), "lazarus_conversations_live"))
	require.Zero(t, seriesValue(t, m2.Registry(), "lazarus_model_call_seconds"))
	require.Zero(t, rt2.Active())

	err = m1.Registry().Register(collectors.NewGoCollector())
	var already prometheus.AlreadyRegisteredError
	require.ErrorAs(t, err, &already, "the Go collector is registered already")
}

// listsFail is a Store whose listings of pending calls, ACTIVE
// conversations and schedule times fail while fail is set.
type listsFail struct {
	*memjournal.Store
	fail atomic.Bool
}

func (s *listsFail) ScheduleTimes(ctx context.Context, fn func(conv, id string, next time.Time) error) error {
	if s.fail.Load() {
		return fmt.Errorf("listsFail: %w", journal.ErrUnavailable)
	}
	return s.Store.ScheduleTimes(ctx, fn)
}

func (s *listsFail) ListPendingToolCalls(ctx context.Context, cursor string, limit int) ([]*messages.ToolCallRecord, string, error) {
	if s.fail.Load() {
		return nil, "", fmt.Errorf("listsFail: %w", journal.ErrUnavailable)
	}
	return s.Store.ListPendingToolCalls(ctx, cursor, limit)
}

func (s *listsFail) ListActiveConversations(ctx context.Context, cursor string, limit int) ([]string, string, error) {
	if s.fail.Load() {
		return nil, "", fmt.Errorf("listsFail: %w", journal.ErrUnavailable)
	}
	return s.Store.ListActiveConversations(ctx, cursor, limit)
}

// TestStoreGaugesReportAStoreError: the gauges counted from the Store at
// scrape report a Store error as an error, not as a count: Gather returns
// it naming the gauge, and /metrics serves the other series without that
// gauge, logging the failure and counting it in
// promhttp_metric_handler_errors_total (from the next scrape on). Once the Store answers, the gauges read the count again.
func TestStoreGaugesReportAStoreError(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m := server.NewMetrics()
	store := &listsFail{Store: memjournal.New(memjournal.Options{})}
	model := scripted.New(scripted.Options{})
	rt, err := lazarus.Open(lazarus.Options{Model: model, Store: store, IdleTimeout: -1, Metrics: m.Hooks(),
		Tools: []agent.Tool{{Name: "ask", Executor: messages.Executor_EXECUTOR_HUMAN, Timeout: time.Hour}}})
	require.NoError(t, err)
	defer rt.Close()
	var logs syncBuffer
	h := server.New(rt, server.Options{Metrics: m, PublicMetrics: true, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	model.Push("c", scripted.Reply("", scripted.Call("ask", `{}`)))
	_, err = rt.SendAndWait(ctx, "c", "hi", agent.Scope{UserID: "u"})
	require.NoError(t, err)
	_, err = rt.Schedule(ctx, "c", lazarus.ScheduleSpec{After: time.Hour, Text: "later"}, agent.Scope{UserID: "u"})
	require.NoError(t, err)
	require.EqualValues(t, 1, seriesValue(t, m.Registry(), "lazarus_human_calls_pending"))
	require.Zero(t, seriesValue(t, m.Registry(), "lazarus_conversations_active"))
	require.EqualValues(t, 1, seriesValue(t, m.Registry(), "lazarus_schedules"))

	scrape := func() (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		return rec.Code, rec.Body.String()
	}
	store.fail.Store(true)
	_, err = m.Registry().Gather()
	require.ErrorContains(t, err, "server: counting lazarus_human_calls_pending at scrape: lazarus: pending calls: listsFail: journal: store unavailable")
	require.ErrorContains(t, err, "server: counting lazarus_conversations_active at scrape")
	require.ErrorContains(t, err, "server: counting lazarus_schedules at scrape: listsFail: journal: store unavailable")
	code, body := scrape()
	require.Equal(t, http.StatusOK, code, "the other series are served")
	require.NotContains(t, body, "lazarus_human_calls_pending")
	require.NotContains(t, body, "lazarus_conversations_active")
	require.NotContains(t, body, "lazarus_schedules ")
	require.Contains(t, body, "lazarus_conversation_activations_total 1")
	require.Contains(t, logs.String(), "lazarus_human_calls_pending")

	store.fail.Store(false)
	code, body = scrape()
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "lazarus_human_calls_pending 1")
	require.Contains(t, body, "lazarus_conversations_active 0")
	require.Contains(t, body, "lazarus_schedules 1")
	require.Contains(t, body, `promhttp_metric_handler_errors_total{cause="gathering"} 1`, "the failed scrape, counted after it")
}

// listsHang is a Store whose listings of pending calls, ACTIVE
// conversations and schedule times, once hang is set, answer nothing until
// their context ends; it records the deadline of each such call. A call whose context
// has no deadline (the runtime's own resume scan, not a scrape) is
// passed through.
type listsHang struct {
	*memjournal.Store
	hang      atomic.Bool
	deaf      chan struct{} // when set, a hanging call ignores its context and waits for it to close
	mu        sync.Mutex
	deadlines []time.Time
}

// hangs reports whether a call of ctx should hang.
func (s *listsHang) hangs(ctx context.Context) bool {
	_, bounded := ctx.Deadline()
	return bounded && s.hang.Load()
}

func (s *listsHang) block(ctx context.Context) error {
	d, _ := ctx.Deadline()
	s.mu.Lock()
	s.deadlines = append(s.deadlines, d)
	deaf := s.deaf
	s.mu.Unlock()
	if deaf != nil {
		<-deaf
		return errors.New("listsHang: released")
	}
	<-ctx.Done()
	return fmt.Errorf("listsHang: %w", ctx.Err())
}

func (s *listsHang) ListPendingToolCalls(ctx context.Context, cursor string, limit int) ([]*messages.ToolCallRecord, string, error) {
	if s.hangs(ctx) {
		return nil, "", s.block(ctx)
	}
	return s.Store.ListPendingToolCalls(ctx, cursor, limit)
}

func (s *listsHang) ListActiveConversations(ctx context.Context, cursor string, limit int) ([]string, string, error) {
	if s.hangs(ctx) {
		return nil, "", s.block(ctx)
	}
	return s.Store.ListActiveConversations(ctx, cursor, limit)
}

func (s *listsHang) ScheduleTimes(ctx context.Context, fn func(conv, id string, next time.Time) error) error {
	if s.hangs(ctx) {
		return s.block(ctx)
	}
	return s.Store.ScheduleTimes(ctx, fn)
}

// takeDeadlines returns the deadlines recorded since the last call.
func (s *listsHang) takeDeadlines() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.deadlines
	s.deadlines = nil
	return d
}

// TestScrapeOfAHangingStoreSharesOneDeadline: one scrape bounds the Store
// reads of all its store-counted gauges by one deadline, not one each, so
// a Store that does not answer makes the scrape wait the bound once: each
// gauge's Store call gets the same deadline, the bound after the scrape
// reached them. The scrape then returns with the three gauges reported as
// errors (context.DeadlineExceeded) and every other series served; so it
// does when the Store ignores the context.
func TestScrapeOfAHangingStoreSharesOneDeadline(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const bound = 100 * time.Millisecond
	m := server.NewMetrics()
	server.SetStoreScrapeTimeout(m, bound)
	store := &listsHang{Store: memjournal.New(memjournal.Options{})}
	model := scripted.New(scripted.Options{})
	rt, err := lazarus.Open(lazarus.Options{Model: model, Store: store, IdleTimeout: -1, Metrics: m.Hooks(),
		Tools: []agent.Tool{{Name: "ask", Executor: messages.Executor_EXECUTOR_HUMAN, Timeout: time.Hour}}})
	require.NoError(t, err)
	defer rt.Close()
	var logs syncBuffer
	h := server.New(rt, server.Options{Metrics: m, PublicMetrics: true, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	model.Push("c", scripted.Reply("", scripted.Call("ask", `{}`)))
	_, err = rt.SendAndWait(ctx, "c", "hi", agent.Scope{UserID: "u"})
	require.NoError(t, err)
	_, err = rt.Schedule(ctx, "c", lazarus.ScheduleSpec{After: time.Hour, Text: "later"}, agent.Scope{UserID: "u"})
	require.NoError(t, err)
	store.hang.Store(true)

	// The scrape runs on its own goroutine so that a hang fails the test
	// instead of stalling it.
	oneDeadline := func(start time.Time, scrape func()) {
		t.Helper()
		done := make(chan struct{})
		go func() { defer close(done); scrape() }()
		select {
		case <-done:
		case <-ctx.Done():
			t.Fatal("the scrape of a hanging Store did not return")
		}
		ds := store.takeDeadlines()
		require.Len(t, ds, 3, "one Store call per gauge")
		require.True(t, ds[0].Equal(ds[1]) && ds[0].Equal(ds[2]), "one deadline for the scrape, not one per gauge: %v", ds)
		require.False(t, ds[0].Before(start.Add(bound)), "the deadline is the bound after the scrape reached the gauges")
		require.False(t, ds[0].After(time.Now()), "the scrape returned at the deadline, not after another one")
	}

	var gatherErr error
	start := time.Now()
	oneDeadline(start, func() { _, gatherErr = m.Registry().Gather() })
	require.ErrorContains(t, gatherErr, context.DeadlineExceeded.Error()) // Gather formats the errors: no chain
	require.ErrorContains(t, gatherErr, "server: counting lazarus_human_calls_pending at scrape")
	require.ErrorContains(t, gatherErr, "server: counting lazarus_conversations_active at scrape")
	require.ErrorContains(t, gatherErr, "server: counting lazarus_schedules at scrape")

	rec := httptest.NewRecorder()
	start = time.Now()
	oneDeadline(start, func() { h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil)) })
	require.Equal(t, http.StatusOK, rec.Code, "the other series are served")
	body := rec.Body.String()
	require.NotContains(t, body, "lazarus_human_calls_pending")
	require.NotContains(t, body, "lazarus_conversations_active")
	require.NotContains(t, body, "lazarus_schedules ")
	for _, series := range []string{"lazarus_conversation_activations_total 1", "lazarus_conversations_live 1",
		"lazarus_journal_appends_total", "lazarus_subscriptions 0", `lazarus_turns_total{outcome="suspended"} 1`,
		"go_goroutines", "process_start_time_seconds"} {
		require.Contains(t, body, series)
	}
	require.Contains(t, logs.String(), "lazarus_human_calls_pending")
	require.Contains(t, logs.String(), "lazarus_conversations_active")
	require.Contains(t, logs.String(), "lazarus_schedules")

	// A Store that ignores its context does not hold the scrape past the
	// deadline either.
	release := make(chan struct{})
	store.mu.Lock()
	store.deaf = release
	store.mu.Unlock()
	start = time.Now()
	oneDeadline(start, func() { _, gatherErr = m.Registry().Gather() })
	require.ErrorContains(t, gatherErr, "server: counting lazarus_human_calls_pending at scrape: no answer within 100ms: context deadline exceeded")
	require.ErrorContains(t, gatherErr, "server: counting lazarus_conversations_active at scrape: no answer within 100ms: context deadline exceeded")
	require.ErrorContains(t, gatherErr, "server: counting lazarus_schedules at scrape: no answer within 100ms: context deadline exceeded")
	close(release)

	store.hang.Store(false)
	require.EqualValues(t, 1, seriesValue(t, m.Registry(), "lazarus_human_calls_pending"), "the gauges count again once the Store answers")
	require.EqualValues(t, 1, seriesValue(t, m.Registry(), "lazarus_schedules"))
}

// TestMetricsAcrossCloseAndReopen: one Metrics fed by a Runtime that is
// closed and by the next one opened on the same Store in the same process
// (its Server made with the Metrics again): registering nothing twice, it
// neither panics nor loses a count. Close counts out the subscriptions it
// ends and leaves no actor live; the counters go on from the first
// Runtime's values, and the scrape-time gauges read the new Runtime.
func TestMetricsAcrossCloseAndReopen(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m := server.NewMetrics()
	reg := m.Registry()
	val := func(name string) float64 { return seriesValue(t, reg, "lazarus_"+name) }
	store := memjournal.New(memjournal.Options{})
	model := scripted.New(scripted.Options{})
	open := func() *lazarus.Runtime {
		rt, err := lazarus.Open(lazarus.Options{Model: model, Store: store, IdleTimeout: -1, Metrics: m.Hooks(),
			Tools: []agent.Tool{{Name: "ask", Executor: messages.Executor_EXECUTOR_HUMAN, Timeout: time.Hour}}})
		require.NoError(t, err)
		t.Cleanup(func() { _ = rt.Close() })
		_ = server.New(rt, server.Options{Metrics: m})
		return rt
	}
	user := agent.Scope{UserID: "u"}

	rt1 := open()
	model.Push("a", scripted.Reply("asking", scripted.Call("ask", `{}`)))
	end, err := rt1.SendAndWait(ctx, "a", "hi", user)
	require.NoError(t, err)
	require.Equal(t, lazarus.TurnSuspended, end.Outcome)
	updates, err := rt1.Subscribe(ctx, "a", 0)
	require.NoError(t, err)
	// SendAndWait's own subscription may not have ended yet.
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.EqualValues(c, 1, seriesValue(c, reg, "lazarus_subscriptions")) },
		10*time.Second, time.Millisecond)
	require.EqualValues(t, 1, val("conversations_live"))
	require.NoError(t, rt1.Close())
	for range updates { // Close ends the subscription
	}
	// Until a Server is made with the Metrics again, the gauges counted
	// from the Store read the closed Runtime, which fails them (the
	// scrape reports the errors); every other series is there.
	mfs, err := reg.Gather()
	require.ErrorIs(t, err, lazarus.ErrClosed)
	closed := map[string]float64{}
	for _, mf := range mfs {
		if m := mf.GetMetric(); len(m) == 1 && len(m[0].GetLabel()) == 0 {
			closed[mf.GetName()] = m[0].GetGauge().GetValue() + m[0].GetCounter().GetValue()
		}
	}
	require.NotContains(t, closed, "lazarus_human_calls_pending")
	require.Zero(t, closed["lazarus_subscriptions"], "Close waits for the subscriptions it ends, counted out")
	require.Contains(t, closed, "lazarus_conversations_live")
	require.Zero(t, closed["lazarus_conversations_live"], "a closed Runtime holds no actor")
	require.EqualValues(t, 1, closed["lazarus_conversation_activations_total"])
	require.Zero(t, closed["lazarus_conversation_passivations_total"], "a Close is no passivation")

	rt2 := open()
	require.EqualValues(t, 1, val("human_calls_pending"), "the new Runtime's Store is read")
	model.Push("b", scripted.Text("hello"))
	_, err = rt2.SendAndWait(ctx, "b", "hi", user)
	require.NoError(t, err)
	require.EqualValues(t, 1, val("conversations_live"), "the new Runtime's actors")
	require.EqualValues(t, 2, val("conversation_activations_total"), "counted on from the first Runtime's")
	turns := func(outcome string) float64 { return labeledValue(t, reg, "lazarus_turns_total", "outcome", outcome) }
	require.EqualValues(t, 1, turns("suspended"))
	require.EqualValues(t, 1, turns("answered"))
	require.EqualValues(t, 2, val("model_call_seconds"))
}

// TestMetricsHistogramBuckets: the histograms have the buckets the doc of
// Metrics states, each twice the one before.
func TestMetricsHistogramBuckets(t *testing.T) {
	m := server.NewMetrics()
	mfs, err := m.Registry().Gather()
	require.NoError(t, err)
	want := map[string]struct {
		first float64
		n     int
	}{
		"lazarus_journal_commit_seconds":  {0.0001, 16},
		"lazarus_journal_commit_requests": {1, 13},
		"lazarus_model_call_seconds":      {0.01, 14},
	}
	seen := 0
	for _, mf := range mfs {
		w, ok := want[mf.GetName()]
		if !ok {
			continue
		}
		seen++
		bs := mf.GetMetric()[0].GetHistogram().GetBucket()
		require.Len(t, bs, w.n, mf.GetName())
		for i, b := range bs {
			require.InEpsilon(t, w.first*float64(int(1)<<i), b.GetUpperBound(), 1e-9, "%s bucket %d", mf.GetName(), i)
		}
	}
	require.Equal(t, len(want), seen)
}
