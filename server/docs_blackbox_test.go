package server_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/server"
)

// The tests of this file check the promises of the package documentation,
// the OpenAPI document and the README's HTTP section from outside, as a
// client reads them, where the other tests of the package do not.

// rawDo does one request with the given content type and headers, and
// returns the response with its body read.
func (n *node) rawDo(t *testing.T, method, path, token, contentType, body string, hdr map[string]string) (*http.Response, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, n.srv.URL+path, rd)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := n.srv.Client().Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	out, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res, out
}

// requireError checks an error answer: its status, the JSON shape
// {"error":{"code","message"}} with a message, and its code.
func requireError(t *testing.T, status int, body []byte, wantStatus int, wantCode string) {
	t.Helper()
	require.Equal(t, wantStatus, status, "%s", body)
	var e struct {
		Error *struct {
			Code    *string `json:"code"`
			Message *string `json:"message"`
		} `json:"error"`
	}
	require.NoError(t, json.Unmarshal(body, &e), "%s", body)
	require.NotNil(t, e.Error, "%s", body)
	require.NotNil(t, e.Error.Code, "%s", body)
	require.NotNil(t, e.Error.Message, "%s", body)
	require.Equal(t, wantCode, *e.Error.Code, "%s", body)
	require.NotEmpty(t, *e.Error.Message)
}

// TestDocsCurlExamplesWithoutAContentType: the README's curl examples send
// their JSON with -d, which says application/x-www-form-urlencoded; the
// server reads the body as JSON whatever its content type, and answers as
// documented: 201 with the conversation (idle, owned by its creator) and
// its Location, JSON that is not cached.
func TestDocsCurlExamplesWithoutAContentType(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	n := startNode(t, model, server.Options{})
	const form = "application/x-www-form-urlencoded"

	res, body := n.rawDo(t, "POST", "/v1/conversations", tokAlice, form, `{"metadata":{"topic":"refund"}}`, nil)
	require.Equal(t, http.StatusCreated, res.StatusCode, "%s", body)
	require.Equal(t, "application/json", res.Header.Get("Content-Type"))
	require.Equal(t, "no-store", res.Header.Get("Cache-Control"))
	var conv server.Conversation
	require.NoError(t, json.Unmarshal(body, &conv))
	require.Equal(t, "/v1/conversations/"+conv.ID, res.Header.Get("Location"))
	require.Equal(t, "idle", conv.Status)
	require.Equal(t, map[string]string{server.OwnerKey: "alice", "topic": "refund"}, conv.Metadata)
	require.NotNil(t, conv.Created)

	// The Location names the conversation.
	var got server.Conversation
	n.must(t, http.StatusOK, "GET", res.Header.Get("Location"), tokAlice, nil, &got)
	require.Equal(t, conv.ID, got.ID)

	model.Push(conv.ID, scripted.Text("refunded"))
	st := n.stream(t, ctx, tokAlice, conv.ID, "")
	res, body = n.rawDo(t, "POST", "/v1/conversations/"+conv.ID+"/messages", tokAlice, form, `{"text":"refund order 42"}`, nil)
	require.Equal(t, http.StatusAccepted, res.StatusCode, "%s", body)
	var sent server.Sent
	require.NoError(t, json.Unmarshal(body, &sent))
	require.Equal(t, uint64(1), sent.Seq)
	st.until(t, "turn_end", "answered")

	// A body that is not JSON is still refused, as with the JSON type.
	res, body = n.rawDo(t, "POST", "/v1/conversations/"+conv.ID+"/messages", tokAlice, form, `text=hello`, nil)
	requireError(t, res.StatusCode, body, http.StatusBadRequest, server.CodeInvalid)
}

// TestDocsEmptyBodySaysSo: a required body that is absent is a bad
// request (400 invalid) whose message says the body is empty, as a 4xx
// message says what was wrong with the request; end, whose body is
// optional, takes none.
func TestDocsEmptyBodySaysSo(t *testing.T) {
	model := newScripted()
	n := startNode(t, model, server.Options{})
	conv := n.create(t, tokAlice, nil)
	base := "/v1/conversations/" + conv.ID
	for _, path := range []string{"/v1/conversations", base + "/messages", base + "/rewind", base + "/edit",
		base + "/fork", base + "/schedules", "/v1/calls/call-1/resolve", "/v1/calls/call-1/reject"} {
		for _, body := range []string{"", " \n "} {
			status, out := n.call(t, "POST", path, tokAlice, body)
			requireError(t, status, out, http.StatusBadRequest, server.CodeInvalid)
			require.Contains(t, string(out), "empty", "POST %s with %q: %s", path, body, out)
		}
	}
	n.must(t, http.StatusOK, "POST", base+"/end", tokAlice, nil, nil)
}

