package main

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/messages"
)

// TestFailedTurnsRoundTrip: a conversation whose turn failed for good (a
// turn_failed event) and one whose model called an unknown tool (a call
// recorded with its error result and a terminal row) are shown readably,
// pass check, and export and import unchanged.
func TestFailedTurnsRoundTrip(t *testing.T) {
	dir := t.TempDir()
	model := scripted.New(scripted.Options{})
	model.PushError("failed", agent.ErrRefused)
	model.Push("corrected", scripted.Reply("", scripted.Call("no_such_tool", `{}`)), scripted.Text("Sorry, done."))
	rt, err := lazarus.Open(lazarus.Options{Dir: dir, Model: model, Tools: tools(), IdleTimeout: -1})
	require.NoError(t, err)
	ctx := ctxT(t)
	end, err := rt.SendAndWait(ctx, "failed", "hi", user)
	require.ErrorIs(t, err, agent.ErrRefused)
	require.Equal(t, lazarus.TurnFailed, end.Outcome)
	end, err = rt.SendAndWait(ctx, "corrected", "hi", user)
	require.NoError(t, err)
	require.Equal(t, "Sorry, done.", end.Text)
	require.NoError(t, rt.Close())

	r := cliRun(t, "", "show", "--dir", dir, "failed")
	requireOK(t, r)
	require.Regexp(t, `turn_failed +refused after 1 attempt\(s\): ".*agent: model refused"`, r.stdout)
	requireOK(t, cliRun(t, "", "check", "--dir", dir))

	src := collectDir(t, dir)
	require.Equal(t, messages.ConversationStatus_CONVERSATION_STATUS_IDLE, src["failed"].row.GetStatus())
	require.Len(t, src["corrected"].toolCalls, 1)
	require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_ERRORED, src["corrected"].toolCalls[0].GetStatus())

	file := filepath.Join(t.TempDir(), "out.jsonl")
	requireOK(t, cliRun(t, "", "export", "--all", "--dir", dir, "--file", file))
	dst := filepath.Join(t.TempDir(), "restored")
	requireOK(t, cliRun(t, "", "import", "--file", file, "--dir", dst))
	got := collectDir(t, dst)
	require.Len(t, got, 2)
	for id, want := range src {
		requireImported(t, want, got[id])
	}
}
