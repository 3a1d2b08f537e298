package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/server"
)

// stallingModel streams "Hel" and "lo" on every call, says so on
// streamed, then waits for release (and answers "Hello world", streaming
// " world" first) or for its context to end (a kill).
type stallingModel struct {
	streamed chan struct{}
	release  chan struct{}
}

func (m *stallingModel) Generate(ctx context.Context, _ agent.Turn, onDelta func(string)) (*messages.AssistantMessage, error) {
	onDelta("Hel")
	onDelta("lo")
	select {
	case m.streamed <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case <-m.release:
		onDelta(" world")
		return agent.Text("Hello world"), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// TestStreamResumesAcrossAKill: a client follows a conversation over SSE,
// goes away in the middle of an answer, the conversation's actor is
// killed mid-turn and revived (the turn runs again), and the client comes
// back with Last-Event-ID: it gets no event twice and misses none, and
// first gets the deltas of the answer in progress, then the live ones.
func TestStreamResumesAcrossAKill(t *testing.T) {
	ctx := testContext(t)
	model := &stallingModel{streamed: make(chan struct{}), release: make(chan struct{})}
	n := startNode(t, model, server.Options{})
	conv := n.create(t, tokAlice, nil)

	first := n.stream(t, ctx, tokAlice, conv.ID, "")
	n.must(t, http.StatusAccepted, "POST", "/v1/conversations/"+conv.ID+"/messages", tokAlice, server.SendMessage{Text: "hi"}, nil)
	<-model.streamed
	got := []sseMessage{first.next(t), first.next(t), first.next(t)}
	require.Equal(t, "event", got[0].Event)
	require.Equal(t, "1", got[0].ID)
	require.Equal(t, sseMessage{Event: "delta", Data: `{"text":"Hel"}`}, got[1])
	require.Equal(t, sseMessage{Event: "delta", Data: `{"text":"lo"}`}, got[2])
	lastID := got[0].ID
	first.close()

	// The actor dies mid-turn; its revival runs the turn again.
	require.True(t, n.rt.Kill(conv.ID))
	require.NoError(t, n.rt.Wake(ctx, conv.ID))
	<-model.streamed

	second := n.stream(t, ctx, tokAlice, conv.ID, lastID)
	require.Equal(t, sseMessage{Event: "delta", Data: `{"text":"Hel"}`}, second.next(t), "the answer in progress, from its start")
	require.Equal(t, sseMessage{Event: "delta", Data: `{"text":"lo"}`}, second.next(t))
	close(model.release)
	require.Equal(t, sseMessage{Event: "delta", Data: `{"text":" world"}`}, second.next(t))
	answer := second.next(t)
	require.Equal(t, "event", answer.Event)
	require.Equal(t, "2", answer.ID, "no gap, no duplicate")
	require.Contains(t, answer.Data, "Hello world")
	end := second.next(t)
	require.Equal(t, "turn_end", end.Event)
	require.JSONEq(t, `{"outcome":"answered","seq":2}`, end.Data)

	// A client that comes back after the answer gets it from the log, and
	// no stale delta.
	third := n.stream(t, ctx, tokAlice, conv.ID, "1")
	require.Equal(t, "2", third.next(t).ID)
	require.Equal(t, "turn_end", third.next(t).Event)

	// Deleting the conversation ends its streams with an error.
	n.must(t, http.StatusNoContent, "DELETE", "/v1/conversations/"+conv.ID, tokAlice, nil, nil)
	gone := third.next(t)
	require.Equal(t, "error", gone.Event)
	require.Contains(t, gone.Data, `"code":"deleted"`)
}

// TestStreamShowsRetriesAndFailedTurns: a model call that fails and is
// retried is a "retry" message; a turn that fails for good is its
// turn_failed event, then a turn_end "failed".
func TestStreamShowsRetriesAndFailedTurns(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	n := startNodeIn(t, "", model, server.Options{}, func(o *lazarus.Options) {
		o.ModelRetry = lazarus.RetryPolicy{InitialInterval: time.Millisecond, MaximumAttempts: 2}
	})
	conv := n.create(t, tokAlice, nil)
	model.PushError(conv.ID, agent.ErrRateLimited)
	model.PushError(conv.ID, agent.ErrRateLimited)
	st := n.stream(t, ctx, tokAlice, conv.ID, "")
	n.must(t, http.StatusAccepted, "POST", "/v1/conversations/"+conv.ID+"/messages", tokAlice, server.SendMessage{Text: "hi"}, nil)
	got := st.until(t, "turn_end", "failed")
	var kinds []string
	for _, m := range got {
		kinds = append(kinds, m.Event)
	}
	require.Equal(t, []string{"event", "retry", "event", "turn_end"}, kinds)
	var retry server.RetryData
	require.NoError(t, json.Unmarshal([]byte(got[1].Data), &retry))
	require.Equal(t, 1, retry.Attempt)
	require.NotEmpty(t, retry.Error)
	require.Equal(t, "2", got[2].ID)
	require.Contains(t, got[2].Data, "turn_failed")
}

// TestStreamKeepAlive: an idle stream gets comment lines.
func TestStreamKeepAlive(t *testing.T) {
	ctx := testContext(t)
	n := startNode(t, newScripted(), server.Options{KeepAlive: time.Millisecond})
	conv := n.create(t, tokAlice, nil)
	st := n.stream(t, ctx, tokAlice, conv.ID, "")
	for st.sc.Scan() {
		if st.sc.Text() == ": keep-alive" {
			return
		}
	}
	t.Fatalf("no keep-alive: %v", st.sc.Err())
}

// TestStreamAfterQuery: without Last-Event-ID, the "after" parameter
// says where to start; a malformed one is 400. With a valid Last-Event-ID
// the header says where, and "after" is not read: a malformed one is no
// error.
func TestStreamAfterQuery(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	n := startNode(t, model, server.Options{})
	conv := n.create(t, tokAlice, nil)
	st := n.stream(t, ctx, tokAlice, conv.ID, "")
	n.must(t, http.StatusAccepted, "POST", "/v1/conversations/"+conv.ID+"/messages", tokAlice, server.SendMessage{Text: "hi"}, nil)
	st.until(t, "turn_end", "answered")

	req, err := http.NewRequestWithContext(ctx, "GET", n.srv.URL+"/v1/conversations/"+conv.ID+"/stream?after=1", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+tokAlice)
	res, err := n.srv.Client().Do(req)
	require.NoError(t, err)
	s := &sseStream{res: res, cancel: func() {}}
	defer s.close()
	s.sc = newScanner(res)
	require.Equal(t, "2", s.next(t).ID)

	for _, bad := range []string{"?after=x", "?after=-1"} {
		status, body := n.call(t, "GET", "/v1/conversations/"+conv.ID+"/stream"+bad, tokAlice, nil)
		require.Equal(t, http.StatusBadRequest, status, "%s", body)
	}
	req, err = http.NewRequestWithContext(ctx, "GET", n.srv.URL+"/v1/conversations/"+conv.ID+"/stream", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+tokAlice)
	req.Header.Set("Last-Event-ID", "not-a-seq")
	res, err = n.srv.Client().Do(req)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusBadRequest, res.StatusCode)

	// A valid Last-Event-ID overrides "after", which is then not read:
	// a malformed one is no error, and a valid one is not where the
	// stream starts.
	for _, query := range []string{"?after=x", "?after=-1", "?after=0"} {
		req, err = http.NewRequestWithContext(ctx, "GET", n.srv.URL+"/v1/conversations/"+conv.ID+"/stream"+query, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+tokAlice)
		req.Header.Set("Last-Event-ID", "1")
		res, err = n.srv.Client().Do(req)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.StatusCode, query)
		resumed := &sseStream{res: res, cancel: func() {}}
		resumed.sc = newScanner(res)
		require.Equal(t, "2", resumed.next(t).ID, query)
		resumed.close()
	}
}

