package lazarus

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

// readsDownStore fails every read of conv's events and last seq with
// journal.ErrUnavailable (its database unreachable) once down is set.
type readsDownStore struct {
	journal.Store
	conv string
	down atomic.Bool
}

func (s *readsDownStore) failing(conv string) bool { return conv == s.conv && s.down.Load() }

func (s *readsDownStore) Events(ctx context.Context, conv string, q journal.EventQuery) ([]*messages.Event, error) {
	if s.failing(conv) {
		return nil, fmt.Errorf("reads down: %w", journal.ErrUnavailable)
	}
	return s.Store.Events(ctx, conv, q)
}

func (s *readsDownStore) LastSeq(ctx context.Context, conv string) (uint64, error) {
	if s.failing(conv) {
		return 0, fmt.Errorf("reads down: %w", journal.ErrUnavailable)
	}
	return s.Store.LastSeq(ctx, conv)
}

// lastUpdate reads updates until the channel closes, failing the test if
// ctx ends first, and returns the last update.
func lastUpdate(t *testing.T, ctx context.Context, updates <-chan Update, what string) Update {
	t.Helper()
	var last Update
	for {
		select {
		case u, ok := <-updates:
			if !ok {
				return last
			}
			last = u
		case <-ctx.Done():
			t.Fatalf("%s: the subscription neither reported an error nor ended", what)
		}
	}
}

// A subscription on a member that does not own the conversation, whose
// owner's Store fails its reads (journal.ErrUnavailable), ends with an
// update whose Err wraps journal.ErrUnavailable, as the same subscription
// on the owner does. The owner's gateway sent the error as a final
// UNAVAILABLE, which the follower took for a member that stopped serving
// the stream: it subscribed again every 100 ms for as long as the Store
// was down, and its subscriber saw nothing. The same holds when the
// owner's own check of the seq asked (its read of the log's last seq)
// fails after the member's passed: the owner answered UNAVAILABLE, which
// the follower took for a closing member.
func TestForwardedSubscriptionReportsTheOwnersStoreUnavailable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	store := memjournal.New(memjournal.Options{})
	down := &readsDownStore{Store: store}
	model := okModel()
	net, members := pairNet()
	owner, _ := openOwner(t, net, Options{Store: down, Model: model, NoResume: true})
	member := openRuntime(t, Options{Store: store, Model: model, NoResume: true})
	n := netMember(t, net, member, memberAddr, members)
	conv := ownedBy(n, ownerAddr)
	down.conv = conv
	firstTurn(t, ctx, owner, store, conv)
	down.down.Store(true)

	local, err := owner.Subscribe(ctx, conv, 0)
	require.NoError(t, err)
	lu := lastUpdate(t, ctx, local, "on the owner")
	require.ErrorIs(t, lu.Err, journal.ErrUnavailable, "on the owner")

	remote, err := member.Subscribe(ctx, conv, 0)
	require.NoError(t, err)
	ru := lastUpdate(t, ctx, remote, "on the member")
	require.ErrorIs(t, ru.Err, journal.ErrUnavailable)
	require.Equal(t, lu.Err.Error(), ru.Err.Error(), "the owner's error, as a local subscriber gets it")
	require.Nil(t, ru.Event)

	// The member's check of seq 2 reads its own Store, which answers;
	// the owner's read of the last seq fails.
	remote, err = member.Subscribe(ctx, conv, 2)
	require.NoError(t, err)
	ru = lastUpdate(t, ctx, remote, "on the member, after seq 2")
	require.ErrorIs(t, ru.Err, journal.ErrUnavailable)
	require.Empty(t, followIDs(n), "the follower ended")
}

// recordGateway stands for an owner's gateway that hands the test each
// ClusterSubscribe and ClusterUnsubscribe it gets, in order, with its
// sender; it answers nothing itself.
type recordGateway struct{ got chan heldMessage }

type heldMessage struct {
	sender *actor.PID
	msg    any
}

func (g *recordGateway) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *messages.ClusterSubscribe, *messages.ClusterUnsubscribe:
		g.got <- heldMessage{sender: ctx.Sender(), msg: m}
	}
}

// memberOfARecordedOwner is a member at memberAddr, n its node, whose
// requests wait up to an hour for an answer (ClusterOptions.RequestTimeout),
// and conv, a conversation owned at ownerAddr by a recordGateway on
// ownerSys. next is the next message that gateway got, failing the test
// with "the owner got no <what>" if ctx ends first.
func memberOfARecordedOwner(t *testing.T, ctx context.Context) (ownerSys *actor.ActorSystem, member *Runtime, n *clusterNode, conv string, next func(what string) heldMessage) {
	t.Helper()
	net, members := pairNet()
	gw := &recordGateway{got: make(chan heldMessage, 8)}
	ownerSys = fakeGatewayAt(t, net, ownerAddr, gw)
	member = openRuntime(t, Options{Store: memjournal.New(memjournal.Options{}), Model: okModel(), NoResume: true})
	n = netMember(t, net, member, memberAddr, members)
	n.opts.RequestTimeout = time.Hour
	next = func(what string) heldMessage {
		t.Helper()
		return nextHeld(t, ctx, gw.got, what)
	}
	return ownerSys, member, n, ownedBy(n, ownerAddr), next
}

