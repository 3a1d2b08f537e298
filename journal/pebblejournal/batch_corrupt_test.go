package pebblejournal

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// TestCorruptRecordFailsOnlyItsRequestInABatch: in an AppendBatch, a
// request that meets a corrupt stored record (its conversation row, a tool
// call row, a deadline or a schedule it checks) fails alone with
// journal.ErrCorrupt and writes nothing; the other requests of the group
// commit land.
func TestCorruptRecordFailsOnlyItsRequestInABatch(t *testing.T) {
	at := time.Unix(10_000, 0)
	resolve := func(conv string) *messages.AppendRequest {
		return &messages.AppendRequest{ConversationId: conv, Unfenced: true,
			Resolutions: []*messages.ToolResolution{{ToolCallId: conv + "/tc", Status: messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED, At: timestamppb.New(at)}}}
	}
	events := func(conv string) *messages.AppendRequest {
		return &messages.AppendRequest{ConversationId: conv, ExpectedLast: 2, Events: []*messages.Event{userEvent("more")},
			Status: messages.ConversationStatus_CONVERSATION_STATUS_IDLE}
	}
	for name, tc := range map[string]struct {
		key func(conv, call string) []byte
		req func(conv string) *messages.AppendRequest
	}{
		"conversation row": {func(conv, _ string) []byte { return convKey(famConv, conv) }, events},
		"tool call row":    {func(conv, call string) []byte { return idKey(famToolCall, conv, call) }, resolve},
		"deadline": {func(conv, call string) []byte { return idKey(famDeadline, conv, call) }, func(conv string) *messages.AppendRequest {
			req := resolve(conv)
			req.DueBy = timestamppb.New(at.Add(time.Hour))
			return req
		}},
		"schedule": {func(conv, _ string) []byte { return idKey(famSchedule, conv, "s") }, func(conv string) *messages.AppendRequest {
			req := events(conv)
			req.ScheduleFire = &messages.ScheduleFire{ScheduleId: "s", Occurrence: timestamppb.New(at), Next: timestamppb.New(at.Add(time.Minute))}
			return req
		}},
	} {
		t.Run(name, func(t *testing.T) {
			s := openMem(t, Options{})
			const bad, good = "bad", "good"
			call := bad + "/tc"
			tcall := &messages.ToolCall{Id: call, Name: "ask", Arguments: `{}`}
			_, err := s.Append(ctx, &messages.AppendRequest{ConversationId: bad,
				Events: []*messages.Event{
					{Body: &messages.Event_AssistantMsg{AssistantMsg: &messages.AssistantMessage{ToolCalls: []*messages.ToolCall{tcall}}}},
					{Body: &messages.Event_ToolCall{ToolCall: &messages.ToolCallEvent{Call: tcall, Executor: messages.Executor_EXECUTOR_HUMAN}}},
				},
				ToolCalls: []*messages.ToolCallRecord{{Id: call, ConversationId: bad, Name: "ask", Executor: messages.Executor_EXECUTOR_HUMAN, Args: `{}`}},
				Schedule:  []*messages.Deadline{{ConversationId: bad, ToolCallId: call, At: timestamppb.New(at)}},
			})
			require.NoError(t, err)
			require.NoError(t, s.PutSchedule(ctx, &messages.Schedule{Id: "s", ConversationId: bad, Next: timestamppb.New(at), Every: durationpb.New(time.Minute),
				Payload: &messages.UserMessage{Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: "tick"}}}}}))
			_, err = s.Append(ctx, &messages.AppendRequest{ConversationId: good, Events: []*messages.Event{userEvent("hi")}})
			require.NoError(t, err)
			require.NoError(t, s.db.Set(tc.key(bad, call), []byte{0xFF, 0x01}, nil))
			// Written behind the Store's back: forget what its caches know.
			s.heads.drop(s.convStripe(bad), bad)
			s.calls.drop(s.idStripe(call), call)

			results := s.AppendBatch(ctx, []*messages.AppendRequest{tc.req(bad), {ConversationId: good, ExpectedLast: 1, Events: []*messages.Event{userEvent("again")}}})
			require.Len(t, results, 2)
			require.ErrorIs(t, results[0].Err, journal.ErrCorrupt, "the request that meets the corrupt record")
			require.NoError(t, results[1].Err, "the other request of the batch")
			require.Equal(t, journal.AppendResult{FirstSeq: 2, LastSeq: 2}, results[1])
			last, err := s.LastSeq(ctx, good)
			require.NoError(t, err)
			require.Equal(t, uint64(2), last, "the other request landed")
			last, err = s.LastSeq(ctx, bad)
			require.NoError(t, err)
			require.Equal(t, uint64(2), last, "no event written for the failed request")
			if name != "tool call row" {
				rec, err := s.ToolCall(ctx, call)
				require.NoError(t, err)
				require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING, rec.GetStatus(), "the call was not resolved")
			}
			if name != "conversation row" {
				row, err := s.Conversation(ctx, bad)
				require.NoError(t, err)
				require.Equal(t, messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE, row.GetStatus(), "the row was not changed")
			}
		})
	}
}
