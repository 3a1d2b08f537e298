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
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

func startForTest(t *testing.T) *Supervisor {
	t.Helper()
	model := scripted.New(scripted.Options{})
	return startWith(t, func(string) actors.ConversationConfig { return actors.ConversationConfig{Model: model} })
}

func startWith(t *testing.T, agent func(string) actors.ConversationConfig) *Supervisor {
	t.Helper()
	system := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	s, err := Start(system, Config{
		Store:       memjournal.New(memjournal.Options{}),
		Agent:       agent,
		CallTimeout: 5 * time.Second,
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		s.Stop()
		system.Shutdown()
	})
	return s
}

// TestDeliveryWhileAnOutsiderSpawns: the supervisor actor delivers a re-wake
// to a conversation whose activation a caller outside is still spawning
// (claimed, its spawn request queued behind the re-wake, no pid yet). It
// must neither wait nor send to the missing pid (a panic that restarted the
// supervisor and stopped every conversation, which then answered nothing):
// the wake reaches the activation once it is ready, and the conversation
// keeps answering.
func TestDeliveryWhileAnOutsiderSpawns(t *testing.T) {
	s := startForTest(t)
	a, mine, wait := s.reg.claim("c")
	require.True(t, mine)
	require.Nil(t, wait)
	s.system.Root.Send(s.pid, &rewake{conversation: "c"})
	s.reg.spawned(a, s.spawnFromOutside)
	require.NoError(t, a.err)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := s.Ask(ctx, "c", &actors.Command{Msg: &messages.AgentWake{}})
	require.NoError(t, err, "the conversation still answers")
	require.Nil(t, res.(*messages.AgentReply).GetError())
	require.True(t, s.IsActive("c"))
	require.Eventually(t, func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.sent == 2
	}, 5*time.Second, time.Millisecond, "the activation got the re-wake as well as the Ask")
}

// TestDeliveryThatMeetsARetiringActivation: a delivery (here a re-wake)
// claims a live activation, which is killed before the supervisor sends to
// it (a passivation can retire it in the same window). The command must
// reach the successor, spawned once the retired one has stopped: dropped,
// the work it owes would wait for the conversation's next command.
func TestDeliveryThatMeetsARetiringActivation(t *testing.T) {
	s := startForTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := s.Ask(ctx, "c", &actors.Command{Msg: &messages.AgentWake{}})
	require.NoError(t, err)
	first := s.reg.lookup("c")
	require.NotNil(t, first)

	var once sync.Once
	s.beforeSend = func(a *activation) {
		once.Do(func() {
			require.Same(t, first, a)
			require.True(t, s.reg.kill(a, func(pid *actor.PID) { s.system.Root.Send(pid, &messages.AgentStop{}) }))
		})
	}
	s.system.Root.Send(s.pid, &rewake{conversation: "c"})

	require.Eventually(t, func() bool {
		a := s.reg.lookup("c")
		if a == nil || a == first {
			return false
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.sent == 1 && !a.retired
	}, 5*time.Second, time.Millisecond, "the successor got the re-wake")
	select {
	case <-first.done:
	default:
		t.Fatal("the successor was spawned before its predecessor stopped")
	}
}

func sendCmd(text string) *actors.Command {
	return &actors.Command{Msg: &messages.AgentSend{Message: &messages.UserMessage{
		Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: text}}}}}}
}

