package lazarus_test

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal"
)

// TestScheduleWakeThatCannotBeWrittenIsSkipped: a wake whose author, the
// scope Options.ScopeLoader rebuilds at fire time, is larger than the one
// the schedule was checked with, so that its message no longer fits
// journal.MaxEventBytes, is refused by the conversation with
// journal.ErrInvalid. The occurrence fails for good (counted
// ScheduleRefused, nothing written): a one-shot schedule goes, a repeating
// one moves to its next occurrence, which fires. Before, the delivery
// handed the same occurrence again every reply timeout, for ever: the
// schedule kept its Next and its later occurrences never came.
func TestScheduleWakeThatCannotBeWrittenIsSkipped(t *testing.T) {
	for _, every := range []bool{false, true} {
		name := "once"
		if every {
			name = "every"
		}
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			alice := agent.Scope{UserID: "alice"}
			// The loader's scope for alice carries the most roles an
			// identity may: about 4 KiB more author than the schedule's.
			var big atomic.Int32
			big.Store(1)
			var loads atomic.Int32
			loader := func(_ context.Context, id agent.Identity) (agent.Scope, error) {
				loads.Add(1)
				s := agent.Scope{UserID: id.UserID}
				if big.Load() != 0 {
					for i := range agent.MaxRoles {
						s.Roles = append(s.Roles, strings.Repeat(string(rune('a'+i%26)), agent.MaxRoleBytes))
					}
				}
				return s, nil
			}
			var mu sync.Mutex
			fired := map[lazarus.ScheduleOutcome]int{}
			counts := func() map[lazarus.ScheduleOutcome]int {
				mu.Lock()
				defer mu.Unlock()
				return maps.Clone(fired)
			}
			rt, model, clock := scheduleConversation(ctx, t, lazarus.Options{ScopeLoader: loader, Metrics: lazarus.Metrics{
				ScheduleFired: func(o lazarus.ScheduleOutcome) {
					mu.Lock()
					defer mu.Unlock()
					fired[o]++
				},
			}}, alice)

			text := strings.Repeat("x", journal.MaxEventBytes-2048) // fits with alice, not with her roles
			spec := lazarus.ScheduleSpec{ID: "big", After: 10 * time.Minute, Text: text}
			if every {
				spec.Every = time.Hour
			}
			_, err := rt.Schedule(ctx, "c", spec, alice)
			require.NoError(t, err, "the text fits the wake the schedule's author writes")
			// The set-up's turn ("hi" and its answer) is over before the
			// log's end is read: WaitCalls saw the model asked, not the
			// answer written.
			var before uint64
			require.Eventually(t, func() bool {
				before, err = rt.Store().LastSeq(ctx, "c")
				return err == nil && before == 2
			}, 20*time.Second, time.Millisecond, "the set-up's turn ended")

			at := schedT0.Add(10 * time.Minute)
			advanceWhenArmed(t, clock, at)
			require.Eventually(t, func() bool {
				return maps.Equal(counts(), map[lazarus.ScheduleOutcome]int{lazarus.ScheduleRefused: 1})
			}, 20*time.Second, time.Millisecond, "the refused occurrence is counted, not failed")
			require.Eventually(t, func() bool {
				listed, err := rt.Schedules(ctx, "c")
				if err != nil {
					return false
				}
				if !every {
					return len(listed) == 0
				}
				return len(listed) == 1 && listed[0].GetNext().AsTime().Equal(at.Add(time.Hour))
			}, 20*time.Second, time.Millisecond, "the occurrence is skipped: the schedule goes or moves on")
			// The expiry actor does not hand the occurrence again: its
			// re-hand timer (the reply timeout after the fire) goes.
			rehand := at.Add(30 * time.Second)
			require.Eventually(t, func() bool { return !slices.ContainsFunc(clock.Dues(), rehand.Equal) }, 20*time.Second, time.Millisecond, "no re-hand armed")
			require.Equal(t, int32(1), loads.Load(), "delivered once")
			after, err := rt.Store().LastSeq(ctx, "c")
			require.NoError(t, err)
			require.Equal(t, before, after, "nothing written for the refused occurrence")
			require.Empty(t, wakes(ctx, t, rt, "c"))

			if !every {
				return
			}
			// The next occurrence, whose author fits, fires.
			big.Store(0)
			advanceWhenArmed(t, clock, at.Add(time.Hour))
			require.NoError(t, model.WaitCalls(ctx, "c", 2), "the next occurrence starts a turn")
			require.Equal(t, []string{text}, wakes(ctx, t, rt, "c"))
			require.Eventually(t, func() bool {
				return maps.Equal(counts(), map[lazarus.ScheduleOutcome]int{lazarus.ScheduleRefused: 1, lazarus.ScheduleDelivered: 1})
			}, 20*time.Second, time.Millisecond, "the next occurrence is delivered")
		})
	}
}
