package retry_test

// Black-box tests of the package's godoc: each test names the promise it
// checks, and uses only the exported API.

import (
	"context"
	"errors"
	"math"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/retry"
)

// The zero Policy is the defaults; WithDefaults fills the zero fields and
// keeps the others; less than 0 attempts never retries.
func TestBBWithDefaults(t *testing.T) {
	p := retry.Policy{}.WithDefaults()
	assert.Equal(t, retry.DefaultMaxAttempts, p.MaxAttempts)
	assert.Equal(t, retry.DefaultInitialBackoff, p.InitialBackoff)
	assert.Equal(t, retry.DefaultMaxBackoff, p.MaxBackoff)
	assert.Equal(t, retry.DefaultMaxRetryAfter, p.MaxRetryAfter)
	assert.NotNil(t, p.Sleep)
	q := retry.Policy{MaxAttempts: 7, InitialBackoff: time.Second, MaxBackoff: time.Hour, MaxRetryAfter: time.Second}.WithDefaults()
	assert.Equal(t, 7, q.MaxAttempts)
	assert.Equal(t, time.Second, q.InitialBackoff)
	assert.Equal(t, time.Hour, q.MaxBackoff)
	assert.Equal(t, time.Second, q.MaxRetryAfter)
	assert.Equal(t, time.Second, retry.Policy{InitialBackoff: time.Second}.Backoff(2))
	assert.Equal(t, 4*time.Second, retry.Policy{InitialBackoff: time.Second}.Backoff(4))
}

// The default Sleep is a timer that returns ctx.Err() once ctx is done: Do
// does not wait out an hour's backoff after ctx ends. (ctx may end during
// the attempt, before the wait: Do then returns the attempt's error.)
func TestBBDefaultSleepHonoursContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	attempted := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- retry.Policy{InitialBackoff: time.Hour}.Do(ctx, func(context.Context) error {
			close(attempted)
			return retry.Retryable(errBusy, 0)
		})
	}()
	<-attempted
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			require.ErrorIs(t, err, errBusy)
		}
	case <-time.After(time.Minute):
		t.Fatal("Do did not return once ctx was done")
	}
}

// Do returns attempt's last error, unmarked, wrapped with the number of
// attempts when there was more than one.
func TestBBDoNamesAttempts(t *testing.T) {
	var waits []time.Duration
	p := retry.Policy{MaxAttempts: 3, Sleep: recorder(&waits)}
	err := p.Do(context.Background(), func(context.Context) error { return retry.Retryable(errBusy, 0) })
	require.ErrorIs(t, err, errBusy)
	assert.False(t, retry.IsRetryable(err))
	assert.Contains(t, err.Error(), "3 attempts")
	assert.Len(t, waits, 2)
}

// Do names the attempts also when the last one failed for good after
// retries (a 503, then a 400): the error is still attempt's, unmarked.
func TestBBDoNamesAttemptsOfAFinalError(t *testing.T) {
	var waits []time.Duration
	p := retry.Policy{MaxAttempts: 3, Sleep: recorder(&waits)}
	final := errors.New("rejected")
	n := 0
	err := p.Do(context.Background(), func(context.Context) error {
		n++
		if n == 1 {
			return retry.Retryable(errBusy, 0)
		}
		return final
	})
	require.ErrorIs(t, err, final)
	assert.NotErrorIs(t, err, errBusy)
	assert.False(t, retry.IsRetryable(err))
	assert.Equal(t, "after 2 attempts: rejected", err.Error())
	assert.Len(t, waits, 1)
	// One attempt: the error as it came.
	n = 1
	err = p.Do(context.Background(), func(context.Context) error { return final })
	assert.Same(t, final, err)
}

