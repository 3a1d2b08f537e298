package pgjournal

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/pgjournal/pgtest"
	"github.com/lazarusrt/lazarus/messages"
)

// TestNegativeLastSeqIsCorrupt: a conversation row whose last_seq column
// is negative (no write stores one) is journal.ErrCorrupt naming it on
// the reads and writes that meet it, and nothing is written. LastSeq
// returned it as a seq near 2^64, and an append or a summary computed
// with that.
func TestNegativeLastSeqIsCorrupt(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	s := open(t, dsn, Options{})
	conn, err := pgx.Connect(t.Context(), dsn)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	ctx := t.Context()
	const conv = "c"
	_, err = s.Append(ctx, &messages.AppendRequest{ConversationId: conv, Events: []*messages.Event{userEvent("hi")}})
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "UPDATE lz_conversations SET last_seq = -1 WHERE id = $1", []byte(conv))
	require.NoError(t, err)

	_, err = s.LastSeq(ctx, conv)
	require.ErrorIs(t, err, journal.ErrCorrupt, "LastSeq")
	require.ErrorContains(t, err, `"c"`)
	_, err = s.Append(ctx, &messages.AppendRequest{ConversationId: conv, ExpectedLast: 1, Events: []*messages.Event{userEvent("again")}})
	require.ErrorIs(t, err, journal.ErrCorrupt, "Append")
	err = s.PutSummary(ctx, conv, &messages.Summary{FromSeq: 1, ToSeq: 1, Content: "s"})
	require.ErrorIs(t, err, journal.ErrCorrupt, "PutSummary")
	fev := userEvent("x")
	fev.Seq = 1
	err = s.Fork(ctx, &messages.ForkRequest{ConversationId: conv, Events: []*messages.Event{fev}, Status: messages.ConversationStatus_CONVERSATION_STATUS_IDLE})
	require.ErrorIs(t, err, journal.ErrCorrupt, "Fork")

	var n int
	require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM lz_events WHERE conv = $1", []byte(conv)).Scan(&n))
	require.Equal(t, 1, n, "nothing written")
	require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM lz_summaries WHERE conv = $1", []byte(conv)).Scan(&n))
	require.Zero(t, n, "no summary written")
}
