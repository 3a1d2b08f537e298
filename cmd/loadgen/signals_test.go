package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMain lets this test binary stand in for loadgen's: with asMainEnv
// set, it is loadgen's whole process (signals included), for the tests
// that run loadgen as a child process.
func TestMain(m *testing.M) {
	if os.Getenv(asMainEnv) == "1" {
		os.Exit(mainCode(os.Args[1:]))
	}
	os.Exit(m.Run())
}

const asMainEnv = "LAZARUS_LOADGEN_TEST_AS_MAIN"

// syncBuffer is a bytes.Buffer safe for a child process's output copier
// and the test reading it.
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

// loadgenProcess is loadgen as a child process with args, its temporary
// directory made under tmp.
func loadgenProcess(ctx context.Context, tmp string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), asMainEnv+"=1", "TMPDIR="+tmp)
	return cmd
}

// TestInterrupted runs loadgen as a process and signals it in its runtime
// phase: SIGINT, SIGTERM and SIGHUP alike stop the run, which reports what
// it measured, says "loadgen: interrupted", exits with status 130 and
// removes its temporary directory. SIGTERM and SIGHUP used to kill it
// outright, leaving the directory behind.
func TestInterrupted(t *testing.T) {
	if testing.Short() {
		t.Skip("runs loadgen as a process")
	}
	for _, sig := range []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) {
			tmp := t.TempDir()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := loadgenProcess(ctx, tmp, "--conversations", "2", "--duration", "50s", "--kill-every", "0", "--json")
			var stdout syncBuffer
			cmd.Stdout = &stdout
			stderr, err := cmd.StderrPipe()
			require.NoError(t, err)
			require.NoError(t, cmd.Start())
			var said []string
			sc := bufio.NewScanner(stderr)
			signalled := false
			for sc.Scan() {
				said = append(said, sc.Text())
				if !signalled && strings.HasPrefix(sc.Text(), "loadgen: runtime phase:") {
					require.NoError(t, cmd.Process.Signal(sig))
					signalled = true
				}
			}
			err = cmd.Wait()
			all := strings.Join(said, "\n")
			require.True(t, signalled, "never saw the runtime phase begin; stderr:\n%s", all)
			var exit *exec.ExitError
			require.ErrorAs(t, err, &exit, "stderr:\n%s", all)
			assert.Equal(t, exitSignal, exit.ExitCode(), "%v; stderr:\n%s", exit, all)
			assert.Equal(t, "loadgen: interrupted: the report covers what was measured until then", said[len(said)-1])
			var rep report
			assert.NoError(t, json.Unmarshal([]byte(stdout.String()), &rep), "the report of what was measured:\n%s", stdout.String())
			left, err := os.ReadDir(tmp)
			require.NoError(t, err)
			assert.Empty(t, left, "the temporary directory is removed")
		})
	}
}

// TestStdoutClosed runs loadgen as a process whose stdout, or stderr, is a
// pipe its reader closes, as `loadgen | head` (or `loadgen 2>&1 | head -1`)
// does. loadgen stops at the first write that finds the pipe closed, exits
// with status 141 and removes its temporary directory, saying "loadgen:
// stdout closed" when stderr is still open. It used to die by SIGPIPE: with
// stderr closed, in its runtime phase, leaving the directory behind.
func TestStdoutClosed(t *testing.T) {
	if testing.Short() {
		t.Skip("runs loadgen as a process")
	}
	t.Run("stdout", func(t *testing.T) {
		tmp := t.TempDir()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := loadgenProcess(ctx, tmp, "--conversations", "2", "--duration", "300ms", "--warmup", "0s", "--min-measured", "1",
			"--kill-every", "0", "--baseline=false")
		var stderr syncBuffer
		cmd.Stderr = &stderr
		r, w, err := os.Pipe()
		require.NoError(t, err)
		cmd.Stdout = w
		require.NoError(t, r.Close(), "the reader goes away, as head does")
		require.NoError(t, cmd.Start())
		require.NoError(t, w.Close())
		err = cmd.Wait()
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit, "stderr:\n%s", stderr.String())
		assert.Equal(t, exitPipe, exit.ExitCode(), "%v; stderr:\n%s", exit, stderr.String())
		assert.True(t, strings.HasSuffix(stderr.String(), "\nloadgen: stdout closed\n"), "stderr:\n%s", stderr.String())
		left, err := os.ReadDir(tmp)
		require.NoError(t, err)
		assert.Empty(t, left, "the temporary directory is removed")
	})
	t.Run("stderr", func(t *testing.T) {
		tmp := t.TempDir()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := loadgenProcess(ctx, tmp, "--conversations", "2", "--duration", "50s", "--kill-every", "0", "--json")
		var stdout syncBuffer
		cmd.Stdout = &stdout
		r, w, err := os.Pipe()
		require.NoError(t, err)
		cmd.Stderr = w
		require.NoError(t, cmd.Start())
		require.NoError(t, w.Close())
		line, err := bufio.NewReader(r).ReadString('\n')
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(line, "loadgen: runtime phase:"), "%q", line)
		require.NoError(t, r.Close(), "the reader goes away, as head does")
		err = cmd.Wait()
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit)
		assert.Equal(t, exitPipe, exit.ExitCode(), "%v", exit)
		var rep report
		assert.NoError(t, json.Unmarshal([]byte(stdout.String()), &rep), "the report of what was measured:\n%s", stdout.String())
		left, err := os.ReadDir(tmp)
		require.NoError(t, err)
		assert.Empty(t, left, "the temporary directory is removed")
	})
}

// TestCLIOutputGoesToItsStderr: the progress lines and --pebble-events
// go to the stderr cli is given, not to the process's; they used to go to
// os.Stderr.
func TestCLIOutputGoesToItsStderr(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the load generator for over a second")
	}
	var stdout, stderr syncBuffer
	code := cli(t.Context(), []string{"--conversations", "2", "--duration", "1200ms", "--warmup", "0s", "--kill-every", "0",
		"--baseline=false", "--pebble-events", "--dir", t.TempDir()}, &stdout, &stderr)
	require.Equal(t, exitOK, code, "stderr:\n%s", stderr.String())
	assert.Contains(t, stderr.String(), "events/s", "a progress line")
	assert.Contains(t, stderr.String(), "  pebble: ", "a Pebble event")
	assert.Contains(t, stdout.String(), "events/s", "the report")
}
