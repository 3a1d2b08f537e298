package tests

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/journal/pebblejournal"
	"github.com/lazarusrt/lazarus/journal/pgjournal"
	"github.com/lazarusrt/lazarus/journal/pgjournal/pgtest"
	"github.com/lazarusrt/lazarus/messages"
)

// TestRevivalRefusesAnOpenCallItCanNeitherRunNorAwait: a log whose open
// tool_call event has a call id no row can have (empty, oversized), an
// executor that is neither server nor human, no row, or the row of another
// conversation (no write of the runtime leaves one: the row is written
// with its event; a damaged store or a foreign writer does) is damage: the
// revival fails with an error wrapping journal.ErrCorrupt naming the
// event's seq, every command is refused so, and nothing is written, no
// tool runs, the model is not called. The revival failed on the bad ids
// with journal.ErrInvalid (the Store refused the row lookup), which the
// Runtime retried until it gave up with "outcome unknown"; it took the
// others, wrote the next message and never ran its turn: a server call
// without a row ran again on every command and its result was refused as
// stale, a human call without one could never be answered, a call whose
// row is another conversation's took that conversation's answer.
func TestRevivalRefusesAnOpenCallItCanNeitherRunNorAwait(t *testing.T) {
	cases := map[string]struct {
		call     *messages.ToolCall
		executor messages.Executor
		noRow    bool   // the tool_call event is written without its row
		otherRow string // the call's row is written first, by this other conversation
		// below: a Store's writes refuse the tool_call event, a Fork's too:
		// it is written below the adapter (durable stores only).
		below bool
		want  string
	}{
		"server call without its row": {
			call:     &messages.ToolCall{Id: "call-norow-1", Name: "lookup_order", Arguments: `{"id":42}`},
			executor: messages.Executor_EXECUTOR_SERVER,
			noRow:    true,
			want:     "seq 3",
		},
		"human call without its row": {
			call:     &messages.ToolCall{Id: "call-norow-2", Name: "approve_refund", Arguments: `{"amount":5}`},
			executor: messages.Executor_EXECUTOR_HUMAN,
			noRow:    true,
			want:     "seq 3",
		},
		"call whose row is another conversation's": {
			call:     &messages.ToolCall{Id: "call-other-1", Name: "lookup_order", Arguments: `{"id":42}`},
			executor: messages.Executor_EXECUTOR_SERVER,
			otherRow: "d",
			want:     "seq 3",
		},
		"no call id": {
			call:     &messages.ToolCall{Name: "lookup_order", Arguments: `{"id":42}`},
			executor: messages.Executor_EXECUTOR_SERVER,
			below:    true,
			want:     "seq 3",
		},
		"oversized call id": {
			call:     &messages.ToolCall{Id: strings.Repeat("x", journal.MaxIDBytes+1), Name: "lookup_order", Arguments: `{"id":42}`},
			executor: messages.Executor_EXECUTOR_SERVER,
			below:    true,
			want:     "seq 3",
		},
		"unspecified executor": {
			call:     &messages.ToolCall{Id: "call-unspecified-1", Name: "lookup_order", Arguments: `{"id":42}`},
			executor: messages.Executor_EXECUTOR_UNSPECIFIED,
			noRow:    true, // a Store refuses a row of no executor too
			below:    true,
			want:     "seq 3",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			forEachStore(t, func(t *testing.T, kind string) {
				store := openStore(t, kind)
				ctx := ctxT(t)
				now := time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)
				req := &messages.AppendRequest{
					ConversationId: "c",
					Events: []*messages.Event{
						{Seq: 1, Time: journal.Timestamp(now), RequestId: "r1", Body: &messages.Event_UserMsg{UserMsg: &messages.UserMessage{
							Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: "look order 42 up"}}}}}},
						{Seq: 2, Time: journal.Timestamp(now), Body: &messages.Event_AssistantMsg{AssistantMsg: &messages.AssistantMessage{
							ToolCalls: []*messages.ToolCall{tc.call}}}},
						{Seq: 3, Time: journal.Timestamp(now), Body: &messages.Event_ToolCall{ToolCall: &messages.ToolCallEvent{
							Call: tc.call, Executor: tc.executor}}},
					},
					Status: messages.ConversationStatus_CONVERSATION_STATUS_IDLE,
				}
				row := &messages.ToolCallRecord{
					Id: tc.call.GetId(), ConversationId: "c", Name: tc.call.GetName(), Executor: tc.executor,
					Status: messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING, Args: tc.call.GetArguments(), Created: journal.Timestamp(now),
				}
				switch {
				case tc.otherRow != "":
					// The other conversation's call, answered: the revival
					// of "c" must not take its result.
					row.ConversationId = tc.otherRow
					row.Status = messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED
					row.Result = &messages.ToolOutcome{Outcome: &messages.ToolOutcome_Content{Content: `{"of":"d"}`}}
					_, err := store.Append(ctx, &messages.AppendRequest{ConversationId: tc.otherRow, Unfenced: true, ToolCalls: []*messages.ToolCallRecord{row}})
					require.NoError(t, err)
				}
				// An Append refuses such a tool_call event (its row must be
				// in the same write); a fork copies a tool_call event
				// without its row (the row is the source's), but refuses
				// one whose call no row can have.
				_, err := store.Append(ctx, req)
				require.ErrorIs(t, err, journal.ErrInvalid)
				fork := &messages.ForkRequest{ConversationId: "c", Events: req.Events, Status: req.Status}
				if tc.below {
					require.ErrorIs(t, store.Fork(ctx, fork), journal.ErrInvalid)
					if kind == "memory" {
						t.Skip("memjournal's writes refuse such an event: it holds none")
					}
					store = damagedEventStore(t, kind, fork, 3)
				} else {
					require.NoError(t, store.Fork(ctx, fork))
				}
				if tc.otherRow == "" && !tc.noRow && journal.ValidateID("tool call id", tc.call.GetId()) == nil {
					_, err := store.Append(ctx, &messages.AppendRequest{ConversationId: "c", ExpectedLast: 3, ToolCalls: []*messages.ToolCallRecord{row}})
					require.NoError(t, err)
				}

				h := newHarness(t, store, nil)
				for range 2 {
					_, err = h.rt.Send(ctx, "c", "are you there?", user)
					require.ErrorIs(t, err, journal.ErrCorrupt)
					require.Contains(t, err.Error(), tc.want)
					require.ErrorIs(t, h.rt.Wake(ctx, "c"), journal.ErrCorrupt)
				}
				require.Len(t, h.history("c"), 3, "nothing is written")
				require.Zero(t, h.model.Calls("c"), "the model is not called")
				require.Empty(t, h.runs.of("lookup_order"), "no tool runs")
			})
		})
	}
}

