package tests

import (
	"context"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/pebblejournal"
	"github.com/lazarusrt/lazarus/messages"
)

// TestWholeProcessRestartOnPebble kills a whole runtime without warning (its
// store is never closed: the new process sees only what was synced, as after
// kill -9 or a power cut) and starts a new one on what survived. Pending
// calls, deadlines and conversations are all back; a deadline that passed
// while the process was down fires once; an interrupted turn is resumed.
func TestWholeProcessRestartOnPebble(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	fs := vfs.NewCrashableMem()
	store1, err := pebblejournal.Open("db", pebblejournal.Options{FS: fs})
	require.NoError(t, err)
	h1 := newHarness(t, store1, nil)
	t.Cleanup(func() { _ = store1.Close() })
	ctx := ctxT(t)

	// "soon": a human call whose deadline passes while the process is down.
	h1.model.Push("soon", scripted.Reply("", scripted.Call("approve_refund", `{"amount":1}`)))
	// "later": a human call still pending after the restart.
	h1.model.Push("later", scripted.Reply("", scripted.Call("approve_refund", `{"amount":2}`)))
	// "midturn": the model is answering when the process dies.
	entered := h1.model.Hold("midturn")

	_, err = h1.rt.Send(ctx, "soon", "refund 1", user)
	require.NoError(t, err)
	soonID := pendingCallID(t, h1.awaitEvent("soon", 0, isSuspension))
	_, err = h1.rt.Send(ctx, "later", "refund 2", user)
	require.NoError(t, err)
	laterID := pendingCallID(t, h1.awaitEvent("later", 0, isSuspension))
	_, err = h1.rt.Send(ctx, "midturn", "what now?", user)
	require.NoError(t, err)
	recv(t, entered, "model call entered")
	// Give "later" a deadline ten hours after "soon"'s, so that the clock
	// of the restarted process can land between the two.
	soonRow, err := store1.ToolCall(ctx, soonID)
	require.NoError(t, err)
	require.NoError(t, store1.ScheduleDeadline(ctx, &messages.Deadline{
		ConversationId: "later", ToolCallId: laterID,
		At: journal.Timestamp(soonRow.GetDeadline().AsTime().Add(10 * time.Hour)),
	}))

	// The crash: only synced data survives; the old runtime never closes
	// its store before the clone is taken.
	rng := rand.New(rand.NewPCG(seed, seed))
	crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: rng.IntN(101), RNG: rng})
	h1.model.Release("midturn")

	store2, err := pebblejournal.Open("db", pebblejournal.Options{FS: crashed})
	require.NoError(t, err)
	t.Cleanup(func() { _ = store2.Close() })
	// The replies are queued before Open, which resumes "midturn" at once.
	model2 := scripted.New(scripted.Options{})
	model2.Push("midturn", scripted.Text("here is what now"))
	model2.Push("soon", scripted.Text("the approval timed out"))
	model2.Push("later", scripted.Text("approved, refunding"))
	h2 := newHarness(t, store2, func(o *lazarus.Options) { o.Model = model2 })

	// The interrupted turn is resumed by Open, with no new input.
	h2.awaitEvent("midturn", 0, isAssistantText("here is what now"))
	require.Equal(t, []string{"user_msg", "assistant_msg"}, types(h2.history("midturn")))

	// Both deadlines are rebuilt; advancing past the first fires it once.
	require.Eventually(t, func() bool { return h2.clock.Timers() >= 1 }, wait, time.Millisecond)
	h2.clock.Advance(2 * time.Hour)
	h2.awaitEvent("soon", 0, isAssistantText("the approval timed out"))
	soonTypes := strings.Join(types(h2.history("soon")), ",")
	require.Equal(t, 1, strings.Count(soonTypes, "resolution:TOOL_CALL_STATUS_EXPIRED"), soonTypes)

	// The other call is still pending and answerable.
	pending, err := store2.PendingToolCalls(ctx, "later")
	require.NoError(t, err)
	require.Len(t, pending, 1)
	require.Equal(t, laterID, pending[0].GetId())
	require.NoError(t, h2.rt.Resolve(ctx, laterID, `{"approved":true}`, user))
	h2.awaitEvent("later", 0, isAssistantText("approved, refunding"))
	requireGapFree(t, h2.history("later"))

	// Nothing fires twice: no deadline is left to arm (the fire removed
	// "soon"'s, the answer "later"'s), and advancing far past every
	// deadline changes nothing. A stray fire in flight would meet the
	// Store's resolve-if-pending: it writes no second resolution.
	var left []string
	require.NoError(t, store2.Deadlines(ctx, time.Time{}, func(d *messages.Deadline) error {
		left = append(left, d.GetToolCallId())
		return nil
	}))
	require.Empty(t, left, "no deadline is left to fire")
	h2.clock.Advance(48 * time.Hour)
	soonTypes = strings.Join(types(h2.history("soon")), ",")
	require.Equal(t, 1, strings.Count(soonTypes, "resolution:"), soonTypes)
	row, err := store2.ToolCall(ctx, soonID)
	require.NoError(t, err)
	require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_EXPIRED, row.GetStatus(), "the row keeps the one fire")
}

