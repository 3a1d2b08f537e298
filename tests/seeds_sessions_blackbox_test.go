package tests

// Black-box tests of edge cases the session seeds (ExAthena, Planck,
// SkillKit) name, through the public API.

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent/scripted"
)

// TestSeedsFileRewindAcrossAFileAndADirectoryOfOneName: ExAthena's rewind
// restores every checkpointed file. A file that the tools replaced with a
// directory of files after the target comes back byte for byte (the files
// made in the directory go, then the directory), and a directory of files
// that the tools replaced with a file comes back (the file goes, then the
// directory's files return); a directory holding a file no checkpoint
// recorded is left as it is, and the restore fails.
func TestSeedsFileRewindAcrossAFileAndADirectoryOfOneName(t *testing.T) {
	h, root := filesHarness(t, openStore(t, "memory"), nil, nil)
	ctx := ctxT(t)
	require.NoError(t, os.WriteFile(filepath.Join(root, "x"), []byte("file x"), 0o640))
	require.NoError(t, os.MkdirAll(filepath.Join(root, "d"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "d", "f"), []byte("in d"), 0o600))
	h.model.Push("f",
		scripted.Reply("remove", writeCall(fileArgs{Path: "x", Delete: true}), writeCall(fileArgs{Path: "d/f", Delete: true})),
		scripted.Text("removed"))
	_, err := h.rt.SendAndWait(ctx, "f", "remove", user) // 1-8
	require.NoError(t, err)
	require.NoError(t, os.Remove(filepath.Join(root, "d"))) // by hand: "d" is an empty directory, not a file
	h.model.Push("f",
		scripted.Reply("replace", writeCall(fileArgs{Path: "x/y", Content: "inner"}), writeCall(fileArgs{Path: "d", Content: "file d"})),
		scripted.Text("replaced"))
	_, err = h.rt.SendAndWait(ctx, "f", "replace", user)
	require.NoError(t, err)
	require.Equal(t, "inner", readFile(t, root, "x/y"))
	require.Equal(t, "file d", readFile(t, root, "d"))

	rep, err := h.rt.RewindWithReport(ctx, "f", 0, lazarus.RewindOptions{Files: true}, user)
	require.NoError(t, err)
	var got []string
	for _, f := range rep.Files {
		got = append(got, f.Path+" "+string(f.Action))
	}
	require.Equal(t, []string{"d deleted", "d/f created", "x created", "x/y deleted"}, got, "in path order")
	require.Equal(t, "file x", readFile(t, root, "x"), "the file comes back in the directory's place")
	info, err := os.Stat(filepath.Join(root, "x"))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o640), info.Mode())
	require.Equal(t, "in d", readFile(t, root, "d/f"), "the directory's file comes back in the file's place")

	// Again, in another conversation, with a file no tool recorded in the
	// directory: it stays.
	require.NoError(t, os.WriteFile(filepath.Join(root, "z"), []byte("file z"), 0o644))
	h.model.Push("g",
		scripted.Reply("rm", writeCall(fileArgs{Path: "z", Delete: true})),
		scripted.Reply("mk", writeCall(fileArgs{Path: "z/y", Content: "inner"})),
		scripted.Text("done"))
	_, err = h.rt.SendAndWait(ctx, "g", "again", user)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(root, "z", "mine"), []byte("by hand"), 0o644))
	_, err = h.rt.RewindWithReport(ctx, "g", 0, lazarus.RewindOptions{Files: true}, user)
	require.ErrorContains(t, err, `restore "z"`)
	require.Equal(t, "by hand", readFile(t, root, "z/mine"), "a file no checkpoint recorded is never removed")
}
