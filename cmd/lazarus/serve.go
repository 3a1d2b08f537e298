package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/openai"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/server"
)

// Defaults of 'lazarus serve'.
const (
	defaultListen          = "127.0.0.1:8080"
	defaultShutdownTimeout = 30 * time.Second
	// defaultIdleTimeout and defaultReadTimeout are the http.Server's
	// bounds when the configuration sets none (server.DefaultIdleTimeout,
	// server.DefaultReadTimeout); its headers' is
	// server.DefaultReadHeaderTimeout.
	defaultIdleTimeout = server.DefaultIdleTimeout
	defaultReadTimeout = server.DefaultReadTimeout
	// envTokens is the environment variable read for the tokens JSON when
	// neither --tokens nor tokens_file is given (tokens_env renames it).
	envTokens = "LAZARUS_TOKENS"
	// serveVersion is what the node tells MCP servers it is.
	serveVersion = "dev"
)

var serveCmd = &command{
	name:     "serve",
	synopsis: "[--config FILE] [--listen ADDR] [--dir DIR | --postgres DSN] [--model scripted|openai] [--tokens FILE] [--shutdown-timeout D]",
	summary:  "run a node: the HTTP API (package server) over a runtime on a store",
	help: `
Runs a Lazarus node: a runtime on the store (--dir, a Pebble directory
created if missing, or --postgres), served over HTTP on --listen: the JSON
API under /v1/, server-sent event streams, the web console at /console/
(unless no_console), /metrics, /healthz, /readyz (see package server). The other commands reach it with --server URL.

The configuration file (--config, JSON, unknown fields refused) gives the
store, the listen address, the model, the default model settings, the
human tools (name, description, JSON schema of the arguments, a prompt
template over the arguments, a timeout, who may answer: roles and/or the
requester), the MCP servers whose tools become server tools (a stdio
command or a streamable HTTP url; their tools are listed at start, once
the whole file is checked: a bad file starts none; each server's
connect_timeout, default 30s, bounds its connection and listing), and
where the tokens are. Flags override it; a store flag (--dir or
--postgres) replaces the file's store, which is dir or postgres (a file
that sets both is refused), and $` + envPostgres + ` then $` + envDir + `
are read only when neither names one. Its relative paths (dir,
tokens_file) are resolved against the file's directory, a flag's against
the working directory; a stdio MCP server runs in the file's directory,
with the node's environment but for the tokens' variable and
$` + envPostgres + ` (its env may set them), in a process group of its
own: when the node stops, its stdin is closed, then the group (the server
and what it started) gets SIGTERM after 5s and SIGKILL 5s later. A call
that finds its MCP server lost (a stdio server's process exited, an HTTP
server that no longer knows the session or refuses the connection)
reconnects it within connect_timeout (calls share one reconnect) and is
made again on the new session with the same tool_call_id (at least
once), its timeout, which bounds each call made on a session, starting
then; a failed reconnect leaves the server alone for 1s, doubling up to
30s, during which its calls fail at once saying when it is tried again.
The tools stay those listed at start until the node restarts: one a
reconnected server no longer lists fails, one it lists for the first
time is not offered (stderr says so). A
reconnect's session lost again before it served a call or stayed up 30s
(a server in a crash loop) counts as a failed reconnect. An example is in the project's
docs/serve.example.json; the format is in README.md.

Model: "scripted" (the default) is a demo model, no language model: it
answers "/call TOOL {JSON}" with a call of TOOL, a tool result by quoting
it, and anything else with "You said: ...". "openai" is any Chat
Completions server, configured from the file and OPENAI_BASE_URL,
OPENAI_API_KEY, OPENAI_MODEL. Each model call is bounded by model_timeout
(default 10m; negative: no bound): a call still running then fails with
the code timeout and is retried like any failed call. Each server tool
run (MCP tools' included) is bounded by tool_timeout (default 10m;
negative: no bound): a run still going then ends with a tool error of
code timeout, which the model reads.

Tokens: a JSON object {"TOKEN": {"user": "ID", "roles": ["operator"]}}
read from --tokens FILE, the config's tokens_file, or else the
environment variable $` + envTokens + ` (tokens_env renames it). Tokens are
never logged. Without tokens every /v1/ request is refused (401).

A keep-alive connection idle between requests longer than idle_timeout
(default 2m) is closed; an event stream is never idle. A request whose
headers and body are not all read within read_timeout (default 1m) has its
connection closed; it bounds the request only, not the answer, so an event
stream is never cut by it. A write of an event stream that the client has
not taken in within stream_write_timeout (default 1m) cuts the stream. A
conversation has at most max_subscriptions event streams open at once
(default 1024; negative: no cap): one more is refused with 429
too_many_subscriptions.

Progress lines go to stderr: the store, the model and its timeout, the
tool timeout, the streams a conversation may have, each tool, the
listening address; so do the stdio MCP servers' stderr lines, each
prefixed with "mcp server NAME: ". SIGTERM or SIGINT stops it gracefully: it
stops accepting connections, ends the event streams (each with the code
closed, so that clients reconnect), waits for the requests in flight (at
most --shutdown-timeout), then closes the runtime and the store, then the
MCP servers, all at once (a stdio server that does not exit when its stdin
closes is signalled after 5s: about 10s at most), and exits with status
0. A second SIGTERM or SIGINT during that stop exits at once
with status 7, saying so on stderr: the requests in flight get no answer
and the runtime is not closed, as for a killed process (every write
acknowledged before is durable). A second signal exits every other
command at once with status 7 too.`,
	run: (*cli).serve,
}

