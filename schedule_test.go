package lazarus_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/actors/actorstest"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

var schedT0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// wakes returns the texts of the conversation's user messages that
// scheduled wakes wrote.
func wakes(ctx context.Context, t *testing.T, rt *lazarus.Runtime, conv string) []string {
	t.Helper()
	evs, err := rt.History(ctx, conv, 0, 0)
	require.NoError(t, err)
	var out []string
	for _, ev := range evs {
		if m := ev.GetUserMsg(); m != nil && strings.HasPrefix(ev.GetRequestId(), "schedule/") {
			out = append(out, m.GetContent()[0].GetText())
		}
	}
	return out
}

// advanceWhenArmed waits until the clock has a timer due at at (the
// expiry actor armed it; for actors.MaxTimerSpan from now if at is
// further), then moves the clock to at.
func advanceWhenArmed(t *testing.T, clock *actorstest.ManualClock, at time.Time) {
	t.Helper()
	want := armedFor(clock, at)
	require.Eventually(t, func() bool { return slices.ContainsFunc(clock.Dues(), want.Equal) }, 20*time.Second, time.Millisecond, "no timer armed for %v", at)
	clock.Advance(at.Sub(clock.Now()))
}

// armedFor is when the expiry actor's timer for at is due, armed now: at,
// or actors.MaxTimerSpan from now if at is further.
func armedFor(clock *actorstest.ManualClock, at time.Time) time.Time {
	if capped := clock.Now().Add(actors.MaxTimerSpan); capped.Before(at) {
		return capped
	}
	return at
}

func scheduleRuntime(t *testing.T, opts lazarus.Options) (*lazarus.Runtime, *scripted.Model) {
	t.Helper()
	model := scripted.New(scripted.Options{})
	opts.Model = model
	rt, err := lazarus.Open(opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = rt.Close() })
	return rt, model
}

// scheduleConversation opens a Runtime as scheduleRuntime does, with opts
// and a manual clock at schedT0, and has the conversation "c" answer "hi"
// from scope: it exists and its first turn ran (the model was called once)
// before any schedule is made.
func scheduleConversation(ctx context.Context, t *testing.T, opts lazarus.Options, scope agent.Scope) (*lazarus.Runtime, *scripted.Model, *actorstest.ManualClock) {
	t.Helper()
	clock := actorstest.NewManualClock(schedT0)
	opts.Clock = clock
	rt, model := scheduleRuntime(t, opts)
	// The turn is over before the caller moves the clock: a model call
	// still running when the clock passes ModelTimeout (ten minutes, as
	// far as many schedules' first occurrence) would be cancelled and
	// made again, one model call more than the caller counts.
	_, err := rt.SendAndWait(ctx, "c", "hi", scope)
	require.NoError(t, err)
	require.Equal(t, 1, model.Calls("c"))
	return rt, model, clock
}

// TestScheduleFiresOnceWithItsText: a one-shot schedule appends its text
// as a user message at its time (not before), which starts a turn, and is
// then gone.
func TestScheduleFiresOnceWithItsText(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rt, model, clock := scheduleConversation(ctx, t, lazarus.Options{}, agent.Scope{UserID: "alice"})

	sc, err := rt.Schedule(ctx, "c", lazarus.ScheduleSpec{After: 10 * time.Minute, Text: "remind me"}, agent.Scope{UserID: "alice"})
	require.NoError(t, err)
	require.True(t, sc.GetNext().AsTime().Equal(schedT0.Add(10*time.Minute)))
	require.Equal(t, "alice", sc.GetAuthor().GetUserId())
	listed, err := rt.Schedules(ctx, "c")
	require.NoError(t, err)
	require.Len(t, listed, 1)
	require.Equal(t, sc.GetId(), listed[0].GetId())

	clock.Advance(10*time.Minute - time.Second)
	require.Empty(t, wakes(ctx, t, rt, "c"), "not before its time")
	advanceWhenArmed(t, clock, schedT0.Add(10*time.Minute))
	require.NoError(t, model.WaitCalls(ctx, "c", 2), "the wake starts a turn")
	require.Equal(t, []string{"remind me"}, wakes(ctx, t, rt, "c"))
	turns := model.Turns("c")
	last := turns[len(turns)-1].Context
	require.Equal(t, "remind me", last[len(last)-1].GetUserMsg().GetContent()[0].GetText(), "the payload is the turn's input")
	listed, err = rt.Schedules(ctx, "c")
	require.NoError(t, err)
	require.Empty(t, listed, "a one-shot schedule is gone once fired")
}

