package server_test

import (
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/server"
)

// TestProbesRefuseOtherMethodsInJSON: a method /metrics, /healthz and
// /readyz do not take is a 405 of the API's error shape (code
// method_not_allowed) with Allow: GET, HEAD, as the package documents, not
// the mux's plain-text 405; GET still answers.
func TestProbesRefuseOtherMethodsInJSON(t *testing.T) {
	n := startNode(t, newScripted(), server.Options{})
	for _, path := range []string{"/metrics", "/healthz", "/readyz"} {
		for _, method := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch} {
			req, err := http.NewRequest(method, n.srv.URL+path, nil)
			require.NoError(t, err)
			req.Header.Set("Authorization", "Bearer "+tokOlga)
			res, err := n.srv.Client().Do(req)
			require.NoError(t, err)
			body, err := io.ReadAll(res.Body)
			res.Body.Close()
			require.NoError(t, err)
			require.Equal(t, http.StatusMethodNotAllowed, res.StatusCode, "%s %s: %s", method, path, body)
			require.Equal(t, "GET, HEAD", res.Header.Get("Allow"), "%s %s", method, path)
			require.Equal(t, "application/json", res.Header.Get("Content-Type"), "%s %s", method, path)
			require.Equal(t, "nosniff", res.Header.Get("X-Content-Type-Options"), "%s %s", method, path)
			require.Equal(t, server.CodeMethodNotAllowed, errorCode(t, body), "%s %s", method, path)
			require.Contains(t, string(body), path+" takes GET or HEAD, not "+method)
		}
		n.must(t, http.StatusOK, "GET", path, tokOlga, nil, nil)
	}
}

// TestRoutesRefuseOtherMethodsInJSON: a method a route under /v1/ does
// not take is a JSON 405 (code method_not_allowed) whose Allow header
// lists those it takes, for any id in the path and before the caller is
// authenticated (the routes are public: the OpenAPI document lists them);
// a path no route has stays a 404. The console and "/" refuse another
// method than GET or HEAD alike, not with the mux's plain-text 405.
func TestRoutesRefuseOtherMethodsInJSON(t *testing.T) {
	n := startNode(t, newScripted(), server.Options{})
	conv := n.create(t, tokAlice, nil)
	for _, c := range []struct{ method, path, allow string }{
		{"PUT", "/v1/conversations", "GET, HEAD, POST"},
		{"DELETE", "/v1/conversations", "GET, HEAD, POST"},
		{"POST", "/v1/conversations/" + conv.ID, "GET, HEAD, DELETE"},
		{"PATCH", "/v1/conversations/c-unknown", "GET, HEAD, DELETE"},
		{"DELETE", "/v1/conversations/" + conv.ID + "/messages", "POST"},
		{"GET", "/v1/conversations/" + conv.ID + "/messages", "POST"},
		{"POST", "/v1/conversations/" + conv.ID + "/events", "GET, HEAD"},
		{"POST", "/v1/conversations/" + conv.ID + "/stream", "GET, HEAD"},
		{"GET", "/v1/conversations/" + conv.ID + "/fork", "POST"},
		{"DELETE", "/v1/conversations/" + conv.ID + "/schedules", "GET, HEAD, POST"},
		{"GET", "/v1/conversations/" + conv.ID + "/schedules/s", "DELETE"},
		{"HEAD", "/v1/conversations/%2E%2E/schedules/..", "DELETE"},
		{"DELETE", "/v1/calls", "GET, HEAD"},
		{"DELETE", "/v1/calls/call-x", "GET, HEAD"},
		{"GET", "/v1/calls/call-x/resolve", "POST"},
		{"OPTIONS", "/v1/calls/call-x/reject", "POST"},
		{"POST", "/v1/openapi.json", "GET, HEAD"},
		{"POST", "/console/", "GET, HEAD"},
		{"DELETE", "/console/console.js", "GET, HEAD"},
		{"POST", "/", "GET, HEAD"},
	} {
		for _, tok := range []string{tokAlice, ""} {
			req, err := http.NewRequest(c.method, n.srv.URL+c.path, nil)
			require.NoError(t, err)
			if tok != "" {
				req.Header.Set("Authorization", "Bearer "+tok)
			}
			res, err := n.srv.Client().Do(req)
			require.NoError(t, err)
			body, err := io.ReadAll(res.Body)
			res.Body.Close()
			require.NoError(t, err)
			require.Equal(t, http.StatusMethodNotAllowed, res.StatusCode, "%s %s: %s", c.method, c.path, body)
			require.Equal(t, c.allow, res.Header.Get("Allow"), "%s %s", c.method, c.path)
			require.Equal(t, "application/json", res.Header.Get("Content-Type"), "%s %s", c.method, c.path)
			if c.method == "HEAD" {
				continue // no body
			}
			require.Equal(t, server.CodeMethodNotAllowed, errorCode(t, body), "%s %s", c.method, c.path)
			require.Contains(t, string(body), " not "+c.method, "%s %s", c.method, c.path)
		}
	}
	// A path no route has is a 404 whatever the method.
	for _, method := range []string{"GET", "POST", "DELETE", "PUT"} {
		for _, path := range []string{"/v1/nothing", "/v1/conversations/" + conv.ID + "/nothing", "/v1/conversations//events"} {
			status, body := n.call(t, method, path, tokAlice, nil)
			require.Equal(t, http.StatusNotFound, status, "%s %s: %s", method, path, body)
			require.Equal(t, server.CodeNotFound, errorCode(t, body), "%s %s", method, path)
		}
	}
	// The routes still answer their own methods.
	n.must(t, http.StatusOK, "GET", "/v1/conversations/"+conv.ID, tokAlice, nil, nil)
	n.must(t, http.StatusOK, "GET", "/console/", "", nil, nil)
}

// TestConsoleOffLeavesItsPathsUnknown: with Options.NoConsole the
// console's paths are no routes: another method there is no 405.
func TestConsoleOffLeavesItsPathsUnknown(t *testing.T) {
	n := startNode(t, newScripted(), server.Options{NoConsole: true})
	status, _ := n.call(t, "POST", "/console/", "", nil)
	require.Equal(t, http.StatusNotFound, status)
}
