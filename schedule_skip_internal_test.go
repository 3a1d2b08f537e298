package lazarus

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/lazarusrt/lazarus/actors/actorstest"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

// TestSkipOccurrenceOnlyMovesTheRecordThatFired: skipOccurrence (an
// occurrence the conversation refused as invalid) moves a repeating
// schedule to the next occurrence and removes a one-shot one, but leaves a
// record that changed since it fired (replaced with another text, at the
// same time) as it is: that one's occurrence is not the refused one. So it
// does through a journal.ScheduleSkipper, and through a ScheduleStore that
// is none (a Store wrapper written before it).
func TestSkipOccurrenceOnlyMovesTheRecordThatFired(t *testing.T) {
	for _, skipper := range []bool{true, false} {
		t.Run(fmt.Sprint("skipper=", skipper), func(t *testing.T) { testSkipOccurrenceOnlyMovesTheRecordThatFired(t, skipper) })
	}
}

// onlySchedules is a journal.ScheduleStore and nothing else: no
// journal.ScheduleSkipper.
type onlySchedules struct{ journal.ScheduleStore }

func testSkipOccurrenceOnlyMovesTheRecordThatFired(t *testing.T, skipper bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := actorstest.NewManualClock(t0)
	rt, err := Open(Options{Model: scripted.New(scripted.Options{}), Clock: clock, NoResume: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = rt.Close() })
	alice := agent.Scope{UserID: "alice"}
	_, err = rt.Send(ctx, "c", "hi", alice)
	require.NoError(t, err)
	ss := rt.store.(journal.ScheduleStore)
	if !skipper {
		ss = onlySchedules{ss}
	}
	_, isSkipper := ss.(journal.ScheduleSkipper)
	require.Equal(t, skipper, isSkipper)
	at := t0.Add(10 * time.Minute)
	next := at.Add(time.Hour)
	list := func() []*messages.Schedule {
		t.Helper()
		all, err := rt.Schedules(ctx, "c")
		require.NoError(t, err)
		return all
	}

	// Replaced since it fired: left as it is.
	fired, err := rt.Schedule(ctx, "c", ScheduleSpec{ID: "s", After: 10 * time.Minute, Every: time.Hour, Text: "one"}, alice)
	require.NoError(t, err)
	replaced, err := rt.Schedule(ctx, "c", ScheduleSpec{ID: "s", After: 10 * time.Minute, Every: time.Hour, Text: "two"}, alice)
	require.NoError(t, err)
	rt.skipOccurrence(ctx, ss, scheduleFire{"c", "s", at}, fired, &next)
	all := list()
	require.Len(t, all, 1)
	require.True(t, proto.Equal(replaced, all[0]), "the replacement is untouched: %v", all[0])

	// The record that fired: moved to its next occurrence.
	rt.skipOccurrence(ctx, ss, scheduleFire{"c", "s", at}, replaced, &next)
	all = list()
	require.Len(t, all, 1)
	require.True(t, all[0].GetNext().AsTime().Equal(next), "moved on: %v", all[0].GetNext().AsTime())
	require.Equal(t, "two", all[0].GetPayload().GetContent()[0].GetText())

	// A one-shot: removed, unless replaced.
	once, err := rt.Schedule(ctx, "c", ScheduleSpec{ID: "o", After: 10 * time.Minute, Text: "one"}, alice)
	require.NoError(t, err)
	other, err := rt.Schedule(ctx, "c", ScheduleSpec{ID: "o", After: 10 * time.Minute, Text: "two"}, alice)
	require.NoError(t, err)
	rt.skipOccurrence(ctx, ss, scheduleFire{"c", "o", at}, once, nil)
	require.Len(t, list(), 2, "the replaced one-shot stays")
	rt.skipOccurrence(ctx, ss, scheduleFire{"c", "o", at}, other, nil)
	all = list()
	require.Len(t, all, 1, "the one-shot that fired goes")
	require.Equal(t, "s", all[0].GetId())
}

