package pgjournal_test

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/pgjournal"
	"github.com/lazarusrt/lazarus/journal/pgjournal/pgtest"
	"github.com/stretchr/testify/require"
)

// Black-box tests of the package-level API (Open, OpenPool, Options), from
// its doc.

// silentServer accepts connections and never answers them, like a server
// that stopped answering or a firewall that swallows packets after the
// handshake.
func silentServer(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	conns := make(chan net.Conn, 64)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns <- c
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		for {
			select {
			case c := <-conns:
				_ = c.Close()
			default:
				return
			}
		}
	})
	return ln.Addr().(*net.TCPAddr).Port
}

// TestBBOpenCannotConnect: "with journal.ErrUnavailable when the server
// cannot be reached", and never a hang: a server that accepts and never
// answers fails Open once Options.Timeout has passed; a refused connection,
// an unknown database or role fail at once, with the server's reason; a
// caller's ctx already done fails at once with its error.
func TestBBOpenCannotConnect(t *testing.T) {
	ctx := context.Background()
	const timeout = 300 * time.Millisecond
	silent := fmt.Sprintf("postgres://u@127.0.0.1:%d/x?sslmode=disable", silentServer(t))
	start := time.Now()
	s, err := pgjournal.Open(ctx, silent, pgjournal.Options{Timeout: timeout})
	took := time.Since(start)
	require.Nil(t, s)
	require.ErrorIs(t, err, journal.ErrUnavailable)
	require.Contains(t, err.Error(), timeout.String())
	require.GreaterOrEqual(t, took, timeout)
	require.Less(t, took, timeout+10*time.Second, "bounded by Options.Timeout")

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = pgjournal.Open(cancelled, silent, pgjournal.Options{})
	require.ErrorIs(t, err, context.Canceled)

	// Negative Timeout: no bound but the caller's, whose error it is.
	bounded, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	_, err = pgjournal.Open(bounded, silent, pgjournal.Options{Timeout: -1})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NotErrorIs(t, err, journal.ErrUnavailable, "the caller's deadline, not the server's silence")

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closedPort := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())
	_, err = pgjournal.Open(ctx, fmt.Sprintf("postgres://u@127.0.0.1:%d/x?sslmode=disable", closedPort), pgjournal.Options{})
	require.ErrorIs(t, err, journal.ErrUnavailable)

	dsn := pgtest.NewDatabase(t)
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	noDB := *u
	noDB.Path = "/no_such_database"
	_, err = pgjournal.Open(ctx, noDB.String(), pgjournal.Options{})
	require.ErrorIs(t, err, journal.ErrUnavailable)
	require.Contains(t, err.Error(), "no_such_database")
	noRole := *u
	noRole.User = url.User("no_such_role")
	_, err = pgjournal.Open(ctx, noRole.String(), pgjournal.Options{})
	require.ErrorIs(t, err, journal.ErrUnavailable)
	require.Contains(t, err.Error(), "no_such_role")
}

// TestBBOpenBadDSN: a DSN that does not parse, pool parameters included,
// is ErrInvalid, at once and without a connection.
func TestBBOpenBadDSN(t *testing.T) {
	for _, dsn := range []string{
		"postgres://%zz",
		"host=127.0.0.1 port=notaport",
		"postgres://u@127.0.0.1:1/x?pool_max_conns=0",
		"postgres://u@127.0.0.1:1/x?pool_max_conns=-1",
		"postgres://u@127.0.0.1:1/x?pool_max_conns=abc",
		"postgres://u@127.0.0.1:1/x?pool_max_conn_lifetime=forever",
		"postgres://u@127.0.0.1:1/x?sslmode=bogus",
		"host='unterminated",
	} {
		s, err := pgjournal.Open(context.Background(), dsn, pgjournal.Options{})
		require.Nil(t, s, dsn)
		require.ErrorIs(t, err, journal.ErrInvalid, dsn)
	}
}

// TestBBConcurrentBatches: "half the pool, at least 1 and at most
// MaxConcurrentBatches", the pool being DefaultMaxConns unless the DSN sets
// pool_max_conns.
func TestBBConcurrentBatches(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	want := func(conns int64) int { return int(max(1, min(pgjournal.MaxConcurrentBatches, conns/2))) }
	for _, tc := range []struct {
		param string
		conns int64
	}{{"", pgjournal.DefaultMaxConns}, {"&application_name=pool_max_conns", pgjournal.DefaultMaxConns}, {"&pool_max_conns=1", 1}, {"&pool_max_conns=2", 2}, {"&pool_max_conns=5", 5}, {"&pool_max_conns=64", 64}} {
		s, err := pgjournal.Open(t.Context(), dsn+tc.param, pgjournal.Options{})
		require.NoError(t, err, tc.param)
		require.Equal(t, want(tc.conns), s.ConcurrentBatches(), tc.param)
		require.NoError(t, s.Close())
		require.NoError(t, s.Close(), "Close is safe to call more than once")
	}
	require.Equal(t, 1, want(1))
	require.Equal(t, pgjournal.MaxConcurrentBatches, want(pgjournal.DefaultMaxConns))
}

// TestBBOpenPoolKeepsThePool: "Close does not close it": the caller's pool
// still serves queries after the Store is closed; OpenPool applied the
// migrations, and ConcurrentBatches follows the caller's pool size.
func TestBBOpenPoolKeepsThePool(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	cfg, err := pgxpool.ParseConfig(dsn)
	require.NoError(t, err)
	cfg.MaxConns = 3
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	defer pool.Close()
	s, err := pgjournal.OpenPool(t.Context(), pool, pgjournal.Options{})
	require.NoError(t, err)
	require.Equal(t, 1, s.ConcurrentBatches())
	require.NoError(t, s.Close())
	var v int
	require.NoError(t, pool.QueryRow(t.Context(), "SELECT max(version) FROM lz_schema").Scan(&v))
	require.Equal(t, pgjournal.SchemaVersion(), v, "OpenPool applied every migration")
}

// TestBBOpenPoolNilAndNegativeBackoffs: a nil pool is ErrInvalid, not a
// panic; negative backoffs mean the defaults (zero or less), so Open
// accepts them.
func TestBBOpenPoolNilAndNegativeBackoffs(t *testing.T) {
	s, err := pgjournal.OpenPool(t.Context(), nil, pgjournal.Options{})
	require.Nil(t, s)
	require.ErrorIs(t, err, journal.ErrInvalid)

	s, err = pgjournal.Open(t.Context(), pgtest.NewDatabase(t), pgjournal.Options{ReconnectBackoff: -time.Second, MaxReconnectBackoff: -time.Hour})
	require.NoError(t, err)
	require.NoError(t, s.Close())
}
