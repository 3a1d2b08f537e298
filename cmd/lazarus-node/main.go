// Command lazarus-node runs one member of a Lazarus cluster on a shared
// PostgreSQL journal, with a scripted echo model and a small JSON control
// API, for the multi-process cluster tests (tests/cluster) and the cluster
// demo (make demo-cluster). It is a test and demo tool, not a server: the
// application's server is `lazarus serve`.
//
//	lazarus-node --postgres DSN --port 7001 --automanaged-port 7101 \
//	    --seeds 127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103 --http 127.0.0.1:7201
//
// The model answers a user message "echo: TEXT"; a message "tool: X" makes
// it call the server tool "stamp" first, and "ask: X" the human tool
// "approve" (whose deadline is --human-timeout). --model-delay is how long
// every model call takes, so a node can be killed mid-turn.
//
// Control API (JSON):
//
//	POST /send     {"conv","text","request_id"} -> {"seq","node","owner"}
//	POST /sendwait {"conv","text"}              -> {"outcome","text","pending"}
//	POST /resolve  {"tool_call_id","result"}    -> {}
//	POST /kill?conv=ID                          -> {"killed"}
//	GET  /members                               -> {"self","members"}
//	GET  /owner?conv=ID                         -> {"owner"}
//	GET  /stream?conv=ID&after=N                -> one line per event: {"seq","kind"}
//	GET  /stats                                 -> {"fenced"}
//	GET  /healthz                               -> "ok"
//
// A request body is read as package server reads its own: one JSON object
// of valid UTF-8 (at most 1 MiB) with none but the fields above and
// nothing after it; anything else (an unknown field, trailing data, null,
// an array) is refused with 400 invalid and a message saying what is
// wrong, and nothing is sent or resolved. An absent field is empty. A
// client that sends its request slowly, or leaves its connection idle, is
// cut with the bounds lazarus serve has by default
// (server.DefaultReadHeaderTimeout, DefaultReadTimeout,
// DefaultIdleTimeout); a stream is not cut by them.
//
// A failed call answers {"error","code"}: code is the sentinel the error
// wraps (see errorCode), "internal" for an error that wraps none; its HTTP
// status follows the code (errorStatus): 400 invalid (a bad body, a
// missing conv, an after that is not a seq), 404 not_found (a path the
// API does not have too), 405 method_not_allowed (a method the path does
// not take, with an Allow header: GET, HEAD for the GET routes), 409 stale,
// conflict, ended or deleted, 429 too_many_subscriptions (a /stream of a
// conversation with lazarus.DefaultMaxSubscriptions streams open on this
// member), 503 closed, no_owner, unavailable or canceled, 504
// unknown_outcome or deadline_exceeded, 500 internal and any other code.
// As lazarus serve answers the same conditions, a 429 carries a
// Retry-After header of server.RetryAfterTooManySubscriptions (5)
// seconds, a 503 unavailable or canceled one of
// server.RetryAfterUnavailable (1), and a 503 no_owner (no member
// answered, as during a membership change) one of 2; a 503 closed (the
// member will not serve again) carries none, nor does any other answer:
// hints of when to try again, nothing promised. fenced counts the
// activations of this
// member retired because the Store's fence refused their write
// (lazarus.Metrics.Fenced).
//
// --postgres, --automanaged-port and --seeds are required; each seed is a
// host:port (the port from 1 to 65535) and --http a [host]:port, else
// status 2; --port 0 and the --http default (127.0.0.1:0) pick free
// ports. Once the member is up it prints "lazarus-node MEMBER ready,
// control API http://ADDR" on stdout. On SIGTERM or SIGINT (one received
// during the start is taken once the member is up, and the ready line
// still printed) it prints that it is stopping, stops
// taking control calls, answers those in flight (each is bounded by its
// own timeout (callTimeout, 10 s, for /send and /resolve; sendWaitTimeout,
// 20 s, for /sendwait); the wait for them by 25 s, after which those
// still running are cut, saying so on stderr), closes the Runtime and
// prints "lazarus-node MEMBER stopped". A second SIGTERM or SIGINT, during
// that stop or during the start, exits at once with status 7, saying so
// on stderr: the calls in flight get no answer and the Runtime is not
// closed, so the other members take its conversations over as from a
// killed member. The Runtime's log/slog warnings and errors (the cluster
// library's among them, but not its routine lines of a normal start and
// stop nor a health poll a peer did not answer, which are info or debug)
// and the control API server's go to stderr as text; --verbose adds the
// info and debug logs.
//
// Exit status (those of cmd/lazarus for the same ends): 0 stopped by a
// signal (or --help), 1 failure (the control API's address, the
// automanaged port or the Runtime could not be had, or failed: stderr
// says why), 2 usage error (an unknown flag, a bad value such as a
// --postgres DSN that does not parse, a missing required flag, an
// argument: nothing is opened), 7 forced out by a second signal.
//
// -h or --help anywhere before a "--" prints the usage, status 0, whatever
// else the command line holds: also after an unknown flag, and where a
// flag's value is expected (--postgres --help is not the DSN "--help"); a
// value that reads as a help flag is given with "=" (--postgres=-h).
//
// `lazarus-node demo` (make demo-cluster) runs three members of itself and
// a throwaway PostgreSQL (PG_BINDIR), kills one mid-turn with SIGKILL, and
// prints where each conversation lived and whether its log is whole. It
// takes no arguments (status 2 if given some; -h or --help alone prints
// its usage, status 0) and exits 1 if the cluster
// or a log fails it, or a member exits by itself (with what it wrote on
// stderr). A SIGINT, SIGTERM or SIGHUP (Ctrl-C) stops it with status 130,
// as cmd/demo, once it has killed its members and removed its PostgreSQL
// and the directory of its data; a second one exits at once.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	_ "time/tzdata" // cron time zones load on a machine without zoneinfo (ScheduleSpec.TimeZone)
	"unicode/utf8"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/internal/cliflag"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/pgjournal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/server"
)

