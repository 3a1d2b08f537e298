package lazarus

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
)

// The addresses of the two members of the in-process cluster tests on a
// fakeNet (see pairNet): the owner of the conversations a test follows,
// and the member that follows them.
const ownerAddr, memberAddr = "owner.test:1", "member.test:1"

// fakeNet carries messages between the actor systems of one process by
// address, without protoactor's remote: a PID whose address is a system's
// address (quietSystem's) reaches that system's local process of its id.
// A system replaced at its address is a process that died: what it sends
// is lost.
type fakeNet struct {
	mu  sync.Mutex
	sys map[string]*actor.ActorSystem
	tap func(to *actor.PID, m any) // if set, sees every user message sent across the net
}

// watch has tap see every user message sent across fn from now on (the
// message, out of its envelope, and the PID it is sent to), before it is
// delivered.
func (fn *fakeNet) watch(tap func(to *actor.PID, m any)) {
	fn.mu.Lock()
	fn.tap = tap
	fn.mu.Unlock()
}

// join puts sys at its address, in place of the system there.
func (fn *fakeNet) join(sys *actor.ActorSystem) {
	addr := sys.Address()
	fn.mu.Lock()
	fn.sys[addr] = sys
	fn.mu.Unlock()
	sys.ProcessRegistry.RegisterAddressResolver(func(*actor.PID) (actor.Process, bool) {
		return fakeLink{net: fn, from: sys, addr: addr}, true
	})
}

// fakeLink is the way out of one system of a fakeNet.
type fakeLink struct {
	net  *fakeNet
	from *actor.ActorSystem
	addr string // from's address in the net
}

func (l fakeLink) SendUserMessage(pid *actor.PID, message any) {
	l.net.mu.Lock()
	alive, to, tap := l.net.sys[l.addr] == l.from, l.net.sys[pid.Address], l.net.tap
	l.net.mu.Unlock()
	if !alive || to == nil {
		return
	}
	if tap != nil {
		m := message
		if env, ok := message.(*actor.MessageEnvelope); ok {
			m = env.Message
		}
		tap(pid, m)
	}
	if env, ok := message.(*actor.MessageEnvelope); ok && env.Sender != nil {
		// A PID caches the process it resolved to: each system gets a
		// copy of its own, as from the wire.
		message = &actor.MessageEnvelope{Header: env.Header, Message: env.Message, Sender: actor.NewPID(env.Sender.Address, env.Sender.Id)}
	}
	if p, ok := to.ProcessRegistry.GetLocal(pid.Id); ok {
		p.SendUserMessage(to.NewLocalPID(pid.Id), message)
	}
}

func (fakeLink) SendSystemMessage(*actor.PID, any) {}
func (fakeLink) Stop(*actor.PID)                   {}

// followIDs returns the ids of n's followers.
func followIDs(n *clusterNode) []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var ids []string
	for id := range n.follow {
		ids = append(ids, id)
	}
	return ids
}

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

// waitReq is a wait a clusterNode asked of its clock (n.after), d long:
// it is over when the test sends on fire.
type waitReq struct {
	d    time.Duration
	fire chan time.Time
}

// stubAfter stands in for n's clock from now on: each wait n asks for is
// handed to the test on the channel returned. Once the test ends (before
// the Runtimes it opened earlier close), a wait n asks for is never over.
func stubAfter(t *testing.T, n *clusterNode) <-chan waitReq {
	waits := make(chan waitReq)
	done := make(chan struct{})
	n.after = func(d time.Duration) <-chan time.Time {
		fire := make(chan time.Time, 1)
		select {
		case waits <- waitReq{d, fire}:
		case <-done:
		}
		return fire
	}
	t.Cleanup(func() { close(done) })
	return waits
}

// fakeOwnerGateway is a member at memberAddr whose requests leave
// through sys, an actor system at ownerAddr on which gw stands for the
// owner's gateway; the member's Runtime is opened with okModel and
// NoResume, and conv is the first conversation its membership gives the
// owner.
func fakeOwnerGateway(t *testing.T, gw actor.Actor) (sys *actor.ActorSystem, n *clusterNode, conv string) {
	t.Helper()
	sys = quietSystem(t, ownerAddr)
	_, err := sys.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return gw }), GatewayName)
	require.NoError(t, err)
	r := openRuntime(t, Options{Model: okModel(), NoResume: true})
	n = newNode(r, sys) // requests leave through the gateway's system
	n.self = memberAddr
	members := []string{n.self, sys.Address()}
	slices.Sort(members)
	n.members.Store(&members)
	return sys, n, ownedBy(n, sys.Address())
}

// gatewayRuntime is a Runtime on its own actor system, whose gateway
// (rt.gw.serve) a test calls as a member or an application actor would.
func gatewayRuntime(t testing.TB) *Runtime {
	t.Helper()
	return gatewayRuntimeOf(t, Options{Model: scripted.New(scripted.Options{}), NoResume: true})
}

// gatewayRuntimeOf is gatewayRuntime opened with opts (opts.ActorSystem
// is set to the Runtime's own, which logs nothing; rt.system is that
// system). Both end with the test.
func gatewayRuntimeOf(t testing.TB, opts Options) *Runtime {
	t.Helper()
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.DiscardHandler)
	}))
	t.Cleanup(sys.Shutdown)
	opts.ActorSystem = sys
	rt, err := Open(opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = rt.Close() })
	return rt
}

// pendingApproval has model (rt's) call the human tool "approve" in
// conversation "c", sent "may I?" through rt, and returns the id of that
// call once it is rt's one pending call. rt has the tool.
func pendingApproval(t testing.TB, ctx context.Context, rt *Runtime, model *scripted.Model) string {
	t.Helper()
	model.Push("c", scripted.Reply("", scripted.Call("approve", `{}`)))
	_, err := rt.Send(ctx, "c", "may I?", agent.Scope{UserID: "u"})
	require.NoError(t, err)
	var id string
	require.Eventually(t, func() bool {
		calls, _, err := rt.PendingCalls(ctx, "", 0)
		if err != nil || len(calls) != 1 {
			return false
		}
		id = calls[0].GetId()
		return true
	}, 10*time.Second, 5*time.Millisecond, "the call is pending")
	return id
}
