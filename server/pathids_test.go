package server_test

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/server"
)

// TestIDsRoundTripThroughPaths: a conversation or schedule id with '/',
// '?', '#', '%', spaces, unicode, or that is "." or ".." (any id is
// valid, see journal.ValidateID) names, percent-encoded as url.PathEscape
// does, that conversation or schedule: a dot segment of the path is part
// of the id, not a step up. The server's router cleaned such paths and
// redirected (307) to another route, which a client follows with the same
// method: a GET of conversation "." read the conversation list, and the
// DELETE of schedule ".." deleted its whole conversation. An empty segment
// is a 404, not a redirect either.
func TestIDsRoundTripThroughPaths(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	n := startNode(t, model, server.Options{})
	ids := []string{"a/b", "a?b=c", "a#b", "100%", "%2F", "a/../b", "..", ".", "../calls", " sp ace ", "é☃", "x/.", "./x"}
	for _, id := range ids {
		model.Push(id, scripted.Text("ok"))
		_, err := n.rt.Send(ctx, id, "hello", agent.Scope{})
		require.NoError(t, err, "%q", id)
	}
	for _, id := range ids {
		p := "/v1/conversations/" + url.PathEscape(id)
		var c server.Conversation
		n.must(t, http.StatusOK, "GET", p, tokOlga, nil, &c)
		require.Equal(t, id, c.ID)
		var page server.EventPage
		n.must(t, http.StatusOK, "GET", p+"/events", tokOlga, nil, &page)
		require.NotEmpty(t, page.Events, "%q", id)
	}

	// Schedules named "..", "." and "a/b" are cancelled one by one; the
	// conversation stays.
	conv := n.create(t, tokAlice, nil)
	p := "/v1/conversations/" + url.PathEscape(conv.ID) + "/schedules"
	for _, id := range []string{"..", ".", "a/b"} {
		n.must(t, http.StatusCreated, "POST", p, tokAlice, server.CreateSchedule{ID: id, After: "1h", Text: "later"}, nil)
	}
	for i, id := range []string{"..", ".", "a/b"} {
		n.must(t, http.StatusNoContent, "DELETE", p+"/"+url.PathEscape(id), tokAlice, nil, nil)
		var left server.ScheduleList
		n.must(t, http.StatusOK, "GET", p, tokAlice, nil, &left)
		require.Len(t, left.Schedules, 2-i, "after cancelling %q", id)
		n.must(t, http.StatusOK, "GET", "/v1/conversations/"+url.PathEscape(conv.ID), tokAlice, nil, nil)
	}

	// An empty id is not found, where it was redirected to another route.
	for _, e := range []endpoint{
		{"GET", "/v1/conversations//events", ""},
		{"DELETE", "/v1/conversations/" + url.PathEscape(conv.ID) + "//", ""},
		{"POST", "/v1/calls//resolve", `{"result":{}}`},
	} {
		status, out := n.call(t, e.method, e.path, tokOlga, bodyOf(e))
		require.Equal(t, http.StatusNotFound, status, "%s %s: %s", e.method, e.path, out)
		require.Equal(t, server.CodeNotFound, errorCode(t, out))
	}
}
