package tests

// Black-box tests of file checkpoints, schedules, settings and named
// agents, written from the package documentation (README, godoc): the
// combinations and boundaries the other tests leave out.

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/actors/actorstest"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// newHarnessAt is newHarness on a manual clock that starts at start.
func newHarnessAt(t *testing.T, store journal.Store, start time.Time, mod func(*lazarus.Options)) *harness {
	t.Helper()
	clock := actorstest.NewManualClock(start)
	h := newHarness(t, store, func(o *lazarus.Options) {
		o.Clock = clock
		if mod != nil {
			mod(o)
		}
	})
	h.clock = clock
	return h
}

// advanceTo waits until the expiry actor armed a timer for at (capped at
// actors.MaxTimerSpan from now), then moves the clock to at.
func (h *harness) advanceTo(at time.Time) {
	h.t.Helper()
	want := h.armedFor(at)
	require.Eventually(h.t, func() bool { return slices.ContainsFunc(h.clock.Dues(), want.Equal) },
		wait, time.Millisecond, "no timer armed for %v (timers %v)", at, h.clock.Dues())
	h.clock.Advance(at.Sub(h.clock.Now()))
}

// wakeMessages returns the user messages that scheduled wakes wrote.
func (h *harness) wakeMessages(conv string) []*messages.Event {
	h.t.Helper()
	return h.wakeMessagesOf(h.t, conv)
}

// wakeMessagesOf is wakeMessages failing t rather than the harness's test.
func (h *harness) wakeMessagesOf(t testingT, conv string) []*messages.Event {
	t.Helper()
	var out []*messages.Event
	for _, ev := range h.historyOf(t, conv) {
		if ev.GetUserMsg() != nil && strings.HasPrefix(ev.GetRequestId(), "schedule/") {
			out = append(out, ev)
		}
	}
	return out
}

func (h *harness) wakeTexts(conv string) []string {
	h.t.Helper()
	return h.wakeTextsOf(h.t, conv)
}

// wakeTextsOf is wakeTexts failing t rather than the harness's test.
func (h *harness) wakeTextsOf(t testingT, conv string) []string {
	t.Helper()
	var out []string
	for _, ev := range h.wakeMessagesOf(t, conv) {
		out = append(out, ev.GetUserMsg().GetContent()[0].GetText())
	}
	return out
}

// awaitNext waits until schedule id of conv names next as its next
// occurrence.
func (h *harness) awaitNext(conv, id string, next time.Time) {
	h.t.Helper()
	require.EventuallyWithT(h.t, func(c *assert.CollectT) {
		all, err := h.rt.Schedules(ctxT(h.t), conv)
		require.NoError(c, err)
		for _, sc := range all {
			if sc.GetId() == id {
				assert.True(c, sc.GetNext().AsTime().Equal(next), "next %v", sc.GetNext().AsTime())
				return
			}
		}
		assert.Fail(c, "no such schedule")
	}, wait, time.Millisecond, "schedule %q never moved to %v", id, next)
}

// countText counts the user messages of a turn's context whose text is text.
func countText(turn agent.Turn, text string) int {
	n := 0
	for _, ev := range turn.Context {
		for _, p := range ev.GetUserMsg().GetContent() {
			if p.GetText() == text {
				n++
			}
		}
	}
	return n
}

// TestBBScheduleFiresWhileTheActorIsDead: the conversation's actor is
// killed before the occurrence; the occurrence revives it, its turn sees
// the message once, and a later kill and revival neither fire it again nor
// run its turn again.
func TestBBScheduleFiresWhileTheActorIsDead(t *testing.T) {
	h := newHarness(t, openStore(t, "memory"), nil)
	ctx := ctxT(t)
	_, err := h.rt.SendAndWait(ctx, "s", "hi", user)
	require.NoError(t, err)
	sc, err := h.rt.Schedule(ctx, "s", lazarus.ScheduleSpec{After: time.Minute, Text: "wake up"}, user)
	require.NoError(t, err)
	require.True(t, h.rt.Kill("s"))
	require.False(t, h.rt.IsActive("s"))

	h.advanceTo(sc.GetNext().AsTime())
	require.NoError(t, h.model.WaitCalls(ctx, "s", 2), "the occurrence revives the conversation and runs its turn")
	turns := h.model.Turns("s")
	require.Equal(t, 1, countText(turns[1], "wake up"), "the turn sees the wake once")
	wakeSeq := h.wakeMessages("s")[0].GetSeq()
	h.awaitEvent("s", wakeSeq, isAssistantText(scripted.DefaultReply))

	require.True(t, h.rt.Kill("s"))
	require.NoError(t, h.rt.Wake(ctx, "s"))
	h.clock.Advance(time.Hour) // past any re-hand of the occurrence
	require.NoError(t, h.rt.Wake(ctx, "s"))
	_, err = h.rt.SendAndWait(ctx, "s", "anything else?", user)
	require.NoError(t, err)
	require.Equal(t, 3, h.model.Calls("s"), "the wake's turn ran once, then the send's")
	require.Equal(t, []string{"wake up"}, h.wakeTexts("s"))
	last := h.model.Turns("s")[2]
	require.Equal(t, 1, countText(last, "wake up"), "the revived context holds the wake once")
	listed, err := h.rt.Schedules(ctx, "s")
	require.NoError(t, err)
	require.Empty(t, listed, "the one-shot is gone")
}

