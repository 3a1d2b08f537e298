package lazarus

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/journal/pebblejournal"
	"github.com/lazarusrt/lazarus/journal/pgjournal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/snapshot"
	"github.com/lazarusrt/lazarus/supervisor"
)

// Errors of the Runtime. Store errors (journal.ErrStale, journal.ErrInvalid,
// ...) pass through wrapped; branch on them with errors.Is.
//
// The contract of the entry calls (SendMessage, Send, Resolve, Reject, Wake,
// History, Subscribe) on contexts and Close:
//   - a ctx already ended: an error wrapping ctx.Err(), and nothing is
//     written;
//   - ctx ending (or Options.CallTimeout passing) while the call waits, before
//     its command or write was handed over: an error wrapping ctx.Err()
//     (context.DeadlineExceeded for the call timeout), nothing written;
//   - after it was handed over: an error wrapping ErrUnknownOutcome and
//     ctx.Err();
//   - a Store read that fails with a context's error (the Store's own
//     timeout) while the call revives the conversation: an error wrapping
//     that error (context.DeadlineExceeded, context.Canceled), nothing
//     written;
//   - after Close, and for calls in flight when Close is called (which
//     return once Close has stopped the actors, not after a timeout): an
//     error wrapping ErrClosed (and ErrUnknownOutcome if the call's command
//     had been handed over).
//
// Every other method that takes a ctx checks Close and ctx first the same
// way: after Close an error wrapping ErrClosed, with a ctx already ended
// one wrapping ctx.Err(), and nothing read or written, whatever the Store
// does with a ctx that ended.
var (
	// ErrClosed is returned by every call after Close.
	ErrClosed = errors.New("lazarus: runtime closed")
	// ErrUnknownOutcome: the call ended (its context, Options.CallTimeout or
	// Close) after its command or write was handed over, before the answer:
	// it may or may not have taken effect. The cure is to retry: a
	// SendMessage retried with the same SendOptions.RequestID appends
	// nothing if the first attempt got in and returns its seq (Send sets a
	// random RequestID: use SendMessage to retry safely); a Resolve or
	// Reject retried returns journal.ErrStale if an answer (this one or
	// another) was recorded, and Store().ToolCall tells which (either way,
	// the conversation records the answer the row holds, with or without
	// a retry: a live activation is told once the write is answered, the
	// row read again after a backoff while the Store fails the read, and
	// by a retry, on any member in cluster mode); Wake writes nothing
	// and can always be retried.
	ErrUnknownOutcome = errors.New("lazarus: outcome unknown")
	// ErrForbidden is agent.ErrForbidden: Resolve or Reject with a scope
	// the call's tool does not accept (see agent.Tool.Authorize). Nothing
	// is written.
	ErrForbidden = agent.ErrForbidden
)

// Defaults of Options.
const (
	DefaultIdleTimeout      = 5 * time.Minute
	DefaultHumanTimeout     = agent.DefaultHumanTimeout
	DefaultCallTimeout      = 30 * time.Second
	DefaultModelTimeout     = 10 * time.Minute
	DefaultToolTimeout      = 10 * time.Minute
	DefaultSubscriberBuffer = 1024
	DefaultMaxSubscriptions = 1024
	DefaultResumeInterval   = 30 * time.Second
)

// MaxSubscriberBuffer is the largest Options.SubscriberBuffer Open takes:
// in a cluster, a subscription to a conversation another member owns
// holds a channel of that many updates, which a larger size would make
// impossible (math.MaxInt) or huge.
const MaxSubscriberBuffer = 1 << 20

// MinResumeInterval is the shortest Options.ResumeInterval Open takes: a
// scan of the Store's ACTIVE index more often than this would be a busy
// loop.
const MinResumeInterval = 10 * time.Millisecond

// AuditOptions configures the model-call audit.
type AuditOptions struct {
	// Enabled records exactly what was rendered to the model on every
	// model call (a messages.ModelCall: the context, the summary it
	// started from and its version, what it left out (evictions: the span
	// the summary stands for, the spans rewinds skipped), the settings the
	// call was made with (the system prompt among them), the names of the
	// tools offered (their descriptions and schemas are the registered
	// tools'), the agent whose turn it was, the model, usage and latency).
	// A call that failed is recorded too, with its error (its text, and
	// its code as TurnError.Code gives it), its latency and no usage;
	// rows are keyed by the turn's context (TurnRef), so a retry's row
	// replaces the failed call's before it, and a turn that fails for
	// good keeps its last call's. A call cancelled before it returned (a
	// newer message, a kill, Close) records nothing. Default off: the
	// audit holds user data and grows fast.
	Enabled bool
	// TTL deletes audit rows older than this, checked when the Runtime
	// opens (in the background) and then every TTL/2 (at most once a
	// second, whatever the TTL), so that a process that never runs TTL/2
	// sweeps too. Zero means rows are kept
	// until deleted with the conversation. A TTL
	// without Enabled, or a negative one, is refused by Open (ErrInvalid).
	TTL time.Duration
}

