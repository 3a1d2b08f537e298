package supervisor

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/messages"
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
