package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal"
)

// TestMCPServerRunsInTheConfigsDirectory: a stdio MCP server of a
// configuration file runs in the file's directory, whatever the node's
// working directory, so a relative program ("./server") is the file's.
func TestMCPServerRunsInTheConfigsDirectory(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	self, err := filepath.Abs(os.Args[0])
	require.NoError(t, err)
	require.NoError(t, os.Symlink(self, filepath.Join(dir, "server")))
	path := filepath.Join(dir, "node.json")
	require.NoError(t, os.WriteFile(path, []byte(`{
		"mcp_servers": [{"name": "calc", "command": ["./server"], "env": {"`+envChild+`": "mcp"}}]
	}`), 0o600))
	cfg, err := loadConfig(path)
	require.NoError(t, err)

	ctx := ctxT(t)
	s, err := connectMCP(ctx, cfg.MCPServers[0], "test")
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	var cwd *agent.Tool
	for i := range s.tools {
		if s.tools[i].Name == "cwd" {
			cwd = &s.tools[i]
		}
	}
	require.NotNil(t, cwd, "the server lists its cwd tool")
	out, err := cwd.Run(ctx, agent.Invocation{ToolCallID: "call-1", Name: "cwd", Arguments: `{}`})
	require.NoError(t, err)
	var got cwdOut
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	require.Equal(t, dir, got.Dir)
}

// TestMCPServerExitFailsItsCalls: a stdio MCP server whose process exits
// during every run of a call fails that call at once, with an error (a
// tool error the model reads), not at the call's timeout, after starting
// the server again once and making the call on it (where it exits too,
// which starts a backoff: TestMCPCrashLoopBacksOff); a call of another
// tool after the backoff succeeds on a process started again. The exit, a
// lost session's, is reported on the server's stderr writer.
func TestMCPServerExitFailsItsCalls(t *testing.T) {
	self, err := filepath.Abs(os.Args[0])
	require.NoError(t, err)
	ctx := ctxT(t)
	var stderr lockedBuffer
	s, err := connectMCP(ctx, mcpConfig{Name: "calc", Command: []string{self}, Env: map[string]string{envChild: "mcp"}, Timeout: "1h", stderr: &stderr}, "test")
	require.NoError(t, err)
	tools := map[string]agent.Tool{}
	for _, tool := range s.tools {
		tools[tool.Name] = tool
	}
	_, err = tools["exit"].Run(ctx, agent.Invocation{ToolCallID: "call-1", Name: "exit", Arguments: `{}`})
	require.ErrorContains(t, err, "mcp tool exit")
	require.NoError(t, ctx.Err(), "the call failed before the test's bound, far below its timeout")
	s.mu.Lock()
	s.now = func() time.Time { return time.Now().Add(mcpReconnectBackoff) }
	s.mu.Unlock()
	out, err := tools["add"].Run(ctx, agent.Invocation{ToolCallID: "call-2", Name: "add", Arguments: `{"a": 1, "b": 2}`})
	require.NoError(t, err)
	require.JSONEq(t, `{"sum": 3, "tool_call_id": "call-2"}`, out)
	require.NoError(t, s.Close())
	require.Contains(t, stderr.String(), "mcp server calc: session lost: exit status 3; reconnecting\n")
}

