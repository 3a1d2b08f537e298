package journaltest

import (
	"fmt"
	"sync"
	"testing"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// rescheduleCases check AppendRequest.Reschedule: a pending call's deadline
// moves, in its row and in its deadline record, in one write, and only
// while the call is pending.
var rescheduleCases = []suiteCase{
	{name: "MovesRowAndDeadline", run: testRescheduleMoves},
	{name: "UnsetRemovesDeadline", run: testRescheduleRemoves},
	{name: "StaleChangesNothing", run: testRescheduleStale},
	{name: "SeesUpsertsAndResolutions", run: testRescheduleSameRequest},
	{name: "InBatchOrder", run: testRescheduleBatch},
	{name: "RacesResolve", run: testRescheduleRacesResolve},
	{name: "BadInput", run: testRescheduleBadInput},
	{name: "Deleted", run: testRescheduleDeleted},
	{name: "SurvivesReopen", run: testRescheduleReopen, durable: true},
	{name: "ExpiryOnlyWhenDue", run: testExpiryDueBy},
	{name: "ExpiryLosesToEarlierRescheduleInBatch", run: testExpiryDueByBatch},
}

// expire is the expiry actor's write: the call expires if its deadline is
// due by sec.
func expire(conv, call string, sec int) *messages.AppendRequest {
	return &messages.AppendRequest{ConversationId: conv, Unfenced: true, DueBy: ts(sec), Resolutions: []*messages.ToolResolution{
		{ToolCallId: call, Status: expired, Result: errorOutcome("expired", "no answer"), At: ts(sec)}}}
}

// testExpiryDueBy: an expiry (DueBy) applies only to a call whose deadline
// is due by then; one moved later, or removed, is stale for it.
func testExpiryDueBy(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	suspend(t, s, "c", "tc-due", "tc-moved", "tc-none")
	appendOK(t, s, reschedule("c", "tc-moved", 300))
	appendOK(t, s, reschedule("c", "tc-none", -1))
	before := allDeadlines(t, s)
	for _, call := range []string{"tc-moved", "tc-none"} {
		res, err := s.Append(ctx, expire("c", call, 100))
		requireSentinel(t, err, journal.ErrStale, call)
		requireSentinel(t, res.Err, journal.ErrStale, call)
		assert.Equal(t, pending, toolCall(t, s, call).GetStatus(), "%s: nothing written", call)
	}
	requireProtos(t, before, allDeadlines(t, s), "nothing written")
	_, err := s.Append(ctx, expire("c", "tc-due", 99))
	requireSentinel(t, err, journal.ErrStale, "a deadline after DueBy is not due")

	appendOK(t, s, expire("c", "tc-due", 100))
	assert.Equal(t, expired, toolCall(t, s, "tc-due").GetStatus(), "due exactly at DueBy")
	appendOK(t, s, expire("c", "tc-moved", 301))
	assert.Equal(t, expired, toolCall(t, s, "tc-moved").GetStatus(), "due at its new time")
	assert.Empty(t, deadlinesOf(t, s, "c"))
	// Without DueBy a resolution needs no deadline (the old behaviour).
	appendOK(t, s, &messages.AppendRequest{ConversationId: "c", Unfenced: true, Resolutions: []*messages.ToolResolution{
		{ToolCallId: "tc-none", Status: resolved, Result: contentOutcome("ok"), At: ts(5)}}})
}

// testExpiryDueByBatch: in one batch, a reschedule committed before an
// expiry of the old deadline wins; the expiry is stale.
func testExpiryDueByBatch(t *testing.T, e env) {
	s := e.open(t).Store
	suspend(t, s, "c", "tc-1", "tc-2")
	results := s.AppendBatch(t.Context(), []*messages.AppendRequest{
		reschedule("c", "tc-1", 500), expire("c", "tc-1", 100),
		expire("c", "tc-2", 100), reschedule("c", "tc-2", 500),
	})
	require.Len(t, results, 4)
	require.NoError(t, results[0].Err)
	requireSentinel(t, results[1].Err, journal.ErrStale, "the moved deadline is not due")
	require.NoError(t, results[2].Err, "due: expired")
	requireSentinel(t, results[3].Err, journal.ErrStale, "expired earlier in the batch")
	requireProto(t, withDeadline("c", "tc-1", 500), toolCall(t, s, "tc-1"))
	assert.Equal(t, expired, toolCall(t, s, "tc-2").GetStatus())
	requireProtos(t, []*messages.Deadline{deadline("c", "tc-1", 500)}, allDeadlines(t, s))
}

// reschedule is an unfenced request moving the deadline of call (sec < 0:
// removing it), as Runtime.Reschedule writes it.
func reschedule(conv, call string, sec int) *messages.AppendRequest {
	d := &messages.Deadline{ConversationId: conv, ToolCallId: call}
	if sec >= 0 {
		d.At = ts(sec)
	}
	return &messages.AppendRequest{ConversationId: conv, Unfenced: true, Reschedule: []*messages.Deadline{d}}
}

// withDeadline is the stored pending row of humanCall with deadline at sec
// (none if sec < 0).
func withDeadline(conv, call string, sec int) *messages.ToolCallRecord {
	row := humanCall(conv, call)
	row.Status = pending
	if sec >= 0 {
		row.Deadline = ts(sec)
	}
	return row
}

func testRescheduleMoves(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	last := suspend(t, s, "c", "tc-1", "tc-2")
	appendOK(t, s, reschedule("c", "tc-1", 40))
	assert.Equal(t, last, lastSeq(t, s, "c"), "a reschedule appends no event")
	requireProto(t, withDeadline("c", "tc-1", 40), toolCall(t, s, "tc-1"), "the row holds the new deadline")
	requireProtos(t, []*messages.Deadline{deadline("c", "tc-1", 40), deadline("c", "tc-2", 100)}, allDeadlines(t, s), "shortened")

	appendOK(t, s, reschedule("c", "tc-1", 300))
	requireProto(t, withDeadline("c", "tc-1", 300), toolCall(t, s, "tc-1"))
	requireProtos(t, []*messages.Deadline{deadline("c", "tc-2", 100), deadline("c", "tc-1", 300)}, allDeadlines(t, s), "extended: only the new time is listed")
	var due []*messages.Deadline
	require.NoError(t, s.Deadlines(ctx, tm(200), func(d *messages.Deadline) error { due = append(due, d); return nil }))
	requireProtos(t, []*messages.Deadline{deadline("c", "tc-2", 100)}, due, "the old time is not due")

	rows, err := s.PendingToolCalls(ctx, "c")
	require.NoError(t, err)
	requireProtos(t, []*messages.ToolCallRecord{withDeadline("c", "tc-1", 300), humanCallPending("c", "tc-2")}, rows, "PendingToolCalls shows the new deadline")
	listed, _, err := s.ListPendingToolCalls(ctx, "", 0)
	require.NoError(t, err)
	requireProtos(t, rows, listed, "ListPendingToolCalls shows the new deadline")
	assert.Equal(t, last, lastSeq(t, s, "c"))

	// The pending call can still be resolved, which removes the new
	// deadline.
	_, err = s.ResolveToolCall(ctx, "tc-1", resolved, contentOutcome("ok"), tm(5))
	require.NoError(t, err)
	requireProtos(t, []*messages.Deadline{deadline("c", "tc-2", 100)}, allDeadlines(t, s))
	assert.Equal(t, ts(300).AsTime(), toolCall(t, s, "tc-1").GetDeadline().AsTime(), "a resolution leaves the row's deadline as it was")
}

// humanCallPending is humanCall as stored: pending, no deadline in the row.
func humanCallPending(conv, call string) *messages.ToolCallRecord {
	return withDeadline(conv, call, -1)
}

func testRescheduleRemoves(t *testing.T, e env) {
	s := e.open(t).Store
	suspend(t, s, "c", "tc-1", "tc-2")
	appendOK(t, s, reschedule("c", "tc-1", 30))
	appendOK(t, s, reschedule("c", "tc-1", -1))
	requireProto(t, humanCallPending("c", "tc-1"), toolCall(t, s, "tc-1"), "the row has no deadline and is still pending")
	requireProtos(t, []*messages.Deadline{deadline("c", "tc-2", 100)}, allDeadlines(t, s), "the deadline record is gone")
	appendOK(t, s, reschedule("c", "tc-1", -1))
	requireProtos(t, []*messages.Deadline{deadline("c", "tc-2", 100)}, allDeadlines(t, s), "removing twice is fine")
	appendOK(t, s, reschedule("c", "tc-1", 7))
	requireProto(t, withDeadline("c", "tc-1", 7), toolCall(t, s, "tc-1"))
	requireProtos(t, []*messages.Deadline{deadline("c", "tc-1", 7), deadline("c", "tc-2", 100)}, allDeadlines(t, s), "a call without a deadline gets one")
}

func testRescheduleStale(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	suspend(t, s, "c", "tc-1", "tc-2", "tc-3")
	suspend(t, s, "d", "tc-d")
	_, err := s.ResolveToolCall(ctx, "tc-2", resolved, contentOutcome("yes"), tm(1))
	require.NoError(t, err)
	_, err = s.ResolveToolCall(ctx, "tc-3", expired, errorOutcome("expired", "late"), tm(2))
	require.NoError(t, err)
	before := map[string]*messages.ToolCallRecord{}
	for _, id := range []string{"tc-1", "tc-2", "tc-3", "tc-d"} {
		before[id] = toolCall(t, s, id)
	}
	dls := allDeadlines(t, s)
	stale := []struct {
		name string
		req  *messages.AppendRequest
	}{
		{"unknown call", reschedule("c", "tc-none", 50)},
		{"resolved call", reschedule("c", "tc-2", 50)},
		{"expired call", reschedule("c", "tc-3", -1)},
		{"call of another conversation", reschedule("c", "tc-d", 50)},
		{"a pending call with a stale one", &messages.AppendRequest{ConversationId: "c", Unfenced: true, Reschedule: []*messages.Deadline{
			deadline("c", "tc-1", 50), deadline("c", "tc-2", 50)}}},
	}
	for _, tc := range stale {
		t.Run(tc.name, func(t *testing.T) {
			res, err := s.Append(ctx, tc.req)
			requireSentinel(t, err, journal.ErrStale)
			requireSentinel(t, res.Err, journal.ErrStale)
			for id, row := range before {
				requireProto(t, row, toolCall(t, s, id), "a stale reschedule changes no row")
			}
			requireProtos(t, dls, allDeadlines(t, s), "a stale reschedule changes no deadline")
			_, err = s.ToolCall(ctx, "tc-none")
			requireSentinel(t, err, journal.ErrNotFound, "a stale reschedule creates no row")
		})
	}
}

func testRescheduleSameRequest(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	suspend(t, s, "c", "tc-1")
	// A resolution earlier in the request makes the call stale for it.
	req := reschedule("c", "tc-1", 50)
	req.Resolutions = []*messages.ToolResolution{{ToolCallId: "tc-1", Status: resolved, Result: contentOutcome("ok"), At: ts(3)}}
	_, err := s.Append(ctx, req)
	requireSentinel(t, err, journal.ErrStale)
	requireProto(t, humanCallPending("c", "tc-1"), toolCall(t, s, "tc-1"), "nothing of the request was written")
	requireProtos(t, []*messages.Deadline{deadline("c", "tc-1", 100)}, allDeadlines(t, s))

	// A call the request upserts is pending for it; the reschedule applies
	// after Schedule.
	req = reschedule("c", "tc-2", 60)
	req.ToolCalls = []*messages.ToolCallRecord{withDeadline("c", "tc-2", 20)}
	req.Schedule = []*messages.Deadline{deadline("c", "tc-2", 20)}
	appendOK(t, s, req)
	requireProto(t, withDeadline("c", "tc-2", 60), toolCall(t, s, "tc-2"))
	requireProtos(t, []*messages.Deadline{deadline("c", "tc-2", 60), deadline("c", "tc-1", 100)}, allDeadlines(t, s))
}

func testRescheduleBatch(t *testing.T, e env) {
	s := e.open(t).Store
	suspend(t, s, "c", "tc-1")
	resolve := &messages.AppendRequest{ConversationId: "c", Unfenced: true, Resolutions: []*messages.ToolResolution{
		{ToolCallId: "tc-1", Status: resolved, Result: contentOutcome("ok"), At: ts(3)}}}
	results := s.AppendBatch(t.Context(), []*messages.AppendRequest{reschedule("c", "tc-1", 50), resolve, reschedule("c", "tc-1", 70)})
	require.Len(t, results, 3)
	require.NoError(t, results[0].Err, "pending: rescheduled")
	require.NoError(t, results[1].Err, "then resolved")
	requireSentinel(t, results[2].Err, journal.ErrStale, "resolved earlier in the batch: stale")
	row := toolCall(t, s, "tc-1")
	assert.Equal(t, resolved, row.GetStatus())
	requireProto(t, ts(50), row.GetDeadline(), "the row keeps the deadline of the reschedule that passed")
	assert.Empty(t, allDeadlines(t, s), "the resolution removed the deadline")
}

// testRescheduleRacesResolve races a reschedule against a resolution of
// each call: whichever order the Store picks, a finished call has no
// deadline record left, and a reschedule that lost fails with ErrStale.
func testRescheduleRacesResolve(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	const n = 40
	calls := make([]string, n)
	for i := range calls {
		calls[i] = fmt.Sprintf("tc-%02d", i)
	}
	suspend(t, s, "c", calls...)
	resErrs, schedErrs := make([]error, n), make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, id := range calls {
		wg.Go(func() {
			<-start
			_, resErrs[i] = s.ResolveToolCall(ctx, id, resolved, contentOutcome("ok"), tm(1))
		})
		wg.Go(func() {
			<-start
			_, schedErrs[i] = s.Append(ctx, reschedule("c", id, 500+i))
		})
	}
	close(start)
	wg.Wait()
	for i, id := range calls {
		require.NoError(t, resErrs[i], "the resolution of %s always wins: a reschedule never finishes a call", id)
		if schedErrs[i] != nil {
			requireSentinel(t, schedErrs[i], journal.ErrStale, "the reschedule of %s ran after its resolution", id)
		}
		row := toolCall(t, s, id)
		assert.Equal(t, resolved, row.GetStatus(), id)
		if schedErrs[i] == nil {
			requireProto(t, ts(500+i), row.GetDeadline(), "%s was rescheduled before its resolution", id)
		}
	}
	assert.Empty(t, allDeadlines(t, s), "no finished call keeps a deadline record")
	rows, err := s.PendingToolCalls(ctx, "c")
	require.NoError(t, err)
	assert.Empty(t, rows)
}

func testRescheduleBadInput(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	suspend(t, s, "c", "tc-1")
	other := reschedule("c", "tc-1", 50)
	other.Reschedule[0].ConversationId = "d"
	badTime := reschedule("c", "tc-1", 50)
	badTime.Reschedule[0].At = &timestamppb.Timestamp{Seconds: 1 << 62}
	badID := reschedule("c", "", 50)
	nilEntry := &messages.AppendRequest{ConversationId: "c", Unfenced: true, Reschedule: []*messages.Deadline{nil}}
	for name, req := range map[string]*messages.AppendRequest{
		"entry names another conversation": other, "time out of range": badTime, "empty tool call id": badID, "nil entry": nilEntry,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := s.Append(ctx, req)
			requireSentinel(t, err, journal.ErrInvalid)
			requireProto(t, humanCallPending("c", "tc-1"), toolCall(t, s, "tc-1"), "nothing written")
			requireProtos(t, []*messages.Deadline{deadline("c", "tc-1", 100)}, allDeadlines(t, s), "nothing written")
		})
	}
}

