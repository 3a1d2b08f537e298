package lazarus_test

import (
	"context"
	"fmt"
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
)

// answerLandedStore writes the first request that holds an assistant_msg
// and then reports it as journal.ErrUnknownOutcome: a COMMIT that landed
// and whose reply was lost, as a dropped connection leaves it.
type answerLandedStore struct {
	journal.Store
	lost atomic.Bool
}

func (s *answerLandedStore) AppendBatch(ctx context.Context, reqs []*messages.AppendRequest) []journal.AppendResult {
	out := s.Store.AppendBatch(ctx, reqs)
	for i, req := range reqs {
		for _, ev := range req.GetEvents() {
			if out[i].Err == nil && ev.GetAssistantMsg() != nil && s.lost.CompareAndSwap(false, true) {
				out[i] = journal.AppendResult{Err: fmt.Errorf("test: connection lost during COMMIT: %w", journal.ErrUnknownOutcome)}
			}
		}
	}
	return out
}

// TestSubscriberGetsAWriteOfUnknownOutcomeThatLanded: a write the Store
// committed but reported as ErrUnknownOutcome is never published by the
// journal actor (only successes are); a live subscriber still gets every
// event of the log once, in order, with no gap, once a later commit shows
// the log went past it.
func TestSubscriberGetsAWriteOfUnknownOutcomeThatLanded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store := &answerLandedStore{Store: memjournal.New(memjournal.Options{})}
	model := scripted.New(scripted.Options{})
	model.Push("c", scripted.Text("landed"), scripted.Text("two"))
	rt, err := lazarus.Open(lazarus.Options{Model: model, Store: store, IdleTimeout: -1})
	require.NoError(t, err)
	defer rt.Close()

	updates, err := rt.Subscribe(ctx, "c", 0)
	require.NoError(t, err)
	_, err = rt.SendAndWait(ctx, "c", "hello", agent.Scope{UserID: "u"})
	require.ErrorIs(t, err, journal.ErrUnknownOutcome, "the answer's write was reported lost")
	require.True(t, store.lost.Load())
	_, err = rt.SendAndWait(ctx, "c", "again", agent.Scope{UserID: "u"})
	require.NoError(t, err)
	evs, err := rt.History(ctx, "c", 0, 0)
	require.NoError(t, err)
	require.Len(t, evs, 4, "hello, landed, again, two")

	var got []uint64
	for len(got) == 0 || got[len(got)-1] < evs[len(evs)-1].GetSeq() {
		select {
		case u, ok := <-updates:
			require.True(t, ok, "the subscription ended after seqs %v", got)
			if u.Event != nil {
				got = append(got, u.Event.GetSeq())
			}
		case <-ctx.Done():
			t.Fatalf("the subscriber got seqs %v of %d", got, len(evs))
		}
	}
	require.Equal(t, []uint64{1, 2, 3, 4}, got, "every event of the log once, in order")
}