// Exit statuses; see the package documentation.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
	// exitForced: a second signal ended the member before its graceful
	// stop did (lazarus's status for it).
	exitForced = 7
	// exitInterrupted: the demo was stopped by a signal (as cmd/demo).
	exitInterrupted = 130
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "demo" {
		if len(os.Args) == 3 && slices.Contains([]string{"-h", "-help", "--help"}, os.Args[2]) {
			fmt.Fprint(os.Stderr, demoUsage)
			os.Exit(exitOK)
		}
		if len(os.Args) > 2 {
			fmt.Fprintf(os.Stderr, "lazarus-node demo: takes no arguments, got %q\n", os.Args[2:])
			os.Exit(exitUsage)
		}
		// A first SIGINT or SIGTERM ends the demo through its cleanup
		// (members killed, PostgreSQL and its directory removed); a
		// second one, the handler gone, kills it at once.
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
		context.AfterFunc(ctx, stop)
		err := demo(ctx, os.Stdout)
		stop()
		if errors.Is(err, errInterrupted) {
			fmt.Fprintln(os.Stderr, "lazarus-node demo: interrupted")
			os.Exit(exitInterrupted)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "lazarus-node demo: FAILED:", err)
			os.Exit(exitError)
		}
		return
	}
	// Registered before the Runtime opens: a signal during the start is
	// taken once the member is up, and it then stops gracefully; a second
	// one exits at once (run).
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr, sig, os.Exit))
}

// config is the command line of a member.
type config struct {
	dsn          string
	port         int
	amPort       int
	seeds        []string
	httpAddr     string
	delay        time.Duration
	humanTimeout time.Duration
	verbose      bool
}

// callTimeout bounds a control call of /send or /resolve, and
// sendWaitTimeout one of /sendwait (a whole turn): a call that reaches it
// fails with a 504 (deadline_exceeded, or unknown_outcome when the Runtime
// cannot tell whether its write landed).
const (
	callTimeout     = 10 * time.Second
	sendWaitTimeout = 20 * time.Second
)

// stopGrace bounds the wait for the control calls in flight at a
// graceful stop: longer than the longest (sendWaitTimeout), so that each
// is answered before the Runtime closes. A call still running after it
// (one whose client has not sent all of its body) is cut.
var stopGrace = 25 * time.Second

