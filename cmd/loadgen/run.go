package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/pebblejournal"
	"github.com/lazarusrt/lazarus/snapshot"
)

// stallAfter is how long a conversation may go without an update before
// its driver wakes it (a lost command; it should not happen).
const stallAfter = 10 * time.Second

// sendRetryAfter is how long a driver waits after a failed Send before it
// sends its next message.
const sendRetryAfter = 100 * time.Millisecond

// conv is one simulated conversation: its driver goroutine sends a user
// message, waits (on a subscription) for the turn's final answer, answers
// a human call after a delay when the turn has one, and starts over.
type conv struct {
	id    string
	times convTimes
}

// runStats are the counters and histograms of the runtime phase. Events,
// turns, kills and latencies count only once measuring is set, after the
// warm-up; failures and stalls count over the whole run.
type runStats struct {
	measuring atomic.Bool
	// enough is closed once minTurns turns were measured.
	enough   chan struct{}
	minTurns uint64

	events, turns, humanTurns, kills, failures, stalls, lagged atomic.Uint64
	allEvents, allTurns                                        atomic.Uint64 // warm-up included, for the progress line

	sendAck    histogram // Send: call to durable seq
	eventAck   histogram // an event's content known to the runtime -> seen durable by a subscriber
	resolveAck histogram // Resolve: call to durable
	revival    histogram // Kill, then Wake served by the revived actor
	turnTime   histogram // Send called -> final answer seen durable

	// arrivals, open loop only (--rate): each value is the time a turn
	// arrived; a driver takes one when its conversation is idle.
	arrivals chan time.Time
	// offered counts the arrivals while measuring; overflow those that
	// found the queue full (the offered load then exceeds what the
	// runtime serves).
	offered, overflow atomic.Uint64
}

func (st *runStats) record(h *histogram, d time.Duration) {
	if st.measuring.Load() {
		h.Record(d)
	}
}

func (st *runStats) count(c *atomic.Uint64) {
	if st.measuring.Load() {
		if n := c.Add(1); c == &st.turns && n == st.minTurns {
			close(st.enough)
		}
	}
	switch c {
	case &st.events:
		st.allEvents.Add(1)
	case &st.turns:
		st.allTurns.Add(1)
	}
}

// runResult is what the runtime phase reports.
type runResult struct {
	Seconds          float64 `json:"seconds"`
	Events           uint64  `json:"events"`
	EventsPerSec     float64 `json:"events_per_s"`
	Turns            uint64  `json:"turns"`
	TurnsPerSec      float64 `json:"turns_per_s"`
	HumanTurns       uint64  `json:"human_turns"`
	Kills            uint64  `json:"kills"`
	Failures         uint64  `json:"failed_turns"`
	Stalls           uint64  `json:"stalls"`
	SendAck          latency `json:"send_ack"`
	EventAck         latency `json:"event_ack"`
	ResolveAck       latency `json:"resolve_ack"`
	Revival          latency `json:"revival_under_load"`
	TurnLatency      latency `json:"turn_latency"`
	PeakRSS          uint64  `json:"peak_rss_bytes"`
	StoredEvents     uint64  `json:"stored_events"`
	DiskBytes        int64   `json:"disk_bytes"`
	DiskBytesPerEvnt float64 `json:"disk_bytes_per_event"`
	// Compacted is the disk per event after a full compaction (--compact).
	Compacted   *footprint  `json:"compacted,omitempty"`
	GroupCommit commitStats `json:"group_commit"`
	// OfferedTurns and Overflow: open loop only (--rate).
	OfferedTurns uint64  `json:"offered_turns,omitempty"`
	Overflow     uint64  `json:"overflow_arrivals,omitempty"`
	CPUPerEvent  float64 `json:"cpu_us_per_event"`
	CPUUtil      float64 `json:"cpu_utilization"`
	// GoMaxProcs is GOMAXPROCS while the phase's store was open (one more
	// than the run's on Pebble, see openStore).
	GoMaxProcs int `json:"gomaxprocs"`
}

// runtimeOptions are the Runtime options every phase uses.
func runtimeOptions(cfg config, store journal.Store, w *workload) lazarus.Options {
	opts := lazarus.Options{
		Store: store,
		Model: w,
		Tools: w.tools(),
		// Summarize every SummaryEvery turns: a turn renders 4 events
		// (user, assistant, tool result, assistant); keep the last turn.
		Summary:    snapshot.Policy{MaxEvents: 4 * cfg.SummaryEvery, MaxTokens: -1, KeepRecent: 4},
		Summarizer: snapshot.Deterministic{},
		Logger:     cfg.logger,
	}
	if cfg.SummaryEvery <= 0 {
		opts.Summarizer = nil
	}
	return opts
}

