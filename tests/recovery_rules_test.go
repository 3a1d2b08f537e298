package tests

import (
	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/actors/actorstest"

	"strings"
	"time"

	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// count returns how many entries of list equal s.
func count(list []string, s string) int {
	n := 0
	for _, x := range list {
		if x == s {
			n++
		}
	}
	return n
}

// TestRevivalOfAServerCallBesideAHumanCall: one answer asks for a server
// tool and a human at once, and the actor is killed while the server tool
// runs. Revival re-dispatches the server call under its id, keeps the human
// call pending (the model is not called: it still owes that result), and
// once the human answers the model sees both results, once each.
func TestRevivalOfAServerCallBesideAHumanCall(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), nil)
		h.chargeGate = make(chan struct{})
		ctx := ctxT(t)
		h.model.Push("c",
			scripted.Reply("both", scripted.Call("charge", `{"amount":5}`), scripted.Call("approve_refund", `{"amount":5}`)),
			scripted.Text("all done"))
		_, err := h.rt.Send(ctx, "c", "charge and ask", user)
		require.NoError(t, err)
		first := recv(t, h.chargeStarted, "charge started")
		require.True(t, h.rt.Kill("c"), "killed while the server tool runs")

		close(h.chargeGate)
		require.NoError(t, h.rt.Wake(ctx, "c"))
		h.awaitEvent("c", 0, func(ev *messages.Event) bool { return ev.GetToolResult().GetName() == "charge" })
		susp := h.awaitEvent("c", 0, isSuspension)
		human := pendingCallID(t, susp)
		require.Equal(t, []string{first, first}, h.runs.of("charge"), "re-dispatched under the same id")
		require.Equal(t, 1, h.model.Calls("c"), "the model is not called while the human call is pending")
		row, err := h.store.ToolCall(ctx, human)
		require.NoError(t, err)
		require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING, row.GetStatus())

		// Killed again while awaiting the human: nothing is re-run.
		require.True(t, h.rt.Kill("c"))
		require.NoError(t, h.rt.Wake(ctx, "c"))
		require.NoError(t, h.rt.Resolve(ctx, human, `{"approved":true}`, user))
		h.awaitEvent("c", 0, isAssistantText("all done"))
		require.Len(t, h.runs.of("charge"), 2)
		require.Equal(t, 2, h.model.Calls("c"))
		last := h.model.Turns("c")[1]
		require.Len(t, toolResults(last, first), 1)
		require.Len(t, toolResults(last, human), 1)
		ts := types(h.history("c"))
		requireGapFree(t, h.history("c"))
		require.Equal(t, 1, count(ts, "tool_result:charge"), "%v", ts)
		require.Equal(t, 1, count(ts, "tool_result:approve_refund"), "%v", ts)
		require.Equal(t, 1, count(ts, "suspension"), "%v", ts)
	})
}

// TestRevivalRedispatchesOnlyTheServerCallWithoutAResult: of two server
// calls of one answer, the one whose result is durable is not run again;
// only the other is re-dispatched, under its id.
func TestRevivalRedispatchesOnlyTheServerCallWithoutAResult(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), nil)
		h.chargeGate = make(chan struct{})
		ctx := ctxT(t)
		h.model.Push("c",
			scripted.Reply("", scripted.Call("lookup_order", `{"id":1}`), scripted.Call("charge", `{"amount":5}`)),
			scripted.Text("done"))
		_, err := h.rt.Send(ctx, "c", "go", user)
		require.NoError(t, err)
		charge := recv(t, h.chargeStarted, "charge started")
		h.awaitEvent("c", 0, func(ev *messages.Event) bool { return ev.GetToolResult().GetName() == "lookup_order" })
		require.True(t, h.rt.Kill("c"))
		close(h.chargeGate)
		require.NoError(t, h.rt.Wake(ctx, "c"))
		h.awaitEvent("c", 0, isAssistantText("done"))
		require.Len(t, h.runs.of("lookup_order"), 1, "a call with a durable result is not run again")
		require.Equal(t, []string{charge, charge}, h.runs.of("charge"))
		require.Equal(t, 2, h.model.Calls("c"))
		ts := types(h.history("c"))
		require.Equal(t, 1, count(ts, "tool_result:lookup_order"), "%v", ts)
		require.Equal(t, 1, count(ts, "tool_result:charge"), "%v", ts)
	})
}

