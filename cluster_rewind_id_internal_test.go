package lazarus

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

// A rewind or an edit sent to the gateway without a request id (an
// application actor may send one: AgentRewind.request_id is optional on
// the wire) is given one by the gateway, as a send without one is by
// SendMessage. The owner's supervisor sends a rewind whose write was in
// the Store when its activation stopped (a kill, a fenced write) again to
// a new activation, which finds its request id in the log and answers
// from it; without an id the new activation wrote the rewind (an edit's
// message, and a turn) a second time, where Rewind and Edit, which always
// send an id, write it once.
func TestGatewayRewindWithoutRequestIDIsWrittenOnce(t *testing.T) {
	for _, edit := range []bool{false, true} {
		t.Run(fmt.Sprintf("edit=%v", edit), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			store := memjournal.New(memjournal.Options{})
			hold, release := heldLater(store)
			t.Cleanup(release)
			hold.conv = "c"
			model := scripted.New(scripted.Options{})
			model.Push("c", scripted.Text("one"), scripted.Text("two"), scripted.Text("three"))
			rt, err := Open(Options{Model: model, Store: hold, ActorSystem: quietSystem(t, "owner.test:1"), NoResume: true, IdleTimeout: -1})
			require.NoError(t, err)
			defer rt.Close()
			_, err = rt.SendAndWait(ctx, "c", "hi", agent.Scope{UserID: "u"})
			require.NoError(t, err)
			rw := &messages.AgentRewind{ToSeq: 1}
			if edit {
				rw = &messages.AgentRewind{EditSeq: 1, Message: agent.UserMessage(agent.TextPart("again"))}
			}
			hold.armed.Store(true)
			done := make(chan *messages.ClusterReply, 1)
			go func() {
				done <- rt.gw.serve(&messages.ClusterRequest{ConversationId: "c", Scope: scopeToProto(agent.Scope{UserID: "u"}),
					Op: &messages.ClusterRequest_Rewind{Rewind: rw}})
			}()
			select {
			case <-hold.held:
			case <-ctx.Done():
				t.Fatal("the rewind's write never reached the Store")
			}
			require.True(t, rt.sup.Kill("c", func() {
				// The killed activation answered the rewind (unknown
				// outcome, retry); its write lands before a new
				// activation reads the log.
				release()
				require.Eventually(t, func() bool {
					last, err := store.LastSeq(ctx, "c")
					return err == nil && last > 2
				}, 10*time.Second, time.Millisecond, "the held write landed")
			}))
			var reply *messages.ClusterReply
			select {
			case reply = <-done:
			case <-ctx.Done():
				t.Fatal("the rewind did not return")
			}
			require.NoError(t, journal.ErrorFromProto(reply.GetError()))
			evs, err := store.Events(ctx, "c", journal.EventQuery{})
			require.NoError(t, err)
			var rewinds, users int
			for _, ev := range evs {
				if ev.GetRewind() != nil {
					rewinds++
				}
				if ev.GetUserMsg() != nil {
					users++
				}
			}
			require.Equal(t, 1, rewinds, "the rewind is in the log once: %v", evs)
			if edit {
				require.Equal(t, 2, users, "the edit's message is in the log once")
				require.EqualValues(t, 4, reply.GetSeq(), "the seq of the edit's message that landed")
			}
		})
	}
}
