package bench

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// pendingDeadlines is how many deadlines BenchmarkExpiry keeps scheduled.
const pendingDeadlines = 1_000_000

// expiryRate is the rate at which BenchmarkExpiry's firing deadlines fall
// due, per second.
const expiryRate = 10_000

// BenchmarkExpiry measures the expiry actor on pebblejournal with
// 1,000,000 deadlines scheduled (an hour or more ahead, across 1,000
// conversations), written once before the sub-benchmarks (about half a
// minute):
//
//   - rebuild: an op is a start of the expiry actor, which reads every
//     deadline from the Store into its heap (what a process restart does).
//     It reports seconds per rebuild, and, for the first rebuild of the
//     process, the live Go heap the rebuilt actor holds (heap-MB) and the
//     growth of the process's RSS (rss-MB).
//   - fire: with the million deadlines pending, an op is one human call
//     (a pending row and its deadline) whose deadline falls due, the
//     deadlines following each other at 10,000 a second. Each expires
//     through the real journal actor (a durable resolve); the lateness of
//     a deadline is the time from its deadline to the expiry actor's
//     delivery of the durable expiry. It reports lateness p50, p99 and max
//     in ms, and the expiries per second achieved.
//
// The expiry actor's memory per deadline, and its rebuild from memjournal,
// are measured in package actors (BenchmarkExpirySchedule,
// BenchmarkExpiryRebuild).
func BenchmarkExpiry(b *testing.B) {
	store := openStore(b)
	scheduleFar(b, store, pendingDeadlines)

	b.Run(fmt.Sprintf("rebuild/deadlines=%d", pendingDeadlines), func(b *testing.B) {
		sys := newSystem(b)
		j := newFakeJournal(sys)
		var secs, heapMB, rssMB float64
		first := true
		b.ReportAllocs()
		for b.Loop() {
			b.StopTimer()
			heap0, rss0 := liveHeap(), rss()
			b.StartTimer()
			t0 := time.Now()
			pid := sys.Root.Spawn(actors.NewExpiry(actors.ExpiryOptions{Store: store, Journal: j.pid}))
			// The mailbox handles Started (the rebuild) first: the expire of
			// this past deadline is written after it.
			sys.Root.Send(pid, &messages.ScheduleExpiry{Deadline: &messages.Deadline{ConversationId: "probe", ToolCallId: "probe", At: timestamppb.New(time.Unix(1, 0))}})
			<-j.writes
			secs += time.Since(t0).Seconds()
			b.StopTimer()
			if first {
				// Later rebuilds may reuse memory an earlier one freed.
				heapMB = float64(int64(liveHeap())-int64(heap0)) / (1 << 20)
				rssMB = float64(int64(rss())-int64(rss0)) / (1 << 20)
				first = false
			}
			if err := sys.Root.StopFuture(pid).Wait(); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
		b.ReportMetric(secs/float64(b.N), "rebuild-s")
		b.ReportMetric(heapMB, "heap-MB")
		b.ReportMetric(rssMB, "rss-MB")
	})

	b.Run(fmt.Sprintf("fire/rate=%d/pending=%d", expiryRate, pendingDeadlines), func(b *testing.B) {
		sys := newSystem(b)
		jpid := sys.Root.Spawn(actors.NewJournal(store, actors.JournalOptions{}))
		n := b.N
		late := make([]time.Duration, n)
		var fired atomic.Int64
		done := make(chan struct{})
		deadlines := make(map[string]time.Time, n)
		deliver := func(_, call string) {
			at, ok := deadlines[call] // read-only once firing starts
			if !ok {
				return
			}
			i := fired.Add(1) - 1
			if int(i) < n {
				late[i] = time.Since(at)
			}
			if int(i) == n-1 {
				close(done)
			}
		}
		pid := sys.Root.Spawn(actors.NewExpiry(actors.ExpiryOptions{Store: store, Journal: jpid, Deliver: deliver}))
		defer sys.Root.Stop(pid)
		// The calls that will expire: pending rows and their deadlines,
		// written as a conversation writes them, then announced to the
		// expiry actor, which has rebuilt the far ones meanwhile.
		start := time.Now().Add(2*time.Second + time.Duration(n)*time.Second/50_000)
		reqs := pendingCalls(n, start, deadlines)
		for i := 0; i < len(reqs); i += 64 {
			for _, r := range store.AppendBatch(context.Background(), reqs[i:min(i+64, len(reqs))]) {
				if r.Err != nil {
					b.Fatal(r.Err)
				}
			}
		}
		for _, r := range reqs {
			for _, d := range r.GetSchedule() {
				sys.Root.Send(pid, &messages.ScheduleExpiry{Deadline: d})
			}
		}
		if time.Now().After(start) {
			b.Fatalf("setup overran the first deadline by %v", time.Since(start))
		}
		b.ReportAllocs()
		b.ResetTimer()
		select {
		case <-done:
		case <-time.After(time.Until(start) + time.Duration(n)*time.Second/expiryRate + wait):
			b.Fatalf("%d of %d expiries delivered", fired.Load(), n)
		}
		b.StopTimer()
		reportQuantiles(b, late)
		var worst time.Duration
		for _, d := range late {
			worst = max(worst, d)
		}
		b.ReportMetric(float64(worst)/float64(time.Millisecond), "max-ms")
		if n > 1 {
			span := time.Duration(n-1) * time.Second / expiryRate
			b.ReportMetric(float64(n)/(span+late[n-1]).Seconds(), "expiries/s")
		}
	})
}

// scheduleFar writes n deadlines an hour or more ahead, for calls of 1,000
// conversations, in large batches.
func scheduleFar(b *testing.B, store journal.Store, n int) {
	b.Helper()
	const convs = 1000
	base := time.Now().Add(time.Hour)
	var reqs []*messages.AppendRequest
	for c := range convs {
		conv := fmt.Sprintf("far%04d", c)
		r := &messages.AppendRequest{ConversationId: conv, Unfenced: true}
		for i := c; i < n; i += convs {
			r.Schedule = append(r.Schedule, &messages.Deadline{ConversationId: conv, ToolCallId: fmt.Sprintf("call_far%026d", i),
				At: timestamppb.New(base.Add(time.Duration(i) * time.Millisecond))})
		}
		reqs = append(reqs, r)
	}
	for i := 0; i < len(reqs); i += 32 {
		for _, r := range store.AppendBatch(context.Background(), reqs[i:min(i+32, len(reqs))]) {
			if r.Err != nil {
				b.Fatal(r.Err)
			}
		}
	}
}

// pendingCalls returns the appends that create n pending human calls (100
// per conversation) with deadlines 1/expiryRate apart from start, and
// records each deadline in deadlines.
func pendingCalls(n int, start time.Time, deadlines map[string]time.Time) []*messages.AppendRequest {
	var reqs []*messages.AppendRequest
	now := journal.Timestamp(time.Now())
	for i := range n {
		conv := fmt.Sprintf("near%05d", i/100)
		if i%100 == 0 {
			reqs = append(reqs, &messages.AppendRequest{ConversationId: conv, Unfenced: true})
		}
		r := reqs[len(reqs)-1]
		call := fmt.Sprintf("call_near%025d", i)
		at := start.Add(time.Duration(i) * time.Second / expiryRate)
		deadlines[call] = at
		r.ToolCalls = append(r.ToolCalls, &messages.ToolCallRecord{Id: call, ConversationId: conv, Name: "approve",
			Executor: messages.Executor_EXECUTOR_HUMAN, Status: messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING,
			Args: `{"amount":120}`, Created: now, Deadline: timestamppb.New(at)})
		r.Schedule = append(r.Schedule, &messages.Deadline{ConversationId: conv, ToolCallId: call, At: timestamppb.New(at)})
	}
	return reqs
}

// fakeJournal stands in for the journal actor: it reports each write and
// answers nothing.
type fakeJournal struct {
	pid    *actor.PID
	writes chan *messages.JournalWrite
}

func newFakeJournal(sys *actor.ActorSystem) *fakeJournal {
	j := &fakeJournal{writes: make(chan *messages.JournalWrite, 1024)}
	j.pid = sys.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		if w, ok := ctx.Message().(*messages.JournalWrite); ok {
			select {
			case j.writes <- w:
			default:
			}
		}
	}))
	return j
}
