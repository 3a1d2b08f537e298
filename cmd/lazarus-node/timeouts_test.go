package main

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/server"
)

// TestControlServerBoundsSlowClients: the control API's http.Server has
// the bounds lazarus serve gives its own (server.DefaultReadHeaderTimeout,
// DefaultReadTimeout, DefaultIdleTimeout), and a client that sends its
// body slowly is cut once the read bound passes instead of holding a
// handler (shown with the bound shortened), while a stream, a GET without
// a body, goes on past it.
func TestControlServerBoundsSlowClients(t *testing.T) {
	read := make(chan error, 1)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /send", func(w http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(r.Body)
		read <- err
	})
	mux.HandleFunc("GET /stream", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "first\n")
		w.(http.Flusher).Flush()
		<-time.After(600 * time.Millisecond) // past the read bound below
		_, _ = io.WriteString(w, "second\n")
	})
	srv := controlServer(mux, slog.New(slog.DiscardHandler))
	require.Equal(t, server.DefaultReadHeaderTimeout, srv.ReadHeaderTimeout)
	require.Equal(t, server.DefaultReadTimeout, srv.ReadTimeout)
	require.Equal(t, server.DefaultIdleTimeout, srv.IdleTimeout)

	srv.ReadTimeout = 200 * time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	// A body announced as 10 bytes of which one is sent.
	conn, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer conn.Close()
	_, err = io.WriteString(conn, "POST /send HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n{")
	require.NoError(t, err)
	select {
	case err := <-read:
		require.Error(t, err, "the slow body is cut, not read")
	case <-time.After(10 * time.Second):
		t.Fatal("a client sending its body slowly holds the handler")
	}

	res, err := http.Get("http://" + ln.Addr().String() + "/stream")
	require.NoError(t, err)
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	require.NoError(t, sc.Err())
	require.Equal(t, []string{"first", "second"}, lines, "a stream is not cut by the read bound")
}
