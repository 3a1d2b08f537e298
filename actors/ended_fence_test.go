package actors

import (
	"context"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/snapshot"
)

// runWrites carries out the writes among effs against store, as the
// journal actor would, and returns the core's effects of their replies
// with the effects of effs that are not writes.
func runWrites(ctx context.Context, t *testing.T, store journal.Store, c *core, effs []effect) []effect {
	t.Helper()
	var out []effect
	for _, e := range effs {
		w, isWrite := e.(effWrite)
		if !isWrite {
			out = append(out, e)
			continue
		}
		_, err := store.Append(ctx, w.req)
		out = append(out, runWrites(ctx, t, store, c, c.step(t0, &inWriteReply{id: w.id, err: journal.ErrorFromProto(journal.ErrorToProto(writeErr(err)))}))...)
	}
	return out
}

// TestStaleActivationRefusedAfterEnd: End writes no event, so it does not
// move the log's last seq. An activation that read the log before the End
// (a member that still believes it owns the conversation: paused,
// partitioned) passes the fence with what it writes next; the Store
// refuses it with ErrEnded because the row is ENDED, so its caller is told
// the conversation ended and nothing lands in the ended log: neither a
// send (which would be acknowledged into a conversation that never
// answers it) nor a configure's settings.
func TestStaleActivationRefusedAfterEnd(t *testing.T) {
	configure := &inCommand{sender: "configurer", cmd: &Command{Scope: agent.SystemScope, Msg: &messages.AgentConfigure{Settings: map[string]string{"model": "m2"}}}}
	for _, tc := range []struct {
		name string
		cmd  *inCommand
	}{{"Send", send("r2")}, {"Configure", configure}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			mem := memjournal.New(memjournal.Options{})
			t.Cleanup(func() { _ = mem.Close() })
			_, err := mem.Append(ctx, &messages.AppendRequest{ConversationId: "c", Events: []*messages.Event{user("r1"), answer()},
				Status:   messages.ConversationStatus_CONVERSATION_STATUS_IDLE,
				FsmState: &messages.FSMState{State: messages.AgentState_AGENT_STATE_IDLE, LastSeq: 2}})
			require.NoError(t, err)
			activate := func() *core {
				l := load(ctx, mem, "c")
				require.NoError(t, l.err)
				l.scope = agent.SystemScope
				c := newCore(coreConfig{ID: "c", Policy: snapshot.Policy{}.WithDefaults(), Retry: RetryPolicy{}.WithDefaults()}, slog.New(slog.DiscardHandler))
				runWrites(ctx, t, mem, c, c.step(t0, l))
				return c
			}
			stale, owner := activate(), activate()

			// The owner ends the conversation: the row is ENDED, the log
			// as it was.
			end := &inCommand{sender: "ender", cmd: &Command{Scope: agent.SystemScope, Msg: &messages.EndConversation{}}}
			var ended bool
			for _, e := range runWrites(ctx, t, mem, owner, owner.step(t0, end)) {
				if r, isReply := e.(effReply); isReply && r.to == "ender" {
					require.Nil(t, r.msg.(*messages.AgentReply).GetError(), "the End")
					ended = true
				}
			}
			require.True(t, ended, "the End is answered")
			require.True(t, owner.ended())
			row, err := mem.Conversation(ctx, "c")
			require.NoError(t, err)
			require.Equal(t, messages.ConversationStatus_CONVERSATION_STATUS_ENDED, row.GetStatus())
			last, err := mem.LastSeq(ctx, "c")
			require.NoError(t, err)
			require.Equal(t, uint64(2), last, "an End writes no event")

			// The stale activation still sees the log at seq 2, not ended.
			require.False(t, stale.ended())
			var refusal *messages.Error
			var answered bool
			for _, e := range runWrites(ctx, t, mem, stale, stale.step(t0, tc.cmd)) {
				switch e := e.(type) {
				case effReply:
					if e.to != tc.cmd.sender {
						continue
					}
					answered = true
					switch r := e.msg.(type) {
					case *messages.AgentSendReply:
						require.Zero(t, r.GetSeq(), "the send is not acknowledged")
						refusal = r.GetError()
					case *messages.AgentReply:
						refusal = r.GetError()
					default:
						t.Fatalf("reply %T", e.msg)
					}
				case effStartModel:
					t.Fatal("the stale activation called the model")
				}
			}
			require.True(t, answered, "the caller is answered")
			require.ErrorIs(t, journal.ErrorFromProto(refusal), journal.ErrEnded, "the caller is told the conversation ended")

			last, err = mem.LastSeq(ctx, "c")
			require.NoError(t, err)
			require.Equal(t, uint64(2), last, "nothing lands in the ended log")
			row, err = mem.Conversation(ctx, "c")
			require.NoError(t, err)
			require.Equal(t, messages.ConversationStatus_CONVERSATION_STATUS_ENDED, row.GetStatus())
			require.Empty(t, row.GetSettings(), "no settings land in the ended row")
		})
	}
}
