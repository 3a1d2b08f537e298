package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/template"
	"time"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/server"
)

// serveConfig is the configuration file of 'lazarus serve': one JSON
// object, unknown fields refused. Flags given on the command line override
// its fields. See docs/serve.example.json and 'lazarus serve --help'.
type serveConfig struct {
	// Listen is the HTTP listen address. Default defaultListen.
	Listen string `json:"listen,omitempty"`
	// Dir is the Pebble directory of the store (created if missing). A
	// relative path is resolved against the configuration file's
	// directory (loadConfig), as TokensFile.
	Dir string `json:"dir,omitempty"`
	// Postgres is the DSN of a PostgreSQL store, instead of Dir: a file
	// that sets both is refused (loadConfig), even when a store flag
	// replaces the file's store.
	Postgres string `json:"postgres,omitempty"`
	// Model chooses the model. Default: the scripted demo model.
	Model modelConfig `json:"model"`
	// Settings are the default model settings of every conversation.
	Settings settingsConfig `json:"settings"`
	// HumanTools are the tools a person answers.
	HumanTools []humanToolConfig `json:"human_tools,omitempty"`
	// MCPServers provide server tools.
	MCPServers []mcpConfig `json:"mcp_servers,omitempty"`
	// TokensFile names a JSON file of tokens (token -> identity). A
	// relative path is resolved against the configuration file's
	// directory.
	TokensFile string `json:"tokens_file,omitempty"`
	// TokensEnv names an environment variable holding the same JSON.
	// Default envTokens. Tokens never appear in the config file itself.
	TokensEnv string `json:"tokens_env,omitempty"`
	// OperatorRole is the role that sees everything and may act on every
	// conversation; its answers to human calls are checked by the tools'
	// answered_by rules, as anyone's. Default server.DefaultOperatorRole.
	OperatorRole string `json:"operator_role,omitempty"`
	// PublicMetrics serves /metrics without a token.
	PublicMetrics bool `json:"public_metrics,omitempty"`
	// NoConsole leaves out the web console (/console/).
	NoConsole bool `json:"no_console,omitempty"`
	// ShutdownTimeout bounds the wait for in-flight requests on SIGTERM (a
	// Go duration, not negative; zero: they are cut at once). Default
	// defaultShutdownTimeout.
	ShutdownTimeout string `json:"shutdown_timeout,omitempty"`
	// IdleTimeout bounds how long a keep-alive connection waits for its
	// next request before the node closes it (a Go duration; zero or
	// negative: never). An event stream is a request in progress, not
	// idle: it is never cut by it. Default defaultIdleTimeout.
	IdleTimeout string `json:"idle_timeout,omitempty"`
	// ReadTimeout bounds reading a whole request, headers and body (a Go
	// duration; zero or negative: no bound but the headers'): a client
	// still sending it after that long has its connection closed. It does
	// not bound the answer: an event stream is never cut by it. Default
	// defaultReadTimeout.
	ReadTimeout string `json:"read_timeout,omitempty"`
	// StreamWriteTimeout bounds each write of an event stream (a Go
	// duration, positive): server.Options.StreamWriteTimeout. Default
	// server.DefaultStreamWriteTimeout.
	StreamWriteTimeout string `json:"stream_write_timeout,omitempty"`
	// HumanTimeout is the deadline of a human call whose tool sets none (a
	// Go duration; "-1s" or any negative: never). Default the runtime's.
	HumanTimeout string `json:"human_timeout,omitempty"`
	// ModelTimeout bounds each model call (a Go duration; "-1s" or any
	// negative: no bound): lazarus.Options.ModelTimeout. Default the
	// runtime's (lazarus.DefaultModelTimeout).
	ModelTimeout string `json:"model_timeout,omitempty"`
	// ToolTimeout bounds each server tool run, MCP tools' included (a Go
	// duration; "-1s" or any negative: no bound):
	// lazarus.Options.ToolTimeout. Default the runtime's
	// (lazarus.DefaultToolTimeout).
	ToolTimeout string `json:"tool_timeout,omitempty"`
	// MaxSubscriptions bounds the event streams (and waits) open at once
	// on one conversation: lazarus.Options.MaxSubscriptions (negative: no
	// cap). Default the runtime's (lazarus.DefaultMaxSubscriptions).
	MaxSubscriptions int `json:"max_subscriptions,omitempty"`
}

// modelConfig chooses the model of the node.
type modelConfig struct {
	// Provider is "scripted" (the demo model, the default) or "openai"
	// (any Chat Completions server).
	Provider string `json:"provider,omitempty"`
	// Name is the provider's model name; default $OPENAI_MODEL.
	Name string `json:"name,omitempty"`
	// BaseURL of the API; default $OPENAI_BASE_URL, else OpenAI's.
	BaseURL string `json:"base_url,omitempty"`
	// APIKeyEnv names the environment variable holding the API key.
	// Default OPENAI_API_KEY. The key itself is never in the file.
	APIKeyEnv string `json:"api_key_env,omitempty"`
}

