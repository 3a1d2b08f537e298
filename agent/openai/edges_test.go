package openai_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	oai "github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/openai"
	"github.com/lazarusrt/lazarus/agent/providertest"
	"github.com/lazarusrt/lazarus/agent/retry"
	"github.com/lazarusrt/lazarus/messages"
)

func chunk(delta string, finish string) string {
	f := "null"
	if finish != "" {
		f = `"` + finish + `"`
	}
	return `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m-1","choices":[{"index":0,"delta":` + delta + `,"finish_reason":` + f + `}]}` + "\n\n"
}

const usageChunk = `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m-1","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}` + "\n\ndata: [DONE]\n\n"

type probe struct {
	srv    *providertest.Server
	m      agent.Model
	mu     sync.Mutex
	sleeps []time.Duration
}

func serveText(t *testing.T, transcript string) *probe {
	rs, err := providertest.Parse([]byte(transcript))
	require.NoError(t, err)
	p := &probe{srv: providertest.Serve(t, rs)}
	p.m = factory(t, p.srv.URL, retry.Policy{MaxAttempts: 3, InitialBackoff: providertest.Backoff,
		Sleep: func(ctx context.Context, d time.Duration) error {
			p.mu.Lock()
			defer p.mu.Unlock()
			p.sleeps = append(p.sleeps, d)
			return ctx.Err()
		}})
	return p
}

func (p *probe) waits() []time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sleeps
}

// TestCallsAllNumberedZero: a server that numbers every call 0 streams
// each call's arguments in fragments after its first; they belong to that
// call, not to the first one.
func TestCallsAllNumberedZero(t *testing.T) {
	p := serveText(t, chunk(`{"role":"assistant"}`, "")+
		chunk(`{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"get_weather","arguments":""}}]}`, "")+
		chunk(`{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":"}}]}`, "")+
		chunk(`{"tool_calls":[{"index":0,"function":{"arguments":"\"Paris\"}"}}]}`, "")+
		chunk(`{"tool_calls":[{"index":0,"id":"call_b","type":"function","function":{"name":"get_time","arguments":""}}]}`, "")+
		chunk(`{"tool_calls":[{"index":0,"function":{"arguments":"{\"tz\":"}}]}`, "")+
		chunk(`{"tool_calls":[{"index":0,"function":{"arguments":"\"UTC\"}"}}]}`, "")+
		chunk(`{}`, "tool_calls")+usageChunk)
	msg, err := p.m.Generate(context.Background(), providertest.Turn(), nil)
	require.NoError(t, err)
	require.Len(t, msg.GetToolCalls(), 2)
	assert.Equal(t, "call_a", msg.GetToolCalls()[0].GetProviderId())
	assert.JSONEq(t, `{"city":"Paris"}`, msg.GetToolCalls()[0].GetArguments())
	assert.Equal(t, "call_b", msg.GetToolCalls()[1].GetProviderId())
	assert.JSONEq(t, `{"tz":"UTC"}`, msg.GetToolCalls()[1].GetArguments())
}

// TestEmptyArgumentsAreAnObject: a call streamed with no arguments gets
// "{}"; usage comes from the final chunk.
func TestEmptyArgumentsAreAnObject(t *testing.T) {
	p := serveText(t, chunk(`{"role":"assistant"}`, "")+
		chunk(`{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"get_time","arguments":""}}]}`, "")+
		chunk(`{}`, "tool_calls")+usageChunk)
	msg, err := p.m.Generate(context.Background(), providertest.Turn(), nil)
	require.NoError(t, err)
	require.Len(t, msg.GetToolCalls(), 1)
	assert.Equal(t, "{}", msg.GetToolCalls()[0].GetArguments())
	assert.Equal(t, &messages.Usage{InputTokens: 3, OutputTokens: 4}, msg.GetUsage())
}

// errData is an error event in the stream, then the next response.
func errData(e string) string { return "data: {\"error\":" + e + "}\n\n" }

// again is a second response, a good answer, after a first that failed.
var again = "\n===\n" + chunk(`{"role":"assistant","content":"ok"}`, "stop") + usageChunk

