package main

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/pebblejournal"
	"github.com/lazarusrt/lazarus/messages"
)

// TestExportOfAFork: a forked conversation's log starts after the summary
// it copied: show, conversations --where and check read it, and export
// refuses it clearly (its format carries logs from seq 1, with the rows of
// their tool calls).
func TestExportOfAFork(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	st, err := pebblejournal.Open(f.dir, pebblejournal.Options{})
	require.NoError(t, err)
	last, err := st.LastSeq(ctx, "finished")
	require.NoError(t, err)
	sum, err := st.SummaryBefore(ctx, "finished", last)
	require.NoError(t, err)
	evs, err := st.Events(ctx, "finished", journal.EventQuery{After: sum.GetToSeq()})
	require.NoError(t, err)
	require.NoError(t, st.Fork(ctx, &messages.ForkRequest{ConversationId: "forked", Summary: sum, Events: evs,
		Status: messages.ConversationStatus_CONVERSATION_STATUS_IDLE, Metadata: map[string]string{"owner": "alice"},
		Origin: &messages.ForkOrigin{ConversationId: "finished", Seq: last}}))
	require.NoError(t, st.Close())

	r := cliRun(t, "", "show", "--dir", f.dir, "forked")
	requireOK(t, r)
	r = cliRun(t, "", "conversations", "--dir", f.dir, "--where", "owner=alice")
	requireOK(t, r)
	require.Len(t, outLines(r.stdout), 3, "finished and forked: %s", r.stdout)
	r = cliRun(t, "", "export", "--dir", f.dir, "forked")
	require.NotEqual(t, exitOK, r.code)
	require.Contains(t, r.stderr, "conversation forked is a fork (of finished): export does not carry forks")
	require.NotContains(t, r.stdout, `"type":"end"`, "no end line: an import would refuse the section")
	r = cliRun(t, "", "check", "--dir", f.dir)
	requireOK(t, r)
}
