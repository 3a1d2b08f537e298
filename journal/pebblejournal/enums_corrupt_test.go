package pebblejournal

import (
	"strings"
	"testing"
	"time"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
)

// TestCorruptEnums: a stored record whose enum field holds a number its
// enum does not declare (proto3 decodes one; no write stores one) is
// journal.ErrCorrupt naming its key on every read that meets it, and
// lazarus check reports it, in every family that has enums: events (a
// tool_call's executor, a resolution's status, a suspension's executors),
// tool call rows (status, executor), conversation rows (status, the
// fsm_state's state and pending executors) and audit rows (the events
// they render). The reads handed such records on: a tool call row of an
// unknown status is not terminal, so a revival took the call as open.
func TestCorruptEnums(t *testing.T) {
	const bad = 9
	type op struct {
		name  string
		write bool // runs only once the record is damaged
		run   func(s *Store) error
	}
	var (
		events = op{"Events", false, func(s *Store) error {
			_, err := s.Events(ctx, "c", journal.EventQuery{})
			return err
		}}
		load = op{"LoadSince", false, func(s *Store) error {
			_, _, err := s.LoadSince(ctx, "c")
			return err
		}}
		toolCall = op{"ToolCall", false, func(s *Store) error {
			_, err := s.ToolCall(ctx, "t")
			return err
		}}
		pending = op{"PendingToolCalls", false, func(s *Store) error {
			_, err := s.PendingToolCalls(ctx, "c")
			return err
		}}
		listPending = op{"ListPendingToolCalls", false, func(s *Store) error {
			_, _, err := s.ListPendingToolCalls(ctx, "", 100)
			return err
		}}
		resolve = op{"ResolveToolCall", true, func(s *Store) error {
			_, err := s.ResolveToolCall(ctx, "t", messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED, nil, time.Now())
			return err
		}}
		resolveInAppend = op{"Append resolving", true, func(s *Store) error {
			_, err := s.Append(ctx, &messages.AppendRequest{ConversationId: "c", ExpectedLast: 2, Events: []*messages.Event{userEvent("r")},
				Resolutions: []*messages.ToolResolution{{ToolCallId: "t", Status: messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED}}})
			return err
		}}
		upsert = op{"UpsertToolCall", true, func(s *Store) error {
			return s.UpsertToolCall(ctx, pendingCall("c", "t"))
		}}
		conversation = op{"Conversation", false, func(s *Store) error {
			_, err := s.Conversation(ctx, "c")
			return err
		}}
		list = op{"ListConversations", false, func(s *Store) error {
			_, _, err := s.ListConversations(ctx, "", 100)
			return err
		}}
		putConversation = op{"PutConversation", true, func(s *Store) error {
			return s.PutConversation(ctx, journal.ConversationUpdate{ID: "c", Settings: map[string]string{"k": "v"}})
		}}
		putFSM = op{"PutFSMState", true, func(s *Store) error {
			return s.PutFSMState(ctx, "c", &messages.FSMState{State: messages.AgentState_AGENT_STATE_IDLE, LastSeq: 2})
		}}
		appendTo = op{"Append changing the row", true, func(s *Store) error {
			// An append of events alone does not read the row.
			_, err := s.Append(ctx, &messages.AppendRequest{ConversationId: "c", ExpectedLast: 2, Events: []*messages.Event{userEvent("a")},
				Settings: map[string]string{"k": "v"}})
			return err
		}}
		modelCalls = op{"ModelCalls", false, func(s *Store) error {
			_, err := s.ModelCalls(ctx, "c")
			return err
		}}
		gcModelCalls = op{"GCModelCalls", true, func(s *Store) error {
			_, err := s.GCModelCalls(ctx, "c", time.Now())
			return err
		}}
	)
	callEvent := func(e messages.Executor) *messages.Event {
		return &messages.Event{Seq: 2, Body: &messages.Event_ToolCall{ToolCall: &messages.ToolCallEvent{Call: &messages.ToolCall{Id: "t", Name: "ask"}, Executor: e}}}
	}
	resolution := &messages.Event{Seq: 2, Body: &messages.Event_Resolution{Resolution: &messages.Resolution{ToolCallId: "t", Status: bad}}}
	suspension := &messages.Event{Seq: 2, Body: &messages.Event_Suspension{Suspension: &messages.Suspension{Pending: []*messages.PendingCall{{ToolCallId: "t", Executor: bad}}}}}
	row := func(e messages.Executor, st messages.ToolCallStatus) *messages.ToolCallRecord {
		return &messages.ToolCallRecord{Id: "t", ConversationId: "c", Name: "ask", Executor: e, Status: st}
	}
	human, pendingStatus := messages.Executor_EXECUTOR_HUMAN, messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING
	awaiting := func(st messages.AgentState, e messages.Executor) *messages.Conversation {
		return &messages.Conversation{Id: "c", Status: messages.ConversationStatus_CONVERSATION_STATUS_SUSPENDED,
			FsmState: &messages.FSMState{State: st, LastSeq: 2, Pending: map[string]*messages.PendingCall{"t": {ToolCallId: "t", Executor: e}}}}
	}
	eventKey, rowKey, convRowKey, auditKey := seqKey(famEvent, "c", 2), idKey(famToolCall, "c", "t"), convKey(famConv, "c"), seqKey(famAudit, "c", 1)
	callOps := []op{toolCall, pending, listPending, resolve, resolveInAppend, upsert}
	convOps := []op{conversation, list, putConversation, putFSM, appendTo}
	for _, c := range []struct {
		name    string
		key     []byte
		value   proto.Message
		want    string
		ops     []op
		checked bool // lazarus check reads the family
	}{
		{"tool_call event of an unknown executor", eventKey, callEvent(bad), "tool_call.executor holds 9", []op{events, load}, true},
		{"resolution event of an unknown status", eventKey, resolution, "resolution.status holds 9", []op{events, load}, true},
		{"suspension event of an unknown executor", eventKey, suspension, "suspension.pending[0].executor holds 9", []op{events, load}, true},
		{"tool call row of an unknown status", rowKey, row(human, bad), "status holds 9", callOps, true},
		{"tool call row of an unknown executor", rowKey, row(bad, pendingStatus), "executor holds 9", callOps, true},
		{"conversation row of an unknown status", convRowKey, &messages.Conversation{Id: "c", Status: bad}, "status holds 9", convOps, true},
		{"fsm_state of an unknown state", convRowKey, awaiting(bad, human), "fsm_state.state holds 9", convOps, true},
		{"fsm_state of an unknown pending executor", convRowKey, awaiting(messages.AgentState_AGENT_STATE_AWAITING_INPUT, bad),
			`fsm_state.pending["t"].executor holds 9`, convOps, true},
		{"audit row rendering an unknown status", auditKey, &messages.ModelCall{ConversationId: "c", TurnRef: 1, RenderedContext: []*messages.Event{resolution}},
			"rendered_context[0].resolution.status holds 9", []op{modelCalls, gcModelCalls}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := openMem(t, Options{Audit: true})
			_, err := s.Append(ctx, &messages.AppendRequest{ConversationId: "c",
				Events:    []*messages.Event{userEvent("hi"), callEvent(human)},
				ToolCalls: []*messages.ToolCallRecord{pendingCall("c", "t")},
				Status:    messages.ConversationStatus_CONVERSATION_STATUS_SUSPENDED,
				FsmState:  awaiting(messages.AgentState_AGENT_STATE_AWAITING_INPUT, human).GetFsmState()})
			require.NoError(t, err)
			require.NoError(t, s.PutModelCall(ctx, &messages.ModelCall{ConversationId: "c", TurnRef: 1}))
			for _, o := range c.ops {
				if !o.write {
					require.NoError(t, o.run(s), "%s before the damage", o.name)
				}
			}
			rep, err := s.Check(ctx)
			require.NoError(t, err)
			require.True(t, rep.Sound(), "%v", rep.Problems)

			v, err := proto.Marshal(c.value)
			require.NoError(t, err)
			require.NoError(t, s.db.Set(c.key, v, nil))
			// Written behind the Store's back: forget what its caches know.
			s.heads.drop(s.convStripe("c"), "c")
			s.calls.drop(s.idStripe("t"), "t")

			for _, o := range c.ops {
				err := o.run(s)
				require.ErrorIs(t, err, journal.ErrCorrupt, o.name)
				require.Contains(t, err.Error(), keyString(c.key), o.name)
				require.Contains(t, err.Error(), c.want, o.name)
			}
			last, err := s.LastSeq(ctx, "c")
			require.NoError(t, err)
			require.EqualValues(t, 2, last, "nothing written")
			rep, err = s.Check(ctx)
			require.NoError(t, err)
			if c.checked {
				require.False(t, rep.Sound())
				require.True(t, strings.Contains(strings.Join(rep.Problems, "\n"), c.want), "%v", rep.Problems)
			}
		})
	}
}