// TestBBScheduleReplacedByIDFiresOnlyAsReplaced: a Schedule with the id of
// an existing schedule of the conversation replaces it: the old time and
// text never fire, the new ones do. Ids are per conversation: another
// conversation's schedule of the same id is its own, which neither replaces
// the first nor is replaced by it, and each fires as its own. A cancelled
// schedule never fires, and cancelling it again, or from another
// conversation, is ErrNoSchedule.
func TestBBScheduleReplacedByIDFiresOnlyAsReplaced(t *testing.T) {
	h := newHarness(t, openStore(t, "memory"), nil)
	ctx := ctxT(t)
	start := h.clock.Now()
	for _, c := range []string{"a", "b"} {
		_, err := h.rt.SendAndWait(ctx, c, "hi", user)
		require.NoError(t, err)
	}
	_, err := h.rt.Schedule(ctx, "a", lazarus.ScheduleSpec{ID: "daily", After: time.Minute, Text: "old"}, user)
	require.NoError(t, err)
	sc, err := h.rt.Schedule(ctx, "a", lazarus.ScheduleSpec{ID: "daily", After: 5 * time.Minute, Text: "new"}, user)
	require.NoError(t, err)
	require.Equal(t, "daily", sc.GetId())
	listed, err := h.rt.Schedules(ctx, "a")
	require.NoError(t, err)
	require.Len(t, listed, 1, "replaced, not added")
	require.True(t, listed[0].GetNext().AsTime().Equal(start.Add(5*time.Minute)))

	// Schedule ids are per conversation: b's "daily" is b's own, and a's
	// stays as it is.
	bs, err := h.rt.Schedule(ctx, "b", lazarus.ScheduleSpec{ID: "daily", After: 2 * time.Minute, Text: "b's"}, user)
	require.NoError(t, err, "the id of another conversation's schedule")
	require.Equal(t, "b", bs.GetConversationId())
	listed, err = h.rt.Schedules(ctx, "a")
	require.NoError(t, err)
	require.Len(t, listed, 1)
	require.True(t, listed[0].GetNext().AsTime().Equal(start.Add(5*time.Minute)), "b's schedule does not replace a's")
	listed, err = h.rt.Schedules(ctx, "b")
	require.NoError(t, err)
	require.Len(t, listed, 1)
	require.True(t, listed[0].GetNext().AsTime().Equal(start.Add(2*time.Minute)))

	// Cancel one of b's; a's are untouched.
	_, err = h.rt.Schedule(ctx, "b", lazarus.ScheduleSpec{ID: "b-daily", After: 2 * time.Minute, Text: "b's cancelled"}, user)
	require.NoError(t, err)
	require.NoError(t, h.rt.CancelSchedule(ctx, "b", "b-daily"))
	err = h.rt.CancelSchedule(ctx, "b", "b-daily")
	require.ErrorIs(t, err, lazarus.ErrNoSchedule)
	require.ErrorIs(t, err, journal.ErrNotFound)
	_, err = h.rt.Schedule(ctx, "b", lazarus.ScheduleSpec{ID: "other", After: time.Hour, Text: "x"}, user)
	require.NoError(t, err)
	require.ErrorIs(t, h.rt.CancelSchedule(ctx, "a", "other"), lazarus.ErrNoSchedule, "another conversation's id")
	listed, err = h.rt.Schedules(ctx, "b")
	require.NoError(t, err)
	require.Len(t, listed, 2, "refused cancel changed nothing")

	h.clock.Advance(time.Minute) // past the old time of a's
	h.advanceTo(start.Add(2 * time.Minute))
	require.NoError(t, h.model.WaitCalls(ctx, "b", 2))
	h.advanceTo(start.Add(5 * time.Minute))
	require.NoError(t, h.model.WaitCalls(ctx, "a", 2))
	require.Equal(t, []string{"new"}, h.wakeTexts("a"), "only the replacement fires")
	require.Equal(t, []string{"b's"}, h.wakeTexts("b"), "b's daily fires as b's; a cancelled schedule never fires")
	require.Equal(t, 2, h.model.Calls("b"))
}

// TestBBScheduleSameIDInTwoConversationsWhileDead: two conversations each
// hold a schedule "daily" (hourly, a's a minute in, b's two). With both
// actors killed before each occurrence, each fires once at its own time,
// as its own (its text, in its conversation, its turn run once); cancelling
// a's leaves b's, which fires again an hour on while a's never does.
func TestBBScheduleSameIDInTwoConversationsWhileDead(t *testing.T) {
	h := newHarness(t, openStore(t, "pebble"), nil)
	ctx := ctxT(t)
	start := h.clock.Now()
	for _, c := range []string{"a", "b"} {
		_, err := h.rt.SendAndWait(ctx, c, "hi", user)
		require.NoError(t, err)
	}
	_, err := h.rt.Schedule(ctx, "a", lazarus.ScheduleSpec{ID: "daily", After: time.Minute, Every: time.Hour, Text: "a's daily"}, user)
	require.NoError(t, err)
	_, err = h.rt.Schedule(ctx, "b", lazarus.ScheduleSpec{ID: "daily", After: 2 * time.Minute, Every: time.Hour, Text: "b's daily"}, user)
	require.NoError(t, err)
	kill := func() {
		t.Helper()
		for _, c := range []string{"a", "b"} {
			h.rt.Kill(c)
			require.False(t, h.rt.IsActive(c))
		}
	}

	kill()
	h.advanceTo(start.Add(time.Minute))
	require.NoError(t, h.model.WaitCalls(ctx, "a", 2), "a's occurrence revives a")
	h.awaitNext("a", "daily", start.Add(time.Hour+time.Minute))
	h.awaitEvent("a", h.wakeMessages("a")[0].GetSeq(), isAssistantText(scripted.DefaultReply))
	require.Empty(t, h.wakeTexts("b"), "b's is not due yet")
	h.awaitNext("b", "daily", start.Add(2*time.Minute))

	kill()
	h.advanceTo(start.Add(2 * time.Minute))
	require.NoError(t, h.model.WaitCalls(ctx, "b", 2), "b's occurrence revives b")
	h.awaitNext("b", "daily", start.Add(time.Hour+2*time.Minute))
	h.awaitEvent("b", h.wakeMessages("b")[0].GetSeq(), isAssistantText(scripted.DefaultReply))
	require.Equal(t, []string{"a's daily"}, h.wakeTexts("a"), "each fired once")
	require.Equal(t, []string{"b's daily"}, h.wakeTexts("b"))
	require.Equal(t, 1, countText(h.model.Turns("b")[1], "b's daily"))
	require.Zero(t, countText(h.model.Turns("b")[1], "a's daily"))

	// Cancelling a's leaves b's.
	require.NoError(t, h.rt.CancelSchedule(ctx, "a", "daily"))
	listed, err := h.rt.Schedules(ctx, "a")
	require.NoError(t, err)
	require.Empty(t, listed)
	listed, err = h.rt.Schedules(ctx, "b")
	require.NoError(t, err)
	require.Len(t, listed, 1)
	kill()
	h.advanceTo(start.Add(time.Hour + 2*time.Minute))
	require.NoError(t, h.model.WaitCalls(ctx, "b", 3))
	h.awaitNext("b", "daily", start.Add(2*time.Hour+2*time.Minute))
	require.Equal(t, []string{"b's daily", "b's daily"}, h.wakeTexts("b"))
	require.Equal(t, []string{"a's daily"}, h.wakeTexts("a"), "a's cancelled schedule never fires again")
	require.Equal(t, 2, h.model.Calls("a"))
}

