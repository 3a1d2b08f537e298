package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/messages"
)

// mcpToolCallIDKey is the _meta key under which a tool call carries the
// runtime's tool_call_id: the same id on every run of one call (after a
// crash too), so a server that honours it can deduplicate.
const mcpToolCallIDKey = "lazarus/tool_call_id"

// defaultMCPTimeout bounds one MCP tool call when the config sets none.
const defaultMCPTimeout = 60 * time.Second

// defaultMCPConnectTimeout bounds connecting to one MCP server and listing
// its tools at start when the config sets no connect_timeout.
const defaultMCPConnectTimeout = 30 * time.Second

// secretEnv names the environment variables that hold the node's own
// secrets, which the stdio MCP servers it starts do not inherit: the
// tokens' (tokens_env, default envTokens: every user's bearer token) and
// the PostgreSQL DSN's (envPostgres, which may hold a password).
func secretEnv(cfg *serveConfig) []string {
	tokens := cfg.TokensEnv
	if tokens == "" {
		tokens = envTokens
	}
	return []string{tokens, envPostgres}
}

// mcpSession is one connected MCP server and the tools it listed.
type mcpSession struct {
	name    string
	session *mcp.ClientSession
	tools   []agent.Tool
}

// connectMCP connects to the MCP server of cfg, lists its tools and turns
// each into a server tool whose Run calls it. ctx and cfg's connect
// timeout bound the connection and the listing, not the session. On
// failure nothing is left running
// (a stdio server's process group is ended and the server waited for:
// stdioProc.Close). A stdio server whose
// process exits is not restarted: the call in flight and every later one
// fail at once.
func connectMCP(ctx context.Context, cfg mcpConfig, version string) (*mcpSession, error) {
	timeout, connectTimeout, err := cfg.check()
	if err != nil {
		return nil, err
	}
	connectCtx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	ctx = connectCtx
	var transport mcp.Transport
	switch {
	case len(cfg.Command) > 0:
		// Not CommandContext: the process lives as long as the session,
		// which Close ends (closing its stdin, then signals to its process
		// group: stdioProc.Close).
		cmd := exec.Command(cfg.Command[0], cfg.Command[1:]...)
		cmd.Dir = cfg.dir
		for _, kv := range os.Environ() {
			if name, _, _ := strings.Cut(kv, "="); !slices.Contains(cfg.withhold, name) {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		for k, v := range cfg.Env {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		transport = &stdioTransport{cmd: cmd, grace: cfg.stopGrace, stderr: cfg.stderr, prefix: "mcp server " + cfg.Name + ": "}
	default:
		transport = &mcp.StreamableClientTransport{Endpoint: cfg.URL, DisableStandaloneSSE: true}
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "lazarus", Version: version}, nil)
	ct := &closingTransport{Transport: transport}
	session, err := client.Connect(ctx, ct, nil)
	if err != nil {
		// The SDK does not close the connection on every failure (a server
		// answering a protocol version it does not support): a stdio
		// server would be left running, never reaped.
		ct.close()
		return nil, fmt.Errorf("mcp server %s: connect: %w", cfg.Name, connectErr(ctx, connectTimeout, err))
	}
	s := &mcpSession{name: cfg.Name, session: session}
	// A server without the tools capability has no tools: it may refuse
	// tools/list, which is then no failure. One that declares none but
	// lists some all the same has them.
	noTools := session.InitializeResult().Capabilities == nil || session.InitializeResult().Capabilities.Tools == nil
	for t, err := range session.Tools(ctx, nil) {
		if err != nil && noTools && len(s.tools) == 0 {
			break
		}
		if err != nil {
			_ = session.Close()
			return nil, fmt.Errorf("mcp server %s: list tools: %w", cfg.Name, connectErr(ctx, connectTimeout, err))
		}
		tool, err := mcpTool(session, cfg.Prefix, t, timeout)
		if err != nil {
			_ = session.Close()
			return nil, fmt.Errorf("mcp server %s: %w", cfg.Name, err)
		}
		s.tools = append(s.tools, tool)
	}
	return s, nil
}

// connectErr is err, saying so if the connect timeout d has passed.
func connectErr(ctx context.Context, d time.Duration, err error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("not done within connect_timeout %v: %w", d, err)
	}
	return err
}

// check validates cfg without starting anything: a name, exactly one of a
// command (whose program is not empty) and an http or https url with a
// host, env names that are variable names, and a positive timeout and
// connect timeout, which it returns (defaultMCPTimeout and
// defaultMCPConnectTimeout if not set). Errors wrap errConfig.
func (cfg mcpConfig) check() (timeout, connectTimeout time.Duration, err error) {
	if cfg.Name == "" {
		return 0, 0, configErr("an MCP server without a name")
	}
	switch {
	case (len(cfg.Command) > 0) == (cfg.URL != ""):
		return 0, 0, configErr("mcp server %s: give exactly one of command and url", cfg.Name)
	case len(cfg.Command) > 0 && cfg.Command[0] == "":
		return 0, 0, configErr("mcp server %s: command: an empty program", cfg.Name)
	case cfg.URL != "":
		u, err := url.Parse(cfg.URL)
		if err != nil {
			return 0, 0, configErr("mcp server %s: url: %v", cfg.Name, err)
		}
		if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return 0, 0, configErr("mcp server %s: url %q: not an http or https URL with a host", cfg.Name, cfg.URL)
		}
	}
	for k := range cfg.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return 0, 0, configErr("mcp server %s: env: %q is not a variable name", cfg.Name, k)
		}
	}
	timeout, err = duration("mcp server "+cfg.Name+": timeout", cfg.Timeout, defaultMCPTimeout)
	if err != nil {
		return 0, 0, err
	}
	if timeout <= 0 {
		// A call bounded by no time at all would fail before it started.
		return 0, 0, configErr("mcp server %s: timeout %s: not positive", cfg.Name, cfg.Timeout)
	}
	connectTimeout, err = duration("mcp server "+cfg.Name+": connect_timeout", cfg.ConnectTimeout, defaultMCPConnectTimeout)
	if err != nil {
		return 0, 0, err
	}
	if connectTimeout <= 0 {
		return 0, 0, configErr("mcp server %s: connect_timeout %s: not positive", cfg.Name, cfg.ConnectTimeout)
	}
	return timeout, connectTimeout, nil
}

