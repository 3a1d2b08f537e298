package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/pebblejournal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/snapshot"
)

// TestRevivalAndCheckAgreeOnWhereASummaryCutsACall: on the fixture's
// waiting log (lookup issued at 2 and answered at 4; approve issued by the
// assistant message at 5, its tool_call event at 6, pending), a summary
// ending at each seq ends inside a tool call for a revival
// (actors.SummaryCutsACall) exactly when it does for import and check
// (snapshot.CallTracker). A summary ending at 5, between the assistant message and
// its tool_call event, was accepted by a revival (the call's tool_call
// event after it counted as its issue), which then showed the model
// approve's result without the message that made the call.
func TestRevivalAndCheckAgreeOnWhereASummaryCutsACall(t *testing.T) {
	f := newFixture(t)
	st, err := pebblejournal.Open(f.dir, pebblejournal.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, st.Close()) })
	ctx := ctxT(t)
	all, err := st.Events(ctx, "waiting", journal.EventQuery{})
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(all), 6)
	require.Len(t, all[4].GetAssistantMsg().GetToolCalls(), 1, "approve is issued at 5")
	require.Equal(t, f.waitingCall, all[5].GetToolCall().GetCall().GetId(), "its tool_call event is at 6")
	var open snapshot.CallTracker
	for _, ev := range all {
		open.Add(ev)
	}
	for _, ev := range all {
		to := ev.GetSeq()
		sum := &messages.Summary{FromSeq: 1, ToSeq: to, Content: "put by hand"}
		cut, err := actors.SummaryCutsACall(ctx, st, "waiting", sum, all[to:])
		require.NoError(t, err)
		require.Equal(t, len(open.At(to)) > 0, cut, "a summary ending at seq %d", to)
	}
}