// crashOnAnswer is a Pebble store that takes a crash image (synced data
// only) right after the first write of an answer from outside the
// conversation (a Resolve's, an expiry's: unfenced, resolutions, no events)
// has returned: the process "dies" with the answer durable and before its
// delivery reached the conversation, so the log does not record it yet.
type crashOnAnswer struct {
	*pebblejournal.Store
	fs      *vfs.MemFS
	once    sync.Once
	crashed chan *vfs.MemFS
}

func (s *crashOnAnswer) AppendBatch(ctx context.Context, reqs []*messages.AppendRequest) []journal.AppendResult {
	res := s.Store.AppendBatch(ctx, reqs)
	for i, req := range reqs {
		if req.GetUnfenced() && len(req.GetResolutions()) > 0 && len(req.GetEvents()) == 0 && res[i].Err == nil {
			s.once.Do(func() { s.crashed <- s.fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0}) })
		}
	}
	return res
}

// TestDurableAnswerNotInTheLogIsResumedOnOpen: a human answer (Resolve) or
// an expiry that is durable in the call's row when the process dies, before
// the conversation recorded it in its log, marks the conversation ACTIVE in
// the same write, so the next process's Open resumes it with no command:
// the revival records the resolution and the tool_result from the row and
// the model answers (RELIABILITY.md, guarantee 6). Without the ACTIVE mark
// the row stays SUSPENDED, Open does not resume it, and the answer waits
// for a command that may never come.
func TestDurableAnswerNotInTheLogIsResumedOnOpen(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer func(h *harness, callID string)
		status string
	}{
		{"resolve", func(h *harness, callID string) {
			require.NoError(t, h.rt.Resolve(ctxT(t), callID, `{"approved":true}`, user))
		}, "resolution:TOOL_CALL_STATUS_RESOLVED"},
		{"expiry", func(h *harness, _ string) {
			require.Eventually(t, func() bool { return h.clock.Timers() >= 1 }, wait, time.Millisecond)
			h.clock.Advance(48 * time.Hour)
		}, "resolution:TOOL_CALL_STATUS_EXPIRED"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxT(t)
			fs := vfs.NewCrashableMem()
			inner, err := pebblejournal.Open("db", pebblejournal.Options{FS: fs})
			require.NoError(t, err)
			store1 := &crashOnAnswer{Store: inner, fs: fs, crashed: make(chan *vfs.MemFS, 1)}
			t.Cleanup(func() { _ = inner.Close() })
			h1 := newHarness(t, store1, nil)
			h1.model.Push("c", scripted.Reply("", scripted.Call("approve_refund", `{"amount":1}`)))
			h1.model.Push("c", scripted.Text("the first process's answer"))
			_, err = h1.rt.Send(ctx, "c", "refund 1", user)
			require.NoError(t, err)
			callID := pendingCallID(t, h1.awaitEvent("c", 0, isSuspension))

			tc.answer(h1, callID)
			var crashed *vfs.MemFS
			select {
			case crashed = <-store1.crashed:
			case <-ctx.Done():
				t.Fatal("the answer was never written")
			}

			store2, err := pebblejournal.Open("db", pebblejournal.Options{FS: crashed})
			require.NoError(t, err)
			t.Cleanup(func() { _ = store2.Close() })
			// What the crash left: the answer in the row, not in the log.
			evs, err := store2.Events(ctx, "c", journal.EventQuery{})
			require.NoError(t, err)
			require.Equal(t, []string{"user_msg", "assistant_msg", "tool_call:approve_refund", "suspension"}, types(evs),
				"the crash image holds the answer in the row only")
			row, err := store2.ToolCall(ctx, callID)
			require.NoError(t, err)
			require.NotEqual(t, messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING, row.GetStatus(), "the answer is durable")

			model2 := scripted.New(scripted.Options{})
			model2.Push("c", scripted.Text("after the restart"))
			h2 := newHarness(t, store2, func(o *lazarus.Options) { o.Model = model2 })
			// No command: Open's resume runs the turn the answer owes.
			h2.awaitEvent("c", 0, isAssistantText("after the restart"))
			got := h2.history("c")
			requireGapFree(t, got)
			require.Equal(t, []string{"user_msg", "assistant_msg", "tool_call:approve_refund", "suspension",
				tc.status, "tool_result:approve_refund", "assistant_msg"}, types(got))
		})
	}
}
