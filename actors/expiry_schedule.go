package actors

import (
	"time"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// This file holds the expiry actor's timers of scheduled wake-ups. A
// schedule's durable record (journal.ScheduleStore) says when it fires
// next; the actor keeps one heap entry per schedule (its conversation, id
// and next time: ids are per conversation, so the pair names a schedule)
// and, when one is
// due, hands the occurrence to ExpiryOptions.Fire. It never writes: the
// conversation records the occurrence and the next one atomically with the
// wake's user message (AppendRequest.ScheduleFire), and the journal
// actor's commit report moves the timer (ScheduleArm) or removes it
// (ScheduleDisarm). Until that report comes, a fired entry waits
// ReplyTimeout and is handed to Fire again: a lost delivery is retried,
// and the Store's check of the occurrence makes a second delivery of a
// recorded one write nothing.
//
// Each timer keeps the revision of the definition it was armed for, when
// known. A commit report names the revision that fired, and is sent only
// after the Store's commit: the schedule may have been made again under
// its id meanwhile (a new revision, armed by the Runtime), and a report
// that comes after that arm must not remove or move the new timer. So a
// report (ScheduleArm.after_fire, a ScheduleDisarm with a revision) whose
// revision is not the timer's known one is ignored. Likewise a delivery
// that read the schedule gone disarms it only if the timer still waits on
// the occurrence it handed out (ScheduleDisarm.occurrence): an arm since
// (the schedule made again after the read) keeps it. A timer left armed
// wrongly corrects itself when it fires (the delivery reads the record);
// a timer removed wrongly would not.

// scheduleKey names a schedule: two conversations may each hold one of
// the same id.
type scheduleKey struct{ conv, id string }

// scheduleEntry is one schedule's timer: 56 bytes plus the bytes of its
// three strings, which it shares with the message it came from.
type scheduleEntry struct {
	at       int64 // Unix nanoseconds
	conv, id string
	rev      string // the armed definition's revision; "" when not known
}

// before orders entries by time, then id, then conversation (the order of
// journal.ScheduleStore.ScheduleTimes).
func (e *scheduleEntry) before(o *scheduleEntry) bool {
	if e.at != o.at {
		return e.at < o.at
	}
	if e.id != o.id {
		return e.id < o.id
	}
	return e.conv < o.conv
}

// scheduleHeap is a min-heap of schedule timers ordered as before says,
// with an index from (conversation, id) to heap position, as deadlineHeap
// is for tool calls: at most one entry per schedule. The two heaps' code
// is written out twice on purpose: one generic heap over both (key and
// order through a pointer-method constraint) made BenchmarkExpirySchedule
// about 25% slower, on the deadlines' path.
type scheduleHeap struct {
	entries []scheduleEntry
	index   map[scheduleKey]int
}

func newScheduleHeap() *scheduleHeap {
	return &scheduleHeap{index: make(map[scheduleKey]int)}
}

// put sets the timer of schedule id of conv, of revision rev, replacing
// the one it had.
func (h *scheduleHeap) put(conv, id, rev string, at int64) {
	if i, ok := h.index[scheduleKey{conv, id}]; ok {
		old := h.entries[i].at
		h.entries[i].at = at
		h.entries[i].rev = rev
		if at < old {
			h.up(i)
		} else {
			h.down(i)
		}
		return
	}
	h.entries = append(h.entries, scheduleEntry{at: at, conv: conv, id: id, rev: rev})
	h.up(len(h.entries) - 1) // sets the index of the new entry
}

// revision returns the revision of the timer of schedule id of conv ("" when
// not known), and whether it has one.
func (h *scheduleHeap) revision(conv, id string) (string, bool) {
	i, ok := h.index[scheduleKey{conv, id}]
	if !ok {
		return "", false
	}
	return h.entries[i].rev, true
}

// remove deletes the timer of schedule id of conv, if it has one.
func (h *scheduleHeap) remove(conv, id string) {
	k := scheduleKey{conv, id}
	i, ok := h.index[k]
	if !ok {
		return
	}
	last := len(h.entries) - 1
	delete(h.index, k)
	if i != last {
		h.entries[i] = h.entries[last]
	}
	h.entries[last] = scheduleEntry{} // drop the string references
	h.entries = h.entries[:last]
	if i != last && !h.up(i) {
		h.down(i)
	}
	if len(h.entries) == 0 && cap(h.entries) > 1024 {
		h.entries = nil // give a drained heap's memory back
		h.index = make(map[scheduleKey]int)
	}
}

// min returns the earliest entry, if any. The pointer is valid until the
// next change of the heap.
func (h *scheduleHeap) min() (*scheduleEntry, bool) {
	if len(h.entries) == 0 {
		return nil, false
	}
	return &h.entries[0], true
}

// up moves entry i towards the root and records its final position in the
// index; it reports whether it moved.
func (h *scheduleHeap) up(i int) bool {
	e := h.entries[i]
	start := i
	for i > 0 {
		p := (i - 1) / 2
		if !e.before(&h.entries[p]) {
			break
		}
		h.entries[i] = h.entries[p]
		h.index[scheduleKey{h.entries[i].conv, h.entries[i].id}] = i
		i = p
	}
	h.entries[i] = e
	h.index[scheduleKey{e.conv, e.id}] = i
	return i != start
}

// down moves entry i towards the leaves and records its final position in
// the index.
func (h *scheduleHeap) down(i int) {
	e := h.entries[i]
	n := len(h.entries)
	for {
		c := 2*i + 1
		if c >= n {
			break
		}
		if r := c + 1; r < n && h.entries[r].before(&h.entries[c]) {
			c = r
		}
		if !h.entries[c].before(&e) {
			break
		}
		h.entries[i] = h.entries[c]
		h.index[scheduleKey{h.entries[i].conv, h.entries[i].id}] = i
		i = c
	}
	h.entries[i] = e
	h.index[scheduleKey{e.conv, e.id}] = i
}

// rebuildSchedules reads the schedule times of the Store into sq, if the Store
// keeps schedules. It returns how many it read.
func (a *expiryActor) rebuildSchedules() (int, error) {
	ss, ok := a.opts.Store.(journal.ScheduleStore)
	if !ok {
		return 0, nil
	}
	n := 0
	err := ss.ScheduleTimes(a.opts.Context, func(conv, id string, next time.Time) error {
		if a.opts.Owns != nil && !a.opts.Owns(conv) {
			return nil
		}
		a.sq.put(conv, id, "", timeNanos(next))
		n++
		return nil
	})
	return n, err
}

// onScheduleArm arms or moves the timer of one schedule. A commit report
// (after_fire) of a revision other than the timer's known one is ignored.
func (a *expiryActor) onScheduleArm(m *messages.ScheduleArm) {
	if journal.ValidateID("conversation id", m.GetConversationId()) != nil || journal.ValidateID("schedule id", m.GetScheduleId()) != nil ||
		m.GetNext() == nil || m.GetNext().CheckValid() != nil ||
		(m.GetRevision() != "" && journal.ValidateID("schedule revision", m.GetRevision()) != nil) {
		a.opts.Logger.Warn("actors: expiry: ignoring a bad ScheduleArm", "schedule", m.GetScheduleId())
		return
	}
	k := scheduleKey{m.GetConversationId(), m.GetScheduleId()}
	if m.GetAfterFire() && a.otherRevision(k, m.GetRevision()) {
		return
	}
	delete(a.firing, k)
	if a.opts.Owns != nil && !a.opts.Owns(k.conv) {
		a.sq.remove(k.conv, k.id) // armed by a member that no longer owns it
		return
	}
	a.sq.put(m.GetConversationId(), m.GetScheduleId(), m.GetRevision(), unixNanos(m.GetNext()))
}

// onScheduleDisarm removes the timer of one schedule, unless the disarm
// names a revision other than the timer's known one, or an occurrence the
// timer no longer waits on (it was armed again since it handed it out).
func (a *expiryActor) onScheduleDisarm(m *messages.ScheduleDisarm) {
	k := scheduleKey{m.GetConversationId(), m.GetScheduleId()}
	if m.GetRevision() != "" && a.otherRevision(k, m.GetRevision()) {
		return
	}
	if occ := m.GetOccurrence(); occ != nil {
		if at, ok := a.firing[k]; !ok || occ.CheckValid() != nil || at != unixNanos(occ) {
			return
		}
	}
	a.sq.remove(k.conv, k.id)
	delete(a.firing, k)
}

// otherRevision reports whether the timer of k is known to be of a
// revision other than rev: a report of rev is then of a definition
// replaced since, and must leave the timer alone. A timer of no known
// revision (read from the Store, or armed without one) is not.
func (a *expiryActor) otherRevision(k scheduleKey, rev string) bool {
	cur, ok := a.sq.revision(k.conv, k.id)
	return ok && cur != "" && cur != rev
}

// fireSchedules hands every due schedule to Fire, in (time, id,
// conversation) order, and
// moves each to now+ReplyTimeout, when it is handed again unless a
// ScheduleArm or ScheduleDisarm came first.
func (a *expiryActor) fireSchedules(now int64) {
	retry := addNanos(now, int64(a.opts.ReplyTimeout))
	for {
		e, ok := a.sq.min()
		if !ok || e.at > now {
			return
		}
		conv, id, rev, at := e.conv, e.id, e.rev, e.at
		k := scheduleKey{conv, id}
		if occ, ok := a.firing[k]; ok {
			at = occ // handed again: still the occurrence first handed
		} else {
			if a.firing == nil {
				a.firing = make(map[scheduleKey]int64)
			}
			a.firing[k] = at
		}
		a.sq.put(conv, id, rev, retry)
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
