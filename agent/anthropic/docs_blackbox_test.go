package anthropic_test

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

	sdk "github.com/anthropics/anthropic-sdk-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/anthropic"
	"github.com/lazarusrt/lazarus/agent/openai"
	"github.com/lazarusrt/lazarus/agent/providertest"
	"github.com/lazarusrt/lazarus/agent/retry"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// TestDocsThinkingIsNotStreamedNorKept: thinking blocks (and their
// signatures) reach neither onDelta nor the message; the text and tool
// call after them do, and usage is read from message_start (input) and
// message_delta (output).
func TestDocsThinkingIsNotStreamedNorKept(t *testing.T) {
	p := serveText(t, start+
		ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}`)+
		ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"secret plan"}}`)+
		ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"sig"}}`)+
		ev("content_block_stop", `{"type":"content_block_stop","index":0}`)+
		ev("content_block_start", `{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}`)+
		ev("content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Visible."}}`)+
		ev("content_block_start", `{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_a","name":"get_time","input":{}}}`)+
		ev("content_block_delta", `{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"tz\":\"UTC\"}"}}`)+
		stopWith("tool_use"))
	var deltas []string
	msg, err := p.m.Generate(context.Background(), providertest.Turn(), func(d string) { deltas = append(deltas, d) })
	require.NoError(t, err)
	assert.Equal(t, []string{"Visible."}, deltas)
	require.Len(t, msg.GetContent(), 1)
	assert.Equal(t, "Visible.", msg.GetContent()[0].GetText())
	require.Len(t, msg.GetToolCalls(), 1)
	assert.Equal(t, "toolu_a", msg.GetToolCalls()[0].GetProviderId())
	assert.Empty(t, msg.GetToolCalls()[0].GetId())
	assert.JSONEq(t, `{"tz":"UTC"}`, msg.GetToolCalls()[0].GetArguments())
	assert.Equal(t, &messages.Usage{InputTokens: 7, OutputTokens: 9}, msg.GetUsage())
	assert.Equal(t, "claude-x", msg.GetModel())
}

// TestDocsServerToolBlocksAreNotKept: the blocks of a server tool (a
// server_tool_use whose input streams as input_json_delta, and its
// result), which a request made with RequestOptions may get, are neither
// streamed nor kept, like thinking: the answer is its text and its own
// tool calls, not a malformed stream.
func TestDocsServerToolBlocksAreNotKept(t *testing.T) {
	p := serveText(t, start+
		ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{}}}`)+
		ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"query\":\"weather\"}"}}`)+
		ev("content_block_stop", `{"type":"content_block_stop","index":0}`)+
		ev("content_block_start", `{"type":"content_block_start","index":1,"content_block":{"type":"web_search_tool_result","tool_use_id":"srvtoolu_1","content":[]}}`)+
		ev("content_block_stop", `{"type":"content_block_stop","index":1}`)+
		ev("content_block_start", `{"type":"content_block_start","index":2,"content_block":{"type":"text","text":""}}`)+
		ev("content_block_delta", `{"type":"content_block_delta","index":2,"delta":{"type":"text_delta","text":"Sunny."}}`)+
		stopWith("end_turn"))
	var deltas []string
	msg, err := p.m.Generate(context.Background(), providertest.Turn(), func(d string) { deltas = append(deltas, d) })
	require.NoError(t, err)
	assert.Equal(t, []string{"Sunny."}, deltas)
	require.Len(t, msg.GetContent(), 1)
	assert.Equal(t, "Sunny.", msg.GetContent()[0].GetText())
	assert.Empty(t, msg.GetToolCalls())
}

func docUser(seq uint64, parts ...*messages.ContentPart) *messages.Event {
	return &messages.Event{Seq: seq, Body: &messages.Event_UserMsg{UserMsg: &messages.UserMessage{Content: parts}}}
}

func docText(s string) *messages.ContentPart {
	return &messages.ContentPart{Part: &messages.ContentPart_Text{Text: s}}
}

func docResult(seq uint64, id string, o *messages.ToolOutcome) *messages.Event {
	return &messages.Event{Seq: seq, Body: &messages.Event_ToolResult{ToolResult: &messages.ToolResultEvent{ToolCallId: id, Outcome: o}}}
}

