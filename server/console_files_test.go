package server_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/server"
)

// noRedirect is a client that reports redirects instead of following them.
func noRedirect(n *node) *http.Client {
	c := *n.srv.Client()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &c
}

// TestConsoleFiles: the console's files are served without credentials
// (they hold no data) with a strict Content-Security-Policy, an ETag that
// answers 304, and nothing else under the path; "/" redirects to it.
func TestConsoleFiles(t *testing.T) {
	n := startNode(t, newScripted(), server.Options{})
	client := noRedirect(n)

	res, err := client.Get(n.srv.URL + "/")
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusFound, res.StatusCode)
	require.Equal(t, "."+server.ConsolePath, res.Header.Get("Location"))

	for path, ctype := range map[string]string{
		server.ConsolePath:                 "text/html",
		server.ConsolePath + "index.html":  "text/html",
		server.ConsolePath + "console.js":  "javascript",
		server.ConsolePath + "console.css": "text/css",
	} {
		res, err := client.Get(n.srv.URL + path)
		require.NoError(t, err)
		body, err := io.ReadAll(res.Body)
		res.Body.Close()
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.StatusCode, path)
		require.Contains(t, res.Header.Get("Content-Type"), ctype, path)
		require.NotEmpty(t, body, path)
		csp := res.Header.Get("Content-Security-Policy")
		require.Contains(t, csp, "script-src 'self'", path)
		require.Contains(t, csp, "frame-ancestors 'none'", path)
		require.Equal(t, "nosniff", res.Header.Get("X-Content-Type-Options"), path)
		etag := res.Header.Get("ETag")
		require.NotEmpty(t, etag, path)

		req, err := http.NewRequest("GET", n.srv.URL+path, nil)
		require.NoError(t, err)
		req.Header.Set("If-None-Match", etag)
		res, err = client.Do(req)
		require.NoError(t, err)
		res.Body.Close()
		require.Equal(t, http.StatusNotModified, res.StatusCode, path)
	}

	for _, path := range []string{server.ConsolePath + "nope.js", server.ConsolePath + "../server.go", server.ConsolePath + "console/index.html"} {
		res, err := client.Get(n.srv.URL + path)
		require.NoError(t, err)
		res.Body.Close()
		require.NotEqual(t, http.StatusOK, res.StatusCode, path)
	}
	for _, path := range []string{server.ConsolePath, strings.TrimSuffix(server.ConsolePath, "/")} {
		res, err = client.Post(n.srv.URL+path, "text/plain", strings.NewReader("x"))
		require.NoError(t, err)
		res.Body.Close()
		require.Equal(t, http.StatusMethodNotAllowed, res.StatusCode, path)
	}
}

// TestConsoleWritesTextOnly: the console's script never parses data as
// HTML (every value is written with textContent), and stores the token
// only in session storage.
func TestConsoleWritesTextOnly(t *testing.T) {
	n := startNode(t, newScripted(), server.Options{})
	_, body := n.call(t, "GET", server.ConsolePath+"console.js", "", nil)
	js := string(body)
	require.Contains(t, js, "textContent")
	for _, banned := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "localStorage", "document.cookie"} {
		require.NotContains(t, js, banned)
	}
}

// TestNoConsole: Options.NoConsole leaves the console and the redirect
// out; the API is unchanged.
func TestNoConsole(t *testing.T) {
	n := startNode(t, newScripted(), server.Options{NoConsole: true})
	client := noRedirect(n)
	for _, path := range []string{"/", server.ConsolePath} {
		res, err := client.Get(n.srv.URL + path)
		require.NoError(t, err)
		res.Body.Close()
		require.Equal(t, http.StatusNotFound, res.StatusCode, path)
	}
	n.must(t, http.StatusOK, "GET", "/v1/calls", tokCarol, nil, nil)
}

// TestConsoleUnderAPrefix: served under a prefix (http.StripPrefix), the
// console is reached from the prefix's root and from its path without the
// slash, and answers a call over the API under that prefix. The path
// without the slash was redirected to an absolute /console/, out of the
// prefix.
func TestConsoleUnderAPrefix(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	n := startNode(t, model, server.Options{})
	_, call := suspendOnApproval(t, ctx, n, model)
	inner := *n.served.Load()
	var prefixed http.Handler = http.StripPrefix("/lz", inner)
	n.served.Store(&prefixed)

	for _, from := range []string{"/lz/", "/lz/console"} {
		res, err := n.srv.Client().Get(n.srv.URL + from)
		require.NoError(t, err)
		body, err := io.ReadAll(res.Body)
		res.Body.Close()
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.StatusCode, from)
		require.Equal(t, "/lz"+server.ConsolePath, res.Request.URL.Path, from)
		require.Contains(t, string(body), "console.js", from)
	}

	tab := newTab(t, browserWait)
	require.NoError(t, chromedp.Do(tab,
		chromedp.Navigate(n.srv.URL+"/lz/console"),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), tokCarol),
		chromedp.Click(chromedp.ID("login-submit")),
		chromedp.WaitVisible(cardSel(call.ID, " button.approve")),
		chromedp.Click(cardSel(call.ID, " button.approve")),
		chromedp.WaitVisible(cardSel(call.ID, `[data-state="approved"]`)),
	))
	n.served.Store(&inner)
	var got server.Call
	n.must(t, http.StatusOK, "GET", "/v1/calls/"+call.ID, tokCarol, nil, &got)
	require.Equal(t, server.CallAnswered, got.Outcome)
}