// damagedEventStore returns a durable store of kind holding what fork
// writes, but for its event at seq, which fork holds as a Store refuses
// it: it is written as a well-formed tool_call event, then replaced below
// the adapter by fork's (a raw Pebble Set; an SQL UPDATE in PostgreSQL).
func damagedEventStore(t *testing.T, kind string, fork *messages.ForkRequest, seq uint64) journal.Store {
	t.Helper()
	ctx := ctxT(t)
	var damaged *messages.Event
	fine := proto.Clone(fork).(*messages.ForkRequest)
	for i, ev := range fine.GetEvents() {
		if ev.GetSeq() == seq {
			damaged = fork.GetEvents()[i]
			fine.Events[i] = &messages.Event{Seq: seq, Time: ev.GetTime(), Body: &messages.Event_ToolCall{ToolCall: &messages.ToolCallEvent{
				Call: &messages.ToolCall{Id: "placeholder", Name: "lookup_order"}, Executor: messages.Executor_EXECUTOR_SERVER}}}
		}
	}
	require.NotNil(t, damaged, "fork holds seq %d", seq)
	data, err := proto.Marshal(damaged)
	require.NoError(t, err)
	switch kind {
	case "pebble":
		dir := t.TempDir()
		s, err := pebblejournal.Open(dir, pebblejournal.Options{})
		require.NoError(t, err)
		require.NoError(t, s.Fork(ctx, fine))
		// Family 0x03 (events), the id, its terminator 0x00 0x01 and the
		// seq, big-endian (see pebblejournal's keys.go).
		key := binary.BigEndian.AppendUint64([]byte("\x03"+fork.GetConversationId()+"\x00\x01"), seq)
		return underPebble(t, s, dir, func(db *pebble.DB) { replaceKey(t, db, key, data) })
	case "postgres":
		dsn := pgtest.NewDatabase(t)
		s, err := pgjournal.Open(ctx, dsn, pgjournal.Options{})
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		require.NoError(t, s.Fork(ctx, fine))
		conn, err := pgx.Connect(ctx, dsn)
		require.NoError(t, err)
		defer conn.Close(ctx)
		tag, err := conn.Exec(ctx, "UPDATE lz_events SET data = $1 WHERE conv = $2 AND seq = $3", data, []byte(fork.GetConversationId()), int64(seq))
		require.NoError(t, err)
		require.Equal(t, int64(1), tag.RowsAffected())
		return s
	}
	t.Fatalf("unknown store kind %q", kind)
	return nil
}

