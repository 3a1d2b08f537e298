package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestServeIdleTimeout: 'lazarus serve' closes a keep-alive connection
// that waits for its next request longer than idle_timeout, while an event
// stream, a request in progress, outlives it: quiet for longer than the
// idle timeout, then with events flowing, then quiet again, it goes on
// delivering on its one connection.
func TestServeIdleTimeout(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "node.json")
	require.NoError(t, os.WriteFile(cfg, []byte(`{
		"dir": `+jsonString(filepath.Join(t.TempDir(), "store"))+`,
		"idle_timeout": "300ms"
	}`), 0o600))
	n := startStreamingNode(t, cfg)
	ctx, addr, call, conv, lines := n.ctx, n.addr, n.call, n.conv, n.lines

	// idleClosed makes one request on a new connection and waits for the
	// node to close it, idle.
	idleClosed := func() {
		t.Helper()
		conn, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		defer conn.Close()
		_, err = fmt.Fprintf(conn, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
		require.NoError(t, err)
		br := bufio.NewReader(conn)
		res, err := http.ReadResponse(br, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.StatusCode)
		require.False(t, res.Close, "a keep-alive connection")
		_, err = io.Copy(io.Discard, res.Body)
		require.NoError(t, err)
		require.NoError(t, conn.SetReadDeadline(time.Now().Add(wait)))
		_, err = br.ReadByte()
		require.ErrorIs(t, err, io.EOF, "the node closes the idle connection")
	}

	for round := range 3 {
		// The stream has been quiet since before this idle connection
		// was opened, and so longer than the idle timeout.
		idleClosed()
		text := fmt.Sprintf("round %d", round)
		call(ctx, "POST", "/v1/conversations/"+conv.ID+"/messages", `{"text": `+jsonString(text)+`}`, http.StatusAccepted).Body.Close()
		for answered := false; !answered; {
			select {
			case line, ok := <-lines:
				require.True(t, ok, "the stream ended")
				answered = strings.HasPrefix(line, "data:") && strings.Contains(line, "You said: "+text)
			case <-ctx.Done():
				t.Fatalf("the stream did not deliver the answer of %q", text)
			}
		}
	}
}

// TestServeReadTimeout: 'lazarus serve' closes the connection of a
// request whose body is not all sent within read_timeout (the client sent
// its headers and part of its body, then stalled: it held a handler for as
// long as it kept the connection), while an event stream opened before it,
// and so older than the bound, goes on delivering: the bound is on reading
// the request, not on the answer.
func TestServeReadTimeout(t *testing.T) {
	const bound = 300 * time.Millisecond
	cfg := filepath.Join(t.TempDir(), "node.json")
	require.NoError(t, os.WriteFile(cfg, []byte(`{
		"dir": `+jsonString(filepath.Join(t.TempDir(), "store"))+`,
		"read_timeout": `+jsonString(bound.String())+`
	}`), 0o600))
	n := startStreamingNode(t, cfg)
	ctx, addr, call, conv, lines := n.ctx, n.addr, n.call, n.conv, n.lines

	// The stalled request: its headers and half its body, then nothing.
	// The node's read deadline runs from its accept, which may come before
	// Dial returns: the wait is measured from before the dial.
	start := time.Now()
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer conn.Close()
	body := `{"text": "never finished"}`
	_, err = fmt.Fprintf(conn, "POST /v1/conversations/%s/messages HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer alice-token\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		conv.ID, addr, len(body), body[:len(body)/2])
	require.NoError(t, err)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(wait)))
	_, err = io.Copy(io.Discard, conn) // whatever the node answers, then its close
	var ne net.Error
	require.False(t, errors.As(err, &ne) && ne.Timeout(), "the node closes the connection of a stalled body (%v)", err)
	require.GreaterOrEqual(t, time.Since(start), bound, "not before read_timeout")

	// The stream, older than the bound, still delivers.
	call(ctx, "POST", "/v1/conversations/"+conv.ID+"/messages", `{"text": "after the stall"}`, http.StatusAccepted).Body.Close()
	for answered := false; !answered; {
		select {
		case line, ok := <-lines:
			require.True(t, ok, "the stream ended")
			require.NotContains(t, line, "never finished")
			answered = strings.HasPrefix(line, "data:") && strings.Contains(line, "You said: after the stall")
		case <-ctx.Done():
			t.Fatal("the stream did not deliver the answer")
		}
	}
}

// streamingNode is a 'lazarus serve' node, a conversation of alice's on
// it and that conversation's event stream, on a connection of its own,
// read line by line.
type streamingNode struct {
	ctx   context.Context // bounds the test
	addr  string
	conv  struct{ ID string }
	lines <-chan string // the stream's lines; closed when it ends
	// call makes a request as alice and checks its status.
	call func(ctx context.Context, method, path, body string, status int) *http.Response
}

// startStreamingNode starts 'lazarus serve --config cfg' and opens the
// stream of a new conversation.
func startStreamingNode(t *testing.T, cfg string) streamingNode {
	t.Helper()
	p := startServe(t, testTokens, "--config", cfg)
	ctx := ctxT(t)
	addr := strings.TrimPrefix(p.url, "http://")
	client := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(client.CloseIdleConnections)
	call := func(ctx context.Context, method, path, body string, status int) *http.Response {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, p.url+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer alice-token")
		res, err := client.Do(req)
		require.NoError(t, err)
		require.Equal(t, status, res.StatusCode)
		return res
	}
	res := call(ctx, "POST", "/v1/conversations", `{}`, http.StatusCreated)
	var conv struct{ ID string }
	require.NoError(t, json.NewDecoder(res.Body).Decode(&conv))
	res.Body.Close()

	sctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	res = call(sctx, "GET", "/v1/conversations/"+conv.ID+"/stream", "", http.StatusOK)
	t.Cleanup(func() { _ = res.Body.Close() })
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(res.Body)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-sctx.Done():
				return
			}
		}
	}()
	return streamingNode{ctx: ctx, addr: addr, conv: conv, lines: lines, call: call}
}

// TestServeMaxSubscriptions: max_subscriptions is the runtime's
// MaxSubscriptions: with a cap of 1, a conversation's second event stream
// is refused with 429 too_many_subscriptions while its first is open,
// and another conversation's stream is not.
func TestServeMaxSubscriptions(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "node.json")
	require.NoError(t, os.WriteFile(cfg, []byte(`{
		"dir": `+jsonString(filepath.Join(t.TempDir(), "store"))+`,
		"max_subscriptions": 1
	}`), 0o600))
	n := startStreamingNode(t, cfg)
	res := n.call(n.ctx, "GET", "/v1/conversations/"+n.conv.ID+"/stream", "", http.StatusTooManyRequests)
	var body struct{ Error struct{ Code string } }
	require.NoError(t, json.NewDecoder(res.Body).Decode(&body))
	res.Body.Close()
	require.Equal(t, "too_many_subscriptions", body.Error.Code)

	res = n.call(n.ctx, "POST", "/v1/conversations", `{}`, http.StatusCreated)
	var other struct{ ID string }
	require.NoError(t, json.NewDecoder(res.Body).Decode(&other))
	res.Body.Close()
	sctx, cancel := context.WithCancel(n.ctx)
	defer cancel()
	res = n.call(sctx, "GET", "/v1/conversations/"+other.ID+"/stream", "", http.StatusOK)
	res.Body.Close()
}
