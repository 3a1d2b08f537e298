package tests

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// TestRejectIsADocumentedToolError: a declined human call becomes a tool
// error with code agent.CodeRejected and the reason as its message, and the
// model sees exactly that on its next call.
func TestRejectIsADocumentedToolError(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), nil)
		ctx := ctxT(t)
		h.model.Push("refund",
			scripted.Reply("this needs approval", scripted.Call("approve_refund", `{"amount":120}`)),
			scripted.Text("refund declined"))
		_, err := h.rt.Send(ctx, "refund", "refund order 42", user)
		require.NoError(t, err)
		callID := pendingCallID(t, h.awaitEvent("refund", 0, isSuspension))

		require.NoError(t, h.rt.Reject(ctx, callID, "over the limit", user))
		h.awaitEvent("refund", 0, isAssistantText("refund declined"))

		got := toolResults(h.model.Turns("refund")[1], callID)
		require.Len(t, got, 1)
		require.Equal(t, agent.CodeRejected, got[0].GetError().GetCode())
		require.Equal(t, "over the limit", got[0].GetError().GetMessage())
		row, err := h.store.ToolCall(ctx, callID)
		require.NoError(t, err)
		require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_ERRORED, row.GetStatus())
		require.Equal(t, agent.CodeRejected, row.GetResult().GetError().GetCode())
	})
}

// TestToolCallIDsFollowTheClock: the runtime mints tool call ids from its
// Clock, so a simulated clock gives ids of simulated time.
func TestToolCallIDsFollowTheClock(t *testing.T) {
	h := newHarness(t, openStore(t, "memory"), nil)
	ctx := ctxT(t)
	h.model.Push("c", scripted.Reply("asking", scripted.Call("approve_refund", `{"amount":1}`)))
	_, err := h.rt.Send(ctx, "c", "go", user)
	require.NoError(t, err)
	id := pendingCallID(t, h.awaitEvent("c", 0, isSuspension))
	// 12 characters of base32 hold 60 of the 64 bits of the time.
	want := actors.NewToolCallIDAt(h.clock.Now())
	require.Equal(t, want[:len("call_")+12], id[:len("call_")+12], "minted at the clock's time")
}

// TestEmptyMessagesAreRefused: a message that says nothing is ErrInvalid
// and writes nothing, not an empty user_msg that starts a turn.
func TestEmptyMessagesAreRefused(t *testing.T) {
	h := newHarness(t, openStore(t, "memory"), nil)
	ctx := ctxT(t)
	_, err := h.rt.Send(ctx, "c", "", user)
	require.ErrorIs(t, err, journal.ErrInvalid)
	for name, msg := range map[string]*messages.UserMessage{
		"no parts":               {},
		"a nil part":             {Content: []*messages.ContentPart{nil}},
		"a part with no content": {Content: []*messages.ContentPart{{}}},
		"an empty text after a text": {Content: []*messages.ContentPart{
			{Part: &messages.ContentPart_Text{Text: "hi"}}, {Part: &messages.ContentPart_Text{}}}},
		"an image of nothing": {Content: []*messages.ContentPart{{Part: &messages.ContentPart_Image{Image: &messages.Blob{MediaType: "image/png"}}}}},
		"a nil file":          {Content: []*messages.ContentPart{{Part: &messages.ContentPart_File{}}}},
	} {
		_, err := h.rt.SendMessage(ctx, "c", msg, lazarus.SendOptions{}, user)
		require.ErrorIs(t, err, journal.ErrInvalid, name)
	}
	_, err = h.store.Conversation(ctx, "c")
	require.ErrorIs(t, err, journal.ErrNotFound, "nothing was written")
	require.Empty(t, h.model.Turns("c"), "no turn started")

	_, err = h.rt.SendMessage(ctx, "c", &messages.UserMessage{Content: []*messages.ContentPart{
		{Part: &messages.ContentPart_Image{Image: &messages.Blob{MediaType: "image/png", Uri: "https://example.com/a.png"}}}}}, lazarus.SendOptions{}, user)
	require.NoError(t, err, "an image by reference says something")
}
