package pebblejournal

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/stretchr/testify/require"
)

// dirState maps each file under dir to its size and modification time;
// Pebble's LOCK file (opened for its lock, its content never written)
// by name only.
func dirState(t *testing.T, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		m[p] = ""
		if d.Name() != "LOCK" {
			m[p] = fmt.Sprintf("%d %s", info.Size(), info.ModTime())
		}
		return nil
	}))
	return m
}

// TestReadOnlyOpen: Options.ReadOnly writes nothing to the directory. A
// store of an older layout is refused with ErrUpgradeNeeded (not
// upgraded), a store lacking its layout key reads and is left without
// it, writes fail with pebble.ErrReadOnly, and a directory another Store
// holds is ErrLocked at once.
func TestReadOnlyOpen(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "db")
	s, err := Open(dir, Options{})
	require.NoError(t, err)
	appendN(t, s, "c", 0, 3)
	require.NoError(t, s.putRawForTesting(layoutKey, []byte(layoutV2)))
	require.NoError(t, s.Close())

	before := dirState(t, dir)
	_, err = Open(dir, Options{ReadOnly: true})
	require.ErrorIs(t, err, ErrUpgradeNeeded)
	require.Contains(t, err.Error(), "layout v2")
	require.Equal(t, before, dirState(t, dir), "nothing written")

	// A store without its layout key: it reads, and stays without it.
	s, err = Open(dir, Options{})
	require.NoError(t, err)
	require.NoError(t, s.deleteRawForTesting(layoutKey))
	require.NoError(t, s.Close())
	before = dirState(t, dir)
	s, err = Open(dir, Options{ReadOnly: true})
	require.NoError(t, err)
	last, err := s.LastSeq(ctx, "c")
	require.NoError(t, err)
	require.Equal(t, uint64(3), last)
	found, err := s.get(layoutKey, nil)
	require.NoError(t, err)
	require.False(t, found, "no layout key written")
	require.ErrorIs(t, s.PutMetadata(ctx, "c", map[string]string{"k": "v"}), pebble.ErrReadOnly)
	require.NoError(t, s.Close())
	require.Equal(t, before, dirState(t, dir), "nothing written")

	// A directory another Store holds: refused at once.
	s, err = Open(dir, Options{})
	require.NoError(t, err)
	_, err = Open(dir, Options{ReadOnly: true})
	require.ErrorIs(t, err, ErrLocked)
	require.NoError(t, s.Close())
	// Pebble's own lock too (claimDir passed over: the path is not
	// vfs.Default's).
	lock, err := pebble.LockDirectory(dir, vfs.Default)
	require.NoError(t, err)
	_, err = Open(dir, Options{ReadOnly: true, FS: vfs.Default})
	require.ErrorIs(t, err, ErrLocked)
	require.NoError(t, lock.Close())

	// A missing directory is not created.
	missing := filepath.Join(t.TempDir(), "none")
	_, err = Open(missing, Options{ReadOnly: true})
	require.Error(t, err)
	_, err = os.Stat(missing)
	require.ErrorIs(t, err, os.ErrNotExist)
}

// TestReadOnlyOpenWithoutMetadataIndex: a store with metadata and no
// metadata index (written before the index) is refused read-only with
// ErrUpgradeNeeded, and the index is not built; without metadata it opens.
func TestReadOnlyOpenWithoutMetadataIndex(t *testing.T) {
	mem := vfs.NewMem()
	s, err := Open("db", Options{FS: mem})
	require.NoError(t, err)
	appendN(t, s, "c", 0, 1)
	require.NoError(t, s.deleteRawForTesting(findIndexKey))
	require.NoError(t, s.Close())
	s, err = Open("db", Options{FS: mem, ReadOnly: true})
	require.NoError(t, err, "no metadata: nothing to index")
	require.NoError(t, s.Close())

	s, err = Open("db", Options{FS: mem})
	require.NoError(t, err)
	require.NoError(t, s.PutMetadata(ctx, "c", map[string]string{"k": "v"}))
	require.NoError(t, s.deleteRawForTesting(findIndexKey))
	require.NoError(t, s.Close())
	_, err = Open("db", Options{FS: mem, ReadOnly: true})
	require.ErrorIs(t, err, ErrUpgradeNeeded)
	require.NotErrorIs(t, err, journal.ErrCorrupt)
	require.Contains(t, err.Error(), "metadata index")
}
