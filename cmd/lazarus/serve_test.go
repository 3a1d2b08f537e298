package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/pebblejournal"
	"github.com/lazarusrt/lazarus/messages"
)

// envChild makes the test binary, re-executed, be something else: "cli"
// runs the command line of its arguments (so 'serve' runs as a real
// process), "mcp" an MCP server on stdin/stdout.
const envChild = "LAZARUS_TEST_CHILD"

// envMCPStarted names a file the "mcp" child writes when it starts.
const envMCPStarted = "LAZARUS_TEST_MCP_STARTED"

// envMCPStderr is what the "mcp" child writes to its stderr when it starts.
const envMCPStderr = "LAZARUS_TEST_MCP_STDERR"

// envMCPFIFORead and envMCPFIFOWrite name a FIFO the "mcp" child reads,
// or writes, once its stdin has ended, before it exits.
const (
	envMCPFIFORead  = "LAZARUS_TEST_MCP_FIFO_READ"
	envMCPFIFOWrite = "LAZARUS_TEST_MCP_FIFO_WRITE"
)

// envMCPStarts names a file the "mcp" child appends its pid to, a line,
// when it starts; envMCPFail names a file whose presence makes it fail to
// start (exit 1), never answer if it holds "hang", or start only at
// SIGUSR1 if it holds "gate" (writing its pid to the file's name plus
// ".gated" once it waits for the signal); envMCPExitSecond
// makes its tool pid exit at its second call, unanswered.
const (
	envMCPStarts     = "LAZARUS_TEST_MCP_STARTS"
	envMCPFail       = "LAZARUS_TEST_MCP_FAIL"
	envMCPExitSecond = "LAZARUS_TEST_MCP_EXIT_SECOND"
)

