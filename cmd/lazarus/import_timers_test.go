package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/actors/actorstest"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/journal/pebblejournal"
	"github.com/lazarusrt/lazarus/messages"
)

// TestImportedTimersFireAsTheSources: after an import into an empty
// Store, a runtime on it arms the imported deadline and schedules at the
// source's times: the pending human call expires at its deadline, not
// before, and the turn the expiry owes runs; the interval schedule fires
// its next occurrence once (the expiry actor's timer fires it within
// actors.MaxTimerSpan of its time), and moves on by its interval;
// the schedules not yet due stay as exported.
func TestImportedTimersFireAsTheSources(t *testing.T) {
	f := newFixture(t)
	out := exportOf(t, f, "finished", "waiting")
	dst := memjournal.New(memjournal.Options{})
	t.Cleanup(func() { _ = dst.Close() })
	require.NoError(t, importInto(ctxT(t), dst, strings.NewReader(out), importOptions{}))
	want := parseExport(t, []byte(out))
	require.Len(t, want["waiting"].deadlines, 1)
	deadline := want["waiting"].deadlines[0].GetAt().AsTime()
	require.Len(t, want["finished"].schedules, 3)
	every := want["finished"].schedules[1]
	require.Equal(t, "finished-every", every.GetId())
	occurrence := every.GetNext().AsTime()
	require.True(t, deadline.Before(occurrence))

	clock := actorstest.NewManualClock(deadline.Add(-time.Minute))
	model := scripted.New(scripted.Options{})
	model.Push("waiting", scripted.Text("The approval expired."))
	model.Push("finished", scripted.Text("Still on its way."))
	rt, err := lazarus.Open(lazarus.Options{Store: dst, Clock: clock, Model: model, Tools: tools(), IdleTimeout: -1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = rt.Close() })
	require.Eventually(t, func() bool { return slices.ContainsFunc(clock.Dues(), deadline.Equal) },
		wait, time.Millisecond, "the imported deadline is armed at its time")

	clock.Advance(time.Minute - time.Nanosecond)
	row, err := dst.ToolCall(ctxT(t), f.waitingCall)
	require.NoError(t, err)
	require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING, row.GetStatus(), "not expired before its deadline")
	clock.Advance(time.Nanosecond)
	awaitEvent(t, rt, "waiting", func(ev *messages.Event) bool { return assistantText(ev) == "The approval expired." })
	row, err = dst.ToolCall(ctxT(t), f.waitingCall)
	require.NoError(t, err)
	require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_EXPIRED, row.GetStatus())
	require.True(t, row.GetResolved().AsTime().Equal(deadline), "expired at its deadline: %v", row.GetResolved().AsTime())

	// The expiry actor arms its timer for at most actors.MaxTimerSpan: the
	// clock jumps to the occurrence, taking that timer along, and moves
	// on until the timer fires.
	scheds, err := rt.Schedules(ctxT(t), "finished")
	require.NoError(t, err)
	requireProtos(t, "schedules before their time", want["finished"].schedules, scheds)
	require.Eventually(t, func() bool {
		return slices.ContainsFunc(clock.Dues(), func(d time.Time) bool { return !d.After(clock.Now().Add(actors.MaxTimerSpan)) })
	}, wait, time.Millisecond, "the expiry actor armed its timer again")
	clock.Jump(occurrence.Sub(clock.Now()))
	clock.Advance(actors.MaxTimerSpan)
	awaitEvent(t, rt, "finished", func(ev *messages.Event) bool { return assistantText(ev) == "Still on its way." })
	evs, err := dst.Events(ctxT(t), "finished", journal.EventQuery{})
	require.NoError(t, err)
	woken := 0
	for _, ev := range evs {
		if c := ev.GetUserMsg().GetContent(); len(c) > 0 && c[0].GetText() == "Check order 42 again." {
			woken++
		}
	}
	require.Equal(t, 1, woken, "the occurrence fired once")
	scheds, err = rt.Schedules(ctxT(t), "finished")
	require.NoError(t, err)
	require.Len(t, scheds, 3)
	require.True(t, scheds[1].GetNext().AsTime().Equal(occurrence.Add(every.GetEvery().AsDuration())), "moved on by its interval: %v", scheds[1].GetNext().AsTime())
	requireProtos(t, "schedules not yet due", []*messages.Schedule{want["finished"].schedules[0], want["finished"].schedules[2]}, []*messages.Schedule{scheds[0], scheds[2]})
}

// TestExportOfAnAnswerNotYetInTheLog: a human call answered while no
// runtime ran the conversation (its row resolved, its answer durable, no
// tool_result event in the log yet, the conversation ACTIVE) exports as
// it is, imports, and a runtime on the copy takes the answer: it writes
// the tool_result event with the row's result and runs the turn owed.
func TestExportOfAnAnswerNotYetInTheLog(t *testing.T) {
	f := newFixture(t)
	st, err := pebblejournal.Open(f.dir, pebblejournal.Options{})
	require.NoError(t, err)
	at := timestamppb.Now()
	_, err = st.Append(ctxT(t), &messages.AppendRequest{ConversationId: "waiting", Unfenced: true,
		Resolutions: []*messages.ToolResolution{{ToolCallId: f.waitingCall, Status: messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED,
			Result: &messages.ToolOutcome{Outcome: &messages.ToolOutcome_Content{Content: `{"approved":true}`}}, At: at, By: &messages.Identity{UserId: "approver"}}},
		Cancel: []string{f.waitingCall},
		// As Runtime.Resolve and 'lazarus resolve' write it: a turn is owed.
		Status: messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE})
	require.NoError(t, err)
	require.NoError(t, st.Close())
	out := exportOf(t, f, "waiting")
	want := parseExport(t, []byte(out))
	require.Empty(t, want["waiting"].deadlines)
	require.Equal(t, messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE, want["waiting"].row.GetStatus())
	i := slices.IndexFunc(want["waiting"].toolCalls, func(r *messages.ToolCallRecord) bool { return r.GetId() == f.waitingCall })
	require.GreaterOrEqual(t, i, 0)
	require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED, want["waiting"].toolCalls[i].GetStatus(), "the row is exported answered")

	dst := memjournal.New(memjournal.Options{})
	t.Cleanup(func() { _ = dst.Close() })
	require.NoError(t, importInto(ctxT(t), dst, strings.NewReader(out), importOptions{}))
	requireImported(t, want["waiting"], collect(t, dst, "waiting"))

	model := scripted.New(scripted.Options{})
	model.Push("waiting", scripted.Text("Refunded after all."))
	rt, err := lazarus.Open(lazarus.Options{Store: dst, Model: model, Tools: tools(), IdleTimeout: -1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = rt.Close() })
	res := awaitEvent(t, rt, "waiting", func(ev *messages.Event) bool { return ev.GetToolResult().GetToolCallId() == f.waitingCall })
	require.Equal(t, `{"approved":true}`, res.GetToolResult().GetOutcome().GetContent())
	awaitEvent(t, rt, "waiting", func(ev *messages.Event) bool { return assistantText(ev) == "Refunded after all." })
	row, err := dst.ToolCall(ctxT(t), f.waitingCall)
	require.NoError(t, err)
	require.Equal(t, "approver", row.GetResolver().GetUserId())
}
