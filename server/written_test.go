package server_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/server"
)

// downAfterWriteStore is a Store that, once armed, becomes unavailable
// for the reads of a conversation's row right after a write to it landed:
// the conversation's row cannot be read again after the write.
type downAfterWriteStore struct {
	journal.Store
	armed atomic.Bool
	mu    sync.Mutex
	down  map[string]bool
}

func (s *downAfterWriteStore) wrote(id string, err error) {
	if err == nil && s.armed.Load() {
		s.mu.Lock()
		s.down[id] = true
		s.mu.Unlock()
	}
}

func (s *downAfterWriteStore) Append(ctx context.Context, req *messages.AppendRequest) (journal.AppendResult, error) {
	res, err := s.Store.Append(ctx, req)
	s.wrote(req.GetConversationId(), err)
	return res, err
}

func (s *downAfterWriteStore) AppendBatch(ctx context.Context, reqs []*messages.AppendRequest) []journal.AppendResult {
	res := s.Store.AppendBatch(ctx, reqs)
	for i, r := range res {
		s.wrote(reqs[i].GetConversationId(), r.Err)
	}
	return res
}

func (s *downAfterWriteStore) PutConversation(ctx context.Context, u journal.ConversationUpdate) error {
	err := s.Store.PutConversation(ctx, u)
	s.wrote(u.ID, err)
	return err
}

func (s *downAfterWriteStore) Fork(ctx context.Context, req *messages.ForkRequest) error {
	err := s.Store.Fork(ctx, req)
	s.wrote(req.GetConversationId(), err)
	return err
}

func (s *downAfterWriteStore) Conversation(ctx context.Context, id string) (*messages.Conversation, error) {
	s.mu.Lock()
	down := s.down[id]
	s.mu.Unlock()
	if down {
		return nil, fmt.Errorf("pgjournal: conversation: %w: connection reset", journal.ErrUnavailable)
	}
	return s.Store.Conversation(ctx, id)
}

// TestWriteThatLandedIsNotAnsweredAsAFailure: a create, fork, rewind or
// end whose write landed, but whose conversation the Store cannot read
// again right after, gets its success status (a 503 would say nothing was
// written, and a retry would fork or rewind again), with the id, the
// metadata and the status the write set; each wrote once.
func TestWriteThatLandedIsNotAnsweredAsAFailure(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	st := &downAfterWriteStore{Store: memjournal.New(memjournal.Options{}), down: map[string]bool{}}
	n := startNodeIn(t, "", model, server.Options{}, func(o *lazarus.Options) { o.Store = st })
	src := n.create(t, tokAlice, map[string]string{"topic": "t"})
	model.Push(src.ID, scripted.Text("hello"))
	end, err := n.rt.SendAndWait(ctx, src.ID, "hi", agent.ScopeOf(agent.Identity{UserID: "alice"}))
	require.NoError(t, err)
	require.Equal(t, lazarus.TurnAnswered, end.Outcome)

	// do does a write with the Store down for the conversation it writes,
	// from the write on.
	do := func(want int, method, path string, body any) server.Conversation {
		t.Helper()
		st.armed.Store(true)
		defer func() {
			st.armed.Store(false)
			st.mu.Lock()
			clear(st.down)
			st.mu.Unlock()
		}()
		var got server.Conversation
		n.must(t, want, method, path, tokAlice, body, &got)
		require.Nil(t, got.Created, "%s %s: answered from what the write made known, not read again", method, path)
		return got
	}

	created := do(http.StatusCreated, "POST", "/v1/conversations", server.CreateConversation{Metadata: map[string]string{"k": "v"}})
	require.NotEmpty(t, created.ID)
	require.Equal(t, "idle", created.Status)
	require.Equal(t, map[string]string{"k": "v", server.OwnerKey: "alice"}, created.Metadata)
	n.must(t, http.StatusOK, "GET", "/v1/conversations/"+created.ID, tokAlice, nil, nil)

	forked := do(http.StatusCreated, "POST", "/v1/conversations/"+src.ID+"/fork",
		server.ForkConversation{AtSeq: end.Seq, Metadata: map[string]string{"k": "fork"}})
	require.NotEmpty(t, forked.ID)
	require.Equal(t, map[string]string{"topic": "t", "k": "fork", server.OwnerKey: "alice"}, forked.Metadata)
	n.must(t, http.StatusOK, "GET", "/v1/conversations/"+forked.ID, tokAlice, nil, nil)

	zero := uint64(0)
	rewound := do(http.StatusOK, "POST", "/v1/conversations/"+src.ID+"/rewind", server.RewindConversation{ToSeq: &zero})
	require.Equal(t, src.ID, rewound.ID)
	require.Equal(t, "unspecified", rewound.Status)

	ended := do(http.StatusOK, "POST", "/v1/conversations/"+src.ID+"/end", nil)
	require.Equal(t, src.ID, ended.ID)
	require.Equal(t, "ended", ended.Status)

	var list server.ConversationList
	n.must(t, http.StatusOK, "GET", "/v1/conversations", tokAlice, nil, &list)
	require.Len(t, list.Conversations, 3, "one create, one fork")
}
