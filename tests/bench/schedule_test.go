package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// pendingSchedules is how many schedules BenchmarkExpirySchedules keeps.
const pendingSchedules = 1_000_000

// BenchmarkExpirySchedules measures the expiry actor on pebblejournal with
// 1,000,000 scheduled wake-ups pending (an hour or more ahead, hourly,
// across 10,000 conversations of 100 each), written once before the
// sub-benchmarks with PutSchedule from 64 goroutines:
//
//   - rebuild: an op is a start of the expiry actor, which reads every
//     deadline and every schedule's next time from the Store into its
//     heaps (what a process restart does; the Store holds no deadlines
//     here). It reports seconds per rebuild (wall clock, and the CPU time
//     of the whole process meanwhile: the figure a shared machine does not
//     inflate), and, for the first rebuild of
//     the process, the live Go heap of the rebuilt actor (heap-MB) and the
//     growth of the process's RSS (rss-MB).
//   - fire: with the million pending, an op is one schedule whose
//     occurrence falls due, the occurrences following each other at
//     10,000 a second. Its lateness is the time from the occurrence to the
//     expiry actor's hand-over of it (ExpiryOptions.Fire, which the
//     runtime queues for delivery to the conversation). It reports
//     lateness p50, p99 and max in ms, and the occurrences per second
//     achieved.
func BenchmarkExpirySchedules(b *testing.B) {
	store := openStore(b)
	putSchedulesFar(b, store, pendingSchedules)

	b.Run(fmt.Sprintf("rebuild/schedules=%d", pendingSchedules), func(b *testing.B) {
		sys := newSystem(b)
		j := newFakeJournal(sys)
		var secs, cpuSecs, heapMB, rssMB float64
		first := true
		b.ReportAllocs()
		for b.Loop() {
			b.StopTimer()
			heap0, rss0 := liveHeap(), rss()
			probe := make(chan struct{}, 1)
			cpu0 := cpuTime()
			fire := func(_, id string, _ time.Time) {
				if id == "probe" {
					probe <- struct{}{}
				}
			}
			b.StartTimer()
			t0 := time.Now()
			pid := sys.Root.Spawn(actors.NewExpiry(actors.ExpiryOptions{Store: store, Journal: j.pid, Fire: fire}))
			// The mailbox handles Started (the rebuild) first: this past
			// occurrence fires after it.
			sys.Root.Send(pid, &messages.ScheduleArm{ConversationId: "probe", ScheduleId: "probe", Next: timestamppb.New(time.Unix(1, 0))})
			<-probe
			secs += time.Since(t0).Seconds()
			cpuSecs += (cpuTime() - cpu0).Seconds()
			b.StopTimer()
			if first {
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
		b.ReportMetric(cpuSecs/float64(b.N), "rebuild-cpu-s")
		b.ReportMetric(heapMB, "heap-MB")
		b.ReportMetric(rssMB, "rss-MB")
	})

	b.Run(fmt.Sprintf("fire/rate=%d/pending=%d", expiryRate, pendingSchedules), func(b *testing.B) {
		sys := newSystem(b)
		j := newFakeJournal(sys)
		n := b.N
		late := make([]time.Duration, n)
		var fired atomic.Int64
		done := make(chan struct{})
		rebuilt := make(chan struct{})
		var due map[string]time.Time // written before the first arm is sent
		fire := func(_, id string, _ time.Time) {
			if id == "probe" {
				close(rebuilt)
				return
			}
			at, ok := due[id] // read-only once firing starts
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
		pid := sys.Root.Spawn(actors.NewExpiry(actors.ExpiryOptions{Store: store, Journal: j.pid, Fire: fire}))
		defer sys.Root.Stop(pid)
		// The far million are rebuilt first (the probe fires after it).
		sys.Root.Send(pid, &messages.ScheduleArm{ConversationId: "probe", ScheduleId: "probe", Next: timestamppb.New(time.Unix(1, 0))})
		<-rebuilt
		start := time.Now().Add(time.Second + time.Duration(n)*time.Second/50_000)
		due = make(map[string]time.Time, n)
		for i := range n {
			due[fmt.Sprintf("sch_near%024d", i)] = start.Add(time.Duration(i) * time.Second / expiryRate)
		}
		for id, at := range due {
			sys.Root.Send(pid, &messages.ScheduleArm{ConversationId: "near", ScheduleId: id, Next: timestamppb.New(at)})
		}
		if time.Now().After(start) {
			b.Fatalf("setup overran the first occurrence by %v", time.Since(start))
		}
		b.ReportAllocs()
		b.ResetTimer()
		select {
		case <-done:
		case <-time.After(time.Until(start) + time.Duration(n)*time.Second/expiryRate + wait):
			b.Fatalf("%d of %d occurrences handed over", fired.Load(), n)
		}
		b.StopTimer()
		var worst time.Duration
		for _, d := range late {
			worst = max(worst, d)
		}
		if n > 1 {
			span := time.Duration(n-1) * time.Second / expiryRate
			b.ReportMetric(float64(n)/(span+late[n-1]).Seconds(), "fires/s")
		}
		reportQuantiles(b, late)
		b.ReportMetric(float64(worst)/float64(time.Millisecond), "max-ms")
	})
}

// putSchedulesFar writes n hourly schedules, an hour or more ahead, 100
// per conversation, with PutSchedule (one synced write each) from 64
// goroutines.
func putSchedulesFar(b *testing.B, store journal.Store, n int) {
	b.Helper()
	ss := store.(journal.ScheduleStore)
	ctx := context.Background()
	const perConv = 100
	convs := (n + perConv - 1) / perConv
	var reqs []*messages.AppendRequest
	for c := range convs {
		reqs = append(reqs, &messages.AppendRequest{ConversationId: fmt.Sprintf("sfar%05d", c), Events: []*messages.Event{{
			Body: &messages.Event_UserMsg{UserMsg: &messages.UserMessage{Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: "hi"}}}}}}}})
	}
	for i := 0; i < len(reqs); i += 256 {
		for _, r := range store.AppendBatch(ctx, reqs[i:min(i+256, len(reqs))]) {
			if r.Err != nil {
				b.Fatal(r.Err)
			}
		}
	}
	base := time.Now().Add(time.Hour)
	payload := &messages.UserMessage{Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: "check the deploy"}}}}
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	const workers = 64
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				err := ss.PutSchedule(ctx, &messages.Schedule{Id: fmt.Sprintf("sch_far%025d", i), ConversationId: fmt.Sprintf("sfar%05d", i/perConv),
					Next: timestamppb.New(base.Add(time.Duration(i) * time.Millisecond)), Every: durationpb.New(time.Hour), Payload: payload})
				if err != nil {
					failed.Store(&err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		b.Fatal(*err)
	}
}

// cpuTime returns the user and system CPU time the process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
