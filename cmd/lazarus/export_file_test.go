package main

import (
	"errors"
	"os"
	"path/filepath"
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
