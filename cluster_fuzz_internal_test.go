package lazarus

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// FuzzGatewayRequest hands the gateway a ClusterRequest of arbitrary
// bytes (a member's or an application actor's): it never panics, and an
// error it answers wraps a sentinel of the journal's codes (never INTERNAL
// for bad input). In a plain `go test` only the seeds run.
func FuzzGatewayRequest(f *testing.F) {
	user := scopeToProto(agent.Scope{UserID: "u"})
	next := timestamppb.New(time.Unix(1e9, 0))
	for _, req := range []*messages.ClusterRequest{
		{},
		{ConversationId: "c", Scope: user, Op: &messages.ClusterRequest_Wake{Wake: &messages.AgentWake{}}},
		{ConversationId: "c", Op: &messages.ClusterRequest_Configure{Configure: &messages.AgentConfigure{Settings: map[string]string{"colour": "blue"}}}},
		{ConversationId: "c", Scope: user, Op: &messages.ClusterRequest_Rewind{Rewind: &messages.AgentRewind{ToSeq: 3, RequestId: "r"}}},
		{ConversationId: "c", Op: &messages.ClusterRequest_Resolve{Resolve: &messages.ClusterResolve{ToolCallId: "t", Status: 99}}},
		{ConversationId: "a/b\x00", Op: &messages.ClusterRequest_Kill{Kill: &messages.ClusterKill{}}},
		{ConversationId: "c", Op: &messages.ClusterRequest_Delete{Delete: &messages.ClusterDelete{}}},
		{ConversationId: "c", Op: &messages.ClusterRequest_Reschedule{Reschedule: &messages.ClusterReschedule{ToolCallId: "t", At: &timestamppb.Timestamp{Seconds: -1 << 62}}}},
		{ConversationId: "c", Op: &messages.ClusterRequest_End{End: &messages.EndConversation{}}},
		{ConversationId: "c", Op: &messages.ClusterRequest_ScheduleArm{ScheduleArm: &messages.ScheduleArm{ConversationId: "c", ScheduleId: "s", Next: next}}},
		{ConversationId: "c", Op: &messages.ClusterRequest_ScheduleDisarm{ScheduleDisarm: &messages.ScheduleDisarm{ScheduleId: "s"}}},
	} {
		b, err := proto.Marshal(req)
		require.NoError(f, err)
		f.Add(b)
	}
	rt := gatewayRuntime(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		var req messages.ClusterRequest
		if proto.Unmarshal(b, &req) != nil {
			return
		}
		if _, send := req.GetOp().(*messages.ClusterRequest_Send); send {
			return // a send runs a turn of the model: not this target's
		}
		reply := rt.gw.serve(&req)
		if e := reply.GetError(); e != nil {
			require.NotEqual(t, messages.ErrorCode_ERROR_CODE_INTERNAL, e.GetCode(), "%v", e)
			require.NotEqual(t, messages.ErrorCode_ERROR_CODE_UNSPECIFIED, e.GetCode(), "%v", e)
		}
	})
}

// FuzzClusterUpdate reads a ClusterUpdate of arbitrary bytes (what the
// member serving a stream sends) as a follower does (updateFromProto): it
// never panics, an update with an error has an error wrapping the
// sentinels of its codes, and one without has none. In a plain `go test`
// only the seeds run.
func FuzzClusterUpdate(f *testing.F) {
	for _, u := range []*messages.ClusterUpdate{
		{},
		{SubscriptionId: "s", ConversationId: "c", Event: &messages.Event{Seq: 1, Body: &messages.Event_Suspension{Suspension: &messages.Suspension{}}}},
		{Event: &messages.Event{Seq: 2, Body: &messages.Event_TurnFailed{TurnFailed: &messages.TurnFailed{Code: "rate_limited", Attempts: 1 << 30}}}},
		{Event: &messages.Event{Body: &messages.Event_Rewind{Rewind: &messages.Rewind{CancelledTurn: true}}}},
		{Retry: true, RetryAttempt: 1 << 31, RetryDelayMs: -1 << 62, RetryCode: "nosuch", Error: &messages.Error{Code: 1 << 20}},
		{Retry: true, RetryCode: "rate_limited"},
		{TurnFailedUnwritten: true, TurnCancelled: true},
		{Final: true, Answered: true, Error: &messages.Error{Code: messages.ErrorCode_ERROR_CODE_UNAVAILABLE}},
	} {
		b, err := proto.Marshal(u)
		require.NoError(f, err)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var p messages.ClusterUpdate
		if proto.Unmarshal(b, &p) != nil {
			return
		}
		u := updateFromProto(&p)
		require.Equal(t, p.GetError() != nil, u.Err != nil, "%v", &p)
		if e := p.GetError(); e != nil {
			if w, ok := journal.ErrorFromProto(e).(interface{ Unwrap() []error }); ok {
				for _, s := range w.Unwrap() {
					require.ErrorIs(t, u.Err, s, "%v", &p)
				}
			}
			_ = u.Err.Error()
		}
		if u.TurnEnd != nil && u.TurnEnd.Err != nil {
			_ = u.TurnEnd.Err.Error()
		}
		require.Equal(t, p.GetConversationId(), u.ConversationID)
	})
}
