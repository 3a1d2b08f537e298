package lazarus

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

// An unsubscribe that reaches the owner's gateway right after its
// subscribe (a follower whose subscribe timed out sends one) ends the
// stream, time after time, so that it frees its slot of the conversation.
// The gateway registered the stream on the stream's goroutine: an
// unsubscribe it took first was ignored (an unknown id), and the stream,
// registered after it, held a slot of the conversation until its first
// update found no follower (here, with no gateway on the subscriber's
// member, until that member left).
func TestUnsubscribeRightAfterSubscribeEndsTheStream(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store := memjournal.New(memjournal.Options{})
	net, _ := pairNet()
	owner, _ := openOwner(t, net, Options{Store: store, Model: okModel(), NoResume: true, MaxSubscriptions: 1})
	memberSys := quietSystem(t, memberAddr) // no gateway: the stream's updates reach nobody
	net.join(memberSys)
	const conv = "conv-late"
	firstTurn(t, ctx, owner, store, conv)
	gw := actor.NewPID(ownerAddr, GatewayName)
	for i := range 50 {
		id := fmt.Sprintf("%s/late/%d", memberAddr, i)
		memberSys.Root.RequestWithCustomSender(gw, &messages.ClusterSubscribe{RequestId: uint64(i + 1), SubscriptionId: id,
			ConversationId: conv, ReplyAddress: memberAddr}, actor.NewPID(memberAddr, "box"))
		memberSys.Root.RequestWithCustomSender(gw, &messages.ClusterUnsubscribe{SubscriptionId: id}, actor.NewPID(memberAddr, GatewayName))
		require.Eventually(t, func() bool {
			owner.gw.mu.Lock()
			served := len(owner.gw.serving)
			owner.gw.mu.Unlock()
			return served == 0 && slotsOf(owner, conv) == 0
		}, 5*time.Second, time.Millisecond, "stream %d ended and freed its slot", i)
	}
}

// fakeOwner is a test's owner of conversations at addr with
// Options.MaxSubscriptions at 1: a subscribe while a stream holds the
// slot is refused with TOO_MANY_SUBSCRIPTIONS, as the owner's hub refuses
// it; a stream it ends (end) frees the slot, then sends its final update.
type fakeOwner struct {
	t      *testing.T
	sys    *actor.ActorSystem
	gw     *recordGateway
	addr   string
	member string // the subscribing member's address
	holder *messages.ClusterSubscribe
}

func newFakeOwner(t *testing.T, net *fakeNet, addr, member string) *fakeOwner {
	o := &fakeOwner{t: t, gw: &recordGateway{got: make(chan heldMessage, 16)}, addr: addr, member: member}
	o.sys = fakeGatewayAt(t, net, addr, o.gw)
	return o
}

// next is the next message the owner's gateway got.
func (o *fakeOwner) next(ctx context.Context) heldMessage {
	o.t.Helper()
	select {
	case m := <-o.gw.got:
		return m
	case <-ctx.Done():
		o.t.Fatal("the owner got nothing")
		return heldMessage{}
	}
}

// subscribe takes s: refused if a stream holds the slot, else it holds it;
// answered (see answer) if answer.
func (o *fakeOwner) subscribe(h heldMessage, answer bool) {
	s := h.msg.(*messages.ClusterSubscribe)
	if o.holder != nil {
		o.sys.Root.Send(h.sender, &messages.ClusterReply{RequestId: s.GetRequestId(), Node: o.addr, Answered: true,
			Error: wireErr(fmt.Errorf("subscribe: %w", ErrTooManySubscriptions))})
		return
	}
	o.holder = s
	if answer {
		o.answer(h)
	}
}