func docErr(code, msg string) *messages.ToolOutcome {
	return &messages.ToolOutcome{Outcome: &messages.ToolOutcome_Error{Error: &messages.ToolError{Code: code, Message: msg}}}
}

// TestDocsHistoryOfSeveralCallsInOneTurn: an answer's calls are tool_use
// blocks with the runtime's ids; their results (errors, rejections and
// expiries as is_error with "error (<code>): <message>") follow in one user
// message, and a message sent while the calls were open follows the
// results in that message; the summary and the system prompt are system
// blocks; MaxTokens 0 sends DefaultMaxTokens; the key goes as x-api-key.
func TestDocsHistoryOfSeveralCallsInOneTurn(t *testing.T) {
	var header http.Header
	var body []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		header = r.Header.Clone()
		var err error
		body, err = readAll(r)
		require.NoError(t, err)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte(start + textStart + textDelta("ok") + stopWith("end_turn")))
	}))
	defer srv.Close()
	m, err := anthropic.New(anthropic.Options{Model: "claude-x", BaseURL: srv.URL, APIKey: "k-1", System: "Be brief."})
	require.NoError(t, err)
	turn := providertest.Turn()
	turn.Context = []*messages.Event{
		docUser(1, docText("look: "), &messages.ContentPart{Part: &messages.ContentPart_Image{Image: &messages.Blob{}}}),
		{Seq: 2, Body: &messages.Event_AssistantMsg{AssistantMsg: &messages.AssistantMessage{
			Content: []*messages.ContentPart{docText("Checking.")},
			ToolCalls: []*messages.ToolCall{
				{Id: "rt-1", ProviderId: "toolu_1", Name: "get_weather", Arguments: `{"city":"Paris"}`},
				{Id: "rt-2", ProviderId: "toolu_2", Name: "get_time", Arguments: ``},
				{Id: "rt-3", ProviderId: "toolu_3", Name: "approve", Arguments: `{}`},
			}}}},
		docResult(3, "rt-2", docErr("expired", "no answer in time")),
		docUser(4, docText("still there?")),
		docResult(5, "rt-1", &messages.ToolOutcome{Outcome: &messages.ToolOutcome_Content{Content: `{"temp":21}`}}),
		docResult(6, "rt-3", docErr("rejected", "the human said no")),
	}
	_, err = m.Generate(context.Background(), turn, nil)
	require.NoError(t, err)
	assert.Equal(t, "k-1", header.Get("X-Api-Key"))

	type block struct {
		Type      string          `json:"type"`
		Text      string          `json:"text"`
		ID        string          `json:"id"`
		Name      string          `json:"name"`
		Input     json.RawMessage `json:"input"`
		ToolUseID string          `json:"tool_use_id"`
		Content   json.RawMessage `json:"content"`
		IsError   bool            `json:"is_error"`
	}
	var req struct {
		MaxTokens int     `json:"max_tokens"`
		System    []block `json:"system"`
		Messages  []struct {
			Role    string  `json:"role"`
			Content []block `json:"content"`
		} `json:"messages"`
	}
	require.NoError(t, json.Unmarshal(body, &req))
	assert.Equal(t, anthropic.DefaultMaxTokens, req.MaxTokens)
	require.Len(t, req.System, 2)
	assert.Equal(t, "Be brief.", req.System[0].Text)
	assert.Equal(t, openai.SummaryPrefix+"The user lives in Paris.", req.System[1].Text)
	require.Len(t, req.Messages, 3)
	assert.Equal(t, "user", req.Messages[0].Role)
	require.Len(t, req.Messages[0].Content, 1)
	assert.Equal(t, "look: [image]", req.Messages[0].Content[0].Text)

	a := req.Messages[1]
	assert.Equal(t, "assistant", a.Role)
	require.Len(t, a.Content, 4)
	assert.Equal(t, "text", a.Content[0].Type)
	assert.Equal(t, "Checking.", a.Content[0].Text)
	for i, id := range []string{"rt-1", "rt-2", "rt-3"} {
		assert.Equal(t, "tool_use", a.Content[i+1].Type)
		assert.Equal(t, id, a.Content[i+1].ID, "the runtime's id")
	}
	assert.JSONEq(t, `{}`, string(a.Content[2].Input), "empty arguments are an object")

	u := req.Messages[2]
	assert.Equal(t, "user", u.Role)
	require.Len(t, u.Content, 4)
	want := []struct {
		id, text string
		isErr    bool
	}{{"rt-2", "error (expired): no answer in time", true}, {"rt-1", `{"temp":21}`, false}, {"rt-3", "error (rejected): the human said no", true}}
	for i, w := range want {
		b := u.Content[i]
		assert.Equal(t, "tool_result", b.Type)
		assert.Equal(t, w.id, b.ToolUseID)
		assert.Equal(t, w.isErr, b.IsError, w.id)
		assert.Contains(t, string(b.Content), jsonString(t, w.text), w.id)
	}
	assert.Equal(t, "text", u.Content[3].Type)
	assert.Equal(t, "still there?", u.Content[3].Text)
}

