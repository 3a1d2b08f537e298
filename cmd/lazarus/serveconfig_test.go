package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/server"
)

// TestServeConfigErrors: a bad configuration file is refused before
// anything is opened, with an error that says what is wrong (exit 1), and
// nothing is created in the store directory.
func TestServeConfigErrors(t *testing.T) {
	for name, cfg := range map[string]string{
		"unknown field":       `{"listen": "127.0.0.1:0", "colour": "blue"}`,
		"not json":            `{"listen": `,
		"trailing data":       `{} {}`,
		"null":                `null`,
		"schema null":         `{"human_tools": [{"name": "a", "parameters": null}]}`,
		"bad timeout":         `{"human_tools": [{"name": "approve", "timeout": "soon"}]}`,
		"nameless tool":       `{"human_tools": [{"description": "x"}]}`,
		"schema not object":   `{"human_tools": [{"name": "a", "parameters": [1]}]}`,
		"bad prompt":          `{"human_tools": [{"name": "a", "prompt": "{{.x"}]}`,
		"answered by nobody":  `{"human_tools": [{"name": "a", "answered_by": {}}]}`,
		"mcp both":            `{"mcp_servers": [{"name": "m", "command": ["x"], "url": "http://x"}]}`,
		"mcp neither":         `{"mcp_servers": [{"name": "m"}]}`,
		"mcp zero timeout":    `{"mcp_servers": [{"name": "m", "command": ["x"], "timeout": "0s"}]}`,
		"mcp negative":        `{"mcp_servers": [{"name": "m", "command": ["x"], "timeout": "-1s"}]}`,
		"model provider":      `{"model": {"provider": "oracle"}}`,
		"openai no model":     `{"model": {"provider": "openai", "name": ""}}`,
		"bad tokens":          `{"tokens_env": "LAZARUS_TEST_NO_SUCH_TOKENS_FILE", "tokens_file": "/nonexistent/tokens.json"}`,
		"bad shutdown":        `{"shutdown_timeout": "1 minute"}`,
		"bad idle timeout":    `{"idle_timeout": "a while"}`,
		"bad read timeout":    `{"read_timeout": "a while"}`,
		"bad stream write":    `{"stream_write_timeout": "a while"}`,
		"bad model timeout":   `{"model_timeout": "a while"}`,
		"bad tool timeout":    `{"tool_timeout": "a while"}`,
		"bad max subs":        `{"max_subscriptions": "many"}`,
		"fractional max subs": `{"max_subscriptions": 1.5}`,
		"stream write zero":   `{"stream_write_timeout": "0s"}`,
		"stream write below":  `{"stream_write_timeout": "-1s"}`,
		"dir and postgres":    `{"dir": "data", "postgres": "postgres://u@db.invalid/app"}`,
	} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "store")
			path := filepath.Join(t.TempDir(), "node.json")
			require.NoError(t, os.WriteFile(path, []byte(cfg), 0o600))
			c := newCLI(nil, &lockedBuffer{}, &lockedBuffer{})
			c.getenv = func(string) string { return "" }
			err := c.serve(ctxT(t), c.newFlags(serveCmd), []string{"--config", path, "--dir", dir, "--listen", "127.0.0.1:0"}) // bounded: a config taken serves until the context ends
			require.ErrorIs(t, err, errConfig)
			require.Equal(t, exitError, exitCode(err))
			_, statErr := os.Stat(dir)
			require.True(t, errors.Is(statErr, os.ErrNotExist), "nothing created")
		})
	}
}