// TestFailureOutcomes: each failure has its sentinel (or is retried into
// a success), its number of requests and its waits (429 without
// Retry-After backs off; a 5xx's Retry-After is honoured).
func TestFailureOutcomes(t *testing.T) {
	for _, tc := range []struct {
		name     string
		tr       string
		want     error
		requests int
		sleeps   []time.Duration
	}{
		{"429 no retry-after", "> status 429\n{\"error\":{\"message\":\"slow\"}}\n===\n> status 429\n{}\n===\n> status 429\n{}\n", agent.ErrRateLimited, 3, []time.Duration{providertest.Backoff, 2 * providertest.Backoff}},
		{"503 retry-after", "> status 503\n> header Retry-After: 3\n{}\n===\n> status 503\n{}\n===\n> status 503\n{}\n", agent.ErrUnavailable, 3, []time.Duration{3 * time.Second, 2 * providertest.Backoff}},
		{"429 retry-after-ms", "> status 429\n> header retry-after-ms: 1500\n> header Retry-After: 9\n{\"error\":{\"message\":\"slow\"}}\n" + again, nil, 2, []time.Duration{1500 * time.Millisecond}},
		{"400", "> status 400\n{\"error\":{\"message\":\"bad\"}}\n", agent.ErrRequest, 1, nil},
		{"403", "> status 403\n{\"error\":{\"message\":\"no\"}}\n", agent.ErrRequest, 1, nil},
		{"404", "> status 404\n{\"error\":{\"message\":\"no model\"}}\n", agent.ErrRequest, 1, nil},
		{"400 error is a string", "> status 400\n{\"error\":\"model not found\"}\n" + again, agent.ErrRequest, 1, nil},
		{"401 error is a number", "> status 401\n{\"error\":42}\n" + again, agent.ErrRequest, 1, nil},
		{"503 error is a string", "> status 503\n{\"error\":\"down\"}\n" + again, nil, 2, []time.Duration{providertest.Backoff}},
		{"413", "> status 413\n{\"error\":{\"message\":\"too large\"}}\n", agent.ErrRequest, 1, nil},
		{"422", "> status 422\n{\"error\":{\"message\":\"unprocessable\"}}\n", agent.ErrRequest, 1, nil},
		{"408", "> status 408\n{}\n" + again, nil, 2, []time.Duration{providertest.Backoff}},
		{"409", "> status 409\n{\"error\":{\"message\":\"conflict\"}}\n" + again, nil, 2, []time.Duration{providertest.Backoff}},
		{"400 context", "> status 400\n{\"error\":{\"message\":\"This model's maximum context length is 8 tokens\",\"code\":\"context_length_exceeded\"}}\n", agent.ErrContextLength, 1, nil},
		{"400 context size (llama.cpp)", "> status 400\n{\"error\":{\"code\":400,\"message\":\"request (4390 tokens) exceeds the available context size (4096 tokens), try increasing it\",\"type\":\"exceed_context_size_error\",\"n_prompt_tokens\":4390,\"n_ctx\":4096}}\n", agent.ErrContextLength, 1, nil},
		{"500 context size (llama.cpp)", "> status 500\n{\"error\":{\"code\":500,\"message\":\"the request exceeds the available context size. try increasing the context size or enable context shift\",\"type\":\"exceed_context_size_error\",\"n_prompt_tokens\":1407,\"n_ctx\":256}}\n", agent.ErrContextLength, 1, nil},
		{"500 context_length_exceeded", "> status 500\n{\"error\":{\"message\":\"too long\",\"type\":\"invalid_request_error\",\"code\":\"context_length_exceeded\"}}\n" + again, agent.ErrContextLength, 1, nil},
		{"500 maximum context length (vLLM)", "> status 500\n{\"error\":{\"object\":\"error\",\"message\":\"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens\",\"type\":\"BadRequestError\",\"code\":500}}\n" + again, agent.ErrContextLength, 1, nil},
		{"cut after text", chunk(`{"role":"assistant","content":"hi"}`, ""), agent.ErrIncomplete, 1, nil},
		{"wrong type chunk", chunk(`{"role":"assistant","content":"hi"}`, "") + "data: [1,2]\n\n" + chunk(`{}`, "stop") + usageChunk, agent.ErrMalformed, 1, nil},
		{"string chunk", "data: \"x\"\n\n" + chunk(`{}`, "stop") + usageChunk, agent.ErrMalformed, 1, nil},
		{"malformed after text", chunk(`{"role":"assistant","content":"hi"}`, "") + "data: {\"choices\":[\n\n" + chunk(`{}`, "stop") + usageChunk, agent.ErrMalformed, 1, nil},
		{"text not UTF-8", chunk("{\"role\":\"assistant\",\"content\":\"a\xffb\"}", "") + chunk(`{}`, "stop") + usageChunk, agent.ErrMalformed, 1, nil},
		{"model name not UTF-8", strings.ReplaceAll(chunk(`{"role":"assistant","content":"hi"}`, "stop")+usageChunk, `"m-1"`, "\"m\xff\""), agent.ErrMalformed, 1, nil},
		{"call id not UTF-8", chunk(strings.Replace(`{"tool_calls":[{"index":0,"id":"call_X","type":"function","function":{"name":"get_time","arguments":"{}"}}]}`, "X", "\xff", 1), "tool_calls") + usageChunk, agent.ErrMalformed, 1, nil},
		// Error events in the stream: the request's fault fails at once,
		// before text or after it; the server's is retried before text.
		{"invalid request event", errData(`{"message":"bad","type":"invalid_request_error","param":null,"code":null}`) + again, agent.ErrRequest, 1, nil},
		{"invalid request event after text", chunk(`{"role":"assistant","content":"hi"}`, "") + errData(`{"message":"bad","type":"invalid_request_error","code":null}`), agent.ErrRequest, 1, nil},
		{"invalid key event", errData(`{"message":"Incorrect API key","type":"invalid_request_error","code":"invalid_api_key"}`) + again, agent.ErrRequest, 1, nil},
		{"authentication event (llama.cpp)", errData(`{"code":401,"message":"Invalid API Key","type":"authentication_error"}`) + again, agent.ErrRequest, 1, nil},
		{"not found event (vLLM)", errData(`{"object":"error","message":"The model x does not exist.","type":"NotFoundError","param":null,"code":404}`) + again, agent.ErrRequest, 1, nil},
		{"bad request event (vLLM)", errData(`{"object":"error","message":"bad temperature","type":"BadRequestError","param":null,"code":400}`) + again, agent.ErrRequest, 1, nil},
		{"403 event (OpenRouter)", errData(`{"code":403,"message":"flagged by moderation"}`) + again, agent.ErrRequest, 1, nil},
		{"quota event", errData(`{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}`) + again, agent.ErrRateLimited, 1, nil},
		{"server event", errData(`{"message":"The server had an error","type":"server_error","param":null,"code":null}`) + again, nil, 2, []time.Duration{providertest.Backoff}},
		{"502 event (OpenRouter)", errData(`{"code":502,"message":"Provider returned error"}`) + again, nil, 2, []time.Duration{providertest.Backoff}},
		{"rate limit event", errData(`{"message":"slow down","type":"requests","code":"rate_limit_exceeded"}`) + again, nil, 2, []time.Duration{providertest.Backoff}},
		{"429 event", errData(`{"code":429,"message":"slow down"}`) + again, nil, 2, []time.Duration{providertest.Backoff}},
		{"string event", "data: {\"error\":\"odd\"}\n\n" + again, nil, 2, []time.Duration{providertest.Backoff}},
		{"rate limit event after text", chunk(`{"role":"assistant","content":"hi"}`, "") + errData(`{"message":"slow down","code":"rate_limit_exceeded"}`), agent.ErrInterrupted, 1, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := serveText(t, tc.tr)
			msg, err := p.m.Generate(context.Background(), providertest.Turn(), nil)
			if tc.want == nil {
				require.NoError(t, err)
				assert.Equal(t, "ok", msg.GetContent()[0].GetText())
				assert.Len(t, p.srv.Requests(), tc.requests)
				assert.Equal(t, tc.sleeps, p.waits())
				return
			}
			require.ErrorIs(t, err, tc.want)
			assert.Nil(t, msg)
			assert.Len(t, p.srv.Requests(), tc.requests)
			assert.Equal(t, tc.sleeps, p.waits())
			assert.False(t, retry.IsRetryable(err))
		})
	}
}

