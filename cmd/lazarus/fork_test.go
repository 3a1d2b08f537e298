package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/pebblejournal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/server"
)

// TestExportOfAFork: export carries forks and import writes them back as
// they were: a fork from a summary (its log starts after it) that went on
// with a call of its own, pending, and a fork from seq 1 whose copied
// tool_call events have no rows in it (their rows are the source's).
// `export --all` stopped at the first fork, and import refused a row with a
// fork origin, so a store holding a fork could not be moved at all. The
// fork is read back the same whether its source is in the export or not.
func TestExportOfAFork(t *testing.T) {
	f := newFixture(t)
	forkFinished(t, f)
	forkWhole(t, f)
	ctx := ctxT(t)
	// The fork from the summary goes on: a call of its own, pending.
	model := scripted.New(scripted.Options{})
	model.Push("forked", scripted.Reply("I need an approval.", scripted.Call("approve", `{"amount":5}`)))
	rt, err := lazarus.Open(lazarus.Options{Dir: f.dir, Model: model, Tools: tools(), IdleTimeout: -1, NoResume: true})
	require.NoError(t, err)
	_, err = rt.Send(ctx, "forked", "Refund 5.", user)
	require.NoError(t, err)
	awaitEvent(t, rt, "forked", func(ev *messages.Event) bool { return ev.GetSuspension() != nil })
	require.NoError(t, rt.Close())

	r := cliRun(t, "", "export", "--dir", f.dir, "--all")
	requireOK(t, r)
	src := r.stdout
	require.Contains(t, src, `"forked_from":{"conversation_id":"finished"`)
	want := readForks(t, f.dir)
	require.Positive(t, want["whole"].copiedCalls, "the whole fork copied a tool call, whose row is the source's")
	require.Positive(t, want["forked"].start, "the fork's log starts after the summary it copied")
	require.Positive(t, want["forked"].ownCalls, "the fork has a call of its own")

	dir := filepath.Join(t.TempDir(), "moved")
	r = cliRun(t, src, "import", "--dir", dir)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.NotContains(t, r.stderr, "created time", "every row has its created time back")
	require.Equal(t, want, readForks(t, dir), "the forks read as before")
	r = cliRun(t, "", "export", "--dir", dir, "--all")
	requireOK(t, r)
	require.Equal(t, withoutUpdated(src), withoutUpdated(r.stdout), "the import exports as the source did")
	r = cliRun(t, "", "check", "--dir", dir)
	requireOK(t, r)

	// Without its source.
	alone := exportOf(t, f, "forked", "whole")
	dir = filepath.Join(t.TempDir(), "alone")
	r = cliRun(t, alone, "import", "--dir", dir)
	require.Equal(t, exitOK, r.code, r.stderr)
	got := readForks(t, dir)
	require.Equal(t, want["forked"], got["forked"])
	require.Equal(t, want["whole"], got["whole"])
	r = cliRun(t, "", "check", "--dir", dir)
	requireOK(t, r)
}

// forkWhole forks the fixture's conversation "finished" as "whole", from
// seq 1 (no summary) to its last seq: its copied tool_call events have
// their rows in the source.
func forkWhole(t *testing.T, f *fixture) {
	t.Helper()
	ctx := context.Background()
	st, err := pebblejournal.Open(f.dir, pebblejournal.Options{})
	require.NoError(t, err)
	all, err := st.Events(ctx, "finished", journal.EventQuery{})
	require.NoError(t, err)
	last := all[len(all)-1].GetSeq()
	require.NoError(t, st.Fork(ctx, &messages.ForkRequest{ConversationId: "whole", Events: all,
		Status: messages.ConversationStatus_CONVERSATION_STATUS_IDLE, Settings: map[string]string{"model": "m1"},
		Origin: &messages.ForkOrigin{ConversationId: "finished", Seq: last}}))
	require.NoError(t, st.Close())
}

// forkRead is what a fork reads as: its row's origin and status, its log
// and where it starts, what a revival reads, its rows, and its summaries.
type forkRead struct {
	origin, status, log, revival, rows, summaries string
	start                                         uint64
	copiedCalls, ownCalls                         int
}

// readForks reads the forks of the store in dir ("forked" and "whole").
func readForks(t *testing.T, dir string) map[string]forkRead {
	t.Helper()
	ctx := ctxT(t)
	st, err := pebblejournal.Open(dir, pebblejournal.Options{})
	require.NoError(t, err)
	defer func() { require.NoError(t, st.Close()) }()
	js := func(m proto.Message) string { return protojson.Format(m) }
	out := map[string]forkRead{}
	for _, id := range []string{"forked", "whole"} {
		var fr forkRead
		row, err := st.Conversation(ctx, id)
		require.NoError(t, err)
		fr.origin, fr.status = js(row.GetForkedFrom()), row.GetStatus().String()
		evs, err := st.Events(ctx, id, journal.EventQuery{})
		require.NoError(t, err)
		require.NotEmpty(t, evs)
		fr.start = evs[0].GetSeq() - 1
		for _, ev := range evs {
			fr.log += js(ev)
			tc := ev.GetToolCall()
			if tc == nil {
				continue
			}
			rec, err := st.ToolCall(ctx, tc.GetCall().GetId())
			if ev.GetSeq() <= row.GetForkedFrom().GetSeq() {
				fr.copiedCalls++
				if err == nil {
					require.NotEqual(t, id, rec.GetConversationId(), "a copied call's row is not the fork's")
				}
				continue
			}
			require.NoError(t, err)
			fr.ownCalls++
			fr.rows += js(rec)
		}
		sum, since, err := st.LoadSince(ctx, id)
		require.NoError(t, err)
		fr.revival = js(sum)
		for _, ev := range since {
			fr.revival += js(ev)
		}
		for s, err := st.LatestSummary(ctx, id); err == nil; s, err = st.SummaryBefore(ctx, id, s.GetToSeq()) {
			fr.summaries += js(s)
		}
		out[id] = fr
	}
	return out
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
