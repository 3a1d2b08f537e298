package lazarus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

// holdStore holds the appends of one conversation until release is
// closed, and says when one is held.
type holdStore struct {
	journal.Store
	conv    string
	later   atomic.Bool // hold only once armed (with later set, arm says when)
	armed   atomic.Bool
	held    chan struct{}
	release chan struct{}
	once    sync.Once
}

func (s *holdStore) hold(req *messages.AppendRequest) {
	if req.GetConversationId() == s.conv && (!s.later.Load() || s.armed.Load()) {
		s.once.Do(func() { close(s.held) })
		<-s.release
	}
}

func (s *holdStore) Append(ctx context.Context, req *messages.AppendRequest) (journal.AppendResult, error) {
	s.hold(req)
	return s.Store.Append(ctx, req)
}

func (s *holdStore) AppendBatch(ctx context.Context, reqs []*messages.AppendRequest) []journal.AppendResult {
	for _, req := range reqs {
		s.hold(req)
	}
	return s.Store.AppendBatch(ctx, reqs)
}

// forwardPair is two Runtimes on one Store, in one process and without
// protoactor's cluster: owner serves the gateway on its actor system, and
// caller is a member that forwards every call for conv (which the hash
// gives to owner) to that gateway.
type forwardPair struct {
	caller, owner *Runtime
	conv          string
}

func newForwardPair(t *testing.T, ownerStore, callerStore journal.Store, model agent.Model) forwardPair {
	t.Helper()
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.DiscardHandler)
	}))
	t.Cleanup(func() {
		if !sys.IsStopped() { // a test may have shut it down
			sys.Shutdown()
		}
	})
	owner, err := Open(Options{Store: ownerStore, Model: model, ActorSystem: sys, NoResume: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = owner.Close() })
	caller, err := Open(Options{Store: callerStore, Model: model, NoResume: true})
	require.NoError(t, err)
	n := newNode(caller, sys) // requests leave through the owner's system
	// A try is not cut short by the clock: on a busy machine the owner
	// can take longer than DefaultRequestTimeout to answer, and a call
	// that is not idempotent then ends with ErrUnknownOutcome. Each test
	// bounds its calls with their contexts.
	n.opts.RequestTimeout = time.Hour
	n.self = "caller.invalid:1"
	members := []string{n.self, sys.Address()}
	slices.Sort(members)
	n.members.Store(&members)
	caller.cl, caller.gw = n, n
	t.Cleanup(func() {
		_ = caller.Close()
		if !caller.system.IsStopped() {
			caller.system.Shutdown()
		}
	})
	for i := 0; ; i++ {
		if conv := fmt.Sprintf("fwd-%d", i); n.owner(conv) == sys.Address() {
			return forwardPair{caller: caller, owner: owner, conv: conv}
		}
	}
}

// newHeldPair is a forward pair whose owner's Store holds the next write of
// its conversation once hold.armed is set, until release; the caller has
// sent a first message, whose turn has ended. bound bounds the test.
func newHeldPair(t *testing.T) (p forwardPair, hold *holdStore, release func(), bound context.Context) {
	t.Helper()
	store := memjournal.New(memjournal.Options{})
	hold = &holdStore{Store: store, held: make(chan struct{}), release: make(chan struct{})}
	hold.later.Store(true)
	model := agent.ModelFunc(func(context.Context, agent.Turn, func(string)) (*messages.AssistantMessage, error) {
		return agent.Text("ok"), nil
	})
	p = newForwardPair(t, hold, store, model)
	hold.conv = p.conv
	var released sync.Once
	release = func() { released.Do(func() { close(hold.release) }) }
	t.Cleanup(release)
	bound, cancelBound := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancelBound)
	_, err := p.caller.Send(bound, p.conv, "hi", agent.Scope{UserID: "u"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		row, err := store.Conversation(bound, p.conv)
		return err == nil && row.GetStatus() != messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE
	}, 10*time.Second, 5*time.Millisecond, "the turn ended")
	return p, hold, release, bound
}

// endingCtx is a context whose deadline passes when the test calls end,
// not at a time on the clock: its Err is then context.DeadlineExceeded, as
// a real deadline's. A real deadline short enough for a test (a few
// hundred milliseconds) can pass on a busy machine before the call it
// bounds has reached the point the test is about (the owner writing it,
// a dead letter), and the call then fails as one that never started. The
// contexts derived from it end within end (it has AfterFunc, which
// context.WithCancel and WithTimeout use to follow a parent).
type endingCtx struct {
	context.Context // context.Background(): its values
	deadline        time.Time
	done            chan struct{}

	mu    sync.Mutex
	ended bool
	after map[int]func()
	next  int
}

func newEndingCtx() *endingCtx {
	return &endingCtx{Context: context.Background(), deadline: time.Now().Add(time.Hour),
		done: make(chan struct{}), after: map[int]func(){}}
}

func (c *endingCtx) Deadline() (time.Time, bool) { return c.deadline, true }
func (c *endingCtx) Done() <-chan struct{}       { return c.done }