// TestDocsOwnerlessConversation: a conversation made by Go code has no
// owner: operators only see it (with its metadata an empty object, never
// null); a user gets the same 404 as for an id that does not exist, on
// every route, and does not find it in the listing, until the application
// grants it with Runtime.MergeMetadata under OwnerKey.
func TestDocsOwnerlessConversation(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	n := startNode(t, model, server.Options{})
	const id = "c-made-by-go"
	model.Push(id, scripted.Text("hello"))
	_, err := n.rt.SendMessage(ctx, id, &messages.UserMessage{Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: "hi"}}}},
		lazarus.SendOptions{}, agent.SystemScope)
	require.NoError(t, err)

	res, body := n.rawDo(t, "GET", "/v1/conversations/"+id, tokOlga, "", "", nil)
	require.Equal(t, http.StatusOK, res.StatusCode, "%s", body)
	require.Contains(t, string(body), `"metadata":{}`)
	var list server.ConversationList
	n.must(t, http.StatusOK, "GET", "/v1/conversations", tokOlga, nil, &list)
	require.Len(t, list.Conversations, 1)
	require.Equal(t, id, list.Conversations[0].ID)
	require.NotNil(t, list.Conversations[0].Metadata)

	for _, e := range endpointsOn(id, "call-none") {
		if strings.HasPrefix(e.path, "/v1/calls/") {
			continue
		}
		status, out := n.call(t, e.method, e.path, tokAlice, bodyOf(e))
		requireError(t, status, out, http.StatusNotFound, server.CodeNotFound)
	}
	n.must(t, http.StatusOK, "GET", "/v1/conversations", tokAlice, nil, &list)
	require.Empty(t, list.Conversations)

	require.NoError(t, n.rt.MergeMetadata(ctx, id, map[string]string{server.OwnerKey: "alice"}))
	var got server.Conversation
	n.must(t, http.StatusOK, "GET", "/v1/conversations/"+id, tokAlice, nil, &got)
	require.Equal(t, "alice", got.Metadata[server.OwnerKey])
	n.must(t, http.StatusOK, "GET", "/v1/conversations", tokAlice, nil, &list)
	require.Len(t, list.Conversations, 1)
	status, out := n.call(t, "GET", "/v1/conversations/"+id, tokBob, nil)
	requireError(t, status, out, http.StatusNotFound, server.CodeNotFound)
}

// TestDocsRequestIDBounds: request_id is at most 256 bytes (a longer one is
// 400 invalid and writes nothing); a send retried with the same key
// appends nothing twice and answers the first seq, whatever its text, also
// once the conversation has ended; without a key each send appends.
func TestDocsRequestIDBounds(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	n := startNode(t, model, server.Options{})
	conv := n.create(t, tokAlice, nil)
	path := "/v1/conversations/" + conv.ID + "/messages"

	status, out := n.call(t, "POST", path, tokAlice, server.SendMessage{Text: "hi", RequestID: strings.Repeat("r", 257)})
	requireError(t, status, out, http.StatusBadRequest, server.CodeInvalid)
	require.Equal(t, uint64(0), n.lastSeq(t, ctx, conv.ID), "a refused send wrote")

	model.Push(conv.ID, scripted.Text("a1"))
	st := n.stream(t, ctx, tokAlice, conv.ID, "")
	key := strings.Repeat("k", 256)
	var first server.Sent
	n.must(t, http.StatusAccepted, "POST", path, tokAlice, server.SendMessage{Text: "one", RequestID: key}, &first)
	untilTurnEnd(t, st, first.Seq, "answered")
	last := n.lastSeq(t, ctx, conv.ID)

	var again server.Sent
	n.must(t, http.StatusAccepted, "POST", path, tokAlice, server.SendMessage{Text: "one", RequestID: key}, &again)
	require.Equal(t, first.Seq, again.Seq)
	n.must(t, http.StatusAccepted, "POST", path, tokAlice, server.SendMessage{Text: "other text", RequestID: key}, &again)
	require.Equal(t, first.Seq, again.Seq)
	require.Equal(t, last, n.lastSeq(t, ctx, conv.ID), "a retried send appended")

	n.must(t, http.StatusOK, "POST", "/v1/conversations/"+conv.ID+"/end", tokAlice, nil, nil)
	last = n.lastSeq(t, ctx, conv.ID)
	n.must(t, http.StatusAccepted, "POST", path, tokAlice, server.SendMessage{Text: "one", RequestID: key}, &again)
	require.Equal(t, first.Seq, again.Seq, "a retry of a send that landed answers its seq")
	status, out = n.call(t, "POST", path, tokAlice, server.SendMessage{Text: "new", RequestID: "fresh"})
	requireError(t, status, out, http.StatusConflict, server.CodeEnded)
	require.Equal(t, last, n.lastSeq(t, ctx, conv.ID), "a send to an ended conversation wrote")
}

