package pgjournal

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

var (
	_ journal.ScheduleStore   = (*Store)(nil)
	_ journal.ScheduleSkipper = (*Store)(nil)
)

// schedState is a schedule an append batch fires: as read, then as the
// batch's requests leave it.
type schedState struct {
	cur     *messages.Schedule // nil: absent or removed
	dirty   bool
	corrupt error // the stored row did not decode: a fire of it fails with it
}

// schedKey names a schedule: ids are per conversation.
type schedKey struct{ conv, id string }

// fireKeys returns the conversations and ids of the schedules reqs fire,
// as two parallel lists.
func fireKeys(reqs []*messages.AppendRequest, ok []bool) (convs, ids [][]byte) {
	for i, req := range reqs {
		if f := req.GetScheduleFire(); ok[i] && f != nil {
			convs = append(convs, []byte(req.GetConversationId()))
			ids = append(ids, []byte(f.GetScheduleId()))
		}
	}
	return convs, ids
}

// readSchedules reads, inside the batch's transaction (the conversations'
// locks held), the schedules the batch fires (schedule ids[i] of
// conversation convs[i]). A round trip only for a batch that fires one.
func (b *batch) readSchedules(ctx context.Context, conn *pgx.Conn, convs, ids [][]byte) error {
	if len(ids) == 0 {
		return nil
	}
	b.scheds = make(map[schedKey]*schedState, len(ids))
	for i, id := range ids {
		b.scheds[schedKey{string(convs[i]), string(id)}] = &schedState{}
	}
	rows, err := conn.Query(ctx, `SELECT s.conv, s.id, s.data FROM lz_schedules s
		JOIN unnest($1::bytea[], $2::bytea[]) AS k(conv, id) ON s.conv = k.conv AND s.id = k.id FOR UPDATE OF s`, convs, ids)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var conv, id, data []byte
		if err := rows.Scan(&conv, &id, &data); err != nil {
			return err
		}
		sc, err := decodeSchedule(id, data, string(conv))
		if err != nil {
			b.scheds[schedKey{string(conv), string(id)}].corrupt = err
			continue
		}
		b.scheds[schedKey{string(conv), string(id)}].cur = sc
	}
	return rows.Err()
}

// checkFire checks the schedule fire of an append to conv.
func (b *batch) checkFire(conv string, f *messages.ScheduleFire) error {
	if f == nil {
		return nil
	}
	var cur *messages.Schedule
	if st := b.scheds[schedKey{conv, f.GetScheduleId()}]; st != nil {
		cur = st.cur
	}
	return checkFireOf(conv, cur, f)
}

// checkFireOf checks fire f of conv against cur, the stored schedule (nil
// if absent).
func checkFireOf(conv string, cur *messages.Schedule, f *messages.ScheduleFire) error {
	if cur == nil {
		return fmt.Errorf("fire of schedule %q in an append to %q: unknown schedule: %w", f.GetScheduleId(), conv, journal.ErrStale)
	}
	if !cur.GetNext().AsTime().Equal(f.GetOccurrence().AsTime()) {
		return fmt.Errorf("fire of schedule %q at %v: its next occurrence is %v: %w", f.GetScheduleId(), f.GetOccurrence().AsTime(), cur.GetNext().AsTime(), journal.ErrStale)
	}
	if cur.GetRevision() != f.GetRevision() {
		return fmt.Errorf("fire of schedule %q of revision %q: it was replaced (revision %q): %w", f.GetScheduleId(), f.GetRevision(), cur.GetRevision(), journal.ErrStale)
	}
	return nil
}

// applyFire applies a checked fire of an append to conv to the batch's
// state.
func (b *batch) applyFire(conv string, f *messages.ScheduleFire) {
	if f == nil {
		return
	}
	st := b.scheds[schedKey{conv, f.GetScheduleId()}]
	st.dirty = true
	if f.GetNext() == nil {
		st.cur = nil
		return
	}
	next := proto.Clone(st.cur).(*messages.Schedule)
	next.Next = f.GetNext()
	st.cur = next
}

