package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/server"
)

// TestOpenAPIDocumentsTheHeadersOfACreation: the 201 of a create and of a
// fork carries the new conversation's Location, and the OpenAPI document
// lists that header on both responses (the create's listed none).
func TestOpenAPIDocumentsTheHeadersOfACreation(t *testing.T) {
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	require.NoError(t, json.Unmarshal(server.OpenAPI(), &doc))
	n := startNode(t, newScripted(), server.Options{})
	conv := n.create(t, tokAlice, nil)
	path := "/v1/conversations/" + conv.ID
	n.must(t, http.StatusAccepted, "POST", path+"/messages", tokAlice, server.SendMessage{Text: "hi"}, nil)

	for _, c := range []struct{ docPath, path, body string }{
		{"/v1/conversations", "/v1/conversations", `{}`},
		{"/v1/conversations/{id}/fork", path + "/fork", `{"at_seq":1}`},
	} {
		req, err := http.NewRequest("POST", n.srv.URL+c.path, strings.NewReader(c.body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+tokAlice)
		res, err := n.srv.Client().Do(req)
		require.NoError(t, err)
		require.NoError(t, res.Body.Close())
		require.Equal(t, http.StatusCreated, res.StatusCode, c.path)
		require.True(t, strings.HasPrefix(res.Header.Get("Location"), "/v1/conversations/c-"), "%s: %v", c.path, res.Header)
		var op struct {
			Responses map[string]struct {
				Headers map[string]json.RawMessage `json:"headers"`
			} `json:"responses"`
		}
		require.NoError(t, json.Unmarshal(doc.Paths[c.docPath]["post"], &op))
		headers := op.Responses[fmt.Sprint(http.StatusCreated)].Headers
		require.Contains(t, headers, "Location", "POST %s: the OpenAPI document's 201 lists no Location", c.docPath)
	}
}