func openStore(cfg config, dir string) (journal.Store, error) {
	if cfg.Postgres != "" {
		return openPostgres(context.Background(), cfg, filepath.Base(dir))
	}
	// As a node does (lazarus serve): the WAL's syncs get a P of their own
	// while the runtime's store is open; the baselines' stores keep Go's
	// default.
	opts := pebblejournal.Options{Logger: cfg.logger, RaiseGOMAXPROCS: true}
	if cfg.PebbleEvents {
		opts.EventListener = printEvents(cfg.errOut(), time.Now())
	}
	return pebblejournal.Open(dir, opts)
}

// runRuntime is the main phase: cfg.Conversations drivers against a
// Runtime on Pebble in dir, for cfg.Duration.
func runRuntime(ctx context.Context, cfg config, dir string) (runResult, error) {
	convs := make([]*conv, cfg.Conversations)
	byID := make(map[string]*conv, len(convs))
	for i := range convs {
		c := &conv{id: fmt.Sprintf("conv-%05d", i)}
		convs[i], byID[c.id] = c, c
	}
	w := &workload{think: cfg.Think, times: func(id string) *convTimes {
		if c := byID[id]; c != nil {
			return &c.times
		}
		return nil
	}}
	// The trace file first: a --trace that cannot be created fails the
	// phase before it opens anything it would have to close.
	if cfg.Trace != "" {
		stopTrace, err := traceWindow(cfg.Trace, cfg.TraceFrom, 2*time.Second)
		if err != nil {
			return runResult{}, fmt.Errorf("--trace: %w", err)
		}
		defer stopTrace()
	}
	store, err := openStore(cfg, dir)
	if err != nil {
		return runResult{}, err
	}
	procs := runtime.GOMAXPROCS(0)
	counting := &countingStore{Store: store}
	rt, err := lazarus.Open(runtimeOptions(cfg, counting, w))
	if err != nil {
		_ = store.Close()
		return runResult{}, err
	}
	st := &runStats{enough: make(chan struct{}), minTurns: cfg.MinMeasured}
	if cfg.Rate > 0 {
		st.arrivals = make(chan time.Time, arrivalQueue)
	}
	if st.minTurns == 0 {
		close(st.enough)
	}

	resetPeakRSS()
	// Cancelled, not timed out: an entry call in flight at the end then
	// finishes (Runtime calls bound themselves by a ctx deadline, not by
	// its cancellation).
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	go endAfter(runCtx, stop, cfg.Duration, st.enough)
	var wg sync.WaitGroup
	start := time.Now()
	for _, c := range convs {
		wg.Go(func() { drive(runCtx, cfg, rt, c, st) })
	}
	if cfg.KillEvery > 0 {
		wg.Go(func() { killer(runCtx, cfg, rt, convs, st) })
	}
	if st.arrivals != nil {
		wg.Go(func() { arrive(runCtx, cfg.Rate/turnEvents, st) })
	}
	progressDone := make(chan struct{})
	go func() {
		defer close(progressDone)
		progress(runCtx, cfg.errOut(), start, rt, st)
	}()
	// Measure after the warm-up: the first commands of every conversation
	// arrive together, and Pebble starts empty.
	warm := time.NewTimer(cfg.Warmup)
	select {
	case <-warm.C:
	case <-runCtx.Done():
	}
	measured, cpu0 := time.Now(), cpuTime()
	st.measuring.Store(true)
	<-runCtx.Done()
	elapsed, cpu := time.Since(measured), cpuTime()-cpu0
	events, turns := st.events.Load(), st.turns.Load()
	wg.Wait()
	<-progressDone
	peak := peakRSS()

	var stored uint64
	for _, c := range convs {
		n, err := store.LastSeq(context.Background(), c.id)
		if err != nil {
			return runResult{}, fmt.Errorf("last seq of %s: %w", c.id, err)
		}
		stored += n
	}
	if err := rt.Close(); err != nil {
		return runResult{}, fmt.Errorf("close runtime: %w", err)
	}
	if err := store.Close(); err != nil {
		return runResult{}, fmt.Errorf("close store: %w", err)
	}
	disk := dirSize(dir)
	secs := elapsed.Seconds()
	res := runResult{
		GoMaxProcs:   procs,
		Seconds:      secs,
		Events:       events,
		EventsPerSec: float64(events) / secs,
		Turns:        turns,
		TurnsPerSec:  float64(turns) / secs,
		HumanTurns:   st.humanTurns.Load(),
		Kills:        st.kills.Load(),
		Failures:     st.failures.Load(),
		Stalls:       st.stalls.Load(),
		SendAck:      st.sendAck.summary(),
		EventAck:     st.eventAck.summary(),
		ResolveAck:   st.resolveAck.summary(),
		Revival:      st.revival.summary(),
		TurnLatency:  st.turnTime.summary(),
		PeakRSS:      peak,
		StoredEvents: stored,
		DiskBytes:    disk,
		GroupCommit:  counting.stats(),
		OfferedTurns: st.offered.Load(),
		Overflow:     st.overflow.Load(),
		CPUPerEvent:  div(float64(cpu.Microseconds()), float64(events)),
		CPUUtil:      cpu.Seconds() / secs,
	}
	if stored > 0 {
		res.DiskBytesPerEvnt = float64(disk) / float64(stored)
	}
	if cfg.Compact && cfg.Postgres == "" {
		fp, err := compactPebblejournal(dir, stored, cfg)
		if err != nil {
			return runResult{}, err
		}
		res.Compacted = &fp
	}
	return res, nil
}

