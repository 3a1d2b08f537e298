package lazarus

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/messages"
)

// cronSeries returns the n occurrences of expr in zone after from, each
// computed from the previous one as the fire worker does.
func cronSeries(t *testing.T, expr, zone string, from time.Time, n int) []string {
	t.Helper()
	sc := &messages.Schedule{Id: "s", Cron: expr, TimeZone: zone}
	next, err := cronNext(sc, from)
	require.NoError(t, err)
	var out []string
	for range n {
		out = append(out, next.UTC().Format(time.RFC3339))
		after, err := nextAfterFire(sc, next, next)
		require.NoError(t, err)
		next = *after
	}
	return out
}

// TestScheduleCronAcrossDST: a cron expression that names its hours is read
// on the local clock: a local time the change back repeats fires once (its
// first instant), one the change forward skips fires once, where time.Date
// puts it (an hour later); an hourly expression runs by elapsed time.
// New York: 2026-03-08 02:00 EST jumps to 03:00 EDT; 2026-11-01 02:00 EDT
// goes back to 01:00 EST.
func TestScheduleCronAcrossDST(t *testing.T) {
	const ny = "America/New_York"
	// 02:30 daily: on the 8th of March 02:30 does not exist; it fires at
	// 03:30 EDT (07:30 UTC), once.
	require.Equal(t, []string{"2026-03-07T07:30:00Z", "2026-03-08T07:30:00Z", "2026-03-09T06:30:00Z"},
		cronSeries(t, "30 2 * * *", ny, time.Date(2026, 3, 7, 0, 0, 0, 0, time.UTC), 3))
	// 01:30 daily: on the 1st of November 01:30 comes twice; it fires at
	// the first (EDT, 05:30 UTC) only.
	require.Equal(t, []string{"2026-10-31T05:30:00Z", "2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"},
		cronSeries(t, "30 1 * * *", ny, time.Date(2026, 10, 31, 0, 0, 0, 0, time.UTC), 3))
	// 09:00 on weekdays is untouched by either change.
	require.Equal(t, []string{"2026-03-06T14:00:00Z", "2026-03-09T13:00:00Z"},
		cronSeries(t, "0 9 * * 1-5", ny, time.Date(2026, 3, 6, 0, 0, 0, 0, time.UTC), 2))
	// Every hour: by elapsed time, both 01:00s in November, no 02:00 in March.
	require.Equal(t, []string{"2026-11-01T04:00:00Z", "2026-11-01T05:00:00Z", "2026-11-01T06:00:00Z", "2026-11-01T07:00:00Z"},
		cronSeries(t, "0 * * * *", ny, time.Date(2026, 11, 1, 3, 30, 0, 0, time.UTC), 4))
	require.Equal(t, []string{"2026-03-08T06:00:00Z", "2026-03-08T07:00:00Z", "2026-03-08T08:00:00Z"},
		cronSeries(t, "0 * * * *", ny, time.Date(2026, 3, 8, 5, 30, 0, 0, time.UTC), 3))
	// A schedule made inside the jump's aftermath (03:10 EDT) still gets
	// the skipped 02:30 at 03:30 EDT.
	require.Equal(t, []string{"2026-03-08T07:30:00Z", "2026-03-09T06:30:00Z"},
		cronSeries(t, "30 2 * * *", ny, time.Date(2026, 3, 8, 7, 10, 0, 0, time.UTC), 2))
	// Every 15 minutes between 02:00 and 02:59: the skipped hour's four
	// fire where time.Date puts them, 03:00 to 03:45 EDT.
	require.Equal(t, []string{"2026-03-08T07:00:00Z", "2026-03-08T07:15:00Z", "2026-03-08T07:30:00Z", "2026-03-08T07:45:00Z", "2026-03-09T06:00:00Z"},
		cronSeries(t, "*/15 2 * * *", ny, time.Date(2026, 3, 8, 0, 0, 0, 0, time.UTC), 5))
	// A half-hour change (Lord Howe, 2026-10-04 02:00 -> 02:30).
	require.Equal(t, []string{"2026-10-03T15:45:00Z", "2026-10-04T15:15:00Z"}, // 02:15 skipped: at 02:45 LHDT
		cronSeries(t, "15 2 * * *", "Australia/Lord_Howe", time.Date(2026, 10, 3, 0, 0, 0, 0, time.UTC), 2))
}

