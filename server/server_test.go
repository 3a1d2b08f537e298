package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/server"
)

// suspendOnApproval creates a conversation of alice whose model asks the
// "approve" tool, sends to it, and returns the conversation and the
// pending call, read over HTTP.
func suspendOnApproval(t *testing.T, ctx context.Context, n *node, model *scripted.Model) (server.Conversation, server.Call) {
	t.Helper()
	conv := n.create(t, tokAlice, map[string]string{"topic": "payment"})
	model.Push(conv.ID, scripted.Reply("checking", scripted.Call("approve", `{"amount":120}`)), scripted.Text("paid"))
	st := n.stream(t, ctx, tokAlice, conv.ID, "")
	n.must(t, http.StatusAccepted, "POST", "/v1/conversations/"+conv.ID+"/messages", tokAlice, server.SendMessage{Text: "pay 120"}, nil)
	st.until(t, "turn_end", `"suspended"`)
	st.close()
	var calls server.CallList
	n.must(t, http.StatusOK, "GET", "/v1/calls", tokCarol, nil, &calls)
	require.Len(t, calls.Calls, 1)
	return conv, calls.Calls[0]
}

// TestConversationWithHumanApproval: a whole conversation over HTTP: alice
// creates it and sends, the model asks for an approval, carol (an
// approver) finds it in the queue with its prompt, arguments and deadline
// and approves it; the turn ends with the answer, and the log records
// carol as the resolver.
func TestConversationWithHumanApproval(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	n := startNode(t, model, server.Options{})
	conv := n.create(t, tokAlice, map[string]string{"topic": "payment"})
	require.Equal(t, "alice", conv.Metadata[server.OwnerKey])
	require.Equal(t, "payment", conv.Metadata["topic"])
	require.Equal(t, "idle", conv.Status)

	model.Push(conv.ID, scripted.Reply("checking", scripted.Call("approve", `{"amount":120}`)), scripted.Text("paid"))
	st := n.stream(t, ctx, tokAlice, conv.ID, "")
	var sent server.Sent
	n.must(t, http.StatusAccepted, "POST", "/v1/conversations/"+conv.ID+"/messages", tokAlice, server.SendMessage{Text: "pay 120"}, &sent)
	require.EqualValues(t, 1, sent.Seq)
	st.until(t, "turn_end", `"suspended"`)

	var calls server.CallList
	n.must(t, http.StatusOK, "GET", "/v1/calls", tokCarol, nil, &calls)
	require.Len(t, calls.Calls, 1)
	call := calls.Calls[0]
	require.Equal(t, "approve", call.Tool)
	require.Equal(t, conv.ID, call.ConversationID)
	require.Equal(t, "pending", call.Status)
	require.Equal(t, `Approve the payment {"amount":120}?`, call.Prompt)
	require.JSONEq(t, `{"amount":120}`, string(call.Arguments))
	require.NotNil(t, call.Deadline)
	require.Equal(t, "alice", call.Requester.UserID)

	var shown server.Call
	n.must(t, http.StatusOK, "GET", "/v1/calls/"+call.ID, tokCarol, nil, &shown)
	require.Equal(t, call.Prompt, shown.Prompt)

	var answered server.Answered
	n.must(t, http.StatusOK, "POST", "/v1/calls/"+call.ID+"/resolve", tokCarol, map[string]any{"result": map[string]bool{"approved": true}}, &answered)
	require.Equal(t, "resolved", answered.Status)
	ends := st.until(t, "turn_end", `"answered"`)
	require.Equal(t, "event", ends[len(ends)-2].Event, "the answer's event comes before its turn end")

	n.must(t, http.StatusOK, "GET", "/v1/calls/"+call.ID, tokAlice, nil, &shown)
	require.Equal(t, "resolved", shown.Status)
	require.Equal(t, "carol", shown.Resolver.UserID)
	require.Equal(t, []string{"approver"}, shown.Resolver.Roles)

	var page server.EventPage
	n.must(t, http.StatusOK, "GET", "/v1/conversations/"+conv.ID+"/events", tokAlice, nil, &page)
	var resolution *messages.Event
	for _, raw := range page.Events {
		var ev messages.Event
		require.NoError(t, protojsonUnmarshal(raw, &ev))
		if ev.GetResolution() != nil {
			resolution = &ev
		}
	}
	require.NotNil(t, resolution, "no resolution event in %s", page.Events)
	require.Equal(t, "carol", resolution.GetResolution().GetResolver().GetUserId())
	last := page.Events[len(page.Events)-1]
	require.Contains(t, string(last), `"paid"`)

	// History pages backwards.
	var first server.EventPage
	n.must(t, http.StatusOK, "GET", "/v1/conversations/"+conv.ID+"/events?limit=2", tokAlice, nil, &first)
	require.Len(t, first.Events, 2)
	require.NotZero(t, first.NextBefore)
	var older server.EventPage
	n.must(t, http.StatusOK, "GET", fmt.Sprintf("/v1/conversations/%s/events?limit=2&before=%d", conv.ID, first.NextBefore), tokAlice, nil, &older)
	require.Len(t, older.Events, 2)
	require.Contains(t, string(older.Events[1]), fmt.Sprintf(`"seq":"%d"`, first.NextBefore-1))

	// The conversation is listed with its status and metadata; then deleted.
	var list server.ConversationList
	n.must(t, http.StatusOK, "GET", "/v1/conversations", tokAlice, nil, &list)
	require.Len(t, list.Conversations, 1)
	require.Equal(t, "idle", list.Conversations[0].Status)
	require.Equal(t, "payment", list.Conversations[0].Metadata["topic"])
	n.must(t, http.StatusNoContent, "DELETE", "/v1/conversations/"+conv.ID, tokAlice, nil, nil)
	n.must(t, http.StatusNotFound, "GET", "/v1/conversations/"+conv.ID, tokAlice, nil, nil)
	status, body := n.call(t, "GET", "/v1/conversations/"+conv.ID, tokOlga, nil)
	require.Equal(t, http.StatusGone, status)
	require.Equal(t, server.CodeDeleted, errorCode(t, body))
}

