package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/messages"
)

// forkSource writes conversation id directly in the store: before user
// messages, a summary of them, then after more (the fork copies those).
func forkSource(b *testing.B, rt *lazarus.Runtime, id string, before, after int) {
	b.Helper()
	ctx := context.Background()
	st := rt.Store()
	last := uint64(0)
	for n := before + after; n > 0; {
		k := min(n, 1000)
		evs := make([]*messages.Event, k)
		for i := range evs {
			text := []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: fmt.Sprintf("message %d of a long conversation", int(last)+i+1)}}}
			evs[i] = &messages.Event{Body: &messages.Event_UserMsg{UserMsg: &messages.UserMessage{Content: text}}}
			if (int(last)+i)%2 == 1 { // the log ends in an answer: a fork owes no turn
				evs[i] = &messages.Event{Body: &messages.Event_AssistantMsg{AssistantMsg: &messages.AssistantMessage{Content: text}}}
			}
		}
		res, err := st.Append(ctx, &messages.AppendRequest{ConversationId: id, ExpectedLast: last, Events: evs,
			Status: messages.ConversationStatus_CONVERSATION_STATUS_IDLE})
		if err != nil || res.Err != nil {
			b.Fatal(err, res.Err)
		}
		last, n = res.LastSeq, n-k
	}
	sum := &messages.Summary{FromSeq: 1, ToSeq: uint64(before), Content: "what came before", Version: "bench"}
	if err := st.PutSummary(ctx, id, sum); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkForkCostAfterSummary forks, on pebblejournal, two conversations
// with the same 20 events after their summary and 100 or 100,000 events
// before it, alternately in the same run, and reports the time of a fork
// of each and their ratio: a fork copies the summary and the events after
// it, so the ratio stays near 1. LAZARUS_BENCH_FORK_BEFORE sets the long
// one's length before the summary.
func BenchmarkForkCostAfterSummary(b *testing.B) {
	long := 100_000
	if v := os.Getenv("LAZARUS_BENCH_FORK_BEFORE"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("LAZARUS_BENCH_FORK_BEFORE=%q is not a count", v)
		}
		long = n
	}
	rt := openRuntime(b, openStore(b), nil)
	forkSource(b, rt, "short", 100, 20)
	forkSource(b, rt, "long", long, 20)
	ctx := context.Background()
	var short, lng time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, src := range []string{"short", "long"} {
			start := time.Now()
			at := uint64(120)
			if src == "long" {
				at = uint64(long + 20)
			}
			if err := rt.Fork(ctx, src, at, fmt.Sprintf("%s-%d", src, i)); err != nil {
				b.Fatal(err)
			}
			if src == "short" {
				short += time.Since(start)
			} else {
				lng += time.Since(start)
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(short.Microseconds())/float64(b.N), "short-µs/fork")
	b.ReportMetric(float64(lng.Microseconds())/float64(b.N), "long-µs/fork")
	b.ReportMetric(float64(lng)/float64(short), "long/short")
}
