package server_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/server"
)

type endpoint struct {
	method, path, body string
}

// endpointsOn lists every endpoint that names a conversation or a call.
func endpointsOn(conv, call string) []endpoint {
	return []endpoint{
		{"GET", "/v1/conversations/" + conv, ""},
		{"DELETE", "/v1/conversations/" + conv, ""},
		{"POST", "/v1/conversations/" + conv + "/messages", `{"text":"hello"}`},
		{"GET", "/v1/conversations/" + conv + "/events", ""},
		{"GET", "/v1/conversations/" + conv + "/stream", ""},
		{"POST", "/v1/conversations/" + conv + "/end", ""},
		{"POST", "/v1/conversations/" + conv + "/rewind", `{"to_seq":0}`},
		{"POST", "/v1/conversations/" + conv + "/edit", `{"seq":1,"text":"hello"}`},
		{"POST", "/v1/conversations/" + conv + "/fork", `{"at_seq":1}`},
		{"GET", "/v1/conversations/" + conv + "/schedules", ""},
		{"POST", "/v1/conversations/" + conv + "/schedules", `{"after":"1h","text":"hello"}`},
		{"DELETE", "/v1/conversations/" + conv + "/schedules/s-1", ""},
		{"GET", "/v1/calls/" + call, ""},
		{"POST", "/v1/calls/" + call + "/resolve", `{"result":{"approved":true}}`},
		{"POST", "/v1/calls/" + call + "/reject", `{"reason":"no"}`},
	}
}

