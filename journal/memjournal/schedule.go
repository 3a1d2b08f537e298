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

var (
	_ journal.ScheduleStore   = (*Store)(nil)
	_ journal.ScheduleSkipper = (*Store)(nil)
)

// checkFire checks the schedule fire of an append to conversation id.
func (st *state) checkFire(id string, f *messages.ScheduleFire) error {
	if f == nil {
		return nil
	}
	s := st.schedules[scheduleKey{id, f.GetScheduleId()}]
	if s == nil {
		return fmt.Errorf("memjournal: fire of schedule %q in an append to %q: unknown schedule: %w", f.GetScheduleId(), id, journal.ErrStale)
	}
	if !s.GetNext().AsTime().Equal(f.GetOccurrence().AsTime()) {
		return fmt.Errorf("memjournal: fire of schedule %q at %v: its next occurrence is %v: %w", f.GetScheduleId(), f.GetOccurrence().AsTime(), s.GetNext().AsTime(), journal.ErrStale)
	}
	if s.GetRevision() != f.GetRevision() {
		return fmt.Errorf("memjournal: fire of schedule %q of revision %q: it was replaced (revision %q): %w", f.GetScheduleId(), f.GetRevision(), s.GetRevision(), journal.ErrStale)
	}
	return nil
}

// applyFire applies a checked schedule fire of conversation id.
func (st *state) applyFire(c *conv, id string, f *messages.ScheduleFire) {
	if f == nil {
		return
	}
	sid := f.GetScheduleId()
	k := scheduleKey{id, sid}
	if f.GetNext() == nil {
		delete(st.schedules, k)
		delete(c.schedules, sid)
		return
	}
	// Replaced, not changed in place: a reader may hold the old record.
	s := clone(st.schedules[k])
	s.Next = clone(f.GetNext())
	st.schedules[k] = s
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
	k := scheduleKey{id, sc.GetId()}
	old := st.schedules[k]
	if old == nil && len(c.schedules) >= journal.MaxSchedulesPerConversation {
		return fmt.Errorf("memjournal: %q already has %d schedules: %w", id, len(c.schedules), journal.ErrInvalid)
	}
	st.schedules[k] = clone(sc)
	if c.schedules == nil {
		c.schedules = make(map[string]struct{})
	}
	c.schedules[sc.GetId()] = struct{}{}
	return nil
}

// DeleteSchedule implements journal.ScheduleStore.
func (s *Store) DeleteSchedule(ctx context.Context, conversationID, id string) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	if err := journal.ValidateID("conversation id", conversationID); err != nil {
		return fmt.Errorf("memjournal: %w", err)
	}
	if err := journal.ValidateID("schedule id", id); err != nil {
		return fmt.Errorf("memjournal: %w", err)
	}
	st, err := s.lock()
	if err != nil {
		return err
	}
	defer s.mu.Unlock()
	k := scheduleKey{conversationID, id}
	if st.schedules[k] == nil {
		return fmt.Errorf("memjournal: delete schedule %q of %q: %w", id, conversationID, journal.ErrNotFound)
	}
	delete(st.schedules, k)
	if c := st.convs[conversationID]; c != nil {
		delete(c.schedules, id)
	}
	return nil
}

// SkipSchedule implements journal.ScheduleSkipper: the check and the move
// of an append's fire, without the append.
func (s *Store) SkipSchedule(ctx context.Context, conversationID string, f *messages.ScheduleFire) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	if err := journal.ValidateID("conversation id", conversationID); err != nil {
		return fmt.Errorf("memjournal: %w", err)
	}
	if err := journal.ValidateScheduleFire(f); err != nil {
		return fmt.Errorf("memjournal: %w", err)
	}
	st, err := s.lock()
	if err != nil {
		return err
	}
	defer s.mu.Unlock()
	if err := st.checkFire(conversationID, f); err != nil {
		return err
	}
	st.applyFire(st.convs[conversationID], conversationID, f)
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
		out = append(out, clone(st.schedules[scheduleKey{conversationID, id}]))
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
		if c := cmp.Compare(a.id, b.id); c != 0 {
			return c
		}
		return cmp.Compare(a.conv, b.conv)
	})
	for _, e := range all {
		if err := s.enter(ctx); err != nil {
			return err
		}
		if err := fn(e.conv, e.id, e.next); err != nil {
			return err
		}
	}
	return nil
}
