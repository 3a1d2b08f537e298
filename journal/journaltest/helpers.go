package journaltest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// t0 is the origin of every time the suite writes.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// ts is t0 plus sec seconds, as a record timestamp.
func ts(sec int) *timestamppb.Timestamp {
	return timestamppb.New(t0.Add(time.Duration(sec) * time.Second))
}

// tm is t0 plus sec seconds.
func tm(sec int) time.Time { return t0.Add(time.Duration(sec) * time.Second) }

func text(s string) []*messages.ContentPart {
	return []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: s}}}
}

// userEv is a user message at t0+sec.
func userEv(sec int, s string) *messages.Event {
	return &messages.Event{Time: ts(sec), Body: &messages.Event_UserMsg{UserMsg: &messages.UserMessage{Content: text(s)}}}
}

// userEvs returns n user messages numbered from first, at t0+i seconds.
func userEvs(first, n int) []*messages.Event {
	evs := make([]*messages.Event, n)
	for i := range evs {
		evs[i] = userEv(first+i, fmt.Sprintf("message %d", first+i))
	}
	return evs
}

// assistantEv is an assistant message asking for the given calls.
func assistantEv(sec int, s string, calls ...string) *messages.Event {
	am := &messages.AssistantMessage{Content: text(s), Model: "test-model"}
	for _, id := range calls {
		am.ToolCalls = append(am.ToolCalls, &messages.ToolCall{Id: id, Name: "ask_human", Arguments: `{"q":"ok?"}`})
	}
	return &messages.Event{Time: ts(sec), Body: &messages.Event_AssistantMsg{AssistantMsg: am}}
}

// toolCallEv is the tool_call event of call id.
func toolCallEv(sec int, id string) *messages.Event {
	return &messages.Event{Time: ts(sec), Body: &messages.Event_ToolCall{ToolCall: &messages.ToolCallEvent{
		Call:     &messages.ToolCall{Id: id, Name: "ask_human", Arguments: `{"q":"ok?"}`},
		Executor: messages.Executor_EXECUTOR_HUMAN,
	}}}
}

// resolutionEv is the resolution event of call id.
func resolutionEv(sec int, id string, st messages.ToolCallStatus) *messages.Event {
	return &messages.Event{Time: ts(sec), Body: &messages.Event_Resolution{Resolution: &messages.Resolution{ToolCallId: id, Status: st, By: "user"}}}
}

// toolResultEv is the tool_result event of call id.
func toolResultEv(sec int, id, content string) *messages.Event {
	return &messages.Event{Time: ts(sec), Body: &messages.Event_ToolResult{ToolResult: &messages.ToolResultEvent{
		ToolCallId: id, Name: "ask_human", Outcome: contentOutcome(content),
	}}}
}

func contentOutcome(s string) *messages.ToolOutcome {
	return &messages.ToolOutcome{Outcome: &messages.ToolOutcome_Content{Content: s}}
}

func errorOutcome(code, msg string) *messages.ToolOutcome {
	return &messages.ToolOutcome{Outcome: &messages.ToolOutcome_Error{Error: &messages.ToolError{Code: code, Message: msg}}}
}

// humanCall is a new tool call row of conv, with an unspecified status.
func humanCall(conv, id string) *messages.ToolCallRecord {
	return &messages.ToolCallRecord{
		Id: id, ConversationId: conv, Name: "ask_human", Executor: messages.Executor_EXECUTOR_HUMAN,
		Args: `{"q":"ok?"}`, Created: ts(0), Prompt: "ok?",
	}
}

func deadline(conv, call string, sec int) *messages.Deadline {
	return &messages.Deadline{ConversationId: conv, ToolCallId: call, At: ts(sec)}
}

const (
	pending  = messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING
	resolved = messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED
	errored  = messages.ToolCallStatus_TOOL_CALL_STATUS_ERRORED
	expired  = messages.ToolCallStatus_TOOL_CALL_STATUS_EXPIRED

	statusActive    = messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE
	statusSuspended = messages.ConversationStatus_CONVERSATION_STATUS_SUSPENDED
	statusIdle      = messages.ConversationStatus_CONVERSATION_STATUS_IDLE
	statusEnded     = messages.ConversationStatus_CONVERSATION_STATUS_ENDED
)

func awaiting(last uint64, calls ...string) *messages.FSMState {
	st := &messages.FSMState{State: messages.AgentState_AGENT_STATE_AWAITING_INPUT, LastSeq: last, Pending: map[string]*messages.PendingCall{}}
	for _, id := range calls {
		st.Pending[id] = &messages.PendingCall{ToolCallId: id, Executor: messages.Executor_EXECUTOR_HUMAN, Kind: "ask_human", Prompt: "ok?"}
	}
	return st
}

func idleState(last uint64) *messages.FSMState {
	return &messages.FSMState{State: messages.AgentState_AGENT_STATE_IDLE, LastSeq: last}
}

// appendOK appends and fails the test on error.
func appendOK(t testing.TB, s journal.Store, req *messages.AppendRequest) journal.AppendResult {
	t.Helper()
	res, err := s.Append(context.Background(), req)
	require.NoError(t, err, "append to %q", req.GetConversationId())
	require.NoError(t, res.Err)
	return res
}

// appendEvents appends evs after the log's current last seq.
func appendEvents(t testing.TB, s journal.Store, conv string, evs ...*messages.Event) journal.AppendResult {
	t.Helper()
	return appendOK(t, s, &messages.AppendRequest{ConversationId: conv, ExpectedLast: lastSeq(t, s, conv), Events: evs})
}

