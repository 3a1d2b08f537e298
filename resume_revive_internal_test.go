package lazarus

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/actors/actorstest"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

// pauseStore holds one read of conversation "c", once armed: the first
// Conversation or LastSeq call (as method says) after arm reads the Store,
// then waits for release before it answers what it read, so a test can
// end the conversation's turn and passivate it between the resume scan's
// read and its next step.
type pauseStore struct {
	journal.Store
	method string // "Conversation" or "LastSeq"

	mu      sync.Mutex
	armed   bool
	entered chan struct{} // closed once the held read has been made
	release chan struct{} // closed by the test to let it answer
}

func (s *pauseStore) arm() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.armed = true
}

// hold reports whether this call of method on id is the one to hold, and
// disarms.
func (s *pauseStore) hold(ctx context.Context, method, id string) {
	s.mu.Lock()
	held := s.armed && method == s.method && id == "c"
	if held {
		s.armed = false
	}
	s.mu.Unlock()
	if !held {
		return
	}
	close(s.entered)
	select {
	case <-s.release:
	case <-ctx.Done():
	}
}

func (s *pauseStore) Conversation(ctx context.Context, id string) (*messages.Conversation, error) {
	row, err := s.Store.Conversation(ctx, id)
	s.hold(ctx, "Conversation", id)
	return row, err
}

func (s *pauseStore) LastSeq(ctx context.Context, id string) (uint64, error) {
	last, err := s.Store.LastSeq(ctx, id)
	s.hold(ctx, "LastSeq", id)
	return last, err
}

// TestResumeDoesNotReviveAConversationWhoseTurnEndedUnderTheScan: the
// resume scan (Open's, or a membership change's) lists a conversation
// while its turn runs and reads it live and its row ACTIVE; the turn ends
// and the activation passivates before the scan's wake. The wake must not
// revive it: nothing is owed (its row says IDLE), and a revival would only
// keep an actor alive until its idle timer. Held after the scan's read of
// the row, or after its read of the log's last seq (the live case), the
// scan ends with the conversation not live and nothing written.
func TestResumeDoesNotReviveAConversationWhoseTurnEndedUnderTheScan(t *testing.T) {
	for _, method := range []string{"Conversation", "LastSeq"} {
		t.Run(method, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			generating, answer := make(chan struct{}, 1), make(chan struct{})
			model := agent.ModelFunc(func(ctx context.Context, _ agent.Turn, _ func(string)) (*messages.AssistantMessage, error) {
				generating <- struct{}{}
				select {
				case <-answer:
					return agent.Text("done"), nil
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			})
			store := &pauseStore{Store: memjournal.New(memjournal.Options{}), method: method,
				entered: make(chan struct{}), release: make(chan struct{})}
			clock := actorstest.NewManualClock(time.Unix(1000, 0))
			rt, err := Open(Options{Model: model, Store: store, Clock: clock, NoResume: true, ResumeInterval: -1,
				IdleTimeout: time.Minute, ModelTimeout: -1})
			require.NoError(t, err)
			defer rt.Close()
			defer close(store.release) // before Close: a held read answers

			_, err = rt.Send(ctx, "c", "hi", agent.Scope{UserID: "u"})
			require.NoError(t, err)
			recvWithin(t, generating, "the turn is at the model")
			store.arm()
			scanned := make(chan struct{})
			rt.gcWG.Add(1)
			go func() {
				defer close(scanned)
				rt.resumeInterrupted(false)
			}()
			recvWithin(t, store.entered, "the scan read the conversation while its turn ran")

			// The turn ends (its row says IDLE with its last append), and
			// the activation passivates.
			close(answer)
			require.Eventually(t, func() bool {
				row, err := store.Store.Conversation(ctx, "c")
				return err == nil && row.GetStatus() == messages.ConversationStatus_CONVERSATION_STATUS_IDLE && clock.Timers() == 1
			}, 10*time.Second, time.Millisecond, "the turn ended and the idle timer is armed")
			clock.Advance(time.Minute)
			require.Eventually(t, func() bool { return !rt.IsActive("c") && rt.Active() == 0 }, 10*time.Second, time.Millisecond, "passivated")
			last, err := store.Store.LastSeq(ctx, "c")
			require.NoError(t, err)

			store.release <- struct{}{}
			recvWithin(t, scanned, "the scan ended")
			require.False(t, rt.IsActive("c"), "not revived by the scan")
			require.Zero(t, rt.Active())
			after, err := store.Store.LastSeq(ctx, "c")
			require.NoError(t, err)
			require.Equal(t, last, after, "nothing written")
		})
	}
}

// recvWithin waits for ch, failing the test after 10 seconds.
func recvWithin[T any](t *testing.T, ch <-chan T, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting: %s", what)
	}
}