// TestScheduleEveryMissedWhileDownFiresOnce: a repeating schedule whose
// occurrences passed while no runtime ran fires once on start, and next at
// its first occurrence after that; it survives the restart.
func TestScheduleEveryMissedWhileDownFiresOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	clock := actorstest.NewManualClock(schedT0)
	rt, model := scheduleRuntime(t, lazarus.Options{Dir: dir, Clock: clock})
	_, err := rt.Send(ctx, "c", "hi", agent.Scope{UserID: "alice"})
	require.NoError(t, err)
	require.NoError(t, model.WaitCalls(ctx, "c", 1))
	sc, err := rt.Schedule(ctx, "c", lazarus.ScheduleSpec{Every: time.Minute, Text: "tick"}, agent.Scope{UserID: "alice"})
	require.NoError(t, err)
	require.NoError(t, rt.Close())

	// Ten and a half minutes later: ten occurrences were missed.
	clock2 := actorstest.NewManualClock(schedT0.Add(10*time.Minute + 30*time.Second))
	rt2, model2 := scheduleRuntime(t, lazarus.Options{Dir: dir, Clock: clock2})
	require.NoError(t, model2.WaitCalls(ctx, "c", 1), "the missed occurrence's turn")
	require.Equal(t, []string{"tick"}, wakes(ctx, t, rt2, "c"), "once, not once per missed tick")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		listed, err := rt2.Schedules(ctx, "c")
		require.NoError(c, err)
		require.Len(c, listed, 1)
		assert.True(c, listed[0].GetNext().AsTime().Equal(schedT0.Add(11*time.Minute)), "next %v", listed[0].GetNext().AsTime())
	}, 20*time.Second, time.Millisecond, "next is the first occurrence after the restart")

	advanceWhenArmed(t, clock2, schedT0.Add(11*time.Minute))
	require.NoError(t, model2.WaitCalls(ctx, "c", 2))
	require.Equal(t, []string{"tick", "tick"}, wakes(ctx, t, rt2, "c"))
	require.NoError(t, rt2.CancelSchedule(ctx, "c", sc.GetId()))
	require.ErrorIs(t, rt2.CancelSchedule(ctx, "c", sc.GetId()), lazarus.ErrNoSchedule)
	require.ErrorIs(t, rt2.CancelSchedule(ctx, "c", sc.GetId()), journal.ErrNotFound)
	listed, err := rt2.Schedules(ctx, "c")
	require.NoError(t, err)
	require.Empty(t, listed)
}

// TestScheduleCronInItsTimeZone: a cron expression is read in the given
// zone, and the next occurrence follows it.
func TestScheduleCronInItsTimeZone(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rt, model, clock := scheduleConversation(ctx, t, lazarus.Options{}, agent.Scope{})
	sc, err := rt.Schedule(ctx, "c", lazarus.ScheduleSpec{Cron: "0 9 * * *", TimeZone: "Europe/Paris", Text: "good morning"}, agent.Scope{})
	require.NoError(t, err)
	nine := time.Date(2026, 1, 1, 8, 0, 0, 0, time.UTC) // 09:00 in Paris, winter
	require.True(t, sc.GetNext().AsTime().Equal(nine), "next %v", sc.GetNext().AsTime())
	advanceWhenArmed(t, clock, nine)
	require.NoError(t, model.WaitCalls(ctx, "c", 2))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		listed, err := rt.Schedules(ctx, "c")
		require.NoError(c, err)
		require.Len(c, listed, 1)
		assert.True(c, listed[0].GetNext().AsTime().Equal(nine.Add(24*time.Hour)), "next %v", listed[0].GetNext().AsTime())
	}, 20*time.Second, time.Millisecond)
}

// TestScheduleCronZoneAndDescriptors: a cron expression without a
// TimeZone is read in UTC, and a descriptor ("@daily") is a cron
// expression too, as README and ScheduleSpec say.
func TestScheduleCronZoneAndDescriptors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rt, _, _ := scheduleConversation(ctx, t, lazarus.Options{}, agent.Scope{})
	for spec, next := range map[lazarus.ScheduleSpec]time.Time{
		{Cron: "0 9 * * *", Text: "x"}:                         schedT0.Add(9 * time.Hour),
		{Cron: "0 9 * * *", TimeZone: "Asia/Tokyo", Text: "x"}: schedT0.Add(24 * time.Hour), // 09:00 in Tokyo is midnight UTC
		{Cron: "@daily", Text: "x"}:                            schedT0.Add(24 * time.Hour),
		{Cron: "@every 90m", Text: "x"}:                        schedT0.Add(90 * time.Minute),
	} {
		sc, err := rt.Schedule(ctx, "c", spec, agent.Scope{})
		require.NoError(t, err, spec.Cron)
		require.True(t, sc.GetNext().AsTime().Equal(next), "%+v: next %v, want %v", spec, sc.GetNext().AsTime(), next)
	}
}

