package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// Documented limits and defaults.
const (
	// MaxNameBytes bounds a tool name. Names are 1..MaxNameBytes bytes of
	// ASCII letters, digits, '_' and '-': the intersection of what the major
	// model providers accept, so one Registry works with any of them.
	MaxNameBytes = 64
	// MaxResultBytes bounds the JSON content of a server tool's result, so
	// the tool_result event always fits journal.MaxEventBytes. A larger
	// result becomes a tool error of code CodeTooLarge.
	MaxResultBytes = journal.MaxEventBytes / 2
	// MaxErrorBytes bounds the message of a tool error outcome; a longer one
	// is cut (at a rune boundary) and ends in "...".
	MaxErrorBytes = 4 << 10
	// MaxPromptBytes bounds what a human call asks (Tool.Prompt, or the
	// default prompt); a longer prompt is cut (at a rune boundary) and ends
	// in "...". The prompt is in the call's row, its suspension event and
	// the conversation's pending calls, each of which a Store bounds.
	MaxPromptBytes = 16 << 10
	// DefaultHumanTimeout is the deadline of a human tool whose Timeout is 0,
	// unless the Registry was given another with WithDefaultTimeout.
	DefaultHumanTimeout = 24 * time.Hour
)

// Codes of tool error outcomes (messages.ToolError.Code). The model sees the
// error message; the code is for programs.
const (
	// CodeTool: the tool returned an error.
	CodeTool = "tool"
	// CodeScope: the tool refused the caller's scope (ErrScope).
	CodeScope = "scope"
	// CodePanic: the tool panicked; the panic was recovered. The runtime
	// reports a tool that called runtime.Goexit (as t.FailNow does) with
	// it too.
	CodePanic = "panic"
	// CodeCanceled: the run's context was done and the tool returned an
	// error. The outcome says nothing about the tool: the runtime should not
	// record it, and re-dispatches the call (same id) after a revival.
	CodeCanceled = "canceled"
	// CodeInvalid: the call itself is wrong (unknown tool, arguments that
	// are not a JSON object, not a server tool, no tool call id).
	CodeInvalid = "invalid"
	// CodeTooLarge: the result exceeded MaxResultBytes.
	CodeTooLarge = "too_large"
	// CodeExpired: a human call's deadline passed before an answer. The
	// runtime's expiry path uses it; RunServer never returns it.
	CodeExpired = "expired"
	// CodeTimeout: a server tool's run passed its bound (Tool.RunTimeout,
	// else the runtime's lazarus.Options.ToolTimeout): its context ended
	// with context.DeadlineExceeded and it returned an error. The runtime
	// records it as the call's result, as any tool error. RunServer returns
	// it only for a tool's own bound: an error wrapping ErrToolTimeout.
	CodeTimeout = "timeout"
	// CodeRejected: a person declined a human call (Runtime.Reject, or
	// `lazarus resolve --reject`). The message is their reason.
	CodeRejected = "rejected"
)

// ErrScope is the error of a tool that refuses the caller's scope. RunServer
// reports it with code CodeScope, both when it refuses a RequiresUser tool
// itself and when a tool returns an error wrapping ErrScope.
var ErrScope = errors.New("agent: tool requires a user scope")

// ErrToolTimeout is the error of a server tool whose own bound on a run
// passed (an MCP server's call timeout, say). RunServer reports an error
// wrapping it with code CodeTimeout, as the runtime reports a run that
// passed Tool.RunTimeout.
var ErrToolTimeout = errors.New("agent: tool timed out")

// Invocation is one call of a tool, as the runtime hands it to a server tool.
type Invocation struct {
	// ConversationID names the conversation the call belongs to.
	ConversationID string
	// ToolCallID is the call's id, minted by the runtime: the tool's
	// idempotency key.
	ToolCallID string
	// Name is the tool's name.
	Name string
	// Arguments is the JSON arguments object, as text; CheckCall has
	// validated that it is an object.
	Arguments string
	// Scope is the scope of the entry call that led to this run, or
	// SystemScope when the runtime runs it on its own (recovery).
	Scope Scope
	// Seq is the seq of the call's tool_call event in the conversation's
	// log (0 when the runtime does not know it).
	Seq uint64
	// Files records files before the tool changes them, so that a rewind
	// can put them back (see Checkpointer). Nil when the runtime keeps no
	// file checkpoints; CheckpointFile then fails with ErrNoCheckpoints.
	Files Checkpointer
}

