package lazarus

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/automanaged"
	"github.com/asynkron/protoactor-go/cluster/identitylookup/disthash"
	"github.com/asynkron/protoactor-go/eventstream"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/supervisor"
)

// ConversationKind is the cluster kind every Lazarus member advertises:
// the members of this kind are the candidates owners of conversations.
const ConversationKind = "lazarus.conversation"

// GatewayName is the name of the gateway actor of every node's actor system
// (its PID is the node's address and this name). Nodes send it the
// messages of messages/lazarus/v1/cluster.proto; so may application actors
// (see ClusterOptions).
const GatewayName = "lazarus-gateway"

// Defaults of ClusterOptions.
const (
	DefaultClusterName    = "lazarus"
	DefaultRefreshTTL     = 500 * time.Millisecond
	DefaultRequestTimeout = 2 * time.Second
)

// ErrNoOwner: a call to a conversation found no member to run it on before
// its context ended or Options.CallTimeout passed (every owner it tried
// was unreachable).
var ErrNoOwner = errors.New("lazarus: no cluster member answered")

// ClusterOptions turns on cluster mode (Options.Cluster): the Runtime
// becomes one member of a protoactor cluster, and every conversation is
// owned by one member, chosen by rendezvous hashing of the conversation id
// over the members of ConversationKind. Every Runtime method works on every
// member (IsActive and Active report this member's own actors): a call for
// a conversation another member owns travels to it as a
// protobuf message (messages/lazarus/v1/cluster.proto) with the caller's
// scope (identity and permissions; Scope.Values never cross a node), and
// runs there. When the membership changes (a member dies, joins, leaves),
// ownership moves with the hash: a member stops its activations of the
// conversations it lost (a turn running there is cancelled, not ended),
// and the new owner revives what it gets from the shared Store; the Store's fence (every activation writes with
// its expected last seq) keeps one writer per conversation even when two
// members believe they own it (a paused member, say).
//
// The members must share one Store (Options.Postgres, or a Store that all
// of them reach) and run the same Tools and Model.
//
// The gateway does not authenticate its callers: the cluster's network is
// a trust boundary. Resolve and Reject check the tool's authorization
// rules on the node the caller calls, with the caller's full scope.
type ClusterOptions struct {
	// Name is the cluster's name; members of other names are ignored.
	// Default DefaultClusterName.
	Name string
	// Host and Port are where this member's remote (gRPC) endpoint
	// listens; other members reach it at Host:Port (or
	// AdvertisedHost:Port). Default host 127.0.0.1; port 0 picks a free
	// one. A Port outside 0 to 65535 is refused by Open (ErrInvalid).
	Host string
	Port int
	// AdvertisedHost is the address other members use, if Host is not
	// reachable as is (a container's address; Host is then often
	// 0.0.0.0). It needs a Port other than 0. Default Host.
	AdvertisedHost string
	// Provider finds the members. Default: protoactor's automanaged
	// provider over Seeds, this member serving its health endpoint on
	// AutoManagedPort. For Kubernetes, pass the provider of
	// github.com/asynkron/protoactor-go/cluster/clusterproviders/k8s.
	Provider cluster.ClusterProvider
	// Seeds are the host:port of the automanaged health endpoints of every
	// member (this one included), used when Provider is nil.
	Seeds []string
	// AutoManagedPort is the port of this member's automanaged health
	// endpoint, used when Provider is nil. Required then, from 1 to
	// 65535: Open refuses another (ErrInvalid).
	AutoManagedPort int
	// RefreshTTL is how often the automanaged provider polls the members.
	// A member that misses a poll leaves the cluster. Default (zero or
	// less) DefaultRefreshTTL.
	RefreshTTL time.Duration
	// RequestTimeout bounds one attempt of a call to another member (the
	// member called runs it no longer, see ClusterRequest.timeout); a
	// call that times out is tried again (sends, wakes, kills: they are
	// idempotent) on the owner the membership names then, until its
	// context ends or Options.CallTimeout passes, which bounds a
	// forwarded call as it bounds a local one. Default (zero or less)
	// DefaultRequestTimeout.
	RequestTimeout time.Duration
}

