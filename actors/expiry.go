package actors

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// ExpiryOptions configures the expiry actor. Store and Journal are required.
type ExpiryOptions struct {
	// Store is read on Started with Store.Deadlines to rebuild the timer of
	// every scheduled deadline (if the read fails, it is retried after
	// RetryAfter; if it ends with journal.ErrCorrupt, every deadline it
	// listed is armed, the error is logged, and it is not read again).
	// An expire reads nothing: its write states the conversation ACTIVE
	// (a turn is owed), and the Store leaves an ENDED one ENDED. The
	// expiry actor never writes to it directly. Required.
	Store journal.Store
	// Journal is the journal actor. Expires are written through it, as
	// unfenced JournalWrites, so the journal actor batches them with other
	// writes. Required.
	Journal *actor.PID
	// Clock supplies time and the one timer. Default SystemClock().
	Clock Clock
	// Deliver is called after an expire was written: the call is now
	// durably expired and its conversation must be told (the runtime
	// ensures the conversation started and sends it the resolution with
	// the system scope). It runs on the actor's goroutine and must not
	// block. It is not called when the call had been answered first (the
	// write failed with ErrStale). A panic of it is logged and recovered
	// (the delivery is lost, as one in flight at a stop is). Default:
	// nothing is delivered.
	Deliver func(conversationID, toolCallID string)
	// DeliverIfExpired is called when an expire is stale after an earlier
	// attempt of it ended with journal.ErrUnknownOutcome: that attempt may
	// have expired the call with no delivery, or a human (or a reschedule)
	// came first. It must deliver the resolution as Deliver does if the
	// call's row is expired, and nothing otherwise; it runs on the actor's
	// goroutine and must not block (the runtime reads the row on a
	// goroutine of its own). A panic of it is logged and recovered.
	// Default: nothing is delivered.
	DeliverIfExpired func(conversationID, toolCallID string)
	// Fire is called when an occurrence of a scheduled wake-up is due
	// (see expiry_schedule.go): occurrence is the schedule's stored next
	// time, which the conversation's write must name. It runs on the
	// actor's goroutine and must not block. Until a ScheduleArm or
	// ScheduleDisarm of the schedule arrives (a commit report of another
	// revision than the timer's is ignored), it is called again every
	// ReplyTimeout (also after a panic of it, which is logged and
	// recovered). Default: schedules are not fired.
	Fire func(conversationID, scheduleID string, occurrence time.Time)
	// RetryAfter is how long to wait before writing an expire again after
	// a failure other than ErrStale (closed, I/O), and before reading the
	// Store again after a failed rebuild. Default 1s (zero or negative).
	// A span that reaches past the year 2262 (math.MaxInt64, say) means
	// never, as a deadline or schedule occurrence that far does.
	RetryAfter time.Duration
	// ReplyTimeout is how long an expire may go unanswered before it is
	// sent again (a request is lost, for example, when the journal actor is
	// gone). An expire whose call was cancelled or rescheduled meanwhile is
	// not sent again: its reply is awaited, and still delivers the expiry
	// if it says the write landed (its own commit cancels the deadline
	// just before the reply). Default 30s (zero or negative). A span that
	// reaches past the year 2262 means never.
	ReplyTimeout time.Duration
	// MaxInFlight bounds the expires sent to the journal actor and not yet
	// answered; further due deadlines wait for replies, so a million
	// deadlines due at once do not flood the journal's mailbox. Zero or
	// less means 4096.
	MaxInFlight int
	// Logger receives the actor's logs. Default: discard.
	Logger *slog.Logger
	// Owns, when set, says whether this node owns a conversation (in a
	// cluster, the deadlines are partitioned among the members): the actor
	// arms only the deadlines and schedules of conversations it owns, from
	// the Store and from ScheduleExpiry and ScheduleArm alike. It must be safe to call from the actor's
	// goroutine. After a change of what it answers, send ExpiryRebuild. A
	// panic of it is logged and recovered, and counts as owned.
	// Default nil: every deadline is this actor's.
	Owns func(conversationID string) bool
	// Context, when set, is the life of the actor's reads of the Store
	// (the rebuilds on Started and on ExpiryRebuild, which run in its
	// Receive, so a stop waits for them). Once it ends, a rebuild in
	// progress is cut, logged at debug level, and not retried: the
	// deadlines and schedules read so far stay armed. End it only to stop
	// the actor (the next start rebuilds from the Store, so nothing is
	// lost). Default context.Background().
	Context context.Context
}

