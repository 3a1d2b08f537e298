package tests

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// fileArgs are the arguments of the write_file tool.
type fileArgs struct {
	Path    string `json:"path"`
	Content string `json:"content"`
	Delete  bool   `json:"delete"`
	// Repeat makes the tool write Content this many times over.
	Repeat int `json:"repeat"`
}

// pathErr is what Before returned for a path.
type pathErr struct {
	path string
	err  error
}

// writeFileTool changes files under root, recording each through the
// call's checkpointer first. What Before returns goes to errs (if set); an
// error fails the call.
func writeFileTool(root string, errs chan<- pathErr) agent.Tool {
	return agent.Tool{
		Name: "write_file", Description: "write or delete a file", Executor: messages.Executor_EXECUTOR_SERVER,
		Run: func(ctx context.Context, inv agent.Invocation) (string, error) {
			var a fileArgs
			if err := json.Unmarshal([]byte(inv.Arguments), &a); err != nil {
				return "", err
			}
			err := inv.CheckpointFile(ctx, a.Path)
			if errs != nil {
				errs <- pathErr{a.Path, err}
			}
			if err != nil {
				return "", err
			}
			p := a.Path
			if !filepath.IsAbs(p) {
				p = filepath.Join(root, p)
			}
			if a.Delete {
				return `{"deleted":true}`, os.Remove(p)
			}
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return "", err
			}
			content := []byte(a.Content)
			if a.Repeat > 0 {
				content = bytes.Repeat(content, a.Repeat)
			}
			return `{"written":true}`, os.WriteFile(p, content, 0o644)
		},
	}
}

func writeCall(args fileArgs) *messages.ToolCall {
	b, _ := json.Marshal(args)
	return scripted.Call("write_file", string(b))
}

// filesHarness is a harness whose Runtime keeps file checkpoints under a
// fresh root.
func filesHarness(t *testing.T, store journal.Store, errs chan<- pathErr, mod func(*lazarus.Options)) (*harness, string) {
	root := t.TempDir()
	h := newHarness(t, store, func(o *lazarus.Options) {
		o.Tools = append(o.Tools, writeFileTool(root, errs))
		o.Files = lazarus.FilesOptions{Root: root}
		if mod != nil {
			mod(o)
		}
	})
	return h, root
}

func readFile(t *testing.T, root, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, rel))
	if os.IsNotExist(err) {
		return "<absent>"
	}
	require.NoError(t, err)
	return string(b)
}

// toolCallSeqs returns the seqs of the conversation's tool_call events.
func (h *harness) toolCallSeqs(conv string) []uint64 {
	var out []uint64
	for _, ev := range h.history(conv) {
		if ev.GetToolCall() != nil {
			out = append(out, ev.GetSeq())
		}
	}
	return out
}