// errUsage marks a command line that parse refuses; --help wraps
// flag.ErrHelp instead.
var errUsage = errors.New("usage")

// demoUsage is what `lazarus-node demo -h` prints.
const demoUsage = `Usage of lazarus-node demo:
  lazarus-node demo
      three members and a throwaway PostgreSQL; one is killed mid-turn
      (needs PostgreSQL 15's initdb and pg_ctl, as make deps installs)

Exit status: 0 it held; 1 it failed; 2 given arguments; 130 interrupted.
`

// parse reads the command line; the flags' usage goes to stderr.
func parse(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("lazarus-node", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, `Usage of lazarus-node:
  lazarus-node --postgres DSN --automanaged-port PORT --seeds HOST:PORT,... [flags]
      one member of a cluster on a shared PostgreSQL, with a JSON control API
      (a test and demo tool: the application's server is lazarus serve)
  lazarus-node demo
      three members and a throwaway PostgreSQL; one is killed mid-turn

`)
		fs.PrintDefaults()
		fmt.Fprint(stderr, `
Exit status: 0 stopped by a signal (or -h); 1 failure; 2 usage error;
7 forced out by a second SIGTERM or SIGINT. The demo: 0 it held; 1 it
failed; 2 given arguments; 130 interrupted.
`)
	}
	fs.StringVar(&c.dsn, "postgres", "", "PostgreSQL DSN of the shared journal (required)")
	fs.IntVar(&c.port, "port", 0, "remote port of this member (0 picks a free one)")
	fs.IntVar(&c.amPort, "automanaged-port", 0, "automanaged health port of this member (required)")
	seeds := fs.String("seeds", "", "comma-separated automanaged host:port of every member, this one included (required)")
	fs.StringVar(&c.httpAddr, "http", "127.0.0.1:0", "address of the control API (port 0 picks a free one)")
	fs.DurationVar(&c.delay, "model-delay", 50*time.Millisecond, "duration of every model call")
	fs.DurationVar(&c.humanTimeout, "human-timeout", 3*time.Second, "deadline of the approve tool")
	fs.BoolVar(&c.verbose, "verbose", false, "info and debug logs on stderr too (warnings and errors always go there)")
	if cliflag.AsksHelp(args) {
		fs.Usage()
		return c, flag.ErrHelp
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return c, err
		}
		return c, fmt.Errorf("%w: %w", errUsage, err) // the flag package printed the usage
	}
	for _, s := range strings.Split(*seeds, ",") {
		if s = strings.TrimSpace(s); s != "" {
			c.seeds = append(c.seeds, s)
		}
	}
	var bad error
	dsnErr := pgjournal.CheckDSN(c.dsn) // as the Runtime would find only once it opens
	httpErr := hostPort(c.httpAddr, 0)
	var seedErr error
	for _, s := range c.seeds {
		if err := hostPort(s, 1); err != nil && seedErr == nil {
			seedErr = fmt.Errorf("--seeds: %q: %w", s, err)
		}
	}
	switch {
	case fs.NArg() > 0:
		bad = fmt.Errorf("unexpected arguments %q (the only command is demo, given alone)", fs.Args())
	case c.dsn == "":
		bad = errors.New("--postgres is required")
	case dsnErr != nil:
		bad = fmt.Errorf("--postgres: not a PostgreSQL connection string: %w", dsnErr)
	case c.amPort <= 0 || c.amPort > 65535:
		bad = fmt.Errorf("--automanaged-port is required, a port from 1 to 65535 (got %d)", c.amPort)
	case c.port < 0 || c.port > 65535:
		bad = fmt.Errorf("--port must be from 0 to 65535 (got %d)", c.port)
	case len(c.seeds) == 0:
		bad = errors.New("--seeds is required")
	case seedErr != nil:
		bad = seedErr
	case httpErr != nil:
		bad = fmt.Errorf("--http: %q: %w", c.httpAddr, httpErr)
	case c.delay < 0:
		bad = fmt.Errorf("--model-delay must not be negative (got %v)", c.delay)
	case c.humanTimeout <= 0:
		bad = fmt.Errorf("--human-timeout must be positive (got %v)", c.humanTimeout)
	}
	if bad != nil {
		fmt.Fprintln(stderr, "lazarus-node:", bad)
		fs.Usage()
		return c, fmt.Errorf("%w: %w", errUsage, bad)
	}
	return c, nil
}