// CheckpointFile records path before the tool changes it: inv.Files.Before,
// or an error wrapping ErrNoCheckpoints when inv.Files is nil.
func (inv Invocation) CheckpointFile(ctx context.Context, path string) error {
	if inv.Files == nil {
		return fmt.Errorf("agent: checkpoint %q: %w", path, ErrNoCheckpoints)
	}
	return inv.Files.Before(ctx, path)
}

// ServerFunc runs a server tool. ToolCallID is the idempotency key: the
// runtime may call it more than once with the same id after a crash or a
// kill, never with a new id for the same decision of the model. Within one
// process it never calls it while an earlier run of the same id has not
// returned, even one whose context was cancelled by a kill: the runtime's
// next run of that id waits for it. Runs in different processes are not
// kept apart. It returns JSON content
// (text that is not valid JSON is passed to the model as a JSON string); an
// error becomes a tool error result the model sees. It must honour ctx,
// which ends with context.DeadlineExceeded when the run passes its bound
// (Tool.RunTimeout, else lazarus.Options.ToolTimeout), and is cancelled
// when the run is abandoned: its activation is killed or stops (Delete,
// Close), or a rewind cancels its call (once the rewind is durable; the
// run's outcome is then not recorded). A Run that ignores it still holds
// its conversation's turn.
// It must not call the Runtime's Close itself: Close waits for every run
// to return, so that call never returns. Start Close on a goroutine of
// its own instead; it cancels ctx.
type ServerFunc func(ctx context.Context, inv Invocation) (string, error)

// Tool defines one tool. The zero values of the optional fields have the
// documented defaults.
type Tool struct {
	// Name is what the model calls the tool; see MaxNameBytes for the rule.
	Name string
	// Description tells the model what the tool does.
	Description string
	// Executor is EXECUTOR_SERVER or EXECUTOR_HUMAN. Required.
	Executor messages.Executor
	// Parameters is the JSON schema of the arguments, as text. Optional; if
	// set it must be a JSON object. Lazarus passes it to the model and does
	// not validate arguments against it.
	Parameters string
	// Run runs a server tool. Required for server tools, forbidden for
	// human tools.
	Run ServerFunc
	// RequiresUser makes RunServer refuse any scope without a real user
	// (SystemScope, or an empty UserID) with a tool error of code CodeScope.
	RequiresUser bool
	// Prompt returns what the human is asked, given the call's arguments
	// (human tools only). Default: the name, a space, then the arguments.
	// A Prompt that panics gives the default prompt. What it returns is
	// made valid UTF-8 (invalid bytes become U+FFFD) and cut to
	// MaxPromptBytes, as the default prompt is.
	Prompt func(args string) string
	// Timeout is how long after the suspension a human call expires (human
	// tools only). 0 means the Registry's default (DefaultHumanTimeout
	// unless set with WithDefaultTimeout); < 0 means never.
	Timeout time.Duration
	// Authorizer decides who may answer a call of this human tool (human
	// tools only), checked by Resolve and Reject before anything is
	// written; see Tool.Authorize. Nil allows any resolver with a UserID.
	// RequireRole, RequesterOnly and AnyOf build common ones.
	Authorizer Authorizer
	// AllowAnonymous lets a resolver whose scope has no UserID answer
	// (human tools only). Default false: such an answer is refused with
	// ErrForbidden, so the log always says who answered.
	AllowAnonymous bool
	// RunTimeout bounds each run of a server tool (server tools only;
	// unrelated to Timeout, a human call's deadline), measured on the
	// runtime's Clock from the run's start: when it passes, Run's context
	// ends with context.DeadlineExceeded, and an error Run then returns is
	// recorded as the call's result, a tool error of code CodeTimeout that
	// the model sees; a result Run returns all the same stands. 0 means the
	// runtime's default (lazarus.Options.ToolTimeout); < 0 means no bound.
	RunTimeout time.Duration
	// Deadline, if set, gives each call its own deadline from its
	// arguments and now, the time of the suspension (human tools only):
	// "expire at the end of the meeting the call names", say. A zero
	// result means the call gets the Timeout rule; a time at or before now
	// expires the call at once. A Deadline that panics, or returns a time
	// outside the years 1 to 9999, gives the Timeout rule too. To have
	// some calls never expire, set Timeout < 0 and return a time for the
	// others. Runtime.Reschedule moves a deadline once the call is
	// pending. See CallDeadline.
	Deadline func(args string, now time.Time) time.Time
}

