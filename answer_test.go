package lazarus

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

// nextUpdate reads one update or fails the test.
func nextUpdate(t *testing.T, ctx context.Context, updates <-chan actors.Update) actors.Update {
	t.Helper()
	select {
	case u, ok := <-updates:
		require.True(t, ok, "subscription ended")
		return u
	case <-ctx.Done():
		t.Fatal("no update")
		return actors.Update{}
	}
}

func answerEvent(seq uint64, text string) *messages.Event {
	return &messages.Event{Seq: seq, Body: &messages.Event_AssistantMsg{AssistantMsg: &messages.AssistantMessage{
		Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: text}}}}}}
}

// TestHubReplaysTheAnswerInProgress: a subscription that starts in the
// middle of an answer gets its history, then the deltas streamed so far,
// then the live ones; once the answer is durable, or its turn cancelled,
// a new subscription gets no stale delta.
func TestHubReplaysTheAnswerInProgress(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store := memjournal.New(memjournal.Options{})
	const conv = "c"
	_, err := store.Append(ctx, &messages.AppendRequest{ConversationId: conv, Events: hubTestEvents(1, 1)})
	require.NoError(t, err)
	h := newHub(store, 100)
	defer h.close()

	h.publish(actors.Update{ConversationID: conv, Delta: "Hel", After: 1})
	h.publish(actors.Update{ConversationID: conv, Delta: "lo", After: 1})
	first, err := h.subscribe(ctx, conv, 0)
	require.NoError(t, err)
	require.EqualValues(t, 1, nextUpdate(t, ctx, first).Event.GetSeq())
	require.Equal(t, "Hel", nextUpdate(t, ctx, first).Delta)
	require.Equal(t, "lo", nextUpdate(t, ctx, first).Delta)
	h.publish(actors.Update{ConversationID: conv, Delta: " world", After: 1})
	require.Equal(t, " world", nextUpdate(t, ctx, first).Delta)

	// A subscription from the middle of the history gets the same.
	second, err := h.subscribe(ctx, conv, 1)
	require.NoError(t, err)
	var text strings.Builder
	for range 3 {
		u := nextUpdate(t, ctx, second)
		require.Nil(t, u.Event)
		text.WriteString(u.Delta)
	}
	require.Equal(t, "Hello world", text.String())

	// The answer lands: its deltas are dropped.
	h.publishCommitted(&messages.AppendRequest{ConversationId: conv, Events: []*messages.Event{answerEvent(2, "Hello world")}})
	_, err = store.Append(ctx, &messages.AppendRequest{ConversationId: conv, ExpectedLast: 1, Events: []*messages.Event{answerEvent(0, "Hello world")}})
	require.NoError(t, err)
	require.EqualValues(t, 2, nextUpdate(t, ctx, first).Event.GetSeq())
	third, err := h.subscribe(ctx, conv, 0)
	require.NoError(t, err)
	require.EqualValues(t, 1, nextUpdate(t, ctx, third).Event.GetSeq())
	require.EqualValues(t, 2, nextUpdate(t, ctx, third).Event.GetSeq())
	h.publish(actors.Update{ConversationID: conv, Delta: "next", After: 2})
	require.Equal(t, "next", nextUpdate(t, ctx, third).Delta, "a delta of the durable answer was replayed")

	// A message that cancels the model call drops its deltas.
	h.publish(actors.Update{ConversationID: conv, Delta: "stale", After: 2})
	userMsg := hubTestEvents(3, 1)
	userMsg[0].Seq = 3 // as the Store would on commit
	h.publishCommitted(&messages.AppendRequest{ConversationId: conv, Events: userMsg})
	_, err = store.Append(ctx, &messages.AppendRequest{ConversationId: conv, ExpectedLast: 2, Events: hubTestEvents(3, 1)})
	require.NoError(t, err)
	require.Equal(t, "stale", nextUpdate(t, ctx, third).Delta)
	require.EqualValues(t, 3, nextUpdate(t, ctx, third).Event.GetSeq())
	fifth, err := h.subscribe(ctx, conv, 2)
	require.NoError(t, err)
	require.EqualValues(t, 3, nextUpdate(t, ctx, fifth).Event.GetSeq())
	h.publish(actors.Update{ConversationID: conv, Delta: "fresh", After: 3})
	require.Equal(t, "fresh", nextUpdate(t, ctx, fifth).Delta, "a delta of the cancelled model call was replayed")

	// A cancelled turn drops its deltas too.
	h.publish(actors.Update{ConversationID: conv, TurnEnd: &actors.TurnEnd{Outcome: actors.TurnCancelled, Err: ErrTurnCancelled}})
	fourth, err := h.subscribe(ctx, conv, 3)
	require.NoError(t, err)
	h.publish(actors.Update{ConversationID: conv, Delta: "again", After: 3})
	require.Equal(t, "again", nextUpdate(t, ctx, fourth).Delta, "a delta of the cancelled turn was replayed")
}

