package journaltest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
)

var appendCases = []suiteCase{
	{name: "SeqsGapFree", run: testAppendSeqs},
	{name: "CreatesRow", run: testAppendCreatesRow},
	{name: "ConflictWritesNothing", run: testAppendConflict},
	{name: "AtomicWrite", run: testAppendAtomic},
	{name: "Resolutions", run: testAppendResolutions},
	{name: "StaleResolutionWritesNothing", run: testAppendStaleResolution},
	{name: "FirstFailingCheckDecides", run: testAppendCheckOrder},
	{name: "ResolveCallUpsertedInSameRequest", run: testAppendResolveUpserted},
	{name: "DeadlineChangesInOrder", run: testAppendDeadlineOrder},
	{name: "ResultAlsoInEvent", run: testAppendResultInEvent},
	{name: "Unfenced", run: testAppendUnfenced},
	{name: "ToolCallOfOtherConversation", run: testAppendToolCallOfOther},
	{name: "RecordsAreCopies", run: testAppendCopies},
	{name: "Settings", run: testAppendSettings},
	{name: "ConcurrentFenceOneWins", run: testAppendConcurrentFence},
	{name: "ConcurrentResolutionsOneWins", run: testAppendConcurrentResolutions},
}

// testAppendSettings: an append's settings merge into the row, key by key
// (an empty value removes its key), creating the row if it has none, and
// invalid settings are refused with nothing written.
func testAppendSettings(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	appendOK(t, s, &messages.AppendRequest{ConversationId: "c", Status: statusIdle,
		Settings: map[string]string{"system_prompt": "Be brief.", "model": "m1"}})
	row, err := s.Conversation(ctx, "c")
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"system_prompt": "Be brief.", "model": "m1"}, row.GetSettings(), "the row is created with them")
	assert.Equal(t, statusIdle, row.GetStatus())

	appendOK(t, s, &messages.AppendRequest{ConversationId: "c", Events: userEvs(1, 1),
		Settings: map[string]string{"model": "", "temperature": "0.5"}})
	row, err = s.Conversation(ctx, "c")
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"system_prompt": "Be brief.", "temperature": "0.5"}, row.GetSettings(), "merged; an empty value removes")
	assert.Equal(t, statusIdle, row.GetStatus(), "a write without a status leaves it")

	for name, kv := range map[string]map[string]string{
		"empty key": {"": "x"},
		"not UTF-8": {"k": "\xff"},
	} {
		_, err := s.Append(ctx, &messages.AppendRequest{ConversationId: "c", ExpectedLast: 1, Events: userEvs(2, 1), Settings: kv})
		requireSentinel(t, err, journal.ErrInvalid, name)
	}
	last, err := s.LastSeq(ctx, "c")
	require.NoError(t, err)
	assert.Equal(t, uint64(1), last, "nothing written")
	row, err = s.Conversation(ctx, "c")
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"system_prompt": "Be brief.", "temperature": "0.5"}, row.GetSettings())
}

func testAppendSeqs(t *testing.T, e env) {
	s := e.open(t).Store
	first := userEvs(1, 1)
	res := appendOK(t, s, &messages.AppendRequest{ConversationId: "c", Events: first})
	assert.Equal(t, journal.AppendResult{FirstSeq: 1, LastSeq: 1}, res)
	assert.Equal(t, uint64(1), first[0].GetSeq(), "Append sets Seq on the request's events")

	second := userEvs(2, 3)
	res = appendOK(t, s, &messages.AppendRequest{ConversationId: "c", ExpectedLast: 1, Events: second})
	assert.Equal(t, journal.AppendResult{FirstSeq: 2, LastSeq: 4}, res)
	assert.Equal(t, []uint64{2, 3, 4}, seqs(second))

	res = appendOK(t, s, &messages.AppendRequest{ConversationId: "c", ExpectedLast: 4, FsmState: idleState(4)})
	assert.Equal(t, journal.AppendResult{FirstSeq: 4, LastSeq: 4}, res, "a request without events reports ExpectedLast")

	res = appendOK(t, s, &messages.AppendRequest{ConversationId: "c", ExpectedLast: 4, Events: userEvs(5, 2)})
	assert.Equal(t, journal.AppendResult{FirstSeq: 5, LastSeq: 6}, res)

	requireProtos(t, withSeqs(1, userEvs(1, 6)), allEvents(t, s, "c"))
	assert.Equal(t, uint64(6), lastSeq(t, s, "c"))

	// Another conversation has its own seqs.
	res = appendOK(t, s, &messages.AppendRequest{ConversationId: "d", Events: userEvs(1, 2)})
	assert.Equal(t, journal.AppendResult{FirstSeq: 1, LastSeq: 2}, res)
	assert.Equal(t, uint64(6), lastSeq(t, s, "c"))
}

func testAppendCreatesRow(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	_, err := s.Conversation(ctx, "c")
	requireSentinel(t, err, journal.ErrNotFound)

	appendOK(t, s, &messages.AppendRequest{ConversationId: "c", Events: []*messages.Event{userEv(42, "hi"), userEv(43, "there")}})
	row, err := s.Conversation(ctx, "c")
	require.NoError(t, err)
	assert.Equal(t, "c", row.GetId())
	assert.Equal(t, statusActive, row.GetStatus())
	requireProto(t, ts(42), row.GetCreated(), "created is the time of the first event")

	appendOK(t, s, &messages.AppendRequest{ConversationId: "d", Events: userEvs(1, 1), Status: statusIdle})
	row, err = s.Conversation(ctx, "d")
	require.NoError(t, err)
	assert.Equal(t, statusIdle, row.GetStatus(), "the first request's status wins over the default")

	appendOK(t, s, &messages.AppendRequest{ConversationId: "e", FsmState: idleState(0)})
	row, err = s.Conversation(ctx, "e")
	require.NoError(t, err, "an append without events creates the row too")
	assert.Equal(t, statusActive, row.GetStatus())
	assert.NotNil(t, row.GetCreated(), "created is now when the request has no events")
	requireProto(t, idleState(0), row.GetFsmState())

	// An unfenced request creates the row too, ACTIVE: an answer given
	// outside the actor of a conversation whose calls were upserted alone.
	upsert(t, s, humanCall("u", "u/tc"))
	appendOK(t, s, &messages.AppendRequest{ConversationId: "u", Unfenced: true,
		Resolutions: []*messages.ToolResolution{{ToolCallId: "u/tc", Status: resolved, At: ts(3)}}})
	row, err = s.Conversation(ctx, "u")
	require.NoError(t, err, "an unfenced append creates the row")
	assert.Equal(t, statusActive, row.GetStatus())
	assert.Contains(t, activeIDs(t, s, 0), "u")

	// Later appends do not move created.
	appendOK(t, s, &messages.AppendRequest{ConversationId: "c", ExpectedLast: 2, Events: []*messages.Event{userEv(99, "later")}})
	row, err = s.Conversation(ctx, "c")
	require.NoError(t, err)
	requireProto(t, ts(42), row.GetCreated())
	assert.Equal(t, statusActive, row.GetStatus(), "an append without a status keeps the row's")

	rows, _, err := s.ListConversations(ctx, "", 0)
	require.NoError(t, err)
	assert.Equal(t, []string{"c", "d", "e", "u"}, convIDs(rows))
}

func convIDs(rows []*messages.Conversation) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r.GetId()
	}
	return out
}

