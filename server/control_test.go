package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/server"
)

// historyOf reads the newest page of conv's history with the query q,
// decoded.
func historyOf(t *testing.T, n *node, token, conv, q string) []*messages.Event {
	t.Helper()
	var page server.EventPage
	n.must(t, http.StatusOK, "GET", "/v1/conversations/"+conv+"/events?"+q, token, nil, &page)
	out := make([]*messages.Event, len(page.Events))
	for i, raw := range page.Events {
		out[i] = &messages.Event{}
		require.NoError(t, protojsonUnmarshal(raw, out[i]))
	}
	return out
}

// texts lists the user and assistant texts of evs, "u:" and "a:" before
// each.
func texts(evs []*messages.Event) []string {
	var out []string
	for _, ev := range evs {
		switch {
		case ev.GetUserMsg() != nil:
			for _, p := range ev.GetUserMsg().GetContent() {
				out = append(out, "u:"+p.GetText())
			}
		case ev.GetAssistantMsg() != nil:
			for _, p := range ev.GetAssistantMsg().GetContent() {
				out = append(out, "a:"+p.GetText())
			}
		}
	}
	return out
}

// turn sends text to conv as token and waits for the turn to end with
// outcome; it returns the seq of the message.
func (n *node) turn(t *testing.T, ctx context.Context, token, conv, text, outcome string) uint64 {
	t.Helper()
	st := n.stream(t, ctx, token, conv, "")
	defer st.close()
	var sent server.Sent
	n.must(t, http.StatusAccepted, "POST", "/v1/conversations/"+conv+"/messages", token, server.SendMessage{Text: text}, &sent)
	untilTurnEnd(t, st, sent.Seq, outcome)
	return sent.Seq
}

// untilTurnEnd reads st until a turn_end of outcome recorded by an event
// after seq (a subscription may replay the end of an earlier turn).
func untilTurnEnd(t *testing.T, st *sseStream, seq uint64, outcome string) {
	t.Helper()
	for {
		m := st.next(t)
		if m.Event != "turn_end" {
			continue
		}
		var end server.TurnEndData
		require.NoError(t, json.Unmarshal([]byte(m.Data), &end), m.Data)
		if end.Outcome == outcome && end.Seq > seq {
			return
		}
	}
}

func (n *node) lastSeq(t *testing.T, ctx context.Context, conv string) uint64 {
	t.Helper()
	seq, err := n.rt.Store().LastSeq(ctx, conv)
	require.NoError(t, err)
	return seq
}

// TestRewindOverHTTP: a rewind moves the head back: the effective view of
// the history no longer shows the span, the full one shows it and the
// rewind event with its reason; the next message starts from the head.
// A stranger cannot rewind; an operator can.
func TestRewindOverHTTP(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	n := startNode(t, model, server.Options{})
	conv := n.create(t, tokAlice, nil)
	path := "/v1/conversations/" + conv.ID

	model.Push(conv.ID, scripted.Text("a1"), scripted.Text("a2"), scripted.Text("a3"))
	n.turn(t, ctx, tokAlice, conv.ID, "one", "answered")
	head := n.lastSeq(t, ctx, conv.ID)
	n.turn(t, ctx, tokAlice, conv.ID, "two", "answered")
	before := n.lastSeq(t, ctx, conv.ID)

	status, body := n.call(t, "POST", path+"/rewind", tokBob, map[string]any{"to_seq": head})
	require.Equal(t, http.StatusNotFound, status, "%s", body)
	require.Equal(t, before, n.lastSeq(t, ctx, conv.ID), "a stranger's rewind wrote")

	var got server.Conversation
	n.must(t, http.StatusOK, "POST", path+"/rewind", tokAlice, map[string]any{"to_seq": head, "reason": "wrong turn"}, &got)
	require.Equal(t, conv.ID, got.ID)
	require.Equal(t, "idle", got.Status, "a rewind owes no turn")
	require.Equal(t, "alice", got.Metadata[server.OwnerKey])

	require.Equal(t, []string{"u:one", "a:a1"}, texts(historyOf(t, n, tokAlice, conv.ID, "view=effective")))
	full := historyOf(t, n, tokAlice, conv.ID, "")
	require.Equal(t, []string{"u:one", "a:a1", "u:two", "a:a2"}, texts(full))
	rw := full[len(full)-1].GetRewind()
	require.NotNil(t, rw, "the full log ends with the rewind")
	require.Equal(t, head, rw.GetToSeq())
	require.Equal(t, "wrong turn", rw.GetReason())
	require.Equal(t, full, historyOf(t, n, tokAlice, conv.ID, "view=full"))

	// The next turn goes on from the head: the model does not see "two".
	n.turn(t, ctx, tokAlice, conv.ID, "three", "answered")
	require.Equal(t, []string{"u:one", "a:a1", "u:three", "a:a3"}, texts(historyOf(t, n, tokAlice, conv.ID, "view=effective")))
	turns := model.Turns(conv.ID)
	require.NotEmpty(t, turns)
	require.Equal(t, []string{"u:one", "a:a1", "u:three"}, texts(turns[len(turns)-1].Context), "the model saw the rewound span")

	// An operator rewinds anyone's conversation, to the start too.
	n.must(t, http.StatusOK, "POST", path+"/rewind", tokOlga, map[string]any{"to_seq": 0}, nil)
	require.Empty(t, texts(historyOf(t, n, tokOlga, conv.ID, "view=effective")))

	// A view the server does not know is a bad request.
	status, body = n.call(t, "GET", path+"/events?view=rewound", tokAlice, nil)
	require.Equal(t, http.StatusBadRequest, status)
	require.Equal(t, server.CodeInvalid, errorCode(t, body))
}

