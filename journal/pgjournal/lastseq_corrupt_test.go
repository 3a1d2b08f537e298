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

// openWithConn opens a Store on a new database and a connection of its
// own to that database, to change its tables under the Store; both close
// when the test ends.
func openWithConn(t *testing.T) (*Store, *pgx.Conn) {
	t.Helper()
	dsn := pgtest.NewDatabase(t)
	s := open(t, dsn, Options{})
	conn, err := pgx.Connect(t.Context(), dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return s, conn
}

// rowsOf counts the rows of table whose column col is conv.
func rowsOf(t *testing.T, conn *pgx.Conn, table, col, conv string) int {
	t.Helper()
	var n int
	require.NoError(t, conn.QueryRow(t.Context(), "SELECT count(*) FROM "+table+" WHERE "+col+" = $1", []byte(conv)).Scan(&n))
	return n
}

// TestNegativeLastSeqIsCorrupt: a conversation row whose last_seq column
// is negative (no write stores one) is journal.ErrCorrupt naming it on
// the reads and writes that meet it, and nothing is written. LastSeq
// returned it as a seq near 2^64, and an append or a summary computed
// with that.
func TestNegativeLastSeqIsCorrupt(t *testing.T) {
	s, conn := openWithConn(t)
	ctx := t.Context()
	var err error
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

	require.Equal(t, 1, rowsOf(t, conn, "lz_events", "conv", conv), "nothing written")
	require.Zero(t, rowsOf(t, conn, "lz_summaries", "conv", conv), "no summary written")
}

// TestEventPastLastSeqFailsOnlyItsRequest: lz_events holds a row past its
// conversation's last_seq (last_seq lowered by hand, a row copied in): an
// append to that conversation, in a batch with another conversation's, is
// journal.ErrCorrupt naming it, nothing written, and the other request
// succeeds. The event's insert broke the key of lz_events, which the batch
// took for a row a concurrent writer inserted and ran again until every
// request of the batch failed with ErrConflict, for good: no writer can
// insert a row of a conversation whose lock the batch holds.
func TestEventPastLastSeqFailsOnlyItsRequest(t *testing.T) {
	s, conn := openWithConn(t)
	ctx := t.Context()
	var err error
	for _, c := range []string{"bad", "good"} {
		_, err = s.Append(ctx, &messages.AppendRequest{ConversationId: c, Events: []*messages.Event{userEvent("1"), userEvent("2")}})
		require.NoError(t, err)
	}
	_, err = conn.Exec(ctx, "UPDATE lz_conversations SET last_seq = 1 WHERE id = $1", []byte("bad"))
	require.NoError(t, err)

	res := s.AppendBatch(ctx, []*messages.AppendRequest{
		{ConversationId: "bad", ExpectedLast: 1, Events: []*messages.Event{userEvent("x")}},
		{ConversationId: "good", ExpectedLast: 2, Events: []*messages.Event{userEvent("3")}},
	})
	require.ErrorIs(t, res[0].Err, journal.ErrCorrupt)
	require.NotErrorIs(t, res[0].Err, journal.ErrConflict)
	require.ErrorContains(t, res[0].Err, `"bad"`)
	require.NoError(t, res[1].Err)
	require.EqualValues(t, 3, res[1].LastSeq)

	var data []byte
	require.NoError(t, conn.QueryRow(ctx, "SELECT data FROM lz_events WHERE conv = $1 AND seq = 2", []byte("bad")).Scan(&data))
	ev, err := decodeEvent(data, "bad", 2)
	require.NoError(t, err)
	require.Equal(t, "2", textOf(ev), "nothing written over the row")
	last, err := s.LastSeq(ctx, "bad")
	require.NoError(t, err)
	require.EqualValues(t, 1, last)
}

// TestEventPastLastSeqFailsFork: lz_events holds a row of a conversation
// that has none (no row, last_seq 0: a row copied in): a fork into it is
// journal.ErrCorrupt naming it and the seq, and nothing is written. The
// fork's insert broke the key of lz_events, which Fork took for a row a
// concurrent writer inserted and ran again until it failed with
// ErrConflict, though no writer can insert a row of a conversation whose
// lock the fork holds.
func TestEventPastLastSeqFailsFork(t *testing.T) {
	s, conn := openWithConn(t)
	ctx := t.Context()
	var err error
	const conv = "f"
	_, err = conn.Exec(ctx, "INSERT INTO lz_events (conv, seq, data) VALUES ($1, 2, $2)", []byte(conv), []byte("stray"))
	require.NoError(t, err)

	evs := []*messages.Event{userEvent("1"), userEvent("2")}
	for i, ev := range evs {
		ev.Seq = uint64(i + 1)
	}
	err = s.Fork(ctx, &messages.ForkRequest{ConversationId: conv, Events: evs, Status: messages.ConversationStatus_CONVERSATION_STATUS_IDLE})
	require.ErrorIs(t, err, journal.ErrCorrupt)
	require.NotErrorIs(t, err, journal.ErrConflict)
	require.ErrorContains(t, err, `"f"`)
	require.ErrorContains(t, err, "seq 2")

	require.Equal(t, 1, rowsOf(t, conn, "lz_events", "conv", conv), "nothing written")
	require.Zero(t, rowsOf(t, conn, "lz_conversations", "id", conv), "no conversation row written")
}

// TestSummaryPastLastSeqFailsFork: a summary row already at the to_seq of
// a fork's summary, in a conversation without events (no writer puts
// one: the table was changed under the store), is journal.ErrCorrupt
// naming the conversation and the seq, and nothing is written. It broke
// the key of lz_summaries, which the fork took for a lost race and ran
// again until ErrConflict.
func TestSummaryPastLastSeqFailsFork(t *testing.T) {
	s, conn := openWithConn(t)
	ctx := t.Context()
	var err error
	const conv = "f"
	_, err = conn.Exec(ctx, "INSERT INTO lz_summaries (conv, to_seq, data) VALUES ($1, 2, $2)", []byte(conv), []byte("stray"))
	require.NoError(t, err)

	evs := []*messages.Event{userEvent("3"), userEvent("4")}
	for i, ev := range evs {
		ev.Seq = uint64(i + 3)
	}
	err = s.Fork(ctx, &messages.ForkRequest{ConversationId: conv, Events: evs, Status: messages.ConversationStatus_CONVERSATION_STATUS_IDLE,
		Summary: &messages.Summary{FromSeq: 1, ToSeq: 2, Content: "s"}})
	require.ErrorIs(t, err, journal.ErrCorrupt)
	require.NotErrorIs(t, err, journal.ErrConflict)
	require.ErrorContains(t, err, `"f"`)
	require.ErrorContains(t, err, "seq 2")

	require.Zero(t, rowsOf(t, conn, "lz_events", "conv", conv), "no event written")
	require.Zero(t, rowsOf(t, conn, "lz_conversations", "id", conv), "no conversation row written")
}