// TestCancelMidStream: a cancel while the answer streams ends the call
// with ctx.Err(), not retried.
func TestCancelMidStream(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte(chunk(`{"role":"assistant","content":"Partial"}`, "")))
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	defer srv.Close()
	m := factory(t, srv.URL, retry.Policy{Sleep: func(context.Context, time.Duration) error { t.Error("slept"); return nil }})
	ctx, cancel := context.WithCancel(context.Background())
	msg, err := m.Generate(ctx, providertest.Turn(), func(string) { cancel() })
	require.ErrorIs(t, err, context.Canceled)
	assert.Nil(t, msg)
	assert.EqualValues(t, 1, calls.Load())
}

// TestToolChoiceKeywords: auto, none and required are sent as the string.
func TestToolChoiceKeywords(t *testing.T) {
	for _, c := range []string{agent.ToolChoiceAuto, agent.ToolChoiceNone, agent.ToolChoiceRequired} {
		p := serveText(t, chunk(`{"content":"x"}`, "stop")+usageChunk)
		turn := providertest.Turn()
		turn.Settings.ToolChoice = c
		_, err := p.m.Generate(context.Background(), turn, nil)
		require.NoError(t, err)
		var req map[string]any
		require.NoError(t, json.Unmarshal(p.srv.Requests()[0], &req))
		assert.Equal(t, c, req["tool_choice"])
	}
}

// TestNoToolChoiceWithoutTools: a turn without tools sends no tool_choice,
// whatever the settings say: the API refuses one without tools (400).
func TestNoToolChoiceWithoutTools(t *testing.T) {
	for _, c := range []string{agent.ToolChoiceAuto, agent.ToolChoiceNone, agent.ToolChoiceRequired, "lookup"} {
		p := serveText(t, chunk(`{"content":"x"}`, "stop")+usageChunk)
		turn := providertest.Turn()
		turn.Tools = nil
		turn.Settings.ToolChoice = c
		_, err := p.m.Generate(context.Background(), turn, nil)
		require.NoError(t, err)
		var req map[string]any
		require.NoError(t, json.Unmarshal(p.srv.Requests()[0], &req))
		assert.NotContains(t, req, "tool_choice", c)
		assert.NotContains(t, req, "tools", c)
	}
}

// TestErrorResultText: an error outcome reads "error (<code>): <message>".
func TestErrorResultText(t *testing.T) {
	p := serveText(t, chunk(`{"content":"x"}`, "stop")+usageChunk)
	turn := providertest.Turn()
	turn.Context[2].GetToolResult().Outcome = &messages.ToolOutcome{Outcome: &messages.ToolOutcome_Error{Error: &messages.ToolError{Code: "boom", Message: "bad"}}}
	_, err := p.m.Generate(context.Background(), turn, nil)
	require.NoError(t, err)
	assert.True(t, strings.Contains(string(p.srv.Requests()[0]), "error (boom): bad"))
}

// TestModelNameFallsBackToTheOneAskedFor: when the server names no model in
// its chunks, the message records the model asked for, the conversation's
// own (Settings.Model) over the options'.
func TestModelNameFallsBackToTheOneAskedFor(t *testing.T) {
	p := serveText(t, strings.ReplaceAll(chunk(`{"content":"x"}`, "stop")+usageChunk, `"model":"m-1",`, ""))
	turn := providertest.Turn()
	turn.Settings.Model = "conv-model"
	msg, err := p.m.Generate(context.Background(), turn, nil)
	require.NoError(t, err)
	assert.Equal(t, "conv-model", msg.GetModel())
}

// recorder is a transport that records each request and answers none.
type recorder struct {
	mu   sync.Mutex
	reqs []*http.Request
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reqs = append(r.reqs, req)
	return nil, errors.New("recorder: no network")
}

// TestNewReadsNoEnvironment: the SDK's client reads OPENAI_BASE_URL,
// OPENAI_ORG_ID, OPENAI_PROJECT_ID and OPENAI_CUSTOM_HEADERS; New reads
// none of them (OptionsFromEnv is the only reader). An empty BaseURL is
// OpenAI's public API, whatever OPENAI_BASE_URL says.
func TestNewReadsNoEnvironment(t *testing.T) {
	t.Setenv("OPENAI_BASE_URL", "http://elsewhere.invalid/v1")
	t.Setenv("OPENAI_API_KEY", "env-key")
	t.Setenv("OPENAI_ORG_ID", "org-env")
	t.Setenv("OPENAI_PROJECT_ID", "proj-env")
	t.Setenv("OPENAI_CUSTOM_HEADERS", "X-From-Env: yes")
	rec := &recorder{}
	m, err := openai.New(openai.Options{Model: "gpt-4o-mini", APIKey: "opt-key", HTTPClient: &http.Client{Transport: rec},
		Retry: retry.Policy{MaxAttempts: 1}})
	require.NoError(t, err)
	_, err = m.Generate(context.Background(), providertest.Turn(), nil)
	require.Error(t, err)
	require.Len(t, rec.reqs, 1)
	req := rec.reqs[0]
	assert.Equal(t, "api.openai.com", req.URL.Host)
	assert.Equal(t, "Bearer opt-key", req.Header.Get("Authorization"))
	for _, h := range []string{"OpenAI-Organization", "OpenAI-Project", "X-From-Env"} {
		assert.Empty(t, req.Header.Get(h), h)
	}
}

