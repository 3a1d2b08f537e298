package openai_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	oai "github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/openai"
	"github.com/lazarusrt/lazarus/agent/providertest"
	"github.com/lazarusrt/lazarus/agent/retry"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// TestDocsCallsReturnedInIndexOrder: calls are "returned in index order",
// whatever order their first fragments arrive in.
func TestDocsCallsReturnedInIndexOrder(t *testing.T) {
	p := serveText(t, chunk(`{"role":"assistant"}`, "")+
		chunk(`{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"get_time","arguments":"{\"tz\":\"UTC\"}"}}]}`, "")+
		chunk(`{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"get_weather","arguments":"{\"city\":"}}]}`, "")+
		chunk(`{"tool_calls":[{"index":1,"function":{"arguments":""}}]}`, "")+
		chunk(`{"tool_calls":[{"index":0,"function":{"arguments":"\"Paris\"}"}}]}`, "")+
		chunk(`{}`, "tool_calls")+usageChunk)
	msg, err := p.m.Generate(context.Background(), providertest.Turn(), nil)
	require.NoError(t, err)
	require.Len(t, msg.GetToolCalls(), 2)
	assert.Equal(t, "call_a", msg.GetToolCalls()[0].GetProviderId())
	assert.Equal(t, "get_weather", msg.GetToolCalls()[0].GetName())
	assert.JSONEq(t, `{"city":"Paris"}`, msg.GetToolCalls()[0].GetArguments())
	assert.Equal(t, "call_b", msg.GetToolCalls()[1].GetProviderId())
	assert.JSONEq(t, `{"tz":"UTC"}`, msg.GetToolCalls()[1].GetArguments())
	for _, c := range msg.GetToolCalls() {
		assert.Empty(t, c.GetId(), "the runtime mints ids")
	}
}

func docUser(seq uint64, parts ...*messages.ContentPart) *messages.Event {
	return &messages.Event{Seq: seq, Body: &messages.Event_UserMsg{UserMsg: &messages.UserMessage{Content: parts}}}
}

func textPart(s string) *messages.ContentPart {
	return &messages.ContentPart{Part: &messages.ContentPart_Text{Text: s}}
}

func docResult(seq uint64, id string, o *messages.ToolOutcome) *messages.Event {
	return &messages.Event{Seq: seq, Body: &messages.Event_ToolResult{ToolResult: &messages.ToolResultEvent{ToolCallId: id, Outcome: o}}}
}

func errOutcome(code, msg string) *messages.ToolOutcome {
	return &messages.ToolOutcome{Outcome: &messages.ToolOutcome_Error{Error: &messages.ToolError{Code: code, Message: msg}}}
}