// answer serves the stream of subscribe h, with the event after the
// subscribe's after_seq.
func (o *fakeOwner) answer(h heldMessage) {
	s := h.msg.(*messages.ClusterSubscribe)
	o.sys.Root.Send(h.sender, &messages.ClusterReply{RequestId: s.GetRequestId(), Node: o.addr})
	o.sys.Root.RequestWithCustomSender(actor.NewPID(o.member, GatewayName),
		&messages.ClusterUpdate{SubscriptionId: s.GetSubscriptionId(), ConversationId: s.GetConversationId(), Event: &messages.Event{Seq: s.GetAfterSeq() + 1}},
		actor.NewPID(o.addr, GatewayName))
}

// end ends the stream that holds the slot: the slot is free, then its
// final update is sent.
func (o *fakeOwner) end() {
	s := o.holder
	o.holder = nil
	o.sys.Root.RequestWithCustomSender(actor.NewPID(o.member, GatewayName),
		&messages.ClusterUpdate{SubscriptionId: s.GetSubscriptionId(), ConversationId: s.GetConversationId(), Final: true,
			Error: &messages.Error{Code: messages.ErrorCode_ERROR_CODE_UNAVAILABLE, Message: "stopped serving"}},
		actor.NewPID(o.addr, GatewayName))
}

// endingOf is how many streams of conv that owner serves to n are ending
// apart.
func endingOf(n *clusterNode, conv, owner string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.ending[endingKey{conv, owner}])
}

// endWhenAwaited ends the owner's stream once n awaits its end (endingOf),
// and takes the next subscribe meanwhile as the owner does: at once.
// It returns the subscribe that followed.
func endWhenAwaited(t *testing.T, ctx context.Context, o *fakeOwner, n *clusterNode, conv string) heldMessage {
	t.Helper()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case h := <-o.gw.got:
			if _, ok := h.msg.(*messages.ClusterSubscribe); ok {
				return h
			}
		case <-tick.C:
			if o.holder != nil && endingOf(n, conv, o.addr) > 0 {
				o.end()
			}
		case <-ctx.Done():
			t.Fatal("the follower did not subscribe again")
		}
	}
}

// readServed reads the subscription's next update: the event of seq,
// served.
func readServed(t *testing.T, ctx context.Context, updates <-chan Update, seq uint64) {
	t.Helper()
	select {
	case u, ok := <-updates:
		require.True(t, ok, "the subscription ended")
		require.NoError(t, u.Err, "served within the owner's cap")
		require.Equal(t, seq, u.Event.GetSeq())
	case <-ctx.Done():
		t.Fatal("no update")
	}
}

// A follower whose subscribe the owner did not answer in time
// (ClusterOptions.RequestTimeout) subscribes to it again only once the
// stream the owner served it meanwhile has ended, so that at the owner's
// Options.MaxSubscriptions of 1 the new subscription is served. The
// follower unsubscribed and subscribed again after its wait, and the
// owner refused it (TOO_MANY_SUBSCRIPTIONS, which ended the subscription)
// for the slot the late stream still held.
func TestTimedOutSubscribeEndsBeforeTheFollowerSubscribesAgain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	o, n, conv, updates, scancel := followFakeOwner(t, ctx, Options{}, func(n *clusterNode) { n.opts.RequestTimeout = time.Second })

	first := o.next(ctx)
	o.subscribe(first, false) // not answered in time
	unsub := o.next(ctx)
	require.Equal(t, first.msg.(*messages.ClusterSubscribe).GetSubscriptionId(), unsub.msg.(*messages.ClusterUnsubscribe).GetSubscriptionId(),
		"the follower unsubscribes from the unanswered stream")
	o.answer(first) // late: the stream holds the slot until it ends
	again := endWhenAwaited(t, ctx, o, n, conv)
	o.subscribe(again, true)
	readServed(t, ctx, updates, 1)
	scancel()
	for range updates {
	}
}

