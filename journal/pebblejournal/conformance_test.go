package pebblejournal

import (
	"math/rand/v2"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/journaltest"
)

// memHarness opens a store on an in-memory filesystem that records what
// each sync made durable. Reopen closes and opens again on the same
// filesystem; Crash clones the filesystem as a crash would leave it (every
// synced byte, a random part of the rest), without closing the store first,
// and opens a new store on the clone.
func memHarness(t testing.TB, audit bool) *journaltest.Harness {
	fs := vfs.NewCrashableMem()
	var cur *Store
	open := func(t testing.TB) journal.Store {
		t.Helper()
		s, err := Open("db", Options{FS: fs, Audit: audit})
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		cur = s
		return s
	}
	t.Cleanup(func() {
		if cur != nil {
			_ = cur.Close()
		}
	})
	return &journaltest.Harness{
		Store: open(t),
		Reopen: func(t testing.TB) journal.Store {
			if err := cur.Close(); err != nil {
				t.Fatalf("close: %v", err)
			}
			return open(t)
		},
		Crash: func(t testing.TB, rng *rand.Rand) journal.Store {
			clone := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: rng.IntN(101), RNG: rng})
			// The old store saw no crash: close it, on the old filesystem,
			// so that it leaks nothing.
			_ = cur.Close()
			fs = clone
			return open(t)
		},
	}
}

func TestConformance(t *testing.T) {
	journaltest.Run(t, memHarness, journaltest.Features{Durable: true, Audit: true})
}

// diskHarness opens a store in a fresh temporary directory on the real
// filesystem, so that syncs are real: the benchmarks' factory.
func diskHarness(t testing.TB, audit bool) *journaltest.Harness {
	dir := t.TempDir()
	var cur *Store
	open := func(t testing.TB) journal.Store {
		t.Helper()
		s, err := Open(dir, Options{Audit: audit})
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		cur = s
		return s
	}
	t.Cleanup(func() { _ = cur.Close() })
	return &journaltest.Harness{
		Store: open(t),
		Reopen: func(t testing.TB) journal.Store {
			if err := cur.Close(); err != nil {
				t.Fatalf("close: %v", err)
			}
			return open(t)
		},
	}
}

// BenchmarkStore runs the shared benchmarks on a real disk (durable
// appends pay real fsyncs).
func BenchmarkStore(b *testing.B) { journaltest.RunBenchmarks(b, diskHarness) }
