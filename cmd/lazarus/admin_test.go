package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/pebblejournal"
	"github.com/lazarusrt/lazarus/messages"
)

func TestDelete(t *testing.T) {
	f := newFixture(t)
	exported := exportOf(t, f, "waiting")

	r := cliRun(t, "", "delete", "waiting", "--dir", f.dir)
	require.Equal(t, exitUsage, r.code)
	require.Equal(t, "would delete conversation waiting (suspended, 7 events, 1 pending calls)\n", r.stdout)
	require.Contains(t, r.stderr, "refusing to delete without --yes")
	require.Equal(t, exported, exportOf(t, f, "waiting"), "nothing deleted")

	r = cliRun(t, "", "delete", "waiting", "--yes", "--dir", f.dir)
	requireOK(t, r)
	require.Equal(t, "deleted conversation waiting (suspended, 7 events, 1 pending calls)\n", r.stdout)

	st, err := pebblejournal.Open(f.dir, pebblejournal.Options{})
	require.NoError(t, err)
	ctx := ctxT(t)
	_, err = st.Conversation(ctx, "waiting")
	require.ErrorIs(t, err, journal.ErrDeleted, "the lookup finds the tombstone")
	_, err = st.ToolCall(ctx, f.waitingCall)
	require.ErrorIs(t, err, journal.ErrNotFound)
	evs, err := st.Events(ctx, "waiting", journal.EventQuery{})
	require.NoError(t, err)
	require.Empty(t, evs)
	_, err = st.Conversation(ctx, "finished")
	require.NoError(t, err, "other conversations stay")
	require.NoError(t, st.Close())

	r = cliRun(t, "", "delete", "waiting", "--yes", "--dir", f.dir)
	require.Equal(t, exitNotFound, r.code)
	require.Contains(t, r.stderr, "no conversation waiting")

	r = cliRun(t, "", "resolve", f.waitingCall, "--result", "true", "--dir", f.dir)
	require.Equal(t, exitStale, r.code, "the deleted conversation's call is gone")

	r = cliRun(t, exported, "import", "--dir", f.dir)
	require.Equal(t, exitError, r.code)
	require.Contains(t, r.stderr, "nothing imported: conversation waiting was deleted in the target, and a deleted id can never be written again")
}

// TestDeleteRecordsWithoutARow: an id with records but no conversation
// row (metadata left by a failed create) is deleted as the Store deletes
// it: the records go and the id is tombstoned.
func TestDeleteRecordsWithoutARow(t *testing.T) {
	dir := t.TempDir()
	ctx := ctxT(t)
	st, err := pebblejournal.Open(dir, pebblejournal.Options{})
	require.NoError(t, err)
	require.NoError(t, st.PutMetadata(ctx, "stray", map[string]string{"owner": "u"}))
	require.NoError(t, st.Close())

	r := cliRun(t, "", "delete", "stray", "--dir", dir)
	require.Equal(t, exitUsage, r.code)
	require.Equal(t, "would delete the records stored under stray (no conversation row, 1 metadata keys, 0 events, 0 pending calls)\n", r.stdout)
	r = cliRun(t, "", "delete", "stray", "--yes", "--dir", dir)
	requireOK(t, r)
	require.Equal(t, "deleted the records stored under stray (no conversation row, 1 metadata keys, 0 events, 0 pending calls)\n", r.stdout)

	st, err = pebblejournal.Open(dir, pebblejournal.Options{})
	require.NoError(t, err)
	md, err := st.Metadata(ctx, "stray")
	if err == nil {
		require.Empty(t, md, "the metadata is gone")
	}
	_, err = st.Conversation(ctx, "stray")
	require.ErrorIs(t, err, journal.ErrDeleted, "the id is tombstoned")
	require.NoError(t, st.Close())

	for _, args := range [][]string{{"delete", "nothing-here"}, {"delete", "nothing-here", "--yes"}} {
		r = cliRun(t, "", append(args, "--dir", dir)...)
		require.Equal(t, exitNotFound, r.code, "%v", args)
		require.Contains(t, r.stderr, "no conversation nothing-here")
	}
}

