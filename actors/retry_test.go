package actors_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

func TestRetryPolicyDefaults(t *testing.T) {
	p := actors.RetryPolicy{}.WithDefaults()
	require.Equal(t, actors.DefaultRetryInitialInterval, p.InitialInterval)
	require.Equal(t, actors.DefaultRetryBackoffCoefficient, p.BackoffCoefficient)
	require.Equal(t, actors.DefaultRetryMaximumInterval, p.MaximumInterval)
	require.Equal(t, actors.DefaultRetryMaximumAttempts, p.MaximumAttempts)
	require.NotNil(t, p.Retryable)
	require.Equal(t, 1, actors.RetryPolicy{MaximumAttempts: -1}.WithDefaults().MaximumAttempts, "negative never retries")
	require.Equal(t, 2*time.Minute, actors.RetryPolicy{InitialInterval: 2 * time.Minute}.WithDefaults().MaximumInterval,
		"the cap is never below the first wait")
}

func TestRetryPolicyDelay(t *testing.T) {
	p := actors.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 3, MaximumInterval: 10 * time.Second}.WithDefaults()
	var got []time.Duration
	for attempt := 1; attempt <= 4; attempt++ {
		got = append(got, p.Delay(attempt))
	}
	require.Equal(t, []time.Duration{time.Second, 3 * time.Second, 9 * time.Second, 10 * time.Second}, got)
	require.Equal(t, 10*time.Second, p.Delay(10000), "no overflow")
}

func TestRetryableErrors(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("provider: %w", err) }
	for _, err := range []error{agent.ErrRateLimited, agent.ErrUnavailable, agent.ErrInterrupted, agent.ErrIncomplete, agent.ErrMalformed, context.DeadlineExceeded} {
		require.True(t, actors.DefaultRetryable(wrap(err)), "%v", err)
		require.False(t, actors.Permanent(wrap(err)), "%v", err)
	}
	for _, err := range []error{agent.ErrPanicked, agent.ErrContextLength, agent.ErrRefused, agent.ErrRequest, actors.ErrInvalidToolCalls} {
		require.False(t, actors.DefaultRetryable(wrap(err)), "%v", err)
		require.True(t, actors.Permanent(wrap(err)), "%v", err)
	}
	for _, err := range []error{errors.New("my model broke"), journal.ErrInvalid, context.Canceled} {
		require.False(t, actors.DefaultRetryable(err), "%v", err)
	}
}

// A failure's code maps back to its sentinel, so errors.Is works on the
// TurnError a turn_failed event gives.
func TestTurnErrorFromTheLog(t *testing.T) {
	for _, s := range []error{agent.ErrRateLimited, agent.ErrUnavailable, agent.ErrInterrupted, agent.ErrMalformed, agent.ErrIncomplete,
		agent.ErrContextLength, agent.ErrRefused, agent.ErrRequest, agent.ErrPanicked, context.DeadlineExceeded, journal.ErrInvalid, actors.ErrInvalidToolCalls} {
		code := actors.TurnFailureCode(fmt.Errorf("x: %w", s))
		require.NotEqual(t, actors.CodeModel, code, "%v", s)
		ev := &messages.Event{Seq: 3, Body: &messages.Event_TurnFailed{TurnFailed: &messages.TurnFailed{Message: "x", Code: code, Attempts: 2}}}
		end := actors.TurnEndOf(ev)
		require.Equal(t, actors.TurnFailed, end.Outcome)
		require.Equal(t, uint64(3), end.Seq)
		require.ErrorIs(t, end.Err, s, code)
	}
	require.Equal(t, actors.CodeModel, actors.TurnFailureCode(errors.New("other")))
	var te *actors.TurnError
	require.ErrorAs(t, actors.TurnEndOf(&messages.Event{Body: &messages.Event_TurnFailed{TurnFailed: &messages.TurnFailed{Code: "from a newer build"}}}).Err, &te)
	require.Nil(t, te.Unwrap(), "an unknown code unwraps to nothing")
}
