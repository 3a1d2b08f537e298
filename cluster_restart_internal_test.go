package lazarus

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

// netMember is a Runtime that is a member at addr in net, with its gateway
// on an actor system of its own there, and whose membership is members.
func netMember(t *testing.T, net *fakeNet, r *Runtime, addr string, members []string) *clusterNode {
	t.Helper()
	sys := quietSystem(t, addr)
	n := newNode(r, sys)
	n.members.Store(&members)
	require.NoError(t, n.spawnGateway())
	r.cl, r.gw = n, n
	net.join(sys)
	return n
}

// A member that restarts at the same address (the owner's membership
// never shows it gone) subscribes anew while the owner still serves the
// streams of its previous run. Its follower ids started again from the
// same counter, so a new subscription (to another conversation) got the
// id of an old one: the old stream's updates, of the other conversation,
// reached the new subscriber, and the old stream went on forever on the
// owner. Now a member's ids are unique across its runs, and an update of
// an id no follower has makes the member unsubscribe: the stale stream
// ends at its first update, and no update of it reaches anyone.
func TestRestartedMemberGetsNoUpdateOfItsPreviousRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store := memjournal.New(memjournal.Options{})
	model := okModel()
	net, members := pairNet()
	owner, _ := openOwner(t, net, Options{Store: store, Model: model, NoResume: true})

	first := openRuntime(t, Options{Store: store, Model: model, NoResume: true})
	n1 := netMember(t, net, first, memberAddr, members)
	convA := ownedBy(n1, ownerAddr)
	convB := firstConv(func(id string) bool { return id != convA && n1.owner(id) == ownerAddr })
	scope := agent.Scope{UserID: "u"}
	for _, conv := range []string{convA, convB} {
		firstTurn(t, ctx, owner, store, conv)
	}

	// The first run follows A through the owner's stream.
	aCtx, aCancel := context.WithCancel(ctx)
	defer aCancel()
	aUpdates, err := first.Subscribe(aCtx, convA, 0)
	require.NoError(t, err)
	readConvTo(t, ctx, aUpdates, convA, 2)
	idA := followIDs(n1)
	require.Len(t, idA, 1)

	// The member dies and starts again at its address; the owner's
	// membership does not change. The new run follows B.
	second := openRuntime(t, Options{Store: store, Model: model, NoResume: true})
	n2 := netMember(t, net, second, memberAddr, members)
	bUpdates, err := second.Subscribe(ctx, convB, 0)
	require.NoError(t, err)
	readConvTo(t, ctx, bUpdates, convB, 2)
	idB := followIDs(n2)
	require.Len(t, idB, 1)

	// A moves on: the owner's stream of the first run sends its updates
	// to the member's address. It ends (the owner's hub has no
	// subscription of A left, and its gateway no longer serves the
	// stream: the two are let go in either order), and B's subscriber
	// gets none of them.
	_, err = owner.Send(ctx, convA, "again", scope)
	require.NoError(t, err)
	staleEnded := func() bool {
		owner.hub.mu.Lock()
		subs := len(owner.hub.subs[convA])
		owner.hub.mu.Unlock()
		owner.gw.mu.Lock()
		_, served := owner.gw.serving[idA[0]]
		owner.gw.mu.Unlock()
		return subs == 0 && !served
	}
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	bound := time.After(10 * time.Second)
	for !staleEnded() {
		select {
		case u, ok := <-bUpdates:
			require.True(t, ok, "B's subscription ended")
			t.Fatalf("B's subscriber got an update of %s (seq %d): the restarted member reused the id %s of its previous run's stream", u.ConversationID, u.Event.GetSeq(), idA[0])
		case <-tick.C:
		case <-bound:
			t.Fatal("the owner still serves the stream of the member's previous run")
		}
	}
	waitTurnEnded(t, ctx, store, convA, 4, "A's second turn ended")

	// B's own updates still arrive, and only they.
	_, err = owner.Send(ctx, convB, "again", scope)
	require.NoError(t, err)
	readConvTo(t, ctx, bUpdates, convB, 4)
	require.NotEqual(t, idA, idB, "subscription ids are unique across a member's runs")
	owner.gw.mu.Lock()
	served := slices.Collect(maps.Keys(owner.gw.serving))
	owner.gw.mu.Unlock()
	require.Equal(t, idB, served, "the owner serves the new run's stream alone")
}

// heldRequest is a request a fakeGateway got, and whom to answer.
type heldRequest struct {
	sender *actor.PID
	req    *messages.ClusterRequest
}

