package supervisor

import (
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestUnknownRewakesAreBounded: re-wakes after fenced writes or writes of
// unknown outcome go out at most maxFailedRewakes in a row for activations
// that committed nothing before the write, both counted in one run; one
// that committed a write starts the run again; the run given up is
// forgotten, so the conversation's next activation has its re-wakes again;
// conversations are counted apart.
func TestUnknownRewakesAreBounded(t *testing.T) {
	r := &root{s: &Supervisor{log: slog.New(slog.DiscardHandler)}}
	allow := func(conv string, committed bool) bool {
		return r.allowRewake(&rewake{conversation: conv, unknown: true, committed: committed})
	}
	fenced := func(conv string, committed bool) bool {
		return r.allowRewake(&rewake{conversation: conv, committed: committed})
	}
	require.True(t, allow("c", true))
	for range maxFailedRewakes - 1 {
		require.True(t, allow("c", false))
	}
	require.True(t, allow("c", true), "an activation that committed a write starts the run again")
	for range maxFailedRewakes - 1 {
		require.True(t, allow("c", false))
	}
	require.True(t, allow("d", false), "another conversation is counted apart")
	require.False(t, allow("c", false), "past the bound")
	require.NotContains(t, r.failed, "c", "the run given up is forgotten")
	require.True(t, allow("c", false), "the next activation's re-wakes go out again")

	for range maxFailedRewakes {
		require.True(t, fenced("f", false))
	}
	require.False(t, fenced("f", false), "fenced writes are bounded too")
	require.True(t, fenced("f", true), "a fenced activation that committed a write starts the run again")
	require.True(t, allow("f", false), "fenced and unknown re-wakes count in one run")
	require.True(t, fenced("f", false))
	require.False(t, allow("f", false), "past the bound")
}
