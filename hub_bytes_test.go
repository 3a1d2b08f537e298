package lazarus

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

// sizedReads is a Store that records the bytes of each Events answer.
type sizedReads struct {
	journal.Store
	mu    sync.Mutex
	sizes []int
}

func (s *sizedReads) Events(ctx context.Context, conv string, q journal.EventQuery) ([]*messages.Event, error) {
	evs, err := s.Store.Events(ctx, conv, q)
	n := 0
	for _, ev := range evs {
		n += proto.Size(ev)
	}
	s.mu.Lock()
	s.sizes = append(s.sizes, n)
	s.mu.Unlock()
	return evs, err
}

// TestHubCatchUpBoundedByBytes: a subscription catches up from the Store
// in reads of at most the hub's page bytes (one event at least), not of
// historyPage events whatever their size, and still delivers the whole
// history, each event once, in order.
func TestHubCatchUpBoundedByBytes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store := &sizedReads{Store: memjournal.New(memjournal.Options{})}
	const conv, total = "c", 20
	evs := hubTestEvents(1, total)
	for _, ev := range evs {
		ev.GetUserMsg().Content = append(ev.GetUserMsg().Content, &messages.ContentPart{Part: &messages.ContentPart_Text{Text: strings.Repeat("x", 1000)}})
	}
	_, err := store.Append(ctx, &messages.AppendRequest{ConversationId: conv, Events: evs})
	require.NoError(t, err)
	size := proto.Size(evs[0])

	h := newHub(store, total)
	defer h.close()
	h.pageBytes = 3 * size // two events a read: the Store's have their seqs
	updates, err := h.subscribe(ctx, conv, 0)
	require.NoError(t, err)
	for want := uint64(1); want <= total; want++ {
		select {
		case u := <-updates:
			require.NoError(t, u.Err)
			require.Equal(t, want, u.Event.GetSeq())
		case <-ctx.Done():
			t.Fatalf("seq %d never came", want)
		}
	}
	store.mu.Lock()
	defer store.mu.Unlock()
	require.NotEmpty(t, store.sizes)
	for i, n := range store.sizes {
		require.LessOrEqual(t, n, h.pageBytes, "read %d of %v", i, store.sizes)
	}
}
