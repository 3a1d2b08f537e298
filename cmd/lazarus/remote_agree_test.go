package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/server"
)

// TestTwoNodesOnOneCommandLine: --server (or --token) given before and
// after the command with two different values is a usage error, exit
// status 2, before any request, and the tokens are not echoed; the same
// value given twice is not an error.
func TestTwoNodesOnOneCommandLine(t *testing.T) {
	rt, err := lazarus.Open(lazarus.Options{Dir: t.TempDir(), Model: scripted.New(scripted.Options{}), IdleTimeout: -1})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, rt.Close()) })
	tokens, err := server.NewBearerTokens(map[string]agent.Identity{"ops-token": {UserID: "ops", Roles: []string{"operator"}}})
	require.NoError(t, err)
	var requests atomic.Int64
	api := server.New(rt, server.Options{Authenticator: tokens})
	node := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		api.ServeHTTP(w, r)
	}))
	t.Cleanup(node.Close)
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		api.ServeHTTP(w, r)
	}))
	t.Cleanup(other.Close)
	ctx := ctxT(t)

	r := cliCtx(ctx, "--server", other.URL, "conversations", "--server", node.URL, "--token", "ops-token")
	require.Equal(t, exitUsage, r.code, r.stderr)
	require.Empty(t, r.stdout)
	require.Contains(t, r.stderr, "lazarus conversations: --server given twice")

	r = cliCtx(ctx, "--token", "first-secret", "conversations", "--server", node.URL, "--token", "ops-token")
	require.Equal(t, exitUsage, r.code, r.stderr)
	require.Empty(t, r.stdout)
	require.Contains(t, r.stderr, "lazarus conversations: --token given twice")
	require.NotContains(t, r.stderr, "first-secret")
	require.NotContains(t, r.stderr, "ops-token")
	require.Zero(t, requests.Load(), "no request was sent")

	// The same node and token, given twice, are one.
	r = cliCtx(ctx, "--server", node.URL+"/", "--token", "ops-token", "conversations", "--server", node.URL, "--token", "ops-token")
	requireOK(t, r)
	require.NotZero(t, requests.Load())

	// --help still answers.
	r = cliCtx(ctx, "--server", other.URL, "conversations", "--server", node.URL, "--help")
	requireOK(t, r)
}

// TestScheduleCancelUnknownIDOnANode: --cancel of an id the conversation
// has no schedule of says through a node what it says offline, with the
// same exit status; a conversation the node does not have still says so.
func TestScheduleCancelUnknownIDOnANode(t *testing.T) {
	f := newFixture(t)
	local := cliRun(t, "", "schedules", "finished", "--dir", f.dir, "--cancel", "nope")
	require.Equal(t, exitNotFound, local.code, local.stderr)

	rt, err := lazarus.Open(lazarus.Options{Dir: f.dir, Model: scripted.New(scripted.Options{}), Tools: tools(), NoResume: true})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, rt.Close()) })
	tokens, err := server.NewBearerTokens(map[string]agent.Identity{"ops-token": {UserID: "ops", Roles: []string{"operator"}}})
	require.NoError(t, err)
	node := httptest.NewServer(server.New(rt, server.Options{Authenticator: tokens}))
	t.Cleanup(node.Close)
	ctx := ctxT(t)

	r := cliCtx(ctx, "schedules", "finished", "--cancel", "nope", "--server", node.URL, "--token", "ops-token")
	require.Equal(t, local.code, r.code, r.stderr)
	require.Empty(t, r.stdout)
	require.Equal(t, local.stderr, r.stderr)

	r = cliCtx(ctx, "schedules", "nobody", "--cancel", "nope", "--server", node.URL, "--token", "ops-token")
	require.Equal(t, exitNotFound, r.code, r.stderr)
	require.Contains(t, r.stderr, "lazarus schedules: no conversation nobody:")
	left, err := rt.Schedules(ctx, "finished")
	require.NoError(t, err)
	require.Len(t, left, 3, "nothing was cancelled")
}

// TestShowFromPastTheEnd: show --from at or past the last seq prints no
// event, says so with the last seq, and offers the page before it, in text
// and in --json, offline and through a node alike; following the offer
// reads the newest events.
func TestShowFromPastTheEnd(t *testing.T) {
	f := newFixture(t)
	cases := [][]string{
		{"show", "waiting", "--from", "100", "--limit", "2"},
		{"show", "waiting", "--from", "100", "--limit", "2", "--json"},
		{"show", "waiting", "--from", "100", "--limit", "0"},
	}
	local := make([]result, len(cases))
	for i, args := range cases {
		local[i] = cliRun(t, "", append(args, "--dir", f.dir)...)
		requireOK(t, local[i])
	}
	last := cliRun(t, "", "show", "waiting", "--dir", f.dir, "--json")
	requireOK(t, last)
	var doc struct {
		LastSeq    uint64 `json:"last_seq"`
		PrevBefore uint64 `json:"prev_before"`
		NextFrom   uint64 `json:"next_from"`
	}
	require.NoError(t, json.Unmarshal([]byte(last.stdout), &doc))
	require.NotZero(t, doc.LastSeq)

	require.Equal(t, []string{
		fmt.Sprintf("-- no events after --from 100 (the last seq is %d)", doc.LastSeq),
		fmt.Sprintf("-- older: --before %d", doc.LastSeq+1),
	}, outLines(local[0].stdout))
	require.NoError(t, json.Unmarshal([]byte(local[1].stdout), &doc))
	require.Equal(t, doc.LastSeq+1, doc.PrevBefore)
	require.Zero(t, doc.NextFrom)
	require.Equal(t, local[0].stdout, local[2].stdout)

	// --from the last seq itself: the same.
	r := cliRun(t, "", "show", "waiting", "--dir", f.dir, "--from", fmt.Sprint(doc.LastSeq))
	requireOK(t, r)
	require.Contains(t, outLines(r.stdout), fmt.Sprintf("-- older: --before %d", doc.LastSeq+1))

	// The offer reads the newest events.
	r = cliRun(t, "", "show", "waiting", "--dir", f.dir, "--before", fmt.Sprint(doc.LastSeq+1), "--limit", "2")
	requireOK(t, r)
	lines := outLines(r.stdout)
	require.Regexp(t, fmt.Sprintf(`^\s+%d `, doc.LastSeq), lines[1])

	rt, err := lazarus.Open(lazarus.Options{Dir: f.dir, Model: scripted.New(scripted.Options{}), Tools: tools(), NoResume: true})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, rt.Close()) })
	tokens, err := server.NewBearerTokens(map[string]agent.Identity{"ops-token": {UserID: "ops", Roles: []string{"operator"}}})
	require.NoError(t, err)
	node := httptest.NewServer(server.New(rt, server.Options{Authenticator: tokens}))
	t.Cleanup(node.Close)
	ctx := ctxT(t)
	for i, args := range cases {
		r := cliCtx(ctx, append(args, "--server", node.URL, "--token", "ops-token")...)
		requireOK(t, r)
		require.Equal(t, local[i].stdout, r.stdout, "%v", args)
	}
}
