package journaltest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"
)

var toolCallCases = []suiteCase{
	{name: "UpsertAndGet", run: testToolCallUpsert},
	{name: "PendingOrderedByID", run: testToolCallPending},
	{name: "ListPendingAcrossConversations", run: testToolCallListPending},
	{name: "ListPendingPageSize", run: testToolCallListPendingPageSize},
	{name: "NotFound", run: testToolCallNotFound},
	{name: "OwnedByOtherConversation", run: testToolCallOwned},
	{name: "ConcurrentClaimsOneOwner", run: testToolCallConcurrentClaims},
	{name: "ConcurrentResolveOneWins", run: testResolveConcurrent},
	{name: "ResolveStale", run: testResolveStale},
	{name: "ResolveRemovesDeadline", run: testResolveRemovesDeadline},
	{name: "ResolveReplacesResultAndTime", run: testResolveReplaces},
	{name: "ResolveRecordsNoResolver", run: testResolveNoResolver},
	{name: "ResolveOverflowingRowRefused", run: testResolveOverflowingRow},
	{name: "MalformedCallEventsRefused", run: testMalformedCallEventsRefused},
}

func upsert(t testing.TB, s journal.Store, rec *messages.ToolCallRecord) {
	t.Helper()
	require.NoError(t, s.UpsertToolCall(t.Context(), rec))
}

func testToolCallUpsert(t *testing.T, e env) {
	s := e.open(t).Store
	rec := humanCall("c", "tc-1")
	upsert(t, s, rec)
	assert.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_UNSPECIFIED, rec.GetStatus(), "the caller's record is not changed")
	want := cloneOf(rec)
	want.Status = pending
	requireProto(t, want, toolCall(t, s, "tc-1"), "a new row without a status is pending")

	done := humanCall("c", "tc-2")
	done.Status, done.Result, done.Resolved = errored, errorOutcome("boom", "failed"), ts(3)
	upsert(t, s, done)
	requireProto(t, done, toolCall(t, s, "tc-2"), "an explicit status is kept")

	// Upsert replaces the whole row; an unspecified status is pending again.
	repl := humanCall("c", "tc-2")
	repl.Name, repl.Args = "other_tool", `{"x":1}`
	upsert(t, s, repl)
	want = cloneOf(repl)
	want.Status = pending
	requireProto(t, want, toolCall(t, s, "tc-2"))
	pend, err := s.PendingToolCalls(t.Context(), "c")
	require.NoError(t, err)
	assert.Equal(t, []string{"tc-1", "tc-2"}, callIDs(pend))
}

func testToolCallPending(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	for _, id := range []string{"tc-3", "tc-1", "tc-10", "tc-2"} {
		upsert(t, s, humanCall("c", id))
	}
	done := humanCall("c", "tc-0")
	done.Status = resolved
	upsert(t, s, done)
	upsert(t, s, humanCall("d", "tc-d"))
	pend, err := s.PendingToolCalls(ctx, "c")
	require.NoError(t, err)
	assert.Equal(t, []string{"tc-1", "tc-10", "tc-2", "tc-3"}, callIDs(pend), "pending rows of c only, ordered by id")
	for _, row := range pend {
		assert.Equal(t, pending, row.GetStatus())
		assert.Equal(t, "c", row.GetConversationId())
	}
	_, err = s.ResolveToolCall(ctx, "tc-10", resolved, contentOutcome("1"), tm(1))
	require.NoError(t, err)
	pend, err = s.PendingToolCalls(ctx, "c")
	require.NoError(t, err)
	assert.Equal(t, []string{"tc-1", "tc-2", "tc-3"}, callIDs(pend))
	pend, err = s.PendingToolCalls(ctx, "unknown")
	require.NoError(t, err)
	assert.Empty(t, pend)

	// By id bytewise: upper case before lower, multi-byte UTF-8 after
	// ASCII, so that an order by a collation or by length shows, in the
	// conversation's listing and in the listing of every conversation.
	ids := []string{"tc-z", "tc-B", "tc-a", "tc-\u00e9", "tc-\x01", "TC", "tc-\u4e16", "tc-\U0001F600", "tc-\uFFFD", "tc-aa"}
	for _, id := range ids {
		upsert(t, s, humanCall("e", id))
	}
	want := slices.Sorted(slices.Values(ids))
	pend, err = s.PendingToolCalls(ctx, "e")
	require.NoError(t, err)
	assert.Equal(t, want, callIDs(pend), "ordered by id, bytewise")
	all, _, err := s.ListPendingToolCalls(ctx, "", 0)
	require.NoError(t, err)
	var ofE []string
	for _, r := range all {
		if r.GetConversationId() == "e" {
			ofE = append(ofE, r.GetId())
		}
	}
	assert.Equal(t, want, ofE, "ListPendingToolCalls: ordered by id, bytewise, within the conversation")
}

// testToolCallListPending: every pending row of every conversation, paged
// in (conversation, tool call) order with PendingCursor cursors; answered
// rows and deleted conversations drop out.
func testToolCallListPending(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	list := func(cursor string, limit int) ([]string, string) {
		t.Helper()
		rows, next, err := s.ListPendingToolCalls(ctx, cursor, limit)
		require.NoError(t, err)
		var got []string
		for _, r := range rows {
			assert.Equal(t, pending, r.GetStatus())
			got = append(got, r.GetConversationId()+" "+r.GetId())
		}
		return got, next
	}
	got, next := list("", 0)
	assert.Empty(t, got, "an empty store")
	assert.Empty(t, next)

	suspend(t, s, "b", "tc-b")
	for _, c := range [][2]string{{"a", "tc-2"}, {"a", "tc-1"}, {"a/x", "tc-0"}, {"c", "tc-c"}} {
		upsert(t, s, humanCall(c[0], c[1]))
	}
	done := humanCall("a", "tc-3")
	done.Status = resolved
	upsert(t, s, done)
	all := []string{"a tc-1", "a tc-2", "a/x tc-0", "b tc-b", "c tc-c"}
	got, next = list("", 0)
	assert.Equal(t, all, got, "ordered by conversation, then tool call id; answered rows left out")
	assert.Empty(t, next)
	got, next = list("", math.MaxInt)
	assert.Equal(t, all, got, "a limit of math.MaxInt lists every row")
	assert.Empty(t, next)

	var paged []string
	cursor := ""
	for range len(all) + 1 {
		page, n := list(cursor, 2)
		require.LessOrEqual(t, len(page), 2)
		paged = append(paged, page...)
		if n == "" {
			break
		}
		cursor = n
	}
	assert.Equal(t, all, paged, "pages of 2 cover every row once")
	got, _ = list(journal.PendingCursor("a", "tc-1"), 0)
	assert.Equal(t, all[1:], got, "a cursor made from any row resumes after it")
	got, _ = list(journal.PendingCursor("a/x", "tc-zz"), 1)
	assert.Equal(t, all[3:4], got, "a cursor need not name an existing row")

	_, err := s.ResolveToolCall(ctx, "tc-2", resolved, contentOutcome("1"), tm(1))
	require.NoError(t, err)
	require.NoError(t, s.DeleteConversation(ctx, "b"))
	got, _ = list("", 0)
	assert.Equal(t, []string{"a tc-1", "a/x tc-0", "c tc-c"}, got)
}