// TestDocsHistoryOfSeveralCallsInOneTurn: an answer with several calls is
// sent as one assistant message carrying the runtime's ids, followed by
// each call's result (in the log's order; an error result, a rejection or
// an expiry as "error (<code>): <message>"), then the message sent while
// the calls were open; an image part is "[image]", a file "[file]".
func TestDocsHistoryOfSeveralCallsInOneTurn(t *testing.T) {
	p := serveText(t, chunk(`{"content":"x"}`, "stop")+usageChunk)
	turn := providertest.Turn()
	turn.Summary = nil
	turn.Context = []*messages.Event{
		docUser(1, textPart("look: "), &messages.ContentPart{Part: &messages.ContentPart_Image{Image: &messages.Blob{}}}, &messages.ContentPart{Part: &messages.ContentPart_File{File: &messages.Blob{}}}),
		{Seq: 2, Body: &messages.Event_AssistantMsg{AssistantMsg: &messages.AssistantMessage{
			Content: []*messages.ContentPart{textPart("Checking.")},
			ToolCalls: []*messages.ToolCall{
				{Id: "rt-1", ProviderId: "p1", Name: "get_weather", Arguments: `{"city":"Paris"}`},
				{Id: "rt-2", ProviderId: "p2", Name: "get_time", Arguments: ``},
				{Id: "rt-3", ProviderId: "p3", Name: "approve", Arguments: `{}`},
			}}}},
		docResult(3, "rt-2", errOutcome("expired", "no answer in time")),
		docUser(4, textPart("still there?")),
		docResult(5, "rt-1", &messages.ToolOutcome{Outcome: &messages.ToolOutcome_Content{Content: `{"temp":21}`}}),
		docResult(6, "rt-3", errOutcome("rejected", "the human said no")),
	}
	_, err := p.m.Generate(context.Background(), turn, nil)
	require.NoError(t, err)
	var req struct {
		Messages []struct {
			Role       string `json:"role"`
			Content    any    `json:"content"`
			ToolCallID string `json:"tool_call_id"`
			ToolCalls  []struct {
				ID       string `json:"id"`
				Type     string `json:"type"`
				Function struct{ Name, Arguments string }
			} `json:"tool_calls"`
		} `json:"messages"`
	}
	require.NoError(t, json.Unmarshal(p.srv.Requests()[0], &req))
	require.Len(t, req.Messages, 6)
	assert.Equal(t, "user", req.Messages[0].Role)
	assert.Equal(t, "look: [image][file]", req.Messages[0].Content)
	a := req.Messages[1]
	assert.Equal(t, "assistant", a.Role)
	assert.Equal(t, "Checking.", a.Content)
	require.Len(t, a.ToolCalls, 3)
	for i, id := range []string{"rt-1", "rt-2", "rt-3"} {
		assert.Equal(t, id, a.ToolCalls[i].ID, "the runtime's id, not the provider's")
		assert.Equal(t, "function", a.ToolCalls[i].Type)
	}
	assert.Equal(t, "{}", a.ToolCalls[1].Function.Arguments, "empty arguments are sent as an object")
	assert.Equal(t, []string{"tool", "tool", "tool", "user"}, []string{req.Messages[2].Role, req.Messages[3].Role, req.Messages[4].Role, req.Messages[5].Role})
	assert.Equal(t, "rt-2", req.Messages[2].ToolCallID)
	assert.Equal(t, "error (expired): no answer in time", req.Messages[2].Content)
	assert.Equal(t, "rt-1", req.Messages[3].ToolCallID)
	assert.Equal(t, `{"temp":21}`, req.Messages[3].Content)
	assert.Equal(t, "rt-3", req.Messages[4].ToolCallID)
	assert.Equal(t, "error (rejected): the human said no", req.Messages[4].Content)
	assert.Equal(t, "still there?", req.Messages[5].Content)
}

// TestDocsUnsetOptionsAreNotSent: a nil Temperature and a zero MaxTokens
// leave the server's defaults (nothing sent); a tool without Parameters is
// sent with the schema of no arguments, and its description.
func TestDocsUnsetOptionsAreNotSent(t *testing.T) {
	p := serveText(t, chunk(`{"content":"x"}`, "stop")+usageChunk)
	turn := providertest.Turn()
	turn.Tools = []agent.ToolSpec{{Name: "ping", Description: "Pings."}}
	_, err := p.m.Generate(context.Background(), turn, nil)
	require.NoError(t, err)
	var req map[string]any
	require.NoError(t, json.Unmarshal(p.srv.Requests()[0], &req))
	for _, k := range []string{"temperature", "max_completion_tokens", "max_tokens", "tool_choice"} {
		assert.NotContains(t, req, k)
	}
	tools, _ := req["tools"].([]any)
	require.Len(t, tools, 1)
	fn := tools[0].(map[string]any)["function"].(map[string]any)
	assert.Equal(t, "ping", fn["name"])
	assert.Equal(t, "Pings.", fn["description"])
	assert.Equal(t, map[string]any{"type": "object", "properties": map[string]any{}}, fn["parameters"])
}

