package journal_test

import (
	"math"
	"testing"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/stretchr/testify/require"
)

// TestPageSize: 0 is the default page, a positive limit is itself, and a
// negative one is ErrInvalid, as ParseActiveCursor, which uses it, says.
func TestPageSize(t *testing.T) {
	for limit, want := range map[int]int{0: journal.DefaultPageSize, 1: 1, 1000: 1000, math.MaxInt: math.MaxInt} {
		got, err := journal.PageSize("conversations", limit)
		require.NoError(t, err)
		require.Equal(t, want, got, "limit %d", limit)
	}
	for _, limit := range []int{-1, math.MinInt} {
		_, err := journal.PageSize("conversations", limit)
		require.ErrorIs(t, err, journal.ErrInvalid, "limit %d", limit)
		_, _, err = journal.ParseActiveCursor("c", limit)
		require.ErrorIs(t, err, journal.ErrInvalid, "active cursor, limit %d", limit)
	}
	_, size, err := journal.ParseActiveCursor("", 0)
	require.NoError(t, err)
	require.Equal(t, journal.DefaultPageSize, size)
}