func (o ClusterOptions) withDefaults() ClusterOptions {
	if o.Name == "" {
		o.Name = DefaultClusterName
	}
	if o.Host == "" {
		o.Host = "127.0.0.1"
	}
	if o.RefreshTTL <= 0 {
		o.RefreshTTL = DefaultRefreshTTL
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = DefaultRequestTimeout
	}
	return o
}

// clusterNode is the cluster side of a Runtime.
type clusterNode struct {
	r    *Runtime
	opts ClusterOptions
	sys  *actor.ActorSystem
	c    *cluster.Cluster
	self string // this member's address
	// run tells this node's subscription ids from those of an earlier
	// node at the same address (the member restarted there, or a Runtime
	// opened again on the same actor system): random, drawn once.
	run     string
	gateway *actor.PID
	log     *slog.Logger
	// after is time.After: a follower's wait before it subscribes again,
	// and a forwarded call's before it tries again (a test replaces it).
	// Real time, not Options.Clock, as the requests' own timeouts are: a
	// test's manual clock counts and runs the actors' timers.
	after func(time.Duration) <-chan time.Time

	members atomic.Pointer[[]string] // addresses of the members, sorted
	// sup is the Runtime's supervisor once it started: membership changes
	// before that need no repartition (the expiry actor reads the Store
	// when it starts).
	sup     atomic.Pointer[supervisor.Supervisor]
	topoSub *eventstream.Subscription

	mu        sync.Mutex
	topoKey   string              // the member ids and addresses last applied
	topoGen   uint64              // how many memberships were applied
	memberIDs map[string][]string // the member ids at each address, last applied
	changed   chan struct{}       // closed and replaced on every membership change
	serving   map[string]serving
	follow    map[string]*follower
	ending    map[endingKey][]chan struct{} // see endApart
	nextID    atomic.Uint64
	resuming  bool
	again     bool
	stopping  bool
	wg        sync.WaitGroup // the gateway's goroutines
	followers sync.WaitGroup // the subscribers' goroutines
}

// maxPort is the largest TCP port.
const maxPort = 65535

// startCluster starts the member on sys. It returns once the member is
// started (protoactor's StartMember waits about a second).
func startCluster(r *Runtime, sys *actor.ActorSystem, o ClusterOptions) (n *clusterNode, err error) {
	o = o.withDefaults()
	switch {
	case o.Port < 0 || o.Port > maxPort:
		return nil, fmt.Errorf("lazarus: cluster: Port %d is out of range [0, %d]: %w", o.Port, maxPort, journal.ErrInvalid)
	case o.Provider == nil && o.AutoManagedPort > maxPort:
		return nil, fmt.Errorf("lazarus: cluster: AutoManagedPort %d is out of range [1, %d]: %w", o.AutoManagedPort, maxPort, journal.ErrInvalid)
	}
	provider := o.Provider
	if provider == nil {
		if o.AutoManagedPort <= 0 || len(o.Seeds) == 0 {
			return nil, fmt.Errorf("lazarus: cluster: Seeds and AutoManagedPort are required without a Provider: %w", journal.ErrInvalid)
		}
		provider = automanaged.NewWithConfig(o.RefreshTTL, o.AutoManagedPort, o.Seeds...)
	}
	var ropts []remote.ConfigOption
	if o.AdvertisedHost != "" {
		if o.Port <= 0 {
			return nil, fmt.Errorf("lazarus: cluster: AdvertisedHost needs a Port: %w", journal.ErrInvalid)
		}
		ropts = append(ropts, remote.WithAdvertisedHost(fmt.Sprintf("%s:%d", o.AdvertisedHost, o.Port)))
	}
	kind := cluster.NewKind(ConversationKind, actor.PropsFromFunc(func(actor.Context) {}))
	cfg := cluster.Configure(o.Name, provider, disthash.New(), remote.Configure(o.Host, o.Port, ropts...),
		cluster.WithKinds(kind))
	n = newNode(r, sys)
	n.opts = o
	n.c = cluster.New(sys, cfg)
	defer func() {
		if p := recover(); p != nil { // protoactor panics when its provider fails
			err = fmt.Errorf("lazarus: cluster: start member: %v", p)
		}
	}()
	n.c.StartMember()
	n.self = sys.Address()
	n.members.Store(&[]string{n.self})
	n.topoSub = sys.EventStream.Subscribe(func(ev any) {
		if t, ok := ev.(*cluster.ClusterTopology); ok {
			n.onTopology(t.Members)
		}
	})
	n.onTopology(n.c.MemberList.Members().Members())
	return n, nil
}

