package actors_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/actors/actorstest"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

var expiryT0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// receivedWrite is a JournalWrite seen by a fakeJournal, with whom to answer.
type receivedWrite struct {
	sender *actor.PID
	w      *messages.JournalWrite
}

// fakeJournal stands in for the journal actor in expiry tests. With auto
// nil, it hands every write to the test, which answers with answer; with
// auto set, it answers at once with auto's error.
type fakeJournal struct {
	sys    *actor.ActorSystem
	pid    *actor.PID
	writes chan receivedWrite
}

func newFakeJournal(t *testing.T, sys *actor.ActorSystem, auto func(*messages.JournalWrite) error) *fakeJournal {
	t.Helper()
	j := &fakeJournal{sys: sys, writes: make(chan receivedWrite, 20000)}
	j.pid = sys.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		w, ok := ctx.Message().(*messages.JournalWrite)
		if !ok {
			return
		}
		j.writes <- receivedWrite{sender: ctx.Sender(), w: w}
		if auto != nil {
			ctx.Respond(writeReply(w, auto(w)))
		}
	}))
	return j
}

func writeReply(w *messages.JournalWrite, err error) *messages.JournalWriteReply {
	return &messages.JournalWriteReply{RequestId: w.GetRequestId(), Reply: &messages.AppendReply{Error: journal.ErrorToProto(err)}}
}

func (j *fakeJournal) answer(r receivedWrite, err error) {
	j.sys.Root.Send(r.sender, writeReply(r.w, err))
}

func (j *fakeJournal) next(t *testing.T) receivedWrite {
	t.Helper()
	select {
	case r := <-j.writes:
		return r
	case <-time.After(replyWait):
		t.Fatal("no JournalWrite reached the journal")
		return receivedWrite{}
	}
}

func (j *fakeJournal) requireNone(t *testing.T) {
	t.Helper()
	select {
	case r := <-j.writes:
		t.Fatalf("unexpected JournalWrite %v", r.w)
	default:
	}
}

// resolvedCall returns the tool call id of an expire write, checking its
// shape.
func resolvedCall(t *testing.T, w *messages.JournalWrite) string {
	t.Helper()
	req := w.GetRequest()
	require.True(t, req.GetUnfenced())
	require.Empty(t, req.GetEvents())
	require.Len(t, req.GetResolutions(), 1)
	res := req.GetResolutions()[0]
	require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_EXPIRED, res.GetStatus())
	require.True(t, proto.Equal(actors.ExpiredOutcome(), res.GetResult()))
	return res.GetToolCallId()
}

type delivery struct{ conv, call string }

// expiryHarness is an expiry actor on a ManualClock, with a channel of its
// deliveries.
type expiryHarness struct {
	sys        *actor.ActorSystem
	clock      *actorstest.ManualClock
	store      journal.Store
	deliveries chan delivery
	opts       actors.ExpiryOptions
	pid        *actor.PID
}

func newExpiryHarness(t *testing.T, store journal.Store, journalPID func(*actor.ActorSystem) *actor.PID) *expiryHarness {
	t.Helper()
	h := &expiryHarness{
		sys:        newTestSystem(t),
		clock:      actorstest.NewManualClock(expiryT0),
		store:      store,
		deliveries: make(chan delivery, 20000),
	}
	h.opts = actors.ExpiryOptions{
		Store:      store,
		Journal:    journalPID(h.sys),
		Clock:      h.clock,
		RetryAfter: 5 * time.Second,
		Deliver:    func(conv, call string) { h.deliveries <- delivery{conv, call} },
	}
	return h
}

func (h *expiryHarness) start() *actor.PID {
	h.pid = h.sys.Root.Spawn(actors.NewExpiry(h.opts))
	return h.pid
}

func (h *expiryHarness) schedule(conv, call string, at time.Time) {
	h.sys.Root.Send(h.pid, &messages.ScheduleExpiry{Deadline: &messages.Deadline{
		ConversationId: conv, ToolCallId: call, At: timestamppb.New(at),
	}})
}

// waitArmed waits until the actor's one timer is armed for at, or, if at
// is further than actors.MaxTimerSpan, for MaxTimerSpan from now.
func (h *expiryHarness) waitArmed(t *testing.T, at time.Time) {
	t.Helper()
	require.Eventually(t, func() bool {
		want := at
		if capped := h.clock.Now().Add(actors.MaxTimerSpan); capped.Before(want) {
			want = capped
		}
		next, ok := h.clock.Next()
		return ok && next.Equal(want) && h.clock.Timers() == 1
	}, replyWait, time.Millisecond, "timer not armed for %v", at)
}

