package pebblejournal_test

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/pebblejournal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/stretchr/testify/require"
)

// Black-box tests of the package-level API (Open, Options), from its doc.

// TestBBOpenLockedThroughAnotherPath: "a second Open of the same directory,
// from this process ..., fails with an error wrapping ErrLocked while the
// first is open", whatever path names the directory: through a symlink,
// a relative path, or a path with "." and "..". After the first Close, the
// other path opens it.
func TestBBOpenLockedThroughAnotherPath(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "a", "b")
	s, err := pebblejournal.Open(dir, pebblejournal.Options{})
	require.NoError(t, err, "Open creates the missing directories")
	link := filepath.Join(base, "link")
	require.NoError(t, os.Symlink(dir, link))
	wd, err := os.Getwd()
	require.NoError(t, err)
	rel, err := filepath.Rel(wd, dir)
	require.NoError(t, err)
	for _, other := range []string{dir, link, rel, filepath.Join(base, "a", ".", "b", "..", "b") + "/", filepath.Join(link, ".")} {
		s2, err := pebblejournal.Open(other, pebblejournal.Options{})
		if s2 != nil {
			_ = s2.Close()
		}
		require.ErrorIs(t, err, pebblejournal.ErrLocked, "Open(%q) while %q is open", other, dir)
	}
	require.NoError(t, s.Close())
	s, err = pebblejournal.Open(link, pebblejournal.Options{})
	require.NoError(t, err, "Close released the directory")
	require.NoError(t, s.Close())
}

// TestBBOpenLockedByAnotherProcess: the second Open fails with ErrLocked
// when the first is in another process, and succeeds once it exited.
func TestBBOpenLockedByAnotherProcess(t *testing.T) {
	if dir := os.Getenv("LZ_BB_HOLD_DIR"); dir != "" {
		s, err := pebblejournal.Open(dir, pebblejournal.Options{})
		if err != nil {
			t.Fatal(err)
		}
		os.Stdout.WriteString("open\n")
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // until the parent closes stdin
		_ = s.Close()
		return
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestBBOpenLockedByAnotherProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "LZ_BB_HOLD_DIR="+dir)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "open\n", line)

	_, err = pebblejournal.Open(dir, pebblejournal.Options{})
	require.ErrorIs(t, err, pebblejournal.ErrLocked)

	require.NoError(t, stdin.Close())
	require.NoError(t, cmd.Wait())
	s, err := pebblejournal.Open(dir, pebblejournal.Options{})
	require.NoError(t, err)
	require.NoError(t, s.Close())
}

// TestBBOpenRefusesAnotherPebbleDatabase: a directory holding a Pebble
// database that is not a Lazarus store (keys, no layout version) is
// refused with ErrCorrupt and left as it was, instead of being adopted
// and its keys read as records.
func TestBBOpenRefusesAnotherPebbleDatabase(t *testing.T) {
	fs := vfs.NewMem()
	db, err := pebble.Open("other", &pebble.Options{FS: fs})
	require.NoError(t, err)
	require.NoError(t, db.Set([]byte("hello"), []byte("world"), pebble.Sync))
	require.NoError(t, db.Close())

	s, err := pebblejournal.Open("other", pebblejournal.Options{FS: fs})
	if s != nil {
		_ = s.Close()
	}
	require.ErrorIs(t, err, journal.ErrCorrupt)
	require.Contains(t, err.Error(), "not a Lazarus store")

	db, err = pebble.Open("other", &pebble.Options{FS: fs})
	require.NoError(t, err)
	it, err := db.NewIter(nil)
	require.NoError(t, err)
	var keys []string
	for it.First(); it.Valid(); it.Next() {
		keys = append(keys, string(it.Key()))
	}
	require.NoError(t, it.Close())
	require.NoError(t, db.Close())
	require.Equal(t, []string{"hello"}, keys, "the refused database is untouched")

	// An empty Pebble database (a crash before the first layout write
	// leaves one) is a new store.
	db, err = pebble.Open("empty", &pebble.Options{FS: fs})
	require.NoError(t, err)
	require.NoError(t, db.Close())
	s, err = pebblejournal.Open("empty", pebblejournal.Options{FS: fs})
	require.NoError(t, err)
	_, err = s.Append(context.Background(), &messages.AppendRequest{ConversationId: "c",
		Events: []*messages.Event{{Body: &messages.Event_UserMsg{UserMsg: &messages.UserMessage{}}}}})
	require.NoError(t, err)
	require.NoError(t, s.Close())
}
