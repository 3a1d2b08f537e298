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

// TestCorruptEnums: a stored record whose enum field holds a number its
// enum does not declare (proto3 decodes one; no write stores one) is
// journal.ErrCorrupt naming its row on every read that meets it, in every
// family that has enums: events (a tool_call's executor, a resolution's
// status, a suspension's executors), tool call rows (status, executor),
// conversation rows (status, the fsm_state's state and pending executors)
// and audit rows (the events they render), as in pebblejournal. The reads
// handed such records on: a tool call row of an unknown status is not
// terminal, so a revival took the call as open.
func TestCorruptEnums(t *testing.T) {
	const bad = 9
	dsn := pgtest.NewDatabase(t)
	s := open(t, dsn, Options{Audit: true})
	conn, err := pgx.Connect(t.Context(), dsn)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	ctx := t.Context()
	type op struct {
		name  string
		write bool // runs only once the record is damaged
		run   func(conv, call string) error
	}
	var (
		events = op{"Events", false, func(conv, _ string) error {
			_, err := s.Events(ctx, conv, journal.EventQuery{})
			return err
		}}
		load = op{"LoadSince", false, func(conv, _ string) error {
			_, _, err := s.LoadSince(ctx, conv)
			return err
		}}
		toolCall = op{"ToolCall", false, func(_, call string) error {
			_, err := s.ToolCall(ctx, call)
			return err
		}}
		pending = op{"PendingToolCalls", false, func(conv, _ string) error {
			_, err := s.PendingToolCalls(ctx, conv)
			return err
		}}
		listPending = op{"ListPendingToolCalls", false, func(_, _ string) error {
			_, _, err := s.ListPendingToolCalls(ctx, "", 1000)
			return err
		}}
		resolve = op{"ResolveToolCall", true, func(_, call string) error {
			_, err := s.ResolveToolCall(ctx, call, messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED, nil, time.Now())
			return err
		}}
		resolveInAppend = op{"Append resolving", true, func(conv, call string) error {
			_, err := s.Append(ctx, &messages.AppendRequest{ConversationId: conv, ExpectedLast: 2, Events: []*messages.Event{userEvent("r")},
				Resolutions: []*messages.ToolResolution{{ToolCallId: call, Status: messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED}}})
			return err
		}}
		conversation = op{"Conversation", false, func(conv, _ string) error {
			_, err := s.Conversation(ctx, conv)
			return err
		}}
		list = op{"ListConversations", false, func(_, _ string) error {
			_, _, err := s.ListConversations(ctx, "", 1000)
			return err
		}}
		putConversation = op{"PutConversation", true, func(conv, _ string) error {
			return s.PutConversation(ctx, journal.ConversationUpdate{ID: conv, Settings: map[string]string{"k": "v"}})
		}}
		appendTo = op{"Append", true, func(conv, _ string) error {
			_, err := s.Append(ctx, &messages.AppendRequest{ConversationId: conv, ExpectedLast: 2, Events: []*messages.Event{userEvent("a")}})
			return err
		}}
		modelCalls = op{"ModelCalls", false, func(conv, _ string) error {
			_, err := s.ModelCalls(ctx, conv)
			return err
		}}
	)
	callEvent := func(call string, e messages.Executor) *messages.Event {
		return &messages.Event{Seq: 2, Body: &messages.Event_ToolCall{ToolCall: &messages.ToolCallEvent{Call: &messages.ToolCall{Id: call, Name: "ask"}, Executor: e}}}
	}
	resolution := func(call string) *messages.Event {
		return &messages.Event{Seq: 2, Body: &messages.Event_Resolution{Resolution: &messages.Resolution{ToolCallId: call, Status: bad}}}
	}
	human, pendingStatus := messages.Executor_EXECUTOR_HUMAN, messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING
	awaiting := func(conv, call string, st messages.AgentState, e messages.Executor) *messages.Conversation {
		return &messages.Conversation{Id: conv, Status: messages.ConversationStatus_CONVERSATION_STATUS_SUSPENDED,
			FsmState: &messages.FSMState{State: st, LastSeq: 2, Pending: map[string]*messages.PendingCall{call: {ToolCallId: call, Executor: e}}}}
	}
	const (
		eventRow = "UPDATE lz_events SET data = $1 WHERE conv = $2 AND seq = 2"
		callRow  = "UPDATE lz_tool_calls SET data = $1 WHERE conv = $2"
		convRow  = "UPDATE lz_conversations SET row = $1 WHERE id = $2"
		auditRow = "UPDATE lz_audit SET data = $1 WHERE conv = $2"
	)
	callOps := []op{toolCall, pending, listPending, resolve, resolveInAppend}
	convOps := []op{conversation, list, putConversation, appendTo}
	for _, c := range []struct {
		name  string
		sql   string // sets the bytes of the case's row: $1 the bytes, $2 the conversation
		value func(conv, call string) proto.Message
		want  string
		ops   []op
	}{
		{"tool_call event of an unknown executor", eventRow,
			func(_, call string) proto.Message { return callEvent(call, bad) }, "tool_call.executor holds 9", []op{events, load}},
		{"resolution event of an unknown status", eventRow,
			func(_, call string) proto.Message { return resolution(call) }, "resolution.status holds 9", []op{events, load}},
		{"suspension event of an unknown executor", eventRow,
			func(_, call string) proto.Message {
				return &messages.Event{Seq: 2, Body: &messages.Event_Suspension{Suspension: &messages.Suspension{
					Pending: []*messages.PendingCall{{ToolCallId: call, Executor: bad}}}}}
			}, "suspension.pending[0].executor holds 9", []op{events, load}},
		{"tool call row of an unknown status", callRow,
			func(conv, call string) proto.Message {
				return &messages.ToolCallRecord{Id: call, ConversationId: conv, Name: "ask", Executor: human, Status: bad}
			}, "status holds 9", callOps},
		{"tool call row of an unknown executor", callRow,
			func(conv, call string) proto.Message {
				return &messages.ToolCallRecord{Id: call, ConversationId: conv, Name: "ask", Executor: bad, Status: pendingStatus}
			}, "executor holds 9", callOps},
		{"conversation row of an unknown status", convRow,
			func(conv, _ string) proto.Message { return &messages.Conversation{Id: conv, Status: bad} }, "status holds 9", convOps},
		{"fsm_state of an unknown state", convRow,
			func(conv, call string) proto.Message { return awaiting(conv, call, bad, human) }, "fsm_state.state holds 9", convOps},
		{"fsm_state of an unknown pending executor", convRow,
			func(conv, call string) proto.Message {
				return awaiting(conv, call, messages.AgentState_AGENT_STATE_AWAITING_INPUT, bad)
			}, `executor holds 9`, convOps},
		{"audit row rendering an unknown status", auditRow,
			func(conv, call string) proto.Message {
				return &messages.ModelCall{ConversationId: conv, TurnRef: 1, RenderedContext: []*messages.Event{resolution(call)}}
			}, "rendered_context[0].resolution.status holds 9", []op{modelCalls}},
	} {
		t.Run(c.name, func(t *testing.T) {
			conv, call := "c "+c.name, "t "+c.name
			t.Cleanup(func() {
				// The next case's listings.
				_, err := conn.Exec(ctx, "DELETE FROM lz_tool_calls WHERE conv = $1", []byte(conv))
				require.NoError(t, err)
				_, err = conn.Exec(ctx, "DELETE FROM lz_conversations WHERE id = $1", []byte(conv))
				require.NoError(t, err)
			})
			_, err := s.Append(ctx, &messages.AppendRequest{ConversationId: conv,
				Events:    []*messages.Event{userEvent("hi"), callEvent(call, human)},
				ToolCalls: []*messages.ToolCallRecord{{Id: call, ConversationId: conv, Name: "ask", Executor: human}},
				Status:    messages.ConversationStatus_CONVERSATION_STATUS_SUSPENDED,
				FsmState:  awaiting(conv, call, messages.AgentState_AGENT_STATE_AWAITING_INPUT, human).GetFsmState()})
			require.NoError(t, err)
			require.NoError(t, s.PutModelCall(ctx, &messages.ModelCall{ConversationId: conv, TurnRef: 1}))
			for _, o := range c.ops {
				if !o.write {
					require.NoError(t, o.run(conv, call), "%s before the damage", o.name)
				}
			}

			v, err := proto.Marshal(c.value(conv, call))
			require.NoError(t, err)
			tag, err := conn.Exec(ctx, c.sql, v, []byte(conv))
			require.NoError(t, err)
			require.Equal(t, int64(1), tag.RowsAffected())
			for _, o := range c.ops {
				err := o.run(conv, call)
				require.ErrorIs(t, err, journal.ErrCorrupt, o.name)
				require.Contains(t, err.Error(), c.want, o.name)
				if c.sql == callRow {
					require.Contains(t, err.Error(), call, o.name) // the row's key
				} else {
					require.Contains(t, err.Error(), conv, o.name)
				}
			}
			last, err := s.LastSeq(ctx, conv)
			require.NoError(t, err)
			require.Equal(t, uint64(2), last, "nothing written")
		})
	}
}
