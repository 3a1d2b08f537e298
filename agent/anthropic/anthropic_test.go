package anthropic_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/option"

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

func factory(t *testing.T, baseURL string, policy retry.Policy) agent.Model {
	m, err := anthropic.New(anthropic.Options{Model: "claude-sonnet-4-5", BaseURL: baseURL, APIKey: "test-key", Retry: policy})
	require.NoError(t, err)
	return m
}

// TestTranscripts runs the providers' suite on the Messages API's wire
// format.
func TestTranscripts(t *testing.T) {
	providertest.Run(t, "testdata", "toolu_", factory)
}

// TestRequestShape checks what is sent: a streamed call with max_tokens, the
// system prompt and the summary as system blocks, the tool call as a
// tool_use block and its result as a tool_result block in a user message,
// both with the runtime's id, and the tools with their input schemas.
func TestRequestShape(t *testing.T) {
	rs, err := providertest.Load("testdata/text.txt")
	require.NoError(t, err)
	srv := providertest.Serve(t, rs)
	m, err := anthropic.New(anthropic.Options{Model: "my-model", BaseURL: srv.URL, APIKey: "k", System: "Be brief."})
	require.NoError(t, err)
	_, err = m.Generate(context.Background(), providertest.Turn(), nil)
	require.NoError(t, err)
	require.Len(t, srv.Requests(), 1)

	type block struct {
		Type      string          `json:"type"`
		Text      string          `json:"text"`
		ID        string          `json:"id"`
		Name      string          `json:"name"`
		Input     json.RawMessage `json:"input"`
		ToolUseID string          `json:"tool_use_id"`
		IsError   bool            `json:"is_error"`
	}
	var req struct {
		Model     string  `json:"model"`
		Stream    bool    `json:"stream"`
		MaxTokens int     `json:"max_tokens"`
		System    []block `json:"system"`
		Messages  []struct {
			Role    string  `json:"role"`
			Content []block `json:"content"`
		} `json:"messages"`
		Tools []struct {
			Name        string         `json:"name"`
			InputSchema map[string]any `json:"input_schema"`
		} `json:"tools"`
	}
	require.NoError(t, json.Unmarshal(srv.Requests()[0], &req))
	assert.Equal(t, "my-model", req.Model)
	assert.True(t, req.Stream)
	assert.Equal(t, anthropic.DefaultMaxTokens, req.MaxTokens)
	require.Len(t, req.System, 2)
	assert.Equal(t, "Be brief.", req.System[0].Text)
	assert.Equal(t, openai.SummaryPrefix+"The user lives in Paris.", req.System[1].Text)
	require.Len(t, req.Messages, 3)
	assert.Equal(t, "user", req.Messages[0].Role)
	assert.Equal(t, "assistant", req.Messages[1].Role)
	require.Len(t, req.Messages[1].Content, 1)
	use := req.Messages[1].Content[0]
	assert.Equal(t, "tool_use", use.Type)
	assert.Equal(t, "call_runtime1", use.ID)
	assert.JSONEq(t, `{"city":"Paris"}`, string(use.Input))
	assert.Equal(t, "user", req.Messages[2].Role)
	require.Len(t, req.Messages[2].Content, 1)
	assert.Equal(t, "tool_result", req.Messages[2].Content[0].Type)
	assert.Equal(t, "call_runtime1", req.Messages[2].Content[0].ToolUseID)
	require.Len(t, req.Tools, 2)
	assert.Equal(t, "get_weather", req.Tools[1].Name)
	assert.Equal(t, "object", req.Tools[1].InputSchema["type"])
	assert.Equal(t, []any{"city"}, req.Tools[1].InputSchema["required"])
}

