package lazarus

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Defaults of FilesOptions.
const (
	// DefaultMaxFileBytes is the largest file a checkpoint keeps unless
	// FilesOptions.MaxFileBytes says otherwise.
	DefaultMaxFileBytes = 64 << 20
	// DefaultBlobTTL is how long an unreferenced blob stays before the
	// sweeper removes it, unless FilesOptions.BlobTTL says otherwise.
	DefaultBlobTTL = 24 * time.Hour
)

// FilesOptions configures file checkpoints: server tools record the files
// they change (agent.Invocation.Files), and Rewind with
// RewindOptions.Files puts them back. The zero value keeps none.
type FilesOptions struct {
	// Root is the directory the server tools' files live under; every
	// checkpointed path is inside it (a path that leaves it, also through
	// a symbolic link, is refused with agent.ErrOutsideRoot). Default
	// empty: no file checkpoints (Invocation.Files is nil). Open fails if
	// it is not a directory, or if the Store does not implement
	// journal.FileCheckpoints (every adapter of this module does). In
	// cluster mode the tools run on the conversation's owner and a
	// rewind's files are restored by the member it is called on: give
	// every member the same shared directory, or call RewindWithReport on
	// the owner (Runtime.Owner). A restore writes temporary files named
	// ".lazarus-restore-" and 16 hex digits under it, and removes such
	// files a crash left (see RewindWithReport): do not use these names.
	Root string
	// MaxFileBytes is the largest file a checkpoint keeps; Before of a
	// larger file fails with an error wrapping journal.ErrTooLarge (the
	// tool decides whether to change the file anyway). Default
	// DefaultMaxFileBytes; at most journal.MaxFileBlobBytes.
	MaxFileBytes int64
	// BlobTTL is how long a blob that no checkpoint names (its
	// conversations were deleted) stays before the sweeper removes it; it
	// is also the grace between a blob's upload and its record. The
	// sweeper runs once when the Runtime opens (in the background), then
	// every BlobTTL/2 (at least a second apart), on the Runtime's clock;
	// the age is measured by the Store's time. Default DefaultBlobTTL;
	// negative: no automatic sweep (SweepFileBlobs still works).
	BlobTTL time.Duration
}

// FileAction says what a rewind did to a file.
type FileAction string

// What a rewind does to a file.
const (
	// FileRestored: the file existed and was overwritten with its content
	// at the rewind's target.
	FileRestored FileAction = "restored"
	// FileCreated: the file did not exist and was written back (in the
	// place of an empty directory made after the target, if one was
	// there).
	FileCreated FileAction = "created"
	// FileDeleted: the file did not exist at the target and was removed.
	FileDeleted FileAction = "deleted"
)

// FileRestore reports one file a rewind restored.
type FileRestore struct {
	// Path is relative to FilesOptions.Root, with forward slashes: the
	// file the tool's path led to, symbolic links followed (the links
	// themselves are left as they are).
	Path string
	// Action is what was done.
	Action FileAction
	// Seq is the seq of the tool call whose checkpoint was used: the
	// first call after the target to record the file.
	Seq uint64
	// Size is the file's size after the restore (0 when deleted).
	Size int64
}

// RewindReport is what RewindWithReport did besides the rewind itself.
type RewindReport struct {
	// Seq is the rewind event's seq: the conversation's head moved there
	// (a retry of the same call reports the event it wrote first).
	Seq uint64
	// Files are the files restored (RewindOptions.Files), in path order.
	// A file no tool changed after the target is not listed, nor one whose
	// checkpoint says it was absent and that is absent now.
	Files []FileRestore
}

// fileRoot is the Runtime's side of file checkpoints.
type fileRoot struct {
	dirs  []string // the root as given (absolute) and with symlinks evaluated
	root  *os.Root
	store journal.FileCheckpoints
	max   int64
	ttl   time.Duration
	stop  func() bool // the sweep timer; under Runtime.mu
	log   *slog.Logger
	// opened is when the Runtime opened (the wall clock, as file times
	// are): a restore's temporary file last modified before it is a
	// leftover of an interrupted restore (removeLeftovers).
	opened time.Time
}

