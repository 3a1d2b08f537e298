package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/actors/actorstest"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// memoryConversations is how many conversations BenchmarkMemory activates.
const memoryConversations = 100_000

// BenchmarkMemory measures what conversation actors cost, on
// pebblejournal: 100,000 conversations of one complete turn each (5 events,
// ~4.3 KB) are written to the Store, then all are activated (Wake: spawn,
// LoadSince, rebuild) and stay active, then all passivate (the idle timer
// fires; a manual clock moves past the idle timeout). An op is that whole
// cycle. It reports, per conversation, the live Go heap and the RSS of an
// active actor (heap-B/active, rss-B/active), and the live heap left per
// conversation once they all passivated and the heap stopped shrinking
// (heap-B/passivated), each against the Runtime before any activation; and
// the total RSS with all active (rss-MB/active).
func BenchmarkMemory(b *testing.B) {
	store := openStore(b)
	fillMany(b, store, memoryConversations)
	clock := actorstest.NewManualClock(time.Now())
	const idle = time.Minute
	rt := openRuntime(b, store, func(o *lazarus.Options) {
		o.Clock = clock
		o.IdleTimeout = idle
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*wait)
	defer cancel()
	var active, activeRSS, passive, totalRSS float64
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		heap0, rss0 := liveHeap(), rss()
		b.StartTimer()
		ids := make(chan string)
		var wg sync.WaitGroup
		for range 64 {
			wg.Go(func() {
				for id := range ids {
					if err := rt.Wake(ctx, id); err != nil {
						b.Error(err)
					}
				}
			})
		}
		for i := range memoryConversations {
			ids <- convName(i)
		}
		close(ids)
		wg.Wait()
		b.StopTimer()
		if n := rt.Active(); n != memoryConversations {
			b.Fatalf("%d active conversations, want %d", n, memoryConversations)
		}
		heap1, rss1 := liveHeap(), rss()
		active = float64(int64(heap1)-int64(heap0)) / memoryConversations
		activeRSS = float64(int64(rss1)-int64(rss0)) / memoryConversations
		totalRSS = float64(rss1) / (1 << 20)
		b.StartTimer()
		clock.Advance(idle + time.Second)
		awaitPassivated(b, rt)
		b.StopTimer()
		passive = float64(int64(settledHeap())-int64(heap0)) / memoryConversations
		b.StartTimer()
	}
	b.ReportMetric(active, "heap-B/active")
	b.ReportMetric(activeRSS, "rss-B/active")
	b.ReportMetric(totalRSS, "rss-MB/active")
	b.ReportMetric(passive, "heap-B/passivated")
}

func convName(i int) string { return fmt.Sprintf("m%06d", i) }

// fillMany writes n conversations of one complete turn each, 1,000
// conversations per commit.
func fillMany(b *testing.B, store journal.Store, n int) {
	b.Helper()
	rng := rand.New(rand.NewPCG(5, 6))
	for i := 0; i < n; i += 1000 {
		var reqs []*messages.AppendRequest
		for j := i; j < min(i+1000, n); j++ {
			evs := turnLog(rng, convName(j), 0, 1)
			reqs = append(reqs, &messages.AppendRequest{ConversationId: convName(j), Events: evs, ToolCalls: callRows(convName(j), evs),
				Status: messages.ConversationStatus_CONVERSATION_STATUS_IDLE})
		}
		for _, r := range store.AppendBatch(context.Background(), reqs) {
			if r.Err != nil {
				b.Fatal(r.Err)
			}
		}
	}
}

// awaitPassivated waits, without sleeping, until no conversation actor is
// live.
func awaitPassivated(b *testing.B, rt *lazarus.Runtime) {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(wait)
	for rt.Active() > 0 {
		select {
		case <-tick.C:
		case <-deadline:
			b.Fatalf("%d conversations still active after %v", rt.Active(), wait)
		}
	}
}

// settledHeap returns the live heap once it stopped shrinking: actors that
// passivated (no longer counted active) may still be stopping.
func settledHeap() uint64 {
	prev := liveHeap()
	for range 50 {
		t := time.NewTimer(200 * time.Millisecond)
		<-t.C
		h := liveHeap()
		if h+prev/200 >= prev {
			return h
		}
		prev = h
	}
	return prev
}
