package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/server"
)

// TestStreamEndsWithErrorOnClose: closing the Runtime ends its streams
// with an error message (code "closed"), not a bare end of the body.
func TestStreamEndsWithErrorOnClose(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	n := startNode(t, model, server.Options{})
	conv := n.create(t, tokAlice, nil)
	st := n.stream(t, ctx, tokAlice, conv.ID, "")
	n.must(t, http.StatusAccepted, "POST", "/v1/conversations/"+conv.ID+"/messages", tokAlice, server.SendMessage{Text: "hi"}, nil)
	st.until(t, "turn_end", "answered")

	require.NoError(t, n.rt.Close())
	m := st.next(t)
	require.Equal(t, "error", m.Event, "%+v", m)
	require.Contains(t, m.Data, `"code":"closed"`)
	require.False(t, st.sc.Scan(), "the stream goes on after its error")

	// Liveness stays, readiness goes.
	n.must(t, http.StatusOK, "GET", "/healthz", "", nil, nil)
	n.must(t, http.StatusServiceUnavailable, "GET", "/readyz", "", nil, nil)
}

// TestListingsShowNoStrangersIDs: a page of a listing that runs out of
// its scan budget among others' rows resumes without naming them: no id
// of a conversation or call the caller may not see is in the answer.
func TestListingsShowNoStrangersIDs(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	n := startNode(t, model, server.Options{})
	var ids []string
	for range 25 {
		c := n.create(t, tokAlice, nil)
		ids = append(ids, c.ID)
	}
	// Pending calls of alice's: on "ask" (only she and operators see them).
	for _, id := range ids {
		model.Push(id, scripted.Reply("q", scripted.Call("ask", `{"q":"?"}`)))
		n.must(t, http.StatusAccepted, "POST", "/v1/conversations/"+id+"/messages", tokAlice, server.SendMessage{Text: "ask"}, nil)
	}
	require.Eventually(t, func() bool {
		calls, _, err := n.rt.PendingCalls(ctx, "", 100)
		return err == nil && len(calls) == len(ids)
	}, 30*time.Second, 10*time.Millisecond)
	calls, _, err := n.rt.PendingCalls(ctx, "", 100)
	require.NoError(t, err)

	leaks := func(body []byte) string {
		for _, id := range ids {
			if strings.Contains(string(body), id) {
				return id
			}
		}
		for _, c := range calls {
			if strings.Contains(string(body), c.GetId()) {
				return c.GetId()
			}
		}
		return ""
	}
	for _, path := range []string{"/v1/conversations", "/v1/calls", "/v1/conversations?metadata[lazarus.owner]=alice"} {
		seen := 0
		cursor := ""
		for pages := 0; ; pages++ {
			require.Less(t, pages, 100)
			sep := "?"
			if strings.Contains(path, "?") {
				sep = "&"
			}
			status, body := n.call(t, "GET", path+sep+"limit=1&cursor="+cursor, tokBob, nil)
			require.Equal(t, http.StatusOK, status, "%s", body)
			require.Empty(t, leaks(body), "%s: bob learns an id of alice's: %s", path, body)
			var page struct {
				Conversations []server.Conversation `json:"conversations"`
				Calls         []server.Call         `json:"calls"`
				NextCursor    string                `json:"next_cursor"`
			}
			require.NoError(t, json.Unmarshal(body, &page))
			seen += len(page.Conversations) + len(page.Calls)
			if page.NextCursor == "" {
				break
			}
			cursor = url.QueryEscape(page.NextCursor)
		}
		require.Zero(t, seen, path)
	}
	// A sealed cursor that does not open is a bad request.
	for _, path := range []string{"/v1/conversations", "/v1/calls"} {
		status, body := n.call(t, "GET", path+"?cursor=~AAAA", tokBob, nil)
		require.Equal(t, http.StatusBadRequest, status, "%s", body)
		require.Equal(t, server.CodeInvalid, errorCode(t, body))
	}
	// alice pages through all of hers, one at a time.
	for _, path := range []string{"/v1/conversations", "/v1/calls"} {
		got := map[string]bool{}
		cursor := ""
		for pages := 0; ; pages++ {
			require.Less(t, pages, 100)
			var page struct {
				Conversations []server.Conversation `json:"conversations"`
				Calls         []server.Call         `json:"calls"`
				NextCursor    string                `json:"next_cursor"`
			}
			n.must(t, http.StatusOK, "GET", fmt.Sprintf("%s?limit=1&cursor=%s", path, cursor), tokAlice, nil, &page)
			for _, c := range page.Conversations {
				got[c.ID] = true
			}
			for _, c := range page.Calls {
				got[c.ID] = true
			}
			if page.NextCursor == "" {
				break
			}
			cursor = url.QueryEscape(page.NextCursor)
		}
		require.Len(t, got, len(ids), path)
	}
}
