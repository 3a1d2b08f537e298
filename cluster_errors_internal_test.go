package lazarus

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/internal/leakcheck"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

// A call forwarded to the owner and in flight when its own Runtime is
// closed returns once Close has stopped the Runtime, as a local call in
// flight does (the contract of the entry calls), with an error wrapping
// ErrClosed and, the owner having had it, ErrUnknownOutcome. It waited
// for the owner's answer, then for ClusterOptions.RequestTimeout and the
// retries that follow, up to its context's end or Options.CallTimeout.
func TestForwardedCallInFlightAtCloseEndsWithErrClosed(t *testing.T) {
	p, hold, release, bound := newHeldPair(t)
	scope := agent.Scope{UserID: "u"}
	hold.armed.Store(true)
	type result struct {
		name string
		err  error
	}
	done := make(chan result, 2)
	go func() {
		_, err := p.caller.Send(context.Background(), p.conv, "held", scope)
		done <- result{"send", err}
	}()
	select {
	case <-hold.held:
	case <-bound.Done():
		t.Fatal("the owner never wrote the send")
	}
	go func() {
		done <- result{"rewind", p.caller.Rewind(context.Background(), p.conv, 1, RewindOptions{}, scope)}
	}()
	closed := make(chan error, 1)
	go func() { closed <- p.caller.Close() }()
	for range 2 {
		select {
		case res := <-done:
			require.ErrorIs(t, res.err, ErrClosed, "%s", res.name)
			if res.name == "send" {
				require.ErrorIs(t, res.err, ErrUnknownOutcome, "the owner had the send: %v", res.err)
			}
		case <-bound.Done():
			t.Fatal("a forwarded call outlived the Close of its Runtime")
		}
	}
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-bound.Done():
		t.Fatal("Close did not return")
	}
	release()
}

// An error the owner returns reaches the caller of a forwarded call with
// the message the same call gives on the owner, and its sentinel: the
// call's name once, then the cause. The caller named the call again in
// front of the owner's message, which already named it ("lazarus: send
// to "c": lazarus: send to "c": ...").
func TestForwardedErrorsNameTheCallOnce(t *testing.T) {
	p, _, _, bound := newHeldPair(t)
	scope := agent.Scope{UserID: "u"}
	same := func(name string, sentinel error, call func(rt *Runtime) error) {
		t.Helper()
		forwarded, local := call(p.caller), call(p.owner)
		require.ErrorIs(t, forwarded, sentinel, name)
		require.ErrorIs(t, local, sentinel, name)
		require.Equal(t, local.Error(), forwarded.Error(), "%s: the forwarded call's message is the local one's", name)
	}
	same("rewind", journal.ErrInvalid, func(rt *Runtime) error { return rt.Rewind(bound, p.conv, 99, RewindOptions{}, scope) })
	require.NoError(t, p.caller.End(bound, p.conv))
	same("send", journal.ErrEnded, func(rt *Runtime) error {
		_, err := rt.Send(bound, p.conv, "again", scope)
		return err
	})
	require.NoError(t, p.caller.Delete(bound, p.conv))
	same("delete", journal.ErrDeleted, func(rt *Runtime) error { return rt.Delete(bound, p.conv) })
	same("wake", journal.ErrDeleted, func(rt *Runtime) error { return rt.Wake(bound, p.conv) })
	same("configure", journal.ErrDeleted, func(rt *Runtime) error { return rt.Configure(bound, p.conv, agent.Settings{}) })
}

// An owner's answer of unknown outcome (its own call ended after the
// hand-over) reaches the caller wrapping ErrUnknownOutcome and the journal's
// sentinel, its message saying the call's name and "outcome unknown" once
// each, as the owner's did.
func TestOwnersUnknownOutcomeIsNamedOnce(t *testing.T) {
	rt, err := Open(Options{Model: agent.ModelFunc(func(context.Context, agent.Turn, func(string)) (*messages.AssistantMessage, error) {
		return agent.Text("ok"), nil
	}), NoResume: true})
	require.NoError(t, err)
	defer rt.Close()
	op := `lazarus: send to "c"`
	owners := rt.callErr(op, fmt.Errorf("%w: %w", ErrUnknownOutcome, context.DeadlineExceeded))
	err = rt.callErr(op, journal.ErrorFromProto(wireErr(owners)))
	require.ErrorIs(t, err, ErrUnknownOutcome)
	require.ErrorIs(t, err, journal.ErrUnknownOutcome)
	require.Equal(t, owners.Error(), err.Error())
}