// openFiles sets r.files up from opts.Files, once the Store is chosen.
func (r *Runtime) openFiles() error {
	o := r.opts.Files
	if o.Root == "" {
		return nil
	}
	switch {
	case o.MaxFileBytes < 0 || o.MaxFileBytes > journal.MaxFileBlobBytes:
		return fmt.Errorf("lazarus: Options.Files.MaxFileBytes %d is out of range [0, %d]: %w", o.MaxFileBytes, int64(journal.MaxFileBlobBytes), journal.ErrInvalid)
	case o.MaxFileBytes == 0:
		o.MaxFileBytes = DefaultMaxFileBytes
	}
	if o.BlobTTL == 0 {
		o.BlobTTL = DefaultBlobTTL
	}
	fc, ok := r.store.(journal.FileCheckpoints)
	if !ok {
		return fmt.Errorf("lazarus: Options.Files.Root is set but the Store keeps no file checkpoints (journal.FileCheckpoints): %w", journal.ErrInvalid)
	}
	abs, err := filepath.Abs(o.Root)
	if err != nil {
		return fmt.Errorf("lazarus: Options.Files.Root: %w: %w", err, journal.ErrInvalid)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return fmt.Errorf("lazarus: Options.Files.Root: %w: %w", err, journal.ErrInvalid)
	}
	root, err := os.OpenRoot(real)
	if err != nil {
		return fmt.Errorf("lazarus: Options.Files.Root: %w: %w", err, journal.ErrInvalid)
	}
	r.files = &fileRoot{dirs: []string{abs, real}, root: root, store: fc, max: o.MaxFileBytes, ttl: o.BlobTTL, log: r.log, opened: time.Now()}
	return nil
}

// checkpointHook returns the actors' hook that gives a tool run its
// Checkpointer, nil when file checkpoints are off.
func (r *Runtime) checkpointHook() func(agent.Invocation) agent.Checkpointer {
	if r.files == nil {
		return nil
	}
	return func(inv agent.Invocation) agent.Checkpointer {
		return &checkpointer{f: r.files, inv: inv, done: map[string]bool{}}
	}
}

// maxLinks bounds the symbolic links resolve follows for one path, as the
// kernel's ELOOP does.
const maxLinks = 40

// resolve turns a tool's path into the clean, slash-separated path
// relative to the root of the file it names: every symbolic link on the
// way is followed, the last one too (a write through it changes, or
// creates, its target; os.Root would refuse an absolute one), and a path
// that leaves the root is refused.
func (f *fileRoot) resolve(p string) (string, error) {
	if p == "" || strings.IndexByte(p, 0) >= 0 {
		return "", journal.Invalidf("file path %q", p)
	}
	rel := filepath.Clean(p)
	if filepath.IsAbs(rel) {
		rel = ""
		for _, d := range f.dirs {
			if x, err := filepath.Rel(d, filepath.Clean(p)); err == nil && filepath.IsLocal(x) {
				rel = x
				break
			}
		}
	}
	if rel == "" || !filepath.IsLocal(rel) {
		return "", fmt.Errorf("lazarus: file %q: %w", p, agent.ErrOutsideRoot)
	}
	// Walk it as the kernel does, from the root's real path: cur has no
	// symbolic link in it. Once a part is missing, the rest is what a
	// write would create there.
	real := f.dirs[1]
	cur := real
	rest := strings.Split(rel, string(filepath.Separator))
	links := 0
	for len(rest) > 0 {
		part := rest[0]
		rest = rest[1:]
		switch part {
		case "", ".":
			continue
		case "..":
			cur = filepath.Dir(cur)
			continue
		}
		next := filepath.Join(cur, part)
		info, err := os.Lstat(next)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			cur = filepath.Join(append([]string{next}, rest...)...)
			rest = nil
			continue
		case errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.ENAMETOOLONG):
			// A path under a file, or a name too long for any file: bad
			// input, said without the root's own path.
			var errno syscall.Errno
			errors.As(err, &errno)
			return "", fmt.Errorf("lazarus: file %q: %w", clipID(p), journal.Invalidf("%v", errno))
		case err != nil:
			return "", fmt.Errorf("lazarus: file %q: %w", p, err)
		case info.Mode()&fs.ModeSymlink == 0:
			cur = next
			continue
		}
		if links++; links > maxLinks {
			return "", fmt.Errorf("lazarus: file %q: %w", p, journal.Invalidf("more than %d symbolic links", maxLinks))
		}
		target, err := os.Readlink(next)
		if err != nil {
			return "", fmt.Errorf("lazarus: file %q: %w", p, err)
		}
		if filepath.IsAbs(target) {
			cur = filepath.VolumeName(target) + string(filepath.Separator)
			target = target[len(cur):]
		}
		rest = append(strings.Split(target, string(filepath.Separator)), rest...)
	}
	x, err := filepath.Rel(real, cur)
	if err != nil || !filepath.IsLocal(x) {
		return "", fmt.Errorf("lazarus: file %q: %w", p, agent.ErrOutsideRoot)
	}
	slash := filepath.ToSlash(x)
	if err := journal.ValidateFilePath(slash); err != nil {
		return "", fmt.Errorf("lazarus: %w", err)
	}
	return slash, nil
}

