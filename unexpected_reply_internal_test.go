package lazarus

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// TestUnexpectedActorReplyIsAnError: the reply check of Wake, Configure
// and End (agentReplyErr) turns a reply of another type than AgentReply
// into an error wrapping errUnexpectedReply, which names the type and
// wraps no sentinel of the API (an internal error), rather than
// panicking; an AgentReply gives its error, or nil. Through callErr, as
// those calls report it, the error keeps its sentinel and claims neither
// an unknown outcome nor a closed runtime. The replies of Send, Rewind,
// Edit, a scheduled wake, a rewind through the cluster (sendReplyOf) and
// a journal write (replyAs) are checked the same way.
func TestUnexpectedActorReplyIsAnError(t *testing.T) {
	for _, res := range []any{&messages.AgentSendReply{Seq: 3}, &messages.JournalWriteReply{}, nil} {
		var err error
		require.NotPanics(t, func() { err = agentReplyErr(res) }, "%T", res)
		require.ErrorIs(t, err, errUnexpectedReply, "%T", res)
		require.Contains(t, err.Error(), "*messages.AgentReply")
		for _, s := range []error{journal.ErrInvalid, journal.ErrNotFound, ErrUnknownOutcome, ErrClosed} {
			require.NotErrorIs(t, err, s, "%T", res)
		}
	}
	require.NoError(t, agentReplyErr(&messages.AgentReply{}))
	require.ErrorIs(t, agentReplyErr(&messages.AgentReply{Error: journal.ErrorToProto(journal.ErrEnded)}), journal.ErrEnded)

	for _, res := range []any{&messages.AgentReply{}, &messages.JournalWriteReply{}, nil} {
		var seq uint64
		var err error
		require.NotPanics(t, func() { seq, err = sendReplyOf(res) }, "%T", res)
		require.ErrorIs(t, err, errUnexpectedReply, "%T", res)
		require.Contains(t, err.Error(), "*messages.AgentSendReply")
		require.Zero(t, seq)
	}
	seq, err := sendReplyOf(&messages.AgentSendReply{Seq: 7})
	require.NoError(t, err)
	require.Equal(t, uint64(7), seq)
	seq, err = sendReplyOf(&messages.AgentSendReply{Seq: 7, Error: journal.ErrorToProto(journal.ErrEnded)})
	require.ErrorIs(t, err, journal.ErrEnded)
	require.Equal(t, uint64(7), seq)
	for _, res := range []any{&messages.AgentSendReply{}, nil} {
		var err error
		require.NotPanics(t, func() { _, err = replyAs[*messages.JournalWriteReply](res) }, "%T", res)
		require.ErrorIs(t, err, errUnexpectedReply, "%T", res)
		require.Contains(t, err.Error(), "*messages.JournalWriteReply")
	}
	w, err := replyAs[*messages.JournalWriteReply](&messages.JournalWriteReply{RequestId: 2})
	require.NoError(t, err)
	require.Equal(t, uint64(2), w.GetRequestId())

	rt, err := Open(Options{Model: agent.ModelFunc(func(context.Context, agent.Turn, func(string)) (*messages.AssistantMessage, error) {
		return &messages.AssistantMessage{}, nil
	}), NoResume: true})
	require.NoError(t, err)
	defer rt.Close()
	err = rt.callErr(`lazarus: end "c"`, agentReplyErr(&messages.AgentSendReply{}))
	require.ErrorIs(t, err, errUnexpectedReply)
	require.NotErrorIs(t, err, ErrUnknownOutcome)
	require.NotErrorIs(t, err, ErrClosed)
	require.Contains(t, err.Error(), `lazarus: end "c"`)
}