// Options configures a Runtime. The zero value of every field is a
// documented default; Model is the only required field.
type Options struct {
	// Store is the persistence adapter. Default: the PostgreSQL store of
	// Postgres when it is set, else the embedded Pebble store in Dir when
	// Dir is set, else an in-memory store (nothing survives the process).
	// A Store passed here is not closed by Close; a nil pointer in the
	// interface is refused by Open (ErrInvalid). Set at most one of
	// Store, Postgres and Dir: Open refuses more (journal.ErrInvalid).
	Store journal.Store
	// Postgres is the connection string (DSN or URL) of a PostgreSQL
	// database, used when Store is nil: the journal lives there
	// (journal/pgjournal), migrated on Open. Set at most one of Postgres
	// and Dir.
	Postgres string
	// Dir is the directory of the embedded Pebble store, used when Store
	// and Postgres are not set. It is created if missing.
	Dir string
	// RaiseGOMAXPROCS, with Dir, has the embedded store raise GOMAXPROCS by
	// one while it is open (pebblejournal.Options.RaiseGOMAXPROCS: the WAL's
	// syncs hold a P while they block; on a machine of few cores that
	// shows as ack tails below saturation). A GOMAXPROCS environment
	// variable always wins. Default false: the library changes nothing
	// process-wide on its own; `lazarus serve` sets it.
	RaiseGOMAXPROCS bool
	// Model answers turns. Required: Open refuses a nil one, a nil
	// pointer or a nil agent.ModelFunc in the interface included
	// (ErrInvalid).
	Model agent.Model
	// Tools the model may call. Default none.
	Tools []agent.Tool
	// Agents are the named agents a conversation can hold besides its
	// default one, each with its own model, settings and tools (see
	// Agent); with any, the built-in handoff tool (HandoffToolName) is
	// registered too, and no tool of Tools may have its name. Default
	// none: every conversation has the default agent alone.
	Agents []Agent
	// Settings are the default model settings of every conversation
	// (system prompt, model name, temperature, max tokens, tool choice).
	// A conversation's own, set with Configure, override them field by
	// field. Default none: the Model's own configuration. Validated at
	// Open (agent.ValidateSettings; ErrInvalid).
	Settings agent.Settings
	// IdleTimeout passivates a conversation actor after this long without
	// work; it holds no memory afterwards and revives on the next command.
	// Default DefaultIdleTimeout; negative disables passivation.
	IdleTimeout time.Duration
	// HumanTimeout is the deadline of a human call whose tool sets none.
	// Default DefaultHumanTimeout; negative means no deadline.
	HumanTimeout time.Duration
	// Summary decides when to summarize. Default snapshot.Policy defaults.
	// It is asked when a conversation comes to rest (its turn over,
	// nothing owed or awaited), not between the model calls of a turn
	// (see snapshot.Policy).
	Summary snapshot.Policy
	// Summarizer writes summaries. Default nil: never summarize. A
	// summary that fails (the Summarizer's error, or the Store refusing
	// what it wrote) is logged and tried again once the conversation's
	// log has grown past what that summary saw when it started (an event
	// written while it was made counts), not before, within the
	// activation: a Summarizer that calls a model is not called again for
	// the same span while the conversation stays live. A revival (after Kill, passivation, a
	// restart) knows nothing of the failure and tries again. A summary runs in the conversation's
	// turn at the model: no model call of the conversation overlaps it
	// (agent.Model's promise holds for snapshot.LLM given Options.Model),
	// and a turn's call waits until the Summarizer has returned, or
	// ModelTimeout has passed, which fails the summary. Open
	// refuses a snapshot.LLM without a Model, or with a MaxInputBytes from
	// 1 to below snapshot.MinLLMMaxInputBytes (ErrInvalid), which would
	// fail every summary.
	Summarizer snapshot.Summarizer
	// ScheduleTools adds the built-in server tools with which the model
	// schedules wake-ups of its own conversation (ScheduleToolName,
	// ListSchedulesToolName, CancelScheduleToolName; see Runtime.Schedule).
	// Their names must not clash with Tools. Default false.
	ScheduleTools bool
	// ScopeLoader rebuilds the scope of a turn's requester from the
	// identity the log recorded (agent.Identity: user id and roles), when
	// the runtime resumes the turn on its own: after a kill, a restart, an
	// answer or an expiry revived the conversation. Default nil: such work
	// runs under agent.SystemScope (a RequiresUser tool then fails as a
	// tool error). Within one activation, the work of a turn runs with the
	// scope of the Send that started it; an answer's scope never replaces
	// it.
	ScopeLoader agent.ScopeLoader
	// Audit configures the model-call audit. Default off. With a Store
	// given, the Store's own audit setting is what records or drops the
	// rows (see journal.Audit), so Audit.Enabled must agree with it: Open
	// refuses, with an error wrapping journal.ErrInvalid, a Store that
	// reports (journal.AuditReporter, as every adapter of this module
	// does) an audit setting other than Audit.Enabled. Open the Store with
	// the same setting (for example pebblejournal.Options.Audit). With
	// Postgres or Dir, the Store is opened with Audit.Enabled.
	Audit AuditOptions
	// ModelRetry is the retry policy of a failed model call (a 429, a
	// 5xx, a timeout, a broken stream): how long to wait, how many
	// attempts, which errors. Default: the zero RetryPolicy, 3 attempts
	// in all, 1s then 2s apart (or the wait the failed call's error names,
	// agent.RetryAfter, when longer: a provider's Retry-After, up to
	// RetryPolicy.MaximumRetryAfter), on the transient errors of
	// DefaultRetryable. It is a second layer above a provider's own retry
	// of one call (agent/retry); see RetryPolicy. When it gives up, or the
	// error is not retryable, the turn fails durably: a turn_failed event.
	// A wait the error names outlives a kill or a restart: a conversation
	// revived before it ends calls the model no sooner.
	ModelRetry RetryPolicy
	// ModelTimeout bounds each model call: one Generate of Model (or of an
	// Agent's), each retry on its own, measured on Clock from the call's
	// start. A call still running when it passes has its context
	// cancelled and fails with an error wrapping context.DeadlineExceeded
	// (code "timeout"), which the default ModelRetry retries; when the
	// retries run out the turn fails durably (turn_failed) and the
	// conversation takes the next message as after any failed turn. It
	// bounds a provider that accepted the request and never finishes (a
	// stream that stops, a connection left open). The bound works through
	// the context: a Model that ignores its cancellation (see
	// agent.Model) still holds the turn. Default DefaultModelTimeout (ten
	// minutes: room for a long answer of a slow model); negative means no
	// bound (a call then ends only when it returns, or when a new message,
	// a rewind, a kill or Close cancels it). It bounds each call of the
	// Summarizer the same way (snapshot.LLM makes one model call in each;
	// a summary holds the conversation's turn at the model): past it the
	// summary fails, as any failed summary does, and the turns waiting
	// for the model go on.
	ModelTimeout time.Duration
	// ToolTimeout bounds each run of a server tool (an MCP tool's
	// included) whose agent.Tool.RunTimeout is 0, measured on Clock from
	// the run's start. A run still going when it passes has its context
	// ended with context.DeadlineExceeded (ctx.Err()); an error Run then
	// returns is recorded as the call's result, durably and once, as any
	// tool error: a tool_result of status errored and code
	// agent.CodeTimeout, whose message (naming the bound and what the
	// tool returned) the model sees on its next call, so the turn goes on.
	// The call is not run again: the tool may have done its work in part
	// or whole, and its tool_call_id stays the key a later run of it in
	// another process would find. A result Run returns all the same
	// stands. The bound works through the context: a Run that ignores it
	// still holds the turn (and Close waits for it). Default
	// DefaultToolTimeout (ten minutes); negative means no bound (a run
	// then ends only when it returns, or when a kill, Delete or Close
	// cancels it). A human call's deadline is another matter
	// (HumanTimeout, agent.Tool.Timeout).
	ToolTimeout time.Duration
	// MaxInvalidToolAnswers is how many model answers in a row, within one
	// turn, may call an unknown tool or pass arguments that are not a JSON
	// object. Such a call is recorded with an error result (code
	// agent.CodeInvalid) that the model sees on its next call, so it can
	// correct itself; one answer more fails the turn durably
	// (ErrInvalidToolCalls). Default DefaultMaxInvalidToolAnswers;
	// negative fails the turn on the first such answer.
	MaxInvalidToolAnswers int
	// Clock supplies time. Default the system clock (a nil pointer in the
	// interface is refused by Open: ErrInvalid). Every timer of the
	// runtime runs on it, ModelTimeout's and ToolTimeout's included: a
	// test that moves a manual clock past ModelTimeout while a model call
	// is in flight ends that call (its retry then waits for the clock
	// too), and past ToolTimeout while a server tool runs ends that run;
	// set them negative where a test moves the clock by more than them.
	Clock Clock
	// CallTimeout bounds how long Send waits for its message to be durable
	// when ctx has no earlier deadline. Default DefaultCallTimeout; a
	// negative one is refused by Open (ErrInvalid).
	CallTimeout time.Duration
	// SubscriberBuffer is how many updates a subscriber may fall behind
	// before its subscription ends with ErrLagged (in a cluster, a
	// subscription to a conversation another member owns ends its stream
	// from the owner instead, and is caught up from the Store: see
	// Subscribe). Default
	// DefaultSubscriberBuffer; a negative one, or one above
	// MaxSubscriberBuffer, is refused by Open (ErrInvalid).
	SubscriberBuffer int
	// MaxSubscriptions bounds the subscriptions open at once on this
	// Runtime to one conversation (Subscribe and SubscribeWith, the wait
	// of a SendAndWait, and in a cluster the streams this member serves
	// to subscribers on other members): one more is refused with an error
	// wrapping ErrTooManySubscriptions, so that a client that opens
	// streams in a loop cannot grow memory without bound. A subscription
	// frees its slot when its channel is closed. In a cluster, a
	// subscription to a conversation another member owns holds a slot on
	// the member asked and, while the owner serves it a stream, one on the
	// owner (one that fell behind holds none there until it subscribes
	// again; one given up before the owner answered holds that one until
	// the stream has ended: see Subscribe); the owner's refusal ends it
	// with an update whose Err wraps ErrTooManySubscriptions (for the wait
	// of a SendAndWait, after its message was written: see SendAndWait
	// for what the caller should do). Default
	// DefaultMaxSubscriptions; negative means no cap.
	MaxSubscriptions int
	// Logger receives the runtime's logs. Default: discard. The actor
	// system's lines (component=protoactor) below Warn are logged at
	// Debug, and so are the cluster provider's routine errors of a normal
	// stop; its failed health polls (a peer down, or this member not yet
	// serving) are logged at Info, as membership changes are. Once Close
	// returned, no record reaches Logger's handler from the Runtime, its
	// Store (when Open opened it) or its actor system (unless that is
	// Options.ActorSystem, which logs to its own logger), and none is
	// being written: what the handler wrote can be read then without a
	// lock. Close waits for a record being written. The same holds once
	// Open returned an error.
	Logger *slog.Logger
	// Metrics receives the runtime's measurements (commits, appends,
	// expiries, activations, model calls, subscriptions). Default: none,
	// at no cost.
	Metrics Metrics
	// NoResume turns off the resumption, on Open, of conversations that
	// were mid-turn when the previous process stopped. By default Open
	// wakes, in the background, every conversation whose status is ACTIVE
	// (a turn owed or a server tool running), read from the Store's index
	// of those (ListActiveConversations): the cost is the number of ACTIVE
	// conversations, not the number of conversations. A turn that failed for
	// good left its conversation IDLE, and is not resumed. NoResume also
	// turns off the scan of ResumeInterval, and in a cluster the scan of
	// the conversations a membership change gives this member.
	NoResume bool
	// ResumeInterval is how often the runtime looks again for ACTIVE
	// conversations that have no live actor, and wakes them. An activation
	// whose write or revival failed (the Store unreachable, a commit's
	// outcome unknown) stops, and the work it owed would otherwise wait for
	// the conversation's next command; with this scan it resumes within
	// an interval once the Store is back. (After a write of unknown
	// outcome or one fenced off by another writer, journal.ErrConflict,
	// the runtime wakes the conversation again at once, up to three times
	// in a row by activations that committed nothing, then logs a warning;
	// the scan covers what is left.) The scan reads the same index as
	// Open's and skips live conversations; in a cluster it asks each live
	// one whether the log moved on behind it (another member that still
	// believed it owned the conversation wrote), and wakes a new
	// activation of one that is stale. The interval is real time, not
	// Clock's. Default DefaultResumeInterval; negative: no scan after
	// Open's; a positive one below MinResumeInterval is refused by Open
	// (ErrInvalid).
	ResumeInterval time.Duration
	// Cluster, when set, makes this Runtime a member of a protoactor
	// cluster sharing the Store with the other members (see
	// ClusterOptions). Default nil: a single process, no network.
	Cluster *ClusterOptions
	// ActorSystem, when set, is the protoactor actor system the Runtime
	// runs in (an application's own, for its actors to talk to
	// conversations through the gateway's protobuf protocol; see
	// GatewayName); without Cluster, Close leaves it running. One Runtime
	// per actor system: Open refuses, with an error wrapping
	// journal.ErrInvalid that names the actor, a system with an actor
	// named GatewayName, supervisor.Name, or supervisor.Name+"/journal" or
	// "/expiry" already (another Runtime's), and leaves that actor alone.
	// With Cluster, the Runtime starts the cluster member on it
	// (the system must not be a cluster member already), and Close leaves
	// the cluster, which shuts the system down with it (protoactor's
	// Cluster.Shutdown does both). Default nil: the Runtime creates its
	// own, and shuts it down on Close.
	ActorSystem *actor.ActorSystem
	// Files configures file checkpoints (see FilesOptions). Default: none.
	Files FilesOptions
}