// TestDocsInsufficientQuotaFailsAtOnce: a 429 whose error's type or code
// is insufficient_quota (OpenAI sends either, or both) fails at once with
// agent.ErrRateLimited (and the SDK's *oai.Error), without waiting for its
// Retry-After; the runtime's default retry policy still retries it, as
// agent/errors.go says.
func TestDocsInsufficientQuotaFailsAtOnce(t *testing.T) {
	for name, fields := range map[string]string{
		"type and code": `"type":"insufficient_quota","code":"insufficient_quota"`,
		"type only":     `"type":"insufficient_quota","code":null`,
		"code only":     `"type":"requests","code":"insufficient_quota"`,
		"upper case":    `"type":"INSUFFICIENT_QUOTA"`,
	} {
		t.Run(name, func(t *testing.T) {
			body := "> status 429\n> header Retry-After: 1\n{\"error\":{\"message\":\"You exceeded your current quota\"," + fields + "}}\n"
			p := serveText(t, body+"===\n"+body+"===\n"+body)
			msg, err := p.m.Generate(context.Background(), providertest.Turn(), nil)
			require.ErrorIs(t, err, agent.ErrRateLimited)
			assert.Nil(t, msg)
			assert.Len(t, p.srv.Requests(), 1)
			assert.Empty(t, p.waits())
			var apiErr *oai.Error
			require.True(t, errors.As(err, &apiErr), "the SDK's error is wrapped")
			assert.Equal(t, http.StatusTooManyRequests, apiErr.StatusCode)
			assert.True(t, actors.DefaultRetryable(err), "the runtime's default policy retries it")
		})
	}
}

// TestDocsStatusErrorsWrapTheSDKError: an error status (401, 500) wraps
// the SDK's *oai.Error beside the sentinel.
func TestDocsStatusErrorsWrapTheSDKError(t *testing.T) {
	for _, tc := range []struct {
		tr   string
		want error
		code int
	}{
		{"> status 401\n{\"error\":{\"message\":\"Incorrect API key\",\"code\":\"invalid_api_key\"}}\n", agent.ErrRequest, 401},
		{"> status 500\n{}\n===\n> status 500\n{}\n===\n> status 500\n{}\n", agent.ErrUnavailable, 500},
	} {
		p := serveText(t, tc.tr)
		_, err := p.m.Generate(context.Background(), providertest.Turn(), nil)
		require.ErrorIs(t, err, tc.want)
		var apiErr *oai.Error
		require.True(t, errors.As(err, &apiErr), "%v", err)
		assert.Equal(t, tc.code, apiErr.StatusCode)
	}
}

// TestDocsContentFilterIsARefusal: finish_reason content_filter fails the
// call with agent.ErrRefused; a refusal's text is in the error.
func TestDocsContentFilterIsARefusal(t *testing.T) {
	p := serveText(t, chunk(`{"role":"assistant"}`, "")+chunk(`{}`, "content_filter")+usageChunk)
	msg, err := p.m.Generate(context.Background(), providertest.Turn(), nil)
	require.ErrorIs(t, err, agent.ErrRefused)
	assert.Nil(t, msg)

	p = serveText(t, chunk(`{"role":"assistant","refusal":"I can't help with that."}`, "")+chunk(`{}`, "stop")+usageChunk)
	msg, err = p.m.Generate(context.Background(), providertest.Turn(), nil)
	require.ErrorIs(t, err, agent.ErrRefused)
	assert.Contains(t, err.Error(), "I can't help with that.")
	assert.Nil(t, msg)
}

