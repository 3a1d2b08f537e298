package journaltest

import (
	"context"
	"fmt"
	"maps"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// forkCases check Forks.Fork: a new conversation from a copy, in one write.
var forkCases = []suiteCase{
	{name: "AfterSummary", run: testForkAfterSummary},
	{name: "WithoutSummary", run: testForkWithoutSummary},
	{name: "Ended", run: testForkEnded},
	{name: "ExistingOrDeletedTarget", run: testForkExisting},
	{name: "OntoMetadataOnly", run: testForkOntoMetadataOnly},
	{name: "MergedMetadataBounded", run: testForkMergedMetadataBounded},
	{name: "OntoRowlessRecords", run: testForkOntoRowlessRecords},
	{name: "EventAtTheLimit", run: testForkEventAtTheLimit},
	{name: "PastTheAppendLimits", run: testForkPastTheAppendLimits},
	{name: "OverMaxForkBytesWritesNothing", run: testForkOverMaxForkBytes},
	{name: "BadRequestWritesNothing", run: testForkBadInput},
	{name: "MalformedCallEventsRefused", run: testForkMalformedCallEvents},
	{name: "DeleteEitherLeavesTheOther", run: testForkDeleteEither},
	{name: "SurvivesReopen", run: testForkReopen, durable: true},
	{name: "SurvivesCrash", run: testForkCrash, durable: true},
}

// findCases check MetadataIndex.FindConversations.
var findCases = []suiteCase{
	{name: "FollowsMetadata", run: testFindFollowsMetadata},
	{name: "PagesInIDOrder", run: testFindPages},
	{name: "LongValue", run: testFindLongValue},
	{name: "BadInput", run: testFindBadInput},
	{name: "MetadataTotalBounded", run: testMetadataTotalBounded},
	{name: "SurvivesReopen", run: testFindReopen, durable: true},
}

// forkSource writes a source of 10 user messages with a summary of 1..6,
// and returns the fork request copying it: the summary and events 7..10.
func forkSource(t testing.TB, s journal.Store, src, dst string) *messages.ForkRequest {
	t.Helper()
	ctx := context.Background()
	appendEvents(t, s, src, userEvs(1, 10)...)
	sum := &messages.Summary{FromSeq: 1, ToSeq: 6, Content: "the first six", Version: "test"}
	require.NoError(t, s.PutSummary(ctx, src, sum))
	evs, err := s.Events(ctx, src, journal.EventQuery{After: 6})
	require.NoError(t, err)
	return &messages.ForkRequest{
		ConversationId: dst,
		Summary:        sum,
		Events:         evs,
		Status:         statusIdle,
		Settings:       map[string]string{"model": "m1"},
		Metadata:       map[string]string{"name": "copy"},
		Origin:         &messages.ForkOrigin{ConversationId: src, Seq: 10},
	}
}

// requireFork checks that dst holds what req copied.
func requireFork(t testing.TB, s journal.Store, req *messages.ForkRequest) {
	t.Helper()
	ctx := context.Background()
	dst := req.GetConversationId()
	requireProtos(t, req.GetEvents(), allEvents(t, s, dst), "the fork's log is the copied events")
	last := req.GetEvents()[len(req.GetEvents())-1].GetSeq()
	assert.Equal(t, last, lastSeq(t, s, dst))
	sum, evs, err := s.LoadSince(ctx, dst)
	require.NoError(t, err)
	if req.GetSummary() != nil {
		requireProto(t, req.GetSummary(), sum, "the revival read starts from the copied summary")
	} else {
		assert.Nil(t, sum)
	}
	requireProtos(t, req.GetEvents(), evs)
	row, err := s.Conversation(ctx, dst)
	require.NoError(t, err)
	assert.Equal(t, req.GetStatus(), row.GetStatus())
	assert.True(t, maps.Equal(req.GetSettings(), row.GetSettings()), "settings %v, want %v", row.GetSettings(), req.GetSettings())
	requireProto(t, req.GetOrigin(), row.GetForkedFrom())
	md, err := s.Metadata(ctx, dst)
	require.NoError(t, err)
	assert.True(t, maps.Equal(req.GetMetadata(), md), "metadata %v, want %v", md, req.GetMetadata())
}

func testForkAfterSummary(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := context.Background()
	req := forkSource(t, s, "src", "dst")
	req.Status = statusActive
	require.NoError(t, s.Fork(ctx, req))
	requireFork(t, s, req)
	// Events before the copied part are not there; a page below it is empty.
	page, err := s.Events(ctx, "dst", journal.EventQuery{Before: 7})
	require.NoError(t, err)
	assert.Empty(t, page)
	page, err = s.Events(ctx, "dst", journal.EventQuery{After: 2, Limit: 2})
	require.NoError(t, err)
	assert.Equal(t, []uint64{9, 10}, seqs(page))
	assert.Contains(t, activeIDs(t, s, 0), "dst", "an ACTIVE fork is in the active index")
	// The fork's log goes on from the last copied seq.
	res := appendEvents(t, s, "dst", userEv(20, "more"))
	assert.Equal(t, uint64(11), res.FirstSeq)
	later := &messages.Summary{FromSeq: 1, ToSeq: 11, Content: "all", Version: "test"}
	require.NoError(t, s.PutSummary(ctx, "dst", later))
	before, err := s.SummaryBefore(ctx, "dst", 11)
	require.NoError(t, err)
	requireProto(t, req.GetSummary(), before)
	// The source is unchanged.
	assert.Equal(t, seqRange(1, 10), seqs(allEvents(t, s, "src")))
}

func testForkWithoutSummary(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := context.Background()
	appendEvents(t, s, "src", userEvs(1, 3)...)
	req := &messages.ForkRequest{ConversationId: "dst", Events: allEvents(t, s, "src"), Status: statusIdle}
	require.NoError(t, s.Fork(ctx, req))
	requireFork(t, s, req)
	assert.NotContains(t, activeIDs(t, s, 0), "dst", "an IDLE fork is not in the active index")
}

// testForkEnded: a fork may be written ENDED (lazarus import writes one so,
// with every copied event, then appends the fork's own log, each append
// stating ENDED as a fenced append to an ENDED row must, and gives it its
// status last, with PutConversation: an append keeps it ENDED).
func testForkEnded(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := context.Background()
	req := forkSource(t, s, "src", "dst")
	req.Status = statusEnded
	req.Events = req.Events[:1]
	require.NoError(t, s.Fork(ctx, req))
	requireFork(t, s, req)
	assert.NotContains(t, activeIDs(t, s, 0), "dst", "an ENDED fork is not in the active index")
	src := allEvents(t, s, "src")
	_, err := s.Append(ctx, &messages.AppendRequest{ConversationId: "dst", ExpectedLast: 7, Events: src[7:]})
	requireSentinel(t, err, journal.ErrEnded, "a fenced append to an ENDED row must state ENDED")
	res, err := s.Append(ctx, &messages.AppendRequest{ConversationId: "dst", ExpectedLast: 7, Events: src[7:], Status: statusEnded})
	require.NoError(t, err)
	assert.Equal(t, uint64(8), res.FirstSeq)
	_, err = s.Append(ctx, &messages.AppendRequest{ConversationId: "dst", ExpectedLast: 10, Status: statusEnded, FsmState: idleState(10)})
	require.NoError(t, err)
	row, err := s.Conversation(ctx, "dst")
	require.NoError(t, err)
	assert.Equal(t, statusEnded, row.GetStatus(), "an append keeps it ENDED")
	requireProto(t, idleState(10), row.GetFsmState(), "the append's fsm_state is written")
	require.NoError(t, s.PutConversation(ctx, journal.ConversationUpdate{ID: "dst", Status: statusIdle}))
	row, err = s.Conversation(ctx, "dst")
	require.NoError(t, err)
	assert.Equal(t, statusIdle, row.GetStatus())
	requireProto(t, req.GetOrigin(), row.GetForkedFrom(), "the origin stays")
	assert.Equal(t, seqRange(7, 10), seqs(allEvents(t, s, "dst")))
}

func testForkExisting(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := context.Background()
	req := forkSource(t, s, "src", "dst")
	appendEvents(t, s, "dst", userEv(1, "mine"))
	err := s.Fork(ctx, req)
	requireSentinel(t, err, journal.ErrExists)
	assert.Equal(t, []uint64{1}, seqs(allEvents(t, s, "dst")), "nothing of the fork was written")
	req.ConversationId = "src"
	requireSentinel(t, s.Fork(ctx, req), journal.ErrExists)
	// A row without events exists too.
	require.NoError(t, s.PutConversation(ctx, journal.ConversationUpdate{ID: "row-only"}))
	req.ConversationId = "row-only"
	requireSentinel(t, s.Fork(ctx, req), journal.ErrExists, "a row without events")
	assert.Empty(t, allEvents(t, s, "row-only"), "nothing of the fork was written")
	require.NoError(t, s.DeleteConversation(ctx, "dst"))
	req.ConversationId = "dst"
	requireSentinel(t, s.Fork(ctx, req), journal.ErrDeleted)
	// A request ValidateFork refuses is ErrInvalid first, deleted id or not.
	bad := cloneFork(req)
	bad.Status = statusSuspended
	requireSentinel(t, s.Fork(ctx, bad), journal.ErrInvalid, "an invalid fork onto a deleted id")
	ids, _, err := s.FindConversations(ctx, "name", "copy", "", 0)
	require.NoError(t, err)
	assert.Empty(t, ids, "a refused fork indexes nothing")
}

// testForkOntoMetadataOnly: an id with metadata but no row and no events
// does not exist for a fork: the fork creates it, and merges its metadata
// into the metadata the id had, indexed as by PutMetadata.
func testForkOntoMetadataOnly(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := context.Background()
	req := forkSource(t, s, "src", "dst")
	require.NoError(t, s.PutMetadata(ctx, "dst", map[string]string{"owner": "ann", "name": "before"}))
	require.NoError(t, s.Fork(ctx, req))
	merged := cloneFork(req)
	merged.Metadata = map[string]string{"owner": "ann", "name": "copy"} // the fork's value wins
	requireFork(t, s, merged)
	assert.Equal(t, []string{"dst"}, findAll(t, s, "owner", "ann", 0))
	assert.Equal(t, []string{"dst"}, findAll(t, s, "name", "copy", 0))
	assert.Empty(t, findAll(t, s, "name", "before", 0), "the replaced value is no longer indexed")
}

// testForkMergedMetadataBounded: a fork onto an id that has metadata and
// no row merges its metadata as PutMetadata does, bounded the same way: a
// merge that leaves more than journal.MaxRecordBytes of keys and values is
// ErrInvalid and writes nothing; replacing a key counts its new value
// only, and removing one (an empty value) frees room.
func testForkMergedMetadataBounded(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := context.Background()
	req := forkSource(t, s, "src", "dst")
	third := strings.Repeat("v", journal.MaxRecordBytes/3)
	require.NoError(t, s.PutMetadata(ctx, "dst", map[string]string{"k1": third, "k2": third}))
	over := cloneFork(req)
	over.Metadata = map[string]string{"k3": third, "small": "s"}
	requireSentinel(t, s.Fork(ctx, over), journal.ErrInvalid, "the merged metadata is over the limit")
	_, err := s.Conversation(ctx, "dst")
	requireSentinel(t, err, journal.ErrNotFound, "no row is written")
	assert.Empty(t, allEvents(t, s, "dst"), "no event is written")
	assert.Zero(t, lastSeq(t, s, "dst"))
	md, err := s.Metadata(ctx, "dst")
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"k1": third, "k2": third}, md, "nothing of the refused merge is written")
	assert.Empty(t, findAll(t, s, "small", "s", 0), "nor indexed")

	fits := cloneFork(req)
	fits.Metadata = map[string]string{"k1": "", "k2": third + "w", "k3": third}
	require.NoError(t, s.Fork(ctx, fits))
	merged := cloneFork(req)
	merged.Metadata = map[string]string{"k2": third + "w", "k3": third}
	requireFork(t, s, merged)
	assert.Empty(t, findAll(t, s, "k1", third, 0), "the removed key is no longer indexed")
}

