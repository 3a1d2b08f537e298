package actors_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

// A panic of an ExpiryOptions callback is recovered by the expiry actor
// itself (actors.NewExpiry is exported: not every caller wraps its
// callbacks). Left to protoactor, Owns panicking on a stored deadline
// failed every rebuild on Started until the actor was stopped for good,
// and a Deliver panic restarted it: it read the Store again and expired
// the same call again.
func TestExpiryRecoversCallbackPanics(t *testing.T) {
	store := memjournal.New(memjournal.Options{})
	pendingHumanCall(t, store, "bad", "call-bad", expiryT0.Add(time.Second))
	pendingHumanCall(t, store, "good", "call-good", expiryT0.Add(2*time.Second))
	var j *fakeJournal
	h := newExpiryHarness(t, store, func(sys *actor.ActorSystem) *actor.PID {
		// Answers every expire as written, leaving the Store's deadlines
		// in place: only this actor's memory says the call is done.
		j = newFakeJournal(t, sys, func(*messages.JournalWrite) error { return nil })
		return j.pid
	})
	h.opts.Owns = func(conv string) bool {
		if conv == "bad" {
			panic("Owns: injected")
		}
		return true
	}
	var fires atomic.Int32
	h.opts.Fire = func(string, string, time.Time) { fires.Add(1) }
	deliver := h.opts.Deliver
	h.opts.Deliver = func(conv, call string) {
		if conv == "bad" {
			panic("Deliver: injected")
		}
		deliver(conv, call)
	}
	h.start()
	// A panic of Owns counts as owned: both deadlines are armed.
	h.waitArmed(t, expiryT0.Add(time.Second))
	h.clock.Advance(time.Second)
	require.Equal(t, "call-bad", resolvedCall(t, j.next(t).w))
	h.clock.Advance(time.Second)
	require.Equal(t, "call-good", resolvedCall(t, j.next(t).w))
	require.Equal(t, delivery{"good", "call-good"}, h.nextDelivery(t))
	require.Eventually(t, func() bool { return h.clock.Timers() == 0 }, replyWait, time.Millisecond)
	j.requireNone(t) // call-bad was expired once
	require.Empty(t, h.deliveries)
	require.Zero(t, fires.Load())
}

// A panic of JournalOptions.Committed or Observe is recovered: the
// request is answered, and the actor (and, for Observe, which runs on a
// committer goroutine, the process) goes on.
func TestJournalRecoversCallbackPanics(t *testing.T) {
	sys := newTestSystem(t)
	store := memjournal.New(memjournal.Options{})
	var committed, observed atomic.Int32
	pid := sys.Root.Spawn(actors.NewJournal(store, actors.JournalOptions{
		Committed: func(req *messages.AppendRequest) {
			if committed.Add(1) == 1 {
				panic("Committed: injected")
			}
		},
		Observe: func(int, time.Duration) {
			if observed.Add(1) == 1 {
				panic("Observe: injected")
			}
		},
	}))
	for i := range uint64(3) {
		r := requestWrite(t, sys, pid, write(i+1, userAppend("a", i, "hi")))
		require.NoError(t, replyErr(r))
		require.Equal(t, i+1, r.GetReply().GetLastSeq())
	}
	require.Equal(t, int32(3), committed.Load())
	last, err := store.LastSeq(t.Context(), "a")
	require.NoError(t, err)
	require.Equal(t, uint64(3), last)
}

// A panic of ConversationConfig.Publish is recovered: the conversation
// goes on. It stopped the activation in the middle of the step that
// published (recoverReceive): here a newer message's, which cancels the
// model call in flight and publishes its Restart; the message was
// answered "retry" and not written.
func TestConversationRecoversPublishPanic(t *testing.T) {
	sys := newTestSystem(t)
	store := memjournal.New(memjournal.Options{})
	journalPID := sys.Root.Spawn(actors.NewJournal(store, actors.JournalOptions{}))
	var calls atomic.Int32
	entered := make(chan struct{})
	model := agent.ModelFunc(func(ctx context.Context, _ agent.Turn, _ func(string)) (*messages.AssistantMessage, error) {
		if calls.Add(1) == 1 {
			close(entered)
			<-ctx.Done() // cancelled by the newer message
			return nil, ctx.Err()
		}
		return agent.Text("fresh"), nil
	})
	publish := func(u actors.Update) {
		if u.Restart {
			panic("Publish: injected")
		}
	}
	pid := sys.Root.Spawn(actors.NewConversation(actors.ConversationConfig{ID: "c", Store: store, Journal: journalPID, Model: model, Publish: publish}))
	t.Cleanup(func() { _ = sys.Root.StopFuture(pid).Wait() })
	send := func(rid string) *messages.AgentSendReply {
		t.Helper()
		res, err := sys.Root.RequestFuture(pid, userSend(rid, rid), replyWait).Result()
		require.NoError(t, err)
		return res.(*messages.AgentSendReply)
	}
	require.Nil(t, send("r1").GetError())
	select {
	case <-entered:
	case <-time.After(replyWait):
		t.Fatal("the model was never called for r1")
	}
	r2 := send("r2")
	require.Nil(t, r2.GetError(), "the newer message was written")
	require.Equal(t, uint64(2), r2.GetSeq())
	require.Eventually(t, func() bool {
		evs, err := store.Events(t.Context(), "c", journal.EventQuery{})
		return err == nil && len(evs) == 3 && evs[2].GetAssistantMsg() != nil
	}, replyWait, time.Millisecond, "the model answered the newer message")
}

// ConversationConfig.Revived is called with the seq of the log's last event
// the revival read, before the activation's first step (the message that
// woke it is written after), and a panic of it is recovered: the
// activation goes on and writes the message.
func TestConversationRevivedGetsTheLogsLastSeq(t *testing.T) {
	sys := newTestSystem(t)
	store := memjournal.New(memjournal.Options{})
	_, err := store.Append(t.Context(), &messages.AppendRequest{ConversationId: "c", Events: []*messages.Event{
		{Body: &messages.Event_UserMsg{UserMsg: &messages.UserMessage{Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: "old"}}}}}},
	}})
	require.NoError(t, err)
	journalPID := sys.Root.Spawn(actors.NewJournal(store, actors.JournalOptions{}))
	model := agent.ModelFunc(func(context.Context, agent.Turn, func(string)) (*messages.AssistantMessage, error) {
		return agent.Text("answer"), nil
	})
	revived := make(chan uint64, 2)
	pid := sys.Root.Spawn(actors.NewConversation(actors.ConversationConfig{ID: "c", Store: store, Journal: journalPID, Model: model,
		Revived: func(seq uint64) {
			revived <- seq
			panic("Revived: injected")
		}}))
	t.Cleanup(func() { _ = sys.Root.StopFuture(pid).Wait() })
	res, err := sys.Root.RequestFuture(pid, userSend("r1", "new"), replyWait).Result()
	require.NoError(t, err)
	require.Nil(t, res.(*messages.AgentSendReply).GetError(), "the message was written")
	require.Equal(t, uint64(2), res.(*messages.AgentSendReply).GetSeq())
	require.Equal(t, uint64(1), <-revived, "the log's last seq when revived, before the message")
	require.Empty(t, revived, "called once")
}