// TestFileRewindOnEveryStore: server tools change files through their
// checkpointer; a rewind with Files puts every file back to its state at
// the target (restored, created again, deleted) and says so, on every
// adapter; a second rewind further back goes further back.
func TestFileRewindOnEveryStore(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h, root := filesHarness(t, openStore(t, kind), nil, nil)
		ctx := ctxT(t)
		require.NoError(t, os.WriteFile(filepath.Join(root, "a.txt"), []byte("v1"), 0o600))
		require.NoError(t, os.WriteFile(filepath.Join(root, "c.txt"), []byte("keep"), 0o644))

		h.model.Push("f",
			scripted.Reply("first edit", writeCall(fileArgs{Path: "a.txt", Content: "v2"}), writeCall(fileArgs{Path: "sub/b.txt", Content: "new"})),
			scripted.Text("first done"),
			// Calls of one answer run at once: each changes its own file.
			scripted.Reply("second edit", writeCall(fileArgs{Path: "a.txt", Content: "v3"}), writeCall(fileArgs{Path: filepath.Join(root, "c.txt"), Delete: true})),
			scripted.Reply("third edit", writeCall(fileArgs{Path: "a.txt", Content: "v4"})),
			scripted.Text("second done"))
		_, err := h.rt.Send(ctx, "f", "edit the files", user)
		require.NoError(t, err)
		first := h.awaitEvent("f", 0, isAssistantText("first done")).GetSeq()
		_, err = h.rt.Send(ctx, "f", "edit them again", user)
		require.NoError(t, err)
		h.awaitEvent("f", first, isAssistantText("second done"))
		require.Equal(t, "v4", readFile(t, root, "a.txt"))
		require.Equal(t, "new", readFile(t, root, "sub/b.txt"))
		require.Equal(t, "<absent>", readFile(t, root, "c.txt"))

		calls := h.toolCallSeqs("f")
		require.Len(t, calls, 5)
		// Back to the end of the first turn: the second turn's changes go.
		rep, err := h.rt.RewindWithReport(ctx, "f", first, lazarus.RewindOptions{Files: true}, user)
		require.NoError(t, err)
		rewound, err := h.store.Events(ctx, "f", journal.EventQuery{After: rep.Seq - 1, Before: rep.Seq + 1})
		require.NoError(t, err)
		require.Len(t, rewound, 1)
		require.Equal(t, first, rewound[0].GetRewind().GetToSeq(), "Seq is the rewind event's")
		assert.Equal(t, []lazarus.FileRestore{
			{Path: "a.txt", Action: lazarus.FileRestored, Seq: calls[2], Size: 2},
			{Path: "c.txt", Action: lazarus.FileCreated, Seq: calls[3], Size: 4},
		}, rep.Files)
		assert.Equal(t, "v2", readFile(t, root, "a.txt"), "the content before the first change after the target")
		assert.Equal(t, "keep", readFile(t, root, "c.txt"))
		info, err := os.Stat(filepath.Join(root, "c.txt"))
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o644), info.Mode().Perm(), "the mode comes back")

		// Back to the first message: every change goes.
		rep, err = h.rt.RewindWithReport(ctx, "f", 1, lazarus.RewindOptions{Files: true}, user)
		require.NoError(t, err)
		assert.Equal(t, []lazarus.FileRestore{
			{Path: "a.txt", Action: lazarus.FileRestored, Seq: calls[0], Size: 2},
			{Path: "c.txt", Action: lazarus.FileRestored, Seq: calls[3], Size: 4},
			{Path: "sub/b.txt", Action: lazarus.FileDeleted, Seq: calls[1]},
		}, rep.Files)
		assert.Equal(t, "v1", readFile(t, root, "a.txt"))
		assert.Equal(t, "<absent>", readFile(t, root, "sub/b.txt"))
		info, err = os.Stat(filepath.Join(root, "a.txt"))
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o600), info.Mode().Perm())

		// A rewind without Files leaves the files alone.
		require.NoError(t, os.WriteFile(filepath.Join(root, "a.txt"), []byte("by hand"), 0o600))
		require.NoError(t, h.rt.Rewind(ctx, "f", 1, lazarus.RewindOptions{}, user))
		assert.Equal(t, "by hand", readFile(t, root, "a.txt"))
		entries, err := os.ReadDir(root)
		require.NoError(t, err)
		for _, e := range entries {
			assert.NotContains(t, e.Name(), ".lazarus-restore", "no temporary file is left")
		}
	})
}

