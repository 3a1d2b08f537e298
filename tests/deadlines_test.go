package tests

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// suspendOne has the model of conv ask approve_refund once and returns the
// pending call's id, once its deadline is armed.
func (h *harness) suspendOne(conv string, then ...*messages.AssistantMessage) string {
	h.t.Helper()
	h.model.Push(conv, append([]*messages.AssistantMessage{scripted.Reply("asking a human", scripted.Call("approve_refund", `{"amount":900}`))}, then...)...)
	_, err := h.rt.Send(ctxT(h.t), conv, "refund 900", user)
	require.NoError(h.t, err)
	id := pendingCallID(h.t, h.awaitEvent(conv, 0, isSuspension))
	h.awaitDeadlineArmed(id)
	return id
}

// deadlineOf returns the deadline of the call's row, as PendingCalls and
// Store().ToolCall show it (zero: none).
func (h *harness) deadlineOf(id string) time.Time {
	h.t.Helper()
	row, err := h.rt.Store().ToolCall(ctxT(h.t), id)
	require.NoError(h.t, err)
	var fromPending time.Time
	rows, _, err := h.rt.PendingCalls(ctxT(h.t), "", 0)
	require.NoError(h.t, err)
	found := false
	for _, p := range rows {
		if p.GetId() == id {
			found = true
			if p.GetDeadline() != nil {
				fromPending = p.GetDeadline().AsTime()
			}
		}
	}
	require.True(h.t, found, "the call %s is pending", id)
	if row.GetDeadline() == nil {
		require.True(h.t, fromPending.IsZero(), "PendingCalls agrees with the row")
		return time.Time{}
	}
	require.Equal(h.t, row.GetDeadline().AsTime(), fromPending, "PendingCalls agrees with the row")
	return row.GetDeadline().AsTime()
}

func isExpiredResult(ev *messages.Event) bool {
	return ev.GetToolResult().GetOutcome().GetError().GetCode() == agent.CodeExpired
}

// TestDeadlineFiresWithinMaxTimerSpanOfAClockJump: a human call's deadline
// an hour away, its conversation killed, then the wall clock steps two
// hours forward while the timers' elapsed time does not move (an NTP step,
// a resume from suspend): the call expires and the turn runs once
// actors.MaxTimerSpan has elapsed, not an hour later.
func TestDeadlineFiresWithinMaxTimerSpanOfAClockJump(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), nil)
		id := h.suspendOne("c", scripted.Text("timed out"))
		require.Equal(t, h.clock.Now().Add(time.Hour), h.deadlineOf(id))
		h.rt.Kill("c")
		h.clock.Jump(2 * time.Hour)
		h.clock.Advance(actors.MaxTimerSpan)
		h.awaitEvent("c", 0, isExpiredResult)
		h.awaitEvent("c", 0, isAssistantText("timed out"))
	})
}

// TestRescheduleExtendsThenShortens moves a deadline later (it does not fire
// at the old time, and the expiry actor's one timer is at the new time),
// then into the past (it fires at once), through the public API.
func TestRescheduleExtendsThenShortens(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), nil)
		ctx := ctxT(t)
		start := h.clock.Now()
		id := h.suspendOne("c", scripted.Text("timed out"))
		require.Equal(t, start.Add(time.Hour), h.deadlineOf(id), "the tool's Timeout")

		later := start.Add(3 * time.Hour)
		require.NoError(t, h.rt.Reschedule(ctx, id, later))
		require.Equal(t, later, h.deadlineOf(id), "the row shows the new deadline")
		h.awaitDeadlineArmed(id) // the expiry actor's only timer is for the new time

		h.clock.Advance(time.Hour)
		// Armed again every actors.MaxTimerSpan, until the new time.
		require.Eventually(t, func() bool {
			next, ok := h.clock.Next()
			return ok && next.Equal(h.armedFor(later))
		}, wait, time.Millisecond, "nothing was due at the old deadline; the new one is still armed")
		require.Equal(t, later, h.deadlineOf(id), "still pending")
		pending, err := h.store.ToolCall(ctx, id)
		require.NoError(t, err)
		require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING, pending.GetStatus(), "not expired at the old deadline")

		require.NoError(t, h.rt.Reschedule(ctx, id, h.clock.Now().Add(-time.Minute)), "a deadline in the past")
		// Due at once: the expiry actor expires it without waiting for a
		// tick of the clock.
		h.awaitEvent("c", 0, isExpiredResult)
		h.awaitEvent("c", 0, isAssistantText("timed out"))
		row, err := h.store.ToolCall(ctx, id)
		require.NoError(t, err)
		require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_EXPIRED, row.GetStatus())
		require.ErrorIs(t, h.rt.Reschedule(ctx, id, later), journal.ErrStale, "an expired call")
	})
}