// TestBBScheduleRefusalsWriteNothing: every spec the documentation says
// cannot be a schedule is refused with its sentinel and journal.ErrInvalid,
// and none is stored; unknown and deleted conversations get ErrNotFound and
// ErrDeleted.
func TestBBScheduleRefusalsWriteNothing(t *testing.T) {
	h := newHarness(t, openStore(t, "memory"), nil)
	ctx := ctxT(t)
	now := h.clock.Now()
	_, err := h.rt.SendAndWait(ctx, "c", "hi", user)
	require.NoError(t, err)
	for name, spec := range map[string]lazarus.ScheduleSpec{
		"no time":               {Text: "x"},
		"no text":               {After: time.Minute},
		"blank text":            {After: time.Minute, Text: " \t\n"},
		"At and After":          {At: now.Add(time.Hour), After: time.Minute, Text: "x"},
		"At and Cron":           {At: now.Add(time.Hour), Cron: "@daily", Text: "x"},
		"After and Cron":        {After: time.Minute, Cron: "@daily", Text: "x"},
		"Cron and Every":        {Cron: "@daily", Every: time.Hour, Text: "x"},
		"Every below minimum":   {Every: lazarus.MinScheduleInterval - time.Nanosecond, Text: "x"},
		"After, short Every":    {After: time.Minute, Every: time.Millisecond, Text: "x"},
		"negative Every":        {Every: -time.Hour, Text: "x"},
		"negative After":        {After: -time.Minute, Text: "x"},
		"cron @every too short": {Cron: "@every 500ms", Text: "x"},
		"cron unparsable":       {Cron: "61 * * * *", Text: "x"},
		"cron six fields":       {Cron: "0 0 9 * * *", Text: "x"},
		"cron TZ= prefix":       {Cron: "TZ=Europe/Paris 0 9 * * *", Text: "x"},
		"cron CRON_TZ= prefix":  {Cron: "CRON_TZ=Europe/Paris 0 9 * * *", Text: "x"},
		"unknown zone":          {Cron: "0 9 * * *", TimeZone: "Mars/Olympus", Text: "x"},
		"zone without cron":     {After: time.Minute, TimeZone: "Europe/Paris", Text: "x"},
	} {
		_, err := h.rt.Schedule(ctx, "c", spec, user)
		require.ErrorIs(t, err, lazarus.ErrBadSchedule, name)
		require.ErrorIs(t, err, journal.ErrInvalid, name)
	}
	for name, at := range map[string]time.Time{"now": now, "before now": now.Add(-time.Second)} {
		_, err := h.rt.Schedule(ctx, "c", lazarus.ScheduleSpec{At: at, Text: "x"}, user)
		require.ErrorIs(t, err, lazarus.ErrScheduleInPast, name)
		require.ErrorIs(t, err, journal.ErrInvalid, name)
	}
	listed, err := h.rt.Schedules(ctx, "c")
	require.NoError(t, err)
	require.Empty(t, listed, "nothing stored")

	_, err = h.rt.Schedule(ctx, "nobody", lazarus.ScheduleSpec{After: time.Minute, Text: "x"}, user)
	require.ErrorIs(t, err, journal.ErrNotFound, "an unknown conversation")
	listed, err = h.rt.Schedules(ctx, "nobody")
	require.NoError(t, err)
	require.Empty(t, listed, "none for an unknown conversation")

	_, err = h.rt.SendAndWait(ctx, "gone", "hi", user)
	require.NoError(t, err)
	require.NoError(t, h.rt.Delete(ctx, "gone"))
	_, err = h.rt.Schedule(ctx, "gone", lazarus.ScheduleSpec{After: time.Minute, Text: "x"}, user)
	require.ErrorIs(t, err, journal.ErrDeleted, "a deleted conversation")
}

// TestBBScheduleAtThenEvery: Every after At fires first at At, then every
// Every from it; a restart keeps the cadence.
func TestBBScheduleAtThenEvery(t *testing.T) {
	store := openStore(t, "memory")
	h := newHarness(t, store, nil)
	ctx := ctxT(t)
	start := h.clock.Now()
	_, err := h.rt.SendAndWait(ctx, "c", "hi", user)
	require.NoError(t, err)
	at := start.Add(10 * time.Minute)
	sc, err := h.rt.Schedule(ctx, "c", lazarus.ScheduleSpec{At: at, Every: time.Hour, Text: "tick"}, user)
	require.NoError(t, err)
	require.True(t, sc.GetNext().AsTime().Equal(at), "first at At, not At+Every")
	h.advanceTo(at)
	require.NoError(t, h.model.WaitCalls(ctx, "c", 2))
	h.awaitNext("c", sc.GetId(), at.Add(time.Hour))
	// The first tick's turn ends before the restart (else the restart
	// would run it again: one more model call, no more ticks).
	h.awaitEvent("c", h.wakeMessages("c")[0].GetSeq(), isAssistantText(scripted.DefaultReply))
	require.NoError(t, h.rt.Close())

	// A restart 30 minutes later: nothing missed, the next is kept.
	h2 := newHarnessAt(t, store, at.Add(30*time.Minute), func(o *lazarus.Options) { o.Model = h.model })
	h2.advanceTo(at.Add(time.Hour))
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Len(c, h2.wakeTextsOf(c, "c"), 2) }, wait, time.Millisecond, "the second tick fires")
	require.Equal(t, []string{"tick", "tick"}, h2.wakeTexts("c"))
	require.NoError(t, h2.model.WaitCalls(ctx, "c", 3))
	h2.awaitNext("c", sc.GetId(), at.Add(2*time.Hour))
}

// TestBBScheduleOneShotMissedWhileDownFiresOnce: a one-shot whose time
// passed while no runtime ran fires once when one starts, and is gone.
func TestBBScheduleOneShotMissedWhileDownFiresOnce(t *testing.T) {
	store := openStore(t, "pebble")
	h := newHarness(t, store, nil)
	ctx := ctxT(t)
	_, err := h.rt.SendAndWait(ctx, "c", "hi", user)
	require.NoError(t, err)
	_, err = h.rt.Schedule(ctx, "c", lazarus.ScheduleSpec{After: time.Minute, Text: "late"}, user)
	require.NoError(t, err)
	require.NoError(t, h.rt.Close())

	h2 := newHarnessAt(t, store, h.clock.Now().Add(3*time.Hour), nil)
	require.NoError(t, h2.model.WaitCalls(ctx, "c", 1), "fired on start")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		listed, err := h2.rt.Schedules(ctx, "c")
		require.NoError(c, err)
		assert.Empty(c, listed)
	}, wait, time.Millisecond, "the one-shot is gone once fired")
	h2.clock.Advance(time.Hour)
	require.NoError(t, h2.rt.Wake(ctx, "c"))
	require.Equal(t, []string{"late"}, h2.wakeTexts("c"))
	require.Equal(t, 1, h2.model.Calls("c"))
}

// cronStep fires the cron schedule sc due at at and checks that it then
// names next.
func (h *harness) cronStep(conv, id string, at, next time.Time, calls int) {
	h.t.Helper()
	h.advanceTo(at)
	require.NoError(h.t, h.model.WaitCalls(ctxT(h.t), conv, calls))
	h.awaitNext(conv, id, next)
}

