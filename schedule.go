package lazarus

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/supervisor"
)

// Errors of scheduled wake-ups. Each also wraps journal.ErrInvalid (bad
// input) or journal.ErrNotFound (nothing to act on).
var (
	// ErrBadSchedule: a ScheduleSpec that cannot be a schedule: an ID
	// that breaks the id rules (journal.ValidateID), no time,
	// two kinds of times at once, an interval below MinScheduleInterval
	// (an Every, or a cron "@every", which must also be whole seconds),
	// an unknown time zone (or "Local"), a cron expression that does not parse, no
	// message (or one too long for the event each occurrence writes,
	// journal.MaxEventBytes with the wake's request id, time, seq and
	// author), or one schedule more than the conversation may hold
	// (journal.MaxSchedulesPerConversation). Wraps journal.ErrInvalid.
	ErrBadSchedule = errors.New("lazarus: bad schedule")
	// ErrScheduleInPast: ScheduleSpec.At is not after now. Wraps
	// journal.ErrInvalid.
	ErrScheduleInPast = errors.New("lazarus: schedule time is in the past")
	// ErrNoSchedule: the conversation has no schedule of that id. Wraps
	// journal.ErrNotFound.
	ErrNoSchedule = errors.New("lazarus: no such schedule")
)

// MinScheduleInterval is the shortest ScheduleSpec.Every accepted.
const MinScheduleInterval = time.Second

// ScheduleSpec says when a scheduled wake-up fires and what it says. Set
// exactly one of At, After and Cron, or Every alone; Every may also follow
// At or After (the first occurrence, then every Every). An occurrence past
// the year 2262 (the end of int64 nanoseconds since 1970: an At of the year
// 3000, an After or an Every of math.MaxInt64) is taken, stored and listed,
// and never fires, as a human call's deadline that far never expires.
type ScheduleSpec struct {
	// ID names the schedule within its conversation: a Schedule with the
	// ID of an existing schedule of the conversation replaces it (an
	// occurrence of the replaced one being delivered meanwhile fails as
	// stale, even one at the replacement's first time: only the
	// replacement's message is written). Ids are
	// per conversation: another conversation's schedule of the same ID is
	// a schedule of its own, which this one neither replaces nor meets.
	// Default: a new random id.
	ID string
	// At fires once at this time, which must be after now.
	At time.Time
	// After fires once after this delay (> 0) from now.
	After time.Duration
	// Every repeats at this interval (at least MinScheduleInterval): after
	// At or After if one is set, else first at now+Every.
	Every time.Duration
	// Cron fires on a standard five-field cron expression (minute hour
	// day-of-month month day-of-week, as "0 9 * * 1-5") or a descriptor
	// ("@daily", "@every 1h30m"; an "@every" below MinScheduleInterval,
	// or not a whole number of seconds, is refused: robfig/cron would
	// truncate it to the second), read in TimeZone. A "TZ=" or "CRON_TZ="
	// prefix is refused: the zone is TimeZone. An expression that names
	// its hours is read on the local clock across DST changes: a local
	// time the change back repeats fires once, at its first instant, and
	// one the change forward skips fires once, where time.Date puts it
	// (02:30 on a night that jumps from 02:00 to 03:00 fires at 03:30);
	// one whose hour field is "*" runs by elapsed time (every hour that
	// passes fires once).
	Cron string
	// TimeZone is the IANA time zone name Cron is read in ("Europe/Paris").
	// Default "UTC". "Local" (the zone of whichever machine computes an
	// occurrence) is refused. The zone is loaded with time.LoadLocation
	// when the schedule is made (one that does not load is ErrBadSchedule)
	// and again at each occurrence, to compute the next, on whichever
	// runtime fires it. If it does not load there (a minimal container
	// without zoneinfo), the occurrence is not delivered and the schedule
	// is kept as it was: the expiry actor hands it again after its reply
	// timeout, a warning and a ScheduleFailed each time, until it loads.
	// The library does not embed the zone database (time/tzdata, about
	// 450 KB in every binary): as is the practice in Go, a program that
	// may run on such a machine imports _ "time/tzdata" in its main
	// package, as this module's commands (lazarus, lazarus-node, demo) do.
	TimeZone string
	// Text is the user message each occurrence appends, and so the input
	// of the turn it starts. Required, and it must fit one event
	// (journal.MaxEventBytes) with what each occurrence writes besides it.
	Text string
}

var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// atInPast is the error of an At given as the first instant of year 1,
// Go's zero time, which ScheduleSpec reads as no At: the tool's "at" (and
// the HTTP API's) refuses it as the past time it is.
func atInPast(at time.Time) error {
	return fmt.Errorf("%w: at %v is in the past: %w", ErrScheduleInPast, at, journal.ErrInvalid)
}

func badSchedule(format string, args ...any) error {
	return fmt.Errorf("%w: %s: %w", ErrBadSchedule, fmt.Sprintf(format, args...), journal.ErrInvalid)
}

