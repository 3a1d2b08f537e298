package lazarus_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	lazarus "github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/actors/actorstest"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/messages"
)

// TestDeadlineAndIdleTimeoutAtTheSameInstant: a human call's deadline and
// its conversation's idle timeout fall due in the same clock step, so the
// activation passivates while the expiry is written and delivered. Every
// call expires, and every conversation runs the turn the expiry owes (a
// delivery that meets the passivating activation reaches its successor).
func TestDeadlineAndIdleTimeoutAtTheSameInstant(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	clock := actorstest.NewManualClock(time.Unix(1_700_000_000, 0))
	model := scripted.New(scripted.Options{})
	rt, err := lazarus.Open(lazarus.Options{Clock: clock, Model: model, IdleTimeout: time.Minute,
		Tools: []agent.Tool{{Name: "ask", Executor: messages.Executor_EXECUTOR_HUMAN, Timeout: time.Minute}}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = rt.Close() })

	const n = 20
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		conv := fmt.Sprintf("c%d", i)
		model.Push(conv, scripted.Reply("asking", scripted.Call("ask", `{}`)), scripted.Text("done"))
		wg.Go(func() {
			end, err := rt.SendAndWait(ctx, conv, "hi", agent.Scope{UserID: "u"})
			if err == nil && len(end.Pending) == 1 {
				ids[i] = end.Pending[0].GetToolCallId()
			}
		})
	}
	wg.Wait()
	for i, id := range ids {
		require.NotEmpty(t, id, "conversation c%d suspended on its call", i)
	}
	// Each conversation's idle timer and each call's deadline, all at the
	// same instant (the expiry actor arms one timer for its earliest).
	due := clock.Now().Add(time.Minute)
	require.Eventually(t, func() bool {
		at := 0
		for _, d := range clock.Dues() {
			if d.Equal(due) {
				at++
			}
		}
		return at == n+1
	}, 20*time.Second, time.Millisecond, "idle timers and the expiry timer armed")
	clock.Advance(time.Minute)

	for i, id := range ids {
		conv := fmt.Sprintf("c%d", i)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			clock.Advance(0) // what the step above armed for its own instant
			row, err := rt.Store().ToolCall(ctx, id)
			require.NoError(c, err)
			require.Equal(c, messages.ToolCallStatus_TOOL_CALL_STATUS_EXPIRED, row.GetStatus())
			evs, err := rt.History(ctx, conv, 0, 0)
			require.NoError(c, err)
			last := evs[len(evs)-1].GetAssistantMsg()
			assert.True(c, last != nil && len(last.GetToolCalls()) == 0, "the last event is an answer with no tool calls")
		}, 20*time.Second, time.Millisecond, "%s: the call expired and the turn after it ran", conv)
	}
}