// TestAuthorizationMatrix tries every endpoint unauthenticated, as a
// stranger, as another user guessing ids, and as an approver, an owner
// and an operator; strangers learn nothing (the same 404 as for an id that
// does not exist) and change nothing.
func TestAuthorizationMatrix(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	n := startNode(t, model, server.Options{})
	conv, call := suspendOnApproval(t, ctx, n, model)

	// A second conversation of alice waits on "ask", a tool without an
	// authorizer: only its owner and operators see that call.
	other := n.create(t, tokAlice, nil)
	model.Push(other.ID, scripted.Reply("question", scripted.Call("ask", `{"q":"color?"}`)), scripted.Text("noted"))
	st := n.stream(t, ctx, tokAlice, other.ID, "")
	n.must(t, http.StatusAccepted, "POST", "/v1/conversations/"+other.ID+"/messages", tokAlice, server.SendMessage{Text: "ask me"}, nil)
	st.until(t, "turn_end", "suspended")
	var mine server.CallList
	n.must(t, http.StatusOK, "GET", "/v1/calls", tokAlice, nil, &mine)
	require.Len(t, mine.Calls, 2)
	var ask server.Call
	for _, c := range mine.Calls {
		if c.Tool == "ask" {
			ask = c
		}
	}
	require.NotEmpty(t, ask.ID)

	seq0, err := n.rt.Store().LastSeq(ctx, conv.ID)
	require.NoError(t, err)

	// Unauthenticated: no token, a wrong one, a malformed header.
	lists := []endpoint{{"GET", "/v1/conversations", ""}, {"POST", "/v1/conversations", `{}`}, {"GET", "/v1/calls", ""}}
	for _, e := range append(endpointsOn(conv.ID, call.ID), lists...) {
		for _, tok := range []string{"", "wrong", tokAlice + "x"} {
			status, body := n.call(t, e.method, e.path, tok, bodyOf(e))
			require.Equal(t, http.StatusUnauthorized, status, "%s %s with %q: %s", e.method, e.path, tok, body)
			require.Equal(t, server.CodeUnauthenticated, errorCode(t, body))
		}
	}

	// A stranger (bob) and an approver (carol) on alice's conversation,
	// and bob on the call: the same answer as for ids that do not exist.
	existing := endpointsOn(conv.ID, call.ID)
	missing := endpointsOn("c-00000000000000000000000000000000", "call-that-does-not-exist")
	for i := range existing {
		for _, tok := range []string{tokBob, tokCarol} {
			e, m := existing[i], missing[i]
			if tok == tokCarol && strings.HasPrefix(e.path, "/v1/calls/") {
				continue // carol may approve the call: below
			}
			status, body := n.call(t, e.method, e.path, tok, bodyOf(e))
			mstatus, mbody := n.call(t, m.method, m.path, tok, bodyOf(m))
			require.Equal(t, http.StatusNotFound, status, "%s %s as %s: %s", e.method, e.path, tok, body)
			require.Equal(t, mstatus, status)
			require.Equal(t, string(mbody), string(body), "%s %s: a stranger tells existing from missing", e.method, e.path)
		}
	}
	// carol sees neither the "ask" call (no authorizer) nor its
	// conversation.
	for _, e := range endpointsOn(other.ID, ask.ID) {
		status, body := n.call(t, e.method, e.path, tokCarol, bodyOf(e))
		require.Equal(t, http.StatusNotFound, status, "%s %s: %s", e.method, e.path, body)
	}

	// The listings show strangers nothing of alice's.
	var convs server.ConversationList
	n.must(t, http.StatusOK, "GET", "/v1/conversations", tokBob, nil, &convs)
	require.Empty(t, convs.Conversations)
	n.must(t, http.StatusOK, "GET", "/v1/conversations", tokCarol, nil, &convs)
	require.Empty(t, convs.Conversations)
	var calls server.CallList
	n.must(t, http.StatusOK, "GET", "/v1/calls", tokBob, nil, &calls)
	require.Empty(t, calls.Calls)
	n.must(t, http.StatusOK, "GET", "/v1/calls", tokCarol, nil, &calls)
	require.Len(t, calls.Calls, 1, "an approver sees the calls of the tools they may approve, only")
	require.Equal(t, call.ID, calls.Calls[0].ID)

	// Nothing changed.
	seq, err := n.rt.Store().LastSeq(ctx, conv.ID)
	require.NoError(t, err)
	require.Equal(t, seq0, seq)
	row, err := n.rt.Store().ToolCall(ctx, call.ID)
	require.NoError(t, err)
	require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING, row.GetStatus())
	n.must(t, http.StatusOK, "GET", "/v1/conversations/"+conv.ID, tokAlice, nil, nil)

	// alice sees her call but the tool wants an approver: 403.
	status, body := n.call(t, "POST", "/v1/calls/"+call.ID+"/resolve", tokAlice, `{"result":true}`)
	require.Equal(t, http.StatusForbidden, status, "%s", body)
	require.Equal(t, server.CodeForbidden, errorCode(t, body))
	// She answers the "ask" call of her own conversation.
	n.must(t, http.StatusOK, "POST", "/v1/calls/"+ask.ID+"/resolve", tokAlice, `{"result":"blue"}`, nil)
	// The operator sees everything.
	n.must(t, http.StatusOK, "GET", "/v1/conversations", tokOlga, nil, &convs)
	require.Len(t, convs.Conversations, 2)
	n.must(t, http.StatusOK, "GET", "/v1/conversations/"+conv.ID+"/events", tokOlga, nil, nil)
	// The operator sees the call, and the tool's rules apply to their
	// answer as to anyone's: 403, nothing written.
	status, body = n.call(t, "POST", "/v1/calls/"+call.ID+"/resolve", tokOlga, `{"result":true}`)
	require.Equal(t, http.StatusForbidden, status, "%s", body)
	require.Equal(t, server.CodeForbidden, errorCode(t, body))
	row, err = n.rt.Store().ToolCall(ctx, call.ID)
	require.NoError(t, err)
	require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING, row.GetStatus())
	// carol approves.
	n.must(t, http.StatusOK, "POST", "/v1/calls/"+call.ID+"/reject", tokCarol, `{"reason":"over budget"}`, nil)
	status, body = n.call(t, "POST", "/v1/calls/"+call.ID+"/resolve", tokCarol, `{"result":true}`)
	require.Equal(t, http.StatusConflict, status)
	require.Equal(t, server.CodeStale, errorCode(t, body))
	// An unknown route under /v1/ is a JSON 404.
	status, body = n.call(t, "GET", "/v1/nothing", tokOlga, nil)
	require.Equal(t, http.StatusNotFound, status)
	require.Equal(t, server.CodeNotFound, errorCode(t, body))
}

func bodyOf(e endpoint) any {
	if e.body == "" {
		return nil
	}
	return e.body
}