// testForkOntoRowlessRecords: only a row or events make an id exist for
// a fork (ErrExists); an id holding a deadline, a tool call row or an
// audit row and no row is forked onto like a new one.
func testForkOntoRowlessRecords(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	writes := map[string]func(id string){
		"deadline":  func(id string) { schedule(t, s, deadline(id, id+"/tc", 7)) },
		"tool call": func(id string) { upsert(t, s, humanCall(id, id+"/tc")) },
		"audit":     func(id string) { require.NoError(t, s.PutModelCall(ctx, modelCall(id, 1, 1))) },
	}
	for name, write := range writes {
		t.Run(name, func(t *testing.T) {
			dst := "dst-" + strings.ReplaceAll(name, " ", "-")
			req := forkSource(t, s, "src-"+dst, dst)
			write(dst)
			require.NoError(t, s.Fork(ctx, req), "an id with a %s and no row", name)
			requireFork(t, s, req)
		})
	}
}

// eventOfSize returns a user event whose encoding, Seq unset, is n bytes.
func eventOfSize(n int) *messages.Event {
	pad := n - proto.Size(userEv(1, ""))
	for {
		ev := userEv(1, strings.Repeat("x", pad))
		d := n - proto.Size(ev)
		if d == 0 {
			return ev
		}
		pad += d
	}
}