func testAppendConflict(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	appendOK(t, s, &messages.AppendRequest{ConversationId: "c", Events: userEvs(1, 2), FsmState: idleState(2)})
	rowBefore, err := s.Conversation(ctx, "c")
	require.NoError(t, err)

	for _, expected := range []uint64{0, 1, 3, 100} {
		req := &messages.AppendRequest{
			ConversationId: "c", ExpectedLast: expected,
			Events:    []*messages.Event{assistantEv(10, "asking", "tc-x"), toolCallEv(11, "tc-x")},
			ToolCalls: []*messages.ToolCallRecord{humanCall("c", "tc-x")},
			FsmState:  awaiting(4, "tc-x"),
			Status:    statusSuspended,
			Schedule:  []*messages.Deadline{deadline("c", "tc-x", 100)},
		}
		res, err := s.Append(ctx, req)
		requireSentinel(t, err, journal.ErrConflict, "expected last %d, log at 2", expected)
		requireSentinel(t, res.Err, journal.ErrConflict)
	}
	requireProtos(t, withSeqs(1, userEvs(1, 2)), allEvents(t, s, "c"), "a fenced-off append writes no event")
	assert.Equal(t, uint64(2), lastSeq(t, s, "c"))
	_, err = s.ToolCall(ctx, "tc-x")
	requireSentinel(t, err, journal.ErrNotFound, "a fenced-off append writes no tool call row")
	assert.Empty(t, allDeadlines(t, s), "a fenced-off append schedules no deadline")
	row, err := s.Conversation(ctx, "c")
	require.NoError(t, err)
	requireProto(t, rowBefore, row, "a fenced-off append changes neither status nor fsm_state")

	// On an empty log, any expected seq but 0 conflicts, and no row appears.
	_, err = s.Append(ctx, &messages.AppendRequest{ConversationId: "fresh", ExpectedLast: 1, Events: userEvs(1, 1)})
	requireSentinel(t, err, journal.ErrConflict)
	assert.Equal(t, uint64(0), lastSeq(t, s, "fresh"))
	_, err = s.Conversation(ctx, "fresh")
	requireSentinel(t, err, journal.ErrNotFound)

	// The right expected seq still works after the conflicts.
	res := appendOK(t, s, &messages.AppendRequest{ConversationId: "c", ExpectedLast: 2, Events: userEvs(3, 1)})
	assert.Equal(t, journal.AppendResult{FirstSeq: 3, LastSeq: 3}, res)
}

func testAppendAtomic(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	appendEvents(t, s, "c", userEv(1, "book a flight"))
	evs := []*messages.Event{assistantEv(2, "let me ask", "tc-1", "tc-2"), toolCallEv(3, "tc-1"), toolCallEv(4, "tc-2")}
	res := appendOK(t, s, &messages.AppendRequest{
		ConversationId: "c", ExpectedLast: 1,
		Events:    evs,
		ToolCalls: []*messages.ToolCallRecord{humanCall("c", "tc-1"), humanCall("c", "tc-2")},
		FsmState:  awaiting(4, "tc-1", "tc-2"),
		Status:    statusSuspended,
		Schedule:  []*messages.Deadline{deadline("c", "tc-1", 600), deadline("c", "tc-2", 300)},
	})
	assert.Equal(t, journal.AppendResult{FirstSeq: 2, LastSeq: 4}, res)

	requireProtos(t, append(withSeqs(1, []*messages.Event{userEv(1, "book a flight")}), withSeqs(2, evs)...), allEvents(t, s, "c"))
	want1, want2 := humanCall("c", "tc-1"), humanCall("c", "tc-2")
	want1.Status, want2.Status = pending, pending
	got, err := s.ToolCall(ctx, "tc-1")
	require.NoError(t, err)
	requireProto(t, want1, got, "a new row without a status is pending")
	pend, err := s.PendingToolCalls(ctx, "c")
	require.NoError(t, err)
	requireProtos(t, []*messages.ToolCallRecord{want1, want2}, pend)
	row, err := s.Conversation(ctx, "c")
	require.NoError(t, err)
	assert.Equal(t, statusSuspended, row.GetStatus())
	requireProto(t, awaiting(4, "tc-1", "tc-2"), row.GetFsmState())
	requireProtos(t, []*messages.Deadline{deadline("c", "tc-2", 300), deadline("c", "tc-1", 600)}, allDeadlines(t, s))

	// Cancel and status without events or fsm_state: the fsm_state stays.
	appendOK(t, s, &messages.AppendRequest{ConversationId: "c", ExpectedLast: 4, Cancel: []string{"tc-2"}, Status: statusActive})
	requireProtos(t, []*messages.Deadline{deadline("c", "tc-1", 600)}, allDeadlines(t, s))
	row, err = s.Conversation(ctx, "c")
	require.NoError(t, err)
	assert.Equal(t, statusActive, row.GetStatus())
	requireProto(t, awaiting(4, "tc-1", "tc-2"), row.GetFsmState(), "a request without fsm_state keeps the cached one")
}

// suspend appends an assistant turn to conv that asks for calls, with their
// rows and a deadline each at t0+100s, and returns the new last seq.
func suspend(t testing.TB, s journal.Store, conv string, calls ...string) uint64 {
	t.Helper()
	last := lastSeq(t, s, conv)
	req := &messages.AppendRequest{ConversationId: conv, ExpectedLast: last, FsmState: awaiting(last+1+uint64(len(calls)), calls...)}
	req.Events = append(req.Events, assistantEv(int(last)+1, "asking", calls...))
	for _, id := range calls {
		req.Events = append(req.Events, toolCallEv(int(last)+1, id))
		req.ToolCalls = append(req.ToolCalls, humanCall(conv, id))
		req.Schedule = append(req.Schedule, deadline(conv, id, 100))
	}
	return appendOK(t, s, req).LastSeq
}

func toolCall(t testing.TB, s journal.Store, id string) *messages.ToolCallRecord {
	t.Helper()
	row, err := s.ToolCall(t.Context(), id)
	require.NoError(t, err, "tool call %q", id)
	return row
}

func testAppendResolutions(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	last := suspend(t, s, "c", "tc-1", "tc-2")
	require.Equal(t, uint64(3), last)

	res := appendOK(t, s, &messages.AppendRequest{
		ConversationId: "c", ExpectedLast: last,
		Events:      []*messages.Event{resolutionEv(10, "tc-1", resolved), toolResultEv(10, "tc-1", `"yes"`)},
		Resolutions: []*messages.ToolResolution{{ToolCallId: "tc-1", Status: resolved, Result: contentOutcome(`"yes"`), At: ts(10), By: bob}},
		FsmState:    awaiting(5, "tc-2"),
	})
	assert.Equal(t, journal.AppendResult{FirstSeq: 4, LastSeq: 5}, res)
	want := humanCall("c", "tc-1")
	want.Status, want.Result, want.Resolved, want.Resolver = resolved, contentOutcome(`"yes"`), ts(10), bob
	requireProto(t, want, toolCall(t, s, "tc-1"), "the resolution moved the row to resolved with its result, time and resolver")
	pend, err := s.PendingToolCalls(ctx, "c")
	require.NoError(t, err)
	assert.Equal(t, []string{"tc-2"}, callIDs(pend))
	requireProtos(t, []*messages.Deadline{deadline("c", "tc-2", 100)}, allDeadlines(t, s), "the resolution removed its call's deadline")

	// Errored and expired are terminal too.
	appendOK(t, s, &messages.AppendRequest{
		ConversationId: "c", ExpectedLast: 5,
		Resolutions: []*messages.ToolResolution{{ToolCallId: "tc-2", Status: expired, Result: errorOutcome("expired", "too late"), At: ts(11)}},
	})
	assert.Equal(t, expired, toolCall(t, s, "tc-2").GetStatus())
	assert.Empty(t, allDeadlines(t, s))
}