func (c *endingCtx) Err() error {
	select {
	case <-c.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

// AfterFunc runs f once the context ends, as context.AfterFunc does.
func (c *endingCtx) AfterFunc(f func()) (stop func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended {
		go f()
		return func() bool { return false }
	}
	id := c.next
	c.next++
	c.after[id] = f
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		_, ok := c.after[id]
		delete(c.after, id)
		return ok
	}
}

// end makes the deadline pass, and ends the contexts derived from c
// before it returns; it may be called any number of times.
func (c *endingCtx) end() {
	c.mu.Lock()
	if c.ended {
		c.mu.Unlock()
		return
	}
	c.ended = true
	close(c.done)
	after := c.after
	c.after = nil
	c.mu.Unlock()
	for _, f := range after {
		f()
	}
}

// endOnDeadLetter is a log handler that ends the call in progress (set in
// call) when a forward logs that its request was a dead letter and it is
// about to wait to try again: no request of the call is then in flight.
type endOnDeadLetter struct{ call atomic.Pointer[endingCtx] }

func (h *endOnDeadLetter) Enabled(context.Context, slog.Level) bool { return true }
func (h *endOnDeadLetter) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *endOnDeadLetter) WithGroup(string) slog.Handler            { return h }

func (h *endOnDeadLetter) Handle(_ context.Context, rec slog.Record) error {
	rec.Attrs(func(a slog.Attr) bool {
		if err, ok := a.Value.Any().(error); ok && a.Key == "err" && errors.Is(err, actor.ErrDeadLetter) {
			if c := h.call.Load(); c != nil {
				c.end()
			}
			return false
		}
		return true
	})
	return nil
}

// A forwarded send whose context ends while the owner is writing it was
// handed over: its outcome is unknown (ErrUnknownOutcome, with the
// context's error), as for a local call, never "nothing written".
func TestForwardedSendTimeoutIsUnknownOutcome(t *testing.T) {
	store := memjournal.New(memjournal.Options{})
	hold := &holdStore{Store: store, held: make(chan struct{}), release: make(chan struct{})}
	model := agent.ModelFunc(func(context.Context, agent.Turn, func(string)) (*messages.AssistantMessage, error) {
		return agent.Text("ok"), nil
	})
	p := newForwardPair(t, hold, store, model)
	hold.conv = p.conv
	var released sync.Once
	release := func() { released.Do(func() { close(hold.release) }) }
	t.Cleanup(release) // before the Runtimes close: the held append ends
	bound, cancelBound := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancelBound()
	// The deadline passes once the owner holds the write.
	ctx := newEndingCtx()
	defer ctx.end()
	done := make(chan error, 1)
	go func() {
		_, err := p.caller.SendMessage(ctx, p.conv, agent.UserMessage(agent.TextPart("hi")), SendOptions{RequestID: "r1"}, agent.Scope{UserID: "u"})
		done <- err
	}()
	select {
	case <-hold.held:
	case <-bound.Done():
		t.Fatal("the owner never wrote the send")
	}
	ctx.end()
	var err error
	select {
	case err = <-done:
	case <-bound.Done():
		t.Fatal("a forwarded send outlived its context")
	}
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, err, ErrUnknownOutcome, "the owner had the send when the call ended: %v", err)
	release()

	// Retried with its request id, it lands once.
	seq, err := p.caller.SendMessage(bound, p.conv, agent.UserMessage(agent.TextPart("hi")), SendOptions{RequestID: "r1"}, agent.Scope{UserID: "u"})
	require.NoError(t, err)
	require.Equal(t, uint64(1), seq)
}