// A follower whose owner changes, then changes back before the old
// stream ended, subscribes to that owner again only once that stream has
// ended, so that at the owner's Options.MaxSubscriptions of 1 the new
// subscription is served. The follower left the old owner without
// waiting, and on its return the owner refused it
// (TOO_MANY_SUBSCRIPTIONS, which ended the subscription) for the slot its
// own old stream still held.
func TestFollowerBackToItsOwnerWaitsForItsOldStream(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	o, n, conv, updates, scancel := followFakeOwner(t, ctx, Options{}, nil)
	o.subscribe(o.next(ctx), true)
	readServed(t, ctx, updates, 1)

	change := func(ms []string) {
		n.mu.Lock()
		n.members.Store(&ms)
		close(n.changed)
		n.changed = make(chan struct{})
		n.mu.Unlock()
	}
	members := *n.members.Load()
	change([]string{memberAddr}) // the member owns it now
	_, ok := o.next(ctx).msg.(*messages.ClusterUnsubscribe)
	require.True(t, ok, "the follower leaves the old owner")
	change(members) // and back
	again := endWhenAwaited(t, ctx, o, n, conv)
	o.subscribe(again, true)
	readServed(t, ctx, updates, 2)
	scancel()
	for range updates {
	}
}

// A follower that falls behind while it waits for its subscriber to take
// an update (the subscriber does not read: its channel is full) ends its
// stream then, not once the subscriber reads, so that it holds none of
// the owner's slots meanwhile (Options.MaxSubscriptions); once the
// subscriber reads, it gets the update in hand, and the follower
// subscribes again after it. The follower, waiting on the subscriber
// alone, kept the stream (and the owner's slot, and the owner sending it
// every update) for as long as the subscriber did not read.
func TestStuckFollowerEndsItsStreamOnceBehind(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const buffer = 64 // room for every update until the subscriber's channel is full
	o, n, conv, updates, scancel := followFakeOwner(t, ctx, Options{SubscriberBuffer: buffer}, nil)
	first := o.next(ctx)
	o.subscribe(first, true) // seq 1
	id := first.msg.(*messages.ClusterSubscribe).GetSubscriptionId()
	send := func(id string, seq uint64) {
		o.sys.Root.RequestWithCustomSender(actor.NewPID(memberAddr, GatewayName),
			&messages.ClusterUpdate{SubscriptionId: id, ConversationId: conv, Event: &messages.Event{Seq: seq}},
			actor.NewPID(ownerAddr, GatewayName))
	}
	for seq := uint64(2); seq <= uint64(cap(updates)); seq++ {
		send(id, seq)
	}
	require.Eventually(t, func() bool { return len(updates) == cap(updates) }, 10*time.Second, time.Millisecond,
		"the subscriber's channel fills")
	// The next update is taken once the gateway has taken it (it tells
	// the owner to end an unknown stream after it), and its buffer is
	// empty: the follower waits to hand it over.
	send(id, uint64(cap(updates))+1)
	send(memberAddr+"/probe", 1)
	probe, ok := o.next(ctx).msg.(*messages.ClusterUnsubscribe)
	require.True(t, ok)
	require.Equal(t, memberAddr+"/probe", probe.GetSubscriptionId())
	n.mu.Lock()
	f := n.follow[id]
	n.mu.Unlock()
	require.NotNil(t, f)
	require.Eventually(t, func() bool { return len(f.in) == 0 }, 10*time.Second, time.Millisecond, "the follower took the update")
	for seq := uint64(cap(updates)) + 2; seq <= uint64(cap(updates))+2+buffer; seq++ {
		send(id, seq) // the last one does not fit: the follower is behind
	}
	unsub, ok := o.next(ctx).msg.(*messages.ClusterUnsubscribe)
	require.True(t, ok, "the follower ends its stream")
	require.Equal(t, id, unsub.GetSubscriptionId())
	o.end()
	require.Eventually(t, func() bool { return len(followIDs(n)) == 0 }, 10*time.Second, time.Millisecond,
		"the stream ended while the subscriber does not read")
	for seq := uint64(1); seq <= uint64(cap(updates))+1; seq++ {
		readServed(t, ctx, updates, seq)
	}
	again := o.next(ctx)
	require.EqualValues(t, cap(updates)+1, again.msg.(*messages.ClusterSubscribe).GetAfterSeq(),
		"the follower subscribes again after the update it handed over")
	o.subscribe(again, true)
	readServed(t, ctx, updates, uint64(cap(updates))+2)
	scancel()
	for range updates {
	}
}