// record turns spec into the stored record of schedule id of conv: its
// first occurrence computed from now.
func (spec ScheduleSpec) record(conv, id string, now time.Time, author agent.Identity) (*messages.Schedule, error) {
	if strings.TrimSpace(spec.Text) == "" {
		return nil, badSchedule("no text")
	}
	// A revision of its own: a fire computed from the record it replaces
	// is stale against it (journal.ScheduleStore).
	sc := &messages.Schedule{Id: id, ConversationId: conv, Author: author.Proto(), Created: journal.Timestamp(now), Revision: newRequestID(),
		Payload: &messages.UserMessage{Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: spec.Text}}}}}
	kinds := 0
	for _, set := range []bool{!spec.At.IsZero(), spec.After != 0, spec.Cron != ""} {
		if set {
			kinds++
		}
	}
	switch {
	case kinds > 1:
		return nil, badSchedule("more than one of At, After and Cron")
	case kinds == 0 && spec.Every == 0:
		return nil, badSchedule("none of At, After, Every and Cron")
	case spec.Cron != "" && spec.Every != 0:
		return nil, badSchedule("both Cron and Every")
	case spec.Cron == "" && spec.TimeZone != "":
		return nil, badSchedule("a time zone without a cron expression")
	case spec.TimeZone == "Local":
		// time.LoadLocation takes it for the zone of the machine that
		// reads it, which may be another one at each occurrence.
		return nil, badSchedule("time zone %q is not an IANA name", spec.TimeZone)
	case spec.After < 0:
		return nil, badSchedule("negative delay %v", spec.After)
	case spec.Every != 0 && spec.Every < MinScheduleInterval:
		return nil, badSchedule("interval %v below %v", spec.Every, MinScheduleInterval)
	}
	var next time.Time
	switch {
	case !spec.At.IsZero():
		if !spec.At.After(now) {
			return nil, fmt.Errorf("%w: %v is not after %v: %w", ErrScheduleInPast, spec.At, now, journal.ErrInvalid)
		}
		next = spec.At
	case spec.After > 0:
		next = now.Add(spec.After)
	case spec.Cron != "":
		// robfig/cron runs an "@every" below a second (zero and negative
		// ones too) every second: refused here, as an Every would be.
		if rest, ok := strings.CutPrefix(strings.TrimSpace(spec.Cron), "@every "); ok {
			if d, err := time.ParseDuration(rest); err == nil && d < MinScheduleInterval {
				return nil, badSchedule("cron %q: interval %v below %v", clipID(spec.Cron), d, MinScheduleInterval)
			} else if err == nil && d%time.Second != 0 {
				// It would run every d truncated to the second ("@every
				// 1500ms" every second), not every d.
				return nil, badSchedule("cron %q: interval %v is not a whole number of seconds (Every takes it)", clipID(spec.Cron), d)
			}
		}
		sc.Cron, sc.TimeZone = spec.Cron, spec.TimeZone
		n, err := cronNext(sc, now)
		if err != nil {
			return nil, err
		}
		if n.IsZero() {
			return nil, badSchedule("cron %q never fires", clipID(spec.Cron))
		}
		next = n
	default:
		next = now.Add(spec.Every)
	}
	if spec.Every != 0 {
		sc.Every = durationpb.New(spec.Every)
	}
	sc.Next = journal.Timestamp(next)
	if err := journal.ValidateSchedule(sc); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadSchedule, err)
	}
	// Each occurrence appends the payload in an event of its own, with
	// the wake's request id, a time, a seq and its author (the
	// scheduler, or the system when no ScopeLoader rebuilds its scope): a
	// payload that fits the record but not that event would never fire.
	// Checked at the largest each of these can be.
	for _, author := range []*messages.Identity{sc.GetAuthor(), agent.SystemScope.Identity().Proto()} {
		wake := &messages.Event{Seq: math.MaxUint64, Time: journal.Timestamp(maxEventTime), RequestId: wakeRequestID(id, sc.GetRevision(), math.MinInt64),
			Author: author, Body: &messages.Event_UserMsg{UserMsg: sc.GetPayload()}}
		if err := journal.ValidateEvent(wake); err != nil {
			return nil, fmt.Errorf("%w: the message of each occurrence: %w", ErrBadSchedule, err)
		}
	}
	return sc, nil
}

// maxEventTime is the latest time an event may hold, the one whose
// encoding is the longest.
var maxEventTime = time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC)

// wakeRequestID is the request id of the wake of the occurrence at nanos
// (Unix nanoseconds) of revision rev of schedule id: one per occurrence,
// so that a wake sent again is written once, and one per definition, so
// that a definition made after another's occurrence at the same time was
// written (a wall clock stepped back, a member's clock behind) is not
// taken for it, answered from the log with its fire never recorded. A
// record of no revision (stored before revisions) keeps the form it had.
func wakeRequestID(id, rev string, nanos int64) string {
	if rev == "" {
		return "schedule/" + id + "/" + strconv.FormatInt(nanos, 10)
	}
	return "schedule/" + id + "/" + rev + "/" + strconv.FormatInt(nanos, 10)
}

// loadLocation loads the time zone a cron expression is read in; a
// variable so that a test can make it fail as it fails on a machine without
// the zone in its zoneinfo.
var loadLocation = time.LoadLocation

// cronNext returns the first time of sc's cron expression after t (zero if
// there is none within the parser's horizon).
func cronNext(sc *messages.Schedule, t time.Time) (time.Time, error) {
	expr := strings.TrimSpace(sc.GetCron())
	if strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ=") {
		return time.Time{}, badSchedule("cron %q names its zone: use the time zone field", clipID(expr))
	}
	zone := sc.GetTimeZone()
	if zone == "" {
		zone = "UTC"
	}
	loc, err := loadLocation(zone)
	if err != nil {
		return time.Time{}, badSchedule("time zone %q: %s", clipID(zone), clipID(err.Error()))
	}
	s, err := cronParser.Parse(expr)
	if err != nil {
		return time.Time{}, badSchedule("cron %q: %s", clipID(expr), clipID(err.Error()))
	}
	return cronAfter(s, loc, t), nil
}

