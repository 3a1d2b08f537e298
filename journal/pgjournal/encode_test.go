package pgjournal

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/pgjournal/pgtest"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/stretchr/testify/require"
)

// TestByteaArrayEncoding: a byteaArray reaches the server as the bytea[]
// pgx sends for the same [][]byte (NULL elements, empty and binary ones,
// an empty array, a nil one), and the connection's other bytea[] values
// still go through pgx's own codec.
func TestByteaArrayEncoding(t *testing.T) {
	conn, err := pgx.Connect(t.Context(), pgtest.NewDatabase(t))
	require.NoError(t, err)
	defer conn.Close(context.Background())
	require.True(t, useByteaArrays(conn))
	require.True(t, useByteaArrays(conn), "a second call finds the codec in place")

	cases := [][][]byte{
		{[]byte("a"), nil, {}, {0, 1, 2, 255}, []byte("last")},
		{[]byte("one")},
		{nil},
		{},
		nil,
	}
	for _, c := range cases {
		var fromFast, fromPgx [][]byte
		var fastNull, pgxNull bool
		var fastText, pgxText *string
		require.NoError(t, conn.QueryRow(t.Context(), "SELECT $1::bytea[], $1::bytea[] IS NULL, $1::bytea[]::text", byteaArray(c)).Scan(&fromFast, &fastNull, &fastText))
		require.NoError(t, conn.QueryRow(t.Context(), "SELECT $1::bytea[], $1::bytea[] IS NULL, $1::bytea[]::text", c).Scan(&fromPgx, &pgxNull, &pgxText))
		require.Equal(t, fromPgx, fromFast, "case %q", c)
		require.Equal(t, pgxNull, fastNull, "case %q", c)
		require.Equal(t, pgxText, fastText, "case %q", c)
	}

	// The rows of a multi-array unnest line up element by element.
	var n int
	var ok bool
	require.NoError(t, conn.QueryRow(t.Context(),
		"SELECT count(*), bool_and(a IS NOT DISTINCT FROM b) FROM unnest($1::bytea[], $2::bytea[]) AS x(a, b)",
		byteaArray{[]byte("x"), nil, []byte("z")}, [][]byte{[]byte("x"), nil, []byte("z")}).Scan(&n, &ok))
	require.Equal(t, 3, n)
	require.True(t, ok)
}

// TestAppendBatchGivesSeqsBackOnFailure: AppendBatch encodes every event
// before it checks the fence; the events of a request that fails (its fence,
// its own event, an invalid id) keep the seqs the caller gave them, those of
// a request that passes get their log seqs, and what was written is what
// the passing requests carried, also in the next batch, which reuses the
// Store's buffers.
func TestAppendBatchGivesSeqsBackOnFailure(t *testing.T) {
	s := open(t, pgtest.NewDatabase(t), Options{})
	ctx := t.Context()
	withSeq := func(text string, seq uint64) *messages.Event {
		ev := userEvent(text)
		ev.Seq = seq
		return ev
	}
	_, err := s.Append(ctx, &messages.AppendRequest{ConversationId: "a", Events: []*messages.Event{userEvent("a1")}})
	require.NoError(t, err)

	fenced := []*messages.Event{withSeq("fenced 1", 0), withSeq("fenced 2", 7)}
	bad := []*messages.Event{withSeq("bad 1", 3), withSeq("bad \xff", 4)} // invalid UTF-8: cannot be encoded
	good := []*messages.Event{withSeq("good 1", 0), withSeq("good 2", 9)}
	badID := []*messages.Event{withSeq("bad id", 5)}
	res := s.AppendBatch(ctx, []*messages.AppendRequest{
		{ConversationId: "a", ExpectedLast: 5, Events: fenced},
		{ConversationId: "b", Events: bad},
		{ConversationId: "a", ExpectedLast: 1, Events: good},
		{ConversationId: "", Events: badID},
	})
	require.ErrorIs(t, res[0].Err, journal.ErrConflict)
	require.ErrorIs(t, res[1].Err, journal.ErrInvalid)
	require.NoError(t, res[2].Err)
	require.ErrorIs(t, res[3].Err, journal.ErrInvalid)
	require.Equal(t, journal.AppendResult{FirstSeq: 2, LastSeq: 3}, res[2])
	require.Equal(t, []uint64{0, 7}, []uint64{fenced[0].GetSeq(), fenced[1].GetSeq()})
	require.Equal(t, []uint64{3, 4}, []uint64{bad[0].GetSeq(), bad[1].GetSeq()})
	require.Equal(t, []uint64{2, 3}, []uint64{good[0].GetSeq(), good[1].GetSeq()})
	require.Equal(t, uint64(5), badID[0].GetSeq())

	// The next batch, on the buffers the first one gave back.
	res = s.AppendBatch(ctx, []*messages.AppendRequest{
		{ConversationId: "a", ExpectedLast: 3, Events: []*messages.Event{userEvent("a4")}},
		{ConversationId: "b", Events: []*messages.Event{userEvent("b1"), userEvent("b2")}},
	})
	require.NoError(t, res[0].Err)
	require.NoError(t, res[1].Err)

	texts := func(conv string) []string {
		evs, err := s.Events(ctx, conv, journal.EventQuery{})
		require.NoError(t, err)
		var out []string
		for i, ev := range evs {
			require.Equal(t, uint64(i+1), ev.GetSeq())
			out = append(out, textOf(ev))
		}
		return out
	}
	require.Equal(t, []string{"a1", "good 1", "good 2", "a4"}, texts("a"))
	require.Equal(t, []string{"b1", "b2"}, texts("b"))
}