// checkpointer is the agent.Checkpointer of one tool run.
type checkpointer struct {
	f    *fileRoot
	inv  agent.Invocation
	mu   sync.Mutex
	done map[string]bool // paths already recorded by this run
}

// Before implements agent.Checkpointer.
func (c *checkpointer) Before(ctx context.Context, path string) error {
	rel, err := c.f.resolve(path)
	if err != nil {
		return err
	}
	c.mu.Lock()
	done := c.done[rel]
	c.mu.Unlock()
	if done {
		return nil
	}
	if c.inv.Seq == 0 {
		return fmt.Errorf("lazarus: checkpoint %q: %w", path, journal.Invalidf("the call's seq is unknown"))
	}
	cp := &messages.FileCheckpoint{ConversationId: c.inv.ConversationID, Seq: c.inv.Seq, ToolCallId: c.inv.ToolCallID, Path: rel}
	native := filepath.FromSlash(rel)
	info, err := c.f.root.Stat(native)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		cp.Absent = true
	case err != nil:
		return fmt.Errorf("lazarus: checkpoint %q: %w", path, err)
	case !info.Mode().IsRegular():
		return fmt.Errorf("lazarus: checkpoint %q: %w", path, journal.Invalidf("not a regular file"))
	case info.Size() > c.f.max:
		return fmt.Errorf("lazarus: checkpoint %q: %w", path, journal.TooLargef("file of %d bytes exceeds %d", info.Size(), c.f.max))
	default:
		sum, size, err := c.f.hash(native)
		if err != nil {
			return fmt.Errorf("lazarus: checkpoint %q: %w", path, err)
		}
		if size > c.f.max {
			return fmt.Errorf("lazarus: checkpoint %q: %w", path, journal.TooLargef("file of %d bytes exceeds %d", size, c.f.max))
		}
		file, err := c.f.root.Open(native)
		if err != nil {
			return fmt.Errorf("lazarus: checkpoint %q: %w", path, err)
		}
		_, err = c.f.store.PutFileBlob(ctx, sum, size, file)
		_ = file.Close()
		if err != nil {
			return fmt.Errorf("lazarus: checkpoint %q (the file changed while it was read?): %w", path, err)
		}
		cp.Sha256, cp.Size, cp.Mode = sum, size, uint32(info.Mode().Perm())
	}
	// Created is taken once the content was read (see restore).
	cp.Created = timestamppb.Now()
	if _, err := c.f.store.PutFileCheckpoint(ctx, cp); err != nil {
		return fmt.Errorf("lazarus: checkpoint %q: %w", path, err)
	}
	c.mu.Lock()
	c.done[rel] = true
	c.mu.Unlock()
	return nil
}

