// Loadgen drives a real Lazarus runtime (Pebble on disk, the real actors, a
// scripted model) with many concurrent conversations doing realistic turns,
// and measures it against naive baselines run in the same process, so that
// every figure is also a ratio measured on the same machine at the same
// time.
//
// A turn is a user message (~400 B of text), an assistant message with one
// tool call (~800 B), the server tool's result (~2 KB of JSON) and a final
// assistant message (~800 B): five durable events. A fraction of turns
// calls a human tool instead; a simulated human answers it after a delay
// through Runtime.Resolve. The runtime summarizes every --summary-every
// turns (snapshot.Deterministic), and a killer kills a random conversation's
// actor every --kill-every, wherever it is in its turn, then wakes it.
//
// Phases, in order:
//
//  1. runtime: --conversations drivers for --duration, with a progress line
//     a second on stderr; the first --warmup is not measured.
//  2. open loop (--open-loop): the runtime phase again, three times, with
//     turns arriving at 25%, 50% and 75% of the events/s of phase 1
//     (see --rate), each on a fresh store, each followed by baseline
//     (a)'s naive synced Sets under the same open loop.
//  3. one conversation (--single): one writer's sequential synced Appends
//     of one event each against a naive synced Pebble Set of each, in
//     interleaved rounds, then the runtime with one conversation.
//  4. baseline (a) (unless --baseline=false): the same events as phase 1,
//     each written by its own synced Pebble Set from as many goroutines,
//     for --duration (with --postgres, the seed's design on the same
//     server: one transaction per event).
//  5. baseline (b) (unless --baseline=false): revival of a conversation of
//     --revival-events events with a recent summary (Kill, then Send),
//     against one of 100 events, a warm Send, and replaying its whole log.
//
// With --compact, each store of phases 1 and 4 is reopened after its
// phase, compacted whole, and measured again: the footprint at steady
// state. With --rate N, phase 1 itself is open loop at N events/s.
//
// Each phase has a store of its own (Pebble preallocates its WAL files: a
// few hundred MB each). In the temporary directory, a phase's store is
// removed as soon as the phase's figures are taken (its disk per event,
// --compact's footprint), so a run needs room for one phase's stores at a
// time; a --dir keeps every store for inspection, so it needs room for all
// of them at once (twelve with --open-loop and --single).
//
// The report is a table on stdout, or JSON with --json; the phases, their
// progress (a line a second), --pebble-events and the errors of single
// conversations go to stderr.
//
// -h or --help anywhere before a "--" prints the flags, status 0, whatever
// else the command line holds: also after an unknown flag, and where a
// flag's value is expected (--postgres --help is not the DSN "--help"); a
// value that reads as a help flag is given with "=" (--postgres=-h).
//
// Exit status: 0 for a whole run (and -h); 1 when a phase failed; 2 for bad
// flags, a --dir that cannot be used, or a --cpuprofile, --memprofile or
// --trace file that cannot be created (checked before anything runs); 130
// when interrupted by SIGINT, SIGTERM or SIGHUP: the phase in progress
// stops, the later ones are skipped, the report covers what was measured
// until then (the phase in progress with its partial figures, such as the
// single-conversation rounds it finished or the revival samples it took,
// named as interrupted: "interrupted" in the JSON, an INTERRUPTED line in
// the table), and stderr says "loadgen: interrupted"; 141 (as a shell says
// of a process SIGPIPE killed) when stdout or stderr was closed by its
// reader, as by `loadgen | head`: the run stops at the first write that
// finds it closed, and stderr (if it is still open) says "loadgen: stdout
// closed". Interrupted or cut off, loadgen removes its temporary
// directory; a --dir is never removed.
//
// Usage:
//
//	go run ./cmd/loadgen [--conversations 1024] [--duration 10s] [--json]
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sync"
	"syscall"
	"time"

	"github.com/lazarusrt/lazarus/internal/cliflag"
)

// Exit statuses.
const (
	exitOK     = 0
	exitFailed = 1   // a phase failed
	exitUsage  = 2   // bad flags, a --dir that cannot be used, or a profile or trace file that cannot be created
	exitSignal = 130 // interrupted (SIGINT, SIGTERM or SIGHUP)
	exitPipe   = 141 // stdout or stderr closed (EPIPE): 128 + SIGPIPE, as a shell says of a process SIGPIPE killed
)