// testToolCallListPendingPageSize: a limit of 0 means 100 and a negative
// one is ErrInvalid, as in every listing; a
// page's next cursor is the PendingCursor of its last row, and "" once no
// row follows, a full last page included; a cursor past the last row gives
// an empty page and "".
func testToolCallListPendingPageSize(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	var all []string
	for i := range 105 {
		conv, call := fmt.Sprintf("c%d", i%3), fmt.Sprintf("tc-%03d", i)
		upsert(t, s, humanCall(conv, call))
		all = append(all, journal.PendingCursor(conv, call))
	}
	slices.Sort(all) // a PendingCursor of these ids sorts as its row does
	cursors := func(rows []*messages.ToolCallRecord) []string {
		var out []string
		for _, r := range rows {
			out = append(out, journal.PendingCursor(r.GetConversationId(), r.GetId()))
		}
		return out
	}
	rows, next, err := s.ListPendingToolCalls(ctx, "", 0)
	require.NoError(t, err)
	assert.Equal(t, all[:100], cursors(rows), "limit 0 means 100")
	assert.Equal(t, all[99], next, "the next cursor is the last row's")
	for _, limit := range []int{-1, math.MinInt} {
		_, _, err := s.ListPendingToolCalls(ctx, "", limit)
		requireSentinel(t, err, journal.ErrInvalid, "a negative limit is refused, as by every listing (limit %d)", limit)
		_, _, err = s.ListPendingToolCalls(ctx, all[5], limit)
		requireSentinel(t, err, journal.ErrInvalid, "with a cursor too (limit %d)", limit)
	}
	rows, next, err = s.ListPendingToolCalls(ctx, all[99], 5)
	require.NoError(t, err)
	assert.Equal(t, all[100:], cursors(rows))
	assert.Empty(t, next, "a full page that ends the listing has no next cursor")
	rows, next, err = s.ListPendingToolCalls(ctx, all[104], 5)
	require.NoError(t, err)
	assert.Empty(t, rows, "a cursor at the last row")
	assert.Empty(t, next)
	rows, next, err = s.ListPendingToolCalls(ctx, journal.PendingCursor("zz", "tc"), 5)
	require.NoError(t, err)
	assert.Empty(t, rows, "a cursor past the last row")
	assert.Empty(t, next)
}

func testToolCallNotFound(t *testing.T, e env) {
	s := e.open(t).Store
	upsert(t, s, humanCall("c", "tc-1"))
	_, err := s.ToolCall(t.Context(), "tc-2")
	requireSentinel(t, err, journal.ErrNotFound)
}

func testToolCallOwned(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	upsert(t, s, humanCall("a", "tc-1"))
	before := toolCall(t, s, "tc-1")
	requireSentinel(t, s.UpsertToolCall(ctx, humanCall("b", "tc-1")), journal.ErrConflict)
	requireProto(t, before, toolCall(t, s, "tc-1"), "the owner's row is unchanged")
	pend, err := s.PendingToolCalls(ctx, "b")
	require.NoError(t, err)
	assert.Empty(t, pend)
}

// testToolCallConcurrentClaims: conversations racing to create a row of
// one tool call id, by UpsertToolCall and by Append, leave exactly one
// owner: the others fail with ErrConflict and write nothing, so the id has
// one row, of the conversation whose write succeeded, and no other
// conversation lists it as pending.
func testToolCallConcurrentClaims(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	const claimants, ids = 6, 20
	for id := range ids {
		call := fmt.Sprint("tc-", id)
		errs := make([]error, claimants)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for c := range claimants {
			conv := fmt.Sprint("c", c)
			wg.Go(func() {
				<-start
				if c%2 == 0 {
					errs[c] = s.UpsertToolCall(ctx, humanCall(conv, call))
					return
				}
				_, errs[c] = s.Append(ctx, &messages.AppendRequest{ConversationId: conv, Unfenced: true,
					ToolCalls: []*messages.ToolCallRecord{humanCall(conv, call)},
					Schedule:  []*messages.Deadline{deadline(conv, call, 5)}})
			})
		}
		close(start)
		wg.Wait()
		owner := ""
		for c, err := range errs {
			if err == nil {
				require.Empty(t, owner, "%s: two conversations own it", call)
				owner = fmt.Sprint("c", c)
				continue
			}
			requireSentinel(t, err, journal.ErrConflict, "%s: claimant c%d", call, c)
		}
		require.NotEmpty(t, owner, "%s: one claim succeeds", call)
		assert.Equal(t, owner, toolCall(t, s, call).GetConversationId(), "%s: the row is the winner's", call)
		for c := range claimants {
			conv := fmt.Sprint("c", c)
			pend, err := s.PendingToolCalls(ctx, conv)
			require.NoError(t, err)
			has := slices.ContainsFunc(pend, func(r *messages.ToolCallRecord) bool { return r.GetId() == call })
			assert.Equal(t, conv == owner, has, "%s: pending in %s", call, conv)
			hasDeadline := slices.ContainsFunc(deadlinesOf(t, s, conv), func(d *messages.Deadline) bool { return d.GetToolCallId() == call })
			assert.Equal(t, conv == owner && c%2 == 1, hasDeadline, "%s: deadline in %s", call, conv)
		}
	}
}

func testResolveConcurrent(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	suspend(t, s, "c", "tc-1")
	const n = 1000
	statuses := []messages.ToolCallStatus{resolved, errored, expired}
	rows := make([]*messages.ToolCallRecord, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			rows[i], errs[i] = s.ResolveToolCall(ctx, "tc-1", statuses[i%3], contentOutcome(fmt.Sprint(i)), tm(1000+i))
		})
	}
	close(start)
	wg.Wait()
	winner := -1
	for i, err := range errs {
		if err == nil {
			require.Equal(t, -1, winner, "resolvers %d and %d both succeeded", winner, i)
			winner = i
			continue
		}
		requireSentinel(t, err, journal.ErrStale, "resolver %d", i)
	}
	require.NotEqual(t, -1, winner, "no resolver succeeded")
	got := toolCall(t, s, "tc-1")
	requireProto(t, rows[winner], got, "the winner's returned row is the stored one")
	assert.Equal(t, statuses[winner%3], got.GetStatus())
	requireProto(t, contentOutcome(fmt.Sprint(winner)), got.GetResult())
	requireProto(t, ts(1000+winner), got.GetResolved())
	assert.Empty(t, allDeadlines(t, s))
}

func testResolveStale(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	suspend(t, s, "c", "tc-r", "tc-e", "tc-x")
	_, err := s.ResolveToolCall(ctx, "tc-r", resolved, contentOutcome("yes"), tm(1))
	require.NoError(t, err)
	_, err = s.ResolveToolCall(ctx, "tc-e", errored, errorOutcome("tool", "failed"), tm(2))
	require.NoError(t, err)
	row, err := s.ResolveToolCall(ctx, "tc-x", expired, errorOutcome("expired", "no answer"), tm(3))
	require.NoError(t, err)
	want := humanCall("c", "tc-x")
	want.Status, want.Result, want.Resolved = expired, errorOutcome("expired", "no answer"), ts(3)
	requireProto(t, want, row, "ResolveToolCall returns the updated row")

	_, err = s.ResolveToolCall(ctx, "unknown", resolved, contentOutcome("late"), tm(9))
	requireSentinel(t, err, journal.ErrStale, "unknown call")
	_, err = s.ToolCall(ctx, "unknown")
	requireSentinel(t, err, journal.ErrNotFound, "a stale resolve of an unknown call creates no row")
	for _, id := range []string{"tc-r", "tc-e", "tc-x"} {
		before := toolCall(t, s, id)
		for _, st := range []messages.ToolCallStatus{resolved, errored, expired} {
			_, err := s.ResolveToolCall(ctx, id, st, contentOutcome("late"), tm(9))
			requireSentinel(t, err, journal.ErrStale, "%s already %v, resolved again to %v", id, before.GetStatus(), st)
		}
		requireProto(t, before, toolCall(t, s, id), "a stale resolve changes nothing")
	}
}

