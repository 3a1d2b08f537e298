package agent

import (
	"context"
	"errors"
)

// Checkpointer records the files a server tool is about to change, so that
// a rewind of the conversation to before the call can restore them. The
// runtime hands one to each server tool run (Invocation.Files), tied to
// the call's seq.
type Checkpointer interface {
	// Before records the current content of path (or that no file is
	// there) as it is before this call changes it. Call it before every
	// change of a file, each time the tool runs: only the first record of
	// a call and a path is kept, so a run repeated after a crash keeps the
	// content from before the first run. It returns once the record is
	// durable. path is relative to the runtime's file root, or absolute
	// inside it; symbolic links on it are followed, the last one too (the
	// record is of the file the path leads to, which a rewind restores,
	// leaving the link a link). A path that leaves the root, also through
	// a link to a file not there yet, wraps ErrOutsideRoot, and a file
	// too large to keep wraps journal.ErrTooLarge; a path that cannot name
	// a regular file (empty, a directory, under a file, a name too long
	// for the file system) wraps journal.ErrInvalid. Safe for concurrent
	// use.
	Before(ctx context.Context, path string) error
}

// Sentinels of file checkpoints.
var (
	// ErrNoCheckpoints: the runtime keeps no file checkpoints (it has no
	// file root).
	ErrNoCheckpoints = errors.New("agent: file checkpoints are not configured")
	// ErrOutsideRoot: a path leaves the runtime's file root (through "..",
	// an absolute path elsewhere, or a symbolic link).
	ErrOutsideRoot = errors.New("agent: path is outside the file root")
)