// CallDeadline returns when a call of the human tool t with arguments args,
// suspended at now, expires; the zero time means never. The rule: the
// result of Deadline, if it is set, returns a time in the years 1 to 9999
// and does not panic; else now+Timeout if Timeout > 0, never if Timeout <
// 0, and now+DefaultHumanTimeout if Timeout is 0 (a Registry's Lookup
// fills Timeout in with the Registry's default, so this last case is only
// that of a Tool used on its own).
func (t Tool) CallDeadline(args string, now time.Time) time.Time {
	if at := safeDeadline(t.Deadline, args, now); !at.IsZero() {
		return at
	}
	switch {
	case t.Timeout > 0:
		return now.Add(t.Timeout)
	case t.Timeout < 0:
		return time.Time{}
	default:
		return now.Add(DefaultHumanTimeout)
	}
}

// minDeadline and maxDeadline bound what a Deadline may return: the range
// of a stored timestamp.
var (
	minDeadline = time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)
	maxDeadline = time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC)
)

// safeDeadline calls f, if set, and returns its result, or zero when it
// panicked or returned a time that cannot be stored.
func safeDeadline(f func(string, time.Time) time.Time, args string, now time.Time) (at time.Time) {
	if f == nil {
		return time.Time{}
	}
	defer func() {
		if recover() != nil {
			at = time.Time{}
		}
	}()
	at = f(args, now)
	if at.IsZero() || at.Before(minDeadline) || at.After(maxDeadline) {
		return time.Time{}
	}
	return at
}

// Registry is an immutable set of tools, safe for concurrent use. A nil
// *Registry is valid and has no tools.
type Registry struct {
	raw            []Tool // as given, sorted by name
	tools          map[string]Tool
	specs          []ToolSpec
	defaultTimeout time.Duration
}

// NewRegistry validates tools and returns their Registry. Every error wraps
// journal.ErrInvalid and names the tool and the problem: an empty, oversized
// or ill-formed name, a duplicate name, an unknown executor, a server tool
// without Run, a human tool with Run or RunTimeout, a server tool with
// Prompt, Timeout, Deadline, Authorizer or AllowAnonymous, Parameters that
// are not a JSON object.
func NewRegistry(tools ...Tool) (*Registry, error) {
	raw := make([]Tool, 0, len(tools))
	seen := make(map[string]bool, len(tools))
	for i, t := range tools {
		if err := validateTool(t); err != nil {
			return nil, fmt.Errorf("agent: tool %d: %w", i, err)
		}
		if seen[t.Name] {
			return nil, journal.Invalidf("agent: duplicate tool name %q", t.Name)
		}
		seen[t.Name] = true
		raw = append(raw, t)
	}
	slices.SortFunc(raw, func(a, b Tool) int { return strings.Compare(a.Name, b.Name) })
	return build(raw, DefaultHumanTimeout), nil
}

func build(raw []Tool, defaultTimeout time.Duration) *Registry {
	r := &Registry{
		raw:            raw,
		tools:          make(map[string]Tool, len(raw)),
		specs:          make([]ToolSpec, 0, len(raw)),
		defaultTimeout: defaultTimeout,
	}
	for _, t := range raw {
		if t.Executor == messages.Executor_EXECUTOR_HUMAN {
			if t.Timeout == 0 {
				t.Timeout = defaultTimeout
			}
			t.Prompt = safePrompt(t.Name, t.Prompt)
		}
		r.tools[t.Name] = t
		r.specs = append(r.specs, ToolSpec{Name: t.Name, Description: t.Description, Executor: t.Executor, Parameters: t.Parameters})
	}
	return r
}

func validateTool(t Tool) error {
	if err := checkName(t.Name); err != nil {
		return err
	}
	switch t.Executor {
	case messages.Executor_EXECUTOR_SERVER:
		if t.Run == nil {
			return journal.Invalidf("agent: server tool %q has no Run", t.Name)
		}
		if t.Prompt != nil || t.Timeout != 0 || t.Deadline != nil || t.Authorizer != nil || t.AllowAnonymous {
			return journal.Invalidf("agent: server tool %q sets Prompt, Timeout, Deadline, Authorizer or AllowAnonymous, which only human tools have", t.Name)
		}
	case messages.Executor_EXECUTOR_HUMAN:
		if t.Run != nil {
			return journal.Invalidf("agent: human tool %q has a Run", t.Name)
		}
		if t.RunTimeout != 0 {
			return journal.Invalidf("agent: human tool %q sets RunTimeout, which only server tools have (a human call's deadline is Timeout)", t.Name)
		}
	default:
		return journal.Invalidf("agent: tool %q has executor %v", t.Name, t.Executor)
	}
	if t.Parameters != "" {
		if kind := jsonKind(t.Parameters); kind != "object" {
			return journal.Invalidf("agent: parameters of tool %q are %s, not a JSON object", t.Name, kind)
		}
	}
	return nil
}

