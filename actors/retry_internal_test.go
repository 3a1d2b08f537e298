package actors

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// The text a turn_failed event stores is valid UTF-8 and bounded, clipped
// on a rune boundary, so the event can always be written.
func TestTurnErrorText(t *testing.T) {
	require.Equal(t, "short", turnErrorText(errors.New("short")))
	require.Equal(t, "bad \uFFFD byte", turnErrorText(errors.New("bad \xff byte")))
	long := turnErrorText(errors.New(strings.Repeat("é", MaxTurnErrorBytes)))
	require.LessOrEqual(t, len(long), MaxTurnErrorBytes)
	require.True(t, utf8.ValidString(long))
	require.True(t, strings.HasSuffix(long, "é..."), long[len(long)-10:])
}
