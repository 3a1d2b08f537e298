package lazarus_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/messages"
)

// TestDocsDefaultRetryRetriesAnAccountOutOfCredit: README "Its default
// retries every ErrRateLimited, OpenAI's insufficient_quota (out of
// credit) included, which the provider itself returns at once: the turn
// fails after 3 calls in all. An application that wants it to fail at once
// sets its own RetryPolicy.Retryable."
func TestDocsDefaultRetryRetriesAnAccountOutOfCredit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	outOfCredit := fmt.Errorf("openai: %w: 429 insufficient_quota", agent.ErrRateLimited)
	for _, tc := range []struct {
		name      string
		retryable func(error) bool
		calls     int64
	}{
		{"default", nil, 3},
		{"own Retryable", func(err error) bool { return !errors.Is(err, agent.ErrRateLimited) }, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int64
			model := agent.ModelFunc(func(context.Context, agent.Turn, func(string)) (*messages.AssistantMessage, error) {
				calls.Add(1)
				return nil, outOfCredit
			})
			// Short waits; the attempts and Retryable are the defaults but
			// where the case sets its own.
			rt, err := lazarus.Open(lazarus.Options{Model: model,
				ModelRetry: lazarus.RetryPolicy{InitialInterval: time.Millisecond, MaximumInterval: time.Millisecond, Retryable: tc.retryable}})
			require.NoError(t, err)
			defer rt.Close()
			_, err = rt.SendAndWait(ctx, "c", "hi", agent.Scope{UserID: "u"})
			require.ErrorIs(t, err, lazarus.ErrTurnFailed)
			require.ErrorIs(t, err, agent.ErrRateLimited)
			require.Equal(t, tc.calls, calls.Load(), "model calls of the turn in all")
		})
	}
}
