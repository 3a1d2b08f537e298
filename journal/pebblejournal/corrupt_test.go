package pebblejournal

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/stretchr/testify/require"
)

// appendText appends n events of about size bytes whose text is
// "<conv> #<seq> " followed by filler, and returns the new last seq.
func appendText(t *testing.T, s *Store, conv string, after uint64, n, size int) uint64 {
	t.Helper()
	for i := range n {
		seq := after + uint64(i) + 1
		text := fmt.Sprintf("<%s #%d> %s", conv, seq, strings.Repeat("x", size))
		_, err := s.Append(ctx, &messages.AppendRequest{ConversationId: conv, ExpectedLast: seq - 1, Events: []*messages.Event{userEvent(text)}})
		require.NoError(t, err)
	}
	return after + uint64(n)
}

// storeFiles returns the paths in dir whose names end with suffix, in
// name order (Pebble numbers files in creation order).
func storeFiles(t *testing.T, dir, suffix string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var out []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), suffix) {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	slices.Sort(out)
	return out
}

// flipAt inverts the byte of the file at path where marker starts, and
// fails the test if marker is not found.
func flipAt(t *testing.T, path string, marker []byte) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	i := bytes.Index(b, marker)
	require.GreaterOrEqual(t, i, 0, "%q not in %s", marker, path)
	b[i+1] ^= 0xFF
	require.NoError(t, os.WriteFile(path, b, 0o644))
}

// TestCorruptBlockFailsOnlyItsReads flips one byte of a real table file:
// the reads that touch the block fail with ErrCorrupt (keeping Pebble's
// checksum text); the other conversation and new writes keep working
// (the first read of the block used to mark the whole store failed).
func TestCorruptBlockFailsOnlyItsReads(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	require.NoError(t, err)
	lastA := appendText(t, s, "a", 0, 100, 1000)
	lastB := appendText(t, s, "b", 0, 100, 1000)
	require.NoError(t, s.db.Flush())
	require.NoError(t, s.Close())

	tables := storeFiles(t, dir, ".sst")
	require.Len(t, tables, 1)
	flipAt(t, tables[0], []byte("<a #50>"))

	s, err = Open(dir, Options{})
	require.NoError(t, err)
	defer s.Close()

	_, err = s.Events(ctx, "a", journal.EventQuery{})
	require.ErrorIs(t, err, journal.ErrCorrupt)
	require.Contains(t, err.Error(), "checksum")
	_, _, err = s.LoadSince(ctx, "a")
	require.ErrorIs(t, err, journal.ErrCorrupt)
	require.NoError(t, s.failure(), "the store is not failed")

	evs, err := s.Events(ctx, "b", journal.EventQuery{})
	require.NoError(t, err)
	require.Len(t, evs, int(lastB))
	tail, err := s.Events(ctx, "a", journal.EventQuery{After: 90})
	require.NoError(t, err, "a read that does not touch the block works")
	require.Len(t, tail, int(lastA-90))
	appendText(t, s, "b", lastB, 1, 10)
	appendText(t, s, "c", 0, 1, 10)
}

// twoWALs leaves in dir a store whose conversation "c" has events 1..55 in
// one write-ahead log and 56..100 in a newer one (the flush of the first
// is made to fail), and returns the older log's path.
func twoWALs(t *testing.T, dir string) string {
	t.Helper()
	tog := &fullDisk{match: func(op errorfs.Op) bool {
		return op.Kind == errorfs.OpCreate && strings.HasSuffix(op.Path, ".sst")
	}}
	fs := errorfs.Wrap(vfs.Default, tog)
	s, err := Open(dir, Options{FS: fs})
	require.NoError(t, err)
	appendText(t, s, "c", 0, 55, 100)
	appendText(t, s, "other", 0, 3, 100)
	tog.set(true)
	before := storeFiles(t, dir, ".log")
	s.db.AsyncFlush()
	appendText(t, s, "c", 55, 45, 100)
	require.NoError(t, s.Close())
	logs := storeFiles(t, dir, ".log")
	require.Greater(t, len(logs), len(before), "the flush rotated the log")
	return before[len(before)-1]
}

