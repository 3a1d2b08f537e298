package journaltest

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
)

// activeCases check Conversations.ListActiveConversations: the index of
// the conversations whose row is ACTIVE, kept with every status change.
var activeCases = []suiteCase{
	{name: "NewConversationIsActive", run: testActiveNew},
	{name: "StatusChangesMoveIt", run: testActiveStatus},
	{name: "SuspendedOverAnAnswerNotInTheLog", run: testActiveAnswerNotInLog},
	{name: "EndedStaysEnded", run: testActiveEndedStays},
	{name: "EndedFenced", run: testActiveEndedFenced},
	{name: "FailedWriteLeavesIt", run: testActiveFailedWrite},
	{name: "DeleteRemovesIt", run: testActiveDelete},
	{name: "PagesInIDOrder", run: testActivePages},
	{name: "BadCursorOrLimit", run: testActiveBadInput},
	{name: "SurvivesReopen", run: testActiveReopen, durable: true},
}

// activeIDs lists every page of ListActiveConversations with page size
// limit, checking the paging rules on the way.
func activeIDs(t testing.TB, s journal.Store, limit int) []string {
	t.Helper()
	ids, err := listActive(t.Context(), s, limit)
	require.NoError(t, err)
	return ids
}

// listActive reads every page of ListActiveConversations and checks that
// the pages keep the contract: ascending ids, each once, full pages but the
// last, a cursor that is the last id of its page.
func listActive(ctx context.Context, s journal.Store, limit int) ([]string, error) {
	var out []string
	cursor := ""
	for pages := 0; ; pages++ {
		ids, next, err := s.ListActiveConversations(ctx, cursor, limit)
		if err != nil {
			return nil, fmt.Errorf("read ListActiveConversations(%q, %d): %w", cursor, limit, err)
		}
		size := limit
		if size == 0 {
			size = 100
		}
		switch {
		case len(ids) > size:
			return nil, fmt.Errorf("ListActiveConversations(%q, %d) returned %d ids", cursor, limit, len(ids))
		case cursor != "" && len(ids) == 0 && pages > 0:
			return nil, fmt.Errorf("ListActiveConversations(%q, %d): an empty page after a cursor (the cursor must be \"\" when no page follows)", cursor, limit)
		case next != "" && len(ids) != size:
			return nil, fmt.Errorf("ListActiveConversations(%q, %d): a short page of %d ids with a next cursor", cursor, limit, len(ids))
		case next != "" && next != journal.ActiveCursor(ids[len(ids)-1]):
			return nil, fmt.Errorf("ListActiveConversations(%q, %d): cursor %q is not the last id of the page %q", cursor, limit, next, ids[len(ids)-1])
		}
		for _, id := range ids {
			if len(out) > 0 && id <= out[len(out)-1] || cursor != "" && id <= cursor {
				return nil, fmt.Errorf("ListActiveConversations(%q, %d): id %q out of order after %q", cursor, limit, id, cursor)
			}
			out = append(out, id)
		}
		if next == "" {
			return out, nil
		}
		cursor = next
	}
}

func setStatus(t testing.TB, s journal.Store, conv string, st messages.ConversationStatus) {
	t.Helper()
	appendOK(t, s, &messages.AppendRequest{ConversationId: conv, ExpectedLast: lastSeq(t, s, conv), Status: st})
}

// testActiveNew: a conversation's row is created ACTIVE (by an append or
// a PutConversation that names no status), so it enters the index; a row
// created with another status does not.
func testActiveNew(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	assert.Empty(t, activeIDs(t, s, 0), "an empty store has no active conversation")
	appendEvents(t, s, "appended", userEvs(1, 1)...)
	require.NoError(t, s.PutConversation(ctx, journal.ConversationUpdate{ID: "put", Settings: map[string]string{"k": "v"}}))
	require.NoError(t, s.PutFSMState(ctx, "fsm", idleState(0)))
	require.NoError(t, s.PutConversation(ctx, journal.ConversationUpdate{ID: "born-idle", Status: statusIdle}))
	appendOK(t, s, &messages.AppendRequest{ConversationId: "born-suspended", Events: userEvs(1, 1), Status: statusSuspended})
	require.NoError(t, s.PutMetadata(ctx, "metadata-only", map[string]string{"k": "v"}))
	schedule(t, s, deadline("rowless", "rowless/tc", 7))
	assert.Equal(t, []string{"appended", "fsm", "put"}, activeIDs(t, s, 0),
		"new rows are ACTIVE unless the write says otherwise; records that create no row are not listed")
	assert.Equal(t, []string{"appended", "fsm", "put"}, activeIDs(t, s, math.MaxInt), "a limit of math.MaxInt lists every one")
}

