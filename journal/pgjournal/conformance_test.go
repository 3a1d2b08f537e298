package pgjournal

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/journaltest"
	"github.com/lazarusrt/lazarus/journal/pgjournal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// harness opens a store on a fresh database. Reopen closes it and opens a
// new one on the same database; Crash opens a new one without closing the
// old first (a committed transaction is durable on the server, whatever
// happens to the client).
func harness(t testing.TB, audit bool) *journaltest.Harness {
	dsn := pgtest.NewDatabase(t)
	var cur *Store
	open := func(t testing.TB) journal.Store {
		t.Helper()
		s, err := Open(context.Background(), dsn, Options{Audit: audit})
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
		Crash: func(t testing.TB, _ *rand.Rand) journal.Store {
			old := cur
			s := open(t)
			_ = old.Close()
			return s
		},
	}
}

func TestConformance(t *testing.T) {
	journaltest.Run(t, harness, journaltest.Features{Durable: true, Audit: true})
}

// BenchmarkStore runs the shared benchmarks.
func BenchmarkStore(b *testing.B) { journaltest.RunBenchmarks(b, harness) }
