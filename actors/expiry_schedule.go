package actors

import (
	"context"
	"time"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// This file holds the expiry actor's timers of scheduled wake-ups. A
// schedule's durable record (journal.ScheduleStore) says when it fires
// next; the actor keeps one heap entry per schedule (its id, conversation
// and next time, the same 40-byte entry as a deadline's) and, when one is
// due, hands the occurrence to ExpiryOptions.Fire. It never writes: the
// conversation records the occurrence and the next one atomically with the
// wake's user message (AppendRequest.ScheduleFire), and the journal
// actor's commit report moves the timer (ScheduleArm) or removes it
// (ScheduleDisarm). Until that report comes, a fired entry waits
// ReplyTimeout and is handed to Fire again: a lost delivery is retried,
// and the Store's check of the occurrence makes a second delivery of a
// recorded one write nothing.

// rebuildSchedules reads the schedule times of the Store into sq, if the Store
// keeps schedules. It returns how many it read.
func (a *expiryActor) rebuildSchedules() (int, error) {
	ss, ok := a.opts.Store.(journal.ScheduleStore)
	if !ok {
		return 0, nil
	}
	n := 0
	err := ss.ScheduleTimes(context.Background(), func(conv, id string, next time.Time) error {
		if a.opts.Owns != nil && !a.opts.Owns(conv) {
			return nil
		}
		a.sq.put(conv, id, next.UnixNano())
		n++
		return nil
	})
	return n, err
}

// onScheduleArm arms or moves the timer of one schedule.
func (a *expiryActor) onScheduleArm(m *messages.ScheduleArm) {
	if journal.ValidateID("conversation id", m.GetConversationId()) != nil || journal.ValidateID("schedule id", m.GetScheduleId()) != nil ||
		m.GetNext() == nil || m.GetNext().CheckValid() != nil {
		a.opts.Logger.Warn("actors: expiry: ignoring a bad ScheduleArm", "schedule", m.GetScheduleId())
		return
	}
	delete(a.firing, m.GetScheduleId())
	if a.opts.Owns != nil && !a.opts.Owns(m.GetConversationId()) {
		a.sq.remove(m.GetScheduleId()) // armed by a member that no longer owns it
		return
	}
	a.sq.put(m.GetConversationId(), m.GetScheduleId(), m.GetNext().AsTime().UnixNano())
}

// onScheduleDisarm removes the timer of one schedule.
func (a *expiryActor) onScheduleDisarm(m *messages.ScheduleDisarm) {
	a.sq.remove(m.GetScheduleId())
	delete(a.firing, m.GetScheduleId())
}

// fireSchedules hands every due schedule to Fire, in (time, id) order, and
// moves each to now+ReplyTimeout, when it is handed again unless a
// ScheduleArm or ScheduleDisarm came first.
func (a *expiryActor) fireSchedules(now int64) {
	retry := now + int64(a.opts.ReplyTimeout)
	for {
		e, ok := a.sq.min()
		if !ok || e.at > now {
			return
		}
		conv, id, at := e.conv, e.call, e.at
		if occ, ok := a.firing[id]; ok {
			at = occ // handed again: still the occurrence first handed
		} else {
			if a.firing == nil {
				a.firing = make(map[string]int64)
			}
			a.firing[id] = at
		}
		a.sq.put(conv, id, retry)
		if a.opts.Fire != nil {
			a.opts.Fire(conv, id, time.Unix(0, at).UTC())
		}
	}
}

// scheduleWake returns the earliest schedule time, if any.
func (a *expiryActor) scheduleWake() (int64, bool) {
	e, ok := a.sq.min()
	if !ok {
		return 0, false
	}
	return e.at, true
}
