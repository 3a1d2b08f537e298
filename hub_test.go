package lazarus

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

func hubTestEvents(first, n int) []*messages.Event {
	evs := make([]*messages.Event, n)
	for i := range evs {
		evs[i] = &messages.Event{Time: timestamppb.Now(), Body: &messages.Event_UserMsg{UserMsg: &messages.UserMessage{
			Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: fmt.Sprint("m", first+i)}}},
		}}}
	}
	return evs
}

// TestHubDeliversInOrderOnce publishes while a reader alternates between
// waiting on its channel (updates handed over directly) and being busy
// (updates queued for the pump), after a history that overlaps the first
// live updates: every seq arrives once, in order.
func TestHubDeliversInOrderOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store := memjournal.New(memjournal.Options{})
	const conv, history, total = "c", 5, 3000
	evs := hubTestEvents(1, total)
	_, err := store.Append(ctx, &messages.AppendRequest{ConversationId: conv, Events: evs[:history]})
	require.NoError(t, err)
	for i := history; i < total; i++ {
		evs[i].Seq = uint64(i + 1) // as the Store would on commit
	}

	h := newHub(store, total)
	defer h.close()
	updates, err := h.subscribe(ctx, conv, 0)
	require.NoError(t, err)

	var received atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		// The history again, live (a commit the subscription also read
		// from the Store), then the rest, in commits of 1 to 3 events.
		h.publishCommitted(&messages.AppendRequest{ConversationId: conv, Events: evs[:history]})
		// In the second half the publisher waits for the reader to have
		// everything before each commit: the pump is idle and the reader
		// waiting, so push hands the updates over itself.
		for i := history; i < total; {
			n := min(1+i%3, total-i)
			h.publishCommitted(&messages.AppendRequest{ConversationId: conv, Events: evs[i : i+n]})
			i += n
			for i > total/2 && received.Load() < int64(i) && ctx.Err() == nil {
				runtime.Gosched()
			}
		}
	}()

	var got []uint64
	for len(got) < total {
		select {
		case u, ok := <-updates:
			require.True(t, ok, "the subscription ended after %d events", len(got))
			require.NoError(t, u.Err)
			got = append(got, u.Event.GetSeq())
			received.Add(1)
			if len(got) < total/2 && len(got)%5 == 0 { // busy for a while: the publisher queues
				for range 50 {
					runtime.Gosched()
				}
			}
		case <-ctx.Done():
			t.Fatalf("got %d of %d events", len(got), total)
		}
	}
	<-done
	for i, seq := range got {
		require.Equal(t, uint64(i+1), seq, "update %d", i)
	}
	select {
	case u := <-updates:
		t.Fatalf("an update after the last: %v", u)
	default:
	}
}

// gatedEvents is a Store whose Events waits until gate is closed, after
// saying it was called: a history read slower than a whole turn.
type gatedEvents struct {
	journal.Store
	called chan struct{}
	gate   chan struct{}
}

func (g *gatedEvents) Events(ctx context.Context, id string, q journal.EventQuery) ([]*messages.Event, error) {
	select {
	case g.called <- struct{}{}:
	default:
	}
	<-g.gate
	return g.Store.Events(ctx, id, q)
}

// TestHubDeliversDeltasBeforeTheirAnswer: a turn that streams and commits
// its answer while the subscription still reads its history reaches the
// subscriber as it happened: the deltas, then the answer, whose commit the
// history read also finds. The history read stops where the live updates
// begin.
func TestHubDeliversDeltasBeforeTheirAnswer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	mem := memjournal.New(memjournal.Options{})
	const conv = "c"
	evs := hubTestEvents(1, 3)
	_, err := mem.Append(ctx, &messages.AppendRequest{ConversationId: conv, Events: evs[:1]})
	require.NoError(t, err)
	store := &gatedEvents{Store: mem, called: make(chan struct{}, 1), gate: make(chan struct{})}
	h := newHub(store, 64)
	defer h.close()
	release := sync.OnceFunc(func() { close(store.gate) })
	defer release() // before h.close, which waits for the pump
	updates, err := h.subscribe(ctx, conv, 0)
	require.NoError(t, err)
	<-store.called // the pump is reading the history

	// The turn happens meanwhile: deltas, then its commit.
	h.publish(actors.Update{ConversationID: conv, Delta: "an"})
	h.publish(actors.Update{ConversationID: conv, Delta: "swer"})
	_, err = mem.Append(ctx, &messages.AppendRequest{ConversationId: conv, ExpectedLast: 1, Events: evs[1:3]})
	require.NoError(t, err)
	evs[1].Seq, evs[2].Seq = 2, 3 // as the Store would on commit
	h.publishCommitted(&messages.AppendRequest{ConversationId: conv, Events: evs[1:3]})
	release()

	var got []string
	for len(got) < 5 {
		select {
		case u, ok := <-updates:
			require.True(t, ok)
			require.NoError(t, u.Err)
			if u.Delta != "" {
				got = append(got, u.Delta)
			} else {
				got = append(got, fmt.Sprint(u.Event.GetSeq()))
			}
		case <-ctx.Done():
			t.Fatalf("only %v arrived", got)
		}
	}
	require.Equal(t, []string{"1", "an", "swer", "2", "3"}, got, "history before the live updates, and the deltas before the commit they preceded")
}

