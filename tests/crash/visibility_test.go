package crash

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/pebblejournal"
	"github.com/lazarusrt/lazarus/messages"
)

// syncGate holds the next WAL sync until released, then fails it: the
// write it would have made durable never becomes durable.
type syncGate struct {
	armed   chan struct{} // closed to arm
	blocked chan struct{} // closed when a sync is held
	release chan struct{} // closed to let it fail
	once    sync.Once
}

func (g *syncGate) String() string { return "crash.syncGate" }

func (g *syncGate) MaybeError(op errorfs.Op) error {
	select {
	case <-g.armed:
	default:
		return nil
	}
	if !strings.HasSuffix(op.Path, ".log") || (op.Kind != errorfs.OpFileSync && op.Kind != errorfs.OpFileSyncData && op.Kind != errorfs.OpFileSyncTo) {
		return nil
	}
	g.once.Do(func() { close(g.blocked) })
	<-g.release
	return errorfs.ErrInjected
}

// readsSeen is a Store that keeps what its event reads returned.
type readsSeen struct {
	journal.Store
	mu   sync.Mutex
	read chan []*messages.Event // every Events result, while armed
}

func (s *readsSeen) Events(ctx context.Context, id string, q journal.EventQuery) ([]*messages.Event, error) {
	evs, err := s.Store.Events(ctx, id, q)
	s.mu.Lock()
	ch := s.read
	s.mu.Unlock()
	if ch != nil && err == nil {
		ch <- evs
	}
	return evs, err
}

// TestSubscriberSeesOnlyDurableEvents: a subscriber must never see an
// event that is not durable (journal/doc.go: nothing may be streamed to a
// subscriber before the write returned nil). The live path keeps this (the
// actor publishes after the journal's reply), but a subscription's catch-up
// reads the Store directly, and Pebble shows a batch to readers before its
// WAL sync completes. Here the WAL sync of a Send is held, a subscription
// catches up meanwhile, then the sync fails: neither the subscriber nor
// History may have received the message. pebblejournal's log reads open
// their iterator under the conversation's stripe lock (held by writes
// across the synced commit) and fail once the store has failed.
func TestSubscriberSeesOnlyDurableEvents(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	mem := vfs.NewCrashableMem()
	gate := &syncGate{armed: make(chan struct{}), blocked: make(chan struct{}), release: make(chan struct{})}
	ps, err := pebblejournal.Open("db", pebblejournal.Options{FS: errorfs.Wrap(mem, gate)})
	require.NoError(t, err)
	store := &readsSeen{Store: ps}
	rt, err := lazarus.Open(lazarus.Options{Store: store, Model: scripted.New(scripted.Options{}), IdleTimeout: -1})
	require.NoError(t, err)

	close(gate.armed)
	sent := make(chan error, 1)
	go func() {
		_, err := rt.Send(ctx, "c", "hello", agent.Scope{UserID: "u"})
		sent <- err
	}()
	select {
	case <-gate.blocked: // the user message is applied; its sync is held
	case <-ctx.Done():
		t.Fatal("the Send never reached its WAL sync")
	}
	// History while the sync is held (a fixed store may make it wait).
	historyc := make(chan []*messages.Event, 1)
	go func() {
		evs, _ := rt.History(ctx, "c", 0, 0)
		historyc <- evs
	}()
	var history []*messages.Event
	gotHistory := false
	waitHistory := time.NewTimer(2 * time.Second)
	defer waitHistory.Stop()
	select {
	case history = <-historyc:
		gotHistory = true
	case <-waitHistory.C:
	}

	reads := make(chan []*messages.Event, 16)
	store.mu.Lock()
	store.read = reads
	store.mu.Unlock()
	sub, err := rt.Subscribe(ctx, "c", 0)
	require.NoError(t, err)
	// The catch-up read, while the sync is held. A store whose reads wait
	// for writes in flight (the fix) does not return here; then go on.
	var caughtUp []*messages.Event
	held := time.NewTimer(2 * time.Second)
	defer held.Stop()
	select {
	case caughtUp = <-reads:
	case <-held.C:
	}
	var streamed []*messages.Event
	if len(caughtUp) > 0 {
		select {
		case u := <-sub: // the pump streams what it read
			streamed = append(streamed, u.Event)
		case <-ctx.Done():
			t.Fatal("the pump never streamed what it read")
		}
	}
	store.mu.Lock()
	store.read = nil
	store.mu.Unlock()

	close(gate.release)
	err = <-sent
	require.ErrorIs(t, err, journal.ErrClosed, "the Send is not acknowledged: its sync failed")
	if !gotHistory {
		history = <-historyc
	}
	// Anything streamed now is unacknowledged too.
	late := time.NewTimer(500 * time.Millisecond)
	defer late.Stop()
drain:
	for {
		select {
		case u, ok := <-sub:
			if !ok {
				break drain
			}
			if u.Event != nil {
				streamed = append(streamed, u.Event)
			}
		case <-late.C:
			break drain
		}
	}
	require.NoError(t, closeWithin(t, "Runtime.Close", rt.Close))
	_ = ps.Close()

	// A crash now keeps only what was synced.
	s, err := pebblejournal.Open("db", pebblejournal.Options{FS: mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})})
	require.NoError(t, err)
	defer s.Close()
	durable, err := s.Events(ctx, "c", journal.EventQuery{})
	require.NoError(t, err)
	require.Empty(t, durable, "the unacknowledged message did not survive")
	assert.Empty(t, streamed, "a subscriber received a message whose write had not returned (and never became durable)")
	assert.Empty(t, history, "History returned a message whose write had not returned (and never became durable)")
}
