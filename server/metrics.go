package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// Metrics holds the Prometheus series of a Runtime, in a registry of its
// own. Make it before the Runtime, pass its Hooks to lazarus.Options.Metrics
// and it to Options.Metrics:
//
//	m := server.NewMetrics()
//	rt, err := lazarus.Open(lazarus.Options{Model: model, Metrics: m.Hooks()})
//	h := server.New(rt, server.Options{Authenticator: tokens, Metrics: m})
//
// The series (all prefixed lazarus_):
//
//	journal_commit_seconds            histogram: duration of one group commit (Store.AppendBatch)
//	journal_commit_requests           histogram: append requests per group commit
//	journal_appends_total             counter: append requests committed (a fork's write is none: Runtime.Fork writes through Store.Fork, not the journal)
//	journal_appends_unknown_total     counter: append requests whose commit the Store reported of unknown outcome (landed or not; one that landed is in no count of commits)
//	journal_events_total              counter: events appended (a fork's copied events not counted, as for journal_appends_total)
//	conversations_live                gauge: conversation actors in memory (read at scrape)
//	conversations_active              gauge: conversations whose status is ACTIVE, a turn owed or running (counted at scrape, up to MaxPendingCount)
//	conversation_activations_total    counter: actors spawned (first activations and revivals)
//	conversation_passivations_total   counter: idle actors passivated (out of memory until their next command)
//	conversation_fenced_total         counter: actors retired because another writer moved the log on (the Store's fence)
//	human_calls_pending               gauge: pending human calls (counted at scrape, up to MaxPendingCount)
//	human_calls_expired_total         counter: human calls resolved by their deadline
//	schedules                         gauge: schedules the Store holds (counted at scrape, up to MaxPendingCount)
//	schedule_fires_total{outcome}     counter: due occurrences of schedules, by outcome: delivered, dropped (conversation ended or deleted), failed (handed again later), unknown (its write's outcome unknown: if it landed, delivered but not counted so), refused (a message the conversation can never write: the occurrence skipped)
//	model_call_seconds                histogram: duration of one model call
//	model_call_errors_total           counter: model calls that returned an error (cancelled ones too)
//	subscriptions                     gauge: live subscriptions (event streams and Go subscribers, SendAndWait's own while it waits; in cluster mode, on the member that owns the conversation)
//	turns_total{outcome}              counter: turn ends committed, by outcome: answered, suspended, failed, cancelled (taken back by a rewind or an edit)
//	tool_calls_total{executor}        counter: tool calls of models committed, by executor: server, human
//
// The labels take only the values listed: no series grows with
// conversations or users. The histograms' buckets double:
// journal_commit_seconds from 100 µs to about 3.3 s (16 buckets),
// journal_commit_requests from 1 to 4096 (13), model_call_seconds from
// 10 ms to about 82 s (14); each has +Inf above.
//
// The gauges counted at scrape report no number when the Store fails them
// (an error, or no answer within StoreScrapeTimeout, 5 s: one deadline
// shared by the three gauges of a scrape, which counts them
// concurrently): never a count of the pages read before the error. A
// scrape against a Store that does not answer thus returns within 5 s,
// with the three gauges failed and every other series present. A Store
// that keeps no schedules (no journal.ScheduleStore) holds none:
// schedules reads 0. The Registry's Gather returns
// the error for them; the Server's /metrics leaves them out of that
// scrape, serves the other series, logs the error (Options.Logger) and
// counts it in promhttp_metric_handler_errors_total{cause="gathering"}.
// Hooks are allocation-free: counters and histograms of client_golang.
//
// Use one Metrics per Runtime. Each has a registry of its own (with the Go
// and process collectors), so two Runtimes in one process, each with its
// own NewMetrics, never conflict; their series have the same names, so
// serve each registry on its own endpoint. Hooks of one Metrics given to
// two Runtimes add up both Runtimes' counts, and its scrape-time gauges
// read the Runtime of the latest Server made with it. A Runtime opened
// without hooks (the zero lazarus.Metrics) reports nothing and pays only
// nil checks.
type Metrics struct {
	reg *prometheus.Registry
	rt  atomic.Pointer[lazarus.Runtime]
	// storeTimeout, when positive, replaces StoreScrapeTimeout (tests).
	storeTimeout time.Duration

	commitSeconds  prometheus.Histogram
	commitRequests prometheus.Histogram
	appends        prometheus.Counter
	appendsUnknown prometheus.Counter
	events         prometheus.Counter
	activations    prometheus.Counter
	passivations   prometheus.Counter
	fenced         prometheus.Counter
	expired        prometheus.Counter
	modelSeconds   prometheus.Histogram
	modelErrors    prometheus.Counter
	subscriptions  prometheus.Gauge
	turns          [lazarus.TurnCancelled + 1]prometheus.Counter   // by outcome
	toolCalls      [2]prometheus.Counter                           // server, human
	scheduleFires  [lazarus.ScheduleRefused + 1]prometheus.Counter // by outcome
}