// testResolveReplaces: a resolve sets the row's result and resolved time to
// its own, a nil result and the zero time included (the behaviour's
// resolve takes a result or nil), whatever the pending row held.
func testResolveReplaces(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	for _, id := range []string{"tc-1", "tc-2"} {
		rec := humanCall("c", id)
		rec.Result, rec.Resolved = contentOutcome("left over"), ts(9)
		upsert(t, s, rec)
	}
	row, err := s.ResolveToolCall(ctx, "tc-1", resolved, nil, time.Time{})
	require.NoError(t, err)
	want := humanCall("c", "tc-1")
	want.Status = resolved
	requireProto(t, want, row, "no result, no resolved time")
	requireProto(t, want, toolCall(t, s, "tc-1"))

	row, err = s.ResolveToolCall(ctx, "tc-2", errored, errorOutcome("tool", "failed"), tm(5))
	require.NoError(t, err)
	want = humanCall("c", "tc-2")
	want.Status, want.Result, want.Resolved = errored, errorOutcome("tool", "failed"), ts(5)
	requireProto(t, want, row)
	requireProto(t, want, toolCall(t, s, "tc-2"))
}

// testResolveNoResolver: a resolve names no resolver, so the row it leaves
// has none, whatever the pending row held (the row's resolver is set with
// its terminal status, by the resolution that answers it); an Append
// resolution's by replaces it the same way, none included.
func testResolveNoResolver(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	for _, id := range []string{"tc-1", "tc-2"} {
		rec := humanCall("c", id)
		rec.Resolver = bob
		upsert(t, s, rec)
	}
	row, err := s.ResolveToolCall(ctx, "tc-1", resolved, contentOutcome("ok"), tm(5))
	require.NoError(t, err)
	want := humanCall("c", "tc-1")
	want.Status, want.Result, want.Resolved = resolved, contentOutcome("ok"), ts(5)
	requireProto(t, want, row, "ResolveToolCall returns a row with no resolver")
	requireProto(t, want, toolCall(t, s, "tc-1"), "ResolveToolCall stores a row with no resolver")

	appendOK(t, s, &messages.AppendRequest{
		ConversationId: "c",
		Resolutions:    []*messages.ToolResolution{{ToolCallId: "tc-2", Status: expired, At: ts(6)}},
	})
	want = humanCall("c", "tc-2")
	want.Status, want.Resolved = expired, ts(6)
	requireProto(t, want, toolCall(t, s, "tc-2"), "a resolution without by leaves a row with no resolver")
}

func testResolveRemovesDeadline(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	suspend(t, s, "c", "tc-1", "tc-2")
	require.Len(t, allDeadlines(t, s), 2)
	_, err := s.ResolveToolCall(ctx, "tc-1", resolved, contentOutcome("ok"), tm(1))
	require.NoError(t, err)
	requireProtos(t, []*messages.Deadline{deadline("c", "tc-2", 100)}, allDeadlines(t, s))
}

var deadlineCases = []suiteCase{
	{name: "ListedInTimeOrder", run: testDeadlinesOrder},
	{name: "ReplaceKeepsOnlyNew", run: testDeadlinesReplace},
	{name: "Cancel", run: testDeadlinesCancel},
	{name: "DueBy", run: testDeadlinesDueBy},
	{name: "CallbackError", run: testDeadlinesCallbackError},
	{name: "ContextDoneMidListing", run: testDeadlinesContextDone},
	{name: "ClosedMidListing", run: testDeadlinesClosed},
	{name: "Deleted", run: testDeadlinesDeleted},
	{name: "SurviveReopen", run: testDeadlinesReopen, durable: true},
}

func schedule(t testing.TB, s journal.Store, ds ...*messages.Deadline) {
	t.Helper()
	for _, d := range ds {
		require.NoError(t, s.ScheduleDeadline(t.Context(), d))
	}
}

func testDeadlinesOrder(t *testing.T, e env) {
	s := e.open(t).Store
	schedule(t, s,
		deadline("a", "tc-3", 50), deadline("b", "tc-4", 20), deadline("a", "tc-2", 20),
		deadline("a", "tc-1", 90), deadline("b", "tc-9", 5))
	requireProtos(t, []*messages.Deadline{
		deadline("b", "tc-9", 5), deadline("a", "tc-2", 20), deadline("b", "tc-4", 20),
		deadline("a", "tc-3", 50), deadline("a", "tc-1", 90),
	}, allDeadlines(t, s), "ascending time, then tool call id")
	// Sub-second times order correctly too.
	d := deadline("a", "tc-0", 20)
	d.At.Nanos = 1
	schedule(t, s, d)
	got := allDeadlines(t, s)
	require.Len(t, got, 6)
	requireProto(t, d, got[3])

	// Equal times order by tool call id, not by conversation.
	s = e.open(t).Store
	schedule(t, s, deadline("a", "tc-2", 20), deadline("b", "tc-1", 20), deadline("a", "tc-3", 20))
	requireProtos(t, []*messages.Deadline{deadline("b", "tc-1", 20), deadline("a", "tc-2", 20), deadline("a", "tc-3", 20)},
		allDeadlines(t, s), "equal times: by tool call id across conversations")

	// Times before 1970 and at the ends of the valid range (years 1 to
	// 9999) order and compare with dueBy as times, so that an encoding of
	// the time that does not keep its order (unsigned seconds, say) shows.
	s = e.open(t).Store
	at := func(id string, tm time.Time) *messages.Deadline {
		return &messages.Deadline{ConversationId: "c", ToolCallId: id, At: timestamppb.New(tm)}
	}
	want := []*messages.Deadline{
		at("tc-1", time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)),
		at("tc-2", time.Date(1969, 12, 31, 23, 59, 59, 0, time.UTC)),
		at("tc-3", time.Date(1969, 12, 31, 23, 59, 59, 5, time.UTC)),
		at("tc-4", time.Unix(0, 0).UTC()),
		at("tc-5", time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)),
		at("tc-6", time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC)),
	}
	for _, i := range []int{5, 0, 3, 2, 4, 1} {
		schedule(t, s, want[i])
	}
	requireProtos(t, want, allDeadlines(t, s), "ascending time across 1970 and the ends of the range")
	var due []*messages.Deadline
	require.NoError(t, s.Deadlines(t.Context(), time.Date(1969, 12, 31, 23, 59, 59, 1, time.UTC), func(d *messages.Deadline) error {
		due = append(due, d)
		return nil
	}))
	requireProtos(t, want[:2], due, "dueBy before 1970")
}

func testDeadlinesReplace(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	schedule(t, s, deadline("c", "tc-1", 100), deadline("c", "tc-2", 60))
	schedule(t, s, deadline("c", "tc-1", 40))
	requireProtos(t, []*messages.Deadline{deadline("c", "tc-1", 40), deadline("c", "tc-2", 60)}, allDeadlines(t, s))
	schedule(t, s, deadline("c", "tc-1", 200))
	requireProtos(t, []*messages.Deadline{deadline("c", "tc-2", 60), deadline("c", "tc-1", 200)}, allDeadlines(t, s), "only the new time is listed")
	var due []*messages.Deadline
	require.NoError(t, s.Deadlines(ctx, tm(100), func(d *messages.Deadline) error { due = append(due, d); return nil }))
	requireProtos(t, []*messages.Deadline{deadline("c", "tc-2", 60)}, due, "the replaced time is not due")
}