// TestLengthStopIsAnAnswer: a stop at the token bound (finish_reason
// length) is the server's end of the answer, not a broken stream: the
// message holds what the model wrote up to the bound, a tool call cut
// there with its arguments as far as they came (not JSON: the runtime
// answers it with an invalid error result).
func TestLengthStopIsAnAnswer(t *testing.T) {
	p := serveText(t, chunk(`{"role":"assistant","content":"Once upon"}`, "")+
		chunk(`{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Pa"}}]}`, "")+
		chunk(`{}`, "length")+usageChunk)
	msg, err := p.m.Generate(context.Background(), providertest.Turn(), nil)
	require.NoError(t, err)
	assert.Equal(t, "Once upon", msg.GetContent()[0].GetText())
	require.Len(t, msg.GetToolCalls(), 1)
	assert.Equal(t, `{"city":"Pa`, msg.GetToolCalls()[0].GetArguments())
}

// TestCharacterSplitAcrossChunks: a server that splits a character's bytes
// across two chunks streams deltas that are not UTF-8 each; the answer's
// text, their concatenation, is, and is returned.
func TestCharacterSplitAcrossChunks(t *testing.T) {
	p := serveText(t, chunk("{\"role\":\"assistant\",\"content\":\"caf\xc3\"}", "")+chunk("{\"content\":\"\xa9\"}", "")+chunk(`{}`, "stop")+usageChunk)
	var deltas []string
	msg, err := p.m.Generate(context.Background(), providertest.Turn(), func(d string) { deltas = append(deltas, d) })
	require.NoError(t, err)
	assert.Equal(t, "café", msg.GetContent()[0].GetText())
	assert.Equal(t, []string{"caf\xc3", "\xa9"}, deltas)
}

// TestRequestFaultsAreNotRetried: providertest.RequestFaults (a base URL
// with an unknown scheme, a certificate that does not verify: ErrRequest
// at once, no retry).
func TestRequestFaultsAreNotRetried(t *testing.T) {
	providertest.RequestFaults(t, factory)
}

// TestLineLongerThanTheDecoderReads: a stream line longer than the SDK's
// decoder reads (32 MiB) is a chunk that cannot be decoded, before text or
// after it: agent.ErrMalformed, one request, not a rejected request.
func TestLineLongerThanTheDecoderReads(t *testing.T) {
	huge := "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"" + strings.Repeat("a", 33<<20) + "\"}}]}\n\n"
	for name, tr := range map[string]string{
		"before text": huge + chunk(`{}`, "stop") + usageChunk,
		"after text":  chunk(`{"role":"assistant","content":"hi"}`, "") + huge + chunk(`{}`, "stop") + usageChunk,
	} {
		t.Run(name, func(t *testing.T) {
			p := serveText(t, tr)
			msg, err := p.m.Generate(context.Background(), providertest.Turn(), nil)
			require.ErrorIs(t, err, agent.ErrMalformed)
			assert.NotErrorIs(t, err, agent.ErrRequest)
			assert.Nil(t, msg)
			assert.False(t, retry.IsRetryable(err))
			assert.Len(t, p.srv.Requests(), 1)
		})
	}
}

// TestFinishAndUsageEndTheAnswer: a server (or proxy) that sends the finish
// reason and the usage and then keeps the connection open without [DONE]
// does not hold the call: Generate returns the answer without waiting for
// the body's end.
func TestFinishAndUsageEndTheAnswer(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		usage := strings.TrimSuffix(usageChunk, "data: [DONE]\n\n") // no [DONE]
		_, _ = w.Write([]byte(chunk(`{"role":"assistant","content":"Hel"}`, "") + chunk(`{"content":"lo"}`, "") + chunk(`{}`, "stop") + usage))
		w.(http.Flusher).Flush()
		select { // the connection stays open
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)
	m := factory(t, srv.URL, retry.Policy{MaxAttempts: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var deltas []string
	msg, err := m.Generate(ctx, providertest.Turn(), func(d string) { deltas = append(deltas, d) })
	require.NoError(t, err, "the answer, before the test's bound")
	assert.Equal(t, []string{"Hel", "lo"}, deltas)
	assert.Equal(t, "Hello", msg.GetContent()[0].GetText())
	assert.Equal(t, &messages.Usage{InputTokens: 3, OutputTokens: 4}, msg.GetUsage())
}

// TestUsageOnEveryChunkKeepsTheLast: from a server that sends usage on
// every chunk (vLLM's continuous_usage_stats), the finish chunk's usage is
// not the answer's: the usage chunk after it (without choices) is, and it
// ends the answer though the connection stays open.
func TestUsageOnEveryChunkKeepsTheLast(t *testing.T) {
	withUsage := func(c string, in, out int) string {
		return strings.Replace(c, `]}`, fmt.Sprintf(`],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`, in, out, in+out), 1)
	}
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte(withUsage(chunk(`{"role":"assistant","content":"Hel"}`, ""), 5, 1) +
			withUsage(chunk(`{"content":"lo"}`, ""), 5, 2) +
			withUsage(chunk(`{}`, "stop"), 5, 2) +
			withUsage(`data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m-1","choices":[]}`+"\n\n", 5, 3)))
		w.(http.Flusher).Flush()
		select { // the connection stays open, without [DONE]
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)
	m := factory(t, srv.URL, retry.Policy{MaxAttempts: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	msg, err := m.Generate(ctx, providertest.Turn(), nil)
	require.NoError(t, err, "the answer, before the test's bound")
	assert.Equal(t, "Hello", msg.GetContent()[0].GetText())
	assert.Equal(t, &messages.Usage{InputTokens: 5, OutputTokens: 3}, msg.GetUsage())
}

// TestUsageWithTheFinishReason: from a server that sends the usage with
// the finish reason and no usage chunk, the answer is read to the stream's
// end and has that usage.
func TestUsageWithTheFinishReason(t *testing.T) {
	p := serveText(t, chunk(`{"role":"assistant","content":"Hi"}`, "")+
		strings.Replace(chunk(`{}`, "stop"), `]}`, `],"usage":{"prompt_tokens":6,"completion_tokens":1,"total_tokens":7}}`, 1)+
		"data: [DONE]\n\n")
	msg, err := p.m.Generate(context.Background(), providertest.Turn(), nil)
	require.NoError(t, err)
	assert.Equal(t, "Hi", msg.GetContent()[0].GetText())
	assert.Equal(t, &messages.Usage{InputTokens: 6, OutputTokens: 1}, msg.GetUsage())
}

// usageCase is the usage chunk a server sends (its JSON) and the usage
// recorded from it.
type usageCase struct {
	usage string
	want  *messages.Usage
}

// requireUsage checks, a subtest per case, that the answer "Hi" whose
// stream ends with a usage chunk of tc.usage records tc.want as its usage.
func requireUsage(t *testing.T, cases map[string]usageCase) {
	t.Helper()
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p := serveText(t, chunk(`{"role":"assistant","content":"Hi"}`, "stop")+
				`data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m-1","choices":[],"usage":`+tc.usage+"}\n\ndata: [DONE]\n\n")
			msg, err := p.m.Generate(context.Background(), providertest.Turn(), nil)
			require.NoError(t, err)
			assert.Equal(t, tc.want, msg.GetUsage())
		})
	}
}

