package pebblejournal

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// Key families of scheduled wake-ups. New families need no layout bump: a
// store written before them simply has none of their keys.
const (
	// famSchedule holds the schedule records: famSchedule | conv | id ->
	// messages.Schedule.
	famSchedule byte = 0x0d
	// famScheduleOwner is a retired family: stores written while schedule
	// ids were unique across the store hold famScheduleOwner | id -> conv
	// for each schedule. Nothing reads it; the delete and the replace of a
	// schedule remove its id's key (Store.scheduleOwners), and Check
	// ignores the family. Schedule ids are per conversation.
	famScheduleOwner byte = 0x0e
	// famScheduleByTime orders every schedule by its next occurrence, for
	// the expiry actor's rebuild (keys only, no payloads):
	// famScheduleByTime | seconds | nanos | id | conv -> empty.
	famScheduleByTime byte = 0x1a
)

var (
	_ journal.ScheduleStore   = (*Store)(nil)
	_ journal.ScheduleSkipper = (*Store)(nil)
)

// scheduleTimeKey returns the by-time key of schedule id of conv.
func scheduleTimeKey(at *timestamppb.Timestamp, id, conv string) []byte {
	k := make([]byte, 0, 1+timeLen+len(id)+len(conv)+4)
	k = appendTime(append(k, famScheduleByTime), at.GetSeconds(), at.GetNanos())
	return appendID(appendID(k, id), conv)
}

func scheduleOwnerKey(id string) []byte {
	return appendID([]byte{famScheduleOwner}, id)
}

// hasScheduleOwners reports whether the store holds a key of the retired
// owner family (one seek), for Open to set Store.scheduleOwners.
func (s *Store) hasScheduleOwners() (bool, error) {
	found := false
	err := s.scanKeys([]byte{famScheduleOwner}, familyEnd(famScheduleOwner), func([]byte) error {
		found = true
		return errStopScan
	})
	if err == errStopScan {
		err = nil
	}
	return found, err
}

// dropScheduleOwner stages the removal of the retired owner key of
// schedule id, if the store may hold such keys: a point delete, blind (the
// key may name another conversation's schedule of the same id; nothing
// needs it).
func (t *txn) dropScheduleOwner(id string) {
	if t.s.scheduleOwners {
		_ = t.b.Delete(scheduleOwnerKey(id), nil)
	}
}

// schedKey names a schedule in a txn's state: ids are per conversation.
type schedKey struct{ conv, id string }

// readSchedule reads schedule id of conv, nil if absent.
func (s *Store) readSchedule(conv, id string) (*messages.Schedule, error) {
	k := idKey(famSchedule, conv, id)
	var sc *messages.Schedule
	_, err := s.get(k, func(v []byte) error {
		var err error
		sc, err = decodeSchedule(k, v, conv, id)
		return err
	})
	return sc, err
}

// schedule returns schedule id of conv as this txn leaves it (nil if
// absent): a fire earlier in the same batch wins over the committed record.
func (t *txn) schedule(conv, id string) (*messages.Schedule, error) {
	if sc, ok := t.scheds[schedKey{conv, id}]; ok {
		return sc, nil
	}
	return t.s.readSchedule(conv, id)
}

// checkFire checks the schedule fire of an append to conv and returns the
// schedule it fires (nil if the request has no fire). It stages nothing.
func (t *txn) checkFire(conv string, f *messages.ScheduleFire) (*messages.Schedule, error) {
	if f == nil {
		return nil, nil
	}
	sc, err := t.schedule(conv, f.GetScheduleId())
	if err != nil {
		return nil, err
	}
	if sc == nil {
		return nil, fmt.Errorf("pebblejournal: fire of schedule %q in an append to %q: unknown schedule: %w", f.GetScheduleId(), conv, journal.ErrStale)
	}
	if !sc.GetNext().AsTime().Equal(f.GetOccurrence().AsTime()) {
		return nil, fmt.Errorf("pebblejournal: fire of schedule %q at %v: its next occurrence is %v: %w", f.GetScheduleId(), f.GetOccurrence().AsTime(), sc.GetNext().AsTime(), journal.ErrStale)
	}
	if sc.GetRevision() != f.GetRevision() {
		return nil, fmt.Errorf("pebblejournal: fire of schedule %q of revision %q: it was replaced (revision %q): %w", f.GetScheduleId(), f.GetRevision(), sc.GetRevision(), journal.ErrStale)
	}
	return sc, nil
}

