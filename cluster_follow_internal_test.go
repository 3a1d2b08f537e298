package lazarus

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

// A follower takes the updates of its stream only: of the conversation it
// follows, from the gateway of the member it subscribed to. It took every
// update sent to its subscription id, from anyone, and kept the update's
// conversation id: an update of another conversation (from the owner, or
// from another member or actor) reached its subscriber as one of the
// followed conversation, or as one of another conversation. Such updates
// are dropped now (with a debug log), and the stream goes on.
func TestFollowerTakesOnlyItsStreamsUpdates(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	store := memjournal.New(memjournal.Options{})
	model := okModel()
	const otherAddr = "other.test:1"
	net, members := pairNet()
	owner, ownerSys := openOwner(t, net, Options{Store: store, Model: model, NoResume: true})
	member := openRuntime(t, Options{Store: store, Model: model, NoResume: true})
	n := netMember(t, net, member, memberAddr, members)
	// Another actor system on the network: not a member of
	// ConversationKind, but it reaches the member's gateway.
	otherSys := quietSystem(t, otherAddr)
	net.join(otherSys)

	conv := ownedBy(n, ownerAddr)
	otherConv := firstConv(func(id string) bool { return id != conv })
	scope := agent.Scope{UserID: "u"}
	firstTurn(t, ctx, owner, store, conv)

	updates, err := member.Subscribe(ctx, conv, 0)
	require.NoError(t, err)
	// next returns the next update with an event, failing the test if the
	// subscription ends or ctx does first.
	next := func() Update {
		t.Helper()
		for {
			select {
			case u, ok := <-updates:
				require.True(t, ok, "the subscription ended")
				require.NoError(t, u.Err)
				require.Equal(t, conv, u.ConversationID, "an update of another conversation")
				if u.Event != nil {
					return u
				}
			case <-ctx.Done():
				t.Fatal("no update arrived")
				return Update{}
			}
		}
	}
	require.EqualValues(t, 1, next().Event.GetSeq())
	require.EqualValues(t, 2, next().Event.GetSeq())
	ids := followIDs(n)
	require.Len(t, ids, 1)
	id := ids[0]

	memberGW := actor.NewPID(memberAddr, GatewayName)
	bogus := func(conv string) *messages.ClusterUpdate {
		return &messages.ClusterUpdate{SubscriptionId: id, ConversationId: conv,
			Event: &messages.Event{Seq: 3, Body: &messages.Event_UserMsg{UserMsg: agent.UserMessage(agent.TextPart("bogus"))}}}
	}
	// Another conversation's update, from the owner's gateway.
	ownerSys.Root.RequestWithCustomSender(memberGW, bogus(otherConv), actor.NewPID(ownerAddr, GatewayName))
	// The followed conversation's, from another member's gateway, and
	// from another actor on the owner's member.
	otherSys.Root.RequestWithCustomSender(memberGW, bogus(conv), actor.NewPID(otherAddr, GatewayName))
	ownerSys.Root.RequestWithCustomSender(memberGW, bogus(conv), actor.NewPID(ownerAddr, "someone"))
	// A final one, which would end the stream.
	final := bogus(conv)
	final.Event, final.Final = nil, true
	otherSys.Root.RequestWithCustomSender(memberGW, final, actor.NewPID(otherAddr, GatewayName))

	// The fake network delivers in order: the bogus updates are in the
	// member's gateway before the stream's next ones.
	_, err = owner.Send(ctx, conv, "again", scope)
	require.NoError(t, err)
	u := next()
	require.EqualValues(t, 3, u.Event.GetSeq())
	require.Equal(t, "again", u.Event.GetUserMsg().GetContent()[0].GetText(), "the stream's own event")
	require.EqualValues(t, 4, next().Event.GetSeq())
	require.Equal(t, []string{id}, followIDs(n), "the stream goes on")
}

// recordHandler is a log handler that keeps the records logged.
type recordHandler struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *recordHandler) WithGroup(string) slog.Handler            { return h }

func (h *recordHandler) Handle(_ context.Context, rec slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, rec.Clone())
	return nil
}

// retries returns the attributes of the records that say a follower
// subscribes again.
func (h *recordHandler) retries() []map[string]any { return h.matching("subscribing again") }

// matching returns the attributes (and level) of the records whose
// message contains msg.
func (h *recordHandler) matching(msg string) []map[string]any {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []map[string]any
	for _, rec := range h.recs {
		if !strings.Contains(rec.Message, msg) {
			continue
		}
		attrs := map[string]any{"level": rec.Level}
		rec.Attrs(func(a slog.Attr) bool {
			attrs[a.Key] = a.Value.Any()
			return true
		})
		out = append(out, attrs)
	}
	return out
}