// TestFileCheckpointLargeFileStreamed: a file of several chunks is kept in
// chunks (never as one record) and comes back whole.
func TestFileCheckpointLargeFileStreamed(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h, root := filesHarness(t, openStore(t, kind), nil, nil)
		ctx := ctxT(t)
		big := bytes.Repeat([]byte("0123456789abcdef"), (3*journal.FileChunkBytes+100)/16)
		require.NoError(t, os.WriteFile(filepath.Join(root, "big.bin"), big, 0o644))
		h.model.Push("big", scripted.Reply("", writeCall(fileArgs{Path: "big.bin", Content: "small now"})), scripted.Text("done"))
		_, err := h.rt.Send(ctx, "big", "shrink it", user)
		require.NoError(t, err)
		h.awaitEvent("big", 0, isAssistantText("done"))

		fc := h.rt.Store().(journal.FileCheckpoints)
		cps, err := fc.FileCheckpoints(ctx, "big", 0)
		require.NoError(t, err)
		require.Len(t, cps, 1)
		sum := sha256.Sum256(big)
		require.Equal(t, hex.EncodeToString(sum[:]), cps[0].GetSha256())
		blob, err := fc.FileBlob(ctx, cps[0].GetSha256())
		require.NoError(t, err)
		require.Equal(t, int64(len(big)), blob.GetSize())
		require.Equal(t, uint32(4), blob.GetChunks(), "kept in chunks of journal.FileChunkBytes")

		rep, err := h.rt.RewindWithReport(ctx, "big", 1, lazarus.RewindOptions{Files: true}, user)
		require.NoError(t, err)
		require.Len(t, rep.Files, 1)
		got, err := os.ReadFile(filepath.Join(root, "big.bin"))
		require.NoError(t, err)
		require.True(t, bytes.Equal(big, got), "restored whole")
	})
}