func testDeadlinesCancel(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	schedule(t, s, deadline("c", "tc-1", 10), deadline("c", "tc-2", 20), deadline("d", "tc-3", 30))
	require.NoError(t, s.CancelDeadline(ctx, "c", "tc-1"))
	requireProtos(t, []*messages.Deadline{deadline("c", "tc-2", 20), deadline("d", "tc-3", 30)}, allDeadlines(t, s))
	require.NoError(t, s.CancelDeadline(ctx, "c", "tc-1"), "cancelling twice is fine")
	require.NoError(t, s.CancelDeadline(ctx, "unknown", "tc-9"), "cancelling what does not exist is fine")
	require.NoError(t, s.CancelDeadline(ctx, "d", "tc-3"))
	requireProtos(t, []*messages.Deadline{deadline("c", "tc-2", 20)}, allDeadlines(t, s))

	// Deadlines are keyed by conversation and tool call id: a cancel or
	// a schedule naming another conversation leaves c's deadline alone.
	require.NoError(t, s.CancelDeadline(ctx, "d", "tc-2"), "cancelling under another conversation")
	requireProtos(t, []*messages.Deadline{deadline("c", "tc-2", 20)}, allDeadlines(t, s), "c's deadline stays")
	schedule(t, s, deadline("d", "tc-2", 40))
	requireProtos(t, []*messages.Deadline{deadline("c", "tc-2", 20), deadline("d", "tc-2", 40)}, allDeadlines(t, s), "neither replaces the other")
	require.NoError(t, s.CancelDeadline(ctx, "c", "tc-2"))
	requireProtos(t, []*messages.Deadline{deadline("d", "tc-2", 40)}, allDeadlines(t, s))
}

func testDeadlinesDueBy(t *testing.T, e env) {
	s := e.open(t).Store
	schedule(t, s, deadline("c", "tc-3", 30), deadline("c", "tc-1", 10), deadline("d", "tc-2", 20))
	cases := []struct {
		name  string
		dueBy time.Time
		want  []string
	}{
		{"Zero", time.Time{}, []string{"tc-1", "tc-2", "tc-3"}},
		{"BeforeAll", tm(5), []string{}},
		{"Inclusive", tm(20), []string{"tc-1", "tc-2"}},
		{"JustBefore", tm(20).Add(-time.Nanosecond), []string{"tc-1"}},
		{"AfterAll", tm(1000), []string{"tc-1", "tc-2", "tc-3"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := []string{}
			require.NoError(t, s.Deadlines(t.Context(), tc.dueBy, func(d *messages.Deadline) error {
				got = append(got, d.GetToolCallId())
				return nil
			}))
			assert.Equal(t, tc.want, got)
		})
	}
}

func testDeadlinesCallbackError(t *testing.T, e env) {
	s := e.open(t).Store
	schedule(t, s, deadline("c", "tc-1", 10), deadline("c", "tc-2", 20), deadline("c", "tc-3", 30))
	stop := errors.New("stop here")
	var seen []string
	err := s.Deadlines(t.Context(), time.Time{}, func(d *messages.Deadline) error {
		seen = append(seen, d.GetToolCallId())
		if len(seen) == 2 {
			return stop
		}
		return nil
	})
	require.ErrorIs(t, err, stop)
	assert.Equal(t, []string{"tc-1", "tc-2"}, seen, "iteration stops at the first error")
	// The records passed to fn belong to the caller.
	kept := allDeadlines(t, s)
	kept[0].ToolCallId = "changed"
	requireProto(t, deadline("c", "tc-1", 10), allDeadlines(t, s)[0])
}

// testDeadlinesContextDone: a ctx that is done while Deadlines lists (at
// a shutdown, say) stops the listing before the next call of fn, and
// Deadlines returns an error wrapping ctx's error and no sentinel, as a
// call whose ctx was done from the start does.
func testDeadlinesContextDone(t *testing.T, e env) {
	s := e.open(t).Store
	schedule(t, s, deadline("c", "tc-1", 10), deadline("c", "tc-2", 20), deadline("d", "tc-3", 30), deadline("d", "tc-4", 40))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var seen []string
	err := s.Deadlines(ctx, time.Time{}, func(d *messages.Deadline) error {
		seen = append(seen, d.GetToolCallId())
		if len(seen) == 2 {
			cancel()
		}
		return nil
	})
	require.ErrorIs(t, err, context.Canceled)
	for _, sentinel := range sentinels {
		require.NotErrorIs(t, err, sentinel)
	}
	assert.Equal(t, []string{"tc-1", "tc-2"}, seen, "fn is not called once ctx is done")
	assert.Len(t, allDeadlines(t, s), 4, "the listing removed nothing")
}

// testDeadlinesClosed: a Store closed while Deadlines lists (fn closes it
// here) stops the listing before the next call of fn, and Deadlines
// returns an error wrapping ErrClosed: the caller learns the listing is
// incomplete.
func testDeadlinesClosed(t *testing.T, e env) {
	s := e.open(t).Store
	schedule(t, s, deadline("c", "tc-1", 10), deadline("c", "tc-2", 20), deadline("d", "tc-3", 30), deadline("d", "tc-4", 40))
	var seen []string
	err := s.Deadlines(t.Context(), time.Time{}, func(d *messages.Deadline) error {
		seen = append(seen, d.GetToolCallId())
		if len(seen) == 2 {
			require.NoError(t, s.Close())
		}
		return nil
	})
	requireSentinel(t, err, journal.ErrClosed)
	assert.Equal(t, []string{"tc-1", "tc-2"}, seen, "fn is not called once the Store is closed")
}

func testDeadlinesDeleted(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	suspend(t, s, "c", "tc-1")
	schedule(t, s, deadline("d", "tc-2", 10))
	require.NoError(t, s.DeleteConversation(ctx, "c"))
	requireProtos(t, []*messages.Deadline{deadline("d", "tc-2", 10)}, allDeadlines(t, s), "a delete removes the conversation's deadlines")
	requireSentinel(t, s.ScheduleDeadline(ctx, deadline("c", "tc-1", 50)), journal.ErrDeleted)
	requireProtos(t, []*messages.Deadline{deadline("d", "tc-2", 10)}, allDeadlines(t, s))
}

var conversationCases = []suiteCase{
	{name: "NotFound", run: testConvNotFound},
	{name: "PutCreatesRow", run: testConvPutCreates},
	{name: "PutMerges", run: testConvPutMerges},
	{name: "PutCreated", run: testConvPutCreated},
	{name: "PutFSMState", run: testConvPutFSM},
	{name: "ListPagesInIDOrder", run: testConvList},
	{name: "Metadata", run: testConvMetadata},
	{name: "ConcurrentMergesKeepEveryKey", run: testConvConcurrentMerges},
	{name: "SettingsTotalBounded", run: testSettingsTotalBounded},
	{name: "UpdatedFollowsRowWrites", run: testConvUpdated},
}

