package journaltest

import (
	"context"
	"errors"
	"fmt"
	"io"
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

// populate writes one of every kind of record for conv: events, tool call
// rows (two pending with deadlines, one resolved), a summary, settings,
// metadata, and audit rows when audit is on. Everything it writes names
// conv, so a record seen under another id shows. It returns the tool call
// ids.
func populate(t testing.TB, s journal.Store, conv string, audit bool) []string {
	t.Helper()
	ctx := t.Context()
	calls := []string{conv + "/tc-1", conv + "/tc-2", conv + "/tc-3"}
	appendEvents(t, s, conv, userEv(1, conv+": hello"), userEv(2, conv+": plan"))
	last := suspend(t, s, conv, calls...)
	appendOK(t, s, &messages.AppendRequest{
		ConversationId: conv, ExpectedLast: last,
		Events:      []*messages.Event{resolutionEv(20, calls[2], resolved), toolResultEv(20, calls[2], `"`+conv+`"`)},
		Resolutions: []*messages.ToolResolution{{ToolCallId: calls[2], Status: resolved, Result: contentOutcome(`"` + conv + `"`), At: ts(20)}},
		FsmState:    awaiting(last+2, calls[:2]...),
		Status:      statusSuspended,
	})
	putSummary(t, s, conv, &messages.Summary{FromSeq: 1, ToSeq: 2, Content: "summary of " + conv, Version: "v1", Created: ts(21)})
	require.NoError(t, s.PutConversation(ctx, journal.ConversationUpdate{ID: conv, Settings: map[string]string{"model": conv}}))
	require.NoError(t, s.PutMetadata(ctx, conv, map[string]string{"name": conv, "owner": "ann"}))
	if audit {
		require.NoError(t, s.PutModelCall(ctx, modelCall(conv, 1, 10)))
		require.NoError(t, s.PutModelCall(ctx, modelCall(conv, 2, 20)))
	}
	return calls
}

var deleteCases = []suiteCase{
	{name: "RemovesEverything", run: testDeleteRemoves},
	{name: "LateWritesRejected", run: testDeleteLateWrites},
	{name: "Unknown", run: testDeleteUnknown},
	{name: "LookupSaysDeleted", run: testDeleteLookup},
	{name: "ConcurrentWritesDoNotResurrect", run: testDeleteConcurrentWrites},
	{name: "BadInputIsInvalidFirst", run: testDeleteBadInputFirst},
}

// testDeleteBadInputFirst: a write to a deleted conversation whose input is
// wrong by itself (whatever the Store holds) is ErrInvalid, not ErrDeleted,
// for every write method, as Append's order of checks says: the caller
// learns of its bug whatever became of the conversation. A summary beyond
// the log is wrong only given the log, and a deleted conversation's is
// ErrDeleted.
func testDeleteBadInputFirst(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	populate(t, s, "x", e.feat.Audit)
	require.NoError(t, s.DeleteConversation(ctx, "x"))
	big := strings.Repeat("m", journal.MaxRecordBytes+1)
	withSummary := func(f func(*messages.Summary)) func() error {
		return func() error {
			sm := summary(1, 1)
			f(sm)
			return s.PutSummary(ctx, "x", sm)
		}
	}
	for _, c := range []namedCall{
		{"AppendEventWithoutBody", func() error {
			_, err := s.Append(ctx, &messages.AppendRequest{ConversationId: "x", Events: []*messages.Event{{Time: ts(1)}}})
			return err
		}},
		{"PutSummaryNil", func() error { return s.PutSummary(ctx, "x", nil) }},
		{"PutSummaryFromZero", withSummary(func(sm *messages.Summary) { sm.FromSeq = 0 })},
		{"PutSummaryFromAfterTo", withSummary(func(sm *messages.Summary) { sm.FromSeq = 2 })},
		{"PutSummaryNotUTF8", withSummary(func(sm *messages.Summary) { sm.Content = "\xff" })},
		{"PutSummaryOversized", withSummary(func(sm *messages.Summary) { sm.Content = big })},
		{"UpsertUnknownExecutor", func() error {
			r := humanCall("x", "x/new")
			r.Executor = 99
			return s.UpsertToolCall(ctx, r)
		}},
		{"PutFSMStateNil", func() error { return s.PutFSMState(ctx, "x", nil) }},
		{"PutConversationUnknownStatus", func() error {
			return s.PutConversation(ctx, journal.ConversationUpdate{ID: "x", Status: 99})
		}},
		{"PutMetadataEmptyKey", func() error { return s.PutMetadata(ctx, "x", map[string]string{"": "v"}) }},
		{"ScheduleWithoutTime", func() error {
			return s.ScheduleDeadline(ctx, &messages.Deadline{ConversationId: "x", ToolCallId: "x/tc-1"})
		}},
		{"PutModelCallNotUTF8", func() error {
			mc := modelCall("x", 3, 30)
			mc.Model = "\xff"
			return s.PutModelCall(ctx, mc)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.do()
			requireSentinel(t, err, journal.ErrInvalid)
			require.NotErrorIs(t, err, journal.ErrDeleted)
		})
	}
	requireSentinel(t, s.PutSummary(ctx, "x", summary(1, 1)), journal.ErrDeleted, "a summary beyond the (deleted) log")
}

// testDeleteLookup: the row lookup of a deleted conversation says so
// (ErrDeleted, not ErrNotFound), every time and after a reopen, so that a
// reader (a revival) can tell a deleted conversation from a new one; an
// id never written is still ErrNotFound.
func testDeleteLookup(t *testing.T, e env) {
	h := e.open(t)
	s := h.Store
	ctx := t.Context()
	populate(t, s, "x", e.feat.Audit)
	populate(t, s, "y", e.feat.Audit)
	require.NoError(t, s.DeleteConversation(ctx, "x"))
	for range 2 {
		_, err := s.Conversation(ctx, "x")
		requireSentinel(t, err, journal.ErrDeleted)
		require.NotErrorIs(t, err, journal.ErrNotFound)
	}
	// A tombstone is no row: deleting again is ErrNotFound, as for an id
	// never written; Conversation is what tells the two apart.
	requireSentinel(t, s.DeleteConversation(ctx, "x"), journal.ErrNotFound, "a second delete")
	_, err := s.Conversation(ctx, "x")
	requireSentinel(t, err, journal.ErrDeleted, "a second delete leaves the tombstone")
	_, err = s.Conversation(ctx, "never")
	requireSentinel(t, err, journal.ErrNotFound)
	require.NotErrorIs(t, err, journal.ErrDeleted)
	conversation(t, s, "y")
	if !e.feat.Durable {
		return
	}
	s = h.Reopen(t)
	_, err = s.Conversation(ctx, "x")
	requireSentinel(t, err, journal.ErrDeleted, "after a reopen")
	conversation(t, s, "y")
}

// testDeleteConcurrentWrites: writes of every kind racing a delete of
// their conversation either land before it (and go with it) or fail with
// ErrDeleted (a fenced append may also lose its fence): once the delete
// returned and the writers are done, nothing of the conversation is left.
func testDeleteConcurrentWrites(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	for round := range 8 {
		conv := fmt.Sprint("x", round)
		calls := populate(t, s, conv, e.feat.Audit)
		var ids []string
		writes := []func(i int) error{
			func(i int) error {
				last, err := s.LastSeq(ctx, conv)
				if err != nil {
					return err
				}
				_, err = s.Append(ctx, &messages.AppendRequest{ConversationId: conv, ExpectedLast: last, Events: userEvs(i, 1),
					ToolCalls: []*messages.ToolCallRecord{humanCall(conv, fmt.Sprint(conv, "/a", i))},
					Schedule:  []*messages.Deadline{deadline(conv, fmt.Sprint(conv, "/a", i), i)}})
				return err
			},
			func(i int) error {
				_, err := s.Append(ctx, &messages.AppendRequest{ConversationId: conv, Unfenced: true, Settings: map[string]string{"k": "v"},
					Schedule: []*messages.Deadline{deadline(conv, fmt.Sprint(conv, "/u", i), i)}})
				return err
			},
			func(i int) error { return s.UpsertToolCall(ctx, humanCall(conv, fmt.Sprint(conv, "/t", i))) },
			func(i int) error { return s.ScheduleDeadline(ctx, deadline(conv, fmt.Sprint(conv, "/d", i), i)) },
			func(i int) error { return s.PutMetadata(ctx, conv, map[string]string{fmt.Sprint("m", i): "v"}) },
			func(i int) error { return s.PutFSMState(ctx, conv, idleState(0)) },
			func(i int) error {
				return s.PutConversation(ctx, journal.ConversationUpdate{ID: conv, Settings: map[string]string{"s": "v"}})
			},
			func(i int) error { return s.PutSummary(ctx, conv, summary(1, 2)) },
			func(i int) error { return s.PutModelCall(ctx, modelCall(conv, uint64(i), i)) },
		}
		for i := range 3 {
			for _, p := range []string{"/a", "/t"} {
				ids = append(ids, fmt.Sprint(conv, p, i))
			}
		}
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range 3 {
			for w, write := range writes {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					err := write(i)
					if err != nil && !errors.Is(err, journal.ErrDeleted) && !(w == 0 && errors.Is(err, journal.ErrConflict)) {
						t.Errorf("write %d racing the delete: %v", w, err)
					}
				}()
			}
		}
		close(start)
		require.NoError(t, s.DeleteConversation(ctx, conv))
		wg.Wait()

		snap := snapshotOf(t, s, []string{conv}, append(calls, ids...))
		c := snap.convs[conv]
		assert.True(t, c.deleted, "the lookup says deleted")
		assert.Zero(t, c.lastSeq, "last seq")
		assert.Empty(t, c.events, "events")
		assert.Empty(t, c.summaries, "summaries")
		assert.Empty(t, c.pending, "pending calls")
		assert.Empty(t, c.meta, "metadata")
		assert.Empty(t, c.audit, "audit")
		assert.Empty(t, snap.deadlines, "deadlines")
		assert.Empty(t, snap.listed, "listing")
		assert.Empty(t, snap.active, "active index")
		for id, row := range snap.calls {
			assert.Nil(t, row, "tool call %s", id)
		}
	}
}

