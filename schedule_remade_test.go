package lazarus_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

// TestScheduleMadeAgainWhileItsLastFireCommitsFires: the expiry actor
// hears of a fire's commit after the Store's commit. A one-shot schedule
// made again under its id in between (its last occurrence fired and
// removed it; Schedule stores and arms the new definition) must still
// fire: the old fire's report, which arrives after the new arm, names the
// old revision and leaves the new timer alone. (It disarmed the schedule:
// the new one stayed in the Store and never fired until a restart.) The
// order is forced: Metrics.ScheduleFired, called in the commit's report
// before the expiry actor is told, holds the report until the schedule is
// made again.
func TestScheduleMadeAgainWhileItsLastFireCommitsFires(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	inCommit, release := make(chan struct{}), make(chan struct{})
	var held atomic.Bool
	metrics := lazarus.Metrics{ScheduleFired: func(o lazarus.ScheduleOutcome) {
		if o == lazarus.ScheduleDelivered && held.CompareAndSwap(false, true) {
			close(inCommit)
			<-release
		}
	}}
	scope := agent.Scope{UserID: "alice"}
	rt, model, clock := scheduleConversation(ctx, t, lazarus.Options{Metrics: metrics}, scope)

	first, err := rt.Schedule(ctx, "c", lazarus.ScheduleSpec{ID: "s", After: 10 * time.Minute, Text: "first"}, scope)
	require.NoError(t, err)
	advanceWhenArmed(t, clock, first.GetNext().AsTime())
	select {
	case <-inCommit:
	case <-ctx.Done():
		t.Fatal("the first occurrence was not committed")
	}
	listed, err := rt.Schedules(ctx, "c")
	require.NoError(t, err)
	require.Empty(t, listed, "the one-shot's fire removed it")

	second, err := rt.Schedule(ctx, "c", lazarus.ScheduleSpec{ID: "s", After: 20 * time.Minute, Text: "second"}, scope)
	require.NoError(t, err)
	require.NotEqual(t, first.GetRevision(), second.GetRevision())
	close(release) // the first fire's report now follows the second's arm
	require.NoError(t, model.WaitCalls(ctx, "c", 2), "the first wake's turn")

	advanceWhenArmed(t, clock, second.GetNext().AsTime())
	require.NoError(t, model.WaitCalls(ctx, "c", 3), "the schedule made again fires")
	require.Equal(t, []string{"first", "second"}, wakes(ctx, t, rt, "c"))
}

// afterDeleteStore calls after once a DeleteSchedule succeeded, before it
// returns.
type afterDeleteStore struct {
	*memjournal.Store
	after func()
}

func (s *afterDeleteStore) DeleteSchedule(ctx context.Context, conv, id string) error {
	err := s.Store.DeleteSchedule(ctx, conv, id)
	if err == nil && s.after != nil {
		s.after()
	}
	return err
}

// TestScheduleMadeAgainWhileCancelledFires: CancelSchedule tells the
// expiry actor after its delete; a schedule made again under the id in
// between (stored and armed first) must still fire: the cancel's disarm
// names the revision it cancelled and leaves the new timer alone. (It
// removed the new timer.) The order is forced by a Store that makes the
// schedule again inside the cancel's delete.
func TestScheduleMadeAgainWhileCancelledFires(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := &afterDeleteStore{Store: memjournal.New(memjournal.Options{})}
	scope := agent.Scope{UserID: "alice"}
	rt, model, clock := scheduleConversation(ctx, t, lazarus.Options{Store: st}, scope)

	first, err := rt.Schedule(ctx, "c", lazarus.ScheduleSpec{ID: "s", After: 10 * time.Minute, Text: "first"}, scope)
	require.NoError(t, err)
	var second *messages.Schedule
	st.after = func() {
		st.after = nil
		second, err = rt.Schedule(ctx, "c", lazarus.ScheduleSpec{ID: "s", After: 20 * time.Minute, Text: "second"}, scope)
		require.NoError(t, err)
	}
	require.NoError(t, rt.CancelSchedule(ctx, "c", "s"))
	require.NotNil(t, second)
	require.NotEqual(t, first.GetRevision(), second.GetRevision())

	advanceWhenArmed(t, clock, second.GetNext().AsTime())
	require.NoError(t, model.WaitCalls(ctx, "c", 2), "the schedule made again fires")
	require.Equal(t, []string{"second"}, wakes(ctx, t, rt, "c"))
}

// readHookStore calls onRead, once set, after a ConversationSchedules read
// that found no schedule of id, before that read returns.
type readHookStore struct {
	*memjournal.Store
	id     string
	onRead atomic.Pointer[func()]
}

func (s *readHookStore) ConversationSchedules(ctx context.Context, conv string) ([]*messages.Schedule, error) {
	all, err := s.Store.ConversationSchedules(ctx, conv)
	if err == nil && !slices.ContainsFunc(all, func(sc *messages.Schedule) bool { return sc.GetId() == s.id }) {
		if f := s.onRead.Swap(nil); f != nil {
			(*f)()
		}
	}
	return all, err
}

// TestScheduleMadeAgainAfterItsDeliveryReadItGoneFires: a delivery that
// reads its schedule gone tells the expiry actor after the read; a
// schedule made again under the id in between (stored and armed first)
// must still fire: the delivery's disarm names the occurrence it was
// handed, and the timer, armed since, is kept. (It was removed.) The order
// is forced by a Store that makes the schedule again inside the
// delivery's read.
func TestScheduleMadeAgainAfterItsDeliveryReadItGoneFires(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := &readHookStore{Store: memjournal.New(memjournal.Options{}), id: "s"}
	scope := agent.Scope{UserID: "alice"}
	rt, model, clock := scheduleConversation(ctx, t, lazarus.Options{Store: st}, scope)

	first, err := rt.Schedule(ctx, "c", lazarus.ScheduleSpec{ID: "s", After: 10 * time.Minute, Text: "first"}, scope)
	require.NoError(t, err)
	// Gone behind the Runtime's back: its timer stays armed.
	require.NoError(t, st.Store.DeleteSchedule(ctx, "c", "s"))
	made := make(chan *messages.Schedule, 1)
	again := func() {
		sc, err := rt.Schedule(ctx, "c", lazarus.ScheduleSpec{ID: "s", After: 20 * time.Minute, Text: "second"}, scope)
		if err != nil {
			t.Errorf("schedule again: %v", err)
		}
		made <- sc
	}
	st.onRead.Store(&again)
	advanceWhenArmed(t, clock, first.GetNext().AsTime())
	var second *messages.Schedule
	select {
	case second = <-made:
	case <-ctx.Done():
		t.Fatal("the delivery did not read the schedule")
	}
	require.NotNil(t, second)

	advanceWhenArmed(t, clock, second.GetNext().AsTime())
	require.NoError(t, model.WaitCalls(ctx, "c", 2), "the schedule made again fires")
	require.Equal(t, []string{"second"}, wakes(ctx, t, rt, "c"))
}