// fakeGateway stands for an owner's gateway: it hands each request it gets
// to the test, which answers when it likes.
type fakeGateway struct{ got chan heldRequest }

func (g *fakeGateway) Receive(ctx actor.Context) {
	if req, ok := ctx.Message().(*messages.ClusterRequest); ok {
		g.got <- heldRequest{sender: ctx.Sender(), req: req}
	}
}

// A member that restarts at the same address sends its calls to the owner
// as its previous run did, and protoactor names each call's reply process
// (a Future) by a counter that starts again in each run: the owner's late
// answer to a call of the previous run reached the new run's call that got
// the same name, which returned it as its own (the seq of another
// message; its own answer, arriving next, was dropped). Now the reply
// process of a call is named uniquely across the member's runs, and the
// late answer is a dead letter.
func TestRestartedMemberTakesNoAnswerOfItsPreviousRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store := memjournal.New(memjournal.Options{})
	model := okModel()
	net, members := pairNet()
	gw := &fakeGateway{got: make(chan heldRequest, 4)}
	ownerSys := fakeGatewayAt(t, net, ownerAddr, gw)

	type result struct {
		reply *messages.ClusterReply
		err   error
	}
	// call forwards a send of text to conv through a new run of the member,
	// and returns the request the owner got and where the result goes.
	call := func(callCtx context.Context, conv, text string) (heldRequest, <-chan result) {
		t.Helper()
		r := openRuntime(t, Options{Store: store, Model: model, NoResume: true})
		n := netMember(t, net, r, memberAddr, members)
		require.Equal(t, ownerAddr, n.owner(conv))
		// The call waits for the test's answer, however slow the machine
		// (it is not idempotent: a try cut short by DefaultRequestTimeout
		// ends it with ErrUnknownOutcome); ctx bounds it.
		n.opts.RequestTimeout = time.Hour
		done := make(chan result, 1)
		go func() {
			reply, err := n.forward(callCtx, &messages.ClusterRequest{ConversationId: conv,
				Op: &messages.ClusterRequest_Send{Send: &messages.AgentSend{RequestId: text, Message: &messages.UserMessage{}}}}, false)
			done <- result{reply, err}
		}()
		select {
		case got := <-gw.got:
			return got, done
		case <-ctx.Done():
			t.Fatal("the owner got no request")
		}
		return heldRequest{}, nil
	}
	probe := newNode(&Runtime{}, quietSystem(t, memberAddr))
	probe.members.Store(&members)
	convA := ownedBy(probe, ownerAddr)
	convB := firstConv(func(id string) bool { return id != convA && probe.owner(id) == ownerAddr })

	// The first run's call reaches the owner, which has yet to answer
	// when the member dies.
	firstCtx, firstCancel := context.WithCancel(ctx)
	old, _ := call(firstCtx, convA, "one")
	firstCancel()

	// The member starts again at its address and calls the owner.
	cur, done := call(ctx, convB, "two")

	// The owner answers the first run's call late, then the new one.
	ownerSys.Root.Send(old.sender, &messages.ClusterReply{RequestId: old.req.GetRequestId(), Seq: 99, Node: ownerAddr})
	ownerSys.Root.Send(cur.sender, &messages.ClusterReply{RequestId: cur.req.GetRequestId(), Seq: 7, Node: ownerAddr})
	select {
	case res := <-done:
		require.NoError(t, res.err)
		require.Equal(t, uint64(7), res.reply.GetSeq(), "the new run's call took the answer to a call of the previous run (reply process %s, then %s)", old.sender.GetId(), cur.sender.GetId())
	case <-ctx.Done():
		t.Fatal("the new run's call got no answer")
	}
}