// errStdoutClosed and errStderrClosed are the causes of the end of a run
// whose stdout or stderr was closed by its reader.
var (
	errStdoutClosed = errors.New("stdout closed")
	errStderrClosed = errors.New("stderr closed")
)

// outWriter is stdout or stderr as a run writes it: safe for the run's
// concurrent writers (drivers, progress, Pebble's events), and a write that
// finds the pipe closed by its reader (EPIPE) stops the run, through closed.
type outWriter struct {
	mu     sync.Mutex
	w      io.Writer
	closed func()
}

// Write implements io.Writer.
func (o *outWriter) Write(b []byte) (int, error) {
	o.mu.Lock()
	n, err := o.w.Write(b)
	o.mu.Unlock()
	if errors.Is(err, syscall.EPIPE) {
		o.closed()
	}
	return n, err
}

// config is the command line.
type config struct {
	Conversations  int           `json:"conversations"`
	Duration       time.Duration `json:"duration_ns"`
	Warmup         time.Duration `json:"warmup_ns"`
	MinMeasured    uint64        `json:"min_measured,omitempty"`
	Think          time.Duration `json:"think_ns"`
	SummaryEvery   int           `json:"summary_every_turns"`
	HumanFraction  float64       `json:"human_fraction"`
	HumanDelay     time.Duration `json:"human_delay_ns"`
	KillEvery      time.Duration `json:"kill_every_ns"`
	Baseline       bool          `json:"baseline"`
	RevivalEvents  int           `json:"revival_events"`
	RevivalSamples int           `json:"revival_samples"`
	ReplaySamples  int           `json:"replay_samples"`
	Dir            string        `json:"dir"`
	Postgres       string        `json:"-"`
	OnPostgres     bool          `json:"postgres"`
	GoMaxProcs     int           `json:"gomaxprocs"`
	Compact        bool          `json:"compact"`
	Rate           float64       `json:"rate_events_per_s,omitempty"`
	OpenLoop       bool          `json:"open_loop"`
	Single         bool          `json:"single"`
	SingleRounds   int           `json:"single_rounds"`
	SingleRound    time.Duration `json:"single_round_ns"`
	JSON           bool          `json:"-"`
	CPUProfile     string        `json:"-"`
	MemProfile     string        `json:"-"`
	Trace          string        `json:"-"`
	TraceFrom      time.Duration `json:"-"`
	Verbose        bool          `json:"-"`
	PebbleEvents   bool          `json:"-"`

	logger *slog.Logger
	stderr io.Writer // where the run says what it does: the phases, their progress
}