// TestDocsTimeoutBeforeTextIsRetried: an HTTP client's timeout before any
// text is a connection that failed before any text: agent.ErrUnavailable,
// retried; the next attempt's answer is returned.
func TestDocsTimeoutBeforeTextIsRetried(t *testing.T) {
	var calls atomic.Int32
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // so that the server sees the client go
		if calls.Add(1) == 1 {
			select {
			case <-r.Context().Done(): // hang until the client gives up
			case <-release:
			}
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte(chunk(`{"role":"assistant","content":"ok"}`, "stop") + usageChunk))
	}))
	defer srv.Close()
	defer close(release)
	var sleeps atomic.Int32
	m, err := openai.New(openai.Options{Model: "m", BaseURL: srv.URL, HTTPClient: &http.Client{Timeout: 3 * time.Second},
		Retry: retry.Policy{MaxAttempts: 2, Sleep: func(ctx context.Context, d time.Duration) error { sleeps.Add(1); return ctx.Err() }}})
	require.NoError(t, err)
	msg, err := m.Generate(context.Background(), providertest.Turn(), nil)
	require.NoError(t, err)
	assert.Equal(t, "ok", msg.GetContent()[0].GetText())
	assert.EqualValues(t, 2, calls.Load())
	assert.EqualValues(t, 1, sleeps.Load())
}