// cronAfter returns the first occurrence of s in loc after t, read on the
// local clock when the expression names its hours (see ScheduleSpec.Cron):
// a local time a DST change repeats fires once, at its first instant, and
// one the change skips fires at the instant time.Date gives it (02:30 on a
// night that jumps from 02:00 to 03:00 fires at 03:30). robfig/cron alone
// fires the first twice and never the second. An expression whose hour
// field is "*" runs by elapsed time: every hour that passes, once.
func cronAfter(s cron.Schedule, loc *time.Location, t time.Time) time.Time {
	t = t.In(loc)
	spec, ok := s.(*cron.SpecSchedule)
	if !ok || spec.Hour&(1<<63) != 0 {
		return s.Next(t) // a descriptor "@every", or every hour: elapsed time
	}
	n := wallNext(spec, loc, t)
	if n.IsZero() {
		return n
	}
	// A wall time repeated by a change back: only its first instant fires.
	// (A minute-by-minute expression skips the repeated span at most.)
	for i := 0; i < 24*60 && !n.IsZero() && repeatedWall(n, loc); i++ {
		n = wallNext(spec, loc, n)
	}
	if n.IsZero() {
		return n
	}
	if m := skippedOccurrence(s, loc, t, n); !m.IsZero() {
		return m
	}
	return n
}

// wallNext is the first time after t whose wall time in loc s names. It
// runs s in a fixed zone, one span of loc's offset at a time: robfig/cron
// in loc does not look at the hour again when a change of the clock by
// less than an hour moves it past one (on Lord Howe's 02:00 -> 02:30, "45
// 1 * * *" came at 01:45 and again at 02:45, and "*/20 3 * * *" lost 03:00
// and 03:20 that day, its search starting at 02:30). A wall time the
// change skips is none here (see skippedOccurrence); one it repeats comes
// in both spans (see repeatedWall).
func wallNext(s *cron.SpecSchedule, loc *time.Location, t time.Time) time.Time {
	span, after := t, t
	for range 1000 {
		_, off := span.In(loc).Zone()
		_, end := span.In(loc).ZoneBounds()
		n := s.Next(after.In(time.FixedZone("", off)))
		if n.IsZero() || end.IsZero() || n.Before(end) {
			if n.IsZero() {
				return n
			}
			return n.In(loc)
		}
		span, after = end, end.Add(-time.Second)
	}
	return time.Time{}
}

// sameWall reports whether a and b show the same local date and time.
func sameWall(a, b time.Time) bool {
	ay, am, ad := a.Date()
	by, bm, bd := b.Date()
	return ay == by && am == bm && ad == bd && a.Hour() == b.Hour() && a.Minute() == b.Minute() && a.Second() == b.Second()
}

// repeatedWall reports whether n (in loc) is the second instant of a local
// time that a change back of the clock (within three hours before n)
// showed already.
func repeatedWall(n time.Time, loc *time.Location) bool {
	_, off := n.Zone()
	_, before := n.Add(-3 * time.Hour).In(loc).Zone()
	if before <= off {
		return false
	}
	return sameWall(n.Add(-time.Duration(before-off)*time.Second).In(loc), n)
}

// skippedOccurrence returns the earliest local time of s that a change
// forward of the clock skipped, placed where time.Date puts it (read with
// the offset before the change), if that instant is after t and before n;
// else the zero time. It looks at the changes from three hours before t
// (a skipped time lands up to the change's size after it) to n.
func skippedOccurrence(s cron.Schedule, loc *time.Location, t, n time.Time) time.Time {
	for a := t.Add(-3 * time.Hour); a.Before(n); a = a.Add(24 * time.Hour) {
		b := a.Add(24 * time.Hour)
		if b.After(n) {
			b = n
		}
		_, oa := a.In(loc).Zone()
		_, ob := b.In(loc).Zone()
		if ob <= oa {
			continue
		}
		// The change is in (a, b]: find its instant.
		lo, hi := a, b
		for hi.Sub(lo) > time.Second {
			mid := lo.Add(hi.Sub(lo) / 2)
			if _, om := mid.In(loc).Zone(); om == oa {
				lo = mid
			} else {
				hi = mid
			}
		}
		change := hi.Truncate(time.Second)
		if _, oc := change.In(loc).Zone(); oc == oa {
			change = change.Add(time.Second)
		}
		gapEnd := change.Add(time.Duration(ob-oa) * time.Second)
		from := change.Add(-time.Nanosecond)
		if t.After(from) {
			from = t
		}
		m := s.Next(from.In(time.FixedZone("", oa)))
		if !m.IsZero() && m.Before(gapEnd) && m.Before(n) {
			return m.In(loc)
		}
	}
	return time.Time{}
}

// nextAfterFire returns the occurrence that follows occurrence occ of sc,
// fired at now: the first one after now (missed occurrences collapse into
// the one that fired), or nil when sc fires once.
func nextAfterFire(sc *messages.Schedule, occ, now time.Time) (*time.Time, error) {
	after := now
	if occ.After(after) {
		after = occ
	}
	switch {
	case sc.GetEvery() != nil:
		every := sc.GetEvery().AsDuration()
		if every <= 0 {
			return nil, journal.Corruptf("lazarus: schedule %q has the interval %v", sc.GetId(), every)
		}
		k := after.Sub(occ)/every + 1
		if k > math.MaxInt64/every {
			// occ is centuries old (after.Sub saturates near 292 years):
			// k*every would overflow to the past. Count from after.
			n := after.Add(every)
			return &n, nil
		}
		n := occ.Add(k * every)
		return &n, nil
	case sc.GetCron() != "":
		n, err := cronNext(sc, after)
		if err != nil || n.IsZero() {
			return nil, err
		}
		return &n, nil
	}
	return nil, nil
}

