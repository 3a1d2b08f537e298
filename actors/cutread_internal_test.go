package actors

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/snapshot"
)

// eventReads is a Store that records the EventQuery and the bytes
// (proto.Size summed) of each Events read.
type eventReads struct {
	journal.Store
	mu      sync.Mutex
	queries []journal.EventQuery
	sizes   []int
}

func (s *eventReads) Events(ctx context.Context, conv string, q journal.EventQuery) ([]*messages.Event, error) {
	evs, err := s.Store.Events(ctx, conv, q)
	n := 0
	for _, ev := range evs {
		n += proto.Size(ev)
	}
	s.mu.Lock()
	s.queries, s.sizes = append(s.queries, q), append(s.sizes, n)
	s.mu.Unlock()
	return evs, err
}

func (s *eventReads) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queries, s.sizes = nil, nil
}

// TestSummaryCutsACallReadsTheRestInPages: SummaryCutsACall reads the log
// after the events it is given a bounded page at a time (by bytes and by
// seqs, one event at least), never the rest whole, and decides as the
// working set of the whole rest does (WorkingSet.CutsACall), for a summary
// ending at every seq and with some of the events after it given.
func TestSummaryCutsACallReadsTheRestInPages(t *testing.T) {
	ctx := context.Background()
	store := &eventReads{Store: memjournal.New(memjournal.Options{})}
	t.Cleanup(func() { _ = store.Close() })
	text := func(s string) []*messages.ContentPart {
		return []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: s}}}
	}
	user := func(s string) *messages.Event {
		return &messages.Event{Body: &messages.Event_UserMsg{UserMsg: &messages.UserMessage{Content: text(s)}}}
	}
	issue := func(id string) *messages.Event {
		return &messages.Event{Body: &messages.Event_AssistantMsg{AssistantMsg: &messages.AssistantMessage{
			Content: text("calling"), ToolCalls: []*messages.ToolCall{{Id: id, Name: "ask_human", Arguments: `{}`}}}}}
	}
	call := func(id string) *messages.Event {
		return &messages.Event{Body: &messages.Event_ToolCall{ToolCall: &messages.ToolCallEvent{
			Call: &messages.ToolCall{Id: id, Name: "ask_human", Arguments: `{}`}, Executor: messages.Executor_EXECUTOR_HUMAN}}}
	}
	result := func(id string) *messages.Event {
		return &messages.Event{Body: &messages.Event_ToolResult{ToolResult: &messages.ToolResultEvent{
			ToolCallId: id, Name: "ask_human", Outcome: &messages.ToolOutcome{Outcome: &messages.ToolOutcome_Content{Content: "yes"}}}}}
	}
	// a: issued at 2, its tool_call at 3, answered at 4; 20 messages of
	// about 1 KB; b: issued at 25, its tool_call at 26, pending (owed).
	evs := []*messages.Event{user("hi"), issue("a"), call("a"), result("a")}
	for range 20 {
		evs = append(evs, user(strings.Repeat("x", 1000)))
	}
	evs = append(evs, issue("b"), call("b"))
	res, err := store.Append(ctx, &messages.AppendRequest{ConversationId: "c", Events: evs,
		ToolCalls: []*messages.ToolCallRecord{
			{Id: "a", ConversationId: "c", Name: "ask_human", Executor: messages.Executor_EXECUTOR_HUMAN, Status: messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED},
			{Id: "b", ConversationId: "c", Name: "ask_human", Executor: messages.Executor_EXECUTOR_HUMAN},
		}})
	require.NoError(t, err)
	require.NoError(t, res.Err)
	all, err := store.Store.Events(ctx, "c", journal.EventQuery{})
	require.NoError(t, err)
	require.Len(t, all, 26)
	conv, err := store.Conversation(ctx, "c")
	require.NoError(t, err)
	owed, err := owedCalls(ctx, store, "c", conv)
	require.NoError(t, err)
	require.Equal(t, map[string]bool{"b": true}, owed)

	const pageBytes = 2500
	cuts := 0
	for to := uint64(1); to <= 26; to++ {
		sum := &messages.Summary{FromSeq: 1, ToSeq: to, Content: "put by hand"}
		whole, err := snapshot.Rebuild(sum, all[to:])
		require.NoError(t, err)
		want := whole.CutsACall(owed)
		if want {
			cuts++
		}
		for _, given := range []int{0, 2} {
			given = min(given, len(all)-int(to))
			store.reset()
			got, err := summaryCutsACall(ctx, store, "c", sum, all[to:int(to)+given], pageBytes)
			require.NoError(t, err)
			require.Equal(t, want, got, "a summary ending at seq %d, %d events given", to, given)
			store.mu.Lock()
			require.NotEmpty(t, store.queries)
			for i, q := range store.queries {
				require.Equal(t, pageBytes, q.MaxBytes, "read %d is bounded", i)
				require.LessOrEqual(t, q.Before-q.After, uint64(cutReadPage+1), "read %d is bounded", i)
				require.LessOrEqual(t, store.sizes[i], pageBytes, "read %d stopped at the bound", i)
			}
			store.mu.Unlock()
		}
	}
	require.Equal(t, 4, cuts, "a summary ending inside a call (at 2, 3, 25 and 26) cuts it, elsewhere not")

	store.reset()
	_, err = SummaryCutsACall(ctx, store, "c", &messages.Summary{FromSeq: 1, ToSeq: 1}, nil)
	require.NoError(t, err)
	store.mu.Lock()
	require.Equal(t, []journal.EventQuery{{After: 1, Before: cutReadPage + 2, MaxBytes: cutReadBytes}, {After: 26, Before: 26 + cutReadPage + 1, MaxBytes: cutReadBytes}},
		store.queries, "SummaryCutsACall reads within cutReadBytes")
	store.mu.Unlock()
}