// TestBBScheduleCronAcrossDSTThroughTheRuntime: a cron schedule read on the
// local clock of Europe/Paris, fired through the runtime across both DST
// changes of 2026: 02:30 on the night that skips it fires once, at 03:30;
// on the night that repeats it, once, at its first instant (and not again
// an hour later); an expression whose hour is "*" fires every elapsed hour.
func TestBBScheduleCronAcrossDSTThroughTheRuntime(t *testing.T) {
	utc := func(mo time.Month, d, hh, mm int) time.Time { return time.Date(2026, mo, d, hh, mm, 0, 0, time.UTC) }

	t.Run("spring forward", func(t *testing.T) {
		h := newHarnessAt(t, openStore(t, "memory"), utc(time.March, 28, 12, 0), nil)
		ctx := ctxT(t)
		_, err := h.rt.SendAndWait(ctx, "c", "hi", user)
		require.NoError(t, err)
		sc, err := h.rt.Schedule(ctx, "c", lazarus.ScheduleSpec{Cron: "30 2 * * *", TimeZone: "Europe/Paris", Text: "night"}, user)
		require.NoError(t, err)
		// 29 March: 02:00 CET jumps to 03:00 CEST (01:00 UTC).
		require.True(t, sc.GetNext().AsTime().Equal(utc(time.March, 29, 1, 30)), "03:30 CEST: next %v", sc.GetNext().AsTime())
		h.cronStep("c", sc.GetId(), utc(time.March, 29, 1, 30), utc(time.March, 30, 0, 30), 2)
		h.cronStep("c", sc.GetId(), utc(time.March, 30, 0, 30), utc(time.March, 31, 0, 30), 3)
		require.Equal(t, []string{"night", "night"}, h.wakeTexts("c"))
	})

	t.Run("fall back", func(t *testing.T) {
		h := newHarnessAt(t, openStore(t, "memory"), utc(time.October, 24, 12, 0), nil)
		ctx := ctxT(t)
		_, err := h.rt.SendAndWait(ctx, "c", "hi", user)
		require.NoError(t, err)
		sc, err := h.rt.Schedule(ctx, "c", lazarus.ScheduleSpec{Cron: "30 2 * * *", TimeZone: "Europe/Paris", Text: "night"}, user)
		require.NoError(t, err)
		// 25 October: 03:00 CEST goes back to 02:00 CET (01:00 UTC); 02:30
		// is 00:30 UTC, then again 01:30 UTC.
		require.True(t, sc.GetNext().AsTime().Equal(utc(time.October, 25, 0, 30)), "the first 02:30: next %v", sc.GetNext().AsTime())
		h.cronStep("c", sc.GetId(), utc(time.October, 25, 0, 30), utc(time.October, 26, 1, 30), 2)
		h.clock.Advance(utc(time.October, 25, 1, 31).Sub(h.clock.Now())) // the repeated 02:30 passes
		h.cronStep("c", sc.GetId(), utc(time.October, 26, 1, 30), utc(time.October, 27, 1, 30), 3)
		require.Equal(t, []string{"night", "night"}, h.wakeTexts("c"), "once on the night that repeats 02:30")
	})

	t.Run("every hour by elapsed time", func(t *testing.T) {
		h := newHarnessAt(t, openStore(t, "memory"), utc(time.October, 25, 0, 0), nil)
		ctx := ctxT(t)
		_, err := h.rt.SendAndWait(ctx, "c", "hi", user)
		require.NoError(t, err)
		sc, err := h.rt.Schedule(ctx, "c", lazarus.ScheduleSpec{Cron: "30 * * * *", TimeZone: "Europe/Paris", Text: "hourly"}, user)
		require.NoError(t, err)
		require.True(t, sc.GetNext().AsTime().Equal(utc(time.October, 25, 0, 30)))
		h.cronStep("c", sc.GetId(), utc(time.October, 25, 0, 30), utc(time.October, 25, 1, 30), 2)
		h.cronStep("c", sc.GetId(), utc(time.October, 25, 1, 30), utc(time.October, 25, 2, 30), 3)
		require.Equal(t, []string{"hourly", "hourly"}, h.wakeTexts("c"), "the repeated 02:30 fires too: an hour elapsed")
	})
}

// TestBBScheduleWakeAuthor: a wake's message is authored by the scheduler
// when Options.ScopeLoader rebuilds its scope, and by the system identity
// without a loader; the wake's tools run for that scope.
func TestBBScheduleWakeAuthor(t *testing.T) {
	for _, loader := range []bool{true, false} {
		t.Run(map[bool]string{true: "loader", false: "no loader"}[loader], func(t *testing.T) {
			h := newHarness(t, openStore(t, "memory"), func(o *lazarus.Options) {
				if loader {
					o.ScopeLoader = func(_ context.Context, id agent.Identity) (agent.Scope, error) {
						return agent.Scope{UserID: id.UserID, Roles: id.Roles}, nil
					}
				}
			})
			ctx := ctxT(t)
			_, err := h.rt.SendAndWait(ctx, "c", "hi", user)
			require.NoError(t, err)
			sc, err := h.rt.Schedule(ctx, "c", lazarus.ScheduleSpec{After: time.Minute, Text: "who am I?"}, agent.Scope{UserID: "bob"})
			require.NoError(t, err)
			require.Equal(t, "bob", sc.GetAuthor().GetUserId(), "the scheduler is the schedule's author")
			h.model.Push("c", scripted.Reply("", scripted.Call("whoami", `{}`)), scripted.Text("done"))
			h.advanceTo(sc.GetNext().AsTime())
			h.awaitEvent("c", 0, isAssistantText("done"))
			wakes := h.wakeMessages("c")
			require.Len(t, wakes, 1)
			var result *messages.ToolOutcome
			for _, ev := range h.history("c") {
				if ev.GetToolResult().GetName() == "whoami" {
					result = ev.GetToolResult().GetOutcome()
				}
			}
			require.NotNil(t, result)
			if loader {
				require.Equal(t, "bob", wakes[0].GetAuthor().GetUserId())
				require.Contains(t, result.String(), `bob`, "the tool ran for the scheduler")
			} else {
				require.Equal(t, agent.SystemUserID, wakes[0].GetAuthor().GetUserId())
				require.NotContains(t, result.String(), `bob`)
			}
		})
	}
}

// TestBBScheduleOfAConversationDeletedAfterwards: a delete takes the
// conversation's schedules; its time passing writes nothing and brings no
// conversation back; listing or cancelling them is journal.ErrDeleted.
func TestBBScheduleOfAConversationDeletedAfterwards(t *testing.T) {
	store := openStore(t, "memory")
	h := newHarness(t, store, nil)
	ctx := ctxT(t)
	_, err := h.rt.SendAndWait(ctx, "c", "hi", user)
	require.NoError(t, err)
	sc, err := h.rt.Schedule(ctx, "c", lazarus.ScheduleSpec{Every: time.Minute, Text: "x"}, user)
	require.NoError(t, err)
	require.True(t, h.rt.Kill("c"))
	require.NoError(t, h.rt.Delete(ctx, "c"))
	listed, err := h.rt.Schedules(ctx, "c")
	require.ErrorIs(t, err, journal.ErrDeleted)
	require.Empty(t, listed)
	stored, err := store.(journal.ScheduleStore).ConversationSchedules(ctx, "c")
	require.NoError(t, err)
	require.Empty(t, stored, "the delete took them")
	h.clock.Advance(sc.GetNext().AsTime().Sub(h.clock.Now()) + time.Minute)
	require.Eventually(t, func() bool { return !slices.ContainsFunc(h.clock.Dues(), sc.GetNext().AsTime().Equal) }, wait, time.Millisecond)
	_, err = h.rt.History(ctx, "c", 0, 0)
	require.ErrorIs(t, err, journal.ErrDeleted)
	require.Equal(t, 1, h.model.Calls("c"))
	require.ErrorIs(t, h.rt.CancelSchedule(ctx, "c", sc.GetId()), journal.ErrDeleted)
}