// A call whose owner never got it (no gateway at its address: dead
// letters) fails, once its context ends, with ErrNoOwner and the context's
// error: nothing was handed over.
func TestForwardToNoOwnerIsErrNoOwner(t *testing.T) {
	store := memjournal.New(memjournal.Options{})
	model := agent.ModelFunc(func(context.Context, agent.Turn, func(string)) (*messages.AssistantMessage, error) {
		return agent.Text("ok"), nil
	})
	p := newForwardPair(t, store, store, model)
	n := p.caller.cl
	conv := ownedByADeadMember(n)
	// Each call's deadline passes once one of its requests was a dead
	// letter, while it waits to try again (a deadline that passes while a
	// request is in flight leaves its outcome unknown: it may have reached
	// a gateway).
	h := &endOnDeadLetter{}
	n.log = slog.New(h)
	bound, cancelBound := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancelBound()
	call := func(name string, f func(ctx context.Context) error) error {
		t.Helper()
		ctx := newEndingCtx()
		defer ctx.end()
		h.call.Store(ctx)
		done := make(chan error, 1)
		go func() { done <- f(ctx) }()
		select {
		case err := <-done:
			require.Error(t, ctx.Err(), "%s returned before its deadline: %v", name, err)
			return err
		case <-bound.Done():
			t.Fatalf("%s: no request was a dead letter, or the call outlived its context", name)
			return nil
		}
	}
	err := call("send", func(ctx context.Context) error {
		_, err := p.caller.Send(ctx, conv, "hi", agent.Scope{UserID: "u"})
		return err
	})
	require.ErrorIs(t, err, ErrNoOwner)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NotErrorIs(t, err, ErrUnknownOutcome, "no owner got it")
	err = call("wake", func(ctx context.Context) error { return p.caller.Wake(ctx, conv) })
	require.ErrorIs(t, err, ErrNoOwner)
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

// A gateway whose Runtime closed answers every request with a sentinel
// code: UNAVAILABLE (the caller tries the owner the membership names
// next), never an unclassified INTERNAL.
func TestGatewayOfAClosedRuntimeAnswersUnavailable(t *testing.T) {
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.DiscardHandler)
	}))
	defer sys.Shutdown()
	rt, err := Open(Options{Model: agent.ModelFunc(func(context.Context, agent.Turn, func(string)) (*messages.AssistantMessage, error) {
		return agent.Text("ok"), nil
	}), ActorSystem: sys, NoResume: true})
	require.NoError(t, err)
	require.NoError(t, rt.Close())
	for _, req := range []*messages.ClusterRequest{
		{Op: &messages.ClusterRequest_Send{Send: &messages.AgentSend{RequestId: "r", Message: agent.UserMessage(agent.TextPart("hi"))}}},
		{Op: &messages.ClusterRequest_Wake{Wake: &messages.AgentWake{}}},
		{Op: &messages.ClusterRequest_Configure{Configure: &messages.AgentConfigure{}}},
		{Op: &messages.ClusterRequest_Rewind{Rewind: &messages.AgentRewind{RequestId: "r"}}},
		{Op: &messages.ClusterRequest_End{End: &messages.EndConversation{}}},
		{Op: &messages.ClusterRequest_Delete{Delete: &messages.ClusterDelete{}}},
	} {
		req.ConversationId = "c"
		reply := rt.gw.serve(req)
		require.ErrorIs(t, journal.ErrorFromProto(reply.GetError()), journal.ErrUnavailable, "%T: %v", req.GetOp(), reply.GetError())
	}
}

// Calls forwarded to the owner come back with the owner's sentinels.
func TestForwardedCallsKeepTheirSentinels(t *testing.T) {
	store := memjournal.New(memjournal.Options{})
	model := agent.ModelFunc(func(context.Context, agent.Turn, func(string)) (*messages.AssistantMessage, error) {
		return agent.Text("ok"), nil
	})
	p := newForwardPair(t, store, store, model)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	scope := agent.Scope{UserID: "u"}
	// (SendAndWait would subscribe: the owner's stream cannot reach this
	// caller, which has no gateway of its own here.)
	_, err := p.caller.Send(ctx, p.conv, "hi", scope)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		row, err := store.Conversation(ctx, p.conv)
		return err == nil && row.GetStatus() != messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE
	}, 10*time.Second, 5*time.Millisecond, "the turn ended")
	require.True(t, p.owner.IsActive(p.conv), "it ran on its owner")
	require.False(t, p.caller.IsActive(p.conv))
	require.ErrorIs(t, p.caller.Rewind(ctx, p.conv, 99, RewindOptions{}, scope), journal.ErrInvalid)
	require.NoError(t, p.caller.End(ctx, p.conv))
	_, err = p.caller.Send(ctx, p.conv, "again", scope)
	require.ErrorIs(t, err, journal.ErrEnded)
	require.NoError(t, p.caller.Delete(ctx, p.conv))
	require.ErrorIs(t, p.caller.Delete(ctx, p.conv), journal.ErrDeleted)
	_, err = p.caller.Send(ctx, p.conv, "again", scope)
	require.ErrorIs(t, err, journal.ErrDeleted)
	require.ErrorIs(t, p.caller.Wake(ctx, p.conv), journal.ErrDeleted)
}