func (o Options) withDefaults() Options {
	if o.IdleTimeout == 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	if o.HumanTimeout == 0 {
		o.HumanTimeout = DefaultHumanTimeout
	}
	if o.Clock == nil {
		o.Clock = actors.SystemClock()
	}
	if o.CallTimeout == 0 {
		o.CallTimeout = DefaultCallTimeout
	}
	if o.ModelTimeout == 0 {
		o.ModelTimeout = DefaultModelTimeout
	}
	if o.ToolTimeout == 0 {
		o.ToolTimeout = DefaultToolTimeout
	}
	if o.SubscriberBuffer == 0 {
		o.SubscriberBuffer = DefaultSubscriberBuffer
	}
	if o.MaxSubscriptions == 0 {
		o.MaxSubscriptions = DefaultMaxSubscriptions
	}
	if o.ResumeInterval == 0 {
		o.ResumeInterval = DefaultResumeInterval
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	o.Summary = o.Summary.WithDefaults()
	return o
}

// Runtime runs durable conversations. Its methods are safe for concurrent
// use.
type Runtime struct {
	opts      Options
	store     journal.Store
	ownsStore bool
	tools     *agent.Registry
	system    *actor.ActorSystem
	sup       *supervisor.Supervisor
	hub       *hub
	log       *slog.Logger
	logs      *logGate     // every logger of the Runtime's goes through it: Close shuts it
	cl        *clusterNode // nil outside cluster mode
	gw        *clusterNode // the gateway's side: cl, or the gateway on Options.ActorSystem
	ownsSys   bool         // the actor system is the Runtime's own

	// life is cancelled by Close: the context of the Runtime's own calls
	// (the resume scan).
	life    context.Context
	endLife context.CancelFunc

	mu     sync.Mutex
	closed bool
	// stopped is closed when the first Close has finished: a Close called
	// meanwhile waits for it.
	stopped chan struct{}
	gcStop  func() bool
	// resumeStop stops the timer of the periodic resume scan (armResume).
	resumeStop func() bool
	gcWG       sync.WaitGroup // the audit sweep, the blob sweep, the resume scan, the schedule deliveries, the retries of schedule changes

	// files is nil unless Options.Files.Root is set (files.go).
	files *fileRoot

	// fires holds due schedule occurrences for the delivery goroutines
	// (schedule.go).
	fires chan scheduleFire

	// viewPageBytes bounds the bytes of each Store read of HistoryView
	// (historyPageBytes).
	viewPageBytes int
}

// Open starts a Runtime. With a durable Store, conversations, pending calls
// and deadlines written by an earlier Runtime are all back: deadlines that
// passed while it was down fire at once.
func Open(opts Options) (*Runtime, error) {
	switch {
	case opts.CallTimeout < 0:
		return nil, fmt.Errorf("lazarus: Options.CallTimeout is negative: %w", journal.ErrInvalid)
	case opts.SubscriberBuffer < 0:
		return nil, fmt.Errorf("lazarus: Options.SubscriberBuffer is negative: %w", journal.ErrInvalid)
	case opts.SubscriberBuffer > MaxSubscriberBuffer:
		return nil, fmt.Errorf("lazarus: Options.SubscriberBuffer %d is above MaxSubscriberBuffer (%d): %w", opts.SubscriberBuffer, MaxSubscriberBuffer, journal.ErrInvalid)
	case opts.ResumeInterval > 0 && opts.ResumeInterval < MinResumeInterval:
		return nil, fmt.Errorf("lazarus: Options.ResumeInterval %v is below MinResumeInterval (%v): %w", opts.ResumeInterval, MinResumeInterval, journal.ErrInvalid)
	}
	if err := nilInterfaces(opts); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	if opts.Model == nil {
		return nil, fmt.Errorf("lazarus: Options.Model is required: %w", journal.ErrInvalid)
	}
	switch {
	case opts.Audit.TTL < 0:
		return nil, fmt.Errorf("lazarus: Options.Audit.TTL is negative: %w", journal.ErrInvalid)
	case opts.Audit.TTL > 0 && !opts.Audit.Enabled:
		return nil, fmt.Errorf("lazarus: Options.Audit.TTL is set but the audit is not enabled: %w", journal.ErrInvalid)
	}
	llm, isLLM := opts.Summarizer.(snapshot.LLM)
	if p, ok := opts.Summarizer.(*snapshot.LLM); ok {
		isLLM = true
		if p != nil {
			llm = *p
		}
	}
	switch {
	case isLLM && (llm.Model == nil || isNilValue(llm.Model)):
		return nil, fmt.Errorf("lazarus: Options.Summarizer is a snapshot.LLM without a Model: %w", journal.ErrInvalid)
	case isLLM && llm.MaxInputBytes > 0 && llm.MaxInputBytes < snapshot.MinLLMMaxInputBytes:
		return nil, fmt.Errorf("lazarus: Options.Summarizer's MaxInputBytes %d is below snapshot.MinLLMMaxInputBytes (%d), which fails every summary: %w", llm.MaxInputBytes, snapshot.MinLLMMaxInputBytes, journal.ErrInvalid)
	}
	tools := withHandoff(opts)
	var self *Runtime // the schedule tools run only once Open returned
	if opts.ScheduleTools {
		tools = append(slices.Clone(tools), scheduleTools(func() *Runtime { return self })...)
	}
	reg, err := agent.NewRegistry(tools...)
	if err != nil {
		return nil, fmt.Errorf("lazarus: tools: %w", err)
	}
	reg = reg.WithDefaultTimeout(opts.HumanTimeout)
	if err := agent.ValidateSettings(opts.Settings, reg); err != nil {
		return nil, fmt.Errorf("lazarus: Options.Settings: %w", err)
	}
	timed := func(m agent.Model) agent.Model {
		if opts.Metrics.ModelCall != nil {
			return timedModel{Model: m, observe: opts.Metrics.ModelCall}
		}
		return m
	}
	agents, err := agentConfigs(opts, reg, timed)
	if err != nil {
		return nil, err
	}
	// Every logger of the Runtime goes through logs, which Close shuts.
	logs := new(logGate)
	opts.Logger = logs.logger(opts.Logger)
	r := &Runtime{opts: opts, tools: reg, log: opts.Logger, logs: logs, store: opts.Store, fires: make(chan scheduleFire, 4096), stopped: make(chan struct{})}
	self = r
	r.life, r.endLife = context.WithCancel(context.Background())
	switch {
	case r.store != nil && (opts.Postgres != "" || opts.Dir != ""):
		return nil, fmt.Errorf("lazarus: Options.Store is set with Options.Postgres or Options.Dir, which would go unused: %w", journal.ErrInvalid)
	case r.store != nil:
		if a, ok := r.store.(journal.AuditReporter); ok && a.AuditEnabled() != opts.Audit.Enabled {
			return nil, fmt.Errorf("lazarus: Options.Audit.Enabled is %t but the Store's audit is %t; open the Store with the same setting: %w",
				opts.Audit.Enabled, a.AuditEnabled(), journal.ErrInvalid)
		}
	case opts.Postgres != "" && opts.Dir != "":
		return nil, fmt.Errorf("lazarus: Options.Postgres and Options.Dir are both set: %w", journal.ErrInvalid)
	case opts.Postgres != "":
		st, err := pgjournal.Open(context.Background(), opts.Postgres, pgjournal.Options{Audit: opts.Audit.Enabled})
		if err != nil {
			return nil, fmt.Errorf("lazarus: open store: %w", err)
		}
		r.store, r.ownsStore = st, true
	case opts.Dir != "":
		st, err := pebblejournal.Open(opts.Dir, pebblejournal.Options{Audit: opts.Audit.Enabled, Logger: opts.Logger, RaiseGOMAXPROCS: opts.RaiseGOMAXPROCS})
		if err != nil {
			return nil, fmt.Errorf("lazarus: open store: %w", err)
		}
		r.store, r.ownsStore = st, true
	default:
		r.store, r.ownsStore = memjournal.New(memjournal.Options{Audit: opts.Audit.Enabled}), true
	}
	if err := r.openFiles(); err != nil {
		r.endLife()
		if r.ownsStore {
			_ = r.store.Close()
		}
		r.logs.shut()
		return nil, err
	}
	r.hub = newHub(r.store, opts.SubscriberBuffer)
	r.viewPageBytes = historyPageBytes
	r.hub.subscribers = opts.Metrics.Subscribers
	r.hub.maxSubs = max(opts.MaxSubscriptions, -1)
	model := timed(opts.Model)
	committed := r.hub.publishCommitted
	if m := opts.Metrics; m.observesCommits() {
		committed = func(req *messages.AppendRequest) {
			m.committed(req)
			r.hub.publishCommitted(req)
		}
	}
	var unknown func(*messages.AppendRequest)
	if m := opts.Metrics; m.observesUnknown() {
		unknown = m.unknown
	}
	r.system, r.ownsSys = opts.ActorSystem, opts.ActorSystem == nil
	if r.ownsSys {
		r.system = actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
			return slog.New(demoted{opts.Logger.Handler()}).With("component", "protoactor")
		}))
	}
	var gen uint64 // the membership the supervisor starts with
	if opts.Cluster != nil {
		if r.cl, err = startCluster(r, r.system, *opts.Cluster); err != nil {
			r.endLife()
			if r.ownsSys {
				r.system.Shutdown()
			}
			if r.files != nil {
				_ = r.files.root.Close()
			}
			if r.ownsStore {
				_ = r.store.Close()
			}
			r.logs.shut()
			return nil, err
		}
		gen = r.cl.generation()
		r.gw = r.cl
	} else if !r.ownsSys {
		r.gw = newNode(r, r.system)
	}
	r.sup, err = supervisor.Start(r.system, supervisor.Config{
		Owns:        r.owns,
		Store:       r.store,
		Clock:       opts.Clock,
		CallTimeout: opts.CallTimeout,
		Logger:      opts.Logger,
		Activated:   opts.Metrics.Activated,
		Passivated:  opts.Metrics.Passivated,
		// An expire reported of unknown outcome that landed committed
		// nothing the journal saw: counted when its row is read.
		ExpiredLanded: opts.Metrics.Expired,
		Fenced:        fencedHook(opts.Metrics.Fenced),
		// An activation that stopped while its model call streamed (a
		// panic, a stale wake, a delete) published nothing that drops
		// the deltas the hub keeps as the answer in progress: they are
		// void, and a rerun of the turn would add its own to them. A
		// kill's end voids them itself (publishCancelled).
		Terminated: func(conv string) { r.hub.publish(actors.Update{ConversationID: conv, Restart: true}) },
		// Due occurrences of scheduled wake-ups are delivered by the
		// Runtime's goroutines (schedule.go).
		FireSchedule: r.onScheduleDue,
		// Subscribers get every committed event from the commits
		// themselves, in order, whether or not the activation that wrote
		// it is still alive to hear the reply.
		Journal: actors.JournalOptions{Committed: committed, Unknown: unknown, Observe: opts.Metrics.Commit},
		Agent: func(conv string) actors.ConversationConfig {
			return actors.ConversationConfig{
				Model:                 model,
				Tools:                 reg,
				Checkpoints:           r.checkpointHook(),
				Agents:                agents,
				MaxInvalidToolAnswers: opts.MaxInvalidToolAnswers,
				IdleTimeout:           opts.IdleTimeout,
				HumanTimeout:          opts.HumanTimeout,
				Policy:                opts.Summary,
				Summarizer:            opts.Summarizer,
				ScopeLoader:           opts.ScopeLoader,
				Settings:              opts.Settings,
				Audit:                 opts.Audit.Enabled,
				Retry:                 opts.ModelRetry,
				ModelTimeout:          opts.ModelTimeout,
				ToolTimeout:           opts.ToolTimeout,
				Publish:               r.hub.publish,
				// A write of unknown outcome that landed was never
				// published: the revival read shows it is in the log.
				Revived: func(seq uint64) { r.hub.logAt(conv, seq) },
				Logger:  opts.Logger,
			}
		},
	})
	if err != nil {
		if errors.Is(err, actor.ErrNameExists) {
			// err names the actor whose name was taken: the supervisor's
			// own, or one of its children's.
			err = fmt.Errorf("lazarus: Options.ActorSystem has a Runtime's actor name taken already (%v): another Runtime runs on it, or an application actor has the name (one Runtime per actor system): %w",
				err, journal.ErrInvalid)
		}
		r.endLife()
		if r.gw != nil {
			r.gw.stopServing()
			r.gw.leave()
		}
		if r.cl == nil && r.ownsSys {
			r.system.Shutdown()
		}
		if r.files != nil {
			_ = r.files.root.Close()
		}
		if r.ownsStore {
			_ = r.store.Close()
		}
		r.logs.shut()
		return nil, err
	}
	if r.cl != nil {
		r.cl.attach(r.sup, gen)
	}
	if r.gw != nil {
		if err := r.gw.spawnGateway(); err != nil {
			_ = r.Close()
			return nil, err
		}
	}
	r.mu.Lock()
	if opts.Audit.Enabled && opts.Audit.TTL > 0 {
		r.armAuditGC(0)
	}
	r.armFileSweep(0)
	r.mu.Unlock()
	if !opts.NoResume {
		r.gcWG.Add(1)
		go r.resumeInterrupted(false)
		r.mu.Lock()
		r.armResume()
		r.mu.Unlock()
	}
	r.startFireWorkers()
	return r, nil
}

