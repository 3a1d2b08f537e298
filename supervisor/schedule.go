package supervisor

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// scheduleAfterFire is what the expiry actor hears of a committed schedule
// fire: the schedule's timer moves to its next occurrence, or goes.
func scheduleAfterFire(conv string, f *messages.ScheduleFire) proto.Message {
	if f.GetNext() == nil {
		return &messages.ScheduleDisarm{ConversationId: conv, ScheduleId: f.GetScheduleId()}
	}
	return &messages.ScheduleArm{ConversationId: conv, ScheduleId: f.GetScheduleId(), Next: f.GetNext()}
}

// ArmSchedule tells the expiry actor that schedule id of conversation conv
// next fires at next. The durable record must already say so (it was
// written by journal.ScheduleStore.PutSchedule). An id journal.ValidateID
// refuses, or a zero next (or one a timestamp cannot hold), is refused
// with an error wrapping journal.ErrInvalid, and nothing is sent. Nothing
// happens after Stop (nil).
func (s *Supervisor) ArmSchedule(conv, id string, next time.Time) error {
	if err := validateSchedule(conv, id); err != nil {
		return fmt.Errorf("supervisor: arm schedule: %w", err)
	}
	at := journal.Timestamp(next)
	if at == nil || at.CheckValid() != nil {
		return journal.Invalidf("supervisor: arm schedule %q of %q: next time %v is not a valid time", id, conv, next)
	}
	if s.isStopped() {
		return nil
	}
	s.system.Root.Send(s.expiry, &messages.ScheduleArm{ConversationId: conv, ScheduleId: id, Next: at})
	return nil
}

// DisarmSchedule tells the expiry actor that schedule id of conversation
// conv no longer exists. An id journal.ValidateID refuses is refused with
// an error wrapping journal.ErrInvalid, and nothing is sent. Nothing
// happens after Stop (nil).
func (s *Supervisor) DisarmSchedule(conv, id string) error {
	if err := validateSchedule(conv, id); err != nil {
		return fmt.Errorf("supervisor: disarm schedule: %w", err)
	}
	if s.isStopped() {
		return nil
	}
	s.system.Root.Send(s.expiry, &messages.ScheduleDisarm{ConversationId: conv, ScheduleId: id})
	return nil
}

// validateSchedule checks the ids naming a schedule.
func validateSchedule(conv, id string) error {
	if err := journal.ValidateID("conversation id", conv); err != nil {
		return err
	}
	return journal.ValidateID("schedule id", id)
}
