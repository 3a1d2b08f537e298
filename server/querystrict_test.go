package server_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/server"
)

// TestRepeatedOrMalformedQueryIsInvalid: a query parameter given twice
// (its first value would win, unseen), and a query that does not parse (a
// bad percent-escape or a semicolon, whose pair net/url drops, so that the
// route would run on its defaults: the full view for view=effective%ZZ, a
// page of 50 for limit=-1;) are 400 invalid, on every route that reads a
// query, as metadata[KEY] given twice already was; a well-formed query is
// served as before.
func TestRepeatedOrMalformedQueryIsInvalid(t *testing.T) {
	n := startNode(t, newScripted(), server.Options{})
	conv := n.create(t, tokAlice, map[string]string{"k": "v"})
	base := "/v1/conversations/" + conv.ID
	bad := []struct{ method, path string }{
		{"GET", "/v1/calls?limit=1&limit=2000"},
		{"GET", "/v1/calls?limit=1;"},
		{"GET", "/v1/calls?cursor=a&cursor=b"},
		{"GET", "/v1/conversations?limit=5&limit=abc"},
		{"GET", "/v1/conversations?cursor=a&cursor=b"},
		{"GET", "/v1/conversations?metadata[k]=%ZZ"},
		{"GET", "/v1/conversations?metadata[k]=v;x"},
		{"GET", base + "/events?view=full&view=effective"},
		{"GET", base + "/events?view=effective%ZZ"},
		{"GET", base + "/events?limit=-1;"},
		{"GET", base + "/events?before=1&before=2"},
		{"GET", base + "/events?agent=default&agent=nobody"},
		{"HEAD", base + "/stream?after=0&after=7"},
		{"HEAD", base + "/stream?after=0%"},
		{"HEAD", base + "/stream?agent=default&agent=default"},
	}
	for _, c := range bad {
		status, body := n.call(t, c.method, c.path, tokAlice, nil)
		require.Equal(t, http.StatusBadRequest, status, "%s %s: %s", c.method, c.path, body)
		if c.method != "HEAD" {
			require.Equal(t, server.CodeInvalid, errorCode(t, body), "%s %s", c.method, c.path)
		}
	}
	// Last-Event-ID given twice (on two lines, or as a list on one) is
	// as bad as an after given twice, an empty first line included (it
	// hid the second, and the stream started from the whole log).
	for _, values := range [][]string{{"0", "7"}, {"0, 7"}, {"", "1"}, {"", ""}} {
		req, err := http.NewRequest("HEAD", n.srv.URL+base+"/stream", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+tokAlice)
		req.Header["Last-Event-Id"] = values
		res, err := n.srv.Client().Do(req)
		require.NoError(t, err)
		require.NoError(t, res.Body.Close())
		require.Equal(t, http.StatusBadRequest, res.StatusCode, "Last-Event-ID %q", values)
	}

	good := []struct{ method, path string }{
		{"GET", "/v1/calls?limit=1"},
		{"GET", "/v1/conversations?limit=5&metadata[k]=v"},
		{"GET", base + "/events?view=effective&limit=10&before=1&agent=default"},
		{"HEAD", base + "/stream?after=0&agent=default"},
	}
	for _, c := range good {
		status, body := n.call(t, c.method, c.path, tokAlice, nil)
		require.Equal(t, http.StatusOK, status, "%s %s: %s", c.method, c.path, body)
	}
}

// TestEmptyMetadataFilterIsInvalid: metadata[KEY]= (an empty value), which
// no stored metadata holds (an empty value deletes a key), is 400 invalid
// rather than a listing that quietly matches nothing; a value is matched
// as before.
func TestEmptyMetadataFilterIsInvalid(t *testing.T) {
	n := startNode(t, newScripted(), server.Options{})
	conv := n.create(t, tokAlice, map[string]string{"k": "v"})
	for _, path := range []string{
		"/v1/conversations?metadata[k]=",
		"/v1/conversations?metadata[k]=v&metadata[j]=",
	} {
		for _, tok := range []string{tokAlice, tokOlga} {
			status, body := n.call(t, "GET", path, tok, nil)
			requireError(t, status, body, http.StatusBadRequest, server.CodeInvalid)
			require.Contains(t, string(body), "empty value", path)
		}
	}
	var list server.ConversationList
	n.must(t, http.StatusOK, "GET", "/v1/conversations?metadata[k]=v", tokAlice, nil, &list)
	require.Len(t, list.Conversations, 1)
	require.Equal(t, conv.ID, list.Conversations[0].ID)
}

// TestEmptyQueryValuesAreInvalid: an integer query parameter given with
// no digit (limit=, before=, after=) and an empty view are 400 invalid,
// not read as the route's default (a page of 50, the newest events, the
// whole log, the full view); given with a value, or absent, they are
// served as before.
func TestEmptyQueryValuesAreInvalid(t *testing.T) {
	n := startNode(t, newScripted(), server.Options{})
	conv := n.create(t, tokAlice, nil)
	base := "/v1/conversations/" + conv.ID
	for _, path := range []string{
		"/v1/calls?limit=",
		"/v1/conversations?limit=",
		base + "/events?limit=",
		base + "/events?before=",
		base + "/events?view=",
		base + "/events?limit=5&view=",
	} {
		status, body := n.call(t, "GET", path, tokAlice, nil)
		requireError(t, status, body, http.StatusBadRequest, server.CodeInvalid)
	}
	// (A HEAD: a stream served would not end.)
	status, _ := n.call(t, "HEAD", base+"/stream?after=", tokAlice, nil)
	require.Equal(t, http.StatusBadRequest, status, "after=")
	for _, path := range []string{
		"/v1/calls", "/v1/calls?limit=1", "/v1/conversations?limit=5",
		base + "/events", base + "/events?limit=5&before=0&view=full",
	} {
		status, body := n.call(t, "GET", path, tokAlice, nil)
		require.Equal(t, http.StatusOK, status, "%s: %s", path, body)
	}
	status, _ = n.call(t, "HEAD", base+"/stream?after=0", tokAlice, nil)
	require.Equal(t, http.StatusOK, status, "after=0")
}