// runChild runs the re-executed test binary's role, if it has one, and
// exits; TestMain calls it first.
func runChild() {
	switch os.Getenv(envChild) {
	case "cli":
		os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	case "cli-stall-export":
		// export, which after its first page says so, waits for its
		// context to end (the first signal), says so, and never goes on.
		testHookExportPage = func(ctx context.Context) {
			fmt.Fprintln(os.Stderr, "hook: a page exported")
			<-ctx.Done()
			fmt.Fprintln(os.Stderr, "hook: context ended")
			select {}
		}
		os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	case "cli-wait-export":
		// export, which after its first page says so and waits for its
		// context to end (the first signal) before it goes on.
		testHookExportPage = func(ctx context.Context) {
			fmt.Fprintln(os.Stderr, "hook: a page exported")
			<-ctx.Done()
		}
		os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	case "cli-wait-tail":
		// tail, which after the first page a poll printed says so and
		// waits for its context to end (the first signal) before the poll
		// goes on.
		testHookTailPage = func(ctx context.Context) {
			fmt.Fprintln(os.Stderr, "hook: a page printed")
			<-ctx.Done()
			testHookTailPage = nil
		}
		os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	case "mcp-old":
		// A server that answers initialize with a protocol version no
		// client supports, then waits for its stdin to close and says so
		// in the file $LAZARUS_TEST_MCP_CLOSED.
		in := bufio.NewReader(os.Stdin)
		line, err := in.ReadBytes('\n')
		if err != nil {
			os.Exit(1)
		}
		var req struct {
			ID json.RawMessage `json:"id"`
		}
		if json.Unmarshal(line, &req) != nil {
			os.Exit(1)
		}
		fmt.Printf(`{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"1999-01-01","capabilities":{},"serverInfo":{"name":"old","version":"1"}}}`+"\n", req.ID)
		_, _ = io.Copy(io.Discard, in)
		_ = os.WriteFile(os.Getenv("LAZARUS_TEST_MCP_CLOSED"), []byte("closed"), 0o600)
		os.Exit(0)
	case "mcp-spawn":
		// An MCP server that starts a process of its own and waits for it,
		// as sh -c 'server; sleep 100' does: its tool grandchild gives that
		// process's pid. Neither the end of its stdin nor SIGTERM ends it
		// before that process has exited (and been waited for).
		sleeper := exec.Command(os.Args[0])
		sleeper.Env = append(os.Environ(), envChild+"=sleep")
		if err := sleeper.Start(); err != nil {
			fmt.Fprintln(os.Stderr, "mcp-spawn:", err)
			os.Exit(1)
		}
		signal.Notify(make(chan os.Signal, 1), syscall.SIGTERM)
		s := mcp.NewServer(&mcp.Implementation{Name: "spawn", Version: "1"}, nil)
		mcp.AddTool(s, &mcp.Tool{Name: "grandchild", Description: "the pid of the process the server started"},
			func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, pidOut, error) {
				return nil, pidOut{Pid: sleeper.Process.Pid}, nil
			})
		_ = s.Run(context.Background(), &mcp.StdioTransport{})
		_ = sleeper.Wait()
		os.Exit(0)
	case "sleep":
		// A process that does nothing until a signal ends it.
		waitForSignal()
		os.Exit(0)
	case "mcp":
		if f := os.Getenv(envMCPStarted); f != "" {
			_ = os.WriteFile(f, []byte("started"), 0o600)
		}
		if f := os.Getenv(envMCPStarts); f != "" {
			log, err := os.OpenFile(f, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
			if err != nil {
				os.Exit(1)
			}
			fmt.Fprintln(log, os.Getpid())
			_ = log.Close()
		}
		if f := os.Getenv(envMCPFail); f != "" {
			if b, err := os.ReadFile(f); err == nil {
				switch string(b) {
				case "hang":
					waitForSignal()
					os.Exit(1)
				case "gate":
					// A server slow to start: it goes on at SIGUSR1, and
					// says it waits for it in the file ".gated" beside f.
					goOn := make(chan os.Signal, 1)
					signal.Notify(goOn, syscall.SIGUSR1)
					if os.WriteFile(f+".gated", []byte(strconv.Itoa(os.Getpid())), 0o600) != nil {
						os.Exit(1)
					}
					<-goOn
				default:
					os.Exit(1)
				}
			}
		}
		fmt.Fprint(os.Stderr, os.Getenv(envMCPStderr))
		s := newTestMCPServer(nil)
		var calls atomic.Int32 // its handlers run concurrently
		mcp.AddTool(s, &mcp.Tool{Name: "pid", Description: "the server's pid and the tool_call_id it was given"},
			func(_ context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, pidCallOut, error) {
				if calls.Add(1) == 2 && os.Getenv(envMCPExitSecond) != "" {
					os.Exit(3)
				}
				id, _ := req.Params.Meta[mcpToolCallIDKey].(string)
				return nil, pidCallOut{Pid: os.Getpid(), ToolCallID: id}, nil
			})
		mcp.AddTool(s, &mcp.Tool{Name: "cwd", Description: "the server's working directory"},
			func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, cwdOut, error) {
				dir, err := os.Getwd()
				return nil, cwdOut{Dir: dir}, err
			})
		mcp.AddTool(s, &mcp.Tool{Name: "exit", Description: "ends the server's process"},
			func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, cwdOut, error) {
				os.Exit(3)
				return nil, cwdOut{}, nil
			})
		mcp.AddTool(s, &mcp.Tool{Name: "getenv", Description: "a variable of the server's environment"},
			func(_ context.Context, _ *mcp.CallToolRequest, in getenvIn) (*mcp.CallToolResult, getenvOut, error) {
				v, ok := os.LookupEnv(in.Name)
				return nil, getenvOut{Value: v, Set: ok}, nil
			})
		err := s.Run(context.Background(), &mcp.StdioTransport{})
		// Its client closing its stdin ends it: the SDK says so as io.EOF
		// or, depending on where the read was, as "server is closing: EOF"
		// with the EOF not wrapped.
		if err != nil && !errors.Is(err, io.EOF) && !strings.HasSuffix(err.Error(), "EOF") {
			fmt.Fprintln(os.Stderr, "mcp child:", err)
			os.Exit(1)
		}
		// Once its stdin has ended, a server given a FIFO waits for its
		// peer's to end too: the one reading it until the one writing it
		// opens it, and the other way round.
		if f := os.Getenv(envMCPFIFORead); f != "" {
			b, err := os.ReadFile(f)
			if err != nil || string(b) != "peer" {
				os.Exit(1)
			}
		}
		if f := os.Getenv(envMCPFIFOWrite); f != "" {
			if os.WriteFile(f, []byte("peer"), 0) != nil {
				os.Exit(1)
			}
		}
		os.Exit(0)
	}
}