// nilInterfaces refuses the Options whose interface fields hold a nil
// pointer or func (a nil agent.ModelFunc, a nil *pebblejournal.Store): each
// would pass the == nil checks and fail only when called, in the middle of
// a turn or of Open itself. A nil *snapshot.LLM is left to the Summarizer's
// own check (a snapshot.LLM without a Model).
func nilInterfaces(opts Options) error {
	if isNilValue(opts.Model) {
		return fmt.Errorf("lazarus: Options.Model is required (it holds a nil %T): %w", opts.Model, journal.ErrInvalid)
	}
	if isNilValue(opts.Store) {
		return fmt.Errorf("lazarus: Options.Store holds a nil %T: %w", opts.Store, journal.ErrInvalid)
	}
	if isNilValue(opts.Clock) {
		return fmt.Errorf("lazarus: Options.Clock holds a nil %T: %w", opts.Clock, journal.ErrInvalid)
	}
	if _, llm := opts.Summarizer.(*snapshot.LLM); !llm && isNilValue(opts.Summarizer) {
		return fmt.Errorf("lazarus: Options.Summarizer holds a nil %T: %w", opts.Summarizer, journal.ErrInvalid)
	}
	for i, a := range opts.Agents {
		if isNilValue(a.Model) {
			return fmt.Errorf("lazarus: Options.Agents[%d]: Model holds a nil %T: %w", i, a.Model, journal.ErrInvalid)
		}
	}
	return nil
}

// isNilValue reports whether v is a non-nil interface holding a nil
// pointer, func, map, slice or channel.
func isNilValue(v any) bool {
	if v == nil {
		return false
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Func, reflect.Map, reflect.Slice, reflect.Chan, reflect.Interface:
		return rv.IsNil()
	}
	return false
}

// Store returns the Store the Runtime writes. Reading it directly is safe;
// writing it behind the Runtime's back breaks its invariants.
func (r *Runtime) Store() journal.Store { return r.store }

func (r *Runtime) isClosed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closed
}

// enter is the first step of every entry call: ErrClosed after Close, else
// ctx.Err(), so a call whose context already ended does nothing.
func (r *Runtime) enter(ctx context.Context) error {
	if r.isClosed() {
		return ErrClosed
	}
	return ctx.Err()
}

// callErr maps an error of the supervisor, an actor's reply or a Store
// call to the Runtime's contract, in one place: no supervisor or future
// error reaches a caller raw, and an error of a call that Close ended wraps
// ErrClosed. op names the call ("lazarus: send to \"c\"").
func (r *Runtime) callErr(op string, err error) error {
	out := mapErr(op, unnamed(op, err))
	if r.isClosed() && !errors.Is(out, ErrClosed) {
		// Close stopped an actor or the Store under the call: say so,
		// keeping the cause.
		return fmt.Errorf("%w: %w", out, ErrClosed)
	}
	return out
}

func mapErr(op string, err error) error {
	unknown := errors.Is(err, supervisor.ErrNoAnswer)
	var cause error
	switch {
	case errors.Is(err, supervisor.ErrStopped):
		cause = ErrClosed
	case errors.Is(err, journal.ErrUnknownOutcome) && !errors.Is(err, ErrUnknownOutcome):
		// The Store could not say whether a write landed (a timeout, a
		// connection lost during its commit, the call's context ended
		// once its commit was sent): the call's outcome is unknown, as
		// the facade's sentinel says; a context's error it wraps is kept
		// with it, never reported alone (which says nothing was written).
		if strings.Contains(err.Error(), ErrUnknownOutcome.Error()) {
			// An owner's answer to a forwarded call, which says so
			// already: the sentinel, not its text again.
			return &callError{msg: op + ": " + err.Error(), errs: []error{ErrUnknownOutcome, err}}
		}
		return fmt.Errorf("%s: %w: %w", op, ErrUnknownOutcome, err)
	case errors.Is(err, context.Canceled):
		cause = context.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		cause = context.DeadlineExceeded
	case unknown:
		// Every activation stopped before answering, too many times.
		return fmt.Errorf("%s: %w (no activation answered; retry)", op, ErrUnknownOutcome)
	default:
		return fmt.Errorf("%s: %w", op, err)
	}
	if errors.Is(err, ErrNoOwner) {
		// No member got the call (cluster mode): nothing was handed over.
		return fmt.Errorf("%s: %w: %w", op, ErrNoOwner, cause)
	}
	if unknown || errors.Is(err, ErrUnknownOutcome) {
		// Handed over before the call ended (a forwarded call too): its
		// outcome is unknown.
		return fmt.Errorf("%s: %w: %w", op, ErrUnknownOutcome, cause)
	}
	return fmt.Errorf("%s: %w", op, cause)
}

// callError is an error with a message of its own that wraps errs.
type callError struct {
	msg  string
	errs []error
}

func (e *callError) Error() string   { return e.msg }
func (e *callError) Unwrap() []error { return e.errs }

// unnamed is err without op's name in front of its message, when it has
// it: the error an owner returned for a forwarded call names the call as
// the caller does, which names it again. It wraps what err wraps.
func unnamed(op string, err error) error {
	if rest, ok := strings.CutPrefix(err.Error(), op+": "); ok {
		return &callError{msg: rest, errs: []error{err}}
	}
	return err
}

// SendOptions are the optional parts of a send.
type SendOptions struct {
	// RequestID is the idempotency key of the send: retrying a send with the
	// same key (after a timeout, say) does not append the message again,
	// and returns the seq it was first written at. The activation, and any
	// later one, recognises the key while its message is after the
	// conversation's latest summary or among the newest
	// snapshot.MaxSummaryRequests keys that summary carries (all of them
	// fit its snapshot.MaxSummaryRequestBytes): a summary folds messages
	// away but keeps their keys. A key is 1 to journal.MaxIDBytes bytes of valid
	// UTF-8; a longer one is refused with an error wrapping
	// journal.ErrInvalid. Default: a random key, so each call is a new
	// message.
	RequestID string
	// Agent addresses the message to the named agent (one of
	// Options.Agents), which answers it; the message belongs to it (see
	// Agent). An agent not in Options.Agents is refused with an error
	// wrapping ErrUnknownAgent and journal.ErrInvalid. Default "": the
	// default agent.
	Agent string
	// Broadcast shares the message with every agent of the conversation,
	// while only Agent answers it. Default false: only Agent sees it.
	// Without Options.Agents it changes nothing (the default agent is
	// every agent).
	Broadcast bool
}

// Send appends a user message to the conversation (creating it if new) and
// returns its seq once it is durable. The agent's answer follows
// asynchronously: watch it with Subscribe or read it with History. The
// scope is the caller's ambient state; the turn this message starts runs
// with it (its tools act for this caller, whoever answers its human
// calls). Only its identity (UserID and Roles) is persisted, as the
// message's author (Event.author, and the requester of the turn's tool
// calls); a scope whose identity exceeds agent.ValidateIdentity's limits,
// an empty text, or one too large for its event (see SendMessage), is
// refused with an error wrapping journal.ErrInvalid, and nothing is
// written; a deleted conversation, with one wrapping journal.ErrDeleted.
func (r *Runtime) Send(ctx context.Context, conversationID, text string, scope agent.Scope) (uint64, error) {
	msg := &messages.UserMessage{Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: text}}}}
	return r.SendMessage(ctx, conversationID, msg, SendOptions{}, scope)
}