// testForkEventAtTheLimit: an event Append took at journal.MaxEventBytes
// (its seq, which the store sets, not counting against the limit) can be
// copied: a Fork measures its events as an Append does, without their
// seqs. One byte more is ErrInvalid in both.
func testForkEventAtTheLimit(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := context.Background()
	appendEvents(t, s, "src", eventOfSize(journal.MaxEventBytes), userEv(2, "small"))
	evs := allEvents(t, s, "src")
	req := &messages.ForkRequest{ConversationId: "dst", Events: evs, Status: statusIdle}
	require.NoError(t, s.Fork(ctx, req), "the log's events, as read")
	requireFork(t, s, req)

	over := eventOfSize(journal.MaxEventBytes + 1)
	_, err := s.Append(ctx, &messages.AppendRequest{ConversationId: "src", ExpectedLast: 2, Events: []*messages.Event{over}})
	requireSentinel(t, err, journal.ErrInvalid, "one byte over the limit")
	over.Seq = 1
	requireSentinel(t, s.Fork(ctx, &messages.ForkRequest{ConversationId: "other", Events: []*messages.Event{over}, Status: statusIdle}),
		journal.ErrInvalid, "one byte over the limit")
}

// testForkPastTheAppendLimits: a fork copies more events than
// journal.MaxEventsPerAppend, of more bytes than journal.MaxAppendBytes, in
// its one write: a log written in many appends can be copied whole.
func testForkPastTheAppendLimits(t *testing.T, e env) {
	s := e.open(t).Store
	pad := strings.Repeat("x", journal.MaxAppendBytes/journal.MaxEventsPerAppend) // shared by every event
	evs := make([]*messages.Event, journal.MaxEventsPerAppend+1)
	for i := range evs {
		evs[i] = userEv(i, pad)
		evs[i].Seq = uint64(i + 1)
	}
	req := &messages.ForkRequest{ConversationId: "dst", Events: evs, Status: statusIdle}
	require.Greater(t, proto.Size(req), journal.MaxAppendBytes)
	require.NoError(t, s.Fork(context.Background(), req))
	requireFork(t, s, req)
}

