//go:build live

package openai_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/openai"
	"github.com/lazarusrt/lazarus/messages"
)

// TestLive calls the server the environment names (OPENAI_BASE_URL,
// OPENAI_API_KEY, OPENAI_MODEL): a plain answer, then a tool call. It is built
// only with -tags live and skipped unless OPENAI_MODEL is set:
//
//	OPENAI_MODEL=... go test -tags live -run TestLive ./agent/openai/
func TestLive(t *testing.T) {
	opts := openai.OptionsFromEnv()
	if opts.Model == "" {
		t.Skip("OPENAI_MODEL is not set")
	}
	m, err := openai.New(opts)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	user := func(text string) *messages.Event {
		return &messages.Event{Seq: 1, Body: &messages.Event_UserMsg{UserMsg: &messages.UserMessage{Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: text}}}}}}
	}

	var deltas strings.Builder
	msg, err := m.Generate(ctx, agent.Turn{ConversationID: "live", Context: []*messages.Event{user("Say hello in five words.")}}, func(s string) { deltas.WriteString(s) })
	require.NoError(t, err)
	require.NotEmpty(t, msg.GetContent())
	assert.Equal(t, msg.GetContent()[0].GetText(), deltas.String())
	t.Logf("model %s, usage %v: %s", msg.GetModel(), msg.GetUsage(), deltas.String())

	tools := []agent.ToolSpec{{Name: "get_weather", Description: "The weather in a city.", Parameters: `{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`}}
	msg, err = m.Generate(ctx, agent.Turn{ConversationID: "live", Tools: tools, Context: []*messages.Event{user("What is the weather in Paris? Use the tool.")}}, nil)
	require.NoError(t, err)
	require.NotEmpty(t, msg.GetToolCalls(), "the model called no tool")
	assert.Equal(t, "get_weather", msg.GetToolCalls()[0].GetName())
	assert.True(t, agent.ValidJSON(msg.GetToolCalls()[0].GetArguments()))
	t.Logf("call %s %s (provider id %s)", msg.GetToolCalls()[0].GetName(), msg.GetToolCalls()[0].GetArguments(), msg.GetToolCalls()[0].GetProviderId())
}
