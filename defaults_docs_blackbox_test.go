package lazarus_test

// Black-box tests of the documented defaults of Options that no other test
// observes: each leaves the field zero and shows, through what the Runtime
// does, that the documented default is what applies (not "none", not 0).

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/actors/actorstest"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/journal/pebblejournal"
	"github.com/lazarusrt/lazarus/messages"
)

func TestDocsOptionDefaultsApply(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  func(t *testing.T)
	}{
		{"Store: neither Store, Postgres nor Dir is an in-memory store", defaultStoreIsInMemory},
		{"Files.BlobTTL: zero is DefaultBlobTTL", defaultBlobTTL},
		{"SubscriberBuffer: zero is DefaultSubscriberBuffer", defaultSubscriberBuffer},
		{"MaxSubscriptions: zero is DefaultMaxSubscriptions", defaultMaxSubscriptions},
	} {
		t.Run(tc.name, tc.run)
	}
}

// defaultStoreIsInMemory: Options.Store's default is the in-memory store
// when neither Postgres nor Dir is set (nothing survives the process), the
// Pebble store in Dir when Dir is.
func defaultStoreIsInMemory(t *testing.T) {
	rt, err := lazarus.Open(lazarus.Options{Model: scripted.New(scripted.Options{})})
	require.NoError(t, err)
	_, ok := rt.Store().(*memjournal.Store)
	require.True(t, ok, "no Store, Postgres or Dir: an in-memory store, not %T", rt.Store())
	require.NoError(t, rt.Close())

	rt, err = lazarus.Open(lazarus.Options{Model: scripted.New(scripted.Options{}), Dir: t.TempDir()})
	require.NoError(t, err)
	_, ok = rt.Store().(*pebblejournal.Store)
	require.True(t, ok, "Dir: the embedded Pebble store, not %T", rt.Store())
	require.NoError(t, rt.Close())
}

// checkpointTool is a server tool that checkpoints the file its arguments
// name ({"path": ...}) and reports Before's error on errs.
func checkpointTool(errs chan<- error) agent.Tool {
	return agent.Tool{Name: "checkpoint", Executor: messages.Executor_EXECUTOR_SERVER,
		Run: func(ctx context.Context, inv agent.Invocation) (string, error) {
			var args struct{ Path string }
			if err := json.Unmarshal([]byte(inv.Arguments), &args); err != nil {
				return "", err
			}
			err := inv.CheckpointFile(ctx, args.Path)
			errs <- err
			return `{}`, err
		}}
}

// checkpoint runs the checkpoint tool on path in conversation conv and
// returns Before's error.
func checkpoint(t *testing.T, ctx context.Context, rt *lazarus.Runtime, model *scripted.Model, errs <-chan error, conv, path string) error {
	t.Helper()
	model.Push(conv, scripted.Reply("", scripted.Call("checkpoint", `{"path":`+strings.TrimSpace(mustJSON(t, path))+`}`)), scripted.Text("done"))
	end, err := rt.SendAndWait(ctx, conv, "go", agent.Scope{UserID: "u"})
	require.NoError(t, err)
	require.Equal(t, "done", end.Text)
	return recv(t, ctx, errs, "the checkpoint's outcome")
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

// defaultBlobTTL: with Files.BlobTTL left zero, the sweeper runs at Open
// and then every DefaultBlobTTL/2 on the Clock, and keeps a blob no
// checkpoint names for DefaultBlobTTL: a sweep right after its
// conversation was deleted removes nothing.
func defaultBlobTTL(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)
	clock := actorstest.NewManualClock(start)
	model := scripted.New(scripted.Options{})
	errs := make(chan error, 1)
	root := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(root, "a.txt"), []byte("before"), 0o644))
	rt, err := lazarus.Open(lazarus.Options{Model: model, Clock: clock, IdleTimeout: -1,
		Tools: []agent.Tool{checkpointTool(errs)}, Files: lazarus.FilesOptions{Root: root}})
	require.NoError(t, err)
	defer rt.Close()

	require.Equal(t, []time.Time{start}, clock.Dues(), "the sweep of Open")
	clock.Advance(0) // runs it
	require.Eventually(t, func() bool {
		return slices.Equal([]time.Time{start.Add(lazarus.DefaultBlobTTL / 2)}, clock.Dues())
	}, 10*time.Second, time.Millisecond, "the next sweep DefaultBlobTTL/2 later (timers %v)", clock.Dues())

	require.NoError(t, checkpoint(t, ctx, rt, model, errs, "x", "a.txt"))
	require.NoError(t, rt.Delete(ctx, "x"))
	n, err := rt.SweepFileBlobs(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "a blob unreferenced for less than DefaultBlobTTL stays")
}