// TestSubscriptionCancelledDuringItsSubscribe: a subscription on a member
// that does not own the conversation, cancelled while its subscribe to the
// owner has no answer yet, ends at once (it waited for the answer, up to
// ClusterOptions.RequestTimeout, here an hour). The owner serving it all
// the same, the member unsubscribes from that stream; a new subscription
// of the conversation reaches the owner only once that stream has ended
// (its final update), so that the two never hold two of the owner's slots.
func TestSubscriptionCancelledDuringItsSubscribe(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ownerSys, member, n, conv, next := memberOfARecordedOwner(t, ctx)

	sctx, scancel := context.WithCancel(ctx)
	updates, err := member.Subscribe(sctx, conv, 0)
	require.NoError(t, err)
	first := next("subscribe")
	sub, ok := first.msg.(*messages.ClusterSubscribe)
	require.True(t, ok, "got %T, not the subscribe", first.msg)
	scancel()
	ended := make(chan struct{})
	go func() {
		for range updates {
		}
		close(ended)
	}()
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		// Answered, so that the member can close.
		ownerSys.Root.Send(first.sender, &messages.ClusterReply{RequestId: sub.GetRequestId(), Node: ownerAddr,
			Error: &messages.Error{Code: messages.ErrorCode_ERROR_CODE_UNAVAILABLE, Message: "closing"}})
		t.Fatal("the cancelled subscription did not end before the owner answered its subscribe")
	}
	require.Zero(t, slotsOf(member, conv), "the ended subscription freed its slot")

	again, err := member.Subscribe(ctx, conv, 0)
	require.NoError(t, err)
	// The owner serves the first stream all the same.
	ownerSys.Root.Send(first.sender, &messages.ClusterReply{RequestId: sub.GetRequestId(), Node: ownerAddr})
	m := next("unsubscribe")
	unsub, ok := m.msg.(*messages.ClusterUnsubscribe)
	require.True(t, ok, "got %T before the unsubscribe of the stream the owner served", m.msg)
	require.Equal(t, sub.GetSubscriptionId(), unsub.GetSubscriptionId())
	require.Equal(t, actor.NewPID(memberAddr, GatewayName).String(), m.sender.String(), "sent as the member's gateway")
	// The owner ends it: only then does the new subscription reach it.
	ownerSys.Root.RequestWithCustomSender(actor.NewPID(memberAddr, GatewayName),
		&messages.ClusterUpdate{SubscriptionId: sub.GetSubscriptionId(), ConversationId: conv, Final: true,
			Error: &messages.Error{Code: messages.ErrorCode_ERROR_CODE_UNAVAILABLE, Message: "stopped serving"}},
		actor.NewPID(ownerAddr, GatewayName))
	m = next("second subscribe")
	sub2, ok := m.msg.(*messages.ClusterSubscribe)
	require.True(t, ok, "got %T, not the new subscribe", m.msg)
	require.NotEqual(t, sub.GetSubscriptionId(), sub2.GetSubscriptionId())
	require.Eventually(t, func() bool { return slices.Equal(followIDs(n), []string{sub2.GetSubscriptionId()}) },
		10*time.Second, time.Millisecond, "only the new subscription's follower is left")
	select {
	case u, ok := <-again:
		t.Fatalf("the new subscription got an update (%v) or ended (%v) unanswered", u, !ok)
	default:
	}
}

// TestCloseDuringAFollowersSubscribe: Close on a member whose subscription
// to a conversation another member owns has no answer to its subscribe
// yet returns without waiting for it (ClusterOptions.RequestTimeout, here
// an hour): the subscription's channel is closed, its slot freed, and the
// owner is told to end a stream it may serve all the same.
func TestCloseDuringAFollowersSubscribe(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ownerSys, member, _, conv, next := memberOfARecordedOwner(t, ctx)

	updates, err := member.Subscribe(ctx, conv, 0)
	require.NoError(t, err)
	first := next("subscribe")
	sub, ok := first.msg.(*messages.ClusterSubscribe)
	require.True(t, ok, "got %T, not the subscribe", first.msg)
	closed := make(chan error, 1)
	go func() { closed <- member.Close() }()
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		// Answered, so that Close can return.
		ownerSys.Root.Send(first.sender, &messages.ClusterReply{RequestId: sub.GetRequestId(), Node: ownerAddr,
			Error: &messages.Error{Code: messages.ErrorCode_ERROR_CODE_UNAVAILABLE, Message: "closing"}})
		t.Fatal("Close waited for the answer to the follower's subscribe")
	}
	for u := range updates {
		require.Nil(t, u.Event, "nothing was served")
	}
	require.Zero(t, slotsOf(member, conv), "the ended subscription freed its slot")
	m := next("unsubscribe")
	unsub, ok := m.msg.(*messages.ClusterUnsubscribe)
	require.True(t, ok, "got %T, not the unsubscribe", m.msg)
	require.Equal(t, sub.GetSubscriptionId(), unsub.GetSubscriptionId())
	require.Equal(t, actor.NewPID(memberAddr, GatewayName).String(), m.sender.String(), "sent as the member's gateway")
}

