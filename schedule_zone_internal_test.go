package lazarus

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/actors/actorstest"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/messages"
)

// TestScheduleKeptWhenItsNextCannotBeComputed: a recurring schedule whose
// next occurrence cannot be computed when it fires (its cron's time zone
// does not load on this machine: a container without zoneinfo) is not
// delivered and stays as it was, counted as a failed delivery (handed again
// later); once the zone loads, the same occurrence is delivered and the
// schedule moves on. Before the fix the wake was sent with no next, which
// delivered it once and deleted the recurring schedule.
func TestScheduleKeptWhenItsNextCannotBeComputed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := actorstest.NewManualClock(t0)
	var mu sync.Mutex
	var outcomes []ScheduleOutcome
	model := agent.ModelFunc(func(context.Context, agent.Turn, func(string)) (*messages.AssistantMessage, error) {
		return agent.Text("ok"), nil
	})
	rt, err := Open(Options{Model: model, Clock: clock, Metrics: Metrics{ScheduleFired: func(o ScheduleOutcome) {
		mu.Lock()
		defer mu.Unlock()
		outcomes = append(outcomes, o)
	}}})
	require.NoError(t, err)
	defer rt.Close()
	_, err = rt.Send(ctx, "c", "hi", agent.Scope{})
	require.NoError(t, err)
	sc, err := rt.Schedule(ctx, "c", ScheduleSpec{ID: "s", Cron: "0 9 * * *", TimeZone: "Europe/Paris", Text: "standup"}, agent.Scope{})
	require.NoError(t, err)
	occ := sc.GetNext().AsTime()
	require.True(t, occ.Equal(time.Date(2026, 1, 1, 8, 0, 0, 0, time.UTC)), "09:00 in Paris: %v", occ)

	wakes := func() int {
		t.Helper()
		evs, err := rt.History(ctx, "c", 0, 0)
		require.NoError(t, err)
		n := 0
		for _, ev := range evs {
			if ev.GetUserMsg() != nil && strings.HasPrefix(ev.GetRequestId(), "schedule/") {
				n++
			}
		}
		return n
	}
	listed := func() *messages.Schedule {
		t.Helper()
		all, err := rt.Schedules(ctx, "c")
		require.NoError(t, err)
		require.Len(t, all, 1, "the recurring schedule is kept")
		return all[0]
	}

	loadLocation = func(name string) (*time.Location, error) {
		return nil, fmt.Errorf("unknown time zone %s", name)
	}
	restored := false
	restore := func() {
		if !restored {
			loadLocation, restored = time.LoadLocation, true
		}
	}
	defer restore()
	rt.fire(ctx, scheduleFire{conv: "c", id: "s", at: occ})
	require.Zero(t, wakes(), "not delivered without its next")
	kept := listed()
	require.True(t, kept.GetNext().AsTime().Equal(occ), "unchanged: %v", kept.GetNext().AsTime())
	require.Equal(t, "0 9 * * *", kept.GetCron())
	require.Equal(t, "Europe/Paris", kept.GetTimeZone())
	mu.Lock()
	require.Equal(t, []ScheduleOutcome{ScheduleFailed}, outcomes)
	mu.Unlock()

	// The zone loads again: the occurrence, handed again, is delivered
	// and the schedule moves on to the next day.
	restore()
	rt.fire(ctx, scheduleFire{conv: "c", id: "s", at: occ})
	require.Equal(t, 1, wakes())
	require.True(t, listed().GetNext().AsTime().Equal(occ.Add(24*time.Hour)))
	mu.Lock()
	require.Equal(t, []ScheduleOutcome{ScheduleFailed, ScheduleDelivered}, outcomes)
	mu.Unlock()
}