// hash reads the file once, streaming, for its SHA-256 and size.
func (f *fileRoot) hash(native string) (string, int64, error) {
	file, err := f.root.Open(native)
	if err != nil {
		return "", 0, err
	}
	defer func() { _ = file.Close() }()
	h := sha256.New()
	n, err := io.Copy(h, io.LimitReader(file, f.max+1))
	if err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// restore puts every file changed after toSeq back to its state at toSeq,
// and stops at the first error, returning what it did so far. Of each
// path's checkpoints after toSeq it uses the one made first (Created, then
// seq): server calls of one answer run at once, so a later call may record
// a file before an earlier one; but every change follows its call's
// record, and Created is taken after the content was read, so the record
// made first read the file before any change after toSeq (no call at or
// before toSeq is still open: Rewind refuses such a target).
//
// The files absent at toSeq are removed first, deepest path first, then
// the others are written, shallowest first: a file that a directory of
// files made after toSeq replaced comes back once they are gone, and a
// directory's files come back once the file that replaced it is gone. The
// report is in path order.
func (f *fileRoot) restore(ctx context.Context, conv string, toSeq uint64) ([]FileRestore, error) {
	cps, err := f.store.FileCheckpoints(ctx, conv, toSeq)
	if err != nil {
		return nil, err
	}
	first := map[string]*messages.FileCheckpoint{}
	for _, cp := range cps {
		if f := first[cp.GetPath()]; f == nil || cp.GetCreated().AsTime().Before(f.GetCreated().AsTime()) {
			first[cp.GetPath()] = cp // cps are in seq order: ties keep the lower seq
		}
	}
	paths := make([]string, 0, len(first))
	for p := range first {
		paths = append(paths, p)
	}
	// A path sorts after every path of its ancestors (a prefix and a
	// slash): removals go backwards, writes forwards.
	sort.Strings(paths)
	order := make([]string, 0, len(paths))
	for i := len(paths) - 1; i >= 0; i-- {
		if first[paths[i]].GetAbsent() {
			order = append(order, paths[i])
		}
	}
	for _, p := range paths {
		if !first[p].GetAbsent() {
			order = append(order, p)
		}
	}
	var out []FileRestore
	byPath := func() []FileRestore {
		sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
		return out
	}
	swept := map[string]bool{}
	for _, p := range order {
		cp := first[p]
		if _, err := f.resolve(p); err != nil {
			return byPath(), err
		}
		if dir := filepath.Dir(filepath.FromSlash(p)); !swept[dir] {
			swept[dir] = true
			f.removeLeftovers(dir)
		}
		res, did, err := f.restoreOne(ctx, cp)
		if err != nil {
			return byPath(), fmt.Errorf("lazarus: restore %q: %w", p, err)
		}
		if did {
			out = append(out, res)
		}
	}
	return byPath(), nil
}

func (f *fileRoot) restoreOne(ctx context.Context, cp *messages.FileCheckpoint) (FileRestore, bool, error) {
	native := filepath.FromSlash(cp.GetPath())
	res := FileRestore{Path: cp.GetPath(), Seq: cp.GetSeq()}
	info, statErr := f.root.Lstat(native)
	existed := statErr == nil
	if statErr != nil && !errors.Is(statErr, fs.ErrNotExist) {
		return res, false, statErr
	}
	if cp.GetAbsent() {
		if !existed {
			return res, false, nil
		}
		if err := f.root.Remove(native); err != nil {
			return res, false, err
		}
		res.Action = FileDeleted
		return res, true, nil
	}
	if existed && info.IsDir() {
		// The file was there at the target: a directory made in its
		// place since goes, if empty (the files recorded in it were
		// removed first); one holding files no checkpoint recorded stays,
		// and the restore fails.
		if err := f.root.Remove(native); err != nil {
			return res, false, err
		}
		existed = false
	}
	if dir := filepath.Dir(native); dir != "." {
		if err := f.root.MkdirAll(dir, 0o755); err != nil {
			return res, false, err
		}
	}
	rc, err := f.store.OpenFileBlob(ctx, cp.GetSha256())
	if err != nil {
		return res, false, err
	}
	defer func() { _ = rc.Close() }()
	// Write beside the file, then rename over it: a crash leaves the old
	// file or the new one, never half of it, and at worst the temporary
	// file, which the next restore in its directory removes.
	tmp := filepath.Join(filepath.Dir(native), restoreTempName())
	// The recorded permission bits, exactly: 0 is a file of mode 0000
	// (Before records every file's mode), not a missing mode.
	mode := fs.FileMode(cp.GetMode()).Perm()
	w, err := f.root.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode)
	if err != nil {
		return res, false, err
	}
	n, err := io.Copy(w, rc)
	if err == nil {
		err = w.Sync()
	}
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = f.root.Chmod(tmp, mode)
	}
	if err == nil {
		err = f.root.Rename(tmp, native)
	}
	if err != nil {
		_ = f.root.Remove(tmp)
		return res, false, err
	}
	res.Size = n
	res.Action = FileRestored
	if !existed {
		res.Action = FileCreated
	}
	return res, true, nil
}

// The temporary file of a restore is named restoreTempPrefix followed by
// 16 random lowercase hex digits, in the restored file's directory: short
// whatever the file's name, hidden from a plain listing, and never shared
// by two restores.
const restoreTempPrefix = ".lazarus-restore-"