func (h *expiryHarness) nextDelivery(t *testing.T) delivery {
	t.Helper()
	select {
	case d := <-h.deliveries:
		return d
	case <-time.After(replyWait):
		t.Fatal("nothing was delivered")
		return delivery{}
	}
}

func TestExpiryFiresAtDeadlineNotBefore(t *testing.T) {
	var j *fakeJournal
	h := newExpiryHarness(t, memjournal.New(memjournal.Options{}), func(sys *actor.ActorSystem) *actor.PID {
		j = newFakeJournal(t, sys, nil)
		return j.pid
	})
	h.start()
	deadline := expiryT0.Add(10 * time.Second)
	h.schedule("conv", "call-1", deadline)
	h.waitArmed(t, deadline)

	h.clock.Advance(10*time.Second - time.Nanosecond)
	require.Equal(t, 1, h.clock.Timers(), "the timer did not fire before the deadline")
	j.requireNone(t)

	h.clock.Advance(time.Nanosecond)
	r := j.next(t)
	require.Equal(t, "call-1", resolvedCall(t, r.w))
	require.Equal(t, "conv", r.w.GetRequest().GetConversationId())
	require.True(t, deadline.Equal(r.w.GetRequest().GetResolutions()[0].GetAt().AsTime()), "stamped with the clock's time")
	require.Len(t, h.deliveries, 0, "nothing is delivered before the write is answered")

	j.answer(r, nil)
	require.Equal(t, delivery{"conv", "call-1"}, h.nextDelivery(t))
	require.Eventually(t, func() bool { return h.clock.Timers() == 0 }, replyWait, time.Millisecond, "no timer once nothing waits")
}

// steppingClock is a ManualClock that is stepped once at the worst moment
// for the expiry actor: after it read the time, before it armed its timer
// (as a test's goroutine stepping the clock can do).
type steppingClock struct {
	*actorstest.ManualClock
	step time.Duration
	once sync.Once
}

func (c *steppingClock) AfterFunc(d time.Duration, f func()) (stop func() bool) {
	c.once.Do(func() { c.Advance(c.step) })
	return c.ManualClock.AfterFunc(d, f)
}

// TestExpiryTimerOnTimeWhenTheClockMovesWhileArming: the timer is due at
// the deadline even when the clock moved between the actor's reading of it
// and the arming (it was armed nine minutes late).
func TestExpiryTimerOnTimeWhenTheClockMovesWhileArming(t *testing.T) {
	var j *fakeJournal
	h := newExpiryHarness(t, memjournal.New(memjournal.Options{}), func(sys *actor.ActorSystem) *actor.PID {
		j = newFakeJournal(t, sys, nil)
		return j.pid
	})
	h.opts.Clock = &steppingClock{ManualClock: h.clock, step: 9 * time.Minute}
	h.start()
	deadline := expiryT0.Add(10 * time.Minute)
	h.schedule("conv", "call-1", deadline)
	h.waitArmed(t, deadline)
	j.requireNone(t)

	h.clock.Advance(time.Minute)
	r := j.next(t)
	require.Equal(t, "call-1", resolvedCall(t, r.w))
	require.True(t, deadline.Equal(r.w.GetRequest().GetResolutions()[0].GetAt().AsTime()))
}

// TestExpiryDeadlinePassedWhileArmingFiresAtOnce: the clock passed the
// deadline between the actor's reading of it and the arming: the deadline
// fires at once, not on the clock's next step (a manual clock runs a timer
// due now only when it is advanced again).
func TestExpiryDeadlinePassedWhileArmingFiresAtOnce(t *testing.T) {
	var j *fakeJournal
	h := newExpiryHarness(t, memjournal.New(memjournal.Options{}), func(sys *actor.ActorSystem) *actor.PID {
		j = newFakeJournal(t, sys, nil)
		return j.pid
	})
	h.opts.Clock = &steppingClock{ManualClock: h.clock, step: 11 * time.Second}
	h.start()
	h.schedule("conv", "call-1", expiryT0.Add(10*time.Second))
	r := j.next(t)
	require.Equal(t, "call-1", resolvedCall(t, r.w))
	require.True(t, expiryT0.Add(11*time.Second).Equal(r.w.GetRequest().GetResolutions()[0].GetAt().AsTime()))
}