// SendMessage is Send for a message of several content parts, with options.
// A message without parts, or with a part that is nil, has no content set,
// is an empty text or is a blob with neither data nor a URI, is refused with
// an error wrapping journal.ErrInvalid, and nothing is written; so is one
// whose event does not fit journal.MaxEventBytes as the conversation writes
// it (with its time, request id, author and seq): the conversation is left
// as it was (a turn under way goes on) and the request id is not taken.
func (r *Runtime) SendMessage(ctx context.Context, conversationID string, msg *messages.UserMessage, opts SendOptions, scope agent.Scope) (uint64, error) {
	if err := r.enter(ctx); err != nil {
		return 0, fmt.Errorf("lazarus: send to %q: %w", clipID(conversationID), err)
	}
	if err := journal.ValidateID("conversation id", conversationID); err != nil {
		return 0, fmt.Errorf("lazarus: send: %w", err)
	}
	if err := checkUserMessage(msg); err != nil {
		return 0, fmt.Errorf("lazarus: send to %q: %w", clipID(conversationID), err)
	}
	if err := agent.ValidateIdentity(scope.Identity()); err != nil {
		return 0, fmt.Errorf("lazarus: send to %q: scope: %w", clipID(conversationID), err)
	}
	if err := r.checkAddress(opts); err != nil {
		return 0, fmt.Errorf("lazarus: send to %q: %w", clipID(conversationID), err)
	}
	if opts.RequestID == "" {
		opts.RequestID = newRequestID()
	} else if err := journal.ValidateID("request id", opts.RequestID); err != nil {
		return 0, fmt.Errorf("lazarus: send to %q: %w", clipID(conversationID), err)
	}
	// The bare event, checked before the conversation is asked (it checks
	// the event again as it writes it, with its time, author and seq).
	if err := journal.ValidateEvent(&messages.Event{RequestId: opts.RequestID, Body: &messages.Event_UserMsg{UserMsg: msg}}); err != nil {
		return 0, fmt.Errorf("lazarus: send to %q: %w", clipID(conversationID), err)
	}
	res, err := r.ask(ctx, conversationID, &actors.Command{Scope: scope, Msg: &messages.AgentSend{RequestId: opts.RequestID, Message: msg, To: r.address(opts)}})
	if err != nil {
		return 0, r.callErr(fmt.Sprintf("lazarus: send to %q", clipID(conversationID)), err)
	}
	seq, err := sendReplyOf(res)
	if err != nil {
		return 0, r.callErr(fmt.Sprintf("lazarus: send to %q", clipID(conversationID)), err)
	}
	return seq, nil
}

// Resolve answers a pending human tool call with result, a JSON value of at
// most agent.MaxResultBytes. It
// returns once the answer is durable; the conversation then revives if
// needed, records the result and continues. A call that is unknown (also
// one of a deleted conversation: it went with it), already answered or
// expired gets an error wrapping journal.ErrStale (and journal.ErrInvalid:
// an answer to a call that is not pending is bad input), and nothing
// changes: of any number of concurrent answers, exactly one wins. A call
// still pending in an ended conversation (End refuses while a call is
// open; an import cut short leaves one) gets an error wrapping
// journal.ErrEnded, and nothing changes: the conversation stays ended (an
// End committed after that check leaves the answer recorded and the
// conversation ended, however the write states its status). A
// call that ends (its context, Options.CallTimeout, Close) after its write
// was handed over gets an error wrapping ErrUnknownOutcome and the cause
// (context.DeadlineExceeded for CallTimeout): the answer may land, and
// retrying is safe, since a call answered is never answered again (the
// retry gets journal.ErrStale and the conversation records the answer the
// row holds, once); see ErrUnknownOutcome.
//
// scope is the resolver's. Its identity (UserID and Roles) is recorded as
// the resolver, in the resolution event and the tool call row. The tool
// decides who may answer (agent.Tool.Authorize): by default any scope with
// a UserID; a scope without one only if the tool sets AllowAnonymous; and
// the tool's Authorizer, if set. A refused answer gets an error wrapping
// ErrForbidden, and nothing is written. The turn goes on for its
// requester: the tools it runs next never get the resolver's scope.
func (r *Runtime) Resolve(ctx context.Context, toolCallID, result string, scope agent.Scope) error {
	if err := r.enter(ctx); err != nil {
		return fmt.Errorf("lazarus: resolve %q: %w", clipID(toolCallID), err)
	}
	if len(result) > agent.MaxResultBytes {
		// Checked here, before anything is written: an answer too large for
		// its tool_result event would leave the conversation unable to
		// record it.
		return fmt.Errorf("lazarus: resolve %q: %w", clipID(toolCallID),
			journal.Invalidf("result of %d bytes exceeds %d", len(result), agent.MaxResultBytes))
	}
	if !agent.ValidJSON(result) {
		return fmt.Errorf("lazarus: resolve %q: %w", clipID(toolCallID), journal.Invalidf("result is not JSON"))
	}
	return r.resolve(ctx, toolCallID, messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED,
		&messages.ToolOutcome{Outcome: &messages.ToolOutcome_Content{Content: result}}, scope)
}

// Reject answers a pending human tool call with an error the model will
// see (a human declined, say), of code agent.CodeRejected with reason as
// its message, as agent.ErrorOutcome makes it: bytes that are not UTF-8
// become U+FFFD and a reason over agent.MaxErrorBytes is cut there (ending
// in "..."); an empty reason is an error without a message. Otherwise it
// behaves as Resolve (the same authorization, with Authorization.Reject
// set).
func (r *Runtime) Reject(ctx context.Context, toolCallID, reason string, scope agent.Scope) error {
	return r.resolve(ctx, toolCallID, messages.ToolCallStatus_TOOL_CALL_STATUS_ERRORED,
		agent.ErrorOutcome(agent.CodeRejected, reason), scope)
}

// errNotPending is wrapped, besides journal.ErrStale, by the error of an
// answer to a call that is not pending: bad input for a public entry
// (DESIGN: results for calls that are not pending are ErrInvalid).
var errNotPending = fmt.Errorf("the call is not pending: %w", journal.ErrInvalid)

func (r *Runtime) resolve(ctx context.Context, id string, status messages.ToolCallStatus, out *messages.ToolOutcome, scope agent.Scope) error {
	err := r.resolveCall(ctx, id, status, out, scope)
	if errors.Is(err, journal.ErrStale) && !errors.Is(err, journal.ErrInvalid) {
		return fmt.Errorf("%w (%w)", err, errNotPending)
	}
	return err
}

func (r *Runtime) resolveCall(ctx context.Context, id string, status messages.ToolCallStatus, out *messages.ToolOutcome, scope agent.Scope) error {
	if err := r.enter(ctx); err != nil {
		return fmt.Errorf("lazarus: resolve %q: %w", clipID(id), err)
	}
	if err := journal.ValidateID("tool call id", id); err != nil {
		return fmt.Errorf("lazarus: resolve: %w", err)
	}
	resolver := scope.Identity()
	if err := agent.ValidateIdentity(resolver); err != nil {
		return fmt.Errorf("lazarus: resolve %q: scope: %w", clipID(id), err)
	}
	row, err := r.store.ToolCall(ctx, id)
	switch {
	case errors.Is(err, journal.ErrNotFound):
		return fmt.Errorf("lazarus: resolve %q: no such tool call: %w (%w)", clipID(id), journal.ErrStale, err)
	case err != nil:
		return r.callErr(fmt.Sprintf("lazarus: resolve %q", clipID(id)), err)
	case row.GetExecutor() != messages.Executor_EXECUTOR_HUMAN:
		return fmt.Errorf("lazarus: resolve %q: %w", clipID(id), journal.Invalidf("tool %q is not a human tool; the runtime runs it", row.GetName()))
	case row.GetStatus() != messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING:
		// Answered: perhaps by this caller's earlier attempt, whose write
		// landed with its outcome unknown and was never delivered.
		r.deliverAnswer(ctx, row.GetConversationId(), id, status, out, scope)
		return fmt.Errorf("lazarus: resolve %q: already %v: %w", clipID(id), row.GetStatus(), journal.ErrStale)
	}
	if ctx.Value(authorizedKey{}) == nil {
		if err := r.authorize(ctx, row, scope, status); err != nil {
			return fmt.Errorf("lazarus: resolve %q: %w", clipID(id), err)
		}
	}
	by := resolver.Proto()
	conv := row.GetConversationId()
	switch c, err := r.store.Conversation(ctx, conv); {
	case errors.Is(err, journal.ErrDeleted):
		return fmt.Errorf("lazarus: resolve %q: no such tool call: %w (%w)", clipID(id), journal.ErrStale, err)
	case err != nil:
		return r.callErr(fmt.Sprintf("lazarus: resolve %q", clipID(id)), err)
	case c.GetStatus() == messages.ConversationStatus_CONVERSATION_STATUS_ENDED:
		// It runs no turn again: the answer is refused. (An End that
		// commits after this read does not reopen it either: the Store
		// keeps an ENDED row ENDED, recording the answer.)
		return fmt.Errorf("lazarus: resolve %q: conversation %q: %w", clipID(id), clipID(conv), journal.ErrEnded)
	}
	if _, ran, err := r.forwardOp(ctx, conv, &messages.ClusterRequest{Scope: scopeToProto(scope), Op: &messages.ClusterRequest_Resolve{
		Resolve: &messages.ClusterResolve{ToolCallId: id, Status: status, Result: out}}}, false); ran {
		if err != nil {
			return r.callErr(fmt.Sprintf("lazarus: resolve %q", clipID(id)), err)
		}
		return nil
	}
	// ACTIVE: a turn is owed once the result is recorded, so a restart
	// resumes the conversation even if the delivery below is lost.
	req := &messages.AppendRequest{ConversationId: conv, Unfenced: true,
		Status: messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE, Resolutions: []*messages.ToolResolution{{
			ToolCallId: id, Status: status, Result: out, At: journal.Timestamp(r.opts.Clock.Now()), By: by,
		}}}
	if err := r.journalWrite(ctx, req); err != nil {
		if errors.Is(err, journal.ErrDeleted) {
			// The conversation was deleted since the row was read: the
			// call is gone with it, as if the row had not been found.
			return fmt.Errorf("lazarus: resolve %q: no such tool call: %w (%w)", clipID(id), journal.ErrStale, err)
		}
		if errors.Is(err, journal.ErrUnknownOutcome) || errors.Is(err, supervisor.ErrNoAnswer) || errors.Is(err, journal.ErrStale) {
			// The answer may be in the Store, or land there, with no
			// delivery to come (this one's, its outcome unknown or its
			// caller gone, or another's that won since the row was read):
			// a live activation does not read the row again.
			r.sup.DeliverAnswer(conv, id)
		}
		return r.callErr(fmt.Sprintf("lazarus: resolve %q", clipID(id)), err)
	}
	// The answer is durable: from here on, revival records it even if this
	// delivery is lost.
	cmd := &actors.Command{Scope: scope, Msg: &messages.AgentResolved{ToolCallId: id, Status: status, Result: out, By: "user", Resolver: by}}
	if _, err := r.sup.Ask(ctx, conv, cmd); errors.Is(err, supervisor.ErrMoved) {
		// The conversation moved under the delivery: its owner revives it,
		// which records the answer from the Store, and runs what it owes.
		wctx, cancel := context.WithTimeout(r.life, r.opts.CallTimeout)
		defer cancel()
		if err := r.wake(wctx, conv, false); err != nil {
			r.log.Debug("resolution is durable; waking its conversation's new owner failed", "conversation", conv, "tool_call", id, "err", err)
		}
	} else if err != nil {
		// A live activation must still hear of it (it does not read the
		// row again): deliver without waiting. A second delivery of an
		// answer already recorded is a no-op.
		r.sup.Tell(conv, cmd)
		r.log.Debug("resolution is durable but its delivery was not confirmed; delivered again without waiting",
			"conversation", conv, "tool_call", id, "err", err)
	}
	return nil
}