// stageFire writes a checked fire into the batch. It cannot fail: apply
// calls it once nothing of the request can fail any more.
func (t *txn) stageFire(conv string, sc *messages.Schedule, f *messages.ScheduleFire) {
	if sc == nil {
		return
	}
	id := sc.GetId()
	_ = t.b.Delete(scheduleTimeKey(sc.GetNext(), id, conv), nil)
	if t.scheds == nil {
		t.scheds = make(map[schedKey]*messages.Schedule)
	}
	k := schedKey{conv, id}
	if f.GetNext() == nil {
		_ = t.b.Delete(idKey(famSchedule, conv, id), nil)
		t.dropScheduleOwner(id)
		t.scheds[k] = nil
		return
	}
	next := proto.Clone(sc).(*messages.Schedule)
	next.Next = f.GetNext()
	v, err := proto.Marshal(next)
	if err != nil {
		// A record read back from the store always marshals again.
		panic(fmt.Sprintf("pebblejournal: encode schedule %q: %v", id, err))
	}
	_ = t.b.Set(idKey(famSchedule, conv, id), v, nil)
	_ = t.b.Set(scheduleTimeKey(next.GetNext(), id, conv), nil, nil)
	t.scheds[k] = next
}

// PutSchedule implements journal.ScheduleStore.
func (s *Store) PutSchedule(ctx context.Context, sc *messages.Schedule) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	defer s.end()
	if err := journal.ValidateSchedule(sc); err != nil {
		return fmt.Errorf("pebblejournal: %w", err)
	}
	conv, id := sc.GetConversationId(), sc.GetId()
	defer s.lockConv(conv)()
	t := s.newTxn()
	defer t.close()
	cs, err := t.live(conv)
	if err != nil {
		return err
	}
	if ok, err := t.hasRow(cs); err != nil {
		return err
	} else if !ok {
		return fmt.Errorf("pebblejournal: put schedule %q of %q: %w", id, conv, journal.ErrNotFound)
	}
	old, err := s.readSchedule(conv, id)
	if err != nil {
		return err
	}
	if old != nil {
		_ = t.b.Delete(scheduleTimeKey(old.GetNext(), id, conv), nil)
		t.dropScheduleOwner(id)
	} else {
		n := 0
		if err := s.scanKeys(convKey(famSchedule, conv), convEnd(famSchedule, conv), func([]byte) error { n++; return nil }); err != nil {
			return err
		}
		if n >= journal.MaxSchedulesPerConversation {
			return fmt.Errorf("pebblejournal: %q already has %d schedules: %w", conv, n, journal.ErrInvalid)
		}
	}
	v, err := proto.Marshal(sc)
	if err != nil {
		return fmt.Errorf("pebblejournal: encode schedule %q: %w", id, journal.ErrInvalid)
	}
	_ = t.b.Set(idKey(famSchedule, conv, id), v, nil)
	_ = t.b.Set(scheduleTimeKey(sc.GetNext(), id, conv), nil, nil)
	return t.commit()
}

// DeleteSchedule implements journal.ScheduleStore.
func (s *Store) DeleteSchedule(ctx context.Context, conversationID, id string) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	defer s.end()
	if err := journal.ValidateID("conversation id", conversationID); err != nil {
		return fmt.Errorf("pebblejournal: %w", err)
	}
	if err := journal.ValidateID("schedule id", id); err != nil {
		return fmt.Errorf("pebblejournal: %w", err)
	}
	defer s.lockConv(conversationID)()
	sc, err := s.readSchedule(conversationID, id)
	if err != nil {
		return err
	}
	if sc == nil {
		return fmt.Errorf("pebblejournal: delete schedule %q of %q: %w", id, conversationID, journal.ErrNotFound)
	}
	t := s.newTxn()
	defer t.close()
	t.deleteSchedule(conversationID, sc)
	return t.commit()
}

// SkipSchedule implements journal.ScheduleSkipper: the check and the move
// of an append's fire (checkFire, stageFire), without the append.
func (s *Store) SkipSchedule(ctx context.Context, conversationID string, f *messages.ScheduleFire) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	defer s.end()
	if err := journal.ValidateID("conversation id", conversationID); err != nil {
		return fmt.Errorf("pebblejournal: %w", err)
	}
	if err := journal.ValidateScheduleFire(f); err != nil {
		return fmt.Errorf("pebblejournal: %w", err)
	}
	defer s.lockConv(conversationID)()
	t := s.newTxn()
	defer t.close()
	sc, err := t.checkFire(conversationID, f)
	if err != nil {
		return err
	}
	t.stageFire(conversationID, sc, f)
	return t.commit()
}

func (t *txn) deleteSchedule(conv string, sc *messages.Schedule) {
	_ = t.b.Delete(idKey(famSchedule, conv, sc.GetId()), nil)
	t.dropScheduleOwner(sc.GetId())
	_ = t.b.Delete(scheduleTimeKey(sc.GetNext(), sc.GetId(), conv), nil)
}

// deleteSchedules stages the removal of every schedule of conv (for
// DeleteConversation).
func (t *txn) deleteSchedules(conv string) error {
	scs, err := t.s.conversationSchedules(conv)
	if err != nil {
		return err
	}
	for _, sc := range scs {
		t.deleteSchedule(conv, sc)
	}
	return nil
}

// ConversationSchedules implements journal.ScheduleStore.
func (s *Store) ConversationSchedules(ctx context.Context, conversationID string) ([]*messages.Schedule, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	defer s.end()
	if err := journal.ValidateID("conversation id", conversationID); err != nil {
		return nil, fmt.Errorf("pebblejournal: %w", err)
	}
	return s.conversationSchedules(conversationID)
}

