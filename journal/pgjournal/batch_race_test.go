package pgjournal

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/pgjournal/pgtest"
	"github.com/lazarusrt/lazarus/messages"
)

// TestCallIDTakenMeanwhileFailsOnlyItsRequest: an AppendBatch whose request
// upserts a new tool call id that another writer's transaction inserts and
// commits while the batch writes (the batch's insert then meets a unique
// violation) fails that request alone with ErrConflict, as if it had seen
// the row; the other requests of the batch land. The whole batch failed
// with ErrConflict, which told every other conversation of the group
// commit that its fence was lost. The rerun comes after a short wait; a
// ctx that ends during it fails every request with its error, nothing
// written.
func TestCallIDTakenMeanwhileFailsOnlyItsRequest(t *testing.T) {
	t.Run("rerun", func(t *testing.T) { callIDTakenMeanwhile(t, false) })
	t.Run("ctx ends in the wait", func(t *testing.T) { callIDTakenMeanwhile(t, true) })
}

func callIDTakenMeanwhile(t *testing.T, endInWait bool) {
	dsn := pgtest.NewDatabase(t)
	s := open(t, dsn, Options{})
	ctx := t.Context()
	bctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var waits []time.Duration
	s.pause = func(pctx context.Context, d time.Duration) error {
		waits = append(waits, d)
		if endInWait {
			cancel()
			return sleepCtx(pctx, time.Minute)
		}
		return nil
	}
	_, err := s.Append(ctx, &messages.AppendRequest{ConversationId: "b", Events: []*messages.Event{userEvent("hi")}})
	require.NoError(t, err)

	other, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer other.Close(context.Background())
	tx, err := other.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	const call = "t"
	rec := &messages.ToolCallRecord{Id: call, ConversationId: "other", Name: "ask_human", Executor: messages.Executor_EXECUTOR_HUMAN, Args: `{}`,
		Status: messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING}
	data, err := proto.Marshal(rec)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "INSERT INTO lz_tool_calls (id, conv, status, data) VALUES ($1, $2, $3, $4)", []byte(call), []byte("other"), int32(rec.GetStatus()), data)
	require.NoError(t, err)

	tcall := &messages.ToolCall{Id: call, Name: "ask_human", Arguments: `{}`}
	reqs := []*messages.AppendRequest{
		{ConversationId: "a", Events: []*messages.Event{
			{Body: &messages.Event_AssistantMsg{AssistantMsg: &messages.AssistantMessage{ToolCalls: []*messages.ToolCall{tcall}}}},
			{Body: &messages.Event_ToolCall{ToolCall: &messages.ToolCallEvent{Call: tcall, Executor: messages.Executor_EXECUTOR_HUMAN}}},
		}, ToolCalls: []*messages.ToolCallRecord{{Id: call, ConversationId: "a", Name: "ask_human", Executor: messages.Executor_EXECUTOR_HUMAN, Args: `{}`}}},
		{ConversationId: "b", ExpectedLast: 1, Events: []*messages.Event{userEvent("again")}},
	}
	done := make(chan []journal.AppendResult, 1)
	go func() { done <- s.AppendBatch(bctx, reqs) }()
	// The batch's insert of the id waits for the other transaction.
	watch, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer watch.Close(context.Background())
	require.Eventually(t, func() bool {
		var n int
		err := watch.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'").Scan(&n)
		return err == nil && n > 0
	}, 10*time.Second, 5*time.Millisecond, "the batch waits for the other writer")
	require.NoError(t, tx.Commit(ctx))

	var results []journal.AppendResult
	select {
	case results = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("AppendBatch did not return")
	}
	require.Len(t, results, 2)
	require.Len(t, waits, 1, "one wait, between the lost run and the rerun")
	require.Positive(t, waits[0])
	require.LessOrEqual(t, waits[0], maxRerunWait)
	if endInWait {
		for i, r := range results {
			require.ErrorIs(t, r.Err, context.Canceled, "request %d", i)
			require.Zero(t, reqs[i].GetEvents()[0].GetSeq(), "request %d's events keep the seqs they came with", i)
		}
		for _, conv := range []string{"a", "b"} {
			last, err := s.LastSeq(ctx, conv)
			require.NoError(t, err)
			require.Equal(t, map[string]uint64{"a": 0, "b": 1}[conv], last, "nothing written for %s", conv)
		}
		return
	}
	require.ErrorIs(t, results[0].Err, journal.ErrConflict, "the request whose call id was taken")
	require.NoError(t, results[1].Err, "the other request of the batch")
	require.Equal(t, journal.AppendResult{FirstSeq: 2, LastSeq: 2}, results[1])
	require.Equal(t, uint64(2), reqs[1].GetEvents()[0].GetSeq(), "the landed request's event has its seq")
	require.Zero(t, reqs[0].GetEvents()[0].GetSeq(), "the failed request's events keep the seqs they came with")
	last, err := s.LastSeq(ctx, "b")
	require.NoError(t, err)
	require.Equal(t, uint64(2), last, "the other request landed")
	last, err = s.LastSeq(ctx, "a")
	require.NoError(t, err)
	require.Zero(t, last, "nothing written for the failed request")
	got, err := s.ToolCall(ctx, call)
	require.NoError(t, err)
	require.Equal(t, "other", got.GetConversationId(), "the call stays the other writer's")
}
