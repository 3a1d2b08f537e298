package actors_test

import (
	"context"
	"runtime"
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

// TestNoDeltaOfACancelledCallAfterItsRestart: a delta whose publication
// began before a newer message cancelled its model call is published
// before the Restart that voids the call, never after it (where it would
// read as the first delta of the next call). The test's Publish holds the
// first call's delta until the call's context is cancelled, then gives
// the Restart every chance to overtake it.
func TestNoDeltaOfACancelledCallAfterItsRestart(t *testing.T) {
	sys := newTestSystem(t)
	store := memjournal.New(memjournal.Options{})
	journalPID := sys.Root.Spawn(actors.NewJournal(store, actors.JournalOptions{}))

	var (
		first      sync.Once
		firstCtx   = make(chan context.Context, 1)
		restarted  atomic.Bool
		mu         sync.Mutex
		published  []string
		entered    = make(chan struct{})
		answered   = make(chan struct{})
		answerOnce sync.Once
	)
	model := agent.ModelFunc(func(ctx context.Context, _ agent.Turn, onDelta func(string)) (*messages.AssistantMessage, error) {
		isFirst := false
		first.Do(func() { isFirst = true })
		if isFirst {
			firstCtx <- ctx
			onDelta("stale")
			<-ctx.Done()
			return nil, ctx.Err()
		}
		onDelta("fresh")
		return agent.Text("fresh"), nil
	})
	publish := func(u actors.Update) {
		switch {
		case u.Delta == "stale":
			// Published as the newer message arrives: hold it until the
			// call is cancelled, and let a Restart published meanwhile
			// overtake it.
			ctx := <-firstCtx
			close(entered)
			<-ctx.Done()
			for i := 0; i < 10000 && !restarted.Load(); i++ {
				runtime.Gosched()
			}
		case u.Restart:
			restarted.Store(true)
		}
		mu.Lock()
		defer mu.Unlock()
		switch {
		case u.Restart:
			published = append(published, "restart")
		case u.Delta != "":
			published = append(published, u.Delta)
		}
		if u.Delta == "fresh" {
			answerOnce.Do(func() { close(answered) })
		}
	}
	pid := sys.Root.Spawn(actors.NewConversation(actors.ConversationConfig{ID: "c", Store: store, Journal: journalPID, Model: model, Publish: publish}))
	t.Cleanup(func() { _ = sys.Root.StopFuture(pid).Wait() })

	send := func(rid, text string) {
		t.Helper()
		res, err := sys.Root.RequestFuture(pid, userSend(rid, text), 10*time.Second).Result()
		require.NoError(t, err)
		require.Nil(t, res.(*messages.AgentSendReply).GetError())
	}
	send("r1", "one")
	<-entered
	// The first call is publishing its delta: a newer message cancels it.
	sys.Root.Send(pid, userSend("r2", "two"))
	select {
	case <-answered:
	case <-time.After(10 * time.Second):
		t.Fatal("the second call streamed nothing")
	}
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"stale", "restart", "fresh"}, published, "the cancelled call's delta comes before its Restart")
}
