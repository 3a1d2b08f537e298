package anthropic_test

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
	"github.com/lazarusrt/lazarus/agent/anthropic"
	"github.com/lazarusrt/lazarus/agent/providertest"
	"github.com/lazarusrt/lazarus/agent/retry"
)

// TestRuntime drives a Runtime on the Anthropic provider through a kill
// during a streamed answer and a broken stream (providertest.RunRuntime).
func TestRuntime(t *testing.T) {
	providertest.RunRuntime(t, providertest.RuntimeCase{
		Dir: "testdata",
		New: func(url string) (agent.Model, error) {
			return anthropic.New(anthropic.Options{Model: "claude-sonnet-4-5", BaseURL: url, APIKey: "k"})
		},
		Partial: func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = w.Write([]byte("event: message_start\n" +
				`data: {"type":"message_start","message":{"id":"msg_k","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"usage":{"input_tokens":3,"output_tokens":1}}}` + "\n\n" +
				"event: content_block_start\n" + `data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}` + "\n\n" +
				"event: content_block_delta\n" + `data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Partial"}}` + "\n\n"))
		},
	})
}

// TestRuntimeRequestErrorEventFailsTheTurnAtOnce: an error event in the
// stream that says the request is at fault (an authentication_error) fails the turn
// durably after one request: neither the provider's retry (4 attempts)
// nor the runtime's (3) spends its budget on a call that fails alike.
func TestRuntimeRequestErrorEventFailsTheTurnAtOnce(t *testing.T) {
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		requests.Add(1)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte("event: message_start\n" + `data: {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-x","content":[],"stop_reason":null,"usage":{"input_tokens":7,"output_tokens":1}}}` + "\n\n" +
			"event: error\n" + `data: {"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}` + "\n\n"))
	}))
	t.Cleanup(srv.Close)
	m, err := anthropic.New(anthropic.Options{Model: "claude-sonnet-4-5", BaseURL: srv.URL, APIKey: "k",
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
	assert.Contains(t, te.Message, "anthropic")
	assert.EqualValues(t, 1, requests.Load())
}
