package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestServeDocsExample: the README's "Run a node" as written. The
// project's docs/serve.example.json and docs/tokens.example.json, as they
// are, start a node that prints the README's progress lines; then the
// README's operator session through it with the example tokens: ops sends
// a call of approve_refund, carol (an approver) resolves it, a second
// answer is stale (exit 3), and ops shows, lists and deletes the
// conversation.
func TestServeDocsExample(t *testing.T) {
	// The files are copied side by side, so that the store (dir "data",
	// relative to the file) is made in a temporary directory, not in docs/.
	home := t.TempDir()
	for _, name := range []string{"serve.example.json", "tokens.example.json"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "docs", name))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(home, name), b, 0o600))
	}
	cfg, err := loadConfig(filepath.Join(home, "serve.example.json"))
	require.NoError(t, err, "the example configuration is accepted as it is")
	require.Equal(t, defaultListen, cfg.Listen, "the example listens where the README says")

	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	stderr := &lockedBuffer{}
	c := newCLI(nil, &lockedBuffer{}, stderr)
	c.getenv = func(string) string { return "" }
	done := make(chan error, 1)
	go func() {
		done <- c.serve(ctx, c.newFlags(serveCmd), []string{"--config", filepath.Join(home, "serve.example.json"),
			"--tokens", filepath.Join(home, "tokens.example.json"), "--listen", "127.0.0.1:0"})
	}()
	var url string
	// The console's line is the last one printed before serving.
	require.Eventually(t, func() bool {
		out := stderr.String()
		if !strings.Contains(out, "lazarus serve: web console at ") {
			return len(done) > 0
		}
		for _, line := range strings.Split(out, "\n") {
			if addr, ok := strings.CutPrefix(line, "lazarus serve: listening on "); ok {
				url = addr
			}
		}
		return true
	}, wait, 10*time.Millisecond)
	require.NotEmpty(t, url, "serve ended: %s", stderr)
	out := stderr.String()
	for _, line := range []string{
		"lazarus serve: opening the store: pebble directory " + filepath.Join(home, "data") + "\n",
		"lazarus serve: model: scripted (the demo model: \"/call TOOL {JSON}\" calls a tool, anything else is echoed)\n",
		"lazarus serve: model timeout: 10m0s\n",
		"lazarus serve: tool timeout: 10m0s\n",
		"lazarus serve: streams per conversation: at most 1024\n",
		"lazarus serve: default settings: system prompt of 73 bytes, model \"\", tool choice \"\"\n",
		"lazarus serve: tool approve_refund: human\n",
		"lazarus serve: tool confirm: human\n",
		"lazarus serve: 3 tokens\n",
		"lazarus serve: listening on http://127.0.0.1:",
		"lazarus serve: web console at http://127.0.0.1:",
	} {
		require.Contains(t, out, line)
	}

	env := map[string]string{envServer: url, envToken: "replace-with-a-long-random-token-3"}
	lz := func(args ...string) result {
		var o, e lockedBuffer
		cl := newCLI(strings.NewReader(""), &o, &e)
		cl.getenv = func(k string) string { return env[k] }
		code := cl.run(ctx, args)
		return result{o.String(), e.String(), code}
	}
	r := lz("send", `/call approve_refund {"order": 42, "amount": 12}`)
	requireOK(t, r)
	m := sentLine.FindStringSubmatch(r.stdout)
	require.NotNil(t, m, r.stdout)
	require.Equal(t, "1", m[1])
	conv := m[2]
	require.True(t, strings.HasPrefix(conv, "c-"), conv)

	var call string
	require.Eventually(t, func() bool {
		r := lz("pending")
		if r.code != exitOK {
			return false
		}
		for _, f := range strings.Fields(r.stdout) {
			if strings.HasPrefix(f, "call_") {
				call = f
				return true
			}
		}
		return false
	}, wait, 10*time.Millisecond)
	require.Contains(t, lz("pending").stdout, "Refund 12 on order 42?", "the example's prompt template")

	env[envToken] = "replace-with-a-long-random-token-2"
	r = lz("resolve", call, "--result", `{"approved": true}`)
	requireOK(t, r)
	require.Contains(t, r.stdout, "resolved "+call+" by carol")
	r = lz("resolve", call, "--result", `{"approved": true}`)
	require.Equal(t, exitStale, r.code, r.stderr)

	env[envToken] = "replace-with-a-long-random-token-3"
	requireOK(t, lz("show", conv))
	r = lz("conversations")
	requireOK(t, r)
	require.Contains(t, r.stdout, conv)
	requireOK(t, lz("stats"))
	r = lz("delete", conv, "--yes")
	requireOK(t, r)
	require.Contains(t, r.stdout, "deleted conversation "+conv)

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err, stderr.String())
	case <-time.After(wait):
		t.Fatal("serve did not stop")
	}
}
