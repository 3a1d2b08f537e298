package server_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/server"
)

// agentHistory reads the history of conv as agent's view, decoded.
func agentHistory(t *testing.T, n *node, token, conv, agent string) []*messages.Event {
	t.Helper()
	return historyOf(t, n, token, conv, "agent="+agent)
}

// TestPerAgentHistoryAndStream: ?agent= keeps one agent's view of the
// history and of the stream (its own events and those shared with it;
// "default" is the default agent); an unknown agent is a bad request, and
// who may read the conversation is unchanged.
func TestPerAgentHistoryAndStream(t *testing.T) {
	ctx := testContext(t)
	model, crit := newScripted(), newScripted()
	n := startNodeIn(t, "", model, server.Options{}, func(o *lazarus.Options) {
		o.Agents = []lazarus.Agent{{Name: "critic", Model: crit}}
	})
	conv := n.create(t, tokAlice, nil)
	model.Push(conv.ID, scripted.Text("default answer"))
	crit.Push(conv.ID, scripted.Text("critic answer"))
	st := n.stream(t, ctx, tokAlice, conv.ID, "")
	n.must(t, http.StatusAccepted, "POST", "/v1/conversations/"+conv.ID+"/messages", tokAlice,
		server.SendMessage{Text: "hello default"}, nil)
	st.until(t, "event", "default answer")
	n.must(t, http.StatusAccepted, "POST", "/v1/conversations/"+conv.ID+"/messages", tokAlice,
		server.SendMessage{Text: "hello critic", Agent: "critic"}, nil)
	st.until(t, "event", "critic answer")
	model.Push(conv.ID, scripted.Text("default again"))
	n.must(t, http.StatusAccepted, "POST", "/v1/conversations/"+conv.ID+"/messages", tokAlice,
		server.SendMessage{Text: "hello all", Broadcast: true}, nil)
	st.until(t, "event", "default again")
	st.close()

	evs := agentHistory(t, n, tokAlice, conv.ID, "critic")
	require.Len(t, evs, 3)
	require.Equal(t, "critic", evs[0].GetAgent())
	require.Equal(t, "critic", evs[1].GetAgent())
	require.Equal(t, []string{"*"}, evs[2].GetAudience(), "the broadcast is shared with the critic")
	evs = agentHistory(t, n, tokAlice, conv.ID, "default")
	require.Len(t, evs, 4)
	for _, ev := range evs {
		require.Empty(t, ev.GetAgent(), "the default agent's view holds none of the critic's events")
	}

	status, body := n.call(t, "GET", "/v1/conversations/"+conv.ID+"/events?agent=ghost", tokAlice, nil)
	require.Equal(t, http.StatusBadRequest, status)
	require.Equal(t, server.CodeInvalid, errorCode(t, body))
	status, _ = n.call(t, "GET", "/v1/conversations/"+conv.ID+"/events?agent=critic", tokBob, nil)
	require.Equal(t, http.StatusNotFound, status, "another user still may not read it")
	status, _ = n.call(t, "GET", "/v1/conversations/"+conv.ID+"/stream?agent=ghost", tokAlice, nil)
	require.Equal(t, http.StatusBadRequest, status)

	// The critic's stream replays only its view: its message, its answer,
	// the broadcast.
	cs := n.streamQuery(t, ctx, tokAlice, conv.ID, "?agent=critic&after=0", "")
	got := cs.until(t, "event", "hello all")
	var seqs []string
	for _, m := range got {
		require.NotContains(t, m.Data, "default", "the critic's stream shows no default agent's private event")
		if m.Event == "event" {
			seqs = append(seqs, m.ID)
		}
	}
	require.Equal(t, []string{"3", "4", "5"}, seqs)
	require.True(t, strings.Contains(got[0].Data, "hello critic"))
}

