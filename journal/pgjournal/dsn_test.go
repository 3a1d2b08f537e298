package pgjournal

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/journal"
)

// TestCheckDSN: a DSN that does not parse (a URL, keyword/value, a bad
// pool parameter) is an error wrapping journal.ErrInvalid and pgx's parse
// error, whose message is pgx's alone and never shows the password; Open
// fails on it with the same message after its prefix, connecting to
// nothing. One that parses is nil, though nothing listens there.
func TestCheckDSN(t *testing.T) {
	for _, dsn := range []string{
		"postgres://u:s3cret@db.invalid:badport/app",
		"host=db.invalid password=s3cret port=notaport",
		"postgres://u:s3cret@db.invalid/app?pool_max_conns=many",
		"postgres://u:s3cret@db.invalid/app?pool_max_conn_lifetime=forever",
		"postgres://u:s3cret%zz@db.invalid/app",
		"postgres://u:s3cret@db.invalid:5432:5432/app",
		"host=db.invalid password='s3cret",
		"::bad::",
	} {
		err := CheckDSN(dsn)
		require.ErrorIs(t, err, journal.ErrInvalid, dsn)
		var pe *pgconn.ParseConfigError
		if !strings.Contains(dsn, "pool_") { // pgxpool's own parameters fail with a plain error
			require.True(t, errors.As(err, &pe), "%s: pgx's error is wrapped: %T", dsn, err)
		}
		require.True(t, strings.HasPrefix(err.Error(), "cannot parse "), "pgx's message alone: %s", err)
		require.NotContains(t, err.Error(), "s3cret")
		require.NotContains(t, err.Error(), journal.ErrInvalid.Error(), "no sentinel text: the commands add their own words")

		st, oerr := Open(context.Background(), dsn, Options{})
		require.Nil(t, st)
		require.ErrorIs(t, oerr, journal.ErrInvalid)
		require.Equal(t, "pgjournal: parse DSN: "+err.Error()+": "+journal.ErrInvalid.Error(), oerr.Error())
	}
	for _, dsn := range []string{"postgres://u:s3cret@127.0.0.1:1/app", "host=127.0.0.1 port=1 password=s3cret", "postgres://u@127.0.0.1:1/app?pool_max_conns=4"} {
		require.NoError(t, CheckDSN(dsn), dsn)
	}
}