// The gateway refuses a subscribe whose subscription id is empty, too
// long, or in use by a stream it serves (an error wrapping
// journal.ErrInvalid), and the stream of that id goes on: an unsubscribe
// ends it. It served a second stream under the id: the unsubscribe ended
// one of the two, and the other ran on, its updates tagged as the first's,
// until the subscriber's member left.
func TestGatewayRefusesASubscriptionIDInUse(t *testing.T) {
	rt := gatewayRuntimeOf(t, Options{Model: okModel(), NoResume: true})
	sys := rt.system
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, conv := range []string{"a", "b"} {
		_, err := rt.Send(ctx, conv, "hi", agent.Scope{UserID: "u"})
		require.NoError(t, err)
	}
	updates := make(chan *messages.ClusterUpdate, 64)
	recv, err := sys.Root.SpawnNamed(actor.PropsFromFunc(func(c actor.Context) {
		if u, ok := c.Message().(*messages.ClusterUpdate); ok {
			updates <- u
		}
	}), "subscriber")
	require.NoError(t, err)
	defer sys.Root.Stop(recv)
	n := rt.gw
	subscribe := func(id, conv string) error {
		t.Helper()
		res, err := n.callResult(n.gateway, &messages.ClusterSubscribe{RequestId: 7, SubscriptionId: id, ConversationId: conv,
			ReplyAddress: sys.Address(), ReplyId: "subscriber"}, 10*time.Second)
		require.NoError(t, err)
		reply := res.(*messages.ClusterReply)
		require.Equal(t, uint64(7), reply.GetRequestId())
		return journal.ErrorFromProto(reply.GetError())
	}
	require.NoError(t, subscribe("s1", "a"))
	select {
	case u := <-updates:
		require.Equal(t, "s1", u.GetSubscriptionId())
		require.Equal(t, "a", u.GetConversationId())
	case <-ctx.Done():
		t.Fatal("no update of the stream")
	}
	err = subscribe("s1", "b")
	require.ErrorIs(t, err, journal.ErrInvalid, "an id in use")
	require.ErrorContains(t, err, "in use")
	require.ErrorIs(t, subscribe("", "b"), journal.ErrInvalid, "an empty id")
	require.ErrorIs(t, subscribe(strings.Repeat("x", maxSubscriptionIDBytes+1), "b"), journal.ErrInvalid, "an id too long")

	// The first stream goes on, and ends on an unsubscribe from its
	// subscriber, served no more.
	sys.Root.RequestWithCustomSender(n.gateway, &messages.ClusterUnsubscribe{SubscriptionId: "s1"}, recv)
	for {
		select {
		case u := <-updates:
			require.Equal(t, "a", u.GetConversationId(), "no update of the refused subscribe")
			if !u.GetFinal() {
				continue
			}
			require.Eventually(t, func() bool {
				n.mu.Lock()
				defer n.mu.Unlock()
				return len(n.serving) == 0
			}, 10*time.Second, time.Millisecond, "nothing served after the unsubscribe")
			return
		case <-ctx.Done():
			t.Fatal("the stream did not end on its unsubscribe")
		}
	}
}

// A ClusterUnsubscribe ends a stream only when it comes from the stream's
// member (the subscribe's reply address, or its sender's address): one
// from another address, or without a sender, is ignored and the stream
// goes on; its subscriber's ends it. Any peer that named the id ended the
// stream (another member whose own subscribe under that id was refused,
// say), and its subscriber got a final update.
func TestGatewayEndsAStreamOnlyForItsMember(t *testing.T) {
	rt := gatewayRuntimeOf(t, Options{Model: okModel(), NoResume: true})
	sys := rt.system
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	seq, err := rt.Send(ctx, "a", "hi", agent.Scope{UserID: "u"})
	require.NoError(t, err)
	updates := make(chan *messages.ClusterUpdate, 64)
	recv, err := sys.Root.SpawnNamed(actor.PropsFromFunc(func(c actor.Context) {
		if u, ok := c.Message().(*messages.ClusterUpdate); ok {
			updates <- u
		}
	}), "subscriber")
	require.NoError(t, err)
	defer sys.Root.Stop(recv)
	n := rt.gw
	subscribe := func(id string) {
		t.Helper()
		res, err := n.callResult(n.gateway, &messages.ClusterSubscribe{RequestId: 1, SubscriptionId: id, ConversationId: "a",
			ReplyAddress: sys.Address(), ReplyId: "subscriber"}, 10*time.Second)
		require.NoError(t, err)
		require.Nil(t, res.(*messages.ClusterReply).GetError())
	}
	subscribe("s1")
	// Not from the stream's member: ignored. A subscribe after them is
	// served after the gateway handled them (its mailbox is in order).
	sys.Root.RequestWithCustomSender(n.gateway, &messages.ClusterUnsubscribe{SubscriptionId: "s1"}, actor.NewPID("other.invalid:1", GatewayName))
	sys.Root.Send(n.gateway, &messages.ClusterUnsubscribe{SubscriptionId: "s1"})
	subscribe("s2")
	seq2, err := rt.Send(ctx, "a", "more", agent.Scope{UserID: "u"})
	require.NoError(t, err)
	require.Greater(t, seq2, seq)
	for seen := false; !seen; {
		select {
		case u := <-updates:
			if u.GetSubscriptionId() != "s1" {
				continue
			}
			require.False(t, u.GetFinal(), "the stream ended on another member's unsubscribe: %v", u.GetError())
			seen = u.GetEvent().GetSeq() == seq2
		case <-ctx.Done():
			t.Fatal("the stream did not go on")
		}
	}
	// From its subscriber's address: it ends.
	sys.Root.RequestWithCustomSender(n.gateway, &messages.ClusterUnsubscribe{SubscriptionId: "s1"}, recv)
	for {
		select {
		case u := <-updates:
			if u.GetSubscriptionId() != "s1" || !u.GetFinal() {
				continue
			}
			require.Eventually(t, func() bool {
				n.mu.Lock()
				defer n.mu.Unlock()
				_, s1 := n.serving["s1"]
				_, s2 := n.serving["s2"]
				return !s1 && s2
			}, 10*time.Second, time.Millisecond, "s1 served no more, s2 still")
			return
		case <-ctx.Done():
			t.Fatal("the stream did not end on its subscriber's unsubscribe")
		}
	}
}

