package memjournal_test

import (
	"math/rand/v2"
	"testing"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/journaltest"
	"github.com/lazarusrt/lazarus/journal/memjournal"
)

func open(t testing.TB, audit bool) *journaltest.Harness {
	s := memjournal.New(memjournal.Options{Audit: audit})
	t.Cleanup(func() { _ = s.Close() })
	return &journaltest.Harness{Store: s}
}

func TestConformance(t *testing.T) {
	journaltest.Run(t, open, journaltest.Features{Audit: true})
}

// openReopenable hands the data of each store to the next through
// ReopenForTesting, so the suite's durable cases (reopen, crash, the model
// test's reopens) run against memjournal too, and are themselves tested.
func openReopenable(t testing.TB, audit bool) *journaltest.Harness {
	cur := memjournal.New(memjournal.Options{Audit: audit})
	t.Cleanup(func() { _ = cur.Close() })
	reopen := func(testing.TB) journal.Store {
		cur = cur.ReopenForTesting()
		return cur
	}
	return &journaltest.Harness{
		Store:  cur,
		Reopen: reopen,
		Crash:  func(t testing.TB, _ *rand.Rand) journal.Store { return reopen(t) },
	}
}

func TestConformanceReopenForTesting(t *testing.T) {
	journaltest.Run(t, openReopenable, journaltest.Features{Durable: true, Audit: true})
}

func BenchmarkStore(b *testing.B) {
	journaltest.RunBenchmarks(b, open)
}