// recordAnswer is the write of a conversation's actor that records the
// answer to call, with the rest still pending: it states SUSPENDED.
func recordAnswer(conv string, last uint64, call string, rest ...string) *messages.AppendRequest {
	return &messages.AppendRequest{
		ConversationId: conv, ExpectedLast: last,
		Events:      []*messages.Event{resolutionEv(10, call, resolved), toolResultEv(10, call, `"yes"`)},
		Resolutions: []*messages.ToolResolution{{ToolCallId: call, Status: resolved, Result: contentOutcome(`"yes"`), At: ts(10), By: bob}},
		FsmState:    awaiting(last+2, rest...),
		Status:      statusSuspended,
	}
}

// answerlessActive is an unfenced append of nothing but status ACTIVE:
// the status an expiry or an answer states, without their resolution.
func answerlessActive(conv string) *messages.AppendRequest {
	return &messages.AppendRequest{ConversationId: conv, Unfenced: true, Status: statusActive}
}

// answerUnfenced is what an answer given outside the conversation's actor
// writes: the call resolved, the row ACTIVE.
func answerUnfenced(conv, call string) *messages.AppendRequest {
	return &messages.AppendRequest{ConversationId: conv, Unfenced: true, Status: statusActive,
		Resolutions: []*messages.ToolResolution{{ToolCallId: call, Status: resolved, Result: contentOutcome(`"yes"`), At: ts(9), By: bob}}}
}

// testActiveAnswerNotInLog: an append stating SUSPENDED while a call its
// fsm_state names pending is terminal (answered, the answer not yet in the
// log) writes ACTIVE, and the conversation stays listed, whether the
// answer was committed before it or earlier in its batch; with every call
// it names pending still pending, it writes SUSPENDED.
func testActiveAnswerNotInLog(t *testing.T, e env) {
	s := e.open(t).Store
	for _, conv := range []string{"apart", "batched", "pending"} {
		appendEvents(t, s, conv, userEvs(1, 1)...)
	}
	lastApart := suspend(t, s, "apart", "a-1", "a-2")
	lastBatched := suspend(t, s, "batched", "b-1", "b-2")
	lastPending := suspend(t, s, "pending", "p-1", "p-2")
	for _, conv := range []string{"apart", "batched", "pending"} {
		setStatus(t, s, conv, statusSuspended)
	}
	require.Empty(t, activeIDs(t, s, 0))

	appendOK(t, s, answerUnfenced("apart", "a-2"))
	appendOK(t, s, recordAnswer("apart", lastApart, "a-1", "a-2"))
	res := s.AppendBatch(t.Context(), []*messages.AppendRequest{answerUnfenced("batched", "b-2"), recordAnswer("batched", lastBatched, "b-1", "b-2")})
	for i, r := range res {
		require.NoError(t, r.Err, "request %d of the batch", i)
	}
	appendOK(t, s, recordAnswer("pending", lastPending, "p-1", "p-2"))

	for conv, want := range map[string]messages.ConversationStatus{"apart": statusActive, "batched": statusActive, "pending": statusSuspended} {
		row := conversation(t, s, conv)
		assert.Equal(t, want, row.GetStatus(), "%s: the status written", conv)
		requireProto(t, awaiting(lastSeq(t, s, conv), conv[:1]+"-2"), row.GetFsmState(), "%s: the fsm_state is the request's", conv)
	}
	assert.Equal(t, []string{"apart", "batched"}, activeIDs(t, s, 0), "the conversations owing an answer's recording are listed")
}

