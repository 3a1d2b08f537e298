package actors_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/actors/actorstest"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

type fired struct {
	conv, id string
	at       time.Time
}

// scheduleHarness is an expiry harness whose Fire calls land in a channel.
func scheduleHarness(t *testing.T, store *memjournal.Store) (*expiryHarness, chan fired) {
	t.Helper()
	h := newExpiryHarness(t, store, func(sys *actor.ActorSystem) *actor.PID { return newFakeJournal(t, sys, nil).pid })
	ch := make(chan fired, 100)
	h.opts.ReplyTimeout = time.Minute
	h.opts.Fire = func(conv, id string, at time.Time) { ch <- fired{conv, id, at} }
	return h, ch
}

func nextFire(t *testing.T, ch chan fired) fired {
	t.Helper()
	select {
	case f := <-ch:
		return f
	case <-time.After(replyWait):
		t.Fatal("no schedule fired")
		return fired{}
	}
}

func requireNoFire(t *testing.T, ch chan fired) {
	t.Helper()
	select {
	case f := <-ch:
		t.Fatalf("unexpected fire %v", f)
	default:
	}
}

func putSchedule(t *testing.T, s *memjournal.Store, conv, id string, next time.Time) {
	t.Helper()
	_, err := s.Append(t.Context(), &messages.AppendRequest{ConversationId: conv, Events: []*messages.Event{{Body: &messages.Event_UserMsg{UserMsg: &messages.UserMessage{
		Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: "hi"}}}}}}}})
	if err != nil {
		require.ErrorContains(t, err, "after 0") // the conversation exists already
	}
	require.NoError(t, s.PutSchedule(t.Context(), &messages.Schedule{Id: id, ConversationId: conv, Next: timestamppb.New(next), Every: durationpb.New(time.Hour),
		Payload: &messages.UserMessage{Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: "wake"}}}}}))
}

// TestExpirySchedulesRebuildAndFireOnce: schedules are read from the Store
// when the actor starts; one whose time passed while nothing ran fires
// once, at once; the others at their time, not before.
func TestExpirySchedulesRebuildAndFireOnce(t *testing.T) {
	store := memjournal.New(memjournal.Options{})
	putSchedule(t, store, "c", "missed", expiryT0.Add(-3*time.Hour))
	putSchedule(t, store, "c", "later", expiryT0.Add(10*time.Second))
	h, ch := scheduleHarness(t, store)
	h.start()
	require.Equal(t, fired{"c", "missed", expiryT0.Add(-3 * time.Hour)}, nextFire(t, ch), "named by its stored occurrence")
	h.waitArmed(t, expiryT0.Add(10*time.Second))
	requireNoFire(t, ch)
	h.clock.Advance(10*time.Second - time.Nanosecond)
	requireNoFire(t, ch)
	h.clock.Advance(time.Nanosecond)
	require.Equal(t, fired{"c", "later", expiryT0.Add(10 * time.Second)}, nextFire(t, ch))
}

// TestExpiryScheduleFiresWithinMaxTimerSpanOfAClockJump: an occurrence an
// hour away, then the wall clock steps two hours forward while the timers'
// elapsed time does not move: it fires once MaxTimerSpan has elapsed.
func TestExpiryScheduleFiresWithinMaxTimerSpanOfAClockJump(t *testing.T) {
	h, ch := scheduleHarness(t, memjournal.New(memjournal.Options{}))
	h.start()
	at := expiryT0.Add(time.Hour)
	h.sys.Root.Send(h.pid, &messages.ScheduleArm{ConversationId: "c", ScheduleId: "s", Next: timestamppb.New(at)})
	h.waitArmed(t, at)
	h.clock.Jump(2 * time.Hour)
	h.clock.Advance(actors.MaxTimerSpan - time.Nanosecond)
	requireNoFire(t, ch)
	h.clock.Advance(time.Nanosecond)
	require.Equal(t, fired{"c", "s", at}, nextFire(t, ch))
}

