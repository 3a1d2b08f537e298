package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/pebblejournal"
	"github.com/lazarusrt/lazarus/journal/pgjournal"
)

// opener opens the store of a directory. Every command works on the
// journal.Store it returns; this file is the only one that names an
// adapter. With create false the directory must already hold a store; with
// create true (import) a missing or empty directory gets a new one.
type opener func(dir string, create bool) (journal.Store, error)

var (
	// errBusy: another process (a live runtime, another lazarus command)
	// holds the directory.
	errBusy = errors.New("the directory is held by another process")
	// errNoStore: the directory does not exist or holds no store.
	errNoStore = errors.New("no Lazarus store")
)

// cacheSize is the Pebble block cache of the tool: it reads each record
// about once, so the runtime's default is wasted memory here.
const cacheSize = 8 << 20

// openPebble opens the Pebble store in dir. It refuses to create a store
// anywhere but an empty or missing directory, and only when create is set,
// so a mistyped --dir never leaves Pebble files behind. Audit is on so that
// gc-audit sees the audit rows (it only changes what PutModelCall and
// ModelCalls do).
func openPebble(dir string, create bool) (journal.Store, error) {
	return openPebbleMode(dir, create, false)
}

// openPebbleReadOnly opens the Pebble store in dir read-only
// (pebblejournal.Options.ReadOnly): nothing in dir is written, and a store
// Open would upgrade first is refused with an error wrapping
// pebblejournal.ErrUpgradeNeeded. A directory another process holds is
// errBusy at once, as for openPebble.
func openPebbleReadOnly(dir string) (*pebblejournal.Store, error) {
	st, err := openPebbleMode(dir, false, true)
	if err != nil {
		return nil, err
	}
	return st.(*pebblejournal.Store), nil
}

func openPebbleMode(dir string, create, readOnly bool) (journal.Store, error) {
	info, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist) && create:
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("create %s: %w", dir, err)
		}
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("%s does not exist: %w", dir, errNoStore)
	case err != nil:
		return nil, err
	case !info.IsDir():
		return nil, fmt.Errorf("%s is not a directory: %w", dir, errNoStore)
	default:
		ok, empty, lockOnly, err := looksLikePebble(dir)
		if err != nil {
			return nil, err
		}
		if !ok && !(create && empty) {
			if lockOnly {
				return nil, fmt.Errorf("%s holds no Pebble store, only a LOCK file (its other files are gone?): %w", dir, errNoStore)
			}
			return nil, fmt.Errorf("%s holds no Pebble files: %w", dir, errNoStore)
		}
	}
	st, err := pebblejournal.Open(dir, pebblejournal.Options{
		Audit:     true,
		CacheSize: cacheSize,
		Logger:    slog.New(slog.DiscardHandler),
		ReadOnly:  readOnly,
	})
	if err != nil {
		if isLocked(err) {
			return nil, fmt.Errorf("%s: %w: a live Lazarus runtime or another lazarus command has it open, "+
				"and Pebble allows one process per directory (stop that process and retry, or use "+
				"Runtime.Store/History/Subscribe inside it); nothing was read or written", dir, errBusy)
		}
		if errors.Is(err, pebblejournal.ErrUpgradeNeeded) {
			return nil, fmt.Errorf("%w (run a Lazarus runtime on it, or a lazarus command that writes, once)", err)
		}
		return nil, err
	}
	return st, nil
}

// openPostgres opens the PostgreSQL store of dsn (migrating an empty
// database), audit on as for Pebble.
func openPostgres(dsn string) (journal.Store, error) {
	return pgjournal.Open(context.Background(), dsn, pgjournal.Options{Audit: true})
}

// parseDSN checks that dsn is a connection string pgjournal.Open can
// parse, connecting to nothing (pgjournal.CheckDSN): its error wraps
// journal.ErrInvalid, and its message shows the DSN with its password
// masked.
func parseDSN(dsn string) error {
	return pgjournal.CheckDSN(dsn)
}

// checkStore opens the Pebble store in dir read-only and runs the
// adapter's offline check of it: it writes nothing, and a store of an
// older layout is reported as such (pebblejournal.ErrUpgradeNeeded), not
// upgraded. Files too damaged to open are errDamaged.
func checkStore(ctx context.Context, dir string) (rep *pebblejournal.CheckReport, err error) {
	st, err := openPebbleReadOnly(dir)
	if err != nil {
		return nil, damagedOnOpen(err)
	}
	defer closeStore(st, &err)
	return st.Check(ctx)
}

// isLocked reports whether err is Pebble's refusal to open a directory
// another Store holds.
func isLocked(err error) bool { return errors.Is(err, pebblejournal.ErrLocked) }

// looksLikePebble reports whether dir holds a Pebble store (a manifest,
// or the CURRENT file that names one), whether it is empty, and whether
// it holds only a LOCK file: Pebble's lock is no store (Pebble would
// create a new one beside it).
func looksLikePebble(dir string) (ok, empty, lockOnly bool, err error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false, false, false, err
	}
	for _, e := range entries {
		n := e.Name()
		if n == "CURRENT" || strings.HasPrefix(n, "MANIFEST-") || strings.HasPrefix(n, "marker.manifest.") {
			return true, false, false, nil
		}
	}
	return false, len(entries) == 0, len(entries) == 1 && entries[0].Name() == "LOCK", nil
}

// diskUsage returns the bytes of the regular files under dir.
func diskUsage(dir string) (int64, error) {
	var total int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil // removed while we walked (a compaction)
		}
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			info, err := d.Info()
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			if err != nil {
				return err
			}
			total += info.Size()
		}
		return nil
	})
	return total, err
}
