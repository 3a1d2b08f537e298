package actors_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/actors"
)

// TestToolGateWaiterGivesUpWhenCancelled: a run of a tool call waiting for
// the gate whose activation stops (its context cancelled) leaves without
// entering, and so runs nothing; the gate then admits the next run of that
// call once the one in flight has left. Other calls, of the conversation
// or of others, never wait for it.
func TestToolGateWaiterGivesUpWhenCancelled(t *testing.T) {
	var g actors.ToolGate
	leave, err := actors.EnterToolForTesting(&g, context.Background(), "ab", "c")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	gaveUp := make(chan error, 1)
	go func() {
		_, err := actors.EnterToolForTesting(&g, ctx, "ab", "c")
		gaveUp <- err
	}()
	require.Eventually(t, func() bool { return g.WaitingForTesting("ab", "c") == 1 }, 10*time.Second, time.Millisecond)
	cancel()
	require.ErrorIs(t, <-gaveUp, context.Canceled)
	require.Zero(t, g.WaitingForTesting("ab", "c"))

	_, err = actors.EnterToolForTesting(&g, ctx, "ab", "c")
	require.ErrorIs(t, err, context.Canceled, "a cancelled run never enters, even when the gate is free")
	admitted := make(chan func(), 1)
	go func() {
		leave2, err := actors.EnterToolForTesting(&g, context.Background(), "ab", "c")
		if err == nil {
			admitted <- leave2
		}
	}()
	require.Eventually(t, func() bool { return g.WaitingForTesting("ab", "c") == 1 }, 10*time.Second, time.Millisecond)
	for _, other := range [][2]string{{"ab", "d"}, {"x", "c"}, {"a", "bc"}, {"abc", ""}} {
		l, err := actors.EnterToolForTesting(&g, context.Background(), other[0], other[1])
		require.NoError(t, err, "call %q of conversation %q does not wait", other[1], other[0])
		l()
	}
	leave()
	select {
	case leave2 := <-admitted:
		leave2()
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting run was not admitted once the run in flight left")
	}
	require.Zero(t, g.WaitingForTesting("ab", "c"))
}