// TestConversationOnPebble: a conversation created over HTTP on the
// Pebble store is answered, and outlives a restart with its owner.
func TestConversationOnPebble(t *testing.T) {
	ctx := testContext(t)
	dir := t.TempDir()
	model := newScripted()
	n := startNodeIn(t, dir, model, server.Options{})
	conv := n.create(t, tokAlice, map[string]string{"k": "v"})
	model.Push(conv.ID, scripted.Text("hello"))
	st := n.stream(t, ctx, tokAlice, conv.ID, "")
	n.must(t, http.StatusAccepted, "POST", "/v1/conversations/"+conv.ID+"/messages", tokAlice, server.SendMessage{Text: "hi", RequestID: "r1"}, nil)
	st.until(t, "turn_end", "answered")
	st.close()
	// A retried send with the same request id appends nothing.
	var sent server.Sent
	n.must(t, http.StatusAccepted, "POST", "/v1/conversations/"+conv.ID+"/messages", tokAlice, server.SendMessage{Text: "hi", RequestID: "r1"}, &sent)
	require.EqualValues(t, 1, sent.Seq)
	n.srv.Close()
	require.NoError(t, n.rt.Close())

	n = startNodeIn(t, dir, model, server.Options{})
	var got server.Conversation
	n.must(t, http.StatusOK, "GET", "/v1/conversations/"+conv.ID, tokAlice, nil, &got)
	require.Equal(t, "idle", got.Status)
	require.Equal(t, map[string]string{"k": "v", server.OwnerKey: "alice"}, got.Metadata)
	var page server.EventPage
	n.must(t, http.StatusOK, "GET", "/v1/conversations/"+conv.ID+"/events", tokAlice, nil, &page)
	require.Len(t, page.Events, 2)
	n.must(t, http.StatusNotFound, "GET", "/v1/conversations/"+conv.ID, tokBob, nil, nil)
}