// testConvUpdated: a row's Updated is set when the row is created, moves
// (never back) with every write of the row itself, and stays exactly as it
// was through writes that leave the row alone (events, tool calls,
// resolutions, summaries, metadata, deadlines).
func testConvUpdated(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	prev := time.Time{}
	check := func(what string, same bool) {
		t.Helper()
		row := conversation(t, s, "c")
		require.NotNil(t, row.GetUpdated(), "%s: Updated is set", what)
		got := row.GetUpdated().AsTime()
		if same {
			assert.True(t, got.Equal(prev), "%s leaves Updated: %v, was %v", what, got, prev)
		} else {
			assert.False(t, got.Before(prev), "%s: Updated %v went back from %v", what, got, prev)
		}
		prev = got
	}
	appendEvents(t, s, "c", userEvs(1, 1)...)
	check("the first append", false)
	appendOK(t, s, &messages.AppendRequest{ConversationId: "c", ExpectedLast: 1, Events: userEvs(2, 1),
		ToolCalls: []*messages.ToolCallRecord{humanCall("c", "tc-1"), humanCall("c", "tc-2")}})
	check("an append of events and tool calls", true)
	appendOK(t, s, &messages.AppendRequest{ConversationId: "c", ExpectedLast: 2, FsmState: idleState(2)})
	check("an append with fsm_state", false)
	appendOK(t, s, &messages.AppendRequest{ConversationId: "c", ExpectedLast: 2, Status: statusIdle})
	check("an append with a status", false)
	appendOK(t, s, &messages.AppendRequest{ConversationId: "c", ExpectedLast: 2, Settings: map[string]string{"k": "v"}})
	check("an append with settings", false)
	require.NoError(t, s.PutFSMState(ctx, "c", idleState(2)))
	check("PutFSMState", false)
	require.NoError(t, s.PutConversation(ctx, journal.ConversationUpdate{ID: "c", Status: statusSuspended}))
	check("PutConversation", false)
	require.NoError(t, s.PutMetadata(ctx, "c", map[string]string{"name": "n"}))
	check("PutMetadata", true)
	putSummary(t, s, "c", summary(1, 2))
	check("PutSummary", true)
	_, err := s.ResolveToolCall(ctx, "tc-1", resolved, contentOutcome("ok"), tm(3))
	require.NoError(t, err)
	check("ResolveToolCall", true)
	appendOK(t, s, &messages.AppendRequest{ConversationId: "c", ExpectedLast: 2, Events: []*messages.Event{toolResultEv(4, "tc-2", "ok")},
		Resolutions: []*messages.ToolResolution{{ToolCallId: "tc-2", Status: resolved, Result: contentOutcome("ok"), At: ts(4)}}})
	check("an append with a resolution", true)
	require.NoError(t, s.UpsertToolCall(ctx, humanCall("c", "tc-3")))
	check("UpsertToolCall", true)
	schedule(t, s, deadline("c", "tc-3", 50))
	require.NoError(t, s.CancelDeadline(ctx, "c", "tc-3"))
	check("ScheduleDeadline and CancelDeadline", true)
}

func conversation(t testing.TB, s journal.Store, id string) *messages.Conversation {
	t.Helper()
	row, err := s.Conversation(t.Context(), id)
	require.NoError(t, err, "conversation %q", id)
	return row
}

// testConvNotFound: the row of an unknown conversation is ErrNotFound; its
// other reads find nothing without an error (and a cancel of a deadline it
// does not have is none), and no read or cancel creates anything: the
// conversation is still unknown to the lookup, the listings and a delete.
func testConvNotFound(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	appendEvents(t, s, "c", userEvs(1, 1)...)
	_, err := s.Conversation(ctx, "d")
	requireSentinel(t, err, journal.ErrNotFound)

	pend, err := s.PendingToolCalls(ctx, "d")
	require.NoError(t, err)
	assert.Empty(t, pend, "pending calls")
	md, err := s.Metadata(ctx, "d")
	require.NoError(t, err)
	assert.Empty(t, md, "metadata")
	audit, err := s.ModelCalls(ctx, "d")
	require.NoError(t, err)
	assert.Empty(t, audit, "audit rows")
	n, err := s.GCModelCalls(ctx, "d", tm(1000))
	require.NoError(t, err)
	assert.Zero(t, n, "audit GC")
	require.NoError(t, s.CancelDeadline(ctx, "d", "tc-1"), "cancelling a deadline that does not exist")
	assert.Empty(t, deadlinesOf(t, s, "d"), "deadlines")

	_, err = s.Conversation(ctx, "d")
	requireSentinel(t, err, journal.ErrNotFound, "the reads created no row")
	rows, _, err := s.ListConversations(ctx, "", 0)
	require.NoError(t, err)
	assert.Equal(t, []string{"c"}, convIDs(rows), "listing")
	active, _, err := s.ListActiveConversations(ctx, "", 0)
	require.NoError(t, err)
	assert.Equal(t, []string{"c"}, active, "active index")
	requireSentinel(t, s.DeleteConversation(ctx, "d"), journal.ErrNotFound, "still unknown to a delete")
}

func testConvPutCreates(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	require.NoError(t, s.PutConversation(ctx, journal.ConversationUpdate{ID: "c"}))
	row := conversation(t, s, "c")
	assert.Equal(t, "c", row.GetId())
	assert.Equal(t, statusActive, row.GetStatus(), "a new row is active unless the update says otherwise")
	assert.NotNil(t, row.GetCreated())
	assert.Equal(t, uint64(0), lastSeq(t, s, "c"))

	require.NoError(t, s.PutConversation(ctx, journal.ConversationUpdate{ID: "d", Status: statusIdle, Settings: map[string]string{"model": "m1"}}))
	row = conversation(t, s, "d")
	assert.Equal(t, statusIdle, row.GetStatus())
	assert.Equal(t, map[string]string{"model": "m1"}, row.GetSettings())

	// The first append after PutConversation sees an empty log.
	res := appendOK(t, s, &messages.AppendRequest{ConversationId: "c", Events: userEvs(1, 1)})
	assert.Equal(t, journal.AppendResult{FirstSeq: 1, LastSeq: 1}, res)
}

func testConvPutMerges(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	require.NoError(t, s.PutConversation(ctx, journal.ConversationUpdate{
		ID: "c", Settings: map[string]string{"a": "1", "b": "2"}, Status: statusIdle, FSMState: awaiting(3, "tc-1"),
	}))
	created := conversation(t, s, "c").GetCreated()
	require.NoError(t, s.PutConversation(ctx, journal.ConversationUpdate{ID: "c", Settings: map[string]string{"b": "", "c": "3"}}))
	row := conversation(t, s, "c")
	assert.Equal(t, map[string]string{"a": "1", "c": "3"}, row.GetSettings(), "settings merge; an empty value deletes")
	assert.Equal(t, statusIdle, row.GetStatus(), "an unspecified status keeps the row's")
	requireProto(t, awaiting(3, "tc-1"), row.GetFsmState(), "a nil fsm_state keeps the row's")
	requireProto(t, created, row.GetCreated(), "an update keeps created")

	require.NoError(t, s.PutConversation(ctx, journal.ConversationUpdate{ID: "c", Status: statusEnded, FSMState: idleState(4)}))
	row = conversation(t, s, "c")
	assert.Equal(t, map[string]string{"a": "1", "c": "3"}, row.GetSettings())
	assert.Equal(t, statusEnded, row.GetStatus())
	requireProto(t, idleState(4), row.GetFsmState())
}

