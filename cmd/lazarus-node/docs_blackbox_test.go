package main

// Black-box tests of the command's documentation (the package doc and
// `lazarus-node -h`): each runs the command as a child process, as an
// operator would, and checks its exit status and what it writes.

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/journal/pgjournal/pgtest"
)

// node starts the command as a child process with args; the caller waits.
func node(t *testing.T, ctx context.Context, args ...string) (cmd *exec.Cmd, stdout, stderr *syncBuffer) {
	t.Helper()
	self, err := os.Executable()
	require.NoError(t, err)
	cmd = exec.CommandContext(ctx, self, args...)
	cmd.Env = append(os.Environ(), asMain+"=1")
	stdout, stderr = &syncBuffer{}, &syncBuffer{}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	return cmd, stdout, stderr
}

// exitCode is the exit status of a finished child (0 for no error).
func exitCode(t *testing.T, err error) int {
	t.Helper()
	var ee *exec.ExitError
	if err == nil {
		return 0
	}
	require.True(t, errors.As(err, &ee), "not an exit status: %v", err)
	return ee.ExitCode()
}

// runNode runs the command to its end with args, bounded by 30 s.
func runNode(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd, out, errOut := node(t, ctx, args...)
	err := cmd.Run()
	require.NoError(t, ctx.Err(), "the command did not end within 30 s; stderr: %s", errOut.String())
	return exitCode(t, err), out.String(), errOut.String()
}

// TestDocsHelpAndUsageStatuses: `lazarus-node -h` (and --help) exits 0,
// names the demo, lists every flag of the package doc with its default
// (--port 0, --http 127.0.0.1:0, --model-delay 50ms, --human-timeout 3s)
// and the exit statuses; a usage error (an
// unknown flag, a missing required flag, an argument, `demo` given
// arguments) exits 2 naming the problem on stderr, before anything is
// opened, with nothing on stdout.
func TestDocsHelpAndUsageStatuses(t *testing.T) {
	for _, h := range []string{"-h", "--help"} {
		code, stdout, stderr := runNode(t, h)
		require.Equal(t, exitOK, code, "%s: stderr: %s", h, stderr)
		require.Empty(t, stdout)
		for _, f := range []string{"-postgres", "-port", "-automanaged-port", "-seeds", "-http", "-model-delay", "-human-timeout", "-verbose"} {
			require.Regexp(t, `(?m)^  `+f+`( |$)`, stderr, "%s lists %s", h, f)
		}
		require.Contains(t, stderr, `(default "127.0.0.1:0")`)
		require.Contains(t, stderr, "(default 50ms)")
		require.Contains(t, stderr, "(default 3s)")
		require.Contains(t, stderr, "0 picks a free one", "--port 0 picks a free port")
		require.Contains(t, stderr, "lazarus-node demo", "-h names the demo")
		require.Contains(t, stderr, "Exit status: 0 stopped by a signal (or -h); 1 failure; 2 usage error;\n7 forced out")
		require.Contains(t, stderr, "130 interrupted")
	}
	// The demo's own help: its usage and statuses, exit 0, nothing run.
	for _, h := range []string{"-h", "--help"} {
		code, stdout, stderr := runNode(t, "demo", h)
		require.Equal(t, exitOK, code, "demo %s: stderr: %s", h, stderr)
		require.Empty(t, stdout, "demo %s runs nothing", h)
		require.Contains(t, stderr, "Usage of lazarus-node demo:")
		require.Contains(t, stderr, "0 it held; 1 it failed; 2 given arguments; 130 interrupted")
	}
	ok := []string{"--postgres", "postgres://127.0.0.1:1/none", "--automanaged-port", "7101", "--seeds", "127.0.0.1:7101"}
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"unknown flag", append([]string{"--nope"}, ok...), "flag provided but not defined: -nope"},
		{"no postgres", ok[2:], "--postgres is required"},
		{"no automanaged port", append(append([]string(nil), ok[:2]...), ok[4:]...), "--automanaged-port is required"},
		{"no seeds", ok[:4], "--seeds is required"},
		{"an argument", append(append([]string(nil), ok...), "extra"), `unexpected arguments ["extra"]`},
		{"demo with arguments", []string{"demo", "now"}, "lazarus-node demo: takes no arguments"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, stdout, stderr := runNode(t, c.args...)
			require.Equal(t, exitUsage, code, "stderr: %s", stderr)
			require.Contains(t, stderr, c.want)
			require.NotContains(t, stdout, "ready")
		})
	}
}

// TestDocsUnreachableStoreExitsOne: a member whose Runtime cannot be had
// (no PostgreSQL server at its DSN) exits 1 saying why on stderr, and
// never says it is ready.
func TestDocsUnreachableStoreExitsOne(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close()) // nothing listens there now
	am := freeTestPort(t)
	code, stdout, stderr := runNode(t, "--postgres", "postgres://lazarus@"+addr+"/none?connect_timeout=5",
		"--automanaged-port", itoa(am), "--seeds", "127.0.0.1:"+itoa(am))
	require.Equal(t, exitError, code, "stderr: %s", stderr)
	require.Contains(t, stderr, "lazarus-node: ")
	require.Contains(t, stderr, "unavailable")
	require.NotContains(t, stdout, "ready")
}