func testDeleteRemoves(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	calls := populate(t, s, "x", e.feat.Audit)
	otherCalls := populate(t, s, "y", e.feat.Audit)
	before := snapshotOf(t, s, []string{"y"}, otherCalls)

	require.NoError(t, s.DeleteConversation(ctx, "x"))

	_, err := s.Conversation(ctx, "x")
	requireSentinel(t, err, journal.ErrDeleted, "row: the lookup finds the tombstone")
	assert.Empty(t, allEvents(t, s, "x"), "events")
	assert.Zero(t, lastSeq(t, s, "x"), "last seq")
	sum, evs := loadSince(t, s, "x")
	assert.Nil(t, sum, "LoadSince summary")
	assert.Empty(t, evs, "LoadSince events")
	_, err = s.LatestSummary(ctx, "x")
	requireSentinel(t, err, journal.ErrNotFound, "summaries")
	_, err = s.SummaryBefore(ctx, "x", 100)
	requireSentinel(t, err, journal.ErrNotFound, "chapters")
	for _, id := range calls {
		_, err := s.ToolCall(ctx, id)
		requireSentinel(t, err, journal.ErrNotFound, "tool call %s by id", id)
	}
	pend, err := s.PendingToolCalls(ctx, "x")
	require.NoError(t, err)
	assert.Empty(t, pend, "pending tool calls")
	assert.Empty(t, deadlinesOf(t, s, "x"), "deadlines")
	audit, err := s.ModelCalls(ctx, "x")
	require.NoError(t, err)
	assert.Empty(t, audit, "audit rows")
	md, err := s.Metadata(ctx, "x")
	require.NoError(t, err)
	assert.Empty(t, md, "metadata")
	rows, _, err := s.ListConversations(ctx, "", 0)
	require.NoError(t, err)
	assert.Equal(t, []string{"y"}, convIDs(rows), "listing")
	allPending, _, err := s.ListPendingToolCalls(ctx, "", 0)
	require.NoError(t, err)
	for _, r := range allPending {
		assert.Equal(t, "y", r.GetConversationId(), "pending calls of every conversation: %s", r.GetId())
	}
	if e.feat.Audit {
		n, err := s.GCModelCalls(ctx, "x", tm(1000))
		require.NoError(t, err)
		assert.Zero(t, n, "audit GC finds nothing left")
	}
	// Cancelling a deadline that went with the conversation is not an
	// error: the expiry actor may cancel after a delete.
	require.NoError(t, s.CancelDeadline(ctx, "x", calls[0]))

	requireSameSnapshot(t, before, snapshotOf(t, s, []string{"y"}, otherCalls), "deleting x must not touch y")

	// A late answer for a deleted conversation's call is stale.
	_, err = s.ResolveToolCall(ctx, calls[0], resolved, contentOutcome("late"), tm(99))
	requireSentinel(t, err, journal.ErrStale)
	// The id index is gone too: another conversation may use the id.
	upsert(t, s, humanCall("y", calls[0]))
	assert.Equal(t, "y", toolCall(t, s, calls[0]).GetConversationId())
}

func testDeleteLateWrites(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	calls := populate(t, s, "x", e.feat.Audit)
	last := lastSeq(t, s, "x")
	require.NoError(t, s.DeleteConversation(ctx, "x"))
	after := snapshotOf(t, s, []string{"x"}, calls)

	writes := []struct {
		name string
		do   func() error
	}{
		{"AppendFromEmpty", func() error {
			_, err := s.Append(ctx, &messages.AppendRequest{ConversationId: "x", Events: userEvs(1, 1)})
			return err
		}},
		{"AppendAfterOldLast", func() error {
			_, err := s.Append(ctx, &messages.AppendRequest{ConversationId: "x", ExpectedLast: last, Events: userEvs(1, 1)})
			return err
		}},
		{"AppendUnfenced", func() error {
			_, err := s.Append(ctx, &messages.AppendRequest{ConversationId: "x", Unfenced: true, Schedule: []*messages.Deadline{deadline("x", calls[0], 5)}})
			return err
		}},
		{"AppendBatch", func() error {
			return s.AppendBatch(ctx, []*messages.AppendRequest{{ConversationId: "x", Events: userEvs(1, 1)}})[0].Err
		}},
		{"PutFSMState", func() error { return s.PutFSMState(ctx, "x", idleState(1)) }},
		{"PutConversation", func() error { return s.PutConversation(ctx, journal.ConversationUpdate{ID: "x", Status: statusActive}) }},
		{"UpsertToolCall", func() error { return s.UpsertToolCall(ctx, humanCall("x", "x/new")) }},
		{"PutSummary", func() error { return s.PutSummary(ctx, "x", summary(1, 1)) }},
		{"PutMetadata", func() error { return s.PutMetadata(ctx, "x", map[string]string{"k": "v"}) }},
		{"ScheduleDeadline", func() error { return s.ScheduleDeadline(ctx, deadline("x", calls[0], 5)) }},
	}
	if e.feat.Audit {
		writes = append(writes, struct {
			name string
			do   func() error
		}{"PutModelCall", func() error { return s.PutModelCall(ctx, modelCall("x", 3, 30)) }})
	}
	for _, w := range writes {
		t.Run(w.name, func(t *testing.T) {
			requireSentinel(t, w.do(), journal.ErrDeleted)
			requireSameSnapshot(t, after, snapshotOf(t, s, []string{"x"}, append(calls, "x/new")), "a late write must not resurrect anything")
		})
	}
	requireSentinel(t, s.DeleteConversation(ctx, "x"), journal.ErrNotFound, "deleting twice")
}