// TestBBFileRewindAcrossAKillAndARestart: the file records of calls made
// by two activations (a kill between them) and read by a third runtime on
// the same Store and root put the files back to each target: the end of
// the first turn, then the start.
func TestBBFileRewindAcrossAKillAndARestart(t *testing.T) {
	store := openStore(t, "memory")
	root := t.TempDir()
	opts := func(o *lazarus.Options) {
		o.Tools = append(o.Tools, writeFileTool(root, nil))
		o.Files = lazarus.FilesOptions{Root: root}
	}
	h := newHarness(t, store, opts)
	ctx := ctxT(t)
	require.NoError(t, os.WriteFile(filepath.Join(root, "a.txt"), []byte("v1"), 0o640))
	h.model.Push("f", scripted.Reply("", writeCall(fileArgs{Path: "a.txt", Content: "v2"})), scripted.Text("one"))
	_, err := h.rt.SendAndWait(ctx, "f", "first", user)
	require.NoError(t, err)
	first := h.awaitEvent("f", 0, isAssistantText("one")).GetSeq()
	require.True(t, h.rt.Kill("f"))
	h.model.Push("f", scripted.Reply("", writeCall(fileArgs{Path: "a.txt", Content: "v3"}), writeCall(fileArgs{Path: "d/new.txt", Content: "n"})), scripted.Text("two"))
	_, err = h.rt.SendAndWait(ctx, "f", "second", user)
	require.NoError(t, err)
	require.Equal(t, "v3", readFile(t, root, "a.txt"))
	require.NoError(t, h.rt.Close())

	h2 := newHarness(t, store, opts)
	rep, err := h2.rt.RewindWithReport(ctx, "f", first, lazarus.RewindOptions{Files: true}, user)
	require.NoError(t, err)
	require.Len(t, rep.Files, 2)
	require.Equal(t, lazarus.FileRestore{Path: "a.txt", Action: lazarus.FileRestored, Seq: rep.Files[0].Seq, Size: 2}, rep.Files[0])
	require.Equal(t, lazarus.FileRestore{Path: "d/new.txt", Action: lazarus.FileDeleted, Seq: rep.Files[1].Seq}, rep.Files[1])
	require.Greater(t, rep.Files[0].Seq, first, "the first call after the target")
	require.Equal(t, "v2", readFile(t, root, "a.txt"))
	require.Equal(t, "<absent>", readFile(t, root, "d/new.txt"))

	rep, err = h2.rt.RewindWithReport(ctx, "f", 0, lazarus.RewindOptions{Files: true}, user)
	require.NoError(t, err)
	require.Equal(t, []lazarus.FileRestore{{Path: "a.txt", Action: lazarus.FileRestored, Seq: rep.Files[0].Seq, Size: 2}}, rep.Files,
		"new.txt is absent as its record says: not listed")
	require.Less(t, rep.Files[0].Seq, first, "the first turn's call")
	require.Equal(t, "v1", readFile(t, root, "a.txt"))
	info, err := os.Stat(filepath.Join(root, "a.txt"))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o640), info.Mode().Perm())
}

// TestBBFileRunKilledMidChangeKeepsItsFirstRecord: a tool records a file,
// changes it half, and its activation is killed; the revival runs the same
// call again, which records the half-changed file (ignored: the first
// record of a call and a path is kept) and finishes; the rewind puts back
// the content from before the first run. Within one run a second Before of
// the same path keeps the first too.
func TestBBFileRunKilledMidChangeKeepsItsFirstRecord(t *testing.T) {
	root := t.TempDir()
	started := make(chan int, 4)
	var runs atomic.Int32
	tool := agent.Tool{
		Name: "edit_twice", Description: "edits a file in two steps", Executor: messages.Executor_EXECUTOR_SERVER,
		Run: func(ctx context.Context, inv agent.Invocation) (string, error) {
			run := int(runs.Add(1))
			p := filepath.Join(root, "doc.txt")
			if err := inv.CheckpointFile(ctx, "doc.txt"); err != nil {
				return "", err
			}
			if err := os.WriteFile(p, []byte("half"), 0o644); err != nil {
				return "", err
			}
			if err := inv.CheckpointFile(ctx, "doc.txt"); err != nil { // again, in the same run
				return "", err
			}
			started <- run
			if run == 1 {
				<-ctx.Done() // killed here
				return "", ctx.Err()
			}
			return `{"done":true}`, os.WriteFile(p, []byte("final"), 0o644)
		},
	}
	h := newHarness(t, openStore(t, "memory"), func(o *lazarus.Options) {
		o.Tools = append(o.Tools, tool)
		o.Files = lazarus.FilesOptions{Root: root}
	})
	ctx := ctxT(t)
	require.NoError(t, os.WriteFile(filepath.Join(root, "doc.txt"), []byte("original"), 0o644))
	h.model.Push("k", scripted.Reply("", scripted.Call("edit_twice", `{}`)), scripted.Text("edited"))
	_, err := h.rt.Send(ctx, "k", "edit", user)
	require.NoError(t, err)
	require.Equal(t, 1, recv(t, started, "tool run started"))
	require.True(t, h.rt.Kill("k"))
	require.NoError(t, h.rt.Wake(ctx, "k"))
	require.Equal(t, 2, recv(t, started, "tool run started"), "the call runs again")
	h.awaitEvent("k", 0, isAssistantText("edited"))
	require.Equal(t, "final", readFile(t, root, "doc.txt"))
	require.Len(t, h.toolCallSeqs("k"), 1, "one call, run twice")

	rep, err := h.rt.RewindWithReport(ctx, "k", 1, lazarus.RewindOptions{Files: true}, user)
	require.NoError(t, err)
	require.Len(t, rep.Files, 1)
	require.Equal(t, lazarus.FileRestored, rep.Files[0].Action)
	require.Equal(t, int64(len("original")), rep.Files[0].Size)
	require.Equal(t, "original", readFile(t, root, "doc.txt"), "the content before the first run, not the half-changed one")
}