// TestScheduleBadInput: bad specs and unknown conversations are refused
// with sentinels, and nothing is written.
func TestScheduleBadInput(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rt, _, _ := scheduleConversation(ctx, t, lazarus.Options{}, agent.Scope{})
	for name, spec := range map[string]lazarus.ScheduleSpec{
		"bad cron":     {Cron: "every tuesday", Text: "x"},
		"six fields":   {Cron: "0 0 9 * * *", Text: "x"},
		"zone in cron": {Cron: "CRON_TZ=Asia/Tokyo 0 9 * * *", Text: "x"},
		"TZ= in cron":  {Cron: "TZ=Asia/Tokyo 0 9 * * *", Text: "x"},
		"unknown zone": {Cron: "0 9 * * *", TimeZone: "Mars/Olympus", Text: "x"},
		// Not an IANA name: the zone of whichever machine computes an
		// occurrence (time.LoadLocation takes it so).
		"Local zone":      {Cron: "0 9 * * *", TimeZone: "Local", Text: "x"},
		"zone, no cron":   {After: time.Minute, TimeZone: "UTC", Text: "x"},
		"no time":         {Text: "x"},
		"two times":       {After: time.Minute, Cron: "* * * * *", Text: "x"},
		"cron and every":  {Every: time.Minute, Cron: "* * * * *", Text: "x"},
		"tiny interval":   {Every: time.Millisecond, Text: "x"},
		"tiny @every":     {Cron: "@every 1ms", Text: "x"},
		"zero @every":     {Cron: "@every 0s", Text: "x"},
		"negative @every": {Cron: " @every -1h", Text: "x"},
		"negative delay":  {After: -time.Minute, Text: "x"},
		"no text":         {After: time.Minute},
	} {
		_, err := rt.Schedule(ctx, "c", spec, agent.Scope{})
		require.ErrorIs(t, err, lazarus.ErrBadSchedule, name)
		require.ErrorIs(t, err, journal.ErrInvalid, name)
	}
	_, err := rt.Schedule(ctx, "c", lazarus.ScheduleSpec{At: schedT0.Add(-time.Second), Text: "x"}, agent.Scope{})
	require.ErrorIs(t, err, lazarus.ErrScheduleInPast)
	require.ErrorIs(t, err, journal.ErrInvalid)
	_, err = rt.Schedule(ctx, "nobody", lazarus.ScheduleSpec{After: time.Minute, Text: "x"}, agent.Scope{})
	require.ErrorIs(t, err, journal.ErrNotFound)
	require.ErrorIs(t, rt.CancelSchedule(ctx, "c", "nope"), lazarus.ErrNoSchedule)
	listed, err := rt.Schedules(ctx, "c")
	require.NoError(t, err)
	require.Empty(t, listed)

	// The Store's limit is bad input too, with the same sentinels.
	for i := range journal.MaxSchedulesPerConversation {
		_, err := rt.Schedule(ctx, "c", lazarus.ScheduleSpec{After: time.Hour + time.Duration(i)*time.Second, Text: "x"}, agent.Scope{})
		require.NoError(t, err)
	}
	_, err = rt.Schedule(ctx, "c", lazarus.ScheduleSpec{After: time.Hour, Text: "one too many"}, agent.Scope{})
	require.ErrorIs(t, err, lazarus.ErrBadSchedule)
	require.ErrorIs(t, err, journal.ErrInvalid)
	listed, err = rt.Schedules(ctx, "c")
	require.NoError(t, err)
	require.Len(t, listed, journal.MaxSchedulesPerConversation)
}

