package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/lazarusrt/lazarus/messages"
)

func TestConversations(t *testing.T) {
	f := newFixture(t)

	r := cliRun(t, "", "conversations", "--dir", f.dir)
	requireOK(t, r)
	lines := outLines(r.stdout)
	require.Len(t, lines, 4, r.stdout)
	require.Regexp(t, `^ID\s+STATUS\s+LAST_SEQ\s+PENDING\s+UPDATED$`, lines[0])
	// Ids in order; the fields the runtime wrote.
	require.Regexp(t, `^answered\s+idle\s+7\s+0\s+\d{4}-`, lines[1])
	require.Regexp(t, `^finished\s+idle\s+5\s+0\s+\d{4}-`, lines[2])
	require.Regexp(t, `^waiting\s+suspended\s+7\s+1\s+\d{4}-`, lines[3])
	alias := cliRun(t, "", "list", "--dir", f.dir)
	requireOK(t, alias)
	require.Equal(t, r.stdout, alias.stdout, "list is conversations")

	t.Run("pages", func(t *testing.T) {
		r := cliRun(t, "", "conversations", "--dir", f.dir, "--limit", "2")
		requireOK(t, r)
		require.Contains(t, r.stdout, "answered")
		require.Contains(t, r.stdout, "finished")
		require.NotContains(t, r.stdout, "waiting")
		require.True(t, strings.HasSuffix(r.stdout, "next cursor: finished\n"), r.stdout)
		r = cliRun(t, "", "conversations", "--dir", f.dir, "--limit", "2", "--cursor", "finished")
		requireOK(t, r)
		require.Contains(t, r.stdout, "waiting")
		require.NotContains(t, r.stdout, "next cursor")
	})

	t.Run("where", func(t *testing.T) {
		r := cliRun(t, "", "conversations", "--dir", f.dir, "--where", "owner=alice")
		requireOK(t, r)
		lines := outLines(r.stdout)
		require.Len(t, lines, 2, r.stdout)
		require.Regexp(t, `^finished\s+idle\s+5\s+`, lines[1])
		r = cliRun(t, "", "conversations", "--dir", f.dir, "--where", "owner=bob")
		requireOK(t, r)
		require.Len(t, outLines(r.stdout), 1, r.stdout)
		r = cliRun(t, "", "conversations", "--dir", f.dir, "--where", "owner")
		require.NotEqual(t, 0, r.code, r.stderr)
		require.Contains(t, r.stderr, "--where must be KEY=VALUE")
	})

	t.Run("json", func(t *testing.T) {
		r := cliRun(t, "", "conversations", "--dir", f.dir, "--json", "--limit", "2", "--cursor", "answered")
		requireOK(t, r)
		var doc struct {
			Conversations []conversationJSON `json:"conversations"`
			NextCursor    string             `json:"next_cursor"`
		}
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &doc))
		require.Equal(t, "", doc.NextCursor)
		require.Len(t, doc.Conversations, 2)
		w := doc.Conversations[1]
		require.Equal(t, "waiting", w.ID)
		require.Equal(t, "suspended", w.Status)
		require.Equal(t, uint64(7), w.LastSeq)
		require.Equal(t, 1, w.PendingCalls)
		require.NotEmpty(t, w.Created)
	})
}