// MaxPendingCount bounds what lazarus_human_calls_pending,
// lazarus_conversations_active and lazarus_schedules count at one scrape
// (each pages through an index of the Store, the pending calls, the ACTIVE
// conversations or the schedules' times, so a scrape reads at most this
// many entries of each); past it the gauge reads MaxPendingCount.
const MaxPendingCount = 100_000

// NewMetrics returns a Metrics with its series registered in a new
// registry (Registry), with the Go and process collectors.
func NewMetrics() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	const ns = "lazarus"
	m.commitSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "journal_commit_seconds",
		Help: "Duration of one group commit (Store.AppendBatch).", Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16)})
	m.commitRequests = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "journal_commit_requests",
		Help: "Append requests per group commit.", Buckets: prometheus.ExponentialBuckets(1, 2, 13)})
	m.appends = prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "journal_appends_total",
		Help: "Append requests committed (a fork is not one: Runtime.Fork writes through Store.Fork, not the journal)."})
	m.appendsUnknown = prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "journal_appends_unknown_total",
		Help: "Append requests whose commit the Store reported of unknown outcome (journal.ErrUnknownOutcome): each landed or not; one that landed is in no count of commits (its retry finds it in the log), one that did not is counted when its retry commits."})
	m.events = prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "journal_events_total",
		Help: "Events appended (a fork's copied events not counted)."})
	m.activations = prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "conversation_activations_total",
		Help: "Conversation actors spawned: first activations and revivals."})
	m.passivations = prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "conversation_passivations_total",
		Help: "Idle conversation actors passivated (out of memory until their next command)."})
	m.fenced = prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "conversation_fenced_total",
		Help: "Conversation actors retired because another writer moved the log on (the Store's fence: a split brain, a paused node)."})
	m.expired = prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "human_calls_expired_total",
		Help: "Human calls resolved by their deadline."})
	m.modelSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "model_call_seconds",
		Help: "Duration of one model call.", Buckets: prometheus.ExponentialBuckets(0.01, 2, 14)})
	m.modelErrors = prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "model_call_errors_total",
		Help: "Model calls that returned an error (cancelled ones included)."})
	m.subscriptions = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "subscriptions",
		Help: "Live subscriptions to conversations (event streams included, and SendAndWait's own while it waits; in cluster mode, counted by the member that owns the conversation)."})
	turns := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "turns_total",
		Help: "Turn ends committed, by outcome (cancelled: taken back by a rewind or an edit)."}, []string{"outcome"})
	for _, o := range []lazarus.TurnOutcome{lazarus.TurnAnswered, lazarus.TurnSuspended, lazarus.TurnFailed, lazarus.TurnCancelled} {
		m.turns[o] = turns.WithLabelValues(o.String())
	}
	toolCalls := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "tool_calls_total",
		Help: "Tool calls of models committed, by executor (server: the runtime's tools; human)."}, []string{"executor"})
	m.toolCalls[0], m.toolCalls[1] = toolCalls.WithLabelValues("server"), toolCalls.WithLabelValues("human")
	fires := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "schedule_fires_total",
		Help: "Due occurrences of schedules, by outcome (delivered: the message committed, once per occurrence; dropped: the conversation was ended or deleted; failed: handed again later; unknown: a write of unknown outcome, which if it landed delivered the occurrence without counting it as delivered; refused: a message the conversation can never write, the occurrence skipped)."}, []string{"outcome"})
	for _, o := range []lazarus.ScheduleOutcome{lazarus.ScheduleDelivered, lazarus.ScheduleDropped, lazarus.ScheduleFailed, lazarus.ScheduleUnknown, lazarus.ScheduleRefused} {
		m.scheduleFires[o] = fires.WithLabelValues(o.String())
	}
	live := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Name: "conversations_live",
		Help: "Conversation actors in memory."}, func() float64 {
		if rt := m.rt.Load(); rt != nil {
			return float64(rt.Active())
		}
		return 0
	})
	active := storeGauge{name: ns + "_conversations_active", desc: prometheus.NewDesc(ns+"_conversations_active",
		"Conversations with a turn owed or running (status ACTIVE; counted at scrape, bounded).", nil, nil), count: m.activeConversations}
	pending := storeGauge{name: ns + "_human_calls_pending", desc: prometheus.NewDesc(ns+"_human_calls_pending",
		"Pending human calls (counted at scrape, bounded).", nil, nil), count: m.pendingCalls}
	schedules := storeGauge{name: ns + "_schedules", desc: prometheus.NewDesc(ns+"_schedules",
		"Schedules the Store holds (counted at scrape, bounded).", nil, nil), count: m.schedules}
	store := storeGauges{gauges: []storeGauge{active, pending, schedules}, timeout: &m.storeTimeout}
	m.reg.MustRegister(m.commitSeconds, m.commitRequests, m.appends, m.appendsUnknown, m.events, m.activations, m.passivations, m.fenced, m.expired,
		m.modelSeconds, m.modelErrors, m.subscriptions, turns, toolCalls, fires, live, store,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Registry returns the registry of the series, to add an application's own
// or to serve it elsewhere.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Hooks returns the hooks that feed m, for lazarus.Options.Metrics.
func (m *Metrics) Hooks() lazarus.Metrics {
	return lazarus.Metrics{
		Commit: func(requests int, took time.Duration) {
			m.commitSeconds.Observe(took.Seconds())
			m.commitRequests.Observe(float64(requests))
		},
		Appended: func(events int) {
			m.appends.Inc()
			m.events.Add(float64(events))
		},
		AppendUnknown: m.appendsUnknown.Inc,
		Expired:       m.expired.Inc,
		Activated:     m.activations.Inc,
		Passivated:    m.passivations.Inc,
		Fenced:        m.fenced.Inc,
		ModelCall: func(took time.Duration, err error) {
			m.modelSeconds.Observe(took.Seconds())
			if err != nil {
				m.modelErrors.Inc()
			}
		},
		Subscribers: func(delta int) { m.subscriptions.Add(float64(delta)) },
		TurnEnded: func(o lazarus.TurnOutcome) {
			if o >= lazarus.TurnAnswered && int(o) < len(m.turns) {
				m.turns[o].Inc()
			}
		},
		ToolCalled: func(e messages.Executor) {
			if e == messages.Executor_EXECUTOR_HUMAN {
				m.toolCalls[1].Inc()
			} else {
				m.toolCalls[0].Inc()
			}
		},
		ScheduleFired: func(o lazarus.ScheduleOutcome) {
			if o >= lazarus.ScheduleDelivered && int(o) < len(m.scheduleFires) {
				m.scheduleFires[o].Inc()
			}
		},
	}
}

// attach makes the scrape-time gauges read rt (the latest Server made
// with m).
func (m *Metrics) attach(rt *lazarus.Runtime) { m.rt.Store(rt) }

// StoreScrapeTimeout bounds the Store reads of one scrape: the gauges
// counted from the Store (lazarus_conversations_active,
// lazarus_human_calls_pending, lazarus_schedules) are counted concurrently
// under one
// deadline, this long after the scrape reaches them, so that a Store that
// does not answer costs a scrape this much once, not once per gauge, well
// within Prometheus's default scrape_timeout (10 s). A gauge not counted by
// then is reported as an error wrapping context.DeadlineExceeded.
const StoreScrapeTimeout = 5 * time.Second

// storeGauge is a gauge counted from the Store at each scrape. A count
// that fails is reported to the scrape as the gauge's error
// (prometheus.NewInvalidMetric), never as a number.
type storeGauge struct {
	name  string
	desc  *prometheus.Desc
	count func(context.Context) (float64, error)
}

// storeGauges collects the storeGauges of a Metrics as one collector, so
// that one scrape counts them all concurrently under one deadline
// (StoreScrapeTimeout, or timeout when set).
type storeGauges struct {
	gauges  []storeGauge
	timeout *time.Duration // Metrics.storeTimeout: 0 is StoreScrapeTimeout
}

func (c storeGauges) Describe(ch chan<- *prometheus.Desc) {
	for _, g := range c.gauges {
		ch <- g.desc
	}
}

// Collect sends each gauge's count, or its error: a gauge whose count has
// not returned by the deadline is reported as timed out even if the Store
// ignores the context, so a scrape never waits past the deadline for them.
func (c storeGauges) Collect(ch chan<- prometheus.Metric) {
	timeout := *c.timeout
	if timeout <= 0 {
		timeout = StoreScrapeTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	type result struct {
		i   int
		v   float64
		err error
	}
	// Buffered: a count that returns after the deadline does not block.
	results := make(chan result, len(c.gauges))
	for i, g := range c.gauges {
		go func() {
			v, err := g.count(ctx)
			results <- result{i, v, err}
		}()
	}
	done := make([]bool, len(c.gauges))
	for range c.gauges {
		var r result
		select {
		case r = <-results:
		case <-ctx.Done():
			// Wait no longer: the gauges still counting time out.
			for i, g := range c.gauges {
				if !done[i] {
					ch <- prometheus.NewInvalidMetric(g.desc, fmt.Errorf("server: counting %s at scrape: no answer within %v: %w", g.name, timeout, ctx.Err()))
				}
			}
			return
		}
		done[r.i] = true
		g := c.gauges[r.i]
		if r.err != nil {
			ch <- prometheus.NewInvalidMetric(g.desc, fmt.Errorf("server: counting %s at scrape: %w", g.name, r.err))
			continue
		}
		ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, r.v)
	}
}

// pendingCalls counts the pending human calls (up to MaxPendingCount).
func (m *Metrics) pendingCalls(ctx context.Context) (float64, error) {
	rt := m.rt.Load()
	if rt == nil {
		return 0, nil
	}
	n, cursor := 0, ""
	for n < MaxPendingCount {
		rows, next, err := rt.PendingCalls(ctx, cursor, min(1000, MaxPendingCount-n))
		if err != nil {
			return 0, err
		}
		n += len(rows)
		if next == "" {
			break
		}
		cursor = next
	}
	return float64(n), nil
}

// errEnoughSchedules stops a count of schedules at MaxPendingCount.
var errEnoughSchedules = errors.New("server: MaxPendingCount schedules counted")

// schedules counts the schedules the Store holds (up to MaxPendingCount),
// from the index of their times (journal.ScheduleStore.ScheduleTimes,
// which reads no payloads); a Store that keeps no schedules holds none.
func (m *Metrics) schedules(ctx context.Context) (float64, error) {
	rt := m.rt.Load()
	if rt == nil {
		return 0, nil
	}
	ss, ok := rt.Store().(journal.ScheduleStore)
	if !ok {
		return 0, nil
	}
	n := 0
	err := ss.ScheduleTimes(ctx, func(string, string, time.Time) error {
		if n++; n >= MaxPendingCount {
			return errEnoughSchedules
		}
		return nil
	})
	if err != nil && !errors.Is(err, errEnoughSchedules) {
		return 0, err
	}
	return float64(n), nil
}

// activeConversations counts the ACTIVE conversations (up to
// MaxPendingCount).
func (m *Metrics) activeConversations(ctx context.Context) (float64, error) {
	rt := m.rt.Load()
	if rt == nil {
		return 0, nil
	}
	n, cursor := 0, ""
	for n < MaxPendingCount {
		ids, next, err := rt.Store().ListActiveConversations(ctx, cursor, min(1000, MaxPendingCount-n))
		if err != nil {
			return 0, err
		}
		n += len(ids)
		if next == "" {
			break
		}
		cursor = next
	}
	return float64(n), nil
}

// metrics serves the Prometheus exposition: to operators, or to anyone
// with Options.PublicMetrics.
func (s *Server) metrics(w http.ResponseWriter, r *http.Request) {
	if !s.opts.PublicMetrics {
		c, ok := s.authenticate(r)
		if !ok {
			s.writeError(w, r, &apiError{status: http.StatusUnauthorized, code: CodeUnauthenticated, msg: "authentication required"})
			return
		}
		if !c.operator {
			s.writeError(w, r, &apiError{status: http.StatusForbidden, code: CodeForbidden, msg: "metrics need the operator role"})
			return
		}
	}
	s.prom.ServeHTTP(w, r)
}
