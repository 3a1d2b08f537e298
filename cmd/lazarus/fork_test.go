package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/pebblejournal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/server"
)

// TestExportOfAFork: a forked conversation's log starts after the summary
// it copied: show, conversations --where and check read it, and export
// refuses it clearly (its format carries logs from seq 1, with the rows of
// their tool calls).
func TestExportOfAFork(t *testing.T) {
	f := newFixture(t)
	forkFinished(t, f)

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

// forkFinished forks the fixture's conversation "finished" as "forked",
// from its latest summary, and returns the fork's last seq and the number
// of events its log holds (fewer: those the summary covers are not copied).
func forkFinished(t *testing.T, f *fixture) (last uint64, held int) {
	t.Helper()
	ctx := context.Background()
	st, err := pebblejournal.Open(f.dir, pebblejournal.Options{})
	require.NoError(t, err)
	last, err = st.LastSeq(ctx, "finished")
	require.NoError(t, err)
	sum, err := st.SummaryBefore(ctx, "finished", last)
	require.NoError(t, err)
	require.Positive(t, sum.GetToSeq())
	evs, err := st.Events(ctx, "finished", journal.EventQuery{After: sum.GetToSeq()})
	require.NoError(t, err)
	require.NoError(t, st.Fork(ctx, &messages.ForkRequest{ConversationId: "forked", Summary: sum, Events: evs,
		Status: messages.ConversationStatus_CONVERSATION_STATUS_IDLE, Metadata: map[string]string{"owner": "alice"},
		Origin: &messages.ForkOrigin{ConversationId: "finished", Seq: last}}))
	require.NoError(t, st.Close())
	return last, len(evs)
}

// TestCountsOfAFork: stats and delete count the events a log holds, as
// check does, offline and through a node: a fork's log starts after the
// summary it copied. They added up last seqs, counting the events the
// fork's summary covers, which are in its source's log only.
func TestCountsOfAFork(t *testing.T) {
	f := newFixture(t)
	before := cliRun(t, "", "stats", "--dir", f.dir, "--json")
	requireOK(t, before)
	var s0 statsJSON
	require.NoError(t, json.Unmarshal([]byte(before.stdout), &s0))
	last, held := forkFinished(t, f)
	require.Less(t, uint64(held), last)

	var chk checkOutput
	r := cliRun(t, "", "check", "--dir", f.dir, "--json")
	requireOK(t, r)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &chk))
	require.Equal(t, int(s0.Events)+held, chk.Events, "check counts the events held")

	r = cliRun(t, "", "stats", "--dir", f.dir, "--json")
	requireOK(t, r)
	var s statsJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &s))
	require.Equal(t, uint64(chk.Events), s.Events, "stats counts what check counts")
	want := fmt.Sprintf("would delete conversation forked (idle, %d events, 0 pending calls)\n", held)
	r = cliRun(t, "", "delete", "--dir", f.dir, "forked")
	require.Equal(t, exitUsage, r.code)
	require.Equal(t, want, r.stdout)

	rt, err := lazarus.Open(lazarus.Options{Dir: f.dir, Model: scripted.New(scripted.Options{}), Tools: tools(), NoResume: true})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, rt.Close()) })
	tokens, err := server.NewBearerTokens(map[string]agent.Identity{"ops-token": {UserID: "ops", Roles: []string{"operator"}}})
	require.NoError(t, err)
	node := httptest.NewServer(server.New(rt, server.Options{Authenticator: tokens}))
	t.Cleanup(node.Close)
	r = cliRun(t, "", "stats", "--json", "--server", node.URL, "--token", "ops-token")
	requireOK(t, r)
	var sr statsJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &sr))
	require.Equal(t, s.Events, sr.Events, "through a node")
	r = cliRun(t, "", "delete", "forked", "--server", node.URL, "--token", "ops-token")
	require.Equal(t, exitUsage, r.code)
	require.Equal(t, want, r.stdout, "through a node")
}

// TestHeldEvents: the count of a log from every start to every end, with
// the reads it takes bounded by the bisection's.
func TestHeldEvents(t *testing.T) {
	for last := uint64(0); last <= 40; last++ {
		for start := uint64(1); start <= max(last, 1); start++ {
			reads := 0
			n, err := heldEvents(last, func(seq uint64) (bool, error) {
				require.True(t, seq >= 1 && seq <= last, "seq %d of a log ending at %d", seq, last)
				reads++
				return seq >= start, nil
			})
			require.NoError(t, err)
			if last == 0 {
				require.Zero(t, n)
				continue
			}
			require.Equal(t, last-start+1, n, "a log of %d..%d", start, last)
			require.LessOrEqual(t, reads, 8, "a log of %d..%d", start, last)
		}
	}
}