// TestMCPToolErrorWithoutText: a call the MCP server answers with an error
// result that has no text fails with an error that names the tool, not an
// empty one (the model reads the message); an error result with text fails
// with that text; one with structured content only fails with its JSON,
// cut to agent.MaxErrorBytes (it used to say it gave no message).
func TestMCPToolErrorWithoutText(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "test-mcp", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "fail", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var args struct {
				Text       string          `json:"text"`
				Structured json.RawMessage `json:"structured"`
			}
			if err := json.Unmarshal(req.Params.Arguments, &args); err != nil {
				return nil, err
			}
			res := &mcp.CallToolResult{IsError: true}
			if args.Text != "" {
				res.Content = []mcp.Content{&mcp.TextContent{Text: args.Text}}
			}
			if args.Structured != nil {
				res.StructuredContent = args.Structured
			}
			return res, nil
		})
	ctx := ctxT(t)
	cs, listed := inMemoryMCP(t, srv)
	tool, err := mcpTool(bounded(cs.CallTool, time.Minute), "", listed)
	require.NoError(t, err)

	_, err = tool.Run(ctx, agent.Invocation{ToolCallID: "call-1", Name: "fail", Arguments: `{}`})
	require.EqualError(t, err, "mcp tool fail failed and gave no message")
	_, err = tool.Run(ctx, agent.Invocation{ToolCallID: "call-2", Name: "fail", Arguments: `{"text": "disk full"}`})
	require.EqualError(t, err, "disk full")
	_, err = tool.Run(ctx, agent.Invocation{ToolCallID: "call-3", Name: "fail", Arguments: `{"text": "disk full", "structured": {"code": 28}}`})
	require.EqualError(t, err, "disk full", "its text, when it has one")

	// Structured content only: its JSON, cut as every tool error is.
	reg, err := agent.NewRegistry(tool)
	require.NoError(t, err)
	out := reg.RunServer(ctx, agent.Invocation{ToolCallID: "call-4", Name: "fail", Arguments: `{"structured": {"code": 28, "reason": "ENOSPC"}}`})
	require.Equal(t, agent.CodeTool, out.GetError().GetCode())
	require.JSONEq(t, `{"code": 28, "reason": "ENOSPC"}`, out.GetError().GetMessage())
	long := strings.Repeat("x", 2*agent.MaxErrorBytes)
	out = reg.RunServer(ctx, agent.Invocation{ToolCallID: "call-5", Name: "fail", Arguments: `{"structured": {"reason": "` + long + `"}}`})
	require.LessOrEqual(t, len(out.GetError().GetMessage()), agent.MaxErrorBytes)
	require.True(t, strings.HasPrefix(out.GetError().GetMessage(), `{"reason":"xxx`), out.GetError().GetMessage()[:40])
}

// TestMCPServerDoesNotInheritTheNodesSecrets: a stdio MCP server gets the
// node's environment without the variables of its own secrets (the tokens'
// variable, tokens_env here, and the PostgreSQL DSN's), unless its env sets
// them; the others it inherits.
func TestMCPServerDoesNotInheritTheNodesSecrets(t *testing.T) {
	require.Equal(t, []string{envTokens, envPostgres}, secretEnv(&serveConfig{}), "by default, the tokens' default variable")
	t.Setenv("NODE_TOKENS", `{"secret-token": {"user": "alice"}}`)
	t.Setenv(envPostgres, "postgres://u:secret@db/x")
	t.Setenv("LAZARUS_TEST_PLAIN", "plain")
	self, err := filepath.Abs(os.Args[0])
	require.NoError(t, err)
	ctx := ctxT(t)
	for name, tc := range map[string]struct {
		env  map[string]string
		want map[string]getenvOut
	}{
		"withheld": {
			env:  map[string]string{envChild: "mcp"},
			want: map[string]getenvOut{"NODE_TOKENS": {}, envPostgres: {}, "LAZARUS_TEST_PLAIN": {Value: "plain", Set: true}},
		},
		"set by its env": {
			env:  map[string]string{envChild: "mcp", envPostgres: "postgres://its-own"},
			want: map[string]getenvOut{"NODE_TOKENS": {}, envPostgres: {Value: "postgres://its-own", Set: true}},
		},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := mcpConfig{Name: "calc", Command: []string{self}, Env: tc.env, withhold: secretEnv(&serveConfig{TokensEnv: "NODE_TOKENS"})}
			s, err := connectMCP(ctx, cfg, "test")
			require.NoError(t, err)
			defer func() { require.NoError(t, s.Close()) }()
			var getenv agent.Tool
			for _, tool := range s.tools {
				if tool.Name == "getenv" {
					getenv = tool
				}
			}
			require.NotNil(t, getenv.Run)
			for v, want := range tc.want {
				out, err := getenv.Run(ctx, agent.Invocation{ToolCallID: "call-1", Name: "getenv", Arguments: `{"name": "` + v + `"}`})
				require.NoError(t, err)
				var got getenvOut
				require.NoError(t, json.Unmarshal([]byte(out), &got))
				require.Equal(t, want, got, v)
			}
		})
	}
}

