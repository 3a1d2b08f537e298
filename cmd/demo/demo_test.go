package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/pebblejournal"
	"github.com/lazarusrt/lazarus/messages"
)

// TestMain lets this test binary stand in for the demo's binary: act 5
// re-executes os.Executable() with the child flag, which here is the test
// binary, so it must behave as the demo's child, signals included.
//
// With asMainEnv set, it is the demo's whole process (signals included), for
// the tests that run the demo as a child process.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "--"+childFlag {
		os.Exit(mainCode(os.Args[1:]))
	}
	if os.Getenv(asMainEnv) == "1" {
		os.Exit(mainCode(os.Args[1:]))
	}
	os.Exit(m.Run())
}

const asMainEnv = "LAZARUS_DEMO_TEST_AS_MAIN"

// syncBuffer is a bytes.Buffer safe for the concurrent writers of a run
// (the reporter, slog, the child's stderr copier).
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// runDemo runs the demo in this process with args and returns its exit
// code, stdout and stderr.
func runDemo(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var stdout, stderr syncBuffer
	code := cli(ctx, args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func transcript(t *testing.T, out string) []record {
	t.Helper()
	var recs []record
	for i, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		var r record
		require.NoError(t, json.Unmarshal([]byte(line), &r), "line %d is not JSON: %s", i+1, line)
		require.NotEmpty(t, r.Kind, "line %d has no kind: %s", i+1, line)
		recs = append(recs, r)
	}
	return recs
}

func ofKind(recs []record, kind string) []record {
	var out []record
	for _, r := range recs {
		if r.Kind == kind {
			out = append(out, r)
		}
	}
	return out
}

// TestDemo runs the six acts with --fast --json, act 5 killing a real
// child process with SIGKILL, and checks the transcript against itself and
// against the store the demo leaves behind.
func TestDemo(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	code, out, errs := runDemo(t, "--fast", "--json", "--dir", dir)
	require.Equal(t, exitOK, code, "stderr:\n%s\nstdout:\n%s", errs, out)
	assert.NotContains(t, errs, "DATA RACE", "the child process raced")
	recs := transcript(t, out)

	t.Run("every act ran and every check held", func(t *testing.T) {
		var acts []int
		for _, r := range ofKind(recs, "act") {
			acts = append(acts, r.Act)
		}
		require.Equal(t, []int{1, 2, 3, 4, 5, 6}, acts)
		perAct := map[int]int{}
		for _, c := range ofKind(recs, "check") {
			require.NotNil(t, c.OK)
			assert.True(t, *c.OK, "act %d: %s: %s", c.Act, c.Check, c.Detail)
			perAct[c.Act]++
		}
		for act := 1; act <= 6; act++ {
			assert.GreaterOrEqual(t, perAct[act], 2, "checks of act %d", act)
		}
		last := recs[len(recs)-1]
		require.Equal(t, "result", last.Kind)
		require.True(t, *last.OK, last.Reason)
		sums := ofKind(recs, "summary")
		require.Len(t, sums, 1)
		s := sums[0].Summary
		assert.Zero(t, s.Failed)
		assert.Equal(t, len(ofKind(recs, "check")), s.Checks)
		assert.Equal(t, 4, s.Conversations)
		assert.Equal(t, 37, s.Events)
		require.Len(t, s.Revivals, 3)
		for i, rv := range s.Revivals {
			assert.Equal(t, i+3, rv.Act)
			assert.Positive(t, rv.Millis, "revival of act %d was measured", rv.Act)
		}
	})

	t.Run("the transcript names who approved", func(t *testing.T) {
		// Dana approves in act 3: the log records her as the resolver, and
		// the transcript says so (not the coarse "user").
		var by []string
		for _, ev := range ofKind(recs, "event") {
			if ev.Act == 3 && ev.Event == "resolution" {
				by = append(by, ev.By)
			}
		}
		require.Equal(t, []string{"dana"}, by)
	})

	t.Run("the late approval is refused as stale", func(t *testing.T) {
		var stale *record
		for _, c := range ofKind(recs, "check") {
			if c.Act == 4 && strings.Contains(c.Check, "stale") {
				stale = &c
			}
		}
		require.NotNil(t, stale, "act 4 checks the late approval")
		assert.True(t, *stale.OK, stale.Detail)
		// The deadline fired while the agent was dead: the expiry actor
		// (the system) resolved it, and nothing came after the timeout.
		var signoff string
		for _, ev := range ofKind(recs, "event") {
			if ev.Act == 4 && ev.Event == "suspension" {
				signoff = ev.ToolCallID
			}
		}
		require.NotEmpty(t, signoff)
		var resolutions []record
		for _, ev := range ofKind(recs, "event") {
			if ev.Event == "resolution" && ev.ToolCallID == signoff {
				resolutions = append(resolutions, ev)
			}
		}
		require.Len(t, resolutions, 1, "one resolution of the signoff, the expiry")
		assert.Equal(t, "expired", resolutions[0].Status)
		assert.Equal(t, "system", resolutions[0].By)
	})

	t.Run("the charge is dispatched again with the same tool_call_id", func(t *testing.T) {
		var charges []record
		for _, r := range ofKind(recs, "tool_run") {
			if r.Tool == toolCharge {
				charges = append(charges, r)
			}
		}
		require.Len(t, charges, 2, "once in the killed child, once after the restart")
		assert.Equal(t, processChild, charges[0].Process)
		assert.Equal(t, processDemo, charges[1].Process)
		assert.NotEqual(t, charges[0].PID, charges[1].PID)
		assert.Equal(t, charges[0].ToolCallID, charges[1].ToolCallID)
		var decided string
		for _, ev := range ofKind(recs, "event") {
			if ev.Event == "tool_call" && ev.Tool == toolCharge {
				require.Empty(t, decided, "the model decided to charge once")
				decided = ev.ToolCallID
				assert.Equal(t, processChild, ev.Process, "the decision was made by the child")
			}
		}
		assert.Equal(t, decided, charges[0].ToolCallID)
		runs, err := readRuns(dir)
		require.NoError(t, err)
		var inFile []string
		for _, r := range runs {
			if r.Tool == toolCharge {
				inFile = append(inFile, r.ToolCallID)
			}
		}
		assert.Equal(t, []string{decided, decided}, inFile, "the side file agrees")
	})

	t.Run("every event the child acknowledged is on disk after the kill", func(t *testing.T) {
		store, err := pebblejournal.Open(dir, pebblejournal.Options{})
		require.NoError(t, err)
		defer func() { require.NoError(t, store.Close()) }()
		evs, err := store.Events(context.Background(), convCheckout, journal.EventQuery{})
		require.NoError(t, err)
		acked := 0
		for _, r := range ofKind(recs, "event") {
			if r.Process != processChild {
				continue
			}
			acked++
			require.Equal(t, convCheckout, r.Conversation)
			require.LessOrEqual(t, int(r.Seq), len(evs), "acknowledged #%d is on disk", r.Seq)
			got := eventRecord(convCheckout, evs[r.Seq-1])
			got.Act, got.Process = r.Act, r.Process
			assert.Equal(t, r, got, "acknowledged #%d", r.Seq)
		}
		assert.GreaterOrEqual(t, acked, 3, "the child acknowledged user_msg, assistant_msg and tool_call")
		require.Len(t, evs, 5)
		assert.Equal(t, "tool_result", eventRecord(convCheckout, evs[3]).Event)
	})

	t.Run("the signoff call is expired in the store", func(t *testing.T) {
		store, err := pebblejournal.Open(dir, pebblejournal.Options{})
		require.NoError(t, err)
		defer func() { require.NoError(t, store.Close()) }()
		pending, err := store.PendingToolCalls(context.Background(), convRefund)
		require.NoError(t, err)
		assert.Empty(t, pending)
		evs, err := store.Events(context.Background(), convRefund, journal.EventQuery{})
		require.NoError(t, err)
		var status messages.ToolCallStatus
		for _, ev := range evs {
			if r := ev.GetResolution(); r != nil {
				status = r.GetStatus()
			}
		}
		assert.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_EXPIRED, status)
	})
}