// TestRescheduleZeroRemovesDeadline: a call without a deadline never
// expires, and can still be answered.
func TestRescheduleZeroRemovesDeadline(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), nil)
		ctx := ctxT(t)
		id := h.suspendOne("c", scripted.Text("approved"))
		require.NoError(t, h.rt.Reschedule(ctx, id, time.Time{}))
		require.True(t, h.deadlineOf(id).IsZero(), "no deadline in the row")
		require.Eventually(t, func() bool { return h.clock.Timers() == 0 }, wait, time.Millisecond, "the timer is cancelled")
		h.clock.Advance(1000 * time.Hour)
		require.True(t, h.deadlineOf(id).IsZero(), "still pending after any time")

		require.NoError(t, h.rt.Resolve(ctx, id, `{"approved":true}`, user))
		h.awaitEvent("c", 0, isAssistantText("approved"))
		require.ErrorIs(t, h.rt.Reschedule(ctx, id, h.clock.Now().Add(time.Hour)), journal.ErrStale, "an answered call")
	})
}

// TestRescheduleRefusals: unknown, server, expired and ill-formed
// requests are refused with the documented sentinels, and write nothing.
func TestRescheduleRefusals(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), nil)
		ctx := ctxT(t)
		h.model.Push("s",
			scripted.Reply("looking", scripted.Call("lookup_order", `{"id":42}`)),
			scripted.Text("found"))
		_, err := h.rt.Send(ctx, "s", "order?", user)
		require.NoError(t, err)
		h.awaitEvent("s", 0, isAssistantText("found"))
		server := h.runs.of("lookup_order")
		require.Len(t, server, 1)

		id := h.suspendOne("c")
		before := h.deadlineOf(id)
		cases := []struct {
			name string
			id   string
			at   time.Time
			want error
		}{
			{"unknown call", "tc-nope", before, journal.ErrStale},
			{"server call", server[0], before, journal.ErrInvalid},
			{"empty id", "", before, journal.ErrInvalid},
			{"time out of range", id, time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), journal.ErrInvalid},
		}
		for _, tc := range cases {
			err := h.rt.Reschedule(ctx, tc.id, tc.at.Add(time.Hour))
			require.ErrorIs(t, err, tc.want, tc.name)
			require.Equal(t, before, h.deadlineOf(id), "%s: nothing written", tc.name)
		}

		// Once the call expired: too late.
		h.clock.Advance(time.Hour)
		require.Eventually(t, func() bool {
			row, err := h.store.ToolCall(ctx, id)
			return err == nil && row.GetStatus() == messages.ToolCallStatus_TOOL_CALL_STATUS_EXPIRED
		}, wait, time.Millisecond, "the call expires")
		require.ErrorIs(t, h.rt.Reschedule(ctx, id, h.clock.Now().Add(time.Hour)), journal.ErrStale, "an expired call")

		require.NoError(t, h.rt.Close())
		require.ErrorIs(t, h.rt.Reschedule(ctx, id, time.Time{}), lazarus.ErrClosed)
	})
}

// TestRescheduleSurvivesRestart: a moved deadline is what a new Runtime on
// the same store arms.
func TestRescheduleSurvivesRestart(t *testing.T) {
	for _, kind := range []string{"pebble", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			store := openStore(t, kind)
			h := newHarness(t, store, nil)
			ctx := ctxT(t)
			id := h.suspendOne("c", scripted.Text("timed out"))
			later := h.clock.Now().Add(5 * time.Hour)
			require.NoError(t, h.rt.Reschedule(ctx, id, later))
			require.NoError(t, h.rt.Close())

			h2 := newHarness(t, store, func(o *lazarus.Options) { o.Model = h.model })
			h2.clock.Advance(h.clock.Now().Sub(h2.clock.Now()))
			h2.awaitDeadlineArmed(id)
			h2.clock.Advance(time.Hour) // past the old deadline
			require.Eventually(t, func() bool {
				next, ok := h2.clock.Next()
				return ok && next.Equal(h2.armedFor(later))
			}, wait, time.Millisecond, "the new runtime armed the moved deadline, not the old one")
			row, err := h2.store.ToolCall(ctx, id)
			require.NoError(t, err)
			require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING, row.GetStatus(), "not expired at the old deadline")
			h2.clock.Advance(4 * time.Hour)
			h2.awaitEvent("c", 0, isAssistantText("timed out"))
		})
	}
}

