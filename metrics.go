package lazarus

import (
	"context"
	"time"

	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/messages"
)

// Metrics are hooks through which a Runtime reports what it does, for an
// exporter (package server exposes them in the Prometheus format). Every
// field is optional: a nil hook is never called and costs one nil check,
// and the zero Metrics costs nothing more. Hooks are called on the
// runtime's own goroutines (a committer, the journal actor, a model-call
// goroutine, a subscriber's), concurrently with each other: they must be
// safe for concurrent use, must not block and should not allocate. New
// hooks may be added as fields; existing ones keep their meaning.
type Metrics struct {
	// Commit is called after each Store.AppendBatch of the journal actor
	// (a group commit): how many append requests it carried and how long
	// it took, whether it succeeded or not.
	Commit func(requests int, took time.Duration)
	// Appended is called for each append request the Store committed,
	// with the number of events it wrote (0 for a write of rows only, such
	// as a resolution's). A fork's events are not counted, nor seen by
	// Commit, TurnEnded or ToolCalled: Runtime.Fork writes them in one
	// Store.Fork, not through the journal actor.
	Appended func(events int)
	// AppendUnknown is called for each append request whose commit the
	// Store reported journal.ErrUnknownOutcome (a connection lost during
	// COMMIT): it may have landed or not. One that landed is counted by no
	// hook fed from commits (Appended, TurnEnded, ToolCalled,
	// ScheduleFired's ScheduleDelivered), since its retry finds it in the
	// log and writes nothing (an expire is the exception: Expired counts
	// it once its row is read); one that did not is counted by them when
	// its retry commits.
	AppendUnknown func()
	// Expired is called for each human call a deadline expired (its
	// resolution committed with status EXPIRED, which only an expiry
	// writes; an expire the Store reported of unknown outcome is counted
	// once its retry finds the call's row EXPIRED). An answer by Resolve
	// or Reject is none, whatever its scope: agent.SystemScope's too.
	Expired func()
	// Activated is called each time a conversation actor is spawned: its
	// first activation or a revival after passivation, a kill or a
	// restart. It is called once the actor exists: a spawn that failed
	// is not counted.
	Activated func()
	// Passivated is called each time an idle conversation actor
	// passivates (Options.IdleTimeout): it leaves memory, and its next
	// command revives it.
	Passivated func()
	// ModelCall is called after each call of a model's Generate by a
	// conversation (Options.Model's, or a named agent's Model), not by a
	// summarizer, with its duration and error (nil on success; a
	// cancelled call reports its context's error, and a call that
	// panicked one wrapping agent.ErrPanicked).
	ModelCall func(took time.Duration, err error)
	// Subscribers is called with +1 when a subscription starts and -1
	// when it ends: SendAndWait's and SendMessageAndWait's own, which
	// follows the turn, counts while they wait. In cluster mode a subscription is counted by the
	// member that owns its conversation (which serves it), not by the
	// member it was made on when that is another: there the owner's
	// hook is called, and this one not.
	Subscribers func(delta int)
	// Fenced is called each time a conversation actor retires because the
	// Store refused one of its writes with journal.ErrConflict (another
	// writer moved the log on: the fence of guarantee 8), before the
	// command it held is retried on a new activation. In one process it
	// counts a killed activation's late write; in a cluster, the stale
	// activations of a member that kept serving conversations another
	// member took over (a paused member, say).
	Fenced func()
	// TurnEnded is called for each turn end the runtime commits to the
	// log, with its outcome: an answer (TurnAnswered), a suspension on
	// human calls (TurnSuspended), a turn_failed event (TurnFailed) or a
	// rewind or edit that took a turn back (TurnCancelled). A turn a kill
	// stopped is none: it runs again on the next activation, and ends
	// then.
	TurnEnded func(outcome TurnOutcome)
	// ToolCalled is called for each tool call of a model the runtime
	// commits (a tool call row is written), with its executor: the
	// runtime's (server) or a human's. Calls the model named wrongly are
	// counted too: they are recorded, with an error as their result.
	ToolCalled func(executor messages.Executor)
	// ScheduleFired is called for each due occurrence of a schedule the
	// runtime handled, with what became of it: ScheduleDelivered once per
	// occurrence whose message the runtime committed to the log (with the
	// record of the fire, in the same write), ScheduleDropped when the
	// conversation was ended or deleted (nothing is written, and the
	// schedule goes), ScheduleFailed for each delivery that failed and is
	// handed again later. A delivery Close cut is none (the next Open fires
	// the occurrence). An occurrence another writer recorded first, or
	// that a cancel or a reschedule took back, is none; so is one whose
	// conversation moved to another member of a cluster (that member
	// fires it, and counts it). ScheduleUnknown counts each write of an
	// occurrence whose commit the Store reported journal.ErrUnknownOutcome.
	// ScheduleRefused counts each occurrence the conversation refused as
	// input it can never write, which is skipped, not handed again.
	ScheduleFired func(outcome ScheduleOutcome)
}

// ScheduleOutcome is what became of a due occurrence of a schedule
// (Metrics.ScheduleFired).
type ScheduleOutcome int

