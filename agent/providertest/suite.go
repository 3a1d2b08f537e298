package providertest

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/retry"
	"github.com/lazarusrt/lazarus/messages"
)

// Factory returns the provider's Model talking to baseURL, with the retry
// policy given (its Sleep records waits instead of sleeping).
type Factory func(t *testing.T, baseURL string, policy retry.Policy) agent.Model

// Call is an expected tool call.
type Call struct {
	Name, Arguments, ProviderID string
}

// Case is one transcript and the outcome every provider must give for it.
type Case struct {
	// Name is the test name and the transcript's file name (Name + ".txt").
	Name string
	// Text is the expected text; the deltas must concatenate to it.
	Text string
	// MinDeltas is the least number of deltas expected.
	MinDeltas int
	// Calls are the expected tool calls, in order.
	Calls []Call
	// Usage is the expected usage; nil expects none.
	Usage *messages.Usage
	// Err, if set, is the sentinel the error must wrap (the message is nil).
	Err error
	// Requests is how many requests the call makes (retries included).
	Requests int
	// Sleeps are the waits between attempts, in order.
	Sleeps []time.Duration
}

// Backoff is the InitialBackoff of the policy the suite passes to factories.
const Backoff = 100 * time.Millisecond

// Turn is the turn the suite sends: a user message, a tool call with its
// result, and two tools.
func Turn() agent.Turn {
	return agent.Turn{
		ConversationID: "conv-1",
		Summary:        &messages.Summary{ToSeq: 2, Content: "The user lives in Paris."},
		Context: []*messages.Event{
			{Seq: 3, Body: &messages.Event_UserMsg{UserMsg: &messages.UserMessage{Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: "What is the weather?"}}}}}},
			{Seq: 4, Body: &messages.Event_AssistantMsg{AssistantMsg: &messages.AssistantMessage{ToolCalls: []*messages.ToolCall{{Id: "call_runtime1", ProviderId: "prov1", Name: "get_weather", Arguments: `{"city":"Paris"}`}}}}},
			{Seq: 6, Body: &messages.Event_ToolResult{ToolResult: &messages.ToolResultEvent{ToolCallId: "call_runtime1", Name: "get_weather", Outcome: &messages.ToolOutcome{Outcome: &messages.ToolOutcome_Content{Content: `{"temp":21}`}}}}},
		},
		Tools: []agent.ToolSpec{
			{Name: "get_time", Description: "Current time in a zone.", Executor: messages.Executor_EXECUTOR_SERVER, Parameters: `{"type":"object","properties":{"tz":{"type":"string"}}}`},
			{Name: "get_weather", Description: "Weather in a city.", Executor: messages.Executor_EXECUTOR_SERVER, Parameters: `{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`},
		},
	}
}

// Cases are the suite's cases; prefix is the provider's tool call id prefix
// in the transcripts ("call_" for OpenAI, "toolu_" for Anthropic).
func Cases(prefix string) []Case {
	usage := &messages.Usage{InputTokens: 12, OutputTokens: 5}
	return []Case{
		{Name: "text", Text: "Hello, world!", MinDeltas: 3, Usage: usage, Requests: 1},
		{Name: "tool_call", Text: "Let me check.", MinDeltas: 1, Usage: usage, Requests: 1,
			Calls: []Call{{Name: "get_weather", Arguments: `{"city":"Paris"}`, ProviderID: prefix + "w1"}}},
		{Name: "parallel_calls", Usage: usage, Requests: 1, Calls: []Call{
			{Name: "get_weather", Arguments: `{"city":"Paris"}`, ProviderID: prefix + "p1"},
			{Name: "get_time", Arguments: `{"tz":"Europe/Paris"}`, ProviderID: prefix + "p2"},
		}},
		{Name: "split_args", Usage: usage, Requests: 1, Calls: []Call{
			{Name: "get_weather", Arguments: `{"city":"São Paulo","units":"metric","note":"say \"hi\" 🌧"}`, ProviderID: prefix + "s1"},
		}},
		{Name: "unicode", Text: "héllo wörld 🌍 日本語", MinDeltas: 4, Usage: usage, Requests: 1},
		{Name: "usage", Text: "ok", MinDeltas: 1, Usage: &messages.Usage{InputTokens: 1234, OutputTokens: 56, CacheReadInputTokens: 1024}, Requests: 1},
		{Name: "rate_limited", Text: "ok", MinDeltas: 1, Usage: usage, Requests: 2, Sleeps: []time.Duration{2 * time.Second}},
		{Name: "rate_limited_long", Err: agent.ErrRateLimited, Requests: 1},
		{Name: "server_error", Text: "ok", MinDeltas: 1, Usage: usage, Requests: 3, Sleeps: []time.Duration{Backoff, 2 * Backoff}},
		{Name: "server_error_exhausted", Err: agent.ErrUnavailable, Requests: 3, Sleeps: []time.Duration{Backoff, 2 * Backoff}},
		{Name: "reset_before_output", Text: "ok", MinDeltas: 1, Usage: usage, Requests: 2, Sleeps: []time.Duration{Backoff}},
		{Name: "reset_mid_stream", Err: agent.ErrInterrupted, MinDeltas: 1, Requests: 1},
		{Name: "malformed", Err: agent.ErrMalformed, Requests: 1},
		{Name: "no_finish", Err: agent.ErrIncomplete, Requests: 1},
		{Name: "context_length", Err: agent.ErrContextLength, Requests: 1},
		{Name: "refusal", Err: agent.ErrRefused, Requests: 1},
		{Name: "unauthorized", Err: agent.ErrRequest, Requests: 1},
	}
}