func jsonString(t *testing.T, s string) string {
	b, err := json.Marshal(s)
	require.NoError(t, err)
	return string(b)
}

// TestDocsToolSchemas: a tool's schema is sent as an object schema with
// its properties, required and other keywords intact; a tool without
// Parameters gets an object schema with no properties.
func TestDocsToolSchemas(t *testing.T) {
	p := serveText(t, start+textStart+textDelta("ok")+stopWith("end_turn"))
	turn := providertest.Turn()
	turn.Tools = []agent.ToolSpec{
		{Name: "ping", Description: "Pings."},
		{Name: "search", Parameters: `{"type":"object","properties":{"q":{"type":"string"}},"required":["q"],"additionalProperties":false}`},
	}
	_, err := p.m.Generate(context.Background(), turn, nil)
	require.NoError(t, err)
	var req struct {
		Tools []struct {
			Name        string         `json:"name"`
			Description string         `json:"description"`
			InputSchema map[string]any `json:"input_schema"`
		} `json:"tools"`
	}
	require.NoError(t, json.Unmarshal(p.srv.Requests()[0], &req))
	require.Len(t, req.Tools, 2)
	assert.Equal(t, "ping", req.Tools[0].Name)
	assert.Equal(t, "Pings.", req.Tools[0].Description)
	assert.Equal(t, "object", req.Tools[0].InputSchema["type"])
	assert.Equal(t, map[string]any{}, req.Tools[0].InputSchema["properties"])
	s := req.Tools[1].InputSchema
	assert.Equal(t, "object", s["type"])
	assert.Equal(t, map[string]any{"q": map[string]any{"type": "string"}}, s["properties"])
	assert.Equal(t, []any{"q"}, s["required"])
	assert.Equal(t, false, s["additionalProperties"])
}

// TestDocsStatusErrorsWrapTheSDKError: an error status wraps the SDK's
// *anthropic.Error beside its sentinel: 401 ErrRequest at once, 429
// ErrRateLimited after its Retry-After, 500 ErrUnavailable with backoff.
func TestDocsStatusErrorsWrapTheSDKError(t *testing.T) {
	for _, tc := range []struct {
		tr       string
		want     error
		code     int
		requests int
		sleeps   []time.Duration
	}{
		{"> status 401\n{\"type\":\"error\",\"error\":{\"type\":\"authentication_error\",\"message\":\"invalid x-api-key\"}}\n", agent.ErrRequest, 401, 1, nil},
		{"> status 429\n> header Retry-After: 7\n{\"type\":\"error\",\"error\":{\"type\":\"rate_limit_error\",\"message\":\"slow\"}}\n===\n> status 429\n{}\n===\n> status 429\n{}\n", agent.ErrRateLimited, 429, 3, []time.Duration{7 * time.Second, 2 * providertest.Backoff}},
		{"> status 500\n{}\n===\n> status 500\n{}\n===\n> status 500\n{}\n", agent.ErrUnavailable, 500, 3, []time.Duration{providertest.Backoff, 2 * providertest.Backoff}},
	} {
		p := serveText(t, tc.tr)
		msg, err := p.m.Generate(context.Background(), providertest.Turn(), nil)
		require.ErrorIs(t, err, tc.want)
		assert.Nil(t, msg)
		var apiErr *sdk.Error
		require.True(t, errors.As(err, &apiErr), "%v", err)
		assert.Equal(t, tc.code, apiErr.StatusCode)
		assert.Len(t, p.srv.Requests(), tc.requests)
		assert.Equal(t, tc.sleeps, p.waits())
	}
}

