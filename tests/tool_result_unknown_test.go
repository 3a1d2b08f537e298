package tests

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// resultUnknownStore reports the first write that records a server tool's
// result as journal.ErrUnknownOutcome, having committed it (landed) or
// not: a COMMIT whose reply was lost, either way.
type resultUnknownStore struct {
	journal.Store
	landed bool
	lost   atomic.Bool
}

func (s *resultUnknownStore) AppendBatch(ctx context.Context, reqs []*messages.AppendRequest) []journal.AppendResult {
	target := -1
	for i, req := range reqs {
		for _, ev := range req.GetEvents() {
			if target < 0 && ev.GetToolResult() != nil && !s.lost.Load() {
				target = i
			}
		}
	}
	if target < 0 {
		return s.Store.AppendBatch(ctx, reqs)
	}
	s.lost.Store(true)
	var out []journal.AppendResult
	if s.landed {
		out = s.Store.AppendBatch(ctx, reqs)
	} else {
		// The others of the batch commit; the result does not.
		rest := append(append([]*messages.AppendRequest{}, reqs[:target]...), reqs[target+1:]...)
		got := s.Store.AppendBatch(ctx, rest)
		out = append(append(append([]journal.AppendResult{}, got[:target]...), journal.AppendResult{}), got[target:]...)
	}
	out[target] = journal.AppendResult{Err: fmt.Errorf("test: connection lost during COMMIT: %w", journal.ErrUnknownOutcome)}
	return out
}

// TestServerResultOfUnknownOutcome: the write recording a server tool's
// result ends with journal.ErrUnknownOutcome; the activation stops, and
// the next one (an explicit wake) reads from the log whether it landed.
// Landed: the tool is not run again, and the log holds its result once.
// Not landed: the call is run again once, under the same id, and its
// result is recorded once. Either way the model is not asked again for
// the decision that made the call, and the turn then runs.
func TestServerResultOfUnknownOutcome(t *testing.T) {
	for _, landed := range []bool{true, false} {
		t.Run(fmt.Sprintf("landed=%v", landed), func(t *testing.T) {
			forEachStore(t, func(t *testing.T, kind string) {
				store := &resultUnknownStore{Store: openStore(t, kind), landed: landed}
				// NoResume: Open's resume scan, which runs in the background
				// (slowest on postgres), would otherwise wake the conversation
				// (it is ACTIVE) once its activation stopped, before the
				// test saw it stop, and run the call before the test's Wake.
				h := newHarness(t, store, func(o *lazarus.Options) { o.NoResume = true })
				ctx := ctxT(t)
				h.model.Push("c", scripted.Reply("charging", scripted.Call("charge", `{"amount":5}`)), scripted.Text("charged"))
				_, err := h.rt.Send(ctx, "c", "charge me", user)
				require.NoError(t, err)
				id := <-h.chargeStarted
				require.Eventually(t, func() bool { return store.lost.Load() && !h.rt.IsActive("c") }, wait, time.Millisecond,
					"the result's write reported unknown, and the activation stopped")

				require.NoError(t, h.rt.Wake(ctx, "c"))
				h.awaitEvent("c", 0, isAssistantText("charged"))
				want := []string{id}
				if !landed {
					want = []string{id, id}
				}
				require.Equal(t, want, h.runs.of("charge"), "run again only if its result was not durable, and under the same id")
				require.Equal(t, 2, h.model.Calls("c"), "the model was not asked again for the call")
				evs := h.history("c")
				require.Equal(t, []string{"user_msg", "assistant_msg", "tool_call:charge", "tool_result:charge", "assistant_msg"}, types(evs))
				row, err := h.rt.Store().ToolCall(ctx, id)
				require.NoError(t, err)
				require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED, row.GetStatus())
			})
		})
	}
}
