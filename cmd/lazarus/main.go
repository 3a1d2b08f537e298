// Command lazarus is the operator's tool for a Lazarus store: it lists
// conversations, prints and follows their logs, answers or inspects pending
// human tool calls, exports and imports conversations, deletes them, trims
// the model-call audit, reports store statistics and checks a store for
// damage.
//
// 'lazarus serve' runs a node: a runtime on a store, served over HTTP by
// package server (serve.go). With --server URL (or $LAZARUS_SERVER) and a
// bearer token (--token, $LAZARUS_TOKEN; either flag given before and after
// the command with two different values is a usage error), conversations, show, tail,
// pending, resolve, schedules, delete and stats work on such a live node through its
// API instead of a store, with the same output and exit statuses, and send
// sends a message (remote.go). They read every page of the node's
// listings; a node answering a page with a next cursor it gave before in
// the listing (or, for the schedules, ordered by id, one not after the
// page's own) fails the command with status 1 rather than paging for
// ever. So does, offline, a store whose listing of every conversation
// (stats, gc-audit, export --all) or of every pending call (pending)
// answers a page with a next cursor not after the page's own.
//
// Usage:
//
//	lazarus [--dir DIR | --postgres DSN | --server URL] COMMAND [flags] [args]
//	lazarus COMMAND --help
//
// COMMAND --help (or -h, or help COMMAND) prints the command's help on
// stdout with status 0, whatever flags come before or after it, even a
// top-level one the command refuses otherwise (--dir before send, say),
// one it does not define (send --nope --help) or one lazarus does not
// define (--nope send --help); after "--" it is an argument. --help with
// no command (lazarus --nope --help) prints the main help, status 0. A
// help flag where a flag's value is expected (send --to --help, --dir -h
// conversations) asks for the help too, rather than being that value: a
// value that reads as one is given with "=" (send --request-id=-h).
//
// The store is the embedded Pebble directory named by --dir, or the
// PostgreSQL database named by --postgres DSN (either on the command line,
// before or after the command; both is a usage error, and so is the same
// flag given before and after it with two different directories or DSNs, a
// relative and an absolute path to one directory being one); without either, the
// database named by the environment variable LAZARUS_POSTGRES, else the
// directory named by LAZARUS_DIR ($LAZARUS_POSTGRES wins over
// $LAZARUS_DIR, not over --dir). check works on a Pebble directory only:
// it has no --postgres and ignores $LAZARUS_POSTGRES. The commands are
// written against journal.Store; the adapters (pebblejournal, pgjournal)
// are wired in one place (store.go), so another adapter can be plugged in
// without touching them.
//
// # One process per directory
//
// Pebble locks its directory, even for reading: while a Lazarus runtime (or
// another lazarus command) has it open, every command fails at once with
// exit status 4 and a message saying so; nothing is read or written. Stop
// the runtime first, or work inside its process (Runtime.Store,
// Runtime.History, Runtime.Subscribe). Conversely, a command holds the
// directory while it runs, and a runtime opened at that moment fails with
// the same "directory is locked" error. tail follows a log by polling:
// it opens the directory only for each poll, and stops (status 4) when the
// directory stays held for its --grace (see tail.go).
//
// # Export format
//
// export writes JSON lines, one record per line with a "type" tag (the
// conversation row, metadata, events in ascending seq, summaries, tool call
// rows, deadlines) and end lines that make a cut detectable, each record in
// protojson; import reads the same format, validates all of it before
// writing anything, and never overwrites. Both stream. The
// format and the import rules are documented in format.go and in
// 'lazarus export --help'.
//
// # Exit status
//
//	0  success
//	1  failure (the message on stderr says why), a failed write to stdout included
//	2  usage error (unknown command or flag, missing argument, a malformed flag value such as a
//	   --server URL or a --postgres DSN that does not parse, delete without --yes)
//	3  stale: resolve came too late (the call is unknown, already answered or expired)
//	4  busy: another process holds the directory
//	5  not found: no such conversation, or no store in the directory
//	6  damaged: check found damage, or the store's files are too damaged to open
//	7  forced: a second SIGTERM or SIGINT ended the command at once (serve during its graceful stop)
//	8  interrupted: a first SIGTERM or SIGINT stopped the command before it finished
//
// # Interrupts
//
// A first SIGTERM or SIGINT ends tail cleanly (status 0) and stops serve
// gracefully (status 0). Any other command still running stops at its
// next read or write of the store (export within one page of events,
// import at its next line, check at its next record, gc-audit at its next
// conversation) with status 8 and a message saying it was interrupted:
// nothing half-written, as for any failure. An export to stdout then
// lacks its trailer (import refuses it) and an export to --file leaves no
// file; an import names the conversations it imported completely and the
// one left incomplete (ENDED), as when a write fails; gc-audit says how
// many rows it had deleted. A second signal, in any command, exits at once
// with status 7 and a line on stderr, as a killed process would: an
// export to --file may leave its temporary file (.PATH.tmp-*), an import
// may leave one conversation incomplete (ENDED) without naming it.
//
// Output meant for people goes to stdout, one line per item; --json gives a
// single JSON document instead on the list-like commands (conversations,
// show, pending, stats), send and check; tail --json prints JSON lines.
// Errors go to stderr.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	_ "time/tzdata" // cron time zones load on a machine without zoneinfo (ScheduleSpec.TimeZone)

	"github.com/lazarusrt/lazarus/internal/cliflag"
	"github.com/lazarusrt/lazarus/journal"
)

