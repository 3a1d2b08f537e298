package memjournal_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/internal/leakcheck"
	"github.com/lazarusrt/lazarus/journal/journaltest"
	"github.com/lazarusrt/lazarus/journal/memjournal"
)

// TestCloseLeavesNoGoroutine: a Store that was used (journaltest.Exercise:
// appends, batches, reads, calls whose context ended) leaves no goroutine
// of its own once Close returned. Run in a process of its own, so that no
// other test's goroutine is counted.
func TestCloseLeavesNoGoroutine(t *testing.T) {
	if !leakcheck.Isolate(t) {
		return
	}
	base := leakcheck.Take()
	s := memjournal.New(memjournal.Options{Audit: true})
	journaltest.Exercise(t, s)
	require.NoError(t, s.Close())
	base.Check(t, 20*time.Second)
}