// TestDemoText runs the demo as README's "make demo ARGS=--fast" does (the
// text a person reads, without pauses): it names the embedded Pebble store,
// plays the six acts with each event as it becomes durable and each check
// ticked, kills the agent three times, and ends on its summary and verdict.
func TestDemoText(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	code, out, errs := runDemo(t, "--fast")
	require.Equal(t, exitOK, code, "stderr:\n%s\nstdout:\n%s", errs, out)
	assert.Empty(t, errs)
	assert.Contains(t, out, "A scripted support agent runs on the embedded Pebble store in\n    "+tmp)
	last := -1
	for act := 1; act <= 6; act++ {
		i := strings.Index(out, fmt.Sprintf("\nAct %d. ", act))
		require.Greater(t, i, last, "act %d comes after act %d:\n%s", act, act-1, out)
		last = i
	}
	assert.Regexp(t, `(?m)^    alice-refund   #1  user_msg `, out, "each durable event on its line")
	assert.Regexp(t, `(?m)^  ✓ `, out, "each check ticked")
	assert.NotRegexp(t, `(?m)^  ✗ `, out)
	assert.Contains(t, out, "\nSummary\n")
	assert.Regexp(t, `checks +\d+ passed, 0 failed`, out)
	assert.Regexp(t, `revivals +3, `, out)
	assert.True(t, strings.HasSuffix(out, "\nEvery check held: the agent was killed three times and lost nothing.\n"), "the verdict ends the output:\n%s", out)
	left, err := os.ReadDir(tmp)
	require.NoError(t, err)
	assert.Empty(t, left, "the temporary directory is removed")
}