func (r *Runtime) scheduleStore(op string) (journal.ScheduleStore, error) {
	ss, ok := r.store.(journal.ScheduleStore)
	if !ok {
		return nil, fmt.Errorf("lazarus: %s: the Store (%T) keeps no schedules: %w", op, r.store, errors.ErrUnsupported)
	}
	return ss, nil
}

// Schedule schedules a wake-up of the conversation: at each occurrence of
// spec, spec.Text is appended as a user message (as Send would) and starts
// a turn. It returns the stored schedule (its Id, and Next, the first
// occurrence). The conversation must exist (journal.ErrNotFound; a deleted
// one journal.ErrDeleted) and not be ended (journal.ErrEnded); a spec
// that cannot be a schedule is refused with ErrBadSchedule or
// ErrScheduleInPast; nothing is written then. A spec.ID names a schedule
// of this conversation only (see ScheduleSpec.ID).
//
// Schedules are durable: they survive kills and restarts, and go with the
// conversation when it is deleted, or when one comes due after the
// conversation ended. In cluster mode the owner of the conversation keeps
// the timer, as it keeps its deadlines. Each occurrence fires once: the
// occurrence and the next one are recorded in the same write as its
// message, so a crash neither fires it twice nor loses it. An occurrence
// missed while no runtime ran fires once when one starts; the next is
// the first one after that. A wake runs under the scope
// Options.ScopeLoader rebuilds from the scheduler's identity (scope's,
// recorded as the schedule's author), else agent.SystemScope, whose
// identity then authors the message. An occurrence whose message the
// conversation refuses as input it can never write (journal.ErrInvalid:
// with the identity of the scope ScopeLoader rebuilds it no longer fits
// journal.MaxEventBytes) is skipped, with a warning and
// Metrics.ScheduleFired's ScheduleRefused: a one-shot schedule goes, a
// repeating one moves to its next occurrence.
func (r *Runtime) Schedule(ctx context.Context, conversationID string, spec ScheduleSpec, scope agent.Scope) (*messages.Schedule, error) {
	const op = "schedule"
	if err := r.checkConversation(ctx, op, conversationID); err != nil {
		return nil, err
	}
	ss, err := r.scheduleStore(op)
	if err != nil {
		return nil, err
	}
	if row, err := r.store.Conversation(ctx, conversationID); err == nil && row.GetStatus() == messages.ConversationStatus_CONVERSATION_STATUS_ENDED {
		return nil, fmt.Errorf("lazarus: schedule for %q: %w", clipID(conversationID), journal.ErrEnded)
	}
	if err := agent.ValidateIdentity(scope.Identity()); err != nil {
		return nil, fmt.Errorf("lazarus: schedule: scope: %w", err)
	}
	id := spec.ID
	if id == "" {
		id = "sch-" + newRequestID()
	}
	if err := journal.ValidateID("schedule id", id); err != nil {
		return nil, fmt.Errorf("lazarus: schedule: %w: %w", ErrBadSchedule, err)
	}
	sc, err := spec.record(conversationID, id, r.opts.Clock.Now(), scope.Identity())
	if err != nil {
		return nil, fmt.Errorf("lazarus: schedule for %q: %w", clipID(conversationID), err)
	}
	if err := ss.PutSchedule(ctx, sc); err != nil {
		if errors.Is(err, journal.ErrInvalid) && !errors.Is(err, ErrBadSchedule) {
			// The Store's refusal: one schedule more than
			// journal.MaxSchedulesPerConversation.
			return nil, fmt.Errorf("lazarus: schedule for %q: %w: %w", clipID(conversationID), ErrBadSchedule, err)
		}
		return nil, r.callErr(fmt.Sprintf("lazarus: schedule for %q", clipID(conversationID)), err)
	}
	r.armSchedule(ctx, &messages.ScheduleArm{ConversationId: conversationID, ScheduleId: id, Next: sc.GetNext(), Revision: sc.GetRevision()})
	return sc, nil
}

// Schedules returns the conversation's pending schedules, ordered by id
// (none for an unknown conversation). A deleted conversation is an error
// wrapping journal.ErrDeleted (where the Store's Conversation reports
// tombstones), as Delete promises.
func (r *Runtime) Schedules(ctx context.Context, conversationID string) ([]*messages.Schedule, error) {
	if err := r.enter(ctx); err != nil {
		return nil, fmt.Errorf("lazarus: schedules of %q: %w", clipID(conversationID), err)
	}
	ss, err := r.scheduleStore("schedules")
	if err != nil {
		return nil, err
	}
	if err := journal.ValidateID("conversation id", conversationID); err != nil {
		return nil, fmt.Errorf("lazarus: schedules: %w", err)
	}
	out, err := ss.ConversationSchedules(ctx, conversationID)
	if err != nil {
		return nil, r.callErr(fmt.Sprintf("lazarus: schedules of %q", clipID(conversationID)), err)
	}
	if len(out) == 0 {
		// None: a conversation without schedules, an unknown one, or a
		// deleted one (Delete removed its schedules), which says so.
		if err := r.deleted(ctx, conversationID); err != nil {
			return nil, fmt.Errorf("lazarus: schedules of %q: %w", clipID(conversationID), err)
		}
	}
	return out, nil
}