// TestFileBlobsSweptWithTheirConversation: deleting a conversation lets
// the sweeper take its blobs, while a blob another conversation also
// names stays.
func TestFileBlobsSweptWithTheirConversation(t *testing.T) {
	h, root := filesHarness(t, openStore(t, "pebble"), nil, func(o *lazarus.Options) {
		o.Files.BlobTTL = time.Nanosecond
	})
	ctx := ctxT(t)
	require.NoError(t, os.WriteFile(filepath.Join(root, "shared.txt"), []byte("same"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(root, "own.txt"), []byte("mine"), 0o644))
	h.model.Push("x", scripted.Reply("", writeCall(fileArgs{Path: "shared.txt", Content: "x"}), writeCall(fileArgs{Path: "own.txt", Content: "x"})), scripted.Text("done"))
	_, err := h.rt.Send(ctx, "x", "go", user)
	require.NoError(t, err)
	h.awaitEvent("x", 0, isAssistantText("done"))
	require.NoError(t, os.WriteFile(filepath.Join(root, "shared.txt"), []byte("same"), 0o644))
	h.model.Push("y", scripted.Reply("", writeCall(fileArgs{Path: "shared.txt", Content: "y"})), scripted.Text("done"))
	_, err = h.rt.Send(ctx, "y", "go", user)
	require.NoError(t, err)
	h.awaitEvent("y", 0, isAssistantText("done"))

	fc := h.rt.Store().(journal.FileCheckpoints)
	sumOf := func(s string) string { b := sha256.Sum256([]byte(s)); return hex.EncodeToString(b[:]) }
	n, err := h.rt.SweepFileBlobs(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "every blob is referenced")
	require.NoError(t, h.rt.Delete(ctx, "x"))
	n, err = h.rt.SweepFileBlobs(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	_, err = fc.FileBlob(ctx, sumOf("mine"))
	require.ErrorIs(t, err, journal.ErrNotFound)
	_, err = fc.FileBlob(ctx, sumOf("same"))
	require.NoError(t, err, "y still names it")
}

// TestFileCheckpointBadInput: paths that leave the root, files too large,
// directories, and a runtime without a root, each with its sentinel.
func TestFileCheckpointBadInput(t *testing.T) {
	errs := make(chan pathErr, 16)
	outside := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(outside, "secret"), []byte("s"), 0o644))
	h, root := filesHarness(t, openStore(t, "memory"), errs, func(o *lazarus.Options) {
		o.Files.MaxFileBytes = 8
	})
	ctx := ctxT(t)
	require.NoError(t, os.Symlink(outside, filepath.Join(root, "link")))
	require.NoError(t, os.WriteFile(filepath.Join(root, "big"), []byte("123456789"), 0o644))
	require.NoError(t, os.Mkdir(filepath.Join(root, "dir"), 0o755))
	want := map[string]error{
		"../escape":                      agent.ErrOutsideRoot,
		filepath.Join(outside, "secret"): agent.ErrOutsideRoot,
		"link/secret":                    agent.ErrOutsideRoot,
		"link/new":                       agent.ErrOutsideRoot,
		"big":                            journal.ErrTooLarge,
		"dir":                            journal.ErrInvalid,
		"":                               journal.ErrInvalid,
		"big/inside":                     journal.ErrInvalid, // under a file: no such path can be
		strings.Repeat("n", 300):         journal.ErrInvalid, // a name longer than a file system's
	}
	var calls []*messages.ToolCall
	for p := range want {
		calls = append(calls, writeCall(fileArgs{Path: p, Content: "x"}))
	}
	h.model.Push("bad", scripted.Reply("", calls...), scripted.Text("done"))
	_, err := h.rt.Send(ctx, "bad", "try", user)
	require.NoError(t, err)
	h.awaitEvent("bad", 0, isAssistantText("done"))
	for range want {
		select {
		case pe := <-errs:
			require.ErrorIs(t, pe.err, want[pe.path], "Before(%q)", pe.path)
		case <-ctx.Done():
			t.Fatal("a call did not run")
		}
	}
	assert.Equal(t, "s", readFile(t, outside, "secret"), "nothing outside the root was touched")
	cps, err := h.rt.Store().(journal.FileCheckpoints).FileCheckpoints(ctx, "bad", 0)
	require.NoError(t, err)
	assert.Empty(t, cps, "no refused path was recorded")

	// Without a root: tools get no checkpointer, rewinds and sweeps refuse.
	plain := newHarness(t, openStore(t, "memory"), func(o *lazarus.Options) {
		o.Tools = append(o.Tools, writeFileTool(t.TempDir(), errs))
	})
	plain.model.Push("p", scripted.Reply("", writeCall(fileArgs{Path: "a", Content: "x"})), scripted.Text("done"))
	_, err = plain.rt.Send(ctx, "p", "try", user)
	require.NoError(t, err)
	require.ErrorIs(t, recv(t, errs, "tool error").err, agent.ErrNoCheckpoints)
	plain.awaitEvent("p", 0, isAssistantText("done"))
	_, err = plain.rt.RewindWithReport(ctx, "p", 1, lazarus.RewindOptions{Files: true}, user)
	require.ErrorIs(t, err, agent.ErrNoCheckpoints)
	assert.Len(t, plain.history("p"), 5, "the refused rewind wrote nothing")
	_, err = plain.rt.SweepFileBlobs(ctx)
	require.ErrorIs(t, err, agent.ErrNoCheckpoints)

	// Options refused by Open.
	for name, fo := range map[string]lazarus.FilesOptions{
		"missing root":  {Root: filepath.Join(root, "missing")},
		"negative max":  {Root: root, MaxFileBytes: -1},
		"max too large": {Root: root, MaxFileBytes: journal.MaxFileBlobBytes + 1},
	} {
		_, err := lazarus.Open(lazarus.Options{Model: scripted.New(scripted.Options{}), Files: fo})
		require.ErrorIs(t, err, journal.ErrInvalid, name)
	}
}