// TestDemoQuietRemovesItsTemporaryDirectory runs the demo without --dir:
// it works in a new temporary directory and removes it at the end.
func TestDemoQuietRemovesItsTemporaryDirectory(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	code, out, errs := runDemo(t, "--fast", "--quiet")
	require.Equal(t, exitOK, code, "stderr:\n%s", errs)
	assert.Regexp(t, `^demo: \d+ checks passed; 37 events in 4 conversations; 3 revivals`, out)
	assert.Equal(t, 1, strings.Count(out, "\n"), "quiet is one line:\n%s", out)
	left, err := os.ReadDir(tmp)
	require.NoError(t, err)
	assert.Empty(t, left, "the temporary directory is removed")
}

// TestDemoQuietJSON: --quiet with --json leaves out the narration's "step"
// records and keeps the rest of the transcript, ending on its result.
func TestDemoQuietJSON(t *testing.T) {
	code, out, errs := runDemo(t, "--fast", "--json", "--quiet")
	require.Equal(t, exitOK, code, "stderr:\n%s", errs)
	recs := transcript(t, out)
	assert.Empty(t, ofKind(recs, "step"))
	assert.Len(t, ofKind(recs, "act"), 6)
	assert.Len(t, ofKind(recs, "event"), 37)
	assert.NotEmpty(t, ofKind(recs, "check"))
	last := recs[len(recs)-1]
	require.Equal(t, "result", last.Kind)
	assert.True(t, *last.OK)
}

// TestDemoFailsWithStatus1: a demo that cannot go on (here its store is
// damaged under it before act 1 opens it) says why on stdout and stderr and
// exits with status 1.
func TestDemoFailsWithStatus1(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	beforeClaim = func(dir string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, "CURRENT"), []byte("garbage\n"), 0o644))
	}
	t.Cleanup(func() { beforeClaim = func(string) {} })
	code, out, errs := runDemo(t, "--fast", "--dir", dir)
	assert.Equal(t, exitFailed, code, "stderr:\n%s", errs)
	assert.Contains(t, errs, "demo: FAILED: act 1: ")
	assert.Contains(t, out, "\nThe demo FAILED: act 1: ")
	assert.NotContains(t, out, "Every check held")
}

// TestDemoKeepAndVerbose: --keep keeps the temporary directory and names it
// on stderr (the store is there, readable); --verbose writes the runtime's
// debug logs to stderr.
func TestDemoKeepAndVerbose(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	code, out, errs := runDemo(t, "--fast", "--quiet", "--keep", "--verbose")
	require.Equal(t, exitOK, code, "stderr:\n%s", errs)
	assert.Regexp(t, `^demo: \d+ checks passed`, out)
	assert.Contains(t, errs, "level=DEBUG", "the runtime's debug logs")
	left, err := os.ReadDir(tmp)
	require.NoError(t, err)
	require.Len(t, left, 1, "the temporary directory is kept")
	dir := filepath.Join(tmp, left[0].Name())
	assert.Contains(t, errs, "demo: kept "+dir+"\n")
	store, err := pebblejournal.Open(dir, pebblejournal.Options{})
	require.NoError(t, err)
	defer func() { require.NoError(t, store.Close()) }()
	evs, err := store.Events(context.Background(), convCheckout, journal.EventQuery{})
	require.NoError(t, err)
	assert.Len(t, evs, 5, "the kept store holds the demo's log")
}