// After: a retry-after-ms that does not parse (NaN, infinite, negative,
// garbage) falls back to Retry-After; values that do not parse give 0; a
// wait too long for a Duration is the longest one.
func TestBBAfterHostile(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, ms := range []string{"NaN", "Inf", "-Inf", "-5", "0", "x"} {
		h := http.Header{}
		h.Set("Retry-After-Ms", ms)
		h.Set("Retry-After", "2")
		assert.Equal(t, 2*time.Second, retry.After(h, now), "retry-after-ms %.20q", ms)
	}
	for _, v := range []string{"1e300", strings.Repeat("9", 1000)} {
		h := http.Header{}
		h.Set("Retry-After-Ms", v)
		h.Set("Retry-After", "2")
		assert.Equal(t, time.Duration(math.MaxInt64), retry.After(h, now), "retry-after-ms %.20q", v)
		h = http.Header{}
		h.Set("Retry-After", v)
		assert.Equal(t, time.Duration(math.MaxInt64), retry.After(h, now), "retry-after %.20q", v)
	}
	for _, s := range []string{"NaN", "Inf", "+Inf", "0", "\xff", " 3", "Mon, 99 Foo 2026"} {
		h := http.Header{}
		h.Set("Retry-After", s)
		assert.Equal(t, time.Duration(0), retry.After(h, now), "retry-after %q", s)
	}
	assert.Equal(t, time.Duration(0), retry.After(nil, now))
}

// Transient(nil) and IsRetryable(nil) are false.
func TestBBNilErrors(t *testing.T) {
	assert.False(t, retry.Transient(nil))
	assert.False(t, retry.IsRetryable(nil))
	assert.NoError(t, retry.Policy{}.Do(context.Background(), func(context.Context) error { return nil }))
}

// A *url.Error without a cause (an http.Client never returns one; a
// caller or a test may build one) is transient, as any other *url.Error
// whose cause is not the request's: Transient read the cause's text and
// panicked on it.
func TestBBTransientURLErrorWithoutCause(t *testing.T) {
	var transient bool
	require.NotPanics(t, func() { transient = retry.Transient(&url.Error{Op: "Post", URL: "http://x"}) })
	assert.True(t, transient)
	require.NotPanics(t, func() { transient = retry.Transient(&url.Error{}) })
	assert.True(t, transient, "the zero url.Error too")
}

// Do with a nil attempt makes no attempt and waits for nothing: it returns
// an error wrapping ErrNilAttempt (it used to panic).
func TestBBDoNilAttempt(t *testing.T) {
	var waits []time.Duration
	var err error
	require.NotPanics(t, func() {
		err = retry.Policy{Sleep: recorder(&waits)}.Do(context.Background(), nil)
	})
	require.ErrorIs(t, err, retry.ErrNilAttempt)
	assert.Empty(t, waits)
	require.ErrorIs(t, retry.Policy{}.Do(context.Background(), nil), retry.ErrNilAttempt, "the zero Policy too")
}

// Do's error names the server's wait of its last attempt (agent.RetryAfter)
// whether Do gave up because the attempts ran out or because the wait
// exceeded MaxRetryAfter; errors.Is sees through it, the text is the
// error's own, and an error whose last attempt named no wait names none.
func TestBBDoErrorNamesTheWait(t *testing.T) {
	var waits []time.Duration
	err := retry.Policy{MaxAttempts: 2, Sleep: recorder(&waits)}.Do(context.Background(), func(context.Context) error {
		return retry.Retryable(errBusy, 3*time.Second)
	})
	require.ErrorIs(t, err, errBusy)
	assert.False(t, retry.IsRetryable(err))
	assert.Equal(t, "after 2 attempts: busy", err.Error())
	d, ok := agent.RetryAfter(err)
	assert.True(t, ok)
	assert.Equal(t, 3*time.Second, d)
	assert.Equal(t, []time.Duration{3 * time.Second}, waits)

	waits = nil
	err = retry.Policy{Sleep: recorder(&waits)}.Do(context.Background(), func(context.Context) error {
		return retry.Retryable(errBusy, 5*time.Minute)
	})
	require.ErrorIs(t, err, errBusy)
	assert.Equal(t, "busy", err.Error())
	d, ok = agent.RetryAfter(err)
	assert.True(t, ok, "past MaxRetryAfter: returned at once, naming the wait")
	assert.Equal(t, 5*time.Minute, d)
	assert.Empty(t, waits)

	n := 0
	err = retry.Policy{MaxAttempts: 2, Sleep: recorder(&waits)}.Do(context.Background(), func(context.Context) error {
		n++
		if n == 1 {
			return retry.Retryable(errBusy, time.Second)
		}
		return retry.Retryable(errBusy, 0)
	})
	require.ErrorIs(t, err, errBusy)
	_, ok = agent.RetryAfter(err)
	assert.False(t, ok, "the last attempt named no wait")
}