// deliverAnswer is supervisor.DeliverAnswer on the conversation's owner,
// for a resolve that found its call answered: the live activation that
// awaits the answer is the owner's. In cluster mode, when another member
// owns conv, this member sends the resolve (status and out, for scope) on
// to it in the background, bounded by Options.CallTimeout: the owner finds
// the call answered there too, writes nothing, and delivers the Store's
// answer to its live activation. It returns at once; a failure delivers
// nothing (the owner's revival or resume scan records the answer).
func (r *Runtime) deliverAnswer(ctx context.Context, conv, id string, status messages.ToolCallStatus, out *messages.ToolOutcome, scope agent.Scope) {
	if !r.remote(ctx) || r.cl.owns(conv) {
		r.sup.DeliverAnswer(conv, id)
		return
	}
	if !r.startBackground() {
		return
	}
	go func() {
		defer r.gcWG.Done()
		fctx, cancel := context.WithTimeout(r.life, r.opts.CallTimeout)
		defer cancel()
		// Idempotent: a call that is not pending never is again, and the
		// owner writes nothing for it.
		_, ran, err := r.forwardOp(fctx, conv, &messages.ClusterRequest{Scope: scopeToProto(scope), Op: &messages.ClusterRequest_Resolve{
			Resolve: &messages.ClusterResolve{ToolCallId: id, Status: status, Result: out}}}, true)
		switch {
		case !ran: // this member owns it now
			r.sup.DeliverAnswer(conv, id)
		case err != nil && !errors.Is(err, journal.ErrStale):
			r.log.Debug("the answer is in the Store; telling its conversation's owner failed", "conversation", conv, "tool_call", id, "err", err)
		}
	}()
}

// authorize applies the rules of the call's tool (agent.Tool.Authorize) to
// an answer by scope. A tool no longer registered keeps the default rule:
// any resolver with a UserID.
func (r *Runtime) authorize(ctx context.Context, row *messages.ToolCallRecord, scope agent.Scope, status messages.ToolCallStatus) error {
	tool, ok := r.tools.Lookup(row.GetName())
	if !ok {
		tool = agent.Tool{Name: row.GetName(), Executor: messages.Executor_EXECUTOR_HUMAN}
	}
	return tool.Authorize(ctx, agent.Authorization{
		ConversationID: row.GetConversationId(),
		ToolCallID:     row.GetId(),
		Tool:           row.GetName(),
		Arguments:      row.GetArgs(),
		Prompt:         row.GetPrompt(),
		Requester:      agent.IdentityOf(row.GetRequester()),
		Resolver:       scope,
		Reject:         status == messages.ToolCallStatus_TOOL_CALL_STATUS_ERRORED,
	})
}

func (r *Runtime) journalWrite(ctx context.Context, req *messages.AppendRequest) error {
	res, err := r.sup.Request(ctx, r.sup.Journal(), &messages.JournalWrite{RequestId: 1, Request: req})
	if err != nil {
		return err
	}
	reply, err := replyAs[*messages.JournalWriteReply](res)
	if err != nil {
		return err
	}
	return journal.ErrorFromProto(reply.GetReply().GetError())
}

// History returns the conversation's events in ascending seq: the newest
// limit events before seq before (before 0: the newest; limit 0: all). Page
// backwards by passing the oldest seq received as the next before. A deleted
// conversation is an error wrapping journal.ErrDeleted; one with nothing
// stored has no events and no error. It reads the whole page whatever its
// events' sizes; HistoryWithin bounds the read by bytes.
func (r *Runtime) History(ctx context.Context, conversationID string, before uint64, limit int) ([]*messages.Event, error) {
	return r.HistoryWithin(ctx, conversationID, before, limit, 0)
}

// HistoryWithin is History bounded by bytes: of the newest limit events
// before seq before (as History selects them), it returns the newest whose
// encoded sizes (proto.Size) sum to at most maxBytes, and one at least, so
// paging always gets on. The bound reaches the Store's read
// (journal.EventQuery.MaxBytes), which stops there: a page of large events
// is not read whole and then cut. A page cut short by maxBytes resumes as
// one cut by limit, before the oldest seq it holds; it may be shorter than
// limit with older events in the log. maxBytes 0 is History's (no bound);
// a negative maxBytes or limit wraps journal.ErrInvalid.
func (r *Runtime) HistoryWithin(ctx context.Context, conversationID string, before uint64, limit, maxBytes int) ([]*messages.Event, error) {
	if err := r.enter(ctx); err != nil {
		return nil, fmt.Errorf("lazarus: history of %q: %w", clipID(conversationID), err)
	}
	if err := journal.ValidateID("conversation id", conversationID); err != nil {
		return nil, fmt.Errorf("lazarus: history: %w", err)
	}
	if limit < 0 {
		return nil, fmt.Errorf("lazarus: history of %q: %w", clipID(conversationID), journal.Invalidf("negative limit"))
	}
	if maxBytes < 0 {
		return nil, fmt.Errorf("lazarus: history of %q: %w", clipID(conversationID), journal.Invalidf("negative max bytes"))
	}
	q := journal.EventQuery{Before: before, Limit: limit, MaxBytes: maxBytes}
	if limit == 0 && maxBytes > 0 {
		q.Limit = math.MaxInt // the newest, as History's pages, not the oldest
	}
	evs, err := r.store.Events(ctx, conversationID, q)
	if err != nil {
		return nil, r.callErr(fmt.Sprintf("lazarus: history of %q", clipID(conversationID)), err)
	}
	if len(evs) == 0 {
		// No events: a new conversation, an empty page, or a deleted one,
		// which says so.
		if err := r.deleted(ctx, conversationID); err != nil {
			return nil, fmt.Errorf("lazarus: history of %q: %w", clipID(conversationID), err)
		}
	}
	return evs, nil
}

// deleted returns an error wrapping journal.ErrDeleted if the conversation
// was deleted, else nil (also when its row cannot be read: the caller's
// own read reports that).
func (r *Runtime) deleted(ctx context.Context, conversationID string) error {
	if _, err := r.store.Conversation(ctx, conversationID); errors.Is(err, journal.ErrDeleted) {
		return err
	}
	return nil
}

