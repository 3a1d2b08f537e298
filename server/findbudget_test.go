package server_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/server"
)

// rowReads counts the conversation rows read from its Store.
type rowReads struct {
	journal.Store
	n atomic.Int64
}

func (s *rowReads) Conversation(ctx context.Context, id string) (*messages.Conversation, error) {
	s.n.Add(1)
	return s.Store.Conversation(ctx, id)
}

// TestFilteredListingScanIsBounded: a metadata[KEY]=VALUE listing reads
// the ids the Store's index holds for the pair within the listing's scan
// budget (20 times the page size), ids without a conversation row (stray
// metadata) included: a page that spends it on those is empty, with a
// sealed next_cursor, and paging on reaches the conversation after them.
func TestFilteredListingScanIsBounded(t *testing.T) {
	ctx := testContext(t)
	store := &rowReads{Store: memjournal.New(memjournal.Options{})}
	n := startNodeIn(t, "", newScripted(), server.Options{}, func(o *lazarus.Options) { o.Store = store })
	// 100 ids with metadata and no row, all before the created one's id
	// ("c-" and hex).
	const strays = 100
	for i := range strays {
		id := fmt.Sprintf("a-stray-%03d", i)
		require.NoError(t, n.rt.Store().PutMetadata(ctx, id, map[string]string{server.OwnerKey: "alice", "topic": "x"}))
	}
	conv := n.create(t, tokAlice, map[string]string{"topic": "x"})

	for _, tok := range []string{tokAlice, tokOlga} {
		store.n.Store(0)
		var page server.ConversationList
		n.must(t, http.StatusOK, "GET", "/v1/conversations?limit=1&metadata[topic]=x", tok, nil, &page)
		require.LessOrEqual(t, store.n.Load(), int64(20), "one page reads at most its scan budget of rows")
		require.Empty(t, page.Conversations)
		require.True(t, strings.HasPrefix(page.NextCursor, "~"), "a position among rows without a conversation is sealed: %q", page.NextCursor)

		pages, found := 1, []string{}
		for page.NextCursor != "" {
			require.Less(t, pages, strays, "paging gets on")
			cursor := page.NextCursor
			page = server.ConversationList{}
			n.must(t, http.StatusOK, "GET", "/v1/conversations?limit=1&metadata[topic]=x&cursor="+url.QueryEscape(cursor), tok, nil, &page)
			for _, c := range page.Conversations {
				found = append(found, c.ID)
			}
			pages++
		}
		require.Equal(t, []string{conv.ID}, found)
		require.GreaterOrEqual(t, pages, strays/20, "the strays took several pages")
	}
}