// TestMCPToolNameTheModelsRefuse: an MCP tool whose name the models' APIs
// refuse (the MCP spec allows '.' and '/') fails the connection with an
// error wrapping journal.ErrInvalid that names the MCP tool; the node used
// to fail later, at Open, without saying which server gave it.
func TestMCPToolNameTheModelsRefuse(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "test-mcp", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "files.read", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{}, nil
		})
	cs, listed := inMemoryMCP(t, srv)
	_, err := mcpTool(bounded(cs.CallTool, time.Minute), "fs_", listed)
	require.ErrorIs(t, err, journal.ErrInvalid)
	require.ErrorContains(t, err, `tool "files.read"`)
}

// TestServeRefusesTwoMCPServersGivingOneToolName: two MCP servers (or an
// MCP server and human_tools) giving the same tool name make serve refuse
// to start, naming both and the fix (a prefix); the node used to fail at
// Open naming the tool only.
func TestServeRefusesTwoMCPServersGivingOneToolName(t *testing.T) {
	self, err := filepath.Abs(os.Args[0])
	require.NoError(t, err)
	cfg := filepath.Join(t.TempDir(), "node.json")
	require.NoError(t, os.WriteFile(cfg, []byte(`{
		"dir": `+jsonString(filepath.Join(t.TempDir(), "store"))+`,
		"mcp_servers": [
			{"name": "one", "command": [`+jsonString(self)+`], "env": {"`+envChild+`": "mcp"}},
			{"name": "two", "command": [`+jsonString(self)+`], "env": {"`+envChild+`": "mcp"}}
		]
	}`), 0o600))
	t.Setenv(envTokens, testTokens)
	r := cliCtx(ctxT(t), "serve", "--config", cfg, "--listen", "127.0.0.1:0")
	require.Equal(t, exitError, r.code, r.stderr)
	require.Contains(t, r.stderr, "mcp server two: tool add is also one of mcp server one; give the server a prefix")
}

// inMemoryMCP connects a client to srv, which gives one tool, in memory,
// and returns the session and that tool as listed.
func inMemoryMCP(t *testing.T, srv *mcp.Server) (*mcp.ClientSession, *mcp.Tool) {
	t.Helper()
	ctx := ctxT(t)
	st, ct := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(ctx, st, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "lazarus", Version: "test"}, nil).Connect(ctx, ct, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Close() })
	listed, err := cs.ListTools(ctx, nil)
	require.NoError(t, err)
	require.Len(t, listed.Tools, 1)
	return cs, listed.Tools[0]
}

// TestMCPFailedHandshakeEndsTheServer: a stdio MCP server whose handshake
// fails (here: it answers a protocol version no client supports) is ended
// before connectMCP returns its error: its stdin is closed and its process
// waited for. The SDK left such a process running, never reaped.
func TestMCPFailedHandshakeEndsTheServer(t *testing.T) {
	self, err := filepath.Abs(os.Args[0])
	require.NoError(t, err)
	closed := filepath.Join(t.TempDir(), "closed")
	cfg := mcpConfig{Name: "old", Command: []string{self}, Env: map[string]string{envChild: "mcp-old", "LAZARUS_TEST_MCP_CLOSED": closed}}
	_, err = connectMCP(ctxT(t), cfg, "test")
	require.ErrorContains(t, err, "mcp server old: connect: unsupported protocol version")
	b, err := os.ReadFile(closed)
	require.NoError(t, err, "the server's stdin was closed and its process had exited when connectMCP returned")
	require.Equal(t, "closed", string(b))
}