// ExpiryRebuild asks the expiry actor to drop its timers and read every
// deadline and schedule it owns (ExpiryOptions.Owns) from the Store again: what a
// membership change of a cluster sends. Expires in flight keep their
// replies: one written is delivered (Deliver) whoever owns its
// conversation now, since its owner cannot tell (the call's row is
// expired, its deadline gone, and a live activation there still awaits
// it); one that failed is not sent again if this member no longer owns
// the conversation (its owner read the deadline). A local-only message.
// No reply.
type ExpiryRebuild struct{}

// ExpiryUnsure tells the expiry actor that a write of unknown outcome
// (journal.ErrUnknownOutcome) moved the deadline of a tool call to
// Deadline's time: a reschedule that may or may not have landed. The
// actor keeps both times, the one it had armed and the new one, and arms
// the earlier; an expire of it that the Store finds stale (the deadline
// is not due by then) arms the other. So the call expires at whichever
// time the Store holds, and the expire sent for the other changes
// nothing (AppendRequest.due_by). A deadline without a time, a bad one,
// or one of a conversation the actor does not own (ExpiryOptions.Owns) is
// ignored. A local-only message. No reply.
type ExpiryUnsure struct {
	Deadline *messages.Deadline
}

const (
	defaultExpiryRetryAfter   = time.Second
	defaultExpiryReplyTimeout = 30 * time.Second
	defaultExpiryMaxInFlight  = 4096
)