// TestScheduleCronAcrossAHalfHourChangeFiresOncePerDay: on a change
// forward of half an hour (Lord Howe, 2026-10-04 02:00 -> 02:30), a daily
// 01:45, which the change does not touch, fires once that day, at 01:45.
// robfig/cron alone fired it at 01:45 and again at 02:45 (its minute search
// crossed the change without looking at the hour again); the day after, at
// 01:45 again.
func TestScheduleCronAcrossAHalfHourChangeFiresOncePerDay(t *testing.T) {
	require.Equal(t, []string{"2026-10-03T15:15:00Z", "2026-10-04T14:45:00Z", "2026-10-05T14:45:00Z"},
		cronSeries(t, "45 1 * * *", "Australia/Lord_Howe", time.Date(2026, 10, 3, 0, 0, 0, 0, time.UTC), 3))
	// Every 20 minutes of hour 1: 01:00, 01:20, 01:40 (+10:30) on the day
	// of the change, never a minute of hour 2, and all three the day after
	// (+11).
	require.Equal(t, []string{"2026-10-03T14:30:00Z", "2026-10-03T14:50:00Z", "2026-10-03T15:10:00Z", "2026-10-04T14:00:00Z", "2026-10-04T14:20:00Z"},
		cronSeries(t, "*/20 1 * * *", "Australia/Lord_Howe", time.Date(2026, 10, 3, 14, 0, 0, 0, time.UTC), 5))
	// Every 20 minutes of hour 3, the hour after the change: all three.
	require.Equal(t, []string{"2026-10-03T16:00:00Z", "2026-10-03T16:20:00Z", "2026-10-03T16:40:00Z"},
		cronSeries(t, "*/20 3 * * *", "Australia/Lord_Howe", time.Date(2026, 10, 3, 14, 0, 0, 0, time.UTC), 3))
}

// TestScheduleCronAcrossASkippedDayReturns: across a change that skips a
// whole day (Apia, 2011-12-29 24:00 -10 -> 2011-12-31 00:00 +14), the next
// occurrence of a weekly expression is computed, the Sunday after it
// (robfig/cron's search in the zone looped for ever there, its day step
// landing on the skipped day again: a Schedule or a delivery computing it
// would hang). The zone's offset spans are searched one at a time now.
func TestScheduleCronAcrossASkippedDayReturns(t *testing.T) {
	done := make(chan []string, 1)
	go func() { // no require here: FailNow belongs to the test's goroutine
		sc := &messages.Schedule{Id: "s", Cron: "10 2 * * 0", TimeZone: "Pacific/Apia"}
		var out []string
		next, err := cronNext(sc, time.Date(2011, 12, 20, 0, 0, 0, 0, time.UTC))
		for i := 0; err == nil && i < 3; i++ {
			out = append(out, next.UTC().Format(time.RFC3339))
			var after *time.Time
			if after, err = nextAfterFire(sc, next, next); err == nil && after != nil {
				next = *after
			}
		}
		done <- out
	}()
	select {
	case got := <-done:
		// Sundays 02:10: 25 December (-10), 1 and 8 January (+14).
		require.Equal(t, []string{"2011-12-25T12:10:00Z", "2011-12-31T12:10:00Z", "2012-01-07T12:10:00Z"}, got)
	case <-time.After(10 * time.Second):
		t.Fatal("the next occurrence was not computed in 10s")
	}
}

// TestScheduleCronSkippedTimeMissedWhileDown pins what the Schedule and
// ScheduleSpec.Cron docs promise when a runtime was down across a change
// forward: occurrences missed while no runtime ran collapse into the one
// that fires late, whose next is the first occurrence after the time it
// fired; a local time the change skipped (placed where time.Date puts it,
// an hour later) counts as missed once that instant has passed, fires
// once if it has not, and never twice. Paris: 2026-03-29 02:00 CET jumps
// to 03:00 CEST, so "30 2 * * *" is placed at 03:30 CEST (01:30 UTC).
func TestScheduleCronSkippedTimeMissedWhileDown(t *testing.T) {
	paris, err := time.LoadLocation("Europe/Paris")
	require.NoError(t, err)
	sc := &messages.Schedule{Id: "s", Cron: "30 2 * * *", TimeZone: "Europe/Paris"}
	occ := time.Date(2026, 3, 28, 2, 30, 0, 0, paris) // the day before
	placed := time.Date(2026, 3, 29, 1, 30, 0, 0, time.UTC)
	dayAfter := time.Date(2026, 3, 30, 2, 30, 0, 0, paris)
	for _, c := range []struct {
		name      string
		now, want time.Time
	}{
		{"fired on time", occ, placed},
		{"down until after the change, before the placed time", time.Date(2026, 3, 29, 3, 15, 0, 0, paris), placed},
		{"down across the placed time", time.Date(2026, 3, 29, 5, 0, 0, 0, paris), dayAfter},
		{"down for days", time.Date(2026, 4, 2, 12, 0, 0, 0, paris), time.Date(2026, 4, 3, 2, 30, 0, 0, paris)},
	} {
		next, err := nextAfterFire(sc, occ, c.now)
		require.NoError(t, err, c.name)
		require.NotNil(t, next, c.name)
		require.True(t, next.Equal(c.want), "%s: next %v, want %v", c.name, next.UTC(), c.want.UTC())
	}
	// The placed occurrence itself, fired (on time or late), is followed
	// by the next day's, not by itself again.
	for _, now := range []time.Time{placed, placed.Add(time.Minute)} {
		next, err := nextAfterFire(sc, placed, now)
		require.NoError(t, err)
		require.True(t, next.Equal(dayAfter), "after the placed occurrence fired at %v: %v", now.UTC(), next.UTC())
	}
}