func TestDemoRefusesADirectoryInUse(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "something"), nil, 0o644))
	code, out, errs := runDemo(t, "--fast", "--dir", dir)
	assert.Equal(t, exitUsage, code)
	assert.Empty(t, out)
	assert.Contains(t, errs, "is not empty")
	assert.NotContains(t, errs, "FAILED", "a directory in use is a usage error, not a failed demo")
	assert.Equal(t, 1, strings.Count(errs, "demo:"), "said once:\n%s", errs)
}

// TestDemoRefusesADirectoryItCannotUse: a --dir that cannot be created
// (under a file) or is a file is a usage error (status 2), said once, not a
// failed demo.
func TestDemoRefusesADirectoryItCannotUse(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	for _, dir := range []string{file, filepath.Join(file, "store")} {
		code, out, errs := runDemo(t, "--fast", "--dir", dir)
		assert.Equal(t, exitUsage, code, "--dir %s", dir)
		assert.Empty(t, out)
		assert.Contains(t, errs, "--dir "+dir+" cannot be used")
		assert.NotContains(t, errs, "FAILED", "a directory the demo cannot use is a usage error, not a failed demo")
		assert.Equal(t, 1, strings.Count(errs, "demo:"), "said once:\n%s", errs)
	}
}

// TestDemoRefusesADirectoryAnotherDemoClaimed: of two demos started at once
// on the same empty directory, both past the emptiness check, the second to
// claim it is refused (status 2), and the first is not disturbed.
func TestDemoRefusesADirectoryAnotherDemoClaimed(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	// The other demo claims the directory after this one found it empty.
	beforeClaim = func(dir string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, runsFile), nil, 0o644))
	}
	t.Cleanup(func() { beforeClaim = func(string) {} })
	code, out, errs := runDemo(t, "--fast", "--dir", dir)
	assert.Equal(t, exitUsage, code)
	assert.Empty(t, out)
	assert.Contains(t, errs, "--dir "+dir+" is in use by another demo")
	assert.NotContains(t, errs, "FAILED")
	assert.Equal(t, 1, strings.Count(errs, "demo:"), "said once:\n%s", errs)
}

// TestTwoDemosOnOneDirectory runs two demos at once on the same new
// directory: one completes, the other is refused with status 2 and a clear
// reason, whichever check (not empty, claimed) catches it.
func TestTwoDemosOnOneDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	type res struct {
		code int
		errs string
	}
	results := make(chan res, 2)
	for range 2 {
		go func() {
			code, _, errs := runDemo(t, "--fast", "--quiet", "--dir", dir)
			results <- res{code, errs}
		}()
	}
	a, b := <-results, <-results
	if a.code != exitOK {
		a, b = b, a
	}
	require.Equal(t, exitOK, a.code, "one demo completes:\n%s", a.errs)
	require.Equal(t, exitUsage, b.code, "the other is refused:\n%s", b.errs)
	assert.Regexp(t, `not empty|in use by another demo`, b.errs)
}

func TestUsage(t *testing.T) {
	code, _, errs := runDemo(t, "--help")
	assert.Equal(t, exitOK, code)
	for _, f := range []string{"--dir", "--keep", "--fast", "--quiet", "--json", "--verbose"} {
		assert.Contains(t, errs, f)
	}
	assert.NotContains(t, errs, "--"+childFlag, "the child flag is hidden")

	assert.Contains(t, errs, "Exit status: 0 every check held")
	assert.Contains(t, errs, "130 interrupted")
	assert.Contains(t, errs, "SIGHUP); 141 stdout or stderr closed")

	code, _, errs = runDemo(t, "--no-such-flag")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errs, "flag provided but not defined: -no-such-flag")
	code, _, errs = runDemo(t, "stray")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errs, `unexpected argument "stray"`)
	code, out, errs := runDemo(t, "--model", "nope")
	assert.Equal(t, exitUsage, code, "an unknown model is a bad flag")
	assert.Empty(t, out)
	assert.Contains(t, errs, `unknown --model "nope"`)
	assert.NotContains(t, errs, "FAILED")
}

