package lazarus

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/actors/actorstest"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

// loadHoldStore holds the next revival read (LoadSince) of one
// conversation once armed, until release is closed or the reader's
// context ends, and says when it is held. It holds one read only.
type loadHoldStore struct {
	journal.Store
	conv    string
	armed   atomic.Bool
	held    chan struct{}
	release chan struct{}
}

func (s *loadHoldStore) LoadSince(ctx context.Context, id string) (*messages.Summary, []*messages.Event, error) {
	if id == s.conv && s.armed.CompareAndSwap(true, false) {
		close(s.held)
		select {
		case <-s.release:
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	}
	return s.Store.LoadSince(ctx, id)
}

// quietSystem is an actor system that logs nothing, at address addr.
func quietSystem(t *testing.T, addr string) *actor.ActorSystem {
	t.Helper()
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	sys.ProcessRegistry.Address = addr
	t.Cleanup(sys.Shutdown)
	return sys
}

// heldLater returns a holdStore over store that holds the next write of
// its conv once armed (hold.armed set), and a release that ends the hold
// and may be called any number of times.
func heldLater(store journal.Store) (hold *holdStore, release func()) {
	hold = &holdStore{Store: store, held: make(chan struct{}), release: make(chan struct{})}
	hold.later.Store(true)
	var released sync.Once
	return hold, func() { released.Do(func() { close(hold.release) }) }
}

// setMembership makes r a member at address self whose membership the
// test sets, in one process and without protoactor's cluster: its
// membership is members (self alone when none are given), and its
// requests leave through sys, another Runtime's actor system serving the
// gateway, or r's own. It returns the member's node.
func setMembership(r *Runtime, sys *actor.ActorSystem, self string, members ...string) *clusterNode {
	if len(members) == 0 {
		members = []string{self}
	}
	n := newNode(r, sys)
	n.self = self
	n.members.Store(&members)
	r.cl, r.gw = n, n
	n.attach(r.sup, n.generation())
	return n
}

// firstConv returns the first of conv-0, conv-1, ... that is true for.
func firstConv(is func(id string) bool) string {
	for i := 0; ; i++ {
		if id := fmt.Sprintf("conv-%d", i); is(id) {
			return id
		}
	}
}

// sendHeld arms hold and sends "two" (request id r2) to conv through r
// in the background, and returns once the Store holds the send's write
// (failing the test with notHeld if ctx ends first). wait waits for the
// send to return (failing the test if ctx ends first) and returns what it
// returned.
func sendHeld(t *testing.T, ctx context.Context, r *Runtime, hold *holdStore, conv, notHeld string) (wait func() (uint64, error)) {
	t.Helper()
	hold.armed.Store(true)
	type sent struct {
		seq uint64
		err error
	}
	done := make(chan sent, 1)
	go func() {
		seq, err := r.SendMessage(ctx, conv, agent.UserMessage(agent.TextPart("two")), SendOptions{RequestID: "r2"}, agent.Scope{UserID: "u"})
		done <- sent{seq, err}
	}()
	select {
	case <-hold.held:
	case <-ctx.Done():
		t.Fatal(notHeld)
	}
	return func() (uint64, error) {
		t.Helper()
		select {
		case got := <-done:
			return got.seq, got.err
		case <-ctx.Done():
			t.Fatal("the send did not return")
			return 0, nil
		}
	}
}

// waitTurnEnded waits until the conversation's row is no longer ACTIVE and
// its log ends in an assistant message at seq last.
func waitTurnEnded(t *testing.T, ctx context.Context, store journal.Store, conv string, last uint64, msg string) {
	t.Helper()
	require.Eventually(t, func() bool {
		row, err := store.Conversation(ctx, conv)
		if err != nil || row.GetStatus() == messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE {
			return false
		}
		evs, err := store.Events(ctx, conv, journal.EventQuery{Limit: 1})
		return err == nil && len(evs) == 1 && evs[0].GetAssistantMsg() != nil && evs[0].GetSeq() == last
	}, 10*time.Second, time.Millisecond, msg)
}

// TestGatewayAnswersUnavailableWhenItsActivationMoved: a send forwarded
// to the gateway of the member that owned its conversation, whose write
// is in flight there when that member applies a membership in which
// another member (one that joined) owns it, is answered UNAVAILABLE once
// the activation stopped under it: the gateway runs no new activation of
// a conversation it no longer owns, and the calling member sends the
// send again to the owner its own membership names (here itself), which
// answers it (the request id keeps it once in the log) and runs its turn.
// The gateway's member ran no turn for it. Without the gateway's answer,
// it ran the send on a new activation of its own, beside the owner.
func TestGatewayAnswersUnavailableWhenItsActivationMoved(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	mem := memjournal.New(memjournal.Options{})
	hold, release := heldLater(mem)
	modelG, modelC := scripted.New(scripted.Options{}), scripted.New(scripted.Options{})
	opts := func(store journal.Store, model agent.Model, sys *actor.ActorSystem) Options {
		return Options{Store: store, Model: model, ActorSystem: sys, NoResume: true, ResumeInterval: -1, IdleTimeout: -1}
	}

	// g serves the gateway on its actor system and is a member whose
	// membership the test sets; c is a member whose requests leave through
	// g's system (in one process, without protoactor's cluster).
	memberG := &cluster.Member{Id: "g", Host: "127.0.0.1", Port: 1, Kinds: []string{ConversationKind}}
	memberC := &cluster.Member{Id: "c", Host: "c.invalid", Port: 1, Kinds: []string{ConversationKind}}
	joined := &cluster.Member{Id: "y", Host: "y.invalid", Port: 1, Kinds: []string{ConversationKind}}
	gSys := quietSystem(t, memberG.Address())
	g, err := Open(opts(hold, modelG, gSys))
	require.NoError(t, err)
	t.Cleanup(func() { _ = g.Close() })
	c, err := Open(opts(mem, modelC, nil))
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = c.Close()
		c.system.Shutdown()
	})
	both := []string{memberC.Address(), memberG.Address()}
	slices.Sort(both)
	g.cl = g.gw
	g.cl.members.Store(&both)
	g.cl.attach(g.sup, g.cl.generation())
	nc := setMembership(c, gSys, memberC.Address(), both...)
	t.Cleanup(release) // before the Runtimes close: a held append ends

	before, after := testNode(both...), testNode(memberC.Address(), memberG.Address(), joined.Address())
	conv := firstConv(func(id string) bool {
		return before.owner(id) == memberG.Address() && after.owner(id) == joined.Address()
	})
	hold.conv = conv

	_, err = c.Send(ctx, conv, "one", agent.Scope{UserID: "u"})
	require.NoError(t, err)
	waitTurnEnded(t, ctx, mem, conv, 2, "the first turn ended")
	require.True(t, g.IsActive(conv), "the first turn ran on g")
	require.Equal(t, 1, modelG.Calls(conv))

	wait := sendHeld(t, ctx, c, hold, conv, "the forwarded send's write never reached the Store")
	// c's membership names c the owner now. It is set without telling c's
	// requests, so the one in flight waits for g's answer rather than
	// leave for the new owner at once: g's answer is what sends it there.
	nc.members.Store(&[]string{nc.self})
	g.cl.onTopology([]*cluster.Member{memberC, joined})
	require.Equal(t, joined.Address(), g.Owner(conv))
	require.Eventually(t, func() bool { return !g.IsActive(conv) }, 10*time.Second, time.Millisecond,
		"g's activation is still live")
	release()

	seq, err := wait()
	require.NoError(t, err)
	require.Equal(t, uint64(3), seq)
	waitTurnEnded(t, ctx, mem, conv, 4, "the turn the send owes was not answered")
	require.Equal(t, 1, modelC.Calls(conv), "the owner c ran the turn")
	require.Equal(t, 1, modelG.Calls(conv), "g ran no turn for the send")
	require.False(t, g.IsActive(conv), "g runs no activation of what it no longer owns")
	evs, err := c.History(ctx, conv, 0, 0)
	require.NoError(t, err)
	require.Len(t, evs, 4, "one, its answer, two once, its answer")
}

