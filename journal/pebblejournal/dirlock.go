package pebblejournal

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
)

// openDirs holds the directories that a Store of this process has open on
// the operating system's filesystem, by canonical path (absolute, symlinks
// resolved).
//
// Pebble's lock file alone does not keep the promise of Open within one
// process: its in-process registry is keyed by the path as given, and the
// fcntl lock behind it is per process, so a second Open naming the same
// directory another way (a symlink, a relative path) would get the lock
// again and two Stores would write one directory.
var openDirs struct {
	mu sync.Mutex
	m  map[string]bool
}

// claimDir records that a Store of this process opens dir, creating dir if
// needed (and create is set) so that it has a canonical path. It fails with ErrLocked when
// another Store of this process has the same directory open, under any
// name. release gives the directory back; it is called once.
func claimDir(dir string, create bool) (release func(), err error) {
	key, err := canonicalDir(dir, create)
	if err != nil {
		// Pebble's Open will report the directory's problem.
		return func() {}, nil
	}
	openDirs.mu.Lock()
	defer openDirs.mu.Unlock()
	if openDirs.m[key] {
		return nil, fmt.Errorf("pebblejournal: open %q: %w: another Store, in this process or another, has it open (one Store per directory): it is open as %q", dir, ErrLocked, key)
	}
	if openDirs.m == nil {
		openDirs.m = make(map[string]bool)
	}
	openDirs.m[key] = true
	var once sync.Once
	return func() {
		once.Do(func() {
			openDirs.mu.Lock()
			delete(openDirs.m, key)
			openDirs.mu.Unlock()
		})
	}, nil
}

// canonicalDir creates dir if needed (and create is set) and returns its
// absolute path with every symlink resolved.
func canonicalDir(dir string, create bool) (string, error) {
	if create {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", err
		}
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	return filepath.EvalSymlinks(abs)
}
