package journaltest

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// RunBenchmarks runs the shared benchmarks against stores from f (opened
// with audit off). Events are about 1 KiB of word-like text. Each reports
// allocations and events/s. Setup is bounded so that -benchtime=1x runs
// quickly:
//
//   - Append/conversations=N: N goroutines, one conversation each, each
//     appending one event per call (a durable write per event).
//   - AppendBatch/conversations=1024: one AppendBatch per iteration holding
//     one single-event request for each of 1,024 conversations.
//   - Read/LoadSince/events=N: the revival read of a conversation of N
//     events whose latest summary ends 20 events before the end (none for
//     N=100), so it returns 20 events (100 for N=100).
//   - Read/EventsBackwardPage/limit=50: Events with Before and Limit 50 at
//     random places of the 100,000-event log.
func RunBenchmarks(b *testing.B, f Factory) {
	for _, n := range []int{1, 64, 1024} {
		b.Run(fmt.Sprintf("Append/conversations=%d", n), func(b *testing.B) { benchAppend(b, f, n) })
	}
	b.Run("AppendBatch/conversations=1024", func(b *testing.B) { benchAppendBatch(b, f, 1024) })
	b.Run("Read", func(b *testing.B) { benchReads(b, f) })
}

const benchEventBytes = 1024

func benchEvent(seed uint64, n int) *messages.Event {
	return &messages.Event{Time: ts(0), Body: &messages.Event_UserMsg{UserMsg: &messages.UserMessage{
		Content: text(textLike(newRand(seed), n)),
	}}}
}

func reportEvents(b *testing.B, events int, elapsed time.Duration) {
	if elapsed > 0 {
		b.ReportMetric(float64(events)/elapsed.Seconds(), "events/s")
	}
}

func benchAppend(b *testing.B, f Factory, convs int) {
	s := f(b, false).Store
	ctx := b.Context()
	var next atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for g := range convs {
		conv := fmt.Sprintf("bench-%d", g)
		ev := benchEvent(uint64(g), benchEventBytes)
		wg.Go(func() {
			<-start
			last := uint64(0)
			for next.Add(1) <= int64(b.N) {
				res, err := s.Append(ctx, &messages.AppendRequest{ConversationId: conv, ExpectedLast: last, Events: []*messages.Event{ev}})
				if err != nil {
					b.Errorf("append to %s: %v", conv, err)
					return
				}
				last = res.LastSeq
			}
		})
	}
	b.ReportAllocs()
	b.ResetTimer()
	t0 := time.Now()
	close(start)
	wg.Wait()
	elapsed := time.Since(t0)
	b.StopTimer()
	reportEvents(b, b.N, elapsed)
}

func benchAppendBatch(b *testing.B, f Factory, convs int) {
	s := f(b, false).Store
	ctx := b.Context()
	reqs := make([]*messages.AppendRequest, convs)
	for i := range reqs {
		reqs[i] = &messages.AppendRequest{ConversationId: fmt.Sprintf("bench-%d", i), Events: []*messages.Event{benchEvent(uint64(i), benchEventBytes)}}
	}
	b.ReportAllocs()
	b.ResetTimer()
	t0 := time.Now()
	for range b.N {
		for i, res := range s.AppendBatch(ctx, reqs) {
			if res.Err != nil {
				b.Fatalf("batch append to %s: %v", reqs[i].GetConversationId(), res.Err)
			}
			reqs[i].ExpectedLast = res.LastSeq
		}
	}
	elapsed := time.Since(t0)
	b.StopTimer()
	reportEvents(b, b.N*convs, elapsed)
}

// fill appends n events of size bytes to conv, in appends of the largest
// allowed size.
func fill(b *testing.B, s journal.Store, conv string, n, size int) {
	evs := make([]*messages.Event, journal.MaxEventsPerAppend)
	for i := range evs {
		evs[i] = benchEvent(uint64(i), size)
	}
	last := uint64(0)
	for last < uint64(n) {
		k := min(uint64(len(evs)), uint64(n)-last)
		res, err := s.Append(b.Context(), &messages.AppendRequest{ConversationId: conv, ExpectedLast: last, Events: evs[:k]})
		if err != nil {
			b.Fatalf("fill %s: %v", conv, err)
		}
		last = res.LastSeq
	}
}

func benchReads(b *testing.B, f Factory) {
	s := f(b, false).Store
	ctx := b.Context()
	const long = 100_000
	fill(b, s, "short", 100, benchEventBytes)
	// The long log's events are smaller so its setup stays quick; reads
	// return the same 1 KiB events as the short one's.
	fill(b, s, "long", long-20, 256)
	fill2 := make([]*messages.Event, 20)
	for i := range fill2 {
		fill2[i] = benchEvent(uint64(i), benchEventBytes)
	}
	if _, err := s.Append(ctx, &messages.AppendRequest{ConversationId: "long", ExpectedLast: long - 20, Events: fill2}); err != nil {
		b.Fatal(err)
	}
	for _, to := range []uint64{long / 2, long - 20} {
		if err := s.PutSummary(ctx, "long", &messages.Summary{FromSeq: 1, ToSeq: to, Content: textLike(newRand(to), 2048)}); err != nil {
			b.Fatal(err)
		}
	}
	for _, tc := range []struct {
		conv   string
		events int
		want   int
	}{{"short", 100, 100}, {"long", long, 20}} {
		b.Run(fmt.Sprintf("LoadSince/events=%d", tc.events), func(b *testing.B) {
			b.ReportAllocs()
			t0 := time.Now()
			for range b.N {
				_, evs, err := s.LoadSince(ctx, tc.conv)
				if err != nil || len(evs) != tc.want {
					b.Fatalf("LoadSince(%s): %d events, %v", tc.conv, len(evs), err)
				}
			}
			reportEvents(b, b.N*tc.want, time.Since(t0))
		})
	}
	b.Run("EventsBackwardPage/limit=50", func(b *testing.B) {
		rng := newRand(1)
		b.ReportAllocs()
		t0 := time.Now()
		for range b.N {
			before := 51 + rng.Uint64N(long-50)
			evs, err := s.Events(ctx, "long", journal.EventQuery{Before: before, Limit: 50})
			if err != nil || len(evs) != 50 || evs[49].GetSeq() != before-1 {
				b.Fatalf("Events(before %d, limit 50): %d events, %v", before, len(evs), err)
			}
		}
		reportEvents(b, b.N*50, time.Since(t0))
	})
}