// TestServeBadConfigStartsNoMCPServer: a configuration file that is wrong
// anywhere (an MCP server's entry, two servers of one name, another field)
// makes serve fail with a bad-configuration error (status 1) that names the
// problem, before it starts any MCP server; serve used to start the servers
// listed before the bad entry, and every server before checking the other
// fields.
func TestServeBadConfigStartsNoMCPServer(t *testing.T) {
	self, err := filepath.Abs(os.Args[0])
	require.NoError(t, err)
	t.Setenv(envTokens, testTokens)
	good := `{"name": "calc", "command": [` + jsonString(self) + `], "env": {"` + envChild + `": "mcp"}}`
	for name, tc := range map[string]struct{ fields, want string }{
		"no name":             {`"mcp_servers": [` + good + `, {"command": ["x"]}]`, "an MCP server without a name"},
		"command and url":     {`"mcp_servers": [` + good + `, {"name": "b", "command": ["x"], "url": "http://h/"}]`, "mcp server b: give exactly one of command and url"},
		"neither":             {`"mcp_servers": [` + good + `, {"name": "b"}]`, "mcp server b: give exactly one of command and url"},
		"empty program":       {`"mcp_servers": [` + good + `, {"name": "b", "command": [""]}]`, "mcp server b: command: an empty program"},
		"url no scheme":       {`"mcp_servers": [` + good + `, {"name": "b", "url": "localhost:8080"}]`, `mcp server b: url "localhost:8080": not an http or https URL`},
		"url ftp":             {`"mcp_servers": [` + good + `, {"name": "b", "url": "ftp://h/"}]`, `mcp server b: url "ftp://h/": not an http or https URL`},
		"url bad":             {`"mcp_servers": [` + good + `, {"name": "b", "url": "http://[::1"}]`, "mcp server b: url: "},
		"env name":            {`"mcp_servers": [` + good + `, {"name": "b", "command": ["x"], "env": {"A=B": "c"}}]`, `mcp server b: env: "A=B" is not a variable name`},
		"timeout":             {`"mcp_servers": [` + good + `, {"name": "b", "command": ["x"], "timeout": "0s"}]`, "mcp server b: timeout 0s: not positive"},
		"connect_timeout":     {`"mcp_servers": [` + good + `, {"name": "b", "command": ["x"], "connect_timeout": "-1s"}]`, "mcp server b: connect_timeout -1s: not positive"},
		"connect_timeout bad": {`"mcp_servers": [` + good + `, {"name": "b", "command": ["x"], "connect_timeout": "soon"}]`, "mcp server b: connect_timeout: "},
		"same name":           {`"mcp_servers": [` + good + `, ` + good + `]`, "mcp server calc: two servers have that name"},
		"tool_timeout":        {`"mcp_servers": [` + good + `], "tool_timeout": "soon"`, "tool_timeout: "},
	} {
		t.Run(name, func(t *testing.T) {
			started := filepath.Join(t.TempDir(), "started")
			t.Setenv(envMCPStarted, started)
			cfg := filepath.Join(t.TempDir(), "node.json")
			require.NoError(t, os.WriteFile(cfg, []byte(`{"dir": `+jsonString(filepath.Join(t.TempDir(), "store"))+`, `+tc.fields+`}`), 0o600))
			r := cliCtx(ctxT(t), "serve", "--config", cfg, "--listen", "127.0.0.1:0")
			require.Equal(t, exitError, r.code, r.stderr)
			require.Contains(t, r.stderr, "bad configuration: "+tc.want)
			require.NoFileExists(t, started, "no MCP server was started")
		})
	}
}

// TestMCPServerWithoutTools: an MCP server that declares no tools
// capability (a server of prompts or resources only) gives no tools, even
// if it refuses tools/list as a method it does not have; the node used to
// refuse to start.
func TestMCPServerWithoutTools(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "prompts-only", Version: "1"}, nil)
	srv.AddPrompt(&mcp.Prompt{Name: "hello"}, func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		return &mcp.GetPromptResult{}, nil
	})
	srv.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method == "tools/list" {
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "method not found"}
			}
			return next(ctx, method, req)
		}
	})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	defer hs.Close()
	s, err := connectMCP(ctxT(t), mcpConfig{Name: "prompts", URL: hs.URL}, "test")
	require.NoError(t, err)
	defer func() { _ = s.Close() }()
	require.Empty(t, s.tools)
}

