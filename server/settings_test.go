package server_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/server"
)

// TestCreateWithSettings: a conversation created with settings has them
// (Runtime.Configure) and its model calls get them; bad settings are a 400
// with nothing created.
func TestCreateWithSettings(t *testing.T) {
	model := scripted.New(scripted.Options{})
	n := startNode(t, model, server.Options{})
	temp := 0.3
	var c server.Conversation
	n.must(t, http.StatusCreated, "POST", "/v1/conversations", tokAlice, server.CreateConversation{
		Settings: &server.Settings{SystemPrompt: "Answer in French.", Temperature: &temp, ToolChoice: "ask"},
	}, &c)
	got, err := n.rt.Settings(context.Background(), c.ID)
	require.NoError(t, err)
	require.Equal(t, agent.Settings{SystemPrompt: "Answer in French.", Temperature: &temp, ToolChoice: "ask"}, got)
	require.Equal(t, "idle", c.Status)

	model.Push(c.ID, scripted.Text("Bonjour."))
	n.must(t, http.StatusAccepted, "POST", "/v1/conversations/"+c.ID+"/messages", tokAlice, server.SendMessage{Text: "hi"}, nil)
	require.NoError(t, model.WaitCalls(context.Background(), c.ID, 1))
	require.Equal(t, "Answer in French.", model.Turns(c.ID)[0].Settings.SystemPrompt)

	before, _, err := n.rt.Store().ListConversations(context.Background(), "", 100)
	require.NoError(t, err)
	neg := -1.0
	for name, s := range map[string]*server.Settings{
		"unknown tool":         {ToolChoice: "nope"},
		"negative temperature": {Temperature: &neg},
	} {
		code, body := n.call(t, "POST", "/v1/conversations", tokAlice, server.CreateConversation{Settings: s})
		require.Equal(t, http.StatusBadRequest, code, name)
		require.Equal(t, "invalid", errorCode(t, body), name)
	}
	after, _, err := n.rt.Store().ListConversations(context.Background(), "", 100)
	require.NoError(t, err)
	require.Len(t, after, len(before), "nothing created")
	// The owner is written before the row; a refused creation takes it
	// back, so the owner's metadata names only the conversation created.
	md, err := n.rt.Metadata(context.Background(), c.ID)
	require.NoError(t, err)
	owned, _, err := n.rt.Store().(journal.MetadataIndex).FindConversations(context.Background(), server.OwnerKey, md[server.OwnerKey], "", 100)
	require.NoError(t, err)
	require.Equal(t, []string{c.ID}, owned)
}