type addIn struct {
	A float64 `json:"a" jsonschema:"the first addend"`
	B float64 `json:"b" jsonschema:"the second addend"`
}

type addOut struct {
	Sum        float64 `json:"sum"`
	ToolCallID string  `json:"tool_call_id"`
}

type getenvIn struct {
	Name string `json:"name"`
}

type getenvOut struct {
	Value string `json:"value"`
	Set   bool   `json:"set"`
}

type pidOut struct {
	Pid int `json:"pid"`
}

type pidCallOut struct {
	Pid        int    `json:"pid"`
	ToolCallID string `json:"tool_call_id"`
}

type cwdOut struct {
	Dir string `json:"dir"`
}

// newTestMCPServer is an MCP server with one tool, add, which answers the
// sum and the tool_call_id hint it was given (and reports that to seen).
func newTestMCPServer(seen chan<- string) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "test-mcp", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "add", Description: "adds two numbers"},
		func(_ context.Context, req *mcp.CallToolRequest, in addIn) (*mcp.CallToolResult, addOut, error) {
			id, _ := req.Params.Meta[mcpToolCallIDKey].(string)
			if seen != nil {
				seen <- id
			}
			return nil, addOut{Sum: in.A + in.B, ToolCallID: id}, nil
		})
	return s
}

// node is a 'lazarus serve' child process.
type serveProc struct {
	cmd    *exec.Cmd
	url    string
	stderr *lockedBuffer
	exited chan error
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startServe starts 'lazarus serve' with args in a child process (the test
// binary re-executed) and returns once it says where it listens.
func startServe(t *testing.T, tokens string, args ...string) *serveProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"serve", "--listen", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(os.Environ(), envChild+"=cli", envTokens+"="+tokens)
	pipe, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	p := &serveProc{cmd: cmd, stderr: &lockedBuffer{}, exited: make(chan error, 1)}
	listening := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(p.stderr, line)
			if addr, ok := strings.CutPrefix(line, "lazarus serve: listening on "); ok {
				listening <- addr
			}
		}
		p.exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
		}
	})
	select {
	case p.url = <-listening:
	case err := <-p.exited:
		t.Fatalf("serve exited before listening: %v\n%s", err, p.stderr)
	case <-time.After(wait):
		t.Fatalf("serve did not listen within %s:\n%s", wait, p.stderr)
	}
	return p
}

// stop sends SIGTERM and returns the exit status.
func (p *serveProc) stop(t *testing.T) int {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-p.exited:
	case <-time.After(wait):
		t.Fatalf("serve did not exit within %s after SIGTERM:\n%s", wait, p.stderr)
	}
	return p.cmd.ProcessState.ExitCode()
}

// cliCtx runs the CLI in this process with ctx.
func cliCtx(ctx context.Context, args ...string) result {
	var out, errb bytes.Buffer
	code := newCLI(strings.NewReader(""), &out, &errb).run(ctx, args)
	return result{out.String(), errb.String(), code}
}

var sentLine = regexp.MustCompile(`^sent seq (\d+) to conversation (\S+)\n$`)

