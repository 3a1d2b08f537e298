package actors

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

const benchDeadlines = 1_000_000

// benchIDs returns n tool call ids shaped like the runtime's (31 bytes) and
// their conversation ids (n/10 conversations), built once per benchmark.
func benchIDs(n int) (calls, convs []string) {
	calls, convs = make([]string, n), make([]string, n)
	for i := range n {
		calls[i] = fmt.Sprintf("call_%026d", i)
		convs[i] = fmt.Sprintf("conv-%08d", i/10)
	}
	return calls, convs
}

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkExpirySchedule schedules a million deadlines at random times
// into the expiry actor's queue (what a million ScheduleExpiry messages do
// to its state). heap-B/deadline is the live heap the queue holds per
// deadline once built, not counting the id strings (shared with the
// messages they came from: 31 + 13 bytes here); B/op counts every
// allocation of the build, including the garbage of slice and map growth.
func BenchmarkExpirySchedule(b *testing.B) {
	calls, convs := benchIDs(benchDeadlines)
	rng := rand.New(rand.NewPCG(1, 2))
	ats := make([]int64, benchDeadlines)
	base := time.Now().UnixNano()
	for i := range ats {
		ats[i] = base + rng.Int64N(int64(24*time.Hour))
	}
	b.ReportAllocs()
	var perDeadline float64
	for b.Loop() {
		b.StopTimer()
		before := heapInUse()
		b.StartTimer()
		q := newExpiryQueue(0, defaultExpiryMaxInFlight, int64(time.Second), int64(30*time.Second))
		for i := range benchDeadlines {
			q.schedule(convs[i], calls[i], ats[i])
		}
		b.StopTimer()
		perDeadline = float64(heapInUse()-before) / benchDeadlines
		runtime.KeepAlive(q)
		b.StartTimer()
	}
	b.ReportMetric(perDeadline, "heap-B/deadline")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/benchDeadlines, "ns/deadline")
}

// BenchmarkExpiryRebuild measures what the expiry actor does on Started
// with a million deadlines in a memjournal: Store.Deadlines (which clones
// and sorts every row; store-read measures it alone) and the heap build
// (rebuild: the whole of it). The Store is filled once, which takes a few
// seconds.
func BenchmarkExpiryRebuild(b *testing.B) {
	store := memjournal.New(memjournal.Options{})
	calls, convs := benchIDs(benchDeadlines)
	base := time.Now()
	ctx := context.Background()
	for i := range benchDeadlines {
		err := store.ScheduleDeadline(ctx, &messages.Deadline{
			ConversationId: convs[i], ToolCallId: calls[i],
			At: timestamppb.New(base.Add(time.Duration(i%86400) * time.Second)),
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	calls, convs = nil, nil
	opts := ExpiryOptions{Store: store, Journal: nil}.withDefaults()

	// The Store's share: memjournal's Deadlines with a callback that keeps
	// nothing.
	b.Run("store-read", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			n := 0
			if err := store.Deadlines(ctx, time.Time{}, func(*messages.Deadline) error { n++; return nil }); err != nil || n != benchDeadlines {
				b.Fatalf("read %d deadlines: %v", n, err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/benchDeadlines, "ns/deadline")
	})
	// The whole rebuild the actor does on Started.
	b.Run("rebuild", func(b *testing.B) {
		b.ReportAllocs()
		var perDeadline float64
		for b.Loop() {
			b.StopTimer()
			before := heapInUse()
			b.StartTimer()
			a := &expiryActor{opts: opts, q: newExpiryQueue(0, opts.MaxInFlight, int64(opts.RetryAfter), int64(opts.ReplyTimeout))}
			a.rebuild()
			b.StopTimer()
			if !a.rebuilt || a.q.heap.len() != benchDeadlines {
				b.Fatalf("rebuilt %v with %d deadlines", a.rebuilt, a.q.heap.len())
			}
			perDeadline = float64(heapInUse()-before) / benchDeadlines
			runtime.KeepAlive(a)
			b.StartTimer()
		}
		b.ReportMetric(perDeadline, "heap-B/deadline")
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/benchDeadlines, "ns/deadline")
	})
}