func (o ExpiryOptions) withDefaults() ExpiryOptions {
	if o.Clock == nil {
		o.Clock = SystemClock()
	}
	if o.RetryAfter <= 0 {
		o.RetryAfter = defaultExpiryRetryAfter
	}
	if o.ReplyTimeout <= 0 {
		o.ReplyTimeout = defaultExpiryReplyTimeout
	}
	if o.MaxInFlight <= 0 {
		o.MaxInFlight = defaultExpiryMaxInFlight
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Context == nil {
		o.Context = context.Background()
	}
	// The callbacks run on the actor's goroutine: a panic of one is
	// logged and recovered (see callback).
	log := o.Logger
	if owns := o.Owns; owns != nil {
		o.Owns = func(conv string) (owned bool) {
			owned = true // a panic counts as owned: no deadline is left unarmed
			callback(log, "ExpiryOptions.Owns", func() { owned = owns(conv) })
			return owned
		}
	}
	if deliver := o.Deliver; deliver != nil {
		o.Deliver = func(conv, call string) { callback(log, "ExpiryOptions.Deliver", func() { deliver(conv, call) }) }
	}
	if deliver := o.DeliverIfExpired; deliver != nil {
		o.DeliverIfExpired = func(conv, call string) {
			callback(log, "ExpiryOptions.DeliverIfExpired", func() { deliver(conv, call) })
		}
	}
	if fire := o.Fire; fire != nil {
		o.Fire = func(conv, id string, occurrence time.Time) {
			callback(log, "ExpiryOptions.Fire", func() { fire(conv, id, occurrence) })
		}
	}
	return o
}

// ExpiredOutcome returns the result the expiry actor records for a call that
// expired: a tool error with code "expired". Each call returns a new value.
func ExpiredOutcome() *messages.ToolOutcome {
	return &messages.ToolOutcome{Outcome: &messages.ToolOutcome_Error{Error: &messages.ToolError{
		Code:    "expired",
		Message: "no answer before the deadline",
	}}}
}

// NewExpiry returns the Props of the expiry actor, which holds the timers of
// every scheduled deadline of a pending human call and expires the call when
// its deadline passes, even while its conversation actor is dead. It panics
// if opts.Store or opts.Journal is nil.
//
// # Messages
//
//   - *messages.ScheduleExpiry arms the deadline of one tool call, replacing
//     any earlier one of the same call. A deadline already past fires at
//     once. The durable deadline row must already be written (by the
//     conversation's append); this message only updates memory.
//   - *messages.CancelExpiry removes the deadline of a tool call, if any.
//   - *ExpiryUnsure adds a time a reschedule of unknown outcome may have
//     moved a deadline to, keeping the one armed (see ExpiryUnsure).
//   - *messages.ScheduleArm arms (or moves) the timer of a scheduled
//     wake-up; *messages.ScheduleDisarm removes it. The durable schedule
//     record must already say so. A fire's commit report (an arm with
//     after_fire, a disarm with a revision) of a revision other than the
//     one the timer was armed for is ignored: the schedule was made again
//     under its id since; so is a disarm naming an occurrence the timer no
//     longer waits on. See expiry_schedule.go and ExpiryOptions.Fire.
//
// None gets a reply.
//
// # Expiring
//
// When a deadline passes, the actor sends the journal actor (with Request)
// one unfenced JournalWrite per call, carrying one ToolResolution: status
// EXPIRED, result ExpiredOutcome(), stamped with the clock's time, which is
// also the request's DueBy: the Store expires the call only if its durable
// deadline is due by then, so a reschedule that moved it later and
// committed first wins (the expire is stale, and the new deadline, which
// reached the actor before the reply, stays armed). One call per request,
// so a call answered first (ErrStale) fails only itself.
// Replies are matched by request id; request ids start at a random value in
// each incarnation, so a reply meant for an earlier incarnation is ignored.
// On success Deliver is called; on ErrStale nothing happens (a human or the
// conversation answered first: the Store's atomic resolve picked one
// winner; or the deadline moved, and an expire sent since for the new one
// decides), unless an earlier attempt ended with ErrUnknownOutcome: it may
// have expired the call, and DeliverIfExpired is called; on an error no retry can fix (invalid, deleted) the call is
// dropped with a log line; on any other error the expire is written again
// after RetryAfter. Due deadlines expire in (time, tool call id) order.
//
// # Timers and memory
//
// Deadlines live in one min-heap ordered by (time, tool call id), indexed by
// tool call id. The actor arms exactly one Clock timer, for the earliest
// time it must act (the earliest deadline, a retry, or a reply timeout),
// or for MaxTimerSpan if that time is further away, so that a step of the
// wall clock or a suspend makes it late by at most MaxTimerSpan;
// the timer's callback only sends the actor a message (expiryTick, a local
// Go value that never leaves the process) and never touches its state. An
// entry is 40 bytes in the heap plus an index slot, about 100 bytes of live
// heap per deadline with growth slack, plus its two id strings (shared with
// the message or Store row they came from): about 150 MB for a million
// deadlines with the runtime's 31-byte tool call ids (see
// BenchmarkExpirySchedule).
//
// # Restarts
//
// On Started the actor reads every deadline from the Store, and every
// schedule's next time if the Store is a journal.ScheduleStore (Store reads on
// Started are the one blocking I/O it does on its own goroutine): deadlines
// that passed while it was down fire at once. A damaged record (a listing
// that ends with journal.ErrCorrupt) does not hold back the others: every
// one listed is armed, the damage is logged at error level once per
// rebuild, and the Store is not read again for it (another error is
// retried after RetryAfter). The durable deadline row is removed by the
// same write that expires or resolves its call, so a rebuild never revives
// a finished call. Expires in flight when the actor stops
// lose their replies: such a call may be durably expired without Deliver
// having run, so the conversation's revival must treat a tool call row
// that is terminal while its log has no resolution as resolved. Receive
// does not panic on any input.
func NewExpiry(opts ExpiryOptions) *actor.Props {
	if opts.Store == nil {
		panic("actors: NewExpiry without a Store")
	}
	if opts.Journal == nil {
		panic("actors: NewExpiry without a journal actor")
	}
	opts = opts.withDefaults()
	return actor.PropsFromProducer(func() actor.Actor { return &expiryActor{opts: opts} })
}

// expiryActor is one incarnation of the expiry actor.
type expiryActor struct {
	opts ExpiryOptions
	q    *expiryQueue
	sq   *scheduleHeap // schedules: (conversation, id) -> next occurrence (or retry time)
	// firing holds the occurrence of each schedule handed to Fire and not
	// yet reported back (ScheduleArm, ScheduleDisarm).
	firing map[scheduleKey]int64
	self   *actor.PID
	system *actor.ActorSystem

	rebuilt   bool  // the Store's deadlines were read
	rebuildAt int64 // when to read them again after a failure
	cut       bool  // a rebuild was cut by the end of ExpiryOptions.Context: the actor stops, and reads nothing again

	tick      uint64 // the generation of the armed timer's tick; 0 if none is armed
	tickAt    int64  // when the armed timer fires
	stopTimer func() bool
}

// expiryTicks hands out the generations of the expiry actors' ticks. It is
// shared by every incarnation: a restarted actor keeps its PID and mailbox,
// so a tick of the timer its previous incarnation armed may reach the new
// one, which must not take it for its own.
var expiryTicks atomic.Uint64

// expiryTick is what the clock callback sends the expiry actor. It is a
// local-only message (a plain Go value, never sent across processes). The
// actor acts only on the tick of the timer it has armed, named by its
// generation (unique in the process, see expiryTicks); ticks of timers it,
// or an incarnation before a restart, has since replaced or stopped (a
// timer may go off as it is stopped) are ignored. Not by pointer: pointers
// to distinct zero-size values may be equal, and in practice are.
type expiryTick struct{ gen uint64 }

// Receive implements actor.Actor.
func (a *expiryActor) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		a.self, a.system = ctx.Self(), ctx.ActorSystem()
		o := a.opts
		a.q = newExpiryQueue(rand.Uint64(), o.MaxInFlight, int64(o.RetryAfter), int64(o.ReplyTimeout))
		a.sq = newScheduleHeap()
		a.rebuild()
		a.process(ctx)
	case *messages.ScheduleExpiry:
		d := msg.GetDeadline()
		if err := journal.ValidateDeadline(d); err != nil {
			a.opts.Logger.Warn("actors: expiry: ignoring a bad ScheduleExpiry", "err", err)
			return
		}
		if a.opts.Owns != nil && !a.opts.Owns(d.GetConversationId()) {
			a.q.cancel(d.GetToolCallId()) // moved by a node that no longer owns it
			return
		}
		a.q.schedule(d.GetConversationId(), d.GetToolCallId(), unixNanos(d.GetAt()))
		a.process(ctx)
	case *ExpiryUnsure:
		d := msg.Deadline
		if d.GetAt() == nil || journal.ValidateDeadline(d) != nil {
			return
		}
		if a.opts.Owns != nil && !a.opts.Owns(d.GetConversationId()) {
			return
		}
		a.q.scheduleUnsure(d.GetConversationId(), d.GetToolCallId(), unixNanos(d.GetAt()))
		a.process(ctx)
	case *ExpiryRebuild:
		a.q.resetDeadlines(a.opts.Owns)
		a.sq, a.firing = newScheduleHeap(), nil
		a.rebuilt, a.rebuildAt = false, 0
		a.rebuild()
		a.process(ctx)
	case *messages.CancelExpiry:
		a.q.cancel(msg.GetToolCallId())
		a.process(ctx)
	case *messages.ScheduleArm:
		a.onScheduleArm(msg)
		a.process(ctx)
	case *messages.ScheduleDisarm:
		a.onScheduleDisarm(msg)
		a.process(ctx)
	case *messages.JournalWriteReply:
		a.onReply(msg)
		a.process(ctx)
	case *expiryTick:
		if msg.gen != a.tick {
			return // from a timer since replaced or stopped
		}
		a.tick, a.stopTimer = 0, nil
		a.process(ctx)
	case *actor.DeadLetterResponse:
		a.opts.Logger.Warn("actors: expiry: the journal actor is unreachable; unanswered expires are sent again after the reply timeout",
			"journal", a.opts.Journal, "reply_timeout", a.opts.ReplyTimeout)
	case *actor.Stopping, *actor.Restarting:
		a.disarm()
	}
}