func checkName(name string) error {
	if name == "" {
		return journal.Invalidf("agent: empty tool name")
	}
	if len(name) > MaxNameBytes {
		return journal.Invalidf("agent: tool name %q of %d bytes exceeds %d", clip(name, MaxNameBytes), len(name), MaxNameBytes)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return journal.Invalidf("agent: tool name %q has byte %q (allowed: letters, digits, '_', '-')", name, c)
		}
	}
	return nil
}

func safePrompt(name string, f func(string) string) func(string) string {
	def := func(args string) string { return fitPrompt(name + " " + args) }
	if f == nil {
		return def
	}
	return func(args string) (p string) {
		defer func() {
			if recover() != nil {
				p = def(args)
			}
		}()
		return fitPrompt(f(args))
	}
}

// fitPrompt makes p valid UTF-8 and cuts it to MaxPromptBytes: a prompt
// that is not, or that does not fit the records holding it, made the
// Store refuse the answer asking it, and the turn failed each time the
// model asked.
func fitPrompt(p string) string {
	p = strings.ToValidUTF8(p, "\uFFFD")
	if len(p) > MaxPromptBytes {
		p = clip(p, MaxPromptBytes-3) + "..."
	}
	return p
}

// WithDefaultTimeout returns a Registry with the same tools whose human
// tools with a zero Timeout expire d after the suspension (never, if d < 0;
// DefaultHumanTimeout if d == 0). r is not changed.
func (r *Registry) WithDefaultTimeout(d time.Duration) *Registry {
	if d == 0 {
		d = DefaultHumanTimeout
	}
	var raw []Tool
	if r != nil {
		raw = r.raw
	}
	return build(raw, d)
}

// Lookup returns the named tool and true, or false if there is none. For a
// human tool the defaults are filled in: Timeout is never 0 (positive: the
// deadline after suspension; negative: never) and Prompt is never nil and
// never panics.
func (r *Registry) Lookup(name string) (Tool, bool) {
	if r == nil {
		return Tool{}, false
	}
	t, ok := r.tools[name]
	return t, ok
}

// Specs returns what the model is told about every tool, sorted by name. The
// slice is the caller's.
func (r *Registry) Specs() []ToolSpec {
	if r == nil {
		return nil
	}
	return slices.Clone(r.specs)
}

// CheckCall validates a call the model issued: the tool name is known and
// the arguments are a JSON object (an empty string is not: a provider
// adapter that receives no arguments passes "{}"). Arguments are not checked
// against the tool's Parameters schema. Errors wrap journal.ErrInvalid and
// name the problem, in words the model can act on.
func (r *Registry) CheckCall(name, arguments string) error {
	if _, ok := r.Lookup(name); !ok {
		return journal.Invalidf("agent: unknown tool %q", clip(name, MaxNameBytes))
	}
	if kind := jsonKind(arguments); kind != "object" {
		return journal.Invalidf("agent: arguments of tool %s are %s, not a JSON object", name, kind)
	}
	return nil
}

// jsonKind names what s is: "object", "array", "a string", ... or "not valid
// JSON" (which includes invalid UTF-8 and the empty string).
func jsonKind(s string) string {
	if !ValidJSON(s) {
		return "not valid JSON"
	}
	switch strings.TrimLeft(s, " \t\r\n")[0] {
	case '{':
		return "object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	default:
		return "a number"
	}
}

