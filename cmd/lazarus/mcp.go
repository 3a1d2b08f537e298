package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
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

// mcpReconnectBackoff is how long a server whose reconnect failed is left
// alone before the next call tries again; it doubles with each failure in
// a row, up to mcpReconnectBackoffMax. A session a reconnect made that is
// lost before it served a call or stayed up mcpSessionSettled counts as a
// failed reconnect (a server that crashes after each handshake).
const (
	mcpReconnectBackoff    = time.Second
	mcpReconnectBackoffMax = 30 * time.Second
	mcpSessionSettled      = 30 * time.Second
)

// mcpSession is one MCP server, its session (replaced when a call finds
// it lost: reconnect) and the tools it listed at start.
type mcpSession struct {
	name    string
	cfg     mcpConfig
	version string
	// connectTimeout bounds a connection and its listing of tools;
	// timeout, each call made on a session (not the wait for a reconnect).
	connectTimeout, timeout time.Duration
	tools                   []agent.Tool
	// ctx ends with Close, and with it a reconnect in flight.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // the reconnect in flight
	now    func() time.Time

	mu sync.Mutex
	// session is the current session, nil while the server is lost (a
	// reconnect failed, or one is in flight).
	session *mcp.ClientSession
	proc    *stdioProc // a stdio server's process, of session
	gen     int        // counts the sessions
	// listed is the tools the session lists; offered, those listed at
	// start, which alone are server tools (the runtime's tool set is
	// fixed when it starts).
	listed, offered map[string]bool
	// reconnecting is closed when the reconnect in flight is done.
	reconnecting chan struct{}
	// failures counts the reconnects failed in a row; a reconnect's
	// session counts as failed if lost while fresh, and ends the row once
	// it served a call or stayed up mcpSessionSettled.
	failures int
	// fresh says the session was made by a reconnect, at up, and has not
	// served a call yet; broken, that it was lost while fresh (a failed
	// reconnect), so that calls are not made on it.
	fresh, broken bool
	up            time.Time
	retryAt       time.Time
	lastErr       error
	closed        bool
}

// connectMCP connects to the MCP server of cfg, lists its tools and turns
// each into a server tool whose Run calls it. ctx and cfg's connect
// timeout bound the connection and the listing, not the session. On
// failure nothing is left running
// (a stdio server's process group is ended and the server waited for:
// stdioProc.Close). A call that finds the session lost (a stdio server's
// process exited, an HTTP server that no longer knows the session or
// refuses the connection) reconnects it (callTool).
func connectMCP(ctx context.Context, cfg mcpConfig, version string) (*mcpSession, error) {
	timeout, connectTimeout, err := cfg.check()
	if err != nil {
		return nil, err
	}
	s := &mcpSession{name: cfg.Name, cfg: cfg, version: version, connectTimeout: connectTimeout, timeout: timeout, now: time.Now}
	session, proc, listed, err := s.dial(ctx)
	if err != nil {
		return nil, err
	}
	s.session, s.proc, s.gen = session, proc, 1
	s.listed, s.offered = map[string]bool{}, map[string]bool{}
	for _, t := range listed {
		tool, err := mcpTool(s.callTool, cfg.Prefix, t)
		if err != nil {
			_ = session.Close()
			return nil, fmt.Errorf("mcp server %s: %w", cfg.Name, err)
		}
		s.tools = append(s.tools, tool)
		s.listed[t.Name], s.offered[t.Name] = true, true
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// dial connects to the server and lists its tools, within ctx and the
// connect timeout; on failure nothing is left running.
func (s *mcpSession) dial(ctx context.Context) (*mcp.ClientSession, *stdioProc, []*mcp.Tool, error) {
	cfg, connectTimeout := s.cfg, s.connectTimeout
	connectCtx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	ctx = connectCtx
	var transport mcp.Transport
	var stdio *stdioTransport
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
		stdio = &stdioTransport{cmd: cmd, grace: cfg.stopGrace, stderr: cfg.stderr, prefix: "mcp server " + cfg.Name + ": "}
		transport = stdio
	default:
		transport = &mcp.StreamableClientTransport{Endpoint: cfg.URL, DisableStandaloneSSE: true}
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "lazarus", Version: s.version}, nil)
	ct := &closingTransport{Transport: transport}
	session, err := client.Connect(ctx, ct, nil)
	if err != nil {
		// The SDK does not close the connection on every failure (a server
		// answering a protocol version it does not support): a stdio
		// server would be left running, never reaped.
		ct.close()
		return nil, nil, nil, fmt.Errorf("mcp server %s: connect: %w", cfg.Name, connectErr(ctx, connectTimeout, err))
	}
	var proc *stdioProc
	if stdio != nil {
		proc = stdio.proc
	}
	// A server without the tools capability has no tools: it may refuse
	// tools/list, which is then no failure. One that declares none but
	// lists some all the same has them.
	noTools := session.InitializeResult().Capabilities == nil || session.InitializeResult().Capabilities.Tools == nil
	var listed []*mcp.Tool
	for t, err := range session.Tools(ctx, nil) {
		if err != nil && noTools && len(listed) == 0 {
			break
		}
		if err != nil {
			_ = session.Close()
			return nil, nil, nil, fmt.Errorf("mcp server %s: list tools: %w", cfg.Name, connectErr(ctx, connectTimeout, err))
		}
		listed = append(listed, t)
	}
	return session, proc, listed, nil
}