// TestBBFileRewindRefusalsLeaveTheFiles: a rewind with Files that is
// refused (a target in a skipped span, after the log, a deleted
// conversation; no file root) writes nothing and restores no file; a
// rewind to the last seq restores none.
func TestBBFileRewindRefusalsLeaveTheFiles(t *testing.T) {
	h, root := filesHarness(t, openStore(t, "memory"), nil, nil)
	ctx := ctxT(t)
	h.model.Push("r", scripted.Reply("", writeCall(fileArgs{Path: "x.txt", Content: "1"})), scripted.Text("a"))
	_, err := h.rt.SendAndWait(ctx, "r", "one", user)
	require.NoError(t, err)
	h.model.Push("r", scripted.Reply("", writeCall(fileArgs{Path: "x.txt", Content: "2"})), scripted.Text("b"))
	_, err = h.rt.SendAndWait(ctx, "r", "two", user)
	require.NoError(t, err)
	last, err := h.store.LastSeq(ctx, "r")
	require.NoError(t, err)

	rep, err := h.rt.RewindWithReport(ctx, "r", last, lazarus.RewindOptions{Files: true}, user)
	require.NoError(t, err)
	require.Empty(t, rep.Files, "no call after the last seq")
	require.Equal(t, "2", readFile(t, root, "x.txt"))

	// Back to the first message: the span 2..last is skipped.
	_, err = h.rt.RewindWithReport(ctx, "r", 1, lazarus.RewindOptions{Files: true}, user)
	require.NoError(t, err)
	require.Equal(t, "<absent>", readFile(t, root, "x.txt"))
	require.NoError(t, os.WriteFile(filepath.Join(root, "x.txt"), []byte("by hand"), 0o644))
	head, err := h.store.LastSeq(ctx, "r")
	require.NoError(t, err)
	for name, to := range map[string]uint64{"in a skipped span": last - 1, "after the log": head + 1} {
		_, err := h.rt.RewindWithReport(ctx, "r", to, lazarus.RewindOptions{Files: true}, user)
		require.ErrorIs(t, err, journal.ErrInvalid, name)
		now, err := h.store.LastSeq(ctx, "r")
		require.NoError(t, err)
		require.Equal(t, head, now, "%s: nothing written", name)
		require.Equal(t, "by hand", readFile(t, root, "x.txt"), "%s: no file restored", name)
	}

	require.NoError(t, h.rt.Delete(ctx, "r"))
	_, err = h.rt.RewindWithReport(ctx, "r", 1, lazarus.RewindOptions{Files: true}, user)
	require.ErrorIs(t, err, journal.ErrDeleted)
	require.Equal(t, "by hand", readFile(t, root, "x.txt"))

	// A runtime without a root: ErrNoCheckpoints, nothing written; the
	// tool's CheckpointFile fails the same way.
	plain := newHarness(t, openStore(t, "memory"), func(o *lazarus.Options) { o.Tools = append(o.Tools, writeFileTool(t.TempDir(), nil)) })
	plain.model.Push("p", scripted.Reply("", writeCall(fileArgs{Path: "y.txt", Content: "1"})), scripted.Text("c"))
	_, err = plain.rt.SendAndWait(ctx, "p", "one", user)
	require.NoError(t, err)
	var outcome string
	for _, ev := range plain.history("p") {
		if r := ev.GetToolResult(); r != nil {
			outcome = r.GetOutcome().String()
		}
	}
	require.Contains(t, outcome, agent.ErrNoCheckpoints.Error(), "the tool's CheckpointFile failed: %s", outcome)
	before, err := plain.store.LastSeq(ctx, "p")
	require.NoError(t, err)
	_, err = plain.rt.RewindWithReport(ctx, "p", 1, lazarus.RewindOptions{Files: true}, user)
	require.ErrorIs(t, err, agent.ErrNoCheckpoints)
	after, err := plain.store.LastSeq(ctx, "p")
	require.NoError(t, err)
	require.Equal(t, before, after, "nothing written")
	_, err = plain.rt.SweepFileBlobs(ctx)
	require.ErrorIs(t, err, agent.ErrNoCheckpoints)
}

// lastSettings returns the settings of conv's last model call.
func lastSettings(t *testing.T, m *scripted.Model, conv string) agent.Settings {
	t.Helper()
	turns := m.Turns(conv)
	require.NotEmpty(t, turns)
	return turns[len(turns)-1].Settings
}

// TestBBSettingsThroughRewindForkAndBadValues: a conversation's own
// settings are its row's, not its log's: a rewind leaves them, a fork
// copies them and each then changes its own alone; bad values (NaN and
// infinite temperatures) are refused and change nothing; the tool choice
// constants are accepted.
func TestBBSettingsThroughRewindForkAndBadValues(t *testing.T) {
	cool, warm := 0.3, 0.9
	defaults := agent.Settings{SystemPrompt: "default prompt", MaxTokens: 10}
	h := newHarness(t, openStore(t, "memory"), func(o *lazarus.Options) { o.Settings = defaults })
	ctx := ctxT(t)
	own := agent.Settings{Model: "big", Temperature: &cool}
	require.NoError(t, h.rt.Configure(ctx, "c", own))
	_, err := h.rt.SendAndWait(ctx, "c", "hi", user)
	require.NoError(t, err)
	merged := agent.Settings{SystemPrompt: "default prompt", Model: "big", Temperature: &cool, MaxTokens: 10}
	require.Equal(t, merged, lastSettings(t, h.model, "c"), "its own over the defaults, field by field")

	require.NoError(t, h.rt.Rewind(ctx, "c", 0, lazarus.RewindOptions{}, user))
	got, err := h.rt.Settings(ctx, "c")
	require.NoError(t, err)
	require.Equal(t, own, got, "a rewind leaves the settings")
	_, err = h.rt.SendAndWait(ctx, "c", "again", user)
	require.NoError(t, err)
	require.Equal(t, merged, lastSettings(t, h.model, "c"))

	last, err := h.store.LastSeq(ctx, "c")
	require.NoError(t, err)
	require.NoError(t, h.rt.Fork(ctx, "c", last, "f"))
	got, err = h.rt.Settings(ctx, "f")
	require.NoError(t, err)
	require.Equal(t, own, got, "the fork gets the source's settings")
	require.NoError(t, h.rt.Configure(ctx, "f", agent.Settings{Temperature: &warm, ToolChoice: agent.ToolChoiceNone}))
	got, err = h.rt.Settings(ctx, "c")
	require.NoError(t, err)
	require.Equal(t, own, got, "the source keeps its own")
	_, err = h.rt.SendAndWait(ctx, "f", "in the fork", user)
	require.NoError(t, err)
	require.Equal(t, agent.Settings{SystemPrompt: "default prompt", Temperature: &warm, MaxTokens: 10, ToolChoice: agent.ToolChoiceNone},
		lastSettings(t, h.model, "f"))

	nan, inf, ninf := math.NaN(), math.Inf(1), math.Inf(-1)
	for name, bad := range map[string]agent.Settings{
		"NaN temperature":       {Temperature: &nan},
		"infinite temperature":  {Temperature: &inf},
		"-infinite temperature": {Temperature: &ninf},
		"model too long":        {Model: strings.Repeat("m", agent.MaxModelNameBytes+1)},
	} {
		require.ErrorIs(t, h.rt.Configure(ctx, "c", bad), journal.ErrInvalid, name)
	}
	got, err = h.rt.Settings(ctx, "c")
	require.NoError(t, err)
	require.Equal(t, own, got, "refused settings change nothing")
	for _, choice := range []string{agent.ToolChoiceAuto, agent.ToolChoiceNone, agent.ToolChoiceRequired, "lookup_order"} {
		require.NoError(t, h.rt.Configure(ctx, "c", agent.Settings{ToolChoice: choice}), choice)
		got, err = h.rt.Settings(ctx, "c")
		require.NoError(t, err)
		require.Equal(t, agent.Settings{ToolChoice: choice}, got)
	}
	_, err = h.rt.Settings(ctx, "never-configured")
	require.ErrorIs(t, err, journal.ErrNotFound)
}

