package main

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/journal"
)

// An input import rejects is named in a bounded error, however long the
// value it quotes (an id, a line type, an enum value, a format name):
// the line and the problem first, ErrInvalid's text last.
func TestImportRejectionTextIsBounded(t *testing.T) {
	const header = `{"type":"header","format":"lazarus-export","version":5}` + "\n"
	long := strings.Repeat("é", 1<<19) // 1 MiB, two bytes a rune
	for name, in := range map[string]string{
		"id":     header + `{"type":"conversation","conversation":"x","record":{"id":"` + long + `"}}` + "\n",
		"enum":   header + `{"type":"conversation","conversation":"x","record":{"id":"x","status":"` + long + `"}}` + "\n",
		"type":   header + `{"type":"` + long + `","conversation":"x","record":{}}` + "\n",
		"format": `{"type":"header","format":"` + long + `","version":5}` + "\n",
	} {
		t.Run(name, func(t *testing.T) {
			err := checkInput(strings.NewReader(in))
			require.Error(t, err)
			require.ErrorIs(t, err, journal.ErrInvalid)
			msg := err.Error()
			require.Less(t, len(msg), 2*maxRejectBytes, "%.300s", msg)
			require.True(t, utf8.ValidString(msg))
			require.Contains(t, msg, "line ")
			require.Contains(t, msg, "bytes left out")
			require.True(t, strings.HasSuffix(msg, journal.ErrInvalid.Error()), "%s", msg[len(msg)-200:])

			dir := filepath.Join(t.TempDir(), "new")
			r := cliRun(t, in, "import", "--dir", dir)
			require.Equal(t, exitError, r.code)
			require.Less(t, len(r.stderr), 2*maxRejectBytes)
			require.Contains(t, r.stderr, "input rejected, nothing imported: line ")
			require.NoDirExists(t, dir)
		})
	}
}

// A short rejection is left as it is.
func TestClipRejectLeavesAShortError(t *testing.T) {
	err := journal.Invalidf("line 2: short")
	require.Same(t, err, clipReject(err))
	var ce *clippedError
	require.False(t, errors.As(clipReject(err), &ce))
}
