package tests

import (
	"time"

	"testing"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
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
