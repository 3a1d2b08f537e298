package journaltest

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ownershipCases check the Ownership paragraph of journal.Store: the Store
// keeps no reference to what a caller passed once the call returned, and
// what it returns belongs to the caller. Each case changes the records
// after the call, then makes another write that rewrites the same rows
// (a store that kept the caller's record would write the change then),
// and reads everything again.
var ownershipCases = []suiteCase{
	{name: "RowInputsNotKept", run: testOwnRowInputs},
	{name: "RecordInputsNotKept", run: testOwnRecordInputs},
	{name: "ForkInputsNotKept", run: testOwnForkInputs},
	{name: "ReturnedRecordsAreCopies", run: testOwnReturned},
}

// testOwnRowInputs: the fsm_state, settings and event times of the writes
// that set a conversation's row.
func testOwnRowInputs(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()

	// Append: its first event's time (the row's creation) and fsm_state.
	ev := userEv(1, "hello")
	fsm := awaiting(1, "tc-1")
	settings := map[string]string{"model": "m1"}
	appendOK(t, s, &messages.AppendRequest{ConversationId: "a", Events: []*messages.Event{ev},
		ToolCalls: []*messages.ToolCallRecord{humanCall("a", "tc-1")}, FsmState: fsm, Settings: settings})
	want, err := s.Conversation(ctx, "a")
	require.NoError(t, err)
	ev.Time.Seconds += 1000
	fsm.State = messages.AgentState_AGENT_STATE_IDLE
	fsm.LastSeq = 99
	fsm.Pending["tc-1"].Prompt = "changed"
	settings["model"] = "changed"
	// A write that rewrites the row without naming fsm_state or settings.
	appendOK(t, s, &messages.AppendRequest{ConversationId: "a", ExpectedLast: 1, Status: statusSuspended})
	got, err := s.Conversation(ctx, "a")
	require.NoError(t, err)
	requireProto(t, want.GetCreated(), got.GetCreated(), "changing an appended event's time must not change the row")
	requireProto(t, awaiting(1, "tc-1"), got.GetFsmState(), "changing an appended fsm_state must not change the row")
	assert.Equal(t, map[string]string{"model": "m1"}, got.GetSettings())

	// PutConversation and PutFSMState.
	fsm = awaiting(1, "tc-1")
	settings = map[string]string{"model": "m2"}
	require.NoError(t, s.PutConversation(ctx, journal.ConversationUpdate{ID: "b", Settings: settings, FSMState: fsm}))
	fsm.Pending["tc-1"].Prompt = "changed"
	fsm.LastSeq = 99
	settings["model"] = "changed"
	require.NoError(t, s.PutConversation(ctx, journal.ConversationUpdate{ID: "b", Status: statusSuspended}))
	got, err = s.Conversation(ctx, "b")
	require.NoError(t, err)
	requireProto(t, awaiting(1, "tc-1"), got.GetFsmState(), "changing the fsm_state given to PutConversation must not change the row")
	assert.Equal(t, map[string]string{"model": "m2"}, got.GetSettings())

	fsm = idleState(0)
	require.NoError(t, s.PutFSMState(ctx, "c", fsm))
	fsm.LastSeq = 99
	appendOK(t, s, &messages.AppendRequest{ConversationId: "c", Events: []*messages.Event{userEv(2, "x")}, Status: statusIdle})
	got, err = s.Conversation(ctx, "c")
	require.NoError(t, err)
	requireProto(t, idleState(0), got.GetFsmState(), "changing the fsm_state given to PutFSMState must not change the row")

	// AppendBatch.
	fsm = awaiting(0, "d/tc")
	appendBatchOK(t, s, &messages.AppendRequest{ConversationId: "d", FsmState: fsm, ToolCalls: []*messages.ToolCallRecord{humanCall("d", "d/tc")}})
	fsm.Pending["d/tc"].Prompt = "changed"
	appendBatchOK(t, s, &messages.AppendRequest{ConversationId: "d", Status: statusIdle})
	got, err = s.Conversation(ctx, "d")
	require.NoError(t, err)
	requireProto(t, awaiting(0, "d/tc"), got.GetFsmState(), "changing the fsm_state given to AppendBatch must not change the row")
}

func appendBatchOK(t testing.TB, s journal.Store, reqs ...*messages.AppendRequest) {
	t.Helper()
	for i, res := range s.AppendBatch(t.Context(), reqs) {
		require.NoError(t, res.Err, "request %d", i)
	}
}