// TestExpiryDeadlineFiresWithinMaxTimerSpanOfAClockJump: a deadline an
// hour away, then the wall clock steps two hours forward while the timers'
// elapsed time does not move (an NTP step, a resume from suspend): the
// deadline fires once MaxTimerSpan has elapsed, not an hour later, and a
// deadline a day away stays armed with one timer.
func TestExpiryDeadlineFiresWithinMaxTimerSpanOfAClockJump(t *testing.T) {
	var j *fakeJournal
	h := newExpiryHarness(t, memjournal.New(memjournal.Options{}), func(sys *actor.ActorSystem) *actor.PID {
		j = newFakeJournal(t, sys, nil)
		return j.pid
	})
	h.start()
	deadline := expiryT0.Add(time.Hour)
	h.schedule("conv", "call-1", deadline)
	h.schedule("conv", "call-2", expiryT0.Add(24*time.Hour))
	h.waitArmed(t, deadline)
	require.Equal(t, []time.Time{expiryT0.Add(actors.MaxTimerSpan)}, h.clock.Dues(), "one timer, armed for at most MaxTimerSpan")

	h.clock.Jump(2 * time.Hour)
	j.requireNone(t)
	h.clock.Advance(actors.MaxTimerSpan)
	r := j.next(t)
	require.Equal(t, "call-1", resolvedCall(t, r.w))
	require.True(t, expiryT0.Add(2*time.Hour+actors.MaxTimerSpan).Equal(r.w.GetRequest().GetResolutions()[0].GetAt().AsTime()),
		"stamped with the clock's time")
	j.answer(r, nil)
	require.Equal(t, delivery{"conv", "call-1"}, h.nextDelivery(t))
	h.waitArmed(t, expiryT0.Add(24*time.Hour))
	j.requireNone(t)
}

func TestExpiryPastDeadlineFiresAtOnce(t *testing.T) {
	var j *fakeJournal
	h := newExpiryHarness(t, memjournal.New(memjournal.Options{}), func(sys *actor.ActorSystem) *actor.PID {
		j = newFakeJournal(t, sys, func(*messages.JournalWrite) error { return nil })
		return j.pid
	})
	h.start()
	h.schedule("conv", "late", expiryT0.Add(-time.Minute))
	require.Equal(t, "late", resolvedCall(t, j.next(t).w))
	require.Equal(t, delivery{"conv", "late"}, h.nextDelivery(t))
}

func TestExpiryReplaceMovesDeadline(t *testing.T) {
	var j *fakeJournal
	h := newExpiryHarness(t, memjournal.New(memjournal.Options{}), func(sys *actor.ActorSystem) *actor.PID {
		j = newFakeJournal(t, sys, func(*messages.JournalWrite) error { return nil })
		return j.pid
	})
	h.start()
	h.schedule("conv", "call", expiryT0.Add(10*time.Second))
	h.waitArmed(t, expiryT0.Add(10*time.Second))

	h.schedule("conv", "call", expiryT0.Add(20*time.Second)) // later
	h.waitArmed(t, expiryT0.Add(20*time.Second))
	h.clock.Advance(15 * time.Second)
	j.requireNone(t)

	h.schedule("conv", "call", expiryT0.Add(17*time.Second)) // earlier again
	h.waitArmed(t, expiryT0.Add(17*time.Second))
	h.clock.Advance(2 * time.Second)
	require.Equal(t, "call", resolvedCall(t, j.next(t).w))
	require.Equal(t, delivery{"conv", "call"}, h.nextDelivery(t))
	h.clock.Advance(time.Hour)
	j.requireNone(t)
}

func TestExpiryCancelPreventsExpire(t *testing.T) {
	var j *fakeJournal
	h := newExpiryHarness(t, memjournal.New(memjournal.Options{}), func(sys *actor.ActorSystem) *actor.PID {
		j = newFakeJournal(t, sys, func(*messages.JournalWrite) error { return nil })
		return j.pid
	})
	h.start()
	h.schedule("conv", "keep", expiryT0.Add(20*time.Second))
	h.schedule("conv", "drop", expiryT0.Add(10*time.Second))
	h.waitArmed(t, expiryT0.Add(10*time.Second))

	h.sys.Root.Send(h.pid, &messages.CancelExpiry{ConversationId: "conv", ToolCallId: "drop"})
	h.waitArmed(t, expiryT0.Add(20*time.Second))
	h.clock.Advance(15 * time.Second)
	j.requireNone(t)
	h.clock.Advance(5 * time.Second)
	require.Equal(t, "keep", resolvedCall(t, j.next(t).w))

	h.sys.Root.Send(h.pid, &messages.CancelExpiry{ConversationId: "conv", ToolCallId: "unknown"})
	require.Eventually(t, func() bool { return h.clock.Timers() == 0 }, replyWait, time.Millisecond)
	h.clock.Advance(time.Hour)
	j.requireNone(t)
}