// testConvPutCreated: ConversationUpdate.Created replaces the created time
// of any row, whichever write created it (a PutConversation, an Append, a
// Fork), creating the row at that time if absent, and changes nothing
// else; an update without it keeps the row's; an invalid one is
// ErrInvalid and writes nothing.
func testConvPutCreated(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	require.NoError(t, s.PutConversation(ctx, journal.ConversationUpdate{ID: "new", Status: statusEnded, Created: ts(-100)}))
	row := conversation(t, s, "new")
	requireProto(t, ts(-100), row.GetCreated(), "a row created at the update's time")
	assert.Equal(t, statusEnded, row.GetStatus())
	require.NoError(t, s.PutConversation(ctx, journal.ConversationUpdate{ID: "new", Settings: map[string]string{"k": "v"}}))
	requireProto(t, ts(-100), conversation(t, s, "new").GetCreated(), "an update without created keeps it")

	appendEvents(t, s, "appended", userEvs(1, 2)...)
	before := conversation(t, s, "appended")
	requireProto(t, ts(1), before.GetCreated(), "an append creates the row at its first event's time")
	require.NoError(t, s.PutConversation(ctx, journal.ConversationUpdate{ID: "appended", Created: ts(-200)}))
	row = conversation(t, s, "appended")
	requireProto(t, ts(-200), row.GetCreated())
	assert.Equal(t, before.GetStatus(), row.GetStatus(), "only created changes")
	requireProto(t, before.GetFsmState(), row.GetFsmState())
	assert.Equal(t, uint64(2), lastSeq(t, s, "appended"))

	req := forkSource(t, s, "src", "forked")
	require.NoError(t, s.Fork(ctx, req))
	require.NoError(t, s.PutConversation(ctx, journal.ConversationUpdate{ID: "forked", Created: ts(-300)}))
	row = conversation(t, s, "forked")
	requireProto(t, ts(-300), row.GetCreated(), "a fork's created time, which its write set to now")
	requireProto(t, req.GetOrigin(), row.GetForkedFrom())

	for name, bad := range map[string]*timestamppb.Timestamp{
		"nanos out of range": {Seconds: 100, Nanos: 1_000_000_000},
		"year 10000":         {Seconds: 253402300800},
	} {
		err := s.PutConversation(ctx, journal.ConversationUpdate{ID: "appended", Created: bad, Status: statusEnded})
		requireSentinel(t, err, journal.ErrInvalid, name)
		err = s.PutConversation(ctx, journal.ConversationUpdate{ID: "absent", Created: bad})
		requireSentinel(t, err, journal.ErrInvalid, name)
	}
	row = conversation(t, s, "appended")
	requireProto(t, ts(-200), row.GetCreated(), "a refused update writes nothing")
	assert.Equal(t, before.GetStatus(), row.GetStatus(), "a refused update writes nothing")
	_, err := s.Conversation(ctx, "absent")
	requireSentinel(t, err, journal.ErrNotFound, "a refused update creates no row")
}

func testConvPutFSM(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	require.NoError(t, s.PutFSMState(ctx, "c", awaiting(2, "tc-1", "tc-2")))
	row := conversation(t, s, "c")
	assert.Equal(t, statusActive, row.GetStatus(), "PutFSMState creates an active row")
	requireProto(t, awaiting(2, "tc-1", "tc-2"), row.GetFsmState())

	require.NoError(t, s.PutConversation(ctx, journal.ConversationUpdate{ID: "c", Settings: map[string]string{"k": "v"}, Status: statusSuspended}))
	require.NoError(t, s.PutFSMState(ctx, "c", idleState(5)))
	row = conversation(t, s, "c")
	requireProto(t, idleState(5), row.GetFsmState())
	assert.Equal(t, map[string]string{"k": "v"}, row.GetSettings(), "PutFSMState changes only fsm_state")
	assert.Equal(t, statusSuspended, row.GetStatus())
}

func testConvList(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	// Ids of different lengths and bytes, so that an order by length or by
	// an encoding that does not preserve byte order shows.
	var ids []string
	for i := range 230 {
		ids = append(ids, fmt.Sprint("c", i))
	}
	ids = append(ids, "\x00", "a", "a\x00", "a\x00b", "a/b", "ab", "b", "é", "zz", "\u4e16")
	for i, id := range ids {
		if i%2 == 0 {
			require.NoError(t, s.PutConversation(ctx, journal.ConversationUpdate{ID: id}))
		} else {
			appendEvents(t, s, id, userEvs(1, 1)...)
		}
	}
	require.NoError(t, s.PutMetadata(ctx, "metadata-only", map[string]string{"k": "v"}))
	want := slices.Sorted(slices.Values(ids))

	for _, limit := range []int{1, 7, 120, len(ids), 1000, math.MaxInt} {
		t.Run(fmt.Sprint("limit=", limit), func(t *testing.T) {
			var got []string
			cursor := ""
			for pages := 0; ; pages++ {
				require.LessOrEqual(t, pages, len(ids), "paging does not end")
				rows, next, err := s.ListConversations(ctx, cursor, limit)
				require.NoError(t, err)
				require.LessOrEqual(t, len(rows), limit)
				if cursor != "" {
					require.NotEmpty(t, rows, "a cursor was returned, so a next page exists (the cursor is \"\" when there is none)")
				}
				got = append(got, convIDs(rows)...)
				if next == "" {
					break
				}
				require.Len(t, rows, limit, "only the last page may be short")
				require.Equal(t, rows[len(rows)-1].GetId(), next, "the cursor is the last id of the page")
				cursor = next
			}
			assert.Equal(t, want, got, "every conversation with a row exactly once, in id order")
		})
	}
	rows, next, err := s.ListConversations(ctx, "", 0)
	require.NoError(t, err)
	assert.Len(t, rows, 100, "limit 0 means 100")
	assert.Equal(t, want[99], next)
	for _, limit := range []int{-1, math.MinInt} {
		_, _, err = s.ListConversations(ctx, "", limit)
		requireSentinel(t, err, journal.ErrInvalid, "a negative limit is refused, as by every listing (limit %d)", limit)
	}
	rows, _, err = s.ListConversations(ctx, "c1x", 3)
	require.NoError(t, err)
	assert.Equal(t, []string{"c2", "c20", "c200"}, convIDs(rows), "a cursor need not be an existing id")
	rows, next, err = s.ListConversations(ctx, want[len(want)-1], 10)
	require.NoError(t, err)
	assert.Empty(t, rows)
	assert.Empty(t, next)
}

func testConvMetadata(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	md, err := s.Metadata(ctx, "c")
	require.NoError(t, err)
	assert.NotNil(t, md, "an empty map, not nil")
	assert.Empty(t, md)

	require.NoError(t, s.PutMetadata(ctx, "c", map[string]string{"name": "Trip", "owner": "ann", "tag": "x"}))
	require.NoError(t, s.PutMetadata(ctx, "c", map[string]string{"tag": "", "owner": "bob"}))
	md, err = s.Metadata(ctx, "c")
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"name": "Trip", "owner": "bob"}, md)
	md["name"] = "changed"
	md, err = s.Metadata(ctx, "c")
	require.NoError(t, err)
	assert.Equal(t, "Trip", md["name"], "the returned map belongs to the caller")
	_, err = s.Conversation(ctx, "c")
	requireSentinel(t, err, journal.ErrNotFound, "PutMetadata does not create the row")
}

