package lazarus

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/lazarusrt/lazarus/actors/actorstest"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// TestSkipOccurrenceOnlyMovesTheRecordThatFired: skipOccurrence (an
// occurrence the conversation refused as invalid) moves a repeating
// schedule to the next occurrence and removes a one-shot one, but leaves a
// record that changed since it fired (replaced with another text, at the
// same time) as it is: that one's occurrence is not the refused one.
func TestSkipOccurrenceOnlyMovesTheRecordThatFired(t *testing.T) {
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