// testActiveStatus: every status other than ACTIVE takes a conversation out
// of the index, and ACTIVE puts it back, whichever write changes it;
// writes that leave the status alone leave the index alone.
func testActiveStatus(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	appendEvents(t, s, "c", userEvs(1, 1)...)
	appendEvents(t, s, "other", userEvs(1, 1)...)
	for _, st := range []messages.ConversationStatus{statusSuspended, statusIdle, statusEnded} {
		setStatus(t, s, "c", st)
		assert.Equal(t, []string{"other"}, activeIDs(t, s, 0), "an append setting %v takes it out", st)
		if st == statusEnded {
			// A fenced append to an ENDED row must state ENDED
			// (testActiveEndedFenced).
			appendOK(t, s, &messages.AppendRequest{ConversationId: "c", ExpectedLast: lastSeq(t, s, "c"), Events: userEvs(2, 1), Status: statusEnded})
		} else {
			appendEvents(t, s, "c", userEvs(2, 1)...)
		}
		assert.Equal(t, []string{"other"}, activeIDs(t, s, 0), "an append that names no status leaves it out (%v)", st)
		require.NoError(t, s.PutFSMState(ctx, "c", idleState(lastSeq(t, s, "c"))))
		assert.Equal(t, []string{"other"}, activeIDs(t, s, 0), "PutFSMState leaves it out (%v)", st)
		if st == statusEnded {
			// End is for good (testActiveEndedStays); only PutConversation
			// sets another status.
			appendOK(t, s, answerlessActive("c"))
			assert.Equal(t, []string{"other"}, activeIDs(t, s, 0), "an append setting ACTIVE leaves an ENDED row out")
			require.NoError(t, s.PutConversation(ctx, journal.ConversationUpdate{ID: "c", Status: statusActive}))
		} else {
			setStatus(t, s, "c", statusActive)
		}
		assert.Equal(t, []string{"c", "other"}, activeIDs(t, s, 0), "an append setting ACTIVE puts it back (from %v)", st)

		require.NoError(t, s.PutConversation(ctx, journal.ConversationUpdate{ID: "c", Status: st}))
		assert.Equal(t, []string{"other"}, activeIDs(t, s, 0), "PutConversation setting %v takes it out", st)
		require.NoError(t, s.PutConversation(ctx, journal.ConversationUpdate{ID: "c", Settings: map[string]string{"k": st.String()}}))
		assert.Equal(t, []string{"other"}, activeIDs(t, s, 0), "PutConversation of settings only leaves it out (%v)", st)
		require.NoError(t, s.PutConversation(ctx, journal.ConversationUpdate{ID: "c", Status: statusActive}))
		assert.Equal(t, []string{"c", "other"}, activeIDs(t, s, 0), "PutConversation setting ACTIVE puts it back (from %v)", st)
	}
	// Twice the same status, and a change and its reverse in one batch.
	setStatus(t, s, "c", statusActive)
	appendEvents(t, s, "c", userEvs(3, 1)...)
	assert.Equal(t, []string{"c", "other"}, activeIDs(t, s, 0))
	last := lastSeq(t, s, "c")
	for _, res := range s.AppendBatch(ctx, []*messages.AppendRequest{
		{ConversationId: "c", ExpectedLast: last, Status: statusIdle},
		{ConversationId: "other", ExpectedLast: lastSeq(t, s, "other"), Status: statusSuspended},
		{ConversationId: "c", ExpectedLast: last, Status: statusActive},
		{ConversationId: "new", Events: userEvs(1, 1), Status: statusIdle},
		{ConversationId: "new2", Events: userEvs(1, 1)},
	}) {
		require.NoError(t, res.Err)
	}
	assert.Equal(t, []string{"c", "new2"}, activeIDs(t, s, 0), "a batch leaves each conversation as its last request says")
	for _, id := range []string{"c", "other", "new", "new2"} {
		row := conversation(t, s, id)
		assert.Equal(t, row.GetStatus() == statusActive, slices.Contains(activeIDs(t, s, 0), id), "index and row of %q agree", id)
	}
}