// testOwnRecordInputs: tool call rows, resolutions' results, deadlines,
// summaries, metadata, audit rows and schedules.
func testOwnRecordInputs(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	appendEvents(t, s, "c", userEvs(1, 4)...)

	rec := humanCall("c", "tc-1")
	require.NoError(t, s.UpsertToolCall(ctx, rec))
	rec.Prompt, rec.Created.Seconds = "changed", 1000
	res := contentOutcome("result")
	_, err := s.ResolveToolCall(ctx, "tc-1", resolved, res, tm(5))
	require.NoError(t, err)
	res.Outcome = &messages.ToolOutcome_Content{Content: "changed"}
	got := toolCall(t, s, "tc-1")
	assert.Equal(t, "ok?", got.GetPrompt(), "changing an upserted row must not change the Store")
	requireProto(t, ts(0), got.GetCreated())
	requireProto(t, contentOutcome("result"), got.GetResult(), "changing a resolution's result must not change the Store")

	// A resolution in an append, then a row the append upserts.
	rec = humanCall("c", "tc-2")
	appendOK(t, s, &messages.AppendRequest{ConversationId: "c", ExpectedLast: 4, ToolCalls: []*messages.ToolCallRecord{rec}})
	rec.Prompt = "changed"
	appendOK(t, s, &messages.AppendRequest{ConversationId: "c", ExpectedLast: 4, Schedule: []*messages.Deadline{deadline("c", "tc-2", 9)}})
	got = toolCall(t, s, "tc-2")
	assert.Equal(t, "ok?", got.GetPrompt(), "changing an appended tool call row must not change the Store")
	pend, err := s.PendingToolCalls(ctx, "c")
	require.NoError(t, err)
	require.Len(t, pend, 1)
	assert.Equal(t, "ok?", pend[0].GetPrompt())
	r := &messages.ToolResolution{ToolCallId: "tc-2", Status: resolved, Result: contentOutcome("r2"), At: ts(6)}
	appendOK(t, s, &messages.AppendRequest{ConversationId: "c", ExpectedLast: 4, Resolutions: []*messages.ToolResolution{r}})
	r.Result.Outcome = &messages.ToolOutcome_Content{Content: "changed"}
	r.At.Seconds = 1000
	got = toolCall(t, s, "tc-2")
	requireProto(t, contentOutcome("r2"), got.GetResult(), "changing an appended resolution must not change the Store")
	requireProto(t, ts(6), got.GetResolved())

	d := deadline("c", "tc-9", 7)
	require.NoError(t, s.ScheduleDeadline(ctx, d))
	d.At.Seconds = 1000
	requireProtos(t, []*messages.Deadline{deadline("c", "tc-9", 7)}, deadlinesOf(t, s, "c"), "changing a scheduled deadline must not change the Store")

	sum := summary(1, 2)
	require.NoError(t, s.PutSummary(ctx, "c", sum))
	sum.Content, sum.FromSeq = "changed", 2
	latest, err := s.LatestSummary(ctx, "c")
	require.NoError(t, err)
	requireProto(t, summary(1, 2), latest, "changing a stored summary must not change the Store")

	kv := map[string]string{"k": "v"}
	require.NoError(t, s.PutMetadata(ctx, "c", kv))
	kv["k"], kv["k2"] = "changed", "added"
	meta, err := s.Metadata(ctx, "c")
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"k": "v"}, meta, "changing the map given to PutMetadata must not change the Store")

	if ss, ok := s.(journal.ScheduleStore); ok {
		sc := sched("c", "s1", 30)
		require.NoError(t, ss.PutSchedule(ctx, sc))
		sc.Next.Seconds, sc.Payload.Content = 1000, text("changed")
		scs, err := ss.ConversationSchedules(ctx, "c")
		require.NoError(t, err)
		requireProtos(t, []*messages.Schedule{sched("c", "s1", 30)}, scs, "changing a stored schedule must not change the Store")
	}

	if e.feat.Audit {
		s := e.openAudit(t, true).Store
		mc := modelCall("m", 1, 10)
		require.NoError(t, s.PutModelCall(ctx, mc))
		mc.Model, mc.RenderedContext[0].Seq = "changed", 77
		mcs, err := s.ModelCalls(ctx, "m")
		require.NoError(t, err)
		requireProtos(t, []*messages.ModelCall{modelCall("m", 1, 10)}, mcs, "changing a stored audit row must not change the Store")
	}
}

// testOwnForkInputs: a fork's summary, events, origin, settings and
// metadata.
func testOwnForkInputs(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	req := forkSource(t, s, "src", "dst")
	want := cloneFork(req)
	require.NoError(t, s.Fork(ctx, req))
	req.Summary.Content = "changed"
	req.Events[0].GetUserMsg().GetContent()[0].Part = &messages.ContentPart_Text{Text: "changed"}
	req.Origin.Seq = 99
	req.Settings["model"] = "changed"
	req.Metadata["name"] = "changed"
	// Writes that rewrite the row and the log.
	appendOK(t, s, &messages.AppendRequest{ConversationId: "dst", ExpectedLast: 10, Events: []*messages.Event{userEv(11, "after")}, Status: statusSuspended})
	require.NoError(t, s.PutConversation(ctx, journal.ConversationUpdate{ID: "dst", Status: statusIdle}))
	want.Events = append(want.Events, withSeqs(11, []*messages.Event{userEv(11, "after")})...)
	requireFork(t, s, want)
}

