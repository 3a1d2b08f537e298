package main

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
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
