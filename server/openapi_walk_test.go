package server_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/server"
)

// TestOpenAPIStatusesAreDocumented walks the OpenAPI document against the
// running server: every operation is called without credentials, by a
// stranger and by the owner on a real conversation and call, on ids that
// do not exist, and with bodies that are empty, not JSON or of unknown
// fields; each answer's status must be one the document lists for the
// operation (a 401 exactly where it asks for credentials), and each error
// is JSON of the Error schema with one of its codes.
func TestOpenAPIStatusesAreDocumented(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	n := startNode(t, model, server.Options{})
	conv, call := suspendOnApproval(t, ctx, n, model)

	var doc struct {
		Security   []map[string][]string                 `json:"security"`
		Paths      map[string]map[string]json.RawMessage `json:"paths"`
		Components struct {
			Schemas struct {
				Error struct {
					Properties struct {
						Error struct {
							Properties struct {
								Code struct {
									Enum []string `json:"enum"`
								} `json:"code"`
							} `json:"properties"`
						} `json:"error"`
					} `json:"properties"`
				} `json:"Error"`
			} `json:"schemas"`
		} `json:"components"`
	}
	require.NoError(t, json.Unmarshal(server.OpenAPI(), &doc))
	codes := doc.Components.Schemas.Error.Properties.Error.Properties.Code.Enum
	require.NotEmpty(t, codes)
	require.NotEmpty(t, doc.Security, "the document asks for credentials by default")

	do := func(method, path, token, body string) (int, []byte, string) {
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, err := http.NewRequestWithContext(ctx, method, n.srv.URL+path, rd)
		require.NoError(t, err)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		res, err := n.srv.Client().Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		if res.Header.Get("Content-Type") == "text/event-stream" {
			return res.StatusCode, nil, "" // a stream: not read to its end
		}
		out, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return res.StatusCode, out, res.Header.Get("Content-Type")
	}

	calls := 0
	for path, item := range doc.Paths {
		for method, raw := range item {
			if method == "parameters" {
				continue
			}
			var op struct {
				Security  *[]map[string][]string     `json:"security"`
				Responses map[string]json.RawMessage `json:"responses"`
			}
			require.NoError(t, json.Unmarshal(raw, &op))
			method = strings.ToUpper(method)
			public := op.Security != nil && len(*op.Security) == 0
			_, documents401 := op.Responses["401"]
			require.Equal(t, !public, documents401, "%s %s: a 401 is documented where credentials are asked for", method, path)
			check := func(what string, status int, body []byte, ctype string) {
				t.Helper()
				calls++
				_, ok := op.Responses[strconv.Itoa(status)]
				require.True(t, ok, "%s %s (%s): %d is not documented: %.300s", method, path, what, status, body)
				if status >= 400 {
					require.Equal(t, "application/json", ctype, "%s %s (%s)", method, path, what)
					var e struct {
						Error struct{ Code, Message string }
					}
					require.NoError(t, json.Unmarshal(body, &e), "%s %s (%s): %s", method, path, what, body)
					require.Contains(t, codes, e.Error.Code, "%s %s (%s)", method, path, what)
					require.NotEmpty(t, e.Error.Message, "%s %s (%s)", method, path, what)
				}
			}
			fill := func(id, callID string) string {
				p := path
				if strings.HasPrefix(p, "/v1/calls/") {
					p = strings.Replace(p, "{id}", callID, 1)
				}
				p = strings.Replace(p, "{id}", id, 1)
				return strings.Replace(p, "{schedule}", "none", 1)
			}
			real, missing := fill(conv.ID, call.ID), fill("c-missing", "call-missing")
			bodies := []string{""}
			if method == "POST" || method == "PUT" || method == "PATCH" {
				bodies = []string{"", "{}", "not json", `{"unknown":1}`}
			}
			// A valid body, for the stranger and the missing id only (the
			// owner's would write).
			valid := map[string]string{
				"/messages": `{"text":"x"}`, "/edit": `{"seq":1,"text":"x"}`, "/rewind": `{"to_seq":0}`,
				"/fork": `{"at_seq":1}`, "/schedules": `{"after":"1h","text":"x"}`, "/end": `{}`,
				"/resolve": `{"result":{"approved":true}}`, "/reject": `{"reason":"no"}`,
			}
			for suffix, body := range valid {
				if method == "POST" && strings.HasSuffix(path, suffix) {
					status, out, ctype := do(method, fill(conv.ID, call.ID), tokBob, body)
					check("a stranger, a valid body", status, out, ctype)
					status, out, ctype = do(method, fill("c-missing", "call-missing"), tokOlga, body)
					check("a missing id, a valid body", status, out, ctype)
					status, out, ctype = do(method, fill("c-missing", "call-missing"), tokAlice, body)
					check("a missing id for a user, a valid body", status, out, ctype)
				}
			}
			for _, body := range bodies {
				status, out, ctype := do(method, real, "", body)
				check("no credentials", status, out, ctype)
				if public {
					continue
				}
				status, out, ctype = do(method, real, tokBob, body)
				check("a stranger", status, out, ctype)
				status, out, ctype = do(method, missing, tokOlga, body)
				check("a missing id", status, out, ctype)
				if method == "DELETE" && !strings.Contains(path, "{schedule}") {
					continue // the owner's delete comes last
				}
				if body == "" && method == "POST" && !strings.HasSuffix(path, "/end") {
					status, out, ctype = do(method, real, tokAlice, body)
					check("the owner, no body", status, out, ctype)
				}
				if body != "" {
					status, out, ctype = do(method, real, tokAlice, body)
					check("the owner, body "+body, status, out, ctype)
				}
				if method == "GET" {
					status, out, ctype = do(method, real, tokAlice, "")
					check("the owner", status, out, ctype)
				}
			}
		}
	}
	require.Greater(t, calls, 100)
	status, out := n.call(t, "DELETE", "/v1/conversations/"+conv.ID, tokAlice, nil)
	require.Equal(t, http.StatusNoContent, status, "%s", out)
}