// TestRevivalAfterAnAnswerRerunsTheModelOnce: killed while the model is
// called after a human answer (the log ends in the answer's tool_result),
// the revived actor calls the model again once, and the answer is recorded
// once.
func TestRevivalAfterAnAnswerRerunsTheModelOnce(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), nil)
		ctx := ctxT(t)
		h.model.Push("c", scripted.Reply("", scripted.Call("approve_refund", `{"amount":5}`)), scripted.Text("approved"))
		_, err := h.rt.Send(ctx, "c", "refund", user)
		require.NoError(t, err)
		id := pendingCallID(t, h.awaitEvent("c", 0, isSuspension))
		entered := h.model.Hold("c")
		require.NoError(t, h.rt.Resolve(ctx, id, `{"ok":true}`, user))
		recv(t, entered, "model call entered")
		require.True(t, h.rt.Kill("c"))
		require.NoError(t, h.rt.Wake(ctx, "c"))
		h.awaitEvent("c", 0, isAssistantText("approved"))
		require.Equal(t, 3, h.model.Calls("c"))
		ts := types(h.history("c"))
		require.Equal(t, []string{
			"user_msg", "assistant_msg", "tool_call:approve_refund", "suspension",
			"resolution:TOOL_CALL_STATUS_RESOLVED", "tool_result:approve_refund", "assistant_msg",
		}, ts)
		require.ErrorIs(t, h.rt.Resolve(ctx, id, `{"ok":true}`, user), journal.ErrStale, "a resubmitted answer")
	})
}

// TestResolveRefusesServerCallsAndBadIDs: Resolve and Reject answer human
// calls only: a server call (the runtime runs it) and an id the layout
// cannot hold are bad input, and nothing changes.
func TestResolveRefusesServerCallsAndBadIDs(t *testing.T) {
	h := newHarness(t, openStore(t, "memory"), nil)
	h.chargeGate = make(chan struct{})
	ctx := ctxT(t)
	h.model.Push("c", scripted.Reply("", scripted.Call("charge", `{"amount":5}`)), scripted.Text("charged"))
	_, err := h.rt.Send(ctx, "c", "go", user)
	require.NoError(t, err)
	id := recv(t, h.chargeStarted, "charge started")
	require.ErrorIs(t, h.rt.Resolve(ctx, id, `{"fake":true}`, user), journal.ErrInvalid)
	require.ErrorIs(t, h.rt.Reject(ctx, id, "no", user), journal.ErrInvalid)
	row, err := h.store.ToolCall(ctx, id)
	require.NoError(t, err)
	require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING, row.GetStatus(), "the running call is untouched")
	close(h.chargeGate)
	h.awaitEvent("c", 0, isAssistantText("charged"))
	ts := types(h.history("c"))
	require.NotContains(t, ts, "resolution:TOOL_CALL_STATUS_RESOLVED")
	require.True(t, slices.Equal([]string{"user_msg", "assistant_msg", "tool_call:charge", "tool_result:charge", "assistant_msg"}, ts), "%v", ts)

	for _, bad := range []string{"", "bad\xff", string(make([]byte, journal.MaxIDBytes+1))} {
		require.ErrorIs(t, h.rt.Resolve(ctx, bad, `{}`, user), journal.ErrInvalid, "id %q", bad)
		require.ErrorIs(t, h.rt.Reject(ctx, bad, "no", user), journal.ErrInvalid, "id %q", bad)
	}
}

