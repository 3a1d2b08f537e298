package pebblejournal_test

import (
	"bufio"
	"context"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

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

// TestBBOpenLockedByAnotherProcess: the second Open, read-only or not,
// fails with ErrLocked when the first is in another process, and succeeds
// once it exited.
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
	// A read-only Open too, at once (Options.ReadOnly).
	_, err = pebblejournal.Open(dir, pebblejournal.Options{ReadOnly: true})
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

	// One whose first or last key happens to fall in a family of the
	// layout, but not the other, is refused too.
	for _, keys := range [][]string{{"\x03a", "zz"}, {"a", "\x01a"}} {
		db, err = pebble.Open("mixed", &pebble.Options{FS: fs})
		require.NoError(t, err)
		for _, k := range keys {
			require.NoError(t, db.Set([]byte(k), []byte("v"), pebble.Sync))
		}
		require.NoError(t, db.Close())
		s, err = pebblejournal.Open("mixed", pebblejournal.Options{FS: fs})
		if s != nil {
			_ = s.Close()
		}
		require.ErrorIs(t, err, journal.ErrCorrupt, "keys %q", keys)
		require.NoError(t, fs.RemoveAll("mixed"))
	}

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

// TestBBOpenHostileDirectory: Open of a path that is no store directory
// fails with an error wrapping a sentinel, and never panics: a regular file,
// or a path under one, an empty path or one holding a NUL byte, is
// ErrInvalid; a directory whose files are garbage,
// or name a MANIFEST that is not there, is ErrCorrupt. A directory of
// unrelated files opens as a new store (Open creates if needed).
func TestBBOpenHostileDirectory(t *testing.T) {
	base := t.TempDir()
	file := filepath.Join(base, "file")
	require.NoError(t, os.WriteFile(file, []byte("x"), 0o644))
	for _, dir := range []string{file, filepath.Join(file, "sub")} {
		s, err := pebblejournal.Open(dir, pebblejournal.Options{})
		require.Nil(t, s)
		require.ErrorIs(t, err, journal.ErrInvalid, "Open(%q)", dir)
		require.Contains(t, err.Error(), "not a directory")
	}
	for _, dir := range []string{"", "a\x00b", filepath.Join(base, "nul\x00")} {
		s, err := pebblejournal.Open(dir, pebblejournal.Options{})
		require.Nil(t, s)
		require.ErrorIs(t, err, journal.ErrInvalid, "Open(%q)", dir)
	}

	garbage := []byte("garbage\x00\xff\x01\x02 more garbage, enough bytes to look like something")
	for name, files := range map[string]map[string][]byte{
		"garbage CURRENT":                   {"CURRENT": garbage},
		"empty CURRENT":                     {"CURRENT": nil},
		"CURRENT naming a garbage MANIFEST": {"CURRENT": []byte("MANIFEST-000001\n"), "MANIFEST-000001": garbage},
		"garbage OPTIONS":                   {"OPTIONS-000003": garbage},
		"garbage MANIFEST":                  {"marker.manifest.000001.MANIFEST-000001": nil, "MANIFEST-000001": garbage},
		"missing MANIFEST":                  {"marker.manifest.000001.MANIFEST-000009": nil},
	} {
		for _, mem := range []bool{false, true} {
			dir := filepath.Join(t.TempDir(), "d")
			opts := pebblejournal.Options{}
			var fs vfs.FS = vfs.Default
			if mem {
				fs = vfs.NewMem()
				opts.FS = fs
			}
			require.NoError(t, fs.MkdirAll(dir, 0o755))
			for n, b := range files {
				f, err := fs.Create(fs.PathJoin(dir, n), vfs.WriteCategoryUnspecified)
				require.NoError(t, err)
				_, err = f.Write(b)
				require.NoError(t, err)
				require.NoError(t, f.Close())
			}
			for range 2 { // a failed Open releases the directory
				s, err := pebblejournal.Open(dir, opts)
				if s != nil {
					_ = s.Close()
				}
				require.ErrorIs(t, err, journal.ErrCorrupt, "%s (in memory: %v)", name, mem)
			}
		}
	}

	dir := filepath.Join(base, "notes")
	require.NoError(t, os.Mkdir(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("hello"), 0o644))
	s, err := pebblejournal.Open(dir, pebblejournal.Options{})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	b, err := os.ReadFile(filepath.Join(dir, "notes.txt"))
	require.NoError(t, err)
	require.Equal(t, "hello", string(b))
}

// TestBBOptionsInvalid: "negative is invalid" for CacheSize and
// MaxConcurrentCompactions, and a MemTableSize outside [MinMemTableSize,
// MaxMemTableSize) is too (Pebble panicked on a tiny one, and refused a
// huge one with an error wrapping no sentinel): Open fails with ErrInvalid
// and creates nothing. The bounds themselves work, with an event larger
// than the smallest memtable.
// Negative DiskSlowThreshold and FlushDelayDeleteRange are valid (they
// disable what they bound), and Options.String names the settings.
func TestBBOptionsInvalid(t *testing.T) {
	for name, o := range map[string]pebblejournal.Options{
		"CacheSize":                {CacheSize: -1},
		"MaxConcurrentCompactions": {MaxConcurrentCompactions: -1},
		"MemTableSize":             {MemTableSize: 1},
		"MemTableSize ":            {MemTableSize: pebblejournal.MinMemTableSize - 1},
		"MemTableSize  ":           {MemTableSize: pebblejournal.MaxMemTableSize},
		"MemTableSize   ":          {MemTableSize: math.MaxUint64},
	} {
		name := strings.TrimSpace(name)
		dir := filepath.Join(t.TempDir(), "d")
		s, err := pebblejournal.Open(dir, o)
		require.Nil(t, s, name)
		require.ErrorIs(t, err, journal.ErrInvalid, name)
		require.Contains(t, err.Error(), name)
		_, err = os.Stat(dir)
		require.ErrorIs(t, err, os.ErrNotExist, "%s: nothing created", name)
	}
	for _, size := range []uint64{pebblejournal.MinMemTableSize, pebblejournal.MaxMemTableSize - 1} {
		s, err := pebblejournal.Open("d", pebblejournal.Options{FS: vfs.NewMem(), MemTableSize: size})
		require.NoError(t, err, "MemTableSize %d", size)
		_, err = s.Append(context.Background(), &messages.AppendRequest{ConversationId: "c",
			Events: []*messages.Event{{Body: &messages.Event_UserMsg{UserMsg: &messages.UserMessage{
				Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: strings.Repeat("x", 512<<10)}}}}}}}})
		require.NoError(t, err, "MemTableSize %d: an event larger than the memtable", size)
		require.NoError(t, s.Close())
	}
	dir := t.TempDir()
	s, err := pebblejournal.Open(dir, pebblejournal.Options{DiskSlowThreshold: -1, FlushDelayDeleteRange: -1, MemTableSize: 1 << 20, CacheSize: 1 << 20, MaxConcurrentCompactions: 1})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	str := pebblejournal.Options{Audit: true, CacheSize: 7, MemTableSize: 9, MaxConcurrentCompactions: 3}.String()
	for _, want := range []string{"audit=true", "cache=7", "memtable=9", "compactions=3"} {
		require.Contains(t, str, want)
	}
}