// testDeleteUnknown: deleting an id under which nothing is stored is
// ErrNotFound and leaves no tombstone. Records written before the
// conversation had a row (metadata, a tool call row, a deadline, an audit
// row) are the conversation's: a delete removes them and leaves the
// tombstone, as for a conversation with a row, so that nothing stored
// under the id outlives its delete.
func testDeleteUnknown(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	appendEvents(t, s, "known", userEvs(1, 1)...)
	requireSentinel(t, s.DeleteConversation(ctx, "unknown"), journal.ErrNotFound)
	require.NoError(t, s.PutMetadata(ctx, "emptied", map[string]string{"k": "v"}))
	require.NoError(t, s.PutMetadata(ctx, "emptied", map[string]string{"k": ""}))
	requireSentinel(t, s.DeleteConversation(ctx, "emptied"), journal.ErrNotFound, "metadata merged away leaves nothing to delete")

	rowless := map[string]func(id string) error{
		"metadata":  func(id string) error { return s.PutMetadata(ctx, id, map[string]string{"k": "v"}) },
		"tool-call": func(id string) error { return s.UpsertToolCall(ctx, humanCall(id, id+"/call")) },
		"deadline":  func(id string) error { return s.ScheduleDeadline(ctx, deadline(id, id+"/call", 5)) },
	}
	if e.feat.Audit {
		rowless["audit"] = func(id string) error { return s.PutModelCall(ctx, modelCall(id, 1, 1)) }
	}
	for name, write := range rowless {
		t.Run(name, func(t *testing.T) {
			id := "rowless-" + name
			require.NoError(t, write(id))
			_, err := s.Conversation(ctx, id)
			requireSentinel(t, err, journal.ErrNotFound, "the write creates no row")
			require.NoError(t, s.DeleteConversation(ctx, id), "a conversation with records and no row is deleted")
			_, err = s.Conversation(ctx, id)
			requireSentinel(t, err, journal.ErrDeleted, "the delete leaves a tombstone")
			md, err := s.Metadata(ctx, id)
			require.NoError(t, err)
			assert.Empty(t, md, "metadata")
			_, err = s.ToolCall(ctx, id+"/call")
			requireSentinel(t, err, journal.ErrNotFound, "tool call row")
			assert.Empty(t, deadlinesOf(t, s, id), "deadlines")
			audit, err := s.ModelCalls(ctx, id)
			require.NoError(t, err)
			assert.Empty(t, audit, "audit rows")
			requireSentinel(t, write(id), journal.ErrDeleted, "a late write")
			requireSentinel(t, s.DeleteConversation(ctx, id), journal.ErrNotFound, "deleting twice")
		})
	}
	assert.Equal(t, uint64(1), lastSeq(t, s, "known"))
	// The ids a failed delete named are not tombstoned.
	appendEvents(t, s, "unknown", userEvs(1, 1)...)
	appendEvents(t, s, "emptied", userEvs(1, 1)...)
}

var isolationCases = []suiteCase{
	{name: "PrefixIDs", run: testIsolation},
}

// tricky ids are prefixes of each other, or differ only after a NUL or a
// separator a key layout might use.
var trickyIDs = []string{"a", "a/b", "ab", "a\x00b", "a\x00", "\x00", "a\x00\x00", "a\x01", "a\xc3\xbf"}

func testIsolation(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	calls := map[string][]string{}
	for i, id := range trickyIDs {
		calls[id] = populate(t, s, id, e.feat.Audit)
		appendEvents(t, s, id, userEvs(100, i)...) // a different length per id
	}
	for i, id := range trickyIDs {
		t.Run(fmt.Sprintf("%q", id), func(t *testing.T) {
			solo := e.open(t).Store
			populate(t, solo, id, e.feat.Audit)
			appendEvents(t, solo, id, userEvs(100, i)...)
			want := snapshotOf(t, solo, []string{id}, calls[id]).withoutTimes()
			got := snapshotOf(t, s, []string{id}, calls[id]).withoutTimes()
			want.deadlines, got.deadlines = nil, nil
			want.listed, got.listed = nil, nil
			requireSameSnapshot(t, want, got, "id %q must see exactly what it would see alone", id)
			assert.Equal(t, allDeadlinesOf(t, solo, id), deadlineIDs(deadlinesOf(t, s, id)))
		})
	}
	rows, _, err := s.ListConversations(ctx, "", 0)
	require.NoError(t, err)
	assert.Equal(t, []string{"\x00", "a", "a\x00", "a\x00\x00", "a\x00b", "a\x01", "a/b", "ab", "a\xc3\xbf"}, convIDs(rows), "listed in byte order")

	// Deleting "a" leaves the others exactly as they were.
	others := trickyIDs[1:]
	var otherCalls []string
	for _, id := range others {
		otherCalls = append(otherCalls, calls[id]...)
	}
	before := snapshotOf(t, s, others, otherCalls)
	require.NoError(t, s.DeleteConversation(ctx, "a"))
	after := snapshotOf(t, s, others, otherCalls)
	require.Len(t, after.listed, len(others))
	before.listed, after.listed = nil, nil
	requireSameSnapshot(t, before, after, "deleting \"a\" must not touch the ids it prefixes")
	assert.Empty(t, allEvents(t, s, "a"))
	for _, id := range others {
		require.NoError(t, s.PutMetadata(ctx, id, map[string]string{"after": "delete"}), "%q is not tombstoned", id)
	}

	// Invalid UTF-8 is refused everywhere.
	bad := "a\xff"
	_, err = s.Append(ctx, &messages.AppendRequest{ConversationId: bad, Events: userEvs(1, 1)})
	requireSentinel(t, err, journal.ErrInvalid)
	_, err = s.Events(ctx, bad, journal.EventQuery{})
	requireSentinel(t, err, journal.ErrInvalid)
	requireSentinel(t, s.PutMetadata(ctx, bad, map[string]string{"k": "v"}), journal.ErrInvalid)
	_, err = s.Conversation(ctx, bad)
	requireSentinel(t, err, journal.ErrInvalid)
	requireSentinel(t, s.DeleteConversation(ctx, bad), journal.ErrInvalid)
}

func allDeadlinesOf(t testing.TB, s journal.Store, conv string) []string {
	t.Helper()
	return deadlineIDs(deadlinesOf(t, s, conv))
}

func deadlineIDs(ds []*messages.Deadline) []string {
	out := []string{}
	for _, d := range ds {
		out = append(out, d.GetConversationId()+"|"+d.GetToolCallId()+"|"+d.GetAt().AsTime().Format(time.RFC3339Nano))
	}
	return out
}

var badInputCases = []suiteCase{
	{name: "RejectedWithoutWriting", run: testBadInput},
	{name: "LimitsAreInclusive", run: testLimitsInclusive},
}

// Times no adapter stores (see journal.CheckTime).
var (
	year10000   = timestamppb.New(time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC))
	beforeYear1 = &timestamppb.Timestamp{Seconds: -1 << 40}
	badNanos    = &timestamppb.Timestamp{Seconds: 5, Nanos: 2e9}
)