// newNode is the gateway's side of a Runtime, not yet a cluster member.
func newNode(r *Runtime, sys *actor.ActorSystem) *clusterNode {
	n := &clusterNode{r: r, sys: sys, log: r.log, changed: make(chan struct{}), self: sys.Address(),
		opts: ClusterOptions{}.withDefaults(), serving: map[string]serving{}, follow: map[string]*follower{},
		ending: map[endingKey][]chan struct{}{}, run: rand.Text(), after: time.After}
	n.members.Store(&[]string{n.self})
	return n
}

// spawnGateway spawns the gateway actor, once the Runtime's supervisor
// runs: until then, requests to this member are dead letters, which the
// caller sends again.
func (n *clusterNode) spawnGateway() error {
	pid, err := n.sys.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return &gatewayActor{n: n} }), GatewayName)
	switch {
	case errors.Is(err, actor.ErrNameExists):
		// pid is the actor that has the name: not ours to stop.
		return fmt.Errorf("lazarus: Options.ActorSystem has an actor named %q already (one Runtime per actor system): %w", GatewayName, journal.ErrInvalid)
	case err != nil:
		return fmt.Errorf("lazarus: spawn the gateway: %w", err)
	}
	n.gateway = pid
	return nil
}

// Address returns this member's address (host:port) in cluster mode, or ""
// when the Runtime is not a cluster member.
func (r *Runtime) Address() string {
	if r.cl == nil {
		return ""
	}
	return r.cl.self
}

// Owner returns the address of the member that owns the conversation by
// the current membership, or "" when the Runtime is not a cluster member.
// Two members may disagree while the membership changes.
func (r *Runtime) Owner(conversationID string) string {
	if r.cl == nil {
		return ""
	}
	return r.cl.owner(conversationID)
}

// Members returns the addresses of the cluster's members as this member
// sees them, sorted; nil when the Runtime is not a cluster member.
func (r *Runtime) Members() []string {
	if r.cl == nil {
		return nil
	}
	return slices.Clone(*r.cl.members.Load())
}

// setMembers stores the members of ConversationKind and reports whether
// they changed (an address, or the id of a member restarted at the same
// address).
func (n *clusterNode) setMembers(ms []*cluster.Member) bool {
	addrs := []string{n.self} // this member counts itself, seen or not yet
	keys := []string{}
	ids := map[string][]string{}
	for _, m := range ms {
		if m.HasKind(ConversationKind) {
			addrs = append(addrs, m.Address())
			keys = append(keys, m.Id+"@"+m.Address())
			ids[m.Address()] = append(ids[m.Address()], m.Id)
		}
	}
	slices.Sort(addrs)
	addrs = slices.Compact(addrs)
	slices.Sort(keys)
	key := strings.Join(keys, ",")
	n.mu.Lock()
	defer n.mu.Unlock()
	if key == n.topoKey {
		return false
	}
	n.topoKey = key
	n.topoGen++
	n.memberIDs = ids
	n.members.Store(&addrs)
	return true
}

// generation returns how many memberships were applied so far.
func (n *clusterNode) generation() uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.topoGen
}

// attach hands the node the Runtime's supervisor, started while the
// membership was at generation gen. A membership applied since then found
// no supervisor to tell, and the expiry actor may have read the Store's
// deadlines before it: the supervisor stops the activations of what this
// member no longer owns and repartitions now. (A membership applied after
// this check finds the supervisor.)
func (n *clusterNode) attach(sup *supervisor.Supervisor, gen uint64) {
	n.sup.Store(sup)
	if n.generation() != gen {
		sup.StopUnowned(n.owns)
		sup.Repartition()
	}
}