// errOut is the run's stderr: the one cli was given, or os.Stderr when the
// config was not made by parseFlags.
func (c config) errOut() io.Writer {
	if c.stderr == nil {
		return os.Stderr
	}
	return c.stderr
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	// The flag package would print a parse error itself, and all the
	// flags after it; cli prints the error once, with a usage hint, and
	// -h the flags.
	fs.SetOutput(io.Discard)
	fs.IntVar(&c.Conversations, "conversations", 1024, "concurrent conversations (and raw-Pebble writers in baseline a)")
	fs.DurationVar(&c.Duration, "duration", 10*time.Second, "length of the runtime phase and of baseline (a), warm-up included")
	fs.DurationVar(&c.Warmup, "warmup", time.Second, "the first part of each phase, not measured")
	fs.Uint64Var(&c.MinMeasured, "min-measured", 0, "make the runtime phase and baseline (a) last, beyond --duration, until this many turns (runtime) or writes (baseline a) were measured: for smoke runs on a starved machine")
	fs.DurationVar(&c.Think, "think", 0, "mean think time of the scripted model per call (uniform in [think/2, 3*think/2))")
	fs.IntVar(&c.SummaryEvery, "summary-every", 10, "summarize every this many turns (0: never)")
	fs.Float64Var(&c.HumanFraction, "human", 0.05, "fraction of turns that call the human tool")
	fs.DurationVar(&c.HumanDelay, "human-delay", 20*time.Millisecond, "how long the simulated human takes to answer")
	fs.DurationVar(&c.KillEvery, "kill-every", 20*time.Millisecond, "kill (then wake) a random conversation's actor this often (0: never)")
	fs.BoolVar(&c.Baseline, "baseline", true, "run baselines (a) and (b) after the runtime phase")
	fs.IntVar(&c.RevivalEvents, "revival-events", 100_000, "events of the long conversation of baseline (b), a multiple of 5")
	fs.IntVar(&c.RevivalSamples, "revival-samples", 200, "Kill-then-Send samples per conversation in baseline (b)")
	fs.IntVar(&c.ReplaySamples, "replay-samples", 5, "full-log replays in baseline (b)")
	fs.StringVar(&c.Dir, "dir", "", "directory for the stores, created if missing, holding no earlier run's stores; every store is kept there for inspection, so it needs room for all of them at once (default: a temporary directory, each store removed as soon as its phase is measured, and the directory at the end)")
	fs.StringVar(&c.Postgres, "postgres", "", "run the journal on this PostgreSQL `DSN` (each phase in a fresh schema, dropped at the end); baseline (a) is then the seed's design on the same server: one transaction per event")
	fs.BoolVar(&c.JSON, "json", false, "print the report as JSON")
	fs.StringVar(&c.CPUProfile, "cpuprofile", "", "write a CPU profile of the runtime phase to this file")
	fs.StringVar(&c.MemProfile, "memprofile", "", "write an allocation profile of the runtime phase to this file")
	fs.StringVar(&c.Trace, "trace", "", "write an execution trace of two seconds of the runtime phase (from --trace-from) to this file")
	fs.DurationVar(&c.TraceFrom, "trace-from", 3*time.Second, "when, in the runtime phase, the --trace window starts, below --duration (--pebble-events tells when flushes happen)")
	fs.IntVar(&c.GoMaxProcs, "gomaxprocs", 0, "GOMAXPROCS for the whole run, baselines included (0: Go's default, the CPUs or $GOMAXPROCS); while the runtime's Pebble store is open it is one more, unless $GOMAXPROCS is set (pebblejournal.Options.RaiseGOMAXPROCS)")
	fs.BoolVar(&c.Compact, "compact", false, "after the runtime phase and baseline (a), reopen each store, compact all of it out of the WAL and L0 into the compressed levels, and report its disk per event again (the footprint at steady state)")
	fs.Float64Var(&c.Rate, "rate", 0, "open loop: offer this many events/s (turns arrive at rate/5 per second, Poisson, independent of acknowledgements, each to an idle conversation; Send ack and turn latency count from the arrival); 0: closed loop, every conversation sends its next message when its turn ends")
	fs.BoolVar(&c.OpenLoop, "open-loop", false, "after the (closed-loop) runtime phase, run it open loop (see --rate) at 25%, 50% and 75% of the events/s it reached, each for --duration on a fresh store and followed by naive synced Pebble Sets under the same open loop")
	fs.BoolVar(&c.Single, "single", false, "run the single-conversation phase: one writer's sequential synced Store Appends against naive synced Pebble Sets of the same events (interleaved rounds), then the runtime with one conversation")
	fs.IntVar(&c.SingleRounds, "single-rounds", 5, "rounds of the single-conversation phase")
	fs.DurationVar(&c.SingleRound, "single-round", 2*time.Second, "time of each side in a single-conversation round (the sides take turns, one turn of events each)")
	fs.BoolVar(&c.Verbose, "v", false, "log the runtime's warnings to stderr")
	fs.BoolVar(&c.PebbleEvents, "pebble-events", false, "print the runtime store's Pebble events (flushes, compactions, WAL files, write stalls) to stderr, each with the time since the phase started")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: loadgen [flags]\n\nDrives a Lazarus runtime with many concurrent conversations and measures it\nagainst naive baselines; the report is on stdout, the progress on stderr.\n\nFlags:\n")
		fs.PrintDefaults()
		fmt.Fprint(fs.Output(), "\nExit status: 0 a whole run; 1 a phase failed; 2 bad flags, a --dir that\ncannot be used, or a --cpuprofile, --memprofile or --trace file that cannot be\ncreated; 130 interrupted (SIGINT, SIGTERM, SIGHUP): the report covers what was\nmeasured until then, the phase in progress marked interrupted;\n141 stdout or stderr closed before the end (as by loadgen | head). The\ntemporary directory is removed at the end, interrupted or cut off too; a\n--dir is kept.\n")
	}
	err := flag.ErrHelp
	if !cliflag.AsksHelp(args) {
		err = fs.Parse(args)
	}
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			if stderr == nil {
				stderr = os.Stderr
			}
			fs.SetOutput(stderr)
			fs.Usage()
		}
		return c, err
	}
	switch {
	case fs.NArg() > 0:
		return c, fmt.Errorf("unexpected argument %q (loadgen takes flags only, and stops reading them at the first argument)", fs.Arg(0))
	case c.Conversations < 1:
		return c, fmt.Errorf("--conversations must be at least 1")
	case c.Duration <= 0:
		return c, fmt.Errorf("--duration must be positive")
	case c.Warmup < 0 || c.Warmup >= c.Duration:
		return c, fmt.Errorf("--warmup must be within [0, --duration)")
	case c.Think < 0:
		return c, fmt.Errorf("--think must not be negative")
	case c.HumanDelay < 0:
		return c, fmt.Errorf("--human-delay must not be negative")
	case c.KillEvery < 0:
		return c, fmt.Errorf("--kill-every must not be negative (0: never)")
	case c.SummaryEvery < 0:
		return c, fmt.Errorf("--summary-every must not be negative (0: never)")
	case c.HumanFraction < 0 || c.HumanFraction > 1:
		return c, fmt.Errorf("--human must be within [0, 1]")
	case c.RevivalEvents%turnEvents != 0 || c.RevivalEvents <= recentEvents:
		return c, fmt.Errorf("--revival-events must be a multiple of %d above %d", turnEvents, recentEvents)
	case c.RevivalSamples < 1 || c.ReplaySamples < 1:
		return c, fmt.Errorf("--revival-samples and --replay-samples must be at least 1")
	case c.Rate < 0:
		return c, fmt.Errorf("--rate must not be negative")
	case c.OpenLoop && c.Rate > 0:
		return c, fmt.Errorf("--open-loop sets the rates itself: leave --rate out")
	case c.Single && c.Postgres != "":
		return c, fmt.Errorf("--single measures the embedded Pebble store against naive Pebble: leave --postgres out")
	case c.Single && (c.SingleRounds < 1 || c.SingleRound <= 0):
		return c, fmt.Errorf("--single-rounds and --single-round must be positive")
	case c.Trace != "" && (c.TraceFrom < 0 || c.TraceFrom >= c.Duration):
		return c, fmt.Errorf("--trace-from must be within [0, --duration): the trace window starts in the runtime phase")
	case c.GoMaxProcs < 0:
		return c, fmt.Errorf("--gomaxprocs must not be negative")
	}
	c.OnPostgres = c.Postgres != ""
	if stderr == nil {
		stderr = os.Stderr
	}
	c.stderr = stderr
	c.logger = slog.New(slog.DiscardHandler)
	if c.Verbose {
		c.logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	return c, nil
}

