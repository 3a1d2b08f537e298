package lazarus_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/snapshot"
	"github.com/lazarusrt/lazarus/supervisor"
)

func TestOpenValidatesOptions(t *testing.T) {
	_, err := lazarus.Open(lazarus.Options{})
	require.ErrorIs(t, err, journal.ErrInvalid, "a model is required")

	_, err = lazarus.Open(lazarus.Options{
		Model: scripted.New(scripted.Options{}),
		Tools: []agent.Tool{{Name: "dup", Executor: messages.Executor_EXECUTOR_HUMAN}, {Name: "dup", Executor: messages.Executor_EXECUTOR_HUMAN}},
	})
	require.ErrorIs(t, err, journal.ErrInvalid, "tool names are unique")

	_, err = lazarus.Open(lazarus.Options{Model: scripted.New(scripted.Options{}), Audit: lazarus.AuditOptions{TTL: time.Hour}})
	require.ErrorIs(t, err, journal.ErrInvalid, "a TTL for an audit that is off")
	_, err = lazarus.Open(lazarus.Options{Model: scripted.New(scripted.Options{}), Audit: lazarus.AuditOptions{Enabled: true, TTL: -time.Hour}})
	require.ErrorIs(t, err, journal.ErrInvalid, "a negative TTL")
	_, err = lazarus.Open(lazarus.Options{Model: scripted.New(scripted.Options{}), CallTimeout: -time.Second})
	require.ErrorIs(t, err, journal.ErrInvalid, "a negative call timeout (it was taken as the default)")
	require.ErrorContains(t, err, "Options.CallTimeout")
	_, err = lazarus.Open(lazarus.Options{Model: scripted.New(scripted.Options{}), SubscriberBuffer: -1})
	require.ErrorIs(t, err, journal.ErrInvalid, "a negative subscriber buffer (it was taken as the default)")
	require.ErrorContains(t, err, "Options.SubscriberBuffer")
	_, err = lazarus.Open(lazarus.Options{Model: scripted.New(scripted.Options{}), ResumeInterval: time.Nanosecond})
	require.ErrorIs(t, err, journal.ErrInvalid, "a resume scan of every nanosecond, a busy loop")
	require.ErrorContains(t, err, "Options.ResumeInterval")
	least, err := lazarus.Open(lazarus.Options{Model: scripted.New(scripted.Options{}), ResumeInterval: lazarus.MinResumeInterval})
	require.NoError(t, err, "MinResumeInterval itself is taken")
	require.NoError(t, least.Close())

	for _, o := range []lazarus.Options{{Dir: t.TempDir()}, {Postgres: "postgres://127.0.0.1:1/none"}} {
		o.Store, o.Model = memjournal.New(memjournal.Options{}), scripted.New(scripted.Options{})
		_, err = lazarus.Open(o)
		require.ErrorIs(t, err, journal.ErrInvalid, "a Store with Dir or Postgres, which it would leave unused")
		require.ErrorContains(t, err, "Options.Store")
	}

	for _, s := range []snapshot.Summarizer{snapshot.LLM{}, &snapshot.LLM{}, (*snapshot.LLM)(nil)} {
		_, err = lazarus.Open(lazarus.Options{Model: scripted.New(scripted.Options{}), Summarizer: s})
		require.ErrorIs(t, err, journal.ErrInvalid, "an LLM summarizer without a model (%T), which fails every summary", s)
		require.ErrorContains(t, err, "Summarizer")
	}
	for _, n := range []int{1, snapshot.MinLLMMaxInputBytes - 1} {
		for _, s := range []snapshot.Summarizer{snapshot.LLM{Model: scripted.New(scripted.Options{}), MaxInputBytes: n}, &snapshot.LLM{Model: scripted.New(scripted.Options{}), MaxInputBytes: n}} {
			_, err = lazarus.Open(lazarus.Options{Model: scripted.New(scripted.Options{}), Summarizer: s})
			require.ErrorIs(t, err, journal.ErrInvalid, "an LLM summarizer whose MaxInputBytes %d (%T) holds no span, which fails every summary", n, s)
			require.ErrorContains(t, err, "MaxInputBytes")
		}
	}
	rt, err := lazarus.Open(lazarus.Options{Model: scripted.New(scripted.Options{}), Summarizer: &snapshot.LLM{Model: scripted.New(scripted.Options{})}})
	require.NoError(t, err)
	require.NoError(t, rt.Close())
	for _, n := range []int{-1, snapshot.MinLLMMaxInputBytes} {
		rt, err = lazarus.Open(lazarus.Options{Model: scripted.New(scripted.Options{}), Summarizer: snapshot.LLM{Model: scripted.New(scripted.Options{}), MaxInputBytes: n}})
		require.NoError(t, err, "MaxInputBytes %d", n)
		require.NoError(t, rt.Close())
	}
}

