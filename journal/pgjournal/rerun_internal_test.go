package pgjournal

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/journal"
)

// TestRerunWaitsBetweenRuns: a write that loses races is run 3 times at
// most, with a wait between two runs (none before the first, none after
// the last) that grows and stays at most maxRerunWait; a ctx that ends
// during a wait ends the write with the ctx's error, not run again; an
// error that is not a lost race (an unknown outcome) is never run again.
func TestRerunWaitsBetweenRuns(t *testing.T) {
	lost := func(code string) error {
		return (&Store{}).wrap(context.Background(), "op", &pgconn.PgError{Code: code})
	}
	t.Run("lost every time", func(t *testing.T) {
		for _, code := range []string{"40P01", "40001", "23505"} {
			var trace []string
			s := &Store{pause: func(_ context.Context, d time.Duration) error {
				require.Positive(t, d)
				require.LessOrEqual(t, d, maxRerunWait)
				trace = append(trace, "wait")
				return nil
			}}
			err := s.rerun(t.Context(), "op", func() error { trace = append(trace, "run"); return lost(code) })
			require.ErrorIs(t, err, journal.ErrConflict, code)
			require.Equal(t, []string{"run", "wait", "run", "wait", "run"}, trace, code)
		}
	})
	t.Run("won on the rerun", func(t *testing.T) {
		var trace []string
		s := &Store{pause: func(context.Context, time.Duration) error { trace = append(trace, "wait"); return nil }}
		err := s.rerun(t.Context(), "op", func() error {
			trace = append(trace, "run")
			if len(trace) == 1 {
				return lost("40P01")
			}
			return nil
		})
		require.NoError(t, err)
		require.Equal(t, []string{"run", "wait", "run"}, trace)
	})
	t.Run("ctx ends in the wait", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		runs := 0
		s := &Store{pause: func(ctx context.Context, _ time.Duration) error {
			cancel()
			return sleepCtx(ctx, time.Minute)
		}}
		err := s.rerun(ctx, "op", func() error { runs++; return lost("40001") })
		require.ErrorIs(t, err, context.Canceled)
		require.NotErrorIs(t, err, journal.ErrConflict)
		require.Equal(t, "pgjournal: op: context canceled", err.Error())
		require.Equal(t, 1, runs, "not run again")
	})
	t.Run("unknown outcome", func(t *testing.T) {
		runs := 0
		s := &Store{pause: func(context.Context, time.Duration) error { t.Error("waited"); return nil }}
		err := s.rerun(t.Context(), "op", func() error {
			runs++
			return (&Store{}).wrapCommit("op", errors.New("connection reset"))
		})
		require.ErrorIs(t, err, journal.ErrUnknownOutcome)
		require.Equal(t, 1, runs)
	})
}

// TestRerunWaitGrowsCapped: the wait grows with the runs, up to
// maxRerunWait, with at most half of it taken off at random.
func TestRerunWaitGrowsCapped(t *testing.T) {
	for attempt := 1; attempt <= 8; attempt++ {
		full := min(firstRerunWait<<(attempt-1), maxRerunWait)
		for range 200 {
			d := rerunWait(attempt)
			require.GreaterOrEqual(t, d, full/2, fmt.Sprint(attempt))
			require.LessOrEqual(t, d, full, fmt.Sprint(attempt))
		}
	}
}

// TestSleepCtx: sleepCtx returns nil once d passed, and a ctx's error at
// once when it is done.
func TestSleepCtx(t *testing.T) {
	require.NoError(t, sleepCtx(t.Context(), time.Microsecond))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	require.ErrorIs(t, sleepCtx(ctx, time.Hour), context.Canceled)
}