// TestHubLagsPastTheBufferWhateverThePumpHolds: the updates the pump has
// taken from the queue and not yet delivered count against the subscriber
// buffer, as queued ones do: a reader that reads one update and then falls
// more than the buffer behind ends with ErrLagged (it could fall twice the
// buffer behind, unnoticed, while the pump held a batch).
func TestHubLagsPastTheBufferWhateverThePumpHolds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const conv, limit = "c", 32
	h := newHub(memjournal.New(memjournal.Options{}), limit)
	defer h.close()
	updates, err := h.subscribe(ctx, conv, 0)
	require.NoError(t, err)
	h.mu.Lock()
	s := h.subs[conv][0]
	h.mu.Unlock()
	state := func() (idle bool, queued int) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.idle, len(s.queue)
	}
	require.Eventually(t, func() bool { idle, _ := state(); return idle }, 10*time.Second, time.Millisecond, "the pump caught up")

	evs := hubTestEvents(1, 3*limit)
	for i, ev := range evs {
		ev.Seq = uint64(i + 1)
	}
	seq := 0
	publish := func(n int) {
		for range n {
			h.publishCommitted(&messages.AppendRequest{ConversationId: conv, Events: evs[seq : seq+1]})
			seq++
		}
	}
	publish(outBuffer + 1) // out is full, the pump holds the last
	require.Eventually(t, func() bool { _, q := state(); return q == 0 }, 10*time.Second, time.Millisecond)
	publish(limit - outBuffer - 1) // queued: the reader is limit behind
	u := <-updates                 // one read: the pump moves on to the queue
	require.Equal(t, uint64(1), u.Event.GetSeq())
	require.Eventually(t, func() bool { _, q := state(); return q == 0 }, 10*time.Second, time.Millisecond)
	publish(limit / 2) // the reader is now limit/2 - 1 past the buffer

	n := 1
	var last actors.Update
	for u := range updates {
		last = u
		if u.Err == nil {
			n++
		}
	}
	require.ErrorIs(t, last.Err, ErrLagged)
	require.LessOrEqual(t, n, limit+1, "at most the buffer after the update read")
}

// TestHubDeliversNothingPastTheLag: once an update did not fit in a
// subscription's buffer (it lagged), no later update reaches its reader,
// though its channel has room again by then: the reader gets the updates
// before the dropped one, then ErrLagged, and subscribes again after the
// last it got; one delivered past the dropped update would reach it past
// a gap. (A cluster follower on the owner reads a hub subscription and
// forwards what it gets in order: it inherits this.)
func TestHubDeliversNothingPastTheLag(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const conv, limit = "c", 4
	h := newHub(memjournal.New(memjournal.Options{}), limit)
	defer h.close()
	updates, err := h.subscribe(ctx, conv, 0)
	require.NoError(t, err)
	evs := hubTestEvents(1, limit+2)
	publish := func(i int) {
		evs[i].Seq = uint64(i + 1)
		h.publishCommitted(&messages.AppendRequest{ConversationId: conv, Events: evs[i : i+1]})
	}
	for i := range limit + 1 { // the last one does not fit: dropped
		publish(i)
	}
	u := <-updates
	require.EqualValues(t, 1, u.Event.GetSeq())
	publish(limit + 1) // the channel has room, but an update before it was dropped
	var got []uint64
	var last actors.Update
	for u := range updates {
		last = u
		if u.Event != nil {
			got = append(got, u.Event.GetSeq())
		}
	}
	require.Equal(t, []uint64{2, 3, 4}, got, "the updates before the dropped one, and none after")
	require.ErrorIs(t, last.Err, ErrLagged)
}

