package tests

import (
	"context"
	"fmt"
	"sync"
	"time"

	"testing"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/pgjournal"
	"github.com/lazarusrt/lazarus/journal/pgjournal/pgtest"
	"github.com/stretchr/testify/require"
)

// TestPostgresOption: Options.Postgres opens the PostgreSQL journal, which
// the Runtime closes; a second Runtime on the same database has the
// conversation. Postgres with Dir is refused.
func TestPostgresOption(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	ctx := ctxT(t)
	model := scripted.New(scripted.Options{})
	model.Push("c", scripted.Text("hello from postgres"))
	rt, err := lazarus.Open(lazarus.Options{Postgres: dsn, Model: model, IdleTimeout: -1})
	require.NoError(t, err)
	_, err = rt.Send(ctx, "c", "hi", user)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		evs, err := rt.History(ctx, "c", 0, 0)
		return err == nil && len(evs) >= 2
	}, wait, 5*time.Millisecond)
	require.NoError(t, rt.Close())
	_, err = rt.Store().LastSeq(ctx, "c")
	require.ErrorIs(t, err, journal.ErrClosed, "the Runtime closed the store it opened")

	rt2, err := lazarus.Open(lazarus.Options{Postgres: dsn, Model: scripted.New(scripted.Options{}), IdleTimeout: -1})
	require.NoError(t, err)
	defer func() { require.NoError(t, rt2.Close()) }()
	evs, err := rt2.History(ctx, "c", 0, 0)
	require.NoError(t, err)
	require.Equal(t, []string{"user_msg", "assistant_msg"}, types(evs))

	_, err = lazarus.Open(lazarus.Options{Postgres: dsn, Dir: t.TempDir(), Model: model})
	require.ErrorIs(t, err, journal.ErrInvalid)
}

// TestPostgresServerRestartLosesNothing: the PostgreSQL server is killed
// and restarted while conversations send: during the outage sends fail
// with errors; afterwards the runtime carries on (the pool reconnects, the
// failed activations revive); and every send acknowledged before, during
// or after the outage is in the log with its text.
func TestPostgresServerRestartLosesNothing(t *testing.T) {
	srv, err := pgtest.Start()
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	dsn := srv.NewDatabase(t)
	rt, err := lazarus.Open(lazarus.Options{Postgres: dsn, Model: scripted.New(scripted.Options{}), IdleTimeout: -1})
	require.NoError(t, err)
	defer func() { _ = rt.Close() }()

	type ack struct {
		conv, text string
		seq        uint64
	}
	var (
		mu     sync.Mutex
		acks   []ack
		failed int
	)
	counts := func() (int, int) {
		mu.Lock()
		defer mu.Unlock()
		return len(acks), failed
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Go(func() {
			conv := fmt.Sprintf("c-%d", i)
			for k := 0; ctx.Err() == nil; k++ {
				text := fmt.Sprintf("%s message %d", conv, k)
				sctx, cancel := context.WithTimeout(ctx, wait)
				seq, err := rt.Send(sctx, conv, text, user)
				cancel()
				mu.Lock()
				if err == nil {
					acks = append(acks, ack{conv, text, seq})
				} else if ctx.Err() == nil {
					failed++
				}
				mu.Unlock()
				if err != nil {
					select { // do not spin against a server that is down
					case <-ctx.Done():
					case <-time.After(10 * time.Millisecond):
					}
				}
			}
		})
	}
	require.Eventually(t, func() bool { n, _ := counts(); return n >= 30 }, 2*wait, 5*time.Millisecond, "sends before the outage")
	srv.StopServer()
	require.Eventually(t, func() bool { _, f := counts(); return f > 0 }, 2*wait, 5*time.Millisecond, "sends fail while the server is down")
	before, _ := counts()
	require.NoError(t, srv.Resume())
	require.Eventually(t, func() bool { n, _ := counts(); return n >= before+30 }, 3*wait, 5*time.Millisecond, "the runtime carries on after the restart")
	stop()
	wg.Wait()
	require.NoError(t, rt.Close())

	st, err := pgjournal.Open(context.Background(), dsn, pgjournal.Options{})
	require.NoError(t, err)
	defer st.Close()
	n, f := counts()
	t.Logf("%d acknowledged sends, %d failed sends, all checked", n, f)
	for _, a := range acks {
		evs, err := st.Events(context.Background(), a.conv, journal.EventQuery{After: a.seq - 1, Before: a.seq + 1})
		require.NoError(t, err)
		require.Len(t, evs, 1, "acknowledged send %q (seq %d) is in the log", a.text, a.seq)
		require.Equal(t, a.text, evs[0].GetUserMsg().GetContent()[0].GetText(), "seq %d of %q", a.seq, a.conv)
	}
}