// testForkOverMaxForkBytes: a ForkRequest that encodes to more than
// journal.MaxForkBytes is ErrInvalid, and nothing of it is written.
func testForkOverMaxForkBytes(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := context.Background()
	pad := strings.Repeat("x", journal.MaxEventBytes-64) // shared by every event: the request takes little memory
	evs := make([]*messages.Event, journal.MaxForkBytes/(journal.MaxEventBytes-64)+1)
	for i := range evs {
		evs[i] = userEv(i, pad)
		evs[i].Seq = uint64(i + 1)
	}
	req := &messages.ForkRequest{ConversationId: "dst", Events: evs, Status: statusIdle, Metadata: map[string]string{"name": "big"}}
	require.Greater(t, proto.Size(req), journal.MaxForkBytes)
	requireSentinel(t, s.Fork(ctx, req), journal.ErrInvalid, "a fork over MaxForkBytes")
	_, err := s.Conversation(ctx, "dst")
	requireSentinel(t, err, journal.ErrNotFound, "no row is written")
	assert.Empty(t, allEvents(t, s, "dst"), "no event is written")
	assert.Zero(t, lastSeq(t, s, "dst"))
	assert.Empty(t, findAll(t, s, "name", "big", 0), "no metadata is indexed")
}

func testForkBadInput(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := context.Background()
	base := forkSource(t, s, "src", "dst")
	cases := []struct {
		name string
		edit func(r *messages.ForkRequest)
	}{
		{"NoEvents", func(r *messages.ForkRequest) { r.Events = nil }},
		{"GapAfterSummary", func(r *messages.ForkRequest) { r.Events = r.Events[1:] }},
		{"GapInEvents", func(r *messages.ForkRequest) { r.Events = append(r.Events[:1:1], r.Events[2:]...) }},
		{"StartsAtOneWithASummary", func(r *messages.ForkRequest) { r.Events = withSeqs(1, r.Events) }},
		{"SuspendedStatus", func(r *messages.ForkRequest) { r.Status = statusSuspended }},
		{"NoStatus", func(r *messages.ForkRequest) { r.Status = messages.ConversationStatus_CONVERSATION_STATUS_UNSPECIFIED }},
		{"BadSummary", func(r *messages.ForkRequest) { r.Summary = &messages.Summary{FromSeq: 7, ToSeq: 6} }},
		{"EmptyID", func(r *messages.ForkRequest) { r.ConversationId = "" }},
		{"BadMetadataKey", func(r *messages.ForkRequest) { r.Metadata = map[string]string{"": "x"} }},
		{"EventWithoutBody", func(r *messages.ForkRequest) { r.Events[0] = &messages.Event{Seq: 7} }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := cloneFork(base)
			tc.edit(req)
			requireSentinel(t, s.Fork(ctx, req), journal.ErrInvalid)
			_, err := s.Conversation(ctx, "dst")
			requireSentinel(t, err, journal.ErrNotFound, "nothing was written")
			assert.Empty(t, allEvents(t, s, "dst"))
		})
	}
	requireSentinel(t, s.Fork(ctx, nil), journal.ErrInvalid)
}