// TestHubDropsAKillsEndPastItsPosition: a kill's cancelled end carries the
// log's last seq at the kill (Update.After), as a failed write's end the
// last seq its activation held, and reaches a subscription
// only while it has delivered nothing past that seq. One that has delivered
// a later event does not get it: live (a write the killed actor had under
// way, handed over at once), or read as history while the end waited in
// its queue (a message sent after the kill, written before its commit was
// published). A position of 0 is one too (an empty log): such an end is
// dropped by a subscription that has delivered any event.
func TestHubDropsAKillsEndPastItsPosition(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const conv = "c"
	kill := func(after uint64) actors.Update {
		return actors.Update{ConversationID: conv, After: after,
			TurnEnd: &actors.TurnEnd{Outcome: actors.TurnCancelled, Err: ErrTurnCancelled}}
	}
	write := func(mem *memjournal.Store, seq uint64) *messages.AppendRequest {
		t.Helper()
		evs := hubTestEvents(int(seq), 1)
		_, err := mem.Append(ctx, &messages.AppendRequest{ConversationId: conv, ExpectedLast: seq - 1, Events: evs})
		require.NoError(t, err)
		evs[0].Seq = seq // as the Store would on commit
		return &messages.AppendRequest{ConversationId: conv, Events: evs}
	}
	isKillEnd := func(u actors.Update, after uint64) {
		t.Helper()
		require.Nil(t, u.Event)
		require.NotNil(t, u.TurnEnd)
		require.Equal(t, actors.TurnCancelled, u.TurnEnd.Outcome)
		require.Equal(t, after, u.After)
	}

	t.Run("live", func(t *testing.T) {
		mem := memjournal.New(memjournal.Options{})
		write(mem, 1)
		h := newHub(mem, 64)
		defer h.close()
		updates, err := h.subscribe(ctx, conv, 1)
		require.NoError(t, err)
		h.publish(kill(1))
		isKillEnd(nextUpdate(t, ctx, updates), 1)
		h.publishCommitted(write(mem, 2))
		require.EqualValues(t, 2, nextUpdate(t, ctx, updates).Event.GetSeq())
		h.publish(kill(1)) // past it: dropped
		h.publish(kill(0)) // past it too: the log was empty
		h.publish(kill(2))
		isKillEnd(nextUpdate(t, ctx, updates), 2)
	})

	t.Run("history", func(t *testing.T) {
		mem := memjournal.New(memjournal.Options{})
		write(mem, 1)
		store := &gatedEvents{Store: mem, called: make(chan struct{}, 1), gate: make(chan struct{})}
		h := newHub(store, 64)
		defer h.close()
		release := sync.OnceFunc(func() { close(store.gate) })
		defer release() // before h.close, which waits for the pump
		updates, err := h.subscribe(ctx, conv, 1)
		require.NoError(t, err)
		<-store.called // the pump reads its history
		h.publish(kill(1))
		committed := write(mem, 2) // in the Store, its commit not yet published
		release()
		require.EqualValues(t, 2, nextUpdate(t, ctx, updates).Event.GetSeq(), "read as history")
		h.publishCommitted(committed)
		h.publish(kill(2))
		isKillEnd(nextUpdate(t, ctx, updates), 2) // the queued end past its position was dropped
	})

	// A failed write's end carries the last seq its activation held
	// (held): a write reported of unknown outcome that landed (held+1),
	// read as history while the end waited in the queue, ends that end's
	// turn; the failed end after it would read as the end of the next
	// message's turn. A conversation's first write fails with held 0,
	// which is a position too (the hub took After 0 for none).
	for _, held := range []uint64{1, 0} {
		t.Run(fmt.Sprintf("failed write after %d", held), func(t *testing.T) {
			mem := memjournal.New(memjournal.Options{})
			if held > 0 {
				write(mem, held)
			}
			store := &gatedEvents{Store: mem, called: make(chan struct{}, 1), gate: make(chan struct{})}
			h := newHub(store, 64)
			defer h.close()
			release := sync.OnceFunc(func() { close(store.gate) })
			defer release()
			updates, err := h.subscribe(ctx, conv, held)
			require.NoError(t, err)
			<-store.called
			write(mem, held+1) // landed, its outcome reported unknown: never published
			lost := fmt.Errorf("test: connection lost during COMMIT: %w", journal.ErrUnknownOutcome)
			h.publish(actors.Update{ConversationID: conv, Err: lost, After: held})
			release()
			require.EqualValues(t, held+1, nextUpdate(t, ctx, updates).Event.GetSeq(), "read as history")
			h.publish(actors.Update{ConversationID: conv, Err: lost, After: held + 1})
			u := nextUpdate(t, ctx, updates) // the queued end past its position was dropped
			require.Nil(t, u.Event)
			require.NotNil(t, u.TurnEnd)
			require.Equal(t, actors.TurnFailed, u.TurnEnd.Outcome)
			require.Equal(t, held+1, u.After)
			require.ErrorIs(t, u.Err, journal.ErrUnknownOutcome)
		})
	}
}

