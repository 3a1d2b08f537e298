package memjournal_test

import (
	"context"
	"testing"

	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/stretchr/testify/require"
)

// TestBBNew: "New returns an empty Store"; Options.Audit is what
// AuditEnabled reports (default off); two Stores share nothing.
func TestBBNew(t *testing.T) {
	ctx := context.Background()
	off, on := memjournal.New(memjournal.Options{}), memjournal.New(memjournal.Options{Audit: true})
	require.False(t, off.AuditEnabled())
	require.True(t, on.AuditEnabled())
	convs, next, err := off.ListConversations(ctx, "", 10)
	require.NoError(t, err)
	require.Empty(t, convs)
	require.Empty(t, next)
	_, err = off.Append(ctx, &messages.AppendRequest{ConversationId: "c",
		Events: []*messages.Event{{Body: &messages.Event_UserMsg{UserMsg: &messages.UserMessage{}}}}})
	require.NoError(t, err)
	last, err := on.LastSeq(ctx, "c")
	require.NoError(t, err)
	require.Zero(t, last, "another Store does not see the first's writes")
}
