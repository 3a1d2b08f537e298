package lazarus

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

// streamThenWait is a Model that streams one delta, then waits for its
// call's context to end.
type streamThenWait struct{}

func (streamThenWait) Generate(ctx context.Context, _ agent.Turn, onDelta func(string)) (*messages.AssistantMessage, error) {
	if onDelta != nil {
		onDelta("partial ")
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

// lastSeqFails is a Store whose LastSeq fails while failing is set.
type lastSeqFails struct {
	journal.Store
	failing atomic.Bool
}

func (s *lastSeqFails) LastSeq(ctx context.Context, id string) (uint64, error) {
	if s.failing.Load() {
		return 0, fmt.Errorf("lastSeqFails: %w", journal.ErrUnavailable)
	}
	return s.Store.LastSeq(ctx, id)
}

// TestKillVoidsTheAnswerWhenItsEndCannotBeRead: a kill stops a model call
// that has streamed deltas, and the Store's read of where the kill
// happened fails, so no cancelled end is published. The deltas are voided
// all the same: the hub kept them, one conversation's answer each, until a
// later model call of that conversation (never, for a conversation not
// used again), and a subscriber that started later was handed them as the
// answer in progress.
func TestKillVoidsTheAnswerWhenItsEndCannotBeRead(t *testing.T) {
	const n = 200
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store := &lastSeqFails{Store: memjournal.New(memjournal.Options{})}
	rt, err := Open(Options{Store: store, Model: streamThenWait{}, CallTimeout: 10 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = rt.Close() })

	for i := range n {
		conv := fmt.Sprintf("c%d", i)
		sub, err := rt.Subscribe(ctx, conv, 0)
		require.NoError(t, err)
		_, err = rt.Send(ctx, conv, "hi", agent.Scope{UserID: "u"})
		require.NoError(t, err)
		for u := range sub {
			if u.Delta != "" {
				break
			}
		}
		_, answers := rt.hub.sizesForTesting()
		require.Equal(t, 1, answers, "%s: its answer in progress is kept", conv)

		store.failing.Store(true)
		require.True(t, rt.Kill(conv), conv)
		store.failing.Store(false)
		_, answers = rt.hub.sizesForTesting()
		require.Zero(t, answers, "%s: the killed call's deltas are void", conv)
		u, ok := <-sub
		require.True(t, ok)
		require.True(t, u.Restart, "%s: the subscriber is told the deltas are void", conv)
		require.Nil(t, u.TurnEnd)
		require.False(t, errors.Is(u.Err, ErrTurnCancelled))
	}
}