// queueSchedules queues the writes of the schedules the batch fired.
func (b *batch) queueSchedules(pb *pgx.Batch) error {
	var dconv, did, uconv, uid, udata [][]byte
	var us []int64
	var un []int32
	for k, st := range b.scheds {
		if !st.dirty {
			continue
		}
		if st.cur == nil {
			dconv, did = append(dconv, []byte(k.conv)), append(did, []byte(k.id))
			continue
		}
		data, err := proto.Marshal(st.cur)
		if err != nil {
			return fmt.Errorf("pgjournal: append: encode schedule %q of %q: %w", k.id, k.conv, err)
		}
		uconv, uid, udata = append(uconv, []byte(k.conv)), append(uid, []byte(k.id)), append(udata, data)
		us, un = append(us, st.cur.GetNext().GetSeconds()), append(un, st.cur.GetNext().GetNanos())
	}
	if len(did) > 0 {
		pb.Queue(`DELETE FROM lz_schedules s USING unnest($1::bytea[], $2::bytea[]) AS k(conv, id)
			WHERE s.conv = k.conv AND s.id = k.id`, dconv, did)
	}
	if len(uid) > 0 {
		pb.Queue(`UPDATE lz_schedules s SET next_s = u.s, next_n = u.n, data = u.data
			FROM unnest($1::bytea[], $2::bytea[], $3::int8[], $4::int4[], $5::bytea[]) AS u(conv, id, s, n, data)
			WHERE s.conv = u.conv AND s.id = u.id`, uconv, uid, us, un, udata)
	}
	return nil
}

// PutSchedule implements journal.ScheduleStore.
func (s *Store) PutSchedule(ctx context.Context, sc *messages.Schedule) error {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	if err := journal.ValidateSchedule(sc); err != nil {
		return fmt.Errorf("pgjournal: %w", err)
	}
	conv, id := sc.GetConversationId(), sc.GetId()
	data, err := proto.Marshal(sc)
	if err != nil {
		return fmt.Errorf("pgjournal: encode schedule %q: %w", id, journal.ErrInvalid)
	}
	return s.writeTx(ctx, "put schedule", conv, func(tx pgx.Tx) error {
		var deleted, hasRow bool
		err := tx.QueryRow(ctx, "SELECT deleted, row IS NOT NULL FROM lz_conversations WHERE id = $1", []byte(conv)).Scan(&deleted, &hasRow)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if deleted {
			return fmt.Errorf("put schedule %q: conversation %q: %w", id, conv, journal.ErrDeleted)
		}
		if !hasRow {
			return fmt.Errorf("put schedule %q of %q: %w", id, conv, journal.ErrNotFound)
		}
		var exists bool
		err = tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM lz_schedules WHERE conv = $1 AND id = $2)", []byte(conv), []byte(id)).Scan(&exists)
		if err != nil {
			return err
		}
		if !exists {
			var n int
			if err := tx.QueryRow(ctx, "SELECT count(*) FROM lz_schedules WHERE conv = $1", []byte(conv)).Scan(&n); err != nil {
				return err
			}
			if n >= journal.MaxSchedulesPerConversation {
				return fmt.Errorf("%q already has %d schedules: %w", conv, n, journal.ErrInvalid)
			}
		}
		// Ids are per conversation, whose lock the write holds.
		_, err = tx.Exec(ctx, `INSERT INTO lz_schedules (conv, id, next_s, next_n, data) VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (conv, id) DO UPDATE SET next_s = excluded.next_s, next_n = excluded.next_n, data = excluded.data`,
			[]byte(conv), []byte(id), sc.GetNext().GetSeconds(), sc.GetNext().GetNanos(), data)
		return err
	})
}

