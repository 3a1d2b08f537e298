package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/snapshot"
)

// turnConversations is how many conversations run turns concurrently in
// BenchmarkTurns.
const turnConversations = 1000

// BenchmarkTurns measures end-to-end turns through the Runtime on
// pebblejournal: 1,000 conversations, each sending a user message (~400 B)
// and waiting, on a subscription, for the durable final assistant message,
// then sending the next. An op is one turn.
//
//   - kind=answer: the model answers with ~800 B of text (2 events).
//   - kind=tool: the model calls a server tool (~2 KB result), then
//     answers (5 events: the turn of cmd/loadgen).
//
// The conversations are activated before the timer starts. It reports
// turns/s and events/s.
func BenchmarkTurns(b *testing.B) {
	for _, kind := range []struct {
		name   string
		prefix string
		events int
	}{{"answer", "hello", 2}, {"tool", "search", turnEvents}} {
		b.Run(fmt.Sprintf("conversations=%d/kind=%s", turnConversations, kind.name), func(b *testing.B) {
			rt := openRuntime(b, openStore(b), nil)
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			var budget atomic.Int64
			budget.Store(int64(b.N))
			var wg sync.WaitGroup
			start := make(chan struct{})
			var ready sync.WaitGroup
			ready.Add(turnConversations)
			for i := range turnConversations {
				conv := fmt.Sprintf("c%04d", i)
				wg.Go(func() {
					defer func() {
						if r := recover(); r != nil {
							b.Error(r)
						}
					}()
					rng := rand.New(rand.NewPCG(uint64(i), 1))
					if err := rt.Wake(ctx, conv); err != nil {
						b.Error(err)
					}
					sub, err := rt.Subscribe(ctx, conv, 0)
					ready.Done()
					if err != nil {
						b.Error(err)
						return
					}
					<-start
					for budget.Add(-1) >= 0 {
						msg := &messages.UserMessage{Content: textParts(kind.prefix + " " + textLike(rng, userBytes-len(kind.prefix)-1))}
						if _, err := rt.SendMessage(ctx, conv, msg, lazarus.SendOptions{}, user); err != nil {
							b.Error(err)
							return
						}
						awaitAnswer(b, sub)
					}
				})
			}
			ready.Wait()
			b.ReportAllocs()
			b.ResetTimer()
			t0 := time.Now()
			close(start)
			wg.Wait()
			elapsed := time.Since(t0)
			b.StopTimer()
			reportRate(b, b.N, elapsed, "turns/s")
			reportRate(b, b.N*kind.events, elapsed, "events/s")
		})
	}
}

// Revival benchmark conversations: complete turns of 5 events, a summary
// revivalRecent events before the end.
const (
	longTurns     = 20_000 // 100,000 events
	shortTurns    = 20     // 100 events
	revivalRecent = 20
)

// BenchmarkRevival measures revival on pebblejournal. Two conversations
// are filled directly in the Store: one of 100,000 events and one of 100,
// each with a summary 20 events before its end. An op is:
//
//   - warm/events=100: a Send to a live actor (the durable user message);
//   - kill/events=N: Kill the conversation's actor, then Send: the revival
//     (LoadSince from the summary, rebuild, reconcile) and the durable
//     user message. Only the Send is timed; the turn it starts is awaited
//     untimed, so each op starts from an idle actor. The Runtime
//     summarizes every 10 turns (snapshot.Deterministic), so the events
//     after the summary stay few, as in production;
//   - replay/events=100000: the naive revival, as a Store read: every event
//     from seq 1, and the working set rebuilt from them (no summary);
//   - loadsince/events=100000: the same read with LoadSince (the summary
//     and the events after it).
//
// Each reports p50-ms and p99-ms besides ns/op.
func BenchmarkRevival(b *testing.B) {
	store := openStore(b)
	fill(b, store, "long", longTurns, revivalRecent)
	fill(b, store, "short", shortTurns, revivalRecent)
	rt := openRuntime(b, store, func(o *lazarus.Options) {
		o.IdleTimeout = -1
		o.Summary = snapshot.Policy{MaxEvents: 40, MaxTokens: -1, KeepRecent: 4}
		o.Summarizer = snapshot.Deterministic{}
	})
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		conv string
		kill bool
	}{
		{"warm/events=100", "short", false},
		{"kill/events=100", "short", true},
		{fmt.Sprintf("kill/events=%d", longTurns*turnEvents), "long", true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			if err := rt.Wake(ctx, tc.conv); err != nil {
				b.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(3, 4))
			var times []time.Duration
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				sub, cancel := subscribeTail(b, rt, tc.conv)
				if tc.kill && !rt.Kill(tc.conv) {
					b.Fatal("no live actor to kill")
				}
				msg := userMessage(rng, userBytes)
				b.StartTimer()
				t0 := time.Now()
				if _, err := rt.SendMessage(ctx, tc.conv, msg, lazarus.SendOptions{}, user); err != nil {
					b.Fatal(err)
				}
				times = append(times, time.Since(t0))
				b.StopTimer()
				awaitAnswer(b, sub)
				cancel()
				b.StartTimer()
			}
			b.StopTimer()
			reportQuantiles(b, times)
		})
	}
	b.Run(fmt.Sprintf("replay/events=%d", longTurns*turnEvents), func(b *testing.B) {
		var times []time.Duration
		b.ReportAllocs()
		for b.Loop() {
			t0 := time.Now()
			evs, err := store.Events(ctx, "long", journal.EventQuery{})
			if err == nil {
				_, err = snapshot.Rebuild(nil, evs)
			}
			if err != nil {
				b.Fatal(err)
			}
			times = append(times, time.Since(t0))
		}
		reportQuantiles(b, times)
	})
	b.Run(fmt.Sprintf("loadsince/events=%d", longTurns*turnEvents), func(b *testing.B) {
		var times []time.Duration
		b.ReportAllocs()
		for b.Loop() {
			t0 := time.Now()
			sum, evs, err := store.LoadSince(ctx, "long")
			if err == nil {
				_, err = snapshot.Rebuild(sum, evs)
			}
			if err != nil {
				b.Fatal(err)
			}
			times = append(times, time.Since(t0))
		}
		reportQuantiles(b, times)
	})
}

// subscribeTail subscribes to conv after its last event.
func subscribeTail(b *testing.B, rt *lazarus.Runtime, conv string) (<-chan actors.Update, context.CancelFunc) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	evs, err := rt.History(ctx, conv, 0, 1)
	if err != nil || len(evs) != 1 {
		b.Fatalf("history of %s: %d events, %v", conv, len(evs), err)
	}
	sub, err := rt.Subscribe(ctx, conv, evs[0].GetSeq())
	if err != nil {
		b.Fatal(err)
	}
	return sub, cancel
}

// reportQuantiles reports the median and 99th percentile of times.
func reportQuantiles(b *testing.B, times []time.Duration) {
	if len(times) == 0 {
		return
	}
	slices.Sort(times)
	q := func(p float64) float64 {
		i := min(int(p*float64(len(times))), len(times)-1)
		return float64(times[i]) / float64(time.Millisecond)
	}
	b.ReportMetric(q(0.50), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
}