// bob is a resolver's identity.
var bob = &messages.Identity{UserId: "bob", Roles: []string{"approver"}}

func callIDs(rows []*messages.ToolCallRecord) []string {
	out := []string{}
	for _, r := range rows {
		out = append(out, r.GetId())
	}
	return out
}

func testAppendStaleResolution(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	last := suspend(t, s, "c", "tc-1", "tc-2")
	suspend(t, s, "d", "tc-d")
	_, err := s.ResolveToolCall(ctx, "tc-1", resolved, contentOutcome("1"), tm(5))
	require.NoError(t, err)

	cases := []struct {
		name string
		res  []*messages.ToolResolution
	}{
		{"AlreadyResolved", []*messages.ToolResolution{{ToolCallId: "tc-1", Status: errored}}},
		{"Unknown", []*messages.ToolResolution{{ToolCallId: "nope", Status: resolved}}},
		{"OtherConversation", []*messages.ToolResolution{{ToolCallId: "tc-d", Status: resolved}}},
		{"SameCallTwice", []*messages.ToolResolution{{ToolCallId: "tc-2", Status: resolved}, {ToolCallId: "tc-2", Status: errored}}},
		{"OneOfTwoStale", []*messages.ToolResolution{{ToolCallId: "tc-2", Status: resolved}, {ToolCallId: "tc-1", Status: resolved}}},
	}
	before := snapshotOf(t, s, []string{"c", "d"}, []string{"tc-1", "tc-2", "tc-3", "tc-d"})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, err := s.Append(ctx, &messages.AppendRequest{
				ConversationId: "c", ExpectedLast: last,
				Events:      []*messages.Event{resolutionEv(20, "tc-1", errored)},
				Resolutions: tc.res,
				ToolCalls:   []*messages.ToolCallRecord{humanCall("c", "tc-3")},
				FsmState:    idleState(9),
				Status:      statusEnded,
				Schedule:    []*messages.Deadline{deadline("c", "tc-3", 50)},
				Cancel:      []string{"tc-2"},
			})
			requireSentinel(t, err, journal.ErrStale)
			requireSentinel(t, res.Err, journal.ErrStale)
			requireSameSnapshot(t, before, snapshotOf(t, s, []string{"c", "d"}, []string{"tc-1", "tc-2", "tc-3", "tc-d"}),
				"nothing of a request with a stale resolution is written")
		})
	}
}

// testAppendCheckOrder: a request that breaks several rules fails with the
// error of the first check, in Append's documented order (ErrInvalid,
// ErrDeleted, the fence's ErrConflict, the tool call owners' ErrConflict,
// ErrStale, of a resolution, a fire or a reschedule), and writes nothing.
// (The ErrInvalid found with ErrStale's checks is testResolveOverflowingRow's
// and testSettingsTotalBounded's.)
func testAppendCheckOrder(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	last := suspend(t, s, "c", "tc-1")
	require.NoError(t, scheduleStore(t, s).PutSchedule(ctx, sched("c", "rep", 100)))
	suspend(t, s, "o", "tc-o")
	populate(t, s, "x", false)
	require.NoError(t, s.DeleteConversation(ctx, "x"))
	stale := []*messages.ToolResolution{{ToolCallId: "nope", Status: resolved, Result: contentOutcome("late"), At: ts(9)}}
	stolen := []*messages.ToolCallRecord{humanCall("c", "tc-o")}
	staleFire := &messages.ScheduleFire{ScheduleId: "rep", Occurrence: ts(99), Next: ts(160)}
	staleMove := []*messages.Deadline{deadline("c", "nope", 50)}
	cases := []struct {
		name      string
		req       *messages.AppendRequest
		want, not []error
	}{
		{"InvalidBeforeDeleted", &messages.AppendRequest{ConversationId: "x", Unfenced: true, Events: userEvs(1, 1)},
			[]error{journal.ErrInvalid}, []error{journal.ErrDeleted}},
		{"InvalidBeforeFence", &messages.AppendRequest{ConversationId: "c", ExpectedLast: last + 5, Events: userEvs(1, 1),
			ToolCalls: []*messages.ToolCallRecord{humanCall("c", "")}},
			[]error{journal.ErrInvalid}, []error{journal.ErrConflict}},
		{"DeletedBeforeFence", &messages.AppendRequest{ConversationId: "x", ExpectedLast: 99, Events: userEvs(1, 1)},
			[]error{journal.ErrDeleted}, []error{journal.ErrConflict}},
		{"DeletedBeforeStale", &messages.AppendRequest{ConversationId: "x", Unfenced: true, Resolutions: stale},
			[]error{journal.ErrDeleted}, []error{journal.ErrStale}},
		{"FenceBeforeStale", &messages.AppendRequest{ConversationId: "c", ExpectedLast: last + 5, Events: userEvs(1, 1), Resolutions: stale},
			[]error{journal.ErrConflict}, []error{journal.ErrStale}},
		{"OwnerBeforeStale", &messages.AppendRequest{ConversationId: "c", ExpectedLast: last, Events: userEvs(1, 1), ToolCalls: stolen, Resolutions: stale},
			[]error{journal.ErrConflict}, []error{journal.ErrStale}},
		{"FenceBeforeStaleFire", &messages.AppendRequest{ConversationId: "c", ExpectedLast: last + 5, Events: userEvs(1, 1), ScheduleFire: staleFire},
			[]error{journal.ErrConflict}, []error{journal.ErrStale}},
		{"OwnerBeforeStaleReschedule", &messages.AppendRequest{ConversationId: "c", ExpectedLast: last, Events: userEvs(1, 1), ToolCalls: stolen, Reschedule: staleMove},
			[]error{journal.ErrConflict}, []error{journal.ErrStale}},
	}
	convs, calls := []string{"c", "o", "x"}, []string{"tc-1", "tc-o", "nope"}
	before := snapshotOf(t, s, convs, calls)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Append(ctx, proto.Clone(tc.req).(*messages.AppendRequest))
			for _, w := range tc.want {
				require.ErrorIs(t, err, w)
			}
			for _, n := range tc.not {
				require.NotErrorIs(t, err, n)
			}
			res := s.AppendBatch(ctx, []*messages.AppendRequest{proto.Clone(tc.req).(*messages.AppendRequest)})
			for _, w := range tc.want {
				require.ErrorIs(t, res[0].Err, w, "in a batch")
			}
			for _, n := range tc.not {
				require.NotErrorIs(t, res[0].Err, n, "in a batch")
			}
			requireSameSnapshot(t, before, snapshotOf(t, s, convs, calls), "a refused request writes nothing")
		})
	}
}