// TestBBFailedOpenLeavesNothingRunning: "the store closes the wrapper when
// it closes (or when Open fails)": Opens that fail, on the default
// filesystem with its disk-health checks, leave no goroutine behind, and
// neither do Opens that succeed and are closed.
func TestBBFailedOpenLeavesNothingRunning(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "CURRENT"), []byte("garbage"), 0o644))
	good := t.TempDir()
	// Warm up whatever the first Open starts once per process.
	s, err := pebblejournal.Open(good, pebblejournal.Options{})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	before := runtime.NumGoroutine()
	for range 20 {
		_, err := pebblejournal.Open(dir, pebblejournal.Options{})
		require.ErrorIs(t, err, journal.ErrCorrupt)
		s, err := pebblejournal.Open(good, pebblejournal.Options{})
		require.NoError(t, err)
		require.NoError(t, s.Close())
	}
	require.Eventually(t, func() bool { return runtime.NumGoroutine() <= before+2 }, 10*time.Second, 10*time.Millisecond,
		"goroutines: %d before, %d after", before, runtime.NumGoroutine())
}

// TestBBFormatMajorVersionAndListener: FormatMajorVersion is "the Pebble
// on-disk format every store is created with or ratcheted to on Open": a
// new store, and an empty database of an older format, are at it after
// Open; Options.EventListener "also receives Pebble's events"; Audit is
// what AuditEnabled reports; Logger receives the store's logs.
func TestBBFormatMajorVersionAndListener(t *testing.T) {
	fs := vfs.NewMem()
	db, err := pebble.Open("old", &pebble.Options{FS: fs, FormatMajorVersion: pebble.FormatMinSupported})
	require.NoError(t, err)
	require.NoError(t, db.Close())
	desc, err := pebble.Peek("old", fs)
	require.NoError(t, err)
	require.Less(t, desc.FormatMajorVersion, pebblejournal.FormatMajorVersion)

	var wals atomic.Int64
	var logs logCount
	for _, dir := range []string{"old", "new"} {
		s, err := pebblejournal.Open(dir, pebblejournal.Options{FS: fs, Audit: dir == "new",
			Logger:        slog.New(&logs),
			EventListener: &pebble.EventListener{WALCreated: func(pebble.WALCreateInfo) { wals.Add(1) }}})
		require.NoError(t, err, dir)
		require.Equal(t, dir == "new", s.AuditEnabled())
		require.NoError(t, s.Close())
		desc, err := pebble.Peek(dir, fs)
		require.NoError(t, err)
		require.Equal(t, pebblejournal.FormatMajorVersion, desc.FormatMajorVersion, dir)
	}
	require.Positive(t, wals.Load(), "the listener of Options saw Pebble's WAL creations")
	require.Positive(t, logs.n.Load(), "the Logger of Options received the store's logs")
}

// logCount is a slog.Handler that counts the records it is given, at every
// level.
type logCount struct{ n atomic.Int64 }

func (h *logCount) Enabled(context.Context, slog.Level) bool  { return true }
func (h *logCount) Handle(context.Context, slog.Record) error { h.n.Add(1); return nil }
func (h *logCount) WithAttrs([]slog.Attr) slog.Handler        { return h }
func (h *logCount) WithGroup(string) slog.Handler             { return h }

// TestBBCheckReportSound: Sound is "Check found no damage": no problems.
func TestBBCheckReportSound(t *testing.T) {
	require.True(t, (&pebblejournal.CheckReport{Conversations: 3, Events: 9}).Sound())
	require.False(t, (&pebblejournal.CheckReport{Problems: []string{"x"}}).Sound())
}
