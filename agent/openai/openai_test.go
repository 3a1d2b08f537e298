package openai_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/openai"
	"github.com/lazarusrt/lazarus/agent/providertest"
	"github.com/lazarusrt/lazarus/agent/retry"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

func factory(t *testing.T, baseURL string, policy retry.Policy) agent.Model {
	m, err := openai.New(openai.Options{Model: "gpt-4o-mini", BaseURL: baseURL, APIKey: "test-key", Retry: policy})
	require.NoError(t, err)
	return m
}

// TestTranscripts runs the providers' suite on OpenAI's wire format: plain
// text, tool calls (one, parallel, arguments in many fragments), unicode
// split across writes, usage in the final chunk, and every failure case.
func TestTranscripts(t *testing.T) {
	providertest.Run(t, "testdata", "call_", factory)
}

// TestRequestShape checks what is sent: a streamed call asking for usage,
// the system prompt and the summary first, in one system message, the
// history with the runtime's tool call id on both the call and its
// result, and the tools.
func TestRequestShape(t *testing.T) {
	rs, err := providertest.Load("testdata/text.txt")
	require.NoError(t, err)
	srv := providertest.Serve(t, rs)
	temp := 0.2
	m, err := openai.New(openai.Options{Model: "my-model", BaseURL: srv.URL, System: "Be brief.", Temperature: &temp, MaxTokens: 100})
	require.NoError(t, err)
	_, err = m.Generate(context.Background(), providertest.Turn(), nil)
	require.NoError(t, err)
	require.Len(t, srv.Requests(), 1)

	var req struct {
		Model         string  `json:"model"`
		Stream        bool    `json:"stream"`
		Temperature   float64 `json:"temperature"`
		MaxTokens     int     `json:"max_completion_tokens"`
		StreamOptions struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
		Messages []struct {
			Role       string `json:"role"`
			Content    any    `json:"content"`
			ToolCallID string `json:"tool_call_id"`
			ToolCalls  []struct {
				ID       string `json:"id"`
				Function struct{ Name, Arguments string }
			} `json:"tool_calls"`
		} `json:"messages"`
		Tools []struct {
			Type     string `json:"type"`
			Function struct {
				Name       string         `json:"name"`
				Parameters map[string]any `json:"parameters"`
			} `json:"function"`
		} `json:"tools"`
	}
	require.NoError(t, json.Unmarshal(srv.Requests()[0], &req))
	assert.Equal(t, "my-model", req.Model)
	assert.True(t, req.Stream)
	assert.True(t, req.StreamOptions.IncludeUsage)
	assert.InDelta(t, 0.2, req.Temperature, 1e-9)
	assert.Equal(t, 100, req.MaxTokens)
	require.Len(t, req.Messages, 4)
	assert.Equal(t, "system", req.Messages[0].Role)
	assert.Equal(t, "Be brief.\n\n"+openai.SummaryPrefix+"The user lives in Paris.", req.Messages[0].Content)
	assert.Equal(t, "user", req.Messages[1].Role)
	assert.Equal(t, "assistant", req.Messages[2].Role)
	require.Len(t, req.Messages[2].ToolCalls, 1)
	assert.Equal(t, "call_runtime1", req.Messages[2].ToolCalls[0].ID)
	assert.Equal(t, `{"city":"Paris"}`, req.Messages[2].ToolCalls[0].Function.Arguments)
	assert.Equal(t, "tool", req.Messages[3].Role)
	assert.Equal(t, "call_runtime1", req.Messages[3].ToolCallID)
	assert.Equal(t, `{"temp":21}`, req.Messages[3].Content)
	require.Len(t, req.Tools, 2)
	assert.Equal(t, "get_time", req.Tools[0].Function.Name)
	assert.Equal(t, "object", req.Tools[0].Function.Parameters["type"])
}

func TestNewRequiresAModel(t *testing.T) {
	_, err := openai.New(openai.Options{})
	require.ErrorIs(t, err, journal.ErrInvalid)
}

func TestOptionsFromEnv(t *testing.T) {
	t.Setenv(openai.EnvBaseURL, "http://localhost:11434/v1")
	t.Setenv(openai.EnvAPIKey, "k")
	t.Setenv(openai.EnvModel, "llama3.1:8b")
	assert.Equal(t, openai.Options{BaseURL: "http://localhost:11434/v1", APIKey: "k", Model: "llama3.1:8b"}, openai.OptionsFromEnv())
}

