package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/pebblejournal"
	"github.com/lazarusrt/lazarus/messages"
)

// cliProc is a lazarus command run as a child process (the test binary
// re-executed, see runChild), its stdout a pipe the test reads.
type cliProc struct {
	cmd    *exec.Cmd
	stdout *bufio.Reader
	stderr *lockedBuffer
	exited chan error
}

func startCLI(t *testing.T, child string, args ...string) *cliProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), envChild+"="+child)
	p := &cliProc{cmd: cmd, stderr: &lockedBuffer{}, exited: make(chan error, 1)}
	cmd.Stderr = p.stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	p.stdout = bufio.NewReader(out)
	require.NoError(t, cmd.Start())
	go func() { p.exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.exited
	})
	return p
}

// wait returns the exit status once the process has exited.
func (p *cliProc) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-p.exited:
		p.exited <- nil // for the cleanup
	case <-time.After(wait):
		t.Fatalf("the command did not exit within %s:\n%s", wait, p.stderr)
	}
	return p.cmd.ProcessState.ExitCode()
}

// bigExportStore writes a store whose export is about 6 MiB, many times
// what a pipe and export's buffer hold, in three pages of events: an
// export to a pipe nobody reads is still running.
func bigExportStore(t *testing.T) string {
	dir := filepath.Join(t.TempDir(), "store")
	require.NoError(t, longStore(t, dir, 3000, 2048).Close())
	return dir
}

// TestExportStopsOnFirstSignal: 'lazarus export' as a child process, held
// after its first page of events until its context ends (a test hook),
// gets SIGTERM: it stops at its next page with status 8 and says it was
// interrupted; its output has no trailer (import refuses it) and is
// shorter than the export.
func TestExportStopsOnFirstSignal(t *testing.T) {
	dir := bigExportStore(t)
	p := startCLI(t, "cli-wait-export", "export", "--all", "--dir", dir)
	read := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(p.stdout)
		read <- b
	}()
	require.Eventually(t, func() bool { return strings.Contains(p.stderr.String(), "hook: a page exported") },
		wait, 10*time.Millisecond)

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	rest := <-read
	require.Equal(t, exitInterrupted, p.wait(t), p.stderr.String())
	require.Equal(t, 8, exitInterrupted, "the package doc gives 8")
	require.Contains(t, p.stderr.String(), "lazarus export: interrupted, stopped before finishing: ")
	require.Contains(t, p.stderr.String(), "context canceled")
	out := string(rest)
	require.True(t, strings.HasPrefix(out, `{"type":"header"`), "the header came first")
	require.NotContains(t, out, `"type":"trailer"`)
	require.NotContains(t, out, `"type":"end"`)
	require.Less(t, strings.Count(out, "\n"), 3000, "it stopped before the last page")
	err := importInto(ctxT(t), memStore(t), strings.NewReader(out), importOptions{})
	require.ErrorIs(t, err, errTruncated)
}

// TestSecondSignalForcesExitAnyCommand: 'lazarus export' as a child
// process that, once its context ends at a first signal, never goes on (a
// test hook after its first page), exits at once with status 7 on a second
// signal and says so on stderr, as serve does
// (TestServeSecondSignalForcesExit).
func TestSecondSignalForcesExitAnyCommand(t *testing.T) {
	dir := bigExportStore(t)
	p := startCLI(t, "cli-stall-export", "export", "--all", "--dir", dir)
	go func() { _, _ = io.Copy(io.Discard, p.stdout) }()
	require.Eventually(t, func() bool { return strings.Contains(p.stderr.String(), "hook: a page exported") },
		wait, 10*time.Millisecond)
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.Eventually(t, func() bool { return strings.Contains(p.stderr.String(), "hook: context ended") },
		wait, 10*time.Millisecond)
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGINT))
	require.Equal(t, exitForced, p.wait(t), p.stderr.String())
	require.Contains(t, p.stderr.String(), "hook: context ended\nlazarus export: interrupt again, exiting now without finishing the stop\n")
}

// cancelOnWrite is a stdout that cancels a context at the first write
// containing want.
type cancelOnWrite struct {
	mu     sync.Mutex
	b      bytes.Buffer
	want   string
	cancel context.CancelFunc
}

func (w *cancelOnWrite) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if bytes.Contains(p, []byte(w.want)) {
		w.cancel()
	}
	return w.b.Write(p)
}

// TestImportStopsOnFirstSignal: an import whose context ends (the first
// signal) as it reports its first conversation imported stops before
// writing the next, with status 8 and an error naming the one imported;
// the target holds it complete and nothing of the others, and is sound.
func TestImportStopsOnFirstSignal(t *testing.T) {
	f := newFixture(t)
	exported := cliRun(t, "", "export", "--all", "--dir", f.dir)
	requireOK(t, exported)
	target := filepath.Join(t.TempDir(), "target")

	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	out := &cancelOnWrite{want: "imported conversation ", cancel: cancel}
	var errb bytes.Buffer
	code := newCLI(strings.NewReader(exported.stdout), out, &errb).run(ctx, []string{"import", "--dir", target})
	require.Equal(t, exitInterrupted, code, errb.String())
	require.Regexp(t, `^lazarus import: interrupted, stopped before finishing: import failed part-way: 1 conversations were imported completely \(answered\): .*context canceled\n$`, errb.String())
	require.NotContains(t, errb.String(), "incomplete")
	require.Equal(t, 1, strings.Count(out.b.String(), "imported conversation "), out.b.String())

	want := collectDir(t, f.dir)
	got := collectDir(t, target)
	require.Len(t, got, 1)
	requireImported(t, want["answered"], got["answered"])
	requireOK(t, cliRun(t, "", "check", "--dir", target))
}

