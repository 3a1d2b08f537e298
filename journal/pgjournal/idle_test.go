package pgjournal

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/pgjournal/pgtest"
	"github.com/lazarusrt/lazarus/messages"
)

// TestIdleInTransactionTimeoutIsUnavailable: a write whose session the
// server ended for being idle in its transaction too long
// (idle_in_transaction_session_timeout, set in the DSN: what keeps a
// stalled writer, such as a paused cluster member, from holding a
// conversation's lock) fails with ErrUnavailable, and writes nothing.
func TestIdleInTransactionTimeoutIsUnavailable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := Open(ctx, pgtest.NewDatabase(t)+"&idle_in_transaction_session_timeout=100", Options{})
	require.NoError(t, err)
	defer st.Close()

	err = st.writeTx(ctx, "append", "c", func(tx pgx.Tx) error {
		var pid int32
		require.NoError(t, tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid))
		// The writer stalls, idle in its transaction, until the server has
		// ended its session.
		require.Eventually(t, func() bool {
			var n int
			return st.pool.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid).Scan(&n) == nil && n == 0
		}, 20*time.Second, 10*time.Millisecond, "the server never ended the idle session")
		_, err := tx.Exec(ctx, "SELECT 1")
		return err
	})
	require.ErrorIs(t, err, journal.ErrUnavailable, "%v", err)
	// The Store goes on, on another connection.
	res, err := st.Append(ctx, &messages.AppendRequest{ConversationId: "c", Events: []*messages.Event{{
		RequestId: "r", Body: &messages.Event_UserMsg{UserMsg: agent.UserMessage(agent.TextPart("hi"))},
	}}})
	require.NoError(t, err)
	require.Equal(t, uint64(1), res.LastSeq)
}