const testTokens = `{"op-token": {"user": "ops", "roles": ["operator"]},
	"alice-token": {"user": "alice"},
	"bob-token": {"user": "bob", "roles": ["approver"]}}`

// TestServeCLIAndSIGTERM: 'lazarus serve' as a child process, used by the
// CLI's --server mode: a message whose turn calls a human tool, the call
// listed by an approver, refused to its requester (the tool needs the
// role), answered by the approver, stale the second time, the turn
// followed by tail over the event stream to its end, and shown. Then sends
// keep coming while SIGTERM arrives: the process exits 0, and every
// acknowledged message is in the store, read from the directory
// afterwards.
func TestServeCLIAndSIGTERM(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(t.TempDir(), "node.json")
	require.NoError(t, os.WriteFile(cfg, []byte(`{
		"dir": `+jsonString(filepath.Join(dir, "store"))+`,
		"settings": {"system_prompt": "You are a test."},
		"shutdown_timeout": "1h",
		"human_tools": [{
			"name": "approve", "description": "a person approves a refund",
			"parameters": {"type": "object", "properties": {"amount": {"type": "number"}}},
			"prompt": "Refund {{.amount}} euros?", "timeout": "1h",
			"answered_by": {"roles": ["approver"]}
		}]
	}`), 0o600))
	p := startServe(t, testTokens, "--config", cfg)
	ctx := ctxT(t)
	as := func(token string, args ...string) result {
		return cliCtx(ctx, append(args, "--server", p.url, "--token", token)...)
	}

	r := as("wrong-token", "conversations")
	require.Equal(t, exitError, r.code)
	require.Contains(t, r.stderr, "refused the credentials")
	r = cliCtx(ctx, "--server", p.url, "export", "--all")
	require.Equal(t, exitUsage, r.code, r.stderr)
	r = cliCtx(ctx, "send", "hello", "--dir", dir)
	require.Equal(t, exitUsage, r.code, r.stderr)
	require.Contains(t, r.stderr, "flag provided but not defined: -dir")
	r = cliCtx(ctx, "--dir", dir, "send", "hello")
	require.Equal(t, exitUsage, r.code, r.stderr)
	require.Contains(t, r.stderr, "works on a live node only")

	r = as("alice-token", "send", `/call approve {"amount": 12}`)
	requireOK(t, r)
	m := sentLine.FindStringSubmatch(r.stdout)
	require.NotNil(t, m, r.stdout)
	require.Equal(t, "1", m[1])
	conv := m[2]

	// tail follows the turn over SSE: 7 events in all (user_msg,
	// assistant_msg, tool_call, suspension, resolution, tool_result,
	// assistant_msg).
	tailDone := make(chan result, 1)
	go func() { tailDone <- as("alice-token", "tail", conv, "--from", "0", "--max", "7") }()

	var pending []pendingJSON
	require.Eventually(t, func() bool {
		r := as("bob-token", "pending", "--json")
		var doc struct {
			Pending []pendingJSON `json:"pending"`
		}
		if r.code != exitOK || json.Unmarshal([]byte(r.stdout), &doc) != nil || len(doc.Pending) == 0 {
			return false
		}
		pending = doc.Pending
		return true
	}, wait, 10*time.Millisecond)
	require.Len(t, pending, 1)
	require.Equal(t, "Refund 12 euros?", pending[0].Prompt)
	require.Equal(t, conv, pending[0].ConversationID)
	call := pending[0].ToolCallID
	r = as("bob-token", "pending")
	requireOK(t, r)
	require.Contains(t, r.stdout, call)
	require.Contains(t, r.stdout, `"Refund 12 euros?"`)

	r = as("alice-token", "resolve", call, "--result", `"yes"`)
	require.Equal(t, exitError, r.code, r.stderr)
	require.Contains(t, r.stderr, "forbidden")
	r = as("bob-token", "resolve", call, "--result", `{"approved": true}`, "--as", "mallory")
	require.Equal(t, exitUsage, r.code, r.stderr)
	r = as("bob-token", "resolve", call, "--result", `{"approved": true}`)
	requireOK(t, r)
	require.Contains(t, r.stdout, "resolved "+call+" by bob")
	r = as("bob-token", "resolve", call, "--result", `{"approved": true}`)
	require.Equal(t, exitStale, r.code, r.stderr)
	require.Equal(t, "stale\n", r.stdout)

	var tailed result
	select {
	case tailed = <-tailDone:
	case <-ctx.Done():
		t.Fatal("tail did not see the turn end")
	}
	requireOK(t, tailed)
	lines := strings.Split(strings.TrimSuffix(tailed.stdout, "\n"), "\n")
	require.Len(t, lines, 7, tailed.stdout)
	require.Contains(t, lines[0], "user_msg")
	require.Contains(t, lines[4], "resolution")
	require.Contains(t, lines[6], `approve answered: {\"approved\":true}`)

	r = as("alice-token", "show", conv)
	requireOK(t, r)
	require.Equal(t, tailed.stdout, strings.SplitN(r.stdout, "\n", 2)[1], "show prints what tail printed, after the metadata")
	r = as("op-token", "conversations")
	requireOK(t, r)
	require.Regexp(t, regexp.MustCompile(regexp.QuoteMeta(conv)+`\s+idle\s+7\s+0`), r.stdout)
	r = as("op-token", "stats", "--json")
	requireOK(t, r)
	var st statsJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st))
	require.Equal(t, 1, st.Conversations)
	require.EqualValues(t, 7, st.Events)
	r = as("bob-token", "show", conv)
	require.Equal(t, exitNotFound, r.code, "a stranger does not see the conversation: %s", r.stderr)

	// delete through the node: refused without --yes, then done.
	r = as("alice-token", "send", "to be deleted")
	requireOK(t, r)
	doomed := sentLine.FindStringSubmatch(r.stdout)[2]
	r = as("alice-token", "delete", doomed)
	require.Equal(t, exitUsage, r.code, r.stderr)
	require.Contains(t, r.stdout, "would delete conversation "+doomed)
	r = as("alice-token", "delete", doomed, "--yes")
	requireOK(t, r)
	require.Contains(t, r.stdout, "deleted conversation "+doomed)
	r = as("alice-token", "show", doomed)
	require.Equal(t, exitNotFound, r.code, r.stderr)

	// A tail that follows the stream when SIGTERM comes: the node cuts the
	// stream rather than waiting for it (shutdown_timeout is longer than
	// the test's bound), and tail ends.
	var follower lockedBuffer
	followed := make(chan int, 1)
	go func() {
		c := newCLI(strings.NewReader(""), &follower, io.Discard)
		followed <- c.run(ctx, []string{"tail", conv, "--from", "0", "--server", p.url, "--token", "alice-token"})
	}()
	require.Eventually(t, func() bool { return strings.Count(follower.String(), "\n") == 7 }, wait, 10*time.Millisecond)

	// Sends while SIGTERM arrives: each acknowledged one must be durable.
	type ack struct {
		conv string
		seq  uint64
		text string
	}
	var (
		mu    sync.Mutex
		acked []ack
		wg    sync.WaitGroup
	)
	first := make(chan struct{}, 4)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			to := []string{}
			if w == 0 {
				to = []string{"--to", conv} // the old conversation too
			}
			for i := 0; ; i++ {
				text := fmt.Sprintf("message %d of sender %d", i, w)
				r := as("alice-token", append([]string{"send", text}, to...)...)
				if r.code != exitOK {
					return // the node is going away
				}
				m := sentLine.FindStringSubmatch(r.stdout)
				if m == nil {
					t.Errorf("send printed %q", r.stdout)
					return
				}
				var seq uint64
				fmt.Sscan(m[1], &seq)
				mu.Lock()
				acked = append(acked, ack{m[2], seq, text})
				mu.Unlock()
				if i == 0 {
					first <- struct{}{}
				}
			}
		}()
	}
	for range 4 {
		select {
		case <-first:
		case <-ctx.Done():
			t.Fatal("the senders got no acknowledgement")
		}
	}
	require.Equal(t, exitOK, p.stop(t), p.stderr.String())
	wg.Wait()
	select {
	case code := <-followed:
		require.Equal(t, exitError, code, "tail says the node went away")
	case <-ctx.Done():
		t.Fatal("tail did not end with the node")
	}
	require.Contains(t, p.stderr.String(), "lazarus serve: store closed")
	for _, tok := range []string{"op-token", "alice-token", "bob-token"} {
		require.NotContains(t, p.stderr.String(), tok, "tokens are never printed")
	}

	st2, err := pebblejournal.Open(filepath.Join(dir, "store"), pebblejournal.Options{})
	require.NoError(t, err)
	defer st2.Close()
	require.GreaterOrEqual(t, len(acked), 4)
	t.Logf("%d sends acknowledged, checked in the store", len(acked))
	for _, a := range acked {
		evs, err := st2.Events(ctx, a.conv, journal.EventQuery{After: a.seq - 1, Before: a.seq + 1})
		require.NoError(t, err)
		require.Len(t, evs, 1, "acknowledged seq %d of %s", a.seq, a.conv)
		require.Equal(t, a.text, evs[0].GetUserMsg().GetContent()[0].GetText())
	}
	row, err := st2.ToolCall(ctx, call)
	require.NoError(t, err)
	require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED, row.GetStatus())
	require.Equal(t, "bob", row.GetResolver().GetUserId())
}