// testForkMalformedCallEvents: a fork whose events name tool calls badly
// is refused with ErrInvalid and writes nothing, whether or not it names an
// origin, as an Append of them is: a tool_call event without a call, with
// an empty or oversized call id, or of an executor neither server nor
// human; a tool_result, resolution or handoff event without a call id; a
// resolution of a status that is not terminal; a suspension whose pending
// call has no id or an unknown executor. A fork's tool_call events need no
// rows (a copied call's row is the source's): a fork copying well-formed
// call events without their rows is written.
func testForkMalformedCallEvents(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := context.Background()
	base := forkSource(t, s, "src", "dst")
	withCall := func(edit func(tc *messages.ToolCallEvent)) *messages.Event {
		ev := toolCallEv(7, "tc-1")
		edit(ev.GetToolCall())
		return ev
	}
	suspension := func(p *messages.PendingCall) *messages.Event {
		return &messages.Event{Time: ts(7), Body: &messages.Event_Suspension{Suspension: &messages.Suspension{
			Pending: []*messages.PendingCall{p}}}}
	}
	handoff := &messages.Event{Time: ts(7), Agent: "critic", Body: &messages.Event_Handoff{Handoff: &messages.Handoff{To: "critic", Message: "check it"}}}
	cases := map[string]*messages.Event{
		"tool_call event without a call":                      withCall(func(tc *messages.ToolCallEvent) { tc.Call = nil }),
		"tool_call event without an id":                       withCall(func(tc *messages.ToolCallEvent) { tc.Call.Id = "" }),
		"tool_call event with an oversized id":                withCall(func(tc *messages.ToolCallEvent) { tc.Call.Id = strings.Repeat("x", journal.MaxIDBytes+1) }),
		"tool_call event of no executor":                      withCall(func(tc *messages.ToolCallEvent) { tc.Executor = messages.Executor_EXECUTOR_UNSPECIFIED }),
		"tool_result event without an id":                     toolResultEv(7, "", "42"),
		"resolution event without an id":                      resolutionEv(7, "", resolved),
		"resolution event of a pending status":                resolutionEv(7, "tc-1", messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING),
		"handoff event without an id":                         handoff,
		"suspension of a pending call without an id":          suspension(&messages.PendingCall{Executor: messages.Executor_EXECUTOR_HUMAN, Kind: "ask_human"}),
		"suspension of a pending call of an unknown executor": suspension(&messages.PendingCall{ToolCallId: "tc-1", Executor: 9, Kind: "ask_human"}),
	}
	for name, ev := range cases {
		for _, origin := range []bool{true, false} {
			req := cloneFork(base)
			ev := proto.CloneOf(ev)
			ev.Seq = req.Events[0].GetSeq()
			req.Events[0] = ev
			if !origin {
				req.Origin = nil
			}
			requireSentinel(t, s.Fork(ctx, req), journal.ErrInvalid, "%s (origin %v)", name, origin)
			_, err := s.Conversation(ctx, "dst")
			requireSentinel(t, err, journal.ErrNotFound, "%s: nothing was written", name)
			assert.Empty(t, allEvents(t, s, "dst"), name)
		}
	}

	// Well-formed call events, without their rows, with and without an
	// origin.
	server := toolCallEv(8, "tc-2")
	server.GetToolCall().Executor = messages.Executor_EXECUTOR_SERVER
	copied := []*messages.Event{assistantEv(7, "asking", "tc-1"), toolCallEv(7, "tc-1"), resolutionEv(8, "tc-1", resolved),
		toolResultEv(8, "tc-1", "42"), server,
		suspension(&messages.PendingCall{ToolCallId: "tc-3", Executor: messages.Executor_EXECUTOR_HUMAN, Kind: "ask_human"})}
	for i, dst := range []string{"dst", "dst-without-origin"} {
		req := cloneFork(base)
		req.ConversationId = dst
		req.Events = withSeqs(7, copied)
		if i == 1 {
			req.Origin = nil
		}
		require.NoError(t, s.Fork(ctx, req), dst)
		requireFork(t, s, req)
	}
}

