package actors

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/lazarusrt/lazarus/journal"
)

// TestWriteErrOfAContextIsUnknownOutcome: a Store write ended by a
// context's error that wraps no sentinel (a timeout, a cancellation) may
// have landed: its reply wraps journal.ErrUnknownOutcome and the context's
// error, never the context's error alone (which says nothing was written),
// now that a context's error keeps its own code across the reply. One that
// wraps a sentinel already is passed on as it is.
func TestWriteErrOfAContextIsUnknownOutcome(t *testing.T) {
	for _, cerr := range []error{context.DeadlineExceeded, context.Canceled} {
		err := fmt.Errorf("store: append: %w", cerr)
		back := journal.ErrorFromProto(journal.ErrorToProto(writeErr(err)))
		if !errors.Is(back, journal.ErrUnknownOutcome) || !errors.Is(back, cerr) {
			t.Errorf("%v came back as %v (unknown outcome %t, context %t)", err, back, errors.Is(back, journal.ErrUnknownOutcome), errors.Is(back, cerr))
		}
		for _, s := range []error{journal.ErrUnknownOutcome, journal.ErrUnavailable, journal.ErrClosed} {
			both := fmt.Errorf("store: append: %w: %w", s, cerr)
			if got := writeErr(both); got != both {
				t.Errorf("%v became %v", both, got)
			}
		}
	}
	plain := errors.New("boom")
	if writeErr(plain) != plain || writeErr(nil) != nil {
		t.Error("an error of no context changed")
	}
}