func TestGCAudit(t *testing.T) {
	f := newFixture(t)
	countAudit := func() int {
		st, err := pebblejournal.Open(f.dir, pebblejournal.Options{Audit: true})
		require.NoError(t, err)
		defer func() { require.NoError(t, st.Close()) }()
		n := 0
		for _, id := range []string{"finished", "waiting", "answered"} {
			rows, err := st.ModelCalls(ctxT(t), id)
			require.NoError(t, err)
			n += len(rows)
		}
		return n
	}
	// One audit row per model call: 2 per conversation.
	require.Equal(t, 6, countAudit())

	r := cliRun(t, "", "gc-audit", "--older-than", "1h", "--dir", f.dir)
	requireOK(t, r)
	require.Regexp(t, `^deleted 0 audit rows older than 1h0m0s \(created before \S+Z\) in 0 conversations\n$`, r.stdout)

	r = cliRun(t, "", "gc-audit", "--older-than", "0s", "--dry-run", "--conversation", "waiting", "--dir", f.dir)
	requireOK(t, r)
	require.Regexp(t, `^would delete 2 audit rows older than 0s .* in 1 conversations\n$`, r.stdout)
	require.Equal(t, 6, countAudit())

	r = cliRun(t, "", "gc-audit", "--older-than", "0s", "--conversation", "waiting", "--dir", f.dir)
	requireOK(t, r)
	require.Regexp(t, `^deleted 2 audit rows`, r.stdout)
	require.Equal(t, 4, countAudit())

	r = cliRun(t, "", "gc-audit", "--older-than", "0s", "--dir", f.dir)
	requireOK(t, r)
	require.Regexp(t, `^deleted 4 audit rows .* in 2 conversations\n$`, r.stdout)
	require.Zero(t, countAudit())

	r = cliRun(t, "", "gc-audit", "--older-than", "-1h", "--dir", f.dir)
	require.Equal(t, exitUsage, r.code)
	r = cliRun(t, "", "gc-audit", "--older-than", "1h", "--conversation", "nobody", "--dir", f.dir)
	require.Equal(t, exitNotFound, r.code)
}

// TestDeleteRemovesEverythingItOwns: delete removes what its help lists
// (summaries, metadata, audit rows, deadlines) and the conversation's
// schedules, and leaves the others' alone.
func TestDeleteRemovesEverythingItOwns(t *testing.T) {
	f := newFixture(t)
	requireOK(t, cliRun(t, "", "delete", "finished", "--yes", "--dir", f.dir))
	requireOK(t, cliRun(t, "", "delete", "waiting", "--yes", "--dir", f.dir))

	st, err := pebblejournal.Open(f.dir, pebblejournal.Options{Audit: true})
	require.NoError(t, err)
	defer func() { require.NoError(t, st.Close()) }()
	ctx := ctxT(t)
	_, err = st.LatestSummary(ctx, "finished")
	require.Error(t, err, "no summary left")
	md, err := st.Metadata(ctx, "finished")
	require.NoError(t, err)
	require.Empty(t, md)
	for _, id := range []string{"finished", "waiting"} {
		rows, err := st.ModelCalls(ctx, id)
		require.NoError(t, err)
		require.Empty(t, rows, id)
	}
	rows, err := st.ModelCalls(ctx, "answered")
	require.NoError(t, err)
	require.NotEmpty(t, rows, "the other conversations' audit rows stay")
	deadlines := 0
	require.NoError(t, st.Deadlines(ctx, time.Time{}, func(*messages.Deadline) error { deadlines++; return nil }))
	require.Zero(t, deadlines, "waiting's deadline is gone")
	schedules, err := st.ConversationSchedules(ctx, "finished")
	require.NoError(t, err)
	require.Empty(t, schedules)
	n := 0
	require.NoError(t, st.ScheduleTimes(ctx, func(string, string, time.Time) error { n++; return nil }))
	require.Zero(t, n, "no schedule left in the time index")
}