func TestShow(t *testing.T) {
	f := newFixture(t)

	r := cliRun(t, "", "show", "waiting", "--dir", f.dir)
	requireOK(t, r)
	lines := outLines(r.stdout)
	require.Len(t, lines, 7, r.stdout)
	want := []string{
		`^\s+1  \S+Z\s+user_msg\s+"Refund order 7, please\." from operator-test$`,
		`^\s+2  \S+Z\s+assistant_msg\s+"Checking the order\." calls lookup\(\w+\)$`,
		`^\s+3  \S+Z\s+tool_call\s+lookup id=\w+ server args=\{"order":7\}$`,
		`^\s+4  \S+Z\s+tool_result\s+lookup id=\w+ -> \{"order":42,"amount":120\}$`,
		`^\s+5  \S+Z\s+assistant_msg\s+"I need an approval\." calls approve\(` + f.waitingCall + `\)$`,
		`^\s+6  \S+Z\s+tool_call\s+approve id=` + f.waitingCall + ` human args=\{"amount":50\}$`,
		`^\s+7  \S+Z\s+suspension\s+waiting on approve id=` + f.waitingCall + ` "Approve the refund \{\\"amount\\":50\}\?"$`,
	}
	for i, re := range want {
		require.Regexp(t, re, lines[i])
	}

	t.Run("metadata comes first", func(t *testing.T) {
		r := cliRun(t, "", "show", "finished", "--dir", f.dir)
		requireOK(t, r)
		lines := outLines(r.stdout)
		require.Len(t, lines, 7, r.stdout)
		require.Equal(t, `-- metadata "display name": "Order 42"`, lines[0], "sorted by key, quoted where needed")
		require.Equal(t, `-- metadata owner: "alice"`, lines[1])
		require.Regexp(t, `^\s+1  \S+Z\s+user_msg`, lines[2])
		r = cliRun(t, "", "show", "finished", "--dir", f.dir, "--json")
		requireOK(t, r)
		var doc struct {
			Metadata map[string]string `json:"metadata"`
		}
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &doc))
		require.Equal(t, map[string]string{"display name": "Order 42", "owner": "alice"}, doc.Metadata)
		r = cliRun(t, "", "show", "waiting", "--dir", f.dir, "--json")
		requireOK(t, r)
		require.Contains(t, r.stdout, `"metadata": {}`, "present, and empty, without metadata")
	})

	t.Run("resolution and multi-line text stay one line each", func(t *testing.T) {
		r := cliRun(t, "", "show", "answered", "--dir", f.dir)
		requireOK(t, r)
		require.Regexp(t, `resolution\s+id=`+f.answeredCall+` resolved by operator-test`, r.stdout)
		require.Regexp(t, `tool_result\s+approve id=`+f.answeredCall+` -> \{"approved":true\}`, r.stdout)
		r = cliRun(t, "", "show", "finished", "--dir", f.dir)
		requireOK(t, r)
		require.Contains(t, r.stdout, `"Order 42 is on its way.\nAnything else?"`)
		require.Len(t, outLines(r.stdout), 7, "its two metadata lines and five events")
	})

	t.Run("newest page, then older", func(t *testing.T) {
		r := cliRun(t, "", "show", "waiting", "--dir", f.dir, "--limit", "3")
		requireOK(t, r)
		lines := outLines(r.stdout)
		require.Len(t, lines, 4)
		require.Regexp(t, `^\s+5 `, lines[0])
		require.Regexp(t, `^\s+7 `, lines[2])
		require.Equal(t, "-- older: --before 5", lines[3])
		r = cliRun(t, "", "show", "waiting", "--dir", f.dir, "--limit", "3", "--before", "5")
		requireOK(t, r)
		lines = outLines(r.stdout)
		require.Regexp(t, `^\s+2 `, lines[0])
		require.Regexp(t, `^\s+4 `, lines[2])
		require.Equal(t, "-- older: --before 2", lines[3])
		require.Equal(t, "-- newer: --from 4", lines[4])
	})

	t.Run("forward from a seq", func(t *testing.T) {
		r := cliRun(t, "", "show", "waiting", "--dir", f.dir, "--from", "2", "--limit", "2")
		requireOK(t, r)
		lines := outLines(r.stdout)
		require.Len(t, lines, 4)
		require.Regexp(t, `^\s+3 `, lines[0])
		require.Regexp(t, `^\s+4 `, lines[1])
		require.Equal(t, "-- older: --before 3", lines[2], "seqs 1 and 2 are held")
		require.Equal(t, "-- newer: --from 4", lines[3])
		r = cliRun(t, "", "show", "waiting", "--dir", f.dir, "--from", "7")
		requireOK(t, r)
		require.Equal(t, "-- no events after --from 7 (the last seq is 7)\n-- older: --before 8\n", r.stdout)
		for _, fb := range [][2]string{{"3", "2"}, {"3", "4"}, {"3", "3"}} {
			r = cliRun(t, "", "show", "waiting", "--dir", f.dir, "--from", fb[0], "--before", fb[1])
			require.Equal(t, exitUsage, r.code, "--from %s --before %s: %s", fb[0], fb[1], r.stdout)
			require.Contains(t, r.stderr, "leaves no seq after --from")
		}
		r = cliRun(t, "", "show", "waiting", "--dir", f.dir, "--from", "3", "--before", "5")
		requireOK(t, r)
		require.Regexp(t, `^\s+4 `, outLines(r.stdout)[0], "one seq between them")
	})

	t.Run("json", func(t *testing.T) {
		r := cliRun(t, "", "show", "waiting", "--dir", f.dir, "--json", "--from", "5")
		requireOK(t, r)
		var doc struct {
			ConversationID string            `json:"conversation_id"`
			LastSeq        uint64            `json:"last_seq"`
			Events         []json.RawMessage `json:"events"`
			NextFrom       uint64            `json:"next_from"`
			PrevBefore     uint64            `json:"prev_before"`
		}
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &doc))
		require.Equal(t, "waiting", doc.ConversationID)
		require.Equal(t, uint64(7), doc.LastSeq)
		require.Len(t, doc.Events, 2)
		require.Zero(t, doc.NextFrom)
		require.Equal(t, uint64(6), doc.PrevBefore, "seqs 1..5 are held")
		ev := &messages.Event{}
		require.NoError(t, protojson.Unmarshal(doc.Events[1], ev))
		require.Equal(t, uint64(7), ev.GetSeq())
		require.Equal(t, f.waitingCall, ev.GetSuspension().GetPending()[0].GetToolCallId())
	})

	t.Run("unknown conversation", func(t *testing.T) {
		r := cliRun(t, "", "show", "nobody", "--dir", f.dir)
		require.Equal(t, exitNotFound, r.code)
		require.Contains(t, r.stderr, "no conversation nobody")
	})

	t.Run("id that needs --", func(t *testing.T) {
		r := cliRun(t, "", "show", "--dir", f.dir, "--", "-x")
		require.Equal(t, exitNotFound, r.code)
		require.Contains(t, r.stderr, "no conversation -x")
	})
}

