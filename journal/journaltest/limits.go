package journaltest

import (
	"strings"
	"testing"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testResolveOverflowingRow: a resolution whose result fits on its own but
// would make its call's row exceed MaxRecordBytes is refused with
// ErrInvalid, by ResolveToolCall and by an Append alike, and changes
// nothing (the call stays pending with its deadline); in an AppendBatch it
// fails only its own request. A result that the request's tool_result event
// carries counts once, in the event: that resolution is accepted.
func testResolveOverflowingRow(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	big := humanCall("c", "tc-big")
	big.Args = strings.Repeat("a", journal.MaxRecordBytes-2048)
	appendOK(t, s, &messages.AppendRequest{ConversationId: "c", Events: []*messages.Event{assistantEv(1, "asking", "tc-big"), toolCallEv(1, "tc-big")},
		ToolCalls: []*messages.ToolCallRecord{big}, Schedule: []*messages.Deadline{deadline("c", "tc-big", 100)}})
	last := lastSeq(t, s, "c")
	content := strings.Repeat("r", 4096)
	before := snapshotOf(t, s, []string{"c", "d"}, []string{"tc-big"})

	_, err := s.ResolveToolCall(ctx, "tc-big", resolved, contentOutcome(content), tm(2))
	requireSentinel(t, err, journal.ErrInvalid, "ResolveToolCall")
	requireSameSnapshot(t, before, snapshotOf(t, s, []string{"c", "d"}, []string{"tc-big"}), "a refused ResolveToolCall changes nothing")

	overflow := &messages.AppendRequest{ConversationId: "c", Unfenced: true,
		Resolutions: []*messages.ToolResolution{{ToolCallId: "tc-big", Status: resolved, Result: contentOutcome(content), At: ts(2)}}}
	res, err := s.Append(ctx, overflow)
	requireSentinel(t, err, journal.ErrInvalid, "Append")
	requireSentinel(t, res.Err, journal.ErrInvalid)
	requireSameSnapshot(t, before, snapshotOf(t, s, []string{"c", "d"}, []string{"tc-big"}), "a refused Append changes nothing")
	// The row's size depends on the stored row: it is checked with
	// ErrStale's checks, after the fence and the tool call owners.
	upsert(t, s, humanCall("o", "tc-o"))
	for name, req := range map[string]*messages.AppendRequest{
		"fenced off": {ConversationId: "c", ExpectedLast: last + 5, Events: userEvs(2, 1), Resolutions: overflow.GetResolutions()},
		"owner":      {ConversationId: "c", ExpectedLast: last, Events: userEvs(2, 1), Resolutions: overflow.GetResolutions(), ToolCalls: []*messages.ToolCallRecord{humanCall("c", "tc-o")}},
	} {
		_, err := s.Append(ctx, req)
		requireSentinel(t, err, journal.ErrConflict, name)
	}
	assert.Equal(t, last, lastSeq(t, s, "c"))
	assert.Equal(t, pending, toolCall(t, s, "tc-big").GetStatus())

	results := s.AppendBatch(ctx, []*messages.AppendRequest{overflow, {ConversationId: "d", Events: userEvs(1, 1)}})
	require.Len(t, results, 2)
	requireSentinel(t, results[0].Err, journal.ErrInvalid, "the overflowing request of a batch")
	require.NoError(t, results[1].Err, "the other request of the batch")
	assert.Equal(t, uint64(1), lastSeq(t, s, "d"))
	assert.Equal(t, pending, toolCall(t, s, "tc-big").GetStatus())
	assert.Len(t, allDeadlines(t, s), 1, "the refused resolutions kept the deadline")

	out := contentOutcome(content)
	appendOK(t, s, &messages.AppendRequest{ConversationId: "c", ExpectedLast: last,
		Events: []*messages.Event{resolutionEv(3, "tc-big", resolved), {Time: ts(3), Body: &messages.Event_ToolResult{ToolResult: &messages.ToolResultEvent{
			ToolCallId: "tc-big", Name: "ask_human", Outcome: out}}}},
		Resolutions: []*messages.ToolResolution{{ToolCallId: "tc-big", Status: resolved, Result: out, At: ts(3)}}})
	row := toolCall(t, s, "tc-big")
	assert.Equal(t, resolved, row.GetStatus())
	requireProto(t, out, row.GetResult(), "the result, kept once in its event")
	assert.Empty(t, allDeadlines(t, s))

	// The row's size is checked after ErrStale: a call no longer pending
	// is stale, whatever its result would make of the row.
	_, err = s.ResolveToolCall(ctx, "tc-big", errored, contentOutcome(content+content), tm(4))
	requireSentinel(t, err, journal.ErrStale, "ResolveToolCall of an answered call")
	res, err = s.Append(ctx, &messages.AppendRequest{ConversationId: "c", Unfenced: true,
		Resolutions: []*messages.ToolResolution{{ToolCallId: "tc-big", Status: errored, Result: contentOutcome(content + content), At: ts(4)}}})
	requireSentinel(t, err, journal.ErrStale, "Append resolving an answered call")
	requireSentinel(t, res.Err, journal.ErrStale)
	requireProto(t, row, toolCall(t, s, "tc-big"), "nothing changed")
}

// testSettingsTotalBounded: a merge of settings (by PutConversation or by
// an Append) that would leave the conversation row over
// journal.MaxRecordBytes, however many merges it took, is refused with
// ErrInvalid and writes nothing, and so is an fsm_state that does not fit
// beside the settings; replacing or removing keys counts as the merge
// leaves them.
func testSettingsTotalBounded(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	appendEvents(t, s, "a", userEv(1, "hi"))
	third := strings.Repeat("v", journal.MaxRecordBytes/3)
	require.NoError(t, s.PutConversation(ctx, journal.ConversationUpdate{ID: "a", Settings: map[string]string{"k1": third, "k2": third}}))
	before := conversation(t, s, "a")
	err := s.PutConversation(ctx, journal.ConversationUpdate{ID: "a", Settings: map[string]string{"k3": third, "small": "s"}, Status: statusIdle})
	requireSentinel(t, err, journal.ErrInvalid, "PutConversation: the merged settings are over the limit")
	requireProto(t, before, conversation(t, s, "a"), "nothing of the refused PutConversation is written")
	res, err := s.Append(ctx, &messages.AppendRequest{ConversationId: "a", ExpectedLast: 1, Events: userEvs(2, 1),
		Settings: map[string]string{"k3": third, "small": "s"}})
	requireSentinel(t, err, journal.ErrInvalid, "Append: the merged settings are over the limit")
	requireSentinel(t, res.Err, journal.ErrInvalid)
	requireProto(t, before, conversation(t, s, "a"), "nothing of the refused Append is written")
	assert.Equal(t, uint64(1), lastSeq(t, s, "a"))
	// The merge depends on the stored row: it is checked after the fence.
	_, err = s.Append(ctx, &messages.AppendRequest{ConversationId: "a", ExpectedLast: 5, Events: userEvs(2, 1),
		Settings: map[string]string{"k3": third, "small": "s"}})
	requireSentinel(t, err, journal.ErrConflict, "Append fenced off: the fence's error before the row's size")
	// An fsm_state that fits on its own but not beside the settings.
	big := awaiting(2, "tc-1")
	big.Pending["tc-1"].Prompt = third
	res, err = s.Append(ctx, &messages.AppendRequest{ConversationId: "a", ExpectedLast: 1, Events: userEvs(2, 1), FsmState: big})
	requireSentinel(t, err, journal.ErrInvalid, "Append: the fsm_state does not fit beside the settings")
	requireSentinel(t, res.Err, journal.ErrInvalid)
	requireSentinel(t, s.PutFSMState(ctx, "a", big), journal.ErrInvalid, "PutFSMState: the fsm_state does not fit beside the settings")
	requireProto(t, before, conversation(t, s, "a"), "nothing of the refused fsm_states is written")
	assert.Equal(t, uint64(1), lastSeq(t, s, "a"))

	require.NoError(t, s.PutConversation(ctx, journal.ConversationUpdate{ID: "a", Settings: map[string]string{"k2": third + "w"}}))
	appendOK(t, s, &messages.AppendRequest{ConversationId: "a", ExpectedLast: 1, Events: userEvs(2, 1),
		Settings: map[string]string{"k1": "", "k3": third}})
	assert.Equal(t, map[string]string{"k2": third + "w", "k3": third}, conversation(t, s, "a").GetSettings())
}

// testMalformedCallEventsRefused: an append whose events name tool calls
// badly is refused with ErrInvalid and writes nothing, in an AppendBatch
// failing only its own request: a tool_call event without a call, with an
// empty call id, without its row in the same append (so that no crash
// leaves a call in the log without its row) or with another executor than
// its row's; a tool_result or a resolution event without a call id. The
// same events with their ids and rows are accepted, and so is a server
// call pending under an idle fsm_state (BadInput/RejectedWithoutWriting
// has the other malformed records).
func testMalformedCallEventsRefused(t *testing.T, e env) {
	s := e.open(t).Store
	ctx := t.Context()
	appendOK(t, s, &messages.AppendRequest{ConversationId: "c", Events: userEvs(1, 1)})
	noCall := toolCallEv(2, "x")
	noCall.GetToolCall().Call = nil
	serverEv := toolCallEv(2, "tc-1")
	serverEv.GetToolCall().Executor = messages.Executor_EXECUTOR_SERVER
	for name, req := range map[string]*messages.AppendRequest{
		"tool_call event without a call": {Events: []*messages.Event{noCall}},
		"tool_call event without an id": {Events: []*messages.Event{toolCallEv(2, "")},
			ToolCalls: []*messages.ToolCallRecord{humanCall("c", "tc-1")}},
		"tool_call event without its row": {Events: []*messages.Event{assistantEv(2, "asking", "tc-1"), toolCallEv(2, "tc-1")}},
		"tool_call event with another call's row": {Events: []*messages.Event{toolCallEv(2, "tc-1")},
			ToolCalls: []*messages.ToolCallRecord{humanCall("c", "tc-2")}},
		"tool_call event of another executor than its row": {Events: []*messages.Event{serverEv},
			ToolCalls: []*messages.ToolCallRecord{humanCall("c", "tc-1")}},
		"tool_result event without an id": {Events: []*messages.Event{toolResultEv(2, "", "42")}},
		"resolution event without an id":  {Events: []*messages.Event{resolutionEv(2, "", resolved)}},
	} {
		req.ConversationId, req.ExpectedLast = "c", 1
		before := snapshotOf(t, s, []string{"c"}, []string{"tc-1", "tc-2", "x"})
		_, err := s.Append(ctx, req)
		requireSentinel(t, err, journal.ErrInvalid, name)
		results := s.AppendBatch(ctx, []*messages.AppendRequest{req, {ConversationId: "d", ExpectedLast: lastSeq(t, s, "d"), Events: userEvs(1, 1)}})
		require.Len(t, results, 2)
		requireSentinel(t, results[0].Err, journal.ErrInvalid, "%s, in a batch", name)
		require.NoError(t, results[1].Err, "the other request of the batch")
		after := snapshotOf(t, s, []string{"c"}, []string{"tc-1", "tc-2", "x"})
		requireSameSnapshot(t, before, after, "a refused %s changes nothing", name)
	}
	appendOK(t, s, &messages.AppendRequest{ConversationId: "c", ExpectedLast: 1,
		Events:    []*messages.Event{assistantEv(2, "asking", "tc-1"), toolCallEv(2, "tc-1")},
		ToolCalls: []*messages.ToolCallRecord{humanCall("c", "tc-1")}})
	appendOK(t, s, &messages.AppendRequest{ConversationId: "c", ExpectedLast: 3,
		Events:      []*messages.Event{resolutionEv(4, "tc-1", resolved), toolResultEv(4, "tc-1", "42")},
		Resolutions: []*messages.ToolResolution{{ToolCallId: "tc-1", Status: resolved, Result: contentOutcome("42"), At: ts(4)}}})
	assert.Equal(t, resolved, toolCall(t, s, "tc-1").GetStatus())
	// What the runtime writes while a server call runs: its row without a
	// deadline, and an idle fsm_state naming it pending (only a human
	// call pending makes it awaiting_input).
	server := humanCall("c", "tc-3")
	server.Executor, server.Prompt = messages.Executor_EXECUTOR_SERVER, ""
	serverEv = toolCallEv(6, "tc-3")
	serverEv.GetToolCall().Executor = messages.Executor_EXECUTOR_SERVER
	running := idleState(7)
	running.Pending = map[string]*messages.PendingCall{"tc-3": {ToolCallId: "tc-3", Executor: messages.Executor_EXECUTOR_SERVER, Kind: "ask_human"}}
	appendOK(t, s, &messages.AppendRequest{ConversationId: "c", ExpectedLast: 5,
		Events: []*messages.Event{assistantEv(6, "looking", "tc-3"), serverEv}, ToolCalls: []*messages.ToolCallRecord{server}, FsmState: running})
	assert.Equal(t, messages.Executor_EXECUTOR_SERVER, toolCall(t, s, "tc-3").GetExecutor())
}