// TestStreamEndsWhenTheClientGoes: a client that goes away in the middle
// of an event stream (of the whole conversation or of one agent's view)
// ends it: its handler returns and its subscription is dropped
// (lazarus_subscriptions back to 0), with nothing left running for it.
func TestStreamEndsWhenTheClientGoes(t *testing.T) {
	ctx := testContext(t)
	n := startNode(t, newScripted(), server.Options{})
	conv := n.create(t, tokAlice, nil)
	tokens, err := server.NewBearerTokens(map[string]agent.Identity{tokAlice: {UserID: "alice"}})
	require.NoError(t, err)
	h := server.New(n.rt, server.Options{Authenticator: tokens, Metrics: n.metrics})
	var running atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		running.Add(1)
		defer running.Add(-1)
		h.ServeHTTP(w, r)
	}))
	defer srv.Close()
	subscriptions := func(t testingT) float64 { return seriesValue(t, n.metrics.Registry(), "lazarus_subscriptions") }
	for _, query := range []string{"", "?agent=default"} {
		cctx, cancel := context.WithCancel(ctx)
		req, err := http.NewRequestWithContext(cctx, "GET", srv.URL+"/v1/conversations/"+conv.ID+"/stream"+query, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+tokAlice)
		res, err := srv.Client().Do(req)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.StatusCode)
		require.Equal(t, int64(1), running.Load(), "the stream%s runs", query)
		require.Equal(t, float64(1), subscriptions(t))
		cancel()
		_ = res.Body.Close()
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.Zero(c, running.Load())
			assert.Zero(c, subscriptions(c))
		}, 10*time.Second, 5*time.Millisecond, "the stream%s outlived its client", query)
	}
}

