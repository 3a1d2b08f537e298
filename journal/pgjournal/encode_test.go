package pgjournal

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/lazarusrt/lazarus/journal/pgjournal/pgtest"
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
