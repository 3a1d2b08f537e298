package pgjournal

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/pgjournal/pgtest"
	"github.com/lazarusrt/lazarus/messages"
)

// TestWriteRerunsLostDeadlock: a write outside AppendBatch that the server
// picks as the victim of a deadlock with another writer's transaction is
// run again, and succeeds once that transaction committed. It failed with
// ErrConflict, which says a fence was lost, for a race a rerun resolves.
//
// The other transaction takes a lock the write needs (hold), waits until
// the write queues on it, then asks for a lock the write holds (close): a
// cycle. Its deadlock_timeout is long, so that the write's backend, which
// waited first, finds the cycle and is rolled back. The lock that closes
// the cycle is one the server grants to the waiter as the write's
// rollback releases it (a table or advisory lock, not a row's), so that the
// rerun queues behind the other transaction rather than racing it to the
// lock and deadlocking again.
//
// The rerun comes after one short wait (Store.pause, replaced here); a ctx
// that ends during the wait ends the write with its error, nothing written.
func TestWriteRerunsLostDeadlock(t *testing.T) {
	ctx := t.Context()
	const conv, call = "c", "t"
	seed := func(t *testing.T, s *Store) {
		_, err := s.Append(ctx, &messages.AppendRequest{ConversationId: conv, Events: []*messages.Event{userEvent("hi")}})
		require.NoError(t, err)
		require.NoError(t, s.UpsertToolCall(ctx, &messages.ToolCallRecord{Id: call, ConversationId: conv, Name: "ask_human",
			Executor: messages.Executor_EXECUTOR_HUMAN, Args: `{}`}))
		require.NoError(t, s.ScheduleDeadline(ctx, &messages.Deadline{ConversationId: conv, ToolCallId: call, At: timestamppb.New(time.Now().Add(time.Hour))}))
	}
	convLock := lockKey(conv)
	for _, tc := range []struct {
		name        string
		hold        string // taken first by the other transaction
		holdArgs    []any
		close       string // then asked for by it: the write holds it
		closeArgs   []any
		write       func(ctx context.Context, s *Store) error
		afterChecks func(t *testing.T, s *Store)
		unchanged   func(t *testing.T, s *Store) // nothing written
	}{
		{
			// writeTx without a conversation lock: the row of the call,
			// then its deadline.
			name: "ResolveToolCall",
			hold: "SELECT 1 FROM lz_deadlines WHERE conv = $1 AND call = $2 FOR UPDATE", holdArgs: []any{[]byte(conv), []byte(call)},
			close: "LOCK TABLE lz_tool_calls IN SHARE MODE",
			write: func(ctx context.Context, s *Store) error {
				rec, err := s.ResolveToolCall(ctx, call, messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED, nil, time.Now())
				if err == nil && rec.GetStatus() != messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED {
					t.Errorf("resolved row has status %v", rec.GetStatus())
				}
				return err
			},
			afterChecks: func(t *testing.T, s *Store) {
				rec, err := s.ToolCall(ctx, call)
				require.NoError(t, err)
				require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED, rec.GetStatus())
				_, err = s.ResolveToolCall(ctx, call, messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED, nil, time.Now())
				require.ErrorIs(t, err, journal.ErrStale, "a second resolution is still stale")
			},
			unchanged: func(t *testing.T, s *Store) {
				rec, err := s.ToolCall(ctx, call)
				require.NoError(t, err)
				require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING, rec.GetStatus())
			},
		},
		{
			// writeTx under the conversation's lock.
			name:  "DeleteConversation",
			hold:  "LOCK TABLE lz_events IN SHARE ROW EXCLUSIVE MODE",
			close: "SELECT pg_advisory_xact_lock($1)", closeArgs: []any{convLock},
			write: func(ctx context.Context, s *Store) error { return s.DeleteConversation(ctx, conv) },
			afterChecks: func(t *testing.T, s *Store) {
				_, err := s.Conversation(ctx, conv)
				require.ErrorIs(t, err, journal.ErrDeleted)
			},
			unchanged: func(t *testing.T, s *Store) {
				_, err := s.Conversation(ctx, conv)
				require.NoError(t, err)
			},
		},
		{
			// PutSummary's own two round trips.
			name:  "PutSummary",
			hold:  "LOCK TABLE lz_summaries IN SHARE ROW EXCLUSIVE MODE",
			close: "SELECT pg_advisory_xact_lock($1)", closeArgs: []any{convLock},
			write: func(ctx context.Context, s *Store) error {
				return s.PutSummary(ctx, conv, &messages.Summary{FromSeq: 1, ToSeq: 1, Content: "s"})
			},
			afterChecks: func(t *testing.T, s *Store) {
				sum, err := s.LatestSummary(ctx, conv)
				require.NoError(t, err)
				require.Equal(t, "s", sum.GetContent())
			},
			unchanged: func(t *testing.T, s *Store) {
				sum, _ := s.LatestSummary(ctx, conv)
				require.Nil(t, sum)
			},
		},
		{
			// execCommit: one statement outside a transaction.
			name: "CancelDeadline",
			hold: "SELECT 1 FROM lz_deadlines WHERE conv = $1 AND call = $2 FOR UPDATE", holdArgs: []any{[]byte(conv), []byte(call)},
			close: "LOCK TABLE lz_deadlines IN SHARE MODE",
			write: func(ctx context.Context, s *Store) error { return s.CancelDeadline(ctx, conv, call) },
			afterChecks: func(t *testing.T, s *Store) {
				n := 0
				require.NoError(t, s.Deadlines(ctx, time.Time{}, func(*messages.Deadline) error { n++; return nil }))
				require.Zero(t, n, "the deadline is gone")
			},
			unchanged: func(t *testing.T, s *Store) {
				n := 0
				require.NoError(t, s.Deadlines(ctx, time.Time{}, func(*messages.Deadline) error { n++; return nil }))
				require.Equal(t, 1, n, "the deadline stays")
			},
		},
	} {
		for _, endInWait := range []bool{false, true} {
			name := tc.name
			if endInWait {
				name += "/ctx ends in the wait"
			}
			t.Run(name, func(t *testing.T) {
				dsn := pgtest.NewDatabase(t)
				s := open(t, dsn, Options{})
				seed(t, s)
				// The wait before the rerun: recorded, and, with endInWait,
				// the write's ctx ends during it.
				wctx, cancel := context.WithCancel(ctx)
				defer cancel()
				var waits []time.Duration
				s.pause = func(pctx context.Context, d time.Duration) error {
					waits = append(waits, d)
					if endInWait {
						cancel()
						return sleepCtx(pctx, time.Minute)
					}
					return nil
				}
				other, err := pgx.Connect(ctx, dsn)
				require.NoError(t, err)
				defer other.Close(context.Background())

				_, err = other.Exec(ctx, "SET deadlock_timeout = '1min'")
				require.NoError(t, err)
				tx, err := other.Begin(ctx)
				require.NoError(t, err)
				defer func() { _ = tx.Rollback(context.Background()) }()
				_, err = tx.Exec(ctx, tc.hold, tc.holdArgs...)
				require.NoError(t, err)
				var otherPID int32
				require.NoError(t, tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&otherPID))

				done := make(chan error, 1)
				go func() { done <- tc.write(wctx, s) }()
				watch, err := pgx.Connect(ctx, dsn)
				require.NoError(t, err)
				defer watch.Close(context.Background())
				require.Eventually(t, func() bool {
					var n int
					err := watch.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
					WHERE datname = current_database() AND wait_event_type = 'Lock' AND pid <> $1`, otherPID).Scan(&n)
					return err == nil && n > 0
				}, 10*time.Second, 5*time.Millisecond, "the write waits for the other transaction")
				// Closes the cycle: returns once the server rolled the write
				// back.
				_, err = tx.Exec(ctx, tc.close, tc.closeArgs...)
				require.NoError(t, err, "the other transaction survives the deadlock")
				require.NoError(t, tx.Commit(ctx))

				select {
				case err = <-done:
				case <-time.After(20 * time.Second):
					t.Fatal("the write did not return")
				}
				require.Len(t, waits, 1, "one wait, between the lost run and the rerun")
				require.Positive(t, waits[0])
				require.LessOrEqual(t, waits[0], maxRerunWait)
				if endInWait {
					require.ErrorIs(t, err, context.Canceled, "the ctx that ended in the wait")
					require.NotErrorIs(t, err, journal.ErrUnknownOutcome)
					tc.unchanged(t, s)
					return
				}
				require.NoError(t, err, "the write lost a deadlock and is run again")
				tc.afterChecks(t, s)
			})
		}
	}
}

// TestOpenRerunsMigrationLostDeadlock: a migration that the server picks as
// the victim of a deadlock with a transaction of the database's other users
// is run again, and Open succeeds. Open failed with ErrConflict.
//
// The database is rolled back to the schema before the last migration
// (which is harmless to re-apply); the other transaction holds lz_schema,
// which the migration's transaction writes last, then reads the table the
// migration altered first.
func TestOpenRerunsMigrationLostDeadlock(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	ctx := t.Context()
	require.NoError(t, open(t, dsn, Options{}).Close())
	other, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer other.Close(context.Background())
	require.Equal(t, 7, SchemaVersion(), "the test alters the table of migration 7")
	_, err = other.Exec(ctx, "DELETE FROM lz_schema WHERE version = 7")
	require.NoError(t, err)
	_, err = other.Exec(ctx, "SET deadlock_timeout = '1min'")
	require.NoError(t, err)
	tx, err := other.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = tx.Exec(ctx, "LOCK TABLE lz_schema IN SHARE MODE")
	require.NoError(t, err)
	var otherPID int32
	require.NoError(t, tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&otherPID))

	done := make(chan error, 1)
	go func() {
		s, err := Open(ctx, dsn, Options{})
		if err == nil {
			_ = s.Close()
		}
		done <- err
	}()
	watch, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer watch.Close(context.Background())
	require.Eventually(t, func() bool {
		var n int
		err := watch.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND pid <> $1`, otherPID).Scan(&n)
		return err == nil && n > 0
	}, 10*time.Second, 5*time.Millisecond, "the migration waits for the other transaction")
	_, err = tx.Exec(ctx, "SELECT count(*) FROM lz_schedules")
	require.NoError(t, err, "the other transaction survives the deadlock")
	require.NoError(t, tx.Commit(ctx))

	select {
	case err = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("Open did not return")
	}
	require.NoError(t, err, "the migration lost a deadlock and is run again")
	var v int
	require.NoError(t, other.QueryRow(ctx, "SELECT max(version) FROM lz_schema").Scan(&v))
	require.Equal(t, 7, v)
}
