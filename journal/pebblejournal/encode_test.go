package pebblejournal

import (
	"strings"
	"testing"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
)

// eventOfSize returns a user message whose encoding, with Seq seq, is n
// bytes.
func eventOfSize(t *testing.T, n int, seq uint64) *messages.Event {
	t.Helper()
	ev := userEvent("")
	ev.Seq = seq
	text := &ev.GetUserMsg().GetContent()[0].GetPart().(*messages.ContentPart_Text).Text
	*text = strings.Repeat("x", n)
	// The length prefixes grow with the text; shrink it until it fits.
	for size := proto.Size(ev); size != n; size = proto.Size(ev) {
		require.Greater(t, size, n, "cannot make an event of %d bytes", n)
		*text = (*text)[:len(*text)-(size-n)]
	}
	return ev
}

// checkBadEventRejected appends, in one batch, a request whose event 1 is
// bad to each of a new conversation and an existing one (with a tool call
// and an fsm_state), and a good request to a third conversation: the bad
// ones fail with ErrInvalid naming the event, write nothing and leave the
// caller's seqs as they were; the good one commits.
func checkBadEventRejected(t *testing.T, bad func() *messages.Event, wantMsg string) {
	s := openMem(t, Options{})
	last := appendN(t, s, "old", 0, 3)
	st := &messages.FSMState{State: messages.AgentState_AGENT_STATE_IDLE, LastSeq: last}
	_, err := s.Append(ctx, &messages.AppendRequest{ConversationId: "old", ExpectedLast: last, Unfenced: true, FsmState: st})
	require.NoError(t, err)

	newEvs := []*messages.Event{userEvent("fine"), bad(), userEvent("also fine")}
	newEvs[0].Seq = 77 // a caller's seq is kept when the request fails
	oldEvs := []*messages.Event{userEvent("fine"), bad()}
	oldEvs[1].Seq = 5
	goodEvs := []*messages.Event{userEvent("good 1"), userEvent("good 2")}
	reqs := []*messages.AppendRequest{
		{ConversationId: "new", Events: newEvs, ToolCalls: []*messages.ToolCallRecord{pendingCall("new", "new/tc")}},
		{
			ConversationId: "old", ExpectedLast: last, Events: oldEvs,
			ToolCalls: []*messages.ToolCallRecord{pendingCall("old", "old/tc")},
			FsmState: &messages.FSMState{State: messages.AgentState_AGENT_STATE_AWAITING_INPUT, Pending: map[string]*messages.PendingCall{
				"old/tc": {ToolCallId: "old/tc", Executor: messages.Executor_EXECUTOR_HUMAN}}},
			Status: messages.ConversationStatus_CONVERSATION_STATUS_ENDED,
		},
		{ConversationId: "good", Events: goodEvs},
	}
	for _, r := range reqs[:2] {
		require.NoError(t, journal.ValidateAppendShape(r))
		require.ErrorIs(t, journal.ValidateAppend(r), journal.ErrInvalid)
	}
	res := s.AppendBatch(ctx, reqs)

	for i, conv := range []string{"new", "old"} {
		require.ErrorIs(t, res[i].Err, journal.ErrInvalid, conv)
		require.ErrorContains(t, res[i].Err, `event 1 of append to "`+conv+`"`)
		require.ErrorContains(t, res[i].Err, wantMsg)
		require.Equal(t, "pebblejournal: "+journal.ValidateAppend(reqs[i]).Error(), res[i].Err.Error(), "the store's error is ValidateAppend's")
	}
	require.EqualValues(t, []uint64{77, 0, 0}, []uint64{newEvs[0].Seq, newEvs[1].Seq, newEvs[2].Seq}, "seqs of the rejected request are the caller's")
	require.EqualValues(t, []uint64{0, 5}, []uint64{oldEvs[0].Seq, oldEvs[1].Seq}, "seqs of the rejected request are the caller's")

	n, err := s.LastSeq(ctx, "new")
	require.NoError(t, err)
	require.Zero(t, n)
	_, err = s.Conversation(ctx, "new")
	require.ErrorIs(t, err, journal.ErrNotFound, "no row is created")
	_, err = s.ToolCall(ctx, "new/tc")
	require.ErrorIs(t, err, journal.ErrNotFound)

	n, err = s.LastSeq(ctx, "old")
	require.NoError(t, err)
	require.Equal(t, last, n)
	row, err := s.Conversation(ctx, "old")
	require.NoError(t, err)
	require.True(t, proto.Equal(st, row.GetFsmState()), "fsm_state unchanged: %v", row.GetFsmState())
	require.Equal(t, messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE, row.GetStatus())
	_, err = s.ToolCall(ctx, "old/tc")
	require.ErrorIs(t, err, journal.ErrNotFound)

	require.NoError(t, res[2].Err)
	require.Equal(t, journal.AppendResult{FirstSeq: 1, LastSeq: 2}, res[2])
	require.EqualValues(t, []uint64{1, 2}, []uint64{goodEvs[0].Seq, goodEvs[1].Seq})
	evs, err := s.Events(ctx, "good", journal.EventQuery{})
	require.NoError(t, err)
	require.Len(t, evs, 2)
	for i, ev := range evs {
		require.True(t, proto.Equal(goodEvs[i], ev), "event %d: %v", i, ev)
	}

	// The store (and its caches) still take the rejected conversations
	// where they were.
	require.EqualValues(t, 1, appendN(t, s, "new", 0, 1))
	require.Equal(t, last+1, appendN(t, s, "old", last, 1))
}

