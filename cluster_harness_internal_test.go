package lazarus

import (
	"context"
	"slices"
	"testing"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal"
)

// The addresses of the two members of the in-process cluster tests on a
// fakeNet (see pairNet): the owner of the conversations a test follows,
// and the member that follows them.
const ownerAddr, memberAddr = "owner.test:1", "member.test:1"

// pairNet is an empty fakeNet, and the membership of ownerAddr and
// memberAddr, sorted, for netMember.
func pairNet() (*fakeNet, []string) {
	members := []string{ownerAddr, memberAddr}
	slices.Sort(members)
	return &fakeNet{sys: map[string]*actor.ActorSystem{}}, members
}

// openRuntime opens a Runtime with opts, failing the test if it cannot,
// and closes it when the test ends.
func openRuntime(t *testing.T, opts Options) *Runtime {
	t.Helper()
	r, err := Open(opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close() })
	return r
}

// openOwner opens a Runtime with opts on an actor system of its own at
// ownerAddr (opts.ActorSystem is set to it), which serves its gateway
// there, and joins that system to net.
func openOwner(t *testing.T, net *fakeNet, opts Options) (*Runtime, *actor.ActorSystem) {
	t.Helper()
	sys := quietSystem(t, ownerAddr)
	opts.ActorSystem = sys
	r := openRuntime(t, opts)
	net.join(sys)
	return r, sys
}

// fakeGatewayAt puts gw in place of a gateway at addr in net, on an actor
// system of its own, which it returns.
func fakeGatewayAt(t *testing.T, net *fakeNet, addr string, gw actor.Actor) *actor.ActorSystem {
	t.Helper()
	sys := quietSystem(t, addr)
	_, err := sys.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return gw }), GatewayName)
	require.NoError(t, err)
	net.join(sys)
	return sys
}

// ownedBy returns the first of conv-0, conv-1, ... that n's membership
// gives to the member at addr.
func ownedBy(n *clusterNode, addr string) string {
	return firstConv(func(id string) bool { return n.owner(id) == addr })
}

// firstTurn sends "hi" to conv through r and waits until its turn has
// ended in store (seq 2).
func firstTurn(t *testing.T, ctx context.Context, r *Runtime, store journal.Store, conv string) {
	t.Helper()
	_, err := r.Send(ctx, conv, "hi", agent.Scope{UserID: "u"})
	require.NoError(t, err)
	waitTurnEnded(t, ctx, store, conv, 2, "the first turn ended")
}

// nextHeld returns the next message a fake owner's gateway handed over on
// got, failing the test with "the owner got no <what>" if ctx ends first.
func nextHeld[M any](t *testing.T, ctx context.Context, got <-chan M, what string) M {
	t.Helper()
	select {
	case m := <-got:
		return m
	case <-ctx.Done():
		t.Fatalf("the owner got no %s", what)
		var zero M
		return zero
	}
}

// readConvTo reads a subscription of conv until its event at seq, failing
// the test on an error, an update of another conversation, the end of the
// subscription, or the end of ctx.
func readConvTo(t *testing.T, ctx context.Context, updates <-chan Update, conv string, seq uint64) {
	t.Helper()
	for {
		select {
		case u, ok := <-updates:
			require.True(t, ok, "the subscription ended")
			require.NoError(t, u.Err)
			require.Equal(t, conv, u.ConversationID, "an update of another conversation")
			if u.Event.GetSeq() == seq {
				return
			}
		case <-ctx.Done():
			t.Fatalf("%s's event at seq %d did not arrive", conv, seq)
		}
	}
}
