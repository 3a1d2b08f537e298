package lazarus

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/lazarusrt/lazarus/messages"
)

// TestNextAfterFireOfACenturiesOldOccurrence: the occurrence after one that
// fired is the first after now, whatever the distance: a stored Every
// schedule whose occurrence is more than 292 years old (valid as a
// timestamp, from an import or a clock set wrong) overflowed the count of
// intervals times the interval, and its next occurrence was in the past,
// fired at once, again and again.
func TestNextAfterFireOfACenturiesOldOccurrence(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, occ := range []time.Time{time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC), now.Add(-time.Hour * 24 * 365 * 291)} {
		for _, every := range []time.Duration{time.Second, time.Hour, 7 * time.Hour, time.Duration(1 << 62), time.Duration(1<<63 - 1)} {
			sc := &messages.Schedule{Id: "s", Every: durationpb.New(every)}
			n, err := nextAfterFire(sc, occ, now)
			require.NoError(t, err)
			require.NotNil(t, n)
			require.True(t, n.After(now), "occ %v every %v: next %v is not after now", occ, every, *n)
			require.False(t, n.After(now.Add(every)), "occ %v every %v: next %v is more than an interval away", occ, every, *n)
		}
	}
}