// report is the whole output of a run.
type report struct {
	Date      string         `json:"date"`
	Machine   machine        `json:"machine"`
	Config    config         `json:"config"`
	Runtime   runResult      `json:"runtime"`
	RawPebble *rawResult     `json:"baseline_a_raw_pebble,omitempty"`
	SeedPG    *rawResult     `json:"baseline_a_seed_postgres,omitempty"`
	Revival   *revivalResult `json:"baseline_b_revival,omitempty"`
	OpenLoop  []openLoopRun  `json:"open_loop,omitempty"`
	Single    *singleResult  `json:"single,omitempty"`
	Ratios    ratios         `json:"ratios"`
	Targets   []target       `json:"targets"`
	// Interrupted names the phase in progress when the run was
	// interrupted: its figures, if any, are what it measured until then
	// (a single-conversation phase's finished rounds, baseline (b)'s
	// samples taken), and the later phases were skipped. Empty for a
	// whole run.
	Interrupted string `json:"interrupted,omitempty"`
}

type machine struct {
	CPUs       int    `json:"cpus"`
	GoMaxProcs int    `json:"gomaxprocs"`
	GoVersion  string `json:"go"`
	OS         string `json:"os"`
}

func main() {
	os.Exit(mainCode(os.Args[1:]))
}

