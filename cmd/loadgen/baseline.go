package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/protobuf/proto"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/snapshot"
)

// rawResult is what baseline (a) reports.
type rawResult struct {
	Seconds      float64 `json:"seconds"`
	Writers      int     `json:"writers"`
	Events       uint64  `json:"events"`
	EventsPerSec float64 `json:"events_per_s"`
	SetAck       latency `json:"set_ack"`
	PeakRSS      uint64  `json:"peak_rss_bytes"`
	DiskBytes    int64   `json:"disk_bytes"`
	BytesPerEvt  float64 `json:"disk_bytes_per_event"`
	// Compacted is the disk per event after a full compaction (--compact).
	Compacted   *footprint `json:"compacted,omitempty"`
	CPUPerEvent float64    `json:"cpu_us_per_event"`
	CPUUtil     float64    `json:"cpu_utilization"`
}

// runRawPebble is baseline (a): the same events (the same sizes and
// protobuf encoding, in the same turn order), each written by its own
// synced Pebble Set, by as many concurrent writers as the runtime phase
// has conversations: no actor, no journal, no group commit beyond what
// Pebble's commit pipeline does for concurrent syncs by itself. The store
// has the options pebblejournal sets.
func runRawPebble(ctx context.Context, cfg config, dir string) (rawResult, error) {
	opts := rawPebbleOptions()
	db, err := pebble.Open(dir, opts)
	if err != nil {
		return rawResult{}, err
	}
	var events, written atomic.Uint64 // measured; all, warm-up included
	var ack histogram
	var measuring atomic.Bool
	resetPeakRSS()
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	enough := make(chan struct{})
	if cfg.MinMeasured == 0 {
		close(enough)
	}
	go endAfter(runCtx, stop, cfg.Duration, enough)
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	for i := range cfg.Conversations {
		wg.Go(func() {
			conv := fmt.Sprintf("conv-%05d", i)
			prefix := binary.AppendUvarint([]byte("j/"), uint64(len(conv)))
			prefix = append(prefix, conv...)
			var seq uint64
			for turn := 0; runCtx.Err() == nil; turn++ {
				for _, ev := range turnLog(conv, turn, 1) {
					if runCtx.Err() != nil {
						return
					}
					seq++
					ev.Seq = seq
					v, err := proto.Marshal(ev)
					if err != nil {
						failed.Store(&err)
						return
					}
					k := binary.BigEndian.AppendUint64(append([]byte(nil), prefix...), seq)
					t0 := time.Now()
					if err := db.Set(k, v, pebble.Sync); err != nil {
						failed.Store(&err)
						return
					}
					written.Add(1)
					if measuring.Load() {
						ack.Record(time.Since(t0))
						if events.Add(1) == cfg.MinMeasured {
							close(enough)
						}
					}
				}
			}
		})
	}
	warm := time.NewTimer(cfg.Warmup)
	select {
	case <-warm.C:
	case <-runCtx.Done():
	}
	start, cpu0 := time.Now(), cpuTime()
	measuring.Store(true)
	<-runCtx.Done()
	elapsed, cpu := time.Since(start), cpuTime()-cpu0
	n := events.Load()
	wg.Wait()
	peak := peakRSS()
	if err := db.Close(); err != nil {
		return rawResult{}, err
	}
	if p := failed.Load(); p != nil {
		return rawResult{}, *p
	}
	disk := dirSize(dir)
	total := written.Load()
	res := rawResult{
		Seconds: elapsed.Seconds(), Writers: cfg.Conversations, Events: n,
		EventsPerSec: float64(n) / elapsed.Seconds(), SetAck: ack.summary(),
		PeakRSS: peak, DiskBytes: disk,
		CPUPerEvent: div(float64(cpu.Microseconds()), float64(n)), CPUUtil: cpu.Seconds() / elapsed.Seconds(),
	}
	if total > 0 {
		res.BytesPerEvt = float64(disk) / float64(total)
	}
	if cfg.Compact {
		db, err := pebble.Open(dir, opts)
		if err != nil {
			return rawResult{}, fmt.Errorf("reopen to compact: %w", err)
		}
		t0 := time.Now()
		err = db.Compact(context.Background(), []byte{0}, []byte{0xff}, true)
		took := time.Since(t0)
		if cerr := db.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return rawResult{}, fmt.Errorf("compact: %w", err)
		}
		fp := newFootprint(dir, total, took)
		res.Compacted = &fp
	}
	return res, nil
}

// afterSample runs after the single-conversation phase finishes its nth
// round ("single") and after baseline (b) takes its nth round of samples
// ("revival"): a test interrupts the run there.
var afterSample = func(phase string, n int) {}

// pebbleQuiet drops Pebble's logs (Fatalf still stops the run).
type pebbleQuiet struct{}