// TestLostWALIsAGap deletes or zeroes an older write-ahead log: Open
// succeeds (Pebble cannot tell), and every read of the damaged log returns
// ErrCorrupt instead of the 45 newest events posing as the whole history.
func TestLostWALIsAGap(t *testing.T) {
	for _, damage := range []string{"deleted", "zeroed"} {
		t.Run(damage, func(t *testing.T) {
			dir := t.TempDir()
			old := twoWALs(t, dir)
			if damage == "deleted" {
				require.NoError(t, os.Remove(old))
			} else {
				info, err := os.Stat(old)
				require.NoError(t, err)
				require.NoError(t, os.WriteFile(old, make([]byte, info.Size()), 0o644))
			}
			s, err := Open(dir, Options{})
			if damage == "zeroed" {
				// Pebble refuses a log of zeros that is not the last.
				require.ErrorIs(t, err, journal.ErrCorrupt)
				return
			}
			require.NoError(t, err)
			defer s.Close()
			_, err = s.Events(ctx, "c", journal.EventQuery{})
			require.ErrorIs(t, err, journal.ErrCorrupt)
			require.Contains(t, err.Error(), "gap")
			_, _, err = s.LoadSince(ctx, "c")
			require.ErrorIs(t, err, journal.ErrCorrupt)
			_, err = s.Events(ctx, "c", journal.EventQuery{Limit: 60})
			require.ErrorIs(t, err, journal.ErrCorrupt)
			evs, err := s.Events(ctx, "c", journal.EventQuery{Limit: 10})
			require.NoError(t, err, "a page inside what is left is whole")
			require.EqualValues(t, 91, evs[0].GetSeq())
		})
	}
}

// TestGapInsideTheLog: an event missing in the middle of a log (its key
// removed under the store) is a gap for every read that spans it.
func TestGapInsideTheLog(t *testing.T) {
	s := openMem(t, Options{})
	appendText(t, s, "c", 0, 100, 10)
	require.NoError(t, s.PutSummary(ctx, "c", &messages.Summary{FromSeq: 1, ToSeq: 40, Content: "s"}))
	require.NoError(t, s.db.Delete(seqKey(famEvent, "c", 50), nil))

	_, err := s.Events(ctx, "c", journal.EventQuery{})
	require.ErrorIs(t, err, journal.ErrCorrupt)
	_, err = s.Events(ctx, "c", journal.EventQuery{After: 45, Before: 60})
	require.ErrorIs(t, err, journal.ErrCorrupt)
	_, _, err = s.LoadSince(ctx, "c")
	require.ErrorIs(t, err, journal.ErrCorrupt)
	evs, err := s.Events(ctx, "c", journal.EventQuery{After: 50})
	require.NoError(t, err)
	require.Len(t, evs, 50)
	evs, err = s.Events(ctx, "c", journal.EventQuery{Before: 50})
	require.NoError(t, err)
	require.Len(t, evs, 49)
}

// TestDamagedWALOrManifestAtOpen flips a byte inside the MANIFEST, and
// inside the older of two write-ahead logs: Open fails with an error
// wrapping ErrCorrupt and keeping Pebble's text, or, where Pebble replays
// up to the damage, the reads of the log report the gap.
func TestDamagedWALOrManifestAtOpen(t *testing.T) {
	t.Run("manifest", func(t *testing.T) {
		dir := t.TempDir()
		s, err := Open(dir, Options{})
		require.NoError(t, err)
		for i := range 5 {
			appendText(t, s, fmt.Sprintf("c%d", i), 0, 10, 100)
			require.NoError(t, s.db.Flush())
		}
		require.NoError(t, s.Close())
		manifests := storeFiles(t, dir, "")
		manifests = slices.DeleteFunc(manifests, func(p string) bool { return !strings.HasPrefix(filepath.Base(p), "MANIFEST-") })
		require.NotEmpty(t, manifests)
		m := manifests[len(manifests)-1]
		b, err := os.ReadFile(m)
		require.NoError(t, err)
		b[len(b)/2] ^= 0xFF
		require.NoError(t, os.WriteFile(m, b, 0o644))
		_, err = Open(dir, Options{})
		require.ErrorIs(t, err, journal.ErrCorrupt)
		require.Contains(t, err.Error(), "pebble")
	})
	t.Run("older WAL", func(t *testing.T) {
		dir := t.TempDir()
		old := twoWALs(t, dir)
		flipAt(t, old, []byte("<c #30>"))
		s, err := Open(dir, Options{})
		if err != nil {
			require.ErrorIs(t, err, journal.ErrCorrupt)
			return
		}
		defer s.Close()
		_, err = s.Events(ctx, "c", journal.EventQuery{})
		require.ErrorIs(t, err, journal.ErrCorrupt)
	})
}
