package actors_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

// slowToCancel is a model that answers after answerIn and returns only
// windDown after its context is cancelled (a provider call that takes time
// to tear down). It records how many of its calls overlap, per
// conversation.
type slowToCancel struct {
	answerIn, windDown time.Duration

	mu        sync.Mutex
	active    map[string]int
	maxActive map[string]int
	calls     atomic.Int64
	cancelled atomic.Int64
}

func (m *slowToCancel) Generate(ctx context.Context, turn agent.Turn, _ func(string)) (*messages.AssistantMessage, error) {
	m.calls.Add(1)
	m.mu.Lock()
	if m.active == nil {
		m.active, m.maxActive = map[string]int{}, map[string]int{}
	}
	m.active[turn.ConversationID]++
	m.maxActive[turn.ConversationID] = max(m.maxActive[turn.ConversationID], m.active[turn.ConversationID])
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		m.active[turn.ConversationID]--
		m.mu.Unlock()
	}()
	select {
	case <-time.After(m.answerIn):
		return &messages.AssistantMessage{Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: "answered"}}}}, nil
	case <-ctx.Done():
		m.cancelled.Add(1)
		<-time.After(m.windDown)
		return nil, ctx.Err()
	}
}

// maxOverlap returns the most calls of conv that ran at once.
func (m *slowToCancel) maxOverlap(conv string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.maxActive[conv]
}

func userSend(rid, text string) *actors.Command {
	return &actors.Command{Scope: agent.Scope{UserID: "alice"}, Msg: &messages.AgentSend{RequestId: rid, Message: &messages.UserMessage{
		Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: text}}}}}}
}

// TestModelCallsNeverOverlap: a conversation sent 40 messages in a row by
// a model that needs 300 ms to return once cancelled: each message cancels
// the turn in flight, and the next turn's call waits for the cancelled one
// to return (16 calls ran at once, and goroutines piled up in Generate).
// Generate is never called twice at once for the conversation, and the
// last message is answered.
func TestModelCallsNeverOverlap(t *testing.T) {
	sys := newTestSystem(t)
	store := memjournal.New(memjournal.Options{})
	model := &slowToCancel{answerIn: 200 * time.Millisecond, windDown: 300 * time.Millisecond}
	journalPID := sys.Root.Spawn(actors.NewJournal(store, actors.JournalOptions{}))
	pid := sys.Root.Spawn(actors.NewConversation(actors.ConversationConfig{ID: "c", Store: store, Journal: journalPID, Model: model}))
	t.Cleanup(func() { _ = sys.Root.StopFuture(pid).Wait() })

	var last uint64
	for i := range 40 {
		res, err := sys.Root.RequestFuture(pid, userSend(fmt.Sprint("r", i), fmt.Sprint("message ", i)), 10*time.Second).Result()
		require.NoError(t, err)
		reply := res.(*messages.AgentSendReply)
		require.Nil(t, reply.GetError())
		last = reply.GetSeq()
	}
	require.Eventually(t, func() bool {
		_, evs, err := store.LoadSince(context.Background(), "c")
		return err == nil && len(evs) > 0 && evs[len(evs)-1].GetSeq() > last && evs[len(evs)-1].GetAssistantMsg() != nil
	}, 20*time.Second, time.Millisecond, "the last message is answered")
	require.Positive(t, model.cancelled.Load(), "turns were cancelled by newer messages")
	require.Equal(t, 1, model.maxOverlap("c"), "Generate never runs twice at once for one conversation (%d calls)", model.calls.Load())
}

// TestModelGateWaiterGivesUpWhenCancelled: a call waiting for the gate
// whose turn is cancelled leaves without entering; the gate then admits
// the next call once the one in flight has left.
func TestModelGateWaiterGivesUpWhenCancelled(t *testing.T) {
	var g actors.ModelGate
	leave, err := actors.EnterForTesting(&g, context.Background(), "c")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	gaveUp := make(chan error, 1)
	go func() {
		_, err := actors.EnterForTesting(&g, ctx, "c")
		gaveUp <- err
	}()
	require.Eventually(t, func() bool { return g.WaitingForTesting("c") == 1 }, 10*time.Second, time.Millisecond)
	cancel()
	require.ErrorIs(t, <-gaveUp, context.Canceled)
	require.Zero(t, g.WaitingForTesting("c"))

	_, err = actors.EnterForTesting(&g, ctx, "c")
	require.ErrorIs(t, err, context.Canceled, "a cancelled turn never enters, even when the gate is free")
	admitted := make(chan func(), 1)
	go func() {
		leave2, err := actors.EnterForTesting(&g, context.Background(), "c")
		if err == nil {
			admitted <- leave2
		}
	}()
	require.Eventually(t, func() bool { return g.WaitingForTesting("c") == 1 }, 10*time.Second, time.Millisecond)
	other, err := actors.EnterForTesting(&g, context.Background(), "other")
	require.NoError(t, err, "other conversations do not wait")
	other()
	leave()
	select {
	case leave2 := <-admitted:
		leave2()
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting call was not admitted once the call in flight left")
	}
}
