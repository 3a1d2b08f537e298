package bench

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestParseLLMTurns: LAZARUS_BENCH_LLM_TURNS takes the default when unset
// and any number from minLLMTurns up; fewer turns (which may not pass the
// token budget, so BenchmarkRevivalLLMSummary would fail on a missing
// summary) and non-numbers are refused with errLLMTurns.
func TestParseLLMTurns(t *testing.T) {
	n, err := parseLLMTurns("")
	require.NoError(t, err)
	require.Equal(t, longTurns, n)
	for _, ok := range []int{minLLMTurns, 1000, longTurns} {
		n, err := parseLLMTurns(strconv.Itoa(ok))
		require.NoError(t, err)
		require.Equal(t, ok, n)
	}
	for _, bad := range []string{"20", "30", strconv.Itoa(minLLMTurns - 1), "0", "-5", "x", "1e3"} {
		_, err := parseLLMTurns(bad)
		require.ErrorIs(t, err, errLLMTurns, "%q", bad)
	}
}