// TestToolDeadlineFromArguments: a human tool's Deadline sets each call's
// deadline from its arguments; a zero result or a panic falls back to its
// Timeout; a time in the past expires the call at once.
func TestToolDeadlineFromArguments(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		book := agent.Tool{
			Name: "book_meeting", Description: "a human books a slot", Executor: messages.Executor_EXECUTOR_HUMAN,
			Timeout: time.Hour,
			Deadline: func(args string, _ time.Time) time.Time {
				var a struct{ Until string }
				if err := json.Unmarshal([]byte(args), &a); err != nil || a.Until == "" {
					return time.Time{}
				}
				if a.Until == "panic" {
					panic("a bug in the application's Deadline")
				}
				at, err := time.Parse(time.RFC3339, a.Until)
				if err != nil {
					return time.Time{}
				}
				return at
			},
		}
		h := newHarness(t, openStore(t, kind), func(o *lazarus.Options) { o.Tools = append(o.Tools, book) })
		ctx := ctxT(t)
		start := h.clock.Now()
		ask := func(conv, args string) string {
			h.model.Push(conv, scripted.Reply("booking", scripted.Call("book_meeting", args)), scripted.Text("expired: "+conv))
			_, err := h.rt.Send(ctx, conv, "book it", user)
			require.NoError(t, err)
			return pendingCallID(t, h.awaitEvent(conv, 0, isSuspension))
		}

		fromArgs := ask("args", `{"until":"`+start.Add(6*time.Hour).Format(time.RFC3339)+`"}`)
		require.Equal(t, start.Add(6*time.Hour), h.deadlineOf(fromArgs), "the deadline the arguments name")
		fallback := ask("none", `{}`)
		require.Equal(t, start.Add(time.Hour), h.deadlineOf(fallback), "zero: the tool's Timeout")
		panicked := ask("panic", `{"until":"panic"}`)
		require.Equal(t, start.Add(time.Hour), h.deadlineOf(panicked), "a panic: the tool's Timeout")

		ask("past", `{"until":"`+start.Add(-time.Minute).Format(time.RFC3339)+`"}`)
		h.awaitEvent("past", 0, isAssistantText("expired: past")) // at once, the clock untouched

		h.clock.Advance(time.Hour)
		h.awaitEvent("none", 0, isAssistantText("expired: none"))
		h.awaitEvent("panic", 0, isAssistantText("expired: panic"))
		h.awaitDeadlineArmed(fromArgs) // still pending, armed at its own deadline
		h.clock.Advance(5 * time.Hour)
		h.awaitEvent("args", 0, isAssistantText("expired: args"))
	})
}

// TestRescheduleRacesResolve: a Reschedule racing the answer of the same
// call never revives it: the answer wins, the Reschedule either landed
// before it or gets ErrStale, and no deadline stays armed or stored.
func TestRescheduleRacesResolve(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), nil)
		ctx := ctxT(t)
		id := h.suspendOne("c", scripted.Text("approved"))
		start := make(chan struct{})
		resolved, rescheduled := make(chan error, 1), make(chan error, 1)
		go func() { <-start; resolved <- h.rt.Resolve(ctx, id, `{"approved":true}`, user) }()
		go func() { <-start; rescheduled <- h.rt.Reschedule(ctx, id, h.clock.Now().Add(5*time.Hour)) }()
		close(start)
		require.NoError(t, recv(t, resolved, "Resolve return"), "a reschedule never makes an answer stale")
		if err := recv(t, rescheduled, "Reschedule return"); err != nil {
			require.ErrorIs(t, err, journal.ErrStale, "the Reschedule came after the answer")
		}
		h.awaitEvent("c", 0, isAssistantText("approved"))
		row, err := h.store.ToolCall(ctx, id)
		require.NoError(t, err)
		require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED, row.GetStatus())
		require.NoError(t, h.store.Deadlines(ctx, time.Time{}, func(d *messages.Deadline) error {
			t.Errorf("a deadline outlived its call: %v", d)
			return nil
		}))
		require.Eventually(t, func() bool { return h.clock.Timers() == 0 }, wait, time.Millisecond, "no timer armed")
	})
}
