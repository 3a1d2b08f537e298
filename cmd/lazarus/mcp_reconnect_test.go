package main

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/internal/leakcheck"
)

// mcpToolsByName is s's tools by name.
func mcpToolsByName(s *mcpSession) map[string]agent.Tool {
	tools := map[string]agent.Tool{}
	for _, tool := range s.tools {
		tools[tool.Name] = tool
	}
	return tools
}

// mcpStarts is the pids the "mcp" children of the file starts wrote.
func mcpStarts(t *testing.T, starts string) []int {
	t.Helper()
	b, err := os.ReadFile(starts)
	require.NoError(t, err)
	var pids []int
	for _, line := range strings.Fields(string(b)) {
		pid, err := strconv.Atoi(line)
		require.NoError(t, err)
		pids = append(pids, pid)
	}
	return pids
}

// callPid calls the "mcp" child's tool pid.
func callPid(ctx context.Context, t *testing.T, tool agent.Tool, id string) (pidCallOut, error) {
	t.Helper()
	out, err := tool.Run(ctx, agent.Invocation{ToolCallID: id, Name: "pid", Arguments: `{}`})
	if err != nil {
		return pidCallOut{}, err
	}
	var got pidCallOut
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	return got, nil
}

// TestMCPServerRestartedAfterItExits: a stdio MCP server whose process
// exits during a call is started again, and the call is made on the new
// process with the same tool_call_id; closing the session then leaves no
// process and no goroutine. A server that exited used to fail every later
// call until the node restarted.
func TestMCPServerRestartedAfterItExits(t *testing.T) {
	if !leakcheck.Isolate(t) {
		return
	}
	base := leakcheck.Take()
	self, err := filepath.Abs(os.Args[0])
	require.NoError(t, err)
	starts := filepath.Join(t.TempDir(), "starts")
	ctx := ctxT(t)
	cfg := mcpConfig{Name: "calc", Command: []string{self}, Env: map[string]string{envChild: "mcp", envMCPStarts: starts, envMCPExitSecond: "1"}}
	s, err := connectMCP(ctx, cfg, "test")
	require.NoError(t, err)
	pid := mcpToolsByName(s)["pid"]

	first, err := callPid(ctx, t, pid, "call-1")
	require.NoError(t, err)
	second, err := callPid(ctx, t, pid, "call-2")
	require.NoError(t, err, "the call that found the server gone is made on a new process")
	require.NotEqual(t, first.Pid, second.Pid)
	require.Equal(t, "call-2", second.ToolCallID, "the same tool_call_id, so that the server may deduplicate")
	require.Equal(t, []int{first.Pid, second.Pid}, mcpStarts(t, starts), "started once again")

	require.NoError(t, s.Close())
	for _, p := range []int{first.Pid, second.Pid} {
		require.ErrorIs(t, syscall.Kill(p, 0), syscall.ESRCH, "process %d waited for", p)
	}
	base.Check(t, 5*time.Second)
}

// TestMCPReconnectBackoff: a server that fails to start again fails the
// call that found it gone, saying so; a call during the backoff that
// follows fails at once, saying when it is tried again, without starting
// the server; a call after the backoff starts it again.
func TestMCPReconnectBackoff(t *testing.T) {
	self, err := filepath.Abs(os.Args[0])
	require.NoError(t, err)
	dir := t.TempDir()
	starts, fail := filepath.Join(dir, "starts"), filepath.Join(dir, "fail")
	ctx := ctxT(t)
	cfg := mcpConfig{Name: "calc", Command: []string{self}, Env: map[string]string{envChild: "mcp", envMCPStarts: starts, envMCPFail: fail}, Timeout: "1h", reconnectBackoff: time.Hour}
	s, err := connectMCP(ctx, cfg, "test")
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	tools := mcpToolsByName(s)
	require.NoError(t, os.WriteFile(fail, nil, 0o600))

	_, err = tools["exit"].Run(ctx, agent.Invocation{ToolCallID: "call-1", Name: "exit", Arguments: `{}`})
	require.ErrorContains(t, err, "mcp server calc is lost and did not reconnect: mcp server calc: connect: ")
	require.ErrorContains(t, err, "it is tried again in 1h0m0s")
	require.Len(t, mcpStarts(t, starts), 2, "started again once")

	_, err = callPid(ctx, t, tools["pid"], "call-2")
	require.ErrorContains(t, err, "mcp server calc is lost: mcp server calc: connect: ")
	require.Regexp(t, `it is tried again in (59m59\.\d+s|1h0m0s) \(at \d{4}-`, err.Error())
	require.Len(t, mcpStarts(t, starts), 2, "not started during the backoff")
	require.NoError(t, ctx.Err(), "failed at once, far below the call's timeout")

	// After the backoff, and once the server starts again.
	require.NoError(t, os.Remove(fail))
	s.mu.Lock()
	s.now = func() time.Time { return time.Now().Add(2 * time.Hour) }
	s.mu.Unlock()
	got, err := callPid(ctx, t, tools["pid"], "call-3")
	require.NoError(t, err)
	require.Equal(t, mcpStarts(t, starts)[2], got.Pid, "started a third time")
}