// TestServeMCPTools: server tools from two MCP servers, one a child
// process over stdio, one over streamable HTTP; a conversation whose
// (demo) model calls each gets its result in the log, and the call
// carried the runtime's tool_call_id as its idempotency hint.
func TestServeMCPTools(t *testing.T) {
	seen := make(chan string, 8)
	web := newTestMCPServer(seen)
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return web }, nil))
	defer hs.Close()
	cfg := filepath.Join(t.TempDir(), "node.json")
	require.NoError(t, os.WriteFile(cfg, []byte(`{
		"dir": `+jsonString(filepath.Join(t.TempDir(), "store"))+`,
		"mcp_servers": [
			{"name": "calc", "command": [`+jsonString(os.Args[0])+`], "env": {"`+envChild+`": "mcp"}},
			{"name": "web", "url": `+jsonString(hs.URL)+`, "prefix": "web_", "timeout": "20s"}
		]
	}`), 0o600))
	p := startServe(t, testTokens, "--config", cfg)
	require.Contains(t, p.stderr.String(), "lazarus serve: tool add: server (mcp)")
	require.Contains(t, p.stderr.String(), "lazarus serve: tool web_add: server (mcp)")
	ctx := ctxT(t)
	as := func(args ...string) result {
		return cliCtx(ctx, append(args, "--server", p.url, "--token", "alice-token")...)
	}

	// result waits for the conversation's tool result and returns its call
	// id and content.
	result := func(conv string) (id, content string) {
		require.Eventually(t, func() bool {
			r := as("show", conv, "--json")
			var doc struct {
				Events []struct {
					ToolResult *struct {
						ToolCallID string `json:"tool_call_id"`
						Outcome    struct {
							Content string `json:"content"`
						} `json:"outcome"`
					} `json:"tool_result"`
				} `json:"events"`
			}
			if r.code != exitOK || json.Unmarshal([]byte(r.stdout), &doc) != nil {
				return false
			}
			for _, ev := range doc.Events {
				if ev.ToolResult != nil {
					id, content = ev.ToolResult.ToolCallID, ev.ToolResult.Outcome.Content
					return true
				}
			}
			return false
		}, wait, 10*time.Millisecond)
		return id, content
	}

	r := as("send", `/call add {"a": 1, "b": 2}`)
	requireOK(t, r)
	stdio := sentLine.FindStringSubmatch(r.stdout)[2]
	id, content := result(stdio)
	require.JSONEq(t, `{"sum": 3, "tool_call_id": `+jsonString(id)+`}`, content)

	r = as("send", `/call web_add {"a": 3, "b": 4}`)
	requireOK(t, r)
	overHTTP := sentLine.FindStringSubmatch(r.stdout)[2]
	id, content = result(overHTTP)
	require.JSONEq(t, `{"sum": 7, "tool_call_id": `+jsonString(id)+`}`, content)
	require.Equal(t, id, <-seen, "the MCP server got the tool_call_id in _meta")

	// The stdio server did not inherit the node's tokens variable.
	r = as("send", `/call getenv {"name": "`+envTokens+`"}`)
	requireOK(t, r)
	_, content = result(sentLine.FindStringSubmatch(r.stdout)[2])
	require.JSONEq(t, `{"value": "", "set": false}`, content)

	// The model's next answer quotes the result.
	require.Eventually(t, func() bool {
		r := as("show", overHTTP)
		return r.code == exitOK && strings.Contains(r.stdout, "web_add answered:")
	}, wait, 10*time.Millisecond)
	require.Equal(t, exitOK, p.stop(t), p.stderr.String())
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// TestServeSecondSignalForcesExit: 'lazarus serve' as a child process,
// stopping gracefully after SIGTERM while a request is in flight (its body
// still being read, shutdown_timeout an hour), exits at once on a second
// signal (SIGINT here) with status 7 and says so on stderr: the request
// gets no answer and the node never says it closed the store.
func TestServeSecondSignalForcesExit(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "node.json")
	require.NoError(t, os.WriteFile(cfg, []byte(`{
		"dir": `+jsonString(filepath.Join(t.TempDir(), "store"))+`,
		"shutdown_timeout": "1h", "read_timeout": "1h"
	}`), 0o600))
	p := startServe(t, testTokens, "--config", cfg)
	addr := strings.TrimPrefix(p.url, "http://")

	// A request in flight: its handler reads a body that never comes in
	// full. "100 Continue" shows the handler has begun reading it.
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer conn.Close()
	_, err = fmt.Fprintf(conn, "POST /v1/conversations HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer alice-token\r\n"+
		"Content-Type: application/json\r\nContent-Length: 100\r\nExpect: 100-continue\r\n\r\n", addr)
	require.NoError(t, err)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(wait)))
	br := bufio.NewReader(conn)
	status, err := br.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "HTTP/1.1 100 Continue\r\n", status)
	blank, err := br.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "\r\n", blank)

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.Eventually(t, func() bool { return strings.Contains(p.stderr.String(), "lazarus serve: shutting down") },
		wait, 10*time.Millisecond)
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGINT))
	select {
	case <-p.exited:
	case <-time.After(wait):
		t.Fatalf("a second signal did not end serve within %s:\n%s", wait, p.stderr)
	}
	require.Equal(t, exitForced, p.cmd.ProcessState.ExitCode(), p.stderr.String())
	require.Equal(t, 7, exitForced, "the package doc gives 7")
	require.Contains(t, p.stderr.String(), "lazarus serve: interrupt again, exiting now")
	require.NotContains(t, p.stderr.String(), "store closed", "the graceful stop did not finish")
	rest, err := io.ReadAll(br)
	require.NoError(t, err, "the connection ends with the process")
	require.Empty(t, string(rest), "the request in flight gets no answer")
}

// waitForSignal blocks a helper process until SIGTERM or SIGINT (SIGKILL
// ends it anyway): a process that does nothing until it is ended.
func waitForSignal() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
}