// mainCode is loadgen's process: cli on the process's output, interrupted
// by SIGINT, SIGTERM or SIGHUP. SIGPIPE is caught, so that a write to a
// closed stdout or stderr fails with EPIPE, which stops the run (see cli),
// instead of killing the process before it removes its temporary directory.
func mainCode(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	pipe := make(chan os.Signal, 1)
	signal.Notify(pipe, syscall.SIGPIPE)
	defer signal.Stop(pipe)
	return cli(ctx, args, os.Stdout, os.Stderr)
}

// cli runs loadgen with args and returns its exit status: 0 (also for -h),
// 1 when a phase failed, 2 for bad flags, a --dir it cannot use or a
// profile or trace file it cannot create, 130 when ctx ended (SIGINT,
// SIGTERM, SIGHUP) before the run did: the phase in progress stops, the
// later ones are skipped, and the report covers what was measured; 141 when a write to stdout or stderr found it closed
// (EPIPE), which stops the run as ctx's end does. Everything the run says
// goes to stderr, never to os.Stderr directly.
func cli(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stdout = &outWriter{w: stdout, closed: func() { cancel(errStdoutClosed) }}
	stderr = &outWriter{w: stderr, closed: func() { cancel(errStderrClosed) }}
	cfg, err := parseFlags(args, stderr)
	if err == nil {
		err = checkDir(cfg.Dir)
	}
	if err == nil {
		err = checkOutputs(cfg)
	}
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		fmt.Fprintln(stderr, "loadgen:", err)
		fmt.Fprintln(stderr, "usage: loadgen [flags]\nRun 'loadgen -h' for the flags.")
		return exitUsage
	}
	rep, err := run(ctx, cfg)
	if err == nil {
		if cfg.JSON {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			err = enc.Encode(rep)
		} else {
			printReport(stdout, rep)
		}
	}
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, errStdoutClosed), errors.Is(cause, errStderrClosed):
		fmt.Fprintln(stderr, "loadgen:", cause)
		return exitPipe
	case err != nil:
		fmt.Fprintln(stderr, "loadgen:", err)
		return exitFailed
	case ctx.Err() != nil:
		fmt.Fprintln(stderr, "loadgen: interrupted: the report covers what was measured until then")
		return exitSignal
	}
	return exitOK
}

// phaseDirs are the directories a run makes under --dir, one per store.
func phaseDirs() []string {
	dirs := []string{"runtime", "raw", "revival", "single"}
	for i := range openLoopFractions {
		dirs = append(dirs, fmt.Sprintf("open-%d", i), fmt.Sprintf("open-naive-%d", i))
	}
	return dirs
}

// checkDir checks that a --dir can be used: created if missing, and holding
// none of the stores a run makes (an earlier run's would be reopened, and
// their conversations collide with the new ones).
func checkDir(dir string) error {
	if dir == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("--dir %s cannot be used: %w", dir, err)
	}
	for _, d := range phaseDirs() {
		if _, err := os.Lstat(filepath.Join(dir, d)); err == nil {
			return fmt.Errorf("--dir %s holds an earlier run's %s: give a new directory, or one without the stores of a run", dir, d)
		}
	}
	return nil
}

// checkOutputs checks that the files --cpuprofile, --memprofile and --trace
// name can be created (or, existing, written), before anything runs. It
// leaves nothing behind: a file it had to create is removed again, one
// that existed is not truncated (the run writes it later).
func checkOutputs(cfg config) error {
	for _, o := range []struct{ flag, path string }{{"--cpuprofile", cfg.CPUProfile}, {"--memprofile", cfg.MemProfile}, {"--trace", cfg.Trace}} {
		if o.path == "" {
			continue
		}
		_, statErr := os.Lstat(o.path)
		f, err := os.OpenFile(o.path, os.O_WRONLY|os.O_CREATE, 0o644)
		if err != nil {
			return fmt.Errorf("%s %s cannot be created: %w", o.flag, o.path, err)
		}
		_ = f.Close()
		if errors.Is(statErr, fs.ErrNotExist) {
			_ = os.Remove(o.path)
		}
	}
	return nil
}