// The outcomes of a schedule's occurrence.
const (
	// ScheduleDelivered: the occurrence's message was committed to the
	// log, with the record of the fire; once per occurrence.
	ScheduleDelivered ScheduleOutcome = iota + 1
	// ScheduleDropped: the conversation was ended or deleted; nothing was
	// written and the schedule is gone.
	ScheduleDropped
	// ScheduleFailed: the delivery failed (a full delivery queue, a Store
	// error, a timeout, a next occurrence that cannot be computed, as
	// for a cron time zone that does not load); the expiry actor hands the occurrence again
	// later, so one occurrence may count more than once. A delivery that
	// Close cut is not counted.
	ScheduleFailed
	// ScheduleUnknown: the write of the occurrence's message (with the
	// record of the fire) ended with journal.ErrUnknownOutcome; once per
	// such write. If it landed, the occurrence was delivered, once, and
	// ScheduleDelivered does not count it (its retry finds the message in
	// the log and writes nothing); if not, its retry is counted as any
	// delivery.
	ScheduleUnknown
	// ScheduleRefused: the conversation refused the occurrence's message
	// as input it can never write (journal.ErrInvalid: it does not fit
	// journal.MaxEventBytes with the author Options.ScopeLoader gave
	// it). Nothing was written; the occurrence is skipped, as if it had
	// fired: a one-shot schedule goes, a repeating one moves to its next
	// occurrence.
	ScheduleRefused
)

// String names the outcome ("delivered", "dropped", "failed", "unknown",
// "refused"); any other value is "invalid".
func (o ScheduleOutcome) String() string {
	switch o {
	case ScheduleDelivered:
		return "delivered"
	case ScheduleDropped:
		return "dropped"
	case ScheduleFailed:
		return "failed"
	case ScheduleUnknown:
		return "unknown"
	case ScheduleRefused:
		return "refused"
	}
	return "invalid"
}

// committed feeds the Appended, Expired (but for an expire of unknown
// outcome, see supervisor.Config.ExpiredLanded), TurnEnded, ToolCalled and
// ScheduleFired (ScheduleDelivered) hooks from one committed append
// request.
func (m *Metrics) committed(req *messages.AppendRequest) {
	if m.Appended != nil {
		m.Appended(len(req.GetEvents()))
	}
	if m.Expired != nil {
		for _, res := range req.GetResolutions() {
			if res.GetStatus() == messages.ToolCallStatus_TOOL_CALL_STATUS_EXPIRED {
				m.Expired()
			}
		}
	}
	if m.TurnEnded != nil {
		for _, ev := range req.GetEvents() {
			if end := actors.TurnEndOf(ev); end != nil {
				m.TurnEnded(end.Outcome)
			}
		}
	}
	if m.ToolCalled != nil {
		for _, row := range req.GetToolCalls() {
			m.ToolCalled(row.GetExecutor())
		}
	}
	if m.ScheduleFired != nil && req.GetScheduleFire() != nil {
		// The Store applies a fire only at the schedule's stored next
		// occurrence and moves it on in the same write: a committed fire
		// is an occurrence delivered, once.
		m.ScheduleFired(ScheduleDelivered)
	}
}

// unknown feeds the AppendUnknown and ScheduleFired (ScheduleUnknown) hooks
// from one append request whose commit the Store reported
// journal.ErrUnknownOutcome.
func (m *Metrics) unknown(req *messages.AppendRequest) {
	if m.AppendUnknown != nil {
		m.AppendUnknown()
	}
	if m.ScheduleFired != nil && req.GetScheduleFire() != nil {
		m.ScheduleFired(ScheduleUnknown)
	}
}

// observesUnknown reports whether any hook is fed from requests of
// unknown outcome.
func (m *Metrics) observesUnknown() bool {
	return m.AppendUnknown != nil || m.ScheduleFired != nil
}

// scheduleFired reports an outcome to the ScheduleFired hook, if set.
func (m *Metrics) scheduleFired(o ScheduleOutcome) {
	if m.ScheduleFired != nil {
		m.ScheduleFired(o)
	}
}

// observesCommits reports whether any hook is fed from committed requests.
func (m *Metrics) observesCommits() bool {
	return m.Appended != nil || m.Expired != nil || m.TurnEnded != nil || m.ToolCalled != nil || m.ScheduleFired != nil
}

// timedModel reports the duration and error of every Generate to a hook.
type timedModel struct {
	agent.Model
	observe func(time.Duration, error)
}

func (m timedModel) Generate(ctx context.Context, turn agent.Turn, onDelta func(string)) (msg *messages.AssistantMessage, err error) {
	start, returned := time.Now(), false
	defer func() {
		observed := err
		switch {
		case !returned:
			// A panic, which the runtime recovers above this call into an
			// error wrapping agent.ErrPanicked: it is reported so here.
			observed = agent.ErrPanicked
		case observed == nil:
			// A call the runtime cancelled is reported so even when the
			// Model answered regardless: its answer is dropped.
			observed = ctx.Err()
		}
		m.observe(time.Since(start), observed)
	}()
	msg, err = m.Model.Generate(ctx, turn, onDelta)
	returned = true
	return msg, err
}

// fencedHook adapts the Fenced hook to the supervisor's; nil stays nil.
func fencedHook(f func()) func(string) {
	if f == nil {
		return nil
	}
	return func(string) { f() }
}