// onTopology applies a membership: ownership moves with it, so this member
// stops, quietly, the live activations of the conversations it no longer
// owns (supervisor.StopUnowned: a turn running there is cancelled, its
// model call's context ends, nothing is written for the stop, and the
// new owner's resume scan runs the turn from the log; the hub drops what
// its model call streamed, see hub.dropUnowned), the
// expiry actor re-reads the deadlines it owns now, this member resumes
// the ACTIVE conversations it now owns, its streams to other members'
// subscribers that left end, and its own subscribers resubscribe where
// their conversations live now (so no subscriber waits on a stopped
// activation: one on another member that still sees this one as the
// owner moves once its own membership changes). A call in flight to a
// stopped activation is sent to the new owner if it is safe to send
// again, else it ends with ErrUnknownOutcome (see Runtime.ask). A stream
// ends too when the member it is served to is gone by its id while its
// address stays (it restarted there: see servingMember), rather than at
// the conversation's next update.
func (n *clusterNode) onTopology(ms []*cluster.Member) {
	if !n.setMembers(ms) {
		return
	}
	members := *n.members.Load()
	n.log.Info("lazarus: cluster membership changed", "members", members)
	n.mu.Lock()
	close(n.changed)
	n.changed = make(chan struct{})
	for id, s := range n.serving {
		switch ids := n.memberIDs[s.addr]; {
		case !slices.Contains(members, s.addr):
			s.cancel()
		case s.member == "":
			// Served before its member was seen: the member seen at
			// its address now is the one that subscribed.
			s.member = n.servingMember(s.addr)
			n.serving[id] = s
		case !slices.Contains(ids, s.member):
			s.cancel() // its member restarted at the address
		}
	}
	n.mu.Unlock()
	if sup := n.sup.Load(); sup != nil {
		sup.StopUnowned(n.owns)
		sup.Repartition()
		n.resume()
	}
	if h := n.r.hub; h != nil {
		h.dropUnowned(n.owns)
	}
}

// servingMember is the id of the member at addr by the membership last
// applied, for a stream served to it: "" when there is none at addr or
// more than one (one restarted there, the other not yet gone), which
// onTopology fills in once the membership names one. A stream whose member
// id is no longer at its address ends (a subscriber of a new run there
// that subscribed before this member saw its id ends too, once, and
// subscribes again). n.mu must be held.
func (n *clusterNode) servingMember(addr string) string {
	if ids := n.memberIDs[addr]; len(ids) == 1 {
		return ids[0]
	}
	return ""
}

// idsAt returns the member ids at addr by the membership last applied.
func (n *clusterNode) idsAt(addr string) []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.memberIDs[addr])
}

// resume runs the resume scan of the ACTIVE conversations this member owns,
// once at a time; a membership change during a scan runs it again after.
func (n *clusterNode) resume() {
	if n.r.opts.NoResume {
		return // Options.NoResume: no scan at all
	}
	n.mu.Lock()
	if n.resuming {
		n.again = true
		n.mu.Unlock()
		return
	}
	n.resuming = true
	n.mu.Unlock()
	r := n.r
	done := func() {
		n.mu.Lock()
		n.resuming = false
		n.mu.Unlock()
	}
	if !r.startBackground() {
		done()
		return
	}
	go func() {
		for {
			r.resumeInterrupted(false) // Done by it
			n.mu.Lock()
			if !n.again {
				// Decided under the lock a resume call takes: one that
				// comes after it starts a scan of its own.
				n.resuming = false
				n.mu.Unlock()
				return
			}
			n.again = false
			n.mu.Unlock()
			if !r.startBackground() {
				done() // closed: no scan is owed any more
				return
			}
		}
	}()
}

// changes returns a channel closed at the next membership change.
func (n *clusterNode) changes() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.changed
}

// owner is the rendezvous hash of id over the members: the member whose
// score for id is highest. A score mixes the FNV-1a hashes of the member
// and of the id through the SplitMix64 finalizer (FNV alone orders the
// members almost the same way for every id).
func (n *clusterNode) owner(id string) string {
	members := *n.members.Load()
	if len(members) == 1 {
		return members[0]
	}
	hid := fnv64(id)
	var best string
	var bestScore uint64
	for _, m := range members {
		if s := mix64(fnv64(m) ^ (hid * 0x9e3779b97f4a7c15)); best == "" || s > bestScore {
			best, bestScore = m, s
		}
	}
	return best
}