// Infof implements pebble.Logger: dropped.
func (pebbleQuiet) Infof(string, ...any) {}

// Errorf implements pebble.Logger: dropped.
func (pebbleQuiet) Errorf(string, ...any) {}

// Fatalf implements pebble.Logger: it panics, ending the run.
func (pebbleQuiet) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf("pebble: "+format, args...))
}

// revivalResult is what the revival phase (baseline b) reports.
type revivalResult struct {
	Events  int `json:"long_events"`
	Samples int `json:"samples"`
	// Runtime, Kill then the next Send served (its user message durable).
	LongRevival  latency `json:"long_kill_then_send"`
	ShortRevival latency `json:"short_kill_then_send"`
	WarmSend     latency `json:"warm_send"`
	// Store reads: LoadSince + Rebuild, against replaying the whole log.
	LongLoadSince latency `json:"long_loadsince_rebuild"`
	FullReplay    latency `json:"full_replay_rebuild"`
}

// Conversations of the revival phase.
const (
	longConv  = "long"
	shortConv = "short"
	// recentEvents is how many events of the filled conversations follow
	// their summary (four turns).
	recentEvents = 4 * turnEvents
)

// runRevival is baseline (b): a conversation of cfg.RevivalEvents events
// with a summary recentEvents before its end, another of 100 events with
// its summary at the same distance, in a fresh Runtime. For each, Samples
// times: Kill its actor, then Send, timing the Send (revival from the
// summary plus later events, then the durable user message); then wait for
// the turn to end. Against that, the naive revival: read the whole log from
// seq 1 and rebuild the working set from it. Interrupted (ctx ended), it
// returns ctx's error with the samples it took (Samples says how many
// rounds of them it finished).
func runRevival(ctx context.Context, cfg config, dir string) (res revivalResult, err error) {
	store, err := openStore(cfg, dir)
	if err != nil {
		return revivalResult{}, err
	}
	defer store.Close()
	if err := fillConversation(ctx, store, longConv, cfg.RevivalEvents); err != nil {
		return revivalResult{}, err
	}
	if err := fillConversation(ctx, store, shortConv, 100); err != nil {
		return revivalResult{}, err
	}
	w := &workload{think: cfg.Think}
	rt, err := lazarus.Open(runtimeOptions(cfg, store, w))
	if err != nil {
		return revivalResult{}, err
	}
	defer rt.Close()
	res = revivalResult{Events: cfg.RevivalEvents}

	var long, short, warm, loadSince, replay histogram
	defer func() {
		res.LongRevival, res.ShortRevival, res.WarmSend = long.summary(), short.summary(), warm.summary()
		res.LongLoadSince, res.FullReplay = loadSince.summary(), replay.summary()
	}()
	// Interleave the measurements so that noise of the shared machine
	// falls on all of them alike.
	for range cfg.RevivalSamples {
		for _, m := range []struct {
			conv string
			kill bool
			h    *histogram
		}{{longConv, true, &long}, {shortConv, true, &short}, {shortConv, false, &warm}} {
			if err := sendAndSettle(ctx, rt, m.conv, m.kill, m.h); err != nil {
				return res, err
			}
		}
		t0 := time.Now()
		sum, evs, err := store.LoadSince(ctx, longConv)
		if err == nil {
			_, err = snapshot.Rebuild(sum, evs)
		}
		if err != nil {
			return res, err
		}
		loadSince.Record(time.Since(t0))
		res.Samples++
		afterSample("revival", res.Samples)
	}
	for range cfg.ReplaySamples {
		t0 := time.Now()
		evs, err := store.Events(ctx, longConv, journal.EventQuery{})
		if err == nil {
			_, err = snapshot.Rebuild(nil, evs)
		}
		if err != nil {
			return res, err
		}
		replay.Record(time.Since(t0))
	}
	return res, nil
}

// fillConversation writes n events (n a multiple of turnEvents) of
// complete turns to conv directly in the Store, and a summary covering all
// but the last recentEvents.
func fillConversation(ctx context.Context, store journal.Store, conv string, n int) error {
	if n%turnEvents != 0 || n <= recentEvents {
		return fmt.Errorf("a filled conversation has a multiple of %d events, more than %d: not %d", turnEvents, recentEvents, n)
	}
	const turnsPerAppend = journal.MaxEventsPerAppend / turnEvents
	var last uint64
	for turn := 0; turn < n/turnEvents; turn += turnsPerAppend {
		k := min(turnsPerAppend, n/turnEvents-turn)
		evs := turnLog(conv, turn, k)
		res, err := store.Append(ctx, &messages.AppendRequest{
			ConversationId: conv, ExpectedLast: last, Events: evs, ToolCalls: callRows(conv, evs),
			Status: messages.ConversationStatus_CONVERSATION_STATUS_IDLE,
		})
		if err != nil {
			return fmt.Errorf("fill %s: %w", conv, err)
		}
		last = res.LastSeq
	}
	to := last - recentEvents
	return store.PutSummary(ctx, conv, &messages.Summary{
		FromSeq: 1, ToSeq: to, Version: "loadgen-fill/1",
		Content: fmt.Sprintf("summary of seq 1..%d\n%s", to, text(2048)),
	})
}

