package lazarus

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/actors/actorstest"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

// afterReadStore runs then, once, right after a ConversationSchedules
// read: the read of a delivery, whose wake is not yet written.
type afterReadStore struct {
	*memjournal.Store
	mu   sync.Mutex
	then func()
}

func (s *afterReadStore) ConversationSchedules(ctx context.Context, conv string) ([]*messages.Schedule, error) {
	out, err := s.Store.ConversationSchedules(ctx, conv)
	s.mu.Lock()
	then := s.then
	s.then = nil
	s.mu.Unlock()
	if then != nil {
		then()
	}
	return out, err
}

// TestFireOfAReplacedScheduleDoesNotLand: a delivery read the schedule,
// then the schedule was replaced by id (or cancelled and made again) with
// another text at the same time, before the delivery's wake was written.
// The wake carries the revision it read, so its write is stale: the old
// text is never written, and the new definition, not consumed by the old
// one's fire (a one-shot's, which removed it), fires with its own text.
// Before, the Store checked the occurrence only, which the new definition
// shared: the old text was written and the new schedule was gone.
func TestFireOfAReplacedScheduleDoesNotLand(t *testing.T) {
	for _, cancel := range []bool{false, true} {
		name := "replaced"
		if cancel {
			name = "cancelled and made again"
		}
		t.Run(name, func(t *testing.T) {
			ctx, stop := context.WithTimeout(context.Background(), 30*time.Second)
			defer stop()
			t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			clock := actorstest.NewManualClock(t0)
			st := &afterReadStore{Store: memjournal.New(memjournal.Options{})}
			rt, err := Open(Options{Model: scripted.New(scripted.Options{}), Store: st, Clock: clock, NoResume: true})
			require.NoError(t, err)
			t.Cleanup(func() { _ = rt.Close() })
			alice := agent.Scope{UserID: "alice"}
			_, err = rt.Send(ctx, "c", "hi", alice)
			require.NoError(t, err)
			at := t0.Add(30 * time.Second) // within actors.MaxTimerSpan: its timer is due at at
			_, err = rt.Schedule(ctx, "c", ScheduleSpec{ID: "s", At: at, Text: "old"}, alice)
			require.NoError(t, err)

			st.mu.Lock()
			st.then = func() {
				if cancel {
					require.NoError(t, rt.CancelSchedule(ctx, "c", "s"))
				}
				_, err := rt.Schedule(ctx, "c", ScheduleSpec{ID: "s", At: at, Text: "new"}, alice)
				require.NoError(t, err)
			}
			st.mu.Unlock()
			// The old definition's occurrence, delivered (the clock is not
			// moved: the expiry actor has not fired it).
			rt.fire(ctx, scheduleFire{"c", "s", at})

			wakeTexts := func() []string {
				evs, err := rt.History(ctx, "c", 0, 0)
				require.NoError(t, err)
				var out []string
				for _, ev := range evs {
					if m := ev.GetUserMsg(); m != nil && strings.HasPrefix(ev.GetRequestId(), "schedule/") {
						out = append(out, m.GetContent()[0].GetText())
					}
				}
				return out
			}
			require.Empty(t, wakeTexts(), "the replaced definition's message is not written")
			all, err := rt.Schedules(ctx, "c")
			require.NoError(t, err)
			require.Len(t, all, 1, "the new definition stays")
			require.Equal(t, "new", ScheduleText(all[0]))
			require.True(t, all[0].GetNext().AsTime().Equal(at))

			// The new definition fires at its time, with its text.
			require.Eventually(t, func() bool { return slices.ContainsFunc(clock.Dues(), at.Equal) }, 20*time.Second, time.Millisecond,
				"the new definition is armed")
			clock.Advance(at.Sub(clock.Now()))
			require.Eventually(t, func() bool { return len(wakeTexts()) > 0 }, 20*time.Second, time.Millisecond)
			require.Equal(t, []string{"new"}, wakeTexts())
			all, err = rt.Schedules(ctx, "c")
			require.NoError(t, err)
			require.Empty(t, all, "the one-shot fired")
		})
	}
}

// TestScheduleMadeAgainAtAWrittenOccurrenceFires: a one-shot fired and its
// message was written; the wall clock then stepped back, and a schedule of
// the same id was made for the same time with another text. Its wake is
// its own request (the wake's request id names the definition), so it is
// written and records the new schedule's fire. Before, its request id was the
// written one's: the conversation answered it from the log without
// recording its fire, and the schedule stayed due, handed again every
// reply timeout, its message never written.
func TestScheduleMadeAgainAtAWrittenOccurrenceFires(t *testing.T) {
	ctx, stop := context.WithTimeout(context.Background(), 30*time.Second)
	defer stop()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := actorstest.NewManualClock(t0)
	rt, err := Open(Options{Model: scripted.New(scripted.Options{}), Clock: clock, NoResume: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = rt.Close() })
	alice := agent.Scope{UserID: "alice"}
	_, err = rt.Send(ctx, "c", "hi", alice)
	require.NoError(t, err)
	at := t0.Add(30 * time.Second) // within actors.MaxTimerSpan: its timer is due at at
	wakeTexts := func() []string {
		evs, err := rt.History(ctx, "c", 0, 0)
		require.NoError(t, err)
		var out []string
		for _, ev := range evs {
			if m := ev.GetUserMsg(); m != nil && strings.HasPrefix(ev.GetRequestId(), "schedule/") {
				out = append(out, m.GetContent()[0].GetText())
			}
		}
		return out
	}
	pending := func() int {
		all, err := rt.Schedules(ctx, "c")
		require.NoError(t, err)
		return len(all)
	}

	_, err = rt.Schedule(ctx, "c", ScheduleSpec{ID: "s", At: at, Text: "old"}, alice)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return slices.ContainsFunc(clock.Dues(), at.Equal) }, 20*time.Second, time.Millisecond, "armed")
	clock.Advance(at.Sub(clock.Now()))
	require.Eventually(t, func() bool { return len(wakeTexts()) == 1 && pending() == 0 }, 20*time.Second, time.Millisecond)

	clock.Jump(-time.Minute)
	_, err = rt.Schedule(ctx, "c", ScheduleSpec{ID: "s", At: at, Text: "new"}, alice)
	require.NoError(t, err)
	// Delivered here, not by the expiry actor: the first fire's commit
	// report may reach it after this Schedule's arm and remove the new
	// timer (a separate race, left to the expiry actor).
	rt.fire(ctx, scheduleFire{"c", "s", at})
	require.Equal(t, []string{"old", "new"}, wakeTexts(), "the new schedule's message is written")
	require.Zero(t, pending(), "its one-shot fire is recorded")
}