// hostPort reports an address that is not host:port with a port from
// minPort to 65535 (a seed needs its host; --http may leave it empty, for
// every interface).
func hostPort(addr string, minPort int) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	p, err := strconv.Atoi(port)
	switch {
	case err != nil || p < minPort || p > 65535:
		return fmt.Errorf("port %q is not from %d to 65535", port, minPort)
	case host == "" && minPort > 0:
		return errors.New("no host")
	}
	return nil
}

// newLogger is the member's log/slog logger, as text on stderr: warnings
// and errors, and with verbose info and debug logs too.
func newLogger(stderr io.Writer, verbose bool) *slog.Logger {
	level := slog.LevelWarn
	if verbose {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
}

// run is the member's life: it parses args, listens on the control API's
// address, opens the Runtime, prints the ready line on stdout, serves until
// stop delivers a signal (or the control API fails), then shuts down. A
// second signal from stop, before run returns, calls exit(exitForced) at
// once from another goroutine (exit must not return: os.Exit). It returns
// the exit status; errors go to stderr.
func run(args []string, stdout, stderr io.Writer, stop <-chan os.Signal, exit func(int)) int {
	c, err := parse(args, stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case err != nil:
		return exitUsage
	}
	// first carries the first signal to the life below, which takes it
	// once the member is up; the second does not wait for anything.
	first := make(chan os.Signal, 1)
	if stop != nil {
		returned := make(chan struct{})
		defer close(returned)
		go func() {
			select {
			case s := <-stop:
				first <- s
			case <-returned:
				return
			}
			select {
			case s := <-stop:
				fmt.Fprintf(stderr, "lazarus-node: %v again, exiting now without finishing the stop\n", s)
				exit(exitForced)
			case <-returned:
			}
		}()
	}
	fail := func(err error) int {
		fmt.Fprintln(stderr, "lazarus-node:", err)
		return exitError
	}
	// Listen first: an address that cannot be had fails the start before
	// the member joins the cluster, and the ready line names the port.
	ln, err := net.Listen("tcp", c.httpAddr)
	if err != nil {
		return fail(fmt.Errorf("control API: %w", err))
	}
	defer ln.Close()
	// The automanaged provider serves its health endpoint on every
	// interface and only logs a failure to: the member would start and
	// never be a member of its own cluster. A port taken now fails the
	// start instead, before the Runtime opens.
	am, err := net.Listen("tcp", fmt.Sprintf(":%d", c.amPort))
	if err != nil {
		return fail(fmt.Errorf("--automanaged-port %d: %w", c.amPort, err))
	}
	_ = am.Close()
	var fenced atomic.Int64
	logger := newLogger(stderr, c.verbose)
	rt, err := lazarus.Open(lazarus.Options{
		Postgres:    c.dsn,
		Model:       echoModel(c.delay),
		Tools:       tools(c.humanTimeout),
		IdleTimeout: -1,
		Logger:      logger,
		Metrics:     lazarus.Metrics{Fenced: func() { fenced.Add(1) }},
		Cluster: &lazarus.ClusterOptions{
			Port:            c.port,
			AutoManagedPort: c.amPort,
			Seeds:           c.seeds,
		},
	})
	if err != nil {
		return fail(err)
	}
	// Streams never end by themselves: the shutdown ends them.
	streams, endStreams := context.WithCancel(context.Background())
	defer endStreams()
	srv := controlServer(api(rt, &fenced, streams), logger)
	srv.RegisterOnShutdown(endStreams)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	fmt.Fprintf(stdout, "lazarus-node %s ready, control API http://%s\n", rt.Address(), ln.Addr())
	select {
	case s := <-first:
		fmt.Fprintf(stdout, "lazarus-node %s: %v, stopping\n", rt.Address(), s)
	case err = <-errc:
	}
	ctx, cancel := context.WithTimeout(context.Background(), stopGrace)
	defer cancel()
	if serr := srv.Shutdown(ctx); serr != nil {
		fmt.Fprintf(stderr, "lazarus-node: control calls still running after %v are cut: %v\n", stopGrace, serr)
		_ = srv.Close()
	}
	if cerr := rt.Close(); err == nil {
		err = cerr
	}
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fail(err)
	}
	fmt.Fprintf(stdout, "lazarus-node %s stopped\n", rt.Address())
	return exitOK
}

