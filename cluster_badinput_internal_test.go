package lazarus

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// The gateway refuses a rewind of a conversation that does not exist, as
// Rewind and Edit do (journal.ErrNotFound), and a ClusterRequest_Rewind
// without its AgentRewind (journal.ErrInvalid); it writes nothing. It
// handed both to the conversation, which wrote the rewind as the first
// event of a new conversation and answered success.
func TestGatewayRefusesARewindOfNoConversation(t *testing.T) {
	rt := gatewayRuntime(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	user := scopeToProto(agent.Scope{UserID: "u"})
	for name, c := range map[string]struct {
		rewind   *messages.AgentRewind
		sentinel error
	}{
		"to seq 0":    {&messages.AgentRewind{RequestId: "r1"}, journal.ErrNotFound},
		"empty":       {&messages.AgentRewind{}, journal.ErrNotFound},
		"no message":  {nil, journal.ErrInvalid},
		"edit seq 1":  {&messages.AgentRewind{EditSeq: 1, Message: agent.UserMessage(agent.TextPart("x")), RequestId: "r2"}, journal.ErrNotFound},
		"to seq 7":    {&messages.AgentRewind{ToSeq: 7, RequestId: "r3"}, journal.ErrNotFound},
		"checked log": {&messages.AgentRewind{CheckedInLog: true, RequestId: "r4"}, journal.ErrNotFound},
	} {
		reply := rt.gw.serve(&messages.ClusterRequest{ConversationId: "nobody", Scope: user,
			Op: &messages.ClusterRequest_Rewind{Rewind: c.rewind}})
		require.ErrorIs(t, journal.ErrorFromProto(reply.GetError()), c.sentinel, "%s: %v", name, reply.GetError())
		last, err := rt.Store().LastSeq(ctx, "nobody")
		require.NoError(t, err)
		require.Zero(t, last, "%s: nothing written", name)
		_, err = rt.Store().Conversation(ctx, "nobody")
		require.ErrorIs(t, err, journal.ErrNotFound, "%s: no row written", name)
	}
	// A rewind of a conversation that exists still runs.
	_, err := rt.SendAndWait(ctx, "c", "hi", agent.Scope{UserID: "u"})
	require.NoError(t, err)
	reply := rt.gw.serve(&messages.ClusterRequest{ConversationId: "c", Scope: user,
		Op: &messages.ClusterRequest_Rewind{Rewind: &messages.AgentRewind{RequestId: "r5"}}})
	require.Nil(t, reply.GetError())
}

// The gateway refuses a ScheduleArm or ScheduleDisarm that the Runtime's
// schedule calls would not send, with an error wrapping journal.ErrInvalid:
// missing, with an empty or invalid id (or revision), naming another conversation than
// its request, an arm without a valid time. It answered them all success
// (and handed an arm without a time to the expiry actor as one due at
// 1970, which fired it at once).
func TestGatewayRefusesABadScheduleRequest(t *testing.T) {
	rt := gatewayRuntime(t)
	next := timestamppb.New(time.Now().Add(time.Hour))
	arm := func(m *messages.ScheduleArm) *messages.ClusterRequest {
		return &messages.ClusterRequest{Op: &messages.ClusterRequest_ScheduleArm{ScheduleArm: m}}
	}
	disarm := func(m *messages.ScheduleDisarm) *messages.ClusterRequest {
		return &messages.ClusterRequest{Op: &messages.ClusterRequest_ScheduleDisarm{ScheduleDisarm: m}}
	}
	for name, req := range map[string]*messages.ClusterRequest{
		"arm missing":         arm(nil),
		"arm empty":           arm(&messages.ScheduleArm{}),
		"arm no time":         arm(&messages.ScheduleArm{ConversationId: "c", ScheduleId: "s"}),
		"arm bad time":        arm(&messages.ScheduleArm{ConversationId: "c", ScheduleId: "s", Next: &timestamppb.Timestamp{Nanos: -1}}),
		"arm no schedule id":  arm(&messages.ScheduleArm{ConversationId: "c", Next: next}),
		"arm bad schedule id": arm(&messages.ScheduleArm{ConversationId: "c", ScheduleId: "\xff", Next: next}),
		"arm other conv":      arm(&messages.ScheduleArm{ConversationId: "d", ScheduleId: "s", Next: next}),
		"disarm missing":      disarm(nil),
		"disarm empty":        disarm(&messages.ScheduleDisarm{}),
		"disarm bad conv":     disarm(&messages.ScheduleDisarm{ConversationId: "\xff", ScheduleId: "s"}),
		"disarm other conv":   disarm(&messages.ScheduleDisarm{ConversationId: "d", ScheduleId: "s"}),
		"arm bad revision":    arm(&messages.ScheduleArm{ConversationId: "c", ScheduleId: "s", Next: next, Revision: "\xff"}),
		"disarm bad revision": disarm(&messages.ScheduleDisarm{ConversationId: "c", ScheduleId: "s", Revision: "\xff"}),
	} {
		if name != "disarm bad conv" {
			req.ConversationId = "c"
		} else {
			req.ConversationId = "\xff"
		}
		reply := rt.gw.serve(req)
		require.ErrorIs(t, journal.ErrorFromProto(reply.GetError()), journal.ErrInvalid, "%s: %v", name, reply.GetError())
		require.True(t, reply.GetAnswered(), name)
	}
	for name, req := range map[string]*messages.ClusterRequest{
		"arm":                  arm(&messages.ScheduleArm{ConversationId: "c", ScheduleId: "s", Next: next}),
		"disarm":               disarm(&messages.ScheduleDisarm{ConversationId: "c", ScheduleId: "s"}),
		"arm of a revision":    arm(&messages.ScheduleArm{ConversationId: "c", ScheduleId: "s", Next: next, Revision: "r1"}),
		"disarm of a revision": disarm(&messages.ScheduleDisarm{ConversationId: "c", ScheduleId: "s", Revision: "r1"}),
	} {
		req.ConversationId = "c"
		require.Nil(t, rt.gw.serve(req).GetError(), "%s as the Runtime sends it", name)
	}
}

// The gateway refuses a ClusterReschedule whose time is not a valid
// Timestamp (nanos out of range) with an error wrapping journal.ErrInvalid,
// and leaves the deadline as it was. It took it for another time (AsTime
// normalizes it) and moved the deadline there.
func TestGatewayRefusesAnInvalidRescheduleTime(t *testing.T) {
	model := scripted.New(scripted.Options{})
	rt := gatewayRuntimeOf(t, Options{Model: model, NoResume: true, IdleTimeout: -1,
		Tools: []agent.Tool{{Name: "approve", Executor: messages.Executor_EXECUTOR_HUMAN}}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	id := pendingApproval(t, ctx, rt, model)
	deadline := func() []*messages.Deadline {
		var ds []*messages.Deadline
		require.NoError(t, rt.Store().Deadlines(ctx, time.Unix(1<<40, 0), func(d *messages.Deadline) error {
			ds = append(ds, d)
			return nil
		}))
		return ds
	}
	before := deadline()
	for name, ts := range map[string]*timestamppb.Timestamp{
		"negative nanos": {Seconds: 1e9, Nanos: -1},
		"nanos past 1s":  {Seconds: 1e9, Nanos: 1e9},
		"year 10000":     {Seconds: 1 << 40},
	} {
		reply := rt.gw.serve(&messages.ClusterRequest{ConversationId: "c",
			Op: &messages.ClusterRequest_Reschedule{Reschedule: &messages.ClusterReschedule{ToolCallId: id, At: ts}}})
		require.ErrorIs(t, journal.ErrorFromProto(reply.GetError()), journal.ErrInvalid, "%s: %v", name, reply.GetError())
		require.Len(t, deadline(), len(before), name)
		for i, d := range deadline() {
			require.True(t, proto.Equal(before[i], d), "%s: deadline moved to %v", name, d)
		}
	}
}

// The gateway checks a rewind into the conversation's latest summary
// against the log itself (actors.CheckRewindInLog), as Rewind does: a
// ClusterRequest's checked_in_log is not taken on trust. A rewind to a seq
// an earlier rewind skipped is refused with journal.ErrInvalid and nothing
// is written. The conversation took the peer's checked_in_log and wrote
// it.
func TestGatewayChecksARewindIntoTheSummary(t *testing.T) {
	rt := gatewayRuntime(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	scope := agent.Scope{UserID: "u"}
	for _, text := range []string{"a", "b"} {
		_, err := rt.SendAndWait(ctx, "c", text, scope)
		require.NoError(t, err)
	}
	require.NoError(t, rt.Rewind(ctx, "c", 2, RewindOptions{}, scope)) // skips 3 and 4
	_, err := rt.SendAndWait(ctx, "c", "again", scope)
	require.NoError(t, err)
	last, err := rt.Store().LastSeq(ctx, "c")
	require.NoError(t, err)
	require.NoError(t, rt.Store().PutSummary(ctx, "c", &messages.Summary{FromSeq: 1, ToSeq: last - 1, Content: "so far"}))
	rt.Kill("c") // revives on the summary
	require.ErrorIs(t, rt.Rewind(ctx, "c", 3, RewindOptions{}, scope), journal.ErrInvalid, "Rewind refuses it")

	reply := rt.gw.serve(&messages.ClusterRequest{ConversationId: "c", Scope: scopeToProto(scope),
		Op: &messages.ClusterRequest_Rewind{Rewind: &messages.AgentRewind{ToSeq: 3, RequestId: "r1", CheckedInLog: true}}})
	require.ErrorIs(t, journal.ErrorFromProto(reply.GetError()), journal.ErrInvalid, "%v", reply.GetError())
	now, err := rt.Store().LastSeq(ctx, "c")
	require.NoError(t, err)
	require.Equal(t, last, now, "nothing written")

	// A rewind the log allows runs, checked_in_log set or not.
	for i, checked := range []bool{false, true} {
		reply = rt.gw.serve(&messages.ClusterRequest{ConversationId: "c", Scope: scopeToProto(scope),
			Op: &messages.ClusterRequest_Rewind{Rewind: &messages.AgentRewind{ToSeq: 2, RequestId: fmt.Sprintf("ok%d", i), CheckedInLog: checked}}})
		require.Nil(t, reply.GetError(), "checked_in_log %v", checked)
	}
}

// A send forwarded to the gateway whose message does not fit
// journal.MaxEventBytes once the conversation adds its time, author and
// seq is refused with an error wrapping journal.ErrInvalid, nothing
// written, and the conversation goes on: its subscriber sees no error,
// and a message that fits is written under the refused request id. The
// Store refused the write before, and the activation stopped.
func TestGatewayRefusesASendThatDoesNotFitAsWritten(t *testing.T) {
	rt := gatewayRuntime(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	user := scopeToProto(agent.Scope{UserID: "u"})
	send := func(rid string, msg *messages.UserMessage) *messages.ClusterReply {
		return rt.gw.serve(&messages.ClusterRequest{ConversationId: "c", Scope: user,
			Op: &messages.ClusterRequest_Send{Send: &messages.AgentSend{RequestId: rid, Message: msg}}})
	}
	reply := send("r1", agent.UserMessage(agent.TextPart("hi")))
	require.Nil(t, reply.GetError())
	updates, err := rt.Subscribe(ctx, "c", 0)
	require.NoError(t, err)

	rid := strings.Repeat("0", 32)
	big := agent.UserMessage(agent.TextPart(strings.Repeat("g", MaxPlainEditText())))
	reply = send(rid, big)
	require.ErrorIs(t, journal.ErrorFromProto(reply.GetError()), journal.ErrInvalid, "%v", reply.GetError())
	reply = send(rid, agent.UserMessage(agent.TextPart("short")))
	require.Nil(t, reply.GetError(), "the refused request id was not taken")
	seq := reply.GetSeq()
	for {
		select {
		case up, ok := <-updates:
			require.True(t, ok, "the subscription ended")
			require.NoError(t, up.Err, "the refused send disturbed the conversation")
			if up.Event.GetSeq() == seq {
				require.Equal(t, "short", up.Event.GetUserMsg().GetContent()[0].GetText())
				return
			}
		case <-ctx.Done():
			t.Fatal("the message after the refused one was not written")
		}
	}
}