func TestExpiryOrdering(t *testing.T) {
	var j *fakeJournal
	h := newExpiryHarness(t, memjournal.New(memjournal.Options{}), func(sys *actor.ActorSystem) *actor.PID {
		j = newFakeJournal(t, sys, func(*messages.JournalWrite) error { return nil })
		return j.pid
	})
	// The Advance below runs a minute of the actor's timers: an expire
	// whose reply the actor has not handled by the time the clock passes
	// its ReplyTimeout (30s by default) is sent again, as ReplyTimeout
	// says, and the journal would see that call twice. The journal here
	// answers at once: no reply timeout may fall within the Advance.
	h.opts.ReplyTimeout = time.Hour
	h.start()
	h.schedule("c2", "d", expiryT0.Add(3*time.Second))
	h.schedule("c1", "b", expiryT0.Add(2*time.Second))
	h.schedule("c3", "a", expiryT0.Add(2*time.Second))
	h.schedule("c1", "c", expiryT0.Add(time.Second))
	h.waitArmed(t, expiryT0.Add(time.Second))

	h.clock.Advance(time.Minute) // all due at once
	var calls, delivered []string
	for range 4 {
		calls = append(calls, resolvedCall(t, j.next(t).w))
	}
	for range 4 {
		delivered = append(delivered, h.nextDelivery(t).call)
	}
	want := []string{"c", "a", "b", "d"} // by time, then tool call id
	require.Equal(t, want, calls)
	require.Equal(t, want, delivered)
}

func TestExpiryOneTimerForManyDeadlines(t *testing.T) {
	const n = 10000
	var j *fakeJournal
	h := newExpiryHarness(t, memjournal.New(memjournal.Options{}), func(sys *actor.ActorSystem) *actor.PID {
		j = newFakeJournal(t, sys, func(*messages.JournalWrite) error { return nil })
		return j.pid
	})
	h.opts.MaxInFlight = 100 // make the flow control take part too
	// The one Advance below runs two hours of the actor's timers, each at
	// its own time (Now reads that time while it runs): an expire whose
	// reply the actor has not handled by the time the clock passes its
	// ReplyTimeout is sent again, as ReplyTimeout says, and the journal
	// sees that call twice (delivered once still). The journal here
	// answers at once, so the test asks for one write per call: no reply
	// timeout may fall within the Advance.
	h.opts.ReplyTimeout = 3 * time.Hour
	h.start()
	rng := rand.New(rand.NewPCG(1, 2))
	deadlines := make(map[string]time.Time, n)
	for i := range n - 1 {
		call := fmt.Sprintf("call-%05d", i)
		deadlines[call] = expiryT0.Add(time.Minute + time.Duration(rng.IntN(3600))*time.Second)
		h.schedule(fmt.Sprintf("conv-%d", i%97), call, deadlines[call])
		if i%1000 == 0 {
			require.LessOrEqual(t, h.clock.Timers(), 1)
		}
	}
	earliest := expiryT0.Add(time.Second)
	deadlines["call-first"] = earliest
	h.schedule("conv-x", "call-first", earliest) // the last one sent is the earliest
	h.waitArmed(t, earliest)
	require.Equal(t, 1, h.clock.Timers(), "one timer for %d deadlines", n)

	h.clock.Advance(2 * time.Hour)
	var prevAt time.Time
	prevCall := ""
	for range n {
		call := resolvedCall(t, j.next(t).w)
		at, ok := deadlines[call]
		require.True(t, ok, "expired %s once", call)
		delete(deadlines, call)
		require.True(t, at.After(prevAt) || (at.Equal(prevAt) && call > prevCall),
			"%s (%v) sent after %s (%v): not in deadline order", call, at, prevCall, prevAt)
		prevAt, prevCall = at, call
	}
	delivered := make(map[string]bool, n)
	for range n {
		d := h.nextDelivery(t)
		require.False(t, delivered[d.call], "delivered %s once", d.call)
		delivered[d.call] = true
	}
	require.Eventually(t, func() bool { return h.clock.Timers() == 0 }, replyWait, time.Millisecond)
	j.requireNone(t)
}

func TestExpiryRetriesAfterError(t *testing.T) {
	var j *fakeJournal
	h := newExpiryHarness(t, memjournal.New(memjournal.Options{}), func(sys *actor.ActorSystem) *actor.PID {
		j = newFakeJournal(t, sys, nil)
		return j.pid
	})
	h.start()
	h.schedule("conv", "call", expiryT0.Add(time.Second))
	h.waitArmed(t, expiryT0.Add(time.Second))
	h.clock.Advance(time.Second)

	first := j.next(t)
	j.answer(first, fmt.Errorf("disk gone: %w", journal.ErrClosed))
	h.waitArmed(t, expiryT0.Add(time.Second+h.opts.RetryAfter))
	h.clock.Advance(h.opts.RetryAfter - time.Nanosecond)
	j.requireNone(t)
	h.clock.Advance(time.Nanosecond)
	second := j.next(t)
	require.Equal(t, "call", resolvedCall(t, second.w))
	require.NotEqual(t, first.w.GetRequestId(), second.w.GetRequestId())
	j.answer(second, nil)
	require.Equal(t, delivery{"conv", "call"}, h.nextDelivery(t))
}