func (s *Store) conversationSchedules(conv string) ([]*messages.Schedule, error) {
	var out []*messages.Schedule
	prefix := convKey(famSchedule, conv)
	err := s.scan(prefix, convEnd(famSchedule, conv), func(k, v []byte) error {
		id, rest, ok := decodeID(k[len(prefix):])
		if !ok || len(rest) != 0 {
			return corruptKey(k, "malformed schedule id")
		}
		sc, err := decodeSchedule(k, v, conv, id)
		if err != nil {
			return err
		}
		out = append(out, sc)
		return nil
	})
	return out, err
}

// scheduleTimesPage is how many schedules ScheduleTimes reads per scan; it
// calls fn between pages without holding the iterator or the store's gate.
const scheduleTimesPage = 4096

// ScheduleTimes implements journal.ScheduleStore: scans of the by-time
// index, keys only, a page at a time. fn runs with no iterator open and
// the store's gate released (as Deadlines' does), so it may read the
// Store, and a Close meanwhile neither waits on it nor deadlocks with it.
// A key that does not parse is passed over and reported at the end.
func (s *Store) ScheduleTimes(ctx context.Context, fn func(conversationID, id string, next time.Time) error) error {
	type entry struct {
		conv, id string
		at       time.Time
	}
	lower, upper := []byte{famScheduleByTime}, familyEnd(famScheduleByTime)
	page := make([]entry, 0, scheduleTimesPage)
	var bad journal.PassedOver
	for {
		page = page[:0]
		var next []byte
		if err := s.begin(ctx); err != nil {
			return err
		}
		read := 0
		err := s.scanKeys(lower, upper, func(k []byte) error {
			if read == scheduleTimesPage {
				next = append([]byte(nil), k...)
				return errStopScan
			}
			read++
			at, id, conv, err := parseScheduleTimeKey(k)
			if err != nil {
				bad.Add(err)
				return nil
			}
			page = append(page, entry{conv: conv, id: id, at: at})
			return nil
		})
		s.end()
		if err != nil && err != errStopScan {
			return err
		}
		for _, e := range page {
			if err := s.begin(ctx); err != nil {
				return err
			}
			s.end()
			if err := fn(e.conv, e.id, e.at); err != nil {
				return err
			}
		}
		if next == nil {
			return bad.Err("pebblejournal: schedule times")
		}
		lower = next
	}
}

// parseScheduleTimeKey decodes a schedule-by-time key: the same layout as
// a deadline-by-time key under another family, decoded in place (the
// rebuild reads a million of them).
func parseScheduleTimeKey(k []byte) (at time.Time, id, conv string, err error) {
	if len(k) < 1+timeLen || k[0] != famScheduleByTime {
		return time.Time{}, "", "", corruptKey(k, "too short")
	}
	sec := int64(binary.BigEndian.Uint64(k[1:9]) ^ (1 << 63))
	nanos := int64(binary.BigEndian.Uint32(k[9:13]))
	if nanos >= 1e9 {
		return time.Time{}, "", "", corruptKey(k, "invalid time")
	}
	id, rest, ok := decodeID(k[1+timeLen:])
	if !ok {
		return time.Time{}, "", "", corruptKey(k, "malformed schedule id")
	}
	conv, rest, ok = decodeID(rest)
	if !ok || len(rest) != 0 || id == "" || conv == "" {
		return time.Time{}, "", "", corruptKey(k, "malformed conversation id")
	}
	return time.Unix(sec, nanos), id, conv, nil
}

// checkSchedule is Check's step for a schedule record (key k, value v) of
// conversation conv, rest the key after the conversation: the record
// decodes and names its key's ids, and its by-time entry exists. (A key of
// the retired owner family is neither required nor checked.)
func (s *Store) checkSchedule(r *CheckReport, k, v []byte, conv string, rest []byte) {
	id, tail, ok := decodeID(rest)
	if !ok || len(tail) != 0 {
		r.problem("malformed schedule key %s", keyString(k))
		return
	}
	sc, err := decodeSchedule(k, v, conv, id)
	if err != nil {
		r.problem("schedule %q of conversation %q: %v", id, conv, err)
		return
	}
	if _, found, err := s.checkGet(scheduleTimeKey(sc.GetNext(), id, conv)); err != nil || !found {
		r.problem("schedule %q of conversation %q: missing from the by-time index (%v)", id, conv, err)
	}
}

// checkScheduleTime is Check's step for a schedule-by-time key: its record
// exists and says that time.
func (s *Store) checkScheduleTime(r *CheckReport, k []byte) {
	at, id, conv, err := parseScheduleTimeKey(k)
	if err != nil {
		r.problem("%v", err)
		return
	}
	sc, err := s.readSchedule(conv, id)
	if err != nil || sc == nil || !sc.GetNext().AsTime().Equal(at) {
		r.problem("by-time schedule %q (conversation %q): no schedule record at that time (%v)", id, conv, err)
	}
}