func testAppendResolveUpserted(t *testing.T, e env) {
	s := e.open(t).Store
	// Upserts apply before resolutions: a request may record a call and its
	// immediate result (a server tool that answered at once).
	appendOK(t, s, &messages.AppendRequest{
		ConversationId: "c",
		Events:         []*messages.Event{toolCallEv(1, "tc-1"), toolResultEv(2, "tc-1", "42")},
		ToolCalls:      []*messages.ToolCallRecord{humanCall("c", "tc-1")},
		Resolutions:    []*messages.ToolResolution{{ToolCallId: "tc-1", Status: resolved, Result: contentOutcome("42"), At: ts(2)}},
	})
	row := toolCall(t, s, "tc-1")
	assert.Equal(t, resolved, row.GetStatus())
	requireProto(t, contentOutcome("42"), row.GetResult())
	pend, err := s.PendingToolCalls(t.Context(), "c")
	require.NoError(t, err)
	assert.Empty(t, pend)
}

// testAppendDeadlineOrder: a request's deadline changes apply in Append's
// documented order (resolutions, scheduled deadlines, cancelled deadlines,
// reschedules), also to one call: a deadline scheduled and cancelled in
// one request is gone; one cancelled and rescheduled is at the
// reschedule's time, in its row too; one scheduled for a call the request
// resolves stays (the resolution removed the old deadline first).
func testAppendDeadlineOrder(t *testing.T, e env) {
	s := e.open(t).Store
	last := suspend(t, s, "c", "tc-1", "tc-2", "tc-3")
	appendOK(t, s, &messages.AppendRequest{ConversationId: "c", ExpectedLast: last,
		Schedule: []*messages.Deadline{deadline("c", "tc-1", 300)}, Cancel: []string{"tc-1"}})
	requireProtos(t, []*messages.Deadline{deadline("c", "tc-2", 100), deadline("c", "tc-3", 100)}, allDeadlines(t, s),
		"scheduled, then cancelled")
	appendOK(t, s, &messages.AppendRequest{ConversationId: "c", ExpectedLast: last,
		Cancel: []string{"tc-2"}, Reschedule: []*messages.Deadline{deadline("c", "tc-2", 400)}})
	requireProtos(t, []*messages.Deadline{deadline("c", "tc-3", 100), deadline("c", "tc-2", 400)}, allDeadlines(t, s),
		"cancelled, then rescheduled")
	requireProto(t, ts(400), toolCall(t, s, "tc-2").GetDeadline(), "the rescheduled row")
	appendOK(t, s, &messages.AppendRequest{ConversationId: "c", ExpectedLast: last,
		Resolutions: []*messages.ToolResolution{{ToolCallId: "tc-3", Status: resolved, At: ts(9)}},
		Schedule:    []*messages.Deadline{deadline("c", "tc-3", 500)}})
	requireProtos(t, []*messages.Deadline{deadline("c", "tc-2", 400), deadline("c", "tc-3", 500)}, allDeadlines(t, s),
		"resolved, then scheduled")
	assert.Equal(t, last, lastSeq(t, s, "c"), "no event was appended")
}

// testAppendResultInEvent: a resolution whose result is also the outcome of
// the request's tool_result event (the same message, as the runtime sends
// it, or an equal copy), and one whose event carries another outcome: the
// row reads back with the resolution's result either way, and a row that
// sets the storage-internal result_seq is refused.
func testAppendResultInEvent(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	shared := contentOutcome(`{"hits":3}`)
	ev := toolResultEv(2, "tc-1", "")
	ev.GetToolResult().Outcome = shared
	appendOK(t, s, &messages.AppendRequest{
		ConversationId: "c",
		Events:         []*messages.Event{toolCallEv(1, "tc-1"), ev, toolCallEv(3, "tc-2"), toolResultEv(4, "tc-2", "event says 1")},
		ToolCalls:      []*messages.ToolCallRecord{humanCall("c", "tc-1"), humanCall("c", "tc-2")},
		Resolutions: []*messages.ToolResolution{
			{ToolCallId: "tc-1", Status: resolved, Result: shared, At: ts(2)},
			{ToolCallId: "tc-2", Status: errored, Result: errorOutcome("tool", "row says 2"), At: ts(4)},
		},
	})
	requireProto(t, contentOutcome(`{"hits":3}`), toolCall(t, s, "tc-1").GetResult(), "the result shared with the event")
	requireProto(t, errorOutcome("tool", "row says 2"), toolCall(t, s, "tc-2").GetResult(), "the resolution's result, not the event's")
	assert.Zero(t, toolCall(t, s, "tc-1").GetResultSeq(), "result_seq never leaves the store")

	// An equal copy in a later request qualifies as well.
	last := appendOK(t, s, &messages.AppendRequest{ConversationId: "c", ExpectedLast: 4,
		Events: []*messages.Event{toolCallEv(5, "tc-3")}, ToolCalls: []*messages.ToolCallRecord{humanCall("c", "tc-3")}}).LastSeq
	appendOK(t, s, &messages.AppendRequest{
		ConversationId: "c", ExpectedLast: last,
		Events:      []*messages.Event{resolutionEv(6, "tc-3", resolved), toolResultEv(6, "tc-3", "copy")},
		Resolutions: []*messages.ToolResolution{{ToolCallId: "tc-3", Status: resolved, Result: contentOutcome("copy"), At: ts(6)}},
	})
	want := humanCall("c", "tc-3")
	want.Status, want.Result, want.Resolved = resolved, contentOutcome("copy"), ts(6)
	requireProto(t, want, toolCall(t, s, "tc-3"))

	bad := humanCall("c", "tc-4")
	bad.ResultSeq = 2
	requireSentinel(t, s.UpsertToolCall(ctx, bad), journal.ErrInvalid)
	_, err := s.Append(ctx, &messages.AppendRequest{ConversationId: "c", ExpectedLast: last + 2, ToolCalls: []*messages.ToolCallRecord{bad}})
	requireSentinel(t, err, journal.ErrInvalid)
	_, err = s.ToolCall(ctx, "tc-4")
	requireSentinel(t, err, journal.ErrNotFound)
}

func testAppendUnfenced(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	last := suspend(t, s, "c", "tc-1", "tc-2", "tc-3")

	// Another writer resolves without knowing the log's position.
	res, err := s.Append(ctx, &messages.AppendRequest{
		ConversationId: "c", Unfenced: true,
		Resolutions: []*messages.ToolResolution{{ToolCallId: "tc-1", Status: resolved, Result: contentOutcome("ok"), At: ts(7)}},
	})
	require.NoError(t, err)
	assert.Equal(t, journal.AppendResult{}, res, "a request without events reports ExpectedLast (0 here)")
	assert.Equal(t, last, lastSeq(t, s, "c"))
	assert.Equal(t, resolved, toolCall(t, s, "tc-1").GetStatus())

	// The fence is skipped whatever ExpectedLast says.
	appendOK(t, s, &messages.AppendRequest{
		ConversationId: "c", Unfenced: true, ExpectedLast: last + 10,
		Schedule: []*messages.Deadline{deadline("c", "tc-2", 500)},
		Cancel:   []string{"tc-3"},
	})
	requireProtos(t, []*messages.Deadline{deadline("c", "tc-2", 500)}, allDeadlines(t, s))

	// Stale resolutions are still refused.
	_, err = s.Append(ctx, &messages.AppendRequest{
		ConversationId: "c", Unfenced: true,
		Resolutions: []*messages.ToolResolution{{ToolCallId: "tc-1", Status: errored}},
	})
	requireSentinel(t, err, journal.ErrStale)

	// Unfenced requests carry no events.
	before := snapshotOf(t, s, []string{"c"}, []string{"tc-1", "tc-2", "tc-3", "tc-4"})
	_, err = s.Append(ctx, &messages.AppendRequest{
		ConversationId: "c", Unfenced: true, ExpectedLast: last,
		Events:    []*messages.Event{userEv(9, "sneaky")},
		ToolCalls: []*messages.ToolCallRecord{humanCall("c", "tc-4")},
	})
	requireSentinel(t, err, journal.ErrInvalid)
	requireSameSnapshot(t, before, snapshotOf(t, s, []string{"c"}, []string{"tc-1", "tc-2", "tc-3", "tc-4"}))
}