func TestExpiryResendsUnansweredExpire(t *testing.T) {
	var j *fakeJournal
	h := newExpiryHarness(t, memjournal.New(memjournal.Options{}), func(sys *actor.ActorSystem) *actor.PID {
		j = newFakeJournal(t, sys, nil)
		return j.pid
	})
	h.opts.ReplyTimeout = time.Minute
	h.start()
	h.schedule("conv", "call", expiryT0)
	first := j.next(t)
	h.waitArmed(t, expiryT0.Add(time.Minute))
	h.clock.Advance(time.Minute)
	second := j.next(t)
	require.Equal(t, "call", resolvedCall(t, second.w))

	// The first attempt was written after all; the second finds it stale.
	j.answer(first, nil)
	j.answer(second, journal.ErrStale)
	require.Equal(t, delivery{"conv", "call"}, h.nextDelivery(t))
	require.Eventually(t, func() bool { return h.clock.Timers() == 0 }, replyWait, time.Millisecond)
	require.Len(t, h.deliveries, 0, "delivered once")
}

// holdFirstExpire is a Store whose first append of an expire waits for
// release, and which reports every expire's result on results.
type holdFirstExpire struct {
	*memjournal.Store
	held, release chan struct{}
	results       chan error
	once          sync.Once
}

func (s *holdFirstExpire) AppendBatch(ctx context.Context, reqs []*messages.AppendRequest) []journal.AppendResult {
	expire := slices.ContainsFunc(reqs, func(r *messages.AppendRequest) bool { return len(r.GetResolutions()) > 0 })
	if expire {
		s.once.Do(func() { close(s.held); <-s.release })
	}
	res := s.Store.AppendBatch(ctx, reqs)
	if expire {
		for _, r := range res {
			s.results <- r.Err
		}
	}
	return res
}

// TestExpiryResentExpireIsDeliveredOnce: an expire whose reply has not
// reached the actor within ReplyTimeout (the Store is slow, or the clock
// ran past it first) is sent again; the Store refuses the second, the
// call being expired already, and the expiry is delivered once.
func TestExpiryResentExpireIsDeliveredOnce(t *testing.T) {
	mem := memjournal.New(memjournal.Options{})
	store := &holdFirstExpire{Store: mem, held: make(chan struct{}), release: make(chan struct{}), results: make(chan error, 10)}
	h := newExpiryHarness(t, store, withRealJournal(t, store))
	h.opts.ReplyTimeout = time.Minute
	deadline := expiryT0.Add(time.Minute)
	pendingHumanCall(t, mem, "conv", "call", deadline)
	h.start()
	h.waitArmed(t, deadline)
	h.clock.Advance(time.Minute)
	select {
	case <-store.held:
	case <-time.After(replyWait):
		t.Fatal("the expire did not reach the Store")
	}
	h.waitArmed(t, deadline.Add(time.Minute)) // the reply timeout
	h.clock.Advance(time.Minute)
	h.waitArmed(t, deadline.Add(2*time.Minute)) // sent again: the next reply timeout
	close(store.release)

	require.Equal(t, delivery{"conv", "call"}, h.nextDelivery(t))
	requireExpired(t, mem, "call")
	for i, want := range []error{nil, journal.ErrStale} {
		select {
		case err := <-store.results:
			if want == nil {
				require.NoError(t, err, "the first expire")
			} else {
				require.ErrorIs(t, err, want, "the second expire of the call")
			}
		case <-time.After(replyWait):
			t.Fatalf("expire %d not written", i+1)
		}
	}
	// A write of the conversation queued behind the second expire: once
	// it is answered, the second expire's reply is in the actor's
	// mailbox, ahead of the ScheduleExpiry below.
	last, err := mem.LastSeq(context.Background(), "conv")
	require.NoError(t, err)
	reply := requestWrite(t, h.sys, h.opts.Journal, write(1, userAppend("conv", last, "after")))
	require.Nil(t, reply.GetReply().GetError())
	h.schedule("conv", "probe", expiryT0.Add(time.Hour))
	h.waitArmed(t, expiryT0.Add(time.Hour))
	require.Empty(t, h.deliveries, "delivered once")
}

// pendingHumanCall writes a conversation whose tool call is pending with a
// durable deadline, as a conversation actor would.
func pendingHumanCall(t *testing.T, store journal.Store, conv, call string, deadline time.Time) {
	t.Helper()
	last, err := store.LastSeq(context.Background(), conv)
	require.NoError(t, err)
	req := userAppend(conv, last, "please approve "+call)
	req.ToolCalls = []*messages.ToolCallRecord{{
		Id: call, ConversationId: conv, Name: "approve",
		Executor: messages.Executor_EXECUTOR_HUMAN, Status: messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING,
		Deadline: timestamppb.New(deadline),
	}}
	req.Schedule = []*messages.Deadline{{ConversationId: conv, ToolCallId: call, At: timestamppb.New(deadline)}}
	_, err = store.Append(context.Background(), req)
	require.NoError(t, err)
}