// A subscription in cluster mode to a conversation its own member owns
// ends with Close, whatever its context: Close waits for the subscribers'
// goroutines, and the one following the local hub waited only for its
// context, a membership change or the hub's channel, which Close closes
// after that wait.
func TestCloseEndsALocalSubscriptionInClusterMode(t *testing.T) {
	store := memjournal.New(memjournal.Options{})
	model := agent.ModelFunc(func(context.Context, agent.Turn, func(string)) (*messages.AssistantMessage, error) {
		return agent.Text("ok"), nil
	})
	p := newForwardPair(t, store, store, model)
	n := p.caller.cl
	conv := ""
	for i := 0; conv == ""; i++ {
		if c := fmt.Sprintf("mine-%d", i); n.owner(c) == n.self {
			conv = c
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := p.caller.Send(ctx, conv, "hi", agent.Scope{UserID: "u"})
	require.NoError(t, err)
	updates, err := p.caller.Subscribe(context.Background(), conv, 0)
	require.NoError(t, err)
	// The history arrives: the follower runs on the local hub.
	select {
	case u := <-updates:
		require.Equal(t, uint64(1), u.Event.GetSeq())
	case <-ctx.Done():
		t.Fatal("no update")
	}
	closed := make(chan error, 1)
	go func() { closed <- p.caller.Close() }()
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-ctx.Done():
		t.Fatal("Close waits for a subscription whose context never ends")
	}
	for range updates { // closed by Close
	}
}

// A forwarded call that is not idempotent (here a rewind) whose context is
// cancelled while the owner writes it returns at once, as a local call
// does: its outcome is unknown (ErrUnknownOutcome, with context.Canceled).
// It waited for the owner's answer until ClusterOptions.RequestTimeout,
// whatever its context.
func TestForwardedCallCancelledReturnsAtOnce(t *testing.T) {
	p, hold, _, bound := newHeldPair(t)
	scope := agent.Scope{UserID: "u"}
	var err error
	hold.armed.Store(true)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.caller.Rewind(ctx, p.conv, 1, RewindOptions{}, scope) }()
	select {
	case <-hold.held:
	case <-bound.Done():
		t.Fatal("the owner never wrote the rewind")
	}
	cancel()
	select {
	case err = <-done:
	case <-bound.Done():
		t.Fatal("a forwarded rewind outlived its cancelled context")
	}
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, err, ErrUnknownOutcome, "the owner had the rewind when the call ended: %v", err)
}

// A gateway whose Runtime is closing (Close has begun, the member has yet
// to leave) answers a request it no longer serves at once with
// UNAVAILABLE: the caller learns that nothing ran. It dropped it, so the
// caller waited for RequestTimeout, or its context, and a call that is
// not idempotent ended with ErrUnknownOutcome although the owner never
// had it.
func TestGatewayOfAClosingRuntimeAnswersUnavailable(t *testing.T) {
	p, hold, release, bound := newHeldPair(t)
	scope := agent.Scope{UserID: "u"}
	var err error

	// The owner's own send holds its write: Close waits for it, its
	// gateway still up.
	hold.armed.Store(true)
	go func() { _, _ = p.owner.Send(bound, p.conv, "held", scope) }()
	select {
	case <-hold.held:
	case <-bound.Done():
		t.Fatal("the owner never wrote the send")
	}
	closed := make(chan struct{})
	go func() {
		_ = p.owner.Close()
		close(closed)
	}()
	gw := p.owner.gw
	require.Eventually(t, func() bool {
		gw.mu.Lock()
		defer gw.mu.Unlock()
		return gw.stopping
	}, 10*time.Second, time.Millisecond, "Close began")
	select {
	case <-closed:
		t.Fatal("Close did not wait for the held write")
	default:
	}

	ctx, cancel := context.WithTimeout(bound, 3*time.Second)
	defer cancel()
	err = p.caller.Rewind(ctx, p.conv, 1, RewindOptions{}, scope)
	require.ErrorIs(t, err, journal.ErrUnavailable, "the closing owner says it ran nothing: %v", err)
	require.NotErrorIs(t, err, ErrUnknownOutcome)
	require.NoError(t, ctx.Err(), "answered at once, not at the call's end")
	release()
	<-closed
}

// A wake forwarded with the log's last seq as its waker read it (the
// resume scan's wake of a live activation, its ownership moved meanwhile)
// keeps that seq on the owner: a live activation idle since another
// writer moved the log on retires, and the turn that writer left owed
// runs on a new one. The gateway woke it without the seq, and the stale
// activation stayed, the turn unrun.
func TestForwardedWakeKeepsTheLogsLastSeq(t *testing.T) {
	store := memjournal.New(memjournal.Options{})
	model := agent.ModelFunc(func(_ context.Context, turn agent.Turn, _ func(string)) (*messages.AssistantMessage, error) {
		last := turn.Context[len(turn.Context)-1]
		return agent.Text("re: " + last.GetUserMsg().GetContent()[0].GetText()), nil
	})
	p := newForwardPair(t, store, store, model)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := p.caller.Send(ctx, p.conv, "one", agent.Scope{UserID: "u"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		row, err := store.Conversation(ctx, p.conv)
		return err == nil && row.GetStatus() != messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE
	}, 10*time.Second, 5*time.Millisecond, "the turn ended")
	require.True(t, p.owner.IsActive(p.conv), "live and idle on its owner")

	// Another writer moves the log on behind the activation's back.
	last, err := store.LastSeq(ctx, p.conv)
	require.NoError(t, err)
	_, err = store.Append(ctx, &messages.AppendRequest{
		ConversationId: p.conv, ExpectedLast: last,
		Status: messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE,
		Events: []*messages.Event{{RequestId: "elsewhere", Body: &messages.Event_UserMsg{UserMsg: &messages.UserMessage{
			Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: "two"}}}}}}},
	})
	require.NoError(t, err)
	require.NoError(t, p.caller.wakeAt(ctx, p.conv, false, last+1))
	require.Eventually(t, func() bool {
		evs, err := store.Events(ctx, p.conv, journal.EventQuery{Limit: 1})
		if err != nil || len(evs) != 1 || len(evs[0].GetAssistantMsg().GetContent()) == 0 {
			return false
		}
		return evs[0].GetAssistantMsg().GetContent()[0].GetText() == "re: two"
	}, 5*time.Second, 5*time.Millisecond, "the owed turn ran on the owner")
	evs, err := p.caller.History(ctx, p.conv, 0, 0)
	require.NoError(t, err)
	require.Len(t, evs, 4, "user, answer, user, answer: nothing twice")
}