func testBadInput(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	calls := populate(t, s, "c", e.feat.Audit)
	last := lastSeq(t, s, "c")
	longID := strings.Repeat("x", journal.MaxIDBytes+1)
	huge := userEv(1, strings.Repeat("y", journal.MaxEventBytes+1))
	tooMany := userEvs(1, journal.MaxEventsPerAppend+1)
	// Events each within MaxEventBytes, as many as MaxEventsPerAppend
	// allows, whose append is over MaxAppendBytes.
	bigEv := eventOfSize(journal.MaxEventBytes - 64)
	tooBig := make([]*messages.Event, journal.MaxAppendBytes/(journal.MaxEventBytes-64)+1)
	for i := range tooBig {
		tooBig[i] = bigEv
	}
	appendTo := func(req *messages.AppendRequest) func() error {
		return func() error {
			res, err := s.Append(ctx, req)
			if !errors.Is(res.Err, journal.ErrInvalid) {
				return fmt.Errorf("AppendResult.Err is %v, error is %v", res.Err, err) // wraps no sentinel
			}
			return err
		}
	}
	valid := func(mut func(*messages.AppendRequest)) *messages.AppendRequest {
		req := &messages.AppendRequest{ConversationId: "c", ExpectedLast: last, Events: userEvs(50, 1), ToolCalls: []*messages.ToolCallRecord{humanCall("c", "c/new")}}
		mut(req)
		return req
	}
	cases := []struct {
		name string
		do   func() error
	}{
		{"AppendNilRequest", appendTo(nil)},
		{"AppendEmptyID", appendTo(valid(func(r *messages.AppendRequest) { r.ConversationId = "" }))},
		{"AppendOversizedID", appendTo(valid(func(r *messages.AppendRequest) { r.ConversationId = longID }))},
		{"AppendInvalidUTF8ID", appendTo(valid(func(r *messages.AppendRequest) { r.ConversationId = "c\xff" }))},
		{"AppendOversizedEvent", appendTo(valid(func(r *messages.AppendRequest) { r.Events = append(r.Events, huge) }))},
		{"AppendEventWithoutBody", appendTo(valid(func(r *messages.AppendRequest) { r.Events = append(r.Events, &messages.Event{Time: ts(1)}) }))},
		{"AppendNilEvent", appendTo(valid(func(r *messages.AppendRequest) { r.Events = append(r.Events, nil) }))},
		{"AppendTooManyEvents", appendTo(valid(func(r *messages.AppendRequest) { r.Events = tooMany }))},
		{"AppendOverMaxAppendBytes", appendTo(valid(func(r *messages.AppendRequest) { r.Events = tooBig }))},
		{"AppendBatchOverMaxAppendBytes", func() error {
			return s.AppendBatch(ctx, []*messages.AppendRequest{valid(func(r *messages.AppendRequest) { r.Events = tooBig })})[0].Err
		}},
		{"AppendToolCallWithoutID", appendTo(valid(func(r *messages.AppendRequest) { r.ToolCalls[0].Id = "" }))},
		{"AppendToolCallOfOtherConversation", appendTo(valid(func(r *messages.AppendRequest) { r.ToolCalls[0].ConversationId = "d" }))},
		{"AppendDeadlineWithoutTime", appendTo(valid(func(r *messages.AppendRequest) {
			r.Schedule = []*messages.Deadline{{ConversationId: "c", ToolCallId: calls[0]}}
		}))},
		{"AppendDeadlineTimeOutOfRange", appendTo(valid(func(r *messages.AppendRequest) {
			r.Schedule = []*messages.Deadline{{ConversationId: "c", ToolCallId: calls[0], At: &timestamppb.Timestamp{Seconds: 1 << 62}}}
		}))},
		{"AppendDeadlineOfOtherConversation", appendTo(valid(func(r *messages.AppendRequest) {
			r.Schedule = []*messages.Deadline{deadline("d", calls[0], 5)}
		}))},
		{"AppendNonTerminalResolution", appendTo(valid(func(r *messages.AppendRequest) {
			r.Resolutions = []*messages.ToolResolution{{ToolCallId: calls[0], Status: pending}}
		}))},
		{"AppendUnfencedWithEvents", appendTo(valid(func(r *messages.AppendRequest) { r.Unfenced = true }))},
		{"AppendUnknownStatus", appendTo(valid(func(r *messages.AppendRequest) { r.Status = 99 }))},
		{"AppendToolCallUnknownStatus", appendTo(valid(func(r *messages.AppendRequest) { r.ToolCalls[0].Status = 99 }))},
		{"AppendToolCallUnknownExecutor", appendTo(valid(func(r *messages.AppendRequest) { r.ToolCalls[0].Executor = 99 }))},
		{"AppendToolCallEventUnknownExecutor", appendTo(valid(func(r *messages.AppendRequest) {
			r.Events = append(r.Events, &messages.Event{Body: &messages.Event_ToolCall{ToolCall: &messages.ToolCallEvent{
				Call: &messages.ToolCall{Id: "call_odd", Name: "t", Arguments: "{}"}, Executor: 99}}})
		}))},
		{"AppendFSMStateStreaming", appendTo(valid(func(r *messages.AppendRequest) {
			r.FsmState = &messages.FSMState{State: messages.AgentState_AGENT_STATE_STREAMING, LastSeq: last + 1}
		}))},
		{"AppendFSMStateExecutingTools", appendTo(valid(func(r *messages.AppendRequest) {
			r.FsmState = &messages.FSMState{State: messages.AgentState_AGENT_STATE_EXECUTING_TOOLS, LastSeq: last + 1}
		}))},
		{"AppendFSMStateUnknownState", appendTo(valid(func(r *messages.AppendRequest) { r.FsmState = &messages.FSMState{State: 99} }))},
		{"AppendFSMStatePendingWithoutID", appendTo(valid(func(r *messages.AppendRequest) {
			r.FsmState = awaiting(last+1, "")
		}))},
		{"AppendFSMStateNilPending", appendTo(valid(func(r *messages.AppendRequest) {
			r.FsmState = &messages.FSMState{State: messages.AgentState_AGENT_STATE_AWAITING_INPUT, Pending: map[string]*messages.PendingCall{calls[0]: nil}}
		}))},
		{"AppendResolutionInvalidUTF8Result", appendTo(&messages.AppendRequest{ConversationId: "c", Unfenced: true,
			Resolutions: []*messages.ToolResolution{{ToolCallId: calls[0], Status: resolved, Result: contentOutcome("\xff")}}})},
		{"AppendResolutionOversizedResult", appendTo(&messages.AppendRequest{ConversationId: "c", Unfenced: true,
			Resolutions: []*messages.ToolResolution{{ToolCallId: calls[0], Status: resolved, Result: contentOutcome(strings.Repeat("r", journal.MaxRecordBytes+1))}}})},
		{"AppendResolutionWithEventsOversizedResult", appendTo(&messages.AppendRequest{ConversationId: "c", ExpectedLast: last,
			Events:      []*messages.Event{resolutionEv(50, calls[0], resolved)},
			Resolutions: []*messages.ToolResolution{{ToolCallId: calls[0], Status: resolved, Result: contentOutcome(strings.Repeat("r", journal.MaxRecordBytes+1))}}})},
		{"AppendBatchInvalidRequest", func() error {
			return s.AppendBatch(ctx, []*messages.AppendRequest{valid(func(r *messages.AppendRequest) { r.Events[0].Body = nil })})[0].Err
		}},
		{"SummaryBeyondLastSeq", func() error { return s.PutSummary(ctx, "c", summary(1, last+1)) }},
		{"SummaryFromZero", func() error { return s.PutSummary(ctx, "c", summary(0, 1)) }},
		{"SummaryBadID", func() error { return s.PutSummary(ctx, "", summary(1, 1)) }},
		{"ResolvePendingStatus", func() error {
			_, err := s.ResolveToolCall(ctx, calls[0], pending, contentOutcome("x"), tm(1))
			return err
		}},
		{"ResolveUnspecifiedStatus", func() error {
			_, err := s.ResolveToolCall(ctx, calls[0], messages.ToolCallStatus_TOOL_CALL_STATUS_UNSPECIFIED, nil, tm(1))
			return err
		}},
		// The status is checked first: ErrInvalid, not ErrStale, for a
		// call that does not exist.
		{"ResolveUnknownCallPendingStatus", func() error {
			_, err := s.ResolveToolCall(ctx, "c/no-such-call", pending, contentOutcome("x"), tm(1))
			return err
		}},
		{"ResolveEmptyID", func() error {
			_, err := s.ResolveToolCall(ctx, "", resolved, nil, tm(1))
			return err
		}},
		{"UpsertNil", func() error { return s.UpsertToolCall(ctx, nil) }},
		{"UpsertEmptyID", func() error { return s.UpsertToolCall(ctx, humanCall("c", "")) }},
		{"UpsertOversizedConversationID", func() error { return s.UpsertToolCall(ctx, humanCall(longID, "c/new")) }},
		{"ScheduleWithoutTime", func() error {
			return s.ScheduleDeadline(ctx, &messages.Deadline{ConversationId: "c", ToolCallId: calls[0]})
		}},
		// A time no reader could decode (the durable adapters report a
		// stored one as ErrCorrupt, which would fail every rebuild of the
		// expiry actor's timers) is refused at the write.
		{"ScheduleTimeAfterYear9999", func() error {
			return s.ScheduleDeadline(ctx, &messages.Deadline{ConversationId: "c", ToolCallId: calls[0], At: &timestamppb.Timestamp{Seconds: 1 << 62}})
		}},
		{"ScheduleTimeBeforeYear1", func() error {
			return s.ScheduleDeadline(ctx, &messages.Deadline{ConversationId: "c", ToolCallId: calls[0], At: &timestamppb.Timestamp{Seconds: -1 << 40}})
		}},
		{"ScheduleTimeNanosOutOfRange", func() error {
			return s.ScheduleDeadline(ctx, &messages.Deadline{ConversationId: "c", ToolCallId: calls[0], At: &timestamppb.Timestamp{Seconds: 5, Nanos: 2e9}})
		}},
		{"ScheduleEmptyCallID", func() error { return s.ScheduleDeadline(ctx, deadline("c", "", 5)) }},
		{"CancelEmptyCallID", func() error { return s.CancelDeadline(ctx, "c", "") }},
		{"MetadataEmptyKey", func() error { return s.PutMetadata(ctx, "c", map[string]string{"": "v"}) }},
		{"MetadataInvalidUTF8Value", func() error { return s.PutMetadata(ctx, "c", map[string]string{"k": "\xff"}) }},
		{"PutConversationEmptyID", func() error { return s.PutConversation(ctx, journal.ConversationUpdate{}) }},
		{"PutConversationUnknownStatus", func() error { return s.PutConversation(ctx, journal.ConversationUpdate{ID: "c", Status: 99}) }},
		{"PutConversationFSMStateStreaming", func() error {
			return s.PutConversation(ctx, journal.ConversationUpdate{ID: "c", FSMState: &messages.FSMState{State: messages.AgentState_AGENT_STATE_STREAMING}})
		}},
		{"PutFSMStateExecutingTools", func() error {
			return s.PutFSMState(ctx, "c", &messages.FSMState{State: messages.AgentState_AGENT_STATE_EXECUTING_TOOLS, LastSeq: last})
		}},
		{"PutFSMStateUnknownState", func() error { return s.PutFSMState(ctx, "d", &messages.FSMState{State: 99}) }},
		{"PutFSMStatePendingWithoutID", func() error { return s.PutFSMState(ctx, "c", awaiting(last, "")) }},
		{"UpsertUnknownStatus", func() error {
			rec := humanCall("c", "c/new")
			rec.Status = 99
			return s.UpsertToolCall(ctx, rec)
		}},
		{"UpsertUnknownExecutor", func() error {
			rec := humanCall("c", "c/new")
			rec.Executor = 99
			return s.UpsertToolCall(ctx, rec)
		}},
		{"PutFSMStateOversizedID", func() error { return s.PutFSMState(ctx, longID, idleState(1)) }},
		{"DeleteEmptyID", func() error { return s.DeleteConversation(ctx, "") }},
		{"EventsEmptyID", func() error { _, err := s.Events(ctx, "", journal.EventQuery{}); return err }},
		{"LastSeqOversizedID", func() error { _, err := s.LastSeq(ctx, longID); return err }},
		{"LoadSinceInvalidUTF8ID", func() error { _, _, err := s.LoadSince(ctx, "\xff"); return err }},
		{"ToolCallEmptyID", func() error { _, err := s.ToolCall(ctx, ""); return err }},
		{"PendingEmptyID", func() error { _, err := s.PendingToolCalls(ctx, ""); return err }},
		{"ListPendingBadCursor", func() error { _, _, err := s.ListPendingToolCalls(ctx, "x", 0); return err }},
		{"ListPendingCursorBadLength", func() error { _, _, err := s.ListPendingToolCalls(ctx, "9:ctc", 0); return err }},
		{"ListPendingCursorEmptyCall", func() error { _, _, err := s.ListPendingToolCalls(ctx, journal.PendingCursor("c", ""), 0); return err }},
		{"MetadataEmptyID", func() error { _, err := s.Metadata(ctx, ""); return err }},
		{"EventsNegativeLimit", func() error { _, err := s.Events(ctx, "c", journal.EventQuery{Limit: -1}); return err }},
		{"LatestSummaryEmptyID", func() error { _, err := s.LatestSummary(ctx, ""); return err }},
		{"SummaryBeforeOversizedID", func() error { _, err := s.SummaryBefore(ctx, longID, 5); return err }},
		{"PutSummaryNil", func() error { return s.PutSummary(ctx, "c", nil) }},
		{"ConversationEmptyID", func() error { _, err := s.Conversation(ctx, ""); return err }},
		{"PutMetadataEmptyID", func() error { return s.PutMetadata(ctx, "", map[string]string{"k": "v"}) }},
		{"PutMetadataInvalidUTF8ID", func() error { return s.PutMetadata(ctx, "c\xff", map[string]string{"k": "v"}) }},
		{"CancelEmptyConversationID", func() error { return s.CancelDeadline(ctx, "", calls[0]) }},
		{"ScheduleNil", func() error { return s.ScheduleDeadline(ctx, nil) }},
		{"ScheduleEmptyConversationID", func() error { return s.ScheduleDeadline(ctx, deadline("", calls[0], 5)) }},
		{"ResolveInvalidUTF8Result", func() error {
			_, err := s.ResolveToolCall(ctx, calls[0], resolved, contentOutcome("\xff"), tm(1))
			return err
		}},
		// The result is checked with the status, before the call is read:
		// ErrInvalid, not ErrStale, for a call that does not exist.
		{"ResolveUnknownCallOversizedResult", func() error {
			_, err := s.ResolveToolCall(ctx, "c/no-such-call", resolved, contentOutcome(strings.Repeat("r", journal.MaxRecordBytes+1)), tm(1))
			return err
		}},
		{"ResolveUnknownCallInvalidUTF8Result", func() error {
			_, err := s.ResolveToolCall(ctx, "c/no-such-call", resolved, contentOutcome("\xff"), tm(1))
			return err
		}},
		{"ResolveOversizedResult", func() error {
			_, err := s.ResolveToolCall(ctx, calls[0], resolved, contentOutcome(strings.Repeat("r", journal.MaxRecordBytes+1)), tm(1))
			return err
		}},
		{"UpsertOversizedArgs", func() error {
			rec := humanCall("c", "c/new")
			rec.Args = strings.Repeat("a", journal.MaxRecordBytes+1)
			return s.UpsertToolCall(ctx, rec)
		}},
		{"SummaryOversized", func() error {
			sum := summary(1, 1)
			sum.Content = strings.Repeat("s", journal.MaxRecordBytes+1)
			return s.PutSummary(ctx, "c", sum)
		}},
		{"PutConversationOversizedSettings", func() error {
			return s.PutConversation(ctx, journal.ConversationUpdate{ID: "c", Settings: map[string]string{"k": strings.Repeat("v", journal.MaxRecordBytes+1)}})
		}},
		{"PutFSMStateOversized", func() error {
			st := awaiting(last, calls[0])
			st.Pending[calls[0]].Prompt = strings.Repeat("p", journal.MaxRecordBytes+1)
			return s.PutFSMState(ctx, "c", st)
		}},
		{"AppendOversizedFSMState", appendTo(valid(func(r *messages.AppendRequest) {
			r.FsmState = awaiting(last+1, calls[0])
			r.FsmState.Pending[calls[0]].Prompt = strings.Repeat("p", journal.MaxRecordBytes+1)
		}))},
		{"AppendOversizedSettings", appendTo(valid(func(r *messages.AppendRequest) {
			r.Settings = map[string]string{"k": strings.Repeat("v", journal.MaxRecordBytes+1)}
		}))},
		// Records the contract calls malformed: no revival could run or
		// wait on them, or the cache contradicts itself.
		{"AppendToolCallUnspecifiedExecutor", appendTo(valid(func(r *messages.AppendRequest) { r.ToolCalls[0].Executor = 0 }))},
		{"UpsertUnspecifiedExecutor", func() error {
			rec := humanCall("c", "c/new")
			rec.Executor = messages.Executor_EXECUTOR_UNSPECIFIED
			return s.UpsertToolCall(ctx, rec)
		}},
		{"AppendToolCallEventUnspecifiedExecutor", appendTo(valid(func(r *messages.AppendRequest) {
			ev := toolCallEv(50, "c/new")
			ev.GetToolCall().Executor = messages.Executor_EXECUTOR_UNSPECIFIED
			r.Events = append(r.Events, ev)
			r.ToolCalls[0].Executor = messages.Executor_EXECUTOR_UNSPECIFIED
		}))},
		{"AppendServerCallWithDeadline", appendTo(valid(func(r *messages.AppendRequest) {
			r.ToolCalls[0].Executor, r.ToolCalls[0].Prompt, r.ToolCalls[0].Deadline = messages.Executor_EXECUTOR_SERVER, "", ts(100)
		}))},
		{"UpsertServerCallWithDeadline", func() error {
			rec := humanCall("c", "c/new")
			rec.Executor, rec.Prompt, rec.Deadline = messages.Executor_EXECUTOR_SERVER, "", ts(100)
			return s.UpsertToolCall(ctx, rec)
		}},
		{"AppendDeadlineOfServerCall", appendTo(valid(func(r *messages.AppendRequest) {
			r.ToolCalls[0].Executor, r.ToolCalls[0].Prompt = messages.Executor_EXECUTOR_SERVER, ""
			r.Schedule = []*messages.Deadline{deadline("c", "c/new", 100)}
		}))},
		{"AppendResolutionEventPending", appendTo(valid(func(r *messages.AppendRequest) {
			r.Events = append(r.Events, resolutionEv(50, calls[0], pending))
		}))},
		{"AppendResolutionEventUnspecifiedStatus", appendTo(valid(func(r *messages.AppendRequest) {
			r.Events = append(r.Events, resolutionEv(50, calls[0], messages.ToolCallStatus_TOOL_CALL_STATUS_UNSPECIFIED))
		}))},
		{"AppendResolutionEventUnknownStatus", appendTo(valid(func(r *messages.AppendRequest) {
			r.Events = append(r.Events, resolutionEv(50, calls[0], 99))
		}))},
		{"AppendSuspensionPendingWithoutID", appendTo(valid(func(r *messages.AppendRequest) {
			r.Events = append(r.Events, &messages.Event{Time: ts(50), Body: &messages.Event_Suspension{Suspension: &messages.Suspension{
				Pending: []*messages.PendingCall{{Executor: messages.Executor_EXECUTOR_HUMAN, Kind: "ask_human", Prompt: "ok?"}}}}})
		}))},
		{"AppendSuspensionPendingOversizedID", appendTo(valid(func(r *messages.AppendRequest) {
			r.Events = append(r.Events, &messages.Event{Time: ts(50), Body: &messages.Event_Suspension{Suspension: &messages.Suspension{
				Pending: []*messages.PendingCall{{ToolCallId: longID, Executor: messages.Executor_EXECUTOR_HUMAN}}}}})
		}))},
		{"AppendSuspensionPendingUnknownExecutor", appendTo(valid(func(r *messages.AppendRequest) {
			r.Events = append(r.Events, &messages.Event{Time: ts(50), Body: &messages.Event_Suspension{Suspension: &messages.Suspension{
				Pending: []*messages.PendingCall{{ToolCallId: calls[0], Executor: 99}}}}})
		}))},
		{"AppendHandoffWithoutCallID", appendTo(valid(func(r *messages.AppendRequest) {
			r.Events = append(r.Events, &messages.Event{Time: ts(50), Agent: "critic", Body: &messages.Event_Handoff{Handoff: &messages.Handoff{To: "critic", Message: "check it"}}})
		}))},
		{"AppendFSMStateAwaitingNothing", appendTo(valid(func(r *messages.AppendRequest) { r.FsmState = awaiting(last + 1) }))},
		{"AppendFSMStateIdleWithHumanPending", appendTo(valid(func(r *messages.AppendRequest) {
			r.FsmState = awaiting(last+1, calls[0])
			r.FsmState.State = messages.AgentState_AGENT_STATE_IDLE
		}))},
		{"AppendFSMStatePendingNamesOtherCall", appendTo(valid(func(r *messages.AppendRequest) {
			r.FsmState = awaiting(last+1, calls[0])
			r.FsmState.Pending[calls[0]].ToolCallId = calls[1]
		}))},
		{"AppendFSMStatePendingUnknownExecutor", appendTo(valid(func(r *messages.AppendRequest) {
			r.FsmState = awaiting(last+1, calls[0])
			r.FsmState.Pending[calls[0]].Executor = 99
		}))},
		{"PutFSMStateAwaitingNothing", func() error { return s.PutFSMState(ctx, "c", awaiting(last)) }},
		{"PutConversationFSMStateIdleWithHumanPending", func() error {
			st := awaiting(last, calls[0])
			st.State = messages.AgentState_AGENT_STATE_IDLE
			return s.PutConversation(ctx, journal.ConversationUpdate{ID: "c", FSMState: st})
		}},
		{"ModelCallsEmptyID", func() error { _, err := s.ModelCalls(ctx, ""); return err }},
		{"GCModelCallsEmptyID", func() error { _, err := s.GCModelCalls(ctx, "", tm(1)); return err }},
		// Every time a write stores is held to the rule of a deadline's
		// (journal.CheckTime): unset, or within the years 1 to 9999 with
		// its nanos within a second.
		{"AppendEventTimeAfterYear9999", appendTo(valid(func(r *messages.AppendRequest) { r.Events[0].Time = year10000 }))},
		{"AppendEventTimeBeforeYear1", appendTo(valid(func(r *messages.AppendRequest) { r.Events[0].Time = beforeYear1 }))},
		{"AppendEventTimeNanosOutOfRange", appendTo(valid(func(r *messages.AppendRequest) { r.Events[0].Time = badNanos }))},
		{"AppendToolCallCreatedAfterYear9999", appendTo(valid(func(r *messages.AppendRequest) { r.ToolCalls[0].Created = year10000 }))},
		{"AppendToolCallResolvedBeforeYear1", appendTo(valid(func(r *messages.AppendRequest) { r.ToolCalls[0].Resolved = beforeYear1 }))},
		{"AppendToolCallDeadlineNanosOutOfRange", appendTo(valid(func(r *messages.AppendRequest) { r.ToolCalls[0].Deadline = badNanos }))},
		{"AppendResolutionTimeAfterYear9999", appendTo(&messages.AppendRequest{ConversationId: "c", Unfenced: true,
			Resolutions: []*messages.ToolResolution{{ToolCallId: calls[0], Status: resolved, At: year10000}}})},
		{"UpsertCreatedAfterYear9999", func() error {
			rec := humanCall("c", "c/new")
			rec.Created = year10000
			return s.UpsertToolCall(ctx, rec)
		}},
		{"UpsertResolvedBeforeYear1", func() error {
			rec := humanCall("c", "c/new")
			rec.Status, rec.Resolved = resolved, beforeYear1
			return s.UpsertToolCall(ctx, rec)
		}},
		{"UpsertDeadlineNanosOutOfRange", func() error {
			rec := humanCall("c", "c/new")
			rec.Deadline = badNanos
			return s.UpsertToolCall(ctx, rec)
		}},
		{"SummaryCreatedAfterYear9999", func() error {
			sum := summary(1, 1)
			sum.Created = year10000
			return s.PutSummary(ctx, "c", sum)
		}},
		{"SummaryCreatedNanosOutOfRange", func() error {
			sum := summary(1, 1)
			sum.Created = badNanos
			return s.PutSummary(ctx, "c", sum)
		}},
		// The time is checked with the status, before the call is read:
		// ErrInvalid, not ErrStale, for a call that does not exist.
		{"ResolveTimeAfterYear9999", func() error {
			_, err := s.ResolveToolCall(ctx, calls[0], resolved, nil, time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC))
			return err
		}},
		{"ResolveTimeBeforeYear1", func() error {
			_, err := s.ResolveToolCall(ctx, calls[0], resolved, nil, time.Date(0, 12, 31, 0, 0, 0, 0, time.UTC))
			return err
		}},
		{"ResolveUnknownCallTimeAfterYear9999", func() error {
			_, err := s.ResolveToolCall(ctx, "c/no-such-call", resolved, nil, time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC))
			return err
		}},
	}
	if e.feat.Audit {
		cases = append(cases, struct {
			name string
			do   func() error
		}{"PutModelCallOversized", func() error {
			mc := modelCall("c", 9, 9)
			mc.Model = strings.Repeat("m", journal.MaxRecordBytes+1)
			return s.PutModelCall(ctx, mc)
		}})
	}
	convs := []string{"c", "d", "c\xef\xbf\xbd"}
	ids := append(append([]string{}, calls...), "c/new")
	before := snapshotOf(t, s, convs, ids)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			requireSentinel(t, tc.do(), journal.ErrInvalid)
			requireSameSnapshot(t, before, snapshotOf(t, s, convs, ids), "rejected input must write nothing")
		})
	}
}