// TestStreamRefusesACursorPastTheLog: a stream asked to start after a seq
// the log has not reached (a cursor of another conversation, or of a
// store restored from an older backup) is a bad request, by Last-Event-ID
// or by "after": it was taken, and the stream then dropped every event
// until the log passed it, in silence. A cursor at the log's end is the
// live stream.
func TestStreamRefusesACursorPastTheLog(t *testing.T) {
	ctx := testContext(t)
	n := startNode(t, newScripted(), server.Options{})
	conv := n.create(t, tokAlice, nil)
	n.must(t, http.StatusAccepted, "POST", "/v1/conversations/"+conv.ID+"/messages", tokAlice, server.SendMessage{Text: "hi"}, nil)
	st := n.stream(t, ctx, tokAlice, conv.ID, "")
	st.until(t, "turn_end", "answered")
	st.close()
	last, err := n.rt.Store().LastSeq(ctx, conv.ID)
	require.NoError(t, err)

	for _, c := range []struct{ query, lastEventID string }{
		{fmt.Sprintf("?after=%d", last+1), ""},
		{"", "1000"},
		{"?after=1", strconv.FormatUint(last+1, 10)},
	} {
		status, body := n.tryStream(t, ctx, tokAlice, conv.ID, c.query, c.lastEventID)
		require.Equal(t, http.StatusBadRequest, status, "%+v: %s", c, body)
		require.Equal(t, server.CodeInvalid, errorCode(t, body))
		require.Contains(t, string(body), fmt.Sprintf("seq %d", last), "the message names the log's end")
	}

	// At the log's end: the next event comes.
	live := n.stream(t, ctx, tokAlice, conv.ID, strconv.FormatUint(last, 10))
	n.must(t, http.StatusAccepted, "POST", "/v1/conversations/"+conv.ID+"/messages", tokAlice, server.SendMessage{Text: "again"}, nil)
	m := live.next(t)
	require.Equal(t, "event", m.Event)
	require.Equal(t, strconv.FormatUint(last+1, 10), m.ID)
}

// TestStreamCutsAClientThatStopsReading: a client that keeps its
// connection open but stops reading an event stream is cut once a write
// to it has waited Options.StreamWriteTimeout: the handler returns and the
// subscription is dropped (lazarus_subscriptions back to 0). Without a
// bound the write waited forever, holding the handler, the subscription
// and its buffered updates for as long as the client kept the connection.
func TestStreamCutsAClientThatStopsReading(t *testing.T) {
	ctx := testContext(t)
	n := startNode(t, newScripted(), server.Options{StreamWriteTimeout: 200 * time.Millisecond, KeepAlive: time.Hour})
	conv := n.create(t, tokAlice, nil)

	// A client with a small receive window that reads the response's
	// head, then nothing.
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		return errors.Join(err, serr)
	}}
	conn, err := d.DialContext(ctx, "tcp", n.srv.Listener.Addr().String())
	require.NoError(t, err)
	defer conn.Close()
	_, err = fmt.Fprintf(conn, "GET /v1/conversations/%s/stream HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n", conv.ID, tokAlice)
	require.NoError(t, err)
	head, err := bufio.NewReader(conn).ReadString('\n')
	require.NoError(t, err)
	require.Contains(t, head, "200")
	subscriptions := func(t testingT) float64 { return seriesValue(t, n.metrics.Registry(), "lazarus_subscriptions") }
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Equal(c, float64(1), subscriptions(c)) }, 10*time.Second, time.Millisecond)

	// More than the connection's buffers hold: a write blocks.
	text := strings.Repeat("x", 512<<10)
	for range 24 {
		_, err := n.rt.Send(ctx, conv.ID, text, agent.Scope{UserID: "alice"})
		require.NoError(t, err)
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Zero(c, subscriptions(c)) }, 30*time.Second, 5*time.Millisecond,
		"the stream of a client that reads nothing is still open")
}