// controlServer serves the control API with the bounds lazarus serve
// gives its own server by default: a client sending its headers or its
// body slowly, or a keep-alive connection left idle, is cut, not held. A
// stream (a GET without a body) is not cut by them once it is read.
// Its own errors (a panic in a handler, say) go to logger as warnings.
func controlServer(h http.Handler, logger *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: server.DefaultReadHeaderTimeout,
		ReadTimeout:       server.DefaultReadTimeout,
		IdleTimeout:       server.DefaultIdleTimeout,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
}

// echoModel answers the last user message (see the package doc).
func echoModel(delay time.Duration) agent.Model {
	return agent.ModelFunc(func(ctx context.Context, turn agent.Turn, onDelta func(string)) (*messages.AssistantMessage, error) {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(delay):
		}
		evs := turn.Context
		if len(evs) == 0 {
			return agent.Text("nothing to answer"), nil
		}
		last := evs[len(evs)-1]
		if last.GetToolResult() != nil {
			return agent.Text("done"), nil
		}
		text := ""
		for _, p := range last.GetUserMsg().GetContent() {
			text += p.GetText()
		}
		switch {
		case strings.HasPrefix(text, "tool:"):
			return agent.Reply("", agent.Call("stamp", `{}`)), nil
		case strings.HasPrefix(text, "ask:"):
			return agent.Reply("", agent.Call("approve", `{}`)), nil
		}
		if onDelta != nil {
			onDelta("echo: " + text)
		}
		return agent.Text("echo: " + text), nil
	})
}

func tools(humanTimeout time.Duration) []agent.Tool {
	return []agent.Tool{
		{Name: "stamp", Description: "stamps", Executor: messages.Executor_EXECUTOR_SERVER,
			Run: func(ctx context.Context, inv agent.Invocation) (string, error) {
				return strconv.Quote(inv.ToolCallID), nil
			}},
		{Name: "approve", Description: "asks a human", Executor: messages.Executor_EXECUTOR_HUMAN, Timeout: humanTimeout},
	}
}

