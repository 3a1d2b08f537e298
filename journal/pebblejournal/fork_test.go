package pebblejournal

import (
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// TestCheckAcceptsAFork: a fork's log starts after the summary it copied,
// which Check accepts; without that summary it is a gap.
func TestCheckAcceptsAFork(t *testing.T) {
	s := openMem(t, Options{})
	last := appendN(t, s, "src", 0, 5)
	_, err := s.Append(ctx, &messages.AppendRequest{ConversationId: "src", ExpectedLast: last,
		Events: []*messages.Event{issueEvent("t1"), toolCallEvent("t1")}, ToolCalls: []*messages.ToolCallRecord{pendingCall("src", "t1")}})
	require.NoError(t, err)
	sum := &messages.Summary{FromSeq: 1, ToSeq: 4, Content: "four"}
	require.NoError(t, s.PutSummary(ctx, "src", sum))
	evs, err := s.Events(ctx, "src", journal.EventQuery{After: 4})
	require.NoError(t, err)
	require.NoError(t, s.Fork(ctx, &messages.ForkRequest{ConversationId: "dst", Summary: sum, Events: evs,
		Status: messages.ConversationStatus_CONVERSATION_STATUS_IDLE, Origin: &messages.ForkOrigin{ConversationId: "src", Seq: 7}}))
	rep, err := s.Check(ctx)
	require.NoError(t, err)
	require.True(t, rep.Sound(), "a copied tool_call event's row is the source's: %v", rep.Problems)
	// A tool_call event of the fork's own still needs its row (an Append
	// refuses one without: the row is removed behind the store's back).
	done := &messages.ToolCallRecord{Id: "t2", ConversationId: "dst", Name: "ask", Executor: messages.Executor_EXECUTOR_HUMAN,
		Status: messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED}
	_, err = s.Append(ctx, &messages.AppendRequest{ConversationId: "dst", ExpectedLast: 7, Events: []*messages.Event{issueEvent("t2"), toolCallEvent("t2")},
		ToolCalls: []*messages.ToolCallRecord{done}})
	require.NoError(t, err)
	require.NoError(t, s.db.Delete(idKey(famToolCall, "dst", "t2"), nil))
	require.NoError(t, s.db.Delete(ownerKey("t2"), nil))
	rep, err = s.Check(ctx)
	require.NoError(t, err)
	require.Len(t, rep.Problems, 1)
	require.Contains(t, rep.Problems[0], `tool_call event "t2" has no row`)
	require.NoError(t, s.db.Delete(seqKey(famEvent, "dst", 9), nil))
	require.NoError(t, s.db.Delete(seqKey(famEvent, "dst", 8), nil))

	require.NoError(t, s.db.Delete(seqKey(famSummary, "dst", 4), nil))
	rep, err = s.Check(ctx)
	require.NoError(t, err)
	require.False(t, rep.Sound())
	require.Contains(t, rep.Problems[0], `conversation "dst": the log has a gap: seq 5 where 1 should be`)
	_, err = s.Events(ctx, "dst", journal.EventQuery{})
	require.ErrorIs(t, err, journal.ErrCorrupt, "without its summary, the fork's log has a gap")
}

// TestOpenBuildsTheMetadataIndex: a store written before the metadata
// index (no marker, no index keys) gets it on Open.
func TestOpenBuildsTheMetadataIndex(t *testing.T) {
	fs := vfs.NewMem()
	s, err := Open("db", Options{FS: fs})
	require.NoError(t, err)
	appendN(t, s, "a", 0, 1)
	require.NoError(t, s.PutMetadata(ctx, "a", map[string]string{"name": "x", "team": "t"}))
	require.NoError(t, s.PutMetadata(ctx, "b", map[string]string{"name": "x"}))
	// As an older build left it.
	require.NoError(t, s.db.DeleteRange([]byte{famFind}, familyEnd(famFind), nil))
	require.NoError(t, s.db.Delete(findIndexKey, nil))
	ids, _, err := s.FindConversations(ctx, "name", "x", "", 0)
	require.NoError(t, err)
	require.Empty(t, ids)
	require.NoError(t, s.Close())

	s, err = Open("db", Options{FS: fs})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	ids, _, err = s.FindConversations(ctx, "name", "x", "", 0)
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b"}, ids)
	ids, _, err = s.FindConversations(ctx, "team", "t", "", 0)
	require.NoError(t, err)
	require.Equal(t, []string{"a"}, ids)
}