// TestHistoryNextBeforeOfAView: next_before is 0 on the page that holds the
// first event of the view asked for (an agent's, the effective one), not
// only when that page reaches seq 1: a page of exactly limit events with
// nothing before it in the view is the last.
func TestHistoryNextBeforeOfAView(t *testing.T) {
	ctx := testContext(t)
	model, crit := newScripted(), newScripted()
	n := startNodeIn(t, "", model, server.Options{}, func(o *lazarus.Options) {
		o.Agents = []lazarus.Agent{{Name: "critic", Model: crit}}
	})
	conv := n.create(t, tokAlice, nil)
	model.Push(conv.ID, scripted.Text("default answer"))
	crit.Push(conv.ID, scripted.Text("critic answer"))
	st := n.stream(t, ctx, tokAlice, conv.ID, "")
	n.must(t, http.StatusAccepted, "POST", "/v1/conversations/"+conv.ID+"/messages", tokAlice,
		server.SendMessage{Text: "hello default"}, nil)
	st.until(t, "event", "default answer")
	n.must(t, http.StatusAccepted, "POST", "/v1/conversations/"+conv.ID+"/messages", tokAlice,
		server.SendMessage{Text: "hello critic", Agent: "critic"}, nil)
	st.until(t, "event", "critic answer")
	st.close()

	page := func(q string) server.EventPage {
		t.Helper()
		var p server.EventPage
		n.must(t, http.StatusOK, "GET", "/v1/conversations/"+conv.ID+"/events?"+q, tokAlice, nil, &p)
		return p
	}
	// The critic sees seqs 3 and 4 only.
	p := page("agent=critic&limit=2")
	require.Len(t, p.Events, 2)
	require.Zero(t, p.NextBefore, "the critic's view has nothing before seq 3")
	p = page("agent=critic&limit=1")
	require.Len(t, p.Events, 1)
	require.Equal(t, uint64(4), p.NextBefore)
	p = page("agent=critic&limit=1&before=4")
	require.Len(t, p.Events, 1)
	require.Zero(t, p.NextBefore)

	// After a rewind to the start and a new exchange, the effective view
	// holds those two events only.
	n.must(t, http.StatusOK, "POST", "/v1/conversations/"+conv.ID+"/rewind", tokAlice, map[string]any{"to_seq": 0}, nil)
	model.Push(conv.ID, scripted.Text("fresh answer"))
	st = n.stream(t, ctx, tokAlice, conv.ID, "5")
	n.must(t, http.StatusAccepted, "POST", "/v1/conversations/"+conv.ID+"/messages", tokAlice,
		server.SendMessage{Text: "start again"}, nil)
	st.until(t, "event", "fresh answer")
	st.close()
	p = page("view=effective&limit=2")
	require.Len(t, p.Events, 2)
	require.Zero(t, p.NextBefore, "the effective view has nothing before the new exchange")
	// The full log still pages on to seq 1.
	p = page("limit=2")
	require.Len(t, p.Events, 2)
	require.Equal(t, uint64(6), p.NextBefore)
	p = page("limit=2&before=3")
	require.Len(t, p.Events, 2)
	require.Zero(t, p.NextBefore)
}

// TestSendToTheDefaultAgentByName: a send with agent "default" addresses
// the default agent, as ?agent=default selects its view and as an empty
// agent does: accepted, the message is the default agent's and its model
// answers. An unknown agent is still a bad request, nothing written.
func TestSendToTheDefaultAgentByName(t *testing.T) {
	ctx := testContext(t)
	model, crit := newScripted(), newScripted()
	n := startNodeIn(t, "", model, server.Options{}, func(o *lazarus.Options) {
		o.Agents = []lazarus.Agent{{Name: "critic", Model: crit}}
	})
	conv := n.create(t, tokAlice, nil)
	model.Push(conv.ID, scripted.Text("default answer"))
	st := n.stream(t, ctx, tokAlice, conv.ID, "")
	var sent server.Sent
	n.must(t, http.StatusAccepted, "POST", "/v1/conversations/"+conv.ID+"/messages", tokAlice,
		server.SendMessage{Text: "hello default", Agent: "default"}, &sent)
	require.Equal(t, uint64(1), sent.Seq)
	st.until(t, "event", "default answer")
	st.close()

	evs := agentHistory(t, n, tokAlice, conv.ID, "default")
	require.Len(t, evs, 2)
	require.Equal(t, "hello default", evs[0].GetUserMsg().GetContent()[0].GetText())
	for _, ev := range evs {
		require.Empty(t, ev.GetAgent(), "the default agent's")
		require.Empty(t, ev.GetAudience(), "not shared")
	}
	require.Empty(t, agentHistory(t, n, tokAlice, conv.ID, "critic"), "the critic sees none of it")

	status, body := n.call(t, "POST", "/v1/conversations/"+conv.ID+"/messages", tokAlice,
		server.SendMessage{Text: "hello ghost", Agent: "ghost"})
	require.Equal(t, http.StatusBadRequest, status)
	require.Equal(t, server.CodeInvalid, errorCode(t, body))
	require.Len(t, agentHistory(t, n, tokAlice, conv.ID, "default"), 2, "nothing written")
}