// Options.CallTimeout bounds a forwarded call as it bounds a local one
// when ctx has no earlier deadline: a send whose owner never answers
// (dead letters, retried) ends with ErrNoOwner and
// context.DeadlineExceeded once it passes. It was retried for as long as
// ctx lived: forever for context.Background().
func TestCallTimeoutBoundsAForwardedCall(t *testing.T) {
	store := memjournal.New(memjournal.Options{})
	model := agent.ModelFunc(func(context.Context, agent.Turn, func(string)) (*messages.AssistantMessage, error) {
		return agent.Text("ok"), nil
	})
	p := newForwardPair(t, store, store, model)
	p.caller.opts.CallTimeout = 300 * time.Millisecond
	n := p.caller.cl
	conv := ownedByADeadMember(n)
	done := make(chan error, 1)
	go func() {
		_, err := p.caller.Send(context.Background(), conv, "hi", agent.Scope{UserID: "u"})
		done <- err
	}()
	select {
	case err := <-done:
		require.ErrorIs(t, err, ErrNoOwner)
		require.ErrorIs(t, err, context.DeadlineExceeded)
	case <-time.After(10 * time.Second):
		t.Fatal("a forwarded send outlived Options.CallTimeout")
	}
}

// The gateway refuses a resolve that Resolve and Reject would refuse
// (an application actor on Options.ActorSystem speaks its protocol too):
// a status other than RESOLVED or ERRORED, a result that is not JSON or
// exceeds agent.MaxResultBytes, an outcome that does not match its
// status. Each gets an error wrapping journal.ErrInvalid and the call
// stays pending. The gateway wrote them: an expiry no deadline made, a
// result the model gets as broken JSON, one too large for its tool_result
// event.
func TestGatewayRefusesABadResolve(t *testing.T) {
	model := scripted.New(scripted.Options{})
	rt := gatewayRuntimeOf(t, Options{Model: model, NoResume: true, IdleTimeout: -1,
		Tools: []agent.Tool{{Name: "approve", Executor: messages.Executor_EXECUTOR_HUMAN}}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	id := pendingApproval(t, ctx, rt, model)

	content := func(s string) *messages.ToolOutcome {
		return &messages.ToolOutcome{Outcome: &messages.ToolOutcome_Content{Content: s}}
	}
	for name, res := range map[string]*messages.ClusterResolve{
		"expired":        {Status: messages.ToolCallStatus_TOOL_CALL_STATUS_EXPIRED, Result: content(`{}`)},
		"pending":        {Status: messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING, Result: content(`{}`)},
		"not JSON":       {Status: messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED, Result: content(`{`)},
		"too large":      {Status: messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED, Result: content(`"` + strings.Repeat("x", agent.MaxResultBytes) + `"`)},
		"error resolved": {Status: messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED, Result: agent.ErrorOutcome(agent.CodeRejected, "no")},
		"content erred":  {Status: messages.ToolCallStatus_TOOL_CALL_STATUS_ERRORED, Result: content(`{}`)},
	} {
		res.ToolCallId = id
		reply := rt.gw.serve(&messages.ClusterRequest{ConversationId: "c", Scope: scopeToProto(agent.Scope{UserID: "u"}),
			Op: &messages.ClusterRequest_Resolve{Resolve: res}})
		require.ErrorIs(t, journal.ErrorFromProto(reply.GetError()), journal.ErrInvalid, "%s: %v", name, reply.GetError())
		row, err := rt.Store().ToolCall(ctx, id)
		require.NoError(t, err)
		require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING, row.GetStatus(), name)
	}
	reply := rt.gw.serve(&messages.ClusterRequest{ConversationId: "c", Scope: scopeToProto(agent.Scope{UserID: "u"}),
		Op: &messages.ClusterRequest_Resolve{Resolve: &messages.ClusterResolve{ToolCallId: id,
			Status: messages.ToolCallStatus_TOOL_CALL_STATUS_ERRORED, Result: agent.ErrorOutcome(agent.CodeRejected, "no")}}})
	require.Nil(t, reply.GetError(), "a rejection as Reject makes it")
}

// The gateway refuses a ClusterRequest's configure that Configure would
// not make, with an error wrapping journal.ErrInvalid, and writes nothing:
// settings agent.ValidateSettings refuses (a tool choice naming no
// registered tool, a negative temperature), a key Settings does not
// have, a value that does not parse. It wrote them into the row.
func TestGatewayRefusesBadSettings(t *testing.T) {
	rt := gatewayRuntimeOf(t, Options{Model: scripted.New(scripted.Options{}), NoResume: true})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, rt.Configure(ctx, "c", agent.Settings{SystemPrompt: "be brief"}))
	for name, m := range map[string]map[string]string{
		"tool choice":  {"tool_choice": "nosuch"},
		"temperature":  {"temperature": "-1"},
		"unparsed":     {"max_tokens": "many"},
		"unknown key":  {"colour": "blue"},
		"prompt bytes": {"system_prompt": "\xff"},
	} {
		reply := rt.gw.serve(&messages.ClusterRequest{ConversationId: "c",
			Op: &messages.ClusterRequest_Configure{Configure: &messages.AgentConfigure{Settings: m}}})
		require.ErrorIs(t, journal.ErrorFromProto(reply.GetError()), journal.ErrInvalid, "%s: %v", name, reply.GetError())
		row, err := rt.Store().Conversation(ctx, "c")
		require.NoError(t, err)
		require.Equal(t, map[string]string{"system_prompt": "be brief"}, row.GetSettings(), name)
	}
	// Settings as Configure sends them replace the row's.
	temp := 0.3
	want := agent.Settings{Model: "m", Temperature: &temp, MaxTokens: 7}
	reply := rt.gw.serve(&messages.ClusterRequest{ConversationId: "c",
		Op: &messages.ClusterRequest_Configure{Configure: &messages.AgentConfigure{Settings: want.Map()}}})
	require.Nil(t, reply.GetError())
	s, err := rt.Settings(ctx, "c")
	require.NoError(t, err)
	require.Equal(t, want, s)
}