func TestStats(t *testing.T) {
	f := newFixture(t)
	r := cliRun(t, "", "stats", "--dir", f.dir)
	requireOK(t, r)
	require.Contains(t, r.stdout, "conversations   3 (active 0, suspended 1, idle 2, ended 0)\n")
	require.Contains(t, r.stdout, "events          19\n")
	require.Contains(t, r.stdout, "pending calls   1 (human 1, server 0)\n")
	require.Contains(t, r.stdout, "deadlines       1 (overdue 0)\n")
	require.Regexp(t, `bytes on disk   [1-9]\d* \(`, r.stdout)

	r = cliRun(t, "", "stats", "--dir", f.dir, "--json")
	requireOK(t, r)
	var s statsJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &s))
	require.Equal(t, 3, s.Conversations)
	require.Equal(t, map[string]int{"suspended": 1, "idle": 2}, s.ByStatus)
	require.Equal(t, uint64(19), s.Events)
	require.Equal(t, 1, s.PendingHuman)
	require.Equal(t, 1, s.Deadlines)
	size, err := diskUsage(f.dir)
	require.NoError(t, err)
	require.Positive(t, s.BytesOnDisk)
	require.InDelta(t, size, s.BytesOnDisk, float64(size), "same order of magnitude as the directory")
}
