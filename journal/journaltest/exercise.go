package journaltest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// Exercise puts s through a short life for the tests that check what a
// Store leaves behind once closed (its goroutines): appends, one batch of
// several conversations, reads of logs and of the index of active
// conversations, a human call and its deadline, and calls whose context
// ended before or while they ran. It does not close s.
func Exercise(t testing.TB, s journal.Store) {
	t.Helper()
	ctx := context.Background()
	for i := range 3 {
		conv := fmt.Sprintf("exercise-%d", i)
		appendEvents(t, s, conv, userEvs(1, 3)...)
		appendOK(t, s, &messages.AppendRequest{ConversationId: conv, ExpectedLast: 3,
			Events:    []*messages.Event{assistantEv(4, "", "call-"+conv), toolCallEv(4, "call-"+conv)},
			ToolCalls: []*messages.ToolCallRecord{humanCall(conv, "call-"+conv)},
			Schedule:  []*messages.Deadline{deadline(conv, "call-"+conv, 3600)}, FsmState: awaiting(5, "call-"+conv)})
		require.Len(t, allEvents(t, s, conv), 5)
	}
	var reqs []*messages.AppendRequest
	for i := range 3 {
		reqs = append(reqs, &messages.AppendRequest{ConversationId: fmt.Sprintf("batch-%d", i), Events: userEvs(1, 2)})
	}
	for _, res := range s.AppendBatch(ctx, reqs) {
		require.NoError(t, res.Err)
	}
	ids, _, err := s.ListActiveConversations(ctx, "", 100)
	require.NoError(t, err)
	require.NotEmpty(t, ids)
	_, err = s.Events(ctx, "exercise-0", journal.EventQuery{After: 1, Limit: 2})
	require.NoError(t, err)

	ended, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Events(ended, "exercise-0", journal.EventQuery{}); err != nil {
		require.True(t, errors.Is(err, context.Canceled), "a read whose context ended: %v", err)
	}
	if _, err := s.Append(ended, &messages.AppendRequest{ConversationId: "exercise-0", ExpectedLast: 5, Events: userEvs(6, 1)}); err != nil {
		require.True(t, errors.Is(err, context.Canceled), "an append whose context ended: %v", err)
	}
	// Calls whose context ends while they run: deadlines swept from 0 to
	// 4 ms, so that some land in the middle of the Store's work.
	for i := range 80 {
		racing, cancel := context.WithTimeout(ctx, time.Duration(i)*50*time.Microsecond)
		conv := fmt.Sprintf("exercise-racing-%d", i%4)
		_, _ = s.Append(racing, &messages.AppendRequest{ConversationId: conv, Events: userEvs(i+1, 1)})
		_, _ = s.Events(racing, conv, journal.EventQuery{})
		cancel()
	}
}