// TestExpiryScheduleArmMovesAndDisarmRemoves: the commit report of a fire
// moves the timer to the next occurrence; without one, the occurrence is
// handed to Fire again after ReplyTimeout; a disarm ends it.
func TestExpiryScheduleArmMovesAndDisarmRemoves(t *testing.T) {
	h, ch := scheduleHarness(t, memjournal.New(memjournal.Options{}))
	h.start()
	at := expiryT0.Add(5 * time.Second)
	h.sys.Root.Send(h.pid, &messages.ScheduleArm{ConversationId: "c", ScheduleId: "s", Next: timestamppb.New(at)})
	h.waitArmed(t, at)
	h.clock.Advance(5 * time.Second)
	require.Equal(t, fired{"c", "s", at}, nextFire(t, ch))

	// No report: handed again after ReplyTimeout, with the same occurrence.
	h.waitArmed(t, at.Add(time.Minute))
	h.clock.Advance(time.Minute)
	require.Equal(t, fired{"c", "s", at}, nextFire(t, ch))

	// The report of the recorded fire moves it to the next occurrence.
	next := at.Add(time.Hour)
	h.sys.Root.Send(h.pid, &messages.ScheduleArm{ConversationId: "c", ScheduleId: "s", Next: timestamppb.New(next)})
	h.waitArmed(t, next)
	requireNoFire(t, ch)
	h.sys.Root.Send(h.pid, &messages.ScheduleDisarm{ConversationId: "c", ScheduleId: "s"})
	require.Eventually(t, func() bool { return h.clock.Timers() == 0 }, replyWait, time.Millisecond, "no timer once disarmed")
	h.clock.Advance(2 * time.Hour)
	requireNoFire(t, ch)

	// A bad arm is ignored.
	h.sys.Root.Send(h.pid, &messages.ScheduleArm{ConversationId: "c", ScheduleId: ""})
	h.sys.Root.Send(h.pid, &messages.ScheduleArm{ConversationId: "c", ScheduleId: "x"})
	h.clock.Advance(time.Hour)
	requireNoFire(t, ch)
}

// TestExpirySchedulesOnlyOwned: in a cluster the schedules are partitioned
// like the deadlines (ExpiryOptions.Owns): a member arms only those of the
// conversations it owns, from the Store and from ScheduleArm alike, and
// ExpiryRebuild arms what it owns after a membership change.
func TestExpirySchedulesOnlyOwned(t *testing.T) {
	store := memjournal.New(memjournal.Options{})
	putSchedule(t, store, "mine", "s-mine", expiryT0.Add(10*time.Second))
	putSchedule(t, store, "theirs", "s-theirs", expiryT0.Add(5*time.Second))
	var theirsToo atomic.Bool
	h, ch := scheduleHarness(t, store)
	h.opts.Owns = func(conv string) bool { return conv == "mine" || theirsToo.Load() }
	h.start()
	h.waitArmed(t, expiryT0.Add(10*time.Second))
	h.sys.Root.Send(h.pid, &messages.ScheduleArm{ConversationId: "theirs", ScheduleId: "s-other", Next: timestamppb.New(expiryT0.Add(time.Second))})
	h.clock.Advance(10 * time.Second)
	require.Equal(t, fired{"mine", "s-mine", expiryT0.Add(10 * time.Second)}, nextFire(t, ch), "another member's schedules are not armed")
	requireNoFire(t, ch)

	theirsToo.Store(true)
	h.sys.Root.Send(h.pid, &actors.ExpiryRebuild{})
	got := []fired{nextFire(t, ch), nextFire(t, ch)}
	require.ElementsMatch(t, []fired{{"mine", "s-mine", expiryT0.Add(10 * time.Second)}, {"theirs", "s-theirs", expiryT0.Add(5 * time.Second)}}, got,
		"after the rebuild the member fires what it owns now, read from the Store")
}

