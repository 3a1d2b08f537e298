package supervisor

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/messages"
)

// TestDeleteHoldsBackActivations: while Delete's write runs, the
// conversation's actor is gone and no activation can be claimed (a caller
// would wait); a delivery the supervisor actor got meanwhile goes out once
// Delete returns.
func TestDeleteHoldsBackActivations(t *testing.T) {
	s := startForTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := s.Ask(ctx, "c", &actors.Command{Msg: &messages.AgentWake{}})
	require.NoError(t, err)
	require.True(t, s.IsActive("c"))

	ran := false
	err = s.Delete(ctx, "c", func(context.Context) error {
		ran = true
		require.False(t, s.IsActive("c"), "the actor is stopped before the write")
		a, mine, wait := s.reg.claim("c")
		require.Nil(t, a)
		require.False(t, mine)
		require.NotNil(t, wait, "a caller waits for the delete")
		s.system.Root.Send(s.pid, &rewake{conversation: "c"})
		return nil
	})
	require.NoError(t, err)
	require.True(t, ran)
	require.Eventually(t, func() bool { return s.IsActive("c") }, 5*time.Second, time.Millisecond,
		"the delivery held back during the delete goes out after it")
}

// TestDeleteReturnsTheWriteError: a failed write is Delete's error, and
// the conversation is usable again afterwards.
func TestDeleteReturnsTheWriteError(t *testing.T) {
	s := startForTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	boom := errors.New("boom")
	require.ErrorIs(t, s.Delete(ctx, "c", func(context.Context) error { return boom }), boom)
	_, err := s.Ask(ctx, "c", &actors.Command{Msg: &messages.AgentWake{}})
	require.NoError(t, err)
	s.Stop()
	require.ErrorIs(t, s.Delete(ctx, "c", func(context.Context) error { return nil }), ErrStopped)
}
