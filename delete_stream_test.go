package lazarus_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/journal"
)

// TestDeleteEndsAStreamWithoutRestart: a delete of a conversation whose
// model call is streaming to a subscriber ends the subscription with
// ErrDeleted, and no Restart comes before that end: the end itself voids
// the deltas.
func TestDeleteEndsAStreamWithoutRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	model := &stallingModel{streamed: make(chan struct{})}
	rt, err := lazarus.Open(lazarus.Options{Model: model, IdleTimeout: -1})
	require.NoError(t, err)
	defer func() { require.NoError(t, rt.Close()) }()
	updates, err := rt.Subscribe(ctx, "c", 0)
	require.NoError(t, err)
	_, err = rt.Send(ctx, "c", "one", user)
	require.NoError(t, err)
	next := func() (lazarus.Update, bool) {
		t.Helper()
		select {
		case u, ok := <-updates:
			return u, ok
		case <-ctx.Done():
			t.Fatal("no update")
			return lazarus.Update{}, false
		}
	}
	for u, ok := next(); u.Delta != "partial"; u, ok = next() {
		require.True(t, ok, "the subscription ended before the delta")
	}
	require.NoError(t, rt.Delete(ctx, "c"))
	var last lazarus.Update
	for u, ok := next(); ok; u, ok = next() {
		require.False(t, u.Restart, "no Restart before the delete's end: %+v", u)
		last = u
	}
	require.ErrorIs(t, last.Err, journal.ErrDeleted, "the subscription ends with the delete")
}