// TestMCPReconnectBackoffDoubles: the wait after failed reconnects in a
// row is 1s, doubling, up to 30s.
func TestMCPReconnectBackoffDoubles(t *testing.T) {
	var got []time.Duration
	for failures := 1; failures <= 8; failures++ {
		got = append(got, mcpBackoff(failures))
	}
	require.Equal(t, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 30 * time.Second, 30 * time.Second, 30 * time.Second}, got)
}

// TestMCPConcurrentCallsShareAReconnect: calls that find a server's
// process gone at once start it again once, and all succeed on it.
func TestMCPConcurrentCallsShareAReconnect(t *testing.T) {
	self, err := filepath.Abs(os.Args[0])
	require.NoError(t, err)
	starts := filepath.Join(t.TempDir(), "starts")
	ctx := ctxT(t)
	cfg := mcpConfig{Name: "calc", Command: []string{self}, Env: map[string]string{envChild: "mcp", envMCPStarts: starts}}
	s, err := connectMCP(ctx, cfg, "test")
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	pid := mcpToolsByName(s)["pid"]
	s.mu.Lock()
	proc := s.proc
	s.mu.Unlock()
	require.NoError(t, syscall.Kill(proc.cmd.Process.Pid, syscall.SIGKILL))
	<-proc.exited

	var wg sync.WaitGroup
	var ok atomic.Int32
	for i := range 5 {
		wg.Go(func() {
			got, err := callPid(ctx, t, pid, "call-"+strconv.Itoa(i))
			if err == nil && got.Pid != proc.cmd.Process.Pid {
				ok.Add(1)
			} else {
				t.Errorf("call %d: %v, pid %d", i, err, got.Pid)
			}
		})
	}
	wg.Wait()
	require.EqualValues(t, 5, ok.Load())
	require.Len(t, mcpStarts(t, starts), 2, "started again once")
}

// TestMCPHTTPSessionLostReconnects: a streamable HTTP server that no
// longer knows the session (it restarted) gets a new one, on which the
// call is made; a tool it no longer lists then fails.
func TestMCPHTTPSessionLostReconnects(t *testing.T) {
	var handler atomic.Pointer[http.Handler]
	serve := func(srv *mcp.Server) {
		var h http.Handler = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
		handler.Store(&h)
	}
	serve(newTestMCPServer(nil))
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { (*handler.Load()).ServeHTTP(w, r) }))
	defer hs.Close()
	ctx := ctxT(t)
	s, err := connectMCP(ctx, mcpConfig{Name: "calc", URL: hs.URL}, "test")
	require.NoError(t, err)
	defer func() { _ = s.Close() }()
	add := mcpToolsByName(s)["add"]
	_, err = add.Run(ctx, agent.Invocation{ToolCallID: "call-1", Name: "add", Arguments: `{"a": 1, "b": 2}`})
	require.NoError(t, err)

	seen := make(chan string, 1)
	serve(newTestMCPServer(seen)) // restarted: its sessions are gone
	out, err := add.Run(ctx, agent.Invocation{ToolCallID: "call-2", Name: "add", Arguments: `{"a": 1, "b": 2}`})
	require.NoError(t, err)
	require.JSONEq(t, `{"sum": 3, "tool_call_id": "call-2"}`, out)
	require.Equal(t, "call-2", <-seen)

	serve(mcp.NewServer(&mcp.Implementation{Name: "empty", Version: "1"}, nil))
	_, err = add.Run(ctx, agent.Invocation{ToolCallID: "call-3", Name: "add", Arguments: `{"a": 1, "b": 2}`})
	require.EqualError(t, err, "mcp tool add: mcp server calc no longer lists the tool since it was reconnected")
}