// A follower whose owner cannot be reached (its requests are dead
// letters) subscribes again after a wait that doubles from 100 ms to 2 s
// and stays there, each retry logged at debug level through the Runtime's
// logger; a membership change ends a wait at once and starts again from
// 100 ms. It subscribed again every 100 ms for as long as the owner was
// out of reach, and logged nothing. (The test stands in for the clock:
// each wait is a channel it fires.)
func TestFollowerBacksOffWhileTheOwnerIsUnreachable(t *testing.T) {
	store := memjournal.New(memjournal.Options{})
	p := newForwardPair(t, store, store, okModel())
	n := p.caller.cl
	conv := ownedByADeadMember(n)
	logs := &recordHandler{}
	n.log = slog.New(logs)
	waits := stubAfter(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sctx, scancel := context.WithCancel(ctx)
	defer scancel()
	updates, err := p.caller.Subscribe(sctx, conv, 0)
	require.NoError(t, err)
	next := func() waitReq {
		t.Helper()
		select {
		case w := <-waits:
			return w
		case u, ok := <-updates:
			t.Fatalf("an update (%v) or the end (%v) of a subscription whose owner is unreachable", u, !ok)
		case <-ctx.Done():
			t.Fatal("the follower did not wait to subscribe again")
		}
		return waitReq{}
	}
	want := []time.Duration{100, 200, 400, 800, 1600, 2000, 2000}
	var w waitReq
	for i, d := range want {
		w = next()
		require.Equal(t, d*time.Millisecond, w.d, "wait %d", i)
		if i < len(want)-1 {
			w.fire <- time.Now()
		}
	}
	// The membership changes during a 2 s wait: the follower subscribes
	// again at once (the wait is never fired), and waits 100 ms after.
	n.mu.Lock()
	close(n.changed)
	n.changed = make(chan struct{})
	n.mu.Unlock()
	w = next()
	require.Equal(t, 100*time.Millisecond, w.d, "a membership change starts the waits again")

	retries := logs.retries()
	require.Len(t, retries, len(want)+1, "each retry is logged")
	for i, a := range retries {
		require.Equal(t, slog.LevelDebug, a["level"])
		require.Equal(t, conv, a["conversation"])
		require.Equal(t, deadMember, a["owner"])
		require.ErrorIs(t, a["err"].(error), actor.ErrDeadLetter)
		if i < len(want) {
			require.Equal(t, want[i]*time.Millisecond, a["retry_in"])
		}
	}
	scancel()
	for range updates { // the follower ends with its context
	}
}

// subscribeGateway stands for an owner's gateway that hands each
// ClusterSubscribe it gets to the test, with whom to answer.
type subscribeGateway struct{ got chan heldSubscribe }

type heldSubscribe struct {
	sender *actor.PID
	req    *messages.ClusterSubscribe
}

func (g *subscribeGateway) Receive(ctx actor.Context) {
	if req, ok := ctx.Message().(*messages.ClusterSubscribe); ok {
		g.got <- heldSubscribe{sender: ctx.Sender(), req: req}
	}
}

// A follower's waits grow while its owner refuses to serve it (closing:
// UNAVAILABLE, not answered), and start again from 100 ms once the owner
// serves a subscription: a stream the owner then stops serving is
// subscribed again after 100 ms, not after the longest wait so far.
func TestFollowerBackoffStartsAgainOnceServed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	net, members := pairNet()
	gw := &subscribeGateway{got: make(chan heldSubscribe, 1)}
	ownerSys := fakeGatewayAt(t, net, ownerAddr, gw)
	member := openRuntime(t, Options{Store: memjournal.New(memjournal.Options{}), Model: okModel(), NoResume: true})
	n := netMember(t, net, member, memberAddr, members)
	waits := stubAfter(t, n)
	conv := ownedBy(n, ownerAddr)

	sctx, scancel := context.WithCancel(ctx)
	defer scancel()
	updates, err := member.Subscribe(sctx, conv, 0)
	require.NoError(t, err)
	subscribed := func() heldSubscribe {
		t.Helper()
		select {
		case s := <-gw.got:
			require.Equal(t, conv, s.req.GetConversationId())
			return s
		case <-ctx.Done():
			t.Fatal("the follower did not subscribe")
			return heldSubscribe{}
		}
	}
	waited := func(want time.Duration) waitReq {
		t.Helper()
		select {
		case w := <-waits:
			require.Equal(t, want, w.d)
			return w
		case u, ok := <-updates:
			t.Fatalf("an update (%v) or the end (%v) of the subscription", u, !ok)
		case <-ctx.Done():
			t.Fatal("the follower did not wait to subscribe again")
		}
		return waitReq{}
	}
	refuse := func(s heldSubscribe) {
		ownerSys.Root.Send(s.sender, &messages.ClusterReply{RequestId: s.req.GetRequestId(), Node: ownerAddr,
			Error: &messages.Error{Code: messages.ErrorCode_ERROR_CODE_UNAVAILABLE, Message: "closing"}})
	}
	for _, d := range []time.Duration{100, 200, 400} {
		refuse(subscribed())
		waited(d * time.Millisecond).fire <- time.Now()
	}
	// Served: the stream starts, then the owner stops serving it.
	s := subscribed()
	ownerSys.Root.Send(s.sender, &messages.ClusterReply{RequestId: s.req.GetRequestId(), Node: ownerAddr})
	ownerSys.Root.RequestWithCustomSender(actor.NewPID(memberAddr, GatewayName),
		&messages.ClusterUpdate{SubscriptionId: s.req.GetSubscriptionId(), ConversationId: conv, Final: true,
			Error: &messages.Error{Code: messages.ErrorCode_ERROR_CODE_UNAVAILABLE, Message: "stopped serving"}},
		actor.NewPID(ownerAddr, GatewayName))
	waited(100 * time.Millisecond).fire <- time.Now()
	refuse(subscribed())
	waited(200 * time.Millisecond)
	scancel()
	for range updates { // the follower ends with its context
	}
}