// footprint is a store's size on disk after a full compaction.
type footprint struct {
	DiskBytes   int64   `json:"disk_bytes"`
	BytesPerEvt float64 `json:"disk_bytes_per_event"`
	Seconds     float64 `json:"compaction_seconds"`
}

func newFootprint(dir string, events uint64, took time.Duration) footprint {
	fp := footprint{DiskBytes: dirSize(dir), Seconds: took.Seconds()}
	if events > 0 {
		fp.BytesPerEvt = float64(fp.DiskBytes) / float64(events)
	}
	return fp
}

// compactPebblejournal reopens the closed store in dir, compacts it whole
// (Store.Compact), closes it and measures it.
func compactPebblejournal(dir string, events uint64, cfg config) (footprint, error) {
	s, err := pebblejournal.Open(dir, pebblejournal.Options{Logger: cfg.logger})
	if err != nil {
		return footprint{}, fmt.Errorf("reopen to compact: %w", err)
	}
	t0 := time.Now()
	if err := s.Compact(context.Background()); err != nil {
		_ = s.Close()
		return footprint{}, err
	}
	took := time.Since(t0)
	if err := s.Close(); err != nil {
		return footprint{}, err
	}
	return newFootprint(dir, events, took), nil
}

// drive runs one conversation until ctx ends.
func drive(ctx context.Context, cfg config, rt *lazarus.Runtime, c *conv, st *runStats) {
	sub, err := rt.Subscribe(ctx, c.id, 0)
	if err != nil {
		return
	}
	d := &driver{ctx: ctx, cfg: cfg, rt: rt, c: c, st: st, sub: sub}
	if cfg.Think > 0 {
		// Spread the first messages over two think times.
		t := time.NewTimer(rand.N(2 * cfg.Think))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
	}
	for ctx.Err() == nil {
		t0 := time.Now()
		if st.arrivals != nil {
			// Open loop: the turn's latency counts from its arrival, so
			// that time spent waiting for an idle conversation is in it.
			select {
			case t0 = <-st.arrivals:
			case <-ctx.Done():
				return
			}
		}
		human := rand.Float64() < cfg.HumanFraction
		_, err := rt.SendMessage(ctx, c.id, userMessage(human), lazarus.SendOptions{}, scope)
		if err != nil {
			if ctx.Err() == nil {
				st.failures.Add(1)
				fmt.Fprintf(cfg.errOut(), "loadgen: send to %s: %v\n", c.id, err)
				// A client backs off before it retries: a failing Send must
				// not turn the driver into a busy loop.
				t := time.NewTimer(sendRetryAfter)
				select {
				case <-t.C:
				case <-ctx.Done():
					t.Stop()
				}
			}
			continue
		}
		st.record(&st.sendAck, time.Since(t0))
		if !d.awaitFinal() {
			return
		}
		st.record(&st.turnTime, time.Since(t0))
		st.count(&st.turns)
		if human {
			st.count(&st.humanTurns)
		}
	}
}