// TestScheduleGoesWithTheConversation: a delete removes the conversation's
// schedules, and its id takes no new one; listing or cancelling its
// schedules afterwards fails with journal.ErrDeleted, as Delete promises,
// not as a conversation without schedules.
func TestScheduleGoesWithTheConversation(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rt, _, clock := scheduleConversation(ctx, t, lazarus.Options{}, agent.Scope{})
	_, err := rt.Schedule(ctx, "c", lazarus.ScheduleSpec{After: time.Minute, Text: "x"}, agent.Scope{})
	require.NoError(t, err)
	sc, err := rt.Schedule(ctx, "c", lazarus.ScheduleSpec{ID: "s", Every: time.Hour, Text: "y"}, agent.Scope{})
	require.NoError(t, err)
	require.NoError(t, rt.Delete(ctx, "c"))
	listed, err := rt.Schedules(ctx, "c")
	require.ErrorIs(t, err, journal.ErrDeleted)
	require.Empty(t, listed)
	err = rt.CancelSchedule(ctx, "c", sc.GetId())
	require.ErrorIs(t, err, journal.ErrDeleted)
	require.NotErrorIs(t, err, lazarus.ErrNoSchedule)
	// An unknown conversation still has no schedules, and no such schedule.
	listed, err = rt.Schedules(ctx, "never")
	require.NoError(t, err)
	require.Empty(t, listed)
	require.ErrorIs(t, rt.CancelSchedule(ctx, "never", "s"), lazarus.ErrNoSchedule)
	_, err = rt.Schedule(ctx, "c", lazarus.ScheduleSpec{After: time.Minute, Text: "x"}, agent.Scope{})
	require.ErrorIs(t, err, journal.ErrDeleted)
	require.Eventually(t, func() bool { return !slices.ContainsFunc(clock.Dues(), schedT0.Add(time.Minute).Equal) }, 20*time.Second, time.Millisecond,
		"the timer went with it")
}

// TestScheduleToolLetsTheModelWakeItself: with Options.ScheduleTools, the
// model schedules its own wake-up through a tool call.
func TestScheduleToolLetsTheModelWakeItself(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	clock := actorstest.NewManualClock(schedT0)
	rt, model := scheduleRuntime(t, lazarus.Options{Clock: clock, ScheduleTools: true})
	model.Push("c",
		agent.Reply("", agent.Call(lazarus.ScheduleToolName, `{"text":"check the deploy","delay_seconds":600}`)),
		agent.Text("I will check in ten minutes."))
	_, err := rt.Send(ctx, "c", "watch the deploy", agent.Scope{UserID: "alice"})
	require.NoError(t, err)
	require.NoError(t, model.WaitCalls(ctx, "c", 2))
	listed, err := rt.Schedules(ctx, "c")
	require.NoError(t, err)
	require.Len(t, listed, 1)
	require.Equal(t, "alice", listed[0].GetAuthor().GetUserId(), "scheduled for the turn's requester")
	require.True(t, strings.HasPrefix(listed[0].GetId(), "sch-"))
	evs, err := rt.History(ctx, "c", 0, 0)
	require.NoError(t, err)
	var result string
	for _, ev := range evs {
		if r := ev.GetToolResult(); r != nil {
			result = r.GetOutcome().String()
		}
	}
	require.Contains(t, result, listed[0].GetId(), "the tool answers with the schedule's id")

	advanceWhenArmed(t, clock, schedT0.Add(10*time.Minute))
	require.NoError(t, model.WaitCalls(ctx, "c", 3))
	require.Equal(t, []string{"check the deploy"}, wakes(ctx, t, rt, "c"))
}

// TestScheduleWakeSurvivesAKill: the actor of a conversation is killed
// while the turn a wake started runs; the revival re-runs that turn from
// the log, and the occurrence, recorded with its message, is not fired
// again, even once the expiry actor's re-hand time passes.
func TestScheduleWakeSurvivesAKill(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rt, model, clock := scheduleConversation(ctx, t, lazarus.Options{}, agent.Scope{})
	_, err := rt.Schedule(ctx, "c", lazarus.ScheduleSpec{After: time.Minute, Text: "wake"}, agent.Scope{})
	require.NoError(t, err)
	held := model.Hold("c")
	advanceWhenArmed(t, clock, schedT0.Add(time.Minute))
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatal("the wake's turn did not start")
	}
	require.True(t, rt.Kill("c"))
	model.Release("c")
	require.NoError(t, rt.Wake(ctx, "c"))
	require.NoError(t, model.WaitCalls(ctx, "c", 3), "the wake's turn runs again after the kill")
	// The commit report removed the timer the expiry actor had moved to
	// its re-hand time (its default reply timeout, 30s after the fire):
	// the recorded occurrence is not handed over again.
	rehand := schedT0.Add(time.Minute + 30*time.Second)
	require.Eventually(t, func() bool { return !slices.ContainsFunc(clock.Dues(), rehand.Equal) }, 20*time.Second, time.Millisecond)
	clock.Advance(time.Minute)
	require.NoError(t, rt.Wake(ctx, "c"))
	require.Equal(t, []string{"wake"}, wakes(ctx, t, rt, "c"))
	listed, err := rt.Schedules(ctx, "c")
	require.NoError(t, err)
	require.Empty(t, listed)
}