// Exit statuses; see the package documentation.
const (
	exitOK       = 0
	exitError    = 1
	exitUsage    = 2
	exitStale    = 3
	exitBusy     = 4
	exitNotFound = 5
	exitDamaged  = 6
	// exitForced: a second SIGTERM or SIGINT ended the command at once
	// (serve: before its graceful stop did).
	exitForced = 7
	// exitInterrupted: a first SIGTERM or SIGINT stopped the command
	// before it finished (not tail or serve, which it ends cleanly).
	exitInterrupted = 8
)

// envDir is the environment variable that names the store directory when
// --dir is not given.
const envDir = "LAZARUS_DIR"

// envPostgres is the environment variable that names a PostgreSQL store
// (a DSN) when --postgres is not given.
const envPostgres = "LAZARUS_POSTGRES"

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run is the whole command: it parses args, runs one command and returns
// the exit status. An interrupt (SIGINT, SIGTERM) ends a running tail
// cleanly, stops serve gracefully, and stops any other command with
// exitInterrupted; a second one exits at once (runSignalled).
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sig)
	return newCLI(stdin, stdout, stderr).runSignalled(args, sig, os.Exit)
}

// runSignalled runs the command line args with a context that ends at the
// first signal from sig. A second one, before runSignalled returns, says
// so on stderr and calls exit(exitForced) at once from another goroutine
// (exit must not return: os.Exit), whatever the command: serve's graceful
// stop, or whatever another command does before it sees its context end,
// is not waited for.
func (c *cli) runSignalled(args []string, sig <-chan os.Signal, exit func(int)) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	returned := make(chan struct{})
	defer close(returned)
	go func() {
		select {
		case <-sig:
			cancel()
		case <-returned:
			return
		}
		for {
			select {
			case s := <-sig:
				name := "lazarus"
				if n := c.running.Load(); n != nil {
					name += " " + *n
				}
				fmt.Fprintf(c.lockedStderr(), "%s: %v again, exiting now without finishing the stop\n", name, s)
				exit(exitForced)
				return
			case <-returned:
				return
			}
		}
	}()
	return c.run(ctx, args)
}

// cli holds what every command needs: its streams, the environment, the
// clock and the way to open a store.
type cli struct {
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	getenv func(string) string
	now    func() time.Time
	// isTerminal reports whether a stream is a terminal (progress is shown
	// only there).
	isTerminal func(io.Writer) bool
	open       opener
	// dir is the --dir given before the command, if any.
	dir string
	// postgres is the --postgres given before the command, if any.
	postgres string
	// server and token are the --server and --token given before the
	// command, if any.
	server, token string
	// httpClient sends the requests of the --server mode. Default
	// http.DefaultClient.
	httpClient *http.Client
	// running is the name of the command once it is known, for the line
	// a second signal writes (runSignalled).
	running atomic.Pointer[string]
	// stderrMu serialises the writes of lockedStderr.
	stderrMu sync.Mutex
}

// lockedStderr is c.stderr for writers that run in goroutines of their
// own (serve's progress lines, its HTTP server's log, its stdio MCP
// servers' stderr): each Write is whole, never interleaved with another.
func (c *cli) lockedStderr() io.Writer { return lockedWriter{mu: &c.stderrMu, w: c.stderr} }

// writeErr is a writer that remembers its first failed write, for the
// commands that print line by line without checking each write.
type writeErr struct {
	mu  sync.Mutex
	w   io.Writer
	err error
}

