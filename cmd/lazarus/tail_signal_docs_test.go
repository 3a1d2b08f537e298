package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDocsTailStopsCleanlyOnSIGTERM: 'lazarus tail' as a child process
// stops on a first SIGTERM cleanly, status 0 with nothing on stderr
// (README "Run a node": the other commands stop on a first signal too,
// tail cleanly, status 0), whether it is waiting for its next poll or
// in the middle of its first one (held after the first page it printed,
// as a long log or a slow disk would: it used to report the cancelled
// read as an interruption, status 8).
func TestDocsTailStopsCleanlyOnSIGTERM(t *testing.T) {
	f := newFixture(t)
	t.Run("waiting for its next poll", func(t *testing.T) {
		p := startCLI(t, "cli", "tail", "finished", "--dir", f.dir, "--interval", "1h")
		for range 5 { // the fixture's conversation holds five events
			line, err := p.stdout.ReadString('\n')
			require.NoError(t, err, "stderr: %s", p.stderr)
			require.NotEmpty(t, strings.TrimSpace(line))
		}
		require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
		require.Equal(t, exitOK, p.wait(t), p.stderr.String())
		require.Empty(t, p.stderr.String())
	})
	t.Run("in its first poll", func(t *testing.T) {
		p := startCLI(t, "cli-wait-tail", "tail", "finished", "--dir", f.dir, "--interval", "1h")
		require.Eventually(t, func() bool { return strings.Contains(p.stderr.String(), "hook: a page printed") },
			wait, 10*time.Millisecond)
		require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
		require.Equal(t, exitOK, p.wait(t), p.stderr.String())
		require.Equal(t, "hook: a page printed\n", p.stderr.String(), "nothing but the hook's line on stderr")
	})
}

// TestDocsTailServerStopsCleanlyOnSIGTERM: 'lazarus tail --server' as a
// child process, interrupted while the node has not yet answered its
// first request, stops cleanly too: status 0, nothing on stderr.
func TestDocsTailServerStopsCleanlyOnSIGTERM(t *testing.T) {
	asked := make(chan struct{}, 1)
	node := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case asked <- struct{}{}:
		default:
		}
		<-r.Context().Done() // never answers
	}))
	defer node.Close()
	defer node.CloseClientConnections()
	p := startCLI(t, "cli", "tail", "c-1", "--server", node.URL, "--token", "alice-token")
	select {
	case <-asked:
	case err := <-p.exited:
		p.exited <- err
		t.Fatalf("tail exited before asking the node: %v: %s", err, p.stderr)
	case <-time.After(wait):
		t.Fatal("tail never asked the node")
	}
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, exitOK, p.wait(t), p.stderr.String())
	require.Empty(t, p.stderr.String())
}