// TestEditRunsATurn: an edit replaces a user message under the caller's
// identity and runs a turn from it; the answer of the old message leaves
// the effective history.
func TestEditRunsATurn(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	n := startNode(t, model, server.Options{})
	conv := n.create(t, tokAlice, nil)
	path := "/v1/conversations/" + conv.ID

	model.Push(conv.ID, scripted.Text("bonjour"), scripted.Text("hola"))
	seq := n.turn(t, ctx, tokAlice, conv.ID, "say hello in French", "answered")
	last := n.lastSeq(t, ctx, conv.ID)

	status, body := n.call(t, "POST", path+"/edit", tokBob, server.EditMessage{Seq: seq, Text: "mine now"})
	require.Equal(t, http.StatusNotFound, status, "%s", body)
	require.Equal(t, last, n.lastSeq(t, ctx, conv.ID), "a stranger's edit wrote")

	st := n.stream(t, ctx, tokAlice, conv.ID, fmt.Sprint(last))
	var sent server.Sent
	n.must(t, http.StatusAccepted, "POST", path+"/edit", tokAlice, server.EditMessage{Seq: seq, Text: "say hello in Spanish"}, &sent)
	require.Greater(t, sent.Seq, last)
	untilTurnEnd(t, st, sent.Seq, "answered")

	eff := historyOf(t, n, tokAlice, conv.ID, "view=effective")
	require.Equal(t, []string{"u:say hello in Spanish", "a:hola"}, texts(eff))
	require.Equal(t, sent.Seq, eff[0].GetSeq())
	require.Equal(t, "alice", eff[0].GetAuthor().GetUserId(), "the caller is the new message's author")
	require.Equal(t, 2, model.Calls(conv.ID), "the edit ran one turn")
	// The full log keeps the old message and its answer.
	require.Equal(t, []string{"u:say hello in French", "a:bonjour", "u:say hello in Spanish", "a:hola"}, texts(historyOf(t, n, tokAlice, conv.ID, "")))

	// An operator edits too; a seq that is no user message is invalid and
	// writes nothing.
	last = n.lastSeq(t, ctx, conv.ID)
	status, body = n.call(t, "POST", path+"/edit", tokOlga, server.EditMessage{Seq: last, Text: "x"})
	require.Equal(t, http.StatusBadRequest, status, "%s", body)
	require.Equal(t, server.CodeInvalid, errorCode(t, body))
	require.Equal(t, last, n.lastSeq(t, ctx, conv.ID))
	model.Push(conv.ID, scripted.Text("hallo"))
	st = n.stream(t, ctx, tokOlga, conv.ID, fmt.Sprint(last))
	n.must(t, http.StatusAccepted, "POST", path+"/edit", tokOlga, server.EditMessage{Seq: sent.Seq, Text: "say hello in German"}, &sent)
	untilTurnEnd(t, st, sent.Seq, "answered")
	eff = historyOf(t, n, tokOlga, conv.ID, "view=effective")
	require.Equal(t, []string{"u:say hello in German", "a:hallo"}, texts(eff))
	require.Equal(t, "olga", eff[0].GetAuthor().GetUserId())
}