// TestScheduleOfAnEndedConversationGoes: an ended conversation takes no new
// schedule; an occurrence of an older one due after End writes nothing, and
// the schedule is removed instead of being handed again.
func TestScheduleOfAnEndedConversationGoes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rt, _, clock := scheduleConversation(ctx, t, lazarus.Options{}, agent.Scope{})
	_, err := rt.Schedule(ctx, "c", lazarus.ScheduleSpec{After: time.Minute, Text: "x"}, agent.Scope{})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return rt.End(ctx, "c") == nil }, 20*time.Second, time.Millisecond, "ends once at rest")
	_, err = rt.Schedule(ctx, "c", lazarus.ScheduleSpec{After: time.Minute, Text: "y"}, agent.Scope{})
	require.ErrorIs(t, err, journal.ErrEnded, "an ended conversation takes no new schedule")
	before, err := rt.Store().LastSeq(ctx, "c")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return slices.ContainsFunc(clock.Dues(), schedT0.Add(time.Minute).Equal) }, 20*time.Second, time.Millisecond, "armed")
	clock.Advance(time.Minute)
	require.Eventually(t, func() bool {
		listed, err := rt.Schedules(ctx, "c")
		return err == nil && len(listed) == 0
	}, 20*time.Second, time.Millisecond, "the schedule of an ended conversation is removed when it comes due")
	after, err := rt.Store().LastSeq(ctx, "c")
	require.NoError(t, err)
	require.Equal(t, before, after, "nothing written to an ended conversation")
}

// TestScheduleToolBadArgumentsAreBadInput: the schedule_wakeup tool refuses
// arguments that cannot be a schedule with ErrBadSchedule and
// journal.ErrInvalid, as Schedule does, whatever the argument: an "at"
// that is not RFC 3339, a delay or an interval too long for a
// time.Duration (converted, it was implementation-dependent: on amd64 a
// negative delay), and nothing is scheduled.
func TestScheduleToolBadArgumentsAreBadInput(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rt, _, _ := scheduleConversation(ctx, t, lazarus.Options{ScheduleTools: true}, agent.Scope{UserID: "alice"})
	tool, ok := rt.Tool(lazarus.ScheduleToolName)
	require.True(t, ok)
	for name, args := range map[string]string{
		"at not RFC 3339":    `{"text":"x","at":"tomorrow"}`,
		"delay too long":     `{"text":"x","delay_seconds":1e12}`,
		"interval too long":  `{"text":"x","every_seconds":1e300}`,
		"delay, interval":    `{"text":"x","delay_seconds":60,"every_seconds":1e19}`,
		"negative delay":     `{"text":"x","delay_seconds":-60}`,
		"interval too short": `{"text":"x","every_seconds":0.5}`,
		// Below a nanosecond: not read as no interval (nor no delay).
		"interval far too short": `{"text":"x","delay_seconds":60,"every_seconds":1e-10}`,
		"delay far too short":    `{"text":"x","delay_seconds":1e-10,"every_seconds":60}`,
	} {
		_, err := tool.Run(ctx, agent.Invocation{ConversationID: "c", ToolCallID: "call-" + strings.ReplaceAll(name, " ", "-"),
			Name: lazarus.ScheduleToolName, Arguments: args, Scope: agent.Scope{UserID: "alice"}})
		require.ErrorIs(t, err, lazarus.ErrBadSchedule, name)
		require.ErrorIs(t, err, journal.ErrInvalid, name)
	}
	listed, err := rt.Schedules(ctx, "c")
	require.NoError(t, err)
	require.Empty(t, listed, "nothing scheduled")
}