// TestResolutionMovedUnderItsDeliveryWakesTheNewOwner: a resolution
// whose delivery is revival-bound on the member that owned the
// conversation (its activation had gone, as after passivation) when a
// member joins and takes the conversation is durable, and Resolve
// returns nil: the delivery meets the stopped activation
// (supervisor.ErrMoved), and the new owner is woken, revives, records the
// answer from the Store and runs the turn it owes. The old member runs
// no new activation and no turn. Before, the delivery was sent again
// without waiting, which spawned a new activation on the old member that
// ran the turn there, and the new owner was not woken.
func TestResolutionMovedUnderItsDeliveryWakesTheNewOwner(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	mem := memjournal.New(memjournal.Options{})
	hold := &loadHoldStore{Store: mem, held: make(chan struct{}), release: make(chan struct{})}
	var released sync.Once
	release := func() { released.Do(func() { close(hold.release) }) }
	modelA, modelB := scripted.New(scripted.Options{}), scripted.New(scripted.Options{})
	tools := []agent.Tool{{Name: "approve", Executor: messages.Executor_EXECUTOR_HUMAN}}

	// a is a member whose membership the test sets, its requests leaving
	// through b's actor system, where b serves the gateway at the address
	// of the member that joins (in one process, without protoactor's
	// cluster).
	a, err := Open(Options{Store: hold, Model: modelA, Tools: tools, NoResume: true, ResumeInterval: -1, IdleTimeout: -1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Close() })
	memberB := &cluster.Member{Id: "b", Host: "127.0.0.1", Port: 1, Kinds: []string{ConversationKind}}
	bSys := quietSystem(t, memberB.Address())
	b, err := Open(Options{Store: mem, Model: modelB, Tools: tools, ActorSystem: bSys, NoResume: true, ResumeInterval: -1, IdleTimeout: -1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	n := setMembership(a, bSys, "a.invalid:1")
	t.Cleanup(release) // before the Runtimes close: a held read ends
	both := testNode(n.self, memberB.Address())
	conv := firstConv(func(id string) bool { return both.owner(id) == memberB.Address() })
	hold.conv = conv
	require.Equal(t, n.self, a.Owner(conv), "a sees itself alone")

	modelA.Push(conv, scripted.Reply("", scripted.Call("approve", `{}`)))
	_, err = a.Send(ctx, conv, "may I?", agent.Scope{UserID: "u"})
	require.NoError(t, err)
	var id string
	require.Eventually(t, func() bool {
		calls, err := mem.PendingToolCalls(ctx, conv)
		if err != nil || len(calls) != 1 {
			return false
		}
		id = calls[0].GetId()
		return true
	}, 10*time.Second, time.Millisecond, "the call is pending")
	require.Eventually(t, func() bool {
		row, err := mem.Conversation(ctx, conv)
		return err == nil && row.GetStatus() != messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE
	}, 10*time.Second, time.Millisecond, "the turn awaits the answer")
	require.True(t, a.sup.Kill(conv, nil), "a's activation was live")

	hold.armed.Store(true)
	resolved := make(chan error, 1)
	go func() { resolved <- a.Resolve(ctx, id, `{"ok":true}`, agent.Scope{UserID: "approver"}) }()
	select {
	case <-hold.held:
	case <-ctx.Done():
		t.Fatal("the delivery's revival never read the log")
	}
	a.cl.onTopology([]*cluster.Member{memberB})
	require.Equal(t, memberB.Address(), a.Owner(conv))
	select {
	case err = <-resolved:
	case <-ctx.Done():
		t.Fatal("Resolve did not return")
	}
	require.NoError(t, err, "the answer is durable")
	release()

	// The question, the call's message, its call, the suspension, the
	// resolution, its result, the turn's answer.
	waitTurnEnded(t, ctx, mem, conv, 7, "the turn the answer owes was not run")
	require.Equal(t, 1, modelB.Calls(conv), "the new owner ran the turn")
	require.Equal(t, 1, modelA.Calls(conv), "the old owner ran no turn for the answer")
	require.False(t, a.IsActive(conv), "the old owner runs no activation of it")
	require.True(t, b.IsActive(conv))
	evs, err := mem.Events(ctx, conv, journal.EventQuery{})
	require.NoError(t, err)
	results := 0
	for _, ev := range evs {
		if ev.GetToolResult() != nil {
			results++
		}
	}
	require.Equal(t, 1, results, "the answer is in the log once")
	row, err := mem.ToolCall(ctx, id)
	require.NoError(t, err)
	require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED, row.GetStatus())
	require.Equal(t, "approver", row.GetResolver().GetUserId())
}

// scheduleHoldStore is a holdStore that keeps schedules.
type scheduleHoldStore struct {
	*holdStore
	journal.ScheduleStore
}

// logRecords is a slog.Handler that keeps every record, at every level.
type logRecords struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (l *logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecords) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logRecords) WithGroup(string) slog.Handler            { return l }