func testAppendToolCallOfOther(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	suspend(t, s, "a", "tc-1")
	rowBefore := toolCall(t, s, "tc-1")
	_, err := s.Append(ctx, &messages.AppendRequest{
		ConversationId: "b",
		Events:         []*messages.Event{toolCallEv(1, "tc-1")},
		ToolCalls:      []*messages.ToolCallRecord{humanCall("b", "tc-1")},
	})
	requireSentinel(t, err, journal.ErrConflict, "tool call ids are unique across conversations")
	requireProto(t, rowBefore, toolCall(t, s, "tc-1"))
	assert.Equal(t, uint64(0), lastSeq(t, s, "b"))
	_, err = s.Conversation(ctx, "b")
	requireSentinel(t, err, journal.ErrNotFound)
}

func testAppendCopies(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	evs := []*messages.Event{userEv(1, "original")}
	tc := humanCall("c", "tc-1")
	fsm := awaiting(1, "tc-1")
	appendOK(t, s, &messages.AppendRequest{ConversationId: "c", Events: evs, ToolCalls: []*messages.ToolCallRecord{tc}, FsmState: fsm})
	evs[0].GetUserMsg().GetContent()[0].Part = &messages.ContentPart_Text{Text: "changed"}
	tc.Name = "changed"
	fsm.Pending["tc-1"].Prompt = "changed"

	got := allEvents(t, s, "c")
	requireProtos(t, withSeqs(1, []*messages.Event{userEv(1, "original")}), got, "changing a request after Append must not change the log")
	assert.Equal(t, "ask_human", toolCall(t, s, "tc-1").GetName())
	row, err := s.Conversation(ctx, "c")
	require.NoError(t, err)
	requireProto(t, awaiting(1, "tc-1"), row.GetFsmState())

	got[0].Seq = 99
	got[0].GetUserMsg().GetContent()[0].Part = &messages.ContentPart_Text{Text: "changed"}
	requireProtos(t, withSeqs(1, []*messages.Event{userEv(1, "original")}), allEvents(t, s, "c"), "changing returned events must not change the log")
	row.FsmState.State = messages.AgentState_AGENT_STATE_IDLE
	row2, err := s.Conversation(ctx, "c")
	require.NoError(t, err)
	requireProto(t, awaiting(1, "tc-1"), row2.GetFsmState(), "changing a returned row must not change the Store")
}

var batchCases = []suiteCase{
	{name: "IndependentResults", run: testBatchIndependent},
	{name: "SameConversationChained", run: testBatchChained},
	{name: "FailedRequestBreaksChain", run: testBatchChainBreak},
	{name: "ManyConversations", run: testBatchMany},
	{name: "EachFailureAlone", run: testBatchEachFailureAlone},
	{name: "OneCallClaimedOnce", run: testBatchOneCallClaimedOnce},
}

func testBatchIndependent(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	assert.Empty(t, s.AppendBatch(ctx, nil), "an empty batch has no results")
	const n = 10
	for i := range n {
		appendEvents(t, s, fmt.Sprint("c", i), userEv(1, "first"))
	}
	reqs := make([]*messages.AppendRequest, n)
	for i := range reqs {
		conv := fmt.Sprint("c", i)
		reqs[i] = &messages.AppendRequest{ConversationId: conv, ExpectedLast: 1, Events: []*messages.Event{userEv(2, conv+" second"), userEv(3, conv+" third")}}
	}
	reqs[4].ExpectedLast = 0                                                                 // fenced off
	reqs[7].Events[1] = &messages.Event{Time: ts(3)}                                         // no body: invalid
	reqs[8].Resolutions = []*messages.ToolResolution{{ToolCallId: "nope", Status: resolved}} // stale

	results := s.AppendBatch(ctx, reqs)
	require.Len(t, results, n)
	for i, res := range results {
		conv := fmt.Sprint("c", i)
		switch i {
		case 4:
			requireSentinel(t, res.Err, journal.ErrConflict, conv)
		case 7:
			requireSentinel(t, res.Err, journal.ErrInvalid, conv)
		case 8:
			requireSentinel(t, res.Err, journal.ErrStale, conv)
		default:
			require.NoError(t, res.Err, conv)
			assert.Equal(t, journal.AppendResult{FirstSeq: 2, LastSeq: 3}, res, conv)
		}
		want := []*messages.Event{userEv(1, "first")}
		if res.Err == nil {
			want = append(want, userEv(2, conv+" second"), userEv(3, conv+" third"))
		}
		requireProtos(t, withSeqs(1, want), allEvents(t, s, conv), conv)
	}
}

func testBatchChained(t *testing.T, e env) {
	s := e.open(t).Store
	reqs := []*messages.AppendRequest{
		{ConversationId: "c", Events: []*messages.Event{assistantEv(1, "asking", "tc-1"), toolCallEv(2, "tc-1")}, ToolCalls: []*messages.ToolCallRecord{humanCall("c", "tc-1")}},
		{ConversationId: "c", ExpectedLast: 2, Events: []*messages.Event{resolutionEv(3, "tc-1", resolved), toolResultEv(4, "tc-1", "1"), assistantEv(5, "done")},
			Resolutions: []*messages.ToolResolution{{ToolCallId: "tc-1", Status: resolved, Result: contentOutcome("1"), At: ts(3)}}},
		{ConversationId: "d", Events: userEvs(1, 1)},
		{ConversationId: "c", ExpectedLast: 5, Events: []*messages.Event{userEv(6, "thanks")}},
	}
	results := s.AppendBatch(t.Context(), reqs)
	require.Len(t, results, 4)
	want := []journal.AppendResult{{FirstSeq: 1, LastSeq: 2}, {FirstSeq: 3, LastSeq: 5}, {FirstSeq: 1, LastSeq: 1}, {FirstSeq: 6, LastSeq: 6}}
	for i := range want {
		require.NoError(t, results[i].Err, "request %d", i)
		assert.Equal(t, want[i], results[i], "request %d", i)
		assert.Equal(t, seqRange(want[i].FirstSeq, want[i].LastSeq), seqs(reqs[i].GetEvents()), "request %d: AppendBatch sets Seq on its events, as Append does", i)
	}
	assert.Equal(t, seqRange(1, 6), seqs(allEvents(t, s, "c")))
	assert.Equal(t, resolved, toolCall(t, s, "tc-1").GetStatus(), "the second request resolved the call the first created")
	assert.Equal(t, uint64(1), lastSeq(t, s, "d"))
}

