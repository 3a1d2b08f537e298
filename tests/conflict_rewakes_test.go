package tests

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// conflictStore refuses the first writes (fail of them) that carry an
// event match selects with journal.ErrConflict, writing none of that
// request: a row another writer keeps winning, or one damaged so that the
// fence never holds.
type conflictStore struct {
	journal.Store
	match func(*messages.Event) bool
	fail  int32
	lost  atomic.Int32 // writes refused so far
}

func (s *conflictStore) AppendBatch(ctx context.Context, reqs []*messages.AppendRequest) []journal.AppendResult {
	target := -1
	for i, req := range reqs {
		for _, ev := range req.GetEvents() {
			if target < 0 && s.match(ev) && s.lost.Load() < s.fail {
				target = i
			}
		}
	}
	if target < 0 {
		return s.Store.AppendBatch(ctx, reqs)
	}
	s.lost.Add(1)
	rest := append(append([]*messages.AppendRequest{}, reqs[:target]...), reqs[target+1:]...)
	got := s.Store.AppendBatch(ctx, rest)
	out := append(append(append([]journal.AppendResult{}, got[:target]...), journal.AppendResult{}), got[target:]...)
	out[target] = journal.AppendResult{Err: fmt.Errorf("test: expected last seq moved: %w", journal.ErrConflict)}
	return out
}

// TestConflictsInARowStopTheRewakes: a Store that refuses every answer's
// write with journal.ErrConflict (another writer that keeps winning, a
// damaged row) does not have the conversation revived and its model called
// for ever: the first activation and three re-wakes call the model (four
// calls), the next re-wake is not sent (one warning says so), and the
// conversation is left stopped. Its next command runs the turn once the
// Store takes the write. (The re-wakes were unbounded: the model was
// called again for every conflict.)
func TestConflictsInARowStopTheRewakes(t *testing.T) {
	store := &conflictStore{Store: openStore(t, "memory"), match: isAnswer, fail: 4}
	warned := &warnSignal{prefix: "writes fenced off in a row", seen: make(chan struct{})}
	h := newHarness(t, store, func(o *lazarus.Options) {
		o.NoResume = true
		o.Logger = slog.New(warned)
	})
	ctx := ctxT(t)
	h.model.Push("c", scripted.Text("a1"), scripted.Text("a2"), scripted.Text("a3"), scripted.Text("a4"), scripted.Text("a5"), scripted.Text("a6"))
	_, err := h.rt.Send(ctx, "c", "hello", user)
	require.NoError(t, err)

	select {
	case <-warned.seen:
	case <-ctx.Done():
		t.Fatalf("no warning that the re-wakes stopped (model calls: %d, conflicts: %d, log: %v)", h.model.Calls("c"), store.lost.Load(), types(h.history("c")))
	}
	require.Equal(t, int32(4), store.lost.Load())
	require.Equal(t, 4, h.model.Calls("c"), "the first activation and three re-wakes called the model")
	require.Eventually(t, func() bool { return !h.rt.IsActive("c") }, wait, time.Millisecond, "the last activation stopped")
	require.Equal(t, 4, h.model.Calls("c"), "no re-wake after the warning")
	require.Equal(t, []string{"user_msg"}, types(h.history("c")))

	_, err = h.rt.Send(ctx, "c", "again", user)
	require.NoError(t, err)
	h.awaitEvent("c", 0, isAssistantText("a5"))
	require.Equal(t, []string{"user_msg", "user_msg", "assistant_msg"}, types(h.history("c")))
}