func (l *logRecords) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = append(l.recs, r.Clone())
	return nil
}

// about returns the records with attribute key equal to value.
func (l *logRecords) about(key, value string) []slog.Record {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []slog.Record
	for _, r := range l.recs {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == key && a.Value.String() == value {
				out = append(out, r)
				return false
			}
			return true
		})
	}
	return out
}

// TestScheduleFireMovedUnderItsDeliveryIsQuiet: an occurrence whose
// delivery is in flight on the member that owned its conversation when a
// member joins and takes the conversation ends there with a record at
// Debug level, not a warning: moving is expected in a cluster. Nothing is
// lost: the new owner, which arms the schedules it owns, fires the
// occurrence once, and its turn runs there. The delivery's end was logged
// as a failed delivery, at Warn level.
func TestScheduleFireMovedUnderItsDeliveryIsQuiet(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	due := t0.Add(10 * time.Minute)
	mem := memjournal.New(memjournal.Options{})
	hold, release := heldLater(mem)
	logs := &logRecords{}
	clockA := actorstest.NewManualClock(t0)
	modelA, modelB := scripted.New(scripted.Options{}), scripted.New(scripted.Options{})

	// a is a member whose membership the test sets (in one process,
	// without protoactor's cluster).
	a, err := Open(Options{Store: scheduleHoldStore{hold, mem}, Model: modelA, Clock: clockA, Logger: slog.New(logs), NoResume: true, ResumeInterval: -1, IdleTimeout: -1})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = a.Close()
		a.system.Shutdown()
	})
	n := setMembership(a, a.system, "a.invalid:1")
	t.Cleanup(release) // before the Runtime closes: a held append ends
	joined := &cluster.Member{Id: "b", Host: "b.invalid", Port: 1, Kinds: []string{ConversationKind}}
	both := testNode(n.self, joined.Address())
	conv := firstConv(func(id string) bool { return both.owner(id) == joined.Address() })
	hold.conv = conv

	_, err = a.Send(ctx, conv, "hi", agent.Scope{UserID: "u"})
	require.NoError(t, err)
	waitTurnEnded(t, ctx, mem, conv, 2, "the first turn ended")
	sc, err := a.Schedule(ctx, conv, ScheduleSpec{After: 10 * time.Minute, Text: "remind me"}, agent.Scope{UserID: "u"})
	require.NoError(t, err)

	hold.armed.Store(true)
	armed := clockA.Now().Add(actors.MaxTimerSpan) // due is further: the timer is armed for at most MaxTimerSpan
	require.Eventually(t, func() bool { return slices.ContainsFunc(clockA.Dues(), armed.Equal) }, 10*time.Second, time.Millisecond,
		"the schedule's timer is not armed")
	clockA.Advance(due.Sub(clockA.Now()))
	select {
	case <-hold.held:
	case <-ctx.Done():
		t.Fatal("the occurrence's write never reached the Store")
	}
	n.onTopology([]*cluster.Member{joined})
	require.Equal(t, joined.Address(), a.Owner(conv))
	moved := "lazarus: schedule: the conversation moved to another member under an occurrence's delivery; its owner fires it"
	failed := "lazarus: schedule: delivering an occurrence failed; it is handed again later"
	require.Eventually(t, func() bool {
		return slices.ContainsFunc(logs.about("schedule", sc.GetId()), func(r slog.Record) bool {
			return r.Message == moved || r.Message == failed
		})
	}, 10*time.Second, time.Millisecond, "the delivery did not end")
	for _, r := range logs.about("schedule", sc.GetId()) {
		require.Less(t, r.Level, slog.LevelWarn, "%s", r.Message)
	}
	require.False(t, a.IsActive(conv), "a runs no activation of what it no longer owns")

	// The member that joined owns it (it counts every conversation its
	// own here): it arms the schedules it owns as it starts, and this
	// one's occurrence, overdue, fires at once.
	clockB := actorstest.NewManualClock(due)
	b, err := Open(Options{Store: mem, Model: modelB, Clock: clockB, NoResume: true, ResumeInterval: -1, IdleTimeout: -1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	require.NoError(t, modelB.WaitCalls(ctx, conv, 1), "the occurrence's turn runs at the new owner")
	waitTurnEnded(t, ctx, mem, conv, 4, "the occurrence's turn ended")
	evs, err := mem.Events(ctx, conv, journal.EventQuery{})
	require.NoError(t, err)
	var wakes []string
	for _, ev := range evs {
		if m := ev.GetUserMsg(); m != nil && strings.HasPrefix(ev.GetRequestId(), "schedule/") {
			wakes = append(wakes, m.GetContent()[0].GetText())
		}
	}
	require.Equal(t, []string{"remind me"}, wakes, "the occurrence fired once")
	require.Equal(t, 1, modelA.Calls(conv), "a ran no turn for it")
	listed, err := b.Schedules(ctx, conv)
	require.NoError(t, err)
	require.Empty(t, listed, "a one-shot schedule is gone once fired")
}
