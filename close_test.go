package lazarus_test

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/actors/actorstest"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

// hangingEvents is an in-memory Store whose reads of one conversation's
// events hang until their context ends (a Store that does not answer).
type hangingEvents struct {
	journal.Store
	conv    string
	entered chan struct{}
}

func (s *hangingEvents) Events(ctx context.Context, conv string, q journal.EventQuery) ([]*messages.Event, error) {
	if conv != s.conv {
		return s.Store.Events(ctx, conv, q)
	}
	select {
	case s.entered <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestCloseEndsASubscriptionsCatchUpRead: a subscription whose context
// never ends, its catch-up read of the Store hanging, is ended by Close,
// which returns; the read ran under the subscriber's context alone, and
// Close waited for it for good. The subscription's channel closes without
// reporting the read Close cut as an error.
func TestCloseEndsASubscriptionsCatchUpRead(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store := &hangingEvents{Store: memjournal.New(memjournal.Options{}), conv: "held", entered: make(chan struct{}, 1)}
	rt, err := lazarus.Open(lazarus.Options{Store: store, Model: scripted.New(scripted.Options{}), IdleTimeout: -1})
	require.NoError(t, err)
	closing := false
	defer func() {
		if !closing { // a Close that hangs is not waited for again
			_ = rt.Close()
		}
	}()
	sub, err := rt.Subscribe(context.Background(), "held", 0) // never ends
	require.NoError(t, err)
	select {
	case <-store.entered:
	case <-ctx.Done():
		t.Fatal("the catch-up read never reached the Store")
	}
	closed := make(chan error, 1)
	closing = true
	go func() { closed <- rt.Close() }()
	require.NoError(t, await(t, closed, "Close"))
	for u := range sub {
		t.Fatalf("an update after Close: %+v", u)
	}
}

// hangingDeadlines is an in-memory Store whose listing of deadlines (the
// expiry actor's rebuild) hangs until its context ends, as a listing of
// millions does for seconds.
type hangingDeadlines struct {
	journal.Store
	entered  chan struct{}
	returned chan struct{} // closed when the listing returns
	release  chan struct{} // closed when the test ends
}

func (s *hangingDeadlines) Deadlines(ctx context.Context, before time.Time, f func(*messages.Deadline) error) error {
	s.entered <- struct{}{}
	defer close(s.returned)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-s.release:
		return context.Canceled
	}
}

// TestCloseCutsTheExpiryRebuild: a Close while the expiry actor rebuilds
// its timers from the Store (after Open, or a cluster's membership change)
// cuts the rebuild and returns: the rebuild ran under
// context.Background in the actor's Receive, and Close, stopping the
// actor, waited for it to list every deadline (about 1.2 s a million; up
// to the 10 s of the stop's future, after which the rebuild ran on after
// Close). Nothing is lost: the next Open rebuilds.
func TestCloseCutsTheExpiryRebuild(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store := &hangingDeadlines{Store: memjournal.New(memjournal.Options{}), entered: make(chan struct{}, 1),
		returned: make(chan struct{}), release: make(chan struct{})}
	defer close(store.release)
	rt, err := lazarus.Open(lazarus.Options{Store: store, Model: scripted.New(scripted.Options{})})
	require.NoError(t, err)
	closing := false
	defer func() {
		if !closing { // a Close that hangs is not waited for again
			_ = rt.Close()
		}
	}()
	select {
	case <-store.entered:
	case <-ctx.Done():
		t.Fatal("the expiry actor never read the deadlines")
	}
	closed := make(chan error, 1)
	closing = true
	go func() { closed <- rt.Close() }()
	require.NoError(t, await(t, closed, "Close"))
	select {
	case <-store.returned:
	default:
		t.Fatal("the rebuild runs on after Close")
	}
}

// warnLog records the warn-level and higher records it is handed.
type warnLog struct {
	mu   sync.Mutex
	recs []string
}

func (l *warnLog) Enabled(_ context.Context, level slog.Level) bool { return level >= slog.LevelWarn }
func (l *warnLog) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = append(l.recs, r.Message)
	return nil
}
func (l *warnLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *warnLog) WithGroup(string) slog.Handler      { return l }
func (l *warnLog) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.recs)
}

// heldScheduleRead is an in-memory Store whose reads of a conversation's
// schedules, once armed, hang until their context ends.
type heldScheduleRead struct {
	*memjournal.Store
	armed   atomic.Bool
	entered chan struct{}
}