// TestServeNegativeShutdownTimeout: a negative shutdown timeout is refused
// before anything is opened (it would cut the requests in flight at once,
// while a negative timeout elsewhere in the file means no bound): from the
// flag a usage error (2), from the file a bad configuration (1); a flag
// that is valid overrides a bad file; zero is valid.
func TestServeNegativeShutdownTimeout(t *testing.T) {
	path := filepath.Join(t.TempDir(), "node.json")
	require.NoError(t, os.WriteFile(path, []byte(`{"shutdown_timeout": "-1s"}`), 0o600))
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"flag", []string{"--shutdown-timeout", "-1s"}, exitUsage, "lazarus serve: --shutdown-timeout must not be negative"},
		{"file", []string{"--config", path}, exitError, "lazarus serve: bad configuration: shutdown_timeout: -1s is negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "store")
			var out, errb lockedBuffer
			c := newCLI(nil, &out, &errb)
			c.getenv = func(string) string { return "" }
			// Bounded: a timeout taken serves until the context ends.
			code := c.run(ctxT(t), append([]string{"serve", "--dir", dir, "--listen", "127.0.0.1:0"}, tc.args...))
			require.Equal(t, tc.code, code, errb.String())
			require.Contains(t, errb.String(), tc.want)
			require.Empty(t, out.String())
			_, err := os.Stat(dir)
			require.ErrorIs(t, err, os.ErrNotExist, "nothing created")
		})
	}
	for _, args := range [][]string{{"--config", path, "--shutdown-timeout", "1s"}, {"--shutdown-timeout", "0s"}} {
		ctx, cancel := context.WithCancel(ctxT(t))
		var out, errb lockedBuffer
		c := newCLI(nil, &out, &errb)
		c.getenv = func(string) string { return "" }
		done := make(chan int, 1)
		go func() {
			done <- c.run(ctx, append([]string{"serve", "--dir", filepath.Join(t.TempDir(), "store"), "--listen", "127.0.0.1:0"}, args...))
		}()
		require.Eventually(t, func() bool { return strings.Contains(errb.String(), "listening on") }, wait, 10*time.Millisecond, "%v: %s", args, errb.String())
		cancel()
		require.Equal(t, exitOK, <-done, errb.String())
	}
}

// TestServeStreamWriteTimeout: stream_write_timeout is the server's
// StreamWriteTimeout, server.DefaultStreamWriteTimeout when not set; one
// that is not a positive duration is refused.
func TestServeStreamWriteTimeout(t *testing.T) {
	for s, want := range map[string]time.Duration{"": server.DefaultStreamWriteTimeout, "5s": 5 * time.Second, "1ns": 1} {
		d, err := (&serveConfig{StreamWriteTimeout: s}).streamWriteTimeout()
		require.NoError(t, err, s)
		require.Equal(t, want, d, s)
	}
	for _, s := range []string{"0s", "0", "-1s", "soon"} {
		_, err := (&serveConfig{StreamWriteTimeout: s}).streamWriteTimeout()
		require.ErrorIs(t, err, errConfig, s)
		require.ErrorContains(t, err, "stream_write_timeout", s)
	}
}

// TestServeModelTimeout: model_timeout is the runtime's ModelTimeout,
// tool_timeout its ToolTimeout and max_subscriptions its
// MaxSubscriptions, which the node prints as it starts: the runtime's
// default when not set (or zero), no bound when negative.
func TestServeModelTimeout(t *testing.T) {
	for s, want := range map[string]string{
		``:                          "model timeout: 10m0s",
		`, "model_timeout": "0s"`:   "model timeout: 10m0s",
		`, "model_timeout": "90s"`:  "model timeout: 1m30s",
		`, "model_timeout": "-1ns"`: "model timeout: none",
		` `:                         "tool timeout: 10m0s",
		`, "tool_timeout": "0s"`:    "tool timeout: 10m0s",
		`, "tool_timeout": "90s"`:   "tool timeout: 1m30s",
		`, "tool_timeout": "-1ns"`:  "tool timeout: none",
		`  `:                        "streams per conversation: at most 1024",
		`, "max_subscriptions": 0`:  "streams per conversation: at most 1024",
		`, "max_subscriptions": 8`:  "streams per conversation: at most 8",
		`, "max_subscriptions": -1`: "streams per conversation: no cap",
	} {
		t.Run(want+s, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "node.json")
			require.NoError(t, os.WriteFile(path, []byte(`{"dir": "store"`+s+`}`), 0o600))
			ctx, cancel := context.WithCancel(ctxT(t))
			defer cancel()
			stderr := &lockedBuffer{}
			c := newCLI(nil, &lockedBuffer{}, stderr)
			c.getenv = func(string) string { return "" }
			done := make(chan error, 1)
			go func() {
				done <- c.serve(ctx, c.newFlags(serveCmd), []string{"--config", path, "--listen", "127.0.0.1:0"})
			}()
			require.Eventually(t, func() bool {
				return strings.Contains(stderr.String(), "lazarus serve: listening on ") || len(done) > 0
			}, wait, 10*time.Millisecond)
			require.Contains(t, stderr.String(), "lazarus serve: "+want+"\n")
			cancel()
			select {
			case err := <-done:
				require.NoError(t, err, "the node stops on its context")
			case <-time.After(wait):
				t.Fatal("the node did not stop")
			}
		})
	}
}

