package supervisor

import (
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
// written by journal.ScheduleStore.PutSchedule). Nothing happens after
// Stop.
func (s *Supervisor) ArmSchedule(conv, id string, next time.Time) {
	if s.isStopped() {
		return
	}
	s.system.Root.Send(s.expiry, &messages.ScheduleArm{ConversationId: conv, ScheduleId: id, Next: journal.Timestamp(next)})
}

// DisarmSchedule tells the expiry actor that schedule id of conversation
// conv no longer exists. Nothing happens after Stop.
func (s *Supervisor) DisarmSchedule(conv, id string) {
	if s.isStopped() {
		return
	}
	s.system.Root.Send(s.expiry, &messages.ScheduleDisarm{ConversationId: conv, ScheduleId: id})
}