// testActiveEndedStays: an append to a conversation whose row is ENDED
// never changes its status, whatever it states: an unfenced one (an
// expiry's or an answer's ACTIVE) is written but for its status, alone or
// after the End in one batch, and a fenced one is refused
// (testActiveEndedFenced). PutConversation is the one write that sets
// another status.
func testActiveEndedStays(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	appendEvents(t, s, "c", userEvs(1, 1)...)
	appendEvents(t, s, "other", userEvs(1, 1)...)
	suspend(t, s, "c", "c-1", "c-2", "c-3")
	suspend(t, s, "other", "o-1")
	setStatus(t, s, "c", statusEnded)
	require.Equal(t, []string{"other"}, activeIDs(t, s, 0))

	// An expiry (unfenced, ACTIVE, due): the call expires, the row stays
	// ENDED.
	appendOK(t, s, &messages.AppendRequest{ConversationId: "c", Unfenced: true, Status: statusActive, DueBy: ts(100),
		Resolutions: []*messages.ToolResolution{{ToolCallId: "c-1", Status: expired, At: ts(100)}}})
	assert.Equal(t, expired, toolCall(t, s, "c-1").GetStatus(), "the expiry is recorded")
	assert.Equal(t, statusEnded, conversation(t, s, "c").GetStatus(), "an expiry's ACTIVE leaves it ENDED")

	// An answer given outside the actor.
	appendOK(t, s, answerUnfenced("c", "c-2"))
	assert.Equal(t, resolved, toolCall(t, s, "c-2").GetStatus(), "the answer is recorded")
	assert.Equal(t, statusEnded, conversation(t, s, "c").GetStatus(), "an answer's ACTIVE leaves it ENDED")

	// An End then an answer's ACTIVE in one batch.
	lastOther := lastSeq(t, s, "other")
	for i, res := range s.AppendBatch(ctx, []*messages.AppendRequest{
		{ConversationId: "other", ExpectedLast: lastOther, Status: statusEnded},
		answerUnfenced("other", "o-1"),
		answerlessActive("c"),
	}) {
		require.NoError(t, res.Err, "request %d of the batch", i)
	}
	assert.Equal(t, statusEnded, conversation(t, s, "other").GetStatus(), "an ACTIVE after the End in its batch leaves it ENDED")
	assert.Equal(t, resolved, toolCall(t, s, "o-1").GetStatus(), "the batch's answer is recorded")
	assert.Equal(t, statusEnded, conversation(t, s, "c").GetStatus())
	assert.Empty(t, activeIDs(t, s, 0), "no ENDED conversation is listed")

	require.NoError(t, s.PutConversation(ctx, journal.ConversationUpdate{ID: "c", Status: statusIdle}))
	assert.Equal(t, statusIdle, conversation(t, s, "c").GetStatus(), "PutConversation sets another status")
}

// testActiveEndedFenced: End writes no event, so a fenced append decided
// on a read of the log before the End passes the fence; to a conversation
// whose row is ENDED it is refused with ErrEnded, nothing of it written
// (events, rows, resolutions, fsm_state, settings, deadlines, status),
// whatever it carries and whatever status other than ENDED it states,
// alone or after the End in one batch (the batch's other requests go
// through). One that states ENDED (lazarus import's) is written.
func testActiveEndedFenced(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	appendEvents(t, s, "c", userEvs(1, 1)...)
	suspend(t, s, "c", "c-1", "c-2")
	appendOK(t, s, answerUnfenced("c", "c-2"))
	last := lastSeq(t, s, "c")
	setStatus(t, s, "c", statusEnded)
	require.Equal(t, last, lastSeq(t, s, "c"), "an End moves no seq")
	calls := []string{"c-1", "c-2", "c/new"}
	before := snapshotOf(t, s, []string{"c"}, calls)

	answer := recordAnswer("c", last, "c-1", "c/new")
	answer.Settings = map[string]string{"k": "v"}
	answer.ToolCalls = []*messages.ToolCallRecord{humanCall("c", "c/new")}
	answer.Schedule = []*messages.Deadline{deadline("c", "c/new", 50)}
	for _, tc := range []struct {
		name string
		req  *messages.AppendRequest
	}{
		{"Send", &messages.AppendRequest{ConversationId: "c", ExpectedLast: last, Events: userEvs(9, 1)}},
		{"AnswerStatingSuspended", answer},
		{"StatingActive", &messages.AppendRequest{ConversationId: "c", ExpectedLast: last, Events: userEvs(9, 1), Status: statusActive}},
		{"Settings", &messages.AppendRequest{ConversationId: "c", ExpectedLast: last, Settings: map[string]string{"k": "v"}}},
		{"FSMState", &messages.AppendRequest{ConversationId: "c", ExpectedLast: last, FsmState: idleState(last)}},
		{"StatusIdle", &messages.AppendRequest{ConversationId: "c", ExpectedLast: last, Status: statusIdle}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := s.Append(ctx, proto.Clone(tc.req).(*messages.AppendRequest))
			requireSentinel(t, err, journal.ErrEnded)
			requireSentinel(t, res.Err, journal.ErrEnded)
			requireSameSnapshot(t, before, snapshotOf(t, s, []string{"c"}, calls), "nothing of a fenced append to an ENDED row is written")
		})
	}

	// After the End in one batch: refused alone.
	appendEvents(t, s, "other", userEvs(1, 1)...)
	lastOther := lastSeq(t, s, "other")
	res := s.AppendBatch(ctx, []*messages.AppendRequest{
		{ConversationId: "other", ExpectedLast: lastOther, Status: statusEnded},
		{ConversationId: "other", ExpectedLast: lastOther, Events: userEvs(5, 1)},
		{ConversationId: "c", ExpectedLast: last, Events: userEvs(5, 1)},
		{ConversationId: "b", Events: userEvs(1, 1)},
	})
	require.NoError(t, res[0].Err)
	requireSentinel(t, res[1].Err, journal.ErrEnded)
	requireSentinel(t, res[2].Err, journal.ErrEnded)
	require.NoError(t, res[3].Err)
	assert.Equal(t, statusEnded, conversation(t, s, "other").GetStatus())
	assert.Equal(t, lastOther, lastSeq(t, s, "other"), "the refused request after the End in its batch wrote nothing")
	assert.Equal(t, uint64(1), lastSeq(t, s, "b"), "the batch's other requests go through")
	requireSameSnapshot(t, before, snapshotOf(t, s, []string{"c"}, calls))

	// The fence still comes first.
	_, err := s.Append(ctx, &messages.AppendRequest{ConversationId: "c", ExpectedLast: last + 1, Events: userEvs(9, 1)})
	requireSentinel(t, err, journal.ErrConflict)

	// Stating ENDED, as lazarus import does: written, still ENDED.
	res0 := appendOK(t, s, &messages.AppendRequest{ConversationId: "c", ExpectedLast: last, Events: userEvs(9, 1),
		Settings: map[string]string{"k": "v"}, Status: statusEnded})
	assert.Equal(t, last+1, res0.LastSeq)
	row := conversation(t, s, "c")
	assert.Equal(t, statusEnded, row.GetStatus())
	assert.Equal(t, map[string]string{"k": "v"}, row.GetSettings())
}