// TestConcurrentResolvesOneWins: 50 resolves of one call at once over HTTP:
// exactly one 200, the others 409 stale.
func TestConcurrentResolvesOneWins(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	n := startNode(t, model, server.Options{})
	_, call := suspendOnApproval(t, ctx, n, model)
	const resolvers = 50
	statuses := make([]int, resolvers)
	codes := make([]string, resolvers)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range resolvers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			req, err := http.NewRequestWithContext(ctx, "POST", n.srv.URL+"/v1/calls/"+call.ID+"/resolve",
				strings.NewReader(fmt.Sprintf(`{"result":{"n":%d}}`, i)))
			if err != nil {
				return
			}
			req.Header.Set("Authorization", "Bearer "+tokCarol)
			res, err := n.srv.Client().Do(req)
			if err != nil {
				return
			}
			defer res.Body.Close()
			statuses[i] = res.StatusCode
			var e struct{ Error struct{ Code string } }
			_ = json.NewDecoder(res.Body).Decode(&e)
			codes[i] = e.Error.Code
		}()
	}
	close(start)
	wg.Wait()
	won := 0
	for i, s := range statuses {
		switch s {
		case http.StatusOK:
			won++
		case http.StatusConflict:
			require.Equal(t, server.CodeStale, codes[i])
		default:
			t.Fatalf("resolve %d answered %d (%s)", i, s, codes[i])
		}
	}
	require.Equal(t, 1, won)
	row, err := n.rt.Store().ToolCall(ctx, call.ID)
	require.NoError(t, err)
	require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED, row.GetStatus())
}

