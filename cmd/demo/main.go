// Command demo is the Lazarus kill-and-revive demo: the first thing to run.
//
//	go run ./cmd/demo            # narrated, about a minute
//	go run ./cmd/demo --fast     # the same story in a few seconds (CI)
//	go run ./cmd/demo --json     # a machine-readable transcript, one JSON object per line
//
// A scripted support agent (no network, no API key) lives on the embedded
// Pebble store in a directory the demo names. In five acts it is killed and
// revived: while it waits on a human, when nobody answers before a deadline,
// and with the whole process killed by SIGKILL in the middle of a payment;
// in a sixth, a rewind puts back the files its tool changed. Every event is printed as it is appended, every claim is checked,
// and the demo exits 0 only if every check held.
//
// Flags:
//
//	--dir DIR   the store's directory (created if missing, never removed;
//	            it must be new or empty, and is refused while another
//	            demo starts in it). Default: a new temporary
//	            directory, removed at the end unless --keep or a failure
//	            (kept for inspection).
//	--keep      keep the temporary directory
//	--fast      no pauses for the reader, short deadlines: a few seconds
//	            (scripted demo only: with a real model it is a bad flag)
//	--quiet     no narration (with --json: no "step" records), no pauses;
//	            the text output is one line, or the reason of a failure
//	--json      the transcript as JSON lines on stdout, no pauses
//	--verbose   the runtime's debug logs on stderr
//	--model M   scripted (default), openai or anthropic: with a real model,
//	            a shorter live demo (a kill mid-stream, a restart) configured
//	            from the environment: OPENAI_BASE_URL, OPENAI_API_KEY,
//	            OPENAI_MODEL, or ANTHROPIC_BASE_URL, ANTHROPIC_API_KEY,
//	            ANTHROPIC_MODEL
//
// -h or --help anywhere before a "--" prints the flags, status 0, whatever
// else the command line holds: also after an unknown flag, and where a
// flag's value is expected (--dir --help is not a directory "--help"); a
// value that reads as a help flag is given with "=" (--dir=-h).
//
// The live demo follows --dir, --keep, --quiet, --json and --verbose as the
// scripted demo does; its --json records are of the same kinds, less
// tool_run and revival (it runs no tool, and times no revival: the revived
// turn's first event waits on the model). It has no pauses, and its pace
// is the model's, so --fast is refused (status 2).
//
// Exit status: 0 when every check held; 1 when a check did not hold or the
// demo could not run; 2 for bad flags (an unknown --model, or --fast with a
// real one, too) or a --dir the demo cannot use (not empty, in use by
// another demo, not a directory it can create and write in); 130 when
// interrupted by SIGINT, SIGTERM or SIGHUP, after "demo: interrupted" on
// stderr; 141 (as a shell says of a process SIGPIPE killed) when stdout or
// stderr was closed by its reader before the end, as by `demo | head`,
// `demo 2>&1 | head` or `demo --verbose 2>&1 >out | head`: the demo stops
// at the first write that finds it closed, and says "demo: stdout closed"
// on stderr if stderr is still open (a closed stderr is noticed only when the demo writes to it:
// --verbose, a warning, act 5's child's stderr). Interrupted or cut off,
// the demo stops and removes its temporary directory (not a --dir, nor one
// --keep keeps). go run reports every non-zero status as its own status 1;
// make demo builds the demo and runs it, so that make's "Error N" is the
// demo's status.
//
// Act 5 re-executes the demo's own binary with a hidden --child flag, as the
// process that is killed.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	_ "time/tzdata" // cron time zones load on a machine without zoneinfo (ScheduleSpec.TimeZone)

	"github.com/lazarusrt/lazarus/internal/cliflag"
)

// Exit codes.
const (
	exitOK     = 0
	exitFailed = 1   // a check did not hold, or the demo could not run
	exitUsage  = 2   // bad flags, or a --dir the demo cannot start in
	exitSignal = 130 // interrupted (SIGINT, SIGTERM or SIGHUP)
	exitPipe   = 141 // stdout or stderr closed (EPIPE): 128 + SIGPIPE, as a shell says of a process SIGPIPE killed
)

// errStdoutClosed and errStderrClosed are the causes of the end of a run
// whose stdout or stderr was closed by its reader.
var (
	errStdoutClosed = errors.New("stdout closed")
	errStderrClosed = errors.New("stderr closed")
)

// pipeWriter is stdout or stderr as the demo writes it: a write that finds
// the pipe closed by its reader (EPIPE) stops the run, through closed.
type pipeWriter struct {
	w      io.Writer
	closed func()
}

// Write implements io.Writer.
func (p *pipeWriter) Write(b []byte) (int, error) {
	n, err := p.w.Write(b)
	if errors.Is(err, syscall.EPIPE) {
		p.closed()
	}
	return n, err
}