// TestSchedulesStayThroughARewindAndAreNotForked: schedules are the
// conversation's, not its log's: a rewind below the point they were made
// leaves them, and a fork copies none.
func TestSchedulesStayThroughARewindAndAreNotForked(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	clock := actorstest.NewManualClock(schedT0)
	rt, model := scheduleRuntime(t, lazarus.Options{Clock: clock})
	model.Push("c", scripted.Text("hello"))
	_, err := rt.SendAndWait(ctx, "c", "hi", agent.Scope{}) // 1, 2
	require.NoError(t, err)
	s, err := rt.Schedule(ctx, "c", lazarus.ScheduleSpec{After: time.Minute, Text: "x"}, agent.Scope{})
	require.NoError(t, err)

	require.NoError(t, rt.Rewind(ctx, "c", 0, lazarus.RewindOptions{}, agent.Scope{})) // 3
	listed, err := rt.Schedules(ctx, "c")
	require.NoError(t, err)
	require.Len(t, listed, 1, "the rewind leaves the schedule")
	require.Equal(t, s.GetId(), listed[0].GetId())

	require.NoError(t, rt.Fork(ctx, "c", 2, "f"))
	listed, err = rt.Schedules(ctx, "f")
	require.NoError(t, err)
	require.Empty(t, listed, "the fork copies no schedule")
	listed, err = rt.Schedules(ctx, "c")
	require.NoError(t, err)
	require.Len(t, listed, 1, "the source keeps its own")
}

// fireLostReplyStore commits the first request that records the fire of
// a schedule and then reports it as journal.ErrUnknownOutcome.
type fireLostReplyStore struct {
	*memjournal.Store
	lost atomic.Bool
}

func (s *fireLostReplyStore) AppendBatch(ctx context.Context, reqs []*messages.AppendRequest) []journal.AppendResult {
	out := s.Store.AppendBatch(ctx, reqs)
	for i, req := range reqs {
		if out[i].Err == nil && req.GetScheduleFire() != nil && s.lost.CompareAndSwap(false, true) {
			out[i] = journal.AppendResult{Err: fmt.Errorf("test: connection lost during COMMIT: %w", journal.ErrUnknownOutcome)}
		}
	}
	return out
}

// TestScheduleWakeOfUnknownOutcomeRunsItsTurn: a wake whose write landed
// while the Store reported journal.ErrUnknownOutcome stopped its
// activation; the delivery sends the same wake again, whose new activation
// finds the message in the log and runs its turn. Before, the delivery
// counted a failure, the re-hand found the one-shot schedule gone, and the
// turn the message owed waited for the conversation's next command.
func TestScheduleWakeOfUnknownOutcomeRunsItsTurn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := &fireLostReplyStore{Store: memjournal.New(memjournal.Options{})}
	rt, model, clock := scheduleConversation(ctx, t, lazarus.Options{Store: st}, agent.Scope{})

	_, err := rt.Schedule(ctx, "c", lazarus.ScheduleSpec{After: 10 * time.Minute, Text: "one"}, agent.Scope{})
	require.NoError(t, err)
	clock.Advance(10*time.Minute - time.Second)
	advanceWhenArmed(t, clock, schedT0.Add(10*time.Minute))
	require.NoError(t, model.WaitCalls(ctx, "c", 2), "the wake's turn runs")
	require.True(t, st.lost.Load(), "the wake's write was reported of unknown outcome")
	require.Equal(t, []string{"one"}, wakes(ctx, t, rt, "c"), "in the log once")
	listed, err := rt.Schedules(ctx, "c")
	require.NoError(t, err)
	require.Empty(t, listed, "the one-shot schedule is gone")
}

// TestScheduleToolAtInThePast: the tool's "at" must be after now, and the
// first instant of year 1 is not: ErrScheduleInPast, alone or before an
// interval, and nothing is scheduled. (It was read as Go's zero time, no
// at: with every_seconds, a schedule every hour from now was made.)
func TestScheduleToolAtInThePast(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rt, _, _ := scheduleConversation(ctx, t, lazarus.Options{ScheduleTools: true}, agent.Scope{UserID: "alice"})
	tool, ok := rt.Tool(lazarus.ScheduleToolName)
	require.True(t, ok)
	for i, args := range []string{
		`{"text":"x","at":"0001-01-01T00:00:00Z"}`,
		`{"text":"x","at":"0001-01-01T00:00:00Z","every_seconds":3600}`,
	} {
		_, err := tool.Run(ctx, agent.Invocation{ConversationID: "c", ToolCallID: fmt.Sprint("call-", i),
			Name: lazarus.ScheduleToolName, Arguments: args, Scope: agent.Scope{UserID: "alice"}})
		require.ErrorIs(t, err, lazarus.ErrScheduleInPast, args)
		require.ErrorIs(t, err, journal.ErrInvalid, args)
	}
	listed, err := rt.Schedules(ctx, "c")
	require.NoError(t, err)
	require.Empty(t, listed, "nothing scheduled")
}