// RunServer runs the server tool inv.Name and returns its outcome; it never
// panics and never returns nil. Rules, in order:
//
//   - unknown tool, a tool that is not a server tool, or an empty
//     ToolCallID: an error of code CodeInvalid, and the tool is not run;
//   - a RequiresUser tool with a scope that is not a user (SystemScope, or
//     an empty UserID): an error of code CodeScope (ErrScope's message), and
//     the tool is not run;
//   - the tool panics: the panic is recovered into an error of code
//     CodePanic (a panic in a goroutine the tool started is not recovered);
//     so is a panic of the error it returns when asked its text (a typed
//     nil pointer), CodeCanceled if ctx is done;
//   - the tool returns an error while ctx is done: code CodeCanceled;
//   - the tool returns an error wrapping ErrScope: code CodeScope;
//   - the tool returns an error wrapping ErrToolTimeout: code CodeTimeout;
//   - any other error: code CodeTool, with the error's text;
//   - content that is not valid JSON becomes a JSON string of that text;
//     content longer than MaxResultBytes becomes an error of code
//     CodeTooLarge.
//
// Error messages are valid UTF-8 and at most MaxErrorBytes long. RunServer
// runs the tool on the calling goroutine and waits for it: a tool that
// calls runtime.Goexit ends that goroutine, and RunServer does not return
// (the runtime's run of a call then reports an error of code CodePanic).
func (r *Registry) RunServer(ctx context.Context, inv Invocation) *messages.ToolOutcome {
	t, ok := r.Lookup(inv.Name)
	switch {
	case !ok:
		return ErrorOutcome(CodeInvalid, fmt.Sprintf("agent: unknown tool %q", clip(inv.Name, MaxNameBytes)))
	case t.Executor != messages.Executor_EXECUTOR_SERVER:
		return ErrorOutcome(CodeInvalid, fmt.Sprintf("agent: tool %s is not a server tool", t.Name))
	case inv.ToolCallID == "":
		return ErrorOutcome(CodeInvalid, fmt.Sprintf("agent: call of tool %s has no tool call id", t.Name))
	case t.RequiresUser && !inv.Scope.IsUser():
		return ErrorOutcome(CodeScope, ErrScope.Error())
	}
	content, panicked, err := run(ctx, t.Run, inv)
	switch {
	case panicked:
		return ErrorOutcome(CodePanic, err.Error())
	case err != nil:
		return toolError(ctx, t.Name, err)
	}
	if !ValidJSON(content) {
		b, _ := json.Marshal(content) // a string always marshals; invalid UTF-8 becomes U+FFFD
		content = string(b)
	}
	if len(content) > MaxResultBytes {
		return ErrorOutcome(CodeTooLarge, fmt.Sprintf("agent: result of tool %s of %d bytes exceeds %d", t.Name, len(content), MaxResultBytes))
	}
	return &messages.ToolOutcome{Outcome: &messages.ToolOutcome_Content{Content: content}}
}

func run(ctx context.Context, f ServerFunc, inv Invocation) (content string, panicked bool, err error) {
	defer func() {
		if p := recover(); p != nil {
			content, panicked, err = "", true, fmt.Errorf("agent: tool %s panicked: %v", inv.Name, p)
		}
	}()
	content, err = f(ctx, inv)
	return content, false, err
}

// toolError is the outcome of the error a tool returned. The error is the
// tool's: its Error (or an Is it has) may panic, as that of a typed nil
// pointer does, which is recovered into an error of code CodePanic
// (CodeCanceled once ctx is done), as a panic of the tool itself.
func toolError(ctx context.Context, name string, err error) (out *messages.ToolOutcome) {
	defer func() {
		if p := recover(); p != nil {
			code := CodePanic
			if ctx.Err() != nil {
				code = CodeCanceled
			}
			out = ErrorOutcome(code, fmt.Sprintf("agent: the error tool %s returned panicked: %v", name, p))
		}
	}()
	switch {
	case ctx.Err() != nil:
		return ErrorOutcome(CodeCanceled, err.Error())
	case errors.Is(err, ErrScope):
		return ErrorOutcome(CodeScope, err.Error())
	case errors.Is(err, ErrToolTimeout):
		return ErrorOutcome(CodeTimeout, err.Error())
	default:
		return ErrorOutcome(CodeTool, err.Error())
	}
}

// ErrorOutcome returns a tool error outcome with code and message. The
// message is made valid UTF-8 and cut to MaxErrorBytes.
func ErrorOutcome(code, message string) *messages.ToolOutcome {
	message = strings.ToValidUTF8(message, "\uFFFD")
	if len(message) > MaxErrorBytes {
		message = clip(message, MaxErrorBytes-3) + "..."
	}
	return &messages.ToolOutcome{Outcome: &messages.ToolOutcome_Error{Error: &messages.ToolError{Code: code, Message: message}}}
}

// clip cuts s to at most n bytes at a rune boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