// closingTransport remembers the connection its Transport made, so that
// a failed handshake can close it (closing twice is harmless).
type closingTransport struct {
	mcp.Transport
	conn mcp.Connection
}

func (t *closingTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	conn, err := t.Transport.Connect(ctx)
	t.conn = conn
	return conn, err
}

// close closes the connection made, if any: a stdio server's stdin is
// closed and its process waited for (its process group signalled if it
// does not exit).
func (t *closingTransport) close() {
	if t.conn != nil {
		_ = t.conn.Close()
	}
}

// mcpTool is the server tool that calls the MCP tool t.
func mcpTool(session *mcp.ClientSession, prefix string, t *mcp.Tool, timeout time.Duration) (agent.Tool, error) {
	tool := agent.Tool{Name: prefix + t.Name, Description: t.Description, Executor: messages.Executor_EXECUTOR_SERVER}
	if t.InputSchema != nil {
		b, err := json.Marshal(t.InputSchema)
		if err != nil {
			return tool, fmt.Errorf("tool %s: input schema: %w", t.Name, err)
		}
		tool.Parameters = string(b)
	}
	name := t.Name
	tool.Run = func(runCtx context.Context, inv agent.Invocation) (string, error) {
		ctx, cancel := context.WithTimeout(runCtx, timeout)
		defer cancel()
		params := &mcp.CallToolParams{
			Meta:      mcp.Meta{mcpToolCallIDKey: inv.ToolCallID},
			Name:      name,
			Arguments: json.RawMessage(inv.Arguments),
		}
		res, err := session.CallTool(ctx, params)
		if err != nil {
			if errors.Is(ctx.Err(), context.DeadlineExceeded) && runCtx.Err() == nil {
				// The server's call timeout passed, not the run's bound:
				// a timeout all the same (code agent.CodeTimeout).
				return "", fmt.Errorf("mcp tool %s: no result within the server's call timeout, %v: %w: %w", name, timeout, agent.ErrToolTimeout, err)
			}
			return "", fmt.Errorf("mcp tool %s: %w", name, err)
		}
		text := mcpResultText(res)
		if res.IsError {
			if strings.TrimSpace(text) == "" && res.StructuredContent != nil {
				// Its only message: the runtime cuts it to
				// agent.MaxErrorBytes, as every tool error.
				if b, err := json.Marshal(res.StructuredContent); err == nil {
					text = string(b)
				}
			}
			if strings.TrimSpace(text) == "" {
				// The model reads the message: an empty one tells it nothing.
				return "", fmt.Errorf("mcp tool %s failed and gave no message", name)
			}
			return "", errors.New(text)
		}
		return text, nil
	}
	// The MCP spec allows names the models' APIs do not ('.', '/'): say
	// which MCP tool it is, so that a prefix or a rename can be chosen.
	if _, err := agent.NewRegistry(tool); err != nil {
		return tool, fmt.Errorf("tool %q: %w", t.Name, err)
	}
	return tool, nil
}

// mcpResultText is what the model sees of a result: its structured
// content as JSON if it has some and is no error (an error's is its
// message only when it has no text: mcpTool), else its contents joined
// by newlines:
// a text's text, an embedded resource's text; an image, an audio clip, a
// binary resource or a resource link is named by its kind, URI and MIME
// type ("[image content, image/png]"), its data left out.
func mcpResultText(res *mcp.CallToolResult) string {
	if res.StructuredContent != nil && !res.IsError {
		if b, err := json.Marshal(res.StructuredContent); err == nil {
			return string(b)
		}
	}
	parts := make([]string, 0, len(res.Content))
	for _, c := range res.Content {
		switch c := c.(type) {
		case *mcp.TextContent:
			parts = append(parts, c.Text)
		case *mcp.ImageContent:
			parts = append(parts, named("image content", c.MIMEType))
		case *mcp.AudioContent:
			parts = append(parts, named("audio content", c.MIMEType))
		case *mcp.EmbeddedResource:
			switch r := c.Resource; {
			case r == nil:
				parts = append(parts, "[resource]")
			case r.Text != "" || r.Blob == nil:
				parts = append(parts, r.Text)
			default:
				parts = append(parts, named("resource "+r.URI, r.MIMEType))
			}
		case *mcp.ResourceLink:
			parts = append(parts, named("resource link "+c.URI, c.MIMEType))
		default:
			parts = append(parts, "[content]")
		}
	}
	return strings.Join(parts, "\n")
}

// named is "[what, mime]", or "[what]" without a MIME type.
func named(what, mime string) string {
	if mime == "" {
		return "[" + what + "]"
	}
	return "[" + what + ", " + mime + "]"
}