// TestHubReadsTheLogARevivalSaw: events the Store holds but no commit
// published (writes reported of unknown outcome that landed; more than a
// catch-up page of them) reach a subscription once an activation's revival
// read has seen them (logAt), with no further commit: after the updates
// published before, before those published after, each once, in order.
// A subscription that has delivered up to the seq reads nothing.
func TestHubReadsTheLogARevivalSaw(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store := memjournal.New(memjournal.Options{})
	const conv, unreported = "c", historyPage + 3
	h := newHub(store, 4*historyPage)
	defer h.close()
	updates, err := h.subscribe(ctx, conv, 0)
	require.NoError(t, err)

	evs := hubTestEvents(1, 1+unreported+1)
	res, err := store.Append(ctx, &messages.AppendRequest{ConversationId: conv, Events: evs[:1]})
	require.NoError(t, err)
	first := res.LastSeq
	evs[0].Seq = first // as the Store would on commit
	h.publishCommitted(&messages.AppendRequest{ConversationId: conv, Events: evs[:1]})
	_, err = store.Append(ctx, &messages.AppendRequest{ConversationId: conv, ExpectedLast: first, Events: evs[1 : 1+unreported]})
	require.NoError(t, err)
	last := first + unreported
	// The failed write, published by the activation that made it; the
	// revival's read; a delta of the model call the revived activation
	// starts.
	unknown := fmt.Errorf("test: %w", journal.ErrUnknownOutcome)
	h.publish(actors.Update{ConversationID: conv, Err: unknown, After: first})
	h.logAt(conv, last)
	h.publish(actors.Update{ConversationID: conv, Delta: "d", After: last})

	next := func() actors.Update {
		t.Helper()
		select {
		case u, ok := <-updates:
			require.True(t, ok, "the subscription ended")
			require.NotErrorIs(t, u.Err, errLogAt, "a marker reached the subscriber")
			return u
		case <-ctx.Done():
			t.Fatal("no update")
			return actors.Update{}
		}
	}
	require.Equal(t, first, next().Event.GetSeq())
	require.ErrorIs(t, next().Err, journal.ErrUnknownOutcome)
	for seq := first + 1; seq <= last; seq++ {
		require.Equal(t, seq, next().Event.GetSeq(), "the log's events, in order")
	}
	require.Equal(t, "d", next().Delta, "the delta after the events the revival read")

	// Delivered up to it: nothing more; the next commit follows at once.
	h.logAt(conv, last)
	evs[len(evs)-1].Seq = last + 1
	h.publishCommitted(&messages.AppendRequest{ConversationId: conv, Events: evs[len(evs)-1:]})
	require.Equal(t, last+1, next().Event.GetSeq())
	// A subscription delivers in order: a sentinel published after is
	// the next update, so any update still due (a read of the log, a
	// duplicate) would come before it.
	h.publish(actors.Update{ConversationID: conv, Delta: "sentinel", After: last + 1})
	u := next()
	require.Equal(t, "sentinel", u.Delta, "an update after the last: event %d, err %v", u.Event.GetSeq(), u.Err)
	require.Nil(t, u.Event)
}