// callTool calls a tool of the server. A call that finds the session lost
// (sessionLost) reconnects it, at most once, and is made again on the new
// session with the same params (the same tool_call_id: at least once).
// Calls share a reconnect in flight; a reconnect that fails leaves the
// server alone for a backoff (mcpReconnectBackoff, doubling), during which
// a call fails at once saying when it is tried again. A reconnect's
// session lost before it served a call or stayed up mcpSessionSettled
// counts as a failed reconnect, so a server that crashes after each
// handshake is backed off too. After a reconnect, a tool the server no
// longer lists fails; one it lists for the first time is not offered
// (reconnect says so). Each call made on a session is bounded by the
// server's timeout (bounded); the wait for a reconnect is not, the
// reconnect being bounded by the connect timeout, so that a slow
// reconnect does not eat the time of the call made again.
func (s *mcpSession) callTool(ctx context.Context, params *mcp.CallToolParams) (*mcp.CallToolResult, error) {
	lost := 0
	for {
		cs, proc, gen, waited, err := s.current(ctx, params.Name, lost)
		if err != nil {
			return nil, err
		}
		res, err := bounded(cs.CallTool, s.timeout)(ctx, params)
		if err == nil {
			s.served(gen)
			return res, nil
		}
		if ctx.Err() != nil || errors.Is(err, agent.ErrToolTimeout) || !sessionLost(err, proc) {
			return res, err
		}
		if waited || lost != 0 {
			// Lost again since a reconnect: at most one per call.
			return nil, s.lostAgain(gen, err)
		}
		lost = gen
	}
}

// served records that the session gen served a call: a fresh one ends
// the row of failed reconnects.
func (s *mcpSession) served(gen int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if gen == s.gen && s.fresh {
		s.fresh, s.failures = false, 0
	}
}

// lostAgain is err, of a call that found the session gen lost after a
// reconnect, saying so if that starts a backoff (foundLost).
func (s *mcpSession) lostAgain(gen int, err error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if gen != s.gen || s.session == nil || !s.foundLost() {
		return err
	}
	return fmt.Errorf("%w; %v: it is tried again in %v", err, s.lastErr, s.retryAt.Sub(s.now()).Round(time.Millisecond))
}

// foundLost records that a call found the current session lost and
// reports whether the server is now left alone for a backoff: a fresh
// session lost before it stayed up mcpSessionSettled counts as a failed
// reconnect (it is then broken); one that stayed up that long ends the
// row of failures. Called with s.mu held.
func (s *mcpSession) foundLost() bool {
	if !s.fresh {
		return s.broken
	}
	s.fresh = false
	up := s.now().Sub(s.up)
	if up >= mcpSessionSettled {
		s.failures = 0
		return false
	}
	s.broken = true
	s.backOff(fmt.Errorf("mcp server %s: lost again %v after it was reconnected, before it served a call", s.name, up.Round(time.Millisecond)))
	return true
}

