package openai_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/actors/actorstest"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/openai"
	"github.com/lazarusrt/lazarus/agent/providertest"
	"github.com/lazarusrt/lazarus/agent/retry"
)

// TestRuntime drives a Runtime on the OpenAI provider through a kill
// during a streamed answer and a broken stream (providertest.RunRuntime).
func TestRuntime(t *testing.T) {
	providertest.RunRuntime(t, providertest.RuntimeCase{
		Dir: "testdata",
		New: func(url string) (agent.Model, error) {
			return openai.New(openai.Options{Model: "gpt-4o-mini", BaseURL: url, APIKey: "k"})
		},
		Partial: func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = w.Write([]byte(`data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"Partial"},"finish_reason":null}]}` + "\n\n"))
		},
	})
}

// TestRuntimeRequestErrorEventFailsTheTurnAtOnce: an error event in the
// stream that says the request is at fault (an invalid API key) fails the turn
// durably after one request: neither the provider's retry (4 attempts)
// nor the runtime's (3) spends its budget on a call that fails alike.
func TestRuntimeRequestErrorEventFailsTheTurnAtOnce(t *testing.T) {
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		requests.Add(1)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte(`data: {"error":{"message":"Incorrect API key provided","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}` + "\n\n"))
	}))
	t.Cleanup(srv.Close)
	m, err := openai.New(openai.Options{Model: "gpt-4o-mini", BaseURL: srv.URL, APIKey: "k",
		Retry: retry.Policy{MaxAttempts: 4, InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond}})
	require.NoError(t, err)
	rt, err := lazarus.Open(lazarus.Options{Model: m,
		ModelRetry: lazarus.RetryPolicy{MaximumAttempts: 3, InitialInterval: time.Millisecond, MaximumInterval: time.Millisecond}})
	require.NoError(t, err)
	defer rt.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	end, err := rt.SendAndWait(ctx, "c", "hi", agent.Scope{UserID: "u"})
	require.ErrorIs(t, err, lazarus.ErrTurnFailed)
	require.Equal(t, lazarus.TurnFailed, end.Outcome)
	require.ErrorIs(t, end.Err, agent.ErrRequest)
	var te *lazarus.TurnError
	require.ErrorAs(t, end.Err, &te)
	assert.Equal(t, 1, te.Attempts)
	assert.Contains(t, te.Message, "openai")
	assert.EqualValues(t, 1, requests.Load())
}

// rateLimited is a provider that answers every request with a 429 naming
// retryAfter (seconds) as its Retry-After, and tells requests of each.
func rateLimited(t *testing.T, retryAfter string) (agent.Model, <-chan struct{}) {
	requests := make(chan struct{}, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		requests <- struct{}{}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", retryAfter)
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = w.Write([]byte(`{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}`))
	}))
	t.Cleanup(srv.Close)
	// The provider's default policy: a wait past its MaxRetryAfter (a
	// minute) ends its call at once.
	m, err := openai.New(openai.Options{Model: "gpt-4o-mini", BaseURL: srv.URL, APIKey: "k"})
	require.NoError(t, err)
	return m, requests
}

func openOnClock(t *testing.T, m agent.Model, clock *actorstest.ManualClock) *lazarus.Runtime {
	rt, err := lazarus.Open(lazarus.Options{Model: m, Clock: clock, IdleTimeout: -1, NoResume: true})
	require.NoError(t, err)
	return rt
}

func nextUpdate(t *testing.T, ctx context.Context, sub <-chan lazarus.Update, match func(lazarus.Update) bool) lazarus.Update {
	t.Helper()
	for {
		select {
		case u, ok := <-sub:
			require.True(t, ok, "subscription ended")
			if match(u) {
				return u
			}
		case <-ctx.Done():
			t.Fatal("no matching update before the test's bound")
		}
	}
}

func awaitRequest(t *testing.T, ctx context.Context, requests <-chan struct{}) {
	t.Helper()
	select {
	case <-requests:
	case <-ctx.Done():
		t.Fatal("no request before the test's bound")
	}
}

// TestRuntimeHonoursTheProvidersRetryAfter: a provider that answers 429
// with Retry-After: 300 gets the runtime's next call five minutes later on
// the Clock, as it asked, not after the default policy's 1s then 2s: the
// provider's error names the wait (agent.RetryAfter), and the runtime
// waits the longer of it and its own delay. The turn fails after the
// policy's 3 calls, ten minutes on.
func TestRuntimeHonoursTheProvidersRetryAfter(t *testing.T) {
	m, requests := rateLimited(t, "300")
	start := time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)
	clock := actorstest.NewManualClock(start)
	rt := openOnClock(t, m, clock)
	defer rt.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sub, err := rt.Subscribe(ctx, "c", 0)
	require.NoError(t, err)
	_, err = rt.Send(ctx, "c", "hi", agent.Scope{UserID: "u"})
	require.NoError(t, err)

	for attempt := 1; attempt <= 2; attempt++ {
		awaitRequest(t, ctx, requests)
		u := nextUpdate(t, ctx, sub, func(u lazarus.Update) bool { return u.Retry != nil || u.TurnEnd != nil })
		require.NotNil(t, u.Retry, "attempt %d: %v", attempt, u.Err)
		require.ErrorIs(t, u.Err, agent.ErrRateLimited)
		after, ok := agent.RetryAfter(u.Err)
		require.True(t, ok, "the provider's error names the wait")
		require.Equal(t, 5*time.Minute, after)
		require.Equal(t, attempt, u.Retry.Attempt)
		require.Equal(t, 5*time.Minute, u.Retry.Delay, "the provider's wait, not the policy's")
		require.Contains(t, clock.Dues(), clock.Now().Add(5*time.Minute), "the retry is armed on the Clock")
		require.Empty(t, requests, "no request before the wait is over")
		clock.Advance(5 * time.Minute)
	}
	awaitRequest(t, ctx, requests)
	end := nextUpdate(t, ctx, sub, func(u lazarus.Update) bool { return u.TurnEnd != nil }).TurnEnd
	require.Equal(t, lazarus.TurnFailed, end.Outcome)
	require.ErrorIs(t, end.Err, agent.ErrRateLimited)
	var te *lazarus.TurnError
	require.ErrorAs(t, end.Err, &te)
	assert.Equal(t, 3, te.Attempts)
	assert.Equal(t, actors.CodeRateLimited, te.Code)
	assert.Equal(t, 10*time.Minute, clock.Now().Sub(start))
	assert.Empty(t, requests, "one request per call: the provider did not retry past its MaxRetryAfter")
}