// A follower whose owner changes (here it left) while the follower waits
// for the answer to its subscribe subscribes to the new owner at once,
// however long ClusterOptions.RequestTimeout; the old owner's late answer
// is awaited apart, and the stream it served is ended. The follower
// waited on the old owner until the request timed out (an hour here).
func TestFollowerMovesOnWhileItsSubscribeIsUnanswered(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const newOwnerAddr = "other.test:1"
	net, members := pairNet()
	o := newFakeOwner(t, net, ownerAddr, memberAddr)
	o2 := newFakeOwner(t, net, newOwnerAddr, memberAddr)
	member := openRuntime(t, Options{Store: memjournal.New(memjournal.Options{}), NoResume: true, Model: okModel()})
	n := netMember(t, net, member, memberAddr, members)
	n.opts.RequestTimeout = time.Hour
	moved := []string{memberAddr, newOwnerAddr}
	slices.Sort(moved)
	ownerIn := func(ms []string, id string) string {
		old := n.members.Load()
		defer n.members.Store(old)
		n.members.Store(&ms)
		return n.owner(id)
	}
	conv := firstConv(func(id string) bool { return ownerIn(members, id) == ownerAddr && ownerIn(moved, id) == newOwnerAddr })
	sctx, scancel := context.WithCancel(ctx)
	defer scancel()
	updates, err := member.Subscribe(sctx, conv, 0)
	require.NoError(t, err)
	first := o.next(ctx)
	o.subscribe(first, false) // not answered
	n.mu.Lock()
	n.members.Store(&moved) // the owner left
	close(n.changed)
	n.changed = make(chan struct{})
	n.mu.Unlock()
	again := o2.next(ctx)
	require.Zero(t, again.msg.(*messages.ClusterSubscribe).GetAfterSeq())
	o2.subscribe(again, true)
	readServed(t, ctx, updates, 1)

	// The old owner's late answer: the stream it serves is ended.
	o.answer(first)
	unsub, ok := o.next(ctx).msg.(*messages.ClusterUnsubscribe)
	require.True(t, ok, "the follower ends the late stream")
	require.Equal(t, first.msg.(*messages.ClusterSubscribe).GetSubscriptionId(), unsub.GetSubscriptionId())
	o.end()
	againID := again.msg.(*messages.ClusterSubscribe).GetSubscriptionId()
	require.Eventually(t, func() bool {
		ids := followIDs(n)
		return endingOf(n, conv, ownerAddr) == 0 && len(ids) == 1 && ids[0] == againID
	}, 10*time.Second, time.Millisecond, "the late stream ended")
	o2.sys.Root.RequestWithCustomSender(actor.NewPID(memberAddr, GatewayName),
		&messages.ClusterUpdate{SubscriptionId: againID, ConversationId: conv, Event: &messages.Event{Seq: 2}},
		actor.NewPID(newOwnerAddr, GatewayName))
	readServed(t, ctx, updates, 2) // nothing of the late stream came between
	scancel()
	for range updates {
	}
}