func testBatchChainBreak(t *testing.T, e env) {
	s := e.open(t).Store
	results := s.AppendBatch(t.Context(), []*messages.AppendRequest{
		{ConversationId: "c", ExpectedLast: 5, Events: userEvs(1, 1)}, // fenced off
		{ConversationId: "c", ExpectedLast: 6, Events: userEvs(2, 1)}, // expects the first to have landed
		{ConversationId: "c", ExpectedLast: 0, Events: userEvs(3, 2)}, // sees the real log
	})
	require.Len(t, results, 3)
	requireSentinel(t, results[0].Err, journal.ErrConflict)
	requireSentinel(t, results[1].Err, journal.ErrConflict)
	require.NoError(t, results[2].Err)
	assert.Equal(t, journal.AppendResult{FirstSeq: 1, LastSeq: 2}, results[2])
	requireProtos(t, withSeqs(1, userEvs(3, 2)), allEvents(t, s, "c"))
}

// testBatchEachFailureAlone: in one AppendBatch, a request to a deleted
// conversation (ErrDeleted), one upserting a tool call of another
// conversation (ErrConflict) and one over MaxAppendBytes (ErrInvalid) each
// fail with their own sentinel and write nothing of their events, rows or
// deadlines; the requests of other conversations between them land whole.
func testBatchEachFailureAlone(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	for _, c := range []string{"del", "own", "big", "d", "e"} {
		appendEvents(t, s, c, userEv(1, c))
	}
	appendOK(t, s, &messages.AppendRequest{ConversationId: "d", ExpectedLast: 1, Events: []*messages.Event{toolCallEv(2, "d/tc")},
		ToolCalls: []*messages.ToolCallRecord{humanCall("d", "d/tc")}})
	require.NoError(t, s.DeleteConversation(ctx, "del"))
	bigEv := eventOfSize(journal.MaxEventBytes - 64)
	tooBig := make([]*messages.Event, journal.MaxAppendBytes/(journal.MaxEventBytes-64)+1)
	for i := range tooBig {
		tooBig[i] = bigEv
	}
	failing := []string{"del", "own", "big"}
	calls := []string{"del/tc", "own/tc", "big/tc", "d/tc"}
	before := snapshotOf(t, s, failing, calls)
	withCall := func(conv string, last uint64, evs ...*messages.Event) *messages.AppendRequest {
		call := conv + "/tc"
		return &messages.AppendRequest{ConversationId: conv, ExpectedLast: last,
			Events:    append(evs, assistantEv(9, "asking", call), toolCallEv(9, call)),
			ToolCalls: []*messages.ToolCallRecord{humanCall(conv, call)},
			Schedule:  []*messages.Deadline{deadline(conv, call, 100)},
			FsmState:  awaiting(last+uint64(len(evs))+2, call), Status: messages.ConversationStatus_CONVERSATION_STATUS_SUSPENDED}
	}
	owner := withCall("own", 1)
	owner.ToolCalls = append(owner.ToolCalls, humanCall("own", "d/tc")) // d's call
	reqs := []*messages.AppendRequest{
		withCall("e", 1),
		withCall("del", 1),
		withCall("f", 0),
		owner,
		withCall("big", 1, tooBig...),
		{ConversationId: "d", ExpectedLast: 2, Events: userEvs(3, 1)},
	}
	results := s.AppendBatch(ctx, reqs)
	require.Len(t, results, len(reqs))
	requireSentinel(t, results[1].Err, journal.ErrDeleted, "the deleted conversation")
	requireSentinel(t, results[3].Err, journal.ErrConflict, "the call of another conversation")
	requireSentinel(t, results[4].Err, journal.ErrInvalid, "the request over MaxAppendBytes")
	for i, want := range map[int]journal.AppendResult{0: {FirstSeq: 2, LastSeq: 3}, 2: {FirstSeq: 1, LastSeq: 2}, 5: {FirstSeq: 3, LastSeq: 3}} {
		require.NoError(t, results[i].Err, "request %d, of %q", i, reqs[i].GetConversationId())
		assert.Equal(t, want, results[i], "request %d", i)
	}
	requireSameSnapshot(t, before, snapshotOf(t, s, failing, calls), "the failed requests wrote nothing")
	for _, c := range []string{"e", "f"} {
		assert.Equal(t, c, toolCall(t, s, c+"/tc").GetConversationId(), "the call of %q", c)
		row := conversation(t, s, c)
		assert.Equal(t, messages.ConversationStatus_CONVERSATION_STATUS_SUSPENDED, row.GetStatus(), c)
	}
	assert.Equal(t, "d", toolCall(t, s, "d/tc").GetConversationId(), "d's call stays d's")
	assert.Equal(t, uint64(3), lastSeq(t, s, "d"))
	var dl []string
	for _, d := range allDeadlines(t, s) {
		dl = append(dl, d.GetToolCallId())
	}
	assert.ElementsMatch(t, []string{"e/tc", "f/tc"}, dl, "only the landed requests' deadlines")
}

// testBatchOneCallClaimedOnce: requests of different conversations in one
// AppendBatch that upsert the same new tool call id see each other as
// requests committed before them would: the first claims the id, the
// second fails with ErrConflict and writes nothing, and a third
// conversation's resolution of the call is ErrStale. The id stays unique
// across the store.
func testBatchOneCallClaimedOnce(t *testing.T, e env) {
	s := e.open(t).Store
	claim := func(conv string) *messages.AppendRequest {
		return &messages.AppendRequest{ConversationId: conv,
			Events:    []*messages.Event{assistantEv(1, "asking", "tc-x"), toolCallEv(2, "tc-x")},
			ToolCalls: []*messages.ToolCallRecord{humanCall(conv, "tc-x")},
			Schedule:  []*messages.Deadline{deadline(conv, "tc-x", 100)}}
	}
	results := s.AppendBatch(t.Context(), []*messages.AppendRequest{claim("a"), claim("b"),
		{ConversationId: "c", Unfenced: true, Resolutions: []*messages.ToolResolution{{ToolCallId: "tc-x", Status: resolved, At: ts(3)}}}})
	require.Len(t, results, 3)
	require.NoError(t, results[0].Err)
	assert.Equal(t, journal.AppendResult{FirstSeq: 1, LastSeq: 2}, results[0])
	requireSentinel(t, results[1].Err, journal.ErrConflict, "the id the first request claimed")
	requireSentinel(t, results[2].Err, journal.ErrStale, "a call of another conversation")
	row := toolCall(t, s, "tc-x")
	assert.Equal(t, "a", row.GetConversationId())
	assert.Equal(t, pending, row.GetStatus())
	assert.Empty(t, allEvents(t, s, "b"))
	requireProtos(t, []*messages.Deadline{deadline("a", "tc-x", 100)}, allDeadlines(t, s))
}

func testBatchMany(t *testing.T, e env) {
	s := e.open(t).Store
	const n = 300
	reqs := make([]*messages.AppendRequest, n)
	for i := range reqs {
		conv := fmt.Sprintf("conv-%d", i)
		call := fmt.Sprintf("tc-%d", i)
		reqs[i] = &messages.AppendRequest{
			ConversationId: conv,
			Events:         []*messages.Event{userEv(i, conv), toolCallEv(i, call)},
			ToolCalls:      []*messages.ToolCallRecord{humanCall(conv, call)},
		}
	}
	results := s.AppendBatch(t.Context(), reqs)
	require.Len(t, results, n)
	for i, res := range results {
		require.NoError(t, res.Err, "request %d", i)
		assert.Equal(t, journal.AppendResult{FirstSeq: 1, LastSeq: 2}, res)
	}
	for i := range n {
		conv := fmt.Sprintf("conv-%d", i)
		requireProtos(t, withSeqs(1, []*messages.Event{userEv(i, conv), toolCallEv(i, fmt.Sprintf("tc-%d", i))}), allEvents(t, s, conv))
		assert.Equal(t, conv, toolCall(t, s, fmt.Sprintf("tc-%d", i)).GetConversationId())
	}
}