// TestTwoHumanCallsExpireWhileDeadThenOneTurn: an answer asks two humans;
// the actor is killed; both deadlines pass in one clock step. Each call
// expires once, and the model is called once with both expired results.
func TestTwoHumanCallsExpireWhileDeadThenOneTurn(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), nil)
		ctx := ctxT(t)
		h.model.Push("c",
			scripted.Reply("", scripted.Call("approve_refund", `{"amount":1}`), scripted.Call("approve_refund", `{"amount":2}`)),
			scripted.Text("nobody answered"))
		_, err := h.rt.Send(ctx, "c", "ask two", user)
		require.NoError(t, err)
		susp := h.awaitEvent("c", 0, isSuspension)
		var ids []string
		for _, p := range susp.GetSuspension().GetPending() {
			ids = append(ids, p.GetToolCallId())
		}
		require.Len(t, ids, 2)
		require.True(t, h.rt.Kill("c"))
		for _, id := range ids {
			h.awaitDeadlineArmed(id)
		}
		h.clock.Advance(2 * time.Hour)
		h.awaitEvent("c", 0, isAssistantText("nobody answered"))
		require.Equal(t, 2, h.model.Calls("c"), "one turn for both expiries")
		last := h.model.Turns("c")[1]
		for _, id := range ids {
			got := toolResults(last, id)
			require.Len(t, got, 1)
			require.Equal(t, "expired", got[0].GetError().GetCode())
			require.ErrorIs(t, h.rt.Resolve(ctx, id, `{}`, user), journal.ErrStale)
		}
		ts := types(h.history("c"))
		require.Equal(t, 2, count(ts, "resolution:TOOL_CALL_STATUS_EXPIRED"), "%v", ts)
		require.Equal(t, 2, count(ts, "tool_result:approve_refund"), "%v", ts)
		require.Equal(t, 1, count(ts, "user_msg"))
		require.Eventually(t, func() bool { return h.clock.Timers() == 0 }, wait, time.Millisecond)
	})
}

// TestEntriesRefuseBadConversationIDs: every entry that takes a
// conversation id refuses one the layout cannot hold with ErrInvalid, and
// Kill reports it was not live; none of them panics or writes.
func TestEntriesRefuseBadConversationIDs(t *testing.T) {
	h := newHarness(t, openStore(t, "memory"), nil)
	ctx := ctxT(t)
	for _, bad := range []string{"", "bad\xff", strings.Repeat("x", journal.MaxIDBytes+1)} {
		_, err := h.rt.History(ctx, bad, 0, 0)
		require.ErrorIs(t, err, journal.ErrInvalid, "history %q", bad)
		_, err = h.rt.Subscribe(ctx, bad, 0)
		require.ErrorIs(t, err, journal.ErrInvalid, "subscribe %q", bad)
		require.ErrorIs(t, h.rt.Wake(ctx, bad), journal.ErrInvalid, "wake %q", bad)
		require.False(t, h.rt.Kill(bad))
		require.ErrorIs(t, h.rt.Reschedule(ctx, bad, time.Time{}), journal.ErrInvalid, "reschedule %q", bad)
	}
	_, err := h.rt.History(ctx, "c", 0, -1)
	require.ErrorIs(t, err, journal.ErrInvalid)
	convs, _, err := h.store.ListConversations(ctx, "", 10)
	require.NoError(t, err)
	require.Empty(t, convs, "nothing written")
}