// TestHubDropsTheAnswerInProgressOfADeletedConversation (ARCHITECTURE.md,
// invariant 11): the delete of a conversation drops the deltas the hub
// keeps of its model call in progress, with the subscriptions it ends: the
// hub holds none of them after it, and a subscription that starts after
// it gets none.
func TestHubDropsTheAnswerInProgressOfADeletedConversation(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store := memjournal.New(memjournal.Options{})
	const conv = "c"
	_, err := store.Append(ctx, &messages.AppendRequest{ConversationId: conv, Events: hubTestEvents(1, 1)})
	require.NoError(t, err)
	h := newHub(store, 100)
	defer h.close()

	h.publish(actors.Update{ConversationID: conv, Delta: "stale", After: 1})
	before, err := h.subscribe(ctx, conv, 0)
	require.NoError(t, err)
	require.EqualValues(t, 1, nextUpdate(t, ctx, before).Event.GetSeq())
	require.Equal(t, "stale", nextUpdate(t, ctx, before).Delta, "the hub keeps the answer in progress")

	h.end(conv, fmt.Errorf("test: %w", journal.ErrDeleted))
	u := nextUpdate(t, ctx, before)
	require.ErrorIs(t, u.Err, journal.ErrDeleted, "the delete ends the subscription")
	h.mu.Lock()
	_, kept := h.answers[conv]
	h.mu.Unlock()
	require.False(t, kept, "the deleted conversation's deltas are dropped")

	after, err := h.subscribe(ctx, conv, 0)
	require.NoError(t, err)
	require.EqualValues(t, 1, nextUpdate(t, ctx, after).Event.GetSeq())
	h.publish(actors.Update{ConversationID: conv, Delta: "fresh", After: 1})
	require.Equal(t, "fresh", nextUpdate(t, ctx, after).Delta, "a delta of the deleted conversation's call was replayed")
}

// TestHubAnswerReplayIsBounded: past maxAnswerBytes the hub keeps nothing
// more of the answer.
func TestHubAnswerReplayIsBounded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h := newHub(memjournal.New(memjournal.Options{}), 100)
	defer h.close()
	big := strings.Repeat("x", maxAnswerBytes/2+1)
	h.publish(actors.Update{ConversationID: "c", Delta: big})
	h.publish(actors.Update{ConversationID: "c", Delta: big})
	h.mu.Lock()
	a := h.answers["c"]
	require.True(t, a.over)
	require.Empty(t, a.deltas)
	h.mu.Unlock()
	updates, err := h.subscribe(ctx, "c", 0)
	require.NoError(t, err)
	h.publish(actors.Update{ConversationID: "c", Delta: "live"})
	require.Equal(t, "live", nextUpdate(t, ctx, updates).Delta)
}

// TestHubAnswerReplayExactlyOnce: subscriptions that start while deltas
// are being published each get every delta of the answer once, in order.
func TestHubAnswerReplayExactlyOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n, subscribers = 2000, 16
	h := newHub(memjournal.New(memjournal.Options{}), 2*n)
	defer h.close()
	// Subscriber k subscribes, on its own goroutine, once delta k*n/16
	// was published: concurrently with the deltas that follow.
	triggers := make([]chan struct{}, subscribers)
	started := make(chan (<-chan actors.Update), subscribers)
	var wg sync.WaitGroup
	for k := range triggers {
		triggers[k] = make(chan struct{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-triggers[k]
			updates, err := h.subscribe(ctx, "c", 0)
			if err == nil {
				started <- updates
			}
		}()
	}
	for i := range n {
		h.publish(actors.Update{ConversationID: "c", Delta: fmt.Sprint(i, ",")})
		if i%(n/subscribers) == 0 {
			close(triggers[i/(n/subscribers)])
		}
	}
	want := strings.Builder{}
	for i := range n {
		fmt.Fprint(&want, i, ",")
	}
	for range subscribers {
		updates := <-started
		var got strings.Builder
		for got.Len() < want.Len() {
			got.WriteString(nextUpdate(t, ctx, updates).Delta)
		}
		require.Equal(t, want.String(), got.String())
	}
	wg.Wait()
}