func cloneFork(r *messages.ForkRequest) *messages.ForkRequest {
	return proto.Clone(r).(*messages.ForkRequest)
}

func testForkDeleteEither(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := context.Background()
	req := forkSource(t, s, "src", "dst")
	require.NoError(t, s.Fork(ctx, req))
	// The source goes on and is deleted: the fork stays whole.
	appendEvents(t, s, "src", userEv(30, "after the fork"))
	require.NoError(t, s.DeleteConversation(ctx, "src"))
	requireFork(t, s, req)
	// A second fork, of the fork, then the first fork is deleted.
	req2 := cloneFork(req)
	req2.ConversationId = "dst2"
	require.NoError(t, s.Fork(ctx, req2))
	require.NoError(t, s.DeleteConversation(ctx, "dst"))
	requireFork(t, s, req2)
	ids, _, err := s.FindConversations(ctx, "name", "copy", "", 0)
	require.NoError(t, err)
	assert.Equal(t, []string{"dst2"}, ids)
}

func testForkReopen(t *testing.T, e env) {
	h := e.open(t)
	s := h.Store
	req := forkSource(t, s, "src", "dst")
	require.NoError(t, s.Fork(context.Background(), req))
	s = h.Reopen(t)
	requireFork(t, s, req)
}

// findAll reads every page of FindConversations with page size limit,
// checking the paging rules on the way.
func findAll(t testing.TB, s journal.Store, key, value string, limit int) []string {
	t.Helper()
	var out []string
	cursor := ""
	for pages := 0; pages < 1000; pages++ {
		ids, next, err := s.FindConversations(context.Background(), key, value, cursor, limit)
		require.NoError(t, err)
		size := limit
		if size == 0 {
			size = 100
		}
		require.LessOrEqual(t, len(ids), size)
		if next != "" {
			require.Len(t, ids, size, "a page with a next cursor is full")
			require.Equal(t, journal.FindCursor(ids[len(ids)-1]), next)
		}
		for _, id := range ids {
			if len(out) > 0 {
				require.Less(t, out[len(out)-1], id, "ids ascend across pages")
			}
			out = append(out, id)
		}
		if next == "" {
			return out
		}
		cursor = next
	}
	t.Fatalf("FindConversations did not end")
	return nil
}