// TestToolUseInputIsAnObject: a recorded call whose arguments are not a
// JSON object (the runtime answered it with an invalid-call error) is sent
// back with an empty object as its input, which the API requires.
func TestToolUseInputIsAnObject(t *testing.T) {
	rs, err := providertest.Load("testdata/text.txt")
	require.NoError(t, err)
	srv := providertest.Serve(t, rs)
	m, err := anthropic.New(anthropic.Options{Model: "my-model", BaseURL: srv.URL, APIKey: "k"})
	require.NoError(t, err)
	turn := providertest.Turn()
	for _, ev := range turn.Context {
		for _, tc := range ev.GetAssistantMsg().GetToolCalls() {
			tc.Arguments = `[1,2]`
		}
	}
	_, err = m.Generate(context.Background(), turn, nil)
	require.NoError(t, err)
	require.Len(t, srv.Requests(), 1)
	var req struct {
		Messages []struct {
			Content []struct {
				Type  string          `json:"type"`
				Input json.RawMessage `json:"input"`
			} `json:"content"`
		} `json:"messages"`
	}
	require.NoError(t, json.Unmarshal(srv.Requests()[0], &req))
	use := req.Messages[1].Content[0]
	require.Equal(t, "tool_use", use.Type)
	assert.JSONEq(t, `{}`, string(use.Input))
}

func TestNewRequiresAModel(t *testing.T) {
	_, err := anthropic.New(anthropic.Options{})
	require.ErrorIs(t, err, journal.ErrInvalid)
}

func TestOptionsFromEnv(t *testing.T) {
	t.Setenv(anthropic.EnvBaseURL, "http://localhost:8080")
	t.Setenv(anthropic.EnvAPIKey, "k")
	t.Setenv(anthropic.EnvModel, "claude-haiku-4-5")
	assert.Equal(t, anthropic.Options{BaseURL: "http://localhost:8080", APIKey: "k", Model: "claude-haiku-4-5"}, anthropic.OptionsFromEnv())
}

// TestUnknownFailureIsNotRetried: a failure that is not the connection's
// (a request option's own error, as the SDK's credential check was before
// New stopped taking its defaults) fails at once with agent.ErrRequest.
func TestUnknownFailureIsNotRetried(t *testing.T) {
	srv := providertest.Serve(t, nil)
	n := 0
	refuse := option.WithMiddleware(func(*http.Request, option.MiddlewareNext) (*http.Response, error) {
		return nil, errors.New("no credential")
	})
	m, err := anthropic.New(anthropic.Options{Model: "m", BaseURL: srv.URL, RequestOptions: []option.RequestOption{refuse},
		Retry: retry.Policy{Sleep: func(context.Context, time.Duration) error { n++; return nil }}})
	require.NoError(t, err)
	_, err = m.Generate(context.Background(), providertest.Turn(), nil)
	require.ErrorIs(t, err, agent.ErrRequest)
	require.ErrorContains(t, err, "no credential")
	assert.Zero(t, n, "no retry")
	assert.Empty(t, srv.Requests())
}

// TestTurnSettingsOverride: a conversation's settings (agent.Turn.Settings)
// override the Model's options field by field.
func TestTurnSettingsOverride(t *testing.T) {
	hot := 0.9
	for _, tc := range []struct {
		name   string
		set    agent.Settings
		model  string
		system string
		max    int
		choice any
	}{
		{"none", agent.Settings{}, "my-model", "Be brief.", anthropic.DefaultMaxTokens, nil},
		{"all", agent.Settings{SystemPrompt: "Be kind.", Model: "other", Temperature: &hot, MaxTokens: 7, ToolChoice: agent.ToolChoiceRequired},
			"other", "Be kind.", 7, map[string]any{"type": "any"}},
		{"none of the tools", agent.Settings{ToolChoice: agent.ToolChoiceNone}, "my-model", "Be brief.", anthropic.DefaultMaxTokens, map[string]any{"type": "none"}},
		{"a tool", agent.Settings{ToolChoice: "get_weather"}, "my-model", "Be brief.", anthropic.DefaultMaxTokens,
			map[string]any{"type": "tool", "name": "get_weather"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs, err := providertest.Load("testdata/text.txt")
			require.NoError(t, err)
			srv := providertest.Serve(t, rs)
			m, err := anthropic.New(anthropic.Options{Model: "my-model", BaseURL: srv.URL, APIKey: "k", System: "Be brief."})
			require.NoError(t, err)
			turn := providertest.Turn()
			turn.Settings = tc.set
			_, err = m.Generate(context.Background(), turn, nil)
			require.NoError(t, err)
			var req map[string]any
			require.NoError(t, json.Unmarshal(srv.Requests()[0], &req))
			assert.Equal(t, tc.model, req["model"])
			assert.EqualValues(t, tc.max, req["max_tokens"])
			if tc.set.Temperature != nil {
				assert.InDelta(t, *tc.set.Temperature, req["temperature"], 1e-9)
			} else {
				assert.NotContains(t, req, "temperature")
			}
			assert.Equal(t, tc.system, req["system"].([]any)[0].(map[string]any)["text"])
			assert.Equal(t, tc.choice, req["tool_choice"])
		})
	}
}