// errorCode is the stable code of a failed call: "method_not_allowed" for
// errMethodNotAllowed, else the first sentinel of the
// Runtime's contract the error wraps ("closed" for lazarus.ErrClosed,
// "unknown_outcome", "no_owner", "too_many_subscriptions",
// "deadline_exceeded", "canceled"), else
// the journal's code in lower case without its prefix ("conflict",
// "unavailable", "stale", "invalid", ...; journal.ErrorToProto), which is
// "internal" for an error that wraps no sentinel.
func errorCode(err error) string {
	switch {
	case errors.Is(err, errMethodNotAllowed):
		return "method_not_allowed"
	case errors.Is(err, lazarus.ErrClosed):
		return "closed"
	case errors.Is(err, lazarus.ErrUnknownOutcome):
		return "unknown_outcome"
	case errors.Is(err, lazarus.ErrNoOwner):
		return "no_owner"
	case errors.Is(err, lazarus.ErrTooManySubscriptions):
		return "too_many_subscriptions"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline_exceeded"
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	code := journal.ErrorToProto(err).GetCode().String()
	return strings.ToLower(strings.TrimPrefix(code, "ERROR_CODE_"))
}

// errMethodNotAllowed is a control call with a method its path does not
// take: code method_not_allowed, 405.
var errMethodNotAllowed = errors.New("method not allowed")

// errorStatus is the HTTP status of a failed call with code (errorCode):
// 400 for a bad request, 404 for an unknown one, 405 for a method its
// path does not take, 409 for a call that lost
// to the conversation's state, 429 for a stream refused for the
// conversation's streams open already, 503 for a member or Store that
// cannot take it now, 504 for an outcome not known in time, 500 for the
// rest.
func errorStatus(code string) int {
	switch code {
	case "too_many_subscriptions":
		return http.StatusTooManyRequests
	case "invalid":
		return http.StatusBadRequest
	case "not_found":
		return http.StatusNotFound
	case "method_not_allowed":
		return http.StatusMethodNotAllowed
	case "stale", "conflict", "ended", "deleted":
		return http.StatusConflict
	case "closed", "no_owner", "unavailable", "canceled":
		return http.StatusServiceUnavailable
	case "unknown_outcome", "deadline_exceeded":
		return http.StatusGatewayTimeout
	}
	return http.StatusInternalServerError
}

// retryAfterNoOwner is the Retry-After (in seconds) of a 503 no_owner: no
// member answered for the conversation, as while a member killed or
// paused is still in the others' view; once they drop it, one of them
// takes its conversations over (failover p99 under 2 s in tests/cluster).
const retryAfterNoOwner = 2

// retryAfter is the Retry-After (in seconds) of a failed call with code
// (errorCode), 0 for none, as lazarus serve answers the same conditions
// (package server): server.RetryAfterUnavailable for unavailable and
// canceled (server's unavailable), server.RetryAfterTooManySubscriptions
// for too_many_subscriptions, and retryAfterNoOwner for no_owner, a
// transient refusal during a membership change. closed has none (the
// member will not serve again), nor has any other code.
func retryAfter(code string) int {
	switch code {
	case "unavailable", "canceled":
		return server.RetryAfterUnavailable
	case "too_many_subscriptions":
		return server.RetryAfterTooManySubscriptions
	case "no_owner":
		return retryAfterNoOwner
	}
	return 0
}

// writeError answers err, a failed control call, with {"error","code"},
// the status of its code (errorStatus) and, for a code with a retryAfter,
// a Retry-After header.
func writeError(w http.ResponseWriter, err error) {
	code := errorCode(err)
	w.Header().Set("Content-Type", "application/json")
	if secs := retryAfter(code); secs > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(secs))
	}
	w.WriteHeader(errorStatus(code))
	_ = json.NewEncoder(w).Encode(map[string]string{"error": err.Error(), "code": code})
}

// conv is the request's conv parameter, required.
func conv(r *http.Request) (string, error) {
	id := r.URL.Query().Get("conv")
	if id == "" {
		return "", fmt.Errorf("control API: the conv parameter is required: %w", journal.ErrInvalid)
	}
	return id, nil
}

// maxBodyBytes bounds the body of a control call.
const maxBodyBytes = 1 << 20

// decodeBody decodes the body of a control call into v, as package server
// reads its request bodies: one JSON object of valid UTF-8 with no unknown
// field and nothing after it. Anything else is an error wrapping
// journal.ErrInvalid that says what is wrong, and v is not to be used.
func decodeBody(body []byte, v any) error {
	bad := func(what string) error {
		return fmt.Errorf("control API: request body: %s: %w", what, journal.ErrInvalid)
	}
	if !utf8.Valid(body) {
		return bad("not valid UTF-8")
	}
	if t := bytes.TrimLeft(body, " \t\r\n"); len(t) > 0 && t[0] != '{' {
		return bad("not a JSON object") // (json decodes null into a struct as nothing at all)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return bad(err.Error())
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return bad("data after the JSON object")
	}
	return nil
}

