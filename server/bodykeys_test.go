package server_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/server"
)

// TestBodyKeysAreExactAndOnce: a request body's key is matched as
// written, case included, and given once. encoding/json matches a key to
// a field without regard to case and lets the last of two win, so
// {"text":"hi","Text":"bye"} sent "bye", and a resolve of
// {"result":{"approved":false},"Result":{"approved":true}} (which a proxy
// or validator reading keys as JSON Schema does, case-sensitively, takes
// for a refusal) approved the call. Each is 400 invalid and writes
// nothing, in nested objects (settings) and maps (metadata) too; the
// same bodies with their keys as documented are served.
func TestBodyKeysAreExactAndOnce(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	n := startNode(t, model, server.Options{})
	conv, call := suspendOnApproval(t, ctx, n, model)
	seq0 := n.lastSeq(t, ctx, conv.ID)
	base := "/v1/conversations/" + conv.ID
	for _, c := range []struct{ path, body string }{
		{"/v1/calls/" + call.ID + "/resolve", `{"result":{"approved":false},"Result":{"approved":true}}`},
		{"/v1/calls/" + call.ID + "/resolve", `{"RESULT":{"approved":true}}`},
		{"/v1/calls/" + call.ID + "/resolve", `{"result":{"approved":false},"result":{"approved":true}}`},
		{"/v1/calls/" + call.ID + "/reject", `{"Reason":"no"}`},
		{base + "/messages", `{"text":"hi","Text":"bye"}`},
		{base + "/messages", `{"text":"hi","request_id":"a","request_id":"b"}`},
		{"/v1/conversations", `{"Metadata":{"k":"v"}}`},
		{"/v1/conversations", `{"metadata":{"k":"1","k":"2"}}`},
		{"/v1/conversations", `{"settings":{"Model":"m"}}`},
		{"/v1/conversations", `{"settings":{"model":"m","model":"n"}}`},
		{"/v1/conversations", `{"settings":{},"\u0073ettings":null}`},
		{base + "/fork", `{"at_seq":1,"AT_SEQ":2}`},
		{base + "/schedules", `{"text":"t","After":"1h"}`},
	} {
		tok := tokAlice // the conversation's owner
		if strings.HasPrefix(c.path, "/v1/calls/") {
			tok = tokCarol // an approver
		}
		status, body := n.call(t, "POST", c.path, tok, c.body)
		require.Equal(t, http.StatusBadRequest, status, "%s %s: %s", c.path, c.body, body)
		require.Equal(t, server.CodeInvalid, errorCode(t, body), "%s %s", c.path, c.body)
	}
	require.Equal(t, seq0, n.lastSeq(t, ctx, conv.ID), "a bad body wrote to the log")
	row, err := n.rt.Store().ToolCall(ctx, call.ID)
	require.NoError(t, err)
	require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING, row.GetStatus(), "a bad body answered the call")
	rows, _, err := n.rt.Store().ListConversations(ctx, "", 100)
	require.NoError(t, err)
	require.Len(t, rows, 1, "a bad body created a conversation")
	schedules, err := n.rt.Schedules(ctx, conv.ID)
	require.NoError(t, err)
	require.Empty(t, schedules, "a bad body scheduled a wake-up")

	// As documented, and with a key escaped in JSON: served.
	n.must(t, http.StatusCreated, "POST", "/v1/conversations", tokAlice,
		`{"metadata":{"k":"1","K":"2"},"\u0073ettings":{"model":"m","temperature":0.5}}`, nil)
	n.must(t, http.StatusCreated, "POST", base+"/schedules", tokAlice, `{"text":"t","after":"1h","at":null}`, nil)
	n.must(t, http.StatusOK, "POST", "/v1/calls/"+call.ID+"/resolve", tokCarol, `{"result":{"approved":true,"Approved":false}}`, nil)
}