// TestNegativeUsageIsZero: a negative token count from a server is
// recorded as 0, the other counts as they came.
func TestNegativeUsageIsZero(t *testing.T) {
	requireUsage(t, map[string]usageCase{
		"both":   {`{"prompt_tokens":-1,"completion_tokens":-2,"total_tokens":-3}`, &messages.Usage{}},
		"input":  {`{"prompt_tokens":-5,"completion_tokens":4,"total_tokens":-1}`, &messages.Usage{OutputTokens: 4}},
		"output": {`{"prompt_tokens":3,"completion_tokens":-9223372036854775808,"total_tokens":0}`, &messages.Usage{InputTokens: 3}},
		"cached": {`{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7,"prompt_tokens_details":{"cached_tokens":-9223372036854775808}}`,
			&messages.Usage{InputTokens: 3, OutputTokens: 4}},
	})
}

// TestCachedTokensUsageIsRecorded: prompt_tokens_details.cached_tokens is
// recorded as cache_read_input_tokens and cache_write_tokens (sent by
// compatible servers, OpenRouter) as cache_creation_input_tokens, beside
// input_tokens (prompt_tokens, which includes them both); a server that
// sends no details (or null ones) records 0, and a negative count is 0.
func TestCachedTokensUsageIsRecorded(t *testing.T) {
	requireUsage(t, map[string]usageCase{
		"cached": {`{"prompt_tokens":3000,"completion_tokens":4,"total_tokens":3004,"prompt_tokens_details":{"cached_tokens":2048,"audio_tokens":0}}`,
			&messages.Usage{InputTokens: 3000, OutputTokens: 4, CacheReadInputTokens: 2048}},
		"cache write": {`{"prompt_tokens":3000,"completion_tokens":4,"total_tokens":3004,"prompt_tokens_details":{"cached_tokens":0,"cache_write_tokens":2900}}`,
			&messages.Usage{InputTokens: 3000, OutputTokens: 4, CacheCreationInputTokens: 2900}},
		"read and write": {`{"prompt_tokens":3000,"completion_tokens":4,"total_tokens":3004,"prompt_tokens_details":{"cached_tokens":2048,"cache_write_tokens":900}}`,
			&messages.Usage{InputTokens: 3000, OutputTokens: 4, CacheReadInputTokens: 2048, CacheCreationInputTokens: 900}},
		"negative write": {`{"prompt_tokens":3000,"completion_tokens":4,"total_tokens":3004,"prompt_tokens_details":{"cache_write_tokens":-1}}`,
			&messages.Usage{InputTokens: 3000, OutputTokens: 4}},
		"no details":   {`{"prompt_tokens":3000,"completion_tokens":4,"total_tokens":3004}`, &messages.Usage{InputTokens: 3000, OutputTokens: 4}},
		"null details": {`{"prompt_tokens":3000,"completion_tokens":4,"total_tokens":3004,"prompt_tokens_details":null}`, &messages.Usage{InputTokens: 3000, OutputTokens: 4}},
	})
}

// TestFinishWithoutUsageReadsToTheEnd: from a server that sends no usage,
// the answer is read to the stream's end (a usage chunk may still come
// after the finish reason), and has no usage.
func TestFinishWithoutUsageReadsToTheEnd(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte(chunk(`{"role":"assistant","content":"Hi"}`, "stop") + "data: [DONE]\n\n"))
	}))
	defer srv.Close()
	m := factory(t, srv.URL, retry.Policy{MaxAttempts: 1})
	msg, err := m.Generate(context.Background(), providertest.Turn(), nil)
	require.NoError(t, err)
	assert.Equal(t, "Hi", msg.GetContent()[0].GetText())
	assert.Nil(t, msg.GetUsage())
}

