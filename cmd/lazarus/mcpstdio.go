package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// mcpStopGrace is how long closing a stdio MCP server waits after closing
// its stdin for it to exit before its process group gets SIGTERM, and
// after that before it gets SIGKILL (the SDK's CommandTransport waits as
// long, but signals the server's process only).
const mcpStopGrace = 5 * time.Second

// mcpPollGroup is how often closing a stdio MCP server checks whether its
// process group is gone: the processes the server started are not the
// node's children, so it cannot wait for them.
const mcpPollGroup = 20 * time.Millisecond

// stdioTransport runs cmd as a stdio MCP server in a process group of its
// own, so that closing the connection ends what the server started too
// (a shell's children), not the server's process only.
type stdioTransport struct {
	cmd *exec.Cmd
	// grace is mcpStopGrace unless set.
	grace time.Duration
	// stderr receives the server's stderr, each line prefixed with prefix
	// (nil: discarded).
	stderr io.Writer
	prefix string
	// proc is the server's process, once Connect has started it.
	proc *stdioProc
}

// Connect starts the command in a new process group and connects to it
// over its stdin and stdout.
func (t *stdioTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	stdout, err := t.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stdin, err := t.cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if t.cmd.SysProcAttr == nil {
		t.cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	t.cmd.SysProcAttr.Setpgid = true
	// A pipe of its own, not exec's: Wait would wait for its copy, so for
	// every process of the group holding it, not for the server only.
	errR, errW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	t.cmd.Stderr = errW
	err = t.cmd.Start()
	_ = errW.Close() // the server's copy is the server's
	if err != nil {
		_ = errR.Close()
		return nil, err
	}
	p := &stdioProc{cmd: t.cmd, stdin: stdin, grace: t.grace, exited: make(chan struct{}), stderr: errR, copied: make(chan struct{})}
	if p.grace <= 0 {
		p.grace = mcpStopGrace
	}
	t.proc = p
	go func() {
		defer close(p.copied)
		w := t.stderr
		if w == nil {
			w = io.Discard
		}
		copyLines(w, t.prefix, errR)
	}()
	go func() {
		p.waitErr = t.cmd.Wait()
		close(p.exited)
	}()
	// The connection is closed by closing stdin (stdioProc.Close), not
	// stdout, which Wait closes once the process has exited.
	return (&mcp.IOTransport{Reader: io.NopCloser(stdout), Writer: p}).Connect(ctx)
}

// stdioProc is the stdin of a running stdio MCP server, whose Close ends
// the server and its process group.
type stdioProc struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	grace   time.Duration
	exited  chan struct{} // closed once Wait has returned, with waitErr
	waitErr error
	stderr  *os.File      // the read end of the server's stderr
	copied  chan struct{} // closed once stderr is copied to its end

	once     sync.Once
	closeErr error
}

func (p *stdioProc) Write(b []byte) (int, error) { return p.stdin.Write(b) }

// Close ends the server, once: it closes its stdin and waits at most grace
// for it to exit; then its process group (the server, if it is still
// running, and every process it started that is still in the group) gets
// SIGTERM, and SIGKILL if anything of it is left after grace more. It
// returns the server's exit error (nil for status 0) once the server's
// process is waited for, so no zombie is left, and what the group wrote
// to stderr is copied (at most grace more), or an error if the server
// survives SIGKILL for grace.
func (p *stdioProc) Close() error {
	p.once.Do(func() { p.closeErr = p.stop() })
	return p.closeErr
}

func (p *stdioProc) stop() error {
	_ = p.stdin.Close()
	timer := time.NewTimer(p.grace)
	defer timer.Stop()
	select {
	case <-p.exited:
	case <-timer.C:
	}
	// The group's id is the server's pid, which is not reused while the
	// group has a process (nor while the server is not waited for).
	pgid := p.cmd.Process.Pid
	if syscall.Kill(-pgid, syscall.SIGTERM) == nil && !p.groupGone(pgid) {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
	timer.Reset(p.grace)
	select {
	case <-p.exited:
	case <-timer.C:
		_ = p.stderr.Close()
		return fmt.Errorf("pid %d: %w", pgid, errUnresponsive)
	}
	// What the group wrote is copied, unless a process that left it
	// still holds the pipe.
	timer.Reset(p.grace)
	select {
	case <-p.copied:
	case <-timer.C:
	}
	_ = p.stderr.Close()
	return p.waitErr
}

// copyLines copies r to w until r ends, each line (its last too, ended
// with a newline if it had none) in one Write, prefix before it.
func copyLines(w io.Writer, prefix string, r io.Reader) {
	br := bufio.NewReader(r)
	start := true
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			b := make([]byte, 0, len(prefix)+len(line)+1)
			if start {
				b = append(b, prefix...)
			}
			b = append(b, line...)
			start = line[len(line)-1] == '\n'
			if err != nil && !errors.Is(err, bufio.ErrBufferFull) && !start {
				b = append(b, '\n')
			}
			_, _ = w.Write(b)
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return
		}
	}
}

// errUnresponsive is a stdio MCP server's process still running after
// SIGKILL.
var errUnresponsive = errors.New("the MCP server's process survived SIGKILL")

// groupGone reports, within grace, whether the server has exited and its
// process group pgid has no process left.
func (p *stdioProc) groupGone(pgid int) bool {
	deadline := time.NewTimer(p.grace)
	defer deadline.Stop()
	tick := time.NewTicker(mcpPollGroup)
	defer tick.Stop()
	for {
		select {
		case <-p.exited:
			if errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH) {
				return true
			}
		default:
		}
		select {
		case <-deadline.C:
			return false
		case <-tick.C:
		}
	}
}