func fnv64(s string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(s))
	return h.Sum64()
}

// mix64 is the SplitMix64 finalizer.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// owns reports whether this member owns id.
func (n *clusterNode) owns(id string) bool { return n.owner(id) == n.self }

// stop ends the member's streams and leaves the cluster.
// stopServing ends the streams and requests this member serves, and waits
// for its subscribers' goroutines (the Runtime's life has ended).
func (n *clusterNode) stopServing() {
	if n.topoSub != nil {
		n.sys.EventStream.Unsubscribe(n.topoSub)
	}
	n.mu.Lock()
	n.stopping = true
	for _, s := range n.serving {
		s.cancel()
	}
	n.mu.Unlock()
	n.wg.Wait()
	n.followers.Wait()
}

// leave leaves the cluster and stops the actor system (protoactor's
// graceful shutdown, about two seconds); outside a cluster it stops the
// gateway.
func (n *clusterNode) leave() {
	if n.c != nil {
		n.c.Shutdown(true)
		return
	}
	if n.gateway != nil {
		_ = n.sys.Root.StopFuture(n.gateway).Wait()
	}
}

// scopeToProto is the part of a scope that travels with a call.
func scopeToProto(s agent.Scope) *messages.ClusterScope {
	return &messages.ClusterScope{UserId: s.UserID, Roles: slices.Clone(s.Roles), Permissions: slices.Clone(s.Permissions)}
}

func scopeFromProto(p *messages.ClusterScope) agent.Scope {
	return agent.Scope{UserID: p.GetUserId(), Roles: p.GetRoles(), Permissions: p.GetPermissions()}
}

// errRunLocal says the caller's own member owns the conversation: run the
// call here.
var errRunLocal = errors.New("run locally")

// forwardRetryMin and forwardRetryMax bound how long forward waits before
// it tries an owner again: the wait doubles from the first to the second,
// and a membership change ends it at once and starts it again from the
// first, as a follower's. The cap is lower than a
// follower's (followRetryMax): a forwarded call has a caller waiting on
// it, within Options.CallTimeout, for an owner that is often back in well
// under a second (its gateway not yet spawned, a closing member's
// successor named by the next membership), while a follower may wait on
// an unreachable owner for as long as its subscription lives, and only
// loads the network by trying.
const (
	forwardRetryMin = 20 * time.Millisecond
	forwardRetryMax = 500 * time.Millisecond
)

