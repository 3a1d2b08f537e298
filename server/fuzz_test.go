package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/server"
)

// fuzzRoutes are the API's POST routes; {conv} and {call} are replaced by
// an id (the fixture's, unless the input names one).
var fuzzRoutes = []string{
	"/v1/conversations",
	"/v1/conversations/{conv}/messages",
	"/v1/conversations/{conv}/end",
	"/v1/conversations/{conv}/rewind",
	"/v1/conversations/{conv}/edit",
	"/v1/conversations/{conv}/fork",
	"/v1/conversations/{conv}/schedules",
	"/v1/calls/{call}/resolve",
	"/v1/calls/{call}/reject",
}

var fuzzTokens = []string{tokAlice, tokBob, tokCarol, tokOlga}

// fuzzNode is a Runtime on a memory store, served by its Server without a
// listener, holding a conversation of alice suspended on a pending
// "approve" call.
type fuzzNode struct {
	h          http.Handler
	conv, call string
}

func startFuzzNode(tb testing.TB) *fuzzNode {
	tb.Helper()
	model := scripted.New(scripted.Options{})
	rt, err := lazarus.Open(lazarus.Options{
		Model: model, IdleTimeout: -1,
		Tools: []agent.Tool{
			{Name: "approve", Executor: messages.Executor_EXECUTOR_HUMAN, Timeout: time.Hour, Authorizer: agent.RequireRole("approver")},
			{Name: "ask", Executor: messages.Executor_EXECUTOR_HUMAN, Timeout: time.Hour},
		},
	})
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = rt.Close() })
	tokens, err := server.NewBearerTokens(map[string]agent.Identity{
		tokAlice: {UserID: "alice"},
		tokBob:   {UserID: "bob"},
		tokCarol: {UserID: "carol", Roles: []string{"approver"}},
		tokOlga:  {UserID: "olga", Roles: []string{"operator"}},
	})
	require.NoError(tb, err)
	n := &fuzzNode{h: server.New(rt, server.Options{Authenticator: tokens, Logger: slog.New(slog.DiscardHandler)})}

	status, body := n.do(tb, "/v1/conversations", "", tokAlice, []byte(`{"metadata":{"topic":"fuzz"}}`))
	require.Equal(tb, http.StatusCreated, status, "%s", body)
	var conv server.Conversation
	require.NoError(tb, json.Unmarshal(body, &conv))
	n.conv = conv.ID
	model.Push(conv.ID, scripted.Reply("checking", scripted.Call("approve", `{"amount":120}`)))
	status, body = n.do(tb, "/v1/conversations/"+conv.ID+"/messages", "", tokAlice, []byte(`{"text":"pay 120"}`))
	require.Equal(tb, http.StatusAccepted, status, "%s", body)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.Eventually(tb, func() bool {
		calls, _, err := rt.PendingCalls(ctx, "", 1)
		if err == nil && len(calls) == 1 {
			n.call = calls[0].GetId()
		}
		return n.call != ""
	}, 30*time.Second, 5*time.Millisecond)
	return n
}

// do POSTs body to path (escaped)?query with token, and returns the answer's status
// and body. A request the server does not answer within a minute fails tb:
// it hangs.
func (n *fuzzNode) do(tb testing.TB, path, query, token string, body []byte) (int, []byte) {
	tb.Helper()
	return n.doMethod(tb, "POST", path, query, token, nil, body)
}

// doMethod is do with a method and headers of its own.
func (n *fuzzNode) doMethod(tb testing.TB, method, path, query, token string, header http.Header, body []byte) (int, []byte) {
	tb.Helper()
	u, err := url.Parse(path)
	require.NoError(tb, err)
	u.RawQuery = query
	req := httptest.NewRequest(method, "/", bytes.NewReader(body))
	req.URL, req.RequestURI = u, u.RequestURI()
	for k, v := range header {
		req.Header[k] = v
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+token)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req = req.WithContext(ctx)
	rec := httptest.NewRecorder()
	done := make(chan struct{})
	go func() {
		defer close(done)
		n.h.ServeHTTP(rec, req)
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		tb.Fatalf("%s %s?%s: no answer within a minute", method, path, query)
	}
	return rec.Code, rec.Body.Bytes()
}