var auditCases = []suiteCase{
	{name: "OffIsNoOp", run: testAuditOff},
	{name: "InvalidRefusedOnOrOff", run: testAuditInvalid},
	{name: "ReportsWhetherOn", run: testAuditReports},
	{name: "OrderedByTurn", run: testAuditOrder, audit: true},
	{name: "FailedCallRoundTrips", run: testAuditFailedCall, audit: true},
	{name: "GC", run: testAuditGC, audit: true},
	{name: "IllFormedCreatedRefused", run: testAuditBadCreated, audit: true},
}

func modelCall(conv string, turn uint64, createdSec int) *messages.ModelCall {
	return &messages.ModelCall{
		ConversationId: conv, TurnRef: turn, Model: "test-model",
		RenderedContext: []*messages.Event{userEv(int(turn), fmt.Sprint("turn ", turn))},
		Usage:           &messages.Usage{InputTokens: int64(turn) * 10, OutputTokens: 3},
		LatencyNanos:    1e6, SummaryVersion: "v1", Evictions: []string{"old"}, Created: ts(createdSec),
	}
}

func testAuditOff(t *testing.T, e env) {
	s := e.openAudit(t, false).Store
	ctx := t.Context()
	appendEvents(t, s, "c", userEvs(1, 1)...)
	require.NoError(t, s.PutModelCall(ctx, modelCall("c", 1, 0)), "PutModelCall is a no-op with audit off")
	calls, err := s.ModelCalls(ctx, "c")
	require.NoError(t, err)
	assert.Empty(t, calls)
	n, err := s.GCModelCalls(ctx, "c", tm(1000))
	require.NoError(t, err)
	assert.Zero(t, n)
	// ErrDeleted is audit on's: with it off, a valid call writes nothing
	// and is no error, deleted conversation or not.
	require.NoError(t, s.DeleteConversation(ctx, "c"))
	require.NoError(t, s.PutModelCall(ctx, modelCall("c", 2, 0)), "audit off, a deleted conversation")
}

// testAuditInvalid: PutModelCall checks its call first, with audit on or
// off: a call ValidateModelCall refuses (nil, a bad conversation id, a
// created time that is no valid timestamp, an undeclared enum value), one
// that cannot be encoded (a string that is not UTF-8) and one over
// MaxRecordBytes are ErrInvalid, and nothing is written.
func testAuditInvalid(t *testing.T, e env) {
	for _, on := range []bool{false, true} {
		if on && !e.feat.Audit {
			continue
		}
		s := e.openAudit(t, on).Store
		ctx := t.Context()
		appendEvents(t, s, "c", userEvs(1, 1)...)
		bad := map[string]func(mc *messages.ModelCall) *messages.ModelCall{
			"nil":          func(*messages.ModelCall) *messages.ModelCall { return nil },
			"empty id":     func(mc *messages.ModelCall) *messages.ModelCall { mc.ConversationId = ""; return mc },
			"id not UTF-8": func(mc *messages.ModelCall) *messages.ModelCall { mc.ConversationId = "c\xff"; return mc },
			"id too long": func(mc *messages.ModelCall) *messages.ModelCall {
				mc.ConversationId = strings.Repeat("c", journal.MaxIDBytes+1)
				return mc
			},
			"bad created":     func(mc *messages.ModelCall) *messages.ModelCall { mc.Created.Nanos = 1_500_000_000; return mc },
			"model not UTF-8": func(mc *messages.ModelCall) *messages.ModelCall { mc.Model = "m\xff"; return mc },
			"undeclared enum": func(mc *messages.ModelCall) *messages.ModelCall {
				mc.RenderedContext = append(mc.RenderedContext, &messages.Event{Body: &messages.Event_Resolution{
					Resolution: &messages.Resolution{ToolCallId: "tc", Status: messages.ToolCallStatus(99)}}})
				return mc
			},
			"oversized": func(mc *messages.ModelCall) *messages.ModelCall {
				mc.Model = strings.Repeat("m", journal.MaxRecordBytes+1)
				return mc
			},
		}
		for name, f := range bad {
			err := s.PutModelCall(ctx, f(modelCall("c", 1, 10)))
			requireSentinel(t, err, journal.ErrInvalid, "audit %v: %s", on, name)
		}
		calls, err := s.ModelCalls(ctx, "c")
		require.NoError(t, err)
		assert.Empty(t, calls, "audit %v: nothing written", on)
		require.NoError(t, s.PutModelCall(ctx, modelCall("c", 1, 10)), "audit %v: a valid call", on)
	}
}

// testAuditReports: a Store that implements journal.AuditReporter (every
// adapter of this module does) reports whether it was opened with audit
// on.
func testAuditReports(t *testing.T, e env) {
	for _, on := range []bool{false, true} {
		if on && !e.feat.Audit {
			continue
		}
		r, ok := e.openAudit(t, on).Store.(journal.AuditReporter)
		if !ok {
			t.Skip("journaltest: the adapter does not implement journal.AuditReporter")
		}
		assert.Equal(t, on, r.AuditEnabled(), "opened with audit %v", on)
	}
}

func testAuditOrder(t *testing.T, e env) {
	s := e.openAudit(t, true).Store
	ctx := t.Context()
	for _, turn := range []uint64{5, 1, 3, 10} {
		require.NoError(t, s.PutModelCall(ctx, modelCall("c", turn, int(turn))))
	}
	require.NoError(t, s.PutModelCall(ctx, modelCall("d", 2, 0)))
	again := modelCall("c", 3, 3)
	again.Model = "retried"
	require.NoError(t, s.PutModelCall(ctx, again))
	calls, err := s.ModelCalls(ctx, "c")
	require.NoError(t, err)
	requireProtos(t, []*messages.ModelCall{modelCall("c", 1, 1), again, modelCall("c", 5, 5), modelCall("c", 10, 10)}, calls,
		"ordered by TurnRef; a row with the same TurnRef is replaced")

	// TurnRef orders as an unsigned integer across byte widths and above
	// 1<<63, so that an order by an encoding that does not keep it (text,
	// varint, a signed column) shows.
	turns := []uint64{1 << 63, 300, 256, math.MaxUint64, 255, 1<<63 - 1, 1 << 40, 1<<63 + 5}
	for _, turn := range turns {
		require.NoError(t, s.PutModelCall(ctx, modelCall("e", turn, 0)))
	}
	calls, err = s.ModelCalls(ctx, "e")
	require.NoError(t, err)
	got := make([]uint64, 0, len(calls))
	for _, mc := range calls {
		got = append(got, mc.GetTurnRef())
	}
	assert.Equal(t, slices.Sorted(slices.Values(turns)), got, "ordered by TurnRef as an unsigned integer")
}

// testAuditFailedCall: the row of a failed model call (an error, a
// latency, no usage nor model) and the full row of an answered one (every
// field of ModelCall set) are stored as given, and a retry that answers
// replaces the failed call's row of the same turn, error gone.
func testAuditFailedCall(t *testing.T, e env) {
	s := e.openAudit(t, true).Store
	ctx := t.Context()
	failed := modelCall("c", 2, 10)
	failed.Model, failed.Usage = "", nil
	failed.Error = &messages.ModelCallError{Message: "upstream 503: überlastet", Code: "unavailable"}
	full := modelCall("c", 1, 5)
	full.Summary = &messages.Summary{FromSeq: 1, ToSeq: 3, Content: "so far", Version: "v1"}
	full.Settings = map[string]string{"system_prompt": "be brief", "max_tokens": "100"}
	full.Tools = []string{"alpha", "zeta"}
	full.Agent = "triage"
	require.NoError(t, s.PutModelCall(ctx, failed))
	require.NoError(t, s.PutModelCall(ctx, full))
	calls, err := s.ModelCalls(ctx, "c")
	require.NoError(t, err)
	requireProtos(t, []*messages.ModelCall{full, failed}, calls, "every field round-trips, a failed call's error included")

	retried := modelCall("c", 2, 20)
	require.NoError(t, s.PutModelCall(ctx, retried))
	calls, err = s.ModelCalls(ctx, "c")
	require.NoError(t, err)
	requireProtos(t, []*messages.ModelCall{full, retried}, calls, "the answered retry replaces the failed row, error gone")
}

