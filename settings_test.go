package lazarus_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

func settingsRuntime(t *testing.T, dir string, model *scripted.Model, defaults agent.Settings) *lazarus.Runtime {
	t.Helper()
	rt, err := lazarus.Open(lazarus.Options{Dir: dir, Model: model, IdleTimeout: -1, Settings: defaults,
		Tools: []agent.Tool{{Name: "approve", Executor: messages.Executor_EXECUTOR_HUMAN}}})
	require.NoError(t, err)
	return rt
}

// lastTurnSettings sends to conv, waits for the answer, and returns the
// settings the model was given.
func lastTurnSettings(ctx context.Context, t *testing.T, rt *lazarus.Runtime, model *scripted.Model, conv string) agent.Settings {
	t.Helper()
	model.Push(conv, scripted.Text("ok"))
	end, err := rt.SendAndWait(ctx, conv, "hi", agent.Scope{UserID: "u"})
	require.NoError(t, err)
	require.Equal(t, lazarus.TurnAnswered, end.Outcome)
	turns := model.Turns(conv)
	require.NotEmpty(t, turns)
	return turns[len(turns)-1].Settings
}

func TestConfigureSetsTheModelSettingsDurably(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := filepath.Join(t.TempDir(), "db")
	cool, warm := 0.1, 0.7
	defaults := agent.Settings{SystemPrompt: "You are a refund agent.", Temperature: &cool}
	model := scripted.New(scripted.Options{})
	rt := settingsRuntime(t, dir, model, defaults)

	require.Equal(t, defaults, lastTurnSettings(ctx, t, rt, model, "plain"), "the defaults, with no settings of its own")

	own := agent.Settings{SystemPrompt: "Answer in French.", Model: "big", MaxTokens: 50, ToolChoice: "approve"}
	require.NoError(t, rt.Configure(ctx, "c", own), "before the first send")
	row, err := rt.Store().Conversation(ctx, "c")
	require.NoError(t, err)
	require.Equal(t, messages.ConversationStatus_CONVERSATION_STATUS_IDLE, row.GetStatus(), "created idle: nothing to resume")
	got, err := rt.Settings(ctx, "c")
	require.NoError(t, err)
	require.Equal(t, own, got)
	want := own
	want.Temperature = &cool
	require.Equal(t, want, lastTurnSettings(ctx, t, rt, model, "c"), "its own over the defaults")

	// Later: replaces them, for the next call of the live activation.
	later := agent.Settings{Temperature: &warm}
	require.NoError(t, rt.Configure(ctx, "c", later))
	want = later
	want.SystemPrompt = defaults.SystemPrompt
	require.Equal(t, want, lastTurnSettings(ctx, t, rt, model, "c"), "replaced, not merged with the old ones")

	// A kill and a restart read them back.
	require.True(t, rt.Kill("c"))
	require.Equal(t, want, lastTurnSettings(ctx, t, rt, model, "c"), "after a kill")
	require.NoError(t, rt.Close())
	model = scripted.New(scripted.Options{})
	rt = settingsRuntime(t, dir, model, defaults)
	defer func() { require.NoError(t, rt.Close()) }()
	require.Equal(t, want, lastTurnSettings(ctx, t, rt, model, "c"), "after a restart")
	got, err = rt.Settings(ctx, "c")
	require.NoError(t, err)
	require.Equal(t, later, got)
}

func TestConfigureRefusesBadSettings(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	model := scripted.New(scripted.Options{})
	rt := settingsRuntime(t, "", model, agent.Settings{})
	defer func() { require.NoError(t, rt.Close()) }()
	neg := -1.0
	for name, s := range map[string]agent.Settings{
		"unknown tool":         {ToolChoice: "nope"},
		"negative temperature": {Temperature: &neg},
		"negative max tokens":  {MaxTokens: -1},
		"huge prompt":          {SystemPrompt: string(make([]byte, agent.MaxSystemPromptBytes+1))},
		"invalid UTF-8":        {Model: "\xff"},
	} {
		require.ErrorIs(t, rt.Configure(ctx, "c", s), journal.ErrInvalid, name)
	}
	_, err := rt.Settings(ctx, "c")
	require.ErrorIs(t, err, journal.ErrNotFound, "nothing written")

	_, err = lazarus.Open(lazarus.Options{Model: model, Settings: agent.Settings{ToolChoice: "nope"}})
	require.ErrorIs(t, err, journal.ErrInvalid, "Options.Settings are validated at Open")

	require.NoError(t, rt.Configure(ctx, "d", agent.Settings{Model: "m"}))
	require.NoError(t, rt.Delete(ctx, "d"))
	require.ErrorIs(t, rt.Configure(ctx, "d", agent.Settings{Model: "m"}), journal.ErrDeleted)
}
