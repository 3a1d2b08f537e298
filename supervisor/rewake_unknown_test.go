package supervisor

import (
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestUnknownRewakesAreBounded: re-wakes after writes of unknown outcome
// go out at most maxUnknownRewakes in a row for activations that committed
// nothing before the write; one that committed a write starts the run
// again; the run given up is forgotten, so the conversation's next
// activation has its re-wakes again; conversations are counted apart.
func TestUnknownRewakesAreBounded(t *testing.T) {
	r := &root{s: &Supervisor{log: slog.New(slog.DiscardHandler)}}
	allow := func(conv string, committed bool) bool {
		return r.allowUnknown(&rewake{conversation: conv, unknown: true, committed: committed})
	}
	require.True(t, allow("c", true))
	for range maxUnknownRewakes - 1 {
		require.True(t, allow("c", false))
	}
	require.True(t, allow("c", true), "an activation that committed a write starts the run again")
	for range maxUnknownRewakes - 1 {
		require.True(t, allow("c", false))
	}
	require.True(t, allow("d", false), "another conversation is counted apart")
	require.False(t, allow("c", false), "past the bound")
	require.NotContains(t, r.unknown, "c", "the run given up is forgotten")
	require.True(t, allow("c", false), "the next activation's re-wakes go out again")
}