// rebuild reads every deadline of the Store into the heap. On failure it
// plans another read after RetryAfter. A listing that ends with
// journal.ErrCorrupt listed every record but the damaged ones (see
// journal.Deadlines): what it listed is armed, the damage is logged once
// at error level, and the rebuild is done, since reading again would meet
// the same records.
func (a *expiryActor) rebuild() {
	start := time.Now()
	n := 0
	var damaged []error
	life := a.opts.Context
	if life.Err() != nil {
		a.cut = true // stopping: nothing is read again
		return
	}
	err := a.opts.Store.Deadlines(life, time.Time{}, func(d *messages.Deadline) error {
		if err := journal.ValidateDeadline(d); err != nil {
			attrs := []any{"err", err}
			// The ids say whose deadline it is, where they are valid (an
			// invalid one is what err says, not to be logged whole).
			if journal.ValidateID("conversation id", d.GetConversationId()) == nil {
				attrs = append(attrs, "conversation", d.GetConversationId())
			}
			if journal.ValidateID("tool call id", d.GetToolCallId()) == nil {
				attrs = append(attrs, "tool_call", d.GetToolCallId())
			}
			a.opts.Logger.Warn("actors: expiry: skipping a bad stored deadline", attrs...)
			return nil
		}
		if a.opts.Owns != nil && !a.opts.Owns(d.GetConversationId()) {
			return nil
		}
		a.q.schedule(d.GetConversationId(), d.GetToolCallId(), unixNanos(d.GetAt()))
		n++
		return nil
	})
	if errors.Is(err, journal.ErrCorrupt) {
		damaged, err = append(damaged, err), nil
	}
	var ns int
	if err == nil {
		ns, err = a.rebuildSchedules()
		if errors.Is(err, journal.ErrCorrupt) {
			damaged, err = append(damaged, err), nil
		}
	}
	if err != nil && life.Err() != nil {
		// Cut by the end of the actor's life: it is being stopped, and
		// its next start reads the Store again.
		a.cut = true
		a.opts.Logger.Debug("actors: expiry: rebuild cut as the actor stops", "err", err, "read", n)
		return
	}
	if err != nil {
		a.rebuildAt = addNanos(timeNanos(a.opts.Clock.Now()), int64(a.opts.RetryAfter))
		a.opts.Logger.Error("actors: expiry: reading the Store's deadlines and schedules failed; retrying", "err", err, "read", n, "retry_after", a.opts.RetryAfter)
		return
	}
	a.rebuilt = true
	if len(damaged) > 0 {
		a.opts.Logger.Error("actors: expiry: the Store holds damaged deadline or schedule records; every other one is armed, the damaged ones never fire",
			"err", errors.Join(damaged...), "deadlines", n, "schedules", ns, "took", time.Since(start))
		return
	}
	a.opts.Logger.Info("actors: expiry: deadlines and schedules rebuilt from the Store", "deadlines", n, "schedules", ns, "took", time.Since(start))
}