func TestAppendRejectsEventNotUTF8(t *testing.T) {
	checkBadEventRejected(t, func() *messages.Event { return userEvent("\xff") }, "cannot be encoded")
}

func TestAppendRejectsEventTooLarge(t *testing.T) {
	checkBadEventRejected(t, func() *messages.Event { return eventOfSize(t, journal.MaxEventBytes+1, 0) },
		"exceeds 1048576")
}

// The limit applies to an event as the caller gives it, as ValidateAppend
// measures it: the seq the store gives it does not count.
func TestAppendEventSizeLimitAsGiven(t *testing.T) {
	s := openMem(t, Options{})
	last := appendN(t, s, "c", 0, 300) // seqs of two bytes from here

	for _, given := range []uint64{0, 1, 1 << 40} {
		ev := eventOfSize(t, journal.MaxEventBytes, given)
		req := &messages.AppendRequest{ConversationId: "c", ExpectedLast: last, Events: []*messages.Event{ev}}
		require.NoError(t, journal.ValidateAppend(req))
		res, err := s.Append(ctx, req)
		require.NoError(t, err, "given seq %d", given)
		last = res.LastSeq
		require.Equal(t, last, ev.GetSeq())

		over := eventOfSize(t, journal.MaxEventBytes+1, given)
		req = &messages.AppendRequest{ConversationId: "c", ExpectedLast: last, Events: []*messages.Event{over}}
		want := journal.ValidateAppend(req)
		require.ErrorIs(t, want, journal.ErrInvalid)
		_, err = s.Append(ctx, req)
		require.ErrorIs(t, err, journal.ErrInvalid)
		require.Equal(t, "pebblejournal: "+want.Error(), err.Error())
		require.Equal(t, given, over.GetSeq())
	}
	evs, err := s.Events(ctx, "c", journal.EventQuery{After: 300})
	require.NoError(t, err)
	require.Len(t, evs, 3)
	for i, ev := range evs {
		require.EqualValues(t, 301+i, ev.GetSeq())
	}
}