func testLimitsInclusive(t *testing.T, e env) {
	s := e.open(t).Store
	id := strings.Repeat("x", journal.MaxIDBytes)
	res := appendOK(t, s, &messages.AppendRequest{ConversationId: id, Events: userEvs(1, journal.MaxEventsPerAppend)})
	assert.Equal(t, journal.AppendResult{FirstSeq: 1, LastSeq: journal.MaxEventsPerAppend}, res, "an id of MaxIDBytes and MaxEventsPerAppend events are allowed")
	callID := strings.Repeat("y", journal.MaxIDBytes)
	upsert(t, s, humanCall(id, callID))
	assert.Equal(t, id, toolCall(t, s, callID).GetConversationId())
}

var closeCases = []suiteCase{
	{name: "MethodsAfterClose", run: testClose},
	{name: "OptionalMethodsAfterClose", run: testCloseOptional},
	{name: "ClosedBeforeCancelled", run: testCloseBeforeCancelled},
	{name: "InFlightReadsAfterClose", run: testCloseInFlight},
	{name: "DoneContextOnOpenStore", run: testDoneContext},
	{name: "WhileBusy", run: testCloseWhileBusy},
}

// testCloseWhileBusy: Close racing calls in progress, and another Close:
// nothing panics, both Closes return nil, every call either succeeds or
// fails with ErrClosed, each caller meets ErrClosed once the store is
// closed, and (durable) after a reopen every append that returned nil is
// in the log, which has no gap.
func testCloseWhileBusy(t *testing.T, e env) {
	h := e.open(t)
	s := h.Store
	ctx := t.Context()
	const workers = 4
	acked := make([]uint64, workers)
	var running, wg sync.WaitGroup
	running.Add(workers)
	for w := range workers {
		conv := fmt.Sprint("c", w)
		wg.Go(func() {
			started := false
			for i := 1; ; i++ {
				var err error
				switch i % 4 {
				case 0:
					_, err = s.Events(ctx, conv, journal.EventQuery{Limit: 5})
				case 1:
					err = s.Deadlines(ctx, time.Time{}, func(*messages.Deadline) error { return nil })
				case 2:
					_, _, err = s.ListConversations(ctx, "", 10)
				default:
					var res journal.AppendResult
					res, err = s.Append(ctx, &messages.AppendRequest{ConversationId: conv, ExpectedLast: acked[w],
						Events: userEvs(i, 1), Schedule: []*messages.Deadline{deadline(conv, fmt.Sprint(conv, "/tc-", i), i)}})
					if err == nil {
						acked[w] = res.LastSeq
						if !started {
							started = true
							running.Done()
						}
					}
				}
				if err != nil {
					assert.ErrorIs(t, err, journal.ErrClosed, "%s, call %d", conv, i)
					if !started {
						running.Done()
					}
					return
				}
			}
		})
	}
	running.Wait()
	closeErrs := make(chan error, 2)
	for range 2 {
		go func() { closeErrs <- s.Close() }()
	}
	require.NoError(t, <-closeErrs)
	require.NoError(t, <-closeErrs)
	wg.Wait()
	require.NoError(t, s.Close(), "Close after it all")
	if !e.feat.Durable {
		return
	}
	s = h.Reopen(t)
	for w := range workers {
		conv := fmt.Sprint("c", w)
		last := lastSeq(t, s, conv)
		assert.GreaterOrEqual(t, last, acked[w], "%s: every acknowledged append is kept", conv)
		assert.Equal(t, seqRange(1, last), seqs(allEvents(t, s, conv)), "%s: no gap", conv)
	}
}