// cancelAfter is a Pebble store whose context is cancelled (the first
// signal) after its first call of one kind returns.
type cancelAfter struct {
	*pebblejournal.Store
	cancel context.CancelFunc
}

func (s *cancelAfter) Append(ctx context.Context, req *messages.AppendRequest) (journal.AppendResult, error) {
	defer s.cancel()
	return s.Store.Append(ctx, req)
}

func (s *cancelAfter) GCModelCalls(ctx context.Context, id string, olderThan time.Time) (int, error) {
	defer s.cancel()
	return s.Store.GCModelCalls(ctx, id, olderThan)
}

// cliCancelling runs args in this process on a store that cancels ctx
// after its first Append or GCModelCalls.
func cliCancelling(t *testing.T, stdin string, args ...string) result {
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	var out, errb bytes.Buffer
	c := newCLI(strings.NewReader(stdin), &out, &errb)
	c.open = func(dir string, create bool) (journal.Store, error) {
		st, err := openPebble(dir, create)
		if err != nil {
			return nil, err
		}
		return &cancelAfter{Store: st.(*pebblejournal.Store), cancel: cancel}, nil
	}
	code := c.run(ctx, args)
	return result{out.String(), errb.String(), code}
}

// TestInterruptedMidConversation: an import whose context ends after the
// first append of a conversation written in several stops there, status
// 8, naming it incomplete (ENDED), as the import help says of a write
// that fails part-way; a gc-audit whose context ends after its first
// conversation stops with status 8 saying how many rows it deleted.
func TestInterruptedMidConversation(t *testing.T) {
	src := filepath.Join(t.TempDir(), "src")
	require.NoError(t, longStore(t, src, 3000, 16).Close())
	exported := cliRun(t, "", "export", "--all", "--dir", src)
	requireOK(t, exported)
	target := filepath.Join(t.TempDir(), "target")

	r := cliCancelling(t, exported.stdout, "import", "--dir", target)
	require.Equal(t, exitInterrupted, r.code, r.stderr)
	require.Regexp(t, `^lazarus import: interrupted, stopped before finishing: import failed part-way: 0 conversations were imported completely \(none\); conversation long is incomplete in the target, with status ENDED.*context canceled\n$`, r.stderr)
	st, err := pebblejournal.Open(target, pebblejournal.Options{Logger: silent()})
	require.NoError(t, err)
	row, err := st.Conversation(ctxT(t), "long")
	require.NoError(t, err)
	require.Equal(t, messages.ConversationStatus_CONVERSATION_STATUS_ENDED, row.GetStatus())
	last, err := st.LastSeq(ctxT(t), "long")
	require.NoError(t, err)
	require.Less(t, last, uint64(3000))
	require.NoError(t, st.Close())

	f := newFixture(t)
	r = cliCancelling(t, "", "gc-audit", "--older-than", "0s", "--dir", f.dir)
	require.Equal(t, exitInterrupted, r.code, r.stderr)
	require.Regexp(t, `^lazarus gc-audit: interrupted, stopped before finishing: stopped after deleting 2 audit rows in 1 conversations: .*context canceled\n$`, r.stderr)
	require.Empty(t, r.stdout)
}

// TestOfflineCommandsStopWhenInterrupted: each command that reads the
// whole store, its context ended (the first signal), stops with status 8
// and says it was interrupted, printing no result.
func TestOfflineCommandsStopWhenInterrupted(t *testing.T) {
	f := newFixture(t)
	exported := cliRun(t, "", "export", "--all", "--dir", f.dir)
	requireOK(t, exported)
	for _, args := range [][]string{
		{"export", "--all"},
		{"check"},
		{"gc-audit", "--older-than", "0s"},
		{"stats"},
		{"conversations"},
		{"import", "--dry-run"},
		{"import"},
	} {
		t.Run(args[0], func(t *testing.T) {
			ctx, cancel := context.WithCancel(ctxT(t))
			cancel()
			var out, errb bytes.Buffer
			code := newCLI(strings.NewReader(exported.stdout), &out, &errb).run(ctx, append(args, "--dir", f.dir))
			require.Equal(t, exitInterrupted, code, errb.String())
			require.Regexp(t, `^lazarus `+args[0]+`: interrupted, stopped before finishing: .*context canceled\n$`, errb.String())
			if args[0] != "export" {
				require.Empty(t, out.String())
			}
			require.NotContains(t, errb.String(), "rejected", "the input was not refused")
		})
	}
	// Nothing was deleted.
	r := cliRun(t, "", "gc-audit", "--older-than", "0s", "--dry-run", "--dir", f.dir)
	requireOK(t, r)
	require.Contains(t, r.stdout, "would delete 6 audit rows")
}