// TestBadBodiesWriteNothing: wrong types, huge bodies, invalid UTF-8,
// unknown fields, trailing data, bodies that are no object (null included)
// and invalid values are answered 400 (a body over the limit, 413) and
// change nothing.
func TestBadBodiesWriteNothing(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	n := startNode(t, model, server.Options{MaxBodyBytes: 1024})
	conv, call := suspendOnApproval(t, ctx, n, model)
	lastSeq := func() uint64 {
		seq, err := n.rt.Store().LastSeq(ctx, conv.ID)
		require.NoError(t, err)
		return seq
	}
	countConvs := func() int {
		rows, _, err := n.rt.Store().ListConversations(ctx, "", 1000)
		require.NoError(t, err)
		return len(rows)
	}
	seq0, convs0 := lastSeq(), countConvs()
	huge := `{"text":"` + strings.Repeat("x", 2048) + `"}`
	msgs := "/v1/conversations/" + conv.ID + "/messages"
	end, rewind := "/v1/conversations/"+conv.ID+"/end", "/v1/conversations/"+conv.ID+"/rewind"
	edit, fork := "/v1/conversations/"+conv.ID+"/edit", "/v1/conversations/"+conv.ID+"/fork"
	cases := []struct {
		name, path, body, code string
	}{
		{"send: wrong type", msgs, `{"text":5}`, server.CodeInvalid},
		{"send: huge", msgs, huge, server.CodeTooLarge},
		{"send: invalid UTF-8", msgs, "{\"text\":\"\xff\xfe\"}", server.CodeInvalid},
		{"send: unknown field", msgs, `{"text":"hi","admin":true}`, server.CodeInvalid},
		{"send: trailing data", msgs, `{"text":"hi"} {"text":"again"}`, server.CodeInvalid},
		{"send: not an object", msgs, `["hi"]`, server.CodeInvalid},
		{"send: empty body", msgs, ``, server.CodeInvalid},
		{"send: empty text", msgs, `{"text":""}`, server.CodeInvalid},
		{"send: text of invalid JSON escape", msgs, `{"text":"\x41"}`, server.CodeInvalid},
		{"create: wrong type", "/v1/conversations", `{"metadata":["a"]}`, server.CodeInvalid},
		{"create: reserved key", "/v1/conversations", `{"metadata":{"lazarus.owner":"bob"}}`, server.CodeInvalid},
		{"create: empty value", "/v1/conversations", `{"metadata":{"a":""}}`, server.CodeInvalid},
		{"create: null", "/v1/conversations", `null`, server.CodeInvalid},
		{"create: unknown field", "/v1/conversations", `{"metadata":{},"owner":"bob"}`, server.CodeInvalid},
		{"create: invalid UTF-8 key", "/v1/conversations", "{\"metadata\":{\"\xc3\x28\":\"v\"}}", server.CodeInvalid},
		{"create: huge", "/v1/conversations", `{"metadata":{"a":"` + strings.Repeat("x", 2048) + `"}}`, server.CodeTooLarge},
		{"resolve: no result", "/v1/calls/" + call.ID + "/resolve", `{}`, server.CodeInvalid},
		{"resolve: null result", "/v1/calls/" + call.ID + "/resolve", `{"result":null}`, server.CodeInvalid},
		{"resolve: unknown field", "/v1/calls/" + call.ID + "/resolve", `{"result":1,"by":"olga"}`, server.CodeInvalid},
		{"resolve: invalid UTF-8", "/v1/calls/" + call.ID + "/resolve", "{\"result\":\"\xff\"}", server.CodeInvalid},
		{"resolve: huge", "/v1/calls/" + call.ID + "/resolve", `{"result":"` + strings.Repeat("x", 2048) + `"}`, server.CodeTooLarge},
		{"reject: wrong type", "/v1/calls/" + call.ID + "/reject", `{"reason":false}`, server.CodeInvalid},
		{"reject: empty reason", "/v1/calls/" + call.ID + "/reject", `{"reason":""}`, server.CodeInvalid},
		{"end: unknown field", end, `{"now":true}`, server.CodeInvalid},
		{"end: not an object", end, `[]`, server.CodeInvalid},
		{"end: null", end, `null`, server.CodeInvalid},
		{"end: a call open", end, ``, server.CodeInvalid},
		{"rewind: no to_seq", rewind, `{"reason":"r"}`, server.CodeInvalid},
		{"rewind: null to_seq", rewind, `{"to_seq":null}`, server.CodeInvalid},
		{"rewind: negative", rewind, `{"to_seq":-1}`, server.CodeInvalid},
		{"rewind: not an integer", rewind, `{"to_seq":1.5}`, server.CodeInvalid},
		{"rewind: after the last seq", rewind, `{"to_seq":999}`, server.CodeInvalid},
		{"rewind: unknown field", rewind, `{"to_seq":0,"files":true}`, server.CodeInvalid},
		{"rewind: empty body", rewind, ``, server.CodeInvalid},
		{"rewind: huge", rewind, `{"to_seq":0,"reason":"` + strings.Repeat("x", 2048) + `"}`, server.CodeTooLarge},
		{"edit: no seq", edit, `{"text":"hi"}`, server.CodeInvalid},
		{"edit: zero seq", edit, `{"seq":0,"text":"hi"}`, server.CodeInvalid},
		{"edit: negative seq", edit, `{"seq":-1,"text":"hi"}`, server.CodeInvalid},
		{"edit: no text", edit, `{"seq":1}`, server.CodeInvalid},
		{"edit: not a user message", edit, `{"seq":2,"text":"hi"}`, server.CodeInvalid},
		{"edit: unknown field", edit, `{"seq":1,"text":"hi","author":"bob"}`, server.CodeInvalid},
		{"fork: no at_seq", fork, `{}`, server.CodeInvalid},
		{"fork: zero at_seq", fork, `{"at_seq":0}`, server.CodeInvalid},
		{"fork: negative at_seq", fork, `{"at_seq":-3}`, server.CodeInvalid},
		{"fork: after the last seq", fork, `{"at_seq":999}`, server.CodeInvalid},
		{"fork: reserved key", fork, `{"at_seq":1,"metadata":{"lazarus.owner":"bob"}}`, server.CodeInvalid},
		{"fork: empty value", fork, `{"at_seq":1,"metadata":{"a":""}}`, server.CodeInvalid},
		{"fork: null", fork, `null`, server.CodeInvalid},
		{"fork: unknown field", fork, `{"at_seq":1,"id":"c-mine"}`, server.CodeInvalid},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, body := n.call(t, "POST", c.path, tokOlga, c.body)
			want := http.StatusBadRequest
			if c.code == server.CodeTooLarge {
				want = http.StatusRequestEntityTooLarge
			}
			require.Equal(t, want, status, "%s", body)
			require.Equal(t, c.code, errorCode(t, body))
		})
	}
	for _, q := range []string{"limit=0", "limit=x", "limit=100000", "before=-1"} {
		status, body := n.call(t, "GET", "/v1/conversations/"+conv.ID+"/events?"+q, tokAlice, nil)
		require.Equal(t, http.StatusBadRequest, status, "%s: %s", q, body)
	}
	status, body := n.call(t, "GET", "/v1/calls?cursor=garbage", tokOlga, nil)
	require.Equal(t, http.StatusBadRequest, status, "%s", body)

	require.Equal(t, seq0, lastSeq(), "a bad request wrote to the log")
	require.Equal(t, convs0, countConvs(), "a bad request created a conversation")
	row, err := n.rt.Store().ToolCall(ctx, call.ID)
	require.NoError(t, err)
	require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING, row.GetStatus())
	md, err := n.rt.Metadata(ctx, conv.ID)
	require.NoError(t, err)
	require.Equal(t, "alice", md[server.OwnerKey])
	var got server.Conversation
	n.must(t, http.StatusOK, "GET", "/v1/conversations/"+conv.ID, tokAlice, nil, &got)
	require.Equal(t, "suspended", got.Status, "a bad request ended the conversation")
}