func testFindFollowsMetadata(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := context.Background()
	for _, id := range []string{"a", "b", "c"} {
		appendEvents(t, s, id, userEv(1, "hi"))
	}
	require.NoError(t, s.PutMetadata(ctx, "a", map[string]string{"name": "x", "team": "t"}))
	require.NoError(t, s.PutMetadata(ctx, "b", map[string]string{"name": "x"}))
	require.NoError(t, s.PutMetadata(ctx, "c", map[string]string{"name": "y"}))
	assert.Equal(t, []string{"a", "b"}, findAll(t, s, "name", "x", 0))
	assert.Equal(t, []string{"c"}, findAll(t, s, "name", "y", 0))
	assert.Equal(t, []string{"a"}, findAll(t, s, "team", "t", 0))
	assert.Empty(t, findAll(t, s, "name", "z", 0))
	assert.Empty(t, findAll(t, s, "name", "", 0), "an empty value finds nothing")
	assert.Empty(t, findAll(t, s, "x", "name", 0), "keys and values are not mixed up")
	// A changed value moves the conversation; a removed key takes it out.
	require.NoError(t, s.PutMetadata(ctx, "a", map[string]string{"name": "y", "team": ""}))
	assert.Equal(t, []string{"b"}, findAll(t, s, "name", "x", 0))
	assert.Equal(t, []string{"a", "c"}, findAll(t, s, "name", "y", 0))
	assert.Empty(t, findAll(t, s, "team", "t", 0))
	// A delete takes it out.
	require.NoError(t, s.DeleteConversation(ctx, "c"))
	assert.Equal(t, []string{"a"}, findAll(t, s, "name", "y", 0))
}

func testFindPages(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := context.Background()
	var want []string
	for i := range 7 {
		id := string(rune('a'+i)) + "-conv"
		require.NoError(t, s.PutMetadata(ctx, id, map[string]string{"name": "same"}))
		want = append(want, id)
		require.NoError(t, s.PutMetadata(ctx, id+"-other", map[string]string{"name": "other"}))
	}
	for _, limit := range []int{0, 1, 2, 3, 7, 8, math.MaxInt} {
		assert.Equal(t, want, findAll(t, s, "name", "same", limit), "limit %d", limit)
	}
	// A cursor need not be a listed id.
	ids, _, err := s.FindConversations(ctx, "name", "same", "c", 2)
	require.NoError(t, err)
	assert.Equal(t, []string{"c-conv", "d-conv"}, ids)
	// A full page that ends the listing has no next cursor, nor has a
	// cursor past the last id.
	ids, next, err := s.FindConversations(ctx, "name", "same", "e", 2)
	require.NoError(t, err)
	assert.Equal(t, []string{"e-conv", "f-conv"}, ids)
	assert.Equal(t, journal.FindCursor("f-conv"), next)
	ids, next, err = s.FindConversations(ctx, "name", "same", "f-conv", 1)
	require.NoError(t, err)
	assert.Equal(t, []string{"g-conv"}, ids)
	assert.Empty(t, next, "a full last page")
	ids, next, err = s.FindConversations(ctx, "name", "same", "zz", 5)
	require.NoError(t, err)
	assert.Empty(t, ids)
	assert.Empty(t, next)
	// Limit 0 means 100.
	var many []string
	for i := range 105 {
		id := fmt.Sprintf("m%03d", i)
		require.NoError(t, s.PutMetadata(ctx, id, map[string]string{"team": "t"}))
		many = append(many, id)
	}
	ids, next, err = s.FindConversations(ctx, "team", "t", "", 0)
	require.NoError(t, err)
	assert.Equal(t, many[:100], ids, "limit 0 means 100")
	assert.Equal(t, journal.FindCursor(many[99]), next)
}