// TestDocsCancelDuringRetryWait: a cancel while the provider waits out a
// Retry-After ends Generate at once with an error wrapping ctx.Err().
func TestDocsCancelDuringRetryWait(t *testing.T) {
	first := make(chan struct{})
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			close(first)
		}
		w.Header().Set("Retry-After", "50")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{}`))
	}))
	defer srv.Close()
	m, err := openai.New(openai.Options{Model: "m", BaseURL: srv.URL})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-first; cancel() }()
	done := make(chan error, 1)
	go func() {
		_, err := m.Generate(ctx, providertest.Turn(), nil)
		done <- err
	}()
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(20 * time.Second):
		t.Fatal("Generate did not return after the cancel")
	}
	assert.EqualValues(t, 1, calls.Load())
}

// TestDocsNoPanicFromTheServersBytes: whatever a server streams, Generate
// returns an answer or an error wrapping exactly one sentinel; never a
// panic.
func TestDocsNoPanicFromTheServersBytes(t *testing.T) {
	sentinels := []error{agent.ErrRateLimited, agent.ErrUnavailable, agent.ErrInterrupted, agent.ErrMalformed,
		agent.ErrIncomplete, agent.ErrContextLength, agent.ErrRefused, agent.ErrRequest}
	for name, body := range map[string]string{
		"null chunk":          "data: null\n\n" + chunk(`{}`, "stop") + usageChunk,
		"null choices":        `data: {"choices":null}` + "\n\n" + chunk(`{}`, "stop") + usageChunk,
		"null delta":          `data: {"choices":[{"index":0,"delta":null,"finish_reason":"stop"}]}` + "\n\n" + usageChunk,
		"negative call index": chunk(`{"tool_calls":[{"index":-5,"id":"call_a","function":{"name":"f","arguments":"{}"}}]}`, "tool_calls") + usageChunk,
		"huge call indices": chunk(`{"tool_calls":[{"index":9223372036854775807,"id":"call_a","function":{"name":"f","arguments":"{}"}}]}`, "") +
			chunk(`{"tool_calls":[{"index":-9223372036854775808,"id":"call_b","function":{"name":"g","arguments":"{}"}}]}`, "tool_calls") + usageChunk,
		"fragment without id or name": chunk(`{"tool_calls":[{"index":3,"function":{"arguments":"{}"}}]}`, "tool_calls") + usageChunk,
		"usage wrong type":            `data: {"choices":[],"usage":"lots"}` + "\n\n" + chunk(`{}`, "stop"),
		"usage negative":              chunk(`{"content":"x"}`, "stop") + `data: {"choices":[],"usage":{"prompt_tokens":-1,"completion_tokens":-2}}` + "\n\n",
		"tool_calls not a list":       chunk(`{"tool_calls":{"index":0}}`, "tool_calls") + usageChunk,
		"binary":                      "data: \x00\x01\x02\xff\xfe\n\n",
		"no data lines":               "event: x\nid: 1\n\n: comment\n\n",
		"empty body":                  "",
		"choice index other":          `data: {"choices":[{"index":7,"delta":{"content":"ignored"},"finish_reason":"stop"}]}` + "\n\n" + chunk(`{}`, "stop") + usageChunk,
	} {
		t.Run(name, func(t *testing.T) {
			p := serveText(t, body+"\n===\n"+body+"\n===\n"+body) // one per attempt
			var msg *messages.AssistantMessage
			var err error
			require.NotPanics(t, func() { msg, err = p.m.Generate(context.Background(), providertest.Turn(), nil) })
			if err == nil {
				require.NotNil(t, msg)
				return
			}
			assert.Nil(t, msg)
			n := 0
			for _, s := range sentinels {
				if errors.Is(err, s) {
					n++
				}
			}
			assert.Equal(t, 1, n, "error %v wraps exactly one sentinel", err)
		})
	}
}

// TestDocsDeltasArriveAsTheChunksDo: a delta reaches onDelta while the
// stream is still open (the server sends the rest only after it).
func TestDocsDeltasArriveAsTheChunksDo(t *testing.T) {
	got := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte(chunk(`{"role":"assistant","content":"Hel"}`, "")))
		w.(http.Flusher).Flush()
		select {
		case <-got:
		case <-r.Context().Done():
			return
		}
		_, _ = w.Write([]byte(chunk(`{"content":"lo"}`, "stop") + usageChunk))
	}))
	defer srv.Close()
	m, err := openai.New(openai.Options{Model: "m", BaseURL: srv.URL})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var deltas []string
	msg, err := m.Generate(ctx, providertest.Turn(), func(d string) {
		if len(deltas) == 0 {
			close(got)
		}
		deltas = append(deltas, d)
	})
	require.NoError(t, err)
	assert.Equal(t, []string{"Hel", "lo"}, deltas)
	assert.Equal(t, "Hello", msg.GetContent()[0].GetText())
	assert.Equal(t, &messages.Usage{InputTokens: 3, OutputTokens: 4}, msg.GetUsage())
	assert.Equal(t, "m-1", msg.GetModel())
}

// TestDocsErrorEventAfterTextIsInterrupted: an error event once text was
// streamed fails the call with agent.ErrInterrupted, not retried.
func TestDocsErrorEventAfterTextIsInterrupted(t *testing.T) {
	p := serveText(t, chunk(`{"role":"assistant","content":"hi"}`, "")+
		`data: {"error":{"message":"The server is overloaded","type":"server_error","code":"overloaded"}}`+"\n\n")
	msg, err := p.m.Generate(context.Background(), providertest.Turn(), nil)
	require.ErrorIs(t, err, agent.ErrInterrupted)
	assert.NotErrorIs(t, err, agent.ErrUnavailable)
	assert.Nil(t, msg)
	assert.Len(t, p.srv.Requests(), 1)
	assert.Empty(t, p.waits())
}

// TestDocsBadToolSchemaWrapsOneSentinel: a provider's error wraps exactly
// one sentinel of package agent (agent's errors doc): a tool whose
// Parameters is not a JSON object fails the call with agent.ErrRequest
// (and journal.ErrInvalid), before any request.
func TestDocsBadToolSchemaWrapsOneSentinel(t *testing.T) {
	for _, params := range []string{"not json", "[1]", "null", " null ", `"s"`, "42"} {
		p := serveText(t, chunk(`{"content":"x"}`, "stop")+usageChunk)
		turn := providertest.Turn()
		turn.Tools = []agent.ToolSpec{{Name: "bad", Parameters: params}}
		msg, err := p.m.Generate(context.Background(), turn, nil)
		require.ErrorIs(t, err, agent.ErrRequest, params)
		require.ErrorIs(t, err, journal.ErrInvalid, params)
		assert.Nil(t, msg)
		assert.Empty(t, p.srv.Requests())
	}
}