// restoreTempName returns a new name for a restore's temporary file.
func restoreTempName() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return restoreTempPrefix + hex.EncodeToString(b[:])
}

// isRestoreTemp says whether name is that of a restore's temporary file.
func isRestoreTemp(name string) bool {
	x, ok := strings.CutPrefix(name, restoreTempPrefix)
	if !ok || len(x) != 16 {
		return false
	}
	for _, c := range x {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// removeLeftovers removes, from the directory dir (relative to the root),
// the temporary files that restores interrupted by a crash left: regular
// files named as a restore's temporary file and last modified before the
// Runtime opened. A restore in progress, of this Runtime or of another
// process sharing the root, writes its file after that, so it is left
// alone. A failure is logged, not returned: the restore goes on.
func (f *fileRoot) removeLeftovers(dir string) {
	d, err := f.root.Open(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	if err != nil {
		f.log.Warn("file restore: cannot list a directory for leftover temporary files", "dir", dir, "err", err)
		return
	}
	defer func() { _ = d.Close() }()
	for {
		names, err := d.Readdirnames(256)
		for _, name := range names {
			if !isRestoreTemp(name) {
				continue
			}
			p := filepath.Join(dir, name)
			info, err := f.root.Lstat(p)
			if err != nil || !info.Mode().IsRegular() || !info.ModTime().Before(f.opened) {
				continue
			}
			if err := f.root.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				f.log.Warn("file restore: cannot remove a leftover temporary file", "path", filepath.ToSlash(p), "err", err)
			}
		}
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			f.log.Warn("file restore: cannot list a directory for leftover temporary files", "dir", dir, "err", err)
			return
		}
	}
}

// SweepFileBlobs removes the blobs that no file checkpoint names and that
// were last touched more than FilesOptions.BlobTTL ago (by the Store's
// time), and returns how many it removed. The sweeper calls it once the
// Runtime opens and every BlobTTL/2 after, unless BlobTTL is negative;
// with a negative BlobTTL it keeps no grace at all (a blob uploaded by a
// tool still running, its record not yet written, may go and that Before
// fail): call it then only while no tool runs. Without FilesOptions.Root it returns an error wrapping
// agent.ErrNoCheckpoints; after Close, ErrClosed.
func (r *Runtime) SweepFileBlobs(ctx context.Context) (int, error) {
	if err := r.enter(ctx); err != nil {
		return 0, fmt.Errorf("lazarus: sweep file blobs: %w", err)
	}
	if r.files == nil {
		return 0, fmt.Errorf("lazarus: sweep file blobs: %w", agent.ErrNoCheckpoints)
	}
	return r.sweepFileBlobs(ctx)
}

// sweepFileBlobs is SweepFileBlobs without the entry checks: the sweeper's
// timer runs it under Runtime.gcWG.
func (r *Runtime) sweepFileBlobs(ctx context.Context) (int, error) {
	ttl := max(r.files.ttl, 0)
	return r.files.store.SweepFileBlobs(ctx, time.Now().Add(-ttl))
}

// minSweepEvery bounds how often the blob sweeper runs, whatever the TTL.
const minSweepEvery = time.Second

// armFileSweep schedules the next blob sweep on the clock, after d.
// Open arms the first at once: a process that never runs for BlobTTL/2
// (a command, frequent deploys) still sweeps; each sweep arms the next
// BlobTTL/2 later.
func (r *Runtime) armFileSweep(d time.Duration) {
	if r.files == nil || r.files.ttl <= 0 {
		return
	}
	r.files.stop = r.opts.Clock.AfterFunc(d, func() {
		if !r.startBackground() {
			return
		}
		defer r.gcWG.Done()
		// Under the Runtime's life: Close ends a sweep in progress, which
		// is no failure (the next Open's sweeper goes on).
		if n, err := r.sweepFileBlobs(r.life); err != nil {
			if r.life.Err() == nil {
				r.log.Warn("file blob sweep failed", "err", err)
			}
		} else if n > 0 {
			r.log.Debug("file blob sweep", "removed", n)
		}
		r.mu.Lock()
		if !r.closed {
			r.armFileSweep(max(r.files.ttl/2, minSweepEvery))
		}
		r.mu.Unlock()
	})
}

// stopFileSweep stops the sweeper's timer; r.mu is held.
func (r *Runtime) stopFileSweep() {
	if r.files != nil && r.files.stop != nil {
		r.files.stop()
	}
}
