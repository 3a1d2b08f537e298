package server_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
)

// TestEditOfATurnInProgressCountsCancelled: an Edit that takes back a
// turn in progress counts it in lazarus_turns_total{outcome="cancelled"},
// once, as a rewind's does (the doc of Metrics names both); the edited
// message's turn then counts as answered, and nothing else is counted.
func TestEditOfATurnInProgressCountsCancelled(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rt, m, model, _ := metricsRuntime(t)
	reg := m.Registry()
	turns := func(c testingT, outcome string) float64 {
		return labeledValue(c, reg, "lazarus_turns_total", "outcome", outcome)
	}
	user := agent.Scope{UserID: "u"}
	held := model.Hold("c")
	_, err := rt.Send(ctx, "c", "slow", user)
	require.NoError(t, err)
	<-held
	model.Push("c", scripted.Text("edited"))
	_, err = rt.Edit(ctx, "c", 1, "fast", user)
	require.NoError(t, err)
	model.Release("c")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.EqualValues(c, 1, turns(c, "answered"))
	}, 10*time.Second, time.Millisecond, "the edited message's turn answers")
	require.EqualValues(t, 1, turns(t, "cancelled"))
	require.Zero(t, turns(t, "suspended"))
	require.Zero(t, turns(t, "failed"))
}