// TestBBSettingsChangedDuringAModelCall: a Configure while a model call
// runs applies from the next call on; the running call keeps the settings
// it started with.
func TestBBSettingsChangedDuringAModelCall(t *testing.T) {
	h := newHarness(t, openStore(t, "memory"), nil)
	ctx := ctxT(t)
	require.NoError(t, h.rt.Configure(ctx, "c", agent.Settings{Model: "old"}))
	entered := h.model.Hold("c")
	_, err := h.rt.Send(ctx, "c", "hi", user)
	require.NoError(t, err)
	recv(t, entered, "model call entered")
	require.NoError(t, h.rt.Configure(ctx, "c", agent.Settings{Model: "new"}))
	require.Equal(t, "old", h.model.Turns("c")[0].Settings.Model, "the running call started with the old settings")
	h.model.Release("c")
	h.awaitEvent("c", 0, isAssistantText(scripted.DefaultReply))
	_, err = h.rt.SendAndWait(ctx, "c", "next", user)
	require.NoError(t, err)
	require.Equal(t, "new", lastSettings(t, h.model, "c").Model, "the next call gets the new settings")
}

// agentsHarness is a harness with a named agent "critic" on its own model.
func agentsHarness(t *testing.T, critSettings agent.Settings, defaults agent.Settings) (*harness, *scripted.Model) {
	crit := scripted.New(scripted.Options{})
	h := newHarness(t, openStore(t, "memory"), func(o *lazarus.Options) {
		o.Settings = defaults
		o.Agents = []lazarus.Agent{{Name: "critic", Model: crit, Settings: critSettings, Tools: []string{"lookup_order"}}}
	})
	return h, crit
}

// TestBBAgentSettingsLayerFieldByField: a named agent's settings are its
// own over the conversation's (Configure) over Options.Settings, field by
// field; the default agent gets the conversation's over the defaults.
func TestBBAgentSettingsLayerFieldByField(t *testing.T) {
	cool := 0.2
	h, crit := agentsHarness(t, agent.Settings{SystemPrompt: "You criticise."},
		agent.Settings{SystemPrompt: "You help.", Temperature: &cool, MaxTokens: 100})
	ctx := ctxT(t)
	require.NoError(t, h.rt.Configure(ctx, "c", agent.Settings{Model: "big", MaxTokens: 7}))
	_, err := h.rt.SendAndWait(ctx, "c", "hello", user)
	require.NoError(t, err)
	require.Equal(t, agent.Settings{SystemPrompt: "You help.", Model: "big", Temperature: &cool, MaxTokens: 7}, lastSettings(t, h.model, "c"))
	_, err = h.rt.SendMessageAndWait(ctx, "c", agent.UserMessage(agent.TextPart("review")), lazarus.SendOptions{Agent: "critic"}, user)
	require.NoError(t, err)
	require.Equal(t, agent.Settings{SystemPrompt: "You criticise.", Model: "big", Temperature: &cool, MaxTokens: 7}, lastSettings(t, crit, "c"))
}

// TestBBHandoffThenRewindAndFork: after a handoff, a fork at the end keeps
// each agent's view as it was; a rewind to before the handoff gives the
// turn back to the default agent, and the critic is not called again.
func TestBBHandoffThenRewindAndFork(t *testing.T) {
	h, crit := agentsHarness(t, agent.Settings{}, agent.Settings{})
	ctx := ctxT(t)
	h.model.Push("c", scripted.Reply("passing", scripted.Call(lazarus.HandoffToolName, `{"agent":"critic","message":"check it"}`)))
	crit.Push("c", scripted.Text("it is fine"))
	end, err := h.rt.SendAndWait(ctx, "c", "draft", user)
	require.NoError(t, err)
	require.Equal(t, "it is fine", end.Text)
	last, err := h.store.LastSeq(ctx, "c")
	require.NoError(t, err)

	view := func(conv, name string) []string {
		es, err := h.rt.HistoryView(ctx, conv, lazarus.HistoryOptions{Effective: true, Agent: lazarus.ViewOf(name)})
		require.NoError(t, err)
		var out []string
		for _, e := range es {
			out = append(out, kind(e.Event))
		}
		return out
	}
	require.Equal(t, []string{"handoff", "assistant_msg"}, view("c", "critic"), "the critic sees the handoff and its own answer")
	require.Equal(t, []string{"user_msg", "assistant_msg", "tool_call", "tool_result"}, view("c", ""))

	require.NoError(t, h.rt.Fork(ctx, "c", last, "f"))
	require.Equal(t, view("c", "critic"), view("f", "critic"), "the fork keeps the critic's view")
	require.Equal(t, view("c", ""), view("f", ""), "and the default agent's")
	crit.Push("f", scripted.Text("fork critic"))
	_, err = h.rt.SendMessageAndWait(ctx, "f", agent.UserMessage(agent.TextPart("more?")), lazarus.SendOptions{Agent: "critic"}, user)
	require.NoError(t, err)
	ft := crit.Turns("f")
	require.Len(t, ft, 1)
	require.Len(t, ft[0].Context, 3, "the fork's critic sees the handoff, its answer and the new message")

	// Rewind the source to its first message: the handoff is skipped.
	require.NoError(t, h.rt.Rewind(ctx, "c", 1, lazarus.RewindOptions{}, user))
	require.Empty(t, view("c", "critic"), "the critic sees nothing on the new head")
	h.model.Push("c", scripted.Text("default again"))
	end, err = h.rt.SendAndWait(ctx, "c", "try again", user)
	require.NoError(t, err)
	require.Equal(t, "default again", end.Text)
	require.Equal(t, 1, crit.Calls("c"), "the critic is not called again")
	dt := h.model.Turns("c")
	for _, ev := range dt[len(dt)-1].Context {
		require.Nil(t, ev.GetHandoff(), "the rewound handoff is out of the default agent's context")
		require.Nil(t, ev.GetToolCall())
	}
}

// kind names an event's type.
func kind(ev *messages.Event) string {
	switch ev.GetBody().(type) {
	case *messages.Event_UserMsg:
		return "user_msg"
	case *messages.Event_AssistantMsg:
		return "assistant_msg"
	case *messages.Event_ToolCall:
		return "tool_call"
	case *messages.Event_ToolResult:
		return "tool_result"
	case *messages.Event_Handoff:
		return "handoff"
	case *messages.Event_Rewind:
		return "rewind"
	}
	return "other"
}

