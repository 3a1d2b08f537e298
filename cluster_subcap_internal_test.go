package lazarus

import (
	"context"
	"slices"
	"strings"
	"sync"
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

// slotsOf is how many subscription slots conv holds on r.
func slotsOf(r *Runtime, conv string) int {
	r.hub.mu.Lock()
	defer r.hub.mu.Unlock()
	return r.hub.slots[conv]
}

// TestForwardedSubscriptionOverTheOwnersCap: a subscription on a member
// that does not own the conversation, whose owner has
// Options.MaxSubscriptions subscriptions of it open, ends with an update
// whose Err wraps ErrTooManySubscriptions (the owner's refusal crosses the
// wire as its own code), and the member's follower frees its slot. Once
// the owner's subscription ended, the member's is served.
func TestForwardedSubscriptionOverTheOwnersCap(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	owner, member, conv, _ := subcapCluster(t, ctx, 1)
	n := member.cl

	lctx, lcancel := context.WithCancel(ctx)
	defer lcancel()
	local, err := owner.Subscribe(lctx, conv, 0)
	require.NoError(t, err)
	_, err = owner.Subscribe(ctx, conv, 0)
	require.ErrorIs(t, err, ErrTooManySubscriptions, "on the owner")

	remote, err := member.Subscribe(ctx, conv, 0)
	require.NoError(t, err, "the member does not wait for the owner's answer")
	ru := lastUpdate(t, ctx, remote, "on the member")
	require.ErrorIs(t, ru.Err, ErrTooManySubscriptions, "the owner's refusal, as its sentinel")
	require.Contains(t, ru.Err.Error(), "too many subscriptions")
	require.Nil(t, ru.Event)
	require.Zero(t, slotsOf(member, conv), "the ended follower freed its slot")
	require.Empty(t, followIDs(n), "the follower ended")

	lcancel()
	for range local {
	}
	require.Zero(t, slotsOf(owner, conv), "the owner's subscription freed its slot")
	remote, err = member.Subscribe(ctx, conv, 0)
	require.NoError(t, err)
	select {
	case u := <-remote:
		require.NoError(t, u.Err)
		require.EqualValues(t, 1, u.Event.GetSeq(), "served from the start of the log")
	case <-ctx.Done():
		t.Fatal("the member's subscription got nothing")
	}
}

// TestSendAndWaitOverTheOwnersCap: SendAndWait on a member that does not
// own the conversation, whose owner has Options.MaxSubscriptions
// subscriptions of it open, fails with an error wrapping
// ErrTooManySubscriptions after its message was written (the owner
// refuses the forwarded wait, not the send): the turn goes on. Sent again
// with the same RequestID once the owner has a slot, the call writes
// nothing new and returns the end of that message's turn, as SendAndWait's
// doc tells the caller to do.
func TestSendAndWaitOverTheOwnersCap(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	owner, member, conv, store := subcapCluster(t, ctx, 2)

	lctx, lcancel := context.WithCancel(ctx)
	defer lcancel()
	// Both slots held: the retry below needs two, as a repeated RequestID
	// moves its wait to a subscription from the message.
	var local []<-chan Update
	for range 2 {
		l, err := owner.Subscribe(lctx, conv, 0)
		require.NoError(t, err)
		local = append(local, l)
	}

	msg := agent.UserMessage(agent.TextPart("again"))
	opts := SendOptions{RequestID: "req-1"}
	_, err := member.SendMessageAndWait(ctx, conv, msg, opts, agent.Scope{UserID: "u"})
	require.ErrorIs(t, err, ErrTooManySubscriptions, "the owner refused the wait")
	waitTurnEnded(t, ctx, store, conv, 4, "the message was written and its turn ran")

	lcancel()
	for _, l := range local {
		for range l {
		}
	}
	require.Zero(t, slotsOf(owner, conv), "the owner's subscriptions freed their slots")
	end, err := member.SendMessageAndWait(ctx, conv, msg, opts, agent.Scope{UserID: "u"})
	require.NoError(t, err)
	require.Equal(t, TurnAnswered, end.Outcome)
	require.EqualValues(t, 4, end.Seq, "the end of the first write's turn")
	last, err := store.LastSeq(ctx, conv)
	require.NoError(t, err)
	require.EqualValues(t, 4, last, "the retry wrote nothing")
}

// subcapCluster is an owner whose Options.MaxSubscriptions is max and a
// member that does not own conv, sharing a Store, with the conversation's
// first turn ended (seq 2).
func subcapCluster(t *testing.T, ctx context.Context, max int) (owner, member *Runtime, conv string, store *memjournal.Store) {
	owner, member, conv, store, _ = subcapClusterBuffer(t, ctx, max, 0)
	return owner, member, conv, store
}

// subcapClusterBuffer is subcapCluster with the member's
// Options.SubscriberBuffer at buffer (the default if 0), and the net the
// two share.
func subcapClusterBuffer(t *testing.T, ctx context.Context, max, buffer int) (owner, member *Runtime, conv string, store *memjournal.Store,
	net *fakeNet) {
	t.Helper()
	store = memjournal.New(memjournal.Options{})
	model := okModel()
	net, members := pairNet()
	owner, _ = openOwner(t, net, Options{Store: store, Model: model, NoResume: true, MaxSubscriptions: max})
	member = openRuntime(t, Options{Store: store, Model: model, NoResume: true, SubscriberBuffer: buffer})
	conv = ownedBy(netMember(t, net, member, memberAddr, members), ownerAddr)
	firstTurn(t, ctx, owner, store, conv)
	return owner, member, conv, store, net
}

// TestCancelledForwardedSubscriptionFreesTheOwnersSlot: a subscription on
// a member that does not own the conversation, cancelled (its ctx ends),
// has freed its slot on the owner once its channel is closed, so that
// subscribing again at once with the owner's Options.MaxSubscriptions at
// 1 is served, time after time.
func TestCancelledForwardedSubscriptionFreesTheOwnersSlot(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	owner, member, conv, _ := subcapCluster(t, ctx, 1)
	for i := range 5 {
		sctx, scancel := context.WithCancel(ctx)
		updates, err := member.Subscribe(sctx, conv, 0)
		require.NoError(t, err, "subscription %d", i)
		select {
		case u := <-updates:
			require.NoError(t, u.Err, "subscription %d served", i)
			require.EqualValues(t, 1, u.Event.GetSeq(), "subscription %d from the start of the log", i)
		case <-ctx.Done():
			t.Fatalf("subscription %d got nothing", i)
		}
		require.Equal(t, 1, slotsOf(owner, conv), "subscription %d holds the owner's slot", i)
		scancel()
		for range updates {
		}
		require.Zero(t, slotsOf(owner, conv), "cancelled subscription %d freed the owner's slot", i)
		require.Zero(t, slotsOf(member, conv), "and the member's")
	}
}

// TestSendAndWaitRetryWithinTheOwnersCap: SendMessageAndWait on a member
// that does not own the conversation, retried with the RequestID of a
// message already written, moves its wait to a subscription from the
// message; the first subscription has ended before the second starts, so
// that with the owner's Options.MaxSubscriptions at 1 the retry is served
// and returns the end of that message's turn, writing nothing.
func TestSendAndWaitRetryWithinTheOwnersCap(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	owner, member, conv, store := subcapCluster(t, ctx, 1)
	msg := agent.UserMessage(agent.TextPart("again"))
	opts := SendOptions{RequestID: "req-1"}
	first, err := member.SendMessageAndWait(ctx, conv, msg, opts, agent.Scope{UserID: "u"})
	require.NoError(t, err)
	require.EqualValues(t, 4, first.Seq)
	for i := range 3 {
		// The previous wait's subscription may still hold the owner's
		// slot for a moment after the call returned (see endsWith).
		require.Eventually(t, func() bool { return slotsOf(owner, conv) == 0 }, 10*time.Second, time.Millisecond)
		end, err := member.SendMessageAndWait(ctx, conv, msg, opts, agent.Scope{UserID: "u"})
		require.NoError(t, err, "retry %d", i)
		require.Equal(t, TurnAnswered, end.Outcome)
		require.EqualValues(t, 4, end.Seq, "retry %d: the end of the first write's turn", i)
	}
	last, err := store.LastSeq(ctx, conv)
	require.NoError(t, err)
	require.EqualValues(t, 4, last, "the retries wrote nothing")
}

// subscriptionsTo has net record every ClusterSubscribe of conv and every
// ClusterUnsubscribe the owner's gateway is sent from now on, before they
// are delivered; seen returns them so far, as "subscribe <id>" and
// "unsubscribe <id>" in the order they were sent.
func subscriptionsTo(net *fakeNet, conv string) (seen func() []string) {
	var mu sync.Mutex
	var got []string
	net.watch(func(to *actor.PID, m any) {
		if to.GetAddress() != ownerAddr || to.GetId() != GatewayName {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		switch m := m.(type) {
		case *messages.ClusterSubscribe:
			if m.GetConversationId() == conv {
				got = append(got, "subscribe "+m.GetSubscriptionId())
			}
		case *messages.ClusterUnsubscribe:
			got = append(got, "unsubscribe "+m.GetSubscriptionId())
		}
	})
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(got)
	}
}

// subscribesIn returns the ids of the subscribes in got (as
// subscriptionsTo records them), in order.
func subscribesIn(got []string) []string {
	var ids []string
	for _, s := range got {
		if id, ok := strings.CutPrefix(s, "subscribe "); ok {
			ids = append(ids, id)
		}
	}
	return ids
}

// requireOneStreamAtATime fails the test unless, in got (as
// subscriptionsTo records them), each subscribe is followed by the
// unsubscribe of its stream before the next subscribe, and the last
// subscribe, not unsubscribed from, is n's one follower's.
func requireOneStreamAtATime(t *testing.T, n *clusterNode, got []string) {
	t.Helper()
	require.Equal(t, 1, len(got)%2, "%v", got)
	for i := 0; i < len(got); i += 2 {
		id, ok := strings.CutPrefix(got[i], "subscribe ")
		require.True(t, ok, "%v", got)
		if i+1 < len(got) {
			require.Equal(t, "unsubscribe "+id, got[i+1], "%v", got)
		} else {
			require.Equal(t, []string{id}, followIDs(n), "the last subscription is the follower's: %v", got)
		}
	}
}

// TestFallenBehindFollowerWithinTheOwnersCap: a subscription on a member
// that does not own the conversation, whose follower falls behind (its
// subscriber does not read, the member's Options.SubscriberBuffer is 1),
// subscribes to the owner again once the owner has ended its old stream,
// so that with the owner's Options.MaxSubscriptions at 1 it is served:
// the subscriber reads every event of the log in order and no error. The
// follower subscribed again at once, and the owner refused it
// (ErrTooManySubscriptions) for the slot the old stream still held.
//
// The follower may fall behind and subscribe again any number of times
// before its subscriber's channel is full, and none after until the
// subscriber reads (it waits to hand over an update); falling behind
// then, it ends its stream all the same, so that the owner's slot is free
// for another subscriber while the reader does not read. Every subscribe
// and unsubscribe the owner gets is recorded from the start, and the test
// reads only once the follower is stuck with its stream ended: the events
// past the update it holds can only come from a later subscription.
func TestFallenBehindFollowerWithinTheOwnersCap(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	owner, member, conv, store, net := subcapClusterBuffer(t, ctx, 1, 1)
	const turns = 20 // 40 events: more than the subscription's channel and the follower's buffer hold
	for i := 1; i < turns; i++ {
		_, err := owner.Send(ctx, conv, "again", agent.Scope{UserID: "u"})
		require.NoError(t, err)
		waitTurnEnded(t, ctx, store, conv, uint64(2*(i+1)), "turn ended")
	}
	seen := subscriptionsTo(net, conv)
	n := member.cl
	sctx, scancel := context.WithCancel(ctx)
	defer scancel()
	updates, err := member.Subscribe(sctx, conv, 0)
	require.NoError(t, err)
	// Nothing read: the subscription's channel fills, and the follower,
	// waiting to hand over an update, drops one of its stream and ends
	// the stream (or the subscription ended, its slot on the member
	// freed: read below).
	require.Eventually(t, func() bool {
		return slotsOf(member, conv) == 0 ||
			len(updates) == cap(updates) && len(followIDs(n)) == 0 && slotsOf(owner, conv) == 0
	}, 10*time.Second, time.Millisecond, "the follower fell behind and ended its stream")
	ids := subscribesIn(seen())
	require.NotEmpty(t, ids, "the follower subscribed")
	stuck := ids[len(ids)-1]
	octx, ocancel := context.WithCancel(ctx)
	other, err := owner.Subscribe(octx, conv, 0)
	require.NoError(t, err, "the owner's slot is free while the reader does not read")
	ocancel()
	for range other {
	}
	for seq := uint64(1); seq <= 2*turns; {
		var u Update
		select {
		case got, ok := <-updates:
			require.True(t, ok, "the subscription ended before seq %d", seq)
			u = got
		case <-ctx.Done():
			t.Fatalf("no update of seq %d", seq)
		}
		require.NoError(t, u.Err, "served within the owner's cap")
		if u.Event != nil {
			require.Equal(t, seq, u.Event.GetSeq())
			seq++
		}
	}
	require.Equal(t, 1, slotsOf(owner, conv), "one stream on the owner")
	got := seen()
	at := slices.Index(got, "subscribe "+stuck)
	require.GreaterOrEqual(t, at, 0, "the owner got the subscribe of the follower that fell behind: %v", got)
	require.Greater(t, len(got), at+2, "the follower subscribed again: %v", got)
	require.Equal(t, "unsubscribe "+stuck, got[at+1], "its stream ended first: %v", got)
	requireOneStreamAtATime(t, n, got)
	scancel()
	for range updates {
	}
	require.Zero(t, slotsOf(owner, conv), "the cancelled subscription freed the owner's slot")
}

// TestFallenBehindFollowerTakesNothingPastTheDrop: once an update of a
// followed stream did not fit in the follower's buffer, no later update
// is handed to the follower, though its buffer has room again by then:
// the follower emits what it holds (the updates before the dropped one)
// and subscribes again after the last it emitted, so an update taken past
// the dropped one reached the subscriber past a gap. The stream's final
// update is kept apart for unsubscribed.
func TestFallenBehindFollowerTakesNothingPastTheDrop(t *testing.T) {
	f := &follower{in: make(chan *messages.ClusterUpdate, 1), overflow: make(chan struct{}, 1),
		final: make(chan *messages.ClusterUpdate, 1)}
	ev := func(seq uint64) *messages.ClusterUpdate {
		return &messages.ClusterUpdate{Event: &messages.Event{Seq: seq}}
	}
	f.deliver(ev(1))
	f.deliver(ev(2)) // f.in is full: dropped
	require.Len(t, f.overflow, 1, "the follower is told it fell behind")
	require.EqualValues(t, 1, (<-f.in).GetEvent().GetSeq())
	f.deliver(ev(3)) // f.in has room, but seq 2 was dropped
	require.Empty(t, f.in, "nothing past the dropped update is taken")
	final := &messages.ClusterUpdate{Final: true}
	f.deliver(final)
	require.Empty(t, f.in)
	require.Len(t, f.final, 1, "the final update is kept for unsubscribed")
	require.Same(t, final, <-f.final)
}

// TestFollowerOfAnOwnerThatStaysWithinTheOwnersCap: a subscription on a
// member that does not own the conversation subscribes to the owner again
// when the membership changes; when the owner stays the same, its old
// stream ends first, so that with the owner's Options.MaxSubscriptions at
// 1 the new subscription is served: the subscriber reads every event in
// order and no error, change after change. The follower subscribed again
// at once, and the owner could refuse it (ErrTooManySubscriptions) for
// the slot the old stream still held.
//
// Every subscribe and unsubscribe the owner gets is recorded from the
// start: a resubscription cannot go unseen for having come before the
// test looked.
func TestFollowerOfAnOwnerThatStaysWithinTheOwnersCap(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	owner, member, conv, store, net := subcapClusterBuffer(t, ctx, 1, 0)
	seen := subscriptionsTo(net, conv)
	n := member.cl
	sctx, scancel := context.WithCancel(ctx)
	defer scancel()
	updates, err := member.Subscribe(sctx, conv, 0)
	require.NoError(t, err)
	seq := uint64(1)
	readTo := func(last uint64) {
		t.Helper()
		for seq <= last {
			select {
			case u, ok := <-updates:
				require.True(t, ok, "the subscription ended before seq %d", seq)
				require.NoError(t, u.Err, "served within the owner's cap")
				if u.Event != nil {
					require.Equal(t, seq, u.Event.GetSeq())
					seq++
				}
			case <-ctx.Done():
				t.Fatalf("no update of seq %d", seq)
			}
		}
	}
	readTo(2)
	const changes = 10
	for i := range changes {
		got := seen()
		require.Len(t, subscribesIn(got), i+1, "change %d: one subscribe to the owner per change before it: %v", i, got)
		n.mu.Lock()
		close(n.changed) // a membership change that leaves the owner as it was
		n.changed = make(chan struct{})
		n.mu.Unlock()
		require.Eventually(t, func() bool { got = seen(); return len(subscribesIn(got)) > i+1 },
			10*time.Second, time.Millisecond, "change %d: the follower subscribed again", i)
		ids := subscribesIn(got)
		require.Equal(t, []string{"unsubscribe " + ids[i], "subscribe " + ids[i+1]}, got[len(got)-2:],
			"change %d: the old stream ended before the follower subscribed again", i)
		_, err := owner.Send(ctx, conv, "again", agent.Scope{UserID: "u"})
		require.NoError(t, err)
		waitTurnEnded(t, ctx, store, conv, uint64(2*(i+2)), "turn ended")
		readTo(uint64(2 * (i + 2)))
		require.Equal(t, 1, slotsOf(owner, conv), "change %d: one stream on the owner", i)
	}
	got := seen()
	require.Len(t, subscribesIn(got), changes+1, "one subscribe to the owner per change: %v", got)
	requireOneStreamAtATime(t, n, got)
	scancel()
	for range updates {
	}
	require.Zero(t, slotsOf(owner, conv), "the cancelled subscription freed the owner's slot")
}

// TestOwnersStreamErrorSentOnceItsSlotIsFree: the owner's stream of a
// follower on another member ends with its own error (the owner's Store
// fails its reads). The owner's gateway sent that final update as soon as
// its subscription delivered it, before the subscription had freed its
// slot of the conversation: the member's subscription could end, or a
// follower that fell behind subscribe again at once, while the owner
// still held the slot, and at the owner's Options.MaxSubscriptions of 1
// the next subscription was refused with ErrTooManySubscriptions. Now the
// final update leaves once the slot is free (the test holds the owner's
// subscription between its error and the freeing of its slot, and no
// final update leaves meanwhile), and a subscription opened once the
// member's has ended is served.
func TestOwnersStreamErrorSentOnceItsSlotIsFree(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	store := memjournal.New(memjournal.Options{})
	down := &readsDownStore{Store: store}
	model := okModel()
	var armed atomic.Bool
	entered, gate := make(chan struct{}, 1), make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(gate) }) }
	// Called by a subscription's pump as it ends, before it frees its slot.
	held := func(delta int) {
		if delta < 0 && armed.CompareAndSwap(true, false) {
			entered <- struct{}{}
			<-gate
		}
	}
	net, members := pairNet()
	owner, _ := openOwner(t, net, Options{Store: down, Model: model, NoResume: true, MaxSubscriptions: 1,
		Metrics: Metrics{Subscribers: held}})
	member := openRuntime(t, Options{Store: store, Model: model, NoResume: true})
	t.Cleanup(release) // before the Runtimes close: the owner's Close waits for the subscription held
	conv := ownedBy(netMember(t, net, member, memberAddr, members), ownerAddr)
	down.conv = conv
	firstTurn(t, ctx, owner, store, conv)

	finals := make(chan int, 4) // the owner's slots of conv as each final update leaves
	net.watch(func(_ *actor.PID, m any) {
		if u, ok := m.(*messages.ClusterUpdate); ok && u.GetFinal() {
			finals <- slotsOf(owner, conv)
		}
	})
	down.down.Store(true)
	armed.Store(true)
	remote, err := member.Subscribe(ctx, conv, 0)
	require.NoError(t, err)
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("the owner's subscription did not end")
	}
	require.Never(t, func() bool { return len(finals) > 0 }, 500*time.Millisecond, 5*time.Millisecond,
		"a final update left while the owner's subscription held its slot")
	release()
	select {
	case slots := <-finals:
		require.Zero(t, slots, "the final update left once the slot was free")
	case <-ctx.Done():
		t.Fatal("no final update left the owner")
	}
	ru := lastUpdate(t, ctx, remote, "on the member")
	require.ErrorIs(t, ru.Err, journal.ErrUnavailable, "the owner's error")

	down.down.Store(false)
	remote, err = member.Subscribe(ctx, conv, 0)
	require.NoError(t, err)
	select {
	case u := <-remote:
		require.NoError(t, u.Err, "served within the owner's cap of 1")
		require.EqualValues(t, 1, u.Event.GetSeq())
	case <-ctx.Done():
		t.Fatal("the member's subscription got nothing")
	}
}