// TestScheduleTakesOnlyTextsItsWakeCanWrite: a schedule's text must fit the
// event each occurrence writes (the wake's request id, time, seq and
// author besides it), not only the schedule's record: the longest text
// Schedule takes fires and starts its turn, and one byte more is
// ErrBadSchedule, nothing stored. (A text that fit the record but not the
// event was taken, and each occurrence then failed as bad input: the
// schedule never fired, and was handed again forever.)
func TestScheduleTakesOnlyTextsItsWakeCanWrite(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	alice := agent.Scope{UserID: "alice"}
	rt, model, clock := scheduleConversation(ctx, t, lazarus.Options{}, alice)
	spec := func(n int) lazarus.ScheduleSpec {
		return lazarus.ScheduleSpec{ID: "big", After: 10 * time.Minute, Text: strings.Repeat("a", n)}
	}
	// The longest text taken, by bisection between one that is taken and
	// one the record refuses.
	lo, hi := 1<<19, journal.MaxEventBytes
	for lo+1 < hi {
		mid := (lo + hi) / 2
		_, err := rt.Schedule(ctx, "c", spec(mid), alice)
		if err == nil {
			lo = mid
			continue
		}
		require.ErrorIs(t, err, lazarus.ErrBadSchedule)
		require.ErrorIs(t, err, journal.ErrInvalid)
		hi = mid
	}
	_, err := rt.Schedule(ctx, "c", spec(lo), alice)
	require.NoError(t, err)
	_, err = rt.Schedule(ctx, "c", spec(lo+1), alice)
	require.ErrorIs(t, err, lazarus.ErrBadSchedule)
	listed, err := rt.Schedules(ctx, "c")
	require.NoError(t, err)
	require.Len(t, listed, 1)
	require.Len(t, listed[0].GetPayload().GetContent()[0].GetText(), lo, "the refused one changed nothing")

	advanceWhenArmed(t, clock, schedT0.Add(10*time.Minute))
	require.NoError(t, model.WaitCalls(ctx, "c", 2), "the wake of the longest text starts a turn")
	require.Len(t, wakes(ctx, t, rt, "c"), 1)
}