// TestHealthReadinessAndMetrics: /healthz and /readyz answer, /metrics is
// for operators and names every series, and /readyz fails once the
// Runtime is closed.
func TestHealthReadinessAndMetrics(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	n := startNode(t, model, server.Options{})
	conv, call := suspendOnApproval(t, ctx, n, model)
	st := n.stream(t, ctx, tokAlice, conv.ID, "")
	n.must(t, http.StatusOK, "POST", "/v1/calls/"+call.ID+"/reject", tokCarol, server.Reject{Reason: "too much"}, nil)
	st.until(t, "turn_end", `"answered"`) // the turn is over: nothing is ACTIVE or pending
	st.close()

	n.must(t, http.StatusOK, "GET", "/healthz", "", nil, nil)
	n.must(t, http.StatusOK, "GET", "/readyz", "", nil, nil)
	n.must(t, http.StatusUnauthorized, "GET", "/metrics", "", nil, nil)
	n.must(t, http.StatusForbidden, "GET", "/metrics", tokAlice, nil, nil)
	status, body := n.call(t, "GET", "/metrics", tokOlga, nil)
	require.Equal(t, http.StatusOK, status)
	text := string(body)
	for _, series := range []string{
		"lazarus_journal_commit_seconds_count", "lazarus_journal_commit_requests_bucket{",
		"lazarus_journal_appends_total", "lazarus_journal_appends_unknown_total", "lazarus_journal_events_total",
		"lazarus_conversations_live", "lazarus_conversations_active", "lazarus_conversation_activations_total", "lazarus_conversation_passivations_total",
		"lazarus_conversation_fenced_total", "lazarus_human_calls_pending", "lazarus_human_calls_expired_total",
		"lazarus_schedules", `lazarus_schedule_fires_total{outcome="delivered"}`,
		"lazarus_model_call_seconds_count", "lazarus_model_call_errors_total",
		"lazarus_subscriptions", `lazarus_turns_total{outcome="answered"}`, `lazarus_tool_calls_total{executor="human"}`,
	} {
		require.Contains(t, text, "\n"+series, "series %s", series)
	}
	// What happened shows: commits, events, a model call, an activation.
	for _, zero := range []string{"lazarus_journal_events_total 0", "lazarus_model_call_seconds_count 0",
		"lazarus_conversation_activations_total 0", "lazarus_journal_commit_seconds_count 0"} {
		require.NotContains(t, text, zero+"\n")
	}
	require.Contains(t, text, "lazarus_human_calls_pending 0\n")
	require.Contains(t, text, "lazarus_conversations_active 0\n")
	require.Contains(t, text, "lazarus_schedules 0\n")

	require.NoError(t, n.rt.Close())
	status, body = n.call(t, "GET", "/readyz", "", nil)
	require.Equal(t, http.StatusServiceUnavailable, status)
	require.Equal(t, server.CodeClosed, errorCode(t, body))
	status, body = n.call(t, "GET", "/v1/calls", tokOlga, nil)
	require.Equal(t, http.StatusServiceUnavailable, status)
	require.Equal(t, server.CodeClosed, errorCode(t, body))
}