// settingsConfig mirrors agent.Settings.
type settingsConfig struct {
	SystemPrompt string   `json:"system_prompt,omitempty"`
	Model        string   `json:"model,omitempty"`
	Temperature  *float64 `json:"temperature,omitempty"`
	MaxTokens    int64    `json:"max_tokens,omitempty"`
	ToolChoice   string   `json:"tool_choice,omitempty"`
}

// humanToolConfig declares a human tool.
type humanToolConfig struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// Parameters is the JSON schema of the arguments (an object).
	Parameters json.RawMessage `json:"parameters,omitempty"`
	// Prompt is a text/template over the call's arguments object
	// ("Refund {{.amount}} to {{.customer}}?"). Default: the tool's name
	// and the arguments.
	Prompt string `json:"prompt,omitempty"`
	// Timeout is a Go duration ("24h"); negative: never expires. Default
	// the node's human timeout.
	Timeout string `json:"timeout,omitempty"`
	// AnsweredBy says who may answer. Default: anyone who sees the call.
	AnsweredBy *answeredByConfig `json:"answered_by,omitempty"`
}

// answeredByConfig: a resolver qualifies by holding any of Roles, or by
// being the requester of the turn when Requester is set.
type answeredByConfig struct {
	Roles     []string `json:"roles,omitempty"`
	Requester bool     `json:"requester,omitempty"`
}

// mcpConfig names one MCP server: Command (stdio) or URL (streamable
// HTTP), exactly one.
type mcpConfig struct {
	// Name labels the server in progress lines and errors.
	Name string `json:"name"`
	// Command is the program and its arguments, started with the node in
	// the configuration file's directory (dir), so that a relative program
	// ("./server") or argument means the same whatever the node's working
	// directory, as the file's other relative paths.
	Command []string `json:"command,omitempty"`
	// Env adds variables to the command's environment, which is the node's
	// without the variables of its own secrets (secretEnv).
	Env map[string]string `json:"env,omitempty"`
	// URL is the streamable HTTP endpoint.
	URL string `json:"url,omitempty"`
	// Prefix is put before each tool's name ("files_" + "read").
	Prefix string `json:"prefix,omitempty"`
	// Timeout bounds one tool call (a Go duration, positive). Default 60s.
	Timeout string `json:"timeout,omitempty"`
	// ConnectTimeout bounds connecting to the server and listing its
	// tools at start (a Go duration, positive). Default 30s.
	ConnectTimeout string `json:"connect_timeout,omitempty"`
	// dir is the working directory of Command: the configuration file's
	// directory (set by loadConfig; empty: the node's own).
	dir string
	// withhold names the node's environment variables Command does not
	// inherit (set by buildNode: secretEnv), unless Env sets them.
	withhold []string
	// stopGrace is how long closing a stdio server waits for it to exit
	// before each signal to its process group (zero: mcpStopGrace).
	stopGrace time.Duration
	// reconnectBackoff, if set, is the wait after every failed reconnect
	// (zero: mcpReconnectBackoff, doubling up to mcpReconnectBackoffMax).
	reconnectBackoff time.Duration
	// stderr receives a stdio server's stderr, each line prefixed with
	// "mcp server NAME: " (set by buildNode: the command's stderr; nil:
	// discarded).
	stderr io.Writer
}

// tokenConfig is the identity of one token in the tokens JSON.
type tokenConfig struct {
	User  string   `json:"user"`
	Roles []string `json:"roles,omitempty"`
}

// errConfig is wrapped by every error of a bad configuration.
var errConfig = errors.New("bad configuration")

func configErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errConfig, fmt.Sprintf(format, args...))
}

// decodeStrict decodes one JSON object from r into v, refusing unknown
// fields, trailing data and anything but an object (null included, which
// json decodes as nothing).
func decodeStrict(r io.Reader, v any) error {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return err
	}
	if !bytes.HasPrefix(raw, []byte("{")) {
		return errors.New("not a JSON object")
	}
	inner := json.NewDecoder(bytes.NewReader(raw))
	inner.DisallowUnknownFields()
	if err := inner.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("data after the JSON object")
	}
	return nil
}

