package tests

// Black-box tests of README "On PostgreSQL" through lazarus.Open.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/journal/pgjournal"
	"github.com/lazarusrt/lazarus/journal/pgjournal/pgtest"
)

// TestDocsPostgresOpenRefusals: Open on a database migrated by newer code
// is refused with pgjournal.ErrSchemaTooNew; on a server that cannot be
// reached it fails at once with journal.ErrUnavailable; a DSN that does
// not parse, or Postgres with Store, is refused with journal.ErrInvalid.
func TestDocsPostgresOpenRefusals(t *testing.T) {
	model := scripted.New(scripted.Options{})
	dsn := pgtest.NewDatabase(t)
	rt, err := lazarus.Open(lazarus.Options{Postgres: dsn, Model: model})
	require.NoError(t, err)
	require.NoError(t, rt.Close())
	conn, err := pgx.Connect(t.Context(), dsn)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	_, err = conn.Exec(t.Context(), "INSERT INTO lz_schema (version) VALUES ($1)", pgjournal.SchemaVersion()+1)
	require.NoError(t, err)
	_, err = lazarus.Open(lazarus.Options{Postgres: dsn, Model: model})
	require.ErrorIs(t, err, pgjournal.ErrSchemaTooNew)

	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	start := time.Now()
	_, err = lazarus.Open(lazarus.Options{Postgres: "postgres://lazarus@" + addr + "/none", Model: model})
	require.ErrorIs(t, err, journal.ErrUnavailable)
	require.Less(t, time.Since(start), 5*time.Second, "at once")

	_, err = lazarus.Open(lazarus.Options{Postgres: "postgres://%zz", Model: model})
	require.ErrorIs(t, err, journal.ErrInvalid)
	_, err = lazarus.Open(lazarus.Options{Postgres: dsn, Store: memjournal.New(memjournal.Options{}), Model: model})
	require.ErrorIs(t, err, journal.ErrInvalid)
}

// TestDocsPostgresOutage: while the server is down, a Runtime's calls fail
// at once with journal.ErrUnavailable and write nothing; once it is back,
// they succeed again within the store's longest reconnect backoff (2 s,
// plus the slack of a busy machine).
func TestDocsPostgresOutage(t *testing.T) {
	srv, err := pgtest.Start()
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	dsn := srv.NewDatabase(t)
	rt, err := lazarus.Open(lazarus.Options{Postgres: dsn, Model: scripted.New(scripted.Options{}), IdleTimeout: -1})
	require.NoError(t, err)
	defer func() { _ = rt.Close() }()
	ctx := ctxT(t)
	_, err = rt.SendAndWait(ctx, "c", "before", user)
	require.NoError(t, err)

	srv.StopServer()
	// The first calls may meet the drop itself (a write whose outcome is
	// not known); once the store has seen the server gone, every call
	// fails at once with ErrUnavailable, and writes nothing.
	refused := map[string]bool{}
	n := 0
	var last error
	require.Eventually(t, func() bool {
		n++
		text := fmt.Sprintf("during %d", n)
		_, last = rt.Send(ctx, "c", text, user)
		if errors.Is(last, journal.ErrUnavailable) {
			refused[text] = true
			return true
		}
		return false
	}, wait, 10*time.Millisecond, "sends fail with ErrUnavailable while the server is down")
	for range 5 {
		n++
		text := fmt.Sprintf("during %d", n)
		start := time.Now()
		_, err := rt.Send(ctx, "c", text, user)
		require.ErrorIs(t, err, journal.ErrUnavailable)
		require.Less(t, time.Since(start), time.Second, "a call fails at once while the server is down")
		refused[text] = true
		_, err = rt.History(ctx, "c", 0, 0)
		require.ErrorIs(t, err, journal.ErrUnavailable)
	}

	require.NoError(t, srv.Resume())
	back := time.Now()
	var seq uint64
	require.Eventually(t, func() bool {
		seq, err = rt.Send(ctx, "c", "after", user)
		return err == nil
	}, wait, 10*time.Millisecond, "sends succeed once the server is back: %v", err)
	t.Logf("calls succeeded again %v after the server was back", time.Since(back))
	require.Less(t, time.Since(back), 2*time.Second+3*time.Second, "within the longest backoff")

	evs, err := rt.History(ctx, "c", 0, 0)
	require.NoError(t, err)
	found := false
	for _, e := range evs {
		m := e.GetUserMsg()
		if m == nil {
			continue
		}
		text := m.GetContent()[0].GetText()
		require.False(t, refused[text], "a send refused with ErrUnavailable was written: %q", text)
		if e.GetSeq() == seq {
			require.Equal(t, "after", text)
			found = true
		}
	}
	require.True(t, found, "the acknowledged send is in the log at its seq")
}

// TestDocsPostgresOwnPool: a Store the application opens on its own pool
// (pgjournal.OpenPool) and passes as Options.Store serves the Runtime, and
// Close leaves it open: the Store and the pool still answer, and a second
// Runtime on the same Store reads the first one's conversation.
func TestDocsPostgresOwnPool(t *testing.T) {
	ctx := ctxT(t)
	pool, err := pgxpool.New(ctx, pgtest.NewDatabase(t))
	require.NoError(t, err)
	defer pool.Close()
	st, err := pgjournal.OpenPool(ctx, pool, pgjournal.Options{})
	require.NoError(t, err)
	defer st.Close()
	model := scripted.New(scripted.Options{})
	model.Push("c", scripted.Text("on the application's pool"))
	rt, err := lazarus.Open(lazarus.Options{Store: st, Model: model, IdleTimeout: -1})
	require.NoError(t, err)
	_, err = rt.SendAndWait(ctx, "c", "hi", user)
	require.NoError(t, err)
	require.NoError(t, rt.Close())

	last, err := st.LastSeq(ctx, "c")
	require.NoError(t, err, "Close left the Store it was given open")
	require.EqualValues(t, 2, last)
	require.NoError(t, pool.Ping(ctx), "and the pool")
	rt2, err := lazarus.Open(lazarus.Options{Store: st, Model: scripted.New(scripted.Options{}), IdleTimeout: -1})
	require.NoError(t, err)
	defer rt2.Close()
	evs, err := rt2.History(ctx, "c", 0, 0)
	require.NoError(t, err)
	require.Equal(t, []string{"user_msg", "assistant_msg"}, types(evs))
}