// TestListingPages: the conversation listing pages with its cursor, a
// user's pages hold only their conversations, and metadata[KEY]=VALUE
// finds the conversations tagged so.
func TestListingPages(t *testing.T) {
	n := startNode(t, newScripted(), server.Options{})
	want := map[string]bool{}
	for i := range 5 {
		want[n.create(t, tokAlice, nil).ID] = true
		if i%2 == 0 {
			n.create(t, tokBob, nil)
		}
	}
	got := map[string]bool{}
	cursor := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 10)
		var page server.ConversationList
		n.must(t, http.StatusOK, "GET", "/v1/conversations?limit=2&cursor="+cursor, tokAlice, nil, &page)
		require.LessOrEqual(t, len(page.Conversations), 2)
		for _, c := range page.Conversations {
			require.False(t, got[c.ID], "listed twice")
			got[c.ID] = true
		}
		if page.NextCursor == "" {
			break
		}
		cursor = page.NextCursor
	}
	require.Equal(t, want, got)

	// Search by metadata.
	tagged := n.create(t, tokAlice, map[string]string{"topic": "refund", "lang": "fr"})
	n.create(t, tokAlice, map[string]string{"topic": "refund", "lang": "en"})
	n.create(t, tokBob, map[string]string{"topic": "refund", "lang": "fr"})
	var found server.ConversationList
	n.must(t, http.StatusOK, "GET", "/v1/conversations?metadata[topic]=refund&metadata[lang]=fr", tokAlice, nil, &found)
	require.Len(t, found.Conversations, 1)
	require.Equal(t, tagged.ID, found.Conversations[0].ID)
	n.must(t, http.StatusOK, "GET", "/v1/conversations?metadata[topic]=refund&metadata[lang]=fr", tokOlga, nil, &found)
	require.Len(t, found.Conversations, 2, "an operator finds everyone's")
	n.must(t, http.StatusBadRequest, "GET", "/v1/conversations?metadata[topic=refund", tokAlice, nil, nil)
	n.must(t, http.StatusBadRequest, "GET", "/v1/conversations?metadata[]=x", tokAlice, nil, nil)
}

// TestLastFullPageHasNoCursor: a listing page that ends on the Store's
// last row, filled to its limit, has no next_cursor, as NextCursor's doc
// says ("" when there is no more): it had one, naming an empty page, so a
// filtered listing read through a node said there was more where the
// same listing read from the Store said there was not.
func TestLastFullPageHasNoCursor(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	n := startNode(t, model, server.Options{})
	suspendOnApproval(t, ctx, n, model)
	other := n.create(t, tokAlice, map[string]string{"topic": "refund"})
	model.Push(other.ID, scripted.Reply("question", scripted.Call("ask", `{"q":"color?"}`)), scripted.Text("noted"))
	st := n.stream(t, ctx, tokAlice, other.ID, "")
	n.must(t, http.StatusAccepted, "POST", "/v1/conversations/"+other.ID+"/messages", tokAlice, server.SendMessage{Text: "ask me"}, nil)
	st.until(t, "turn_end", "suspended")

	var convs server.ConversationList
	n.must(t, http.StatusOK, "GET", "/v1/conversations?limit=2", tokOlga, nil, &convs)
	require.Len(t, convs.Conversations, 2)
	require.Empty(t, convs.NextCursor)
	n.must(t, http.StatusOK, "GET", "/v1/conversations?limit=1", tokOlga, nil, &convs)
	require.Len(t, convs.Conversations, 1)
	require.NotEmpty(t, convs.NextCursor, "a page before the last has a cursor")
	n.must(t, http.StatusOK, "GET", "/v1/conversations?limit=1&metadata[topic]=refund", tokOlga, nil, &convs)
	require.Len(t, convs.Conversations, 1)
	require.Empty(t, convs.NextCursor)

	var calls server.CallList
	n.must(t, http.StatusOK, "GET", "/v1/calls?limit=2", tokOlga, nil, &calls)
	require.Len(t, calls.Calls, 2)
	require.Empty(t, calls.NextCursor)
	n.must(t, http.StatusOK, "GET", "/v1/calls?limit=1", tokOlga, nil, &calls)
	require.Len(t, calls.Calls, 1)
	require.NotEmpty(t, calls.NextCursor, "a page before the last has a cursor")
}
