package memjournal

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

var _ journal.ScheduleStore = (*Store)(nil)

// checkFire checks the schedule fire of an append to conversation id.
func (st *state) checkFire(id string, f *messages.ScheduleFire) error {
	if f == nil {
		return nil
	}
	s := st.schedules[f.GetScheduleId()]
	if s == nil || s.GetConversationId() != id {
		return fmt.Errorf("memjournal: fire of schedule %q in an append to %q: unknown schedule: %w", f.GetScheduleId(), id, journal.ErrStale)
	}
	if !s.GetNext().AsTime().Equal(f.GetOccurrence().AsTime()) {
		return fmt.Errorf("memjournal: fire of schedule %q at %v: its next occurrence is %v: %w", f.GetScheduleId(), f.GetOccurrence().AsTime(), s.GetNext().AsTime(), journal.ErrStale)
	}
	return nil
}

// applyFire applies a checked schedule fire.
func (st *state) applyFire(c *conv, f *messages.ScheduleFire) {
	if f == nil {
		return
	}
	sid := f.GetScheduleId()
	if f.GetNext() == nil {
		delete(st.schedules, sid)
		delete(c.schedules, sid)
		return
	}
	// Replaced, not changed in place: a reader may hold the old record.
	s := clone(st.schedules[sid])
	s.Next = clone(f.GetNext())
	st.schedules[sid] = s
}

// PutSchedule implements journal.ScheduleStore.
func (s *Store) PutSchedule(ctx context.Context, sc *messages.Schedule) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	if err := journal.ValidateSchedule(sc); err != nil {
		return fmt.Errorf("memjournal: %w", err)
	}
	st, err := s.lock()
	if err != nil {
		return err
	}
	defer s.mu.Unlock()
	id := sc.GetConversationId()
	if _, ok := st.deleted[id]; ok {
		return deletedErr("put a schedule of", id)
	}
	c := st.convs[id]
	if c == nil || c.row == nil {
		return fmt.Errorf("memjournal: put schedule %q of %q: %w", sc.GetId(), id, journal.ErrNotFound)
	}
	old := st.schedules[sc.GetId()]
	if old != nil && old.GetConversationId() != id {
		return fmt.Errorf("memjournal: schedule %q belongs to %q, not %q: %w", sc.GetId(), old.GetConversationId(), id, journal.ErrConflict)
	}
	if old == nil && len(c.schedules) >= journal.MaxSchedulesPerConversation {
		return fmt.Errorf("memjournal: %q already has %d schedules: %w", id, len(c.schedules), journal.ErrInvalid)
	}
	st.schedules[sc.GetId()] = clone(sc)
	if c.schedules == nil {
		c.schedules = make(map[string]struct{})
	}
	c.schedules[sc.GetId()] = struct{}{}
	return nil
}

// DeleteSchedule implements journal.ScheduleStore.
func (s *Store) DeleteSchedule(ctx context.Context, conversationID, id string) error {
	st, err := s.lockConversation(ctx, conversationID)
	if err != nil {
		return err
	}
	defer s.mu.Unlock()
	sc := st.schedules[id]
	if sc == nil || sc.GetConversationId() != conversationID {
		return fmt.Errorf("memjournal: delete schedule %q of %q: %w", id, conversationID, journal.ErrNotFound)
	}
	delete(st.schedules, id)
	if c := st.convs[conversationID]; c != nil {
		delete(c.schedules, id)
	}
	return nil
}

// ConversationSchedules implements journal.ScheduleStore.
func (s *Store) ConversationSchedules(ctx context.Context, conversationID string) ([]*messages.Schedule, error) {
	st, err := s.lockConversation(ctx, conversationID)
	if err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	c := st.convs[conversationID]
	if c == nil {
		return nil, nil
	}
	var out []*messages.Schedule
	for id := range c.schedules {
		out = append(out, clone(st.schedules[id]))
	}
	slices.SortFunc(out, func(a, b *messages.Schedule) int { return cmp.Compare(a.GetId(), b.GetId()) })
	return out, nil
}

// ScheduleTimes implements journal.ScheduleStore. fn runs after the lock is
// released, on a copy of the times.
func (s *Store) ScheduleTimes(ctx context.Context, fn func(conversationID, id string, next time.Time) error) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	st, err := s.lock()
	if err != nil {
		return err
	}
	type entry struct {
		conv, id string
		next     time.Time
	}
	all := make([]entry, 0, len(st.schedules))
	for _, sc := range st.schedules {
		all = append(all, entry{sc.GetConversationId(), sc.GetId(), sc.GetNext().AsTime()})
	}
	s.mu.Unlock()
	slices.SortFunc(all, func(a, b entry) int {
		if c := a.next.Compare(b.next); c != 0 {
			return c
		}
		return cmp.Compare(a.id, b.id)
	})
	for _, e := range all {
		if err := fn(e.conv, e.id, e.next); err != nil {
			return err
		}
	}
	return nil
}
