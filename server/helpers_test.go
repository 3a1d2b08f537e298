package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/server"
)

// Tokens of the tests' users: alice and bob are plain users, carol and dave
// are approvers, olga an operator.
const (
	tokAlice = "t-alice"
	tokBob   = "t-bob"
	tokCarol = "t-carol"
	tokDave  = "t-dave"
	tokOlga  = "t-olga"
)

type node struct {
	rt      *lazarus.Runtime
	srv     *httptest.Server
	metrics *server.Metrics
	// served is what srv serves (restart swaps it); reopen opens a
	// Runtime and its Server as startNodeIn did, on the store in dir.
	served atomic.Pointer[http.Handler]
	reopen func(t *testing.T, dir string) (*lazarus.Runtime, http.Handler, *server.Metrics)
}

// startNode opens a Runtime on model with two human tools: "approve"
// (answered by the "approver" role) and "ask" (no authorizer: any
// identified user in the Go API), and serves it.
func startNode(t *testing.T, model agent.Model, opts server.Options) *node {
	t.Helper()
	return startNodeIn(t, "", model, opts)
}

// startNodeIn is startNode on the Pebble store in dir ("" for memory).
func startNodeIn(t *testing.T, dir string, model agent.Model, opts server.Options, tweaks ...func(*lazarus.Options)) *node {
	t.Helper()
	n := &node{}
	n.reopen = func(t *testing.T, dir string) (*lazarus.Runtime, http.Handler, *server.Metrics) {
		t.Helper()
		m := server.NewMetrics()
		ropts := lazarus.Options{
			Model: model, IdleTimeout: -1, Metrics: m.Hooks(), Dir: dir,
			Tools: []agent.Tool{
				{Name: "approve", Executor: messages.Executor_EXECUTOR_HUMAN, Timeout: time.Hour,
					Authorizer: agent.RequireRole("approver"),
					Prompt:     func(args string) string { return "Approve the payment " + args + "?" }},
				{Name: "ask", Executor: messages.Executor_EXECUTOR_HUMAN, Timeout: time.Hour},
			},
		}
		for _, tweak := range tweaks {
			tweak(&ropts)
		}
		rt, err := lazarus.Open(ropts)
		require.NoError(t, err)
		t.Cleanup(func() { _ = rt.Close() })
		tokens, err := server.NewBearerTokens(map[string]agent.Identity{
			tokAlice: {UserID: "alice"},
			tokBob:   {UserID: "bob"},
			tokCarol: {UserID: "carol", Roles: []string{"approver"}},
			tokDave:  {UserID: "dave", Roles: []string{"approver"}},
			tokOlga:  {UserID: "olga", Roles: []string{"operator"}},
		})
		require.NoError(t, err)
		opts := opts
		opts.Authenticator, opts.Metrics = tokens, m
		return rt, server.New(rt, opts), m
	}
	var h http.Handler
	n.rt, h, n.metrics = n.reopen(t, dir)
	n.served.Store(&h)
	n.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		(*n.served.Load()).ServeHTTP(w, r)
	}))
	// Registered last, so run first: the server closes before the
	// Runtime it serves.
	t.Cleanup(n.srv.Close)
	return n
}

// restart closes n's Runtime (its event streams end, as in a shutdown)
// and serves, at the same address, a new one on the store in dir (n's own
// Pebble directory, or a copy of it); a request in between is answered by
// the closed Runtime's Server.
func (n *node) restart(t *testing.T, dir string) {
	t.Helper()
	n.stop(t)
	n.start(t, dir)
}

// stop closes n's Runtime; its Server goes on answering (503 closed) until
// start.
func (n *node) stop(t *testing.T) {
	t.Helper()
	require.NoError(t, n.rt.Close())
}

// start serves a new Runtime on the store in dir at n's address.
func (n *node) start(t *testing.T, dir string) {
	t.Helper()
	var h http.Handler
	n.rt, h, n.metrics = n.reopen(t, dir)
	n.served.Store(&h)
}

// testingT is what a helper needs of its test: a *testing.T, or the
// *assert.CollectT of a require.EventuallyWithT condition, which runs on
// a goroutine of its own, where the test's FailNow must not be called.
type testingT interface {
	require.TestingT
	Helper()
}