// Subscribe streams the conversation's events after seq afterSeq: first
// those already in the log, then every new one as it becomes durable, with
// no gap and no duplicate, across kills and revivals of its actor. A write
// the Store reported of unknown outcome (journal.ErrUnknownOutcome) that
// landed, which no commit publishes, reaches it too, read from the Store
// once the conversation's next commit or the revival read of its next
// activation (the runtime wakes it again at once after such a write)
// shows it is in the log. Live updates also carry streamed text deltas and failed turns. An update whose
// TurnEnd is set says a turn is over (answered, suspended, failed,
// cancelled); durable ends come with their event, in history too. A
// subscription that starts in the middle of an answer gets, after the
// history and before the live updates, the deltas the model call in
// progress streamed so far, from its start (each delta once; none of an
// answer already durable, of a cancelled or failed call, or past
// journal.MaxEventBytes of text). The channel is
// closed when ctx ends, when Close is called, or after an update whose Err
// is ErrLagged (the reader fell too far behind; subscribe again after the
// last seq received). A deleted conversation is an error wrapping
// journal.ErrDeleted. An afterSeq past the log's last event is refused with
// an error wrapping journal.ErrInvalid that names the last seq: it is no
// seq of this conversation's (the subscription does not wait for the log
// to reach it); 0, the whole log, is never refused for it. A conversation
// with Options.MaxSubscriptions subscriptions open on this Runtime refuses
// one more with an error wrapping ErrTooManySubscriptions; each frees its
// slot when its channel is closed.
//
// In cluster mode the subscription follows the conversation's owner, on
// this member or another, and moves with it on every membership change,
// resuming after the last seq it delivered (no event lost or repeated);
// deltas of an answer in progress it delivered before a new stream
// starts (a move, falling behind, an owner that stopped serving it) are
// voided by an update with Restart set before that stream's first
// update, which gives the answer's deltas again from its first (or a new
// model call's). A subscriber on a member that does not own the
// conversation and falls behind (Options.SubscriberBuffer updates on top
// of its channel's) is caught up from the Store instead of ending with
// ErrLagged: its stream from the owner ends at once, even while the
// reader is not reading, and a new one starts once the reader has taken
// the update in hand, so that a reader that stops reading holds no slot
// on the owner. The errors Subscribe returns are those of the
// checks above, made on the member asked (the Store is shared), before
// anything is forwarded: it does not wait for the owner's answer. What the
// owner meets after them (a Delete landing meanwhile, its Store failing a
// read, its Options.MaxSubscriptions reached: ErrTooManySubscriptions)
// arrives as an update whose Err wraps the sentinel, after which the
// channel is closed, as on the owner a failed read of the Store or a Delete
// after the subscription started does. A subscription to a conversation
// another member owns whose ctx ends unsubscribes from the owner and waits
// for the owner to end its stream before the channel is closed (for no
// longer than ClusterOptions.RequestTimeout once the owner has answered
// the subscribe, an owner out of reach): once it is closed, the
// subscription's slot on the owner is free too. One whose ctx ends before
// the owner answered its subscribe is closed at once; a stream the owner
// serves it all the same is ended then, and until it has ended (or the
// owner's answer timed out) the next subscription of the conversation on
// this member waits before it subscribes to the owner, so that the two
// never hold two of the owner's slots. So does a follower's own next
// subscribe to an owner that did not answer its subscribe within
// ClusterOptions.RequestTimeout (it waits as long again for the late
// answer, and for the end of the stream it started), or that it left on
// a membership change and returns to; it subscribes to another owner at
// once, also when the membership changes before the owner answered.
func (r *Runtime) Subscribe(ctx context.Context, conversationID string, afterSeq uint64) (<-chan Update, error) {
	if err := r.enter(ctx); err != nil {
		return nil, fmt.Errorf("lazarus: subscribe to %q: %w", clipID(conversationID), err)
	}
	if err := journal.ValidateID("conversation id", conversationID); err != nil {
		return nil, fmt.Errorf("lazarus: subscribe: %w", err)
	}
	if err := r.deleted(ctx, conversationID); err != nil {
		return nil, fmt.Errorf("lazarus: subscribe to %q: %w", clipID(conversationID), err)
	}
	if afterSeq > 0 {
		// Checked here, on the member the caller asked (the Store is
		// shared in cluster mode): a forwarded subscription would report
		// it as an update, not as this error.
		last, err := r.store.LastSeq(ctx, conversationID)
		if err != nil {
			return nil, r.callErr(fmt.Sprintf("lazarus: subscribe to %q", clipID(conversationID)), err)
		}
		if afterSeq > last {
			return nil, fmt.Errorf("lazarus: subscribe to %q: %w", clipID(conversationID),
				journal.Invalidf("cannot start after seq %d: the log ends at seq %d", afterSeq, last))
		}
	}
	if err := r.hub.take(conversationID); err != nil {
		return nil, fmt.Errorf("lazarus: subscribe to %q: %w", clipID(conversationID), err)
	}
	var updates <-chan Update
	var err error
	if r.remote(ctx) {
		updates, err = r.cl.subscribe(ctx, conversationID, afterSeq)
	} else {
		updates, err = r.subscribeLocal(ctx, conversationID, afterSeq, true)
	}
	if err != nil {
		r.hub.free(conversationID)
	}
	return updates, err
}

// Kill drops the conversation's actor now, as a crash would (for demos and
// tests), and reports whether it was live. The conversation's log, its
// pending calls and their deadlines are untouched; its next command revives
// it, and so does a resume scan (Open's, then one every ResumeInterval,
// unless NoResume) if the kill left it ACTIVE (a turn or a server call in
// progress), as after a crash; nothing else does (a re-wake the killed
// actor asked for, its write having lost a race or met an unknown outcome,
// is dropped). Subscribers see a TurnCancelled end if a turn was in progress, with
// the seq of the log's last event at the kill as its Update.After. A
// command that arrives while Kill runs (a Send of another caller, say)
// waits until that end is published: its message comes after it, and
// starts a turn the kill did not cancel (the turn in progress, if any, is
// run again with it). A subscription that has already delivered an event
// past the kill's seq (a write the actor had under way) does not get the
// end.
func (r *Runtime) Kill(conversationID string) bool {
	if r.isClosed() {
		return false
	}
	if r.cl != nil && !r.cl.owns(conversationID) {
		ctx, cancel := context.WithTimeout(r.life, r.opts.CallTimeout)
		defer cancel()
		reply, ran, err := r.forwardOp(ctx, conversationID, &messages.ClusterRequest{Op: &messages.ClusterRequest_Kill{Kill: &messages.ClusterKill{}}}, true)
		if ran {
			return err == nil && reply.GetKilled()
		}
	}
	return r.killLocal(conversationID)
}

// killLocal is Kill on this member. The cancelled end is published while
// the supervisor holds the conversation: no new activation can write
// before it is read and published.
func (r *Runtime) killLocal(conversationID string) bool {
	return r.sup.Kill(conversationID, func() { r.publishCancelled(conversationID) })
}

// owns is the supervisor's Config.Owns: whether this Runtime owns the
// conversation (in cluster mode, by its current membership; outside a
// cluster, every conversation is its own).
func (r *Runtime) owns(conversationID string) bool {
	return r.cl == nil || r.cl.owns(conversationID)
}

// Wake activates the conversation if it is not live, and returns once its
// actor has revived. Revival applies the recovery rules: a turn interrupted
// before the model answered is run again; a server call interrupted before
// its result is dispatched again under the same tool call id; pending human
// calls stay pending. A turn that failed for good (the log ends in a
// turn_failed event) is run again too, with a fresh count of attempts: the
// runtime's own wakes (resume on Open, after a lost write race) never do
// that. An ended conversation (End) runs no turn, not even a failed or
// interrupted one, and dispatches no call: Wake returns nil having run
// nothing. A deleted conversation is an error wrapping journal.ErrDeleted,
// every time. A conversation with nothing stored is activated empty and
// nothing is written: its first Send starts its log, and it passivates
// when idle like any other.
func (r *Runtime) Wake(ctx context.Context, conversationID string) error {
	return r.wake(ctx, conversationID, true)
}

// wake is Wake; explicit says whether the application asked for it (and
// a failed turn runs again) or the runtime did.
func (r *Runtime) wake(ctx context.Context, conversationID string, explicit bool) error {
	return r.wakeAt(ctx, conversationID, explicit, 0)
}

// wakeAt is wake with the log's last seq as the waker read it (0: not
// read): a live activation whose view ends before it is stale, retires,
// and a new one revives (messages.AgentWake.log_last).
func (r *Runtime) wakeAt(ctx context.Context, conversationID string, explicit bool, logLast uint64) error {
	if err := r.enter(ctx); err != nil {
		return fmt.Errorf("lazarus: wake %q: %w", clipID(conversationID), err)
	}
	if err := journal.ValidateID("conversation id", conversationID); err != nil {
		return fmt.Errorf("lazarus: wake: %w", err)
	}
	res, err := r.ask(ctx, conversationID, &actors.Command{Scope: agent.SystemScope, Msg: &messages.AgentWake{Explicit: explicit, LogLast: logLast}})
	if err != nil {
		return r.callErr(fmt.Sprintf("lazarus: wake %q", clipID(conversationID)), err)
	}
	if err := agentReplyErr(res); err != nil {
		return r.callErr(fmt.Sprintf("lazarus: wake %q", clipID(conversationID)), err)
	}
	return nil
}

// errUnexpectedReply is wrapped by the error of a call whose actor
// answered with a reply of another type than the call's command has: a
// bug of the actor protocol, reported as an error (an internal one: it
// wraps no sentinel of the API) rather than a panic of the caller.
var errUnexpectedReply = errors.New("lazarus: internal error: unexpected actor reply")

// replyAs is res as the reply type T its command has, or an error
// wrapping errUnexpectedReply, naming both types, when res is another.
func replyAs[T any](res any) (T, error) {
	reply, ok := res.(T)
	if !ok {
		return reply, fmt.Errorf("%w %T, want %T", errUnexpectedReply, res, reply)
	}
	return reply, nil
}

// agentReplyErr is the error the AgentReply res carries (nil for none),
// or one wrapping errUnexpectedReply when res is not an AgentReply.
func agentReplyErr(res any) error {
	reply, err := replyAs[*messages.AgentReply](res)
	if err != nil {
		return err
	}
	return journal.ErrorFromProto(reply.GetError())
}

// sendReplyOf is the seq and error the AgentSendReply res carries (the
// answer of a send, a rewind or a scheduled wake), or an error wrapping
// errUnexpectedReply when res is not an AgentSendReply.
func sendReplyOf(res any) (uint64, error) {
	reply, err := replyAs[*messages.AgentSendReply](res)
	if err != nil {
		return 0, err
	}
	return reply.GetSeq(), journal.ErrorFromProto(reply.GetError())
}

// resumePage is how many ids of ACTIVE conversations resumeInterrupted
// reads at a time.
const resumePage = 500