func (a *expiryActor) onReply(r *messages.JournalWriteReply) {
	err := journal.ErrorFromProto(r.GetReply().GetError())
	v, conv, call := a.q.reply(a.opts.Clock.Now().UnixNano(), r.GetRequestId(), err)
	log := a.opts.Logger
	switch v {
	case verdictDeliver:
		log.Debug("actors: expiry: tool call expired", "conversation", conv, "tool_call", call)
		if a.opts.Deliver != nil {
			a.opts.Deliver(conv, call)
		}
	case verdictStale:
		log.Debug("actors: expiry: tool call answered before its deadline", "conversation", conv, "tool_call", call)
	case verdictStaleUnsure:
		log.Debug("actors: expiry: tool call answered, perhaps by an expire of unknown outcome", "conversation", conv, "tool_call", call)
		if a.opts.DeliverIfExpired != nil {
			a.opts.DeliverIfExpired(conv, call)
		}
	case verdictDrop:
		log.Warn("actors: expiry: dropping an expire that cannot be written", "conversation", conv, "tool_call", call, "err", err)
	case verdictRetry:
		log.Warn("actors: expiry: writing an expire failed; retrying", "conversation", conv, "tool_call", call, "err", err, "retry_after", a.opts.RetryAfter)
	}
}

// process does whatever is due now and arms the timer for what comes next.
func (a *expiryActor) process(ctx actor.Context) {
	now := a.opts.Clock.Now()
	n := now.UnixNano()
	if !a.rebuilt && !a.cut && n >= a.rebuildAt {
		a.rebuild()
	}
	at := timestamppb.New(now)
	a.q.due(n, func(req uint64, conv, call string) {
		// A turn is owed once the result is recorded: a restart resumes
		// ACTIVE conversations even if the delivery is lost. Not an ENDED
		// one (an import cut short leaves a call pending there; End
		// refuses while one is open): the Store keeps an ENDED row ENDED
		// in the write's own commit (journal.StatusWritten), so the
		// expiry is recorded there and the status left alone, however
		// close an End commits before it.
		ctx.Request(a.opts.Journal, &messages.JournalWrite{
			RequestId: req,
			Request: &messages.AppendRequest{
				ConversationId: conv,
				Unfenced:       true,
				Status:         messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE,
				// Only if the deadline is still due: a reschedule that
				// committed first wins, and this expire is stale.
				DueBy: at,
				Resolutions: []*messages.ToolResolution{{
					ToolCallId: call,
					Status:     messages.ToolCallStatus_TOOL_CALL_STATUS_EXPIRED,
					Result:     ExpiredOutcome(),
					At:         at,
					By:         SystemIdentity(),
				}},
			},
		})
	})
	a.fireSchedules(n)
	a.arm(n)
}

