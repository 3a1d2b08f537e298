package main

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/server"
)

// TestSendRefusesBadInputBeforeWriting: a send to a new conversation with
// an argument the node would refuse is a usage error found before the
// conversation is created, so nothing is written.
func TestSendRefusesBadInputBeforeWriting(t *testing.T) {
	rt, err := lazarus.Open(lazarus.Options{Dir: t.TempDir(), Model: scripted.New(scripted.Options{}), IdleTimeout: -1})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, rt.Close()) })
	tokens, err := server.NewBearerTokens(map[string]agent.Identity{"ops-token": {UserID: "ops", Roles: []string{"operator"}}})
	require.NoError(t, err)
	node := httptest.NewServer(server.New(rt, server.Options{Authenticator: tokens}))
	t.Cleanup(node.Close)
	ctx := ctxT(t)
	as := func(args ...string) result {
		return cliCtx(ctx, append(args, "--server", node.URL, "--token", "ops-token")...)
	}

	for _, args := range [][]string{
		{"send", "hello", "--request-id", strings.Repeat("r", 300)},
		{"send", "hello", "--request-id", "bad\xffutf8"},
		{"send", "hello", "--request-id", ""},
		{"send", "bad\xffutf8"},
		{"send", strings.Repeat("long ", 1<<18)},
	} {
		r := as(args...)
		require.Equal(t, exitUsage, r.code, "%v: %s", args, r.stderr)
		require.Empty(t, r.stdout)
	}
	r := as("conversations")
	requireOK(t, r)
	require.Equal(t, 1, strings.Count(r.stdout, "\n"), "no conversation was created:\n%s", r.stdout)

	r = as("send", "hello", "--request-id", "k1")
	requireOK(t, r)
	require.Regexp(t, sentLine, r.stdout)
}

// TestServerModeMatchesLocal: on the same store, the commands that work on
// a live node print what they print offline, with the same exit statuses.
func TestServerModeMatchesLocal(t *testing.T) {
	f := newFixture(t)
	now := time.Now()
	cases := [][]string{
		{"conversations"}, {"conversations", "--json"}, {"conversations", "--limit", "1"},
		{"conversations", "--where", "owner=alice"}, {"conversations", "--limit", "3"},
		{"conversations", "--where", "owner=alice", "--limit", "1", "--json"},
		{"show", "finished"}, {"show", "finished", "--json"}, {"show", "waiting", "--limit", "3"},
		{"show", "waiting", "--from", "2", "--limit", "2"}, {"show", "waiting", "--before", "5", "--limit", "2", "--json"},
		{"show", "nobody"},
		{"pending"}, {"pending", "--json"}, {"pending", "--conversation", "waiting"}, {"pending", "--conversation", "nobody"},
		{"resolve", "call_unknown", "--result", "true"}, {"resolve", f.answeredCall, "--result", "true"},
		{"delete", "finished"}, {"delete", "nobody", "--yes"},
		{"tail", "nobody"}, {"tail", "waiting", "--max", "3"}, {"tail", "waiting", "--from", "5", "--json", "--max", "2"},
	}
	local := make([]result, len(cases))
	for i, args := range cases {
		local[i] = cliAt(t, now, append(args, "--dir", f.dir)...)
	}

	rt, err := lazarus.Open(lazarus.Options{Dir: f.dir, Model: scripted.New(scripted.Options{}), Tools: tools(), NoResume: true})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, rt.Close()) })
	tokens, err := server.NewBearerTokens(map[string]agent.Identity{"ops-token": {UserID: "ops", Roles: []string{"operator"}}})
	require.NoError(t, err)
	node := httptest.NewServer(server.New(rt, server.Options{Authenticator: tokens}))
	t.Cleanup(node.Close)
	for i, args := range cases {
		r := cliAt(t, now, append(args, "--server", node.URL, "--token", "ops-token")...)
		require.Equal(t, local[i].code, r.code, "%v: local stderr %q, remote stderr %q", args, local[i].stderr, r.stderr)
		require.Equal(t, local[i].stdout, r.stdout, "%v", args)
	}
}

