package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/stretchr/testify/require"
)

// journalSentinels is every sentinel of package journal.
var journalSentinels = []error{
	journal.ErrConflict, journal.ErrStale, journal.ErrNotFound, journal.ErrClosed,
	journal.ErrCorrupt, journal.ErrInvalid, journal.ErrDeleted, journal.ErrNoSpace,
	journal.ErrUnavailable, journal.ErrUnknownOutcome, journal.ErrExists, journal.ErrEnded,
	journal.ErrTooLarge,
}

// sentinelTextRepeated returns the text of a sentinel of package journal
// that shows more than once in msg, or "".
func sentinelTextRepeated(msg string) string {
	for _, s := range journalSentinels {
		if strings.Count(msg, s.Error()) > 1 {
			return s.Error()
		}
	}
	return ""
}

// damagedLines returns variants of the JSON line l, each with one leaf of
// its record replaced by an empty string, a string too long for an id, a
// negative number or the string "99"; and the record replaced by an empty
// object and by a bare string.
func damagedLines(t *testing.T, l string) []string {
	t.Helper()
	var line map[string]any
	require.NoError(t, json.Unmarshal([]byte(l), &line))
	var out []string
	add := func() {
		b, err := json.Marshal(line)
		require.NoError(t, err)
		out = append(out, string(b))
	}
	var walk func(v any, set func(any))
	walk = func(v any, set func(any)) {
		switch x := v.(type) {
		case map[string]any:
			for k, c := range x {
				walk(c, func(n any) { x[k] = n })
			}
		case []any:
			for i, c := range x {
				walk(c, func(n any) { x[i] = n })
			}
		default:
			for _, n := range []any{"", strings.Repeat("x", 300), -1, "99"} {
				set(n)
				add()
			}
			set(v)
		}
	}
	if rec, ok := line["record"]; ok {
		walk(rec, func(n any) { line["record"] = n })
		for _, n := range []any{map[string]any{}, "x"} {
			line["record"] = n
			add()
		}
		line["record"] = rec
	}
	return out
}

// TestImportErrorsSaySentinelsOnce damages every line of an export (every
// kind of line, a fork's included) one leaf at a time, and asserts that
// each refusal wraps a sentinel and says the text of each sentinel
// at most once, as does the command's message.
func TestImportErrorsSaySentinelsOnce(t *testing.T) {
	f := newFixture(t)
	forkFinished(t, f)
	lines := outLines(exportOf(t, f, "answered", "finished", "waiting", "forked"))
	refused := 0
	var repeated []string
	for i, l := range lines {
		for _, d := range damagedLines(t, l) {
			in := make([]string, len(lines))
			copy(in, lines)
			in[i] = d
			// A change the import takes (a timestamp, a text) goes into
			// a fresh memjournal store.
			open := func(create bool) (journal.Store, error) {
				if !create {
					return nil, errNoStore
				}
				st := memjournal.New(memjournal.Options{})
				t.Cleanup(func() { _ = st.Close() })
				return st, nil
			}
			err := importStream(ctxT(t), strings.NewReader(strings.Join(in, "\n")+"\n"), open, importOptions{})
			if err == nil {
				continue
			}
			refused++
			require.True(t, slices.ContainsFunc(journalSentinels, func(s error) bool { return errors.Is(err, s) }),
				"line %d as %s: %v wraps no sentinel", i+1, d, err)
			if s := sentinelTextRepeated(err.Error()); s != "" && len(repeated) < 20 {
				repeated = append(repeated, fmt.Sprintf("line %d: %q", i+1, err))
			}
		}
	}
	require.Greater(t, refused, 100, "the damage is refused")
	require.Empty(t, repeated, "errors that say a sentinel's text twice")

	t.Run("the command", func(t *testing.T) {
		in := make([]string, len(lines))
		copy(in, lines)
		for i, l := range in {
			if strings.HasPrefix(l, `{"type":"event"`) {
				in[i] = strings.Replace(l, `"record":{`, `"record":{"bogus":1,`, 1)
				break
			}
		}
		r := cliRun(t, strings.Join(in, "\n")+"\n", "import", "--dir", filepath.Join(t.TempDir(), "target"))
		require.Equal(t, exitError, r.code)
		require.Contains(t, r.stderr, "lazarus import: ")
		require.Contains(t, r.stderr, journal.ErrInvalid.Error())
		require.Empty(t, sentinelTextRepeated(r.stderr), r.stderr)
	})
}
