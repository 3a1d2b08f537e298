package lazarus

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/cluster"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

// blockingModel blocks every call until its context ends: calls says a
// call began, ended that its context ended.
type blockingModel struct {
	calls chan struct{}
	ended chan struct{}
}

func (m *blockingModel) Generate(ctx context.Context, _ agent.Turn, _ func(string)) (*messages.AssistantMessage, error) {
	m.calls <- struct{}{}
	<-ctx.Done()
	m.ended <- struct{}{}
	return nil, ctx.Err()
}

// TestMembershipChangeStopsTheActivationsOfMovedConversations: a member
// whose conversation moved to another member (one joined) while its turn
// was in a model call stops that activation when it applies the
// membership: the call's context ends, the activation is no longer live,
// and the stop wrote nothing (the log ends in the user message, the row
// still says ACTIVE: the new owner's resume scan runs the turn). It kept
// running until the turn ended, alongside the new owner's.
func TestMembershipChangeStopsTheActivationsOfMovedConversations(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	model := &blockingModel{calls: make(chan struct{}, 8), ended: make(chan struct{}, 8)}
	rt, err := Open(Options{Model: model, NoResume: true, ResumeInterval: -1, IdleTimeout: -1})
	require.NoError(t, err)
	defer rt.Close()
	n, joined, moved, kept := joinAndMove(rt)
	for _, id := range []string{moved, kept} {
		_, err := rt.Send(ctx, id, "hi", agent.Scope{UserID: "u"})
		require.NoError(t, err)
		select {
		case <-model.calls:
		case <-ctx.Done():
			t.Fatal("no model call began")
		}
	}
	require.True(t, rt.IsActive(moved))
	require.Equal(t, n.self, n.owner(moved), "this member owns it before the change")

	n.onTopology([]*cluster.Member{joined})
	require.Equal(t, joined.Address(), n.owner(moved), "the member that joined owns it now")
	select {
	case <-model.ended:
	case <-ctx.Done():
		t.Fatal("the model call of the moved conversation was not cancelled")
	}
	require.Eventually(t, func() bool { return !rt.IsActive(moved) }, 10*time.Second, time.Millisecond,
		"the moved conversation's activation is still live")
	require.True(t, rt.IsActive(kept), "the conversation this member still owns keeps its activation")
	select {
	case <-model.ended:
		t.Fatal("the model call of the kept conversation ended")
	default:
	}

	last, err := rt.Store().LastSeq(ctx, moved)
	require.NoError(t, err)
	require.Equal(t, uint64(1), last, "the stop wrote nothing: the log ends in the user message")
	row, err := rt.Store().Conversation(ctx, moved)
	require.NoError(t, err)
	require.Equal(t, messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE, row.GetStatus(), "its turn is still owed, to the new owner")
}

// joinAndMove makes rt's node n a member of a cluster of itself alone,
// and returns joined, a member that may join it, with moved, the first
// conversation joined would take from n, and kept, the first n would keep.
func joinAndMove(rt *Runtime) (n *clusterNode, joined *cluster.Member, moved, kept string) {
	n = newNode(rt, rt.system)
	n.attach(rt.sup, n.generation())

	joined = &cluster.Member{Id: "joined", Host: "10.0.0.1", Port: 7001, Kinds: []string{ConversationKind}}
	after := testNode(n.self, joined.Address())
	for i := 0; moved == "" || kept == ""; i++ {
		id := fmt.Sprintf("conv-%d", i)
		if after.owner(id) == joined.Address() {
			moved = firstOf(moved, id)
		} else {
			kept = firstOf(kept, id)
		}
	}
	return n, joined, moved, kept
}

// firstOf is have, or id when have is unset.
func firstOf(have, id string) string {
	if have != "" {
		return have
	}
	return id
}

