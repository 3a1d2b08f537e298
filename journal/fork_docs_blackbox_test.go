package journal_test

import (
	"context"
	"strings"
	"testing"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
)

// bigFork returns a fork request of n user messages, each as large as
// MaxEventBytes allows (they share one text, so it costs little memory).
func bigFork(t *testing.T, n int) *messages.ForkRequest {
	t.Helper()
	text := strings.Repeat("x", journal.MaxEventBytes-64)
	req := &messages.ForkRequest{ConversationId: "fork",
		Status: messages.ConversationStatus_CONVERSATION_STATUS_IDLE}
	for i := range n {
		ev := userEv(text)
		ev.Seq = uint64(i + 1)
		require.LessOrEqual(t, proto.Size(ev), journal.MaxEventBytes)
		req.Events = append(req.Events, ev)
	}
	return req
}

// TestBBForkBoundedByMaxForkBytes: "ValidateFork ... last, that the whole
// request encodes to at most MaxForkBytes (it may hold more events than
// MaxEventsPerAppend and more bytes than MaxAppendBytes)"; README: a copy
// that encodes to more than journal.MaxForkBytes (512 MiB) is refused
// (journal.ErrInvalid; nothing is written).
func TestBBForkBoundedByMaxForkBytes(t *testing.T) {
	require.Equal(t, 512<<20, journal.MaxForkBytes, "README says 512 MiB")

	// Under the bound: more bytes than one append takes is a valid fork.
	under := bigFork(t, 500)
	require.Greater(t, proto.Size(under), journal.MaxAppendBytes)
	require.LessOrEqual(t, proto.Size(under), journal.MaxForkBytes)
	require.NoError(t, journal.ValidateFork(under))

	// More events than one append takes is a valid fork too.
	many := &messages.ForkRequest{ConversationId: "fork",
		Status: messages.ConversationStatus_CONVERSATION_STATUS_IDLE}
	for i := range journal.MaxEventsPerAppend + 1 {
		ev := userEv("hi")
		ev.Seq = uint64(i + 1)
		many.Events = append(many.Events, ev)
	}
	require.NoError(t, journal.ValidateFork(many))

	// Over it: refused, and a Store writes nothing of it.
	over := bigFork(t, 520)
	require.Greater(t, proto.Size(over), journal.MaxForkBytes)
	require.ErrorIs(t, journal.ValidateFork(over), journal.ErrInvalid)
	ctx := context.Background()
	s := memjournal.New(memjournal.Options{})
	require.ErrorIs(t, s.Fork(ctx, over), journal.ErrInvalid)
	last, err := s.LastSeq(ctx, "fork")
	require.NoError(t, err)
	require.Zero(t, last, "nothing of a refused fork is written")
	_, err = s.Conversation(ctx, "fork")
	require.ErrorIs(t, err, journal.ErrNotFound, "no row of a refused fork")
}
