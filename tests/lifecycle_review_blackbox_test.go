package tests

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
)

// TestConfigureOfAnEndedConversationIsRefused: ending is for good and an
// ended conversation runs no turn, so settings for its turns are refused
// with journal.ErrEnded and nothing is written, by its live activation and
// by a revived one alike.
func TestConfigureOfAnEndedConversationIsRefused(t *testing.T) {
	h := newHarness(t, memjournal.New(memjournal.Options{}), nil)
	ctx := ctxT(t)
	h.model.Push("c", scripted.Text("hi"))
	require.NoError(t, h.rt.Configure(ctx, "c", agent.Settings{SystemPrompt: "before"}))
	_, err := h.rt.SendAndWait(ctx, "c", "hello", user)
	require.NoError(t, err)
	require.NoError(t, h.rt.End(ctx, "c"))

	require.ErrorIs(t, h.rt.Configure(ctx, "c", agent.Settings{SystemPrompt: "after"}), journal.ErrEnded, "live activation")
	h.rt.Kill("c")
	require.ErrorIs(t, h.rt.Configure(ctx, "c", agent.Settings{SystemPrompt: "after"}), journal.ErrEnded, "revived activation")
	s, err := h.rt.Settings(ctx, "c")
	require.NoError(t, err)
	require.Equal(t, "before", s.SystemPrompt, "nothing written")
	require.Len(t, h.history("c"), 2)
}