// TestPanicAnswersQueuedCommands: a conversation actor that panics in
// Receive (a bug) stops like any stopping activation: a command already
// queued in its mailbox is answered at once with "retry on a new
// activation", and a new activation serves it. It is not dropped, which
// would leave its caller waiting out CallTimeout.
func TestPanicAnswersQueuedCommands(t *testing.T) {
	model := scripted.New(scripted.Options{})
	inPublish, proceed := make(chan struct{}), make(chan struct{})
	var once sync.Once
	s := startWith(t, func(string) actors.ConversationConfig {
		return actors.ConversationConfig{Model: model, Publish: func(u actors.Update) {
			if u.Retry == nil {
				return // only a retry of the model call is published from Receive
			}
			first := false
			once.Do(func() { first = true })
			if first {
				// Called from Receive: hold the actor there until a
				// command is queued behind this message, then panic.
				close(inPublish)
				<-proceed
				panic("a bug in the actor")
			}
		}}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	model.PushError("c", agent.ErrUnavailable) // its retry is published from Receive
	model.Push("c", scripted.Text("two"))
	res, err := s.Ask(ctx, "c", sendCmd("hello"))
	require.NoError(t, err)
	require.Nil(t, res.(*messages.AgentSendReply).GetError())
	<-inPublish

	a := s.reg.lookup("c")
	require.NotNil(t, a)
	a.mu.Lock()
	before := a.sent
	a.mu.Unlock()
	type answer struct {
		res any
		err error
	}
	done := make(chan answer, 1)
	go func() {
		res, err := s.Ask(ctx, "c", sendCmd("again"))
		done <- answer{res, err}
	}()
	require.Eventually(t, func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.sent == before+1
	}, 5*time.Second, time.Millisecond, "the second command is queued behind the panicking message")
	close(proceed)

	got := <-done
	require.NoError(t, got.err)
	require.Nil(t, got.res.(*messages.AgentSendReply).GetError(), "answered, not left to time out, and served")
}

// startSilent starts a supervisor whose conversation "c" is a registered
// activation that never answers (an actor that drops every message): what a
// caller meets when a command is lost (queued behind a stop, say).
func startSilent(t *testing.T, callTimeout time.Duration) (*Supervisor, *activation) {
	t.Helper()
	system := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	model := scripted.New(scripted.Options{})
	s, err := Start(system, Config{
		Store:       memjournal.New(memjournal.Options{}),
		Agent:       func(string) actors.ConversationConfig { return actors.ConversationConfig{Model: model} },
		CallTimeout: callTimeout,
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		s.Stop()
		system.Shutdown()
	})
	silent := system.Root.Spawn(actor.PropsFromFunc(func(actor.Context) {}))
	a, mine, wait := s.reg.claim("c")
	require.True(t, mine)
	require.Nil(t, wait)
	s.reg.spawned(a, func(*activation) (*actor.PID, error) { return silent, nil })
	return s, a
}

func sentTo(a *activation) uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.sent
}

// askAsync runs Ask on a goroutine; the channel gets its error.
func askAsync(s *Supervisor, ctx context.Context, cmd *actors.Command) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := s.Ask(ctx, "c", cmd)
		done <- err
	}()
	return done
}

func within(t *testing.T, done <-chan error, what string) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: Ask still waiting (CallTimeout is an hour)", what)
		return nil
	}
}

// TestAskWatchesContextAndStop: Ask watches its context and the
// supervisor's stop while it waits for an answer, not only a deadline it
// turns into a future's timeout (a cancelled context, or a Stop, left the
// caller waiting out CallTimeout, then "future: timeout", which wraps
// nothing). A context ended before the command was handed over sends
// nothing and wraps ctx.Err(); one ending after wraps ErrNoAnswer too (the
// command may have been applied); Stop ends the wait with ErrStopped; and
// CallTimeout is a deadline like the context's.
func TestAskWatchesContextAndStop(t *testing.T) {
	s, a := startSilent(t, time.Hour)
	wake := &actors.Command{Msg: &messages.AgentWake{}}

	ended, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := s.Ask(ended, "c", wake)
	require.ErrorIs(t, err, context.Canceled)
	require.NotErrorIs(t, err, ErrNoAnswer, "nothing was handed over")
	require.Zero(t, sentTo(a), "nothing was sent")

	ctx, cancel := context.WithCancel(context.Background())
	done := askAsync(s, ctx, wake)
	require.Eventually(t, func() bool { return sentTo(a) == 1 }, 10*time.Second, time.Millisecond)
	cancel()
	err = within(t, done, "cancelled")
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, err, ErrNoAnswer, "handed over: the outcome is unknown")

	done = askAsync(s, context.Background(), wake)
	require.Eventually(t, func() bool { return sentTo(a) == 2 }, 10*time.Second, time.Millisecond)
	s.Stop()
	err = within(t, done, "stopped")
	require.ErrorIs(t, err, ErrStopped)
	require.ErrorIs(t, err, ErrNoAnswer)

	_, err = s.Ask(context.Background(), "c", wake)
	require.ErrorIs(t, err, ErrStopped, "after Stop")
	require.NotErrorIs(t, err, ErrNoAnswer)
	_, err = s.Request(context.Background(), s.Journal(), &messages.JournalWrite{})
	require.ErrorIs(t, err, ErrStopped, "Request after Stop")

	short, _ := startSilent(t, 50*time.Millisecond)
	_, err = short.Ask(context.Background(), "c", wake)
	require.ErrorIs(t, err, context.DeadlineExceeded, "CallTimeout is a deadline")
	require.ErrorIs(t, err, ErrNoAnswer)
}