// TestRevivalRefusesALostTail: a conversation whose latest summary ends
// after the log's last event (the store lost events the summary covers,
// which lazarus check reports as a lost tail) is damage: the revival fails
// with an error wrapping journal.ErrCorrupt naming the conversation, the
// summary's end and the log's, every command is refused so at once, and
// nothing is written, the model is not called. The revival took the
// summary's end as the log's last seq, so its first write was refused by
// the Store's expected-seq check as a conflict, again on each new
// activation, until the Runtime gave up with "outcome unknown".
func TestRevivalRefusesALostTail(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		ctx := ctxT(t)
		store := lostTailStore(t, kind, messages.ConversationStatus_CONVERSATION_STATUS_IDLE)
		last, err := store.LastSeq(ctx, "c")
		require.NoError(t, err)
		require.Equal(t, uint64(2), last, "the log lost seqs 3 and 4")

		h := newHarness(t, store, nil)
		for range 2 {
			_, err = h.rt.Send(ctx, "c", "are you there?", user)
			require.ErrorIs(t, err, journal.ErrCorrupt)
			require.NotErrorIs(t, err, lazarus.ErrUnknownOutcome)
			require.Contains(t, err.Error(), `"c"`)
			require.Contains(t, err.Error(), "seq 4")
			require.Contains(t, err.Error(), "seq 2")
			require.ErrorIs(t, h.rt.Wake(ctx, "c"), journal.ErrCorrupt)
		}
		require.Len(t, h.history("c"), 2, "nothing is written")
		require.Zero(t, h.model.Calls("c"), "the model is not called")
	})
}

// TestResumeOfALostTail: the resume scan of a conversation left ACTIVE
// whose log lost its tail revives it once, which fails with
// journal.ErrCorrupt and is logged once; the scan goes on, and a later
// command revives it once more. Before, each wake revived it again and
// again (each activation's write refused as a conflict) until the Runtime
// gave up with "outcome unknown".
func TestResumeOfALostTail(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		ctx := ctxT(t)
		store := &countLoads{Store: lostTailStore(t, kind, messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE)}
		log := &resumeLog{}
		h := newHarness(t, store, func(o *lazarus.Options) { o.Logger = slog.New(log) })
		require.Eventually(t, func() bool { return len(log.errs()) > 0 }, wait, 5*time.Millisecond, "the resume scan logs the failed wake")
		errs := log.errs()
		require.Len(t, errs, 1)
		require.Contains(t, errs[0], "journal: corrupt record")
		require.Contains(t, errs[0], "seq 4")
		require.Equal(t, int64(1), store.loads.Load(), "the wake revived it once")

		_, err := h.rt.Send(ctx, "c", "are you there?", user)
		require.ErrorIs(t, err, journal.ErrCorrupt)
		require.Equal(t, int64(2), store.loads.Load(), "the command revived it once more")
		require.Len(t, h.history("c"), 2, "nothing is written")
		require.Zero(t, h.model.Calls("c"), "the model is not called")
	})
}