// defaultSubscriberBuffer: with SubscriberBuffer left zero, a subscriber
// that reads nothing while the conversation publishes fewer updates than
// DefaultSubscriberBuffer gets them all; one that falls further behind
// gets at most DefaultSubscriberBuffer (and one the Runtime held) before
// its subscription ends with ErrLagged.
func defaultSubscriberBuffer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	model := scripted.New(scripted.Options{Chunk: 1}) // one delta a rune
	rt, err := lazarus.Open(lazarus.Options{Model: model, IdleTimeout: -1})
	require.NoError(t, err)
	defer rt.Close()
	// drain reads what sub holds once the turn ended: the updates, and
	// whether it ended with ErrLagged.
	drain := func(sub <-chan lazarus.Update) (n int, lagged bool) {
		for u := range sub {
			if u.Err != nil {
				require.ErrorIs(t, u.Err, lazarus.ErrLagged)
				return n, true
			}
			n++
			if u.TurnEnd != nil {
				return n, false
			}
		}
		t.Fatal("the subscription ended without a turn end or ErrLagged")
		return n, false
	}

	within := lazarus.DefaultSubscriberBuffer / 2
	model.Push("a", scripted.Text(strings.Repeat("x", within)))
	sub, err := rt.Subscribe(ctx, "a", 0)
	require.NoError(t, err)
	_, err = rt.SendAndWait(ctx, "a", "hi", agent.Scope{UserID: "u"})
	require.NoError(t, err)
	n, lagged := drain(sub)
	require.False(t, lagged, "%d updates behind is within the default buffer", within)
	require.GreaterOrEqual(t, n, within, "every delta arrived")

	past := 3 * lazarus.DefaultSubscriberBuffer
	model.Push("b", scripted.Text(strings.Repeat("x", past)))
	sub, err = rt.Subscribe(ctx, "b", 0)
	require.NoError(t, err)
	_, err = rt.SendAndWait(ctx, "b", "hi", agent.Scope{UserID: "u"})
	require.NoError(t, err)
	n, lagged = drain(sub)
	require.True(t, lagged, "%d updates behind is past the default buffer", past)
	require.LessOrEqual(t, n, lazarus.DefaultSubscriberBuffer+1, "at most the default buffer before ErrLagged")
	require.Greater(t, n, within, "not before the default buffer")
}

// defaultMaxSubscriptions: with MaxSubscriptions left zero, a conversation
// takes DefaultMaxSubscriptions subscriptions and refuses one more with
// ErrTooManySubscriptions.
func defaultMaxSubscriptions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rt, err := lazarus.Open(lazarus.Options{Model: scripted.New(scripted.Options{})})
	require.NoError(t, err)
	defer rt.Close()
	for i := range lazarus.DefaultMaxSubscriptions {
		_, err := rt.Subscribe(ctx, "c", 0)
		require.NoError(t, err, "subscription %d of the default cap", i+1)
	}
	_, err = rt.Subscribe(ctx, "c", 0)
	require.ErrorIs(t, err, lazarus.ErrTooManySubscriptions, "one past DefaultMaxSubscriptions")
}