// TestEndThenSend: an ended conversation refuses sends, edits and rewinds
// with 409 ended and writes nothing; its history stays readable; ending it
// again succeeds; it can still be forked. A conversation with a call open
// cannot be ended (400 invalid).
func TestEndThenSend(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	n := startNode(t, model, server.Options{})
	conv := n.create(t, tokAlice, nil)
	path := "/v1/conversations/" + conv.ID
	model.Push(conv.ID, scripted.Text("a1"))
	seq := n.turn(t, ctx, tokAlice, conv.ID, "one", "answered")

	status, body := n.call(t, "POST", path+"/end", tokBob, nil)
	require.Equal(t, http.StatusNotFound, status, "%s", body)
	var got server.Conversation
	n.must(t, http.StatusOK, "GET", path, tokAlice, nil, &got)
	require.Equal(t, "idle", got.Status, "a stranger ended it")

	n.must(t, http.StatusOK, "POST", path+"/end", tokAlice, nil, &got)
	require.Equal(t, "ended", got.Status)
	require.Equal(t, "alice", got.Metadata[server.OwnerKey])
	last := n.lastSeq(t, ctx, conv.ID)

	for _, c := range []struct {
		op   string
		body any
	}{
		{"messages", server.SendMessage{Text: "two"}},
		{"edit", server.EditMessage{Seq: seq, Text: "uno"}},
		{"rewind", map[string]any{"to_seq": 0}},
	} {
		status, body := n.call(t, "POST", path+"/"+c.op, tokAlice, c.body)
		require.Equal(t, http.StatusConflict, status, "%s: %s", c.op, body)
		require.Equal(t, server.CodeEnded, errorCode(t, body), c.op)
	}
	require.Equal(t, last, n.lastSeq(t, ctx, conv.ID), "an ended conversation was written")
	require.Equal(t, []string{"u:one", "a:a1"}, texts(historyOf(t, n, tokAlice, conv.ID, "")))
	// Ending again succeeds, an empty object as body too; an operator may.
	n.must(t, http.StatusOK, "POST", path+"/end", tokOlga, `{}`, &got)
	require.Equal(t, "ended", got.Status)
	// A fork goes on from its history.
	var fork server.Conversation
	n.must(t, http.StatusCreated, "POST", path+"/fork", tokAlice, server.ForkConversation{AtSeq: last}, &fork)
	require.Equal(t, "idle", fork.Status)
	model.Push(fork.ID, scripted.Text("a2"))
	n.turn(t, ctx, tokAlice, fork.ID, "two", "answered")
	require.Equal(t, []string{"u:one", "a:a1", "u:two", "a:a2"}, texts(historyOf(t, n, tokAlice, fork.ID, "")))

	// A call open: End is refused and writes nothing.
	open, _ := suspendOnApproval(t, ctx, n, model)
	before := n.lastSeq(t, ctx, open.ID)
	status, body = n.call(t, "POST", "/v1/conversations/"+open.ID+"/end", tokAlice, nil)
	require.Equal(t, http.StatusBadRequest, status, "%s", body)
	require.Equal(t, server.CodeInvalid, errorCode(t, body))
	n.must(t, http.StatusOK, "GET", "/v1/conversations/"+open.ID, tokAlice, nil, &got)
	require.Equal(t, "suspended", got.Status)
	require.Equal(t, before, n.lastSeq(t, ctx, open.ID))
}

