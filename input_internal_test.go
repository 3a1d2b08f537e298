package lazarus

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/journal"
)

func TestClipID(t *testing.T) {
	valid := strings.Repeat("é", journal.MaxIDBytes/2) // 256 bytes
	require.Equal(t, valid, clipID(valid), "a valid id is whole")
	long := strings.Repeat("é", 1000) // 2,000 bytes, a rune every 2
	got := clipID("x" + long)         // runes straddle byte 64
	require.True(t, utf8.ValidString(got), "cut on a rune boundary: %q", got)
	require.True(t, strings.HasSuffix(got, "...(2001 bytes)"), got)
	require.Less(t, len(got), 100)
}
