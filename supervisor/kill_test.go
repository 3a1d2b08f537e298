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

// TestKilledActivationsRewakeIsDropped: a re-wake a killed activation asked
// for (its write lost a race, or its outcome is unknown, as the kill came)
// does not revive the conversation; one of a live activation's, or one the
// supervisor sends of its own, does.
func TestKilledActivationsRewakeIsDropped(t *testing.T) {
	s := startForTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := s.Ask(ctx, "c", &actors.Command{Msg: &messages.AgentWake{}})
	require.NoError(t, err)
	a := s.reg.lookup("c")
	require.NotNil(t, a)
	require.True(t, s.Kill("c", nil))
	s.system.Root.Send(s.pid, &rewake{conversation: "c", unknown: true, from: a})
	s.system.Root.Send(s.pid, &rewake{conversation: "c", from: a})
	// The actor handles its mailbox in order: once a later delivery to
	// another conversation has gone out, c's re-wakes have been handled.
	s.system.Root.Send(s.pid, &rewake{conversation: "b"})
	require.Eventually(t, func() bool { return s.IsActive("b") }, 5*time.Second, time.Millisecond)
	require.False(t, s.IsActive("c"), "the killed activation's re-wakes revived nothing")

	b := s.reg.lookup("b")
	require.NotNil(t, b)
	require.True(t, s.Kill("b", nil))
	s.system.Root.Send(s.pid, &rewake{conversation: "c"})
	require.Eventually(t, func() bool { return s.IsActive("c") }, 5*time.Second, time.Millisecond,
		"a re-wake of the supervisor's own still goes out")
	c := s.reg.lookup("c")
	require.NotNil(t, c)
	s.system.Root.Send(s.pid, &rewake{conversation: "b", unknown: true, committed: true, from: c})
	require.Eventually(t, func() bool { return s.IsActive("b") }, 5*time.Second, time.Millisecond,
		"a live activation's re-wake (of another id here) goes out")
}
