package openai_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
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