// CancelSchedule removes schedule id of the conversation: it never fires
// again (an occurrence already being delivered fails as stale). An
// unknown id, or one of another conversation, is ErrNoSchedule; any id of a
// deleted conversation is an error wrapping journal.ErrDeleted instead
// (where the Store's Conversation reports tombstones), as Delete promises.
func (r *Runtime) CancelSchedule(ctx context.Context, conversationID, id string) error {
	if err := r.enter(ctx); err != nil {
		return fmt.Errorf("lazarus: cancel schedule of %q: %w", clipID(conversationID), err)
	}
	ss, err := r.scheduleStore("cancel schedule")
	if err != nil {
		return err
	}
	if err := journal.ValidateID("conversation id", conversationID); err != nil {
		return fmt.Errorf("lazarus: cancel schedule: %w", err)
	}
	if err := journal.ValidateID("schedule id", id); err != nil {
		return fmt.Errorf("lazarus: cancel schedule: %w", err)
	}
	// The revision cancelled, read before the delete: the disarm names it,
	// so that a disarm that reaches the expiry actor after the schedule was
	// made again under its id leaves the new timer armed. A read that fails
	// names none, and the disarm removes any timer, as before revisions.
	rev := ""
	if all, rerr := ss.ConversationSchedules(ctx, conversationID); rerr == nil {
		for _, sc := range all {
			if sc.GetId() == id {
				rev = sc.GetRevision()
			}
		}
	}
	err = ss.DeleteSchedule(ctx, conversationID, id)
	if errors.Is(err, journal.ErrNotFound) {
		// Delete removed a deleted conversation's schedules: say deleted.
		if derr := r.deleted(ctx, conversationID); derr != nil {
			return fmt.Errorf("lazarus: cancel schedule %q of %q: %w", clipID(id), clipID(conversationID), derr)
		}
		return fmt.Errorf("%w: %q of %q: %w", ErrNoSchedule, id, conversationID, err)
	}
	if err != nil {
		return r.callErr(fmt.Sprintf("lazarus: cancel schedule %q of %q", clipID(id), clipID(conversationID)), err)
	}
	r.armSchedule(ctx, &messages.ScheduleDisarm{ConversationId: conversationID, ScheduleId: id, Revision: rev})
	return nil
}

// armSchedule tells the expiry actor that keeps the schedule's timer of a
// change of its durable record (m is a ScheduleArm or a ScheduleDisarm):
// this Runtime's, or in cluster mode the owner's. When the owner cannot be
// told, the Runtime tells it again in the background (see
// retryScheduleArm) what the record says then; a change the owner never
// hears of (it died meanwhile) is read from the Store by the expiry actor
// of the next owner, which rebuilds its timers on the membership change.
func (r *Runtime) armSchedule(ctx context.Context, m proto.Message) {
	if r.tellScheduleOwner(ctx, m) != nil {
		// Both ScheduleArm and ScheduleDisarm name their schedule so.
		named, ok := m.(interface {
			GetConversationId() string
			GetScheduleId() string
			GetRevision() string
		})
		if !ok {
			return
		}
		conv, id, rev := named.GetConversationId(), named.GetScheduleId(), named.GetRevision()
		r.mu.Lock()
		if r.closed {
			r.mu.Unlock()
			return
		}
		r.gcWG.Add(1) // before Close's Wait: Close sets closed under r.mu first
		r.mu.Unlock()
		go func() {
			defer r.gcWG.Done()
			err := retryScheduleArm(r.life, r.opts.Clock,
				func(ctx context.Context) (proto.Message, error) { return r.scheduleChange(ctx, conv, id, rev) },
				r.tellScheduleOwner)
			if err != nil && r.life.Err() == nil {
				r.log.Warn("lazarus: schedule: telling the owner of the change failed; its timer follows at the next membership change", "conversation", conv, "schedule", id, "err", err)
			}
		}()
	}
}

// tellScheduleOwner hands m to the expiry actor of the conversation's
// owner: this Runtime's, or over the cluster. It fails only when the owner
// is another member that could not be told.
func (r *Runtime) tellScheduleOwner(ctx context.Context, m proto.Message) error {
	req := &messages.ClusterRequest{}
	var conv string
	switch m := m.(type) {
	case *messages.ScheduleArm:
		conv, req.Op = m.GetConversationId(), &messages.ClusterRequest_ScheduleArm{ScheduleArm: m}
	case *messages.ScheduleDisarm:
		conv, req.Op = m.GetConversationId(), &messages.ClusterRequest_ScheduleDisarm{ScheduleDisarm: m}
	default:
		return nil
	}
	_, ran, err := r.forwardOp(ctx, conv, req, true)
	if ran {
		return err
	}
	switch m := m.(type) {
	case *messages.ScheduleArm:
		err = r.sup.ArmSchedule(conv, m.GetScheduleId(), m.GetRevision(), m.GetNext().AsTime())
	case *messages.ScheduleDisarm:
		err = r.sup.DisarmSchedule(conv, m.GetScheduleId(), m.GetRevision())
	}
	if err != nil {
		// Its callers checked the ids and time: telling again would not help.
		r.log.Warn("lazarus: schedule: the expiry actor could not be told of a change", "conversation", conv, "err", err)
	}
	return nil
}

// scheduleChange returns what the owner of schedule id must be told now:
// a ScheduleArm at the record's next occurrence (and of its revision), or
// a ScheduleDisarm when the schedule is gone (or has no next occurrence).
// The disarm names rev, the revision of the change being retried, so that
// it leaves alone the timer of a schedule made again under its id since
// the read.
func (r *Runtime) scheduleChange(ctx context.Context, conv, id, rev string) (proto.Message, error) {
	ss, err := r.scheduleStore("schedule")
	if err != nil {
		return nil, err
	}
	all, err := ss.ConversationSchedules(ctx, conv)
	if err != nil && !errors.Is(err, journal.ErrNotFound) && !errors.Is(err, journal.ErrDeleted) {
		return nil, err
	}
	for _, sc := range all {
		if sc.GetId() == id && sc.GetNext() != nil {
			return &messages.ScheduleArm{ConversationId: conv, ScheduleId: id, Next: sc.GetNext(), Revision: sc.GetRevision()}, nil
		}
	}
	return &messages.ScheduleDisarm{ConversationId: conv, ScheduleId: id, Revision: rev}, nil
}