// The gateway refuses a rewind or an edit that Rewind or Edit would not
// make, with an error wrapping journal.ErrInvalid, and writes nothing: a
// reason that does not fit in an event, an edit's message that is empty
// or does not fit, a scope whose identity agent.ValidateIdentity refuses.
// It handed them to the conversation as they came.
func TestGatewayRefusesABadRewind(t *testing.T) {
	model := scripted.New(scripted.Options{})
	rt := gatewayRuntimeOf(t, Options{Model: model, NoResume: true})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := rt.SendAndWait(ctx, "c", "hi", agent.Scope{UserID: "u"})
	require.NoError(t, err)
	last, err := rt.Store().LastSeq(ctx, "c")
	require.NoError(t, err)
	big := strings.Repeat("x", journal.MaxEventBytes)
	user := scopeToProto(agent.Scope{UserID: "u"})
	for name, req := range map[string]*messages.ClusterRequest{
		"reason":        {Scope: user, Op: &messages.ClusterRequest_Rewind{Rewind: &messages.AgentRewind{ToSeq: 1, Reason: big, RequestId: "r1"}}},
		"empty edit":    {Scope: user, Op: &messages.ClusterRequest_Rewind{Rewind: &messages.AgentRewind{EditSeq: 1, Message: &messages.UserMessage{}, RequestId: "r2"}}},
		"large edit":    {Scope: user, Op: &messages.ClusterRequest_Rewind{Rewind: &messages.AgentRewind{EditSeq: 1, Message: agent.UserMessage(agent.TextPart(big)), RequestId: "r3"}}},
		"identity":      {Scope: scopeToProto(agent.Scope{UserID: big}), Op: &messages.ClusterRequest_Rewind{Rewind: &messages.AgentRewind{ToSeq: 1, RequestId: "r4"}}},
		"edit identity": {Scope: scopeToProto(agent.Scope{UserID: big}), Op: &messages.ClusterRequest_Rewind{Rewind: &messages.AgentRewind{EditSeq: 1, Message: agent.UserMessage(agent.TextPart("again")), RequestId: "r5"}}},
	} {
		req.ConversationId = "c"
		reply := rt.gw.serve(req)
		require.ErrorIs(t, journal.ErrorFromProto(reply.GetError()), journal.ErrInvalid, "%s: %v", name, reply.GetError())
		now, err := rt.Store().LastSeq(ctx, "c")
		require.NoError(t, err)
		require.Equal(t, last, now, "%s: nothing written", name)
	}
}

// A subscription on a member that does not own the conversation, asked to
// start past the log's last event, is refused by Subscribe with ErrInvalid,
// as on the owner: the follower forwarded it, and the subscription waited
// for the log to pass it. (The pair's owner cannot reach the caller's
// address: no update crosses, only the subscription's answer.)
func TestForwardedSubscribeRefusesASeqPastTheLog(t *testing.T) {
	store := memjournal.New(memjournal.Options{})
	model := agent.ModelFunc(func(context.Context, agent.Turn, func(string)) (*messages.AssistantMessage, error) {
		return agent.Text("ok"), nil
	})
	p := newForwardPair(t, store, store, model)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := p.caller.Send(ctx, p.conv, "hi", agent.Scope{UserID: "u"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		last, err := store.LastSeq(ctx, p.conv)
		return err == nil && last == 2
	}, 10*time.Second, 5*time.Millisecond, "the answer is written")
	require.False(t, p.caller.cl.owns(p.conv))

	_, err = p.caller.Subscribe(ctx, p.conv, 3)
	require.ErrorIs(t, err, journal.ErrInvalid)
	require.ErrorContains(t, err, "the log ends at seq 2")
	sctx, scancel := context.WithCancel(ctx)
	updates, err := p.caller.Subscribe(sctx, p.conv, 2)
	require.NoError(t, err, "the last seq is a cursor")
	scancel()
	for range updates {
	}
}