func run(ctx context.Context, cfg config) (*report, error) {
	dir := cfg.Dir
	if dir == "" {
		tmp, err := os.MkdirTemp("", "lazarus-loadgen-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	stderr := cfg.errOut()
	logf := func(format string, args ...any) { fmt.Fprintf(stderr, "loadgen: "+format+"\n", args...) }
	// measured frees a phase's store once its figures are taken: in the
	// temporary directory only, a --dir keeps them all.
	measured := func(phase string) {
		if cfg.Dir == "" {
			if err := removeStore(dir, phase); err != nil {
				logf("%v", err)
			}
		}
	}
	if cfg.GoMaxProcs > 0 {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(cfg.GoMaxProcs))
	}
	rep := &report{
		Date: time.Now().UTC().Format(time.DateOnly),
		Machine: machine{CPUs: runtime.NumCPU(), GoMaxProcs: runtime.GOMAXPROCS(0),
			GoVersion: runtime.Version(), OS: runtime.GOOS + "/" + runtime.GOARCH},
		Config: cfg,
	}

	// On PostgreSQL the phase's directory only names its schema.
	where := "in " + dir
	if cfg.Postgres != "" {
		where = pgWhere(cfg.Postgres, "runtime")
	}
	// phase is the phase in progress; interrupted, called after each
	// phase, marks the report with it if the run was interrupted then.
	phase := "runtime"
	interrupted := func() {
		if ctx.Err() != nil && rep.Interrupted == "" {
			rep.Interrupted = phase
		}
	}
	logf("runtime phase: %d conversations for %v %s", cfg.Conversations, cfg.Duration, where)
	var cpuProfile *os.File
	if cfg.CPUProfile != "" {
		f, err := os.Create(cfg.CPUProfile)
		if err != nil {
			return nil, fmt.Errorf("--cpuprofile: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			_ = f.Close()
			return nil, fmt.Errorf("--cpuprofile: %w", err)
		}
		cpuProfile = f
	}
	if cfg.MemProfile != "" {
		runtime.MemProfileRate = 64 << 10 // enough samples for the run, at little cost
	}
	res, err := runRuntime(ctx, cfg, filepath.Join(dir, "runtime"))
	if cpuProfile != nil {
		pprof.StopCPUProfile()
		if cerr := cpuProfile.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("--cpuprofile: %w", cerr)
		}
	}
	if cfg.MemProfile != "" {
		if perr := writeHeapProfile(cfg.MemProfile); perr != nil && err == nil {
			err = perr
		}
	}
	if err != nil {
		return nil, fmt.Errorf("runtime phase: %w", err)
	}
	measured("runtime")
	rep.Runtime = res
	interrupted()
	if cfg.OpenLoop && ctx.Err() == nil {
		if res.EventsPerSec <= 0 {
			return nil, fmt.Errorf("open loop: the closed loop measured no events to take shares of")
		}
		for i, f := range openLoopFractions {
			if ctx.Err() != nil {
				break // interrupted: the later phases are skipped
			}
			c := cfg
			c.Rate = f * res.EventsPerSec
			phase = fmt.Sprintf("open loop at %.0f%%", 100*f)
			logf("open loop: %.0f events/s offered (%.0f%% of %.0f) for %v", c.Rate, 100*f, res.EventsPerSec, cfg.Duration)
			r, err := runRuntime(ctx, c, filepath.Join(dir, fmt.Sprintf("open-%d", i)))
			if err != nil {
				if ctx.Err() != nil {
					interrupted()
					break // interrupted: the report covers the phases before
				}
				return nil, fmt.Errorf("open loop at %.0f%%: %w", 100*f, err)
			}
			measured(fmt.Sprintf("open-%d", i))
			o := openLoopRun{Fraction: f, Offered: c.Rate, Result: r}
			if cfg.Postgres == "" && ctx.Err() == nil {
				phase = fmt.Sprintf("open loop at %.0f%%, naive synced Sets", 100*f)
				logf("open loop, naive synced Sets: %.0f events/s offered for %v", c.Rate, cfg.Duration)
				raw, err := runRawPebbleOpen(ctx, cfg, filepath.Join(dir, fmt.Sprintf("open-naive-%d", i)), c.Rate)
				if err != nil {
					if ctx.Err() != nil {
						// Interrupted: the open loop's runtime figures, without the Sets'.
						rep.OpenLoop = append(rep.OpenLoop, o)
						interrupted()
						break
					}
					return nil, fmt.Errorf("open loop at %.0f%%, naive Sets: %w", 100*f, err)
				}
				measured(fmt.Sprintf("open-naive-%d", i))
				o.Naive = &raw
			}
			rep.OpenLoop = append(rep.OpenLoop, o)
			interrupted()
		}
	}
	if cfg.Single && ctx.Err() == nil {
		phase = "single conversation"
		logf("single conversation: %d rounds of %v each side, then the runtime with one conversation for %v", cfg.SingleRounds, cfg.SingleRound, cfg.Duration)
		sr, err := runSingle(ctx, cfg, filepath.Join(dir, "single"))
		switch {
		case err == nil:
			measured("single")
			rep.Single = &sr
		case ctx.Err() == nil:
			return nil, fmt.Errorf("single conversation: %w", err)
		case len(sr.Rounds) > 0:
			rep.Single = &sr // interrupted: the rounds it finished
		}
		interrupted()
	}
	if cfg.Baseline && ctx.Err() == nil {
		phase = "baseline (a)"
		if cfg.Postgres != "" {
			logf("baseline (a): %d writers, one PostgreSQL transaction per event (the seed's design), for %v", cfg.Conversations, cfg.Duration)
			raw, err := runSeedPostgres(ctx, cfg)
			switch {
			case err == nil:
				rep.SeedPG = &raw
			case ctx.Err() == nil:
				return nil, fmt.Errorf("baseline (a): %w", err)
			}
		} else {
			logf("baseline (a): %d writers, one synced Pebble Set per event, for %v", cfg.Conversations, cfg.Duration)
			raw, err := runRawPebble(ctx, cfg, filepath.Join(dir, "raw"))
			switch {
			case err == nil:
				measured("raw")
				rep.RawPebble = &raw
			case ctx.Err() == nil:
				return nil, fmt.Errorf("baseline (a): %w", err)
			}
		}
		interrupted()
	}
	if cfg.Baseline && ctx.Err() == nil {
		phase = "baseline (b)"
		logf("baseline (b): revival of a %d-event conversation, %d samples", cfg.RevivalEvents, cfg.RevivalSamples)
		rev, err := runRevival(ctx, cfg, filepath.Join(dir, "revival"))
		switch {
		case err == nil:
			measured("revival")
			rep.Revival = &rev
		case ctx.Err() == nil:
			return nil, fmt.Errorf("baseline (b): %w", err)
		case rev.LongRevival.Count > 0:
			rep.Revival = &rev // interrupted: the samples it took
		}
		interrupted()
	}
	rep.Ratios, rep.Targets = evaluate(rep)
	return rep, nil
}

// removeStore removes the store of phase (a directory under dir, closed,
// its figures taken) and syncs dir, so that the filesystem does the
// deletion's work (freeing the blocks, and discarding them on a disk
// mounted with online discard) before the next phase, not in it. Only for
// the temporary directory: a --dir keeps its stores.
func removeStore(dir, phase string) error {
	if err := os.RemoveAll(filepath.Join(dir, phase)); err != nil {
		return fmt.Errorf("remove the %s store (tried again at the end of the run): %w", phase, err)
	}
	d, err := os.Open(dir)
	if err == nil {
		err = d.Sync()
		if cerr := d.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return fmt.Errorf("sync %s after removing the %s store: %w", dir, phase, err)
	}
	return nil
}

// writeHeapProfile writes the allocation profile (every allocation since
// the start, in the "alloc_space" and "alloc_objects" views) to path.
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
