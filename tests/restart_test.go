package tests

import (
	"math/rand/v2"
	"strings"
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
	<-entered
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
