package journal_test

import (
	"strings"
	"testing"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
)

// TestCheckEnums: every enum field of a stored record, at any depth (a
// oneof's member, list elements, map values, events nested in an audit
// row), is checked against the numbers its enum declares, and the error
// names the field's path; records whose enums are declared values, the
// unspecified zero included, pass.
func TestCheckEnums(t *testing.T) {
	const bad = 9
	human := messages.Executor_EXECUTOR_HUMAN
	callEv := func(e messages.Executor) *messages.Event {
		return &messages.Event{Body: &messages.Event_ToolCall{ToolCall: &messages.ToolCallEvent{Call: &messages.ToolCall{Id: "x"}, Executor: e}}}
	}
	resolution := func(s messages.ToolCallStatus) *messages.Event {
		return &messages.Event{Body: &messages.Event_Resolution{Resolution: &messages.Resolution{ToolCallId: "x", Status: s}}}
	}
	suspension := func(e messages.Executor) *messages.Event {
		return &messages.Event{Body: &messages.Event_Suspension{Suspension: &messages.Suspension{Pending: []*messages.PendingCall{
			{ToolCallId: "a", Executor: human}, {ToolCallId: "b", Executor: e}}}}}
	}
	fsm := func(st messages.AgentState, e messages.Executor) *messages.Conversation {
		return &messages.Conversation{Id: "c", FsmState: &messages.FSMState{State: st, Pending: map[string]*messages.PendingCall{"x": {Executor: e}}}}
	}
	for _, c := range []struct {
		name string
		m    proto.Message
		want string // "" passes
	}{
		{"nil", nil, ""},
		{"typed nil", (*messages.Event)(nil), ""},
		{"user message", userEv("hi"), ""},
		{"tool_call event", callEv(human), ""},
		{"tool_call event of no executor", callEv(0), ""},
		{"tool_call event of an unknown executor", callEv(bad), "tool_call.executor holds 9, not a value of lazarus.v1.Executor"},
		{"resolution", resolution(messages.ToolCallStatus_TOOL_CALL_STATUS_EXPIRED), ""},
		{"resolution of an unknown status", resolution(bad), "resolution.status holds 9, not a value of lazarus.v1.ToolCallStatus"},
		{"suspension", suspension(human), ""},
		{"suspension of an unknown executor", suspension(bad), "suspension.pending[1].executor holds 9"},
		{"tool call row", &messages.ToolCallRecord{Id: "x", Executor: human, Status: messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED}, ""},
		{"tool call row of an unknown status", &messages.ToolCallRecord{Id: "x", Executor: human, Status: bad}, "status holds 9, not a value of lazarus.v1.ToolCallStatus"},
		{"tool call row of an unknown executor", &messages.ToolCallRecord{Id: "x", Executor: bad}, "executor holds 9, not a value of lazarus.v1.Executor"},
		{"conversation row", &messages.Conversation{Id: "c", Status: messages.ConversationStatus_CONVERSATION_STATUS_ENDED}, ""},
		{"conversation row of an unknown status", &messages.Conversation{Id: "c", Status: bad}, "status holds 9, not a value of lazarus.v1.ConversationStatus"},
		{"fsm_state", fsm(messages.AgentState_AGENT_STATE_AWAITING_INPUT, human), ""},
		{"fsm_state of an unknown state", fsm(bad, human), "fsm_state.state holds 9, not a value of lazarus.v1.AgentState"},
		{"fsm_state of an unknown pending executor", fsm(messages.AgentState_AGENT_STATE_AWAITING_INPUT, bad), `fsm_state.pending["x"].executor holds 9`},
		{"model call", &messages.ModelCall{ConversationId: "c", RenderedContext: []*messages.Event{userEv("a"), resolution(messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED)}}, ""},
		{"model call rendering an unknown status", &messages.ModelCall{ConversationId: "c", RenderedContext: []*messages.Event{userEv("a"), resolution(bad)}},
			"rendered_context[1].resolution.status holds 9"},
		{"summary", &messages.Summary{FromSeq: 1, ToSeq: 2, Agents: []*messages.Summary{{Agent: "a", FromSeq: 1, ToSeq: 2}}}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := journal.CheckEnums(c.m)
			if c.want == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			require.Contains(t, err.Error(), c.want)
			require.NotErrorIs(t, err, journal.ErrCorrupt, "the caller says what it is")
			require.NotErrorIs(t, err, journal.ErrInvalid)
		})
	}
}