// backOff counts a failed reconnect, of error err, and leaves the server
// alone for the backoff that follows. Called with s.mu held.
func (s *mcpSession) backOff(err error) {
	s.failures++
	backoff := mcpBackoff(s.failures)
	if s.cfg.reconnectBackoff > 0 {
		backoff = s.cfg.reconnectBackoff
	}
	s.retryAt, s.lastErr = s.now().Add(backoff), err
	if !s.closed {
		s.report("%v; tried again in %v", err, backoff)
	}
}

// current is the session to call the tool name on: the current one, but
// for lost, a session found lost, which is reconnected first (or the one
// another call's reconnect made since); waited says it waited for a
// reconnect. A closed session, a reconnect that fails, a backoff and a
// tool the new session does not list are errors.
func (s *mcpSession) current(ctx context.Context, name string, lost int) (cs *mcp.ClientSession, proc *stdioProc, gen int, waited bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		if s.closed {
			return nil, nil, 0, waited, fmt.Errorf("mcp server %s: %w", s.name, mcp.ErrConnectionClosed)
		}
		if s.session != nil && s.gen != lost && !s.broken {
			if !s.listed[name] {
				return nil, nil, 0, waited, fmt.Errorf("mcp server %s no longer lists the tool since it was reconnected", s.name)
			}
			return s.session, s.proc, s.gen, waited, nil
		}
		if waited {
			// The reconnect this call waited for failed: at most one
			// per call.
			return nil, nil, 0, waited, fmt.Errorf("mcp server %s is lost and did not reconnect: %w; it is tried again in %v",
				s.name, s.lastErr, s.retryAt.Sub(s.now()).Round(time.Millisecond))
		}
		done := s.reconnecting
		if done == nil {
			if s.session != nil && s.gen == lost {
				s.foundLost()
			}
			if now := s.now(); now.Before(s.retryAt) {
				return nil, nil, 0, waited, fmt.Errorf("mcp server %s is lost: %w; it is tried again in %v (at %s)",
					s.name, s.lastErr, s.retryAt.Sub(now).Round(time.Millisecond), s.retryAt.UTC().Format(time.RFC3339))
			}
			done = make(chan struct{})
			s.reconnecting = done
			old := s.session
			s.session, s.proc = nil, nil
			s.wg.Add(1)
			go s.reconnect(old, done)
		}
		s.mu.Unlock()
		select {
		case <-done:
		case <-ctx.Done():
			s.mu.Lock()
			return nil, nil, 0, waited, ctx.Err()
		}
		s.mu.Lock()
		waited = true
	}
}

// reconnect closes the lost session old (if any) and connects again,
// within the connect timeout and until Close; then closes done.
func (s *mcpSession) reconnect(old *mcp.ClientSession, done chan struct{}) {
	defer s.wg.Done()
	defer close(done)
	if old != nil {
		err := old.Close()
		if err == nil || errors.Is(err, context.Canceled) {
			s.report("mcp server %s: session lost; reconnecting", s.name)
		} else {
			s.report("mcp server %s: session lost: %v; reconnecting", s.name, err)
		}
	}
	session, proc, listed, err := s.dial(s.ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reconnecting = nil
	if err == nil && s.closed {
		_ = session.Close()
		err = fmt.Errorf("mcp server %s: %w", s.name, mcp.ErrConnectionClosed)
	}
	if err != nil {
		s.backOff(err)
		return
	}
	// The row of failures ends once the session served a call or stayed
	// up a while (served, foundLost), not here: a server that crashes
	// after each handshake would be restarted at every call.
	s.session, s.proc, s.lastErr = session, proc, nil
	s.fresh, s.broken, s.up = true, false, s.now()
	s.gen++
	s.listed = map[string]bool{}
	var added []string
	for _, t := range listed {
		s.listed[t.Name] = true
		if !s.offered[t.Name] {
			added = append(added, t.Name)
		}
	}
	if len(added) > 0 {
		slices.Sort(added)
		s.report("mcp server %s: lists tools it did not list at start, not offered until the node restarts: %s", s.name, strings.Join(added, ", "))
	}
}

// report writes a line to the node's stderr (cfg.stderr, if set).
func (s *mcpSession) report(format string, args ...any) {
	if s.cfg.stderr != nil {
		fmt.Fprintf(s.cfg.stderr, format+"\n", args...)
	}
}

// mcpBackoff is the wait after failures reconnects failed in a row:
// mcpReconnectBackoff, doubling with each, up to mcpReconnectBackoffMax.
func mcpBackoff(failures int) time.Duration {
	d := mcpReconnectBackoff
	for i := 1; i < failures && d < mcpReconnectBackoffMax; i++ {
		d *= 2
	}
	return min(d, mcpReconnectBackoffMax)
}

// Close ends a reconnect in flight and closes the current session. It
// returns the session's close error (a stdio server's exit error).
func (s *mcpSession) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
	s.mu.Lock()
	cs := s.session
	s.session, s.proc = nil, nil
	s.mu.Unlock()
	if cs == nil {
		return nil
	}
	return cs.Close()
}