// countLoads counts the revival reads of conversation "c".
type countLoads struct {
	journal.Store
	loads atomic.Int64
}

func (s *countLoads) LoadSince(ctx context.Context, conv string) (*messages.Summary, []*messages.Event, error) {
	if conv == "c" {
		s.loads.Add(1)
	}
	return s.Store.LoadSince(ctx, conv)
}

// resumeLog keeps the err attribute of each "resume failed" record.
type resumeLog struct {
	mu   sync.Mutex
	errv []string
}

func (l *resumeLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *resumeLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "resume failed" {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "err" {
			l.mu.Lock()
			l.errv = append(l.errv, a.Value.String())
			l.mu.Unlock()
		}
		return true
	})
	return nil
}
func (l *resumeLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *resumeLog) WithGroup(string) slog.Handler      { return l }

func (l *resumeLog) errs() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.errv)
}

// lostTailStore returns a store of kind holding conversation "c" with
// events 1..4 and a summary of 1..4 whose events 3 and 4 were lost. A
// durable store loses them by a raw delete below the adapter (and, in
// PostgreSQL, its head moved back with them, as a restore of the tables
// from different moments leaves it); the in-memory store cannot lose
// events, so its view of the log is given a summary past the log's end.
func lostTailStore(t *testing.T, kind string, status messages.ConversationStatus) journal.Store {
	t.Helper()
	ctx := ctxT(t)
	now := time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)
	text := func(s string) []*messages.ContentPart {
		return []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: s}}}
	}
	evs := func(n int) []*messages.Event {
		var out []*messages.Event
		for i := 1; i <= n; i++ {
			ev := &messages.Event{Seq: uint64(i), Time: journal.Timestamp(now)}
			if i%2 == 1 {
				ev.RequestId = fmt.Sprintf("r%d", i)
				ev.Body = &messages.Event_UserMsg{UserMsg: &messages.UserMessage{Content: text(fmt.Sprintf("message %d", i))}}
			} else {
				ev.Body = &messages.Event_AssistantMsg{AssistantMsg: &messages.AssistantMessage{Content: text(fmt.Sprintf("answer %d", i))}}
			}
			out = append(out, ev)
		}
		return out
	}
	sum := &messages.Summary{FromSeq: 1, ToSeq: 4, Content: "the user and the assistant talked", Created: journal.Timestamp(now)}
	write := func(s journal.Store, n int, withSummary bool) {
		_, err := s.Append(ctx, &messages.AppendRequest{ConversationId: "c", Events: evs(n), Status: status})
		require.NoError(t, err)
		if withSummary {
			require.NoError(t, s.PutSummary(ctx, "c", sum))
		}
	}
	switch kind {
	case "memory":
		s := memjournal.New(memjournal.Options{})
		write(s, 2, false)
		return summaryPastTheLog{Store: s, sum: sum}
	case "pebble":
		dir := t.TempDir()
		s, err := pebblejournal.Open(dir, pebblejournal.Options{})
		require.NoError(t, err)
		write(s, 4, true)
		return underPebble(t, s, dir, func(db *pebble.DB) {
			for _, seq := range []uint64{3, 4} {
				// Family 0x03 (events), the id, its terminator 0x00 0x01
				// and the seq, big-endian (see pebblejournal's keys.go).
				key := binary.BigEndian.AppendUint64([]byte("\x03c\x00\x01"), seq)
				require.NoError(t, db.Delete(key, pebble.Sync))
			}
		})
	case "postgres":
		dsn := pgtest.NewDatabase(t)
		s, err := pgjournal.Open(ctx, dsn, pgjournal.Options{})
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		write(s, 4, true)
		conn, err := pgx.Connect(ctx, dsn)
		require.NoError(t, err)
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, "DELETE FROM lz_events WHERE conv = $1 AND seq > 2", []byte("c"))
		require.NoError(t, err)
		_, err = conn.Exec(ctx, "UPDATE lz_conversations SET last_seq = 2 WHERE id = $1", []byte("c"))
		require.NoError(t, err)
		return s
	}
	t.Fatalf("unknown store kind %q", kind)
	return nil
}