// TestFileRewindAfterParallelCalls: the server calls of one answer run at
// once, so a later call may change a file before an earlier one records
// it. The rewind uses the record made first, which read the file before
// any change: here the later call (seq 4) records and writes first, then
// the earlier one (seq 3) records the later one's content and writes.
func TestFileRewindAfterParallelCalls(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(root, "f.txt"), []byte("original"), 0o644))
	secondWrote := make(chan struct{})
	order := agent.Tool{
		Name: "ordered_write", Description: "write f.txt in a set order", Executor: messages.Executor_EXECUTOR_SERVER,
		Run: func(ctx context.Context, inv agent.Invocation) (string, error) {
			var a struct{ Role string }
			if err := json.Unmarshal([]byte(inv.Arguments), &a); err != nil {
				return "", err
			}
			if a.Role == "first" {
				select {
				case <-secondWrote:
				case <-ctx.Done():
					return "", ctx.Err()
				}
			}
			if err := inv.CheckpointFile(ctx, "f.txt"); err != nil {
				return "", err
			}
			if err := os.WriteFile(filepath.Join(root, "f.txt"), []byte("by "+a.Role), 0o644); err != nil {
				return "", err
			}
			if a.Role == "second" {
				close(secondWrote)
			}
			return `{}`, nil
		},
	}
	h := newHarness(t, openStore(t, "memory"), func(o *lazarus.Options) {
		o.Tools = append(o.Tools, order)
		o.Files = lazarus.FilesOptions{Root: root}
	})
	ctx := ctxT(t)
	h.model.Push("p", scripted.Reply("", scripted.Call("ordered_write", `{"role":"first"}`), scripted.Call("ordered_write", `{"role":"second"}`)), scripted.Text("done"))
	_, err := h.rt.Send(ctx, "p", "go", user)
	require.NoError(t, err)
	h.awaitEvent("p", 0, isAssistantText("done"))
	require.Equal(t, "by first", readFile(t, root, "f.txt"))
	calls := h.toolCallSeqs("p")
	require.Len(t, calls, 2)

	rep, err := h.rt.RewindWithReport(ctx, "p", 1, lazarus.RewindOptions{Files: true}, user)
	require.NoError(t, err)
	require.Equal(t, []lazarus.FileRestore{{Path: "f.txt", Action: lazarus.FileRestored, Seq: calls[1], Size: 8}}, rep.Files,
		"the second call's record, made first")
	require.Equal(t, "original", readFile(t, root, "f.txt"))
}

// TestFileBlobSweeperRunsOnTheClock: with FilesOptions.BlobTTL set, the
// sweeper removes on the Runtime's clock (every BlobTTL/2, at least a
// second apart) the blobs no checkpoint names any longer; with a negative
// BlobTTL there is no automatic sweep.
func TestFileBlobSweeperRunsOnTheClock(t *testing.T) {
	sumOf := func(s string) string { b := sha256.Sum256([]byte(s)); return hex.EncodeToString(b[:]) }
	for _, c := range []struct {
		name  string
		ttl   time.Duration
		swept bool
	}{
		{"sweeps", time.Nanosecond, true},
		{"negative: no sweep", -1, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			h, root := filesHarness(t, openStore(t, "memory"), nil, func(o *lazarus.Options) {
				o.Files.BlobTTL = c.ttl
			})
			ctx := ctxT(t)
			require.NoError(t, os.WriteFile(filepath.Join(root, "a.txt"), []byte("before"), 0o644))
			h.model.Push("x", scripted.Reply("", writeCall(fileArgs{Path: "a.txt", Content: "after"})), scripted.Text("done"))
			_, err := h.rt.Send(ctx, "x", "go", user)
			require.NoError(t, err)
			h.awaitEvent("x", 0, isAssistantText("done"))
			fc := h.rt.Store().(journal.FileCheckpoints)
			_, err = fc.FileBlob(ctx, sumOf("before"))
			require.NoError(t, err, "the checkpoint's blob is kept")

			h.clock.Advance(10 * time.Second)
			_, err = fc.FileBlob(ctx, sumOf("before"))
			require.NoError(t, err, "a blob a checkpoint names is never swept")
			require.NoError(t, h.rt.Delete(ctx, "x"))
			h.clock.Advance(time.Second) // runs the sweep due, synchronously
			_, err = fc.FileBlob(ctx, sumOf("before"))
			if c.swept {
				require.ErrorIs(t, err, journal.ErrNotFound, "the sweeper took the blob of the deleted conversation")
			} else {
				require.NoError(t, err, "no automatic sweep with a negative BlobTTL")
				n, err := h.rt.SweepFileBlobs(ctx)
				require.NoError(t, err)
				require.Equal(t, 1, n, "SweepFileBlobs still works")
			}
		})
	}
}