// TestOddErrorBodiesNameTheStatus: an error status whose body is not
// OpenAI's error object (a string or a number for "error", HTML, nothing)
// still fails by its status, with an error that names the provider and
// the status and wraps the SDK's *openai.Error.
func TestOddErrorBodiesNameTheStatus(t *testing.T) {
	for _, tc := range []struct {
		status int
		body   string
		want   error
	}{
		{400, `{"error":"model not found"}`, agent.ErrRequest},
		{401, `{"error":42}`, agent.ErrRequest},
		{404, `{"error":["no"]}`, agent.ErrRequest},
		{403, "<html><body>Forbidden</body></html>", agent.ErrRequest},
		{413, "", agent.ErrRequest},
		{502, `{"error":"bad gateway"}`, agent.ErrUnavailable},
		{503, "<html><body>Service Unavailable</body></html>", agent.ErrUnavailable},
	} {
		t.Run(strconv.Itoa(tc.status), func(t *testing.T) {
			p := serveText(t, "> status "+strconv.Itoa(tc.status)+"\n"+tc.body+"\n===\n> status "+strconv.Itoa(tc.status)+"\n"+tc.body+"\n===\n> status "+strconv.Itoa(tc.status)+"\n"+tc.body+"\n")
			msg, err := p.m.Generate(context.Background(), providertest.Turn(), nil)
			assert.Nil(t, msg)
			require.ErrorIs(t, err, tc.want)
			assert.Contains(t, err.Error(), "openai")
			assert.Contains(t, err.Error(), strconv.Itoa(tc.status))
			var apiErr *oai.Error
			require.ErrorAs(t, err, &apiErr)
			assert.Equal(t, tc.status, apiErr.StatusCode)
		})
	}
}

// TestInsufficientQuotaWhateverTheStatus: an error status other than 429
// whose error's type or code is insufficient_quota (compatible servers and
// proxies send a 403, a 400 or a 5xx) fails at once with
// agent.ErrRateLimited, as a 429 does: not agent.ErrRequest, and a 5xx is
// not retried.
func TestInsufficientQuotaWhateverTheStatus(t *testing.T) {
	for _, status := range []int{http.StatusBadRequest, http.StatusPaymentRequired, http.StatusForbidden, http.StatusInternalServerError, http.StatusServiceUnavailable} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			body := fmt.Sprintf("> status %d\n{\"error\":{\"message\":\"You exceeded your current quota\",\"type\":\"insufficient_quota\",\"code\":\"insufficient_quota\"}}\n", status)
			p := serveText(t, body+"===\n"+body+"===\n"+body)
			msg, err := p.m.Generate(context.Background(), providertest.Turn(), nil)
			require.ErrorIs(t, err, agent.ErrRateLimited)
			assert.NotErrorIs(t, err, agent.ErrRequest)
			assert.NotErrorIs(t, err, agent.ErrUnavailable)
			assert.Nil(t, msg)
			assert.Len(t, p.srv.Requests(), 1, "not retried")
			assert.Empty(t, p.waits())
			var apiErr *oai.Error
			require.ErrorAs(t, err, &apiErr)
			assert.Equal(t, status, apiErr.StatusCode)
		})
	}
}

// TestNullErrorInChunks: a server that sends "error": null in every chunk
// (some compatible servers do) streams an answer, not an error event; a
// chunk whose error is an object still fails.
func TestNullErrorInChunks(t *testing.T) {
	withNull := func(c string) string { return strings.Replace(c, `{"id":"c",`, `{"error":null,"id":"c",`, 1) }
	p := serveText(t, withNull(chunk(`{"role":"assistant","content":"Hel"}`, ""))+
		withNull(chunk(`{"content":"lo"}`, ""))+
		withNull(chunk(`{}`, "stop"))+withNull(usageChunk))
	var deltas []string
	msg, err := p.m.Generate(context.Background(), providertest.Turn(), func(d string) { deltas = append(deltas, d) })
	require.NoError(t, err)
	assert.Equal(t, "Hello", msg.GetContent()[0].GetText())
	assert.Equal(t, []string{"Hel", "lo"}, deltas)
	assert.Equal(t, &messages.Usage{InputTokens: 3, OutputTokens: 4}, msg.GetUsage())
	assert.Len(t, p.srv.Requests(), 1)

	p = serveText(t, withNull(chunk(`{"role":"assistant","content":"Hel"}`, ""))+
		`data: {"error":{"message":"boom","type":"server_error"}}`+"\n\n")
	_, err = p.m.Generate(context.Background(), providertest.Turn(), nil)
	require.ErrorIs(t, err, agent.ErrInterrupted, "an error object after text still fails the call")
}

// TestHugeRetryAfterFailsAtOnce: a 429 whose Retry-After is too long for a
// time.Duration is a wait past MaxRetryAfter: the call fails at once with
// agent.ErrRateLimited naming the longest wait, not retried at the backoff.
func TestHugeRetryAfterFailsAtOnce(t *testing.T) {
	body := "> status 429\n> header Retry-After: 99999999999999999999\n{\"error\":{\"message\":\"slow down\",\"type\":\"requests\",\"code\":\"rate_limit_exceeded\"}}\n"
	p := serveText(t, body+"===\n"+body+"===\n"+body)
	_, err := p.m.Generate(context.Background(), providertest.Turn(), nil)
	require.ErrorIs(t, err, agent.ErrRateLimited)
	assert.Len(t, p.srv.Requests(), 1)
	assert.Empty(t, p.waits())
	d, ok := agent.RetryAfter(err)
	assert.True(t, ok)
	assert.Equal(t, time.Duration(1<<63-1), d)
}