// call does one request and returns its status and body.
func (n *node) call(t testingT, method, path, token string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	case string:
		rd = strings.NewReader(b)
	default:
		enc, err := json.Marshal(b)
		require.NoError(t, err)
		rd = bytes.NewReader(enc)
	}
	req, err := http.NewRequest(method, n.srv.URL+path, rd)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := n.srv.Client().Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	out, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, out
}

// must does a request that must answer want, and decodes its body into v
// (if not nil).
func (n *node) must(t testingT, want int, method, path, token string, body, v any) {
	t.Helper()
	status, out := n.call(t, method, path, token, body)
	require.Equal(t, want, status, "%s %s: %s", method, path, out)
	if v != nil {
		require.NoError(t, json.Unmarshal(out, v))
	}
}

// errorCode decodes the code of an error body.
func errorCode(t *testing.T, body []byte) string {
	t.Helper()
	var e struct {
		Error struct{ Code, Message string }
	}
	require.NoError(t, json.Unmarshal(body, &e), "%s", body)
	return e.Error.Code
}

func (n *node) create(t *testing.T, token string, md map[string]string) server.Conversation {
	t.Helper()
	var c server.Conversation
	n.must(t, http.StatusCreated, "POST", "/v1/conversations", token, server.CreateConversation{Metadata: md}, &c)
	return c
}

// sseMessage is one message of an event stream.
type sseMessage struct {
	ID, Event, Data string
}

// sseStream reads an event stream.
type sseStream struct {
	res    *http.Response
	sc     *bufio.Scanner
	cancel context.CancelFunc
}

// stream opens the event stream of conv as token, after lastEventID if
// that is not empty.
func (n *node) stream(t *testing.T, ctx context.Context, token, conv, lastEventID string) *sseStream {
	t.Helper()
	return n.streamQuery(t, ctx, token, conv, "", lastEventID)
}

// streamQuery opens the event stream of conv as token with query ("" or
// "?..."), after lastEventID if that is not empty; close ends it from
// the client's side, and so does the test's end.
func (n *node) streamQuery(t *testing.T, ctx context.Context, token, conv, query, lastEventID string) *sseStream {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	res := n.streamRequest(t, ctx, token, conv, query, lastEventID)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, "text/event-stream", res.Header.Get("Content-Type"))
	s := &sseStream{res: res, sc: newScanner(res), cancel: cancel}
	t.Cleanup(s.close)
	return s
}

// tryStream requests the event stream of conv as token, as streamQuery
// does, and answers the status and the body, unless it is a stream, which
// it closes.
func (n *node) tryStream(t testingT, ctx context.Context, token, conv, query, lastEventID string) (int, []byte) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	res := n.streamRequest(t, ctx, token, conv, query, lastEventID)
	defer res.Body.Close()
	if res.StatusCode == http.StatusOK {
		return res.StatusCode, nil
	}
	out, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, out
}

// streamRequest sends the request of conv's event stream as token with
// query ("" or "?..."), after lastEventID if that is not empty.
func (n *node) streamRequest(t testingT, ctx context.Context, token, conv, query, lastEventID string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "GET", n.srv.URL+"/v1/conversations/"+conv+"/stream"+query, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	res, err := n.srv.Client().Do(req)
	require.NoError(t, err)
	return res
}

func newScanner(res *http.Response) *bufio.Scanner {
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	return sc
}

func (s *sseStream) close() {
	s.cancel()
	_ = s.res.Body.Close()
}

// next returns the next message, skipping comments.
func (s *sseStream) next(t *testing.T) sseMessage {
	t.Helper()
	var m sseMessage
	for s.sc.Scan() {
		line := s.sc.Text()
		switch {
		case line == "":
			if m.Event != "" || m.Data != "" {
				return m
			}
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "id: "):
			m.ID = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "event: "):
			m.Event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			m.Data = strings.TrimPrefix(line, "data: ")
		}
	}
	t.Fatalf("the stream ended: %v", s.sc.Err())
	return m
}

// until reads messages until one of event kind with data containing
// substr, and returns those read, that one included.
func (s *sseStream) until(t *testing.T, kind, substr string) []sseMessage {
	t.Helper()
	var got []sseMessage
	for {
		m := s.next(t)
		got = append(got, m)
		if m.Event == kind && strings.Contains(m.Data, substr) {
			return got
		}
	}
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func newScripted() *scripted.Model { return scripted.New(scripted.Options{}) }