// testActiveFailedWrite: a request that fails changes neither the row's
// status nor the index, and does not keep the other requests of its batch
// from changing theirs.
func testActiveFailedWrite(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	appendEvents(t, s, "a", userEvs(1, 1)...)
	appendEvents(t, s, "b", userEvs(1, 1)...)
	setStatus(t, s, "b", statusIdle)
	res := s.AppendBatch(ctx, []*messages.AppendRequest{
		{ConversationId: "a", ExpectedLast: 7, Status: statusIdle},    // fence fails
		{ConversationId: "b", ExpectedLast: 5, Status: statusActive},  // fence fails
		{ConversationId: "c", ExpectedLast: 3, Events: userEvs(1, 1)}, // fence fails: no row is created
		{ConversationId: "d", ExpectedLast: 0, Events: userEvs(1, 1)}, // succeeds
		{ConversationId: "", ExpectedLast: 0, Status: statusActive},   // invalid
		{ConversationId: "a", ExpectedLast: 1, Resolutions: []*messages.ToolResolution{{ToolCallId: "nope", Status: resolved, At: ts(1)}}, Status: statusIdle}, // stale
	})
	requireSentinel(t, res[0].Err, journal.ErrConflict)
	requireSentinel(t, res[1].Err, journal.ErrConflict)
	requireSentinel(t, res[2].Err, journal.ErrConflict)
	require.NoError(t, res[3].Err)
	requireSentinel(t, res[4].Err, journal.ErrInvalid)
	requireSentinel(t, res[5].Err, journal.ErrStale)
	assert.Equal(t, []string{"a", "d"}, activeIDs(t, s, 0))
	assert.Equal(t, statusActive, conversation(t, s, "a").GetStatus())
	assert.Equal(t, statusIdle, conversation(t, s, "b").GetStatus())
	err := s.PutConversation(ctx, journal.ConversationUpdate{ID: "a", Status: statusIdle, Settings: map[string]string{"bad\xff": "v"}})
	requireSentinel(t, err, journal.ErrInvalid)
	assert.Equal(t, []string{"a", "d"}, activeIDs(t, s, 0), "a rejected PutConversation changes nothing")
}