// ownedByADeadMember adds to n's membership a member with no gateway at
// its address (its requests are dead letters) and returns a conversation
// that member owns.
func ownedByADeadMember(n *clusterNode) string {
	members := []string{n.self, deadMember}
	slices.Sort(members)
	n.members.Store(&members)
	return firstConv(func(id string) bool { return n.owner(id) == deadMember })
}

// deadMember is the address of ownedByADeadMember's member.
const deadMember = "dead.invalid:1"

// A forwarded call whose context has ended hands nothing more over: it
// ends with ErrNoOwner and the context's error when no owner got a request
// of it before. It sent a request (a first one, or the next try once a
// retry's backoff and the context ended together) to the owner, which may
// run it although its caller gave up, and reported an outcome unknown.
func TestForwardedCallOfAnEndedContextHandsNothingOver(t *testing.T) {
	gw := &fakeGateway{got: make(chan heldRequest, 4)}
	sys, n, conv := fakeOwnerGateway(t, gw)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, idempotent := range []bool{true, false} {
		_, err := n.forward(ctx, &messages.ClusterRequest{ConversationId: conv,
			Op: &messages.ClusterRequest_Send{Send: &messages.AgentSend{RequestId: "r", Message: agent.UserMessage(agent.TextPart("hi"))}}}, idempotent)
		require.ErrorIs(t, err, ErrNoOwner, "idempotent %v", idempotent)
		require.ErrorIs(t, err, context.Canceled)
		require.NotErrorIs(t, err, ErrUnknownOutcome)
	}
	// A request sent is in the gateway's mailbox when forward returns: a
	// probe sent now is the first it gets.
	sys.Root.Send(actor.NewPID(sys.Address(), GatewayName), &messages.ClusterRequest{ConversationId: "probe"})
	select {
	case got := <-gw.got:
		require.Equal(t, "probe", got.req.GetConversationId(), "a call of an ended context reached the owner")
	case <-time.After(10 * time.Second):
		t.Fatal("the gateway got nothing")
	}
}

// A forwarded call whose owner cannot be reached (its requests are dead
// letters) tries again after a wait that doubles from forwardRetryMin to
// forwardRetryMax and stays there, on the node's clock (n.after, which
// the test stands in for: no real time passes); a membership change ends
// a wait at once and starts again from forwardRetryMin. Each retry is
// logged with its wait. The waits were real time.After calls, which no
// test could drive, and a membership change kept the longer wait.
func TestForwardedCallBacksOffWhileTheOwnerIsUnreachable(t *testing.T) {
	store := memjournal.New(memjournal.Options{})
	model := agent.ModelFunc(func(context.Context, agent.Turn, func(string)) (*messages.AssistantMessage, error) {
		return agent.Text("ok"), nil
	})
	p := newForwardPair(t, store, store, model)
	p.caller.opts.CallTimeout = time.Hour // the test's context bounds the call
	n := p.caller.cl
	conv := ownedByADeadMember(n)
	logs := &recordHandler{}
	n.log = slog.New(logs)
	waits := stubAfter(t, n)
	bound, cancelBound := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancelBound()
	ctx, cancel := context.WithCancel(bound)
	defer cancel()
	sent := make(chan error, 1)
	go func() {
		_, err := p.caller.Send(ctx, conv, "hi", agent.Scope{UserID: "u"})
		sent <- err
	}()
	next := func() waitReq {
		t.Helper()
		select {
		case w := <-waits:
			return w
		case err := <-sent:
			t.Fatalf("the call returned (%v) while its owner was unreachable", err)
		case <-bound.Done():
			t.Fatal("the call did not wait to try again")
		}
		return waitReq{}
	}
	want := []time.Duration{forwardRetryMin, 2 * forwardRetryMin, 4 * forwardRetryMin, 8 * forwardRetryMin,
		16 * forwardRetryMin, forwardRetryMax, forwardRetryMax}
	var w waitReq
	for i, d := range want {
		w = next()
		require.Equal(t, d, w.d, "wait %d", i)
		if i < len(want)-1 {
			w.fire <- time.Now()
		}
	}
	// The membership changes during a wait: the call tries again at once
	// (the wait is never fired), and waits forwardRetryMin after.
	n.mu.Lock()
	close(n.changed)
	n.changed = make(chan struct{})
	n.mu.Unlock()
	w = next()
	require.Equal(t, forwardRetryMin, w.d, "a membership change starts the waits again")
	retries := logs.matching("call to the owner failed; retrying")
	require.Len(t, retries, len(want)+1, "each retry is logged")
	for i, a := range retries {
		require.Equal(t, slog.LevelDebug, a["level"])
		require.ErrorIs(t, a["err"].(error), actor.ErrDeadLetter)
		if i < len(want) {
			require.Equal(t, want[i], a["retry_in"])
		}
	}
	cancel()
	select {
	case err := <-sent:
		require.ErrorIs(t, err, ErrNoOwner)
		require.ErrorIs(t, err, context.Canceled)
	case <-bound.Done():
		t.Fatal("the call outlived its context")
	}
}