// TestResolveNullOnANode: a node takes any JSON result but null (the API
// reads it as none), so resolve --server refuses --result null as a usage
// error before any request: the call stays pending. Offline, null is a
// result like any other.
func TestResolveNullOnANode(t *testing.T) {
	f := newFixture(t)
	rt, err := lazarus.Open(lazarus.Options{Dir: f.dir, Model: scripted.New(scripted.Options{}), Tools: tools(), NoResume: true})
	require.NoError(t, err)
	tokens, err := server.NewBearerTokens(map[string]agent.Identity{"ops-token": {UserID: "ops", Roles: []string{"operator"}}})
	require.NoError(t, err)
	node := httptest.NewServer(server.New(rt, server.Options{Authenticator: tokens}))
	ctx := ctxT(t)

	for _, result := range []string{"null", " null "} {
		r := cliCtx(ctx, "resolve", f.waitingCall, "--result", result, "--server", node.URL, "--token", "ops-token")
		require.Equal(t, exitUsage, r.code, "%q: %s %s", result, r.stderr, r.stdout)
		require.Contains(t, r.stderr, "any JSON value but null")
		require.Empty(t, r.stdout)
	}
	row, err := rt.Store().ToolCall(ctx, f.waitingCall)
	require.NoError(t, err)
	require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING, row.GetStatus())
	node.Close()
	require.NoError(t, rt.Close())

	r := cliCtx(ctx, "resolve", f.waitingCall, "--result", "null", "--dir", f.dir)
	requireOK(t, r)
	require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED, readCall(t, f.dir, f.waitingCall).GetStatus())
}

// TestPendingJSONArgsMatchOnANode: pending --json prints a call's
// arguments as the same text offline and with --server, whatever their
// spacing or the characters they hold: the node's API compacts them and
// escapes <, > and & (json.RawMessage), which the store keeps as the model
// wrote them.
func TestPendingJSONArgsMatchOnANode(t *testing.T) {
	dir := t.TempDir()
	model := scripted.New(scripted.Options{})
	const args = `{ "amount": 50, "note": "<b> & \u00e9 \\u003c", "z": [1, 2.50] }`
	model.Push("waiting", scripted.Reply("I need an approval.", scripted.Call("approve", args)))
	rt, err := lazarus.Open(lazarus.Options{Dir: dir, Model: model, Tools: tools(), IdleTimeout: -1})
	require.NoError(t, err)
	ctx := ctxT(t)
	_, err = rt.Send(ctx, "waiting", "Refund order 7, please.", user)
	require.NoError(t, err)
	awaitEvent(t, rt, "waiting", func(ev *messages.Event) bool { return ev.GetSuspension() != nil })
	require.NoError(t, rt.Close())

	now := time.Now()
	local := cliAt(t, now, "pending", "--json", "--dir", dir)
	requireOK(t, local)

	rt, err = lazarus.Open(lazarus.Options{Dir: dir, Model: scripted.New(scripted.Options{}), Tools: tools(), NoResume: true})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, rt.Close()) })
	tokens, err := server.NewBearerTokens(map[string]agent.Identity{"ops-token": {UserID: "ops", Roles: []string{"operator"}}})
	require.NoError(t, err)
	node := httptest.NewServer(server.New(rt, server.Options{Authenticator: tokens}))
	t.Cleanup(node.Close)
	remote := cliAt(t, now, "pending", "--json", "--server", node.URL, "--token", "ops-token")
	requireOK(t, remote)
	require.Equal(t, local.stdout, remote.stdout)
	require.Contains(t, local.stdout, `"args": "{\"amount\":50,\"note\":\"<b> & \\u00e9 \\\\u003c\",\"z\":[1,2.50]}"`)
}
