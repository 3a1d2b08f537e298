package actors

import (
	"context"
	"log/slog"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/snapshot"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

// interleaved is a Store on which another writer commits once, right after
// the revival's first read (of the row or of the log), as a member that
// still believes it owns the conversation may.
type interleaved struct {
	journal.Store
	once  sync.Once
	write func()
}

func (s *interleaved) Conversation(ctx context.Context, id string) (*messages.Conversation, error) {
	defer s.once.Do(s.write)
	return s.Store.Conversation(ctx, id)
}

func (s *interleaved) LoadSince(ctx context.Context, id string) (*messages.Summary, []*messages.Event, error) {
	defer s.once.Do(s.write)
	return s.Store.LoadSince(ctx, id)
}

// TestRevivalReadsNoRowOlderThanItsLog: another writer's answer landing
// between the revival's reads (a member that still believed it owned the
// conversation) must not leave the row IDLE with a turn owed once the
// revived activation writes its next send: the activation does not state
// ACTIVE over a row it read ACTIVE, so a row read before that answer over
// a log read after it would be left IDLE, and no resume scan would find
// the turn. The send's write is fenced (the log moved past what the
// activation read), or it leaves the row ACTIVE.
func TestRevivalReadsNoRowOlderThanItsLog(t *testing.T) {
	ctx := context.Background()
	mem := memjournal.New(memjournal.Options{})
	t.Cleanup(func() { _ = mem.Close() })
	res, err := mem.Append(ctx, &messages.AppendRequest{ConversationId: "c", Events: []*messages.Event{user("r1")},
		Status: messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE})
	require.NoError(t, err)
	store := &interleaved{Store: mem, write: func() {
		_, err := mem.Append(ctx, &messages.AppendRequest{ConversationId: "c", ExpectedLast: res.LastSeq, Events: []*messages.Event{answer()},
			Status: messages.ConversationStatus_CONVERSATION_STATUS_IDLE})
		require.NoError(t, err)
	}}

	l := load(ctx, store, "c")
	require.NoError(t, l.err)
	l.scope = agent.SystemScope
	c := newCore(coreConfig{ID: "c", Policy: snapshot.Policy{}.WithDefaults(), Retry: RetryPolicy{}.WithDefaults()},
		slog.New(slog.DiscardHandler))
	c.step(t0, l)
	var req *messages.AppendRequest
	for _, e := range c.step(t0, send("r2")) {
		if w, isWrite := e.(effWrite); isWrite && req == nil && len(w.req.GetEvents()) > 0 && w.req.GetEvents()[0].GetUserMsg() != nil {
			req = w.req
		}
	}
	require.NotNil(t, req, "the send is written")
	if _, err := mem.Append(ctx, req); err != nil {
		require.ErrorIs(t, err, journal.ErrConflict, "the send's write")
		return
	}
	row, err := mem.Conversation(ctx, "c")
	require.NoError(t, err)
	require.Equal(t, messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE, row.GetStatus(), "the row after the send, a turn owed")
}
