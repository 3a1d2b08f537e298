package server_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/server"
)

// TestBadPathsAndQueries: ids over journal.MaxIDBytes in a path, malformed
// queries and headers, bodies within Options.MaxBodyBytes whose content
// breaks a limit of the Go API, and routes that do not exist are answered
// with a JSON error of the documented status and code, and write nothing;
// a 401 says how to authenticate.
func TestBadPathsAndQueries(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	n := startNode(t, model, server.Options{})
	conv, call := suspendOnApproval(t, ctx, n, model)
	seq0 := n.lastSeq(t, ctx, conv.ID)
	long := strings.Repeat("x", journal.MaxIDBytes+1)
	base := "/v1/conversations/" + conv.ID
	cases := []struct {
		method, path, token string
		body                any
		status              int
		code                string
	}{
		{"GET", "/v1/conversations/" + long, tokOlga, nil, http.StatusBadRequest, server.CodeInvalid},
		{"GET", "/v1/conversations/" + long, tokAlice, nil, http.StatusBadRequest, server.CodeInvalid},
		{"DELETE", "/v1/conversations/" + long, tokOlga, nil, http.StatusBadRequest, server.CodeInvalid},
		{"GET", "/v1/conversations/" + long + "/events", tokOlga, nil, http.StatusBadRequest, server.CodeInvalid},
		{"GET", "/v1/conversations/" + long + "/schedules", tokOlga, nil, http.StatusBadRequest, server.CodeInvalid},
		{"GET", "/v1/calls/" + long, tokOlga, nil, http.StatusBadRequest, server.CodeInvalid},
		{"GET", base + "/events?view=everything", tokAlice, nil, http.StatusBadRequest, server.CodeInvalid},
		{"GET", base + "/stream?after=-1", tokAlice, nil, http.StatusBadRequest, server.CodeInvalid},
		{"GET", "/v1/conversations?metadata[]=x", tokAlice, nil, http.StatusBadRequest, server.CodeInvalid},
		{"GET", "/v1/conversations?metadata[a]=1&metadata[a]=2", tokAlice, nil, http.StatusBadRequest, server.CodeInvalid},
		{"GET", "/v1/conversations?cursor=" + url.QueryEscape(long), tokAlice, nil, http.StatusBadRequest, server.CodeInvalid},
		{"GET", "/v1/conversations?metadata[k]=v&cursor=" + url.QueryEscape(long), tokAlice, nil, http.StatusBadRequest, server.CodeInvalid},
		{"GET", "/v1/conversations?metadata[k]=v&cursor=%FF", tokAlice, nil, http.StatusBadRequest, server.CodeInvalid},
		{"GET", "/v1/conversations?metadata[k]=v&limit=-1", tokAlice, nil, http.StatusBadRequest, server.CodeInvalid},
		{"GET", "/v1/calls?limit=1001", tokCarol, nil, http.StatusBadRequest, server.CodeInvalid},
		{"DELETE", base + "/schedules/" + long, tokAlice, nil, http.StatusBadRequest, server.CodeInvalid},
		{"DELETE", base + "/schedules/none", tokAlice, nil, http.StatusNotFound, server.CodeNotFound},
		{"POST", base + "/messages", tokAlice, `{"text":"` + strings.Repeat("y", journal.MaxEventBytes+1) + `"}`, http.StatusBadRequest, server.CodeInvalid},
		{"POST", "/v1/calls/" + call.ID + "/resolve", tokCarol, `{"result":"` + strings.Repeat("y", agent.MaxResultBytes+1) + `"}`, http.StatusBadRequest, server.CodeInvalid},
		{"POST", "/v1/calls/" + call.ID + "/reject", tokCarol, `{"reason":"` + strings.Repeat("y", agent.MaxResultBytes+1) + `"}`, http.StatusBadRequest, server.CodeInvalid},
		{"POST", "/v1/conversations", tokAlice, `{"metadata":{"` + long + `":"v"}}`, http.StatusBadRequest, server.CodeInvalid},
		{"POST", "/v1/conversations", tokAlice, `{"metadata":{"":"v"}}`, http.StatusBadRequest, server.CodeInvalid},
		{"POST", "/v1/conversations", tokAlice, `{"settings":{"max_tokens":-5}}`, http.StatusBadRequest, server.CodeInvalid},
		{"PUT", "/v1/conversations", tokAlice, `{}`, http.StatusMethodNotAllowed, server.CodeMethodNotAllowed},
		{"GET", "/v1/nothing", tokAlice, nil, http.StatusNotFound, server.CodeNotFound},
		{"GET", "/v1/conversations", "", nil, http.StatusUnauthorized, server.CodeUnauthenticated},
	}
	for _, c := range cases {
		status, body := n.call(t, c.method, c.path, c.token, c.body)
		require.Equal(t, c.status, status, "%s %.100s: %.300s", c.method, c.path, body)
		require.Equal(t, c.code, errorCode(t, body), "%s %.100s", c.method, c.path)
		requireSentinelTextOnce(t, body, fmt.Sprintf("%s %.100s", c.method, c.path))
	}

	req, err := http.NewRequest("GET", n.srv.URL+"/v1/calls", nil)
	require.NoError(t, err)
	res, err := n.srv.Client().Do(req)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusUnauthorized, res.StatusCode)
	require.Equal(t, `Bearer realm="lazarus"`, res.Header.Get("WWW-Authenticate"))

	req, err = http.NewRequest("GET", n.srv.URL+base+"/stream", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+tokAlice)
	req.Header.Set("Last-Event-ID", "not-a-seq")
	res, err = n.srv.Client().Do(req)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusBadRequest, res.StatusCode)

	require.Equal(t, seq0, n.lastSeq(t, ctx, conv.ID), "a bad request wrote to the log")
	rows, _, err := n.rt.Store().ListConversations(ctx, "", 100)
	require.NoError(t, err)
	require.Len(t, rows, 1, "a bad request created a conversation")
	row, err := n.rt.Store().ToolCall(ctx, call.ID)
	require.NoError(t, err)
	require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING, row.GetStatus())

	// Deleted: its owner no longer sees it (404); an operator is told it
	// was deleted (410), also when deleting it again.
	n.must(t, http.StatusOK, "POST", "/v1/calls/"+call.ID+"/reject", tokCarol, server.Reject{Reason: "no"}, nil)
	n.must(t, http.StatusNoContent, "DELETE", base, tokAlice, nil, nil)
	status, body := n.call(t, "DELETE", base, tokAlice, nil)
	require.Equal(t, http.StatusNotFound, status, "%s", body)
	status, body = n.call(t, "DELETE", base, tokOlga, nil)
	require.Equal(t, http.StatusGone, status, "%s", body)
	require.Equal(t, server.CodeDeleted, errorCode(t, body))
	status, body = n.call(t, "POST", base+"/messages", tokOlga, server.SendMessage{Text: "hi"})
	require.Equal(t, http.StatusGone, status, "%s", body)
}

// requireSentinelTextOnce fails t if an error body says the text of a
// sentinel of package journal more than once (a helper that named the
// sentinel again around a cause that already did).
func requireSentinelTextOnce(t *testing.T, body []byte, what string) {
	t.Helper()
	for _, s := range []error{
		journal.ErrConflict, journal.ErrStale, journal.ErrNotFound, journal.ErrClosed,
		journal.ErrCorrupt, journal.ErrInvalid, journal.ErrDeleted, journal.ErrNoSpace,
		journal.ErrUnavailable, journal.ErrUnknownOutcome, journal.ErrExists, journal.ErrEnded,
		journal.ErrTooLarge,
	} {
		require.LessOrEqual(t, strings.Count(string(body), s.Error()), 1, "%s: the text %q in %.300s", what, s.Error(), body)
	}
}
