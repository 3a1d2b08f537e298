package pgjournal

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/journal/pgjournal/pgtest"
)

// TestScheduleTimesPagesWithOneConnection: ScheduleTimes reads the by-time
// index a page at a time and calls fn with no query open, so fn may read
// the Store through a pool of a single connection (it held the
// connection for the whole scan, and such a read waited for it forever);
// every schedule comes once, in time order (ties by id), across pages.
func TestScheduleTimesPagesWithOneConnection(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	s := open(t, dsn+"&pool_max_conns=1", Options{})
	conn, err := pgx.Connect(t.Context(), dsn)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	const n = scheduleTimesPage + 100
	// Rows straight into the table (ScheduleTimes reads ids and times
	// only); pairs share a time, so the keyset's tie on id is crossed.
	_, err = conn.Exec(t.Context(), `INSERT INTO lz_schedules (id, conv, next_s, next_n, data)
		SELECT convert_to(lpad(i::text, 6, '0'), 'UTF8'), convert_to('c', 'UTF8'), 1000 + i / 2, 0, '\x00'::bytea
		FROM generate_series(1, $1) AS i`, n)
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	seen := map[string]bool{}
	var last time.Time
	lastID := ""
	reads := 0
	require.NoError(t, s.ScheduleTimes(ctx, func(conv, id string, next time.Time) error {
		require.Equal(t, "c", conv)
		require.False(t, seen[id], "%s twice", id)
		seen[id] = true
		require.True(t, next.After(last) || (next.Equal(last) && id > lastID), "in time order, then id")
		last, lastID = next, id
		if len(seen)%1000 == 0 {
			_, err := s.LastSeq(ctx, "c") // a read from fn, through the one connection
			require.NoError(t, err)
			reads++
		}
		return nil
	}))
	require.Len(t, seen, n)
	require.Positive(t, reads)
}