// resumeInterrupted wakes every conversation whose status says a turn was
// in progress (ACTIVE) when the previous process stopped. It runs once, in
// the background, after Open. It pages through the Store's index of ACTIVE
// conversations (journal.Conversations.ListActiveConversations), so its
// cost is the number of those, not the number of conversations. A listed
// conversation whose row no longer says ACTIVE when its turn comes (a page
// can be old by then) is not woken. Liveness is read before the row: a
// turn's end writes the row IDLE before its activation can passivate, so
// one seen not live and then read ACTIVE still owes work, and one that
// passivated after its turn is not revived. A live one is woken with the
// log's last seq, delivered to that activation alone (never spawning one),
// which retires it only if it is stale (idle since another writer moved
// the log on); if the activation is gone by then (it passivated, or
// retired as stale), the conversation is treated as not live: its row is
// read again. A periodic scan (armResume) skips live ones, except in a
// cluster: a member that still believed it owned a conversation (paused,
// or cut off) may have moved its log on behind a live activation here,
// idle since, with no membership change here to run a scan. Close ends it:
// its context is the runtime's life, which Close cancels, and it checks
// for Close before each wake.
func (r *Runtime) resumeInterrupted(periodic bool) {
	defer r.gcWG.Done()
	ctx := r.life
	cursor := ""
	for !r.isClosed() {
		ids, next, err := r.store.ListActiveConversations(ctx, cursor, resumePage)
		if err != nil {
			if ctx.Err() == nil && !r.isClosed() {
				r.log.Warn("resume: listing the active conversations failed", "err", err)
			}
			return
		}
		for _, id := range ids {
			if r.isClosed() {
				return
			}
			if r.cl != nil && !r.cl.owns(id) {
				continue // its owner resumes it
			}
			if r.sup.IsActive(id) {
				if periodic && r.cl == nil {
					// Live: not stalled. Only another member moves its
					// log behind its back (see resumeLive).
					continue
				}
				if done := r.resumeLive(ctx, id); done {
					continue
				}
				// No live activation took the wake: as one not live.
			}
			if !r.stillActive(ctx, id) {
				// Its turn ended since the listing (the listing can be old
				// by now): waking it would only keep an actor alive.
				continue
			}
			r.resumeLogged(id, r.wakeAt(ctx, id, false, 0))
		}
		if next == "" {
			return
		}
		cursor = next
	}
}

// resumeLive is resumeInterrupted's wake of conversation id, which was
// live: it reports whether it is done with id, false if no live
// activation took the wake (the caller goes on as for one not live). A
// live one needs nothing, unless it is stale: idle since before another
// writer (a member that owned it meanwhile) moved the log on, it would
// never run the turn that writer left owed. The wake carries the log's
// last seq; a stale activation retires (and does not take it), and the
// caller's ordinary wake revives a new one. The wake goes to the live
// activation alone: one that passivated meanwhile, its turn ended, is not
// revived by it.
func (r *Runtime) resumeLive(ctx context.Context, id string) (done bool) {
	if !r.stillActive(ctx, id) {
		return true // its turn ended: nothing owed
	}
	last, err := r.store.LastSeq(ctx, id)
	if err != nil {
		return true
	}
	res, ok, err := r.sup.AskLive(ctx, id, &actors.Command{Scope: agent.SystemScope, Msg: &messages.AgentWake{LogLast: last}})
	switch {
	case err != nil:
		r.resumeLogged(id, r.callErr(fmt.Sprintf("lazarus: wake %q", clipID(id)), err))
		return true
	case !ok:
		return false
	}
	if err := agentReplyErr(res); err != nil {
		r.resumeLogged(id, r.callErr(fmt.Sprintf("lazarus: wake %q", clipID(id)), err))
	}
	return true
}

// resumeLogged logs the error of resumeInterrupted's wake of conversation
// id, unless there is none or it says nothing worth a warning (Close, a
// deleted conversation).
func (r *Runtime) resumeLogged(id string, err error) {
	if err != nil && !errors.Is(err, ErrClosed) && !errors.Is(err, journal.ErrDeleted) && r.life.Err() == nil {
		r.log.Warn("resume failed", "conversation", id, "err", err)
	}
}

// startBackground counts a background task in gcWG, which Close waits
// for, unless the Runtime is closed; it reports whether it did (the task
// must then call gcWG.Done).
func (r *Runtime) startBackground() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	r.gcWG.Add(1)
	return true
}

// armResume arms the next periodic resume scan (Options.ResumeInterval),
// unless the interval is negative. r.mu must be held.
func (r *Runtime) armResume() {
	if r.opts.ResumeInterval < 0 || r.closed {
		return
	}
	// Real time, not Options.Clock: a test's manual clock counts and runs
	// the actors' timers, which this scan is not one of.
	r.resumeStop = time.AfterFunc(r.opts.ResumeInterval, func() {
		if !r.startBackground() {
			return
		}
		r.resumeInterrupted(true) // Done by it
		r.mu.Lock()
		r.armResume()
		r.mu.Unlock()
	}).Stop
}

// stillActive reports whether the conversation's row still says a turn is
// in progress (ACTIVE); if the row cannot be read, it says so too, and the
// wake tells what is wrong.
func (r *Runtime) stillActive(ctx context.Context, id string) bool {
	row, err := r.store.Conversation(ctx, id)
	return err != nil || row.GetStatus() == messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE
}

// IsActive reports whether the conversation has a live actor on this
// Runtime. In cluster mode it is not forwarded: it says false on a member
// that does not run the conversation, live on its owner (Owner) or not.
func (r *Runtime) IsActive(conversationID string) bool { return r.sup.IsActive(conversationID) }

// Active returns the number of live conversation actors on this Runtime
// (in cluster mode, this member's alone).
func (r *Runtime) Active() int { return r.sup.Active() }

// Close stops every actor (pending journal writes are answered first),
// ends every subscription, and closes the Store if the Runtime opened it.
// Nothing durable is lost: a later Open on the same Store resumes every
// conversation. Close is idempotent: a later call returns nil, and one
// made while another is still closing returns once that one has finished
// (the Store closed, its directory free to open again). Once it returned,
// nothing more is written to Options.Logger (see there).
//
// Close must not be called from code the Runtime runs (a server tool's
// Run, a model's call, a ScopeLoader, a Metrics hook): it waits for that
// code to return, so such a call hangs (a tool's, for good). To close the
// Runtime from there, call Close on a goroutine of its own (go rt.Close())
// and return: Close cancels the tool's or the model call's context.
func (r *Runtime) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		<-r.stopped
		return nil
	}
	r.closed = true
	defer close(r.stopped)
	if r.gcStop != nil {
		r.gcStop()
	}
	if r.resumeStop != nil {
		r.resumeStop()
	}
	r.stopFileSweep()
	r.mu.Unlock()
	r.endLife()
	r.gcWG.Wait()
	if r.gw != nil {
		r.gw.stopServing()
	}
	r.sup.Stop()
	r.hub.close()
	if r.gw != nil {
		r.gw.leave()
	}
	if r.cl == nil && r.ownsSys {
		r.system.Shutdown()
	}
	if r.files != nil {
		_ = r.files.root.Close()
	}
	var err error
	if r.ownsStore {
		err = r.store.Close()
	}
	// Last: what Close itself logged went through, and nothing the
	// actor system's goroutines, or the Runtime's, log later does.
	r.logs.shut()
	return err
}

// armAuditGC schedules the next audit sweep on the clock, after d (0 at
// Open); each sweep arms the next TTL/2 later but no sooner than
// minSweepEvery: a TTL of a few nanoseconds would otherwise re-arm it at
// once, forever. r.mu is held.
func (r *Runtime) armAuditGC(d time.Duration) {
	r.gcStop = r.opts.Clock.AfterFunc(d, func() {
		if !r.startBackground() {
			return
		}
		defer r.gcWG.Done()
		// Under the Runtime's life: Close ends a sweep in progress
		// rather than wait for it to go through every conversation.
		if n, err := r.gcAudit(r.life); err != nil {
			if r.life.Err() == nil {
				r.log.Warn("audit gc failed", "err", err)
			}
		} else if n > 0 {
			r.log.Debug("audit gc", "removed", n)
		}
		r.mu.Lock()
		if !r.closed {
			r.armAuditGC(max(r.opts.Audit.TTL/2, minSweepEvery))
		}
		r.mu.Unlock()
	})
}

// GCAudit deletes audit rows older than Options.Audit.TTL in every
// conversation and returns how many it removed. It does nothing when audit
// is off or has no TTL. An ended ctx returns an error wrapping ctx.Err(),
// and a call after Close one wrapping ErrClosed, removing nothing; on
// another error it returns how many it removed before it.
func (r *Runtime) GCAudit(ctx context.Context) (int, error) {
	if err := r.enter(ctx); err != nil {
		return 0, fmt.Errorf("lazarus: gc audit: %w", err)
	}
	n, err := r.gcAudit(ctx)
	if err != nil {
		return n, r.callErr("lazarus: gc audit", err)
	}
	return n, nil
}

// gcAudit is GCAudit without the entry checks: the sweeper's timer runs it
// under Runtime.gcWG.
func (r *Runtime) gcAudit(ctx context.Context) (int, error) {
	if !r.opts.Audit.Enabled || r.opts.Audit.TTL <= 0 {
		return 0, nil
	}
	cutoff := r.opts.Clock.Now().Add(-r.opts.Audit.TTL)
	total, cursor := 0, ""
	for {
		convs, next, err := r.store.ListConversations(ctx, cursor, 500)
		if err != nil {
			return total, err
		}
		for _, c := range convs {
			n, err := r.store.GCModelCalls(ctx, c.GetId(), cutoff)
			if err != nil {
				return total, err
			}
			total += n
		}
		if next == "" {
			return total, nil
		}
		cursor = next
	}
}

func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