// TestMCPNonTextContent: what the model reads of a result's contents that
// are not text: an embedded resource's text is given; an image, an audio
// clip, a binary resource and a resource link are named by their MCP kind,
// MIME type and URI, never by a Go type of the SDK.
func TestMCPNonTextContent(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "test-mcp", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "mixed", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{
				&mcp.TextContent{Text: "a chart:"},
				&mcp.ImageContent{Data: []byte{1, 2}, MIMEType: "image/png"},
				&mcp.AudioContent{Data: []byte{3}, MIMEType: "audio/wav"},
				&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: "file:///notes.txt", MIMEType: "text/plain", Text: "the notes"}},
				&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: "file:///a.bin", MIMEType: "application/octet-stream", Blob: []byte{4}}},
				&mcp.ResourceLink{URI: "https://example.com/r", Name: "r", MIMEType: "text/html"},
			}}, nil
		})
	cs, listed := inMemoryMCP(t, srv)
	tool, err := mcpTool(bounded(cs.CallTool, time.Minute), "", listed)
	require.NoError(t, err)
	out, err := tool.Run(ctxT(t), agent.Invocation{ToolCallID: "call-1", Name: "mixed", Arguments: `{}`})
	require.NoError(t, err)
	require.Equal(t, "a chart:\n"+
		"[image content, image/png]\n"+
		"[audio content, audio/wav]\n"+
		"the notes\n"+
		"[resource file:///a.bin, application/octet-stream]\n"+
		"[resource link https://example.com/r, text/html]", out)
}

// TestServeRefusesAnMCPServerListingAToolTwice: an MCP server that lists
// one tool name twice makes serve refuse to start, saying so; it used to
// advise a prefix, which cannot help.
func TestServeRefusesAnMCPServerListingAToolTwice(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "twice", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "add", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{}, nil
		})
	srv.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			res, err := next(ctx, method, req)
			if l, ok := res.(*mcp.ListToolsResult); ok && err == nil {
				l.Tools = append(l.Tools, l.Tools...)
			}
			return res, err
		}
	})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	defer hs.Close()
	cfg := filepath.Join(t.TempDir(), "node.json")
	require.NoError(t, os.WriteFile(cfg, []byte(`{
		"dir": `+jsonString(filepath.Join(t.TempDir(), "store"))+`,
		"mcp_servers": [{"name": "twice", "url": `+jsonString(hs.URL)+`, "prefix": "t_"}]
	}`), 0o600))
	t.Setenv(envTokens, testTokens)
	r := cliCtx(ctxT(t), "serve", "--config", cfg, "--listen", "127.0.0.1:0")
	require.Equal(t, exitError, r.code, r.stderr)
	require.Contains(t, r.stderr, "bad configuration: mcp server twice: lists tool t_add twice")
}

// TestMCPCloseEndsTheServersProcessGroup: closing a stdio MCP server ends
// the processes it started too (here one it waits for, as a shell waits
// for its command, so that neither the end of its stdin nor a SIGTERM to
// it alone ends it): the server runs in a process group of its own, which
// gets SIGTERM after the grace. The SDK signalled the server's process
// only, and the process it started survived the node.
func TestMCPCloseEndsTheServersProcessGroup(t *testing.T) {
	self, err := filepath.Abs(os.Args[0])
	require.NoError(t, err)
	ctx := ctxT(t)
	// The grace is waited for in full (the server ignores its stdin's
	// end); after SIGTERM it is the server's time to reap its process and
	// exit, which a loaded machine may slow.
	cfg := mcpConfig{Name: "spawn", Command: []string{self}, Env: map[string]string{envChild: "mcp-spawn"}, stopGrace: 3 * time.Second}
	s, err := connectMCP(ctx, cfg, "test")
	require.NoError(t, err)
	require.Len(t, s.tools, 1)
	out, err := s.tools[0].Run(ctx, agent.Invocation{ToolCallID: "call-1", Name: "grandchild", Arguments: `{}`})
	require.NoError(t, err)
	var got pidOut
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	require.Positive(t, got.Pid)
	t.Cleanup(func() {
		if t.Failed() {
			_ = syscall.Kill(got.Pid, syscall.SIGKILL) // not left for an hour
		}
	})
	require.NoError(t, syscall.Kill(got.Pid, 0), "the server's own process runs")

	require.NoError(t, s.Close(), "the server exited with status 0 once its process had, and was waited for")
	require.Eventually(t, func() bool {
		return errors.Is(syscall.Kill(got.Pid, 0), syscall.ESRCH)
	}, 5*time.Second, 10*time.Millisecond, "the process the server started is gone")
}