// A member that forwards calls and follows a subscription on another
// member's gateway, closed with a forwarded send in flight (held on the
// owner) and the subscription open, leaves no goroutine once Close
// returned and the owner closed: the follower, the gateway's stream and
// its request goroutines, and the send's wait on the owner all end. The
// send waited on after Close, up to ClusterOptions.RequestTimeout.
func TestForwardingMemberCloseLeavesNoGoroutine(t *testing.T) {
	if !leakcheck.Isolate(t) {
		return
	}
	base := leakcheck.Take()
	p, hold, release, bound := newHeldPair(t)
	scope := agent.Scope{UserID: "u"}
	updates, err := p.caller.Subscribe(context.Background(), p.conv, 0)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		p.owner.gw.mu.Lock()
		defer p.owner.gw.mu.Unlock()
		return len(p.owner.gw.serving) == 1
	}, 10*time.Second, time.Millisecond, "the owner serves the follower's stream")
	hold.armed.Store(true)
	sent := make(chan error, 1)
	go func() {
		_, err := p.caller.Send(context.Background(), p.conv, "held", scope)
		sent <- err
	}()
	select {
	case <-hold.held:
	case <-bound.Done():
		t.Fatal("the owner never wrote the send")
	}
	require.NoError(t, p.caller.Close())
	for range updates { // closed by Close
	}
	release()
	require.NoError(t, p.owner.Close())
	p.caller.system.Shutdown()
	p.owner.system.Shutdown()
	base.Check(t, 20*time.Second)
	require.ErrorIs(t, <-sent, ErrClosed)
}

// downStore fails every append of conv with journal.ErrUnavailable (its
// database unreachable).
type downStore struct {
	journal.Store
	conv string
}

func (s *downStore) Append(ctx context.Context, req *messages.AppendRequest) (journal.AppendResult, error) {
	if req.GetConversationId() == s.conv {
		return journal.AppendResult{}, fmt.Errorf("down: %w", journal.ErrUnavailable)
	}
	return s.Store.Append(ctx, req)
}

func (s *downStore) AppendBatch(ctx context.Context, reqs []*messages.AppendRequest) []journal.AppendResult {
	out := make([]journal.AppendResult, len(reqs))
	for i, req := range reqs {
		if req.GetConversationId() == s.conv {
			out[i].Err = fmt.Errorf("down: %w", journal.ErrUnavailable)
		} else {
			out[i] = s.Store.AppendBatch(ctx, []*messages.AppendRequest{req})[0]
		}
	}
	return out
}

// A send forwarded to an owner whose Store is unavailable fails at once
// with journal.ErrUnavailable, as the same send on the owner does: the
// owner answered, and wrote nothing. The caller took the owner's
// UNAVAILABLE for a member that is closing or no longer owns the
// conversation, sent it again until its context ended, and returned
// ErrUnknownOutcome with context.DeadlineExceeded.
func TestForwardedCallKeepsTheOwnersStoreUnavailable(t *testing.T) {
	store := memjournal.New(memjournal.Options{})
	down := &downStore{Store: store}
	model := agent.ModelFunc(func(context.Context, agent.Turn, func(string)) (*messages.AssistantMessage, error) {
		return agent.Text("ok"), nil
	})
	p := newForwardPair(t, down, store, model)
	down.conv = p.conv
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	scope := agent.Scope{UserID: "u"}
	_, lerr := p.owner.Send(ctx, p.conv, "hi", scope)
	require.ErrorIs(t, lerr, journal.ErrUnavailable, "on the owner")
	_, err := p.caller.Send(ctx, p.conv, "hi", scope)
	require.NoError(t, ctx.Err(), "answered at once, not at the call's end")
	require.ErrorIs(t, err, journal.ErrUnavailable)
	require.NotErrorIs(t, err, ErrUnknownOutcome, "the owner said it wrote nothing: %v", err)
	require.Equal(t, lerr.Error(), err.Error())
}
