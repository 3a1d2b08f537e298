package pgjournal_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/internal/leakcheck"
	"github.com/lazarusrt/lazarus/journal/journaltest"
	"github.com/lazarusrt/lazarus/journal/pgjournal"
	"github.com/lazarusrt/lazarus/journal/pgjournal/pgtest"
)

// TestCloseLeavesNoGoroutine: Stores that were used (journaltest.Exercise:
// appends, batches, reads, calls whose context ended before or while they
// ran), each then closed, leave no goroutine of their own nor of pgx's.
// With pgx 5.7.6, a batch whose read failed as its context ended (the
// append's head read) left pgx's watcher of that context waiting for good:
// the pipeline closed the connection without ending the watch (a dozen
// such goroutines for each Exercise). Run in a process of its own, so that
// no other test's goroutine is counted.
func TestCloseLeavesNoGoroutine(t *testing.T) {
	if !leakcheck.Isolate(t) {
		return
	}
	base := leakcheck.Take()
	for range 3 {
		dsn := pgtest.NewDatabase(t)
		s, err := pgjournal.Open(context.Background(), dsn, pgjournal.Options{Audit: true})
		require.NoError(t, err)
		journaltest.Exercise(t, s)
		require.NoError(t, s.Close())
	}
	base.Check(t, 20*time.Second)
}