func (s *heldScheduleRead) ConversationSchedules(ctx context.Context, conv string) ([]*messages.Schedule, error) {
	if s.armed.CompareAndSwap(true, false) {
		s.entered <- struct{}{}
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return s.Store.ConversationSchedules(ctx, conv)
}

// TestCloseCutsAScheduleDeliveryQuietly: a schedule's delivery that Close
// cuts (its read of the schedule, or the author's scope loading, held
// until its context ends) is no failure: nothing is logged at warn level
// and Metrics.ScheduleFired counts no ScheduleFailed (both said the
// delivery failed). The occurrence is not lost: the next Open on the Store
// delivers it.
func TestCloseCutsAScheduleDeliveryQuietly(t *testing.T) {
	for _, held := range []string{"read", "scope"} {
		t.Run(held, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var mu sync.Mutex
			fired := map[lazarus.ScheduleOutcome]int{}
			counts := func() map[lazarus.ScheduleOutcome]int {
				mu.Lock()
				defer mu.Unlock()
				return maps.Clone(fired)
			}
			metrics := lazarus.Metrics{ScheduleFired: func(o lazarus.ScheduleOutcome) {
				mu.Lock()
				defer mu.Unlock()
				fired[o]++
			}}
			log := &warnLog{}
			store := &heldScheduleRead{Store: memjournal.New(memjournal.Options{}), entered: make(chan struct{}, 1)}
			scopeEntered := make(chan struct{}, 1)
			var holdScope atomic.Bool
			loader := func(ctx context.Context, id agent.Identity) (agent.Scope, error) {
				if holdScope.Load() {
					// Any load while held waits for its context; the
					// first says so. A second (another delivery or
					// turn) must not block on the full channel past
					// its context, which would hang Close.
					select {
					case scopeEntered <- struct{}{}:
					default:
					}
					<-ctx.Done()
					return agent.Scope{}, ctx.Err()
				}
				return agent.Scope{UserID: id.UserID}, nil
			}
			rt, _, clock := scheduleConversation(ctx, t, lazarus.Options{Store: store, Metrics: metrics,
				Logger: slog.New(log), ScopeLoader: loader}, agent.Scope{UserID: "alice"})
			_, err := rt.Schedule(ctx, "c", lazarus.ScheduleSpec{After: 10 * time.Minute, Text: "wake"}, agent.Scope{UserID: "alice"})
			require.NoError(t, err)
			entered := store.entered
			if held == "read" {
				store.armed.Store(true)
			} else {
				holdScope.Store(true)
				entered = scopeEntered
			}
			clock.Advance(10*time.Minute - time.Second)
			advanceWhenArmed(t, clock, schedT0.Add(10*time.Minute))
			select {
			case <-entered:
			case <-ctx.Done():
				t.Fatal("the delivery never began")
			}
			require.NoError(t, rt.Close())
			require.Empty(t, counts(), "a delivery Close cut is counted")
			require.Empty(t, log.lines(), "a delivery Close cut is logged as a failure")

			// The next Open delivers the occurrence.
			holdScope.Store(false)
			model := scripted.New(scripted.Options{})
			rt2, err := lazarus.Open(lazarus.Options{Store: store, Model: model, Clock: clock, Metrics: metrics, ScopeLoader: loader})
			require.NoError(t, err)
			defer rt2.Close()
			require.NoError(t, model.WaitCalls(ctx, "c", 1))
			// The reopened runtime may resume the first turn ("hi", cut by
			// Close) before it delivers the wake: the count comes after.
			require.Eventually(t, func() bool { return counts()[lazarus.ScheduleDelivered] == 1 }, 30*time.Second, 5*time.Millisecond,
				"the next Open delivers the occurrence: %v", counts())
			require.Equal(t, map[lazarus.ScheduleOutcome]int{lazarus.ScheduleDelivered: 1}, counts())
		})
	}
}

// heldSweep is an in-memory Store whose blob sweep hangs until its context
// ends.
type heldSweep struct {
	*memjournal.Store
	entered chan struct{}
}

func (s *heldSweep) SweepFileBlobs(ctx context.Context, olderThan time.Time) (int, error) {
	select { // a second sweep must not hang: the test waits for one
	case s.entered <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return 0, ctx.Err()
}

// TestCloseCutsABlobSweepQuietly: Close ends the file blob sweeper's sweep
// in progress, and logs no failure for it (it logged "file blob sweep
// failed" at warn level).
func TestCloseCutsABlobSweepQuietly(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	clock := actorstest.NewManualClock(schedT0)
	store := &heldSweep{Store: memjournal.New(memjournal.Options{}), entered: make(chan struct{}, 1)}
	log := &warnLog{}
	rt, err := lazarus.Open(lazarus.Options{Store: store, Model: scripted.New(scripted.Options{}), Clock: clock,
		Logger: slog.New(log), Files: lazarus.FilesOptions{Root: t.TempDir(), BlobTTL: time.Hour}})
	require.NoError(t, err)
	defer rt.Close()
	go clock.Advance(30 * time.Minute) // the sweep runs in Advance
	select {
	case <-store.entered:
	case <-ctx.Done():
		t.Fatal("the blob sweep never ran")
	}
	closed := make(chan error, 1)
	go func() { closed <- rt.Close() }()
	require.NoError(t, await(t, closed, "Close"))
	require.Empty(t, log.lines(), "a sweep Close cut is logged as a failure")
}

// TestToolClosesTheRuntimeOnAGoroutineOfItsOwn: a server tool that closes
// the Runtime as Close's doc says (on a goroutine of its own, then
// returning once its context is cancelled) closes it. Called from the
// tool's Run itself, Close never returns: it waits for the run.
func TestToolClosesTheRuntimeOnAGoroutineOfItsOwn(t *testing.T) {
	var rt *lazarus.Runtime
	closed := make(chan error, 1)
	quit := agent.Tool{Name: "quit", Executor: messages.Executor_EXECUTOR_SERVER,
		Run: func(ctx context.Context, _ agent.Invocation) (string, error) {
			go func() { closed <- rt.Close() }()
			<-ctx.Done()
			return "", ctx.Err()
		}}
	model := scripted.New(scripted.Options{})
	model.Push("c", scripted.Reply("", scripted.Call("quit", `{}`)))
	rt, err := lazarus.Open(lazarus.Options{Model: model, Tools: []agent.Tool{quit}})
	require.NoError(t, err)
	defer rt.Close()
	_, err = rt.Send(context.Background(), "c", "quit", agent.Scope{UserID: "u"})
	require.NoError(t, err)
	require.NoError(t, await(t, closed, "Close"))
}
