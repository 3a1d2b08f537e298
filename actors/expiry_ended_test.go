package actors_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

// endingStore commits an End of conv just before the first batch that
// resolves call, as an End landing between an expire's decision and its
// commit would, and counts the reads of conversation rows.
type endingStore struct {
	journal.Store
	conv, call string
	once       sync.Once
	endErr     error
	reads      atomic.Int32
}

func (s *endingStore) Conversation(ctx context.Context, id string) (*messages.Conversation, error) {
	s.reads.Add(1)
	return s.Store.Conversation(ctx, id)
}

func (s *endingStore) AppendBatch(ctx context.Context, reqs []*messages.AppendRequest) []journal.AppendResult {
	for _, req := range reqs {
		for _, r := range req.GetResolutions() {
			if r.GetToolCallId() == s.call {
				s.once.Do(func() {
					_, s.endErr = s.Store.Append(ctx, &messages.AppendRequest{ConversationId: s.conv, Unfenced: true,
						Status: messages.ConversationStatus_CONVERSATION_STATUS_ENDED})
				})
			}
		}
	}
	return s.Store.AppendBatch(ctx, reqs)
}

// TestExpiryRacingAnEndKeepsItEnded: an End that commits after the expiry
// decided to expire a call, and before the expire's write commits, wins:
// the call is expired and delivered, and the row stays ENDED (the expire
// stated ACTIVE; the Store keeps an ENDED row ENDED in the write's own
// commit). The expire reads no conversation row to decide its status.
func TestExpiryRacingAnEndKeepsItEnded(t *testing.T) {
	store := &endingStore{Store: memjournal.New(memjournal.Options{}), conv: "conv", call: "call"}
	h := newExpiryHarness(t, store, withRealJournal(t, store))
	deadline := expiryT0.Add(time.Minute)
	pendingHumanCall(t, store, "conv", "call", deadline)
	h.start()
	h.waitArmed(t, deadline)
	h.clock.Advance(time.Minute)
	require.Equal(t, delivery{"conv", "call"}, h.nextDelivery(t))
	require.NoError(t, store.endErr, "the End committed before the expire")
	requireExpired(t, store, "call")
	require.Zero(t, store.reads.Load(), "the expire read no conversation row")
	c, err := store.Conversation(context.Background(), "conv")
	require.NoError(t, err)
	require.Equal(t, messages.ConversationStatus_CONVERSATION_STATUS_ENDED, c.GetStatus(), "the expire did not reopen it")
}
