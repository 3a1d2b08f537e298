package anthropic_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/anthropics/anthropic-sdk-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/anthropic"
	"github.com/lazarusrt/lazarus/agent/openai"
	"github.com/lazarusrt/lazarus/agent/providertest"
	"github.com/lazarusrt/lazarus/agent/retry"
	"github.com/lazarusrt/lazarus/messages"
)

func ev(typ, data string) string { return "event: " + typ + "\ndata: " + data + "\n\n" }

var (
	start     = ev("message_start", `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-x","content":[],"stop_reason":null,"usage":{"input_tokens":7,"output_tokens":1}}}`)
	textStart = ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`)
)

func textDelta(s string) string {
	return ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"`+s+`"}}`)
}

func stopWith(reason string) string {
	return ev("message_delta", `{"type":"message_delta","delta":{"stop_reason":"`+reason+`","stop_sequence":null},"usage":{"output_tokens":9}}`) +
		ev("message_stop", `{"type":"message_stop"}`)
}

func errEvent(typ, msg string) string {
	return ev("error", `{"type":"error","error":{"type":"`+typ+`","message":"`+msg+`"}}`)
}

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

// TestFailureOutcomes: each failure has its sentinel (or is retried into
// a success), its number of requests and its waits.
func TestFailureOutcomes(t *testing.T) {
	ok := start + textStart + textDelta("ok") + stopWith("end_turn")
	for _, tc := range []struct {
		name     string
		tr       string
		want     error
		requests int
		sleeps   []time.Duration
	}{
		{"overloaded event before text", start + errEvent("overloaded_error", "Overloaded") + "\n===\n" + ok, nil, 2, []time.Duration{providertest.Backoff}},
		{"invalid request event before text", start + errEvent("invalid_request_error", "odd") + "\n===\n" + ok, agent.ErrRequest, 1, nil},
		{"invalid request event after text", start + textStart + textDelta("hi") + errEvent("invalid_request_error", "odd"), agent.ErrRequest, 1, nil},
		{"authentication event", start + errEvent("authentication_error", "invalid x-api-key") + "\n===\n" + ok, agent.ErrRequest, 1, nil},
		{"permission event", start + errEvent("permission_error", "no") + "\n===\n" + ok, agent.ErrRequest, 1, nil},
		{"not found event", start + errEvent("not_found_error", "no model") + "\n===\n" + ok, agent.ErrRequest, 1, nil},
		{"too large event", start + errEvent("request_too_large", "big") + "\n===\n" + ok, agent.ErrRequest, 1, nil},
		{"billing event", start + errEvent("billing_error", "no credit") + "\n===\n" + ok, agent.ErrRequest, 1, nil},
		{"api error event before text", start + errEvent("api_error", "Internal") + "\n===\n" + ok, nil, 2, []time.Duration{providertest.Backoff}},
		{"timeout event before text", start + errEvent("timeout_error", "slow") + "\n===\n" + ok, nil, 2, []time.Duration{providertest.Backoff}},
		{"unknown event before text", start + errEvent("frobnicate_error", "odd") + "\n===\n" + ok, nil, 2, []time.Duration{providertest.Backoff}},
		{"too long event", start + errEvent("invalid_request_error", "prompt is too long: 300000 tokens > 200000 maximum"), agent.ErrContextLength, 1, nil},
		{"rate limit event before text", start + errEvent("rate_limit_error", "slow") + "\n===\n" + ok, nil, 2, []time.Duration{providertest.Backoff}},
		{"overloaded event after text", start + textStart + textDelta("hi") + errEvent("overloaded_error", "Overloaded"), agent.ErrInterrupted, 1, nil},
		{"408 from a proxy", "> status 408\n{}\n===\n" + ok, nil, 2, []time.Duration{providertest.Backoff}},
		{"529", "> status 529\n{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n===\n" + ok, nil, 2, []time.Duration{providertest.Backoff}},
		{"429 no retry-after", "> status 429\n{\"type\":\"error\",\"error\":{\"type\":\"rate_limit_error\",\"message\":\"slow\"}}\n===\n> status 429\n{}\n===\n> status 429\n{}\n", agent.ErrRateLimited, 3, []time.Duration{providertest.Backoff, 2 * providertest.Backoff}},
		{"429 retry-after-ms", "> status 429\n> header retry-after-ms: 1500\n> header Retry-After: 9\n{\"type\":\"error\",\"error\":{\"type\":\"rate_limit_error\",\"message\":\"slow\"}}\n===\n" + ok, nil, 2, []time.Duration{1500 * time.Millisecond}},
		{"503 retry-after", "> status 503\n> header Retry-After: 3\n{}\n===\n" + ok, nil, 2, []time.Duration{3 * time.Second}},
		{"409", "> status 409\n{\"type\":\"error\",\"error\":{\"type\":\"conflict_error\",\"message\":\"conflict\"}}\n===\n" + ok, nil, 2, []time.Duration{providertest.Backoff}},
		{"404", "> status 404\n{\"type\":\"error\",\"error\":{\"type\":\"not_found_error\",\"message\":\"no model\"}}\n", agent.ErrRequest, 1, nil},
		{"413", "> status 413\n{\"type\":\"error\",\"error\":{\"type\":\"request_too_large\",\"message\":\"big\"}}\n", agent.ErrRequest, 1, nil},
		{"403", "> status 403\n{\"type\":\"error\",\"error\":{\"type\":\"permission_error\",\"message\":\"no\"}}\n", agent.ErrRequest, 1, nil},
		{"400", "> status 400\n{\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\",\"message\":\"bad\"}}\n", agent.ErrRequest, 1, nil},
		{"400 input and max_tokens too long", "> status 400\n{\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\",\"message\":\"input length and `max_tokens` exceed context limit: 178959 + 64000 > 200000, decrease input length or `max_tokens` and try again\"}}\n", agent.ErrContextLength, 1, nil},
		{"400 too long", "> status 400\n{\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\",\"message\":\"prompt is too long: 300000 tokens > 200000 maximum\"}}\n", agent.ErrContextLength, 1, nil},
		{"500 too long", "> status 500\n{\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"prompt is too long: 300000 tokens > 200000 maximum\"}}\n===\n" + ok, agent.ErrContextLength, 1, nil},
		{"api error event too long", start + errEvent("api_error", "prompt is too long: 300000 tokens > 200000 maximum") + "\n===\n" + ok, agent.ErrContextLength, 1, nil},
		{"context window stop", start + textStart + textDelta("hi") + stopWith("model_context_window_exceeded"), agent.ErrContextLength, 1, nil},
		{"refusal stop", start + textStart + textDelta("no") + stopWith("refusal"), agent.ErrRefused, 1, nil},
		{"cut after text", start + textStart + textDelta("hi"), agent.ErrIncomplete, 1, nil},
		{"cut before text", start, agent.ErrIncomplete, 1, nil},
		{"wrong type", start + ev("content_block_delta", `[1,2]`) + stopWith("end_turn"), agent.ErrMalformed, 1, nil},
		{"malformed after text", start + textStart + textDelta("hi") + ev("content_block_delta", `{"type":"content_block_delta","index":0,`) + stopWith("end_turn"), agent.ErrMalformed, 1, nil},
		{"text into a tool_use", start + ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_a","name":"get_time","input":{}}}`) + textDelta("hi") + stopWith("tool_use"), agent.ErrMalformed, 1, nil},
		{"input into a text block", start + textStart + ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{}"}}`) + stopWith("end_turn"), agent.ErrMalformed, 1, nil},
		{"text not UTF-8", start + textStart + textDelta("a\xffb") + stopWith("end_turn"), agent.ErrMalformed, 1, nil},
		{"model name not UTF-8", strings.Replace(start, `"claude-x"`, "\"claude\xff\"", 1) + textStart + textDelta("hi") + stopWith("end_turn"), agent.ErrMalformed, 1, nil},
		{"call id not UTF-8", start + ev("content_block_start", strings.Replace(`{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_X","name":"get_time","input":{}}}`, "X", "\xff", 1)) + stopWith("tool_use"), agent.ErrMalformed, 1, nil},
		{"reset after empty delta", "> reset\n" + start + textStart + textDelta("") + "\n===\n" + ok, nil, 2, []time.Duration{providertest.Backoff}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := serveText(t, tc.tr)
			msg, err := p.m.Generate(context.Background(), providertest.Turn(), nil)
			if tc.want == nil {
				require.NoError(t, err)
				assert.Equal(t, "ok", msg.GetContent()[0].GetText())
			} else {
				require.ErrorIs(t, err, tc.want)
				assert.Nil(t, msg)
				assert.False(t, retry.IsRetryable(err))
			}
			assert.Len(t, p.srv.Requests(), tc.requests)
			assert.Equal(t, tc.sleeps, p.waits())
		})
	}
}

// TestToolUseBlocks: several tool_use blocks become calls in block order,
// one without input "{}"; usage and model are recorded.
func TestToolUseBlocks(t *testing.T) {
	p := serveText(t, start+
		ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_a","name":"get_time","input":{}}}`)+
		ev("content_block_start", `{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_b","name":"get_weather","input":{}}}`)+
		ev("content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"ci"}}`)+
		ev("content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"ty\":\"Oslo\"}"}}`)+
		stopWith("tool_use"))
	msg, err := p.m.Generate(context.Background(), providertest.Turn(), nil)
	require.NoError(t, err)
	require.Len(t, msg.GetToolCalls(), 2)
	assert.Equal(t, "{}", msg.GetToolCalls()[0].GetArguments())
	assert.Equal(t, "toolu_a", msg.GetToolCalls()[0].GetProviderId())
	assert.JSONEq(t, `{"city":"Oslo"}`, msg.GetToolCalls()[1].GetArguments())
	assert.Equal(t, &messages.Usage{InputTokens: 7, OutputTokens: 9}, msg.GetUsage())
	assert.Equal(t, "claude-x", msg.GetModel())
}

// TestErrorResultIsError: an error outcome is a tool_result marked
// is_error, in the user message with the text after it; tool choice auto.
func TestErrorResultIsError(t *testing.T) {
	p := serveText(t, start+textStart+textDelta("ok")+stopWith("end_turn"))
	turn := providertest.Turn()
	turn.Context[2].GetToolResult().Outcome = &messages.ToolOutcome{Outcome: &messages.ToolOutcome_Error{Error: &messages.ToolError{Code: "boom", Message: "bad"}}}
	turn.Context = append(turn.Context, &messages.Event{Seq: 7, Body: &messages.Event_UserMsg{UserMsg: &messages.UserMessage{Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: "and?"}}}}}})
	turn.Settings.ToolChoice = agent.ToolChoiceAuto
	_, err := p.m.Generate(context.Background(), turn, nil)
	require.NoError(t, err)
	var req struct {
		ToolChoice map[string]any `json:"tool_choice"`
		Messages   []struct {
			Role    string
			Content []struct {
				Type    string `json:"type"`
				IsError bool   `json:"is_error"`
				Content any    `json:"content"`
				Text    string `json:"text"`
			}
		}
	}
	require.NoError(t, json.Unmarshal(p.srv.Requests()[0], &req))
	require.Len(t, req.Messages, 3)
	require.Len(t, req.Messages[2].Content, 2)
	assert.Equal(t, "tool_result", req.Messages[2].Content[0].Type)
	assert.True(t, req.Messages[2].Content[0].IsError)
	assert.Equal(t, "text", req.Messages[2].Content[1].Type)
	assert.Equal(t, "auto", req.ToolChoice["type"])
}

// TestCancelMidStream: a cancel while the answer streams ends the call
// with ctx.Err(), not retried.
func TestCancelMidStream(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte(start + textStart + textDelta("Partial")))
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

// TestModelNameFallsBackToTheOneAskedFor: when message_start names no
// model, the message records the model asked for, the conversation's own
// (Settings.Model) over the options'.
func TestModelNameFallsBackToTheOneAskedFor(t *testing.T) {
	p := serveText(t, strings.ReplaceAll(start, `"model":"claude-x",`, "")+textStart+textDelta("ok")+stopWith("end_turn"))
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

// TestNewReadsNoEnvironment: the SDK's client reads ANTHROPIC_BASE_URL,
// ANTHROPIC_AUTH_TOKEN, ANTHROPIC_PROFILE (a file) and more; New reads none
// of them (OptionsFromEnv is the only reader). An empty BaseURL is
// Anthropic's public API, and an empty APIKey sends the request without a
// key (to a local server), where the SDK refused it for want of credentials.
func TestNewReadsNoEnvironment(t *testing.T) {
	for name, env := range map[string]map[string]string{
		"base url and token": {"ANTHROPIC_BASE_URL": "http://elsewhere.invalid", "ANTHROPIC_AUTH_TOKEN": "env-token"},
		"profile":            {"ANTHROPIC_PROFILE": "no-such-profile"},
		"nothing":            {},
	} {
		t.Run(name, func(t *testing.T) {
			t.Setenv("ANTHROPIC_API_KEY", "")
			for k, v := range env {
				t.Setenv(k, v)
			}
			rec := &recorder{}
			m, err := anthropic.New(anthropic.Options{Model: "claude-x", HTTPClient: &http.Client{Transport: rec},
				Retry: retry.Policy{MaxAttempts: 1}})
			require.NoError(t, err)
			_, err = m.Generate(context.Background(), providertest.Turn(), nil)
			require.ErrorContains(t, err, "recorder: no network", "the request was sent")
			require.Len(t, rec.reqs, 1)
			req := rec.reqs[0]
			assert.Equal(t, "api.anthropic.com", req.URL.Host)
			assert.Empty(t, req.Header.Get("Authorization"))
			assert.Empty(t, req.Header.Get("X-Api-Key"))
		})
	}
}

// TestMaxTokensStopIsAnAnswer: a stop at the token bound (max_tokens) is
// the server's end of the answer, not a broken stream: the message holds
// what the model wrote up to the bound, a tool call cut there with its
// input as far as it came (not JSON: the runtime answers it with an
// invalid error result).
func TestMaxTokensStopIsAnAnswer(t *testing.T) {
	p := serveText(t, start+textStart+textDelta("Once upon")+
		ev("content_block_start", `{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{}}}`)+
		ev("content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"city\":\"Pa"}}`)+
		stopWith("max_tokens"))
	msg, err := p.m.Generate(context.Background(), providertest.Turn(), nil)
	require.NoError(t, err)
	assert.Equal(t, "Once upon", msg.GetContent()[0].GetText())
	require.Len(t, msg.GetToolCalls(), 1)
	assert.Equal(t, `{"city":"Pa`, msg.GetToolCalls()[0].GetArguments())
}