// api is the control API; streams ends the /stream calls when it ends.
func api(rt *lazarus.Runtime, fenced *atomic.Int64, streams context.Context) http.Handler {
	mux := http.NewServeMux()
	write := func(w http.ResponseWriter, v any, err error) {
		if err != nil {
			writeError(w, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(v)
	}
	// decode reads a request body into v; a bad one is the caller's error
	// (decodeBody).
	decode := func(w http.ResponseWriter, r *http.Request, v any) error {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
		if err != nil {
			return fmt.Errorf("control API: request body: %w: %w", err, journal.ErrInvalid)
		}
		return decodeBody(body, v)
	}
	// handle registers h at pattern ("METHOD /path"); another method at
	// the path is a 405 method_not_allowed with an Allow header, in the
	// API's JSON, rather than the mux's plain-text one.
	handle := func(pattern string, h http.HandlerFunc) {
		mux.HandleFunc(pattern, h)
		method, path, _ := strings.Cut(pattern, " ")
		allow := method
		if method == http.MethodGet {
			allow = "GET, HEAD"
		}
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", allow)
			writeError(w, fmt.Errorf("control API: %s takes %s, not %s: %w", path, allow, r.Method, errMethodNotAllowed))
		})
	}
	// A path the API does not have is a 404 not_found, in its JSON.
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, fmt.Errorf("control API: no %s: %w", r.URL.Path, journal.ErrNotFound))
	})
	handle("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	handle("GET /stats", func(w http.ResponseWriter, _ *http.Request) {
		write(w, map[string]int64{"fenced": fenced.Load()}, nil)
	})
	handle("GET /members", func(w http.ResponseWriter, _ *http.Request) {
		write(w, map[string]any{"self": rt.Address(), "members": rt.Members()}, nil)
	})
	handle("GET /owner", func(w http.ResponseWriter, r *http.Request) {
		id, err := conv(r)
		if err != nil {
			write(w, nil, err)
			return
		}
		write(w, map[string]string{"owner": rt.Owner(id)}, nil)
	})
	handle("POST /send", func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			Conv      string `json:"conv"`
			Text      string `json:"text"`
			RequestID string `json:"request_id"`
		}
		if err := decode(w, r, &in); err != nil {
			write(w, nil, err)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), callTimeout)
		defer cancel()
		owner := rt.Owner(in.Conv)
		msg := agent.UserMessage(agent.TextPart(in.Text))
		seq, err := rt.SendMessage(ctx, in.Conv, msg, lazarus.SendOptions{RequestID: in.RequestID}, agent.Scope{UserID: "tester"})
		write(w, map[string]any{"seq": seq, "node": rt.Address(), "owner": owner}, err)
	})
	handle("POST /sendwait", func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			Conv string `json:"conv"`
			Text string `json:"text"`
		}
		if err := decode(w, r, &in); err != nil {
			write(w, nil, err)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), sendWaitTimeout)
		defer cancel()
		end, err := rt.SendAndWait(ctx, in.Conv, in.Text, agent.Scope{UserID: "tester"})
		var pending []string
		for _, p := range end.Pending {
			pending = append(pending, p.GetToolCallId())
		}
		write(w, map[string]any{"outcome": end.Outcome.String(), "text": end.Text, "pending": pending}, err)
	})
	handle("POST /kill", func(w http.ResponseWriter, r *http.Request) {
		id, err := conv(r)
		if err != nil {
			write(w, nil, err)
			return
		}
		write(w, map[string]bool{"killed": rt.Kill(id)}, nil)
	})
	handle("POST /resolve", func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			ToolCallID string `json:"tool_call_id"`
			Result     string `json:"result"`
		}
		if err := decode(w, r, &in); err != nil {
			write(w, nil, err)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), callTimeout)
		defer cancel()
		err := rt.Resolve(ctx, in.ToolCallID, in.Result, agent.Scope{UserID: "tester"})
		write(w, map[string]any{}, err)
	})
	handle("GET /stream", func(w http.ResponseWriter, r *http.Request) {
		id, err := conv(r)
		if err != nil {
			write(w, nil, err)
			return
		}
		var after uint64
		if a := r.URL.Query().Get("after"); a != "" {
			if after, err = strconv.ParseUint(a, 10, 64); err != nil {
				write(w, nil, fmt.Errorf("control API: after %q is not a seq: %w", a, journal.ErrInvalid))
				return
			}
		}
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		defer context.AfterFunc(streams, cancel)()
		ch, err := rt.Subscribe(ctx, id, after)
		if err != nil {
			write(w, nil, err)
			return
		}
		fl, _ := w.(http.Flusher)
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.WriteHeader(http.StatusOK)
		if fl != nil {
			fl.Flush()
		}
		enc := json.NewEncoder(w)
		for u := range ch {
			if u.Event == nil {
				continue
			}
			kind := fmt.Sprintf("%T", u.Event.GetBody())
			if enc.Encode(map[string]any{"seq": u.Event.GetSeq(), "kind": kind}) != nil {
				return
			}
			if fl != nil {
				fl.Flush()
			}
		}
	})
	return mux
}