var eventsCases = []suiteCase{
	{name: "Ranges", run: testEventsRanges},
	{name: "BackwardPagination", run: testEventsBackward},
	{name: "UnknownConversation", run: testEventsUnknown},
	{name: "MaxBytes", run: testEventsMaxBytes},
}

// testEventsMaxBytes: EventQuery.MaxBytes keeps, from the end a read keeps
// (the oldest without a Limit, the newest with one), the events whose
// sizes sum to at most MaxBytes, and always one; paging on from the page
// reads every event once; a negative MaxBytes is ErrInvalid.
func testEventsMaxBytes(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	pad := strings.Repeat("x", 1000)
	evs := make([]*messages.Event, 7)
	for i := range evs {
		evs[i] = userEv(i, pad)
	}
	appendEvents(t, s, "c", evs...)
	size := proto.Size(allEvents(t, s, "c")[3]) // every event is as large, give or take its seq
	bound := 2*size + size/2                    // two fit, three do not
	read := func(q journal.EventQuery) []uint64 {
		t.Helper()
		page, err := s.Events(ctx, "c", q)
		require.NoError(t, err)
		return seqs(page)
	}
	assert.Equal(t, []uint64{1, 2}, read(journal.EventQuery{MaxBytes: bound}), "the oldest without a Limit")
	assert.Equal(t, []uint64{3, 4}, read(journal.EventQuery{After: 2, MaxBytes: bound}))
	assert.Equal(t, []uint64{6, 7}, read(journal.EventQuery{Limit: 5, MaxBytes: bound}), "the newest with a Limit")
	assert.Equal(t, []uint64{4, 5}, read(journal.EventQuery{Before: 6, Limit: 5, MaxBytes: bound}))
	assert.Equal(t, []uint64{7}, read(journal.EventQuery{Limit: 1, MaxBytes: bound}), "the Limit cuts first")
	assert.Equal(t, []uint64{1}, read(journal.EventQuery{MaxBytes: 1}), "one event at least")
	assert.Equal(t, []uint64{7}, read(journal.EventQuery{Limit: 3, MaxBytes: 1}), "one event at least")
	assert.Equal(t, seqRange(1, 7), read(journal.EventQuery{MaxBytes: 100 * size}))
	// Paging forward and backward reads every event once.
	var fwd []uint64
	for after := uint64(0); ; {
		page := read(journal.EventQuery{After: after, MaxBytes: bound})
		if len(page) == 0 {
			break
		}
		fwd, after = append(fwd, page...), page[len(page)-1]
	}
	assert.Equal(t, seqRange(1, 7), fwd)
	var back []uint64
	for before := uint64(0); before != 1; {
		page := read(journal.EventQuery{Before: before, Limit: 10, MaxBytes: bound})
		require.NotEmpty(t, page)
		back, before = append(page, back...), page[0]
	}
	assert.Equal(t, seqRange(1, 7), back)
	_, err := s.Events(ctx, "c", journal.EventQuery{MaxBytes: -1})
	requireSentinel(t, err, journal.ErrInvalid, "a negative MaxBytes")
}

func testEventsRanges(t *testing.T, e env) {
	s := e.open(t).Store
	appendEvents(t, s, "c", userEvs(1, 10)...)
	appendEvents(t, s, "c", userEvs(11, 10)...)
	all := withSeqs(1, userEvs(1, 20))
	cases := []struct {
		name           string
		after, before  uint64
		limit          int
		fromSeq, toSeq uint64 // expected, inclusive; 0,0 for none
	}{
		{"All", 0, 0, 0, 1, 20},
		{"After", 5, 0, 0, 6, 20},
		{"Before", 0, 6, 0, 1, 5},
		{"AfterBefore", 3, 8, 0, 4, 7},
		{"LimitKeepsNewest", 0, 0, 3, 18, 20},
		{"BeforeLimit", 0, 11, 4, 7, 10},
		{"AfterBeforeLimit", 2, 11, 20, 3, 10},
		{"LimitOfRangeSize", 4, 9, 4, 5, 8},
		{"AfterLast", 20, 0, 0, 0, 0},
		{"AfterBeyondLast", 50, 0, 0, 0, 0},
		{"BeforeFirst", 0, 1, 0, 0, 0},
		{"BeforeBeyondLast", 0, 100, 0, 1, 20},
		{"EmptyRange", 5, 6, 0, 0, 0},
		{"InvertedRange", 9, 3, 0, 0, 0},
		{"EqualBounds", 7, 7, 0, 0, 0},
		{"InvertedRangeLimit", 9, 3, 2, 0, 0},
		{"AfterLimit", 12, 0, 3, 18, 20},
		{"AfterLimitOfRangeSize", 17, 0, 3, 18, 20},
		{"AfterBeyondLastLimit", 50, 0, 5, 0, 0},
		{"BeforeFirstLimit", 0, 1, 5, 0, 0},
		{"BeforeLastPlusOne", 0, 21, 0, 1, 20},
		{"Single", 9, 11, 1, 10, 10},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.Events(t.Context(), "c", journal.EventQuery{After: tc.after, Before: tc.before, Limit: tc.limit})
			require.NoError(t, err)
			var want []*messages.Event
			if tc.toSeq > 0 {
				want = all[tc.fromSeq-1 : tc.toSeq]
			}
			requireProtos(t, want, got)
		})
	}
}

func testEventsBackward(t *testing.T, e env) {
	s := e.open(t).Store
	const n = 237
	for first := 1; first <= n; first += 100 {
		appendEvents(t, s, "c", userEvs(first, min(100, n-first+1))...)
	}
	appendEvents(t, s, "other", userEvs(1, 30)...)
	all := allEvents(t, s, "c")
	require.Len(t, all, n)
	for _, limit := range []int{1, 7, 50, 236, 237, 500} {
		t.Run(fmt.Sprint("limit=", limit), func(t *testing.T) {
			var pages [][]*messages.Event
			before := uint64(0)
			for {
				page, err := s.Events(t.Context(), "c", journal.EventQuery{Before: before, Limit: limit})
				require.NoError(t, err)
				if len(page) == 0 {
					break
				}
				require.LessOrEqual(t, len(page), limit)
				pages = append(pages, page)
				before = page[0].GetSeq()
				require.LessOrEqual(t, len(pages), n+1, "pagination does not end")
			}
			var got []*messages.Event
			for i := len(pages) - 1; i >= 0; i-- {
				if i < len(pages)-1 {
					assert.Len(t, pages[i], limit, "only the oldest page may be short")
				}
				got = append(got, pages[i]...)
			}
			requireProtos(t, all, got, "the pages, oldest first, are the whole log exactly once")
		})
	}
}