// testDoneContext: on a store that is open, a call whose ctx is already
// done fails with an error wrapping ctx's error (no sentinel: the store
// can answer a later call) and writes nothing. Every method, of the
// optional interfaces too; Deadlines and ScheduleTimes do not call fn.
func testDoneContext(t *testing.T, e env) {
	s := e.open(t).Store
	calls := populate(t, s, "c", e.feat.Audit)
	optional := prepareOptionalCalls(t, s)
	before := snapshotOf(t, s, []string{"c", "d", "src", "dst"}, append(calls, "c/new"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, c := range append(closedCalls(ctx, s), optional(ctx)...) {
		t.Run(c.name, func(t *testing.T) {
			err := c.do()
			require.ErrorIs(t, err, context.Canceled)
			for _, sentinel := range sentinels {
				require.NotErrorIs(t, err, sentinel)
			}
		})
	}
	requireSameSnapshot(t, before, snapshotOf(t, s, []string{"c", "d", "src", "dst"}, append(calls, "c/new")), "a call with a done ctx writes nothing")
}

// namedCall is one call of a closed-store case; do returns its error.
type namedCall struct {
	name string
	do   func() error
}

func testClose(t *testing.T, e env) {
	s := e.open(t).Store
	populate(t, s, "c", e.feat.Audit)
	require.NoError(t, s.Close())
	require.NoError(t, s.Close(), "Close twice is fine")
	for _, c := range closedCalls(context.Background(), s) {
		t.Run(c.name, func(t *testing.T) {
			requireSentinel(t, c.do(), journal.ErrClosed)
		})
	}
	require.NoError(t, s.Close(), "Close after failed calls is fine")
}

// closedCalls calls every method of journal.Store (Close aside) with ctx,
// on the records populate wrote for "c".
func closedCalls(ctx context.Context, s journal.Store) []namedCall {
	return []namedCall{
		{"Append", func() error {
			_, err := s.Append(ctx, &messages.AppendRequest{ConversationId: "c", ExpectedLast: 6, Events: userEvs(1, 1)})
			return err
		}},
		{"AppendBatch", func() error {
			res := s.AppendBatch(ctx, []*messages.AppendRequest{{ConversationId: "c", Events: userEvs(1, 1)}, {ConversationId: "d", Events: userEvs(1, 1)}})
			if !errors.Is(res[0].Err, journal.ErrClosed) {
				return res[0].Err
			}
			return res[1].Err
		}},
		{"Events", func() error { _, err := s.Events(ctx, "c", journal.EventQuery{}); return err }},
		{"LastSeq", func() error { _, err := s.LastSeq(ctx, "c"); return err }},
		{"LoadSince", func() error { _, _, err := s.LoadSince(ctx, "c"); return err }},
		{"PutSummary", func() error { return s.PutSummary(ctx, "c", summary(1, 1)) }},
		{"LatestSummary", func() error { _, err := s.LatestSummary(ctx, "c"); return err }},
		{"SummaryBefore", func() error { _, err := s.SummaryBefore(ctx, "c", 5); return err }},
		{"UpsertToolCall", func() error { return s.UpsertToolCall(ctx, humanCall("c", "c/new")) }},
		{"ToolCall", func() error { _, err := s.ToolCall(ctx, "c/tc-1"); return err }},
		{"PendingToolCalls", func() error { _, err := s.PendingToolCalls(ctx, "c"); return err }},
		{"ListPendingToolCalls", func() error { _, _, err := s.ListPendingToolCalls(ctx, "", 0); return err }},
		{"ResolveToolCall", func() error {
			_, err := s.ResolveToolCall(ctx, "c/tc-1", resolved, nil, tm(1))
			return err
		}},
		{"ScheduleDeadline", func() error { return s.ScheduleDeadline(ctx, deadline("c", "c/tc-1", 5)) }},
		{"CancelDeadline", func() error { return s.CancelDeadline(ctx, "c", "c/tc-1") }},
		{"Deadlines", func() error {
			called := false
			err := s.Deadlines(ctx, time.Time{}, func(*messages.Deadline) error { called = true; return nil })
			if called {
				return errors.New("journaltest: Deadlines called fn after Close") // wraps no sentinel
			}
			return err
		}},
		{"PutModelCall", func() error { return s.PutModelCall(ctx, modelCall("c", 9, 9)) }},
		{"ModelCalls", func() error { _, err := s.ModelCalls(ctx, "c"); return err }},
		{"GCModelCalls", func() error { _, err := s.GCModelCalls(ctx, "c", tm(1)); return err }},
		{"Conversation", func() error { _, err := s.Conversation(ctx, "c"); return err }},
		{"PutConversation", func() error { return s.PutConversation(ctx, journal.ConversationUpdate{ID: "c"}) }},
		{"PutFSMState", func() error { return s.PutFSMState(ctx, "c", idleState(1)) }},
		{"ListConversations", func() error { _, _, err := s.ListConversations(ctx, "", 0); return err }},
		{"DeleteConversation", func() error { return s.DeleteConversation(ctx, "c") }},
		{"Metadata", func() error { _, err := s.Metadata(ctx, "c"); return err }},
		{"PutMetadata", func() error { return s.PutMetadata(ctx, "c", map[string]string{"k": "v"}) }},
	}
}

// testCloseOptional: the methods of the optional interfaces every adapter
// of this module implements (forks, the metadata index, the listing of
// ACTIVE conversations, schedules, file checkpoints) fail with ErrClosed
// after Close too, without calling their callbacks or reading their
// readers.
func testCloseOptional(t *testing.T, e env) {
	s := e.open(t).Store
	calls := prepareOptionalCalls(t, s)
	require.NoError(t, s.Close())
	for _, c := range calls(context.Background()) {
		t.Run(c.name, func(t *testing.T) {
			requireSentinel(t, c.do(), journal.ErrClosed)
		})
	}
}

// testCloseBeforeCancelled: a call on a closed store with a ctx that is
// already done fails with ErrClosed, not with ctx's error: a closed store
// is the more lasting condition, and a caller that retries on a context
// error would retry a store that can never answer. Every method, of the
// optional interfaces too.
func testCloseBeforeCancelled(t *testing.T, e env) {
	s := e.open(t).Store
	populate(t, s, "c", e.feat.Audit)
	optional := prepareOptionalCalls(t, s)
	require.NoError(t, s.Close())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, c := range append(closedCalls(ctx, s), optional(ctx)...) {
		t.Run(c.name, func(t *testing.T) {
			err := c.do()
			requireSentinel(t, err, journal.ErrClosed)
			require.NotErrorIs(t, err, context.Canceled, "ErrClosed is reported, not ctx's error")
		})
	}
}

// prepareOptionalCalls writes what the calls of the optional interfaces
// need (a fork source "src", a schedule of it, a stored blob) and returns
// the calls, made with the ctx given.
func prepareOptionalCalls(t *testing.T, s journal.Store) func(ctx context.Context) []namedCall {
	ctx := context.Background()
	req := forkSource(t, s, "src", "dst")
	ss := scheduleStore(t, s)
	require.NoError(t, ss.PutSchedule(ctx, sched("src", "s1", 30)))
	f := files(t, s)
	content := []byte("content")
	putBlob(t, f, content)
	return func(ctx context.Context) []namedCall {
		return []namedCall{
			{"Fork", func() error { return s.Fork(ctx, req) }},
			{"FindConversations", func() error { _, _, err := s.FindConversations(ctx, "name", "x", "", 0); return err }},
			{"ListActiveConversations", func() error { _, _, err := s.ListActiveConversations(ctx, "", 0); return err }},
			{"PutSchedule", func() error { return ss.PutSchedule(ctx, sched("src", "s2", 30)) }},
			{"DeleteSchedule", func() error { return ss.DeleteSchedule(ctx, "src", "s1") }},
			{"ConversationSchedules", func() error { _, err := ss.ConversationSchedules(ctx, "src"); return err }},
			{"ScheduleTimes", func() error {
				called := false
				err := ss.ScheduleTimes(ctx, func(string, string, time.Time) error { called = true; return nil })
				if called {
					return errors.New("journaltest: ScheduleTimes called fn after Close") // wraps no sentinel
				}
				return err
			}},
			{"PutFileBlob", func() error {
				other := []byte("other")
				_, err := f.PutFileBlob(ctx, sumOf(other), int64(len(other)), failReader{})
				return err
			}},
			{"PutFileBlobStored", func() error {
				_, err := f.PutFileBlob(ctx, sumOf(content), int64(len(content)), failReader{})
				return err
			}},
			{"FileBlob", func() error { _, err := f.FileBlob(ctx, sumOf(content)); return err }},
			{"OpenFileBlob", func() error { _, err := f.OpenFileBlob(ctx, sumOf(content)); return err }},
			{"PutFileCheckpoint", func() error { _, err := f.PutFileCheckpoint(ctx, fileCP("src", 1, "a", content)); return err }},
			{"FileCheckpoints", func() error { _, err := f.FileCheckpoints(ctx, "src", 0); return err }},
			{"SweepFileBlobs", func() error { _, err := f.SweepFileBlobs(ctx, tm(1)); return err }},
		}
	}
}

// testCloseInFlight: a blob reader opened before Close fails its reads
// after it with ErrClosed instead of reading a closed store.
func testCloseInFlight(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := context.Background()
	f := files(t, s)
	content := pattern(2*journal.FileChunkBytes+10, 3)
	putBlob(t, f, content)
	rc, err := f.OpenFileBlob(ctx, sumOf(content))
	require.NoError(t, err)
	defer func() { _ = rc.Close() }()
	buf := make([]byte, journal.FileChunkBytes)
	n, err := io.ReadFull(rc, buf)
	require.NoError(t, err)
	require.Equal(t, content[:n], buf[:n])

	require.NoError(t, s.Close())
	_, err = io.ReadAll(rc)
	requireSentinel(t, err, journal.ErrClosed, "reading an open blob after Close")
}