// TestMCPCloseEndsAReconnect: closing the session while a call is
// reconnecting it (the new process never answers its handshake) ends the
// reconnect: the call fails, Close returns, and no process or goroutine
// is left.
func TestMCPCloseEndsAReconnect(t *testing.T) {
	if !leakcheck.Isolate(t) {
		return
	}
	base := leakcheck.Take()
	self, err := filepath.Abs(os.Args[0])
	require.NoError(t, err)
	dir := t.TempDir()
	starts, fail := filepath.Join(dir, "starts"), filepath.Join(dir, "fail")
	ctx := ctxT(t)
	cfg := mcpConfig{Name: "calc", Command: []string{self}, Env: map[string]string{envChild: "mcp", envMCPStarts: starts, envMCPFail: fail}, Timeout: "1h", ConnectTimeout: "1h", stopGrace: 100 * time.Millisecond}
	s, err := connectMCP(ctx, cfg, "test")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(fail, []byte("hang"), 0o600))
	exit := mcpToolsByName(s)["exit"]
	called := make(chan error, 1)
	go func() {
		_, err := exit.Run(ctx, agent.Invocation{ToolCallID: "call-1", Name: "exit", Arguments: `{}`})
		called <- err
	}()
	require.Eventually(t, func() bool {
		b, _ := os.ReadFile(starts)
		return len(strings.Fields(string(b))) == 2
	}, 10*time.Second, 10*time.Millisecond, "the server is being started again")

	require.NoError(t, s.Close())
	err = <-called
	require.Error(t, err)
	require.True(t, errors.Is(err, mcp.ErrConnectionClosed) || errors.Is(err, context.Canceled), err.Error())
	for _, p := range mcpStarts(t, starts) {
		require.ErrorIs(t, syscall.Kill(p, 0), syscall.ESRCH, "process %d waited for", p)
	}
	base.Check(t, 5*time.Second)
}

// TestMCPHTTPConnectionRefused: a streamable HTTP server that refuses the
// connection (it is down) is reconnected once by the call that found it
// so, which fails saying the reconnect failed; a call during the backoff
// then fails at once, saying when it is tried again.
func TestMCPHTTPConnectionRefused(t *testing.T) {
	srv := newTestMCPServer(nil)
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	ctx := ctxT(t)
	s, err := connectMCP(ctx, mcpConfig{Name: "calc", URL: hs.URL, reconnectBackoff: time.Hour}, "test")
	require.NoError(t, err)
	defer func() { _ = s.Close() }()
	add := mcpToolsByName(s)["add"]
	hs.Close()

	_, err = add.Run(ctx, agent.Invocation{ToolCallID: "call-1", Name: "add", Arguments: `{"a": 1, "b": 2}`})
	require.ErrorContains(t, err, "mcp server calc is lost and did not reconnect: mcp server calc: connect: ")
	require.ErrorContains(t, err, "connection refused")
	_, err = add.Run(ctx, agent.Invocation{ToolCallID: "call-2", Name: "add", Arguments: `{"a": 1, "b": 2}`})
	require.ErrorContains(t, err, "mcp server calc is lost: ")
	require.ErrorContains(t, err, "it is tried again in ")
}

// countedMCP connects to the stdio MCP server calc, this test binary as
// a child, with a call timeout of an hour. It returns the session, the
// file each start of the server appends its pid to (read it with
// mcpStarts), the time the session's clock stands at, and advance, which
// moves that clock on: the session tells time by it alone. The session is
// closed when t ends, if the test has not closed it.
func countedMCP(ctx context.Context, t *testing.T) (s *mcpSession, starts string, now time.Time, advance func(time.Duration)) {
	t.Helper()
	self, err := filepath.Abs(os.Args[0])
	require.NoError(t, err)
	starts = filepath.Join(t.TempDir(), "starts")
	cfg := mcpConfig{Name: "calc", Command: []string{self}, Env: map[string]string{envChild: "mcp", envMCPStarts: starts}, Timeout: "1h"}
	s, err = connectMCP(ctx, cfg, "test")
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	clock := time.Now()
	s.mu.Lock()
	s.now = func() time.Time { return clock } // read under s.mu
	s.mu.Unlock()
	advance = func(d time.Duration) {
		s.mu.Lock()
		clock = clock.Add(d)
		s.mu.Unlock()
	}
	return s, starts, clock, advance
}

