package actors

import (
	"context"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/snapshot"
)

// TestAnswerToEndedConversationKeepsItEnded: a human call left open in
// an ENDED conversation (an import cut short) may still be answered in the
// Store (its deadline expires: the expiry's write leaves the status
// alone), and the answer is delivered to the live activation. The delivery
// must not make the activation forget that the row is ENDED: it would
// otherwise write the result into the ended log and take new messages and
// run turns there, stating ACTIVE over ENDED.
func TestAnswerToEndedConversationKeepsItEnded(t *testing.T) {
	ctx := context.Background()
	mem := memjournal.New(memjournal.Options{})
	t.Cleanup(func() { _ = mem.Close() })
	h := call("h1", human)
	_, err := mem.Append(ctx, &messages.AppendRequest{ConversationId: "c", Events: []*messages.Event{user("r1"), answer(h.GetToolCall().GetCall()), h},
		ToolCalls: []*messages.ToolCallRecord{{Id: "h1", ConversationId: "c", Name: "approve", Executor: human,
			Status: messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING, Args: "{}", Created: journal.Timestamp(t0)}},
		Status: messages.ConversationStatus_CONVERSATION_STATUS_ENDED})
	require.NoError(t, err)
	// Revived before the expiry's write lands: the call is open.
	l := load(ctx, mem, "c")
	require.NoError(t, l.err)
	l.scope = agent.SystemScope
	c := newCore(coreConfig{ID: "c", Policy: snapshot.Policy{}.WithDefaults(), Retry: RetryPolicy{}.WithDefaults()}, slog.New(slog.DiscardHandler))
	c.step(t0, l)
	require.True(t, c.ended())
	// The expiry's write, which leaves an ENDED row's status alone.
	_, err = mem.Append(ctx, &messages.AppendRequest{ConversationId: "c", Unfenced: true, Resolutions: []*messages.ToolResolution{{
		ToolCallId: "h1", Status: messages.ToolCallStatus_TOOL_CALL_STATUS_EXPIRED, Result: ExpiredOutcome(), At: journal.Timestamp(t0), By: SystemIdentity()}}})
	require.NoError(t, err)

	expired := &inCommand{sender: "expiry", cmd: &Command{Scope: agent.SystemScope, Msg: &messages.AgentResolved{ToolCallId: "h1",
		Status: messages.ToolCallStatus_TOOL_CALL_STATUS_EXPIRED, Result: ExpiredOutcome(), By: "system", Resolver: SystemIdentity()}}}
	effs := c.step(t0, expired)
	effs = append(effs, c.step(t0, send("r2"))...)
	var refused bool
	for _, e := range effs {
		switch e := e.(type) {
		case effWrite:
			t.Fatalf("an ended conversation's activation wrote %v", e.req)
		case effStartModel:
			t.Fatal("an ended conversation's activation called the model")
		case effReply:
			if r, ok := e.msg.(*messages.AgentSendReply); ok {
				require.ErrorIs(t, journal.ErrorFromProto(r.GetError()), journal.ErrEnded, "the send")
				refused = true
			}
		}
	}
	require.True(t, refused, "the send is answered")
	require.True(t, c.ended(), "the activation still sees the row ENDED")
}