func withRealJournal(t *testing.T, store journal.Store) func(*actor.ActorSystem) *actor.PID {
	return func(sys *actor.ActorSystem) *actor.PID {
		return sys.Root.Spawn(actors.NewJournal(store, actors.JournalOptions{}))
	}
}

func requireExpired(t *testing.T, store journal.Store, call string) {
	t.Helper()
	row, err := store.ToolCall(context.Background(), call)
	require.NoError(t, err)
	require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_EXPIRED, row.GetStatus())
	require.True(t, proto.Equal(actors.ExpiredOutcome(), row.GetResult()))
}

func storedDeadlines(t *testing.T, store journal.Store) []string {
	t.Helper()
	var calls []string
	require.NoError(t, store.Deadlines(context.Background(), time.Time{}, func(d *messages.Deadline) error {
		calls = append(calls, d.GetToolCallId())
		return nil
	}))
	return calls
}

func TestExpiryThroughJournalAndStaleResolve(t *testing.T) {
	store := memjournal.New(memjournal.Options{})
	h := newExpiryHarness(t, store, withRealJournal(t, store))
	deadline := expiryT0.Add(time.Minute)
	pendingHumanCall(t, store, "conv", "answered", deadline)
	pendingHumanCall(t, store, "conv", "unanswered", deadline)
	h.start()
	h.waitArmed(t, deadline) // rebuilt from the Store

	// A human answers one call before the deadline; nobody cancels its
	// in-memory timer.
	_, err := store.ResolveToolCall(context.Background(), "answered", messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED,
		&messages.ToolOutcome{Outcome: &messages.ToolOutcome_Content{Content: `"yes"`}}, expiryT0)
	require.NoError(t, err)

	h.clock.Advance(time.Minute)
	// Both expires go out in id order ("answered" first); the journal
	// answers in order, so had the stale one been delivered, it would come
	// first.
	require.Equal(t, delivery{"conv", "unanswered"}, h.nextDelivery(t))
	requireExpired(t, store, "unanswered")
	row, err := store.ToolCall(context.Background(), "answered")
	require.NoError(t, err)
	require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED, row.GetStatus(), "the late expire changed nothing")
	require.Empty(t, storedDeadlines(t, store), "the expire removed the durable deadline")
	require.Eventually(t, func() bool { return h.clock.Timers() == 0 }, replyWait, time.Millisecond)
	require.Len(t, h.deliveries, 0)
}

func TestExpiryRebuildFiresDeadlinesPassedWhileDown(t *testing.T) {
	store := memjournal.New(memjournal.Options{})
	h := newExpiryHarness(t, store, withRealJournal(t, store))
	pendingHumanCall(t, store, "conv", "soon", expiryT0.Add(time.Minute))
	pendingHumanCall(t, store, "conv", "later", expiryT0.Add(time.Hour))
	pid := h.start()
	h.waitArmed(t, expiryT0.Add(time.Minute))

	require.NoError(t, h.sys.Root.StopFuture(pid).Wait())
	require.Equal(t, 0, h.clock.Timers(), "a stopped expiry actor leaves no timer")
	h.clock.Advance(2 * time.Minute) // "soon" passes while the actor is down
	require.Len(t, h.deliveries, 0)

	h.start()
	require.Equal(t, delivery{"conv", "soon"}, h.nextDelivery(t))
	requireExpired(t, store, "soon")
	h.waitArmed(t, expiryT0.Add(time.Hour))
	h.clock.Advance(time.Hour)
	require.Equal(t, delivery{"conv", "later"}, h.nextDelivery(t))
}

func TestExpiryRestartedBySupervisorRebuilds(t *testing.T) {
	store := memjournal.New(memjournal.Options{})
	h := newExpiryHarness(t, store, withRealJournal(t, store))
	pendingHumanCall(t, store, "conv", "call", expiryT0.Add(time.Minute))

	children := make(chan *actor.PID, 1)
	parent := h.sys.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		switch ctx.Message().(type) {
		case *actor.Started:
			children <- ctx.Spawn(actors.NewExpiry(h.opts))
		case string:
			ctx.(actor.Supervisor).RestartChildren(ctx.Children()...)
		}
	}))
	select {
	case h.pid = <-children:
	case <-time.After(replyWait):
		t.Fatal("expiry actor not spawned")
	}
	h.waitArmed(t, expiryT0.Add(time.Minute))
	// Nudge the timer so a restart is observable: a later in-memory-only
	// deadline that the rebuild will not know about.
	h.schedule("conv", "memory-only", expiryT0.Add(30*time.Second))
	h.waitArmed(t, expiryT0.Add(30*time.Second))

	h.sys.Root.Send(parent, "restart")
	h.waitArmed(t, expiryT0.Add(time.Minute)) // the new incarnation rebuilt from the Store
	h.clock.Advance(time.Minute)
	require.Equal(t, delivery{"conv", "call"}, h.nextDelivery(t))
}