func testRescheduleReopen(t *testing.T, e env) {
	h := e.open(t)
	suspend(t, h.Store, "c", "tc-1", "tc-2", "tc-3")
	appendOK(t, h.Store, reschedule("c", "tc-1", 300))
	appendOK(t, h.Store, reschedule("c", "tc-2", 10))
	appendOK(t, h.Store, reschedule("c", "tc-3", -1))
	s := h.Reopen(t)
	requireProto(t, withDeadline("c", "tc-1", 300), toolCall(t, s, "tc-1"))
	requireProto(t, withDeadline("c", "tc-2", 10), toolCall(t, s, "tc-2"))
	requireProto(t, humanCallPending("c", "tc-3"), toolCall(t, s, "tc-3"))
	requireProtos(t, []*messages.Deadline{deadline("c", "tc-2", 10), deadline("c", "tc-1", 300)}, allDeadlines(t, s), "reschedules survive Reopen")
	// Resolving after the reopen still removes the moved deadline.
	_, err := s.ResolveToolCall(t.Context(), "tc-1", expired, errorOutcome("expired", "late"), tm(400))
	require.NoError(t, err)
	requireProtos(t, []*messages.Deadline{deadline("c", "tc-2", 10)}, allDeadlines(t, s))
}

// testRescheduleDeleted: a deleted conversation's call cannot be
// rescheduled (ErrDeleted), and no deadline comes back.
func testRescheduleDeleted(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	suspend(t, s, "c", "tc-1")
	require.NoError(t, s.DeleteConversation(ctx, "c"))
	_, err := s.Append(ctx, reschedule("c", "tc-1", 50))
	requireSentinel(t, err, journal.ErrDeleted)
	assert.Empty(t, allDeadlines(t, s))
	_, err = s.ToolCall(ctx, "tc-1")
	requireSentinel(t, err, journal.ErrNotFound)
}