// TestMCPCrashLoopBacksOff: a stdio MCP server that exits during every
// call (it crashes right after each handshake, as far as the node can
// tell) is backed off: the session a reconnect made, lost before it
// served a call, counts as a failed reconnect, so the call that lost it
// fails saying when the server is tried again, and a call during the
// backoff fails at once without starting a process; the backoff doubles
// with each such loss, and a session that served a call ends the row.
// A successful handshake used to reset the backoff, so such a server was
// started again at every call.
func TestMCPCrashLoopBacksOff(t *testing.T) {
	ctx := ctxT(t)
	s, starts, _, advance := countedMCP(ctx, t)
	tools := mcpToolsByName(s)
	exit := func(id string) error {
		_, err := tools["exit"].Run(ctx, agent.Invocation{ToolCallID: id, Name: "exit", Arguments: `{}`})
		return err
	}

	err := exit("call-1")
	require.ErrorContains(t, err, "mcp server calc: lost again 0s after it was reconnected, before it served a call: it is tried again in 1s")
	require.Len(t, mcpStarts(t, starts), 2, "started again once")

	_, err = callPid(ctx, t, tools["pid"], "call-2")
	require.ErrorContains(t, err, "mcp server calc is lost: mcp server calc: lost again 0s after it was reconnected")
	require.Regexp(t, `it is tried again in 1s \(at \d{4}-`, err.Error())
	require.Len(t, mcpStarts(t, starts), 2, "not started during the backoff")
	require.NoError(t, ctx.Err(), "failed at once, far below the call's timeout")

	advance(time.Second)
	require.ErrorContains(t, exit("call-3"), "it is tried again in 2s", "doubled: a failed reconnect in a row")
	require.Len(t, mcpStarts(t, starts), 3)
	advance(time.Second)
	_, err = callPid(ctx, t, tools["pid"], "call-4")
	require.ErrorContains(t, err, "it is tried again in 1s (at ", "still backed off")
	require.Len(t, mcpStarts(t, starts), 3)

	advance(time.Second)
	got, err := callPid(ctx, t, tools["pid"], "call-5")
	require.NoError(t, err, "after the backoff the server is started again")
	require.Equal(t, mcpStarts(t, starts)[3], got.Pid)
	// It served a call: the row ended, so its loss is reconnected at once
	// and the next crash waits 1s again, not 4s.
	require.ErrorContains(t, exit("call-6"), "it is tried again in 1s")
	require.Len(t, mcpStarts(t, starts), 5)
	require.EqualError(t, s.Close(), "exit status 3", "the last process exited, and was waited for")
}

// TestMCPSessionUpAWhileEndsTheBackoffRow: a session a reconnect made
// that stayed up mcpSessionSettled on the node's clock ends the row of
// failed reconnects even though it served no call: its loss is
// reconnected at once, and the next failure waits 1s; lost sooner, it
// counts as one more failure in the row, and the call fails at once.
func TestMCPSessionUpAWhileEndsTheBackoffRow(t *testing.T) {
	for name, tc := range map[string]struct {
		up     time.Duration
		starts int
		want   string
	}{
		"settled": {up: mcpSessionSettled, starts: 2, want: "it is tried again in 1s"},
		"not yet": {up: mcpSessionSettled - time.Second, starts: 1, want: "mcp server calc is lost: mcp server calc: lost again 29s after it was reconnected, before it served a call; it is tried again in 8s (at "},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := ctxT(t)
			s, starts, now, _ := countedMCP(ctx, t)
			// As if a reconnect after three failed ones in a row had made
			// the session, tc.up ago, and it had served no call since.
			s.mu.Lock()
			s.fresh, s.up, s.failures = true, now.Add(-tc.up), 3
			s.mu.Unlock()

			_, err := mcpToolsByName(s)["exit"].Run(ctx, agent.Invocation{ToolCallID: "call-1", Name: "exit", Arguments: `{}`})
			require.ErrorContains(t, err, tc.want)
			require.Len(t, mcpStarts(t, starts), tc.starts)
			require.EqualError(t, s.Close(), "exit status 3", "the last process exited, and was waited for")
		})
	}
}

