package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/snapshot"
)

// summaryModelName is the name the benchmark's summarizing model answers
// with; the summaries it writes record it (snapshot.SummaryModel).
const summaryModelName = "bench-summarizer"

// minLLMTurns is the fewest turns LAZARUS_BENCH_LLM_TURNS may ask for. A
// turn is ~4.3 KB, about 1,100 estimated tokens, and
// snapshot.TokenBudget(snapshot.DefaultMaxTokens) summarizes once the events
// since the last summary pass 32,000 of them: the first summary comes
// between 30 and 40 turns (a 30-turn fill has none, so the benchmark's check
// that the latest summary is the model's fails). 100 turns give three
// summaries, well clear of that edge.
const minLLMTurns = 100

// errLLMTurns is the error of a LAZARUS_BENCH_LLM_TURNS that is not a
// number of turns the benchmark can run.
var errLLMTurns = errors.New("LAZARUS_BENCH_LLM_TURNS: not a usable number of turns")

// parseLLMTurns reads LAZARUS_BENCH_LLM_TURNS: empty is the default, 20,000
// turns (100,000 events); otherwise a number >= minLLMTurns, or an error
// wrapping errLLMTurns.
func parseLLMTurns(s string) (int, error) {
	if s == "" {
		return longTurns, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < minLLMTurns {
		return 0, fmt.Errorf("%w: %q, want a number >= %d (with fewer, the long conversation may never pass the token budget and so have no summary)", errLLMTurns, s, minLLMTurns)
	}
	return n, nil
}

// llmTurns returns the turns of the long conversation of
// BenchmarkRevivalLLMSummary (parseLLMTurns of LAZARUS_BENCH_LLM_TURNS).
func llmTurns(b *testing.B) int {
	n, err := parseLLMTurns(os.Getenv("LAZARUS_BENCH_LLM_TURNS"))
	if err != nil {
		b.Fatal(err)
	}
	return n
}

// BenchmarkRevivalLLMSummary measures what the LLM summarizer under the
// token-budget policy does to revival, with no hand-written Summarizer:
// the Runtime runs snapshot.LLM over a model (an agent.Model that answers
// every summary request with ~1 KB of text, as a real one answers a
// summarization prompt) and snapshot.TokenBudget(snapshot.DefaultMaxTokens).
//
// Every event is written by the runtime's turns (the workload's 5-event
// server-call turn, ~4.3 KB), and every summary by the runtime's own
// summary path (the policy, the LLM summarizer, PutSummary), untimed: the
// long conversation gets 20,000 turns (100,000 events;
// LAZARUS_BENCH_LLM_TURNS sets the turns), and each op a fresh
// conversation of 20 turns (100 events, under the budget: no summary). The
// fill checks the events' count and that the long conversation's latest
// summary was written by the summarizing model.
//
// An op revives its 100-event conversation and the long one, in
// alternating order: Kill the conversation's actor, then Send (the
// revival: LoadSince from the latest summary if any, rebuild, reconcile;
// and the durable user message). Only the Send is timed; the turn it
// starts (which may summarize the long one again) is awaited untimed. It
// reports the p50 and p99 of each, in ms, and long/short-p50, the ratio of
// the medians measured in the same run; the fill's time and summaries; and,
// from one LoadSince of each after the ops, the events a revival of each
// reads after its summary.
func BenchmarkRevivalLLMSummary(b *testing.B) {
	long := llmTurns(b)
	var summaries atomic.Int64
	writer := agent.ModelFunc(func(ctx context.Context, turn agent.Turn, _ func(string)) (*messages.AssistantMessage, error) {
		summaries.Add(1)
		rng := rand.New(rand.NewPCG(rand.Uint64(), 0))
		return &messages.AssistantMessage{Model: summaryModelName, Content: textParts(textLike(rng, 1024))}, ctx.Err()
	})
	store := openStore(b)
	rt := openRuntime(b, store, func(o *lazarus.Options) {
		o.IdleTimeout = -1
		o.Summary = snapshot.TokenBudget(snapshot.DefaultMaxTokens)
		o.Summarizer = snapshot.LLM{Model: writer}
	})
	ctx := context.Background()

	t0 := time.Now()
	runTurns(b, rt, "long", long)
	if b.Failed() {
		return
	}
	sum, err := store.LatestSummary(ctx, "long")
	if err != nil || sum == nil {
		b.Fatalf("long conversation: no summary after %d turns (%v)", long, err)
	}
	if m := snapshot.SummaryModel(sum); m != summaryModelName {
		b.Fatalf("long conversation: latest summary written by %q (version %q), want %q", m, sum.GetVersion(), summaryModelName)
	}
	fillTime, fillSummaries := time.Since(t0), summaries.Load()
	if n := lastSeq(b, rt, "long"); n != uint64(long*turnEvents) {
		b.Fatalf("long conversation: %d events, want %d", n, long*turnEvents)
	}
	b.Logf("fill: %d turns (%d events) through the Runtime in %v, %d summaries written by the model, the latest to seq %d",
		long, long*turnEvents, fillTime.Round(time.Second), fillSummaries, sum.GetToSeq())

	runs := 0
	b.Run("kill", func(b *testing.B) {
		// A fresh 100-event conversation per op, so that each is revived
		// at 100 events; the long one grows by a turn per op.
		runs++
		shorts := make([]string, b.N)
		for i := range shorts {
			shorts[i] = fmt.Sprintf("short-%d-%d", runs, i)
		}
		runConcurrently(b, rt, shorts, shortTurns)
		for _, conv := range shorts {
			if n := lastSeq(b, rt, conv); n != shortTurns*turnEvents {
				b.Fatalf("%s: %d events, want %d", conv, n, shortTurns*turnEvents)
			}
		}
		var times [2][]time.Duration
		rng := rand.New(rand.NewPCG(5, 6))
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			convs := [2]string{shorts[i], "long"}
			for j := range 2 {
				k := (i + j) % 2 // alternate which of the two goes first
				b.StopTimer()
				sub, cancel := subscribeTail(b, rt, convs[k])
				if !rt.Kill(convs[k]) {
					b.Fatalf("%s: no live actor to kill", convs[k])
				}
				msg := &messages.UserMessage{Content: textParts("search " + textLike(rng, userBytes-7))}
				b.StartTimer()
				t := time.Now()
				if _, err := rt.SendMessage(ctx, convs[k], msg, lazarus.SendOptions{}, user); err != nil {
					b.Fatal(err)
				}
				times[k] = append(times[k], time.Since(t))
				b.StopTimer()
				awaitAnswer(b, sub)
				cancel()
				b.StartTimer()
			}
		}
		b.StopTimer()
		p50 := func(ts []time.Duration) float64 {
			s := slices.Clone(ts)
			slices.Sort(s)
			return float64(s[len(s)/2]) / float64(time.Millisecond)
		}
		p99 := func(ts []time.Duration) float64 {
			s := slices.Clone(ts)
			slices.Sort(s)
			return float64(s[min(len(s)*99/100, len(s)-1)]) / float64(time.Millisecond)
		}
		b.ReportMetric(p50(times[1]), "long-p50-ms")
		b.ReportMetric(p99(times[1]), "long-p99-ms")
		b.ReportMetric(p50(times[0]), "short-p50-ms")
		b.ReportMetric(p99(times[0]), "short-p99-ms")
		b.ReportMetric(p50(times[1])/p50(times[0]), "long/short-p50")
		b.ReportMetric(float64(long*turnEvents), "long-events-filled")
		b.ReportMetric(float64(fillSummaries), "fill-summaries")
		b.ReportMetric(fillTime.Seconds(), "fill-s")
		for name, conv := range map[string]string{"short": shorts[0], "long": "long"} {
			_, evs, err := store.LoadSince(ctx, conv)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(len(evs)), name+"-events-read")
		}
	})
}