// readSignal tells of each Deadlines read of its Store, done: an
// incarnation of the expiry actor reads them on Started.
type readSignal struct {
	journal.Store
	reads chan struct{}
}

func (s readSignal) Deadlines(ctx context.Context, dueBy time.Time, fn func(*messages.Deadline) error) error {
	err := s.Store.Deadlines(ctx, dueBy, fn)
	s.reads <- struct{}{}
	return err
}

// TestExpiryRestartIgnoresTheTickOfTheOldIncarnation: a timer that goes
// off as a supervisor restart stops it delivers its tick to the new
// incarnation (the PID and mailbox outlive the restart); the new one
// ignores it and keeps exactly one timer armed, which a cancel stops.
// (Each incarnation numbered its ticks from 1: the old incarnation's tick
// 1 was taken for the new one's armed timer, which the actor then forgot
// without stopping it, arming another; the forgotten timer outlived the
// cancel.)
func TestExpiryRestartIgnoresTheTickOfTheOldIncarnation(t *testing.T) {
	mem := memjournal.New(memjournal.Options{})
	store := readSignal{Store: mem, reads: make(chan struct{}, 10)}
	h := newExpiryHarness(t, store, withRealJournal(t, mem))
	h.opts.Clock = lateClock{h.clock}
	at := expiryT0.Add(time.Minute)
	pendingHumanCall(t, mem, "conv", "call", at)
	waitRead := func() {
		t.Helper()
		select {
		case <-store.reads:
		case <-time.After(replyWait):
			t.Fatal("the expiry actor did not read the deadlines")
		}
	}

	children := make(chan *actor.PID, 1)
	parent := h.sys.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		switch ctx.Message().(type) {
		case *actor.Started:
			children <- ctx.Spawn(actors.NewExpiry(h.opts))
		case string:
			ctx.(actor.Supervisor).RestartChildren(ctx.Children()...)
		}
	}))
	select {
	case h.pid = <-children:
	case <-time.After(replyWait):
		t.Fatal("expiry actor not spawned")
	}
	waitRead()
	h.waitArmed(t, at)

	// The restart stops the timer, which goes off as it is stopped: its
	// tick is queued before the new incarnation's Started is handled.
	h.sys.Root.Send(parent, "restart")
	waitRead()
	// Queued behind that tick.
	h.sys.Root.Send(h.pid, &messages.CancelExpiry{ConversationId: "conv", ToolCallId: "call"})
	var armed []time.Time
	assert.Eventually(t, func() bool { armed = h.clock.Dues(); return len(armed) == 0 }, replyWait, time.Millisecond)
	require.Empty(t, armed, "timers armed after the cancel")
	h.clock.Advance(time.Hour)
	require.Empty(t, h.deliveries)
}

// flakyDeadlines fails its first Deadlines read.
type flakyDeadlines struct {
	journal.Store
	mu    sync.Mutex
	reads int
}

func (s *flakyDeadlines) Deadlines(ctx context.Context, dueBy time.Time, fn func(*messages.Deadline) error) error {
	s.mu.Lock()
	s.reads++
	n := s.reads
	s.mu.Unlock()
	if n == 1 {
		return errors.New("flaky: read failed")
	}
	return s.Store.Deadlines(ctx, dueBy, fn)
}

func TestExpiryRetriesFailedRebuild(t *testing.T) {
	mem := memjournal.New(memjournal.Options{})
	store := &flakyDeadlines{Store: mem}
	h := newExpiryHarness(t, store, withRealJournal(t, mem))
	pendingHumanCall(t, mem, "conv", "call", expiryT0.Add(-time.Minute)) // already due
	h.start()
	h.waitArmed(t, expiryT0.Add(h.opts.RetryAfter))
	require.Len(t, h.deliveries, 0)
	h.clock.Advance(h.opts.RetryAfter)
	require.Equal(t, delivery{"conv", "call"}, h.nextDelivery(t))
}