func (e *writeErr) Write(p []byte) (int, error) {
	n, err := e.w.Write(p)
	if err != nil {
		e.mu.Lock()
		if e.err == nil {
			e.err = err
		}
		e.mu.Unlock()
	}
	return n, err
}

// failed is the first write error, if any.
func (e *writeErr) failed() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.err
}

// lockedWriter writes to w under mu.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func newCLI(stdin io.Reader, stdout, stderr io.Writer) *cli {
	return &cli{stdin: stdin, stdout: stdout, stderr: stderr, getenv: os.Getenv, now: time.Now, isTerminal: isTerminal, open: openPebble}
}

// command is one subcommand.
type command struct {
	name     string
	synopsis string // arguments and flags, after "lazarus NAME"
	summary  string // one line, for the command list
	help     string // paragraphs printed by --help, before the flags
	// remote: the command also works on a live node (--server).
	remote bool
	// noStore: the command works on a live node only (send): it has no
	// --dir nor --postgres, and refuses the top-level ones.
	noStore bool
	// dirOnly: the command works on a Pebble directory only (check): it
	// has no --postgres, refuses the top-level one and ignores
	// $LAZARUS_POSTGRES.
	dirOnly bool
	// aliases are other names the command answers to.
	aliases []string
	run     func(c *cli, ctx context.Context, fs *flags, args []string) error
}

// commands lists every subcommand, in the order of the help text.
var commands = []*command{
	serveCmd, sendCmd, conversationsCmd, showCmd, tailCmd, pendingCmd, resolveCmd, rescheduleCmd, schedulesCmd,
	exportCmd, importCmd, deleteCmd, gcAuditCmd, statsCmd, checkCmd,
}

func lookup(name string) *command {
	for _, cmd := range commands {
		if cmd.name == name || slices.Contains(cmd.aliases, name) {
			return cmd
		}
	}
	return nil
}

// errHelp ends a command that printed its help: exit status 0.
var errHelp = errors.New("help requested")

// usageError is a mistake in the command line: exit status 2. err, if
// set, is the sentinel it wraps (journal.ErrInvalid for a malformed value).
type usageError struct {
	msg string
	err error
}

func (e *usageError) Error() string { return e.msg }