// TestObjectSchemaWithoutPropertiesGetsThem: a tool's schema that is an
// object with no properties ({"type":"object"}, what MCP servers list for
// a tool without arguments) is sent with an empty "properties": OpenAI
// refuses the whole request otherwise (400 "object schema missing
// properties"). A schema that has them is sent as it is. An empty schema
// ({}) or none is sent as an object with no properties: OpenAI refuses a
// function schema whose type is not "object", and llama.cpp's server a
// function without parameters.
func TestObjectSchemaWithoutPropertiesGetsThem(t *testing.T) {
	for params, want := range map[string]string{
		``:                  `{"type":"object","properties":{}}`,
		` {} `:              `{"type":"object","properties":{}}`,
		`{"type":"object"}`: `{"type":"object","properties":{}}`,
		`{"type":"object","additionalProperties":false}`:         `{"type":"object","properties":{},"additionalProperties":false}`,
		`{"type":"object","properties":{"a":{"type":"string"}}}`: `{"type":"object","properties":{"a":{"type":"string"}}}`,
		`{}`: `{"type":"object","properties":{}}`,
	} {
		p := serveText(t, chunk(`{"content":"x"}`, "stop")+usageChunk)
		turn := providertest.Turn()
		turn.Tools = []agent.ToolSpec{{Name: "no_args", Parameters: params}}
		_, err := p.m.Generate(context.Background(), turn, nil)
		require.NoError(t, err, params)
		require.Len(t, p.srv.Requests(), 1)
		var req struct {
			Tools []struct {
				Function struct {
					Parameters json.RawMessage `json:"parameters"`
				} `json:"function"`
			} `json:"tools"`
		}
		require.NoError(t, json.Unmarshal(p.srv.Requests()[0], &req))
		require.Len(t, req.Tools, 1)
		assert.JSONEq(t, want, string(req.Tools[0].Function.Parameters), params)
	}
}

// TestNameRepeatedInEveryFragment: a server that sends a call's whole
// name again in each of its fragments (MiniMax on NVIDIA NIM, Fireworks
// do) gives the call that name, not its repetition; a name split across
// fragments is still joined.
func TestNameRepeatedInEveryFragment(t *testing.T) {
	p := serveText(t, chunk(`{"role":"assistant"}`, "")+
		chunk(`{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"get_weather","arguments":""}}]}`, "")+
		chunk(`{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"get_weather","arguments":"{\"city\":"}}]}`, "")+
		chunk(`{"tool_calls":[{"index":0,"function":{"name":"get_weather","arguments":"\"Paris\"}"}}]}`, "")+
		chunk(`{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"get_","arguments":""}}]}`, "")+
		chunk(`{"tool_calls":[{"index":1,"function":{"name":"time","arguments":"{}"}}]}`, "")+
		chunk(`{}`, "tool_calls")+usageChunk)
	msg, err := p.m.Generate(context.Background(), providertest.Turn(), nil)
	require.NoError(t, err)
	require.Len(t, msg.GetToolCalls(), 2)
	assert.Equal(t, "get_weather", msg.GetToolCalls()[0].GetName())
	assert.JSONEq(t, `{"city":"Paris"}`, msg.GetToolCalls()[0].GetArguments())
	assert.Equal(t, "get_time", msg.GetToolCalls()[1].GetName())
}

// TestOneSystemMessage: the system prompt and the summary go in one
// system message, the prompt first: the chat templates of many models
// served by vLLM or llama.cpp (Mistral's, Gemma's) take a single system
// message, first, and refuse the request if another follows.
func TestOneSystemMessage(t *testing.T) {
	for name, tc := range map[string]struct{ system, summary, want string }{
		"both":        {"Be brief.", "The user lives in Paris.", "Be brief.\n\n" + openai.SummaryPrefix + "The user lives in Paris."},
		"summary":     {"", "The user lives in Paris.", openai.SummaryPrefix + "The user lives in Paris."},
		"prompt":      {"Be brief.", "", "Be brief."},
		"neither one": {"", "", ""},
		// Only whitespace is left out, as the anthropic provider does.
		"blank summary": {"Be brief.", " \n\t", "Be brief."},
		"blank prompt":  {" \n", "The user lives in Paris.", openai.SummaryPrefix + "The user lives in Paris."},
		"both blank":    {"\t", "  ", ""},
	} {
		t.Run(name, func(t *testing.T) {
			rs, err := providertest.Parse([]byte(chunk(`{"content":"x"}`, "stop") + usageChunk))
			require.NoError(t, err)
			srv := providertest.Serve(t, rs)
			m, err := openai.New(openai.Options{Model: "m", BaseURL: srv.URL, System: tc.system})
			require.NoError(t, err)
			turn := providertest.Turn()
			turn.Summary = &messages.Summary{ToSeq: 2, Content: tc.summary}
			_, err = m.Generate(context.Background(), turn, nil)
			require.NoError(t, err)
			var req struct {
				Messages []struct {
					Role    string `json:"role"`
					Content any    `json:"content"`
				} `json:"messages"`
			}
			require.NoError(t, json.Unmarshal(srv.Requests()[0], &req))
			var system []any
			for _, msg := range req.Messages {
				if msg.Role == "system" {
					system = append(system, msg.Content)
				}
			}
			if tc.want == "" {
				assert.Empty(t, system)
				return
			}
			assert.Equal(t, []any{tc.want}, system)
			assert.Equal(t, "system", req.Messages[0].Role)
		})
	}
}

// TestTopLevelErrorObject: an error status whose body is the error object
// itself, not under "error" (vLLM before it wrapped its errors sends
// {"object":"error","message":...,"type":...,"code":...}), is read as
// one: its message says a context too long, its type or code a request
// out of credit.
func TestTopLevelErrorObject(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		body   string
		want   error
	}{
		{"context length", 400, `{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the messages, 1000 in the completion).","type":"BadRequestError","param":null,"code":400}`, agent.ErrContextLength},
		{"context length 500", 500, `{"object":"error","message":"This model's maximum context length is 4096 tokens.","type":"InternalServerError","param":null,"code":500}`, agent.ErrContextLength},
		{"quota", 403, `{"object":"error","message":"out of credit","type":"insufficient_quota","param":null,"code":403}`, agent.ErrRateLimited},
		{"bad request", 400, `{"object":"error","message":"bad temperature","type":"BadRequestError","param":null,"code":400}`, agent.ErrRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := serveText(t, "> status "+strconv.Itoa(tc.status)+"\n"+tc.body+"\n===\n> status "+strconv.Itoa(tc.status)+"\n"+tc.body+"\n===\n> status "+strconv.Itoa(tc.status)+"\n"+tc.body+"\n")
			msg, err := p.m.Generate(context.Background(), providertest.Turn(), nil)
			assert.Nil(t, msg)
			require.ErrorIs(t, err, tc.want)
			assert.Len(t, p.srv.Requests(), 1, "not retried")
			var apiErr *oai.Error
			require.ErrorAs(t, err, &apiErr)
			assert.Equal(t, tc.status, apiErr.StatusCode)
		})
	}
}

