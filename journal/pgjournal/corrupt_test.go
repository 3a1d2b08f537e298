package pgjournal

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protowire"
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
	type corruptCase struct {
		name  string
		sql   string // sets data of the case's row: $1 the bytes, $2 the conversation
		value func(conv, call string) []byte
		ops   []op
	}
	cases := []corruptCase{
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
	}
	// Bytes that do not decode, and records over the limits (written before
	// a bound existed, or by another writer), are journal.ErrCorrupt too:
	// an oversized record is refused before it is decoded.
	undecodable := func(string, string) []byte { return []byte{0xff, 0xff, 0xff} }
	for _, c := range []struct {
		record, sql string
		value       func(conv, call string) proto.Message
		ops         []op
	}{
		{"event", "UPDATE lz_events SET data = $1 WHERE conv = $2 AND seq = 2",
			func(string, string) proto.Message { return &messages.Event{Seq: 2, Body: userEvent("x").GetBody()} }, []op{events, load}},
		{"summary", "UPDATE lz_summaries SET data = $1 WHERE conv = $2",
			func(string, string) proto.Message { return &messages.Summary{FromSeq: 1, ToSeq: 1} }, []op{load, latest, before}},
		{"tool call row", "UPDATE lz_tool_calls SET data = $1 WHERE conv = $2",
			func(conv, call string) proto.Message {
				return &messages.ToolCallRecord{Id: call, ConversationId: conv, Executor: messages.Executor_EXECUTOR_HUMAN, Status: messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING}
			}, []op{toolCall, pending, listPending, resolve, resolveInAppend}},
		{"conversation row", "UPDATE lz_conversations SET row = $1 WHERE id = $2",
			func(conv, _ string) proto.Message { return &messages.Conversation{Id: conv} }, []op{conversation, putConversation, appendTo, list}},
		{"deadline", "UPDATE lz_deadlines SET data = $1 WHERE conv = $2",
			func(conv, call string) proto.Message {
				return &messages.Deadline{ConversationId: conv, ToolCallId: call, At: timestamppb.New(time.Unix(100, 0))}
			}, []op{deadlines}},
		{"model call", "UPDATE lz_audit SET data = $1 WHERE conv = $2",
			func(conv, _ string) proto.Message { return &messages.ModelCall{ConversationId: conv, TurnRef: 1} }, []op{modelCalls}},
		{"file checkpoint", "UPDATE lz_file_checkpoints SET data = $1 WHERE conv = $2",
			func(conv, call string) proto.Message {
				return &messages.FileCheckpoint{ConversationId: conv, ToolCallId: call, Seq: 2, Path: "a.txt", Absent: true}
			}, []op{checkpoints}},
	} {
		oversized := func(conv, call string) []byte {
			// The record as its row holds it, with an unknown field that
			// takes it past the limit: it decodes, and only its size is
			// wrong.
			b := marshal(c.value(conv, call))
			b = protowire.AppendTag(b, 1000, protowire.BytesType)
			return protowire.AppendBytes(b, make([]byte, maxStored(c.value(conv, call))))
		}
		cases = append(cases,
			corruptCase{c.record + " that does not decode", c.sql, undecodable, c.ops},
			corruptCase{c.record + " over its limit", c.sql, oversized, c.ops})
	}
	for _, c := range cases {
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

// TestGapInsideTheLog: an event row missing from a log (removed under the
// store) is a gap for every read that spans it: journal.ErrCorrupt naming
// the row found where the missing seq should be, as in pebblejournal,
// where the reads returned a history with a hole. A lost first event is a
// gap too, unless the log is a fork's, which starts after the summary it
// copied; reads that do not span the hole still work.
func TestGapInsideTheLog(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	s := open(t, dsn, Options{})
	conn, err := pgx.Connect(t.Context(), dsn)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	ctx := t.Context()
	appendN := func(conv string, n int) {
		t.Helper()
		evs := make([]*messages.Event, n)
		for i := range evs {
			evs[i] = userEvent(fmt.Sprint(i + 1))
		}
		_, err := s.Append(ctx, &messages.AppendRequest{ConversationId: conv, Events: evs})
		require.NoError(t, err)
	}
	remove := func(conv string, seq int64) {
		t.Helper()
		tag, err := conn.Exec(ctx, "DELETE FROM lz_events WHERE conv = $1 AND seq = $2", []byte(conv), seq)
		require.NoError(t, err)
		require.Equal(t, int64(1), tag.RowsAffected())
	}
	requireGap := func(err error, row string) {
		t.Helper()
		require.ErrorIs(t, err, journal.ErrCorrupt)
		require.Contains(t, err.Error(), "the log has a gap: row "+row)
	}

	appendN("c", 100)
	require.NoError(t, s.PutSummary(ctx, "c", &messages.Summary{FromSeq: 1, ToSeq: 40, Content: "s"}))
	remove("c", 50)
	_, err = s.Events(ctx, "c", journal.EventQuery{})
	requireGap(err, `"c"/51 where seq 50 should be`)
	_, err = s.Events(ctx, "c", journal.EventQuery{After: 45, Before: 60})
	requireGap(err, `"c"/51`)
	_, err = s.Events(ctx, "c", journal.EventQuery{After: 49, Before: 60})
	requireGap(err, `"c"/51 where seq 50 should be`)
	_, err = s.Events(ctx, "c", journal.EventQuery{Before: 60, Limit: 15})
	requireGap(err, `"c"/51`)
	_, _, err = s.LoadSince(ctx, "c")
	requireGap(err, `"c"/51`)
	evs, err := s.Events(ctx, "c", journal.EventQuery{After: 50})
	require.NoError(t, err)
	require.Len(t, evs, 50)
	evs, err = s.Events(ctx, "c", journal.EventQuery{Before: 50})
	require.NoError(t, err)
	require.Len(t, evs, 49)
	evs, err = s.Events(ctx, "c", journal.EventQuery{Before: 60, Limit: 9})
	require.NoError(t, err)
	require.Len(t, evs, 9)

	appendN("d", 3)
	remove("d", 1)
	_, err = s.Events(ctx, "d", journal.EventQuery{})
	requireGap(err, `"d"/2 where seq 1 should be`)
	_, _, err = s.LoadSince(ctx, "d")
	requireGap(err, `"d"/2 where seq 1 should be`)

	// A fork's log starts after its summary; without that summary it is
	// a gap.
	appendN("src", 6)
	sum := &messages.Summary{FromSeq: 1, ToSeq: 4, Content: "four"}
	require.NoError(t, s.PutSummary(ctx, "src", sum))
	evs, err = s.Events(ctx, "src", journal.EventQuery{After: 4})
	require.NoError(t, err)
	require.NoError(t, s.Fork(ctx, &messages.ForkRequest{ConversationId: "dst", Summary: sum, Events: evs,
		Status: messages.ConversationStatus_CONVERSATION_STATUS_IDLE, Origin: &messages.ForkOrigin{ConversationId: "src", Seq: 6}}))
	evs, err = s.Events(ctx, "dst", journal.EventQuery{})
	require.NoError(t, err)
	require.Len(t, evs, 2)
	_, _, err = s.LoadSince(ctx, "dst")
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "DELETE FROM lz_summaries WHERE conv = $1", []byte("dst"))
	require.NoError(t, err)
	_, err = s.Events(ctx, "dst", journal.EventQuery{})
	requireGap(err, `"dst"/5 where seq 1 should be`)
	_, _, err = s.LoadSince(ctx, "dst")
	requireGap(err, `"dst"/5 where seq 1 should be`)
}

