package lazarus_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

// killRaceStore holds, each once armed, three steps of a kill racing a
// send: the kill's first read of the conversation once its actor has
// stopped (LastSeq or Conversation), a subscription's history read after a
// given seq, and the write of a user message with a given text, once the
// Store has it and before the journal actor publishes its commit.
type killRaceStore struct {
	journal.Store

	killArmed        atomic.Bool
	killRead, killGo chan struct{}

	historyAfter                        atomic.Uint64 // 0: not armed
	historyRead, historyGo, historyDone chan struct{}

	text             string
	written, writeGo chan struct{}
	writeOnce        sync.Once
}

func newKillRaceStore(text string) *killRaceStore {
	return &killRaceStore{Store: memjournal.New(memjournal.Options{}), text: text,
		killRead: make(chan struct{}), killGo: make(chan struct{}),
		historyRead: make(chan struct{}), historyGo: make(chan struct{}), historyDone: make(chan struct{}),
		written: make(chan struct{}), writeGo: make(chan struct{})}
}

func (s *killRaceStore) holdKill() {
	if s.killArmed.CompareAndSwap(true, false) {
		close(s.killRead)
		<-s.killGo
	}
}

func (s *killRaceStore) LastSeq(ctx context.Context, id string) (uint64, error) {
	s.holdKill()
	return s.Store.LastSeq(ctx, id)
}

func (s *killRaceStore) Conversation(ctx context.Context, id string) (*messages.Conversation, error) {
	s.holdKill()
	return s.Store.Conversation(ctx, id)
}

func (s *killRaceStore) Events(ctx context.Context, id string, q journal.EventQuery) ([]*messages.Event, error) {
	if after := s.historyAfter.Load(); after != 0 && q.After == after && q.Before != 0 && s.historyAfter.CompareAndSwap(after, 0) {
		close(s.historyRead)
		<-s.historyGo
		defer close(s.historyDone)
	}
	return s.Store.Events(ctx, id, q)
}

func (s *killRaceStore) AppendBatch(ctx context.Context, reqs []*messages.AppendRequest) []journal.AppendResult {
	res := s.Store.AppendBatch(ctx, reqs)
	for _, req := range reqs {
		for _, ev := range req.GetEvents() {
			if parts := ev.GetUserMsg().GetContent(); len(parts) > 0 && parts[0].GetText() == s.text {
				s.writeOnce.Do(func() {
					close(s.written)
					<-s.writeGo
				})
			}
		}
	}
	return res
}

// TestKillRacingASendCancelsOnlyTheTurnInFlight: a send that lands while a
// Kill is under way (its actor stopped, its cancelled end not yet
// published) starts a turn the kill did not cancel. The waiter of the turn
// in flight at the kill gets TurnCancelled; the racing send's waiter gets
// its turn's real end, even when its subscription reads its message from
// the history while the kill's end waits in its queue (it got TurnCancelled
// for a turn that went on); a subscriber sees the cancelled end before the
// racing message.
func TestKillRacingASendCancelsOnlyTheTurnInFlight(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	wait := func(ch <-chan struct{}, what string) {
		t.Helper()
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatal(what)
		}
	}
	model := scripted.New(scripted.Options{})
	held := model.Hold("c")
	model.Push("c", scripted.Text("both"))
	st := newKillRaceStore("two")
	rt, err := lazarus.Open(lazarus.Options{Store: st, Model: model, IdleTimeout: -1})
	require.NoError(t, err)
	defer rt.Close()
	letKillGo, letHistoryGo, letWriteGo := sync.OnceFunc(func() { close(st.killGo) }),
		sync.OnceFunc(func() { close(st.historyGo) }), sync.OnceFunc(func() { close(st.writeGo) })
	defer func() { // before Close, should the test stop early
		letKillGo()
		letHistoryGo()
		letWriteGo()
	}()
	updates, err := rt.Subscribe(ctx, "c", 0)
	require.NoError(t, err)

	type result struct {
		end lazarus.TurnEnd
		err error
	}
	first, second := make(chan result, 1), make(chan result, 1)
	go func() {
		end, err := rt.SendAndWait(ctx, "c", "one", agent.Scope{UserID: "u"})
		first <- result{end, err}
	}()
	wait(held, "the first turn's model was never called")

	st.killArmed.Store(true)
	killed := make(chan bool, 1)
	go func() { killed <- rt.Kill("c") }()
	wait(st.killRead, "the kill never read the log") // the actor has stopped

	// Another caller sends meanwhile; its subscription reads its history
	// after seq 1 (the first message) only once the message is written.
	st.historyAfter.Store(1)
	go func() {
		end, err := rt.SendAndWait(ctx, "c", "two", agent.Scope{UserID: "u"})
		second <- result{end, err}
	}()
	wait(st.historyRead, "the racing send never subscribed")
	letKillGo()
	select {
	case ok := <-killed:
		require.True(t, ok)
	case <-ctx.Done():
		t.Fatal("Kill never returned")
	}
	wait(st.written, "the racing message was never written")
	letHistoryGo() // the history now holds the racing message
	wait(st.historyDone, "the history was never read")
	letWriteGo() // its commit is published only now
	model.Release("c")

	r1 := <-first
	require.ErrorIs(t, r1.err, lazarus.ErrTurnCancelled, "the turn in flight at the kill")
	require.Equal(t, lazarus.TurnCancelled, r1.end.Outcome)
	r2 := <-second
	require.NoError(t, r2.err, "the racing send's turn went on")
	require.Equal(t, lazarus.TurnAnswered, r2.end.Outcome)
	require.Equal(t, "both", r2.end.Text)
	require.Equal(t, uint64(3), r2.end.Seq)
	turns := model.Turns("c")
	require.Len(t, turns, 2)
	require.Len(t, turns[1].Context, 2, "the turn after the kill answers both messages")

	var got []string
	for len(got) < 4 {
		var u lazarus.Update
		select {
		case u = <-updates:
		case <-ctx.Done():
			t.Fatalf("only %v arrived", got)
		}
		switch {
		case u.Event.GetUserMsg() != nil:
			got = append(got, "user "+u.Event.GetUserMsg().GetContent()[0].GetText())
		case u.Event.GetAssistantMsg() != nil:
			got = append(got, "answer "+u.Event.GetAssistantMsg().GetContent()[0].GetText())
		case u.TurnEnd != nil:
			got = append(got, u.TurnEnd.Outcome.String())
		}
	}
	require.Equal(t, []string{"user one", "cancelled", "user two", "answer both"}, got,
		"the kill's end comes before the racing message")
}
