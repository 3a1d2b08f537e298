package supervisor

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/snapshot"
)

// TestModelCallOfAKilledActivationDelaysItsSuccessor: a killed activation's
// model call that is still winding down (its context cancelled, Generate
// not yet returned) holds back the successor's call of the same
// conversation, which starts once it has returned: the activations share
// the supervisor's gate.
func TestModelCallOfAKilledActivationDelaysItsSuccessor(t *testing.T) {
	entered, release := make(chan int64, 4), make(chan struct{})
	var calls atomic.Int64
	model := agent.ModelFunc(func(ctx context.Context, _ agent.Turn, _ func(string)) (*messages.AssistantMessage, error) {
		n := calls.Add(1)
		entered <- n
		if n == 1 {
			<-ctx.Done()
			<-release // returns only when the test says so
			return nil, ctx.Err()
		}
		return &messages.AssistantMessage{Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: "ok"}}}}, nil
	})
	s := startWith(t, func(string) actors.ConversationConfig { return actors.ConversationConfig{Model: model} })
	letGo := sync.OnceFunc(func() { close(release) })
	defer letGo() // before Stop, which waits for the call, runs at cleanup
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := s.Ask(ctx, "c", sendCmd("hello"))
	require.NoError(t, err)
	require.Nil(t, res.(*messages.AgentSendReply).GetError())
	require.Equal(t, int64(1), <-entered)

	require.True(t, s.Kill("c", nil))
	res, err = s.Ask(ctx, "c", &actors.Command{Scope: agent.SystemScope, Msg: &messages.AgentWake{}})
	require.NoError(t, err)
	require.Nil(t, res.(*messages.AgentReply).GetError())
	// The revived activation owes the turn: its call either waits for the
	// gate or (the bug) enters Generate beside the killed one's.
	require.Eventually(t, func() bool { return s.models.WaitingForTesting("c") == 1 || len(entered) > 0 },
		10*time.Second, time.Millisecond)
	select {
	case n := <-entered:
		t.Fatalf("call %d started while the killed activation's call was still running", n)
	default:
	}
	letGo()
	select {
	case n := <-entered:
		require.Equal(t, int64(2), n, "the successor's call starts once the killed one returned")
	case <-ctx.Done():
		t.Fatal("the successor's call never started")
	}
}

// TestSummaryModelCallDoesNotOverlapATurns: an LLM summarizer given the
// conversation's own model calls Generate through the same gate as the
// turns, so a turn's call waits while the summary's is under way (it ran
// beside it: agent.Model promises no two calls at once for one
// conversation).
func TestSummaryModelCallDoesNotOverlapATurns(t *testing.T) {
	const prompt = "SUMMARIZE"
	release := make(chan struct{})
	summarizing := make(chan struct{}, 1)
	var inFlight atomic.Int64
	var overlap atomic.Bool
	model := agent.ModelFunc(func(ctx context.Context, turn agent.Turn, _ func(string)) (*messages.AssistantMessage, error) {
		if inFlight.Add(1) > 1 {
			overlap.Store(true)
		}
		defer inFlight.Add(-1)
		last := turn.Context[len(turn.Context)-1].GetUserMsg().GetContent()
		if len(last) > 0 && strings.HasPrefix(last[0].GetText(), prompt) {
			select {
			case summarizing <- struct{}{}:
			default:
			}
			select {
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return &messages.AssistantMessage{Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: "summary"}}}}, nil
		}
		return &messages.AssistantMessage{Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: "ok"}}}}, nil
	})
	s := startWith(t, func(string) actors.ConversationConfig {
		return actors.ConversationConfig{Model: model, Summarizer: snapshot.LLM{Model: model, Prompt: prompt},
			Policy: snapshot.Policy{MaxEvents: 2, KeepRecent: -1}}
	})
	letGo := sync.OnceFunc(func() { close(release) })
	defer letGo()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	send := func(text string) {
		res, err := s.Ask(ctx, "c", sendCmd(text))
		require.NoError(t, err)
		require.Nil(t, res.(*messages.AgentSendReply).GetError())
	}
	send("a")
	send("b") // the third rendered event: a summary is due
	select {
	case <-summarizing:
	case <-ctx.Done():
		t.Fatal("no summary started")
	}
	send("c") // its turn waits for the summary's call, or (the bug) runs beside it
	require.Eventually(t, func() bool { return s.models.WaitingForTesting("c") == 1 || overlap.Load() },
		10*time.Second, time.Millisecond)
	require.False(t, overlap.Load(), "a turn's model call ran while the summary's was under way")
	letGo()
	require.Eventually(t, func() bool {
		sum, err := s.cfg.Store.LatestSummary(ctx, "c")
		return err == nil && sum.GetContent() == "summary"
	}, 10*time.Second, time.Millisecond)
	require.False(t, overlap.Load())
}