// summaryPastTheLog is a store whose latest summary ends after its log's
// last event: what a revival reads from a store that lost the log's tail.
type summaryPastTheLog struct {
	journal.Store
	sum *messages.Summary
}

func (s summaryPastTheLog) LoadSince(ctx context.Context, conv string) (*messages.Summary, []*messages.Event, error) {
	if conv != "c" {
		return s.Store.LoadSince(ctx, conv)
	}
	evs, err := s.Store.Events(ctx, conv, journal.EventQuery{After: s.sum.GetToSeq()})
	return s.sum, evs, err
}

func (s summaryPastTheLog) LatestSummary(ctx context.Context, conv string) (*messages.Summary, error) {
	if conv != "c" {
		return s.Store.LatestSummary(ctx, conv)
	}
	return s.sum, nil
}

// quietPebble discards Pebble's log lines.
type quietPebble struct{}

func (quietPebble) Infof(string, ...any)  {}
func (quietPebble) Errorf(string, ...any) {}
func (quietPebble) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}

// TestRevivalRefusesAToolCallRowOfAnUnknownStatus: a stored tool call row
// whose status is a number ToolCallStatus does not declare (no write of a
// Store stores one; damage or a foreign writer does) makes the revival
// fail with an error wrapping journal.ErrCorrupt naming the tool_call
// event's seq: every command is refused so, nothing is written, no tool
// runs and the model is not called. The Stores decoded the row as it was,
// and the revival took a status that is not terminal for an open call: the
// message was written and a server call ran again, a human call was
// awaited. Only the durable stores decode stored bytes; the in-memory one
// holds no damage (its writes refuse such a row).
func TestRevivalRefusesAToolCallRowOfAnUnknownStatus(t *testing.T) {
	for _, executor := range []messages.Executor{messages.Executor_EXECUTOR_SERVER, messages.Executor_EXECUTOR_HUMAN} {
		t.Run(executor.String(), func(t *testing.T) {
			for _, kind := range []string{"pebble", "postgres"} {
				t.Run(kind, func(t *testing.T) {
					ctx := ctxT(t)
					now := time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)
					call := &messages.ToolCall{Id: "call-status-1", Name: "lookup_order", Arguments: `{"id":42}`}
					row := &messages.ToolCallRecord{
						Id: call.GetId(), ConversationId: "c", Name: call.GetName(), Executor: executor,
						Status: messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING, Args: call.GetArguments(), Created: journal.Timestamp(now),
					}
					req := &messages.AppendRequest{
						ConversationId: "c",
						Events: []*messages.Event{
							{Seq: 1, Time: journal.Timestamp(now), RequestId: "r1", Body: &messages.Event_UserMsg{UserMsg: &messages.UserMessage{
								Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: "look order 42 up"}}}}}},
							{Seq: 2, Time: journal.Timestamp(now), Body: &messages.Event_AssistantMsg{AssistantMsg: &messages.AssistantMessage{
								ToolCalls: []*messages.ToolCall{call}}}},
							{Seq: 3, Time: journal.Timestamp(now), Body: &messages.Event_ToolCall{ToolCall: &messages.ToolCallEvent{
								Call: call, Executor: executor}}},
						},
						ToolCalls: []*messages.ToolCallRecord{row},
						Status:    messages.ConversationStatus_CONVERSATION_STATUS_IDLE,
					}
					if executor == messages.Executor_EXECUTOR_HUMAN {
						req.Status = messages.ConversationStatus_CONVERSATION_STATUS_SUSPENDED
						req.FsmState = &messages.FSMState{State: messages.AgentState_AGENT_STATE_AWAITING_INPUT, LastSeq: 3,
							Pending: map[string]*messages.PendingCall{call.GetId(): {ToolCallId: call.GetId(), Executor: executor, Kind: call.GetName()}}}
					}
					damaged := proto.Clone(row).(*messages.ToolCallRecord)
					damaged.Status = 9
					store := damagedRowStore(t, kind, req, damaged)

					h := newHarness(t, store, nil)
					for range 2 {
						_, err := h.rt.Send(ctx, "c", "are you there?", user)
						require.ErrorIs(t, err, journal.ErrCorrupt)
						require.Contains(t, err.Error(), "seq 3")
						require.Contains(t, err.Error(), "status holds 9")
						require.ErrorIs(t, h.rt.Wake(ctx, "c"), journal.ErrCorrupt)
					}
					require.Len(t, h.history("c"), 3, "nothing is written")
					require.Zero(t, h.model.Calls("c"), "the model is not called")
					require.Empty(t, h.runs.of("lookup_order"), "no tool runs")
				})
			}
		})
	}
}

