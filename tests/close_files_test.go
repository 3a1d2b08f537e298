package tests

import (
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

// checkpointsHeld is an in-memory Store whose FileCheckpoints, once armed,
// waits until released: a rewind with Files is then held between its
// durable rewind and its restore.
type checkpointsHeld struct {
	*memjournal.Store
	armed   atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (s *checkpointsHeld) FileCheckpoints(ctx context.Context, conv string, after uint64) ([]*messages.FileCheckpoint, error) {
	if s.armed.Load() {
		s.entered <- struct{}{}
		<-s.release
	}
	return s.Store.FileCheckpoints(ctx, conv, after)
}

// TestCloseDuringAFileRestoreSaysClosed: a rewind with Files whose restore
// is under way when Close is called returns an error wrapping ErrClosed
// (the promise of a call in flight at Close), so that its caller knows to
// repeat the rewind once a Runtime is open again; it returned the file
// system's "file already closed" (Close closes the files' root), which
// said nothing of the kind.
func TestCloseDuringAFileRestoreSaysClosed(t *testing.T) {
	store := &checkpointsHeld{Store: memjournal.New(memjournal.Options{}), entered: make(chan struct{}, 1), release: make(chan struct{})}
	h, root := filesHarness(t, store, nil, nil)
	ctx := ctxT(t)
	require.NoError(t, os.WriteFile(filepath.Join(root, "a.txt"), []byte("v1"), 0o600))
	h.model.Push("f", scripted.Reply("edit", writeCall(fileArgs{Path: "a.txt", Content: "v2"})), scripted.Text("done"))
	_, err := h.rt.Send(ctx, "f", "edit the file", user)
	require.NoError(t, err)
	h.awaitEvent("f", 0, isAssistantText("done"))
	require.Equal(t, "v2", readFile(t, root, "a.txt"))

	store.armed.Store(true)
	rewound := make(chan error, 1)
	go func() {
		_, err := h.rt.RewindWithReport(ctx, "f", 1, lazarus.RewindOptions{Files: true}, user)
		rewound <- err
	}()
	select {
	case <-store.entered: // the rewind is durable; its restore reads the checkpoints
	case <-ctx.Done():
		t.Fatal("the restore never started")
	}
	require.NoError(t, h.rt.Close())
	close(store.release)
	select {
	case err = <-rewound:
	case <-ctx.Done():
		t.Fatal("the rewind never returned")
	}
	require.ErrorIs(t, err, lazarus.ErrClosed)
	require.Equal(t, "v2", readFile(t, root, "a.txt"), "nothing restored after Close")
}