func TestOpenOnDirectoryIsDurable(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	model := scripted.New(scripted.Options{})
	rt, err := lazarus.Open(lazarus.Options{Dir: dir, Model: model})
	require.NoError(t, err)
	seq, err := rt.Send(ctx, "c", "remember me", agent.Scope{UserID: "u"})
	require.NoError(t, err)
	require.Equal(t, uint64(1), seq)
	require.NoError(t, model.WaitCalls(ctx, "c", 1))
	require.NoError(t, rt.Close())

	rt2, err := lazarus.Open(lazarus.Options{Dir: dir, Model: model, NoResume: true})
	require.NoError(t, err)
	defer rt2.Close()
	evs, err := rt2.History(ctx, "c", 0, 0)
	require.NoError(t, err)
	require.NotEmpty(t, evs)
	require.Equal(t, "remember me", evs[0].GetUserMsg().GetContent()[0].GetText())
}

func TestSlowSubscriberLagsAndCanResume(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	model := scripted.New(scripted.Options{})
	rt, err := lazarus.Open(lazarus.Options{Model: model, SubscriberBuffer: 2})
	require.NoError(t, err)
	defer rt.Close()

	slow, err := rt.Subscribe(ctx, "c", 0)
	require.NoError(t, err)
	// Let the subscription catch up (the log is empty) before any event,
	// then never read until the conversation has gone far ahead.
	for i := range 5 {
		_, err := rt.Send(ctx, "c", "hi", agent.Scope{UserID: "u"})
		require.NoError(t, err)
		// Wait for the answer, so the next message does not interrupt it.
		require.Eventually(t, func() bool {
			evs, err := rt.History(ctx, "c", 0, 0)
			return err == nil && len(evs) == 2*(i+1)
		}, 20*time.Second, time.Millisecond)
	}

	var last uint64
	var lagged bool
	for u := range slow {
		if u.Event != nil {
			last = u.Event.GetSeq()
		}
		if u.Err != nil {
			require.ErrorIs(t, u.Err, lazarus.ErrLagged)
			lagged = true
		}
	}
	require.True(t, lagged, "a reader that falls behind is told so and the channel closes")

	// Resuming after the last seq received loses nothing.
	again, err := rt.Subscribe(ctx, "c", last)
	require.NoError(t, err)
	next := <-again
	require.NotNil(t, next.Event)
	require.Equal(t, last+1, next.Event.GetSeq())
}

func TestCloseEndsSubscriptions(t *testing.T) {
	rt, err := lazarus.Open(lazarus.Options{Model: scripted.New(scripted.Options{})})
	require.NoError(t, err)
	sub, err := rt.Subscribe(context.Background(), "c", 0)
	require.NoError(t, err)
	require.NoError(t, rt.Close())
	for range sub {
	}
	_, err = rt.Subscribe(context.Background(), "c", 0)
	require.ErrorIs(t, err, lazarus.ErrClosed)
}

// Cluster options without a provider need seeds and a health port.
func TestClusterOptionsNeedSeeds(t *testing.T) {
	_, err := lazarus.Open(lazarus.Options{Model: agent.ModelFunc(nil), Cluster: &lazarus.ClusterOptions{}})
	require.ErrorIs(t, err, journal.ErrInvalid)
}

