package server_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/internal/leakcheck"
	"github.com/lazarusrt/lazarus/server"
)

// TestStreamsLeaveNoGoroutine: an event stream (of the whole conversation,
// and of one agent's view) whose client goes away leaves nothing running,
// the Runtime still open; streams still open when the Runtime closes end,
// and once the HTTP server is closed too, nothing the Runtime, the Server
// or net/http started for them is left. Run in a process of its own, so
// that no other test's goroutine (the console tests' browser) is counted.
func TestStreamsLeaveNoGoroutine(t *testing.T) {
	if !leakcheck.Isolate(t) {
		return
	}
	const within = 20 * time.Second
	ctx := testContext(t)
	base := leakcheck.Take()
	n := startNode(t, newScripted(), server.Options{})
	// No connection of the test's client outlives its request: its
	// transport may dial a spare connection for a request that a freed one
	// then served, and would pool it, both ends alive, after
	// CloseIdleConnections ran.
	n.srv.Client().Transport.(*http.Transport).DisableKeepAlives = true
	conv := n.create(t, tokAlice, nil)

	open := leakcheck.Take()
	for _, query := range []string{"", "?agent=default"} {
		s := n.streamQuery(t, ctx, tokAlice, conv.ID, query, "")
		n.must(t, http.StatusAccepted, "POST", "/v1/conversations/"+conv.ID+"/messages", tokAlice, server.SendMessage{Text: "hi"}, nil)
		s.until(t, "turn_end", "answered")
		s.close()
	}
	n.srv.Client().CloseIdleConnections()
	// The conversation's activation is not the streams'.
	require.True(t, n.rt.Kill(conv.ID))
	open.Check(t, within)

	var streams []*sseStream
	for _, query := range []string{"", "?agent=default"} {
		streams = append(streams, n.streamQuery(t, ctx, tokAlice, conv.ID, query, ""))
	}
	n.must(t, http.StatusAccepted, "POST", "/v1/conversations/"+conv.ID+"/messages", tokAlice, server.SendMessage{Text: "again"}, nil)
	for _, s := range streams {
		s.until(t, "turn_end", "answered")
	}
	n.stop(t)
	for _, s := range streams {
		s.until(t, "error", `"code":"closed"`)
		s.close() // the client's side of it
	}
	n.srv.Close()
	n.srv.Client().CloseIdleConnections()
	base.Check(t, within)
}