// TestHubReplaysNoDeltaOfAnAnswerInTheStore: the journal actor publishes a
// commit after the Store's write returns, so a subscription can start in
// between, while the hub still holds the deltas of the answer the Store
// already has. Its history then holds the answer, and the deltas of that
// answer are not replayed after it (as if a next answer were streaming),
// whether the subscription reads the answer from the Store or starts
// after it.
func TestHubReplaysNoDeltaOfAnAnswerInTheStore(t *testing.T) {
	for _, after := range []uint64{0, 2} {
		t.Run(fmt.Sprint("after ", after), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			store := memjournal.New(memjournal.Options{})
			const conv = "c"
			_, err := store.Append(ctx, &messages.AppendRequest{ConversationId: conv, Events: hubTestEvents(1, 1)})
			require.NoError(t, err)
			h := newHub(store, 100)
			defer h.close()

			// The model call that follows seq 1 streams, then its answer is
			// written; the commit is not published yet.
			h.publish(actors.Update{ConversationID: conv, Delta: "an", After: 1})
			h.publish(actors.Update{ConversationID: conv, Delta: "swer", After: 1})
			_, err = store.Append(ctx, &messages.AppendRequest{ConversationId: conv, ExpectedLast: 1, Events: []*messages.Event{answerEvent(0, "answer")}})
			require.NoError(t, err)
			updates, err := h.subscribe(ctx, conv, after)
			require.NoError(t, err)
			for seq := after + 1; seq <= 2; seq++ {
				require.Equal(t, seq, nextUpdate(t, ctx, updates).Event.GetSeq())
			}

			// The commit is published, then the next one.
			h.publishCommitted(&messages.AppendRequest{ConversationId: conv, Events: []*messages.Event{answerEvent(2, "answer")}})
			next := hubTestEvents(3, 1)
			next[0].Seq = 3
			h.publishCommitted(&messages.AppendRequest{ConversationId: conv, Events: next})
			u := nextUpdate(t, ctx, updates)
			require.Empty(t, u.Delta, "a delta of the durable answer was replayed after it")
			require.EqualValues(t, 3, u.Event.GetSeq())
		})
	}
}

// TestHubKeepsOnlyTheAnswerOfTheCallInProgress: deltas of a model call
// (Update.Agent and Update.After) other than the one whose deltas the hub
// keeps start a new answer in progress: a call can end without publishing
// anything that drops its deltas (an activation that retired quietly, a
// stale wake's in a cluster, while the member still owns the
// conversation), and a subscription that starts in the middle of the next
// call's answer gets that answer alone. (The next call's deltas were kept
// after the old call's, and a late subscriber got both answers run
// together.)
func TestHubKeepsOnlyTheAnswerOfTheCallInProgress(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store := memjournal.New(memjournal.Options{})
	const conv = "c"
	_, err := store.Append(ctx, &messages.AppendRequest{ConversationId: conv, Events: hubTestEvents(1, 2)})
	require.NoError(t, err)
	h := newHub(store, 100)
	defer h.close()
	kept := func() []string {
		h.mu.Lock()
		defer h.mu.Unlock()
		return slices.Clone(h.answers[conv].deltas)
	}

	h.publish(actors.Update{ConversationID: conv, Delta: "stale ", After: 1})
	h.publish(actors.Update{ConversationID: conv, Delta: "answer", After: 1})
	h.publish(actors.Update{ConversationID: conv, Delta: "new ", After: 2})
	h.publish(actors.Update{ConversationID: conv, Delta: "answer", After: 2})
	require.Equal(t, []string{"new ", "answer"}, kept(), "a call after another seq")

	h.publish(actors.Update{ConversationID: conv, Delta: "other agent", Agent: "helper", After: 2})
	require.Equal(t, []string{"other agent"}, kept(), "another agent's call")

	big := strings.Repeat("x", maxAnswerBytes/2+1)
	h.publish(actors.Update{ConversationID: conv, Delta: big, Agent: "helper", After: 2})
	h.publish(actors.Update{ConversationID: conv, Delta: big, Agent: "helper", After: 2})
	require.Empty(t, kept(), "past maxAnswerBytes")
	h.publish(actors.Update{ConversationID: conv, Delta: "after", After: 2})
	require.Equal(t, []string{"after"}, kept(), "a call after one past maxAnswerBytes")

	updates, err := h.subscribe(ctx, conv, 0)
	require.NoError(t, err)
	require.EqualValues(t, 1, nextUpdate(t, ctx, updates).Event.GetSeq())
	require.EqualValues(t, 2, nextUpdate(t, ctx, updates).Event.GetSeq())
	require.Equal(t, "after", nextUpdate(t, ctx, updates).Delta)
	h.publish(actors.Update{ConversationID: conv, Delta: " live", After: 2})
	require.Equal(t, " live", nextUpdate(t, ctx, updates).Delta)
}