func (c *cli) serve(ctx context.Context, fs *flags, args []string) (err error) {
	configPath := fs.String("config", "", "the configuration `file` (JSON)")
	listen := fs.String("listen", "", "the HTTP listen `address` (default "+defaultListen+")")
	modelName := fs.String("model", "", "the model `provider`: scripted (the demo model, default) or openai")
	tokensPath := fs.String("tokens", "", "the tokens `file` (JSON; default $"+envTokens+")")
	shutdownTimeout := fs.Duration("shutdown-timeout", 0, "bound on the wait for requests in flight at shutdown, not negative (default 30s; 0: cut them at once)")
	if _, err := c.parse(fs, args, 0, 0); err != nil {
		return err
	}
	cfg := &serveConfig{}
	if *configPath != "" {
		if cfg, err = loadConfig(*configPath); err != nil {
			return err
		}
	}
	// Flags over the file.
	if *listen != "" {
		cfg.Listen = *listen
	}
	if *modelName != "" {
		cfg.Model.Provider = *modelName
	}
	if *tokensPath != "" {
		cfg.TokensFile = *tokensPath
	}
	dir, pg := cmp.Or(fs.dir, c.dir), cmp.Or(fs.postgres, c.postgres)
	switch {
	case dir != "" && pg != "":
		return usagef("--dir and --postgres both given")
	case dir != "":
		cfg.Dir, cfg.Postgres = dir, ""
	case pg != "":
		if err := parseDSN(pg); err != nil {
			return badDSN("--postgres", err)
		}
		cfg.Dir, cfg.Postgres = "", pg
	case cfg.Dir == "" && cfg.Postgres == "":
		cfg.Postgres = c.getenv(envPostgres)
		if cfg.Postgres == "" {
			cfg.Dir = c.getenv(envDir)
		} else if err := parseDSN(cfg.Postgres); err != nil {
			return badDSN("$"+envPostgres, err)
		}
	}
	if cfg.Listen == "" {
		cfg.Listen = defaultListen
	}
	grace, err := duration("shutdown_timeout", cfg.ShutdownTimeout, defaultShutdownTimeout)
	if err != nil {
		return err
	}
	switch {
	case isSet(fs, "shutdown-timeout") && *shutdownTimeout < 0:
		return usagef("--shutdown-timeout must not be negative")
	case isSet(fs, "shutdown-timeout"):
		grace = *shutdownTimeout
	case grace < 0:
		return configErr("shutdown_timeout: %s is negative", cfg.ShutdownTimeout)
	}
	idle, err := duration("idle_timeout", cfg.IdleTimeout, defaultIdleTimeout)
	if err != nil {
		return err
	}
	read, err := duration("read_timeout", cfg.ReadTimeout, defaultReadTimeout)
	if err != nil {
		return err
	}
	n, err := c.buildNode(ctx, cfg)
	if err != nil {
		return err
	}
	return n.run(ctx, grace, idle, read)
}