// TestBearerTokens: tokens map to identities; anything else is refused.
func TestBearerTokens(t *testing.T) {
	_, err := server.NewBearerTokens(map[string]agent.Identity{"": {UserID: "a"}})
	require.Error(t, err)
	_, err = server.NewBearerTokens(map[string]agent.Identity{"t": {UserID: agent.SystemUserID}})
	require.Error(t, err)
	_, err = server.NewBearerTokens(map[string]agent.Identity{"t": {UserID: "a", Roles: []string{""}}})
	require.Error(t, err)
	// A token a header cannot carry as one credential is refused, without
	// quoting it.
	for _, tok := range []string{"a b", " ab", "ab ", "a\tb"} {
		_, err = server.NewBearerTokens(map[string]agent.Identity{tok: {UserID: "a"}})
		require.ErrorIs(t, err, journal.ErrInvalid, "%q", tok)
		require.NotContains(t, err.Error(), tok)
	}
	b, err := server.NewBearerTokens(map[string]agent.Identity{"secret-1": {UserID: "a", Roles: []string{"r"}}, "secret-2": {UserID: "b"}})
	require.NoError(t, err)
	for header, want := range map[string]string{
		"Bearer secret-1": "a", "bearer secret-2": "b", "Bearer secret-": "", "Bearer secret-12": "",
		"Basic secret-1": "", "secret-1": "", "": "", "Bearer ": "",
		// RFC 9110: 1*SP between the scheme, of any case, and the token.
		"Bearer  secret-1": "a", "BEARER   secret-2": "b", "Bearer   ": "",
		// Nothing else: no tab, no second word, no space in a token.
		"Bearer\tsecret-1": "", "Bearer \tsecret-1": "", "Bearer secret-1 x": "", "Bearer secret -1": "",
		// The optional whitespace around a field's value is not part of it.
		" Bearer secret-1\t": "a",
	} {
		r, _ := http.NewRequest("GET", "/", nil)
		r.Header.Set("Authorization", header)
		id, ok := b.Authenticate(r)
		require.Equal(t, want != "", ok, header)
		require.Equal(t, want, id.UserID, header)
	}
}

// TestTwoAuthorizationHeadersAreRefused: a request with more than one
// Authorization header is refused (401 unauthenticated, as the package
// documents), whatever they hold, not authenticated as the first.
func TestTwoAuthorizationHeadersAreRefused(t *testing.T) {
	b, err := server.NewBearerTokens(map[string]agent.Identity{"secret-1": {UserID: "a"}, "secret-2": {UserID: "b"}})
	require.NoError(t, err)
	for _, headers := range [][]string{
		{"Bearer secret-1", "Bearer secret-2"},
		{"Bearer secret-1", "Bearer secret-1"},
		{"Bearer secret-1", "Basic x"},
		{"Bearer nope", "Bearer secret-2"},
		{"Bearer secret-1", ""},
	} {
		r, _ := http.NewRequest("GET", "/", nil)
		for _, h := range headers {
			r.Header.Add("Authorization", h)
		}
		id, ok := b.Authenticate(r)
		require.False(t, ok, "%q", headers)
		require.Empty(t, id.UserID, "%q", headers)
	}

	n := startNode(t, newScripted(), server.Options{})
	for _, path := range []string{"/v1/conversations", "/metrics"} {
		req, err := http.NewRequest("GET", n.srv.URL+path, nil)
		require.NoError(t, err)
		req.Header.Add("Authorization", "Bearer "+tokOlga)
		req.Header.Add("Authorization", "Bearer "+tokAlice)
		res, err := n.srv.Client().Do(req)
		require.NoError(t, err)
		body, err := io.ReadAll(res.Body)
		res.Body.Close()
		require.NoError(t, err)
		require.Equal(t, http.StatusUnauthorized, res.StatusCode, "%s: %s", path, body)
		require.Equal(t, server.CodeUnauthenticated, errorCode(t, body), path)
		// The first alone is served.
		n.must(t, http.StatusOK, "GET", path, tokOlga, nil, nil)
	}
}