// TestDocsRateLimitEventAfterTextIsInterrupted: once text was streamed, an
// error event of any type fails the call with ErrInterrupted, not retried.
func TestDocsRateLimitEventAfterTextIsInterrupted(t *testing.T) {
	p := serveText(t, start+textStart+textDelta("hi")+errEvent("rate_limit_error", "slow down"))
	msg, err := p.m.Generate(context.Background(), providertest.Turn(), nil)
	require.ErrorIs(t, err, agent.ErrInterrupted)
	assert.NotErrorIs(t, err, agent.ErrRateLimited)
	assert.Nil(t, msg)
	assert.Len(t, p.srv.Requests(), 1)
	assert.Empty(t, p.waits())
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
		w.WriteHeader(529)
		_, _ = w.Write([]byte(`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`))
	}))
	defer srv.Close()
	m, err := anthropic.New(anthropic.Options{Model: "m", BaseURL: srv.URL})
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
		"null event":             "event: message_start\ndata: null\n\n" + stopWith("end_turn"),
		"message_start no msg":   ev("message_start", `{"type":"message_start"}`) + stopWith("end_turn"),
		"block with null":        start + ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":null}`) + stopWith("end_turn"),
		"negative index":         start + ev("content_block_start", `{"type":"content_block_start","index":-1,"content_block":{"type":"text","text":"a"}}`) + stopWith("end_turn"),
		"delta before start":     start + textDelta("x") + stopWith("end_turn"),
		"stop without start":     stopWith("end_turn"),
		"unknown stop reason":    start + textStart + textDelta("x") + stopWith("something_new"),
		"unknown event":          start + ev("frobnicate", `{"type":"frobnicate","x":[1,2]}`) + textStart + textDelta("x") + stopWith("end_turn"),
		"usage wrong type":       start + ev("message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":"lots"}`),
		"error event null":       start + "event: error\ndata: {\"type\":\"error\",\"error\":null}\n\n",
		"error event not object": start + "event: error\ndata: 42\n\n",
		"binary":                 "event: message_start\ndata: \x00\xff\xfe\n\n",
		"empty body":             "",
		"duplicate index":        start + textStart + textDelta("a") + ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_x","name":"f","input":{}}}`) + stopWith("end_turn"),
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

func readAll(r *http.Request) ([]byte, error) { return io.ReadAll(r.Body) }

// retryPolicy makes attempts in all, calling slept for each wait instead
// of waiting.
func retryPolicy(attempts int, slept func()) retry.Policy {
	return retry.Policy{MaxAttempts: attempts, Sleep: func(ctx context.Context, _ time.Duration) error { slept(); return ctx.Err() }}
}

// TestDocsDeltasArriveAsTheEventsDo: a text_delta reaches onDelta while
// the stream is still open (the server sends the rest only after it).
func TestDocsDeltasArriveAsTheEventsDo(t *testing.T) {
	got := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = readAll(r)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte(start + textStart + textDelta("Hel")))
		w.(http.Flusher).Flush()
		select {
		case <-got:
		case <-r.Context().Done():
			return
		}
		_, _ = w.Write([]byte(textDelta("lo") + stopWith("end_turn")))
	}))
	defer srv.Close()
	m, err := anthropic.New(anthropic.Options{Model: "m", BaseURL: srv.URL})
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
	assert.Equal(t, &messages.Usage{InputTokens: 7, OutputTokens: 9}, msg.GetUsage())
}