// TestMCPCallTimeoutStartsAfterTheReconnect: a server's call timeout
// bounds each call made on a session, not the wait for a reconnect
// (bounded by connect_timeout): a call that finds its server lost and
// waits for a reconnect longer than the timeout is still made on the new
// session, with the whole timeout. The reconnect used to eat the call's
// time, and the call failed with a timeout although the server answered
// it at once.
func TestMCPCallTimeoutStartsAfterTheReconnect(t *testing.T) {
	self, err := filepath.Abs(os.Args[0])
	require.NoError(t, err)
	dir := t.TempDir()
	starts, slow := filepath.Join(dir, "starts"), filepath.Join(dir, "slow")
	ctx := ctxT(t)
	cfg := mcpConfig{Name: "calc", Command: []string{self}, Env: map[string]string{envChild: "mcp", envMCPStarts: starts, envMCPFail: slow, envMCPExitSecond: "1"}, Timeout: "1s", ConnectTimeout: "1h"}
	s, err := connectMCP(ctx, cfg, "test")
	require.NoError(t, err)
	defer func() { _ = s.Close() }()
	pid := mcpToolsByName(s)["pid"]
	first, err := callPid(ctx, t, pid, "call-1")
	require.NoError(t, err)
	// The server started again answers its handshake only when the test
	// lets it, after longer than the call's timeout.
	require.NoError(t, os.WriteFile(slow, []byte("gate"), 0o600))
	type answer struct {
		out string
		err error
	}
	done := make(chan answer, 1)
	go func() { // its process exits: reconnected
		out, err := pid.Run(ctx, agent.Invocation{ToolCallID: "call-2", Name: "pid", Arguments: `{}`})
		done <- answer{out, err}
	}()
	var gated []byte
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(slow + ".gated")
		gated = b
		return err == nil && len(b) > 0
	}, 30*time.Second, 10*time.Millisecond, "the server started again waits at its gate")
	require.Never(t, func() bool { return len(done) > 0 }, 1500*time.Millisecond, 50*time.Millisecond,
		"the call waits for the reconnect past its 1s timeout")
	gatedPid, err := strconv.Atoi(string(gated))
	require.NoError(t, err)
	require.NoError(t, syscall.Kill(gatedPid, syscall.SIGUSR1))
	var got answer
	select {
	case got = <-done:
	case <-ctx.Done():
		t.Fatal("the call did not end")
	}
	require.NoError(t, got.err, "the call's timeout starts on the new session")
	var second pidCallOut
	require.NoError(t, json.Unmarshal([]byte(got.out), &second))
	require.NotEqual(t, first.Pid, second.Pid)
	require.Equal(t, gatedPid, second.Pid)
	require.Equal(t, "call-2", second.ToolCallID)
	require.Len(t, mcpStarts(t, starts), 2, "started again once")
}

// TestMCPToolsListedAfterAReconnectAreNotOffered: the tools of a server
// are those it listed at start. One it lists for the first time after a
// reconnect is not offered, and the node's stderr says so, naming it; a
// tool it still lists goes on being called; one it no longer lists fails,
// naming it as the model called it (with the prefix) and as the server
// listed it.
func TestMCPToolsListedAfterAReconnectAreNotOffered(t *testing.T) {
	var handler atomic.Pointer[http.Handler]
	serve := func(srv *mcp.Server) {
		var h http.Handler = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
		handler.Store(&h)
	}
	serve(newTestMCPServer(nil))
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { (*handler.Load()).ServeHTTP(w, r) }))
	defer hs.Close()
	ctx := ctxT(t)
	stderr := &lockedBuffer{}
	s, err := connectMCP(ctx, mcpConfig{Name: "calc", URL: hs.URL, Prefix: "calc_", stderr: stderr}, "test")
	require.NoError(t, err)
	defer func() { _ = s.Close() }()
	add := mcpToolsByName(s)["calc_add"]

	// Restarted (its sessions are gone), with two tools more.
	srv := newTestMCPServer(nil)
	for _, name := range []string{"mul", "div"} {
		mcp.AddTool(srv, &mcp.Tool{Name: name, Description: name}, func(context.Context, *mcp.CallToolRequest, addIn) (*mcp.CallToolResult, addOut, error) {
			return nil, addOut{}, nil
		})
	}
	serve(srv)
	out, err := add.Run(ctx, agent.Invocation{ToolCallID: "call-1", Name: "calc_add", Arguments: `{"a": 1, "b": 2}`})
	require.NoError(t, err)
	require.JSONEq(t, `{"sum": 3, "tool_call_id": "call-1"}`, out)
	require.Contains(t, stderr.String(), "mcp server calc: lists tools it did not list at start, not offered until the node restarts: div, mul\n")
	require.Equal(t, []string{"calc_add"}, slices.Collect(maps.Keys(mcpToolsByName(s))), "the tools listed at start")

	serve(mcp.NewServer(&mcp.Implementation{Name: "empty", Version: "1"}, nil)) // restarted again, without tools
	_, err = add.Run(ctx, agent.Invocation{ToolCallID: "call-2", Name: "calc_add", Arguments: `{"a": 1, "b": 2}`})
	require.EqualError(t, err, "tool calc_add (mcp tool add): mcp server calc no longer lists the tool since it was reconnected",
		"named as the model called it and as the server listed it")
}