// sendAndSettle activates conv (so that the measured revival starts from a
// live actor), kills it if kill, times one Send into h, and waits until the
// turn it starts has its final answer, so the next sample starts idle.
func sendAndSettle(ctx context.Context, rt *lazarus.Runtime, conv string, kill bool, h *histogram) error {
	if err := rt.Wake(ctx, conv); err != nil {
		return err
	}
	last, err := lastSeq(ctx, rt, conv)
	if err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	sub, err := rt.Subscribe(sctx, conv, last)
	if err != nil {
		return err
	}
	if kill && !rt.Kill(conv) {
		return fmt.Errorf("kill %s: no live actor", conv)
	}
	t0 := time.Now()
	if _, err := rt.SendMessage(sctx, conv, userMessage(false), lazarus.SendOptions{}, scope); err != nil {
		return err
	}
	h.Record(time.Since(t0))
	return awaitIdle(sctx, sub)
}

func lastSeq(ctx context.Context, rt *lazarus.Runtime, conv string) (uint64, error) {
	evs, err := rt.History(ctx, conv, 0, 1)
	if err != nil || len(evs) == 0 {
		return 0, err
	}
	return evs[0].GetSeq(), nil
}

// awaitIdle reads sub until a final answer (an assistant message without
// calls) is durable.
func awaitIdle(ctx context.Context, sub <-chan actors.Update) error {
	for u := range sub {
		if u.Err != nil {
			return u.Err
		}
		if m := u.Event.GetAssistantMsg(); m != nil && len(m.GetToolCalls()) == 0 {
			return nil
		}
	}
	return fmt.Errorf("no final answer: %w", context.Cause(ctx))
}

// runRawPebbleOpen is the open-loop phase's baseline: the naive design of
// baseline (a) (one synced Pebble Set per event, the same events) under
// the same open loop. Events arrive as a Poisson process of eventsPerSec,
// whatever is acknowledged; cfg.Conversations writers take them from a
// queue, and each Set's ack counts from its event's arrival.
func runRawPebbleOpen(ctx context.Context, cfg config, dir string, eventsPerSec float64) (rawResult, error) {
	db, err := pebble.Open(dir, rawPebbleOptions())
	if err != nil {
		return rawResult{}, err
	}
	st := &runStats{arrivals: make(chan time.Time, arrivalQueue)}
	var events atomic.Uint64
	var ack histogram
	runCtx, stop := context.WithTimeout(ctx, cfg.Duration)
	defer stop()
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	wg.Go(func() { arrive(runCtx, eventsPerSec, st) })
	for i := range cfg.Conversations {
		wg.Go(func() {
			conv := fmt.Sprintf("conv-%05d", i)
			prefix := binary.AppendUvarint([]byte("j/"), uint64(len(conv)))
			prefix = append(prefix, conv...)
			var seq uint64
			for turn := 0; runCtx.Err() == nil; turn++ {
				for _, ev := range turnLog(conv, turn, 1) {
					var at time.Time
					select {
					case at = <-st.arrivals:
					case <-runCtx.Done():
						return
					}
					seq++
					ev.Seq = seq
					v, err := proto.Marshal(ev)
					if err != nil {
						failed.Store(&err)
						return
					}
					k := binary.BigEndian.AppendUint64(append([]byte(nil), prefix...), seq)
					if err := db.Set(k, v, pebble.Sync); err != nil {
						failed.Store(&err)
						return
					}
					if st.measuring.Load() {
						ack.Record(time.Since(at))
						events.Add(1)
					}
				}
			}
		})
	}
	warm := time.NewTimer(cfg.Warmup)
	select {
	case <-warm.C:
	case <-runCtx.Done():
	}
	start, cpu0 := time.Now(), cpuTime()
	st.measuring.Store(true)
	<-runCtx.Done()
	elapsed, cpu := time.Since(start), cpuTime()-cpu0
	n := events.Load()
	wg.Wait()
	if err := db.Close(); err != nil {
		return rawResult{}, err
	}
	if p := failed.Load(); p != nil {
		return rawResult{}, *p
	}
	return rawResult{
		Seconds: elapsed.Seconds(), Writers: cfg.Conversations, Events: n,
		EventsPerSec: float64(n) / elapsed.Seconds(), SetAck: ack.summary(),
		CPUPerEvent: div(float64(cpu.Microseconds()), float64(n)), CPUUtil: cpu.Seconds() / elapsed.Seconds(),
	}, nil
}