// runTurns drives turns server-call turns of conv through rt, one at a
// time: a user message, then the durable final answer awaited.
func runTurns(b *testing.B, rt *lazarus.Runtime, conv string, turns int) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	sub, err := rt.Subscribe(ctx, conv, 0)
	if err != nil {
		b.Error(err)
		return
	}
	rng := rand.New(rand.NewPCG(uint64(len(conv)), uint64(turns)))
	for i := range turns {
		msg := &messages.UserMessage{Content: textParts("search " + textLike(rng, userBytes-7))}
		if _, err := rt.SendMessage(ctx, conv, msg, lazarus.SendOptions{}, user); err != nil {
			b.Errorf("%s turn %d: %v", conv, i, err)
			return
		}
		awaitAnswer(b, sub)
		if b.Failed() {
			return
		}
	}
}

// runConcurrently drives turns turns of each of convs through rt, 32
// conversations at a time.
func runConcurrently(b *testing.B, rt *lazarus.Runtime, convs []string, turns int) {
	next := make(chan string)
	var wg sync.WaitGroup
	for range min(32, len(convs)) {
		wg.Go(func() {
			for conv := range next {
				runTurns(b, rt, conv, turns)
			}
		})
	}
	for _, conv := range convs {
		next <- conv
	}
	close(next)
	wg.Wait()
}

// lastSeq returns the seq of conv's newest event.
func lastSeq(b *testing.B, rt *lazarus.Runtime, conv string) uint64 {
	evs, err := rt.History(context.Background(), conv, 0, 1)
	if err != nil || len(evs) != 1 {
		b.Fatalf("history of %s: %d events, %v", conv, len(evs), err)
	}
	return evs[0].GetSeq()
}
