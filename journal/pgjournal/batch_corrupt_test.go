package pgjournal

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/pgjournal/pgtest"
	"github.com/lazarusrt/lazarus/messages"
)

// TestCorruptRowFailsOnlyItsRequestInABatch: in an AppendBatch, a request
// that meets a corrupt stored record (its conversation row, its last_seq,
// a tool call row, a deadline or a schedule it checks) fails alone with
// journal.ErrCorrupt and writes nothing; the other requests of the batch
// land. The batch's read failed on the first such record, and every
// request of the group commit failed with it.
func TestCorruptRowFailsOnlyItsRequestInABatch(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	s := open(t, dsn, Options{})
	conn, err := pgx.Connect(t.Context(), dsn)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	at := time.Unix(10_000, 0)
	resolve := func(conv string) *messages.AppendRequest {
		return &messages.AppendRequest{ConversationId: conv, Unfenced: true,
			Resolutions: []*messages.ToolResolution{{ToolCallId: conv + "/tc", Status: messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED, At: timestamppb.New(at)}}}
	}
	events := func(conv string) *messages.AppendRequest {
		return &messages.AppendRequest{ConversationId: conv, ExpectedLast: 2, Events: []*messages.Event{userEvent("more")}}
	}
	for name, tc := range map[string]struct {
		damage string // the statement that damages conv's records ($1: conv, $2: its call)
		req    func(conv string) *messages.AppendRequest
	}{
		"conversation row":  {"UPDATE lz_conversations SET row = '\\xff01' WHERE id = $1 AND $2::bytea IS NOT NULL", events},
		"negative last_seq": {"UPDATE lz_conversations SET last_seq = -1 WHERE id = $1 AND $2::bytea IS NOT NULL", events},
		"tool call row":     {"UPDATE lz_tool_calls SET data = '\\xff01' WHERE conv = $1 AND id = $2", resolve},
		"deadline columns": {"UPDATE lz_deadlines SET at_n = 2000000000 WHERE conv = $1 AND call = $2", func(conv string) *messages.AppendRequest {
			req := resolve(conv)
			req.DueBy = timestamppb.New(at.Add(time.Hour))
			return req
		}},
		"schedule row": {"UPDATE lz_schedules SET data = '\\xff01' WHERE conv = $1 AND $2::bytea IS NOT NULL", func(conv string) *messages.AppendRequest {
			req := events(conv)
			req.ScheduleFire = &messages.ScheduleFire{ScheduleId: "s", Occurrence: timestamppb.New(at), Next: timestamppb.New(at.Add(time.Minute))}
			return req
		}},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			bad, good := "bad "+name, "good "+name
			call := bad + "/tc"
			tcall := &messages.ToolCall{Id: call, Name: "ask_human", Arguments: `{}`}
			_, err := s.Append(ctx, &messages.AppendRequest{ConversationId: bad,
				Events: []*messages.Event{
					{Body: &messages.Event_AssistantMsg{AssistantMsg: &messages.AssistantMessage{ToolCalls: []*messages.ToolCall{tcall}}}},
					{Body: &messages.Event_ToolCall{ToolCall: &messages.ToolCallEvent{Call: tcall, Executor: messages.Executor_EXECUTOR_HUMAN}}},
				},
				ToolCalls: []*messages.ToolCallRecord{{Id: call, ConversationId: bad, Name: "ask_human", Executor: messages.Executor_EXECUTOR_HUMAN, Args: `{}`}},
				Schedule:  []*messages.Deadline{{ConversationId: bad, ToolCallId: call, At: timestamppb.New(at)}},
			})
			require.NoError(t, err)
			require.NoError(t, s.PutSchedule(ctx, &messages.Schedule{Id: "s", ConversationId: bad, Next: timestamppb.New(at), Every: durationpb.New(time.Minute),
				Payload: &messages.UserMessage{Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: "tick"}}}}}))
			_, err = s.Append(ctx, &messages.AppendRequest{ConversationId: good, Events: []*messages.Event{userEvent("hi")}})
			require.NoError(t, err)
			tag, err := conn.Exec(ctx, tc.damage, []byte(bad), []byte(call))
			require.NoError(t, err)
			require.EqualValues(t, 1, tag.RowsAffected(), "one record damaged")

			results := s.AppendBatch(ctx, []*messages.AppendRequest{tc.req(bad), {ConversationId: good, ExpectedLast: 1, Events: []*messages.Event{userEvent("again")}}})
			require.Len(t, results, 2)
			require.ErrorIs(t, results[0].Err, journal.ErrCorrupt, "the request that meets the corrupt record")
			require.NoError(t, results[1].Err, "the other request of the batch")
			require.Equal(t, journal.AppendResult{FirstSeq: 2, LastSeq: 2}, results[1])
			last, err := s.LastSeq(ctx, good)
			require.NoError(t, err)
			require.Equal(t, uint64(2), last, "the other request landed")

			var n int
			require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM lz_events WHERE conv = $1", []byte(bad)).Scan(&n))
			require.Equal(t, 2, n, "no event written for the failed request")
			var data []byte
			require.NoError(t, conn.QueryRow(ctx, "SELECT data FROM lz_tool_calls WHERE id = $1", []byte(call)).Scan(&data))
			if name != "tool call row" {
				rec, err := decodeToolCall(data, call, bad)
				require.NoError(t, err)
				require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING, rec.GetStatus(), "the call was not resolved")
			}
			require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM lz_deadlines WHERE conv = $1", []byte(bad)).Scan(&n))
			require.Equal(t, 1, n, "the deadline stays")
		})
	}
}