// testOwnReturned: what the read methods return may be changed by the
// caller without changing the Store.
func testOwnReturned(t *testing.T, e env) {
	h := e.open(t)
	s := h.Store
	ctx := t.Context()
	calls := populate(t, s, "c", e.feat.Audit)
	require.NoError(t, s.ScheduleDeadline(ctx, deadline("c", calls[0], 50)))
	if ss, ok := s.(journal.ScheduleStore); ok {
		require.NoError(t, ss.PutSchedule(ctx, sched("c", "s1", 30)))
	}
	before := snapshotOf(t, s, []string{"c"}, calls)
	var scsBefore []*messages.Schedule
	if ss, ok := s.(journal.ScheduleStore); ok {
		var err error
		scsBefore, err = ss.ConversationSchedules(ctx, "c")
		require.NoError(t, err)
	}

	// Change everything a read returns, twice over (a cache would hand out
	// the same record again).
	for range 2 {
		mutateAll(t, s, "c", calls)
	}
	requireSameSnapshot(t, before, snapshotOf(t, s, []string{"c"}, calls), "changing returned records must not change the Store")
	if ss, ok := s.(journal.ScheduleStore); ok {
		scs, err := ss.ConversationSchedules(ctx, "c")
		require.NoError(t, err)
		requireProtos(t, scsBefore, scs)
	}

	// The rows a resolve returns.
	row, err := s.ResolveToolCall(ctx, calls[0], resolved, contentOutcome("done"), tm(60))
	require.NoError(t, err)
	want := toolCall(t, s, calls[0])
	row.Status, row.Prompt = pending, "changed"
	requireProto(t, want, toolCall(t, s, calls[0]), "changing the row ResolveToolCall returned must not change the Store")
}

// mutateAll reads everything of conv through the read methods and
// changes every record and map returned.
func mutateAll(t testing.TB, s journal.Store, conv string, calls []string) {
	t.Helper()
	ctx := t.Context()
	evs, err := s.Events(ctx, conv, journal.EventQuery{})
	require.NoError(t, err)
	for _, ev := range evs {
		ev.Seq, ev.Time = 999, ts(999)
	}
	sum, loaded, err := s.LoadSince(ctx, conv)
	require.NoError(t, err)
	sum.Content, sum.ToSeq = "changed", 999
	for _, ev := range loaded {
		ev.Seq = 999
	}
	latest, err := s.LatestSummary(ctx, conv)
	require.NoError(t, err)
	latest.Content = "changed"
	before, err := s.SummaryBefore(ctx, conv, math.MaxUint64)
	require.NoError(t, err)
	before.Content, before.ToSeq = "changed", 999
	row, err := s.Conversation(ctx, conv)
	require.NoError(t, err)
	row.Status = statusEnded
	row.Settings["model"] = "changed"
	row.Settings["added"] = "x"
	if row.FsmState != nil {
		row.FsmState.LastSeq = 999
		for _, p := range row.FsmState.Pending {
			p.Prompt = "changed"
		}
	}
	rows, _, err := s.ListConversations(ctx, "", 0)
	require.NoError(t, err)
	for _, r := range rows {
		r.Status = statusEnded
		if r.Settings != nil {
			r.Settings["model"] = "changed"
		}
		if r.FsmState != nil {
			r.FsmState.LastSeq = 999
		}
	}
	for _, id := range calls {
		tc, err := s.ToolCall(ctx, id)
		require.NoError(t, err)
		tc.Status, tc.Prompt = errored, "changed"
	}
	pend, err := s.PendingToolCalls(ctx, conv)
	require.NoError(t, err)
	for _, tc := range pend {
		tc.Status, tc.Prompt = errored, "changed"
	}
	listed, _, err := s.ListPendingToolCalls(ctx, "", 0)
	require.NoError(t, err)
	for _, tc := range listed {
		tc.Status, tc.Prompt = errored, "changed"
	}
	require.NoError(t, s.Deadlines(ctx, time.Time{}, func(d *messages.Deadline) error {
		d.At.Seconds, d.ToolCallId = 1, "changed"
		return nil
	}))
	meta, err := s.Metadata(ctx, conv)
	require.NoError(t, err)
	meta["name"], meta["added"] = "changed", "x"
	mcs, err := s.ModelCalls(ctx, conv)
	require.NoError(t, err)
	for _, mc := range mcs {
		mc.Model = "changed"
		for _, ev := range mc.RenderedContext {
			ev.Seq = 999
		}
	}
	if ss, ok := s.(journal.ScheduleStore); ok {
		scs, err := ss.ConversationSchedules(context.Background(), conv)
		require.NoError(t, err)
		for _, sc := range scs {
			sc.Next.Seconds, sc.Payload.Content = 1, text("changed")
		}
	}
}
