package supervisor

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/messages"
)

// TestKillHoldsBackActivationsUntilThenReturns: Kill calls then once the
// actor has terminated and before any successor can be created: a caller
// would wait (no activation can be claimed), and a delivery of the
// supervisor's own is held back; both reach a successor once Kill has
// returned. Without a live actor, then is not called.
func TestKillHoldsBackActivationsUntilThenReturns(t *testing.T) {
	s := startForTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := s.Ask(ctx, "c", &actors.Command{Msg: &messages.AgentWake{}})
	require.NoError(t, err)
	require.True(t, s.IsActive("c"))

	asked := make(chan error, 1)
	ran := false
	require.True(t, s.Kill("c", func() {
		ran = true
		require.False(t, s.IsActive("c"), "the actor has terminated")
		a, mine, wait := s.reg.claim("c")
		require.Nil(t, a)
		require.False(t, mine)
		require.NotNil(t, wait, "a caller waits for the kill")
		s.system.Root.Send(s.pid, &rewake{conversation: "c"})
		go func() {
			_, err := s.Ask(ctx, "c", &actors.Command{Msg: &messages.AgentWake{}})
			asked <- err
		}()
	}))
	require.True(t, ran)
	require.NoError(t, <-asked, "a caller that came during the kill is served after it")
	require.True(t, s.IsActive("c"))
	// The held-back delivery goes out once the supervisor actor handles
	// Kill's unblocked, which the caller's activation need not wait for.
	// The actor handles its mailbox in order: once a later delivery to
	// another conversation has gone out, that one has too, and cannot
	// revive c after the kill below.
	s.system.Root.Send(s.pid, &rewake{conversation: "b"})
	require.Eventually(t, func() bool { return s.IsActive("b") }, 5*time.Second, time.Millisecond)

	require.True(t, s.Kill("c", nil))
	require.False(t, s.Kill("c", func() { t.Error("then called without a live actor") }))
	require.False(t, s.Kill("d", func() { t.Error("then called for a conversation never activated") }))
	s.system.Root.Send(s.pid, &rewake{conversation: "c"})
	require.Eventually(t, func() bool { return s.IsActive("c") }, 5*time.Second, time.Millisecond,
		"the id is not held once Kill has returned")
}