// TestDocsAnswersOfACall: an answer is checked with the tool's rules, for
// the conversation's owner and operators too (403 forbidden: they see the
// call); an approver's answer is 200 with the Answered shape; the call
// then reads resolved and answered with its resolver, for everyone who
// sees it, is gone from the queue, and a second answer is 409 stale.
func TestDocsAnswersOfACall(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	n := startNode(t, model, server.Options{})
	conv, call := suspendOnApproval(t, ctx, n, model)
	path := "/v1/calls/" + call.ID
	seq := n.lastSeq(t, ctx, conv.ID)

	for _, tok := range []string{tokAlice, tokOlga} {
		status, out := n.call(t, "POST", path+"/resolve", tok, `{"result":{"approved":true}}`)
		requireError(t, status, out, http.StatusForbidden, server.CodeForbidden)
		status, out = n.call(t, "POST", path+"/reject", tok, `{"reason":"no"}`)
		requireError(t, status, out, http.StatusForbidden, server.CodeForbidden)
	}
	require.Equal(t, seq, n.lastSeq(t, ctx, conv.ID), "a refused answer wrote")

	st := n.stream(t, ctx, tokAlice, conv.ID, strconv.FormatUint(seq, 10))
	var answered server.Answered
	n.must(t, http.StatusOK, "POST", path+"/resolve", tokDave, `{"result":{"approved":true}}`, &answered)
	require.Equal(t, server.Answered{ID: call.ID, Status: "resolved", Outcome: server.CallAnswered}, answered)
	st.until(t, "turn_end", "answered")

	for _, tok := range []string{tokAlice, tokCarol, tokDave, tokOlga} {
		var got server.Call
		n.must(t, http.StatusOK, "GET", path, tok, nil, &got)
		require.Equal(t, "resolved", got.Status)
		require.Equal(t, server.CallAnswered, got.Outcome)
		require.NotNil(t, got.Resolver)
		require.Equal(t, "dave", got.Resolver.UserID)
		require.NotNil(t, got.Resolved)
		require.NotNil(t, got.Requester)
		require.Equal(t, "alice", got.Requester.UserID)
		require.JSONEq(t, `{"amount":120}`, string(got.Arguments))
	}
	status, out := n.call(t, "GET", path, tokBob, nil)
	requireError(t, status, out, http.StatusNotFound, server.CodeNotFound)
	var queue server.CallList
	n.must(t, http.StatusOK, "GET", "/v1/calls", tokCarol, nil, &queue)
	require.Empty(t, queue.Calls)
	require.Empty(t, queue.NextCursor)

	last := n.lastSeq(t, ctx, conv.ID)
	status, out = n.call(t, "POST", path+"/resolve", tokCarol, `{"result":{"approved":false}}`)
	requireError(t, status, out, http.StatusConflict, server.CodeStale)
	status, out = n.call(t, "POST", path+"/reject", tokCarol, `{"reason":"late"}`)
	requireError(t, status, out, http.StatusConflict, server.CodeStale)
	require.Equal(t, last, n.lastSeq(t, ctx, conv.ID), "a stale answer wrote")
}

// TestDocsForkAndRewindWhereACallIsOpen: a fork at a seq where a tool call
// is open, and a rewind to one, are 400 invalid and write nothing (no new
// conversation, nothing in the log).
func TestDocsForkAndRewindWhereACallIsOpen(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	n := startNode(t, model, server.Options{})
	conv, _ := suspendOnApproval(t, ctx, n, model)
	base := "/v1/conversations/" + conv.ID
	last := n.lastSeq(t, ctx, conv.ID)
	require.Equal(t, uint64(4), last) // user, assistant (with the call), tool_call, suspension

	for seq := uint64(2); seq <= last; seq++ {
		status, out := n.call(t, "POST", base+"/fork", tokAlice, server.ForkConversation{AtSeq: seq})
		requireError(t, status, out, http.StatusBadRequest, server.CodeInvalid)
		status, out = n.call(t, "POST", base+"/rewind", tokAlice, map[string]uint64{"to_seq": seq})
		requireError(t, status, out, http.StatusBadRequest, server.CodeInvalid)
	}
	require.Equal(t, last, n.lastSeq(t, ctx, conv.ID))
	var list server.ConversationList
	n.must(t, http.StatusOK, "GET", "/v1/conversations", tokOlga, nil, &list)
	require.Len(t, list.Conversations, 1, "a refused fork made a conversation")

	// At the user message, before the call, both are accepted.
	var fork server.Conversation
	n.must(t, http.StatusCreated, "POST", base+"/fork", tokAlice, server.ForkConversation{AtSeq: 1}, &fork)
	require.NotEqual(t, conv.ID, fork.ID)
	require.Equal(t, "alice", fork.Metadata[server.OwnerKey])
}