// TestExpirySameScheduleIDInTwoConversations: schedule ids are per
// conversation. Two conversations' schedules "daily" have a timer each:
// both fire at their own times, the report of one's fire (ScheduleArm)
// leaves the other's occurrence in flight, and a disarm of one leaves the
// other armed.
func TestExpirySameScheduleIDInTwoConversations(t *testing.T) {
	store := memjournal.New(memjournal.Options{})
	putSchedule(t, store, "c", "daily", expiryT0.Add(10*time.Second))
	putSchedule(t, store, "d", "daily", expiryT0.Add(20*time.Second))
	h, ch := scheduleHarness(t, store)
	h.start()
	h.waitArmed(t, expiryT0.Add(10*time.Second))
	h.clock.Advance(10 * time.Second)
	require.Equal(t, fired{"c", "daily", expiryT0.Add(10 * time.Second)}, nextFire(t, ch))
	h.waitArmed(t, expiryT0.Add(20*time.Second))
	h.clock.Advance(10 * time.Second)
	require.Equal(t, fired{"d", "daily", expiryT0.Add(20 * time.Second)}, nextFire(t, ch))
	requireNoFire(t, ch)

	// c's fire is recorded; d's is not: d's occurrence is handed again.
	cNext := expiryT0.Add(time.Hour)
	h.sys.Root.Send(h.pid, &messages.ScheduleArm{ConversationId: "c", ScheduleId: "daily", Next: timestamppb.New(cNext)})
	h.waitArmed(t, expiryT0.Add(20*time.Second+time.Minute)) // c's retry, at 10s+1m, is gone
	h.clock.Advance(time.Minute)
	require.Equal(t, fired{"d", "daily", expiryT0.Add(20 * time.Second)}, nextFire(t, ch), "still d's first occurrence")

	// d's is cancelled: c's stays armed, and fires.
	h.sys.Root.Send(h.pid, &messages.ScheduleDisarm{ConversationId: "d", ScheduleId: "daily"})
	h.waitArmed(t, cNext)
	h.clock.Advance(cNext.Sub(h.clock.Now()))
	require.Equal(t, fired{"c", "daily", cNext}, nextFire(t, ch))
	requireNoFire(t, ch)
}

// lateClock is a ManualClock whose timers all go off just as they are
// stopped: stop reports false and the callback runs, as a time.AfterFunc
// timer's does when it fires while Stop is called.
type lateClock struct{ *actorstest.ManualClock }

func (c lateClock) AfterFunc(d time.Duration, f func()) func() bool {
	stop := c.ManualClock.AfterFunc(d, f)
	return func() bool {
		if stop() {
			f()
		}
		return false
	}
}

// TestExpiryIgnoresTheTickOfAReplacedTimer: a timer that went off as the
// actor replaced it delivers its tick after the replacement; the actor
// ignores that tick and keeps exactly one timer armed, the one it
// replaced it with, which a disarm stops. (Every tick was taken for the
// armed timer's: the actor then forgot that timer without stopping it and
// armed another, leaving one timer more armed for good, which a disarm did
// not stop. In a Runtime under load, a re-hand timer stayed armed after
// its occurrence was delivered.)
func TestExpiryIgnoresTheTickOfAReplacedTimer(t *testing.T) {
	h, ch := scheduleHarness(t, memjournal.New(memjournal.Options{}))
	h.opts.Clock = lateClock{h.clock}
	h.start()
	at := expiryT0.Add(10 * time.Second)
	h.sys.Root.Send(h.pid, &messages.ScheduleArm{ConversationId: "c", ScheduleId: "s", Next: timestamppb.New(at)})
	h.waitArmed(t, at)

	// Moved: the timer for at is replaced, and its tick comes after.
	moved := at.Add(10 * time.Second)
	h.sys.Root.Send(h.pid, &messages.ScheduleArm{ConversationId: "c", ScheduleId: "s", Next: timestamppb.New(moved)})
	h.waitArmed(t, moved)
	h.sys.Root.Send(h.pid, &messages.ScheduleDisarm{ConversationId: "c", ScheduleId: "s"})
	require.Eventually(t, func() bool { return h.clock.Timers() == 0 }, replyWait, time.Millisecond,
		"no timer once disarmed; armed: %v", h.clock.Dues())
	h.clock.Advance(time.Hour)
	requireNoFire(t, ch)
}