// TestServeMCPServerStderrIsTheCommands: what a stdio MCP server writes to
// its stderr goes to the command's stderr (the CLI's, not the process's),
// each line prefixed with the server's name, its last line ended; it used
// to go to the process's stderr, past the command's writer.
func TestServeMCPServerStderrIsTheCommands(t *testing.T) {
	self, err := filepath.Abs(os.Args[0])
	require.NoError(t, err)
	cfg := filepath.Join(t.TempDir(), "node.json")
	// The second server gives the first's tool, so serve stops once both
	// have started, closing them.
	require.NoError(t, os.WriteFile(cfg, []byte(`{
		"dir": `+jsonString(filepath.Join(t.TempDir(), "store"))+`,
		"mcp_servers": [
			{"name": "one", "command": [`+jsonString(self)+`], "env": {"`+envChild+`": "mcp", "`+envMCPStderr+`": "warming up\nready"}},
			{"name": "two", "command": [`+jsonString(self)+`], "env": {"`+envChild+`": "mcp"}}
		]
	}`), 0o600))
	t.Setenv(envTokens, testTokens)
	r := cliCtx(ctxT(t), "serve", "--config", cfg, "--listen", "127.0.0.1:0")
	require.Equal(t, exitError, r.code, r.stderr)
	require.Regexp(t, `(?m)^mcp server one: warming up\n`, r.stderr)
	require.Regexp(t, `(?m)^mcp server one: ready\n`, r.stderr, "the last line, ended at the server's end")
}

// TestMCPConnectTimeout: an MCP server that does not answer the handshake
// fails the connection at its connect_timeout, with an error that says so,
// and is ended; the bound was a fixed 30s no configuration could change.
func TestMCPConnectTimeout(t *testing.T) {
	self, err := filepath.Abs(os.Args[0])
	require.NoError(t, err)
	ctx := ctxT(t)
	cfg := mcpConfig{Name: "mute", Command: []string{self}, Env: map[string]string{envChild: "sleep"}, ConnectTimeout: "300ms", stopGrace: 100 * time.Millisecond}
	_, err = connectMCP(ctx, cfg, "test")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, "mcp server mute: connect: not done within connect_timeout 300ms")
	require.NoError(t, ctx.Err(), "at the connect timeout, not the test's bound")
	timeout, connect, err := mcpConfig{Name: "d", URL: "http://h/"}.check()
	require.NoError(t, err)
	require.Equal(t, defaultMCPTimeout, timeout)
	require.Equal(t, 30*time.Second, connect, "the default")
}

// TestServeClosesMCPServersTogether: the node closes its MCP servers all
// at once, so its stop costs one server's grace, not one per server. Here
// the first server exits only once the second's stdin is closed too (each
// waits for the other through a FIFO); both exit with status 0 without a
// signal. The node closed them one after another: the first got SIGTERM
// after its grace, and so did the second after its own.
func TestServeClosesMCPServersTogether(t *testing.T) {
	self, err := filepath.Abs(os.Args[0])
	require.NoError(t, err)
	fifo := filepath.Join(t.TempDir(), "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	ctx := ctxT(t)
	var stderr lockedBuffer
	n := &node{c: newCLI(strings.NewReader(""), io.Discard, &stderr)}
	for name, env := range map[string]string{"reader": envMCPFIFORead, "writer": envMCPFIFOWrite} {
		cfg := mcpConfig{Name: name, Command: []string{self}, Env: map[string]string{envChild: "mcp", env: fifo}, stopGrace: 10 * time.Second}
		s, err := connectMCP(ctx, cfg, "test")
		require.NoError(t, err)
		n.mcps = append(n.mcps, s)
	}
	require.NoError(t, n.close())
	require.Empty(t, stderr.String(), "no server reported an error at close: both exited with status 0")
}

// TestMCPStdoutClosedIsALostSession: a call on a stdio server whose
// stdout was closed (Wait closes it once the process has exited, which
// the call may see before the process's exit is recorded) found its
// session lost, so it is reconnected; it used to fail the call as the
// server's error, now and then, when a server exited during a call.
func TestMCPStdoutClosedIsALostSession(t *testing.T) {
	proc := &stdioProc{exited: make(chan struct{})} // not yet seen to exit
	err := fmt.Errorf("calling %q: %w", "tools/call", &fs.PathError{Op: "read", Path: "|0", Err: os.ErrClosed})
	require.True(t, sessionLost(err, proc))
	require.False(t, sessionLost(errors.New("the tool failed"), proc), "a call's error is not a lost session")
}