// The gateway runs a request for no longer than its timeout (how long its
// caller waits for the reply), under an Options.CallTimeout that is
// longer: a send whose write is held ends with an unknown outcome and the
// deadline's error once the request's timeout passes. A timeout that is
// not a valid positive duration is refused (journal.ErrInvalid, answered)
// and nothing is written. The gateway ran every request under its own
// CallTimeout, working on for a caller that had given up.
func TestGatewayRunsARequestWithinItsTimeout(t *testing.T) {
	p, hold, _, bound := newHeldPair(t)
	p.owner.opts.CallTimeout = time.Hour
	n := p.owner.gw
	send := func(timeout *durationpb.Duration) *messages.ClusterRequest {
		return &messages.ClusterRequest{RequestId: 9, ConversationId: p.conv, Scope: scopeToProto(agent.Scope{UserID: "u"}), Timeout: timeout,
			Op: &messages.ClusterRequest_Send{Send: &messages.AgentSend{RequestId: "r-timeout", Message: agent.UserMessage(agent.TextPart("hi"))}}}
	}
	last, err := p.owner.store.LastSeq(bound, p.conv)
	require.NoError(t, err)
	for _, bad := range []*durationpb.Duration{durationpb.New(-time.Second), {}, {Seconds: 1, Nanos: -1}} {
		reply := n.serve(send(bad))
		require.ErrorIs(t, journal.ErrorFromProto(reply.GetError()), journal.ErrInvalid, "timeout %v", bad)
		require.True(t, reply.GetAnswered())
		require.Equal(t, uint64(9), reply.GetRequestId())
	}
	now, err := p.owner.store.LastSeq(bound, p.conv)
	require.NoError(t, err)
	require.Equal(t, last, now, "a refused request wrote nothing")

	hold.armed.Store(true)
	done := make(chan *messages.ClusterReply, 1)
	go func() { done <- n.serve(send(durationpb.New(50 * time.Millisecond))) }()
	select {
	case reply := <-done:
		err := journal.ErrorFromProto(reply.GetError())
		require.ErrorIs(t, err, journal.ErrUnknownOutcome, "a request its timeout cut is of unknown outcome")
		require.ErrorIs(t, err, context.DeadlineExceeded)
	case <-bound.Done():
		t.Fatal("the gateway ran a request past its timeout")
	}
}

// A forwarded call tells the owner how long it waits for each request:
// its context's time left, or ClusterOptions.RequestTimeout when that is
// shorter; a RequestTimeout of zero or less is DefaultRequestTimeout.
func TestForwardedRequestCarriesItsTimeout(t *testing.T) {
	gw := &fakeGateway{got: make(chan heldRequest, 4)}
	_, n, conv := fakeOwnerGateway(t, gw)
	for _, c := range []struct {
		request, ctx, min, max time.Duration
	}{
		{request: time.Hour, ctx: 10 * time.Second, max: 10 * time.Second},
		{request: 5 * time.Second, ctx: time.Minute, max: 5 * time.Second},
		{request: 0, ctx: time.Minute, min: DefaultRequestTimeout - time.Second, max: DefaultRequestTimeout},
		{request: -time.Second, ctx: time.Minute, min: DefaultRequestTimeout - time.Second, max: DefaultRequestTimeout},
	} {
		n.opts = ClusterOptions{RequestTimeout: c.request}.withDefaults()
		ctx, cancel := context.WithTimeout(context.Background(), c.ctx)
		done := make(chan error, 1)
		go func() {
			_, err := n.forward(ctx, &messages.ClusterRequest{ConversationId: conv,
				Op: &messages.ClusterRequest_Wake{Wake: &messages.AgentWake{}}}, true)
			done <- err
		}()
		select {
		case got := <-gw.got:
			d := got.req.GetTimeout()
			require.NotNil(t, d, "no timeout on the request")
			require.Positive(t, d.AsDuration())
			require.GreaterOrEqual(t, d.AsDuration(), c.min)
			require.LessOrEqual(t, d.AsDuration(), c.max)
		case <-ctx.Done():
			t.Fatal("the gateway got nothing")
		}
		cancel()
		select {
		case err := <-done:
			require.Error(t, err)
		case <-time.After(30 * time.Second):
			t.Fatal("the call did not end with its context")
		}
	}
}