var scope = agent.Scope{UserID: "loadgen"}

type driver struct {
	ctx  context.Context
	cfg  config
	rt   *lazarus.Runtime
	c    *conv
	st   *runStats
	sub  <-chan actors.Update
	last uint64 // last seq seen
	// stall fires when the driver's conversation went stallAfter without
	// an event; one per driver, re-armed per turn (a timer made per turn
	// was 1.4% of the run's CPU).
	stall *time.Timer
}

// awaitFinal reads the subscription until the turn's final answer (an
// assistant message without tool calls) is durable. It answers a human
// call on the way. It returns false when ctx ended.
func (d *driver) awaitFinal() bool {
	if d.stall == nil {
		d.stall = time.NewTimer(stallAfter)
	} else {
		d.stall.Reset(stallAfter) // Go 1.23+: no stale value to drain
	}
	stall := d.stall
	defer stall.Stop()
	for {
		var u actors.Update
		var ok bool
		select {
		case u, ok = <-d.sub:
		case <-d.ctx.Done():
			return false
		case <-stall.C:
			d.st.stalls.Add(1)
			_ = d.rt.Wake(d.ctx, d.c.id)
			stall.Reset(stallAfter)
			continue
		}
		if !ok {
			if d.ctx.Err() != nil {
				return false
			}
			// The subscription ended (it lagged): subscribe again after
			// the last event seen.
			d.st.lagged.Add(1)
			sub, err := d.rt.Subscribe(d.ctx, d.c.id, d.last)
			if err != nil {
				return false
			}
			d.sub = sub
			continue
		}
		if u.Err != nil {
			if !errors.Is(u.Err, lazarus.ErrLagged) && d.ctx.Err() == nil {
				// A failed turn or write: the actor stopped; revive it so it
				// carries on from the log.
				if d.st.failures.Add(1) <= 3 && d.cfg.Verbose {
					fmt.Fprintf(d.cfg.errOut(), "loadgen: %s: %v\n", d.c.id, u.Err)
				}
				_ = d.rt.Wake(d.ctx, d.c.id)
			}
			continue
		}
		ev := u.Event
		if ev == nil {
			continue // a delta
		}
		stall.Reset(stallAfter)
		d.last = ev.GetSeq()
		d.st.count(&d.st.events)
		now := time.Now().UnixNano()
		t := &d.c.times
		switch {
		case ev.GetUserMsg() != nil:
			// Its ack is Send's latency.
		case ev.GetAssistantMsg() != nil:
			d.st.record(&d.st.eventAck, time.Duration(now-t.modelAt.Load()))
			if len(ev.GetAssistantMsg().GetToolCalls()) == 0 {
				return true
			}
		case ev.GetToolCall() != nil:
			d.st.record(&d.st.eventAck, time.Duration(now-t.modelAt.Load()))
		case ev.GetSuspension() != nil:
			d.st.record(&d.st.eventAck, time.Duration(now-t.modelAt.Load()))
			if !d.answer(ev.GetSuspension().GetPending()[0].GetToolCallId()) {
				return false
			}
		case ev.GetResolution() != nil:
			d.st.record(&d.st.eventAck, time.Duration(now-t.resolveAt.Load()))
		case ev.GetToolResult() != nil:
			// A human call's result was known when Resolve was called.
			at := t.toolAt.Load()
			if ev.GetToolResult().GetName() == approveTool {
				at = t.resolveAt.Load()
			}
			d.st.record(&d.st.eventAck, time.Duration(now-at))
		}
	}
}

// answer is the simulated human: after HumanDelay it approves the call.
func (d *driver) answer(callID string) bool {
	if d.cfg.HumanDelay > 0 {
		t := time.NewTimer(d.cfg.HumanDelay)
		select {
		case <-t.C:
		case <-d.ctx.Done():
			t.Stop()
			return false
		}
	}
	t0 := time.Now()
	d.c.times.resolveAt.Store(t0.UnixNano())
	err := d.rt.Resolve(d.ctx, callID, `{"approved":true,"by":"loadgen"}`, scope)
	if err != nil {
		if d.ctx.Err() != nil {
			return false
		}
		d.st.failures.Add(1)
		fmt.Fprintf(d.cfg.errOut(), "loadgen: resolve %s: %v\n", callID, err)
		return true
	}
	d.st.record(&d.st.resolveAck, time.Since(t0))
	return true
}