// A request that fails after its events were encoded (here, on its fence
// or a tool call of another conversation) leaves the caller's seqs.
func TestFailedRequestKeepsSeqs(t *testing.T) {
	s := openMem(t, Options{})
	last := appendN(t, s, "c", 0, 2)
	_, err := s.Append(ctx, &messages.AppendRequest{ConversationId: "d", Events: []*messages.Event{userEvent("d")}, ToolCalls: []*messages.ToolCallRecord{pendingCall("d", "tc")}})
	require.NoError(t, err)

	evs := []*messages.Event{userEvent("a"), userEvent("b")}
	evs[0].Seq, evs[1].Seq = 9, 0
	res := s.AppendBatch(ctx, []*messages.AppendRequest{
		{ConversationId: "c", ExpectedLast: last - 1, Events: evs},
		{ConversationId: "c", ExpectedLast: last, Events: evs, ToolCalls: []*messages.ToolCallRecord{pendingCall("c", "tc")}},
	})
	require.ErrorIs(t, res[0].Err, journal.ErrConflict)
	require.ErrorIs(t, res[1].Err, journal.ErrConflict)
	require.EqualValues(t, []uint64{9, 0}, []uint64{evs[0].Seq, evs[1].Seq})
	n, err := s.LastSeq(ctx, "c")
	require.NoError(t, err)
	require.Equal(t, last, n)
}

// One event given twice in a request is stored at both seqs, each copy
// with its own seq.
func TestSameEventTwice(t *testing.T) {
	s := openMem(t, Options{})
	ev := userEvent("twice")
	res, err := s.Append(ctx, &messages.AppendRequest{ConversationId: "c", Events: []*messages.Event{ev, ev}})
	require.NoError(t, err)
	require.Equal(t, journal.AppendResult{FirstSeq: 1, LastSeq: 2}, res)
	require.EqualValues(t, 2, ev.GetSeq())
	evs, err := s.Events(ctx, "c", journal.EventQuery{})
	require.NoError(t, err)
	require.Len(t, evs, 2)
	for i, got := range evs {
		require.EqualValues(t, i+1, got.GetSeq())
		require.Equal(t, "twice", got.GetUserMsg().GetContent()[0].GetText())
	}

	// Rejected the second time: the event gets back the seq it had.
	bad := userEvent("\xff")
	res = s.AppendBatch(ctx, []*messages.AppendRequest{{ConversationId: "c", ExpectedLast: 2, Events: []*messages.Event{ev, ev, bad}}})[0]
	require.ErrorIs(t, res.Err, journal.ErrInvalid)
	require.EqualValues(t, 2, ev.GetSeq())
}

// An event given twice (in a request or in two requests of a batch) is
// measured as the caller gave it, before the store set its seq the first
// time, as ValidateAppend measures it.
func TestSameEventTwiceAtLimit(t *testing.T) {
	s := openMem(t, Options{})
	for _, given := range []uint64{0, 1000} {
		last, err := s.LastSeq(ctx, "c")
		require.NoError(t, err)
		ev := eventOfSize(t, journal.MaxEventBytes, given)
		reqs := []*messages.AppendRequest{
			{ConversationId: "c", ExpectedLast: last, Events: []*messages.Event{ev, ev}},
			{ConversationId: "c", ExpectedLast: last + 2, Events: []*messages.Event{ev}},
		}
		for _, r := range reqs {
			require.NoError(t, journal.ValidateAppend(r))
		}
		res := s.AppendBatch(ctx, reqs)
		require.NoError(t, res[0].Err, "given %d", given)
		require.NoError(t, res[1].Err, "given %d", given)
		require.Equal(t, last+3, ev.GetSeq())

		over := eventOfSize(t, journal.MaxEventBytes+1, given)
		req := &messages.AppendRequest{ConversationId: "c", ExpectedLast: last + 3, Events: []*messages.Event{over, over}}
		want := journal.ValidateAppend(req)
		require.ErrorIs(t, want, journal.ErrInvalid)
		_, err = s.Append(ctx, req)
		require.Equal(t, "pebblejournal: "+want.Error(), err.Error())
		require.Equal(t, given, over.GetSeq())
	}
}
