package agent_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

func TestSettingsRoundTripThroughTheRow(t *testing.T) {
	temp := 0.25
	s := agent.Settings{SystemPrompt: "Be brief.", Model: "m", Temperature: &temp, MaxTokens: 9, ToolChoice: agent.ToolChoiceNone}
	require.Equal(t, s, agent.SettingsOf(s.Map()))
	require.Equal(t, agent.Settings{}, agent.SettingsOf(agent.Settings{}.Map()))
	row := journal.MergeSettings(s.Map(), agent.Settings{Model: "n"}.Map())
	require.Equal(t, map[string]string{"model": "n"}, row, "merging a Map replaces every field")
	require.Equal(t, agent.Settings{}, agent.SettingsOf(map[string]string{"temperature": "hot", "max_tokens": "-3"}), "unparsable values stay unset")
	require.True(t, agent.Settings{}.IsZero())
	require.False(t, s.IsZero())
}

func TestSettingsOver(t *testing.T) {
	a, b := 0.1, 0.2
	base := agent.Settings{SystemPrompt: "base", Model: "m0", Temperature: &a, MaxTokens: 5, ToolChoice: agent.ToolChoiceAuto}
	require.Equal(t, base, agent.Settings{}.Over(base))
	own := agent.Settings{Model: "m1", Temperature: &b}
	require.Equal(t, agent.Settings{SystemPrompt: "base", Model: "m1", Temperature: &b, MaxTokens: 5, ToolChoice: agent.ToolChoiceAuto}, own.Over(base))
}

func TestValidateSettings(t *testing.T) {
	reg, err := agent.NewRegistry(agent.Tool{Name: "ask", Executor: messages.Executor_EXECUTOR_HUMAN})
	require.NoError(t, err)
	zero, neg, nan := 0.0, -0.5, math.NaN()
	require.NoError(t, agent.ValidateSettings(agent.Settings{Temperature: &zero, ToolChoice: "ask"}, reg))
	require.NoError(t, agent.ValidateSettings(agent.Settings{ToolChoice: "any_tool"}, nil), "without a registry, any well-formed name")
	for name, s := range map[string]agent.Settings{
		"negative temperature": {Temperature: &neg},
		"NaN temperature":      {Temperature: &nan},
		"negative max tokens":  {MaxTokens: -1},
		"unknown tool":         {ToolChoice: "nope"},
		"long model":           {Model: string(make([]byte, agent.MaxModelNameBytes+1))},
		"prompt not UTF-8":     {SystemPrompt: "\xff"},
	} {
		require.ErrorIs(t, agent.ValidateSettings(s, reg), journal.ErrInvalid, name)
	}
	require.ErrorIs(t, agent.ValidateSettings(agent.Settings{ToolChoice: "a b"}, nil), journal.ErrInvalid)
}
