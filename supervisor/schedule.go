package supervisor

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// scheduleAfterFire is what the expiry actor hears of a committed schedule
// fire: the schedule's timer moves to its next occurrence, or goes. Both
// name the fire's revision, so that a report that arrives after the
// schedule was made again under its id (it is sent after the commit)
// leaves the new definition's timer alone.
func scheduleAfterFire(conv string, f *messages.ScheduleFire) proto.Message {
	if f.GetNext() == nil {
		return &messages.ScheduleDisarm{ConversationId: conv, ScheduleId: f.GetScheduleId(), Revision: f.GetRevision()}
	}
	return &messages.ScheduleArm{ConversationId: conv, ScheduleId: f.GetScheduleId(), Next: f.GetNext(), Revision: f.GetRevision(), AfterFire: true}
}

// ArmSchedule tells the expiry actor that schedule id of conversation conv
// next fires at next, by its definition of revision revision (empty: not
// known), which the timer keeps. The durable record must already say so
// (it was written by journal.ScheduleStore.PutSchedule). An id (or a
// non-empty revision) journal.ValidateID refuses, or a zero next (or one
// a timestamp cannot hold), is refused with an error wrapping
// journal.ErrInvalid, and nothing is sent. Nothing happens after Stop
// (nil).
func (s *Supervisor) ArmSchedule(conv, id, revision string, next time.Time) error {
	if err := validateSchedule(conv, id, revision); err != nil {
		return fmt.Errorf("supervisor: arm schedule: %w", err)
	}
	at := journal.Timestamp(next)
	if at == nil || at.CheckValid() != nil {
		return journal.Invalidf("supervisor: arm schedule %q of %q: next time %v is not a valid time", id, conv, next)
	}
	if s.isStopped() {
		return nil
	}
	s.system.Root.Send(s.expiry, &messages.ScheduleArm{ConversationId: conv, ScheduleId: id, Next: at, Revision: revision})
	return nil
}

// DisarmSchedule tells the expiry actor that schedule id of conversation
// conv no longer exists. A non-empty revision names the definition that
// went: a timer the expiry actor armed for another revision (the schedule
// was made again under its id since) is left armed; empty removes the
// timer whatever its revision. An id (or a non-empty revision)
// journal.ValidateID refuses is refused with an error wrapping
// journal.ErrInvalid, and nothing is sent. Nothing happens after Stop
// (nil).
func (s *Supervisor) DisarmSchedule(conv, id, revision string) error {
	if err := validateSchedule(conv, id, revision); err != nil {
		return fmt.Errorf("supervisor: disarm schedule: %w", err)
	}
	if s.isStopped() {
		return nil
	}
	s.system.Root.Send(s.expiry, &messages.ScheduleDisarm{ConversationId: conv, ScheduleId: id, Revision: revision})
	return nil
}

// DisarmFiredSchedule tells the expiry actor that the delivery of
// occurrence of schedule id of conversation conv found the schedule gone:
// the timer goes only if it still waits for that occurrence's report (no
// arm came since the expiry actor handed it out; one that came, of the
// schedule made again under its id after the delivery's read, keeps its
// timer). An id journal.ValidateID refuses, or a zero occurrence (or one
// a timestamp cannot hold), is refused with an error wrapping
// journal.ErrInvalid, and nothing is sent. Nothing happens after Stop
// (nil).
func (s *Supervisor) DisarmFiredSchedule(conv, id string, occurrence time.Time) error {
	if err := validateSchedule(conv, id, ""); err != nil {
		return fmt.Errorf("supervisor: disarm schedule: %w", err)
	}
	at := journal.Timestamp(occurrence)
	if at == nil || at.CheckValid() != nil {
		return journal.Invalidf("supervisor: disarm schedule %q of %q: occurrence %v is not a valid time", id, conv, occurrence)
	}
	if s.isStopped() {
		return nil
	}
	s.system.Root.Send(s.expiry, &messages.ScheduleDisarm{ConversationId: conv, ScheduleId: id, Occurrence: at})
	return nil
}

// validateSchedule checks the ids naming a schedule, and its revision if
// set.
func validateSchedule(conv, id, revision string) error {
	if err := journal.ValidateID("conversation id", conv); err != nil {
		return err
	}
	if err := journal.ValidateID("schedule id", id); err != nil {
		return err
	}
	if revision == "" {
		return nil
	}
	return journal.ValidateID("schedule revision", revision)
}
