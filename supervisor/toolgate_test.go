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
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// TestToolRunOfAKilledActivationDelaysItsSuccessor: a server tool still
// running when its activation is killed (its context cancelled, the tool
// not yet returned: a payment API that does not stop) holds back the
// revived activation's re-dispatch of the same call, under the same
// tool_call_id, which runs once it has returned: the two runs of one id
// never overlap (they did: the re-dispatch ran at once beside the killed
// one). The second run's result is the one recorded, once.
func TestToolRunOfAKilledActivationDelaysItsSuccessor(t *testing.T) {
	type run struct {
		n  int64
		id string
	}
	started, release := make(chan run, 4), make(chan struct{})
	var runs, inFlight, maxInFlight atomic.Int64
	pay := agent.Tool{Name: "pay", Executor: messages.Executor_EXECUTOR_SERVER,
		Run: func(ctx context.Context, inv agent.Invocation) (string, error) {
			n := runs.Add(1)
			cur := inFlight.Add(1)
			defer inFlight.Add(-1)
			for m := maxInFlight.Load(); cur > m && !maxInFlight.CompareAndSwap(m, cur); m = maxInFlight.Load() {
			}
			started <- run{n, inv.ToolCallID}
			if n == 1 {
				<-release // does not honour ctx: returns only when the test says so
			}
			return `"paid"`, nil
		}}
	tools, err := agent.NewRegistry(pay)
	require.NoError(t, err)
	model := agent.ModelFunc(func(_ context.Context, turn agent.Turn, _ func(string)) (*messages.AssistantMessage, error) {
		if turn.Context[len(turn.Context)-1].GetToolResult() != nil {
			return agent.Text("done"), nil
		}
		return agent.Reply("", agent.Call("pay", "{}")), nil
	})
	s := startWith(t, func(string) actors.ConversationConfig {
		return actors.ConversationConfig{Model: model, Tools: tools}
	})
	letGo := sync.OnceFunc(func() { close(release) })
	defer letGo() // before Stop, which waits for the run, runs at cleanup
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := s.Ask(ctx, "c", sendCmd("pay me"))
	require.NoError(t, err)
	require.Nil(t, res.(*messages.AgentSendReply).GetError())
	var first run
	select {
	case first = <-started:
	case <-ctx.Done():
		t.Fatal("the tool never ran")
	}
	require.Equal(t, int64(1), first.n)

	require.True(t, s.Kill("c", nil))
	res, err = s.Ask(ctx, "c", &actors.Command{Scope: agent.SystemScope, Msg: &messages.AgentWake{}})
	require.NoError(t, err)
	require.Nil(t, res.(*messages.AgentReply).GetError())
	// The revived activation dispatches the open call again: its run
	// either waits for the gate or (the bug) enters the tool beside the
	// killed one's.
	require.Eventually(t, func() bool { return s.tools.WaitingForTesting("c", first.id) == 1 || len(started) > 0 },
		10*time.Second, time.Millisecond)
	select {
	case r := <-started:
		t.Fatalf("run %d of %s started while the killed activation's run was still running", r.n, r.id)
	default:
	}
	letGo()
	select {
	case r := <-started:
		require.Equal(t, run{2, first.id}, r, "the successor's run, of the same id, starts once the killed one returned")
	case <-ctx.Done():
		t.Fatal("the successor's run never started")
	}
	require.Eventually(t, func() bool {
		evs, err := s.cfg.Store.Events(ctx, "c", journal.EventQuery{})
		n := len(evs)
		return err == nil && n > 0 && len(evs[n-1].GetAssistantMsg().GetContent()) > 0 && evs[n-1].GetAssistantMsg().GetContent()[0].GetText() == "done"
	}, 10*time.Second, time.Millisecond, "the turn after the tool result is answered")
	evs, err := s.cfg.Store.Events(ctx, "c", journal.EventQuery{})
	require.NoError(t, err)
	var results []*messages.ToolResultEvent
	for _, e := range evs {
		if r := e.GetToolResult(); r != nil {
			results = append(results, r)
		}
	}
	require.Len(t, results, 1)
	require.Equal(t, first.id, results[0].GetToolCallId())
	require.Equal(t, `"paid"`, results[0].GetOutcome().GetContent())
	require.Equal(t, int64(2), runs.Load(), "one run per activation")
	require.Equal(t, int64(1), maxInFlight.Load(), "the runs of one id never overlap")
}