// TestForkOverHTTP: a fork copies the history up to at_seq into a new
// conversation with a fresh id, owned by the caller (an operator's fork of
// a user's conversation is the operator's), with the source's metadata and
// the body's; a stranger cannot fork; a fork that owes a turn runs it.
func TestForkOverHTTP(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	n := startNode(t, model, server.Options{})
	conv := n.create(t, tokAlice, map[string]string{"topic": "trip"})
	path := "/v1/conversations/" + conv.ID
	model.Push(conv.ID, scripted.Text("a1"), scripted.Text("a2"))
	first := n.turn(t, ctx, tokAlice, conv.ID, "one", "answered")
	n.turn(t, ctx, tokAlice, conv.ID, "two", "answered")
	src := historyOf(t, n, tokAlice, conv.ID, "")
	atSeq := src[1].GetSeq() // the first answer

	countConvs := func() int {
		rows, _, err := n.rt.Store().ListConversations(ctx, "", 1000)
		require.NoError(t, err)
		return len(rows)
	}
	convs0 := countConvs()
	status, body := n.call(t, "POST", path+"/fork", tokBob, server.ForkConversation{AtSeq: atSeq})
	require.Equal(t, http.StatusNotFound, status, "%s", body)
	require.Equal(t, convs0, countConvs(), "a stranger forked")

	// The operator forks alice's conversation: the fork is olga's.
	status, body = n.call(t, "POST", path+"/fork", tokOlga, server.ForkConversation{AtSeq: atSeq, Metadata: map[string]string{"branch": "b"}})
	require.Equal(t, http.StatusCreated, status, "%s", body)
	var fork server.Conversation
	require.NoError(t, json.Unmarshal(body, &fork))
	require.NotEqual(t, conv.ID, fork.ID)
	require.True(t, strings.HasPrefix(fork.ID, "c-"), fork.ID)
	require.Equal(t, "olga", fork.Metadata[server.OwnerKey])
	require.Equal(t, "trip", fork.Metadata["topic"], "the source's metadata is copied")
	require.Equal(t, "b", fork.Metadata["branch"])
	require.Equal(t, "idle", fork.Status)
	require.Equal(t, convs0+1, countConvs())
	got := historyOf(t, n, tokOlga, fork.ID, "")
	require.Len(t, got, 2)
	for i := range got {
		require.Equal(t, src[i].GetSeq(), got[i].GetSeq())
		require.Equal(t, texts(src[i:i+1]), texts(got[i:i+1]))
	}
	status, _ = n.call(t, "GET", "/v1/conversations/"+fork.ID, tokAlice, nil)
	require.Equal(t, http.StatusNotFound, status, "the fork is not alice's")
	// The source is unchanged.
	require.Equal(t, src, historyOf(t, n, tokAlice, conv.ID, ""))
	md, err := n.rt.Metadata(ctx, conv.ID)
	require.NoError(t, err)
	require.Equal(t, "alice", md[server.OwnerKey])

	// alice forks at her first message: the fork owes a turn and runs it
	// (the scripted model's default reply).
	req, err := http.NewRequest("POST", n.srv.URL+path+"/fork", strings.NewReader(fmt.Sprintf(`{"at_seq":%d}`, first)))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+tokAlice)
	res, err := n.srv.Client().Do(req)
	require.NoError(t, err)
	require.NoError(t, res.Body.Close())
	require.Equal(t, http.StatusCreated, res.StatusCode)
	loc := res.Header.Get("Location")
	require.True(t, strings.HasPrefix(loc, "/v1/conversations/c-"), loc)
	forked := strings.TrimPrefix(loc, "/v1/conversations/")
	require.Eventually(t, func() bool {
		// The fork's turn is over once the Store says so (no require
		// here: this runs off the test's goroutine).
		row, err := n.rt.Store().Conversation(ctx, forked)
		return err == nil && row.GetStatus() == messages.ConversationStatus_CONVERSATION_STATUS_IDLE
	}, 30*time.Second, 20*time.Millisecond)
	var c server.Conversation
	n.must(t, http.StatusOK, "GET", loc, tokAlice, nil, &c)
	require.Equal(t, "alice", c.Metadata[server.OwnerKey])
	require.Equal(t, []string{"u:one", "a:" + scripted.DefaultReply}, texts(historyOf(t, n, tokAlice, forked, "")))
}