// TestCharacterSplitAcrossDeltas: a server that splits a character's
// bytes across two text deltas streams deltas that are not UTF-8 each;
// the answer's text, their concatenation, is, and is returned.
func TestCharacterSplitAcrossDeltas(t *testing.T) {
	p := serveText(t, start+textStart+textDelta("caf\xc3")+textDelta("\xa9")+stopWith("end_turn"))
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
// decoder reads (32 MiB) is an event that cannot be decoded, before text or
// after it: agent.ErrMalformed, one request, not a rejected request.
func TestLineLongerThanTheDecoderReads(t *testing.T) {
	huge := textDelta(strings.Repeat("a", 33<<20))
	for name, tr := range map[string]string{
		"before text": start + textStart + huge + stopWith("end_turn"),
		"after text":  start + textStart + textDelta("hi") + huge + stopWith("end_turn"),
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

// TestMessageStopEndsTheAnswer: message_stop is the stream's last event;
// a server (or proxy) that keeps the connection open after it does not hold
// the call: Generate returns the answer without waiting for the body's end.
func TestMessageStopEndsTheAnswer(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte(start + textStart + textDelta("Hel") + textDelta("lo") + stopWith("end_turn")))
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
	assert.Equal(t, &messages.Usage{InputTokens: 7, OutputTokens: 9}, msg.GetUsage())
}

// TestNegativeUsageIsZero: a negative token count from a server, in
// message_start or message_delta, is recorded as 0 (a negative input or
// cache count in message_delta keeps message_start's), the other counts as
// they came.
func TestNegativeUsageIsZero(t *testing.T) {
	for name, tc := range map[string]struct {
		start, delta string
		want         *messages.Usage
	}{
		"start":           {`"input_tokens":-7,"output_tokens":-1`, `"output_tokens":9`, &messages.Usage{OutputTokens: 9}},
		"delta output":    {`"input_tokens":7,"output_tokens":1`, `"output_tokens":-9`, &messages.Usage{InputTokens: 7}},
		"delta input":     {`"input_tokens":7,"output_tokens":1`, `"input_tokens":-3,"output_tokens":2`, &messages.Usage{InputTokens: 7, OutputTokens: 2}},
		"start, no delta": {`"input_tokens":-9223372036854775808,"output_tokens":-2`, ``, &messages.Usage{}},
		"start cache": {`"input_tokens":7,"output_tokens":1,"cache_read_input_tokens":-5,"cache_creation_input_tokens":-9223372036854775808`, `"output_tokens":2`,
			&messages.Usage{InputTokens: 7, OutputTokens: 2}},
		"delta cache": {`"input_tokens":7,"output_tokens":1,"cache_read_input_tokens":50,"cache_creation_input_tokens":60`, `"output_tokens":2,"cache_read_input_tokens":-5,"cache_creation_input_tokens":-6`,
			&messages.Usage{InputTokens: 7, OutputTokens: 2, CacheReadInputTokens: 50, CacheCreationInputTokens: 60}},
	} {
		t.Run(name, func(t *testing.T) {
			delta := ""
			if tc.delta != "" {
				delta = `,"usage":{` + tc.delta + `}`
			}
			p := serveText(t, strings.Replace(start, `"input_tokens":7,"output_tokens":1`, tc.start, 1)+textStart+textDelta("ok")+
				ev("message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null}`+delta+`}`)+
				ev("message_stop", `{"type":"message_stop"}`))
			msg, err := p.m.Generate(context.Background(), providertest.Turn(), nil)
			require.NoError(t, err)
			assert.Equal(t, tc.want, msg.GetUsage())
		})
	}
}

// TestCacheUsageIsRecorded: the prompt cache's counts, from message_start
// (where the Messages API sends them) or message_delta (cumulative: a
// positive count there replaces message_start's), are recorded beside
// input_tokens, which excludes them; a count not reported is 0. The
// creation count is cache_creation_input_tokens, the total that the
// per-TTL cache_creation breakdown details, not added to it again.
func TestCacheUsageIsRecorded(t *testing.T) {
	for name, tc := range map[string]struct {
		start, delta string
		want         *messages.Usage
	}{
		"start": {`"input_tokens":7,"output_tokens":1,"cache_creation_input_tokens":300,"cache_read_input_tokens":2000`, `"output_tokens":9`,
			&messages.Usage{InputTokens: 7, OutputTokens: 9, CacheReadInputTokens: 2000, CacheCreationInputTokens: 300}},
		"delta": {`"input_tokens":0,"output_tokens":1,"cache_creation_input_tokens":0,"cache_read_input_tokens":0`,
			`"input_tokens":7,"output_tokens":9,"cache_creation_input_tokens":300,"cache_read_input_tokens":2000`,
			&messages.Usage{InputTokens: 7, OutputTokens: 9, CacheReadInputTokens: 2000, CacheCreationInputTokens: 300}},
		"delta zero keeps start": {`"input_tokens":7,"output_tokens":1,"cache_creation_input_tokens":300,"cache_read_input_tokens":2000`,
			`"output_tokens":9,"cache_creation_input_tokens":0,"cache_read_input_tokens":0`,
			&messages.Usage{InputTokens: 7, OutputTokens: 9, CacheReadInputTokens: 2000, CacheCreationInputTokens: 300}},
		"per-TTL breakdown": {`"input_tokens":7,"output_tokens":1,"cache_creation_input_tokens":300,"cache_creation":{"ephemeral_5m_input_tokens":100,"ephemeral_1h_input_tokens":200}`,
			`"output_tokens":9`, &messages.Usage{InputTokens: 7, OutputTokens: 9, CacheCreationInputTokens: 300}},
		"creation only": {`"input_tokens":7,"output_tokens":1,"cache_creation_input_tokens":300`, `"output_tokens":9`,
			&messages.Usage{InputTokens: 7, OutputTokens: 9, CacheCreationInputTokens: 300}},
		"not reported": {`"input_tokens":7,"output_tokens":1`, `"output_tokens":9`, &messages.Usage{InputTokens: 7, OutputTokens: 9}},
	} {
		t.Run(name, func(t *testing.T) {
			p := serveText(t, strings.Replace(start, `"input_tokens":7,"output_tokens":1`, tc.start, 1)+textStart+textDelta("ok")+
				ev("message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{`+tc.delta+`}}`)+
				ev("message_stop", `{"type":"message_stop"}`))
			msg, err := p.m.Generate(context.Background(), providertest.Turn(), nil)
			require.NoError(t, err)
			assert.Equal(t, tc.want, msg.GetUsage())
		})
	}
}

// TestTextIsTheDeltasInTheirOrder: the answer's text is the concatenation
// of the deltas onDelta saw, in their order, even from a server that
// interleaves the deltas of two text blocks (the Messages API streams
// blocks one after the other).
func TestTextIsTheDeltasInTheirOrder(t *testing.T) {
	delta := func(index, s string) string {
		return ev("content_block_delta", `{"type":"content_block_delta","index":`+index+`,"delta":{"type":"text_delta","text":"`+s+`"}}`)
	}
	p := serveText(t, start+textStart+
		ev("content_block_start", `{"type":"content_block_start","index":1,"content_block":{"type":"text","text":"B"}}`)+
		delta("0", "A")+delta("1", "C")+delta("0", "D")+stopWith("end_turn"))
	var deltas []string
	msg, err := p.m.Generate(context.Background(), providertest.Turn(), func(d string) { deltas = append(deltas, d) })
	require.NoError(t, err)
	assert.Equal(t, []string{"B", "A", "C", "D"}, deltas)
	assert.Equal(t, strings.Join(deltas, ""), msg.GetContent()[0].GetText())
}

// TestOddErrorBodiesNameTheStatus: an error status whose body is not the
// API's error object (a string or a number for "error", HTML, nothing)
// still fails by its status, with an error that names the provider and
// the status and wraps the SDK's *anthropic.Error.
func TestOddErrorBodiesNameTheStatus(t *testing.T) {
	for _, tc := range []struct {
		status int
		body   string
		want   error
	}{
		{400, `{"error":"model not found"}`, agent.ErrRequest},
		{401, `{"type":"error","error":42}`, agent.ErrRequest},
		{404, `{"error":["no"]}`, agent.ErrRequest},
		{403, "<html><body>Forbidden</body></html>", agent.ErrRequest},
		{413, "", agent.ErrRequest},
		{502, `{"error":"bad gateway"}`, agent.ErrUnavailable},
		{503, "<html><body>Service Unavailable</body></html>", agent.ErrUnavailable},
	} {
		t.Run(strconv.Itoa(tc.status), func(t *testing.T) {
			r := "> status " + strconv.Itoa(tc.status) + "\n" + tc.body + "\n"
			p := serveText(t, r+"===\n"+r+"===\n"+r)
			msg, err := p.m.Generate(context.Background(), providertest.Turn(), nil)
			assert.Nil(t, msg)
			require.ErrorIs(t, err, tc.want)
			assert.Contains(t, err.Error(), "anthropic")
			assert.Contains(t, err.Error(), strconv.Itoa(tc.status))
			var apiErr *sdk.Error
			require.ErrorAs(t, err, &apiErr)
			assert.Equal(t, tc.status, apiErr.StatusCode)
		})
	}
}

// TestWhitespaceOnlyTextIsNotSent: the API refuses a text block that is
// empty or only whitespace (400: "text content blocks must contain
// non-whitespace text"), on every later call of the conversation once the
// log holds one. An answer's text of only whitespace (Claude may write
// "\n\n" before its tool_use) and a user message of only whitespace are
// left out of the history, as empty text is.
func TestWhitespaceOnlyTextIsNotSent(t *testing.T) {
	p := serveText(t, start+textStart+textDelta("ok")+stopWith("end_turn"))
	turn := providertest.Turn()
	turn.Context[1].GetAssistantMsg().Content = []*messages.ContentPart{docText("\n\n")}
	turn.Context = append(turn.Context,
		&messages.Event{Seq: 7, Body: &messages.Event_AssistantMsg{AssistantMsg: &messages.AssistantMessage{Content: []*messages.ContentPart{docText(" \n")}}}},
		docUser(8, docText(" \t")),
		docUser(9, docText("and?")))
	_, err := p.m.Generate(context.Background(), turn, nil)
	require.NoError(t, err)
	var req struct {
		Messages []struct {
			Role    string
			Content []struct {
				Type string `json:"type"`
				Text string `json:"text"`
			}
		}
	}
	require.NoError(t, json.Unmarshal(p.srv.Requests()[0], &req))
	var texts []string
	for _, m := range req.Messages {
		for _, c := range m.Content {
			if c.Type == "text" {
				assert.NotEmpty(t, strings.TrimSpace(c.Text), "a %s message's text block", m.Role)
				texts = append(texts, c.Text)
			}
		}
	}
	require.Len(t, req.Messages, 3)
	assert.Equal(t, []string{"user", "assistant", "user"}, []string{req.Messages[0].Role, req.Messages[1].Role, req.Messages[2].Role})
	assert.Equal(t, "tool_use", req.Messages[1].Content[0].Type)
	assert.Equal(t, "and?", texts[len(texts)-1])
}

// TestWhitespaceOnlySystemIsNotSent: a system prompt or a summary of only
// whitespace is not sent as a system block (the API refuses a blank text
// block there too, 400); the other is still sent.
func TestWhitespaceOnlySystemIsNotSent(t *testing.T) {
	for _, tc := range []struct {
		name, system, summary string
		want                  []string
	}{
		{"both blank", " \n\t", "\n\n", nil},
		{"blank prompt", " \n", "The user lives in Paris.", []string{openai.SummaryPrefix + "The user lives in Paris."}},
		{"blank summary", "Be brief.", " ", []string{"Be brief."}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := serveText(t, start+textStart+textDelta("ok")+stopWith("end_turn"))
			turn := providertest.Turn()
			turn.Settings.SystemPrompt = tc.system
			turn.Summary.Content = tc.summary
			_, err := p.m.Generate(context.Background(), turn, nil)
			require.NoError(t, err)
			var req struct {
				System []struct {
					Text string `json:"text"`
				} `json:"system"`
			}
			require.NoError(t, json.Unmarshal(p.srv.Requests()[0], &req))
			var got []string
			for _, b := range req.System {
				got = append(got, b.Text)
			}
			assert.Equal(t, tc.want, got)
		})
	}
}

// TestFirstMessageIsTheUsers: a context that starts with the assistant's
// message (the first event after a summary that ended at a user message or
// a tool result) is sent after a short user message, LeadAfterSummary with
// a summary and LeadWithoutSummary without: Bedrock and some proxies refuse
// a first message in another role (400), on every turn. The assistant's
// tool_use keeps its tool_result in the next user message, and a context
// that starts with the user's is sent as it is.
func TestFirstMessageIsTheUsers(t *testing.T) {
	asst := func(seq uint64, text string, calls ...*messages.ToolCall) *messages.Event {
		a := &messages.AssistantMessage{ToolCalls: calls}
		if text != "" {
			a.Content = []*messages.ContentPart{docText(text)}
		}
		return &messages.Event{Seq: seq, Body: &messages.Event_AssistantMsg{AssistantMsg: a}}
	}
	call := &messages.ToolCall{Id: "call_r1", ProviderId: "toolu_p1", Name: "get_weather", Arguments: `{"city":"Paris"}`}
	result := docResult(6, "call_r1", &messages.ToolOutcome{Outcome: &messages.ToolOutcome_Content{Content: `{"temp":21}`}})
	type msg struct{ role, first, text, id string }
	for _, tc := range []struct {
		name    string
		summary string
		context []*messages.Event
		want    []msg
	}{
		{"text after a summary", "The user lives in Paris.",
			[]*messages.Event{asst(3, "It is sunny."), docUser(4, docText("and?"))},
			[]msg{{"user", "text", openai.LeadAfterSummary, ""}, {"assistant", "text", "It is sunny.", ""}, {"user", "text", "and?", ""}}},
		{"tool call without a summary", "",
			[]*messages.Event{asst(3, "", call), result},
			[]msg{{"user", "text", openai.LeadWithoutSummary, ""}, {"assistant", "tool_use", "", "call_r1"}, {"user", "tool_result", "", "call_r1"}}},
		{"blank summary", " \n",
			[]*messages.Event{asst(3, "Let me check.", call), result, docUser(7, docText("and?"))},
			[]msg{{"user", "text", openai.LeadWithoutSummary, ""}, {"assistant", "text", "Let me check.", ""}, {"user", "tool_result", "", "call_r1"}}},
		{"orphan result and blank user text left out", "The user lives in Paris.",
			[]*messages.Event{docResult(2, "call_gone", &messages.ToolOutcome{Outcome: &messages.ToolOutcome_Content{Content: "x"}}), docUser(3, docText(" ")), asst(4, "", call), result},
			[]msg{{"user", "text", openai.LeadAfterSummary, ""}, {"assistant", "tool_use", "", "call_r1"}, {"user", "tool_result", "", "call_r1"}}},
		{"user first is sent as it is", "The user lives in Paris.",
			[]*messages.Event{docUser(3, docText("hi")), asst(4, "", call), result},
			[]msg{{"user", "text", "hi", ""}, {"assistant", "tool_use", "", "call_r1"}, {"user", "tool_result", "", "call_r1"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := serveText(t, start+textStart+textDelta("ok")+stopWith("end_turn"))
			turn := providertest.Turn()
			turn.Summary.Content = tc.summary
			turn.Context = tc.context
			_, err := p.m.Generate(context.Background(), turn, nil)
			require.NoError(t, err)
			var req struct {
				Messages []struct {
					Role    string
					Content []struct {
						Type      string `json:"type"`
						Text      string `json:"text"`
						ID        string `json:"id"`
						ToolUseID string `json:"tool_use_id"`
					}
				}
			}
			require.NoError(t, json.Unmarshal(p.srv.Requests()[0], &req))
			var got []msg
			for _, m := range req.Messages {
				require.NotEmpty(t, m.Content, "a %s message", m.Role)
				c := m.Content[0]
				got = append(got, msg{m.Role, c.Type, c.Text, c.ID + c.ToolUseID})
			}
			assert.Equal(t, tc.want, got)
		})
	}
}