// usageError is an error the user cures by changing the command line.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func main() {
	os.Exit(mainCode(os.Args[1:]))
}

// mainCode is the demo's process: cli on the process's output, interrupted
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

// config is what the flags say.
type config struct {
	dir     string
	keep    bool
	fast    bool
	quiet   bool
	json    bool
	verbose bool
	child   bool // hidden: run as act 5's child process
	model   string
}

// cli parses args, runs the demo (or its child) and returns the exit code.
// A write to stdout or stderr that fails with EPIPE ends ctx, as a signal
// does; act 5's child writes its stderr through ours.
func cli(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stdout = &pipeWriter{w: stdout, closed: func() { cancel(errStdoutClosed) }}
	stderr = &pipeWriter{w: stderr, closed: func() { cancel(errStderrClosed) }}
	cfg, err := parseFlags(args, stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case err != nil:
		return exitUsage
	}
	if cfg.child {
		if err := runChild(ctx, cfg, stdout, stderr); err != nil {
			fmt.Fprintf(stderr, "demo child: %v\n", err)
			return exitFailed
		}
		return exitOK
	}
	if cfg.model != "scripted" {
		err = runLive(ctx, cfg, stdout, stderr)
	} else {
		err = run(ctx, cfg, stdout, stderr)
	}
	switch {
	case errors.As(err, new(usageError)):
		fmt.Fprintf(stderr, "demo: %v\n", err)
		return exitUsage
	case errors.Is(context.Cause(ctx), errStdoutClosed), errors.Is(context.Cause(ctx), errStderrClosed):
		fmt.Fprintln(stderr, "demo:", context.Cause(ctx))
		return exitPipe
	case err != nil && ctx.Err() != nil:
		fmt.Fprintln(stderr, "demo: interrupted")
		return exitSignal
	case err != nil:
		fmt.Fprintf(stderr, "demo: FAILED: %v\n", err)
		return exitFailed
	}
	return exitOK
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var cfg config
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.dir, "dir", "", "`directory` of the Pebble store (kept; must be new or empty). Default: a new temporary directory, removed at the end")
	fs.BoolVar(&cfg.keep, "keep", false, "keep the temporary directory at the end")
	fs.BoolVar(&cfg.fast, "fast", false, "no pauses for the reader and short deadlines: the whole run takes a few seconds (scripted model only)")
	fs.BoolVar(&cfg.quiet, "quiet", false, "no narration and no pauses: one line of summary, or the reason of a failure")
	fs.BoolVar(&cfg.json, "json", false, "write the transcript as JSON lines (act, step, event, tool_run, check, revival, summary, result), without pauses")
	fs.BoolVar(&cfg.verbose, "verbose", false, "write the runtime's debug logs to stderr")
	fs.StringVar(&cfg.model, "model", "scripted", "`model`: scripted, or a real one read from the environment: openai (OPENAI_BASE_URL, OPENAI_API_KEY, OPENAI_MODEL) or anthropic (ANTHROPIC_*)")
	fs.BoolVar(&cfg.child, childFlag, false, "internal: run as the child process of act 5")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: demo [flags]\n\nThe Lazarus kill-and-revive demo: a scripted agent is killed and revived\non the embedded Pebble store, and every step is checked.\n\nFlags:\n")
		fs.VisitAll(func(f *flag.Flag) {
			if f.Name == childFlag {
				return
			}
			name, usage := flag.UnquoteUsage(f)
			if name != "" {
				name = " " + name
			}
			fmt.Fprintf(fs.Output(), "  --%s%s\n    \t%s\n", f.Name, name, usage)
		})
		fmt.Fprint(fs.Output(), "\nExit status: 0 every check held; 1 a check failed or the demo could not run;\n2 bad flags or a --dir the demo cannot use; 130 interrupted (SIGINT, SIGTERM,\nSIGHUP); 141 stdout or stderr closed before the end (as by demo | head).\n")
	}
	if cliflag.AsksHelp(args) {
		fs.Usage()
		return cfg, flag.ErrHelp
	}
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "demo: unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return cfg, errors.New("demo: unexpected arguments")
	}
	switch cfg.model {
	case "scripted", "openai", "anthropic":
	default:
		fmt.Fprintf(stderr, "demo: unknown --model %q (scripted, openai or anthropic)\n", cfg.model)
		return cfg, errors.New("demo: unknown --model")
	}
	if cfg.fast && cfg.model != "scripted" {
		fmt.Fprintf(stderr, "demo: --fast is for the scripted demo: the live demo (--model %s) has no pauses, and its pace is the model's\n", cfg.model)
		return cfg, errors.New("demo: --fast with a live model")
	}
	if cfg.child && cfg.dir == "" {
		fmt.Fprintln(stderr, "demo: --child needs --dir")
		return cfg, errors.New("demo: --child needs --dir")
	}
	return cfg, nil
}
