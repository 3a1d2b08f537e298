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