// TestWritesRefuseUnknownEnums: what a reader refuses as damage no write
// stores: an event whose resolution status or suspension executor is not a
// value of its enum (ValidateEvent, hence a fork's events) and an audit
// row rendering one are ErrInvalid. A fork accepted such events, which
// every read of its log would then refuse.
func TestWritesRefuseUnknownEnums(t *testing.T) {
	res := &messages.Event{Seq: 1, Body: &messages.Event_Resolution{Resolution: &messages.Resolution{ToolCallId: "x", Status: 9}}}
	susp := &messages.Event{Seq: 1, Body: &messages.Event_Suspension{Suspension: &messages.Suspension{Pending: []*messages.PendingCall{{ToolCallId: "x", Executor: 9}}}}}
	for _, ev := range []*messages.Event{res, susp} {
		err := journal.ValidateEvent(ev)
		require.ErrorIs(t, err, journal.ErrInvalid)
		require.Contains(t, err.Error(), "holds 9")
		require.ErrorIs(t, journal.ValidateFork(&messages.ForkRequest{ConversationId: "c", Events: []*messages.Event{ev},
			Status: messages.ConversationStatus_CONVERSATION_STATUS_IDLE}), journal.ErrInvalid)
		err = journal.ValidateModelCall(&messages.ModelCall{ConversationId: "c", TurnRef: 1, RenderedContext: []*messages.Event{userEv("a"), ev}})
		require.ErrorIs(t, err, journal.ErrInvalid)
		require.Contains(t, err.Error(), "rendered_context[1]")
	}
}

// BenchmarkCheckEnums measures the check beside the decoding it follows
// in a Store's reads: each record is decoded (unmarshal), and a decoded one
// is checked (check).
func BenchmarkCheckEnums(b *testing.B) {
	call := &messages.Event{Seq: 7, Body: &messages.Event_ToolCall{ToolCall: &messages.ToolCallEvent{
		Call: &messages.ToolCall{Id: "call-1", Name: "lookup_order", Arguments: `{"id":42}`}, Executor: messages.Executor_EXECUTOR_SERVER}}}
	user := userEv(strings.Repeat("x", 1000))
	user.Seq = 7
	audit := &messages.ModelCall{ConversationId: "c", TurnRef: 1}
	for range 100 {
		audit.RenderedContext = append(audit.RenderedContext, userEv(strings.Repeat("y", 200)), call)
	}
	for _, c := range []struct {
		name string
		m    proto.Message
	}{
		{"user event 1KiB", user},
		{"tool_call event", call},
		{"tool call row", &messages.ToolCallRecord{Id: "call-1", ConversationId: "c", Name: "lookup_order",
			Executor: messages.Executor_EXECUTOR_HUMAN, Status: messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING, Args: `{"id":42}`}},
		{"conversation row", &messages.Conversation{Id: "c", Status: messages.ConversationStatus_CONVERSATION_STATUS_SUSPENDED,
			Settings: map[string]string{"model": "m", "system": "be brief"},
			FsmState: &messages.FSMState{State: messages.AgentState_AGENT_STATE_AWAITING_INPUT, LastSeq: 9,
				Pending: map[string]*messages.PendingCall{"call-1": {ToolCallId: "call-1", Executor: messages.Executor_EXECUTOR_HUMAN}}}}},
		{"audit row of 200 events", audit},
	} {
		data, err := proto.Marshal(c.m)
		require.NoError(b, err)
		b.Run(c.name+"/unmarshal", func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				if err := proto.Unmarshal(data, c.m.ProtoReflect().New().Interface()); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"/check", func(b *testing.B) {
			m := c.m.ProtoReflect().New().Interface()
			require.NoError(b, proto.Unmarshal(data, m))
			b.ReportAllocs()
			for range b.N {
				if err := journal.CheckEnums(m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