// testActiveDelete: deleting a conversation takes it out of the index,
// whatever its status, and later writes to its id (ErrDeleted) do not put
// it back.
func testActiveDelete(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	for _, id := range []string{"a", "a/b", "ab", "b"} {
		appendEvents(t, s, id, userEvs(1, 1)...)
	}
	setStatus(t, s, "b", statusIdle)
	require.NoError(t, s.DeleteConversation(ctx, "a"))
	require.NoError(t, s.DeleteConversation(ctx, "b"))
	assert.Equal(t, []string{"a/b", "ab"}, activeIDs(t, s, 0))
	_, err := s.Append(ctx, &messages.AppendRequest{ConversationId: "a", Events: userEvs(2, 1), Status: statusActive})
	requireSentinel(t, err, journal.ErrDeleted)
	requireSentinel(t, s.PutConversation(ctx, journal.ConversationUpdate{ID: "b", Status: statusActive}), journal.ErrDeleted)
	assert.Equal(t, []string{"a/b", "ab"}, activeIDs(t, s, 0), "a deleted id never comes back")
}

// testActivePages: paging returns every active id once, in bytewise order,
// whatever the page size; a cursor need not be a listed id.
func testActivePages(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	ids := slices.Clone(trickyIDs)
	for i := range 240 {
		ids = append(ids, fmt.Sprint("c", i))
	}
	ids = append(ids, "é", "zz", "\u4e16", strings.Repeat("x", journal.MaxIDBytes))
	var want []string
	for i, id := range ids {
		appendEvents(t, s, id, userEvs(1, 1)...)
		if i%3 == 1 {
			setStatus(t, s, id, statusIdle)
			continue
		}
		want = append(want, id)
	}
	slices.Sort(want)
	require.Greater(t, len(want), 100)
	for _, limit := range []int{1, 7, 100, len(want) - 1, len(want), 1000, 0} {
		assert.Equal(t, want, activeIDs(t, s, limit), "limit %d: every active id once, in id order", limit)
	}
	page, next, err := s.ListActiveConversations(ctx, "", 0)
	require.NoError(t, err)
	assert.Equal(t, want[:100], page, "limit 0 means 100")
	assert.Equal(t, journal.ActiveCursor(want[99]), next)
	page, _, err = s.ListActiveConversations(ctx, "c1x", 3)
	require.NoError(t, err)
	assert.Equal(t, []string{"c2", "c20", "c200"}, page, "a cursor need not be an existing id")
	page, _, err = s.ListActiveConversations(ctx, journal.ActiveCursor("a\x00"), 2)
	require.NoError(t, err)
	assert.Equal(t, []string{"a\x00\x00", "a\x00b"}, page, "ids that extend the cursor's come after it")
	page, next, err = s.ListActiveConversations(ctx, want[len(want)-1], 10)
	require.NoError(t, err)
	assert.Empty(t, page)
	assert.Empty(t, next)
}

// testActiveBadInput: a cursor that is not an ActiveCursor, or a negative
// limit, is ErrInvalid.
func testActiveBadInput(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	appendEvents(t, s, "a", userEvs(1, 1)...)
	for _, c := range []struct {
		cursor string
		limit  int
	}{
		{"", -1},
		{"a", -5},
		{"bad\xff", 10},
		{strings.Repeat("x", journal.MaxIDBytes+1), 10},
	} {
		ids, next, err := s.ListActiveConversations(ctx, c.cursor, c.limit)
		requireSentinel(t, err, journal.ErrInvalid, "cursor %q, limit %d", c.cursor, c.limit)
		assert.Empty(t, ids)
		assert.Empty(t, next)
	}
}

// testActiveReopen: the index is durable with the rows: a reopen and a
// crash keep it, and it goes on following the rows afterwards.
func testActiveReopen(t *testing.T, e env) {
	h := e.open(t)
	s := h.Store
	for _, id := range []string{"a", "b", "c", "d"} {
		appendEvents(t, s, id, userEvs(1, 1)...)
	}
	setStatus(t, s, "b", statusSuspended)
	setStatus(t, s, "d", statusIdle)
	require.NoError(t, s.DeleteConversation(t.Context(), "c"))
	s = h.Reopen(t)
	assert.Equal(t, []string{"a"}, activeIDs(t, s, 0), "after Reopen")
	setStatus(t, s, "a", statusIdle)
	setStatus(t, s, "b", statusActive)
	s = h.Crash(t, newRand(seed(t)))
	assert.Equal(t, []string{"b"}, activeIDs(t, s, 0), "after a crash with no call in flight")
	setStatus(t, s, "d", statusActive)
	assert.Equal(t, []string{"b", "d"}, activeIDs(t, s, 0))
}