// TestLegacyMaxTokens: the bound of an answer (Options.MaxTokens, or the
// conversation's) is sent as max_completion_tokens alone by default, what
// OpenAI reads; with Options.LegacyMaxTokens as max_tokens alone, for
// compatible servers that read only that.
func TestLegacyMaxTokens(t *testing.T) {
	for _, tc := range []struct {
		name        string
		legacy      bool
		settings    int64
		field, none string
		want        float64
	}{
		{"default", false, 0, "max_completion_tokens", "max_tokens", 100},
		{"default, the conversation's", false, 7, "max_completion_tokens", "max_tokens", 7},
		{"legacy", true, 0, "max_tokens", "max_completion_tokens", 100},
		{"legacy, the conversation's", true, 7, "max_tokens", "max_completion_tokens", 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs, err := providertest.Parse([]byte(chunk(`{"content":"x"}`, "stop") + usageChunk))
			require.NoError(t, err)
			srv := providertest.Serve(t, rs)
			m, err := openai.New(openai.Options{Model: "m", BaseURL: srv.URL, MaxTokens: 100, LegacyMaxTokens: tc.legacy})
			require.NoError(t, err)
			turn := providertest.Turn()
			turn.Settings.MaxTokens = tc.settings
			_, err = m.Generate(context.Background(), turn, nil)
			require.NoError(t, err)
			var req map[string]any
			require.NoError(t, json.Unmarshal(srv.Requests()[0], &req))
			assert.Equal(t, tc.want, req[tc.field])
			assert.NotContains(t, req, tc.none)
		})
	}
}

// TestFirstMessageAfterSystemIsTheUsers: a context that starts with the
// assistant's message (the first event after a summary that ended at a
// user message or a tool result) is sent after a short user message,
// LeadAfterSummary with a summary and LeadWithoutSummary without (or with
// a blank one): the chat templates of Mistral, Gemma and Llama 2 models,
// as vLLM and llama.cpp serve them, refuse a conversation whose first
// message after the system's is not the user's, on every turn. The
// assistant's call keeps its result right after it, and a context that
// starts with the user's is sent as it is.
func TestFirstMessageAfterSystemIsTheUsers(t *testing.T) {
	asst := func(seq uint64, text string, calls ...*messages.ToolCall) *messages.Event {
		a := &messages.AssistantMessage{ToolCalls: calls}
		if text != "" {
			a.Content = []*messages.ContentPart{textPart(text)}
		}
		return &messages.Event{Seq: seq, Body: &messages.Event_AssistantMsg{AssistantMsg: a}}
	}
	call := &messages.ToolCall{Id: "call_r1", ProviderId: "p1", Name: "get_weather", Arguments: `{"city":"Paris"}`}
	result := docResult(6, "call_r1", &messages.ToolOutcome{Outcome: &messages.ToolOutcome_Content{Content: `{"temp":21}`}})
	type msg struct{ role, content, call string }
	for _, tc := range []struct {
		name    string
		summary string
		context []*messages.Event
		want    []msg
	}{
		{"text after a summary", "The user lives in Paris.",
			[]*messages.Event{asst(3, "It is sunny."), docUser(4, textPart("and?"))},
			[]msg{{"user", openai.LeadAfterSummary, ""}, {"assistant", "It is sunny.", ""}, {"user", "and?", ""}}},
		{"tool call without a summary", "",
			[]*messages.Event{asst(3, "", call), result},
			[]msg{{"user", openai.LeadWithoutSummary, ""}, {"assistant", "", "call_r1"}, {"tool", `{"temp":21}`, "call_r1"}}},
		{"blank summary", " \n",
			[]*messages.Event{asst(3, "Let me check.", call), result, docUser(7, textPart("and?"))},
			[]msg{{"user", openai.LeadWithoutSummary, ""}, {"assistant", "Let me check.", "call_r1"}, {"tool", `{"temp":21}`, "call_r1"}, {"user", "and?", ""}}},
		{"orphan result left out", "The user lives in Paris.",
			[]*messages.Event{docResult(2, "call_gone", &messages.ToolOutcome{Outcome: &messages.ToolOutcome_Content{Content: "x"}}), asst(4, "", call), result},
			[]msg{{"user", openai.LeadAfterSummary, ""}, {"assistant", "", "call_r1"}, {"tool", `{"temp":21}`, "call_r1"}}},
		{"user first is sent as it is", "The user lives in Paris.",
			[]*messages.Event{docUser(3, textPart("hi")), asst(4, "", call), result},
			[]msg{{"user", "hi", ""}, {"assistant", "", "call_r1"}, {"tool", `{"temp":21}`, "call_r1"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := serveText(t, chunk(`{"content":"ok"}`, "stop")+usageChunk)
			turn := providertest.Turn()
			turn.Summary = &messages.Summary{ToSeq: 2, Content: tc.summary}
			turn.Context = tc.context
			_, err := p.m.Generate(context.Background(), turn, nil)
			require.NoError(t, err)
			var req struct {
				Messages []struct {
					Role       string `json:"role"`
					Content    string `json:"content"`
					ToolCallID string `json:"tool_call_id"`
					ToolCalls  []struct {
						ID string `json:"id"`
					} `json:"tool_calls"`
				} `json:"messages"`
			}
			require.NoError(t, json.Unmarshal(p.srv.Requests()[0], &req))
			var got []msg
			for _, m := range req.Messages {
				if m.Role == "system" {
					continue
				}
				id := m.ToolCallID
				for _, c := range m.ToolCalls {
					id += c.ID
				}
				got = append(got, msg{m.Role, m.Content, id})
			}
			assert.Equal(t, tc.want, got)
		})
	}
}