// TestCorruptMetadata: a metadata row whose value is not UTF-8, or whose
// key breaks the rules of ids, rows PutMetadata refuses to write, is
// journal.ErrCorrupt naming the row, as in pebblejournal, where Metadata
// returned the bytes as they were.
func TestCorruptMetadata(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	s := open(t, dsn, Options{})
	conn, err := pgx.Connect(t.Context(), dsn)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	ctx := t.Context()
	for _, c := range []struct {
		name, sql, want string
	}{
		{"value not UTF-8", `UPDATE lz_metadata SET value = '\xff41'::bytea WHERE conv = $1 AND key = 'name'`,
			`metadata "name" of "value not UTF-8": the value is not UTF-8`},
		{"empty key", `UPDATE lz_metadata SET key = ''::bytea WHERE conv = $1 AND key = 'name'`,
			`metadata "" of "empty key"`},
		{"key not UTF-8", `UPDATE lz_metadata SET key = '\xff'::bytea WHERE conv = $1 AND key = 'name'`,
			`metadata "\xff" of "key not UTF-8"`},
		{"value over the limit", fmt.Sprintf(`UPDATE lz_metadata SET value = convert_to(repeat('a', %d), 'UTF8') WHERE conv = $1 AND key = 'name'`, journal.MaxRecordBytes+1),
			fmt.Sprintf(`metadata "name" of "value over the limit": the value of %d bytes exceeds`, journal.MaxRecordBytes+1)},
	} {
		t.Run(c.name, func(t *testing.T) {
			conv := c.name
			require.NoError(t, s.PutMetadata(ctx, conv, map[string]string{"name": "x", "owner": "ann"}))
			md, err := s.Metadata(ctx, conv)
			require.NoError(t, err)
			require.Equal(t, map[string]string{"name": "x", "owner": "ann"}, md)
			tag, err := conn.Exec(ctx, c.sql, []byte(conv))
			require.NoError(t, err)
			require.Equal(t, int64(1), tag.RowsAffected())
			_, err = s.Metadata(ctx, conv)
			require.ErrorIs(t, err, journal.ErrCorrupt)
			require.Contains(t, err.Error(), c.want)
		})
	}
}