// TestDocsTimeoutBeforeTextIsRetried: an HTTP client's timeout before any
// text is a connection that failed before any text: retried, and the next
// attempt's answer returned.
func TestDocsTimeoutBeforeTextIsRetried(t *testing.T) {
	var calls atomic.Int32
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = readAll(r) // so that the server sees the client go
		if calls.Add(1) == 1 {
			select {
			case <-r.Context().Done():
			case <-release:
			}
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte(start + textStart + textDelta("ok") + stopWith("end_turn")))
	}))
	defer srv.Close()
	defer close(release)
	var sleeps atomic.Int32
	m, err := anthropic.New(anthropic.Options{Model: "m", BaseURL: srv.URL, HTTPClient: &http.Client{Timeout: 3 * time.Second},
		Retry: retryPolicy(2, func() { sleeps.Add(1) })})
	require.NoError(t, err)
	msg, err := m.Generate(context.Background(), providertest.Turn(), nil)
	require.NoError(t, err)
	assert.Equal(t, "ok", msg.GetContent()[0].GetText())
	assert.EqualValues(t, 2, calls.Load())
	assert.EqualValues(t, 1, sleeps.Load())
}

// TestDocsBadToolSchemaWrapsOneSentinel: a provider's error wraps exactly
// one sentinel of package agent (agent's errors doc): a tool whose
// Parameters is not a JSON object fails the call with agent.ErrRequest
// (and journal.ErrInvalid), before any request.
func TestDocsBadToolSchemaWrapsOneSentinel(t *testing.T) {
	for _, params := range []string{"not json", "[1]", "null", " null ", `"s"`, "42"} {
		p := serveText(t, start+textStart+textDelta("ok")+stopWith("end_turn"))
		turn := providertest.Turn()
		turn.Tools = []agent.ToolSpec{{Name: "bad", Parameters: params}}
		msg, err := p.m.Generate(context.Background(), turn, nil)
		require.ErrorIs(t, err, agent.ErrRequest, params)
		require.ErrorIs(t, err, journal.ErrInvalid, params)
		assert.Nil(t, msg)
		assert.Empty(t, p.srv.Requests())
	}
}

// TestDocsToolInputWholeInTheBlockStart: a tool_use block whose input comes
// whole in content_block_start, with no input_json_delta (a compatible
// server may send it so), keeps that input; Anthropic's own input: {}
// followed by deltas is the deltas; a block with neither is {}.
func TestDocsToolInputWholeInTheBlockStart(t *testing.T) {
	p := serveText(t, start+
		ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_a","name":"get_time","input":{"tz":"UTC"}}}`)+
		ev("content_block_start", `{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_b","name":"get_time","input":{}}}`)+
		ev("content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"tz\":\"CET\"}"}}`)+
		ev("content_block_start", `{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_c","name":"get_time"}}`)+
		stopWith("tool_use"))
	msg, err := p.m.Generate(context.Background(), providertest.Turn(), nil)
	require.NoError(t, err)
	require.Len(t, msg.GetToolCalls(), 3)
	assert.JSONEq(t, `{"tz":"UTC"}`, msg.GetToolCalls()[0].GetArguments())
	assert.JSONEq(t, `{"tz":"CET"}`, msg.GetToolCalls()[1].GetArguments())
	assert.JSONEq(t, `{}`, msg.GetToolCalls()[2].GetArguments())
}

// TestDocsRetryAfterPastTheBoundIsNamed: a 429 whose Retry-After exceeds
// the policy's MaxRetryAfter ends the call at once, and its error names
// the server's wait (agent.RetryAfter) for the runtime's retry.
func TestDocsRetryAfterPastTheBoundIsNamed(t *testing.T) {
	p := serveText(t, "> status 429\n> header Retry-After: 300\n{\"type\":\"error\",\"error\":{\"type\":\"rate_limit_error\",\"message\":\"slow\"}}\n")
	_, err := p.m.Generate(context.Background(), providertest.Turn(), nil)
	require.ErrorIs(t, err, agent.ErrRateLimited)
	d, ok := agent.RetryAfter(err)
	require.True(t, ok)
	assert.Equal(t, 5*time.Minute, d)
	assert.Len(t, p.srv.Requests(), 1)
	assert.Empty(t, p.waits())
}