// TestMembershipChangeDuringASubscribeToAnOwnerThatStays: a membership
// change while a follower's subscribe has no answer yet, the owner the
// same member still, left the subscribe (and ended the stream the owner
// served all the same) to subscribe to that owner again. Now the follower
// awaits the answer still, and the stream it answers is followed.
func TestMembershipChangeDuringASubscribeToAnOwnerThatStays(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ownerSys, member, n, conv, next := memberOfARecordedOwner(t, ctx)

	updates, err := member.Subscribe(ctx, conv, 0)
	require.NoError(t, err)
	first := next("subscribe")
	sub, ok := first.msg.(*messages.ClusterSubscribe)
	require.True(t, ok, "got %T, not the subscribe", first.msg)
	n.mu.Lock()
	close(n.changed) // the same members: the owner stays
	n.changed = make(chan struct{})
	n.mu.Unlock()
	require.Equal(t, ownerAddr, n.owner(conv))

	ownerSys.Root.Send(first.sender, &messages.ClusterReply{RequestId: sub.GetRequestId(), Node: ownerAddr})
	ownerSys.Root.RequestWithCustomSender(actor.NewPID(memberAddr, GatewayName),
		&messages.ClusterUpdate{SubscriptionId: sub.GetSubscriptionId(), ConversationId: conv,
			Event: &messages.Event{Seq: 1, Body: &messages.Event_UserMsg{UserMsg: agent.UserMessage(agent.TextPart("hi"))}}},
		actor.NewPID(ownerAddr, GatewayName))
	select {
	case u, ok := <-updates:
		require.True(t, ok, "the subscription ended")
		require.NoError(t, u.Err)
		require.EqualValues(t, 1, u.Event.GetSeq(), "the stream answered is followed")
	case <-ctx.Done():
		t.Fatal("the stream the owner answered was not followed")
	}
	require.Equal(t, []string{sub.GetSubscriptionId()}, followIDs(n), "one follower, of the first subscribe")
}

// TestMembershipChangeDuringASubscribeToAnOwnerRestarted: a membership
// change while a follower's subscribe has no answer yet, that shows
// another member id at the owner's address (it restarted there), leaves
// the subscribe: the stream the owner answers is ended (unsubscribed), and
// the follower subscribes again once it has.
func TestMembershipChangeDuringASubscribeToAnOwnerRestarted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ownerSys, member, n, conv, next := memberOfARecordedOwner(t, ctx)
	n.mu.Lock()
	n.memberIDs = map[string][]string{ownerAddr: {"owner-1"}, memberAddr: {"member-1"}}
	n.mu.Unlock()

	_, err := member.Subscribe(ctx, conv, 0)
	require.NoError(t, err)
	first := next("subscribe")
	sub, ok := first.msg.(*messages.ClusterSubscribe)
	require.True(t, ok, "got %T, not the subscribe", first.msg)
	n.mu.Lock()
	n.memberIDs = map[string][]string{ownerAddr: {"owner-2"}, memberAddr: {"member-1"}}
	close(n.changed)
	n.changed = make(chan struct{})
	n.mu.Unlock()

	ownerSys.Root.Send(first.sender, &messages.ClusterReply{RequestId: sub.GetRequestId(), Node: ownerAddr})
	m := next("unsubscribe")
	unsub, ok := m.msg.(*messages.ClusterUnsubscribe)
	require.True(t, ok, "got %T, not the unsubscribe of the stream answered", m.msg)
	require.Equal(t, sub.GetSubscriptionId(), unsub.GetSubscriptionId())
	ownerSys.Root.RequestWithCustomSender(actor.NewPID(memberAddr, GatewayName),
		&messages.ClusterUpdate{SubscriptionId: sub.GetSubscriptionId(), ConversationId: conv, Final: true,
			Error: &messages.Error{Code: messages.ErrorCode_ERROR_CODE_UNAVAILABLE, Message: "stopped serving"}},
		actor.NewPID(ownerAddr, GatewayName))
	m = next("second subscribe")
	sub2, ok := m.msg.(*messages.ClusterSubscribe)
	require.True(t, ok, "got %T, not the new subscribe", m.msg)
	require.NotEqual(t, sub.GetSubscriptionId(), sub2.GetSubscriptionId())
}