// damagedRowStore returns a durable store of kind holding what req writes,
// whose tool call row is then replaced below the adapter by row (a raw
// Pebble Set; an SQL UPDATE in PostgreSQL).
func damagedRowStore(t *testing.T, kind string, req *messages.AppendRequest, row *messages.ToolCallRecord) journal.Store {
	t.Helper()
	ctx := ctxT(t)
	data, err := proto.Marshal(row)
	require.NoError(t, err)
	switch kind {
	case "pebble":
		dir := t.TempDir()
		s, err := pebblejournal.Open(dir, pebblejournal.Options{})
		require.NoError(t, err)
		_, err = s.Append(ctx, req)
		require.NoError(t, err)
		// Family 0x05 (tool call rows), the conversation id and the call
		// id, each with its terminator 0x00 0x01 (see pebblejournal's
		// keys.go).
		key := []byte("\x05" + row.GetConversationId() + "\x00\x01" + row.GetId() + "\x00\x01")
		return underPebble(t, s, dir, func(db *pebble.DB) { replaceKey(t, db, key, data) })
	case "postgres":
		dsn := pgtest.NewDatabase(t)
		s, err := pgjournal.Open(ctx, dsn, pgjournal.Options{})
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		_, err = s.Append(ctx, req)
		require.NoError(t, err)
		conn, err := pgx.Connect(ctx, dsn)
		require.NoError(t, err)
		defer conn.Close(ctx)
		tag, err := conn.Exec(ctx, "UPDATE lz_tool_calls SET data = $1 WHERE id = $2", data, []byte(row.GetId()))
		require.NoError(t, err)
		require.Equal(t, int64(1), tag.RowsAffected())
		return s
	}
	t.Fatalf("unknown store kind %q", kind)
	return nil
}

// underPebble closes s, the pebblejournal Store of dir, changes its keys
// with change on the raw Pebble database (damage no Store write makes),
// and returns the Store opened again, closed when t ends.
func underPebble(t *testing.T, s *pebblejournal.Store, dir string, change func(db *pebble.DB)) journal.Store {
	t.Helper()
	require.NoError(t, s.Close())
	o := &pebble.Options{FormatMajorVersion: pebblejournal.FormatMajorVersion, Logger: quietPebble{}}
	pebblejournal.SetLevelOptions(o)
	db, err := pebble.Open(dir, o)
	require.NoError(t, err)
	change(db)
	require.NoError(t, db.Close())
	s, err = pebblejournal.Open(dir, pebblejournal.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// replaceKey sets key, which must hold a value already, to data.
func replaceKey(t *testing.T, db *pebble.DB, key, data []byte) {
	t.Helper()
	_, closer, err := db.Get(key)
	require.NoError(t, err, "the record is at the key")
	require.NoError(t, closer.Close())
	require.NoError(t, db.Set(key, data, pebble.Sync))
}
