package tests

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// TestRefusedSendsWriteNothing: sends refused as bad input (a scope too
// large to record, a nil message or part, a request id or text that is not
// UTF-8, an empty text) create no conversation and activate nothing; ids
// that extend another (a/b, a NUL b) are conversations of their own; and a
// subscription opened before a conversation's first message gets it.
func TestRefusedSendsWriteNothing(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), nil)
		ctx := ctxT(t)
		big := agent.Scope{UserID: strings.Repeat("u", 10000)}
		_, err := h.rt.Send(ctx, "c1", "hi", big)
		require.ErrorIs(t, err, journal.ErrInvalid)
		_, err = h.rt.SendMessage(ctx, "c2", nil, lazarus.SendOptions{}, user)
		require.ErrorIs(t, err, journal.ErrInvalid)
		_, err = h.rt.SendMessage(ctx, "c3", &messages.UserMessage{Content: []*messages.ContentPart{nil}}, lazarus.SendOptions{}, user)
		require.ErrorIs(t, err, journal.ErrInvalid)
		_, err = h.rt.SendMessage(ctx, "c4", &messages.UserMessage{Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: "x"}}}}, lazarus.SendOptions{RequestID: "bad\xff"}, user)
		require.ErrorIs(t, err, journal.ErrInvalid)
		_, err = h.rt.Send(ctx, "c5", "", user)
		require.ErrorIs(t, err, journal.ErrInvalid)
		_, err = h.rt.Send(ctx, "c6", "caf\xe9", user)
		require.ErrorIs(t, err, journal.ErrInvalid)
		convs, _, err := h.store.ListConversations(ctx, "", 10)
		require.NoError(t, err)
		require.Empty(t, convs)
		require.Zero(t, h.rt.Active())

		sub, err := h.rt.Subscribe(ctx, "a", 0)
		require.NoError(t, err, "a conversation with no events yet")
		h.model.Push("a/b", scripted.Text("ab"))
		h.model.Push("a\x00b", scripted.Text("a0b"))
		h.model.Push("a", scripted.Text("a"))
		for _, id := range []string{"a/b", "a\x00b", "a"} {
			_, err := h.rt.Send(ctx, id, "hi "+id, user)
			require.NoError(t, err, "id %q", id)
		}
		h.awaitEvent("a", 0, isAssistantText("a"))
		h.awaitEvent("a/b", 0, isAssistantText("ab"))
		h.awaitEvent("a\x00b", 0, isAssistantText("a0b"))
		h.awaitUpdate(sub, func(u actors.Update) bool { return u.Event.GetUserMsg() != nil })
		evs := h.history("a")
		require.Equal(t, []string{"user_msg", "assistant_msg"}, types(evs))
		require.Equal(t, "hi a", evs[0].GetUserMsg().GetContent()[0].GetText())
	})
}