// TestFileCheckpointThroughSymbolicLinks: a path whose last part is a
// symbolic link inside the root (relative, absolute, or to a file not
// there yet) records the file it leads to, so the rewind puts that file
// back and leaves the link a link; a link to a missing file outside the
// root is refused with agent.ErrOutsideRoot, as one to an existing file.
func TestFileCheckpointThroughSymbolicLinks(t *testing.T) {
	errs := make(chan pathErr, 16)
	outside := t.TempDir()
	h, root := filesHarness(t, openStore(t, "memory"), errs, nil)
	ctx := ctxT(t)
	require.NoError(t, os.WriteFile(filepath.Join(root, "real.txt"), []byte("r1"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(root, "other.txt"), []byte("o1"), 0o644))
	require.NoError(t, os.Symlink("real.txt", filepath.Join(root, "rel-link")))
	require.NoError(t, os.Symlink(filepath.Join(root, "other.txt"), filepath.Join(root, "abs-link")))
	require.NoError(t, os.Symlink("made.txt", filepath.Join(root, "dangling")))
	require.NoError(t, os.Symlink(filepath.Join(outside, "new"), filepath.Join(root, "out")))

	want := map[string]error{"rel-link": nil, "abs-link": nil, "dangling": nil, "out": agent.ErrOutsideRoot}
	h.model.Push("s", scripted.Reply("",
		writeCall(fileArgs{Path: "rel-link", Content: "r2"}),
		writeCall(fileArgs{Path: "abs-link", Content: "o2"}),
		writeCall(fileArgs{Path: "dangling", Content: "m2"}),
		writeCall(fileArgs{Path: "out", Content: "x"})), scripted.Text("done"))
	_, err := h.rt.Send(ctx, "s", "go", user)
	require.NoError(t, err)
	h.awaitEvent("s", 0, isAssistantText("done"))
	for range want {
		pe := recv(t, errs, "tool error")
		if want[pe.path] == nil {
			require.NoError(t, pe.err, "Before(%q)", pe.path)
		} else {
			require.ErrorIs(t, pe.err, want[pe.path], "Before(%q)", pe.path)
		}
	}
	require.Equal(t, "r2", readFile(t, root, "real.txt"))
	require.Equal(t, "o2", readFile(t, root, "other.txt"))
	require.Equal(t, "m2", readFile(t, root, "made.txt"))
	_, err = os.Stat(filepath.Join(outside, "new"))
	require.ErrorIs(t, err, os.ErrNotExist, "nothing written outside the root")

	rep, err := h.rt.RewindWithReport(ctx, "s", 1, lazarus.RewindOptions{Files: true}, user)
	require.NoError(t, err)
	var did []string
	for _, f := range rep.Files {
		did = append(did, f.Path+" "+string(f.Action))
	}
	require.Equal(t, []string{"made.txt deleted", "other.txt restored", "real.txt restored"}, did)
	require.Equal(t, "r1", readFile(t, root, "real.txt"))
	require.Equal(t, "o1", readFile(t, root, "other.txt"))
	require.Equal(t, "<absent>", readFile(t, root, "made.txt"))
	for _, link := range []string{"rel-link", "abs-link", "dangling", "out"} {
		fi, err := os.Lstat(filepath.Join(root, link))
		require.NoError(t, err)
		require.NotZero(t, fi.Mode()&os.ModeSymlink, "%s is still a link", link)
	}
}

// TestFileRewindOfAForkUsesItsOwnCalls: a fork does not copy the file
// checkpoints of the calls it copies (they stay with the source), so a
// rewind of the fork with Files restores only what its own calls changed.
func TestFileRewindOfAForkUsesItsOwnCalls(t *testing.T) {
	h, root := filesHarness(t, openStore(t, "memory"), nil, nil)
	ctx := ctxT(t)
	require.NoError(t, os.WriteFile(filepath.Join(root, "a.txt"), []byte("a1"), 0o644))
	h.model.Push("src", scripted.Reply("", writeCall(fileArgs{Path: "a.txt", Content: "a2"})), scripted.Text("done"))
	_, err := h.rt.SendAndWait(ctx, "src", "go", user)
	require.NoError(t, err)
	last := uint64(len(h.history("src")))
	require.NoError(t, h.rt.Fork(ctx, "src", last, "fork"))
	h.model.Push("fork", scripted.Reply("", writeCall(fileArgs{Path: "b.txt", Content: "b2"})), scripted.Text("done"))
	_, err = h.rt.SendAndWait(ctx, "fork", "more", user)
	require.NoError(t, err)

	rep, err := h.rt.RewindWithReport(ctx, "fork", 1, lazarus.RewindOptions{Files: true}, user)
	require.NoError(t, err)
	require.Equal(t, []lazarus.FileRestore{{Path: "b.txt", Action: lazarus.FileDeleted, Seq: h.toolCallSeqs("fork")[1]}}, rep.Files)
	require.Equal(t, "a2", readFile(t, root, "a.txt"), "the copied call's change stays")
	rep, err = h.rt.RewindWithReport(ctx, "src", 1, lazarus.RewindOptions{Files: true}, user)
	require.NoError(t, err)
	require.Len(t, rep.Files, 1)
	require.Equal(t, "a1", readFile(t, root, "a.txt"), "the source's rewind has the record")
}

// TestFileRewindRestoresModeZero: a checkpoint keeps a file's permission
// bits, 0000 included (Before records them for any file it can read, as
// root reads a file of mode 0000), and the rewind gives them back exactly:
// a file of mode 0000 came back as 0644, as if no mode had been recorded.
// The record is written here as Before writes it, so that the test does not
// depend on running as root.
func TestFileRewindRestoresModeZero(t *testing.T) {
	h, root := filesHarness(t, openStore(t, "memory"), nil, nil)
	ctx := ctxT(t)
	h.model.Push("m", scripted.Reply("", writeCall(fileArgs{Path: "a.txt", Content: "new"})), scripted.Text("done"))
	_, err := h.rt.Send(ctx, "m", "write it", user)
	require.NoError(t, err)
	h.awaitEvent("m", 0, isAssistantText("done"))
	var call *messages.Event
	for _, ev := range h.history("m") {
		if ev.GetToolCall() != nil {
			call = ev
		}
	}
	require.NotNil(t, call)

	fc := h.store.(journal.FileCheckpoints)
	content := []byte("locked")
	sum := sha256.Sum256(content)
	hexSum := hex.EncodeToString(sum[:])
	_, err = fc.PutFileBlob(ctx, hexSum, int64(len(content)), bytes.NewReader(content))
	require.NoError(t, err)
	_, err = fc.PutFileCheckpoint(ctx, &messages.FileCheckpoint{ConversationId: "m", Seq: call.GetSeq(), ToolCallId: call.GetToolCall().GetCall().GetId(),
		Path: "locked.txt", Sha256: hexSum, Size: int64(len(content)), Mode: 0, Created: timestamppb.Now()})
	require.NoError(t, err)

	rep, err := h.rt.RewindWithReport(ctx, "m", 1, lazarus.RewindOptions{Files: true}, user)
	require.NoError(t, err)
	assert.Equal(t, []lazarus.FileRestore{
		{Path: "a.txt", Action: lazarus.FileDeleted, Seq: call.GetSeq()},
		{Path: "locked.txt", Action: lazarus.FileCreated, Seq: call.GetSeq(), Size: int64(len(content))},
	}, rep.Files)
	p := filepath.Join(root, "locked.txt")
	info, err := os.Stat(p)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0), info.Mode().Perm(), "the recorded mode 0000 comes back")
	require.NoError(t, os.Chmod(p, 0o600)) // to read it without root
	assert.Equal(t, "locked", readFile(t, root, "locked.txt"))
}