// TestRuntimeRetryAfterPastTheCapFailsAtOnce: a Retry-After longer than
// RetryPolicy.MaximumRetryAfter (an hour against the default ten minutes)
// fails the turn after its one call: no retry sooner than the provider
// asked.
func TestRuntimeRetryAfterPastTheCapFailsAtOnce(t *testing.T) {
	m, requests := rateLimited(t, "3600")
	clock := actorstest.NewManualClock(time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC))
	rt := openOnClock(t, m, clock)
	defer rt.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sub, err := rt.Subscribe(ctx, "c", 0)
	require.NoError(t, err)
	_, err = rt.Send(ctx, "c", "hi", agent.Scope{UserID: "u"})
	require.NoError(t, err)

	awaitRequest(t, ctx, requests)
	u := nextUpdate(t, ctx, sub, func(u lazarus.Update) bool { return u.Retry != nil || u.TurnEnd != nil })
	require.NotNil(t, u.TurnEnd, "no retry: %+v", u.Retry)
	require.Equal(t, lazarus.TurnFailed, u.TurnEnd.Outcome)
	require.ErrorIs(t, u.TurnEnd.Err, agent.ErrRateLimited)
	var te *lazarus.TurnError
	require.ErrorAs(t, u.TurnEnd.Err, &te)
	assert.Equal(t, 1, te.Attempts)
	assert.Empty(t, requests)
}

// TestRuntimeKillEndsARetryAfterWait: a kill during a retry's five-minute
// wait ends it at once: the turn is cancelled and the retry's timer is
// gone from the Clock; Close then returns though the wait never passed.
func TestRuntimeKillEndsARetryAfterWait(t *testing.T) {
	m, requests := rateLimited(t, "300")
	clock := actorstest.NewManualClock(time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC))
	rt := openOnClock(t, m, clock)
	defer rt.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sub, err := rt.Subscribe(ctx, "c", 0)
	require.NoError(t, err)
	_, err = rt.Send(ctx, "c", "hi", agent.Scope{UserID: "u"})
	require.NoError(t, err)

	awaitRequest(t, ctx, requests)
	u := nextUpdate(t, ctx, sub, func(u lazarus.Update) bool { return u.Retry != nil || u.TurnEnd != nil })
	require.NotNil(t, u.Retry)
	due := clock.Now().Add(5 * time.Minute)
	require.Contains(t, clock.Dues(), due)

	require.True(t, rt.Kill("c"))
	end := nextUpdate(t, ctx, sub, func(u lazarus.Update) bool { return u.TurnEnd != nil }).TurnEnd
	require.Equal(t, lazarus.TurnCancelled, end.Outcome)
	require.Eventually(t, func() bool { return !slices.Contains(clock.Dues(), due) }, 10*time.Second, time.Millisecond,
		"the retry's timer is stopped")
	require.NoError(t, rt.Close())
	assert.Empty(t, requests)
}

// TestRuntimeCloseEndsARetryAfterWait: Close during a retry's five-minute
// wait returns without the wait passing on the Clock, and no call follows.
func TestRuntimeCloseEndsARetryAfterWait(t *testing.T) {
	m, requests := rateLimited(t, "300")
	clock := actorstest.NewManualClock(time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC))
	rt := openOnClock(t, m, clock)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sub, err := rt.Subscribe(ctx, "c", 0)
	require.NoError(t, err)
	_, err = rt.Send(ctx, "c", "hi", agent.Scope{UserID: "u"})
	require.NoError(t, err)
	awaitRequest(t, ctx, requests)
	require.NotNil(t, nextUpdate(t, ctx, sub, func(u lazarus.Update) bool { return u.Retry != nil || u.TurnEnd != nil }).Retry)
	due := clock.Now().Add(5 * time.Minute)
	require.Contains(t, clock.Dues(), due)

	closed := make(chan error, 1)
	go func() { closed <- rt.Close() }()
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-ctx.Done():
		t.Fatal("Close waited for the retry's wait")
	}
	assert.NotContains(t, clock.Dues(), due, "the retry's timer is stopped")
	clock.Advance(5 * time.Minute)
	assert.Empty(t, requests)
}