// beforeWriteStore runs then, once, just before the next write of a
// schedule (PutSchedule, DeleteSchedule or SkipSchedule): another writer's
// commit between a skip's read and its write.
type beforeWriteStore struct {
	*memjournal.Store
	mu   sync.Mutex
	then func()
}

func (s *beforeWriteStore) before() {
	s.mu.Lock()
	then := s.then
	s.then = nil
	s.mu.Unlock()
	if then != nil {
		then()
	}
}

func (s *beforeWriteStore) PutSchedule(ctx context.Context, sc *messages.Schedule) error {
	s.before()
	return s.Store.PutSchedule(ctx, sc)
}

func (s *beforeWriteStore) DeleteSchedule(ctx context.Context, conv, id string) error {
	s.before()
	return s.Store.DeleteSchedule(ctx, conv, id)
}

func (s *beforeWriteStore) SkipSchedule(ctx context.Context, conv string, f *messages.ScheduleFire) error {
	s.before()
	return s.Store.SkipSchedule(ctx, conv, f)
}

// TestSkipOccurrenceLeavesAReplacementMadeUnderIt: the schedule that fired
// is replaced (same id and time, another text) just before the skip's
// write. The skip's write names the revision that fired, so the Store
// refuses it: the replacement stays as it was put, and its timer fires it
// with its own text. Before, the skip read the record, then wrote without
// a condition: the replacement, committed after the read, was moved to
// the old definition's next occurrence with the old record (a repeating
// schedule) or deleted (a one-shot), and its occurrence never fired.
func TestSkipOccurrenceLeavesAReplacementMadeUnderIt(t *testing.T) {
	for _, every := range []time.Duration{time.Hour, 0} {
		t.Run(fmt.Sprint("every=", every), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			clock := actorstest.NewManualClock(t0)
			st := &beforeWriteStore{Store: memjournal.New(memjournal.Options{})}
			rt, err := Open(Options{Model: scripted.New(scripted.Options{}), Store: st, Clock: clock, NoResume: true})
			require.NoError(t, err)
			t.Cleanup(func() { _ = rt.Close() })
			alice := agent.Scope{UserID: "alice"}
			_, err = rt.Send(ctx, "c", "hi", alice)
			require.NoError(t, err)
			at := t0.Add(30 * time.Second) // within actors.MaxTimerSpan: its timer is due at at
			spec := ScheduleSpec{ID: "s", At: at, Every: every, Text: "old"}
			fired, err := rt.Schedule(ctx, "c", spec, alice)
			require.NoError(t, err)
			var next *time.Time
			if every > 0 {
				n := at.Add(every)
				next = &n
			}

			var replaced *messages.Schedule
			st.mu.Lock()
			st.then = func() {
				spec.Text = "new"
				var err error
				replaced, err = rt.Schedule(ctx, "c", spec, alice)
				require.NoError(t, err)
			}
			st.mu.Unlock()
			rt.skipOccurrence(ctx, rt.store.(journal.ScheduleStore), scheduleFire{"c", "s", at}, fired, next)
			require.NotNil(t, replaced, "the replacement was made under the skip")
			all, err := rt.Schedules(ctx, "c")
			require.NoError(t, err)
			require.Len(t, all, 1, "the replacement stays")
			require.True(t, proto.Equal(replaced, all[0]), "the replacement is untouched: %v", all[0])

			// The replacement fires at its time, with its text.
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
			require.Eventually(t, func() bool { return slices.ContainsFunc(clock.Dues(), at.Equal) }, 20*time.Second, time.Millisecond,
				"the replacement is armed")
			clock.Advance(at.Sub(clock.Now()))
			require.Eventually(t, func() bool { return len(wakeTexts()) > 0 }, 20*time.Second, time.Millisecond)
			require.Equal(t, []string{"new"}, wakeTexts())
		})
	}
}