// A member that restarts at the same address is a new member id there in
// the owner's membership. The owner ended the streams it served to the
// previous run only at their conversation's next update: an idle
// conversation kept each one's hub subscription, pump goroutine and
// serving entry for good. Now the owner ends them when it applies the
// membership in which their member's id is gone from the address, and
// the new run's streams, of a member id still there, go on.
func TestOwnerEndsTheStreamsOfAMemberRestartedAtItsAddress(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store := memjournal.New(memjournal.Options{})
	model := okModel()
	const otherAddr = "other.test:1"
	net, members := pairNet()
	owner, _ := openOwner(t, net, Options{Store: store, Model: model, NoResume: true})
	member := func(id, host string) *cluster.Member {
		return &cluster.Member{Id: id, Host: host, Port: 1, Kinds: []string{ConversationKind}}
	}
	owner.gw.onTopology([]*cluster.Member{member("owner-1", "owner.test"), member("member-1", "member.test")})

	first := openRuntime(t, Options{Store: store, Model: model, NoResume: true})
	n1 := netMember(t, net, first, memberAddr, members)
	// Both are the owner's with or without a third member.
	three := testNode(ownerAddr, memberAddr, otherAddr)
	convA := firstConv(func(id string) bool { return n1.owner(id) == ownerAddr && three.owner(id) == ownerAddr })
	convB := firstConv(func(id string) bool {
		return id != convA && n1.owner(id) == ownerAddr && three.owner(id) == ownerAddr
	})
	scope := agent.Scope{UserID: "u"}
	for _, conv := range []string{convA, convB} {
		firstTurn(t, ctx, owner, store, conv)
	}
	served := func(id string) bool {
		owner.gw.mu.Lock()
		defer owner.gw.mu.Unlock()
		_, ok := owner.gw.serving[id]
		return ok
	}
	subs := func(conv string) int {
		owner.hub.mu.Lock()
		defer owner.hub.mu.Unlock()
		return len(owner.hub.subs[conv])
	}

	// The first run follows A, which then stays idle.
	aUpdates, err := first.Subscribe(ctx, convA, 0)
	require.NoError(t, err)
	readConvTo(t, ctx, aUpdates, convA, 2)
	idA := followIDs(n1)
	require.Len(t, idA, 1)
	require.True(t, served(idA[0]))

	// The member restarts at its address, under a new member id.
	second := openRuntime(t, Options{Store: store, Model: model, NoResume: true})
	n2 := netMember(t, net, second, memberAddr, members)
	owner.gw.onTopology([]*cluster.Member{member("owner-1", "owner.test"), member("member-2", "member.test")})
	require.Eventually(t, func() bool { return !served(idA[0]) && subs(convA) == 0 }, 10*time.Second, time.Millisecond,
		"the owner still serves the stream of the member's previous run, with no update of A to end it")

	// The new run's stream goes on through a membership that keeps its
	// member id (another member joins).
	bUpdates, err := second.Subscribe(ctx, convB, 0)
	require.NoError(t, err)
	readConvTo(t, ctx, bUpdates, convB, 2)
	idB := followIDs(n2)
	require.Len(t, idB, 1)
	owner.gw.onTopology([]*cluster.Member{member("owner-1", "owner.test"), member("member-2", "member.test"), member("other-1", "other.test")})
	_, err = owner.Send(ctx, convB, "again", scope)
	require.NoError(t, err)
	readConvTo(t, ctx, bUpdates, convB, 4)
	require.Equal(t, idB, followIDs(n2), "the new run's stream was ended and subscribed again")
	require.True(t, served(idB[0]))
}

// A follower whose subscription ends (its context) tells the owner, which
// stops serving its stream: the owner honours the unsubscribe as it comes
// from the follower's member (sent as its gateway). A follower that sent
// it without a sender was ignored by an owner that takes an unsubscribe
// from the stream's member only, and the stream ran on until the
// membership changed.
func TestFollowerUnsubscribeEndsTheOwnersStream(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store := memjournal.New(memjournal.Options{})
	model := okModel()
	net, members := pairNet()
	owner := openRuntime(t, Options{Store: store, Model: model, NoResume: true})
	on := netMember(t, net, owner, ownerAddr, members)
	member := openRuntime(t, Options{Store: store, Model: model, NoResume: true})
	mn := netMember(t, net, member, memberAddr, members)
	conv := firstConv(func(id string) bool { return mn.owner(id) == ownerAddr && on.owner(id) == ownerAddr })
	_, err := owner.Send(ctx, conv, "hi", agent.Scope{UserID: "u"})
	require.NoError(t, err)
	sctx, scancel := context.WithCancel(ctx)
	defer scancel()
	updates, err := member.Subscribe(sctx, conv, 0)
	require.NoError(t, err)
	select {
	case u := <-updates:
		require.Equal(t, uint64(1), u.Event.GetSeq(), "the owner streams the history")
	case <-ctx.Done():
		t.Fatal("no update")
	}
	served := func() int {
		on.mu.Lock()
		defer on.mu.Unlock()
		return len(on.serving)
	}
	require.Equal(t, 1, served())
	scancel()
	for range updates { // the follower ends with its context
	}
	require.Eventually(t, func() bool { return served() == 0 }, 10*time.Second, time.Millisecond,
		"the owner serves the stream of a follower that ended")
}