// forward runs req on the conversation's owner, when that is another
// member: it returns errRunLocal when this member owns it (at the first
// attempt or later, after a membership change). idempotent calls are tried
// again after a timeout; others only when their request did not reach a
// live gateway (a dead letter), and a timeout of theirs is an error
// wrapping ErrUnknownOutcome. Options.CallTimeout bounds the whole call,
// as it bounds a local one, when ctx has no earlier deadline. Once ctx has
// ended, no request of the call is sent. Close ends it as it ends a local
// call in flight: an error wrapping ErrClosed (and ErrUnknownOutcome once
// an owner may have had it).
func (n *clusterNode) forward(ctx context.Context, req *messages.ClusterRequest, idempotent bool) (*messages.ClusterReply, error) {
	ctx, cancel := context.WithTimeout(ctx, n.r.opts.CallTimeout)
	defer cancel()
	ctx, closing := context.WithCancelCause(ctx)
	defer closing(nil)
	defer context.AfterFunc(n.r.life, func() { closing(ErrClosed) })()
	req.RequestId = n.nextID.Add(1)
	backoff := forwardRetryMin
	var sentTo string // the last owner that may have got the request
	for {
		owner := n.owner(req.GetConversationId())
		if owner == n.self {
			return nil, errRunLocal
		}
		timeout := n.opts.RequestTimeout
		if dl, ok := ctx.Deadline(); ok {
			if left := time.Until(dl); left < timeout {
				timeout = left
			}
		}
		if timeout <= 0 || ctx.Err() != nil {
			// Nothing more is handed over once the call ended (its
			// context could end as a retry's backoff did).
			return nil, n.abandoned(ctx, sentTo)
		}
		changed := n.changes()
		// Each attempt is a message of its own (a local gateway may still
		// read the last one's), with how long this attempt waits for it.
		attempt := &messages.ClusterRequest{RequestId: req.GetRequestId(), ConversationId: req.GetConversationId(),
			Scope: req.GetScope(), Op: req.GetOp(), Timeout: durationpb.New(timeout)}
		res, err, moved := n.request(ctx, owner, attempt, timeout, changed, idempotent)
		if moved || !errors.Is(err, actor.ErrDeadLetter) {
			sentTo = owner // it reached a gateway, or may have
		}
		if n.r.life.Err() != nil {
			// Closed while it waited: ended by Close, as a local call in
			// flight is, whatever came first of the answer and the
			// AfterFunc above (its goroutine may not have run yet).
			closing(ErrClosed)
			return nil, n.abandoned(ctx, sentTo)
		}
		if moved {
			continue // the membership changed under an idempotent call: ask the new owner
		}
		if err == nil {
			reply, ok := res.(*messages.ClusterReply)
			if !ok {
				return nil, fmt.Errorf("lazarus: cluster: unexpected reply %T from %s", res, owner)
			}
			if !errors.Is(journal.ErrorFromProto(reply.GetError()), journal.ErrUnavailable) || !idempotent || reply.GetAnswered() {
				return reply, nil
			}
			// The owner is closing, or the conversation moved: try again
			// where the membership says. (An UNAVAILABLE that is the
			// call's own outcome there, its Store's, is answered.)
		} else if !errors.Is(err, actor.ErrDeadLetter) && !idempotent {
			if ctx.Err() != nil {
				return nil, n.abandoned(ctx, owner)
			}
			return nil, fmt.Errorf("%w: %s did not answer: %w", ErrUnknownOutcome, owner, err)
		}
		n.log.Debug("lazarus: cluster: call to the owner failed; retrying", "owner", owner, "conversation", req.GetConversationId(), "err", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return nil, n.abandoned(ctx, sentTo)
		case <-changed:
			backoff = forwardRetryMin // a new owner, maybe
		case <-n.after(backoff):
			backoff = min(2*backoff, forwardRetryMax)
		}
	}
}

// abandoned is the error of a call whose context ended before an answer:
// ErrNoOwner when no owner it tried got its request (dead letters only),
// else ErrUnknownOutcome, as a local call handed over: the owner that got
// it may have run it. A call that Close ended (its context's cause is
// ErrClosed) wraps ErrClosed instead of ErrNoOwner, and with
// ErrUnknownOutcome once an owner may have had it.
func (n *clusterNode) abandoned(ctx context.Context, sentTo string) error {
	cause := context.Cause(ctx)
	if cause == nil { // its deadline passed, its timer has yet to say so
		cause = context.DeadlineExceeded
	}
	switch {
	case errors.Is(cause, ErrClosed) && sentTo == "":
		return cause
	case errors.Is(cause, ErrClosed):
		return fmt.Errorf("%w: closed before %s answered: %w", ErrUnknownOutcome, sentTo, cause)
	case sentTo == "":
		return fmt.Errorf("%w: %w", ErrNoOwner, cause)
	}
	return fmt.Errorf("%w: %s did not answer in time: %w", ErrUnknownOutcome, sentTo, cause)
}

// request sends req to owner's gateway and waits for the answer, or for
// ctx to end. An idempotent call also stops waiting when the membership
// changes and the conversation's owner with it (moved): a killed owner's
// requests are never answered, and would otherwise hold the call for the
// whole timeout.
func (n *clusterNode) request(ctx context.Context, owner string, req *messages.ClusterRequest, timeout time.Duration, changed <-chan struct{}, idempotent bool) (any, error, bool) {
	answer, release := n.call(actor.NewPID(owner, GatewayName), req)
	defer release()
	if !idempotent {
		changed = nil // its owner may have it: wait for it
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		select {
		case m := <-answer:
			res, err := actors.AnswerOf(m)
			return res, err, false
		case <-timer.C:
			return nil, actor.ErrTimeout, false
		case <-ctx.Done():
			return nil, ctx.Err(), false
		case <-changed:
			if n.owner(req.GetConversationId()) != owner {
				return nil, nil, true
			}
			changed = n.changes()
		}
	}
}