func TestExpiryIgnoresBadMessages(t *testing.T) {
	var j *fakeJournal
	h := newExpiryHarness(t, memjournal.New(memjournal.Options{}), func(sys *actor.ActorSystem) *actor.PID {
		j = newFakeJournal(t, sys, func(*messages.JournalWrite) error { return nil })
		return j.pid
	})
	h.start()
	h.sys.Root.Send(h.pid, &messages.ScheduleExpiry{})
	h.sys.Root.Send(h.pid, &messages.ScheduleExpiry{Deadline: &messages.Deadline{ConversationId: "c", ToolCallId: "x"}}) // no time
	h.sys.Root.Send(h.pid, &messages.JournalWriteReply{RequestId: 42})                                                   // unknown
	h.sys.Root.Send(h.pid, &messages.CancelExpiry{})
	h.schedule("conv", "ok", expiryT0.Add(time.Second))
	h.waitArmed(t, expiryT0.Add(time.Second))
	h.clock.Advance(time.Second)
	require.Equal(t, "ok", resolvedCall(t, j.next(t).w))
	require.Equal(t, delivery{"conv", "ok"}, h.nextDelivery(t))
}

func TestExpiryRequiresStoreAndJournal(t *testing.T) {
	require.Panics(t, func() { actors.NewExpiry(actors.ExpiryOptions{Journal: actor.NewPID("x", "y")}) })
	require.Panics(t, func() { actors.NewExpiry(actors.ExpiryOptions{Store: memjournal.New(memjournal.Options{})}) })
}

// TestExpiryDeliversAnExpireWhoseCommitOutlastedItsReplyTimeout: the commit
// of an expire takes longer than ReplyTimeout, and the CancelExpiry its own
// commit sends (the journal's Committed hook, just before the reply)
// reaches the actor after the timeout passed but before its timer woke it.
// The expire is not sent again, and its success, arriving next, is
// delivered. Before, the cancel made the actor forget the timed-out
// attempt, and the expiry that landed was never delivered.
func TestExpiryDeliversAnExpireWhoseCommitOutlastedItsReplyTimeout(t *testing.T) {
	var j *fakeJournal
	h := newExpiryHarness(t, memjournal.New(memjournal.Options{}), func(sys *actor.ActorSystem) *actor.PID {
		j = newFakeJournal(t, sys, nil)
		return j.pid
	})
	h.opts.ReplyTimeout = time.Minute
	h.start()
	h.schedule("conv", "call", expiryT0)
	first := j.next(t)
	h.waitArmed(t, expiryT0.Add(time.Minute))
	h.clock.Jump(2 * time.Minute) // past the reply timeout; the timer has not fired
	h.sys.Root.Send(h.pid, &messages.CancelExpiry{ConversationId: "conv", ToolCallId: "call"})
	j.answer(first, nil)
	require.Equal(t, delivery{"conv", "call"}, h.nextDelivery(t))
	j.requireNone(t)
	h.clock.Advance(time.Hour)
	j.requireNone(t)
	require.Empty(t, h.deliveries, "delivered once")
}

// TestExpiryOfAnEndedConversationKeepsItEnded: a deadline that fires for a
// call still pending in an ENDED conversation (an import cut short leaves
// one: End refuses while a call is open) records the expiry, and is
// delivered, but leaves the row ENDED: the expire's write stated ACTIVE,
// which reopened the conversation (a restart would have resumed it), when
// End promises it is for good.
func TestExpiryOfAnEndedConversationKeepsItEnded(t *testing.T) {
	store := memjournal.New(memjournal.Options{})
	h := newExpiryHarness(t, store, withRealJournal(t, store))
	deadline := expiryT0.Add(time.Minute)
	pendingHumanCall(t, store, "conv", "call", deadline)
	pendingHumanCall(t, store, "open", "other", deadline)
	for conv, st := range map[string]messages.ConversationStatus{
		"conv": messages.ConversationStatus_CONVERSATION_STATUS_ENDED,
		"open": messages.ConversationStatus_CONVERSATION_STATUS_SUSPENDED,
	} {
		_, err := store.Append(context.Background(), &messages.AppendRequest{ConversationId: conv, Unfenced: true, Status: st})
		require.NoError(t, err)
	}
	h.start()
	h.waitArmed(t, deadline)
	h.clock.Advance(time.Minute)
	got := []delivery{h.nextDelivery(t), h.nextDelivery(t)}
	require.ElementsMatch(t, []delivery{{"conv", "call"}, {"open", "other"}}, got)
	requireExpired(t, store, "call")
	requireExpired(t, store, "other")
	c, err := store.Conversation(context.Background(), "conv")
	require.NoError(t, err)
	require.Equal(t, messages.ConversationStatus_CONVERSATION_STATUS_ENDED, c.GetStatus(), "the expiry did not reopen it")
	c, err = store.Conversation(context.Background(), "open")
	require.NoError(t, err)
	require.Equal(t, messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE, c.GetStatus(), "a suspended conversation is made ACTIVE: a turn is owed")
}
