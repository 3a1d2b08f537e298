package lazarus_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/snapshot"
)

// heldSummaryStore holds its first PutSummary until release is closed,
// then refuses it; later ones are stored.
type heldSummaryStore struct {
	journal.Store
	entered chan *messages.Summary
	release chan struct{}
	puts    atomic.Int64
}

func (s *heldSummaryStore) PutSummary(ctx context.Context, id string, sum *messages.Summary) error {
	if s.puts.Add(1) > 1 {
		return s.Store.PutSummary(ctx, id, sum)
	}
	s.entered <- sum
	<-s.release
	return errors.New("store refused the summary")
}

// TestSummaryFailingAfterATurnIsTriedAgainAtOnce: a summary that fails
// while a turn's message and answer are written (the summary left the
// ModelGate, the turn went on, and the failure reached the actor after
// the answer) is tried again at once: those events are ones the failed
// attempt never saw, and the log is past the policy. (They were charged
// to the failure, so the log stayed past the policy, with no summary,
// until yet another message.)
func TestSummaryFailingAfterATurnIsTriedAgainAtOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	store := &heldSummaryStore{Store: memjournal.New(memjournal.Options{}),
		entered: make(chan *messages.Summary, 1), release: make(chan struct{})}
	rt, err := lazarus.Open(lazarus.Options{Store: store, Model: scripted.New(scripted.Options{}), IdleTimeout: -1,
		Summarizer: snapshot.Deterministic{}, Summary: snapshot.Policy{MaxEvents: 2, KeepRecent: -1}})
	require.NoError(t, err)
	defer rt.Close()
	for range 2 {
		_, err := rt.SendAndWait(ctx, "c", "hi", agent.Scope{UserID: "u"})
		require.NoError(t, err)
	}
	first := recv(t, ctx, store.entered, "the first summary's write")
	require.Equal(t, uint64(4), first.GetToSeq())

	// While its write is held, the summary has left the gate: a turn runs.
	_, err = rt.SendAndWait(ctx, "c", "more", agent.Scope{UserID: "u"})
	require.NoError(t, err)
	last, err := store.LastSeq(ctx, "c")
	require.NoError(t, err)
	require.Equal(t, uint64(6), last)

	close(store.release)
	require.Eventually(t, func() bool {
		sum, err := store.LatestSummary(ctx, "c")
		return err == nil && sum.GetToSeq() == last
	}, 10*time.Second, time.Millisecond, "the summary is tried again without another message")
}