// TestDocsSecondSignalDuringTheStartExitsSeven: a second SIGTERM or
// SIGINT during the start (here the Store's connection hangs: the server
// accepts it and never answers) exits at once with status 7 (lazarus's
// forced), saying so on stderr, without waiting for the start to end.
func TestDocsSecondSignalDuringTheStartExitsSeven(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	accepted := make(chan net.Conn, 8)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c // held open, never answered
		}
	}()
	defer func() {
		for {
			select {
			case c := <-accepted:
				c.Close()
			default:
				return
			}
		}
	}()
	am := freeTestPort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd, stdout, stderr := node(t, ctx, "--postgres", "postgres://lazarus@"+l.Addr().String()+"/none?connect_timeout=60",
		"--automanaged-port", itoa(am), "--seeds", "127.0.0.1:"+itoa(am))
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var held net.Conn
	select {
	case held = <-accepted: // the member is in its start: its signal handler is set
		accepted <- held
	case err := <-done:
		t.Fatalf("exited before connecting to the Store: %v; stderr: %s", err, stderr.String())
	case <-time.After(20 * time.Second):
		t.Fatal("the member never connected to the Store")
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	select {
	case err := <-done:
		require.Equal(t, 7, exitCode(t, err), "stderr: %s", stderr.String())
	case <-time.After(20 * time.Second):
		t.Fatalf("a second signal during the start did not end the member; stderr: %s", stderr.String())
	}
	require.Contains(t, stderr.String(), "again, exiting now")
	require.NotContains(t, stdout.String(), "ready")
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestDocsControlAPIStatuses: a failed control call answers {"error",
// "code"} with the status of its code as the package doc lists them: a
// resolve of a call that is not pending is 409 stale, and every call to a
// member whose Runtime is closed that can fail is 503 closed (a kill, which
// and owner, which cannot fail, answer as ever).
func TestDocsControlAPIStatuses(t *testing.T) {
	rt, base, _ := testAPI(t)

	status, out := call(t, "POST", base+"/resolve", `{"tool_call_id":"call_none","result":"{}"}`)
	require.Equal(t, http.StatusConflict, status, "%v", out)
	require.Equal(t, "stale", out["code"], "%v", out)
	status, out = call(t, "POST", base+"/sendwait", `{"conv":"c","text":"hi"}`)
	require.Equal(t, http.StatusOK, status, "%v", out)

	require.NoError(t, rt.Close())
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/send", `{"conv":"c","text":"again"}`},
		{"POST", "/sendwait", `{"conv":"c","text":"again"}`},
		{"POST", "/resolve", `{"tool_call_id":"call_none","result":"{}"}`},
		{"GET", "/stream?conv=c&after=0", ""},
	} {
		status, out := call(t, c.method, base+c.path, c.body)
		require.Equal(t, http.StatusServiceUnavailable, status, "%s %s: %v", c.method, c.path, out)
		require.Equal(t, "closed", out["code"], "%s %s: %v", c.method, c.path, out)
		require.NotEmpty(t, out["error"])
	}
}

// TestDocsReadyAndGracefulStop: a member as a child process prints
// "lazarus-node MEMBER ready, control API http://ADDR" once up (MEMBER is
// the address /members gives as self, the only member of a one-member
// cluster, and the owner of every conversation), answers /healthz with
// ok, and on SIGTERM prints that it is stopping, then "lazarus-node MEMBER
// stopped", and exits 0.
func TestDocsReadyAndGracefulStop(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	am := freeTestPort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd, stdout, stderr := node(t, ctx, "--postgres", dsn, "--automanaged-port", itoa(am), "--seeds", "127.0.0.1:"+itoa(am))
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
		}
	})
	ready := regexp.MustCompile(`(?m)^lazarus-node (\S+) ready, control API (http://\S+)$`)
	var m []string
	require.Eventually(t, func() bool {
		m = ready.FindStringSubmatch(stdout.String())
		return m != nil
	}, 40*time.Second, 20*time.Millisecond, "the ready line; stderr: %s", stderr)
	member, base := m[1], m[2]

	res, err := testClient.Get(base + "/healthz")
	require.NoError(t, err)
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, "ok", string(body))
	status, out := call(t, "GET", base+"/members", "")
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, member, out["self"])
	require.Equal(t, []any{member}, out["members"])
	status, out = call(t, "GET", base+"/owner?conv=c", "")
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, member, out["owner"])

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-done:
		done <- err
		require.Equal(t, exitOK, exitCode(t, err), "stderr: %s", stderr.String())
	case <-time.After(40 * time.Second):
		t.Fatalf("SIGTERM did not stop the member; stderr: %s", stderr.String())
	}
	require.Contains(t, stdout.String(), "lazarus-node "+member+": terminated, stopping\n")
	require.Contains(t, stdout.String(), "lazarus-node "+member+" stopped\n")
}
