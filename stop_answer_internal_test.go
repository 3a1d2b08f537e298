package lazarus

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/messages"
)

// TestStaleStopVoidsTheAnswer: an activation whose model call has streamed
// a delta finds itself stale (another writer moved the log on) and
// retires: it publishes nothing, and the hub kept the call's deltas as the
// answer in progress until the conversation's next model call streamed,
// a subscriber was never told they were void (it read the next call's
// deltas as more of the same answer), and one that started meanwhile was
// handed them. The stop now voids them: the subscriber gets a Restart
// before the rerun's deltas, and the hub keeps nothing in between.
func TestStaleStopVoidsTheAnswer(t *testing.T) {
	const n = 50
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var calls atomic.Int64
	began := make(chan int64, 1)
	release := make(chan struct{}, 1)
	model := agent.ModelFunc(func(ctx context.Context, _ agent.Turn, onDelta func(string)) (*messages.AssistantMessage, error) {
		call := calls.Add(1)
		if call%2 == 0 { // a rerun: its delta waits for the test
			began <- call
			select {
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		onDelta(fmt.Sprintf("call %d ", call))
		<-ctx.Done()
		return nil, ctx.Err()
	})
	rt, err := Open(Options{Model: model, NoResume: true, IdleTimeout: -1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = rt.Close() })

	for i := range n {
		conv := fmt.Sprintf("c%d", i)
		sub, err := rt.Subscribe(ctx, conv, 0)
		require.NoError(t, err)
		_, err = rt.Send(ctx, conv, "hi", agent.Scope{UserID: "u"})
		require.NoError(t, err)
		first := nextDelta(t, sub)

		// Another writer moves the log on; a wake that has read it finds
		// the activation stale, which stops without publishing, and its
		// successor runs the turn the log owes.
		last, err := rt.Store().LastSeq(ctx, conv)
		require.NoError(t, err)
		_, err = rt.Store().Append(ctx, &messages.AppendRequest{
			ConversationId: conv, ExpectedLast: last,
			Status: messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE,
			Events: []*messages.Event{{RequestId: "elsewhere", Body: &messages.Event_UserMsg{UserMsg: &messages.UserMessage{
				Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: "more"}}}}}}},
		})
		require.NoError(t, err)
		_, err = rt.sup.Ask(ctx, conv, &actors.Command{Scope: agent.SystemScope, Msg: &messages.AgentWake{LogLast: last + 1}})
		require.NoError(t, err)
		var rerun int64
		select {
		case rerun = <-began:
		case <-ctx.Done():
			t.Fatalf("%s: the turn the log owes never ran again", conv)
		}
		_, answers := rt.hub.sizesForTesting()
		require.Zero(t, answers, "%s: the stopped call's delta %q is void", conv, first)
		sub2, err := rt.Subscribe(ctx, conv, last+1)
		require.NoError(t, err)

		release <- struct{}{}
		u := <-sub
		require.True(t, u.Restart, "%s: the subscriber is told %q is void, got %+v", conv, first, u)
		require.Empty(t, u.Delta)
		require.Nil(t, u.TurnEnd)
		require.Equal(t, fmt.Sprintf("call %d ", rerun), nextDelta(t, sub), conv)
		require.Equal(t, fmt.Sprintf("call %d ", rerun), nextDelta(t, sub2), "%s: a later subscriber gets the rerun's answer alone", conv)
		require.True(t, rt.Kill(conv), conv)
	}
}

// nextDelta reads updates until a delta, which it returns; anything
// that voids or ends the answer first fails the test.
func nextDelta(t *testing.T, sub <-chan Update) string {
	t.Helper()
	for u := range sub {
		require.False(t, u.Restart, "%+v", u)
		require.Nil(t, u.TurnEnd, "%+v", u)
		require.NoError(t, u.Err)
		if u.Delta != "" {
			return u.Delta
		}
	}
	t.Fatal("the subscription ended")
	return ""
}