func (e *usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

func (c *cli) run(ctx context.Context, args []string) int {
	top := flag.NewFlagSet("lazarus", flag.ContinueOnError)
	top.SetOutput(io.Discard)
	top.StringVar(&c.dir, "dir", "", "")
	top.StringVar(&c.postgres, "postgres", "", "")
	top.StringVar(&c.server, "server", "", "")
	top.StringVar(&c.token, "token", "", "")
	help := top.Bool("help", false, "")
	top.BoolVar(help, "h", false, "")
	var rest []string
	if err := top.Parse(args); err != nil {
		// The flag package stops at the first bad flag, before the
		// command and its --help: a help asked for after it is still
		// given, as parse gives it after a bad flag of the command's.
		name, asked := topHelp(args)
		switch {
		case errors.Is(err, flag.ErrHelp), asked && name == "":
			c.mainUsage(c.stdout)
			return exitOK
		case !asked:
			fmt.Fprintf(c.stderr, "lazarus: %v\n\n", err)
			c.mainUsage(c.stderr)
			return exitUsage
		}
		rest = []string{"help", name}
	} else {
		rest = top.Args()
		// A help flag the flag package took as a top-level flag's value
		// (--dir --help COMMAND) asks for the main help, as one with no
		// command before it does.
		*help = *help || cliflag.AsksHelp(args[:len(args)-len(rest)])
	}
	if *help || len(rest) == 0 {
		if *help {
			c.mainUsage(c.stdout)
			return exitOK
		}
		c.mainUsage(c.stderr)
		return exitUsage
	}
	name, rest := rest[0], rest[1:]
	if name == "help" {
		if len(rest) == 0 {
			c.mainUsage(c.stdout)
			return exitOK
		}
		name, rest = rest[0], []string{"--help"}
	}
	cmd := lookup(name)
	if cmd == nil {
		fmt.Fprintf(c.stderr, "lazarus: unknown command %q\n\n", name)
		c.mainUsage(c.stderr)
		return exitUsage
	}
	c.running.Store(&cmd.name)
	// A command that printed everything it meant to but whose stdout
	// refused some of it (a full disk, a closed file) has not succeeded:
	// what it wrote is cut, and a script must not take it whole.
	out := &writeErr{w: c.stdout}
	c.stdout = out
	// A top-level flag the command does not take is refused by the
	// command's parse, so that its --help still prints its help.
	fs := c.newFlags(cmd)
	switch {
	case (c.server != "" || c.token != "") && !cmd.remote:
		fs.refused = usagef("--server and --token are for the commands that work on a live node, not %s", cmd.name)
	case (c.dir != "" || c.postgres != "") && cmd.noStore:
		fs.refused = usagef("--dir and --postgres name a store, and %s works on a live node only (--server)", cmd.name)
	case c.postgres != "" && cmd.dirOnly:
		fs.refused = usagef("--postgres is not for %s, which works on a Pebble directory only (--dir)", cmd.name)
	}
	err := cmd.run(c, ctx, fs, rest)
	if werr := out.failed(); err == nil && werr != nil {
		err = fmt.Errorf("write stdout: %w", werr)
	}
	code := exitCode(err)
	switch {
	case err == nil || errors.Is(err, errHelp):
	case code == exitInterrupted:
		fmt.Fprintf(c.stderr, "lazarus %s: interrupted, stopped before finishing: %v\n", cmd.name, err)
	case code == exitUsage:
		fmt.Fprintf(c.stderr, "lazarus %s: %v\n", cmd.name, err)
		fmt.Fprintf(c.stderr, "usage: lazarus %s %s\nRun 'lazarus %s --help' for details.\n", cmd.name, cmd.synopsis, cmd.name)
	default:
		fmt.Fprintf(c.stderr, "lazarus %s: %v\n", cmd.name, err)
	}
	return code
}

// exitCode maps a command's error to the exit status.
func exitCode(err error) int {
	var ue *usageError
	switch {
	case err == nil || errors.Is(err, errHelp):
		return exitOK
	case errors.As(err, &ue):
		return exitUsage
	case errors.Is(err, context.Canceled):
		// Only the first signal cancels a command's context.
		return exitInterrupted
	case errors.Is(err, errBusy):
		return exitBusy
	case errors.Is(err, errDamaged):
		return exitDamaged
	case errors.Is(err, journal.ErrStale):
		return exitStale
	case errors.Is(err, journal.ErrNotFound), errors.Is(err, errNoStore):
		return exitNotFound
	}
	return exitError
}

// noConversation reports whether err is a Store's row lookup finding no
// conversation: never written (ErrNotFound) or deleted (ErrDeleted).
func noConversation(err error) bool {
	return errors.Is(err, journal.ErrNotFound) || errors.Is(err, journal.ErrDeleted)
}

func (c *cli) mainUsage(w io.Writer) {
	fmt.Fprint(w, `lazarus is the operator's tool for a Lazarus store (an embedded Pebble directory).

Usage:
  lazarus [--dir DIR | --postgres DSN | --server URL] COMMAND [flags] [args]
  lazarus COMMAND --help

The directory comes from --dir (before or after the command, not two
different ones; a relative and an absolute path to one directory are one)
or $LAZARUS_DIR;
a PostgreSQL store from --postgres DSN or $LAZARUS_POSTGRES instead
($LAZARUS_POSTGRES, when set, wins over $LAZARUS_DIR, not over --dir).
Only one process may open it at a time: while a runtime holds it, every
command fails with exit status 4.

A live node ('lazarus serve') is reached with --server URL (or
$LAZARUS_SERVER) and a bearer token (--token or $LAZARUS_TOKEN; each flag
before or after the command, not with two different values):
conversations, show, tail, pending, resolve, schedules, delete, stats and
send then go through its HTTP API, as the token's user.

Commands:
`)
	width := 0
	for _, cmd := range commands {
		width = max(width, len(cmd.name))
	}
	for _, cmd := range commands {
		fmt.Fprintf(w, "  %-*s  %s\n", width, cmd.name, cmd.summary)
	}
	fmt.Fprint(w, `
Exit status: 0 success, 1 failure, 2 usage error, 3 stale (resolve too late),
4 directory held by another process, 5 conversation or store not found,
6 damaged (check found damage, or the store's files cannot be opened),
7 forced out by a second signal (SIGTERM, SIGINT), 8 stopped by a first one
before finishing (tail and serve end cleanly on it, status 0).
`)
}

// flags is the FlagSet of one command, with the flags every command has.
type flags struct {
	*flag.FlagSet
	cmd      *command
	dir      string
	postgres string
	json     *bool
	// server and token are set by withServer, for the commands that can
	// work on a live node.
	server, token *string
	// refused is the usage error of a top-level flag the command does not
	// take: parse returns it unless the command line asks for help.
	refused error
}

// newFlags returns the FlagSet of cmd with --help and, unless the command
// needs no store, --dir (default: the top-level --dir, then $LAZARUS_DIR)
// and --postgres.
func (c *cli) newFlags(cmd *command) *flags {
	fs := &flags{FlagSet: flag.NewFlagSet(cmd.name, flag.ContinueOnError), cmd: cmd}
	fs.SetOutput(io.Discard)
	if !cmd.noStore {
		fs.StringVar(&fs.dir, "dir", "", "the store `directory` (default $"+envDir+")")
	}
	if !cmd.noStore && !cmd.dirOnly {
		fs.StringVar(&fs.postgres, "postgres", "", "a PostgreSQL store: its `DSN` (default $"+envPostgres+"); instead of --dir")
	}
	return fs
}

// withJSON adds --json.
func (fs *flags) withJSON() *flags {
	fs.json = fs.Bool("json", false, "print one JSON document instead of text, for scripts")
	return fs
}

// parse parses args, flags and positional arguments in any order ("--"
// ends the flags), and checks the number of positional arguments is in
// [minArgs, maxArgs] (maxArgs < 0: no limit). --help (or -h) prints the
// command's help and returns errHelp, whatever else the command line
// holds (an unknown flag or a bad value before it included, or a flag
// expecting a value before it: --to --help is not --to "--help"); else a
// top-level flag the command does not take (fs.refused) is the error.
func (c *cli) parse(fs *flags, args []string, minArgs, maxArgs int) ([]string, error) {
	// Checked before the flag package reads args, which would take a help
	// flag after a flag expecting a value as that value, for every string
	// flag of every command.
	if cliflag.AsksHelp(args) {
		c.commandUsage(c.stdout, fs)
		return nil, errHelp
	}
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			// A help flag anywhere was answered above.
			if errors.Is(err, flag.ErrHelp) {
				c.commandUsage(c.stdout, fs)
				return nil, errHelp
			}
			if fs.refused != nil {
				return nil, fs.refused
			}
			return nil, &usageError{msg: err.Error()}
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			pos = append(pos, rest...)
			break
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
	if fs.refused != nil {
		return nil, fs.refused
	}
	if err := c.oneStore(fs); err != nil {
		return nil, err
	}
	if len(pos) < minArgs {
		return nil, usagef("missing argument")
	}
	if maxArgs >= 0 && len(pos) > maxArgs {
		return nil, usagef("unexpected argument %q", pos[maxArgs])
	}
	return pos, nil
}

// topHelp reads a top-level command line the flag package refused (it
// stops at an unknown flag or a bad value) for a help asked for after the
// bad flag, up to a "--": COMMAND followed by a help flag (cliflag.AsksHelp) or
// help COMMAND asks for the help of COMMAND, the first argument that names
// a command (or help) deciding; a help flag with no command before it, or
// a bare help, asks for the main help (name ""). asked is false when no
// help is asked for: the bad flag is the usage error.
func topHelp(args []string) (name string, asked bool) {
	for i, a := range args {
		switch {
		case a == "--":
			return "", false
		case a == "help":
			if i+1 < len(args) {
				return args[i+1], true
			}
			return "", true
		case lookup(a) != nil:
			return a, cliflag.AsksHelp(args[i+1:])
		case cliflag.AsksHelp([]string{a}):
			return "", true
		}
	}
	return "", false
}

// oneStore refuses a command line that names two different stores with
// the same flag, once before the command and once after it (--dir A show
// --dir B): the command would work on one of them silently. The same
// store named twice is no error, however it is spelled (data and
// $PWD/data are one directory: the absolute paths are compared). Likewise
// two different nodes (--server) or two different tokens (--token).
func (c *cli) oneStore(fs *flags) error {
	if fs.dir != "" && c.dir != "" && absDir(fs.dir) != absDir(c.dir) {
		return usagef("--dir given twice, %q and %q: name one store", c.dir, fs.dir)
	}
	if fs.postgres != "" && c.postgres != "" && fs.postgres != c.postgres {
		return usagef("--postgres given twice, with different DSNs: name one store")
	}
	// The same for the node and its token; neither is echoed (a URL may
	// hold a password, a token is one).
	if fs.server != nil && *fs.server != "" && c.server != "" && strings.TrimRight(*fs.server, "/") != strings.TrimRight(c.server, "/") {
		return usagef("--server given twice, with different URLs: name one node")
	}
	if fs.token != nil && *fs.token != "" && c.token != "" && *fs.token != c.token {
		return usagef("--token given twice, with different tokens: give one")
	}
	return nil
}

// absDir is dir as an absolute, clean path, for comparing two spellings
// of one directory; the clean path as given if the working directory
// cannot be read.
func absDir(dir string) string {
	if abs, err := filepath.Abs(dir); err == nil {
		return abs
	}
	return filepath.Clean(dir)
}

// postgresDSN returns the PostgreSQL store the command works on, if any:
// --postgres, else $LAZARUS_POSTGRES unless a --dir is given or the
// command works on a directory only; from names where it came from, for
// errors.
func (c *cli) postgresDSN(fs *flags) (dsn, from string) {
	switch {
	case fs.cmd.dirOnly:
		return "", ""
	case fs.postgres != "":
		return fs.postgres, "--postgres"
	case c.postgres != "":
		return c.postgres, "--postgres"
	case fs.dir == "" && c.dir == "":
		return c.getenv(envPostgres), "$" + envPostgres
	}
	return "", ""
}

// badDSN is the usage error of a DSN given by from (a flag, an
// environment variable) that does not parse (parseDSN's err): exit status
// 2, as for any malformed flag value, before anything is opened. It wraps
// journal.ErrInvalid.
func badDSN(from string, err error) error {
	return &usageError{msg: fmt.Sprintf("%s: not a PostgreSQL connection string: %v", from, err), err: journal.ErrInvalid}
}

// storeDir returns the directory the command works on.
func (c *cli) storeDir(fs *flags) (string, error) {
	dir := fs.dir
	if dir == "" {
		dir = c.dir
	}
	if dir == "" {
		dir = c.getenv(envDir)
	}
	if dir == "" {
		return "", usagef("no store directory: pass --dir DIR or set $%s", envDir)
	}
	return dir, nil
}

// openStore opens the command's store: existing ones only, unless create.
// The caller closes it. Files too damaged to open are errDamaged.
// With --postgres (or $LAZARUS_POSTGRES, unless --dir is given) it opens
// the PostgreSQL store, and the returned directory is "".
func (c *cli) openStore(fs *flags, create bool) (journal.Store, string, error) {
	if dsn, from := c.postgresDSN(fs); dsn != "" {
		if fs.dir != "" || c.dir != "" {
			return nil, "", usagef("--dir and --postgres both given")
		}
		if err := parseDSN(dsn); err != nil {
			return nil, "", badDSN(from, err)
		}
		st, err := openPostgres(dsn)
		return st, "", damagedOnOpen(err)
	}
	dir, err := c.storeDir(fs)
	if err != nil {
		return nil, "", err
	}
	st, err := c.open(dir, create)
	if err != nil {
		return nil, "", damagedOnOpen(err)
	}
	return st, dir, nil
}

// damagedOnOpen makes an open that failed on damaged files (ErrCorrupt)
// an error wrapping errDamaged: exit status 6, whatever the command.
func damagedOnOpen(err error) error {
	if errors.Is(err, journal.ErrCorrupt) {
		return fmt.Errorf("%w: it cannot be opened: %w", errDamaged, err)
	}
	return err
}

// closeStore closes st and reports a failure to close unless err is
// already set.
func closeStore(st journal.Store, err *error) {
	if cerr := st.Close(); cerr != nil && *err == nil {
		*err = fmt.Errorf("close store: %w", cerr)
	}
}

func (c *cli) commandUsage(w io.Writer, fs *flags) {
	cmd := fs.cmd
	fmt.Fprintf(w, "Usage: lazarus %s %s\n\n%s\n", cmd.name, cmd.synopsis, strings.TrimSpace(cmd.help))
	fmt.Fprint(w, "\nFlags:\n")
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if name != "" {
			line += " " + name
		}
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "0s" {
			usage += fmt.Sprintf(" (default %s)", f.DefValue)
		}
		fmt.Fprintf(w, "%s\n      %s\n", line, usage)
	})
	fmt.Fprint(w, "  --help\n      print this help\n")
}

// isSet reports whether the flag name was given on the command line.
func isSet(fs *flags, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == name {
			set = true
		}
	})
	return set
}