// Retries of a schedule change its owner could not be told: the first
// after scheduleRetryFirst, each next one twice as late up to
// scheduleRetryMax, for scheduleRetryFor in all (the Runtime's Clock).
const (
	scheduleRetryFirst = 200 * time.Millisecond
	scheduleRetryMax   = 5 * time.Second
	scheduleRetryFor   = 2 * time.Minute
)

// retryScheduleArm tells a schedule's owner of its change again until tell
// succeeds, ctx ends (nil is then returned) or scheduleRetryFor has
// passed (the last error is returned). Each attempt reads the record anew
// (read), so that a retry never brings back an occurrence a later change
// moved or removed.
func retryScheduleArm(ctx context.Context, clock actors.Clock, read func(context.Context) (proto.Message, error), tell func(context.Context, proto.Message) error) error {
	start := clock.Now()
	wait := scheduleRetryFirst
	for {
		fired := make(chan struct{})
		stop := clock.AfterFunc(wait, func() { close(fired) })
		select {
		case <-ctx.Done():
			stop()
			return nil
		case <-fired:
		}
		m, err := read(ctx)
		if err == nil {
			err = tell(ctx, m)
		}
		if err == nil || ctx.Err() != nil {
			return nil
		}
		if clock.Now().Sub(start) >= scheduleRetryFor {
			return err
		}
		wait = min(2*wait, scheduleRetryMax)
	}
}

// scheduleFire is one due occurrence the expiry actor handed over.
type scheduleFire struct {
	conv, id string
	at       time.Time
}

// fireWorkers is how many goroutines deliver due occurrences.
const fireWorkers = 4

// wakeUnknownRetries is how many times a delivery sends a wake again
// after its write ended with journal.ErrUnknownOutcome.
const wakeUnknownRetries = 3

// onScheduleDue is the expiry actor's Fire hook: it must not block. A full
// queue drops the occurrence; the expiry actor hands it again after its
// reply timeout.
func (r *Runtime) onScheduleDue(conv, id string, at time.Time) {
	select {
	case r.fires <- scheduleFire{conv, id, at}:
	default:
		r.opts.Metrics.scheduleFired(ScheduleFailed)
		r.log.Warn("lazarus: schedule delivery queue full; the occurrence is handed again later", "conversation", conv, "schedule", id)
	}
}

// startFireWorkers starts the goroutines that deliver due occurrences; they
// end with the Runtime's life (Close waits for them).
func (r *Runtime) startFireWorkers() {
	for range fireWorkers {
		r.gcWG.Go(func() {
			for {
				select {
				case <-r.life.Done():
					return
				case f := <-r.fires:
					r.fire(r.life, f)
				}
			}
		})
	}
}

