package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// show of a fork, whose log starts after the summary it copied: a forward
// page from before its start shows its first events, and no page offers
// to go back past its start, where nothing is held.
func TestShowOfAForkPagesFromItsStart(t *testing.T) {
	f := newFixture(t)
	forkFinished(t, f)
	forkWhole(t, f)
	start := readForks(t, f.dir)["forked"].start
	require.Greater(t, start, uint64(1), "the fork's log starts after a summary")

	r := cliRun(t, "", "show", "forked", "--dir", f.dir, "--from", "0", "--limit", "1")
	requireOK(t, r)
	require.NotContains(t, r.stdout, "no events in this range")
	lines := outLines(r.stdout)
	require.Contains(t, strings.Join(lines, "\n"), "assistant_msg")
	require.NotContains(t, r.stdout, "-- older:")

	r = cliRun(t, "", "show", "forked", "--dir", f.dir)
	requireOK(t, r)
	require.NotContains(t, r.stdout, "-- older:", "nothing is held before the fork's start")

	r = cliRun(t, "", "show", "forked", "--dir", f.dir, "--from", "0", "--limit", "1", "--json")
	requireOK(t, r)
	var doc struct {
		Events     []json.RawMessage `json:"events"`
		PrevBefore uint64            `json:"prev_before"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &doc))
	require.Len(t, doc.Events, 1)
	require.Zero(t, doc.PrevBefore)

	// A conversation held from seq 1 pages as before.
	r = cliRun(t, "", "show", "whole", "--dir", f.dir, "--limit", "1")
	requireOK(t, r)
	require.Contains(t, r.stdout, "-- older: --before ")
	r = cliRun(t, "", "show", "whole", "--dir", f.dir, "--from", "1", "--limit", "1")
	requireOK(t, r)
	require.True(t, strings.HasPrefix(r.stdout, "     2  "), r.stdout)
	require.Contains(t, r.stdout, "-- newer: --from 2")
}

func TestForwardBefore(t *testing.T) {
	require.Equal(t, uint64(4), forwardBefore(0, 1, 3))
	require.Equal(t, uint64(8), forwardBefore(0, 5, 3), "from before a fork's start")
	require.Equal(t, uint64(10), forwardBefore(6, 5, 3))
	require.Zero(t, forwardBefore(^uint64(0)-1, 1, 3), "past the last seq there can be")
}