// TestScheduleListToolBoundedByResultBytes: list_wakeups over schedules
// whose texts together exceed agent.MaxResultBytes lists the first ones
// that fit, by schedule_id, and says how many it left out, within the
// bound. Before, it returned every schedule as one array of about 800 KB
// here, which the tool runner turns into a CodeTooLarge error: the model
// could see none of them.
func TestScheduleListToolBoundedByResultBytes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	alice := agent.Scope{UserID: "alice"}
	rt, _, _ := scheduleConversation(ctx, t, lazarus.Options{ScheduleTools: true}, alice)
	const n, textBytes = 8, 100_000
	for i := range n {
		text := strings.Repeat(string(rune('a'+i)), textBytes)
		_, err := rt.Schedule(ctx, "c", lazarus.ScheduleSpec{ID: fmt.Sprintf("s%d", i), After: time.Hour, Text: text}, alice)
		require.NoError(t, err)
	}
	tool, ok := rt.Tool(lazarus.ListSchedulesToolName)
	require.True(t, ok)
	out, err := tool.Run(ctx, agent.Invocation{ConversationID: "c", ToolCallID: "call-list", Name: lazarus.ListSchedulesToolName, Arguments: `{}`, Scope: alice})
	require.NoError(t, err)
	require.LessOrEqual(t, len(out), agent.MaxResultBytes, "the result fits a tool result")
	var got struct {
		Wakeups []struct {
			ID   string `json:"schedule_id"`
			Text string `json:"text"`
		} `json:"wakeups"`
		Omitted int    `json:"omitted"`
		Note    string `json:"note"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	// Five views of about 100 KB fit 512 KiB, six do not.
	require.Len(t, got.Wakeups, 5)
	for i, w := range got.Wakeups {
		require.Equal(t, fmt.Sprintf("s%d", i), w.ID, "the first ones by id")
		require.Len(t, w.Text, textBytes, "listed whole")
	}
	require.Equal(t, n-5, got.Omitted, "the others are counted")
	require.NotEmpty(t, got.Note)

	// Once they fit, the plain array as before.
	for i := 3; i < n; i++ {
		require.NoError(t, rt.CancelSchedule(ctx, "c", fmt.Sprintf("s%d", i)))
	}
	out, err = tool.Run(ctx, agent.Invocation{ConversationID: "c", ToolCallID: "call-list-2", Name: lazarus.ListSchedulesToolName, Arguments: `{}`, Scope: alice})
	require.NoError(t, err)
	var views []map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &views))
	require.Len(t, views, 3)
}

// TestScheduleBadIDIsBadSchedule: a ScheduleSpec.ID that breaks the id
// rules (too long, not UTF-8) is bad input as any other of the spec:
// ErrBadSchedule and journal.ErrInvalid, nothing stored. (It wrapped
// journal.ErrInvalid alone, where README and the doc of Schedule promise
// ErrBadSchedule for a spec that cannot be a schedule.)
func TestScheduleBadIDIsBadSchedule(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rt, _, _ := scheduleConversation(ctx, t, lazarus.Options{}, agent.Scope{})
	for name, id := range map[string]string{
		"too long":  strings.Repeat("x", journal.MaxIDBytes+1),
		"not UTF-8": "a\xffb",
	} {
		_, err := rt.Schedule(ctx, "c", lazarus.ScheduleSpec{ID: id, After: time.Minute, Text: "x"}, agent.Scope{})
		require.ErrorIs(t, err, lazarus.ErrBadSchedule, name)
		require.ErrorIs(t, err, journal.ErrInvalid, name)
	}
	listed, err := rt.Schedules(ctx, "c")
	require.NoError(t, err)
	require.Empty(t, listed, "nothing was stored")
}

// TestScheduleCronEveryOfAFractionOfASecondIsRefused: a cron "@every" that
// is not a whole number of seconds is ErrBadSchedule, nothing stored, as
// ScheduleSpec.Cron says: robfig/cron truncates it to the second, so
// "@every 1500ms" was taken and fired every second. A whole number of
// seconds is taken, its next occurrence exactly that far.
func TestScheduleCronEveryOfAFractionOfASecondIsRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rt, _, _ := scheduleConversation(ctx, t, lazarus.Options{}, agent.Scope{})
	for _, expr := range []string{"@every 1500ms", "@every 1m0.5s", " @every 2h0m0.000000001s"} {
		_, err := rt.Schedule(ctx, "c", lazarus.ScheduleSpec{Cron: expr, Text: "x"}, agent.Scope{})
		require.ErrorIs(t, err, lazarus.ErrBadSchedule, expr)
		require.ErrorIs(t, err, journal.ErrInvalid, expr)
	}
	listed, err := rt.Schedules(ctx, "c")
	require.NoError(t, err)
	require.Empty(t, listed, "nothing was stored")
	sc, err := rt.Schedule(ctx, "c", lazarus.ScheduleSpec{Cron: "@every 1m30s", Text: "x"}, agent.Scope{})
	require.NoError(t, err)
	require.True(t, sc.GetNext().AsTime().Equal(schedT0.Add(90*time.Second)), "next %v", sc.GetNext().AsTime())
}

// TestScheduleToolLongCallIDMakesOneSchedule: the schedule tool names its
// schedule after the call's id, so that a re-run of the call replaces it.
// A call id too long for "sch-" before it (journal.MaxIDBytes) still makes
// a schedule, under an id that fits, and a re-run of that call replaces it
// rather than adding one. (It was refused as a bad id: the model was told
// its wake-up could not be made.)
func TestScheduleToolLongCallIDMakesOneSchedule(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rt, _, _ := scheduleConversation(ctx, t, lazarus.Options{ScheduleTools: true}, agent.Scope{UserID: "alice"})
	tool, ok := rt.Tool(lazarus.ScheduleToolName)
	require.True(t, ok)
	for _, n := range []int{journal.MaxIDBytes - len("sch-"), journal.MaxIDBytes} {
		callID := strings.Repeat("k", n)
		var ids []string
		for _, text := range []string{"first", "again"} {
			out, err := tool.Run(ctx, agent.Invocation{ConversationID: "c", ToolCallID: callID,
				Name: lazarus.ScheduleToolName, Arguments: `{"text":"` + text + `","delay_seconds":600}`, Scope: agent.Scope{UserID: "alice"}})
			require.NoError(t, err, "a call id of %d bytes", n)
			var v struct {
				ID string `json:"schedule_id"`
			}
			require.NoError(t, json.Unmarshal([]byte(out), &v))
			require.LessOrEqual(t, len(v.ID), journal.MaxIDBytes)
			ids = append(ids, v.ID)
		}
		require.Equal(t, ids[0], ids[1], "a re-run of the call names the same schedule")
		listed, err := rt.Schedules(ctx, "c")
		require.NoError(t, err)
		var texts []string
		for _, sc := range listed {
			if sc.GetId() == ids[0] {
				texts = append(texts, lazarus.ScheduleText(sc))
			}
		}
		require.Equal(t, []string{"again"}, texts, "the re-run replaced the schedule")
	}
}