// TestFailsClosedAndPublicMetrics: without an Authenticator every /v1/
// request is 401 (the OpenAPI document and the probes excepted); with
// PublicMetrics, /metrics needs no token.
func TestFailsClosedAndPublicMetrics(t *testing.T) {
	rt, err := lazarus.Open(lazarus.Options{Model: newScripted(), NoResume: true})
	require.NoError(t, err)
	defer rt.Close()
	srv := httptest.NewServer(server.New(rt, server.Options{PublicMetrics: true}))
	defer srv.Close()
	get := func(path string) int {
		req, err := http.NewRequest("GET", srv.URL+path, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer anything")
		res, err := srv.Client().Do(req)
		require.NoError(t, err)
		res.Body.Close()
		return res.StatusCode
	}
	require.Equal(t, http.StatusUnauthorized, get("/v1/conversations"))
	require.Equal(t, http.StatusUnauthorized, get("/v1/calls"))
	require.Equal(t, http.StatusOK, get("/v1/openapi.json"))
	require.Equal(t, http.StatusOK, get("/metrics"))
	require.Equal(t, http.StatusOK, get("/healthz"))
	require.Equal(t, http.StatusOK, get("/readyz"))
}

// TestSendToANamedAgent: a send over HTTP addresses a named agent, or is a
// bad request for an unknown one; the events say whose they are.
func TestSendToANamedAgent(t *testing.T) {
	ctx := testContext(t)
	model, crit := newScripted(), newScripted()
	n := startNodeIn(t, "", model, server.Options{}, func(o *lazarus.Options) {
		o.Agents = []lazarus.Agent{{Name: "critic", Model: crit}}
	})
	conv := n.create(t, tokAlice, nil)
	crit.Push(conv.ID, scripted.Text("a critique"))
	st := n.stream(t, ctx, tokAlice, conv.ID, "")
	n.must(t, http.StatusAccepted, "POST", "/v1/conversations/"+conv.ID+"/messages", tokAlice,
		server.SendMessage{Text: "review", Agent: "critic", Broadcast: true}, nil)
	st.until(t, "turn_end", "answered")
	st.close()
	status, body := n.call(t, "POST", "/v1/conversations/"+conv.ID+"/messages", tokAlice, server.SendMessage{Text: "hi", Agent: "ghost"})
	require.Equal(t, http.StatusBadRequest, status)
	require.Equal(t, server.CodeInvalid, errorCode(t, body))
	evs, err := n.rt.History(ctx, conv.ID, 0, 0)
	require.NoError(t, err)
	require.Len(t, evs, 2)
	require.Equal(t, "critic", evs[0].GetAgent())
	require.Equal(t, []string{"*"}, evs[0].GetAudience())
	require.Equal(t, "critic", evs[1].GetAgent())
	require.Zero(t, model.Calls(conv.ID))
}

// TestCallOutcomes: GET /v1/calls/{id} says how each call ended, beyond its
// status: an approval is "answered" and names its resolver, a rejection
// "rejected" (status "errored"), an expiry "expired", and a call a rewind
// took back "cancelled" (status "errored" too, with no resolver): it was
// told from a rejection by nothing.
func TestCallOutcomes(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	n := startNode(t, model, server.Options{})
	get := func(id string) server.Call {
		var c server.Call
		n.must(t, http.StatusOK, "GET", "/v1/calls/"+id, tokCarol, nil, &c)
		return c
	}

	_, call := suspendOnApproval(t, ctx, n, model)
	require.Equal(t, server.CallPending, call.Outcome)
	var answered server.Answered
	n.must(t, http.StatusOK, "POST", "/v1/calls/"+call.ID+"/resolve", tokCarol, server.Resolve{Result: json.RawMessage(`{"approved":true}`)}, &answered)
	c := get(call.ID)
	require.Equal(t, "resolved", c.Status)
	require.Equal(t, server.CallAnswered, c.Outcome)
	require.Equal(t, "carol", c.Resolver.UserID)
	require.Equal(t, server.Answered{ID: call.ID, Status: c.Status, Outcome: c.Outcome}, answered, "the resolve's answer has the call's status and outcome")

	_, call = suspendOnApproval(t, ctx, n, model)
	answered = server.Answered{}
	n.must(t, http.StatusOK, "POST", "/v1/calls/"+call.ID+"/reject", tokCarol, server.Reject{Reason: "no"}, &answered)
	c = get(call.ID)
	require.Equal(t, "errored", c.Status)
	require.Equal(t, server.CallRejected, c.Outcome)
	require.Equal(t, "carol", c.Resolver.UserID)
	require.Equal(t, server.Answered{ID: call.ID, Status: c.Status, Outcome: c.Outcome}, answered, "the reject's answer has the call's status and outcome")

	_, call = suspendOnApproval(t, ctx, n, model)
	require.NoError(t, n.rt.Reschedule(ctx, call.ID, time.Now()))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var got server.Call
		n.must(c, http.StatusOK, "GET", "/v1/calls/"+call.ID, tokCarol, nil, &got)
		assert.Equal(c, "expired", got.Status)
	}, 30*time.Second, 20*time.Millisecond)
	require.Equal(t, server.CallExpired, get(call.ID).Outcome)

	conv, call := suspendOnApproval(t, ctx, n, model)
	one := uint64(1)
	n.must(t, http.StatusOK, "POST", "/v1/conversations/"+conv.ID+"/rewind", tokAlice, server.RewindConversation{ToSeq: &one}, nil)
	c = get(call.ID)
	require.Equal(t, "errored", c.Status)
	require.Equal(t, server.CallCancelled, c.Outcome)
	require.Nil(t, c.Resolver, "no one answered a cancelled call")
}