// TestDocsSchedules: a schedule with the id of an existing one of the
// conversation replaces it; a cancel is 204, then 404 not_found; the
// rules of a schedule's fields are 400 invalid and write nothing; an
// ended conversation is 409 ended and gets no schedule.
func TestDocsSchedules(t *testing.T) {
	model := newScripted()
	n := startNode(t, model, server.Options{})
	conv := n.create(t, tokAlice, nil)
	path := "/v1/conversations/" + conv.ID + "/schedules"

	var list server.ScheduleList
	res, body := n.rawDo(t, "GET", path, tokAlice, "", "", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.JSONEq(t, `{"schedules":[]}`, string(body))

	var s1 server.Schedule
	n.must(t, http.StatusCreated, "POST", path, tokAlice, `{"id":"s1","after":"1h","text":"x"}`, &s1)
	require.Equal(t, "s1", s1.ID)
	require.Equal(t, conv.ID, s1.ConversationID)
	require.NotNil(t, s1.Next)
	require.Equal(t, "alice", s1.Author.UserID)
	var s2 server.Schedule
	n.must(t, http.StatusCreated, "POST", path, tokAlice, `{"id":"s1","after":"2h","text":"y"}`, &s2)
	require.True(t, s2.Next.After(*s1.Next))
	n.must(t, http.StatusOK, "GET", path, tokAlice, nil, &list)
	require.Len(t, list.Schedules, 1)
	require.Equal(t, "y", list.Schedules[0].Text)

	for _, bad := range []string{
		`{"after":"-5m","text":"x"}`,
		`{"every":"500ms","text":"x"}`,
		`{"after":"1h","time_zone":"Europe/Paris","text":"x"}`,
		`{"cron":"@daily","every":"1h","text":"x"}`,
		`{"cron":"@daily","after":"1h","text":"x"}`,
		`{"cron":"61 * * * *","text":"x"}`,
		`{"cron":"@daily","time_zone":"Mars/Olympus","text":"x"}`,
		`{"after":"1h","text":""}`,
		`{"after":"1h"}`,
		`{"text":"x"}`,
		`{"after":"soon","text":"x"}`,
		`{"at":"2001-01-01T00:00:00Z","text":"x"}`,
		`{"at":"tomorrow","text":"x"}`,
	} {
		status, out := n.call(t, "POST", path, tokAlice, bad)
		requireError(t, status, out, http.StatusBadRequest, server.CodeInvalid)
	}
	n.must(t, http.StatusOK, "GET", path, tokAlice, nil, &list)
	require.Len(t, list.Schedules, 1, "a refused schedule was written")

	res, body = n.rawDo(t, "DELETE", path+"/s1", tokAlice, "", "", nil)
	require.Equal(t, http.StatusNoContent, res.StatusCode, "%s", body)
	require.Empty(t, body)
	status, out := n.call(t, "DELETE", path+"/s1", tokAlice, nil)
	requireError(t, status, out, http.StatusNotFound, server.CodeNotFound)

	n.must(t, http.StatusCreated, "POST", path, tokAlice, `{"id":"s2","cron":"0 9 * * 1-5","time_zone":"Europe/Paris","text":"any news?"}`, nil)
	n.must(t, http.StatusOK, "POST", "/v1/conversations/"+conv.ID+"/end", tokAlice, nil, nil)
	status, out = n.call(t, "POST", path, tokAlice, `{"after":"1h","text":"x"}`)
	requireError(t, status, out, http.StatusConflict, server.CodeEnded)
	n.must(t, http.StatusOK, "GET", path, tokAlice, nil, &list)
	for _, s := range list.Schedules {
		require.NotEqual(t, "x", s.Text, "a refused schedule was written")
	}
}

// TestDocsStreamMessages: on the stream only "event" messages carry an id,
// the event's seq; their data is the event as the history gives it
// (protobuf JSON); a turn_end names the seq of the event that ended the
// turn. Last-Event-ID resumes after that seq (surrounding spaces
// ignored; an empty one counts as absent), and after= the log's last seq
// sends nothing old, then what is new.
func TestDocsStreamMessages(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	n := startNode(t, model, server.Options{})
	conv, call := suspendOnApproval(t, ctx, n, model)
	st := n.stream(t, ctx, tokAlice, conv.ID, "")
	n.must(t, http.StatusOK, "POST", "/v1/calls/"+call.ID+"/resolve", tokCarol, `{"result":{"approved":true}}`, nil)
	msgs := st.until(t, "turn_end", "answered")
	st.close()

	hist := historyOf(t, n, tokAlice, conv.ID, "")
	var streamed []*messages.Event
	var lastEnd server.TurnEndData
	for _, m := range msgs {
		switch m.Event {
		case "event":
			ev := &messages.Event{}
			require.NoError(t, protojsonUnmarshal([]byte(m.Data), ev))
			require.Equal(t, strconv.FormatUint(ev.GetSeq(), 10), m.ID)
			streamed = append(streamed, ev)
		case "turn_end":
			require.Empty(t, m.ID, "a turn_end has no id")
			require.NoError(t, json.Unmarshal([]byte(m.Data), &lastEnd))
		default:
			require.Empty(t, m.ID, "a %s message has an id", m.Event)
		}
	}
	require.Len(t, streamed, len(hist))
	for i := range hist {
		require.True(t, proto.Equal(hist[i], streamed[i]), "seq %d: the stream and the history differ", hist[i].GetSeq())
	}
	last := hist[len(hist)-1].GetSeq()
	require.Equal(t, server.TurnEndData{Outcome: "answered", Seq: last}, lastEnd)

	// Resume after seq 4 with a header written with spaces.
	st = n.stream(t, ctx, tokAlice, conv.ID, " 4 ")
	m := st.next(t)
	require.Equal(t, "event", m.Event)
	require.Equal(t, "5", m.ID)
	st.close()

	// An empty Last-Event-ID counts as absent: after= is read.
	req, err := http.NewRequestWithContext(ctx, "GET", n.srv.URL+"/v1/conversations/"+conv.ID+"/stream?after=4", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+tokAlice)
	req.Header.Set("Last-Event-ID", "")
	res, err := n.srv.Client().Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode)
	empty := &sseStream{res: res, sc: newScanner(res), cancel: func() {}}
	m = empty.next(t)
	require.Equal(t, "event", m.Event)
	require.Equal(t, "5", m.ID, "after=4 read under an empty Last-Event-ID")
	empty.close()

	// after= the last seq: nothing old, then the new message.
	req, err = http.NewRequestWithContext(ctx, "GET", n.srv.URL+"/v1/conversations/"+conv.ID+"/stream?after="+strconv.FormatUint(last, 10), nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+tokAlice)
	res, err = n.srv.Client().Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode)
	tail := &sseStream{res: res, sc: newScanner(res), cancel: func() {}}
	defer tail.close()
	model.Push(conv.ID, scripted.Text("again"))
	var sent server.Sent
	n.must(t, http.StatusAccepted, "POST", "/v1/conversations/"+conv.ID+"/messages", tokAlice, server.SendMessage{Text: "more"}, &sent)
	require.Equal(t, last+1, sent.Seq)
	for {
		m := tail.next(t)
		if m.Event != "event" {
			continue // deltas of an answer in progress may come first
		}
		require.Equal(t, strconv.FormatUint(last+1, 10), m.ID)
		break
	}
}