// sessionLost reports whether a call's err says that its session is gone:
// the connection closed (a stdio server's process exited: proc, if not
// nil, or its stdout was closed, which Wait does once it has exited, maybe
// before the call sees proc's exit), an HTTP server that no longer knows
// the session (the SDK's error for its 404 is not exported, hence its
// text) or refuses connections.
func sessionLost(err error, proc *stdioProc) bool {
	if proc != nil {
		select {
		case <-proc.exited:
			return true
		default:
		}
		if errors.Is(err, os.ErrClosed) {
			return true
		}
	}
	if errors.Is(err, mcp.ErrConnectionClosed) || errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNREFUSED) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "session not found") || strings.Contains(msg, "connection refused")
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

// mcpCall calls an MCP tool.
type mcpCall func(context.Context, *mcp.CallToolParams) (*mcp.CallToolResult, error)

// bounded is call bounded by timeout: a call that passes it (ctx not
// ended) fails with an error wrapping agent.ErrToolTimeout, saying so.
func bounded(call mcpCall, timeout time.Duration) mcpCall {
	return func(ctx context.Context, params *mcp.CallToolParams) (*mcp.CallToolResult, error) {
		callCtx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		res, err := call(callCtx, params)
		if err != nil && errors.Is(callCtx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
			// The server's call timeout passed, not the run's bound: a
			// timeout all the same (code agent.CodeTimeout).
			return nil, fmt.Errorf("no result within the server's call timeout, %v: %w: %w", timeout, agent.ErrToolTimeout, err)
		}
		return res, err
	}
}

// mcpTool is the server tool, named t's name after prefix, that calls the
// MCP tool t with call, which bounds each call itself (bounded). Its
// errors name it as the model calls it and, with a prefix, as the server
// lists it ("tool calc_add (mcp tool add): ...").
func mcpTool(call mcpCall, prefix string, t *mcp.Tool) (agent.Tool, error) {
	tool := agent.Tool{Name: prefix + t.Name, Description: t.Description, Executor: messages.Executor_EXECUTOR_SERVER}
	if t.InputSchema != nil {
		b, err := json.Marshal(t.InputSchema)
		if err != nil {
			return tool, fmt.Errorf("tool %s: input schema: %w", t.Name, err)
		}
		tool.Parameters = string(b)
	}
	name := t.Name
	// Its errors name the tool as the model called it and, with a prefix,
	// as the server lists it.
	label := "mcp tool " + name
	if prefix != "" {
		label = fmt.Sprintf("tool %s (mcp tool %s)", tool.Name, name)
	}
	tool.Run = func(ctx context.Context, inv agent.Invocation) (string, error) {
		params := &mcp.CallToolParams{
			Meta:      mcp.Meta{mcpToolCallIDKey: inv.ToolCallID},
			Name:      name,
			Arguments: json.RawMessage(inv.Arguments),
		}
		res, err := call(ctx, params)
		if err != nil {
			return "", fmt.Errorf("%s: %w", label, err)
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
				return "", fmt.Errorf("%s failed and gave no message", label)
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