// TestServeTokens: the tokens JSON maps each token to its identity;
// malformed ones are refused without quoting a token.
func TestServeTokens(t *testing.T) {
	ids, err := parseTokens([]byte(`{"s3cret": {"user": "ann", "roles": ["operator"]}}`))
	require.NoError(t, err)
	require.Equal(t, map[string]agent.Identity{"s3cret": {UserID: "ann", Roles: []string{"operator"}}}, ids)
	for _, bad := range []string{`{"s3cret": {"user": ""}}`, `{"s3cret": {"user": "ann", "admin": true}}`, `["s3cret"]`, `{"": {"user": "ann"}}`, `null`} {
		_, err := parseTokens([]byte(bad))
		require.ErrorIs(t, err, errConfig, bad)
		require.NotContains(t, err.Error(), "s3cret")
	}
}

// TestHumanToolConfig: a declared human tool becomes the agent.Tool it
// says: schema, prompt template over the arguments (the default prompt
// when the template cannot run), timeout, and who may answer.
func TestHumanToolConfig(t *testing.T) {
	h := humanToolConfig{Name: "refund", Description: "refund an order",
		Parameters: []byte(`{"type":"object"}`), Prompt: "Refund {{.amount}} to {{.who}}?", Timeout: "2h",
		AnsweredBy: &answeredByConfig{Roles: []string{"approver"}, Requester: true}}
	tool, err := h.tool()
	require.NoError(t, err)
	require.Equal(t, messages.Executor_EXECUTOR_HUMAN, tool.Executor)
	require.Equal(t, `{"type":"object"}`, tool.Parameters)
	require.Equal(t, "Refund 12 to ann?", tool.Prompt(`{"amount": 12, "who": "ann"}`))
	require.Equal(t, "refund [1]", tool.Prompt(`[1]`))
	require.Equal(t, "2h0m0s", tool.Timeout.String())

	ctx := context.Background()
	auth := func(resolver agent.Identity, requester string) error {
		return tool.Authorizer(ctx, agent.Authorization{Tool: "refund", Resolver: agent.ScopeOf(resolver),
			Requester: agent.Identity{UserID: requester}})
	}
	require.NoError(t, auth(agent.Identity{UserID: "bob", Roles: []string{"approver"}}, "ann"))
	require.NoError(t, auth(agent.Identity{UserID: "ann"}, "ann"))
	require.Error(t, auth(agent.Identity{UserID: "eve"}, "ann"))

	only := humanToolConfig{Name: "ok", AnsweredBy: &answeredByConfig{Requester: true}}
	tool, err = only.tool()
	require.NoError(t, err)
	require.Error(t, tool.Authorizer(ctx, agent.Authorization{Resolver: agent.ScopeOf(agent.Identity{UserID: "bob", Roles: []string{"approver"}}),
		Requester: agent.Identity{UserID: "ann"}}))
}

