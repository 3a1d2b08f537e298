package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// importSeeds returns the inputs of FuzzImport's seed corpus (exports a
// runtime wrote, and broken variants of them).
func importSeeds(tb testing.TB) [][]byte {
	tb.Helper()
	dir := filepath.Join("testdata", "fuzz", "FuzzImport")
	entries, err := os.ReadDir(dir)
	require.NoError(tb, err)
	var out [][]byte
	for _, e := range entries {
		raw, err := os.ReadFile(filepath.Join(dir, e.Name()))
		require.NoError(tb, err)
		lines := strings.SplitN(string(raw), "\n", 3)
		require.Len(tb, lines, 3, e.Name())
		lit := strings.TrimSuffix(strings.TrimPrefix(lines[1], "[]byte("), ")")
		data, err := strconv.Unquote(lit)
		require.NoError(tb, err, e.Name())
		out = append(out, []byte(data))
	}
	return out
}

// FuzzImportWriteFailures feeds arbitrary input to the importer on a
// store whose write number n+1 (and every one after it) fails, as README
// "Operate" says an import leaves it: input refused before the first write
// (journal.ErrInvalid, journal.ErrConflict) leaves the store as it was; a
// failed write is never reported as bad input, and the error wraps it and
// names each conversation it imported completely, which reads back exactly
// as exported, and the one it left incomplete, which is ENDED; the
// conversation the store held before is untouched. The seeds are
// FuzzImport's, each failing at a few writes.
func FuzzImportWriteFailures(f *testing.F) {
	for i, data := range importSeeds(f) {
		f.Add(data, uint8(i%7))
	}
	f.Fuzz(func(t *testing.T, data []byte, n uint8) {
		st := &failAt{Store: memStore(t), n: int(n) + 1}
		ctx := context.Background()
		before := dump(t, st.Store)
		existing := collect(t, st.Store, "existing")
		err := importInto(ctx, st, bytes.NewReader(data), importOptions{chunkEvents: 2})
		switch {
		case err == nil:
			want := parseExport(t, data)
			got := collectAll(t, st.Store)
			require.Len(t, got, len(want)+1)
			for id, w := range want {
				require.Contains(t, got, id)
				requireImported(t, w, got[id])
			}
			return
		case errors.Is(err, errDisk):
		case errors.Is(err, journal.ErrInvalid) || errors.Is(err, journal.ErrConflict):
			require.Equal(t, before, dump(t, st.Store), "a refused import changed the store: %v", err)
			return
		default:
			t.Fatalf("an import failed with neither bad input, a conflict nor the write's error: %v", err)
		}
		require.NotErrorIs(t, err, journal.ErrInvalid, "a failed write is reported as bad input")
		if !strings.Contains(err.Error(), "nothing imported") {
			require.ErrorContains(t, err, "import failed part-way")
		}
		requireImported(t, existing, collect(t, st.Store, "existing"))
		want := parseExport(t, data)
		for id, s := range collectAll(t, st.Store) {
			if id == "existing" {
				continue
			}
			if strings.Contains(err.Error(), fmt.Sprintf("conversation %s is incomplete in the target, with status ENDED", id)) {
				require.Equal(t, messages.ConversationStatus_CONVERSATION_STATUS_ENDED, s.row.GetStatus(), "%s: %v", id, err)
				continue
			}
			require.Contains(t, err.Error(), id, "a complete conversation is named as imported: %v", err)
			require.Contains(t, want, id)
			requireImported(t, want[id], s)
		}
	})
}