// A follower whose stream starts again (here the owner stopped serving
// it) while its subscriber holds deltas of an answer in progress hands an
// update with Restart set before the new stream's first: the new stream
// gives the answer in progress again from its first delta (or a new
// owner's model call streams anew), so the subscriber, told nothing,
// showed the answer's text twice over. A stream that starts again with no
// deltas handed since the last event hands no Restart.
func TestRestartedFollowerVoidsTheDeltasItHanded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	o, _, conv, updates, scancel := followFakeOwner(t, ctx, Options{}, nil)
	send := func(id string, m *messages.ClusterUpdate) {
		m.SubscriptionId, m.ConversationId = id, conv
		o.sys.Root.RequestWithCustomSender(actor.NewPID(memberAddr, GatewayName), m, actor.NewPID(ownerAddr, GatewayName))
	}
	next := func() Update {
		t.Helper()
		select {
		case u, ok := <-updates:
			require.True(t, ok, "the subscription ended")
			require.NoError(t, u.Err)
			return u
		case <-ctx.Done():
			t.Fatal("no update")
			return Update{}
		}
	}
	deltas := func(want ...string) {
		t.Helper()
		for _, d := range want {
			u := next()
			require.False(t, u.Restart)
			require.Equal(t, d, u.Delta)
		}
	}
	// serve takes the follower's next subscribe, after after, and
	// answers it: the stream's id.
	serve := func(after uint64) string {
		t.Helper()
		h := o.next(ctx)
		s, ok := h.msg.(*messages.ClusterSubscribe)
		require.True(t, ok)
		require.Equal(t, after, s.GetAfterSeq())
		o.subscribe(h, false)
		o.sys.Root.Send(h.sender, &messages.ClusterReply{RequestId: s.GetRequestId(), Node: ownerAddr})
		return s.GetSubscriptionId()
	}

	id := serve(0)
	send(id, &messages.ClusterUpdate{Event: &messages.Event{Seq: 1}})
	require.EqualValues(t, 1, next().Event.GetSeq())
	send(id, &messages.ClusterUpdate{Delta: "a"})
	send(id, &messages.ClusterUpdate{Delta: "b"})
	deltas("a", "b")
	o.end() // the follower subscribes again, after seq 1
	id = serve(1)
	send(id, &messages.ClusterUpdate{Delta: "a"}) // the answer in progress, from its first delta
	send(id, &messages.ClusterUpdate{Delta: "b"})
	send(id, &messages.ClusterUpdate{Delta: "c"})
	u := next()
	require.True(t, u.Restart, "the deltas handed before the new stream are void")
	require.Empty(t, u.Delta)
	require.Nil(t, u.Event)
	deltas("a", "b", "c")
	send(id, &messages.ClusterUpdate{Event: &messages.Event{Seq: 2}}) // the answer, written
	require.EqualValues(t, 2, next().Event.GetSeq())
	o.end()
	id = serve(2)
	send(id, &messages.ClusterUpdate{Event: &messages.Event{Seq: 3}})
	require.EqualValues(t, 3, next().Event.GetSeq(), "no deltas since the last event: nothing to void")
	scancel()
	for range updates {
	}
}

// followFakeOwner opens a member (opts, with a memjournal Store, NoResume
// and okModel) of a cluster whose other member is a fake owner, tunes its
// node (tune may be nil), and subscribes, until ctx ends or scancel, to a
// conversation the fake owner owns.
func followFakeOwner(t *testing.T, ctx context.Context, opts Options, tune func(*clusterNode)) (o *fakeOwner, n *clusterNode, conv string, updates <-chan Update, scancel context.CancelFunc) {
	t.Helper()
	net, members := pairNet()
	o = newFakeOwner(t, net, ownerAddr, memberAddr)
	opts.Store, opts.NoResume, opts.Model = memjournal.New(memjournal.Options{}), true, okModel()
	member := openRuntime(t, opts)
	n = netMember(t, net, member, memberAddr, members)
	if tune != nil {
		tune(n)
	}
	conv = ownedBy(n, ownerAddr)
	sctx, scancel := context.WithCancel(ctx)
	t.Cleanup(scancel)
	updates, err := member.Subscribe(sctx, conv, 0)
	require.NoError(t, err)
	return o, n, conv, updates, scancel
}