// call sends msg to target with a new reply box as its sender (an
// actors.ReplyBox, in place of a protoactor Future: a Future is named by a
// counter of the actor system that starts again in each run, so a member
// restarted at its address took the late answer to a call of its previous
// run for the answer to the new call of that name, and dropped the new
// call's own answer). The box is named with the run's random value, so
// such a late answer is a dead letter. call returns the channel the answer
// arrives on and release, which unregisters the box (an answer arriving
// later is a dead letter).
func (n *clusterNode) call(target *actor.PID, msg any) (answer <-chan any, release func()) {
	// The system's next id is unique in the system, and run in the
	// member's runs.
	box := actors.NewReplyBox(n.sys, "lazarus-reply-"+n.run)
	n.sys.Root.RequestWithCustomSender(target, msg, box.PID())
	return box.Answer(), box.Release
}

// callResult is call, waiting for the answer as a Future's Result does:
// actor.ErrTimeout once timeout has passed, actor.ErrDeadLetter when the
// target was gone.
func (n *clusterNode) callResult(target *actor.PID, msg any, timeout time.Duration) (any, error) {
	answer, release := n.call(target, msg)
	defer release()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case m := <-answer:
		return actors.AnswerOf(m)
	case <-timer.C:
		return nil, actor.ErrTimeout
	}
}

// replyErr is the error of a reply, mapped to the Runtime's sentinels.
func replyErr(reply *messages.ClusterReply) error {
	err := errorFromWire(reply.GetError())
	if err == nil {
		return nil
	}
	if errors.Is(err, journal.ErrUnknownOutcome) {
		return fmt.Errorf("%w: %w", ErrUnknownOutcome, err)
	}
	return err
}

// errorFromWire is journal.ErrorFromProto, and an error of code
// TOO_MANY_SUBSCRIPTIONS (an owner's refusal of a forwarded subscription)
// wraps ErrTooManySubscriptions, under the owner's message.
func errorFromWire(e *messages.Error) error {
	err := journal.ErrorFromProto(e)
	if e.GetCode() == messages.ErrorCode_ERROR_CODE_TOO_MANY_SUBSCRIPTIONS {
		return &callError{msg: err.Error(), errs: []error{ErrTooManySubscriptions, err}}
	}
	return err
}

// wireErr is the wire form of an error of a local call, for a reply: the
// Runtime's own sentinels become the journal codes a caller maps back. A
// call that timed out here is of unknown outcome (the code every peer
// knows), and the context's error it wraps goes in Error.also, so that the
// caller's error wraps it too; a peer that does not know its code reads
// the unknown outcome alone.
func wireErr(err error) *messages.Error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrClosed):
		return &messages.Error{Code: messages.ErrorCode_ERROR_CODE_UNAVAILABLE, Message: err.Error()}
	case errors.Is(err, ErrTooManySubscriptions):
		return &messages.Error{Code: messages.ErrorCode_ERROR_CODE_TOO_MANY_SUBSCRIPTIONS, Message: err.Error()}
	case errors.Is(err, ErrUnknownOutcome), errors.Is(err, context.DeadlineExceeded):
		e := &messages.Error{Code: messages.ErrorCode_ERROR_CODE_UNKNOWN_OUTCOME, Message: err.Error()}
		for _, c := range []struct {
			err  error
			code messages.ErrorCode
		}{
			{context.DeadlineExceeded, messages.ErrorCode_ERROR_CODE_DEADLINE_EXCEEDED},
			{context.Canceled, messages.ErrorCode_ERROR_CODE_CANCELED},
		} {
			if errors.Is(err, c.err) {
				e.Also = append(e.Also, c.code)
			}
		}
		return e
	}
	return journal.ErrorToProto(err)
}