// TestBBScheduleWakeMeetsATurnInProgress: an occurrence that comes due
// while the conversation's model call runs is written as a new message
// would be: the running call is abandoned and the turn runs again with
// both messages, and answers once.
func TestBBScheduleWakeMeetsATurnInProgress(t *testing.T) {
	h := newHarness(t, openStore(t, "memory"), nil)
	ctx := ctxT(t)
	_, err := h.rt.SendAndWait(ctx, "c", "first", user)
	require.NoError(t, err)
	sc, err := h.rt.Schedule(ctx, "c", lazarus.ScheduleSpec{After: time.Minute, Text: "wake"}, user)
	require.NoError(t, err)
	entered := h.model.Hold("c")
	sent, err := h.rt.Send(ctx, "c", "busy", user)
	require.NoError(t, err)
	recv(t, entered, "model call entered")
	h.advanceTo(sc.GetNext().AsTime())
	require.NoError(t, h.model.WaitCalls(ctx, "c", 3), "the turn runs again with the wake")
	ev := h.awaitEvent("c", sent, func(ev *messages.Event) bool { return ev.GetAssistantMsg() != nil })
	turns := h.model.Turns("c")
	last := turns[len(turns)-1]
	require.Equal(t, 1, countText(last, "busy"))
	require.Equal(t, 1, countText(last, "wake"))
	answers := 0
	for _, e := range h.history("c") {
		if e.GetSeq() > sent && e.GetAssistantMsg() != nil {
			answers++
		}
	}
	require.Equal(t, 1, answers, "one answer to both messages (seq %d)", ev.GetSeq())
	require.Equal(t, []string{"wake"}, h.wakeTexts("c"))
}

// TestBBScheduleToolsAsTheModelSeesThem: schedule_wakeup run twice for the
// same call (a re-run after a crash) keeps one schedule; list_wakeups shows
// its text, interval, cron and zone; cancel_wakeup of an unknown id says
// it cancelled nothing; a cron that never fires and an "@every" descriptor
// behave as documented.
func TestBBScheduleToolsAsTheModelSeesThem(t *testing.T) {
	h := newHarness(t, openStore(t, "memory"), func(o *lazarus.Options) { o.ScheduleTools = true })
	ctx := ctxT(t)
	now := h.clock.Now()
	_, err := h.rt.SendAndWait(ctx, "c", "hi", user)
	require.NoError(t, err)
	run := func(name, id, args string) (string, error) {
		tool, ok := h.rt.Tool(name)
		require.True(t, ok, name)
		return tool.Run(ctx, agent.Invocation{ConversationID: "c", ToolCallID: id, Name: name, Arguments: args, Scope: user})
	}
	for range 2 {
		out, err := run(lazarus.ScheduleToolName, "call-1", `{"text":"every 90 minutes","delay_seconds":60,"every_seconds":5400}`)
		require.NoError(t, err)
		require.Contains(t, out, now.Add(time.Minute).Format(time.RFC3339))
	}
	_, err = run(lazarus.ScheduleToolName, "call-2", `{"text":"mornings","cron":"0 9 * * 1-5","time_zone":"Europe/Paris"}`)
	require.NoError(t, err)
	out, err := run(lazarus.ListSchedulesToolName, "call-3", `{}`)
	require.NoError(t, err)
	var views []map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &views))
	require.Len(t, views, 2, "the re-run replaced its schedule: %s", out)
	require.Equal(t, "every 90 minutes", views[0]["text"])
	require.Equal(t, 5400.0, views[0]["every_seconds"])
	require.Equal(t, "0 9 * * 1-5", views[1]["cron"])
	require.Equal(t, "Europe/Paris", views[1]["time_zone"])

	out, err = run(lazarus.CancelScheduleToolName, "call-4", `{"schedule_id":"nope"}`)
	require.NoError(t, err)
	require.JSONEq(t, `{"cancelled":false}`, out)
	out, err = run(lazarus.CancelScheduleToolName, "call-5", `{"schedule_id":"`+views[0]["schedule_id"].(string)+`"}`)
	require.NoError(t, err)
	require.JSONEq(t, `{"cancelled":true}`, out)

	_, err = h.rt.Schedule(ctx, "c", lazarus.ScheduleSpec{Cron: "0 0 30 2 *", Text: "never"}, user)
	require.ErrorIs(t, err, lazarus.ErrBadSchedule, "30 February never comes")
	require.ErrorIs(t, err, journal.ErrInvalid)
	sc, err := h.rt.Schedule(ctx, "c", lazarus.ScheduleSpec{Cron: "@every 1h30m", Text: "d"}, user)
	require.NoError(t, err)
	require.True(t, sc.GetNext().AsTime().Equal(now.Add(90*time.Minute)), "next %v", sc.GetNext().AsTime())
	listed, err := h.rt.Schedules(ctx, "c")
	require.NoError(t, err)
	require.Len(t, listed, 2)
}

// TestBBScheduleOfAConfiguredConversationStartsItsFirstTurn: Configure
// creates a conversation, idle and without events; a schedule on it fires
// its first turn, under its own settings, after a kill and a restart in
// between; a delete then takes the settings and the schedule.
func TestBBScheduleOfAConfiguredConversationStartsItsFirstTurn(t *testing.T) {
	store := openStore(t, "memory")
	h := newHarness(t, store, nil)
	ctx := ctxT(t)
	require.NoError(t, h.rt.Configure(ctx, "c", agent.Settings{SystemPrompt: "Be brief.", MaxTokens: 20}))
	require.Empty(t, h.history("c"))
	sc, err := h.rt.Schedule(ctx, "c", lazarus.ScheduleSpec{After: time.Hour, Every: time.Hour, Text: "report"}, user)
	require.NoError(t, err)
	h.rt.Kill("c")
	require.NoError(t, h.rt.Close())

	h2 := newHarnessAt(t, store, h.clock.Now().Add(30*time.Minute), nil)
	h2.advanceTo(sc.GetNext().AsTime())
	require.NoError(t, h2.model.WaitCalls(ctx, "c", 1))
	turn := h2.model.Turns("c")[0]
	require.Equal(t, agent.Settings{SystemPrompt: "Be brief.", MaxTokens: 20}, turn.Settings, "the first turn runs with the row's settings")
	require.Equal(t, 1, countText(turn, "report"))
	require.Equal(t, []string{"user_msg"}, types(h2.history("c"))[:1], "the wake is the first event")
	h2.awaitNext("c", sc.GetId(), sc.GetNext().AsTime().Add(time.Hour))

	require.NoError(t, h2.rt.Delete(ctx, "c"))
	_, err = h2.rt.Settings(ctx, "c")
	require.ErrorIs(t, err, journal.ErrDeleted)
	listed, err := h2.rt.Schedules(ctx, "c")
	require.ErrorIs(t, err, journal.ErrDeleted)
	require.Empty(t, listed)
	stored, err := store.(journal.ScheduleStore).ConversationSchedules(ctx, "c")
	require.NoError(t, err)
	require.Empty(t, stored, "the delete took it")
	require.ErrorIs(t, h2.rt.Configure(ctx, "c", agent.Settings{Model: "m"}), journal.ErrDeleted)
}
