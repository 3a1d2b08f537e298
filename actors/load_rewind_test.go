package actors

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

// TestRevivalSkipsASummaryAnEarlierRewindLeftBehind: a summary made before
// a rewind that went below it lies in a span that rewind skipped. A later
// rewind below a later summary must not revive from it (the latest summary
// ending at or before the later rewind's target): the revival walks on to
// a summary on the head.
func TestRevivalSkipsASummaryAnEarlierRewindLeftBehind(t *testing.T) {
	ctx := context.Background()
	store := memjournal.New(memjournal.Options{})
	var last uint64
	appendEvents := func(evs ...*messages.Event) {
		t.Helper()
		res, err := store.Append(ctx, &messages.AppendRequest{ConversationId: "c", ExpectedLast: last, Events: evs})
		require.NoError(t, err)
		last = res.LastSeq
	}
	turns := func(n int) {
		for range n {
			appendEvents(user(""), answer())
		}
	}
	summary := func(to uint64) {
		t.Helper()
		require.NoError(t, store.PutSummary(ctx, "c", &messages.Summary{FromSeq: 1, ToSeq: to, Content: "folded"}))
	}
	rewind := func(to uint64) {
		appendEvents(&messages.Event{Body: &messages.Event_Rewind{Rewind: &messages.Rewind{ToSeq: to}}})
	}

	turns(13)   // 1-26
	summary(18) // made on the head as it was then
	rewind(12)  // 27: skips 13-26, the first summary with them
	turns(6)    // 28-39
	summary(38) // made on the new head (from none: 12 is below 18)
	rewind(32)  // 40: below the summary at 38; the one at 18 is the latest before 32

	l := load(ctx, store, "c")
	require.NoError(t, l.err)
	require.Nil(t, l.ws.Summary, "no summary is on the head below seq 32")
	_, below := l.ws.RewoundPastSummary()
	require.False(t, below)
	var seqs []uint64
	for _, ev := range l.ws.Render() {
		seqs = append(seqs, ev.GetSeq())
	}
	want := []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 28, 29, 30, 31, 32}
	require.Equal(t, want, seqs, "the effective history up to the rewind's target")
}

// TestRevivalPassesOverASummaryThatCutsACall: a summary that ends after a
// pending call's tool_call event (the runtime never writes one; a Store
// takes it) is passed over for the latest one before it, so the revival
// still owes the call; the events it covers are read, not the whole log.
func TestRevivalPassesOverASummaryThatCutsACall(t *testing.T) {
	ctx := context.Background()
	store := memjournal.New(memjournal.Options{})
	res, err := store.Append(ctx, &messages.AppendRequest{ConversationId: "c",
		Events:    []*messages.Event{user("r1"), answer(), user("r2"), answer(&messages.ToolCall{Id: "c2", Name: "approve", Arguments: "{}"}), call("c2", human)},
		ToolCalls: []*messages.ToolCallRecord{{Id: "c2", ConversationId: "c", Name: "approve", Args: "{}", Executor: human}}})
	require.NoError(t, err)
	require.Equal(t, uint64(5), res.LastSeq)
	require.NoError(t, store.PutSummary(ctx, "c", &messages.Summary{FromSeq: 1, ToSeq: 2, Content: "on a safe point"}))
	require.NoError(t, store.PutSummary(ctx, "c", &messages.Summary{FromSeq: 1, ToSeq: 5, Content: "cuts c2"}))

	l := load(ctx, store, "c")
	require.NoError(t, l.err)
	require.Equal(t, uint64(2), l.ws.Summary.GetToSeq(), "the latest summary that cuts no call")
	open := l.ws.OpenCalls()
	require.Len(t, open, 1)
	require.Equal(t, "c2", open[0].GetCall().GetId())
	require.Contains(t, l.rows, "c2")
}

// TestRevivalPassesOverASummaryBetweenACallAndItsToolCallEvent: a summary
// that ends at the assistant_msg issuing a call, before the call's
// tool_call event (which the runtime writes in the same append), ends
// inside that call: revived from it, the model would see the call's result
// without the message that made the call. The revival passes it over, as
// import and lazarus check refuse it (it was taken: the tool_call event
// after it counted as the call's issue).
func TestRevivalPassesOverASummaryBetweenACallAndItsToolCallEvent(t *testing.T) {
	ctx := context.Background()
	store := memjournal.New(memjournal.Options{})
	res, err := store.Append(ctx, &messages.AppendRequest{ConversationId: "c",
		Events:    []*messages.Event{user("r1"), answer(), user("r2"), answer(&messages.ToolCall{Id: "c2", Name: "approve", Arguments: "{}"}), call("c2", human)},
		ToolCalls: []*messages.ToolCallRecord{{Id: "c2", ConversationId: "c", Name: "approve", Args: "{}", Executor: human}}})
	require.NoError(t, err)
	require.Equal(t, uint64(5), res.LastSeq)
	require.NoError(t, store.PutSummary(ctx, "c", &messages.Summary{FromSeq: 1, ToSeq: 2, Content: "on a safe point"}))
	require.NoError(t, store.PutSummary(ctx, "c", &messages.Summary{FromSeq: 1, ToSeq: 4, Content: "at the call's assistant_msg"}))

	l := load(ctx, store, "c")
	require.NoError(t, l.err)
	require.Equal(t, uint64(2), l.ws.Summary.GetToSeq(), "the latest summary that cuts no call")
	rendered := l.ws.Render()
	require.Len(t, rendered, 2)
	require.Equal(t, "c2", rendered[1].GetAssistantMsg().GetToolCalls()[0].GetId(), "the model sees the call it made")
	open := l.ws.OpenCalls()
	require.Len(t, open, 1)
	require.Equal(t, "c2", open[0].GetCall().GetId())
}