// TestCancelledCall: a call whose context is done returns an error wrapping
// ctx.Err() and no message.
func TestCancelledCall(t *testing.T) {
	rs, err := providertest.Load("testdata/text.txt")
	require.NoError(t, err)
	srv := providertest.Serve(t, rs)
	m := factory(t, srv.URL, retry.Policy{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	msg, err := m.Generate(ctx, providertest.Turn(), nil)
	require.ErrorIs(t, err, context.Canceled)
	assert.Nil(t, msg)
}

// TestErrorEvents: an error event in a 200 stream (how compatible servers
// report failures after the headers) is retried when it comes before any
// text, and a context-length one fails with agent.ErrContextLength.
func TestErrorEvents(t *testing.T) {
	cases := []providertest.Case{
		{Name: "error_event", Text: "ok", MinDeltas: 1, Usage: &messages.Usage{InputTokens: 1234, OutputTokens: 56, CacheReadInputTokens: 1024}, Requests: 2, Sleeps: []time.Duration{providertest.Backoff}},
		{Name: "error_event_context_length", Err: agent.ErrContextLength, Requests: 1},
	}
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) { providertest.RunCase(t, "testdata", tc, factory) })
	}
}

// TestTurnSettingsOverride: a conversation's settings (agent.Turn.Settings)
// override the Model's options field by field; the fields it leaves unset
// keep the options'.
func TestTurnSettingsOverride(t *testing.T) {
	temp, hot := 0.2, 0.9
	for _, tc := range []struct {
		name     string
		set      agent.Settings
		model    string
		system   string
		temp     float64
		max      int
		choice   any
		choiceOK bool
	}{
		{"none", agent.Settings{}, "my-model", "Be brief.", 0.2, 100, nil, false},
		{"all", agent.Settings{SystemPrompt: "Be kind.", Model: "other", Temperature: &hot, MaxTokens: 7, ToolChoice: agent.ToolChoiceRequired},
			"other", "Be kind.", 0.9, 7, "required", true},
		{"a tool", agent.Settings{ToolChoice: "get_time"}, "my-model", "Be brief.", 0.2, 100,
			map[string]any{"type": "function", "function": map[string]any{"name": "get_time"}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs, err := providertest.Load("testdata/text.txt")
			require.NoError(t, err)
			srv := providertest.Serve(t, rs)
			m, err := openai.New(openai.Options{Model: "my-model", BaseURL: srv.URL, System: "Be brief.", Temperature: &temp, MaxTokens: 100})
			require.NoError(t, err)
			turn := providertest.Turn()
			turn.Settings = tc.set
			_, err = m.Generate(context.Background(), turn, nil)
			require.NoError(t, err)
			var req map[string]any
			require.NoError(t, json.Unmarshal(srv.Requests()[0], &req))
			assert.Equal(t, tc.model, req["model"])
			assert.InDelta(t, tc.temp, req["temperature"], 1e-9)
			assert.EqualValues(t, tc.max, req["max_completion_tokens"])
			first := req["messages"].([]any)[0].(map[string]any)
			assert.Equal(t, "system", first["role"])
			assert.Equal(t, tc.system+"\n\n"+openai.SummaryPrefix+"The user lives in Paris.", first["content"])
			choice, ok := req["tool_choice"]
			require.Equal(t, tc.choiceOK, ok)
			assert.Equal(t, tc.choice, choice)
		})
	}
}

func userEv(seq uint64, text string) *messages.Event {
	return &messages.Event{Seq: seq, Body: &messages.Event_UserMsg{UserMsg: &messages.UserMessage{Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: text}}}}}}
}

func callsEv(seq uint64, ids ...string) *messages.Event {
	a := &messages.AssistantMessage{}
	for _, id := range ids {
		a.ToolCalls = append(a.ToolCalls, &messages.ToolCall{Id: id, Name: "approve", Arguments: `{}`})
	}
	return &messages.Event{Seq: seq, Body: &messages.Event_AssistantMsg{AssistantMsg: a}}
}

func resultEv(seq uint64, id string) *messages.Event {
	return &messages.Event{Seq: seq, Body: &messages.Event_ToolResult{ToolResult: &messages.ToolResultEvent{ToolCallId: id, Name: "approve",
		Outcome: &messages.ToolOutcome{Outcome: &messages.ToolOutcome_Content{Content: `true`}}}}}
}

// TestResultsAfterCalls: the results of an answer's calls follow it, in
// their order, and a message sent while the calls were open comes after
// them; a context already so is returned as it is.
func TestResultsAfterCalls(t *testing.T) {
	seqs := func(evs []*messages.Event) (out []uint64) {
		for _, ev := range evs {
			out = append(out, ev.GetSeq())
		}
		return out
	}
	in := []*messages.Event{userEv(1, "pay"), callsEv(2, "a", "b"), userEv(5, "hurry"), resultEv(7, "b"), userEv(8, "please"), resultEv(10, "a"),
		callsEv(11, "c"), resultEv(12, "c"), userEv(13, "thanks")}
	assert.Equal(t, []uint64{1, 2, 7, 10, 5, 8, 11, 12, 13}, seqs(openai.ResultsAfterCalls(in)))
	assert.Equal(t, []uint64{1, 2, 5, 7, 8, 10, 11, 12, 13}, seqs(in), "the context is not modified")

	ordered := []*messages.Event{userEv(1, "pay"), callsEv(2, "a", "b"), resultEv(4, "a"), resultEv(5, "b"), userEv(6, "hurry")}
	got := openai.ResultsAfterCalls(ordered)
	assert.Same(t, &ordered[0], &got[0], "nothing moved: the same slice")
}