// TestSendInFlightOnAStoppedActivationEndsAtTheNewOwner: a send whose
// write is in flight on the member that owned its conversation when a
// member joined and took it is not lost, nor answered by an activation
// left running there: the stop tells the send to retry, and it is sent to
// the new owner, which answers it (the send's request id keeps it once in
// the log) and runs the turn it owes. The old member's model is not called
// for it; before, the old member's activation answered the send and ran
// the turn beside the new owner.
func TestSendInFlightOnAStoppedActivationEndsAtTheNewOwner(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	mem := memjournal.New(memjournal.Options{})
	hold, release := heldLater(mem)
	var callsA, callsB atomic.Int32
	modelOf := func(calls *atomic.Int32) agent.Model {
		return agent.ModelFunc(func(context.Context, agent.Turn, func(string)) (*messages.AssistantMessage, error) {
			calls.Add(1)
			return agent.Text("ok"), nil
		})
	}
	// Two Runtimes on one Store, in one process and without protoactor's
	// cluster: a is a member whose membership the test sets, its requests
	// leaving through b's actor system, where b serves the gateway at the
	// address of the member that joins.
	a, err := Open(Options{Store: hold, Model: modelOf(&callsA), NoResume: true, ResumeInterval: -1, IdleTimeout: -1})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = a.Close()
		a.system.Shutdown() // with a.cl set, Close leaves it to the cluster
	})
	memberB := &cluster.Member{Id: "b", Host: "127.0.0.1", Port: 1, Kinds: []string{ConversationKind}}
	bSys := quietSystem(t, memberB.Address())
	b, err := Open(Options{Store: hold, Model: modelOf(&callsB), ActorSystem: bSys, NoResume: true, ResumeInterval: -1, IdleTimeout: -1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	n := setMembership(a, bSys, "a.invalid:1")
	t.Cleanup(release) // before the Runtimes close: a held append ends
	both := testNode(n.self, memberB.Address())
	conv := firstConv(func(id string) bool { return both.owner(id) == memberB.Address() })
	hold.conv = conv
	require.Equal(t, n.self, a.Owner(conv), "a sees itself alone")

	_, err = a.Send(ctx, conv, "one", agent.Scope{UserID: "u"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		row, err := mem.Conversation(ctx, conv)
		return err == nil && row.GetStatus() != messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE
	}, 10*time.Second, time.Millisecond, "the first turn ended")
	require.Equal(t, int32(1), callsA.Load())

	wait := sendHeld(t, ctx, a, hold, conv, "the send's write never reached the Store")
	a.cl.onTopology([]*cluster.Member{memberB})
	require.Equal(t, memberB.Address(), a.Owner(conv))
	require.Eventually(t, func() bool { return !a.IsActive(conv) }, 10*time.Second, time.Millisecond,
		"the old owner's activation is still live")
	release()

	seq, err := wait()
	require.NoError(t, err)
	require.Equal(t, uint64(3), seq)
	require.Eventually(t, func() bool {
		evs, err := mem.Events(ctx, conv, journal.EventQuery{Limit: 1})
		return err == nil && len(evs) == 1 && evs[0].GetAssistantMsg() != nil && evs[0].GetSeq() == 4
	}, 10*time.Second, time.Millisecond, "the turn the send owes was not answered")
	require.Equal(t, int32(1), callsB.Load(), "the new owner ran the turn")
	require.Equal(t, int32(1), callsA.Load(), "the old owner ran no turn for the send")
	require.False(t, a.IsActive(conv))
	evs, err := b.History(ctx, conv, 0, 0)
	require.NoError(t, err)
	require.Len(t, evs, 4, "one, its answer, two once, its answer")
}

// streamingModel streams one delta, says so, and then blocks until its
// context ends.
type streamingModel struct{ streamed chan string }

func (m *streamingModel) Generate(ctx context.Context, turn agent.Turn, delta func(string)) (*messages.AssistantMessage, error) {
	delta("partial answer")
	m.streamed <- turn.ConversationID
	<-ctx.Done()
	return nil, ctx.Err()
}

// answerHeld reports whether the hub holds deltas of an answer in progress
// of conversation id.
func answerHeld(h *hub, id string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.answers[id]
	return ok
}

// TestMembershipChangeDropsTheAnswerInProgressOfMovedConversations: the
// hub keeps the deltas of each conversation's answer in progress (up to
// journal.MaxEventBytes) until an event of it is committed or its turn
// ends; a conversation that moved to another member mid-answer gets
// neither here (its activation is stopped quietly, its turn runs on the
// new owner), so its deltas were kept until the process closed, one
// answer for every conversation a membership change moved mid-answer. The
// member now drops them when it applies the membership, and keeps no
// delta of a conversation it does not own (a call the stop has not
// cancelled yet); the answer of a conversation it still owns stays.
func TestMembershipChangeDropsTheAnswerInProgressOfMovedConversations(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	model := &streamingModel{streamed: make(chan string, 8)}
	rt, err := Open(Options{Model: model, NoResume: true, ResumeInterval: -1, IdleTimeout: -1})
	require.NoError(t, err)
	defer rt.Close()
	n, joined, moved, kept := joinAndMove(rt)
	for _, id := range []string{moved, kept} {
		_, err := rt.Send(ctx, id, "hi", agent.Scope{UserID: "u"})
		require.NoError(t, err)
		select {
		case got := <-model.streamed:
			require.Equal(t, id, got)
		case <-ctx.Done():
			t.Fatal("no model call streamed")
		}
		require.True(t, answerHeld(rt.hub, id), "the hub holds the answer in progress of %s", id)
	}

	n.onTopology([]*cluster.Member{joined})
	require.Eventually(t, func() bool { return !rt.IsActive(moved) }, 10*time.Second, time.Millisecond,
		"the moved conversation's activation is still live")
	require.False(t, answerHeld(rt.hub, moved), "the moved conversation's answer in progress is still held")
	require.True(t, answerHeld(rt.hub, kept), "the answer in progress of the conversation this member still owns stays")

	// A delta of the moved conversation published after the change (a
	// model call its stop has not cancelled yet) is not kept either.
	rt.hub.publish(actors.Update{ConversationID: moved, Delta: "late", After: 1})
	require.False(t, answerHeld(rt.hub, moved), "a late delta of the moved conversation is kept")
}