// Run runs every case of Cases(prefix) against the transcripts in dir, with
// models from f.
func Run(t *testing.T, dir, prefix string, f Factory) {
	for _, tc := range Cases(prefix) {
		t.Run(tc.Name, func(t *testing.T) { RunCase(t, dir, tc, f) })
	}
}

// RunCase runs one case.
func RunCase(t *testing.T, dir string, tc Case, f Factory) {
	rs, err := Load(filepath.Join(dir, tc.Name+".txt"))
	require.NoError(t, err)
	srv := Serve(t, rs)
	var mu sync.Mutex
	var sleeps []time.Duration
	policy := retry.Policy{MaxAttempts: 3, InitialBackoff: Backoff, MaxRetryAfter: time.Minute,
		Sleep: func(ctx context.Context, d time.Duration) error {
			mu.Lock()
			defer mu.Unlock()
			sleeps = append(sleeps, d)
			return ctx.Err()
		}}
	m := f(t, srv.URL, policy)
	var deltas []string
	msg, err := m.Generate(context.Background(), Turn(), func(s string) { deltas = append(deltas, s) })
	assert.Len(t, srv.Requests(), tc.Requests, "requests")
	mu.Lock()
	assert.Equal(t, tc.Sleeps, sleeps, "waits between attempts")
	mu.Unlock()
	assert.GreaterOrEqual(t, len(deltas), tc.MinDeltas, "deltas %q", deltas)
	if tc.Err != nil {
		require.ErrorIs(t, err, tc.Err)
		assert.Nil(t, msg)
		for _, s := range sentinels {
			if s != tc.Err {
				assert.False(t, errors.Is(err, s), "error %v also wraps %v", err, s)
			}
		}
		assert.False(t, retry.IsRetryable(err), "a returned error carries no retry mark")
		return
	}
	require.NoError(t, err)
	require.NotNil(t, msg)
	assert.Equal(t, tc.Text, strings.Join(deltas, ""), "deltas concatenate to the text")
	var text string
	for _, p := range msg.GetContent() {
		text += p.GetText()
	}
	assert.Equal(t, tc.Text, text)
	var calls []Call
	for _, c := range msg.GetToolCalls() {
		assert.Empty(t, c.GetId(), "the runtime mints ids")
		calls = append(calls, Call{Name: c.GetName(), Arguments: c.GetArguments(), ProviderID: c.GetProviderId()})
	}
	require.Len(t, calls, len(tc.Calls), "tool calls %v", calls)
	for i, c := range calls {
		assert.Equal(t, tc.Calls[i].Name, c.Name, "call %d", i)
		assert.Equal(t, tc.Calls[i].ProviderID, c.ProviderID, "call %d", i)
		assert.JSONEq(t, tc.Calls[i].Arguments, c.Arguments, "call %d", i)
	}
	if tc.Usage != nil {
		require.NotNil(t, msg.GetUsage())
		assert.Equal(t, tc.Usage.GetInputTokens(), msg.GetUsage().GetInputTokens(), "input tokens")
		assert.Equal(t, tc.Usage.GetOutputTokens(), msg.GetUsage().GetOutputTokens(), "output tokens")
		assert.Equal(t, tc.Usage.GetCacheReadInputTokens(), msg.GetUsage().GetCacheReadInputTokens(), "cache read input tokens")
		assert.Equal(t, tc.Usage.GetCacheCreationInputTokens(), msg.GetUsage().GetCacheCreationInputTokens(), "cache creation input tokens")
	}
	assert.NotEmpty(t, msg.GetModel(), "the model that answered is recorded")
}

var sentinels = []error{agent.ErrRateLimited, agent.ErrUnavailable, agent.ErrInterrupted, agent.ErrMalformed,
	agent.ErrIncomplete, agent.ErrContextLength, agent.ErrRefused, agent.ErrRequest}

// RequestFaults checks that a base URL the HTTP client cannot use (an
// unknown scheme), or a server whose certificate does not verify, fails
// the call at once with agent.ErrRequest: the client's *url.Error is a
// net.Error, which would read as a lost connection (agent.ErrUnavailable,
// retried).
func RequestFaults(t *testing.T, f Factory) {
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Error("a request got through")
	}))
	defer tlsSrv.Close()
	for name, u := range map[string]string{"unknown scheme": "htp://127.0.0.1/v1", "unknown authority": tlsSrv.URL + "/v1"} {
		t.Run(name, func(t *testing.T) {
			var slept atomic.Int32
			m := f(t, u, retry.Policy{Sleep: func(context.Context, time.Duration) error {
				slept.Add(1)
				return nil
			}})
			msg, err := m.Generate(context.Background(), Turn(), nil)
			require.ErrorIs(t, err, agent.ErrRequest)
			assert.NotErrorIs(t, err, agent.ErrUnavailable)
			assert.Nil(t, msg)
			assert.Zero(t, slept.Load(), "no retry")
		})
	}
}