// DeleteSchedule implements journal.ScheduleStore.
func (s *Store) DeleteSchedule(ctx context.Context, conversationID, id string) error {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	if err := validConv(conversationID); err != nil {
		return err
	}
	if err := journal.ValidateID("schedule id", id); err != nil {
		return fmt.Errorf("pgjournal: %w", err)
	}
	return s.writeTx(ctx, "delete schedule", conversationID, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, "DELETE FROM lz_schedules WHERE conv = $1 AND id = $2", []byte(conversationID), []byte(id))
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("delete schedule %q of %q: %w", id, conversationID, journal.ErrNotFound)
		}
		return nil
	})
}

// SkipSchedule implements journal.ScheduleSkipper: the check and the move
// of an append's fire, without the append, under the conversation's lock.
func (s *Store) SkipSchedule(ctx context.Context, conversationID string, f *messages.ScheduleFire) error {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	if err := validConv(conversationID); err != nil {
		return err
	}
	if err := journal.ValidateScheduleFire(f); err != nil {
		return fmt.Errorf("pgjournal: %w", err)
	}
	conv, id := []byte(conversationID), []byte(f.GetScheduleId())
	return s.writeTx(ctx, "skip schedule", conversationID, func(tx pgx.Tx) error {
		var cur *messages.Schedule
		var data []byte
		err := tx.QueryRow(ctx, "SELECT data FROM lz_schedules WHERE conv = $1 AND id = $2 FOR UPDATE", conv, id).Scan(&data)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return err
		default:
			if cur, err = decodeSchedule(id, data, conversationID); err != nil {
				return err
			}
		}
		if err := checkFireOf(conversationID, cur, f); err != nil {
			return err
		}
		if f.GetNext() == nil {
			_, err = tx.Exec(ctx, "DELETE FROM lz_schedules WHERE conv = $1 AND id = $2", conv, id)
			return err
		}
		next := proto.Clone(cur).(*messages.Schedule)
		next.Next = f.GetNext()
		if data, err = proto.Marshal(next); err != nil {
			return fmt.Errorf("encode schedule %q of %q: %w", f.GetScheduleId(), conversationID, err)
		}
		_, err = tx.Exec(ctx, "UPDATE lz_schedules SET next_s = $3, next_n = $4, data = $5 WHERE conv = $1 AND id = $2",
			conv, id, next.GetNext().GetSeconds(), next.GetNext().GetNanos(), data)
		return err
	})
}

// ConversationSchedules implements journal.ScheduleStore.
func (s *Store) ConversationSchedules(ctx context.Context, conversationID string) ([]*messages.Schedule, error) {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()
	if err := validConv(conversationID); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, "SELECT id, data FROM lz_schedules WHERE conv = $1 ORDER BY id", []byte(conversationID))
	if err != nil {
		return nil, s.wrap(ctx, "schedules", err)
	}
	defer rows.Close()
	var out []*messages.Schedule
	for rows.Next() {
		var id, data []byte
		if err := rows.Scan(&id, &data); err != nil {
			return nil, s.wrap(ctx, "schedules", err)
		}
		sc, err := decodeSchedule(id, data, conversationID)
		if err != nil {
			return nil, err
		}
		out = append(out, sc)
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrap(ctx, "schedules", err)
	}
	return out, nil
}

// scheduleTimesPage is how many schedules ScheduleTimes reads per query.
const scheduleTimesPage = 4096

