package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/agent"
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
	defer func() { require.NoError(t, s.session.Close()) }()
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