// FuzzPostBodies: every POST endpoint of the API, given any body, query
// string and id in its path by an authenticated caller, answers: a 2xx
// for a request it takes, else a 4xx with a JSON error body naming a
// code, never a 5xx, a panic or a hang. The requests act on one Runtime
// for the whole run (some change it: a send, an answer to the call, an
// end), so a failure found by fuzzing may need the requests before it.
func FuzzPostBodies(f *testing.F) {
	seeds := []struct {
		route   int
		id, q   string
		body    string
		account int
	}{
		{0, "", "", `{"metadata":{"k":"v"},"settings":{"system_prompt":"be brief","temperature":0.5,"max_tokens":64,"tool_choice":"auto"}}`, 0},
		{0, "", "", `{"metadata":{"owner":"bob"}}`, 1},
		{1, "", "", `{"text":"hello","request_id":"r-1"}`, 0},
		{1, "", "wait=1", `{"text":"hi","agent":"default","broadcast":true}`, 0},
		{1, "", "", `{"text":""}`, 0},
		{1, "c-unknown", "", `{"text":"hi"}`, 0},
		{2, "", "", `{}`, 1},
		{3, "", "", `{"to_seq":1,"reason":"again"}`, 0},
		{3, "", "", `{"to_seq":18446744073709551615}`, 0},
		{4, "", "", `{"seq":1,"text":"pay 12"}`, 0},
		{5, "", "", `{"at_seq":2,"metadata":{"from":"fuzz"}}`, 0},
		{6, "", "", `{"id":"daily","cron":"0 9 * * *","time_zone":"Europe/Paris","text":"good morning"}`, 0},
		{6, "", "", `{"after":"1h","text":"later"}`, 0},
		{6, "", "", `{"every":"1ns","text":"spin"}`, 0},
		{6, "", "", `{"at":"2000-01-01T00:00:00Z","text":"past"}`, 0},
		{7, "", "", `{"result":{"approved":true}}`, 2},
		{7, "", "", `{"result":null}`, 2},
		{8, "", "", `{"reason":"no"}`, 3},
		{8, "call_x", "", `{"reason":"no"}`, 2},
		{1, "", "", `{"text":"a"} trailing`, 0},
		{1, "", "", "\xff", 0},
		{2, "", "%zz&a=;", `{"unknown":1}`, 0},
		{2, "", "", `{}`, 0},
	}
	for _, s := range seeds {
		f.Add(uint8(s.route), uint8(s.account), s.id, s.q, []byte(s.body))
	}
	n := startFuzzNode(f)
	f.Fuzz(func(t *testing.T, route, account uint8, id, query string, body []byte) {
		path := fuzzRoutes[int(route)%len(fuzzRoutes)]
		conv, call := n.conv, n.call
		if id != "" {
			conv, call = id, id
		}
		path = strings.NewReplacer("{conv}", url.PathEscape(conv), "{call}", url.PathEscape(call)).Replace(path)
		status, out := n.do(t, path, query, fuzzTokens[int(account)%len(fuzzTokens)], body)
		require.Less(t, status, 500, "POST %s?%s %q: %s", path, query, body, out)
		if status < 400 {
			return
		}
		var e struct {
			Error struct{ Code, Message string }
		}
		require.NoError(t, json.Unmarshal(out, &e), "POST %s?%s %q: %d %s", path, query, body, status, out)
		require.NotEmpty(t, e.Error.Code, "POST %s?%s %q: %d %s", path, query, body, status, out)
	})
}

// fuzzGets are the API's GET routes, the stream's as a HEAD (which checks
// what a GET does, then ends instead of streaming).
var fuzzGets = []struct{ method, path string }{
	{"GET", "/v1/conversations"},
	{"GET", "/v1/conversations/{conv}"},
	{"GET", "/v1/conversations/{conv}/events"},
	{"HEAD", "/v1/conversations/{conv}/stream"},
	{"GET", "/v1/conversations/{conv}/schedules"},
	{"GET", "/v1/calls"},
	{"GET", "/v1/calls/{call}"},
}

// FuzzGetQueries: every GET endpoint of the API, given any query string
// (limit, cursor, before, after, view, agent, metadata[KEY]), any
// Last-Event-ID and any id in its path by an authenticated caller,
// answers a 2xx, or a 4xx with a JSON error body naming a code: never a
// 5xx, a panic or a hang.
func FuzzGetQueries(f *testing.F) {
	seeds := []struct {
		route, account int
		id, q, lastID  string
	}{
		{0, 0, "", "limit=1", ""},
		{0, 0, "", "limit=-1", ""},
		{0, 0, "", "limit=0&cursor=~forged", ""},
		{0, 3, "", "limit=99999999999999999999999", ""},
		{0, 0, "", "metadata[topic]=fuzz&cursor=%FF", ""},
		{0, 1, "", "metadata[=x&metadata[a]]=1", ""},
		{2, 0, "", "before=18446744073709551615&limit=1000", ""},
		{2, 0, "", "before=-1", ""},
		{2, 0, "", "view=effective&agent=default", ""},
		{2, 0, "", "agent=nobody", ""},
		{3, 0, "", "after=1", ""},
		{3, 0, "", "after=18446744073709551615", ""},
		{3, 0, "", "", "-1"},
		{3, 0, "", "after=x", "2"},
		{4, 3, "", "", ""},
		{5, 2, "", "limit=1&cursor=c-1%00call", ""},
		{6, 2, "", "", ""},
		{6, 0, "../../v1/conversations", "", ""},
		{1, 0, "\xff", "", ""},
	}
	for _, s := range seeds {
		f.Add(uint8(s.route), uint8(s.account), s.id, s.q, s.lastID)
	}
	n := startFuzzNode(f)
	f.Fuzz(func(t *testing.T, route, account uint8, id, query, lastID string) {
		r := fuzzGets[int(route)%len(fuzzGets)]
		conv, call := n.conv, n.call
		if id != "" {
			conv, call = id, id
		}
		path := strings.NewReplacer("{conv}", url.PathEscape(conv), "{call}", url.PathEscape(call)).Replace(r.path)
		var header http.Header
		if lastID != "" {
			header = http.Header{"Last-Event-Id": {lastID}}
		}
		status, out := n.doMethod(t, r.method, path, query, fuzzTokens[int(account)%len(fuzzTokens)], header, nil)
		require.Less(t, status, 500, "%s %s?%s (Last-Event-ID %q): %s", r.method, path, query, lastID, out)
		if status < 400 || r.method == "HEAD" {
			return
		}
		var e struct {
			Error struct{ Code, Message string }
		}
		require.NoError(t, json.Unmarshal(out, &e), "%s %s?%s: %d %s", r.method, path, query, status, out)
		require.NotEmpty(t, e.Error.Code, "%s %s?%s: %d %s", r.method, path, query, status, out)
	})
}