// openLoopFractions are the shares of the closed-loop throughput that
// --open-loop offers.
var openLoopFractions = []float64{0.25, 0.5, 0.75}

// openLoopRun is one open-loop phase of --open-loop.
type openLoopRun struct {
	Fraction float64   `json:"fraction_of_saturation"`
	Offered  float64   `json:"offered_events_per_s"`
	Result   runResult `json:"result"`
	// Naive is baseline (a)'s design under the same open loop at the
	// same events/s (Postgres runs have none).
	Naive *rawResult `json:"naive_set,omitempty"`
}

// arrivalQueue bounds the arrivals waiting for an idle conversation; an
// arrival that finds it full is counted as overflow and dropped.
const arrivalQueue = 1 << 16

// arrive is the open loop's source: turns arrive as a Poisson process of
// turnsPerSec, whatever the runtime acknowledges. It sleeps only when the
// next arrival is at least a millisecond away, and then hands out every
// arrival due at once, each stamped with its own scheduled time.
func arrive(ctx context.Context, turnsPerSec float64, st *runStats) {
	next := time.Now()
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for ctx.Err() == nil {
		next = next.Add(time.Duration(rand.ExpFloat64() / turnsPerSec * float64(time.Second)))
		if d := time.Until(next); d >= time.Millisecond {
			t.Reset(d)
			select {
			case <-t.C:
			case <-ctx.Done():
				return
			}
		}
		select {
		case st.arrivals <- next:
			if st.measuring.Load() {
				st.offered.Add(1)
			}
		default:
			st.overflow.Add(1)
		}
	}
}

// killer kills a random conversation's actor every KillEvery, wherever it
// is in its turn, and wakes it at once: the revived actor applies the
// recovery rules (re-runs a model turn, re-dispatches a server call) and
// its driver never notices. It records Kill-then-Wake-served latency.
func killer(ctx context.Context, cfg config, rt *lazarus.Runtime, convs []*conv, st *runStats) {
	tick := time.NewTicker(cfg.KillEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		c := convs[rand.IntN(len(convs))]
		if !rt.Kill(c.id) {
			continue
		}
		t0 := time.Now()
		if err := rt.Wake(ctx, c.id); err != nil {
			continue
		}
		st.record(&st.revival, time.Since(t0))
		st.count(&st.kills)
	}
}

// progress prints one line a second to w (the run's stderr) until ctx
// ends; its p99s are of the acks recorded in that second.
func progress(ctx context.Context, w io.Writer, start time.Time, rt *lazarus.Runtime, st *runStats) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var lastEvents, lastTurns uint64
	var lastSend, lastEvent []uint64 // histogram snapshots: the p99s are of the last second alone
	last, lastCPU := start, cpuTime()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			ev, tu := st.allEvents.Load(), st.allTurns.Load()
			dt := now.Sub(last).Seconds()
			var mem runtime.MemStats
			runtime.ReadMemStats(&mem)
			cpu := cpuTime()
			var sendP99, eventP99 time.Duration
			sendP99, lastSend = st.sendAck.QuantileSince(lastSend, 0.99)
			eventP99, lastEvent = st.eventAck.QuantileSince(lastEvent, 0.99)
			fmt.Fprintf(w, "%5.1fs  events/s %7.0f  turns/s %6.0f  cpu %3.0f%%  send p99 %6.2fms  event-ack p99 %6.2fms  active %5d  kills %4d  rss %5.0f MiB  heap %5.0f MiB\n",
				now.Sub(start).Seconds(), float64(ev-lastEvents)/dt, float64(tu-lastTurns)/dt, 100*(cpu-lastCPU).Seconds()/dt,
				ms(sendP99), ms(eventP99),
				rt.Active(), st.kills.Load(), float64(procStatus("VmRSS"))/(1<<20), float64(mem.HeapInuse)/(1<<20))
			lastEvents, lastTurns, last, lastCPU = ev, tu, now, cpu
		}
	}
}

// endAfter calls stop once d has passed and enough is closed, unless ctx
// ends first.
func endAfter(ctx context.Context, stop func(), d time.Duration, enough <-chan struct{}) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return
	}
	select {
	case <-enough:
		stop()
	case <-ctx.Done():
	}
}