// TestDeadlinePassedWhileClosedFiresOnceOnOpen: a Runtime on a directory
// is closed with a human call pending and another pending forever; the
// next Runtime on the directory opens with its clock past the first
// deadline: the call expires once, with no command, and the model runs its
// turn; the other call is still answerable, and a third Runtime fires
// nothing again.
func TestDeadlinePassedWhileClosedFiresOnceOnOpen(t *testing.T) {
	dir := t.TempDir()
	start := time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)
	open := func(clock *actorstest.ManualClock, model *scripted.Model) *lazarus.Runtime {
		h := &harness{t: t, runs: &toolRuns{}}
		rt, err := lazarus.Open(lazarus.Options{Dir: dir, Model: model, Tools: h.tools(), Clock: clock, IdleTimeout: -1})
		require.NoError(t, err)
		return rt
	}
	ctx := ctxT(t)
	m1 := scripted.New(scripted.Options{})
	m1.Push("c", scripted.Reply("", scripted.Call("approve_refund", `{"amount":1}`)))
	rt1 := open(actorstest.NewManualClock(start), m1)
	sub, err := rt1.Subscribe(ctx, "c", 0)
	require.NoError(t, err)
	_, err = rt1.Send(ctx, "c", "refund", user)
	require.NoError(t, err)
	var id string
	for u := range sub {
		if u.Event.GetSuspension() != nil {
			id = u.Event.GetSuspension().GetPending()[0].GetToolCallId()
			break
		}
	}
	require.NotEmpty(t, id)
	require.NoError(t, rt1.Close())

	m2 := scripted.New(scripted.Options{})
	m2.Push("c", scripted.Text("it expired"))
	rt2 := open(actorstest.NewManualClock(start.Add(2*time.Hour)), m2)
	require.NoError(t, m2.WaitCalls(ctx, "c", 1), "the expiry runs the turn with no command")
	require.Eventually(t, func() bool {
		evs, err := rt2.History(ctx, "c", 0, 0)
		return err == nil && len(evs) > 0 && evs[len(evs)-1].GetAssistantMsg() != nil
	}, wait, time.Millisecond)
	require.ErrorIs(t, rt2.Resolve(ctx, id, `{}`, user), journal.ErrStale)
	require.NoError(t, rt2.Close())

	m3 := scripted.New(scripted.Options{})
	rt3 := open(actorstest.NewManualClock(start.Add(4*time.Hour)), m3)
	evs, err := rt3.History(ctx, "c", 0, 0)
	require.NoError(t, err)
	require.Equal(t, []string{
		"user_msg", "assistant_msg", "tool_call:approve_refund", "suspension",
		"resolution:TOOL_CALL_STATUS_EXPIRED", "tool_result:approve_refund", "assistant_msg",
	}, types(evs))
	require.NoError(t, rt3.Close())
	require.Zero(t, m3.Calls("c"), "nothing is owed after the restart")
}

// TestRevivalOfAServerCallWithAMessageAfterIt: a message sent while a
// server tool runs is durable after the call; a kill then leaves a log
// whose open server call is not its last event. Revival still
// re-dispatches the call under its id (the message does not make the model
// decide again), and the model is called once, with the result and the
// message.
func TestRevivalOfAServerCallWithAMessageAfterIt(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), nil)
		h.chargeGate = make(chan struct{})
		ctx := ctxT(t)
		h.model.Push("c", scripted.Reply("", scripted.Call("charge", `{"amount":5}`)), scripted.Text("final"))
		_, err := h.rt.Send(ctx, "c", "charge", user)
		require.NoError(t, err)
		id := recv(t, h.chargeStarted, "charge started")
		_, err = h.rt.Send(ctx, "c", "also this", user)
		require.NoError(t, err)
		require.Equal(t, []string{"user_msg", "assistant_msg", "tool_call:charge", "user_msg"}, types(h.history("c")))
		require.True(t, h.rt.Kill("c"))
		close(h.chargeGate)
		require.NoError(t, h.rt.Wake(ctx, "c"))
		h.awaitEvent("c", 0, isAssistantText("final"))
		require.Equal(t, []string{id, id}, h.runs.of("charge"), "re-dispatched under the same id")
		require.Equal(t, 2, h.model.Calls("c"), "one model call after the result")
		require.Equal(t, []string{"user_msg", "assistant_msg", "tool_call:charge", "user_msg", "tool_result:charge", "assistant_msg"},
			types(h.history("c")))
		last := h.model.Turns("c")[1]
		require.Len(t, toolResults(last, id), 1)
	})
}
