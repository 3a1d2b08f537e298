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