// TestServeConfigPathsRelativeToTheFile: the relative dir and tokens_file
// of a configuration file are the file's directory's, whatever the
// working directory; a relative --dir is the working directory's.
func TestServeConfigPathsRelativeToTheFile(t *testing.T) {
	cwd, home := t.TempDir(), t.TempDir()
	t.Chdir(cwd)
	cfgPath := filepath.Join(home, "node.json")
	require.NoError(t, os.WriteFile(cfgPath, []byte(`{"dir": "store", "tokens_file": "tokens.json"}`), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(home, "tokens.json"), []byte(testTokens), 0o600))

	// serve runs until it listens, then is stopped.
	serve := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithCancel(ctxT(t))
		defer cancel()
		stderr := &lockedBuffer{}
		c := newCLI(nil, &lockedBuffer{}, stderr)
		c.getenv = func(string) string { return "" }
		done := make(chan error, 1)
		go func() {
			done <- c.serve(ctx, c.newFlags(serveCmd), append([]string{"--listen", "127.0.0.1:0"}, args...))
		}()
		listening := func() bool { return strings.Contains(stderr.String(), "listening on") }
		require.Eventually(t, func() bool { return listening() || len(done) > 0 },
			wait, 10*time.Millisecond, "serve did not listen: %s", stderr)
		if !listening() {
			t.Fatalf("serve ended: %v\n%s", <-done, stderr)
		}
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err, stderr.String())
		case <-time.After(wait):
			t.Fatal("serve did not stop")
		}
		return stderr.String()
	}

	out := serve("--config", cfgPath)
	require.Contains(t, out, "lazarus serve: opening the store: pebble directory "+filepath.Join(home, "store")+"\n")
	require.Contains(t, out, "lazarus serve: 3 tokens\n", "the tokens file beside the config")
	require.DirExists(t, filepath.Join(home, "store"))
	require.NoDirExists(t, filepath.Join(cwd, "store"))

	out = serve("--config", cfgPath, "--dir", "flagged")
	require.Contains(t, out, "lazarus serve: opening the store: pebble directory flagged\n")
	require.DirExists(t, filepath.Join(cwd, "flagged"), "a flag's path is the working directory's")
}

// TestServeStoreChoice: the store of serve is a store flag's, else the
// file's, else $LAZARUS_POSTGRES's, else $LAZARUS_DIR's, as its help says;
// a store not chosen is not created (nor its DSN read).
func TestServeStoreChoice(t *testing.T) {
	base := t.TempDir()
	path := filepath.Join(base, "node.json")
	require.NoError(t, os.WriteFile(path, []byte(`{"dir": "filestore"}`), 0o600))
	fileDir, flagDir, envStore := filepath.Join(base, "filestore"), filepath.Join(base, "flagstore"), filepath.Join(base, "envstore")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"flag over file", []string{"--config", path, "--dir", flagDir}, flagDir},
		{"file over environment", []string{"--config", path}, fileDir},
		{"environment", nil, envStore},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(ctxT(t))
			defer cancel()
			var out, errb lockedBuffer
			c := newCLI(nil, &out, &errb)
			env := map[string]string{envDir: envStore}
			if tc.want != envStore {
				// Never read: it would be refused.
				env[envPostgres] = malformedDSNs[0]
			}
			c.getenv = func(k string) string { return env[k] }
			done := make(chan int, 1)
			go func() { done <- c.run(ctx, append([]string{"serve", "--listen", "127.0.0.1:0"}, tc.args...)) }()
			require.Eventually(t, func() bool { return strings.Contains(errb.String(), "listening on") }, wait, 10*time.Millisecond, errb.String())
			cancel()
			require.Equal(t, exitOK, <-done, errb.String())
			require.Contains(t, errb.String(), "opening the store: pebble directory "+tc.want+"\n")
			for _, d := range []string{fileDir, flagDir, envStore} {
				if d != tc.want {
					require.NoDirExists(t, d)
				}
			}
			require.NoError(t, os.RemoveAll(tc.want))
		})
	}
}