// progress prints one progress line of serve on stderr.
func (c *cli) progress(format string, args ...any) {
	fmt.Fprintf(c.lockedStderr(), "lazarus serve: "+format+"\n", args...)
}

// node is a configured, not yet listening, node.
type node struct {
	c      *cli
	cfg    *serveConfig
	rt     *lazarus.Runtime
	mcps   []*mcpSession
	srv    *server.Server
	ln     net.Listener
	closed bool
}

// buildNode opens everything serve needs, printing what it opened. On
// failure it closes what it opened.
func (c *cli) buildNode(ctx context.Context, cfg *serveConfig) (_ *node, err error) {
	n := &node{c: c, cfg: cfg}
	defer func() {
		if err != nil {
			_ = n.close()
		}
	}()
	if cfg.Dir == "" && cfg.Postgres == "" {
		return nil, usagef("no store: pass --dir DIR or --postgres DSN, set dir or postgres in the config, or set $%s", envDir)
	}
	if cfg.Dir != "" && cfg.Postgres != "" {
		return nil, configErr("both dir and postgres are set")
	}

	model, what, err := buildModel(cfg.Model, c.getenv)
	if err != nil {
		return nil, err
	}
	var tools []agent.Tool
	for _, h := range cfg.HumanTools {
		t, err := h.tool()
		if err != nil {
			return nil, err
		}
		tools = append(tools, t)
	}
	// Every MCP server's entry is checked before any is started.
	named := map[string]bool{}
	for _, m := range cfg.MCPServers {
		if _, _, err := m.check(); err != nil {
			return nil, err
		}
		if named[m.Name] {
			return nil, configErr("mcp server %s: two servers have that name", m.Name)
		}
		named[m.Name] = true
	}
	tokens, err := c.loadTokens(cfg)
	if err != nil {
		return nil, err
	}
	auth, err := server.NewBearerTokens(tokens)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errConfig, err)
	}
	humanTimeout, err := duration("human_timeout", cfg.HumanTimeout, 0)
	if err != nil {
		return nil, err
	}
	modelTimeout, err := duration("model_timeout", cfg.ModelTimeout, 0)
	if err != nil {
		return nil, err
	}
	toolTimeout, err := duration("tool_timeout", cfg.ToolTimeout, 0)
	if err != nil {
		return nil, err
	}
	streamWrite, err := cfg.streamWriteTimeout()
	if err != nil {
		return nil, err
	}

	// The address is taken before the store is opened, so that a bad or
	// busy one creates no store (nor migrates a database).
	if n.ln, err = net.Listen("tcp", cfg.Listen); err != nil {
		return nil, err
	}

	// The MCP servers are started once the rest of the configuration is
	// known to be good and the address is taken: a bad file starts none.
	owner := map[string]string{} // tool name -> the MCP server that gives it
	for _, t := range tools {
		owner[t.Name] = "human_tools"
	}
	for _, m := range cfg.MCPServers {
		m.withhold = secretEnv(cfg)
		m.stderr = c.lockedStderr()
		s, err := connectMCP(ctx, m, serveVersion)
		if err != nil {
			return nil, err
		}
		n.mcps = append(n.mcps, s)
		for _, t := range s.tools {
			if other, dup := owner[t.Name]; dup {
				if other == "mcp server "+m.Name {
					// A prefix would not help.
					return nil, configErr("mcp server %s: lists tool %s twice", m.Name, t.Name)
				}
				return nil, configErr("mcp server %s: tool %s is also one of %s; give the server a prefix", m.Name, t.Name, other)
			}
			owner[t.Name] = "mcp server " + m.Name
		}
		where := m.URL
		if where == "" {
			where = strings.Join(m.Command, " ")
		}
		c.progress("mcp server %s (%s): %d tools", m.Name, where, len(s.tools))
		tools = append(tools, s.tools...)
	}

	metrics := server.NewMetrics()
	opts := lazarus.Options{
		Dir: cfg.Dir, Postgres: cfg.Postgres, Model: model, Tools: tools,
		Settings: cfg.Settings.settings(), HumanTimeout: humanTimeout, ModelTimeout: modelTimeout,
		ToolTimeout: toolTimeout, MaxSubscriptions: cfg.MaxSubscriptions,
		Metrics: metrics.Hooks(),
		// A turn the node resumes on its own (after a restart, an answer)
		// runs as the requester the log recorded: the identity its token
		// carried then.
		ScopeLoader: func(_ context.Context, id agent.Identity) (agent.Scope, error) { return agent.ScopeOf(id), nil },
		// A node is this process's one job: the embedded store's WAL syncs
		// get a P of their own (pebblejournal.Options.RaiseGOMAXPROCS).
		RaiseGOMAXPROCS: true,
	}
	store := "pebble directory " + cfg.Dir
	if cfg.Postgres != "" {
		store = "postgresql" // the DSN may hold a password: not printed
	}
	c.progress("opening the store: %s", store)
	if n.rt, err = lazarus.Open(opts); err != nil {
		if isLocked(err) {
			return nil, fmt.Errorf("%s: %w: another process has it open", cfg.Dir, errBusy)
		}
		return nil, damagedOnOpen(err)
	}
	c.progress("model: %s", what)
	c.progressBound("model timeout", opts.ModelTimeout, lazarus.DefaultModelTimeout)
	c.progressBound("tool timeout", opts.ToolTimeout, lazarus.DefaultToolTimeout)
	if m := opts.MaxSubscriptions; m < 0 {
		c.progress("streams per conversation: no cap")
	} else {
		c.progress("streams per conversation: at most %d", cmp.Or(m, lazarus.DefaultMaxSubscriptions))
	}
	if s := opts.Settings; !s.IsZero() {
		c.progress("default settings: system prompt of %d bytes, model %q, tool choice %q", len(s.SystemPrompt), s.Model, s.ToolChoice)
	}
	for _, t := range tools {
		kind := "human"
		if t.Executor == messages.Executor_EXECUTOR_SERVER {
			kind = "server (mcp)"
		}
		c.progress("tool %s: %s", t.Name, kind)
	}
	c.progress("%d tokens", len(tokens))
	if len(tokens) == 0 {
		c.progress("warning: no tokens; every /v1/ request will be refused (401)")
	}
	n.srv = server.New(n.rt, server.Options{
		Authenticator: auth, OperatorRole: cfg.OperatorRole, Metrics: metrics, StreamWriteTimeout: streamWrite,
		PublicMetrics: cfg.PublicMetrics, NoConsole: cfg.NoConsole, Logger: slog.New(slog.NewTextHandler(c.lockedStderr(), &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	return n, nil
}

// buildModel returns the model of cfg and a line describing it.
func buildModel(cfg modelConfig, getenv func(string) string) (agent.Model, string, error) {
	switch cfg.Provider {
	case "", "scripted":
		return newDemoModel(), "scripted (the demo model: \"/call TOOL {JSON}\" calls a tool, anything else is echoed)", nil
	case "openai":
		o := openai.Options{Model: cfg.Name, BaseURL: cfg.BaseURL}
		if o.Model == "" {
			o.Model = getenv(openai.EnvModel)
		}
		if o.BaseURL == "" {
			o.BaseURL = getenv(openai.EnvBaseURL)
		}
		keyEnv := cfg.APIKeyEnv
		if keyEnv == "" {
			keyEnv = openai.EnvAPIKey
		}
		o.APIKey = getenv(keyEnv)
		m, err := openai.New(o)
		if err != nil {
			return nil, "", fmt.Errorf("%w: %w", errConfig, err)
		}
		where := o.BaseURL
		if where == "" {
			where = "the OpenAI API"
		}
		return m, fmt.Sprintf("openai-compatible %s at %s", o.Model, where), nil
	}
	return nil, "", configErr("model provider %q: want scripted or openai", cfg.Provider)
}

// loadTokens reads the tokens of cfg: its file, else its environment
// variable.
func (c *cli) loadTokens(cfg *serveConfig) (map[string]agent.Identity, error) {
	if cfg.TokensFile != "" {
		b, err := os.ReadFile(cfg.TokensFile)
		if err != nil {
			return nil, configErr("tokens: %v", err)
		}
		return parseTokens(b)
	}
	env := cfg.TokensEnv
	if env == "" {
		env = envTokens
	}
	if v := c.getenv(env); v != "" {
		return parseTokens([]byte(v))
	}
	return map[string]agent.Identity{}, nil
}

// run serves until ctx ends (SIGTERM, SIGINT) or the listener fails, then
// shuts down: no new connection, event streams ended, requests in flight
// finished (at most grace), then the runtime and the store closed. A
// keep-alive connection waiting for its next request longer than idle is
// closed (idle <= 0: never), and so is one whose request, headers and body,
// is not read within read (read <= 0: no bound but the headers').
func (n *node) run(ctx context.Context, grace, idle, read time.Duration) (err error) {
	defer func() {
		if cerr := n.close(); err == nil {
			err = cerr
		}
	}()
	// Event streams never end on their own: they are cut when shutdown
	// starts, so that Shutdown waits only for the requests that finish.
	streams, endStreams := context.WithCancel(context.Background())
	defer endStreams()
	if idle <= 0 {
		idle = -1 // none (http.Server reads 0 as ReadTimeout's)
	}
	if read < 0 {
		read = 0 // none
	}
	hs := &http.Server{
		Handler:           cutStreams(streams, n.srv),
		ReadHeaderTimeout: server.DefaultReadHeaderTimeout,
		// The whole request, its body included. It bounds reading the
		// request only: once its body is read (an event stream's GET has
		// none) the connection's read deadline is lifted, so a stream is
		// not cut by it. No WriteTimeout: a stream bounds each of its
		// writes itself (server.Options.StreamWriteTimeout).
		ReadTimeout: read,
		// Between requests only: an event stream in progress is not idle.
		IdleTimeout: idle,
		ErrorLog:    slog.NewLogLogger(slog.NewTextHandler(n.c.lockedStderr(), nil), slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(n.ln) }()
	n.c.progress("listening on http://%s", n.ln.Addr())
	if !n.cfg.NoConsole {
		n.c.progress("web console at http://%s/console/", n.ln.Addr())
	}

	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	n.c.progress("shutting down: no new requests; waiting up to %s for those in flight", grace)
	endStreams()
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		n.c.progress("requests still running after %s are cut: %v", grace, err)
		_ = hs.Close()
	}
	<-served // http.ErrServerClosed
	return nil
}

// progressBound prints the bound in effect of a timeout option: none when
// negative, def when zero, else t.
func (c *cli) progressBound(what string, t, def time.Duration) {
	switch {
	case t < 0:
		c.progress("%s: none", what)
	case t == 0:
		c.progress("%s: %v", what, def)
	default:
		c.progress("%s: %v", what, t)
	}
}

// close closes the runtime (and so the store it opened), then the MCP
// sessions, all at once, once. A stdio server takes at most about
// 2*mcpStopGrace (stdioProc.Close; twice more only if a process survives
// SIGKILL or left the group holding its stderr).
func (n *node) close() error {
	if n.closed {
		return nil
	}
	n.closed = true
	var errs []error
	if n.ln != nil {
		_ = n.ln.Close() // already closed by Shutdown, or never served
	}
	if n.rt != nil {
		if err := n.rt.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close the runtime: %w", err))
		} else {
			n.c.progress("store closed")
		}
	}
	// All at once: a stdio server may take its grace to exit, and the
	// stop should cost one grace, not one per server.
	var wg sync.WaitGroup
	for _, s := range n.mcps {
		wg.Go(func() {
			if err := s.Close(); err != nil && !errors.Is(err, context.Canceled) {
				n.c.progress("mcp server %s: close: %v", s.name, err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// cutStreams gives the event-stream requests of h (paths ending in
// /stream) a context that also ends when streams does, with a cause
// wrapping lazarus.ErrClosed: the server ends such a stream with the code
// "closed", so its client knows the node went away and may reconnect.
func cutStreams(streams context.Context, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/stream") {
			ctx, cancel := context.WithCancelCause(r.Context())
			defer cancel(nil)
			stop := context.AfterFunc(streams, func() {
				cancel(fmt.Errorf("lazarus serve: shutting down: %w", lazarus.ErrClosed))
			})
			defer stop()
			r = r.WithContext(ctx)
		}
		h.ServeHTTP(w, r)
	})
}
