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
	"testing"
	"time"

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
	var out []*messages.Event
	for _, ev := range h.history(conv) {
		if ev.GetUserMsg() != nil && strings.HasPrefix(ev.GetRequestId(), "schedule/") {
			out = append(out, ev)
		}
	}
	return out
}

func (h *harness) wakeTexts(conv string) []string {
	var out []string
	for _, ev := range h.wakeMessages(conv) {
		out = append(out, ev.GetUserMsg().GetContent()[0].GetText())
	}
	return out
}

// awaitNext waits until schedule id of conv names next as its next
// occurrence.
func (h *harness) awaitNext(conv, id string, next time.Time) {
	h.t.Helper()
	require.Eventually(h.t, func() bool {
		all, err := h.rt.Schedules(ctxT(h.t), conv)
		require.NoError(h.t, err)
		for _, sc := range all {
			if sc.GetId() == id {
				return sc.GetNext().AsTime().Equal(next)
			}
		}
		return false
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
// text never fire, the new ones do; the id of another conversation's
// schedule is refused (journal.ErrConflict); a cancelled schedule never
// fires, and
// cancelling it again, or from another conversation, is ErrNoSchedule.
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

	// Schedule ids are the Store's, across conversations: b cannot take
	// a's, and a's stays as it is.
	_, err = h.rt.Schedule(ctx, "b", lazarus.ScheduleSpec{ID: "daily", After: 2 * time.Minute, Text: "b's"}, user)
	require.ErrorIs(t, err, journal.ErrConflict, "an id another conversation's schedule holds")
	listed, err = h.rt.Schedules(ctx, "a")
	require.NoError(t, err)
	require.Len(t, listed, 1)
	require.True(t, listed[0].GetNext().AsTime().Equal(start.Add(5*time.Minute)), "b's refused schedule does not replace a's")
	listed, err = h.rt.Schedules(ctx, "b")
	require.NoError(t, err)
	require.Empty(t, listed, "nothing written for b")
	_, err = h.rt.Schedule(ctx, "b", lazarus.ScheduleSpec{ID: "b-daily", After: 2 * time.Minute, Text: "b's"}, user)
	require.NoError(t, err)
	require.ErrorIs(t, h.rt.CancelSchedule(ctx, "b", "daily"), lazarus.ErrNoSchedule, "a's id is not b's to cancel")

	// Cancel b's; a's is untouched.
	require.NoError(t, h.rt.CancelSchedule(ctx, "b", "b-daily"))
	err = h.rt.CancelSchedule(ctx, "b", "b-daily")
	require.ErrorIs(t, err, lazarus.ErrNoSchedule)
	require.ErrorIs(t, err, journal.ErrNotFound)
	_, err = h.rt.Schedule(ctx, "b", lazarus.ScheduleSpec{ID: "other", After: time.Hour, Text: "x"}, user)
	require.NoError(t, err)
	require.ErrorIs(t, h.rt.CancelSchedule(ctx, "a", "other"), lazarus.ErrNoSchedule, "another conversation's id")
	listed, err = h.rt.Schedules(ctx, "b")
	require.NoError(t, err)
	require.Len(t, listed, 1, "refused cancel changed nothing")

	h.clock.Advance(2 * time.Minute) // past the old time of a's and the cancelled one of b's
	h.advanceTo(start.Add(5 * time.Minute))
	require.NoError(t, h.model.WaitCalls(ctx, "a", 2))
	require.Equal(t, []string{"new"}, h.wakeTexts("a"), "only the replacement fires")
	require.Empty(t, h.wakeTexts("b"), "a cancelled schedule never fires")
	require.Equal(t, 1, h.model.Calls("b"))
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
	require.NoError(t, h.rt.Close())

	// A restart 30 minutes later: nothing missed, the next is kept.
	h2 := newHarnessAt(t, store, at.Add(30*time.Minute), func(o *lazarus.Options) { o.Model = h.model })
	h2.advanceTo(at.Add(time.Hour))
	require.NoError(t, h2.model.WaitCalls(ctx, "c", 3))
	require.Equal(t, []string{"tick", "tick"}, h2.wakeTexts("c"))
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
	require.Eventually(t, func() bool {
		listed, err := h2.rt.Schedules(ctx, "c")
		require.NoError(t, err)
		return len(listed) == 0
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
// conversation back.
func TestBBScheduleOfAConversationDeletedAfterwards(t *testing.T) {
	h := newHarness(t, openStore(t, "memory"), nil)
	ctx := ctxT(t)
	_, err := h.rt.SendAndWait(ctx, "c", "hi", user)
	require.NoError(t, err)
	sc, err := h.rt.Schedule(ctx, "c", lazarus.ScheduleSpec{Every: time.Minute, Text: "x"}, user)
	require.NoError(t, err)
	require.True(t, h.rt.Kill("c"))
	require.NoError(t, h.rt.Delete(ctx, "c"))
	listed, err := h.rt.Schedules(ctx, "c")
	require.NoError(t, err)
	require.Empty(t, listed)
	h.clock.Advance(sc.GetNext().AsTime().Sub(h.clock.Now()) + time.Minute)
	require.Eventually(t, func() bool { return !slices.ContainsFunc(h.clock.Dues(), sc.GetNext().AsTime().Equal) }, wait, time.Millisecond)
	_, err = h.rt.History(ctx, "c", 0, 0)
	require.ErrorIs(t, err, journal.ErrDeleted)
	require.Equal(t, 1, h.model.Calls("c"))
	require.ErrorIs(t, h.rt.CancelSchedule(ctx, "c", sc.GetId()), lazarus.ErrNoSchedule)
}

var (
	_ = json.Marshal
	_ = math.NaN
	_ = os.ReadFile
	_ = filepath.Join
)