// SystemIdentity is the resolver identity of an expiry: the system's
// (agent.SystemUserID). Each call returns a new message.
func SystemIdentity() *messages.Identity {
	return &messages.Identity{UserId: agent.SystemUserID}
}

// arm keeps exactly one timer armed, for the earliest time process must run
// again, or none if nothing is waiting.
func (a *expiryActor) arm(now int64) {
	at, ok := a.q.wake()
	if st, sok := a.scheduleWake(); sok && (!ok || st < at) {
		at, ok = st, true
	}
	if !a.rebuilt && !a.cut && (!ok || a.rebuildAt < at) {
		at, ok = a.rebuildAt, true
	}
	if !ok {
		a.disarm()
		return
	}
	if a.tick != 0 && a.tickAt == at {
		return
	}
	a.disarm()
	tick := &expiryTick{gen: expiryTicks.Add(1)}
	system, self := a.system, a.self
	a.tick, a.tickAt = tick.gen, at
	a.stopTimer = a.afterAt(now, at, func() { system.Root.Send(self, tick) })
}

// timeNanos converts t to Unix nanoseconds clamped to the int64 range, as
// unixNanos does (time.Time.UnixNano wraps beyond the years 1678 to 2262).
func timeNanos(t time.Time) int64 {
	const maxSec = math.MaxInt64/int64(1e9) - 1
	const minSec = math.MinInt64/int64(1e9) + 1
	s := t.Unix()
	switch {
	case s >= maxSec:
		return math.MaxInt64
	case s <= minSec:
		return math.MinInt64
	}
	return t.UnixNano()
}

// MaxTimerSpan is the longest the expiry actor arms its one timer for.
// Timers count elapsed time, while deadlines and schedule occurrences are
// wall-clock instants: when the wall clock steps forward (an NTP step, a
// virtual machine's migration) or the machine sleeps (elapsed time stops
// on Linux while suspended), a timer armed for the whole span would fire
// late by the jump. So a timer due later than MaxTimerSpan is armed for
// MaxTimerSpan; when it fires, the actor reads the clock again, fires what
// is due by then and arms again for the rest. A deadline or occurrence
// that a jump made due fires within MaxTimerSpan of the jump (of the
// resume), whatever its distance when armed. The cost is one wake-up of
// the actor per MaxTimerSpan while anything is waiting: a look at the
// earliest entry of its heaps and one timer armed again.
const MaxTimerSpan = time.Minute

// armSlack is how far the clock may move while a timer is armed before
// afterAt arms it again.
const armSlack = int64(time.Millisecond)

// afterAt arms f for the instant at (Unix nanoseconds), given now, the
// clock as process read it, or for MaxTimerSpan after now if at is later:
// f then runs early, and process arms again from a fresh reading. When
// a fresh reading shows at already due, f is called at once, as a timer
// due now would (a manual clock runs a timer due now only on its next
// step). The Clock takes a duration, so a clock that
// moved between that reading and the arming (a test's manual clock stepped
// by another goroutine, or this goroutine descheduled) would leave the
// timer late by as much as it moved: a deadline due in a minute, armed
// while the clock stepped nine, would fire nine minutes late. So while the
// clock moved by more than armSlack during an arming, the timer is armed
// again from a fresh reading (a few times at most; f only sends a tick,
// and a tick of a timer since replaced is ignored).
func (a *expiryActor) afterAt(now, at int64, f func()) (stop func() bool) {
	for try := 0; ; try++ {
		if at <= now && try > 0 {
			// The clock passed at while this arming ran: due now.
			f()
			return func() bool { return false }
		}
		var d time.Duration // zero when at is not in the future
		if at > now {
			d = time.Duration(at - now)
			if d < 0 || d > MaxTimerSpan {
				d = MaxTimerSpan // far (or the subtraction overflowed): read the clock again then
			}
		}
		stop = a.opts.Clock.AfterFunc(d, f)
		moved := a.opts.Clock.Now().UnixNano()
		if d == 0 || moved-now <= armSlack || try == 3 || !stop() {
			return stop // on time, or already fired
		}
		now = moved
	}
}

func (a *expiryActor) disarm() {
	if a.stopTimer != nil {
		a.stopTimer()
	}
	a.tick, a.stopTimer = 0, nil
}
