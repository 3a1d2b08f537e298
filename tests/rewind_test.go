package tests

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// TestRewindAndEditOnEveryStore: a rewind cancels a pending human call (its
// deadline no longer fires, a late answer is stale), survives a kill, and
// an edit lands as one write, on every adapter.
func TestRewindAndEditOnEveryStore(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), nil)
		ctx := ctxT(t)
		id := h.suspendOne("c", scripted.Text("after the rewind"), scripted.Text("after the edit"))
		// 1 user_msg, 2 assistant_msg, 3 tool_call, 4 suspension
		require.NoError(t, h.rt.Rewind(ctx, "c", 1, lazarus.RewindOptions{Reason: "changed my mind"}, user)) // 5

		require.ErrorIs(t, h.rt.Resolve(ctx, id, `{"approved":true}`, user), journal.ErrStale)
		row, err := h.rt.Store().ToolCall(ctx, id)
		require.NoError(t, err)
		require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_ERRORED, row.GetStatus())
		require.Equal(t, agent.CodeCanceled, row.GetResult().GetError().GetCode())
		require.Eventually(t, func() bool { return h.clock.Timers() == 0 }, wait, time.Millisecond,
			"the rewound call's deadline is cancelled")
		h.clock.Advance(1000 * time.Hour)

		require.True(t, h.rt.Kill("c"))
		_, err = h.rt.Send(ctx, "c", "something else", user) // 6, then 7
		require.NoError(t, err)
		h.awaitEvent("c", 5, isAssistantText("after the rewind"))
		turns := h.model.Turns("c")
		ctxEvs := turns[len(turns)-1].Context
		require.Len(t, ctxEvs, 2, "the revived working set skips the rewound span")
		require.Equal(t, "refund 900", ctxEvs[0].GetUserMsg().GetContent()[0].GetText())
		require.Equal(t, "something else", ctxEvs[1].GetUserMsg().GetContent()[0].GetText())

		seq, err := h.rt.Edit(ctx, "c", 6, "another thing", user) // 8 rewind, 9 user_msg
		require.NoError(t, err)
		require.Equal(t, uint64(9), seq)
		h.awaitEvent("c", 9, isAssistantText("after the edit"))

		evs := h.history("c")
		requireGapFree(t, evs)
		require.Equal(t, []string{
			"user_msg", "assistant_msg", "tool_call:approve_refund", "suspension",
			"rewind", "user_msg", "assistant_msg", "rewind", "user_msg", "assistant_msg",
		}, types(evs), "nothing is removed, no expiry was written")
		require.True(t, evs[7].GetTime().AsTime().Equal(evs[8].GetTime().AsTime()), "the edit is one write")

		view, err := h.rt.HistoryView(ctx, "c", lazarus.HistoryOptions{Effective: true})
		require.NoError(t, err)
		var seqs []uint64
		for _, e := range view {
			seqs = append(seqs, e.Event.GetSeq())
		}
		require.Equal(t, []uint64{1, 9, 10}, seqs)
	})
}
