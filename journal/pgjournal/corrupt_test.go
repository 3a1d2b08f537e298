package pgjournal

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/pgjournal/pgtest"
	"github.com/lazarusrt/lazarus/messages"
)

// TestCorruptRecords: a record whose bytes decode but could not have been
// written (an event without a body or of another seq, a summary of another
// span, a row naming other ids than its row, a deadline at an invalid time,
// a file checkpoint of another path) is journal.ErrCorrupt on the reads
// that meet it, as in pebblejournal, where it was handed to the caller as
// is (an event without a body reached the working set and the model).
func TestCorruptRecords(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	s := open(t, dsn, Options{Audit: true})
	conn, err := pgx.Connect(t.Context(), dsn)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	ctx := t.Context()
	marshal := func(m proto.Message) []byte {
		b, err := proto.Marshal(m)
		require.NoError(t, err)
		return b
	}
	// An op reads the damaged record; a write among them runs only once
	// the record is damaged.
	type op struct {
		write bool
		run   func(conv, call string) error
	}
	var (
		events = op{run: func(conv, _ string) error {
			_, err := s.Events(ctx, conv, journal.EventQuery{})
			return err
		}}
		load = op{run: func(conv, _ string) error {
			_, _, err := s.LoadSince(ctx, conv)
			return err
		}}
		latest = op{run: func(conv, _ string) error {
			_, err := s.LatestSummary(ctx, conv)
			return err
		}}
		before = op{run: func(conv, _ string) error {
			_, err := s.SummaryBefore(ctx, conv, 3)
			return err
		}}
		toolCall = op{run: func(_, call string) error {
			_, err := s.ToolCall(ctx, call)
			return err
		}}
		pending = op{run: func(conv, _ string) error {
			_, err := s.PendingToolCalls(ctx, conv)
			return err
		}}
		listPending = op{run: func(_, _ string) error {
			_, _, err := s.ListPendingToolCalls(ctx, "", 1000)
			return err
		}}
		resolve = op{write: true, run: func(_, call string) error {
			_, err := s.ResolveToolCall(ctx, call, messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED, nil, time.Now())
			return err
		}}
		resolveInAppend = op{write: true, run: func(conv, call string) error {
			_, err := s.Append(ctx, &messages.AppendRequest{ConversationId: conv, ExpectedLast: 2, Events: []*messages.Event{userEvent("r")},
				Resolutions: []*messages.ToolResolution{{ToolCallId: call, Status: messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED}}})
			return err
		}}
		conversation = op{run: func(conv, _ string) error {
			_, err := s.Conversation(ctx, conv)
			return err
		}}
		putConversation = op{write: true, run: func(conv, _ string) error {
			return s.PutConversation(ctx, journal.ConversationUpdate{ID: conv, Settings: map[string]string{"k": "v"}})
		}}
		appendTo = op{write: true, run: func(conv, _ string) error {
			_, err := s.Append(ctx, &messages.AppendRequest{ConversationId: conv, ExpectedLast: 2, Events: []*messages.Event{userEvent("a")}})
			return err
		}}
		list = op{run: func(_, _ string) error {
			_, _, err := s.ListConversations(ctx, "", 1000)
			return err
		}}
		deadlines = op{run: func(_, _ string) error {
			return s.Deadlines(ctx, time.Time{}, func(*messages.Deadline) error { return nil })
		}}
		modelCalls = op{run: func(conv, _ string) error {
			_, err := s.ModelCalls(ctx, conv)
			return err
		}}
		checkpoints = op{run: func(conv, _ string) error {
			_, err := s.FileCheckpoints(ctx, conv, 0)
			return err
		}}
	)
	for _, c := range []struct {
		name  string
		sql   string // sets data of the case's row: $1 the bytes, $2 the conversation
		value func(conv, call string) []byte
		ops   []op
	}{
		{"event without a body", "UPDATE lz_events SET data = $1 WHERE conv = $2 AND seq = 2",
			func(string, string) []byte { return marshal(&messages.Event{Seq: 2}) }, []op{events, load}},
		{"event of another seq", "UPDATE lz_events SET data = $1 WHERE conv = $2 AND seq = 2",
			func(string, string) []byte { return marshal(&messages.Event{Seq: 7, Body: userEvent("x").GetBody()}) }, []op{events, load}},
		{"summary of another span", "UPDATE lz_summaries SET data = $1 WHERE conv = $2",
			func(string, string) []byte { return marshal(&messages.Summary{FromSeq: 1, ToSeq: 2}) }, []op{load, latest, before}},
		{"summary of a reversed span", "UPDATE lz_summaries SET data = $1 WHERE conv = $2",
			func(string, string) []byte { return marshal(&messages.Summary{FromSeq: 2, ToSeq: 1}) }, []op{load, latest, before}},
		{"tool call of another id", "UPDATE lz_tool_calls SET data = $1 WHERE conv = $2",
			func(conv, _ string) []byte {
				return marshal(&messages.ToolCallRecord{Id: "other", ConversationId: conv, Status: messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING})
			}, []op{toolCall, pending, listPending, resolve, resolveInAppend}},
		{"tool call of another conversation", "UPDATE lz_tool_calls SET data = $1 WHERE conv = $2",
			func(_, call string) []byte {
				return marshal(&messages.ToolCallRecord{Id: call, ConversationId: "other", Status: messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING})
			}, []op{toolCall, pending, listPending, resolve, resolveInAppend}},
		{"pending row of an answered call", "UPDATE lz_tool_calls SET data = $1 WHERE conv = $2",
			func(conv, call string) []byte {
				return marshal(&messages.ToolCallRecord{Id: call, ConversationId: conv, Status: messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED})
			}, []op{pending, listPending}},
		{"conversation row of another id", "UPDATE lz_conversations SET row = $1 WHERE id = $2",
			func(string, string) []byte { return marshal(&messages.Conversation{Id: "other"}) }, []op{conversation, putConversation, appendTo, list}},
		{"deadline of another call", "UPDATE lz_deadlines SET data = $1 WHERE conv = $2",
			func(conv, _ string) []byte {
				return marshal(&messages.Deadline{ConversationId: conv, ToolCallId: "other", At: timestamppb.New(time.Unix(100, 0))})
			}, []op{deadlines}},
		{"deadline at an invalid time", "UPDATE lz_deadlines SET data = $1 WHERE conv = $2",
			func(conv, call string) []byte {
				return marshal(&messages.Deadline{ConversationId: conv, ToolCallId: call, At: &timestamppb.Timestamp{Nanos: -1}})
			}, []op{deadlines}},
		{"model call of another turn", "UPDATE lz_audit SET data = $1 WHERE conv = $2",
			func(conv, _ string) []byte { return marshal(&messages.ModelCall{ConversationId: conv, TurnRef: 9}) }, []op{modelCalls}},
		{"file checkpoint of another path", "UPDATE lz_file_checkpoints SET data = $1 WHERE conv = $2",
			func(conv, call string) []byte {
				return marshal(&messages.FileCheckpoint{ConversationId: conv, ToolCallId: call, Seq: 2, Path: "b.txt", Absent: true})
			}, []op{checkpoints}},
		{"file checkpoint of a path outside the root", "UPDATE lz_file_checkpoints SET path = '../a.txt', data = $1 WHERE conv = $2",
			func(conv, call string) []byte {
				return marshal(&messages.FileCheckpoint{ConversationId: conv, ToolCallId: call, Seq: 2, Path: "../a.txt", Absent: true})
			}, []op{checkpoints}},
	} {
		t.Run(c.name, func(t *testing.T) {
			conv, call := "c "+c.name, "t "+c.name
			_, err := s.Append(ctx, &messages.AppendRequest{ConversationId: conv, Events: []*messages.Event{userEvent("hi"), userEvent("again")},
				ToolCalls: []*messages.ToolCallRecord{{Id: call, ConversationId: conv, Executor: messages.Executor_EXECUTOR_HUMAN}},
				Schedule:  []*messages.Deadline{{ConversationId: conv, ToolCallId: call, At: timestamppb.New(time.Unix(100, 0))}}})
			require.NoError(t, err)
			require.NoError(t, s.PutSummary(ctx, conv, &messages.Summary{FromSeq: 1, ToSeq: 1}))
			require.NoError(t, s.PutModelCall(ctx, &messages.ModelCall{ConversationId: conv, TurnRef: 1}))
			_, err = s.PutFileCheckpoint(ctx, &messages.FileCheckpoint{ConversationId: conv, ToolCallId: call, Seq: 2, Path: "a.txt", Absent: true})
			require.NoError(t, err)
			for _, o := range c.ops {
				if !o.write {
					require.NoError(t, o.run(conv, call), "before the damage")
				}
			}

			tag, err := conn.Exec(ctx, c.sql, c.value(conv, call), []byte(conv))
			require.NoError(t, err)
			require.Equal(t, int64(1), tag.RowsAffected())
			for i, o := range c.ops {
				require.ErrorIs(t, o.run(conv, call), journal.ErrCorrupt, "op %d", i)
			}
			last, err := s.LastSeq(ctx, conv)
			require.NoError(t, err)
			require.Equal(t, uint64(2), last, "nothing written")
			_, err = conn.Exec(ctx, "DELETE FROM lz_deadlines WHERE conv = $1", []byte(conv)) // the next case's Deadlines
			require.NoError(t, err)
			_, err = conn.Exec(ctx, "DELETE FROM lz_tool_calls WHERE conv = $1", []byte(conv)) // and ListPendingToolCalls
			require.NoError(t, err)
			_, err = conn.Exec(ctx, "DELETE FROM lz_conversations WHERE id = $1", []byte(conv)) // and ListConversations
			require.NoError(t, err)
		})
	}
}