// TestFileRestoreRemovesLeftoverTemporaryFiles: a restore writes each file
// to a temporary file beside it and renames it over the file, so a crash in
// between leaves the temporary file; the next restore in that directory
// removes the ones left before its Runtime opened, and keeps a newer one
// (another process's restore in progress), files of other names (a user's
// "a.txt.lazarus-restore" too), and the leftovers
// of directories it does not restore into. They stayed for good.
func TestFileRestoreRemovesLeftoverTemporaryFiles(t *testing.T) {
	h, root := filesHarness(t, openStore(t, "memory"), nil, nil)
	ctx := ctxT(t)
	sub, other := filepath.Join(root, "sub"), filepath.Join(root, "other")
	require.NoError(t, os.MkdirAll(sub, 0o755))
	require.NoError(t, os.MkdirAll(other, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(sub, "a.txt"), []byte("v1"), 0o644))
	h.model.Push("t", scripted.Reply("", writeCall(fileArgs{Path: "sub/a.txt", Content: "v2"})), scripted.Text("done"))
	_, err := h.rt.Send(ctx, "t", "change it", user)
	require.NoError(t, err)
	h.awaitEvent("t", 0, isAssistantText("done"))

	// What crashed restores left, before this Runtime opened.
	past := time.Now().Add(-time.Hour)
	plant := func(p string, mtime time.Time) {
		t.Helper()
		require.NoError(t, os.WriteFile(p, []byte("half"), 0o600))
		require.NoError(t, os.Chtimes(p, mtime, mtime))
	}
	plant(filepath.Join(sub, ".lazarus-restore-0123456789abcdef"), past)
	plant(filepath.Join(sub, "a.txt.lazarus-restore"), past)
	plant(filepath.Join(sub, ".lazarus-restore-fedcba9876543210"), time.Now().Add(time.Hour)) // in progress elsewhere
	plant(filepath.Join(sub, ".lazarus-restore-notours"), past)
	plant(filepath.Join(sub, "notes.txt"), past)
	plant(filepath.Join(other, ".lazarus-restore-0123456789abcdef"), past)

	rep, err := h.rt.RewindWithReport(ctx, "t", 1, lazarus.RewindOptions{Files: true}, user)
	require.NoError(t, err)
	require.Len(t, rep.Files, 1)
	assert.Equal(t, "v1", readFile(t, root, "sub/a.txt"))
	names := func(dir string) []string {
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		var out []string
		for _, e := range entries {
			out = append(out, e.Name())
		}
		return out
	}
	assert.ElementsMatch(t, []string{"a.txt", "a.txt.lazarus-restore", ".lazarus-restore-fedcba9876543210", ".lazarus-restore-notours", "notes.txt"}, names(sub))
	assert.ElementsMatch(t, []string{".lazarus-restore-0123456789abcdef"}, names(other), "a directory no restore writes to is left alone")
}

// TestFileRestoreOfALongName: a file whose name is as long as a name may
// be is restored: the temporary file was named after it, 16 bytes longer,
// and the restore failed with ENAMETOOLONG.
func TestFileRestoreOfALongName(t *testing.T) {
	h, root := filesHarness(t, openStore(t, "memory"), nil, nil)
	ctx := ctxT(t)
	name := strings.Repeat("n", 250)
	require.NoError(t, os.WriteFile(filepath.Join(root, name), []byte("v1"), 0o644))
	h.model.Push("l", scripted.Reply("", writeCall(fileArgs{Path: name, Content: "v2"})), scripted.Text("done"))
	_, err := h.rt.Send(ctx, "l", "change it", user)
	require.NoError(t, err)
	h.awaitEvent("l", 0, isAssistantText("done"))
	require.Equal(t, "v2", readFile(t, root, name))

	rep, err := h.rt.RewindWithReport(ctx, "l", 1, lazarus.RewindOptions{Files: true}, user)
	require.NoError(t, err)
	require.Len(t, rep.Files, 1)
	assert.Equal(t, "v1", readFile(t, root, name))
}