// fire delivers one occurrence: it reads the schedule (gone: the timer
// goes; moved on: the timer follows), computes the next occurrence and
// sends the conversation a ScheduleWake that writes the message and the
// fire together. A next occurrence that cannot be computed (its time zone
// does not load here) is a failed delivery, handed again later: no wake,
// whose fire without a next would delete a recurring schedule. A stale write (recorded already, cancelled meanwhile)
// re-reads the schedule the same way. A wake of unknown outcome is sent
// again (wakeUnknownRetries). A delivery that ctx (the Runtime's
// life) cut is no failure: Close cut it, and the Store still names the
// occurrence, which the next Open's expiry actor fires.
func (r *Runtime) fire(ctx context.Context, f scheduleFire) {
	ss, ok := r.store.(journal.ScheduleStore)
	if !ok {
		return
	}
	sc, err := r.currentSchedule(ctx, ss, f)
	if err != nil {
		if ctx.Err() != nil {
			r.fireCut(f, err)
			return
		}
		r.opts.Metrics.scheduleFired(ScheduleFailed) // handed again later
		return
	}
	if sc == nil {
		return
	}
	now := r.opts.Clock.Now()
	next, err := nextAfterFire(sc, f.at, now)
	if err != nil {
		// No next would end a recurring schedule: the wake's write deletes
		// a schedule whose fire names none. A next that cannot be computed
		// (a time zone this machine cannot load, a corrupt record) is no
		// such end: the occurrence is not delivered, the schedule stays as
		// it is, and the expiry actor hands it again after its reply
		// timeout, as any failed delivery.
		r.opts.Metrics.scheduleFired(ScheduleFailed)
		r.log.Warn("lazarus: schedule: computing the next occurrence failed; the occurrence is not delivered, and handed again later", "conversation", f.conv, "schedule", f.id, "err", err)
		return
	}
	// The revision of sc: a replace since the read makes the write stale
	// (the message and next are sc's), even at the same occurrence.
	fireRec := &messages.ScheduleFire{ScheduleId: f.id, Occurrence: journal.Timestamp(f.at), Revision: sc.GetRevision()}
	if next != nil {
		fireRec.Next = journal.Timestamp(*next)
	}
	scope := agent.SystemScope
	if author := agent.IdentityOf(sc.GetAuthor()); !author.IsZero() && r.opts.ScopeLoader != nil {
		if s, err := r.opts.ScopeLoader(ctx, author); err == nil {
			scope = s
		} else if ctx.Err() != nil {
			r.fireCut(f, err)
			return
		} else {
			r.log.Warn("lazarus: schedule: loading the author's scope failed; waking under the system scope", "conversation", f.conv, "schedule", f.id, "err", err)
		}
	}
	wake := &messages.ScheduleWake{
		RequestId: wakeRequestID(f.id, sc.GetRevision(), f.at.UnixNano()),
		Message:   proto.Clone(sc.GetPayload()).(*messages.UserMessage),
		Fire:      fireRec,
	}
	ask := func() error {
		res, err := r.sup.Ask(ctx, f.conv, &actors.Command{Scope: scope, Msg: wake})
		if err == nil {
			_, err = sendReplyOf(res)
		}
		return err
	}
	err = ask()
	// A write of unknown outcome may have landed: its activation stopped,
	// and nothing else wakes the conversation for the turn its message
	// owes (a re-hand finds the schedule moved on, and does nothing). The
	// same wake again, whose request id keeps it once in the log, finds
	// the message on a new activation, which runs the turn, or writes it.
	for range wakeUnknownRetries {
		if !errors.Is(err, journal.ErrUnknownOutcome) || ctx.Err() != nil {
			break
		}
		err = ask()
	}
	switch {
	case err == nil:
		r.log.Debug("lazarus: schedule fired", "conversation", f.conv, "schedule", f.id, "occurrence", f.at)
	case errors.Is(err, journal.ErrStale):
		_, _ = r.currentSchedule(ctx, ss, f)
	case errors.Is(err, journal.ErrDeleted):
		r.opts.Metrics.scheduleFired(ScheduleDropped)
		r.disarmSchedule(f.conv, f.id, "")
	case errors.Is(err, journal.ErrEnded):
		r.opts.Metrics.scheduleFired(ScheduleDropped)
		// An ended conversation takes no more input: its schedules go.
		if derr := ss.DeleteSchedule(ctx, f.conv, f.id); derr != nil && !errors.Is(derr, journal.ErrNotFound) && ctx.Err() == nil {
			r.log.Warn("lazarus: schedule: removing a schedule of an ended conversation failed", "conversation", f.conv, "schedule", f.id, "err", derr)
		}
		r.disarmSchedule(f.conv, f.id, "")
	case errors.Is(err, journal.ErrInvalid):
		// The conversation refused the wake as input it can never write:
		// its message does not fit journal.MaxEventBytes with the author
		// Options.ScopeLoader gave it. Sent again it is refused again:
		// the occurrence fails for good, and the schedule moves on.
		r.opts.Metrics.scheduleFired(ScheduleRefused)
		r.log.Warn("lazarus: schedule: the conversation refused an occurrence's message as invalid; the occurrence is skipped", "conversation", f.conv, "schedule", f.id, "occurrence", f.at, "err", err)
		r.skipOccurrence(ctx, ss, f, sc, next)
	case errors.Is(err, supervisor.ErrMoved):
		// The conversation moved to another member under the delivery
		// (a membership change stopped its activation here): expected in
		// a cluster, not a failure. Nothing is lost: either the wake's
		// write landed (it records the occurrence and moves the schedule
		// on), or the Store's schedule still names the occurrence and the
		// new owner, which arms the schedules it owns when it
		// repartitions, fires it; the wake's request id keeps it once in
		// the log.
		r.log.Debug("lazarus: schedule: the conversation moved to another member under an occurrence's delivery; its owner fires it", "conversation", f.conv, "schedule", f.id, "err", err)
	case ctx.Err() != nil:
		r.fireCut(f, err)
	default:
		r.opts.Metrics.scheduleFired(ScheduleFailed)
		r.log.Warn("lazarus: schedule: delivering an occurrence failed; it is handed again later", "conversation", f.conv, "schedule", f.id, "err", err)
	}
}

// skipOccurrence moves schedule f past its occurrence f.at without
// writing its message, as the wake's write would have: to next, or the
// schedule goes when next is nil. A Store that is a
// journal.ScheduleSkipper moves it only if its record is still sc's
// revision at f.at: a schedule replaced or cancelled meanwhile, even
// after a read here, is left as it is, its timer following the Store.
// With another ScheduleStore it acts only if a read finds sc still there
// (a replacement committed between that read and the write is
// overwritten or deleted). A Store that fails leaves the occurrence to be
// handed again later.
func (r *Runtime) skipOccurrence(ctx context.Context, ss journal.ScheduleStore, f scheduleFire, sc *messages.Schedule, next *time.Time) {
	k, ok := ss.(journal.ScheduleSkipper)
	if !ok {
		r.skipOccurrenceUnconditionally(ctx, ss, f, sc, next)
		return
	}
	skip := &messages.ScheduleFire{ScheduleId: f.id, Occurrence: journal.Timestamp(f.at), Revision: sc.GetRevision()}
	if next != nil {
		skip.Next = journal.Timestamp(*next)
	}
	err := k.SkipSchedule(ctx, f.conv, skip)
	switch {
	case err == nil && next == nil:
		// Named by sc's revision, as a fire's commit report is.
		r.disarmSchedule(f.conv, f.id, sc.GetRevision())
	case err == nil:
		r.armSkipped(f, sc, *next)
	case errors.Is(err, journal.ErrStale):
		// Replaced, cancelled or moved since it fired: the timer follows
		// the Store's record, as after a stale wake.
		_, _ = r.currentSchedule(ctx, ss, f)
	default:
		r.skipFailed(ctx, f, err)
	}
}

