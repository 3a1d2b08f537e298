package server_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/server"
)

// sendWith does one request with token and the given headers, and returns its status, body and headers.
func (n *node) sendWith(t *testing.T, method, path, token, body string, header http.Header) (int, []byte, http.Header) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, n.srv.URL+path, rd)
	require.NoError(t, err)
	if header != nil {
		req.Header = header.Clone()
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := n.srv.Client().Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	out, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, out, res.Header
}

// TestCrossSiteRequestsChangeNothing: a browser's request from another
// site that would change something (a form posted as text/plain, whose
// body is still one JSON object, or any POST or DELETE) is refused with
// 403 forbidden and writes nothing, even when its credentials reach the
// server (an Authenticator that reads a cookie, or a proxy that turns its
// session cookie into the Authorization header, as this test has the
// request carry): the API is the console's, same origin, or a program's,
// which sends no Origin. Such a request was served: a form of another site
// could reject a call in the name of whoever opened it. Reads from another
// site are still answered (with no CORS header, the browser does not show
// them to the other site), and the console's own requests are served.
func TestCrossSiteRequestsChangeNothing(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	n := startNode(t, model, server.Options{})
	conv, call := suspendOnApproval(t, ctx, n, model)
	var before server.EventPage
	n.must(t, http.StatusOK, "GET", "/v1/conversations/"+conv.ID+"/events", tokOlga, nil, &before)
	var convsBefore server.ConversationList
	n.must(t, http.StatusOK, "GET", "/v1/conversations", tokOlga, nil, &convsBefore)

	crossSite := http.Header{
		"Sec-Fetch-Site": {"cross-site"},
		"Origin":         {"https://evil.example"},
		"Content-Type":   {"text/plain"},
	}
	// An older browser sends an Origin but no Sec-Fetch-Site.
	otherOrigin := http.Header{"Origin": {"https://evil.example"}, "Content-Type": {"application/x-www-form-urlencoded"}}
	writes := append(endpointsOn(conv.ID, call.ID), endpoint{"POST", "/v1/conversations", `{}`})
	for _, h := range []http.Header{crossSite, otherOrigin} {
		for _, e := range writes {
			if e.method == "GET" {
				continue
			}
			status, out, hd := n.sendWith(t, e.method, e.path, tokOlga, e.body, h)
			require.Equal(t, http.StatusForbidden, status, "%s %s %v: %s", e.method, e.path, h, out)
			require.Equal(t, server.CodeForbidden, errorCode(t, out), "%s %s", e.method, e.path)
			require.Empty(t, hd.Get("Access-Control-Allow-Origin"))
		}
	}

	// Nothing was written: the call is pending, the log and the list as
	// they were.
	var c server.Call
	n.must(t, http.StatusOK, "GET", "/v1/calls/"+call.ID, tokOlga, nil, &c)
	require.Equal(t, "pending", c.Status)
	var after server.EventPage
	n.must(t, http.StatusOK, "GET", "/v1/conversations/"+conv.ID+"/events", tokOlga, nil, &after)
	require.Len(t, after.Events, len(before.Events))
	var convsAfter server.ConversationList
	n.must(t, http.StatusOK, "GET", "/v1/conversations", tokOlga, nil, &convsAfter)
	require.Len(t, convsAfter.Conversations, len(convsBefore.Conversations))

	// A read from another site is answered, without CORS headers.
	status, out, hd := n.sendWith(t, "GET", "/v1/calls/"+call.ID, tokCarol, "", crossSite)
	require.Equal(t, http.StatusOK, status, "%s", out)
	require.Empty(t, hd.Get("Access-Control-Allow-Origin"))

	// The console's own request (same origin) is served.
	status, out, _ = n.sendWith(t, "POST", "/v1/calls/"+call.ID+"/reject", tokCarol, `{"reason":"no"}`, http.Header{
		"Sec-Fetch-Site": {"same-origin"},
		"Origin":         {n.srv.URL},
		"Content-Type":   {"application/json"},
	})
	require.Equal(t, http.StatusOK, status, "%s", out)
	n.must(t, http.StatusOK, "GET", "/v1/calls/"+call.ID, tokOlga, nil, &c)
	require.Equal(t, "rejected", c.Outcome)
}

// TestAnswersAreNeverPages: every answer of the server, the API's JSON
// (errors and 401s included), its event stream, its OpenAPI document,
// the probes and the metrics, is sent with X-Content-Type-Options nosniff
// and a Content-Security-Policy that runs nothing and forbids framing, so
// that what models and users wrote, which the answers hold, is never taken
// for a page. Only the console's files had those headers.
func TestAnswersAreNeverPages(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	n := startNode(t, model, server.Options{})
	conv, call := suspendOnApproval(t, ctx, n, model)
	for _, e := range []struct{ method, path, token string }{
		{"GET", "/v1/calls/" + call.ID, tokCarol},
		{"GET", "/v1/conversations/" + conv.ID + "/events", tokAlice},
		{"HEAD", "/v1/conversations/" + conv.ID + "/stream", tokAlice},
		{"GET", "/v1/conversations/" + conv.ID, tokBob},
		{"GET", "/v1/calls", ""},
		{"POST", "/v1/conversations", tokAlice},
		{"GET", "/v1/nothing", tokAlice},
		{"GET", "/v1/openapi.json", ""},
		{"GET", "/healthz", ""},
		{"GET", "/readyz", ""},
		{"GET", "/metrics", tokOlga},
	} {
		status, _, hd := n.sendWith(t, e.method, e.path, e.token, "", nil)
		require.NotZero(t, status)
		require.Equal(t, "nosniff", hd.Get("X-Content-Type-Options"), "%s %s", e.method, e.path)
		require.Contains(t, hd.Get("Content-Security-Policy"), "default-src 'none'", "%s %s", e.method, e.path)
		require.Contains(t, hd.Get("Content-Security-Policy"), "frame-ancestors 'none'", "%s %s", e.method, e.path)
	}
	// The console keeps its own policy, which lets its script run.
	_, _, hd := n.sendWith(t, "GET", server.ConsolePath, "", "", nil)
	require.Contains(t, hd.Get("Content-Security-Policy"), "script-src 'self'")
}
