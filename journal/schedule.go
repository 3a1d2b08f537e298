package journal

import (
	"context"
	"fmt"
	"time"

	"github.com/lazarusrt/lazarus/messages"
)

// ScheduleStore is the optional capability of a Store that keeps scheduled
// wake-ups (messages.Schedule): durable records, each of one conversation,
// named by its conversation and its id. Ids are per conversation: two
// conversations may each hold a schedule of the same id, independent of
// each other. Every adapter of this module implements it; the runtime
// finds it by type assertion.
//
// An occurrence fires through Append: an AppendRequest whose ScheduleFire
// names a schedule of the request's conversation applies only if the
// schedule's stored Next is the fire's Occurrence and its stored Revision
// is the fire's Revision (else the whole request fails with ErrStale and
// nothing is written: a fire of a definition replaced, or cancelled and
// made again, since it was computed never lands on the new one, even at
// the same occurrence), and moves Next to the fire's
// Next (removing the schedule when it is unset) in the same atomic write as
// the request's events. So an occurrence is recorded at most once, and
// together with the message it appends. DeleteConversation removes the
// conversation's schedules.
type ScheduleStore interface {
	// PutSchedule stores s, replacing the conversation's schedule with the
	// same id (another conversation's schedule of that id is neither
	// replaced nor in the way). The conversation must have a row
	// (ErrNotFound otherwise; ErrDeleted after its delete); a record that
	// breaks ValidateSchedule is ErrInvalid.
	PutSchedule(ctx context.Context, s *messages.Schedule) error
	// DeleteSchedule removes schedule id of the conversation, and no other
	// conversation's. A conversation without a schedule of that id is
	// ErrNotFound; an ill-formed conversation or schedule id (ValidateID)
	// is ErrInvalid.
	DeleteSchedule(ctx context.Context, conversationID, id string) error
	// ConversationSchedules returns the conversation's schedules ordered
	// by id (none for an unknown conversation). Its cost depends on the
	// conversation's schedules only.
	ConversationSchedules(ctx context.Context, conversationID string) ([]*messages.Schedule, error)
	// ScheduleTimes calls fn for every schedule with its conversation, id
	// and next occurrence, in ascending time, then id, then conversation
	// id, so the expiry actor rebuilds its timers without reading
	// payloads. It stops at the first error fn returns and returns it, and
	// stops as Deadlines.Deadlines does when the Store is closed or ctx is
	// done while it lists. fn must not call the Store's write methods. A
	// schedule whose time entry cannot be decoded is passed over as
	// Deadlines.Deadlines passes over a corrupt deadline: fn is called for
	// every other one, then the error wraps ErrCorrupt and names the
	// first.
	ScheduleTimes(ctx context.Context, fn func(conversationID, id string, next time.Time) error) error
}

// ScheduleSkipper is what a ScheduleStore implements to move a schedule
// past an occurrence under a fire's condition; the three adapters of this
// module do, and journaltest requires it of every ScheduleStore. The
// runtime skips an occurrence the conversation refused through it; with a
// ScheduleStore that lacks it, it reads the schedule and then puts or
// deletes it, and a schedule replaced between the two is overwritten or
// deleted.
type ScheduleSkipper interface {
	// SkipSchedule passes schedule f.ScheduleId of the conversation over
	// its occurrence without a message: it applies f as an Append's
	// ScheduleFire does, under the same condition (the stored Next is f's
	// Occurrence and the stored Revision is f's Revision; else ErrStale
	// and nothing is written), moving Next to f's Next or removing the
	// schedule when that is unset, but writes no event. So a schedule
	// replaced, or cancelled and made again, since f was computed is left
	// as it is. A schedule that is not there (nor its conversation) is
	// ErrStale too; an ill-formed conversation id or fire
	// (ValidateScheduleFire) is ErrInvalid.
	SkipSchedule(ctx context.Context, conversationID string, f *messages.ScheduleFire) error
}

// MaxSchedulesPerConversation bounds the schedules one conversation may
// hold at once; PutSchedule of a new id beyond it is ErrInvalid.
const MaxSchedulesPerConversation = 1000

// ValidateSchedule checks what a Store checks of a schedule before storing
// it: ids (and a Revision empty or of an id's form), a valid Next, a
// Created unset or valid (CheckTime), at most one
// of Every (positive) and Cron, a payload with content, and the record's
// size. It does not parse Cron (the
// runtime does, and computes Next).
func ValidateSchedule(s *messages.Schedule) error {
	if s == nil {
		return Invalidf("nil schedule")
	}
	if err := ValidateID("schedule id", s.GetId()); err != nil {
		return err
	}
	if err := ValidateID("conversation id", s.GetConversationId()); err != nil {
		return err
	}
	if s.GetNext() == nil {
		return Invalidf("schedule %q has no next occurrence", s.GetId())
	}
	if err := s.GetNext().CheckValid(); err != nil {
		return Invalidf("next occurrence of schedule %q: %v", s.GetId(), err)
	}
	if err := CheckTime(fmt.Sprintf("schedule %q: created", s.GetId()), s.GetCreated()); err != nil {
		return err
	}
	if r := s.GetRevision(); r != "" {
		if err := ValidateID("schedule revision", r); err != nil {
			return err
		}
	}
	if e := s.GetEvery(); e != nil {
		if err := e.CheckValid(); err != nil || e.AsDuration() <= 0 {
			return Invalidf("interval of schedule %q must be positive", s.GetId())
		}
		if s.GetCron() != "" {
			return Invalidf("schedule %q has both an interval and a cron expression", s.GetId())
		}
	}
	if len(s.GetPayload().GetContent()) == 0 {
		return Invalidf("schedule %q has no payload", s.GetId())
	}
	return checkSize("schedule "+s.GetId(), s, MaxEventBytes)
}

// ValidateScheduleFire checks the shape of an AppendRequest's schedule
// fire: an id and a valid occurrence (and next, if set). Its Revision may
// be empty (a record stored before revisions existed has none).
func ValidateScheduleFire(f *messages.ScheduleFire) error {
	if err := ValidateID("schedule id", f.GetScheduleId()); err != nil {
		return err
	}
	if f.GetOccurrence() == nil || f.GetOccurrence().CheckValid() != nil {
		return Invalidf("fire of schedule %q has no valid occurrence", f.GetScheduleId())
	}
	if n := f.GetNext(); n != nil && n.CheckValid() != nil {
		return Invalidf("fire of schedule %q has an invalid next", f.GetScheduleId())
	}
	if r := f.GetRevision(); r != "" {
		if err := ValidateID("schedule revision", r); err != nil {
			return err
		}
	}
	return nil
}
