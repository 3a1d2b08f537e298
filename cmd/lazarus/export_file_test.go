package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/journal"
)

// export --file renames a new file into place: a PATH that is a symlink
// (--file /dev/stdout), a directory or another file that is not regular
// is refused, a usage error, and left as it was, rather than replaced.
func TestExportFileRefusesWhatTheRenameWouldReplace(t *testing.T) {
	f := newFixture(t)
	tmp := t.TempDir()
	target := filepath.Join(tmp, "target.jsonl")
	require.NoError(t, os.WriteFile(target, []byte("kept\n"), 0o644))
	link := filepath.Join(tmp, "link.jsonl")
	require.NoError(t, os.Symlink(target, link))
	dir := filepath.Join(tmp, "adir")
	require.NoError(t, os.Mkdir(dir, 0o755))

	for name, path := range map[string]string{"symlink": link, "directory": dir} {
		t.Run(name, func(t *testing.T) {
			r := cliRun(t, "", "export", "--all", "--dir", f.dir, "--file", path)
			require.Equal(t, exitUsage, r.code, "stderr:\n%s", r.stderr)
			require.Contains(t, r.stderr, "--file "+path+" is a "+name)
			require.Empty(t, r.stdout)
		})
	}
	info, err := os.Lstat(link)
	require.NoError(t, err)
	require.Equal(t, os.ModeSymlink, info.Mode().Type(), "the symlink was replaced")
	data, err := os.ReadFile(target)
	require.NoError(t, err)
	require.Equal(t, "kept\n", string(data))
	entries, err := os.ReadDir(tmp)
	require.NoError(t, err)
	require.Len(t, entries, 3, "no temporary file is left")

	err = replaceableFile(link)
	require.True(t, errors.Is(err, journal.ErrInvalid))

	// A regular file is replaced, as before.
	r := cliRun(t, "", "export", "--all", "--dir", f.dir, "--file", target)
	requireOK(t, r)
	data, err = os.ReadFile(target)
	require.NoError(t, err)
	require.Contains(t, string(data), `"type":"trailer"`)
}

// TestExportFileInsideTheStoreIsRefused: export --file naming a path in
// the store's own directory (one of its files, a new file there, or a
// path reaching it through a symlink) is a usage error wrapping
// journal.ErrInvalid, nothing is written there, and the store still
// opens: the rename into place replaced a store file (--file
// DIR/MANIFEST-000001), which left the store unopenable.
func TestExportFileInsideTheStoreIsRefused(t *testing.T) {
	f := newFixture(t)
	before, err := os.ReadDir(f.dir)
	require.NoError(t, err)
	manifest := ""
	for _, e := range before {
		if strings.HasPrefix(e.Name(), "MANIFEST-") {
			manifest = e.Name()
		}
	}
	require.NotEmpty(t, manifest, "the store has a manifest: %v", before)
	link := filepath.Join(t.TempDir(), "store")
	require.NoError(t, os.Symlink(f.dir, link))
	for name, path := range map[string]string{
		"a store file":      filepath.Join(f.dir, "CURRENT"),
		"a new file there":  filepath.Join(f.dir, "export.jsonl"),
		"through a symlink": filepath.Join(link, "CURRENT"),
		"the dir, unclean":  filepath.Join(f.dir, "x", "..", "CURRENT"),
	} {
		t.Run(name, func(t *testing.T) {
			r := cliRun(t, "", "export", "--all", "--dir", f.dir, "--file", path)
			require.Equal(t, exitUsage, r.code, "stderr:\n%s", r.stderr)
			require.Contains(t, r.stderr, "inside the store's directory")
			require.Empty(t, r.stdout)
		})
	}
	after, err := os.ReadDir(f.dir)
	require.NoError(t, err)
	for _, e := range after {
		require.NotContains(t, e.Name(), "export.jsonl", "no export file in the store's directory")
		require.NotContains(t, e.Name(), ".tmp-", "no temporary file in the store's directory")
	}
	r := cliRun(t, "", "conversations", "--dir", f.dir)
	requireOK(t, r)
	require.Contains(t, r.stdout, "finished", "the store still opens, its conversations whole")

	require.False(t, insideDir(filepath.Join(filepath.Dir(f.dir), "beside.jsonl"), f.dir))
	require.False(t, insideDir(f.dir+"-other/x", f.dir), "a sibling whose name starts alike")
}

// TestExportFileInsideTheStoreIsRefusedBeforeItIsOpened: the refusal of a
// --file inside the store's directory is a usage error before the store is
// opened, as the help says of the --file checks: it was made after the
// open, so while a runtime held the store the command failed busy (exit
// 4) rather than saying what was wrong with its arguments, and it opened
// a store it was going to refuse to work on.
func TestExportFileInsideTheStoreIsRefusedBeforeItIsOpened(t *testing.T) {
	f := newFixture(t)
	held, err := openPebble(f.dir, false) // a runtime holding the store
	require.NoError(t, err)
	defer func() { require.NoError(t, held.Close()) }()

	r := cliRun(t, "", "export", "--all", "--dir", f.dir, "--file", filepath.Join(f.dir, "export.jsonl"))
	require.Equal(t, exitUsage, r.code, "stderr:\n%s", r.stderr)
	require.Contains(t, r.stderr, "inside the store's directory")
	require.Empty(t, r.stdout)

	r = cliRun(t, "", "export", "--all", "--dir", f.dir, "--file", filepath.Join(t.TempDir(), "export.jsonl"))
	require.Equal(t, exitBusy, r.code, "a --file elsewhere opens the store, held: stderr:\n%s", r.stderr)
}

// TestExportFileSyncsItsDirectory: export --file syncs PATH's directory
// after renaming the file into place (so the rename survives a crash), and
// a failing sync is an error naming PATH, which is in place and complete,
// with no temporary file left.
func TestExportFileSyncsItsDirectory(t *testing.T) {
	f := newFixture(t)
	out := t.TempDir()
	path := filepath.Join(out, "export.jsonl")
	want := exportOf(t, f, "finished")
	errSync := errors.New("sync failed")
	var synced []string
	orig := syncDir
	t.Cleanup(func() { syncDir = orig })
	syncDir = func(dir string) error {
		b, err := os.ReadFile(path)
		require.NoError(t, err, "the file is in place when its directory is synced")
		require.Equal(t, want, string(b))
		synced = append(synced, dir)
		return errSync
	}

	r := cliRun(t, "", "export", "finished", "--file", path, "--dir", f.dir)
	require.NotEqual(t, exitOK, r.code)
	require.Empty(t, r.stdout)
	require.Contains(t, r.stderr, path+" written, but its directory not synced")
	require.Contains(t, r.stderr, "sync failed")
	require.Equal(t, []string{out}, synced)
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, want, string(b))
	entries, err := os.ReadDir(out)
	require.NoError(t, err)
	require.Len(t, entries, 1, "no temporary file remains")

	// The real sync succeeds.
	syncDir = orig
	requireOK(t, cliRun(t, "", "export", "finished", "--file", path, "--dir", f.dir))
}