// One Runtime per actor system: Open refuses a system whose names a
// Runtime's actors need are taken (another Runtime runs on it, or an
// application actor is named GatewayName) with an error wrapping
// journal.ErrInvalid that names Options.ActorSystem, and leaves the system,
// its actors, the other Runtime and the directory as they were. The
// failed Open stopped the application's actor that held GatewayName (the
// spawn's error comes with the existing actor's PID, taken as the
// gateway's), and the errors wrapped no sentinel.
func TestOpenRefusesAnOccupiedActorSystem(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	quiet := actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) })
	model := scripted.New(scripted.Options{})
	dir := t.TempDir()

	sys := actor.NewActorSystem(quiet)
	defer sys.Shutdown()
	first, err := lazarus.Open(lazarus.Options{Model: model, ActorSystem: sys})
	require.NoError(t, err)
	defer first.Close()
	_, err = lazarus.Open(lazarus.Options{Model: model, ActorSystem: sys, Dir: dir})
	require.ErrorIs(t, err, journal.ErrInvalid)
	require.ErrorContains(t, err, "Options.ActorSystem")
	_, err = first.SendAndWait(ctx, "c", "still here?", user)
	require.NoError(t, err, "the Runtime already on the system is untouched")

	sys2 := actor.NewActorSystem(quiet)
	defer sys2.Shutdown()
	app, err := sys2.Root.SpawnNamed(actor.PropsFromFunc(func(c actor.Context) {
		if s, ok := c.Message().(string); ok {
			c.Respond(s + "!")
		}
	}), lazarus.GatewayName)
	require.NoError(t, err)
	_, err = lazarus.Open(lazarus.Options{Model: model, ActorSystem: sys2, Dir: dir})
	require.ErrorIs(t, err, journal.ErrInvalid)
	require.ErrorContains(t, err, "Options.ActorSystem")
	res, err := sys2.Root.RequestFuture(app, "ping", 10*time.Second).Result()
	require.NoError(t, err, "the application's actor named %q still runs", lazarus.GatewayName)
	require.Equal(t, "ping!", res)

	// A child's name taken: the error names it, not the supervisor's.
	sys3 := actor.NewActorSystem(quiet)
	defer sys3.Shutdown()
	child := supervisor.Name + "/expiry"
	app3, err := sys3.Root.SpawnNamed(actor.PropsFromFunc(func(c actor.Context) {
		if s, ok := c.Message().(string); ok {
			c.Respond(s + "?")
		}
	}), child)
	require.NoError(t, err)
	_, err = lazarus.Open(lazarus.Options{Model: model, ActorSystem: sys3, Dir: dir})
	require.ErrorIs(t, err, journal.ErrInvalid)
	require.ErrorContains(t, err, "Options.ActorSystem")
	require.ErrorContains(t, err, fmt.Sprintf("%q", child))
	res, err = sys3.Root.RequestFuture(app3, "ping", 10*time.Second).Result()
	require.NoError(t, err, "the application's actor named %q still runs", child)
	require.Equal(t, "ping?", res)

	rt, err := lazarus.Open(lazarus.Options{Model: model, Dir: dir})
	require.NoError(t, err, "the failed Opens released the directory")
	require.NoError(t, rt.Close())
}

// An Open that fails after it opened Options.Files.Root (here on bad
// ClusterOptions) closes it again: the cluster's failure path left the
// root's descriptor open, one per failed Open.
func TestFailedOpenClosesTheFilesRoot(t *testing.T) {
	if _, err := os.Stat("/proc/self/fd"); err != nil {
		t.Skip("needs /proc/self/fd")
	}
	root, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	fdsTo := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		require.NoError(t, err)
		n := 0
		for _, e := range ents {
			if target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && target == root {
				n++
			}
		}
		return n
	}
	before := fdsTo()
	for range 3 {
		_, err := lazarus.Open(lazarus.Options{Model: scripted.New(scripted.Options{}),
			Files: lazarus.FilesOptions{Root: root}, Cluster: &lazarus.ClusterOptions{}})
		require.ErrorIs(t, err, journal.ErrInvalid)
	}
	require.Equal(t, before, fdsTo(), "descriptors of the files root left open")
}