// TestStreamOfASlowClientEndsLagged: a client that reads too slowly for
// its subscription's buffer (lazarus.Options.SubscriberBuffer) gets every
// event up to where it fell behind, in order and with no gap, then an
// error message of code "lagged" that ends the stream; it resumes with
// Last-Event-ID from the next seq.
func TestStreamOfASlowClientEndsLagged(t *testing.T) {
	ctx := testContext(t)
	var logs syncBuffer
	n := startNodeIn(t, "", newScripted(), server.Options{StreamWriteTimeout: time.Hour, KeepAlive: time.Hour, Logger: slog.New(slog.NewTextHandler(&logs, nil))},
		func(o *lazarus.Options) { o.SubscriberBuffer = 4 })
	conv := n.create(t, tokAlice, nil)

	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		return errors.Join(err, serr)
	}}
	conn, err := d.DialContext(ctx, "tcp", n.srv.Listener.Addr().String())
	require.NoError(t, err)
	defer conn.Close()
	req, err := http.NewRequest("GET", n.srv.URL+"/v1/conversations/"+conv.ID+"/stream", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+tokAlice)
	require.NoError(t, req.Write(conn))
	br := bufio.NewReaderSize(conn, 64<<10)
	res, err := http.ReadResponse(br, req)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode)

	// While the client reads nothing: more than its connection's buffers
	// and the subscription's hold.
	text := strings.Repeat("x", 512<<10)
	for range 24 {
		_, err := n.rt.Send(ctx, conv.ID, text, agent.Scope{UserID: "alice"})
		require.NoError(t, err)
	}
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(30*time.Second))) // a stream that never lags fails the test
	st := &sseStream{res: res, sc: newScanner(res), cancel: func() {}}
	var last uint64
	for {
		m := st.next(t)
		if m.Event == "error" {
			require.Contains(t, m.Data, `"code":"lagged"`)
			break
		}
		if m.Event == "event" {
			seq, err := strconv.ParseUint(m.ID, 10, 64)
			require.NoError(t, err)
			require.Equal(t, last+1, seq, "a gap or a duplicate")
			last = seq
		}
	}
	require.False(t, st.sc.Scan(), "the stream goes on after lagged")
	require.Less(t, last, uint64(48), "it did not lag")
	require.NotContains(t, logs.String(), "event stream ended", "a slow client is not a failure of the server's (the Logger gets those)")

	again := n.stream(t, ctx, tokAlice, conv.ID, strconv.FormatUint(last, 10))
	m := again.next(t)
	require.Equal(t, "event", m.Event)
	require.Equal(t, strconv.FormatUint(last+1, 10), m.ID)
}

// TestStreamHeadEnds: HEAD of an event stream (net/http's ServeMux routes
// it to the GET handler) answers the stream's status and headers and ends,
// subscribing to nothing: it ran as a stream whose writes were discarded,
// so it never ended, and the next request the client sent on the same
// connection waited behind it.
func TestStreamHeadEnds(t *testing.T) {
	ctx := testContext(t)
	n := startNode(t, newScripted(), server.Options{})
	conv := n.create(t, tokAlice, nil)
	path := n.srv.URL + "/v1/conversations/" + conv.ID + "/stream"
	do := func(method, path string) *http.Response {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(rctx, method, path, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+tokAlice)
		res, err := n.srv.Client().Do(req)
		require.NoError(t, err, "%s %s", method, path)
		_, err = io.Copy(io.Discard, res.Body)
		require.NoError(t, err)
		require.NoError(t, res.Body.Close())
		return res
	}
	res := do("HEAD", path)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, "text/event-stream", res.Header.Get("Content-Type"))
	// The same connection serves the next request.
	res = do("GET", n.srv.URL+"/v1/conversations/"+conv.ID)
	require.Equal(t, http.StatusOK, res.StatusCode)
	// Its checks hold: a cursor past the log is a bad request.
	res = do("HEAD", path+"?after=1000")
	require.Equal(t, http.StatusBadRequest, res.StatusCode)
}