// loadConfig reads the configuration file path. Its relative paths (dir,
// tokens_file) are resolved against the file's directory, where its stdio
// MCP servers run too, so that the file means the same whatever the
// working directory; the flags that override them are the working
// directory's.
func loadConfig(path string) (*serveConfig, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, configErr("%v", err)
	}
	var cfg serveConfig
	if err := decodeStrict(bytes.NewReader(b), &cfg); err != nil {
		return nil, configErr("%s: %v", path, err)
	}
	// The store is checked here, as the file's durations are, whether or
	// not a flag chooses another store: the file itself is wrong.
	if cfg.Dir != "" && cfg.Postgres != "" {
		return nil, configErr("%s: both dir and postgres are set (choose one store)", path)
	}
	if cfg.Postgres != "" {
		if err := parseDSN(cfg.Postgres); err != nil {
			return nil, configErr("%s: postgres: not a PostgreSQL connection string: %v", path, err)
		}
	}
	for _, p := range []*string{&cfg.Dir, &cfg.TokensFile} {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(filepath.Dir(path), *p)
		}
	}
	for i := range cfg.MCPServers {
		cfg.MCPServers[i].dir = filepath.Dir(path)
	}
	return &cfg, nil
}

// duration parses an optional Go duration of field name.
func duration(name, s string, def time.Duration) (time.Duration, error) {
	if s == "" {
		return def, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, configErr("%s: %v", name, err)
	}
	return d, nil
}

// streamWriteTimeout returns the stream_write_timeout of the
// configuration, server.DefaultStreamWriteTimeout if it sets none; one that
// is not positive is refused.
func (cfg *serveConfig) streamWriteTimeout() (time.Duration, error) {
	d, err := duration("stream_write_timeout", cfg.StreamWriteTimeout, server.DefaultStreamWriteTimeout)
	if err != nil {
		return 0, err
	}
	if d <= 0 {
		return 0, configErr("stream_write_timeout: %s is not positive", cfg.StreamWriteTimeout)
	}
	return d, nil
}

// settings returns the agent.Settings of the configuration.
func (s settingsConfig) settings() agent.Settings {
	return agent.Settings{SystemPrompt: s.SystemPrompt, Model: s.Model, Temperature: s.Temperature,
		MaxTokens: s.MaxTokens, ToolChoice: s.ToolChoice}
}

// tool builds the agent.Tool of a human tool declaration.
func (h humanToolConfig) tool() (agent.Tool, error) {
	t := agent.Tool{Name: h.Name, Description: h.Description, Executor: messages.Executor_EXECUTOR_HUMAN}
	if h.Name == "" {
		return t, configErr("a human tool without a name")
	}
	if len(h.Parameters) > 0 {
		var obj map[string]any
		if err := json.Unmarshal(h.Parameters, &obj); err != nil {
			return t, configErr("human tool %s: parameters must be a JSON schema object: %v", h.Name, err)
		}
		if obj == nil {
			return t, configErr("human tool %s: parameters must be a JSON schema object, not null", h.Name)
		}
		t.Parameters = string(h.Parameters)
	}
	d, err := duration("human tool "+h.Name+": timeout", h.Timeout, 0)
	if err != nil {
		return t, err
	}
	t.Timeout = d
	if h.Prompt != "" {
		tmpl, err := template.New(h.Name).Option("missingkey=zero").Parse(h.Prompt)
		if err != nil {
			return t, configErr("human tool %s: prompt: %v", h.Name, err)
		}
		name := h.Name
		t.Prompt = func(args string) string {
			var data map[string]any
			var b strings.Builder
			if json.Unmarshal([]byte(args), &data) != nil || tmpl.Execute(&b, data) != nil {
				return name + " " + args // the default prompt
			}
			return b.String()
		}
	}
	if a := h.AnsweredBy; a != nil {
		var auths []agent.Authorizer
		for _, r := range a.Roles {
			if r == "" {
				return t, configErr("human tool %s: answered_by: empty role", h.Name)
			}
			auths = append(auths, agent.RequireRole(r))
		}
		if a.Requester {
			auths = append(auths, agent.RequesterOnly())
		}
		if len(auths) == 0 {
			return t, configErr("human tool %s: answered_by names nobody (give roles or requester)", h.Name)
		}
		if len(auths) == 1 {
			t.Authorizer = auths[0]
		} else {
			t.Authorizer = agent.AnyOf(auths...)
		}
	}
	return t, nil
}

// parseTokens reads the tokens JSON: {"TOKEN": {"user": ID, "roles": [...]}}.
func parseTokens(b []byte) (map[string]agent.Identity, error) {
	var raw map[string]tokenConfig
	if err := decodeStrict(bytes.NewReader(b), &raw); err != nil {
		// The error of encoding/json never quotes the input's strings.
		return nil, configErr("tokens: %v", err)
	}
	out := make(map[string]agent.Identity, len(raw))
	for tok, id := range raw {
		if tok == "" {
			return nil, configErr("tokens: an empty token")
		}
		if err := journal.ValidateID("user id", id.User); err != nil {
			return nil, configErr("tokens: a token's user: %v", err)
		}
		out[tok] = agent.Identity{UserID: id.User, Roles: id.Roles}
	}
	return out, nil
}