// TestIntegerQueryParametersRefuseASign: every integer query parameter
// (limit, before, after) is digits only: a sign ("%2B5" is "+5"; a bare
// "+" in a query is a space) is a bad request for each alike, as is "-5".
func TestIntegerQueryParametersRefuseASign(t *testing.T) {
	n := startNode(t, newScripted(), server.Options{})
	conv := n.create(t, tokAlice, nil)
	events := "/v1/conversations/" + conv.ID + "/events?"
	stream := "/v1/conversations/" + conv.ID + "/stream?"
	for _, v := range []string{"%2B5", "+5", "-5", "%2B0"} {
		for _, c := range []struct{ path, token string }{
			{events + "limit=" + v, tokAlice},
			{events + "before=" + v, tokAlice},
			{stream + "after=" + v, tokAlice},
			{"/v1/conversations?limit=" + v, tokAlice},
			{"/v1/calls?limit=" + v, tokOlga},
		} {
			status, body := n.call(t, "GET", c.path, c.token, nil)
			require.Equal(t, http.StatusBadRequest, status, "%s: %s", c.path, body)
			require.Equal(t, server.CodeInvalid, errorCode(t, body), c.path)
		}
	}
	n.must(t, http.StatusOK, "GET", events+"limit=5&before=5", tokAlice, nil, nil)
	n.must(t, http.StatusOK, "GET", "/v1/conversations?limit=5", tokAlice, nil, nil)
}