// TestExpiryScheduleReportOfAReplacedRevisionIsIgnored: a fire's commit
// report is sent after the Store's commit, so the schedule can be made
// again under its id (a new revision, armed) before the report arrives.
// The report of the old revision (a disarm: its last occurrence fired; or
// an arm at its next occurrence) then leaves the new revision's timer
// alone. (The report removed or moved the new timer: on a single node the
// new schedule did not fire until a restart.) A report of the timer's own
// revision, or of a timer whose revision is not known, still applies.
func TestExpiryScheduleReportOfAReplacedRevisionIsIgnored(t *testing.T) {
	h, ch := scheduleHarness(t, memjournal.New(memjournal.Options{}))
	h.start()
	arm := func(rev string, at time.Time, afterFire bool) {
		h.sys.Root.Send(h.pid, &messages.ScheduleArm{ConversationId: "c", ScheduleId: "s", Next: timestamppb.New(at), Revision: rev, AfterFire: afterFire})
	}
	at := expiryT0.Add(5 * time.Second)
	arm("r1", at, false)
	h.waitArmed(t, at)
	h.clock.Advance(5 * time.Second)
	require.Equal(t, fired{"c", "s", at}, nextFire(t, ch))

	// Made again (r2) while r1's last fire commits; r1's report comes after.
	at2 := expiryT0.Add(30 * time.Second)
	arm("r2", at2, false)
	h.waitArmed(t, at2)
	h.sys.Root.Send(h.pid, &messages.ScheduleDisarm{ConversationId: "c", ScheduleId: "s", Revision: "r1"})
	h.clock.Advance(25 * time.Second)
	require.Equal(t, fired{"c", "s", at2}, nextFire(t, ch), "r1's disarm left r2's timer")

	// r1's report of a next occurrence does not move r2's timer either:
	// r2's occurrence is handed again after ReplyTimeout.
	h.waitArmed(t, at2.Add(time.Minute))
	arm("r1", expiryT0.Add(2*time.Hour), true)
	h.clock.Advance(time.Minute)
	require.Equal(t, fired{"c", "s", at2}, nextFire(t, ch), "r1's re-arm left r2's timer")

	// r2's own reports apply.
	next := at2.Add(time.Hour)
	arm("r2", next, true)
	h.waitArmed(t, next)
	h.sys.Root.Send(h.pid, &messages.ScheduleDisarm{ConversationId: "c", ScheduleId: "s", Revision: "r2"})
	require.Eventually(t, func() bool { return h.clock.Timers() == 0 }, replyWait, time.Millisecond, "r2's disarm removes its timer")

	// A timer of no known revision (armed without one, as from the Store)
	// takes any revision's report.
	at3 := h.clock.Now().Add(time.Minute)
	arm("", at3, false)
	h.waitArmed(t, at3)
	h.sys.Root.Send(h.pid, &messages.ScheduleDisarm{ConversationId: "c", ScheduleId: "s", Revision: "r3"})
	require.Eventually(t, func() bool { return h.clock.Timers() == 0 }, replyWait, time.Millisecond, "a report disarms a timer of no known revision")
	h.clock.Advance(time.Hour)
	requireNoFire(t, ch)
}

// TestExpiryScheduleDisarmOfAGoneOccurrenceKeepsALaterArm: a delivery
// that read its schedule gone disarms it naming the occurrence it was
// handed; the schedule made again after that read was armed first, and
// keeps its timer. (The disarm removed it.) A disarm of the occurrence the
// timer still waits on removes it, as does one naming no occurrence.
func TestExpiryScheduleDisarmOfAGoneOccurrenceKeepsALaterArm(t *testing.T) {
	h, ch := scheduleHarness(t, memjournal.New(memjournal.Options{}))
	h.start()
	disarmOf := func(at time.Time) *messages.ScheduleDisarm {
		return &messages.ScheduleDisarm{ConversationId: "c", ScheduleId: "s", Occurrence: timestamppb.New(at)}
	}
	at := expiryT0.Add(5 * time.Second)
	h.sys.Root.Send(h.pid, &messages.ScheduleArm{ConversationId: "c", ScheduleId: "s", Next: timestamppb.New(at)})
	h.waitArmed(t, at)
	h.clock.Advance(5 * time.Second)
	require.Equal(t, fired{"c", "s", at}, nextFire(t, ch))

	// Made again after the delivery read it gone; the disarm comes after.
	at2 := expiryT0.Add(30 * time.Second)
	h.sys.Root.Send(h.pid, &messages.ScheduleArm{ConversationId: "c", ScheduleId: "s", Next: timestamppb.New(at2), Revision: "r2"})
	h.waitArmed(t, at2)
	h.sys.Root.Send(h.pid, disarmOf(at))
	h.clock.Advance(25 * time.Second)
	require.Equal(t, fired{"c", "s", at2}, nextFire(t, ch), "the disarm of the gone occurrence left the new timer")

	// Another occurrence than the one handed out leaves it too; the one
	// handed out removes it.
	h.waitArmed(t, at2.Add(time.Minute))
	h.sys.Root.Send(h.pid, disarmOf(at))
	h.clock.Advance(time.Minute)
	require.Equal(t, fired{"c", "s", at2}, nextFire(t, ch), "handed again: not disarmed")
	h.sys.Root.Send(h.pid, disarmOf(at2))
	require.Eventually(t, func() bool { return h.clock.Timers() == 0 }, replyWait, time.Millisecond, "the disarm of the occurrence handed out removes the timer")
	h.clock.Advance(time.Hour)
	requireNoFire(t, ch)
}