func testEventsUnknown(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	appendEvents(t, s, "known", userEvs(1, 3)...)
	evs, err := s.Events(ctx, "unknown", journal.EventQuery{})
	require.NoError(t, err)
	assert.Nil(t, evs, "an unknown conversation has no events: (nil, nil)")
	evs, err = s.Events(ctx, "unknown", journal.EventQuery{Before: 10, Limit: 5})
	require.NoError(t, err)
	assert.Nil(t, evs)
	_, err = s.Events(ctx, "unknown", journal.EventQuery{Limit: -1})
	requireSentinel(t, err, journal.ErrInvalid, "a negative limit is refused, known conversation or not")
	assert.Equal(t, uint64(0), lastSeq(t, s, "unknown"))
	sum, evs, err := s.LoadSince(ctx, "unknown")
	require.NoError(t, err)
	assert.Nil(t, sum)
	assert.Empty(t, evs)
}

var summaryCases = []suiteCase{
	{name: "LoadSinceWithoutSummary", run: testLoadSinceNoSummary},
	{name: "LoadSinceAfterSummary", run: testLoadSinceOneSummary},
	{name: "LatestWins", run: testSummaryLatestWins},
	{name: "Chapters", run: testSummaryChapters},
	{name: "ReplaceSameToSeq", run: testSummaryReplace},
	{name: "SummaryAtLastSeq", run: testSummaryAtEnd},
	{name: "RejectsBadRanges", run: testSummaryBadRanges},
	{name: "NotFound", run: testSummaryNotFound},
}

func summary(from, to uint64) *messages.Summary {
	return &messages.Summary{FromSeq: from, ToSeq: to, Content: fmt.Sprintf("summary of %d..%d", from, to), Version: "v1", Created: ts(int(to))}
}

func putSummary(t testing.TB, s journal.Store, conv string, sum *messages.Summary) {
	t.Helper()
	require.NoError(t, s.PutSummary(t.Context(), conv, sum))
}

func loadSince(t testing.TB, s journal.Store, conv string) (*messages.Summary, []*messages.Event) {
	t.Helper()
	sum, evs, err := s.LoadSince(t.Context(), conv)
	require.NoError(t, err)
	return sum, evs
}

func testLoadSinceNoSummary(t *testing.T, e env) {
	s := e.open(t).Store
	appendEvents(t, s, "c", userEvs(1, 8)...)
	sum, evs := loadSince(t, s, "c")
	assert.Nil(t, sum)
	requireProtos(t, withSeqs(1, userEvs(1, 8)), evs)
}

func testLoadSinceOneSummary(t *testing.T, e env) {
	s := e.open(t).Store
	appendEvents(t, s, "c", userEvs(1, 8)...)
	putSummary(t, s, "c", summary(1, 5))
	sum, evs := loadSince(t, s, "c")
	requireProto(t, summary(1, 5), sum)
	requireProtos(t, withSeqs(6, userEvs(6, 3)), evs, "LoadSince returns only the events after the summary's ToSeq")
	requireProtos(t, withSeqs(1, userEvs(1, 8)), allEvents(t, s, "c"), "a summary never touches the log")

	appendEvents(t, s, "c", userEvs(9, 2)...)
	_, evs = loadSince(t, s, "c")
	assert.Equal(t, seqRange(6, 10), seqs(evs))
}

func testSummaryLatestWins(t *testing.T, e env) {
	s := e.open(t).Store
	appendEvents(t, s, "c", userEvs(1, 12)...)
	for _, to := range []uint64{6, 3, 9} {
		putSummary(t, s, "c", summary(1, to))
	}
	sum, evs := loadSince(t, s, "c")
	requireProto(t, summary(1, 9), sum, "the summary with the greatest ToSeq wins, whatever the order of writes")
	assert.Equal(t, seqRange(10, 12), seqs(evs))
	latest, err := s.LatestSummary(t.Context(), "c")
	require.NoError(t, err)
	requireProto(t, summary(1, 9), latest)
}

func testSummaryChapters(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	appendEvents(t, s, "c", userEvs(1, 12)...)
	appendEvents(t, s, "d", userEvs(1, 12)...)
	putSummary(t, s, "d", summary(1, 2))
	for _, sm := range []*messages.Summary{summary(7, 9), summary(1, 3), summary(4, 6)} {
		putSummary(t, s, "c", sm)
	}
	cases := []struct {
		before uint64
		want   *messages.Summary // nil: ErrNotFound
	}{
		{100, summary(7, 9)}, {10, summary(7, 9)}, {9, summary(4, 6)}, {7, summary(4, 6)},
		{6, summary(1, 3)}, {4, summary(1, 3)}, {3, nil}, {1, nil}, {0, nil},
	}
	for _, tc := range cases {
		got, err := s.SummaryBefore(ctx, "c", tc.before)
		if tc.want == nil {
			requireSentinel(t, err, journal.ErrNotFound, "before %d", tc.before)
			continue
		}
		require.NoError(t, err, "before %d", tc.before)
		requireProto(t, tc.want, got, "before %d", tc.before)
	}
	// Walking the chapters from the latest visits each summary once.
	var chain []uint64
	sum, err := s.LatestSummary(ctx, "c")
	for err == nil {
		chain = append(chain, sum.GetToSeq())
		sum, err = s.SummaryBefore(ctx, "c", sum.GetToSeq())
	}
	requireSentinel(t, err, journal.ErrNotFound)
	assert.Equal(t, []uint64{9, 6, 3}, chain)
}

func testSummaryReplace(t *testing.T, e env) {
	s := e.open(t).Store
	appendEvents(t, s, "c", userEvs(1, 5)...)
	putSummary(t, s, "c", summary(1, 4))
	second := summary(2, 4)
	second.Content = "rewritten"
	putSummary(t, s, "c", second)
	sum, evs := loadSince(t, s, "c")
	requireProto(t, second, sum)
	assert.Equal(t, []uint64{5}, seqs(evs))
	_, err := s.SummaryBefore(t.Context(), "c", 4)
	requireSentinel(t, err, journal.ErrNotFound, "the replaced summary is gone")
}

func testSummaryAtEnd(t *testing.T, e env) {
	s := e.open(t).Store
	appendEvents(t, s, "c", userEvs(1, 5)...)
	putSummary(t, s, "c", summary(1, 5))
	sum, evs := loadSince(t, s, "c")
	requireProto(t, summary(1, 5), sum)
	assert.Empty(t, evs)
}

func testSummaryBadRanges(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	appendEvents(t, s, "c", userEvs(1, 5)...)
	cases := []struct {
		name string
		conv string
		sum  *messages.Summary
	}{
		{"Nil", "c", nil},
		{"FromZero", "c", summary(0, 3)},
		{"FromAfterTo", "c", summary(4, 3)},
		{"BeyondLastSeq", "c", summary(1, 6)},
		{"UnknownConversation", "empty", summary(1, 1)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			requireSentinel(t, s.PutSummary(ctx, tc.conv, tc.sum), journal.ErrInvalid)
			_, err := s.LatestSummary(ctx, tc.conv)
			requireSentinel(t, err, journal.ErrNotFound, "a rejected summary is not stored")
		})
	}
}

func testSummaryNotFound(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	appendEvents(t, s, "c", userEvs(1, 5)...)
	for _, conv := range []string{"c", "unknown"} {
		_, err := s.LatestSummary(ctx, conv)
		requireSentinel(t, err, journal.ErrNotFound, conv)
		_, err = s.SummaryBefore(ctx, conv, 5)
		requireSentinel(t, err, journal.ErrNotFound, conv)
	}
}

// cloneOf is proto.Clone with the type kept.
func cloneOf[M proto.Message](m M) M { return proto.Clone(m).(M) }
