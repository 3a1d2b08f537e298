package retry_test

import (
	"context"
	"errors"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/agent/retry"
)

var errBusy = errors.New("busy")

func recorder(waits *[]time.Duration) func(context.Context, time.Duration) error {
	return func(ctx context.Context, d time.Duration) error {
		*waits = append(*waits, d)
		return ctx.Err()
	}
}

func TestDo(t *testing.T) {
	cases := []struct {
		name     string
		policy   retry.Policy
		errs     []error // attempt n returns errs[n-1]; past the end, nil
		attempts int
		waits    []time.Duration
		wantErr  bool
	}{
		{name: "success at once", attempts: 1},
		{name: "an unmarked error is not retried", errs: []error{errBusy}, attempts: 1, wantErr: true},
		{name: "backoff doubles", policy: retry.Policy{InitialBackoff: time.Second},
			errs: []error{retry.Retryable(errBusy, 0), retry.Retryable(errBusy, 0), retry.Retryable(errBusy, 0)}, attempts: 4,
			waits: []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}},
		{name: "backoff is capped", policy: retry.Policy{InitialBackoff: time.Second, MaxBackoff: 1500 * time.Millisecond},
			errs: []error{retry.Retryable(errBusy, 0), retry.Retryable(errBusy, 0)}, attempts: 3,
			waits: []time.Duration{time.Second, 1500 * time.Millisecond}},
		{name: "retry-after is honoured", errs: []error{retry.Retryable(errBusy, 7*time.Second)}, attempts: 2,
			waits: []time.Duration{7 * time.Second}},
		{name: "a too long retry-after ends the call", policy: retry.Policy{MaxRetryAfter: time.Second},
			errs: []error{retry.Retryable(errBusy, 2*time.Second)}, attempts: 1, wantErr: true},
		{name: "attempts are bounded", policy: retry.Policy{MaxAttempts: 2, InitialBackoff: time.Second},
			errs: []error{retry.Retryable(errBusy, 0), retry.Retryable(errBusy, 0), nil}, attempts: 2,
			waits: []time.Duration{time.Second}, wantErr: true},
		{name: "one attempt never retries", policy: retry.Policy{MaxAttempts: -1},
			errs: []error{retry.Retryable(errBusy, 0)}, attempts: 1, wantErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var waits []time.Duration
			p := tc.policy
			p.Sleep = recorder(&waits)
			n := 0
			err := p.Do(context.Background(), func(context.Context) error {
				n++
				if n <= len(tc.errs) {
					return tc.errs[n-1]
				}
				return nil
			})
			assert.Equal(t, tc.attempts, n, "attempts")
			assert.Equal(t, tc.waits, waits, "waits")
			if tc.wantErr {
				require.ErrorIs(t, err, errBusy)
				assert.False(t, retry.IsRetryable(err), "the mark is removed")
			} else {
				require.NoError(t, err)
			}
		})
	}
}

func TestDoStopsWhenContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	p := retry.Policy{Sleep: func(ctx context.Context, _ time.Duration) error { cancel(); return ctx.Err() }}
	n := 0
	err := p.Do(ctx, func(context.Context) error { n++; return retry.Retryable(errBusy, 0) })
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, 1, n)
}

func TestAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	cases := []struct {
		name   string
		header map[string]string
		want   time.Duration
	}{
		{name: "none", want: 0},
		{name: "seconds", header: map[string]string{"Retry-After": "3"}, want: 3 * time.Second},
		{name: "fractional seconds", header: map[string]string{"Retry-After": "0.5"}, want: 500 * time.Millisecond},
		{name: "http date", header: map[string]string{"Retry-After": now.Add(90 * time.Second).Format(http.TimeFormat)}, want: 90 * time.Second},
		{name: "past date", header: map[string]string{"Retry-After": now.Add(-time.Hour).Format(http.TimeFormat)}, want: 0},
		{name: "milliseconds first", header: map[string]string{"Retry-After-Ms": "250", "Retry-After": "9"}, want: 250 * time.Millisecond},
		{name: "garbage", header: map[string]string{"Retry-After": "soon"}, want: 0},
		{name: "negative", header: map[string]string{"Retry-After": "-4"}, want: 0},
		// A wait too long for a Duration is the longest one (past any
		// MaxRetryAfter), not none (which would retry at the backoff).
		{name: "huge", header: map[string]string{"Retry-After": "1e300"}, want: math.MaxInt64},
		{name: "huge integer", header: map[string]string{"Retry-After": "99999999999999999999"}, want: math.MaxInt64},
		{name: "just too long", header: map[string]string{"Retry-After": "9223372037"}, want: math.MaxInt64},
		{name: "beyond float64", header: map[string]string{"Retry-After": "1" + strings.Repeat("0", 400)}, want: math.MaxInt64},
		{name: "huge milliseconds", header: map[string]string{"Retry-After-Ms": "1e300", "Retry-After": "9"}, want: math.MaxInt64},
		{name: "longest seconds", header: map[string]string{"Retry-After": "9223372036"}, want: 9223372036 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			for k, v := range tc.header {
				h.Set(k, v)
			}
			assert.Equal(t, tc.want, retry.After(h, now))
		})
	}
}

// TestHugeRetryAfterEndsTheCall: a 429 whose numeric Retry-After is too
// long for a Duration ends the call at once, naming the longest wait, as
// any wait past MaxRetryAfter does; it is not retried after the backoff.
func TestHugeRetryAfterEndsTheCall(t *testing.T) {
	h := http.Header{}
	h.Set("Retry-After", "99999999999999999999")
	var waits []time.Duration
	p := retry.Policy{MaxAttempts: 3, Sleep: recorder(&waits)}
	n := 0
	err := p.Do(context.Background(), func(context.Context) error {
		n++
		return retry.Retryable(errBusy, retry.After(h, time.Now()))
	})
	require.ErrorIs(t, err, errBusy)
	assert.Equal(t, 1, n, "one attempt")
	assert.Empty(t, waits)
	var hint interface{ RetryAfter() time.Duration }
	require.ErrorAs(t, err, &hint)
	assert.Equal(t, time.Duration(math.MaxInt64), hint.RetryAfter())
}