// TestNoToolChoiceWithoutTools: a turn without tools sends no tool_choice,
// whatever the settings say: the API refuses one without tools (400).
func TestNoToolChoiceWithoutTools(t *testing.T) {
	for _, c := range []string{agent.ToolChoiceAuto, agent.ToolChoiceNone, agent.ToolChoiceRequired, "get_weather"} {
		rs, err := providertest.Load("testdata/text.txt")
		require.NoError(t, err)
		srv := providertest.Serve(t, rs)
		m, err := anthropic.New(anthropic.Options{Model: "my-model", BaseURL: srv.URL, APIKey: "k"})
		require.NoError(t, err)
		turn := providertest.Turn()
		turn.Tools = nil
		turn.Settings.ToolChoice = c
		_, err = m.Generate(context.Background(), turn, nil)
		require.NoError(t, err)
		var req map[string]any
		require.NoError(t, json.Unmarshal(srv.Requests()[0], &req))
		assert.NotContains(t, req, "tool_choice", c)
		assert.NotContains(t, req, "tools", c)
	}
}

// TestMessageWhileACallIsOpenIsSentAfterItsResult: a user message sent
// while a human call was open is in the log before the call's result; the
// request's user message holds the result first (the API refuses a
// tool_use not followed by its tool_result, or text before the results),
// then the message's text.
func TestMessageWhileACallIsOpenIsSentAfterItsResult(t *testing.T) {
	rs, err := providertest.Load("testdata/text.txt")
	require.NoError(t, err)
	srv := providertest.Serve(t, rs)
	m, err := anthropic.New(anthropic.Options{Model: "m", BaseURL: srv.URL})
	require.NoError(t, err)
	text := func(seq uint64, s string) *messages.Event {
		return &messages.Event{Seq: seq, Body: &messages.Event_UserMsg{UserMsg: &messages.UserMessage{Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: s}}}}}}
	}
	turn := agent.Turn{Context: []*messages.Event{
		text(1, "pay"),
		{Seq: 2, Body: &messages.Event_AssistantMsg{AssistantMsg: &messages.AssistantMessage{ToolCalls: []*messages.ToolCall{{Id: "a", Name: "approve", Arguments: `{}`}}}}},
		text(5, "hurry"),
		{Seq: 7, Body: &messages.Event_ToolResult{ToolResult: &messages.ToolResultEvent{ToolCallId: "a", Name: "approve",
			Outcome: &messages.ToolOutcome{Outcome: &messages.ToolOutcome_Content{Content: `true`}}}}},
	}}
	_, err = m.Generate(context.Background(), turn, nil)
	require.NoError(t, err)
	require.Len(t, srv.Requests(), 1)
	var req struct {
		Messages []struct {
			Role    string `json:"role"`
			Content []struct {
				Type      string `json:"type"`
				Text      string `json:"text"`
				ToolUseID string `json:"tool_use_id"`
			} `json:"content"`
		} `json:"messages"`
	}
	require.NoError(t, json.Unmarshal(srv.Requests()[0], &req))
	var got []string
	for _, msg := range req.Messages {
		for _, b := range msg.Content {
			got = append(got, msg.Role+":"+b.Type+":"+b.Text+b.ToolUseID)
		}
	}
	assert.Equal(t, []string{"user:text:pay", "assistant:tool_use:", "user:tool_result:a", "user:text:hurry"}, got)
	require.Len(t, req.Messages, 3, "the result and the message are one user message")
}