// TestInterrupted runs the demo as a process and interrupts it with
// SIGINT: narrated, in act 1; and fast, once act 5 (the kill -9 of a child
// process) began; and with SIGTERM and SIGHUP in act 1. It exits with
// status 130, says so once on stderr, ends its transcript with the
// interruption, and removes its temporary directory (SIGHUP used to kill
// it, leaving the directory behind).
func TestInterrupted(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  []string
		ready string // the stdout line after which the signal is sent
		last  string // the last stdout line
		sig   os.Signal
	}{
		{"narrated, act 1", nil, "Act 1. A refund that needs a human", "Interrupted.", os.Interrupt},
		{"fast, act 5", []string{"--fast", "--json"}, `{"kind":"act","act":5`, `{"kind":"result","ok":false,"reason":"interrupted"}`, os.Interrupt},
		{"SIGTERM, act 1", nil, "Act 1. A refund that needs a human", "Interrupted.", syscall.SIGTERM},
		{"SIGHUP, act 1", nil, "Act 1. A refund that needs a human", "Interrupted.", syscall.SIGHUP},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tmp := t.TempDir()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], tc.args...)
			cmd.Env = append(os.Environ(), asMainEnv+"=1", "TMPDIR="+tmp)
			var stderr syncBuffer
			cmd.Stderr = &stderr
			stdout, err := cmd.StdoutPipe()
			require.NoError(t, err)
			require.NoError(t, cmd.Start())
			var lines []string
			sc := bufio.NewScanner(stdout)
			signalled := false
			for sc.Scan() {
				lines = append(lines, sc.Text())
				if !signalled && strings.HasPrefix(sc.Text(), tc.ready) {
					require.NoError(t, cmd.Process.Signal(tc.sig))
					signalled = true
				}
			}
			err = cmd.Wait()
			require.True(t, signalled, "never saw %q:\n%s\nstderr:\n%s", tc.ready, strings.Join(lines, "\n"), stderr.String())
			var exit *exec.ExitError
			require.ErrorAs(t, err, &exit, "stderr:\n%s", stderr.String())
			assert.Equal(t, exitSignal, exit.ExitCode(), "stderr:\n%s", stderr.String())
			assert.Equal(t, "demo: interrupted\n", stderr.String())
			assert.Equal(t, tc.last, lines[len(lines)-1])
			left, err := os.ReadDir(tmp)
			require.NoError(t, err)
			assert.Empty(t, left, "the temporary directory is removed")
		})
	}
}

// TestStdoutClosed runs the demo as a process with its stdout a pipe whose
// reader stops after the first line, as `demo | head -1` does. The demo
// stops, says "demo: stdout closed" on stderr, exits with status 141, and
// removes its temporary directory; it used to die by SIGPIPE, leaving the
// directory behind.
func TestStdoutClosed(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"narrated", nil},
		{"fast", []string{"--fast"}},
		{"json", []string{"--fast", "--json"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tmp := t.TempDir()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], tc.args...)
			cmd.Env = append(os.Environ(), asMainEnv+"=1", "TMPDIR="+tmp)
			var stderr syncBuffer
			cmd.Stderr = &stderr
			r, w, err := os.Pipe()
			require.NoError(t, err)
			cmd.Stdout = w
			require.NoError(t, cmd.Start())
			require.NoError(t, w.Close())
			line, err := bufio.NewReader(r).ReadString('\n')
			require.NoError(t, err, "stderr:\n%s", stderr.String())
			require.NotEmpty(t, line)
			require.NoError(t, r.Close(), "the reader goes away, as head does")
			err = cmd.Wait()
			var exit *exec.ExitError
			require.ErrorAs(t, err, &exit, "stderr:\n%s", stderr.String())
			assert.Equal(t, exitPipe, exit.ExitCode(), "%v; stderr:\n%s", exit, stderr.String())
			assert.Equal(t, "demo: stdout closed\n", stderr.String())
			left, err := os.ReadDir(tmp)
			require.NoError(t, err)
			assert.Empty(t, left, "the temporary directory is removed")
		})
	}
}