func lastSeq(t testing.TB, s journal.Store, conv string) uint64 {
	t.Helper()
	n, err := s.LastSeq(context.Background(), conv)
	require.NoError(t, err)
	return n
}

func allEvents(t testing.TB, s journal.Store, conv string) []*messages.Event {
	t.Helper()
	evs, err := s.Events(context.Background(), conv, journal.EventQuery{})
	require.NoError(t, err)
	return evs
}

func allDeadlines(t testing.TB, s journal.Store) []*messages.Deadline {
	t.Helper()
	var out []*messages.Deadline
	require.NoError(t, s.Deadlines(context.Background(), time.Time{}, func(d *messages.Deadline) error {
		out = append(out, d)
		return nil
	}))
	return out
}

func deadlinesOf(t testing.TB, s journal.Store, conv string) []*messages.Deadline {
	t.Helper()
	var out []*messages.Deadline
	for _, d := range allDeadlines(t, s) {
		if d.GetConversationId() == conv {
			out = append(out, d)
		}
	}
	return out
}

func seqs(evs []*messages.Event) []uint64 {
	out := make([]uint64, len(evs))
	for i, ev := range evs {
		out[i] = ev.GetSeq()
	}
	return out
}

func seqRange(from, to uint64) []uint64 {
	out := []uint64{}
	for s := from; s <= to; s++ {
		out = append(out, s)
	}
	return out
}

// withSeqs returns copies of evs numbered from first.
func withSeqs(first uint64, evs []*messages.Event) []*messages.Event {
	out := make([]*messages.Event, len(evs))
	for i, ev := range evs {
		out[i] = proto.Clone(ev).(*messages.Event)
		out[i].Seq = first + uint64(i)
	}
	return out
}

// show renders a message (or a slice of them) for a failure message.
func show(v any) string {
	switch m := v.(type) {
	case nil:
		return "<nil>"
	case proto.Message:
		if m == nil || !m.ProtoReflect().IsValid() {
			return "<nil>"
		}
		return "{" + prototext.MarshalOptions{}.Format(m) + "}"
	}
	return fmt.Sprintf("%v", v)
}

func showAll[M proto.Message](ms []M) string {
	parts := make([]string, len(ms))
	for i, m := range ms {
		parts[i] = show(m)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// requireProto fails unless want and got are proto.Equal.
func requireProto(t testing.TB, want, got proto.Message, msgAndArgs ...any) {
	t.Helper()
	if !proto.Equal(want, got) {
		require.Fail(t, fmt.Sprintf("records differ\nwant: %s\ngot:  %s", show(want), show(got)), msgAndArgs...)
	}
}

// requireProtos fails unless want and got have the same length and are
// pairwise proto.Equal.
func requireProtos[M proto.Message](t testing.TB, want, got []M, msgAndArgs ...any) {
	t.Helper()
	if !protosEqual(want, got) {
		require.Fail(t, fmt.Sprintf("records differ\nwant %d: %s\ngot %d:  %s", len(want), showAll(want), len(got), showAll(got)), msgAndArgs...)
	}
}

func protosEqual[M proto.Message](a, b []M) bool {
	return slices.EqualFunc(a, b, func(x, y M) bool { return proto.Equal(x, y) })
}

// sentinels are the errors the suite compares by errors.Is: every
// sentinel of package journal.
var sentinels = []error{
	journal.ErrConflict, journal.ErrStale, journal.ErrNotFound, journal.ErrClosed,
	journal.ErrCorrupt, journal.ErrInvalid, journal.ErrDeleted, journal.ErrNoSpace,
	journal.ErrUnavailable, journal.ErrUnknownOutcome, journal.ErrExists, journal.ErrEnded,
	journal.ErrTooLarge,
}

// sameErr reports whether a and b are both nil, or both non-nil and wrap
// the same sentinels.
func sameErr(a, b error) bool {
	if (a == nil) != (b == nil) {
		return false
	}
	for _, s := range sentinels {
		if errors.Is(a, s) != errors.Is(b, s) {
			return false
		}
	}
	return true
}

// requireSentinel fails t unless err wraps want and no other sentinel of
// package journal: an error that also wrapped ErrUnavailable, say, would
// tell a caller to retry what can never succeed. It fails t too if the
// text of a sentinel shows more than once in the message (a helper that
// named the sentinel again around a cause that already did).
func requireSentinel(t testing.TB, err, want error, msgAndArgs ...any) {
	t.Helper()
	require.ErrorIs(t, err, want, msgAndArgs...)
	for _, s := range sentinels {
		if s != want && errors.Is(err, s) {
			require.Fail(t, fmt.Sprintf("the error wraps another sentinel: %v wraps %v besides %v", err, s, want), msgAndArgs...)
		}
	}
	requireSentinelTextOnce(t, err, msgAndArgs...)
}

// requireSentinelTextOnce fails t if the text of a sentinel of package
// journal shows more than once in err's message.
func requireSentinelTextOnce(t testing.TB, err error, msgAndArgs ...any) {
	t.Helper()
	if err == nil {
		return
	}
	msg := err.Error()
	for _, s := range sentinels {
		if n := strings.Count(msg, s.Error()); n > 1 {
			require.Fail(t, fmt.Sprintf("the text %q shows %d times in %q", s.Error(), n, msg), msgAndArgs...)
		}
	}
}