// TestResultsAfterCallsPairsADamagedContext: a context from a damaged log
// (a result without its call, a second result for a call, a call with no
// result) is sent as a history the API accepts: each call followed by one
// result, the first, or an error result of code missing.
func TestResultsAfterCallsPairsADamagedContext(t *testing.T) {
	in := []*messages.Event{userEv(1, "pay"), resultEv(2, "gone"), callsEv(3, "a", "b"), userEv(4, "hurry"), resultEv(5, "a"), resultEv(6, "a"),
		callsEv(7, "c"), resultEv(8, "c"), userEv(9, "thanks")}
	var got []string
	for _, ev := range openai.ResultsAfterCalls(in) {
		switch {
		case ev.GetToolResult() != nil:
			got = append(got, fmt.Sprintf("r:%s:%s@%d", ev.GetToolResult().GetToolCallId(), openai.ResultText(ev.GetToolResult().GetOutcome()), ev.GetSeq()))
		default:
			got = append(got, fmt.Sprintf("%d", ev.GetSeq()))
		}
	}
	assert.Equal(t, []string{"1", "3", "r:a:true@5", "r:b:error (missing): no result was recorded for this call@5", "4", "7", "r:c:true@8", "9"}, got)
}

// TestMessageWhileACallIsOpenIsSentAfterItsResult: a user message sent
// while a human call was open is in the log before the call's result; the
// request sends the result right after the call (the API refuses anything
// else there), then the message.
func TestMessageWhileACallIsOpenIsSentAfterItsResult(t *testing.T) {
	rs, err := providertest.Load("testdata/text.txt")
	require.NoError(t, err)
	srv := providertest.Serve(t, rs)
	m, err := openai.New(openai.Options{Model: "m", BaseURL: srv.URL})
	require.NoError(t, err)
	turn := agent.Turn{Context: []*messages.Event{userEv(1, "pay"), callsEv(2, "a"), userEv(5, "hurry"), resultEv(7, "a")}}
	_, err = m.Generate(context.Background(), turn, nil)
	require.NoError(t, err)
	require.Len(t, srv.Requests(), 1)
	var req struct {
		Messages []struct {
			Role       string `json:"role"`
			Content    any    `json:"content"`
			ToolCallID string `json:"tool_call_id"`
		} `json:"messages"`
	}
	require.NoError(t, json.Unmarshal(srv.Requests()[0], &req))
	var got []string
	for _, msg := range req.Messages {
		got = append(got, msg.Role+":"+msg.ToolCallID)
	}
	assert.Equal(t, []string{"user:", "assistant:", "tool:a", "user:"}, got)
	assert.Equal(t, "hurry", req.Messages[3].Content)
}

// TestArgumentsThatAreNotAnObjectAreSentAsOne: a call in the history whose
// arguments are not a JSON object (cut at the token bound, or a scalar; the
// runtime answered it with an invalid-call error) is sent back with "{}",
// which servers that decode the arguments (vLLM) require; an object is
// sent as it was recorded.
func TestArgumentsThatAreNotAnObjectAreSentAsOne(t *testing.T) {
	for _, tc := range []struct{ recorded, sent string }{
		{`{"city":"Par`, `{}`},
		{`"Paris"`, `{}`},
		{`[1,2]`, `{}`},
		{``, `{}`},
		{`{"city": "Paris"}`, `{"city": "Paris"}`},
	} {
		rs, err := providertest.Load("testdata/text.txt")
		require.NoError(t, err)
		srv := providertest.Serve(t, rs)
		m, err := openai.New(openai.Options{Model: "my-model", BaseURL: srv.URL, APIKey: "k"})
		require.NoError(t, err)
		turn := providertest.Turn()
		n := 0
		for _, ev := range turn.Context {
			for _, call := range ev.GetAssistantMsg().GetToolCalls() {
				call.Arguments = tc.recorded
				n++
			}
		}
		require.Positive(t, n, "the turn's history has a call")
		_, err = m.Generate(context.Background(), turn, nil)
		require.NoError(t, err)
		require.Len(t, srv.Requests(), 1)
		var req struct {
			Messages []struct {
				ToolCalls []struct {
					Function struct {
						Arguments string `json:"arguments"`
					} `json:"function"`
				} `json:"tool_calls"`
			} `json:"messages"`
		}
		require.NoError(t, json.Unmarshal(srv.Requests()[0], &req))
		sent := 0
		for _, msg := range req.Messages {
			for _, call := range msg.ToolCalls {
				assert.Equal(t, tc.sent, call.Function.Arguments, "recorded %q", tc.recorded)
				sent++
			}
		}
		assert.Equal(t, n, sent)
	}
}