// TestDocsDeletedConversation: a deleted conversation is 410 deleted to
// operators on every route that names it, and the same 404 as an unknown
// id to its former owner; its calls are gone (404) for everyone.
func TestDocsDeletedConversation(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	n := startNode(t, model, server.Options{})
	conv, call := suspendOnApproval(t, ctx, n, model)
	n.must(t, http.StatusNoContent, "DELETE", "/v1/conversations/"+conv.ID, tokAlice, nil, nil)
	for _, e := range endpointsOn(conv.ID, call.ID) {
		if strings.HasPrefix(e.path, "/v1/calls/") {
			for _, tok := range []string{tokOlga, tokAlice, tokCarol} {
				status, out := n.call(t, e.method, e.path, tok, bodyOf(e))
				requireError(t, status, out, http.StatusNotFound, server.CodeNotFound)
			}
			continue
		}
		status, out := n.call(t, e.method, e.path, tokOlga, bodyOf(e))
		requireError(t, status, out, http.StatusGone, server.CodeDeleted)
		status, out = n.call(t, e.method, e.path, tokAlice, bodyOf(e))
		requireError(t, status, out, http.StatusNotFound, server.CodeNotFound)
	}
	var list server.ConversationList
	n.must(t, http.StatusOK, "GET", "/v1/conversations", tokOlga, nil, &list)
	require.Empty(t, list.Conversations)
}

