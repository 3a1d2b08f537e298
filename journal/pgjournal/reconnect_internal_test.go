package pgjournal

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/journal"
)

type stepClock struct{ now time.Time }

func (c *stepClock) Now() time.Time { return c.now }

// TestBreakerHugeBackoffDoesNotWrap: each failed probe doubles the wait,
// up to MaxReconnectBackoff; a wait past half the int64 range doubled to a
// negative one, and the next probe was due at once. Now it stays at the
// maximum.
func TestBreakerHugeBackoffDoesNotWrap(t *testing.T) {
	for _, first := range []time.Duration{1 << 62, math.MaxInt64/2 + 1, math.MaxInt64} {
		c := &stepClock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
		b := &breaker{clock: c, first: first, max: math.MaxInt64}
		require.True(t, b.fail())
		for range 3 {
			_, err := b.admit()
			require.ErrorIs(t, err, journal.ErrUnavailable, "no probe before the backoff")
			c.now = b.next
			probe, err := b.admit()
			require.NoError(t, err)
			require.True(t, probe, "a probe once the backoff passed")
			b.probeDone(false)
			require.Positive(t, b.backoff, "first %v", first)
			require.True(t, b.next.After(c.now), "first %v: the next probe is later, not at once", first)
		}
	}
}