func testFindLongValue(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := context.Background()
	long := strings.Repeat("v", 64<<10)
	require.NoError(t, s.PutMetadata(ctx, "a", map[string]string{"note": long}))
	require.NoError(t, s.PutMetadata(ctx, "b", map[string]string{"note": long + "w"}))
	assert.Equal(t, []string{"a"}, findAll(t, s, "note", long, 0))
}

// testMetadataTotalBounded: PutMetadata refuses a merge that leaves the
// conversation's metadata over journal.MaxRecordBytes, however many merges
// it took, and writes none of it; a merge that replaces or removes keys is
// counted as it leaves the metadata. So a conversation's metadata always
// fits a ForkRequest.
func testMetadataTotalBounded(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := context.Background()
	appendEvents(t, s, "a", userEv(1, "hi"))
	third := strings.Repeat("v", journal.MaxRecordBytes/3)
	require.NoError(t, s.PutMetadata(ctx, "a", map[string]string{"k1": third, "k2": third}))
	err := s.PutMetadata(ctx, "a", map[string]string{"k3": third, "small": "s"})
	requireSentinel(t, err, journal.ErrInvalid, "the merged metadata is over the limit")
	md, err := s.Metadata(ctx, "a")
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"k1": third, "k2": third}, md, "nothing of the refused merge is written")
	assert.Empty(t, findAll(t, s, "small", "s", 0), "nor indexed")
	// Replacing a key counts its new value only; removing one frees room.
	require.NoError(t, s.PutMetadata(ctx, "a", map[string]string{"k2": third + "w"}))
	require.NoError(t, s.PutMetadata(ctx, "a", map[string]string{"k1": "", "k3": third}))
	md, err = s.Metadata(ctx, "a")
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"k2": third + "w", "k3": third}, md)
}

func testFindBadInput(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := context.Background()
	_, _, err := s.FindConversations(ctx, "", "x", "", 0)
	requireSentinel(t, err, journal.ErrInvalid)
	_, _, err = s.FindConversations(ctx, "name", "x", "", -1)
	requireSentinel(t, err, journal.ErrInvalid)
	_, _, err = s.FindConversations(ctx, "name", "x", "\xff", 0)
	requireSentinel(t, err, journal.ErrInvalid)
	_, _, err = s.FindConversations(ctx, "name", "\xff", "", 0)
	requireSentinel(t, err, journal.ErrInvalid)
}

func testFindReopen(t *testing.T, e env) {
	h := e.open(t)
	require.NoError(t, h.Store.PutMetadata(context.Background(), "a", map[string]string{"name": "x"}))
	s := h.Reopen(t)
	assert.Equal(t, []string{"a"}, findAll(t, s, "name", "x", 0))
}

// testForkCrash: a fork that returned is whole after a crash, with its
// index entries; one refused before the crash left nothing.
func testForkCrash(t *testing.T, e env) {
	h := e.open(t)
	s := h.Store
	req := forkSource(t, s, "src", "dst")
	require.NoError(t, s.Fork(context.Background(), req))
	bad := cloneFork(req)
	bad.ConversationId = "bad"
	bad.Events = bad.Events[1:]
	requireSentinel(t, s.Fork(context.Background(), bad), journal.ErrInvalid)
	s = h.Crash(t, newRand(seed(t)))
	requireFork(t, s, req)
	assert.Equal(t, []string{"dst"}, findAll(t, s, "name", "copy", 0))
	_, err := s.Conversation(context.Background(), "bad")
	requireSentinel(t, err, journal.ErrNotFound)
}