// TestDocsEmptyPagesAndBadAgent: a conversation with nothing in it has an
// empty page of events with next_before 0; an empty queue is an empty
// array with no cursor; an agent parameter given empty is no agent of the
// server (400 invalid), on the history and the stream.
func TestDocsEmptyPagesAndBadAgent(t *testing.T) {
	model := newScripted()
	n := startNode(t, model, server.Options{})
	conv := n.create(t, tokAlice, nil)
	base := "/v1/conversations/" + conv.ID

	res, body := n.rawDo(t, "GET", base+"/events", tokAlice, "", "", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.JSONEq(t, `{"events":[],"next_before":0}`, string(body))
	res, body = n.rawDo(t, "GET", "/v1/calls", tokAlice, "", "", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.JSONEq(t, `{"calls":[],"next_cursor":""}`, string(body))
	res, body = n.rawDo(t, "GET", "/v1/conversations?metadata[topic]=none", tokAlice, "", "", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.JSONEq(t, `{"conversations":[],"next_cursor":""}`, string(body))

	for _, q := range []string{"agent=", "agent=nobody"} {
		for _, route := range []string{"/events?", "/stream?"} {
			status, out := n.call(t, "GET", base+route+q, tokAlice, nil)
			requireError(t, status, out, http.StatusBadRequest, server.CodeInvalid)
		}
	}
	// The default agent by name, on both.
	n.must(t, http.StatusOK, "GET", base+"/events?agent=default", tokAlice, nil, nil)
	res, body = n.rawDo(t, "HEAD", base+"/stream?agent=default", tokAlice, "", "", nil)
	require.Equal(t, http.StatusOK, res.StatusCode, "%s", body)
	require.Equal(t, "text/event-stream", res.Header.Get("Content-Type"))
}

// TestDocsHistoryPagesWalkTheLog: the history read newest page first,
// each next page asked with before = the last next_before, gives every
// event once, in ascending seq within a page, whatever the limit; the
// last page has next_before 0. A before past the log is the newest page;
// before=1 is an empty page.
func TestDocsHistoryPagesWalkTheLog(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	n := startNode(t, model, server.Options{})
	conv := n.create(t, tokAlice, nil)
	model.Push(conv.ID, scripted.Text("a1"), scripted.Text("a2"), scripted.Text("a3"))
	for _, text := range []string{"one", "two", "three"} {
		n.turn(t, ctx, tokAlice, conv.ID, text, "answered")
	}
	last := n.lastSeq(t, ctx, conv.ID)
	require.Equal(t, uint64(6), last)
	base := "/v1/conversations/" + conv.ID + "/events"

	for limit := 1; limit <= int(last)+1; limit++ {
		var seqs []uint64
		before := uint64(0)
		for pages := 0; ; pages++ {
			require.Less(t, pages, int(last)+1, "limit %d: the pages do not end", limit)
			var page server.EventPage
			n.must(t, http.StatusOK, "GET", base+"?limit="+strconv.Itoa(limit)+"&before="+strconv.FormatUint(before, 10), tokAlice, nil, &page)
			require.LessOrEqual(t, len(page.Events), limit)
			var pageSeqs []uint64
			for _, raw := range page.Events {
				ev := &messages.Event{}
				require.NoError(t, protojsonUnmarshal(raw, ev))
				pageSeqs = append(pageSeqs, ev.GetSeq())
			}
			require.IsIncreasing(t, pageSeqs)
			if len(pageSeqs) > 0 && before != 0 {
				require.Less(t, pageSeqs[len(pageSeqs)-1], before)
			}
			seqs = append(pageSeqs, seqs...)
			if page.NextBefore == 0 {
				break
			}
			require.Equal(t, pageSeqs[0], page.NextBefore, "limit %d: next_before is the page's first seq", limit)
			before = page.NextBefore
		}
		require.Equal(t, []uint64{1, 2, 3, 4, 5, 6}, seqs, "limit %d", limit)
	}

	var page server.EventPage
	n.must(t, http.StatusOK, "GET", base+"?limit=2&before=999", tokAlice, nil, &page)
	require.Len(t, page.Events, 2)
	require.Equal(t, uint64(5), page.NextBefore)
	n.must(t, http.StatusOK, "GET", base+"?before=1", tokAlice, nil, &page)
	require.Empty(t, page.Events)
	require.Zero(t, page.NextBefore)
}

// TestDocsRefusedCreateLeavesNothing: a create whose settings the Go API
// refuses (a tool choice naming no tool, a negative temperature) is 400
// invalid and leaves no conversation, nor metadata a search finds.
func TestDocsRefusedCreateLeavesNothing(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	n := startNode(t, model, server.Options{})
	for _, body := range []string{
		`{"metadata":{"topic":"refused"},"settings":{"tool_choice":"no_such_tool"}}`,
		`{"metadata":{"topic":"refused"},"settings":{"temperature":-1}}`,
		`{"metadata":{"topic":"refused"},"settings":{"colour":"red"}}`,
	} {
		status, out := n.call(t, "POST", "/v1/conversations", tokAlice, body)
		requireError(t, status, out, http.StatusBadRequest, server.CodeInvalid)
	}
	var list server.ConversationList
	n.must(t, http.StatusOK, "GET", "/v1/conversations", tokOlga, nil, &list)
	require.Empty(t, list.Conversations)
	n.must(t, http.StatusOK, "GET", "/v1/conversations?metadata[topic]=refused", tokOlga, nil, &list)
	require.Empty(t, list.Conversations)
	ids, _, err := n.rt.Store().FindConversations(ctx, "topic", "refused", "", 10)
	require.NoError(t, err)
	require.Empty(t, ids, "a refused create left its metadata")
}

// TestDocsAuthenticatorAndOperatorRole: any Authenticator may identify
// callers; one that fails, or names no user or the system's, is a 401
// that says how to authenticate. Options.OperatorRole names the role that
// sees everything (and /metrics); the default role's name is then nothing
// special. The identity is the author the log records for a send.
func TestDocsAuthenticatorAndOperatorRole(t *testing.T) {
	ctx := testContext(t)
	rt, err := lazarus.Open(lazarus.Options{Model: newScripted(), IdleTimeout: -1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = rt.Close() })
	auth := server.AuthenticatorFunc(func(r *http.Request) (agent.Identity, bool) {
		switch r.Header.Get("X-User") {
		case "alice":
			return agent.Identity{UserID: "alice", Roles: []string{"staff"}}, true
		case "root":
			return agent.Identity{UserID: "root", Roles: []string{"admin"}}, true
		case "ops":
			return agent.Identity{UserID: "ops", Roles: []string{"operator"}}, true
		case "system":
			return agent.Identity{UserID: agent.SystemUserID}, true
		case "nameless":
			return agent.Identity{Roles: []string{"admin"}}, true
		}
		return agent.Identity{}, false
	})
	srv := httptest.NewServer(server.New(rt, server.Options{Authenticator: auth, OperatorRole: "admin"}))
	t.Cleanup(srv.Close)
	do := func(method, path, user, body string) (*http.Response, []byte) {
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, err := http.NewRequestWithContext(ctx, method, srv.URL+path, rd)
		require.NoError(t, err)
		if user != "" {
			req.Header.Set("X-User", user)
		}
		res, err := srv.Client().Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		out, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return res, out
	}

	for _, user := range []string{"", "stranger", "system", "nameless"} {
		res, out := do("GET", "/v1/conversations", user, "")
		requireError(t, res.StatusCode, out, http.StatusUnauthorized, server.CodeUnauthenticated)
		require.Equal(t, `Bearer realm="lazarus"`, res.Header.Get("WWW-Authenticate"))
	}

	res, out := do("POST", "/v1/conversations", "alice", `{}`)
	require.Equal(t, http.StatusCreated, res.StatusCode, "%s", out)
	var conv server.Conversation
	require.NoError(t, json.Unmarshal(out, &conv))
	res, out = do("POST", "/v1/conversations/"+conv.ID+"/messages", "alice", `{"text":"hi"}`)
	require.Equal(t, http.StatusAccepted, res.StatusCode, "%s", out)
	evs, err := rt.History(ctx, conv.ID, 2, 1) // the message, seq 1
	require.NoError(t, err)
	require.Len(t, evs, 1)
	require.Equal(t, "alice", evs[0].GetAuthor().GetUserId())
	require.Equal(t, []string{"staff"}, evs[0].GetAuthor().GetRoles())

	res, out = do("GET", "/v1/conversations/"+conv.ID, "root", "")
	require.Equal(t, http.StatusOK, res.StatusCode, "%s", out)
	res, out = do("GET", "/v1/conversations/"+conv.ID, "ops", "")
	requireError(t, res.StatusCode, out, http.StatusNotFound, server.CodeNotFound)

	res, out = do("GET", "/metrics", "root", "")
	require.Equal(t, http.StatusOK, res.StatusCode, "%s", out)
	res, out = do("GET", "/metrics", "ops", "")
	requireError(t, res.StatusCode, out, http.StatusForbidden, server.CodeForbidden)
	res, out = do("GET", "/metrics", "", "")
	requireError(t, res.StatusCode, out, http.StatusUnauthorized, server.CodeUnauthenticated)
}

// TestDocsBodyLimitBoundary: a body of exactly Options.MaxBodyBytes is
// read; one byte more is 413 too_large, and nothing is written.
func TestDocsBodyLimitBoundary(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	const max = 256
	n := startNode(t, model, server.Options{MaxBodyBytes: max})
	conv := n.create(t, tokAlice, nil)
	path := "/v1/conversations/" + conv.ID + "/messages"
	body := func(size int) string {
		b := `{"text":"` + strings.Repeat("x", size-len(`{"text":""}`)) + `"}`
		require.Len(t, b, size)
		return b
	}
	model.Push(conv.ID, scripted.Text("ok"))
	status, out := n.call(t, "POST", path, tokAlice, body(max+1))
	requireError(t, status, out, http.StatusRequestEntityTooLarge, server.CodeTooLarge)
	require.Zero(t, n.lastSeq(t, ctx, conv.ID), "a body over the limit wrote")
	st := n.stream(t, ctx, tokAlice, conv.ID, "")
	n.must(t, http.StatusAccepted, "POST", path, tokAlice, body(max), nil)
	st.until(t, "turn_end", "answered")
}

// TestDocsDefaultPageSize: without a limit, the conversation listing and
// the history give pages of DefaultPageSize (50), the listing with a
// cursor to the rest and the history with next_before.
func TestDocsDefaultPageSize(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	n := startNode(t, model, server.Options{})
	require.Equal(t, 50, server.DefaultPageSize)
	var first server.Conversation
	for i := 0; i <= server.DefaultPageSize; i++ {
		c := n.create(t, tokAlice, nil)
		if i == 0 {
			first = c
		}
	}
	var list server.ConversationList
	n.must(t, http.StatusOK, "GET", "/v1/conversations", tokAlice, nil, &list)
	require.Len(t, list.Conversations, server.DefaultPageSize)
	require.NotEmpty(t, list.NextCursor)
	n.must(t, http.StatusOK, "GET", "/v1/conversations?cursor="+list.NextCursor, tokAlice, nil, &list)
	require.Len(t, list.Conversations, 1)
	require.Empty(t, list.NextCursor)

	st := n.stream(t, ctx, tokAlice, first.ID, "")
	for i := 0; i < 26; i++ { // 52 events: a user message and an answer each
		model.Push(first.ID, scripted.Text("a"))
		var sent server.Sent
		n.must(t, http.StatusAccepted, "POST", "/v1/conversations/"+first.ID+"/messages", tokAlice, server.SendMessage{Text: "q"}, &sent)
		untilTurnEnd(t, st, sent.Seq, "answered")
	}
	var page server.EventPage
	n.must(t, http.StatusOK, "GET", "/v1/conversations/"+first.ID+"/events", tokAlice, nil, &page)
	require.Len(t, page.Events, server.DefaultPageSize)
	require.Equal(t, uint64(3), page.NextBefore)
}

// TestDocsHistoryPageDefaultMaxPageBytes: openapi.json's EventPage "the
// newest of the events the limit asks for whose JSON fits the server's
// MaxPageBytes (16 MiB by default), and at least one"; README: "a history
// page holds at most limit events and at most server.Options.MaxPageBytes
// (16 MiB) of their JSON ... page on with its next_before".
func TestDocsHistoryPageDefaultMaxPageBytes(t *testing.T) {
	require.Equal(t, 16<<20, server.DefaultMaxPageBytes, "the docs say 16 MiB")
	ctx := testContext(t)
	model := newScripted()
	n := startNode(t, model, server.Options{}) // MaxPageBytes left at its default
	conv := n.create(t, tokAlice, nil)
	alice := agent.ScopeOf(agent.Identity{UserID: "alice"})
	big := strings.Repeat("x", 1_000_000)
	const turns = 10 // 20 events of about 1 MB of JSON each: more than 16 MiB
	for i := range turns {
		model.Push(conv.ID, scripted.Text(strconv.Itoa(i)+big))
		_, err := n.rt.SendAndWait(ctx, conv.ID, strconv.Itoa(i)+big, alice)
		require.NoError(t, err)
	}
	var seqs []uint64
	path := "/v1/conversations/" + conv.ID + "/events?limit=50"
	for pages := 0; ; pages++ {
		require.Less(t, pages, 2*turns, "paging gets on")
		var page server.EventPage
		n.must(t, http.StatusOK, "GET", path, tokAlice, nil, &page)
		require.NotEmpty(t, page.Events)
		size := 0
		var held []uint64
		for _, raw := range page.Events {
			size += len(raw)
			var ev struct {
				Seq string `json:"seq"`
			}
			require.NoError(t, json.Unmarshal(raw, &ev))
			s, err := strconv.ParseUint(ev.Seq, 10, 64)
			require.NoError(t, err)
			held = append(held, s)
		}
		require.LessOrEqual(t, size, server.DefaultMaxPageBytes, "a page's events fit 16 MiB of JSON")
		if page.NextBefore != 0 {
			require.Equal(t, held[0], page.NextBefore, "next_before resumes before the oldest event the page holds")
			// Every event is over 1 MB of JSON: the next one did not fit.
			require.Greater(t, size+1_000_000, server.DefaultMaxPageBytes, "the page was cut by the bound, not before it")
		}
		seqs = append(held, seqs...)
		if page.NextBefore == 0 {
			break
		}
		require.Less(t, len(page.Events), 50, "the first page is cut by bytes, not by its limit")
		path = "/v1/conversations/" + conv.ID + "/events?limit=50&before=" + strconv.FormatUint(page.NextBefore, 10)
	}
	want := make([]uint64, 2*turns)
	for i := range want {
		want[i] = uint64(i + 1)
	}
	require.Equal(t, want, seqs, "paging on reads every event once, in order")
}
