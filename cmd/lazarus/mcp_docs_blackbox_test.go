package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/messages"
)

// docsMCPServer gives the tools the README's mcp_servers row speaks of:
// echo (records the _meta tool_call_id it was called with), structured (a
// structured result), boom (a handler error), slow (blocks until its call
// is cancelled).
func docsMCPServer(seen *[]string, mu *sync.Mutex, slowStarted chan<- struct{}) *mcp.Server {
	srv := mcp.NewServer(&mcp.Implementation{Name: "docs-mcp", Version: "1"}, nil)
	obj := json.RawMessage(`{"type":"object","properties":{"x":{"type":"integer"}},"required":["x"]}`)
	srv.AddTool(&mcp.Tool{Name: "echo", Description: "Echoes.", InputSchema: obj},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			mu.Lock()
			id, _ := req.Params.Meta[mcpToolCallIDKey].(string)
			*seen = append(*seen, id)
			mu.Unlock()
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "got " + string(req.Params.Arguments)}}}, nil
		})
	srv.AddTool(&mcp.Tool{Name: "structured", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{StructuredContent: map[string]any{"n": 3}, Content: []mcp.Content{&mcp.TextContent{Text: "three"}}}, nil
		})
	srv.AddTool(&mcp.Tool{Name: "boom", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return nil, errors.New("kaboom")
		})
	srv.AddTool(&mcp.Tool{Name: "slow", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(ctx context.Context, _ *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			select {
			case slowStarted <- struct{}{}:
			default:
			}
			<-ctx.Done()
			return nil, ctx.Err()
		})
	return srv
}

// TestDocsMCPToolsOverStreamableHTTP: an MCP server by url (streamable
// HTTP) has its tools listed at start as server tools, named with the
// prefix, with their description and input schema; a call passes the
// runtime's tool_call_id in _meta under lazarus/tool_call_id, the same on
// every run of the call; a structured result is its JSON; a server's error
// and the call's timeout are tool errors; once the server is gone, every
// call fails at once, well before the timeout.
func TestDocsMCPToolsOverStreamableHTTP(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	srv := docsMCPServer(&seen, &mu, make(chan struct{}, 1))
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	ctx := ctxT(t)
	s, err := connectMCP(ctx, mcpConfig{Name: "docs", URL: hs.URL, Prefix: "d_", Timeout: "3s"}, "test")
	require.NoError(t, err)
	defer func() { _ = s.Close() }()

	tools := map[string]agent.Tool{}
	for _, tool := range s.tools {
		tools[tool.Name] = tool
	}
	require.Len(t, tools, 4)
	echo, ok := tools["d_echo"]
	require.True(t, ok, "the prefix is put before the tool's name: %v", tools)
	assert.Equal(t, "Echoes.", echo.Description)
	assert.Equal(t, messages.Executor_EXECUTOR_SERVER, echo.Executor)
	assert.JSONEq(t, `{"type":"object","properties":{"x":{"type":"integer"}},"required":["x"]}`, echo.Parameters)

	for range 2 {
		out, err := echo.Run(ctx, agent.Invocation{ToolCallID: "call-7", Name: "d_echo", Arguments: `{"x":1}`})
		require.NoError(t, err)
		assert.Equal(t, `got {"x":1}`, out)
	}
	mu.Lock()
	assert.Equal(t, []string{"call-7", "call-7"}, seen, "the same tool_call_id on every run")
	mu.Unlock()

	out, err := tools["d_structured"].Run(ctx, agent.Invocation{ToolCallID: "c2", Name: "d_structured", Arguments: `{}`})
	require.NoError(t, err)
	assert.JSONEq(t, `{"n":3}`, out)

	_, err = tools["d_boom"].Run(ctx, agent.Invocation{ToolCallID: "c3", Name: "d_boom", Arguments: `{}`})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "kaboom")

	_, err = tools["d_slow"].Run(ctx, agent.Invocation{ToolCallID: "c4", Name: "d_slow", Arguments: `{}`})
	require.ErrorIs(t, err, context.DeadlineExceeded, "the call's timeout is a tool error")
	require.NoError(t, ctx.Err(), "at the call's timeout, not the test's bound")

	hs.CloseClientConnections()
	hs.Close()
	gone, cancel := context.WithTimeout(ctx, 2*time.Second) // below the call's timeout
	defer cancel()
	_, err = echo.Run(gone, agent.Invocation{ToolCallID: "c5", Name: "d_echo", Arguments: `{"x":2}`})
	require.Error(t, err, "a server that is gone fails the call")
	require.NoError(t, gone.Err(), "at once, not at the call's timeout")
}

// TestMCPCallTimeoutIsCodeTimeout: a call that passes its MCP server's
// timeout is recorded with tool error code timeout (agent.CodeTimeout), as
// a run that passes the runtime's tool timeout is, not as a tool's error;
// a run whose own context ends first is still cancelled (the runtime
// records its bound then).
func TestMCPCallTimeoutIsCodeTimeout(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	slowStarted := make(chan struct{}, 1)
	srv := docsMCPServer(&seen, &mu, slowStarted)
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	defer hs.Close()
	ctx := ctxT(t)
	s, err := connectMCP(ctx, mcpConfig{Name: "docs", URL: hs.URL, Timeout: "300ms"}, "test")
	require.NoError(t, err)
	defer func() { _ = s.Close() }()
	reg, err := agent.NewRegistry(s.tools...)
	require.NoError(t, err)

	out := reg.RunServer(ctx, agent.Invocation{ToolCallID: "c1", Name: "slow", Arguments: `{}`})
	require.NoError(t, ctx.Err(), "at the server's timeout, not the test's bound")
	require.Equal(t, agent.CodeTimeout, out.GetError().GetCode(), out.GetError().GetMessage())
	require.Contains(t, out.GetError().GetMessage(), "300ms")

	// The run's own context ends once the call reached the server. A server
	// of its own, with a timeout the run cannot reach, so that neither a
	// late start of c1 nor a slow machine (the call taking 300ms to reach
	// the server) can make this a timeout.
	var mu2 sync.Mutex
	var seen2 []string
	started := make(chan struct{}, 1)
	hs2 := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server {
		return docsMCPServer(&seen2, &mu2, started)
	}, nil))
	defer hs2.Close()
	s2, err := connectMCP(ctx, mcpConfig{Name: "docs", URL: hs2.URL, Timeout: "1h"}, "test")
	require.NoError(t, err)
	defer func() { _ = s2.Close() }()
	reg2, err := agent.NewRegistry(s2.tools...)
	require.NoError(t, err)
	run, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-started:
			cancel()
		case <-run.Done():
		}
	}()
	out = reg2.RunServer(run, agent.Invocation{ToolCallID: "c2", Name: "slow", Arguments: `{}`})
	require.NoError(t, ctx.Err(), "the run's cancel, not the test's bound")
	require.Equal(t, agent.CodeCanceled, out.GetError().GetCode(), out.GetError().GetMessage())

	out = reg.RunServer(ctx, agent.Invocation{ToolCallID: "c3", Name: "boom", Arguments: `{}`})
	require.Equal(t, agent.CodeTool, out.GetError().GetCode(), "a server's error is still a tool error")
}