// skipOccurrenceUnconditionally is skipOccurrence on a ScheduleStore that
// is no journal.ScheduleSkipper: a read, then a put or a delete.
func (r *Runtime) skipOccurrenceUnconditionally(ctx context.Context, ss journal.ScheduleStore, f scheduleFire, sc *messages.Schedule, next *time.Time) {
	cur, err := r.currentSchedule(ctx, ss, f)
	if err != nil || cur == nil || !proto.Equal(cur, sc) {
		return
	}
	if next == nil {
		err = ss.DeleteSchedule(ctx, f.conv, f.id)
		if err == nil || errors.Is(err, journal.ErrNotFound) {
			r.disarmSchedule(f.conv, f.id, sc.GetRevision())
			return
		}
	} else {
		moved := proto.Clone(cur).(*messages.Schedule)
		moved.Next = journal.Timestamp(*next)
		if err = ss.PutSchedule(ctx, moved); err == nil {
			r.armSkipped(f, sc, *next)
			return
		}
		if errors.Is(err, journal.ErrNotFound) || errors.Is(err, journal.ErrDeleted) {
			r.disarmSchedule(f.conv, f.id, "")
			return
		}
	}
	r.skipFailed(ctx, f, err)
}

// armSkipped arms schedule f of revision sc at next, where a skip moved it.
func (r *Runtime) armSkipped(f scheduleFire, sc *messages.Schedule, next time.Time) {
	if err := r.sup.ArmSchedule(f.conv, f.id, sc.GetRevision(), next); err != nil {
		r.log.Warn("lazarus: schedule: the Store's schedule could not be armed", "conversation", f.conv, "schedule", f.id, "err", err)
	}
}

// skipFailed logs a skip of f whose write failed with err: the occurrence
// is handed again later.
func (r *Runtime) skipFailed(ctx context.Context, f scheduleFire, err error) {
	if ctx.Err() != nil {
		r.fireCut(f, err)
		return
	}
	r.log.Warn("lazarus: schedule: skipping a refused occurrence failed; it is handed again later", "conversation", f.conv, "schedule", f.id, "err", err)
}

// fireCut logs a delivery that Close cut (the Runtime's life ended under
// it): no failure, and not counted as one. Either its write landed, or
// the Store still names the occurrence and the next Open fires it.
func (r *Runtime) fireCut(f scheduleFire, err error) {
	r.log.Debug("lazarus: schedule: Close cut an occurrence's delivery; the next Open fires it", "conversation", f.conv, "schedule", f.id, "err", err)
}

// currentSchedule returns the schedule of f if its stored next occurrence
// is f's; otherwise it tells the expiry actor what the Store says (gone,
// or moved) and returns nil. A gone schedule's disarm names f's
// occurrence, so that it leaves alone a timer armed after the read.
func (r *Runtime) currentSchedule(ctx context.Context, ss journal.ScheduleStore, f scheduleFire) (*messages.Schedule, error) {
	all, err := ss.ConversationSchedules(ctx, f.conv)
	if err != nil && ctx.Err() != nil {
		return nil, err // Close cut it: the caller says so
	}
	if err != nil {
		r.log.Warn("lazarus: schedule: reading the schedule failed; it is handed again later", "conversation", f.conv, "schedule", f.id, "err", err)
		return nil, err
	}
	for _, sc := range all {
		if sc.GetId() != f.id {
			continue
		}
		if next := sc.GetNext().AsTime(); !next.Equal(f.at) {
			if err := r.sup.ArmSchedule(f.conv, f.id, sc.GetRevision(), next); err != nil {
				r.log.Warn("lazarus: schedule: the Store's schedule could not be armed", "conversation", f.conv, "schedule", f.id, "err", err)
			}
			return nil, nil
		}
		return sc, nil
	}
	// Gone when read: the timer goes unless it was armed since it handed
	// f out (the schedule made again under its id after the read).
	if err := r.sup.DisarmFiredSchedule(f.conv, f.id, f.at); err != nil {
		r.log.Warn("lazarus: schedule: disarming a schedule failed", "conversation", f.conv, "schedule", f.id, "err", err)
	}
	return nil, nil
}

// disarmSchedule tells the expiry actor that schedule id of conv is gone:
// its definition of revision rev, or whatever it was when rev is empty
// (see supervisor.Supervisor.DisarmSchedule). Its ids were checked where
// they came from (the Store, a fire of the expiry actor's): a refusal is
// logged, not returned.
func (r *Runtime) disarmSchedule(conv, id, rev string) {
	if err := r.sup.DisarmSchedule(conv, id, rev); err != nil {
		r.log.Warn("lazarus: schedule: disarming a schedule failed", "conversation", conv, "schedule", id, "err", err)
	}
}

// schedulesBeforeDelete returns the conversation's schedules, read just
// before its delete, so that their timers go with it. A failed read
// returns none: a timer left armed finds its schedule gone when it fires,
// and goes then.
func (r *Runtime) schedulesBeforeDelete(ctx context.Context, conv string) []*messages.Schedule {
	ss, ok := r.store.(journal.ScheduleStore)
	if !ok {
		return nil
	}
	all, err := ss.ConversationSchedules(ctx, conv)
	if err != nil {
		return nil
	}
	return all
}

// ScheduleText is the text of the user message each occurrence of sc
// appends, as the list_wakeups tool, the HTTP API (server.Schedule.Text)
// and lazarus schedules show it: its text parts joined by newlines, a part
// with no text (an image, a file) left out. A ScheduleSpec's message is one
// part, its Text.
func ScheduleText(sc *messages.Schedule) string {
	var text []string
	for _, p := range sc.GetPayload().GetContent() {
		if t := p.GetText(); t != "" {
			text = append(text, t)
		}
	}
	return strings.Join(text, "\n")
}
