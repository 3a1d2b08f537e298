package main

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/journal/pebblejournal"
)

// TestTwoStoresOnOneCommandLine: --dir (or --postgres) given before and
// after the command with two different values is a usage error, exit
// status 2, before any store is opened; the same store named twice is not.
func TestTwoStoresOnOneCommandLine(t *testing.T) {
	f := newFixture(t)
	other := t.TempDir()

	r := cliRun(t, "", "--dir", other, "conversations", "--dir", f.dir)
	require.Equal(t, exitUsage, r.code, r.stderr)
	require.Empty(t, r.stdout)
	require.Contains(t, r.stderr, "lazarus conversations: --dir given twice")
	require.Contains(t, r.stderr, other)
	entries, err := os.ReadDir(other)
	require.NoError(t, err)
	require.Empty(t, entries, "nothing was opened")

	r = cliRun(t, "", "--postgres", "postgres://127.0.0.1:1/a", "conversations", "--postgres", "postgres://u:secret@127.0.0.1:1/b")
	require.Equal(t, exitUsage, r.code, r.stderr)
	require.Contains(t, r.stderr, "--postgres given twice")
	require.NotContains(t, r.stderr, "secret")

	// The same directory, spelled twice, is one store.
	r = cliRun(t, "", "--dir", f.dir, "conversations", "--dir", filepath.Join(f.dir, "."))
	requireOK(t, r)
	require.Contains(t, r.stdout, "finished")

	// ... and so is the same directory, relative before the command and
	// absolute after it; a different one relative is still two stores.
	t.Chdir(filepath.Dir(f.dir))
	r = cliRun(t, "", "--dir", filepath.Base(f.dir), "conversations", "--dir", f.dir)
	requireOK(t, r)
	require.Contains(t, r.stdout, "finished")
	r = cliRun(t, "", "--dir", filepath.Base(f.dir), "conversations", "--dir", other)
	require.Equal(t, exitUsage, r.code, r.stderr)
	require.Contains(t, r.stderr, "--dir given twice")

	// --help still answers.
	requireOK(t, cliRun(t, "", "--dir", other, "conversations", "--dir", f.dir, "--help"))
}

// TestScheduleCancelUnknownID: --cancel of an id the conversation has no
// schedule of is exit 5 with a line naming both, not the adapter's error,
// and the conversation's schedules stay.
func TestScheduleCancelUnknownID(t *testing.T) {
	f := newFixture(t)
	before := cliRun(t, "", "schedules", "finished", "--dir", f.dir)
	requireOK(t, before)

	r := cliRun(t, "", "schedules", "finished", "--dir", f.dir, "--cancel", "nope")
	require.Equal(t, exitNotFound, r.code, r.stderr)
	require.Empty(t, r.stdout)
	require.Equal(t, "lazarus schedules: no schedule nope in conversation finished: journal: not found\n", r.stderr)

	after := cliRun(t, "", "schedules", "finished", "--dir", f.dir)
	requireOK(t, after)
	require.Equal(t, before.stdout, after.stdout)
}

// TestShowFromOffersTheOlderPage: a forward page (--from N) of a log that
// holds seqs 1..N offers the older page, and following it reads them.
func TestShowFromOffersTheOlderPage(t *testing.T) {
	f := newFixture(t)
	r := cliRun(t, "", "show", "waiting", "--dir", f.dir, "--from", "4", "--limit", "2")
	requireOK(t, r)
	lines := outLines(r.stdout)
	require.Regexp(t, `^\s+5 `, lines[0])
	require.Contains(t, lines, "-- older: --before 5")

	r = cliRun(t, "", "show", "waiting", "--dir", f.dir, "--before", "5", "--limit", "10")
	requireOK(t, r)
	lines = outLines(r.stdout)
	require.Regexp(t, `^\s+1 `, lines[0])
	require.Regexp(t, `^\s+4 `, lines[3])
	require.NotContains(t, r.stdout, "-- older:", "seq 1 is the first")

	// From before the first seq: nothing is older.
	r = cliRun(t, "", "show", "waiting", "--dir", f.dir, "--from", "0", "--limit", "2")
	requireOK(t, r)
	require.NotContains(t, r.stdout, "-- older:")
}

// storeFiles maps each file of the store in dir to its size and time
// (Pebble's LOCK file, opened for its lock only, by name).
func storeFiles(t *testing.T, dir string) map[string]string {
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

// layoutOf reads the layout record of the store in dir with Pebble
// itself (see pebblejournal's doc.go: key 0x00 "layout").
func layoutOf(t *testing.T, dir string, set string) string {
	t.Helper()
	o := &pebble.Options{FormatMajorVersion: pebblejournal.FormatMajorVersion, Logger: quietPebble{}}
	pebblejournal.SetLevelOptions(o)
	db, err := pebble.Open(dir, o)
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	key := []byte("\x00layout")
	if set != "" {
		require.NoError(t, db.Set(key, []byte(set), pebble.Sync))
	}
	v, closer, err := db.Get(key)
	require.NoError(t, err)
	defer closer.Close()
	return string(v)
}

// TestCheckChangesNothing: check opens the store read-only. A sound store's
// files are left as they were; a store of an older layout is reported as
// such (exit 1), not upgraded; a directory a runtime holds is still busy
// at once (TestCheckExitCodes).
func TestCheckChangesNothing(t *testing.T) {
	f := newFixture(t)
	before := storeFiles(t, f.dir)
	r := cliRun(t, "", "check", "--dir", f.dir)
	requireOK(t, r)
	require.Contains(t, r.stdout, "sound")
	require.Equal(t, before, storeFiles(t, f.dir), "check wrote nothing")

	require.Equal(t, "lazarus.pebblejournal.v2", layoutOf(t, f.dir, "lazarus.pebblejournal.v2"))
	before = storeFiles(t, f.dir)
	r = cliRun(t, "", "check", "--dir", f.dir)
	require.Equal(t, exitError, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	require.Empty(t, r.stdout)
	require.Contains(t, r.stderr, "lazarus check: ")
	require.Contains(t, r.stderr, "layout v2")
	require.Contains(t, r.stderr, "needs an upgrade")
	require.Equal(t, before, storeFiles(t, f.dir), "check wrote nothing")
	require.Equal(t, "lazarus.pebblejournal.v2", layoutOf(t, f.dir, ""), "not upgraded")

	// A command that writes upgrades it; check then reads it.
	requireOK(t, cliRun(t, "", "schedules", "finished", "--dir", f.dir, "--cancel", "finished-once"))
	require.Equal(t, "lazarus.pebblejournal.v3", layoutOf(t, f.dir, ""))
	requireOK(t, cliRun(t, "", "check", "--dir", f.dir))
}
