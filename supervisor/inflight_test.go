package supervisor

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

// holdFirstWrite holds the first write it is given until release is
// closed, and closes held when it has it.
type holdFirstWrite struct {
	journal.Store
	once    sync.Once
	held    chan struct{}
	release chan struct{}
}

func (s *holdFirstWrite) hold() {
	first := false
	s.once.Do(func() { first = true })
	if first {
		close(s.held)
		<-s.release
	}
}

func (s *holdFirstWrite) Append(ctx context.Context, req *messages.AppendRequest) (journal.AppendResult, error) {
	s.hold()
	return s.Store.Append(ctx, req)
}

func (s *holdFirstWrite) AppendBatch(ctx context.Context, reqs []*messages.AppendRequest) []journal.AppendResult {
	s.hold()
	return s.Store.AppendBatch(ctx, reqs)
}

// TestSendInFlightAtAKillIsWrittenOnce: a send whose write is in the Store
// when its activation is killed is answered by that activation with an
// error of unknown outcome (journal.ErrUnknownOutcome) and "retry"; Ask
// sends it again to a new activation, which finds the first write landed
// (its request id in the log) and answers with its seq: the caller gets
// the seq, and the log holds the message once.
func TestSendInFlightAtAKillIsWrittenOnce(t *testing.T) {
	store := memjournal.New(memjournal.Options{})
	hold := &holdFirstWrite{Store: store, held: make(chan struct{}), release: make(chan struct{})}
	var released sync.Once
	release := func() { released.Do(func() { close(hold.release) }) }
	t.Cleanup(release)
	system := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	model := scripted.New(scripted.Options{})
	s, err := Start(system, Config{
		Store:       hold,
		Agent:       func(string) actors.ConversationConfig { return actors.ConversationConfig{Model: model} },
		CallTimeout: time.Hour,
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		s.Stop()
		system.Shutdown()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	model.Push("c", scripted.Text("ok"))

	type answer struct {
		res any
		err error
	}
	done := make(chan answer, 1)
	go func() {
		cmd := sendCmd("hello")
		cmd.Msg.(*messages.AgentSend).RequestId = "r1"
		res, err := s.Ask(ctx, "c", cmd)
		done <- answer{res, err}
	}()
	select {
	case <-hold.held:
	case <-ctx.Done():
		t.Fatal("the send's write never reached the Store")
	}
	require.True(t, s.Kill("c", func() {
		// The killed activation answered the send (unknown outcome,
		// retry); its write lands before any new activation reads the log.
		release()
		require.Eventually(t, func() bool {
			last, err := store.LastSeq(ctx, "c")
			return err == nil && last == 1
		}, 10*time.Second, time.Millisecond, "the held write landed")
	}))
	var got answer
	select {
	case got = <-done:
	case <-ctx.Done():
		t.Fatal("Ask did not return")
	}
	require.NoError(t, got.err)
	reply := got.res.(*messages.AgentSendReply)
	require.Nil(t, reply.GetError(), "served by the new activation")
	require.Equal(t, uint64(1), reply.GetSeq(), "the seq of the write that landed")
	evs, err := store.Events(ctx, "c", journal.EventQuery{})
	require.NoError(t, err)
	users := 0
	for _, ev := range evs {
		if ev.GetUserMsg() != nil {
			users++
		}
	}
	require.Equal(t, 1, users, "the message is in the log once")
}