func testAuditGC(t *testing.T, e env) {
	s := e.openAudit(t, true).Store
	ctx := t.Context()
	for turn, sec := range []int{0, 100, 200, 300, 400} {
		require.NoError(t, s.PutModelCall(ctx, modelCall("c", uint64(turn+1), sec)))
	}
	require.NoError(t, s.PutModelCall(ctx, modelCall("d", 1, 0)))
	n, err := s.GCModelCalls(ctx, "c", tm(250))
	require.NoError(t, err)
	assert.Equal(t, 3, n)
	calls, err := s.ModelCalls(ctx, "c")
	require.NoError(t, err)
	requireProtos(t, []*messages.ModelCall{modelCall("c", 4, 300), modelCall("c", 5, 400)}, calls, "rows created at or after olderThan stay")
	n, err = s.GCModelCalls(ctx, "c", tm(300))
	require.NoError(t, err)
	assert.Equal(t, 0, n, "created exactly at olderThan is not older")
	n, err = s.GCModelCalls(ctx, "unknown", tm(300))
	require.NoError(t, err)
	assert.Zero(t, n)
	calls, err = s.ModelCalls(ctx, "d")
	require.NoError(t, err)
	assert.Len(t, calls, 1, "GC of one conversation leaves the others")

	// A replaced row is one row, aged by its new created time.
	require.NoError(t, s.PutModelCall(ctx, modelCall("r", 1, 0)))
	require.NoError(t, s.PutModelCall(ctx, modelCall("r", 1, 500)))
	n, err = s.GCModelCalls(ctx, "r", tm(100))
	require.NoError(t, err)
	assert.Zero(t, n, "the replaced row's old created time is gone with it")
	n, err = s.GCModelCalls(ctx, "r", tm(600))
	require.NoError(t, err)
	assert.Equal(t, 1, n, "a row replaced is counted once")

	// Created times before 1970 age like any other; a row without one is
	// older than any time, the zero time included.
	old := modelCall("p", 1, 0)
	old.Created = timestamppb.New(time.Date(1960, 1, 1, 0, 0, 0, 0, time.UTC))
	require.NoError(t, s.PutModelCall(ctx, old))
	older := modelCall("p", 2, 0)
	older.Created = timestamppb.New(time.Date(1950, 1, 1, 0, 0, 0, 0, time.UTC))
	require.NoError(t, s.PutModelCall(ctx, older))
	undated := modelCall("p", 3, 0)
	undated.Created = nil
	require.NoError(t, s.PutModelCall(ctx, undated))
	n, err = s.GCModelCalls(ctx, "p", time.Time{})
	require.NoError(t, err)
	assert.Equal(t, 1, n, "the zero time removes only the row without a created time")
	n, err = s.GCModelCalls(ctx, "p", time.Date(1955, 1, 1, 0, 0, 0, 0, time.UTC))
	require.NoError(t, err)
	assert.Equal(t, 1, n, "a row created in 1950 is older than 1955")
	calls, err = s.ModelCalls(ctx, "p")
	require.NoError(t, err)
	requireProtos(t, []*messages.ModelCall{old}, calls)

	// Within one second, to the nanosecond: created exactly at olderThan
	// stays, a nanosecond before it goes.
	sub := modelCall("n", 1, 0)
	sub.Created.Nanos = 500_000_001
	require.NoError(t, s.PutModelCall(ctx, sub))
	n, err = s.GCModelCalls(ctx, "n", sub.GetCreated().AsTime())
	require.NoError(t, err)
	assert.Zero(t, n, "created exactly at olderThan, within a second")
	n, err = s.GCModelCalls(ctx, "n", sub.GetCreated().AsTime().Add(time.Nanosecond))
	require.NoError(t, err)
	assert.Equal(t, 1, n, "created a nanosecond before olderThan")
}

// testConvConcurrentMerges: merges of settings (PutConversation and
// unfenced appends) and of metadata running at once on one conversation,
// with fsm_state writes among them, each keep every key the others wrote:
// no merge is lost to a concurrent one, whether the row existed before or
// not.
func testConvConcurrentMerges(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	const writers = 16
	for _, existing := range []bool{false, true} {
		t.Run(fmt.Sprint("existing=", existing), func(t *testing.T) {
			conv := fmt.Sprint("c-", existing)
			if existing {
				appendEvents(t, s, conv, userEvs(1, 1)...)
			}
			want := map[string]string{}
			var wg sync.WaitGroup
			for i := range writers {
				k, v := fmt.Sprint("k", i), fmt.Sprint("v", i)
				want[k] = v
				wg.Add(1)
				go func() {
					defer wg.Done()
					kv := map[string]string{k: v}
					var err error
					if i%2 == 0 {
						err = s.PutConversation(ctx, journal.ConversationUpdate{ID: conv, Settings: kv})
					} else {
						_, err = s.Append(ctx, &messages.AppendRequest{ConversationId: conv, Unfenced: true, Settings: kv})
					}
					assert.NoError(t, err, "settings %s", k)
					assert.NoError(t, s.PutMetadata(ctx, conv, kv), "metadata %s", k)
					if i%4 == 0 {
						assert.NoError(t, s.PutFSMState(ctx, conv, idleState(0)), "fsm_state")
					}
				}()
			}
			wg.Wait()
			assert.Equal(t, want, conversation(t, s, conv).GetSettings(), "settings")
			md, err := s.Metadata(ctx, conv)
			require.NoError(t, err)
			assert.Equal(t, want, md, "metadata")
		})
	}
}

// testAuditBadCreated: a model call whose created time is set but is no
// valid timestamp (nanos out of range, a year outside 1 to 9999) is refused
// with ErrInvalid and writes nothing, as a deadline's time is: GC compares
// created times, and adapters that normalized such a time differently
// removed different rows.
func testAuditBadCreated(t *testing.T, e env) {
	s := e.openAudit(t, true).Store
	ctx := t.Context()
	kept := modelCall("c", 1, 10)
	require.NoError(t, s.PutModelCall(ctx, kept))
	for _, c := range []*timestamppb.Timestamp{
		{Seconds: 100, Nanos: 1_500_000_000},
		{Seconds: 102, Nanos: -500_000_000},
		timestamppb.New(time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)),
		{Seconds: -62135596801},
	} {
		for _, turn := range []uint64{1, 2} {
			mc := modelCall("c", turn, 0)
			mc.Created = c
			err := s.PutModelCall(ctx, mc)
			requireSentinel(t, err, journal.ErrInvalid, "created %v, turn %d", c, turn)
		}
	}
	calls, err := s.ModelCalls(ctx, "c")
	require.NoError(t, err)
	requireProtos(t, []*messages.ModelCall{kept}, calls, "a refused row neither replaces one nor is added")
	undated := modelCall("c", 3, 0)
	undated.Created = nil
	require.NoError(t, s.PutModelCall(ctx, undated), "a model call without a created time is taken")
}