// TestStderrClosed runs the demo --verbose as a process whose stderr is a
// pipe its reader closed: alone, as `demo --verbose 2>&1 >out | head`
// would once head is gone, and shared with stdout, as `demo --verbose 2>&1
// | head` would. The demo stops at the first write that finds the pipe
// closed, exits with status 141 and removes its temporary directory; with
// stdout open, its transcript ends with the interruption. A closed stderr
// alone used to be ignored: the demo ran on, and act 5's child, given the
// same stderr, could die of it, failing the run (status 1) and leaving the
// directory behind.
func TestStderrClosed(t *testing.T) {
	for _, tc := range []struct {
		name   string
		shared bool // stdout is the same pipe
	}{
		{"stderr", false},
		{"stdout and stderr", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tmp := t.TempDir()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "--fast", "--verbose", "--json")
			cmd.Env = append(os.Environ(), asMainEnv+"=1", "TMPDIR="+tmp)
			r, w, err := os.Pipe()
			require.NoError(t, err)
			var stdout syncBuffer
			cmd.Stdout = &stdout
			if tc.shared {
				cmd.Stdout = w
			}
			cmd.Stderr = w
			require.NoError(t, r.Close(), "the reader is gone, as head is once it has its lines")
			require.NoError(t, cmd.Start())
			require.NoError(t, w.Close())
			err = cmd.Wait()
			var exit *exec.ExitError
			require.ErrorAs(t, err, &exit, "stdout:\n%s", stdout.String())
			assert.Equal(t, exitPipe, exit.ExitCode(), "%v; stdout:\n%s", exit, stdout.String())
			if !tc.shared {
				recs := transcript(t, stdout.String())
				last := recs[len(recs)-1]
				assert.Equal(t, "result", last.Kind)
				assert.Equal(t, "interrupted", last.Reason)
			}
			left, err := os.ReadDir(tmp)
			require.NoError(t, err)
			assert.Empty(t, left, "the temporary directory is removed")
		})
	}
}

func TestPacing(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cfg    config
		pauses bool
		short  bool
	}{
		{"narrated", config{}, true, false},
		{"fast", config{fast: true}, false, true},
		{"quiet", config{quiet: true}, false, false},
		{"json", config{json: true}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := pacingFor(tc.cfg)
			assert.Equal(t, tc.pauses, p.beat > 0)
			assert.Equal(t, tc.short, p.signoff < 2*time.Second)
			assert.Positive(t, p.limit)
		})
	}
}

// TestBrokenExpectation: a failed check stops the story with its reason,
// in the transcript and in the error that makes the exit code non-zero.
func TestBrokenExpectation(t *testing.T) {
	var out syncBuffer
	r := newReporter(&out, true, false)
	r.beginAct(4, "a broken act")
	assert.True(t, r.check("holds", true, ""))
	assert.False(t, r.check("the late approval is refused as stale", false, "Resolve: <nil>"))
	c, failed := r.failedCheck(4)
	require.True(t, failed)
	assert.Equal(t, "the late approval is refused as stale", c.Check)
	_, failed = r.failedCheck(3)
	assert.False(t, failed)
	require.NoError(t, r.result(errors.New("act 4: the late approval is refused as stale: Resolve: <nil>"), false))
	recs := transcript(t, out.String())
	last := recs[len(recs)-1]
	assert.Equal(t, "result", last.Kind)
	assert.False(t, *last.OK)
	assert.Contains(t, last.Reason, "refused as stale")
	checks, bad := r.counts()
	assert.Equal(t, 2, checks)
	assert.Equal(t, 1, bad)
}

// TestHelpAsAFlagValue: a help flag where a flag's value is expected
// (--dir --help) prints the flags, status 0, for every flag taking a
// value, also after an unknown flag, as the package documents; the flag
// package took it as the value, and the demo ran in a directory named
// "--help". A value that reads as a help flag is given with "=".
func TestHelpAsAFlagValue(t *testing.T) {
	code, _, errs := runDemo(t, "--help")
	require.Equal(t, exitOK, code)
	var valued []string
	for _, line := range strings.Split(errs, "\n") {
		// "  --dir directory": a flag taking a value.
		if f := strings.Fields(line); len(f) == 2 && strings.HasPrefix(line, "  --") {
			valued = append(valued, f[0])
		}
	}
	require.ElementsMatch(t, []string{"--dir", "--model"}, valued, errs)
	for _, fl := range valued {
		for _, h := range []string{"--help", "-h"} {
			for _, args := range [][]string{{fl, h}, {fl, h, "x"}, {"--quiet", fl, h}, {"--nope", fl, h}} {
				var stderr bytes.Buffer
				_, err := parseFlags(args, &stderr)
				require.ErrorIs(t, err, flag.ErrHelp, "%q", args)
				require.True(t, strings.HasPrefix(stderr.String(), "Usage: demo [flags]"), "%q prints the flags: %s", args, stderr.String())
			}
		}
	}
	cfg, err := parseFlags([]string{"--dir=--help", "--model=scripted"}, &bytes.Buffer{})
	require.NoError(t, err)
	require.Equal(t, "--help", cfg.dir, `with "=" it is the value`)
}