// ScheduleTimes implements journal.ScheduleStore: pages of the by-time
// index (keyset on next_s, next_n, id, conv). fn runs between pages, with no
// query open and no connection held, so it may read the Store even
// through a pool of one connection. A row no write could have stored (an
// id or conversation id that journal.ValidateID refuses, a time outside
// the years 1 to 9999 or nanoseconds outside [0, 1e9)) is passed over and
// reported at the end, as Deadlines' rows are.
func (s *Store) ScheduleTimes(ctx context.Context, fn func(conversationID, id string, next time.Time) error) error {
	page := make([]scheduleTime, 0, scheduleTimesPage)
	var after *scheduleTime
	var bad journal.PassedOver
	for {
		page = page[:0]
		if err := s.schedulePage(ctx, after, &page); err != nil {
			return err
		}
		for _, e := range page {
			next, err := e.time()
			if err != nil {
				bad.Add(err)
				continue
			}
			if err := s.stillOpen(ctx); err != nil {
				return err
			}
			if err := fn(string(e.conv), string(e.id), next); err != nil {
				return err
			}
		}
		if len(page) < scheduleTimesPage {
			return bad.Err("pgjournal: schedule times")
		}
		last := page[len(page)-1]
		after = &last
	}
}

// scheduleTime is one row of ScheduleTimes.
type scheduleTime struct {
	conv, id []byte
	sec      int64
	nanos    int32
}

// time checks the row's ids and time as a write checks them, and returns
// its time; a row that fails is journal.ErrCorrupt.
func (e scheduleTime) time() (time.Time, error) {
	if err := journal.ValidateID("schedule id", string(e.id)); err != nil {
		return time.Time{}, journal.Corruptf("pgjournal: schedule time of %q: %v", e.id, err)
	}
	if err := journal.ValidateID("conversation id", string(e.conv)); err != nil {
		return time.Time{}, journal.Corruptf("pgjournal: schedule time of %q: %v", e.id, err)
	}
	ts := &timestamppb.Timestamp{Seconds: e.sec, Nanos: e.nanos}
	if err := ts.CheckValid(); err != nil {
		return time.Time{}, journal.Corruptf("pgjournal: schedule time of %q in %q: %v", e.id, e.conv, err)
	}
	return ts.AsTime(), nil
}

// schedulePage reads the next page of ScheduleTimes, after the row after
// (nil: from the start), into page.
func (s *Store) schedulePage(ctx context.Context, after *scheduleTime, page *[]scheduleTime) error {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	var rows pgx.Rows
	if after == nil {
		rows, err = s.pool.Query(ctx, "SELECT conv, id, next_s, next_n FROM lz_schedules ORDER BY next_s, next_n, id, conv LIMIT $1", scheduleTimesPage)
	} else {
		rows, err = s.pool.Query(ctx, "SELECT conv, id, next_s, next_n FROM lz_schedules WHERE (next_s, next_n, id, conv) > ($1, $2, $3, $4) ORDER BY next_s, next_n, id, conv LIMIT $5",
			after.sec, after.nanos, after.id, after.conv, scheduleTimesPage)
	}
	if err != nil {
		return s.wrap(ctx, "schedule times", err)
	}
	defer rows.Close()
	for rows.Next() {
		var e scheduleTime
		if err := rows.Scan(&e.conv, &e.id, &e.sec, &e.nanos); err != nil {
			return s.wrap(ctx, "schedule times", err)
		}
		*page = append(*page, e)
	}
	if err := rows.Err(); err != nil {
		return s.wrap(ctx, "schedule times", err)
	}
	return nil
}

// decodeSchedule decodes the schedule stored under id of conv: the record
// names its row's ids and holds what every stored schedule holds
// (journal.ValidateSchedule: a next occurrence, a positive interval if any,
// a payload), so that no reader computes with a record no write could have
// stored. Anything else is journal.ErrCorrupt.
func decodeSchedule(id, data []byte, conv string) (*messages.Schedule, error) {
	sc, err := decode(data, &messages.Schedule{}, "schedule %q", id)
	if err != nil {
		return nil, err
	}
	if sc.GetId() != string(id) || sc.GetConversationId() != conv {
		return nil, journal.Corruptf("pgjournal: schedule %q holds schedule %q of %q", id, sc.GetId(), sc.GetConversationId())
	}
	if err := journal.ValidateSchedule(sc); err != nil {
		return nil, journal.Corruptf("pgjournal: schedule %q: %v", id, err)
	}
	return sc, nil
}
