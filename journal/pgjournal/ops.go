package pgjournal

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// decode unmarshals data into a new M, or fails with ErrCorrupt naming what:
// bytes that do not decode, a record holding an enum number its enum does
// not declare (journal.CheckEnums: proto3 decodes one, no write stores
// one), or more bytes than any write stores of M (maxStored), which it
// refuses before decoding them.
func decode[M proto.Message](data []byte, m M, what string, args ...any) (M, error) {
	if max := maxStored(m); len(data) > max {
		return m, journal.Corruptf("pgjournal: "+what+" (%d bytes, more than the %d any write stores)", append(args, len(data), max)...)
	}
	if err := proto.Unmarshal(data, m); err != nil {
		return m, journal.Corruptf("pgjournal: "+what+" (%v)", append(args, err)...)
	}
	if err := journal.CheckEnums(m); err != nil {
		return m, journal.Corruptf("pgjournal: "+what+": %v", append(args, err)...)
	}
	return m, nil
}

// storedSlack bounds the bytes a store adds to a record after its size
// was checked against a limit: an event's seq (its limit applies to the
// event as the caller gave it), a row's updated time and result_seq.
const storedSlack = 1 << 10

// maxStored returns the most bytes a write stores of a record of m's type:
// journal.MaxEventBytes for an event; for a tool call row,
// journal.MaxRecordBytes plus a result that journal.ResolvedRowFits did not
// count because a tool_result event of the same append carries it (this
// store keeps it in the row as well), which MaxEventBytes bounds;
// journal.MaxRecordBytes for any other record; each with storedSlack. More
// is damage, or a record written by something other than a Store:
// journal.ErrCorrupt, never decoded.
func maxStored(m proto.Message) int {
	switch m.(type) {
	case *messages.Event:
		return journal.MaxEventBytes + storedSlack
	case *messages.ToolCallRecord:
		return journal.MaxRecordBytes + journal.MaxEventBytes + storedSlack
	}
	return journal.MaxRecordBytes + storedSlack
}

func validConv(id string) error {
	if err := journal.ValidateID("conversation id", id); err != nil {
		return fmt.Errorf("pgjournal: %w", err)
	}
	return nil
}

// onePast is a listing's LIMIT: one row more than limit, which says
// whether a page follows, without wrapping when limit is math.MaxInt.
func onePast(limit int) int {
	return min(limit, math.MaxInt-1) + 1
}

// toInt64 clamps a seq to the range of bigint.
func toInt64(u uint64) int64 {
	if u > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(u)
}

// ---- EventLog ----

// Events implements journal.EventLog.
func (s *Store) Events(ctx context.Context, conversationID string, q journal.EventQuery) ([]*messages.Event, error) {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()
	if err := validConv(conversationID); err != nil {
		return nil, err
	}
	if q.Limit < 0 || q.MaxBytes < 0 {
		return nil, fmt.Errorf("pgjournal: events of %q: %w", conversationID, journal.Invalidf("negative limit %d or max bytes %d", q.Limit, q.MaxBytes))
	}
	before := int64(math.MaxInt64)
	if q.Before > 0 {
		before = toInt64(q.Before)
	}
	var limit *int64
	if q.Limit > 0 {
		l := int64(q.Limit)
		limit = &l
	}
	query := `SELECT seq, data FROM (SELECT seq, data FROM lz_events WHERE conv = $1 AND seq > $2 AND seq < $3 ORDER BY seq DESC LIMIT $4) e ORDER BY seq`
	if q.MaxBytes > 0 {
		// Read from the end the Limit keeps, to stop where MaxBytes does.
		query = `SELECT seq, data FROM lz_events WHERE conv = $1 AND seq > $2 AND seq < $3 ORDER BY seq LIMIT $4`
		if q.Limit > 0 {
			query = `SELECT seq, data FROM lz_events WHERE conv = $1 AND seq > $2 AND seq < $3 ORDER BY seq DESC LIMIT $4`
		}
	}
	rows, err := s.pool.Query(ctx, query, []byte(conversationID), toInt64(q.After), before, limit)
	if err != nil {
		return nil, s.wrap(ctx, "events", err)
	}
	evs, err := scanEventsBytes(rows, conversationID, q.MaxBytes)
	if err != nil {
		return nil, s.wrap(ctx, "events", err)
	}
	if q.MaxBytes > 0 && q.Limit > 0 {
		slices.Reverse(evs)
	}
	// The log is gap-free from seq 1: the range starts at After+1, unless
	// a Limit cut it, or the log is a fork's, which starts after the
	// summary it copied.
	first := q.After + 1
	if q.Limit > 0 && (len(evs) == q.Limit || q.MaxBytes > 0) {
		first = 0
	}
	if len(evs) > 0 && first != 0 && evs[0].GetSeq() > first {
		var forked bool
		err := s.pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM lz_summaries WHERE conv = $1 AND to_seq = $2)",
			[]byte(conversationID), toInt64(evs[0].GetSeq()-1)).Scan(&forked)
		if err != nil {
			return nil, s.wrap(ctx, "events", err)
		}
		if forked {
			first = evs[0].GetSeq()
		}
	}
	if err := checkSeqs(conversationID, "events", evs, first); err != nil {
		return nil, err
	}
	return evs, nil
}

func scanEvents(rows pgx.Rows, conv string) ([]*messages.Event, error) {
	return scanEventsBytes(rows, conv, 0)
}

// scanEventsBytes is scanEvents, which with maxBytes > 0 stops before the
// event that would bring the sizes of those read past maxBytes, keeping
// one at least (EventQuery.MaxBytes).
func scanEventsBytes(rows pgx.Rows, conv string, maxBytes int) ([]*messages.Event, error) {
	defer rows.Close()
	var out []*messages.Event
	size := 0
	for rows.Next() {
		var seq int64
		var data []byte
		if err := rows.Scan(&seq, &data); err != nil {
			return nil, err
		}
		ev, err := decodeEvent(data, conv, seq)
		if err != nil {
			return nil, err
		}
		if maxBytes > 0 {
			if size += proto.Size(ev); len(out) > 0 && size > maxBytes {
				break
			}
		}
		out = append(out, ev)
	}
	return out, rows.Err()
}

// LastSeq implements journal.EventLog.
func (s *Store) LastSeq(ctx context.Context, conversationID string) (uint64, error) {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return 0, err
	}
	defer cancel()
	if err := validConv(conversationID); err != nil {
		return 0, err
	}
	var last int64
	err = s.pool.QueryRow(ctx, "SELECT last_seq FROM lz_conversations WHERE id = $1", []byte(conversationID)).Scan(&last)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, s.wrap(ctx, "last seq", err)
	}
	return decodeLastSeq(conversationID, last)
}

// LoadSince implements journal.EventLog in two statements, both read by
// primary key range: the latest summary, then the events after its ToSeq
// (given as a value, so that the planner sees how few they are: a generic
// plan of one statement could scan the whole log). Its cost does not depend
// on the events before the summary. Between the two reads the log may only
// grow, and a summary written meanwhile is a later one: what it returns is
// a summary and every event after it.
func (s *Store) LoadSince(ctx context.Context, conversationID string) (*messages.Summary, []*messages.Event, error) {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer cancel()
	if err := validConv(conversationID); err != nil {
		return nil, nil, err
	}
	var sum *messages.Summary
	var toSeq int64
	var data []byte
	err = s.pool.QueryRow(ctx, "SELECT to_seq, data FROM lz_summaries WHERE conv = $1 ORDER BY to_seq DESC LIMIT 1",
		[]byte(conversationID)).Scan(&toSeq, &data)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return nil, nil, s.wrap(ctx, "load", err)
	default:
		if sum, err = decodeSummary(data, conversationID, toSeq); err != nil {
			return nil, nil, err
		}
	}
	rows, err := s.pool.Query(ctx, "SELECT seq, data FROM lz_events WHERE conv = $1 AND seq > $2 ORDER BY seq", []byte(conversationID), toSeq)
	if err != nil {
		return nil, nil, s.wrap(ctx, "load", err)
	}
	evs, err := scanEvents(rows, conversationID)
	if err != nil {
		return nil, nil, s.wrap(ctx, "load", err)
	}
	if err := checkSeqs(conversationID, "revival read", evs, uint64(toSeq)+1); err != nil {
		return nil, nil, err
	}
	return sum, evs, nil
}

// ---- Summaries ----

// PutSummary implements journal.Summaries.
func (s *Store) PutSummary(ctx context.Context, conversationID string, sum *messages.Summary) error {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	if err := validConv(conversationID); err != nil {
		return err
	}
	if err := journal.ValidateSummaryShape(conversationID, sum); err != nil {
		return fmt.Errorf("pgjournal: %w", err)
	}
	data, err := proto.Marshal(sum)
	if err != nil {
		return fmt.Errorf("pgjournal: %w", journal.Invalidf("summary of %q cannot be encoded (%v)", conversationID, err))
	}
	// A transaction the server rolled back for a lost race is run again,
	// as writeTx runs its own.
	return s.rerun(ctx, "put summary", func() error { return s.putSummaryOnce(ctx, conversationID, sum, data) })
}

// putSummaryOnce is PutSummary's transaction, with sum encoded as data.
func (s *Store) putSummaryOnce(ctx context.Context, conversationID string, sum *messages.Summary, data []byte) error {
	// Two round trips, where a transaction of its own statements would take
	// five: BEGIN, the lock and the head read in one; the insert and COMMIT
	// in the other.
	const op = "put summary"
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return s.wrap(ctx, op, err)
	}
	// A connection left inside a transaction (a failure below) is
	// destroyed by Release rather than reused.
	defer conn.Release()
	// As pgx's Tx.Rollback: a connection whose ROLLBACK fails (one whose
	// call was cancelled mid-flight) is in an unknown state and is closed,
	// so that the pool never hands it out again.
	rollback := func() {
		if _, err := conn.Exec(context.WithoutCancel(ctx), "ROLLBACK"); err != nil {
			_ = conn.Conn().Close(context.WithoutCancel(ctx))
		}
	}
	pb := &pgx.Batch{}
	pb.Queue("BEGIN")
	pb.Queue("SELECT pg_advisory_xact_lock($1)", lockKey(conversationID))
	pb.Queue("SELECT last_seq, deleted FROM lz_conversations WHERE id = $1", []byte(conversationID))
	br := conn.SendBatch(ctx, pb)
	var last int64
	var deleted bool
	_, err = br.Exec()
	if err == nil {
		_, err = br.Exec()
	}
	if err == nil {
		err = br.QueryRow().Scan(&last, &deleted)
		if errors.Is(err, pgx.ErrNoRows) {
			err = nil
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err == nil && deleted {
		err = fmt.Errorf("put summary of %q: %w", conversationID, journal.ErrDeleted)
	}
	if err == nil {
		var lastSeq uint64
		if lastSeq, err = decodeLastSeq(conversationID, last); err == nil {
			err = journal.ValidateSummary(conversationID, sum, lastSeq)
		}
	}
	if err != nil {
		rollback()
		return s.wrap(ctx, op, err)
	}
	pb = &pgx.Batch{}
	pb.Queue(`INSERT INTO lz_summaries (conv, to_seq, data) VALUES ($1, $2, $3)
		ON CONFLICT (conv, to_seq) DO UPDATE SET data = excluded.data`, []byte(conversationID), toInt64(sum.GetToSeq()), data)
	pb.Queue("COMMIT")
	br = conn.SendBatch(ctx, pb)
	_, err = br.Exec()
	if err == nil {
		_, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		// As pgx's Tx.Commit: a connection left inside the transaction is
		// closed (Release would destroy it too); the outcome is reported
		// as the error says (unknown if the server's answer was lost).
		if conn.Conn().PgConn().TxStatus() != 'I' {
			_ = conn.Conn().Close(context.WithoutCancel(ctx))
		}
		return s.wrapCommit(op, err)
	}
	if conn.Conn().PgConn().TxStatus() != 'I' {
		return fmt.Errorf("pgjournal: %s: commit left the transaction open: %w", op, journal.ErrUnknownOutcome)
	}
	return nil
}

// LatestSummary implements journal.Summaries.
func (s *Store) LatestSummary(ctx context.Context, conversationID string) (*messages.Summary, error) {
	return s.summaryBefore(ctx, conversationID, math.MaxInt64, true)
}

// SummaryBefore implements journal.Summaries.
func (s *Store) SummaryBefore(ctx context.Context, conversationID string, toSeq uint64) (*messages.Summary, error) {
	return s.summaryBefore(ctx, conversationID, toSeq, false)
}

func (s *Store) summaryBefore(ctx context.Context, conversationID string, toSeq uint64, latest bool) (*messages.Summary, error) {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()
	if err := validConv(conversationID); err != nil {
		return nil, err
	}
	bound := toInt64(toSeq)
	if latest {
		bound = math.MaxInt64
	}
	var data []byte
	var found int64
	q := "SELECT to_seq, data FROM lz_summaries WHERE conv = $1 AND to_seq < $2 ORDER BY to_seq DESC LIMIT 1"
	if latest {
		q = "SELECT to_seq, data FROM lz_summaries WHERE conv = $1 AND to_seq <= $2 ORDER BY to_seq DESC LIMIT 1"
	}
	err = s.pool.QueryRow(ctx, q, []byte(conversationID), bound).Scan(&found, &data)
	if errors.Is(err, pgx.ErrNoRows) {
		if latest {
			return nil, fmt.Errorf("pgjournal: summary of %q: %w", conversationID, journal.ErrNotFound)
		}
		return nil, fmt.Errorf("pgjournal: summary of %q before %d: %w", conversationID, toSeq, journal.ErrNotFound)
	}
	if err != nil {
		return nil, s.wrap(ctx, "summary", err)
	}
	return decodeSummary(data, conversationID, found)
}

// ---- ToolCalls ----

// UpsertToolCall implements journal.ToolCalls. It does not create the
// conversation row.
func (s *Store) UpsertToolCall(ctx context.Context, rec *messages.ToolCallRecord) error {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	if err := journal.ValidateToolCall(rec); err != nil {
		return fmt.Errorf("pgjournal: %w", err)
	}
	rec = proto.Clone(rec).(*messages.ToolCallRecord)
	rec.Status = statusOrPending(rec.GetStatus())
	data, err := proto.Marshal(rec)
	if err != nil {
		return fmt.Errorf("pgjournal: %w", journal.Invalidf("tool call %q cannot be encoded (%v)", rec.GetId(), err))
	}
	conv := rec.GetConversationId()
	return s.writeTx(ctx, "upsert tool call", conv, func(tx pgx.Tx) error {
		if err := checkDeleted(ctx, tx, conv); err != nil {
			return err
		}
		var owner []byte
		err := tx.QueryRow(ctx, "SELECT conv FROM lz_tool_calls WHERE id = $1 FOR UPDATE", []byte(rec.GetId())).Scan(&owner)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if err == nil && string(owner) != conv {
			return fmt.Errorf("tool call %q belongs to %q, not %q: %w", rec.GetId(), owner, conv, journal.ErrConflict)
		}
		// The row was locked if it existed. If it did not, a concurrent
		// write of another conversation may insert it first: the upsert
		// then updates nothing (the row is not conv's), and that is
		// ErrConflict, as when the row was there before.
		tag, err := tx.Exec(ctx, `INSERT INTO lz_tool_calls (id, conv, status, data) VALUES ($1, $2, $3, $4)
			ON CONFLICT (id) DO UPDATE SET status = excluded.status, data = excluded.data WHERE lz_tool_calls.conv = excluded.conv`,
			[]byte(rec.GetId()), []byte(conv), int32(rec.GetStatus()), data)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("tool call %q was created by another conversation, not %q: %w", rec.GetId(), conv, journal.ErrConflict)
		}
		return nil
	})
}

// ToolCall implements journal.ToolCalls.
func (s *Store) ToolCall(ctx context.Context, toolCallID string) (*messages.ToolCallRecord, error) {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()
	if err := journal.ValidateID("tool call id", toolCallID); err != nil {
		return nil, fmt.Errorf("pgjournal: %w", err)
	}
	var conv, data []byte
	err = s.pool.QueryRow(ctx, "SELECT conv, data FROM lz_tool_calls WHERE id = $1", []byte(toolCallID)).Scan(&conv, &data)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("pgjournal: tool call %q: %w", toolCallID, journal.ErrNotFound)
	}
	if err != nil {
		return nil, s.wrap(ctx, "tool call", err)
	}
	return decodeToolCall(data, toolCallID, string(conv))
}

// PendingToolCalls implements journal.ToolCalls, from a partial index of the
// pending rows.
func (s *Store) PendingToolCalls(ctx context.Context, conversationID string) ([]*messages.ToolCallRecord, error) {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()
	if err := validConv(conversationID); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, "SELECT id, data FROM lz_tool_calls WHERE conv = $1 AND status = 1 ORDER BY id", []byte(conversationID))
	if err != nil {
		return nil, s.wrap(ctx, "pending tool calls", err)
	}
	defer rows.Close()
	var out []*messages.ToolCallRecord
	for rows.Next() {
		var id, data []byte
		if err := rows.Scan(&id, &data); err != nil {
			return nil, s.wrap(ctx, "pending tool calls", err)
		}
		rec, err := decodePending(data, string(id), conversationID)
		if err != nil {
			return nil, err
		}
		out = append(out, rec)
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrap(ctx, "pending tool calls", err)
	}
	return out, nil
}

// ResolveToolCall implements journal.ToolCalls. The row is read FOR UPDATE:
// concurrent resolvers queue on its lock, and each after the first sees it
// no longer pending.
func (s *Store) ResolveToolCall(ctx context.Context, toolCallID string, status messages.ToolCallStatus, result *messages.ToolOutcome, at time.Time) (*messages.ToolCallRecord, error) {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()
	if err := journal.ValidateResolution(toolCallID, status); err != nil {
		return nil, fmt.Errorf("pgjournal: %w", err)
	}
	if err := journal.ValidateResolvedAt(toolCallID, at); err != nil {
		return nil, fmt.Errorf("pgjournal: %w", err)
	}
	if err := journal.ValidateResolutionResult(toolCallID, result); err != nil {
		return nil, fmt.Errorf("pgjournal: %w", err)
	}
	var out *messages.ToolCallRecord
	err = s.writeTx(ctx, "resolve", "", func(tx pgx.Tx) error {
		var conv, data []byte
		err := tx.QueryRow(ctx, "SELECT conv, data FROM lz_tool_calls WHERE id = $1 FOR UPDATE", []byte(toolCallID)).Scan(&conv, &data)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("resolve %q: unknown call: %w", toolCallID, journal.ErrStale)
		}
		if err != nil {
			return err
		}
		rec, err := decodeToolCall(data, toolCallID, string(conv))
		if err != nil {
			return err
		}
		if rec.GetStatus() != messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING {
			return fmt.Errorf("resolve %q: status is %v: %w", toolCallID, rec.GetStatus(), journal.ErrStale)
		}
		rec.Status, rec.Result, rec.Resolved, rec.Resolver = status, nil, journal.Timestamp(at), nil
		if result != nil {
			rec.Result = proto.Clone(result).(*messages.ToolOutcome)
		}
		data, err = proto.Marshal(rec)
		if err != nil {
			return journal.Invalidf("result of %q cannot be encoded (%v)", toolCallID, err)
		}
		if len(data) > journal.MaxRecordBytes {
			return journal.Invalidf("tool call %s of %d bytes exceeds %d", toolCallID, len(data), journal.MaxRecordBytes)
		}
		b := &pgx.Batch{}
		b.Queue("UPDATE lz_tool_calls SET status = $2, data = $3 WHERE id = $1", []byte(toolCallID), int32(status), data)
		b.Queue("DELETE FROM lz_deadlines WHERE conv = $1 AND call = $2", []byte(rec.GetConversationId()), []byte(toolCallID))
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		out = rec
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ---- Deadlines ----

// ScheduleDeadline implements journal.Deadlines.
func (s *Store) ScheduleDeadline(ctx context.Context, d *messages.Deadline) error {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	if err := journal.ValidateDeadline(d); err != nil {
		return fmt.Errorf("pgjournal: %w", err)
	}
	data, err := proto.Marshal(d)
	if err != nil {
		return fmt.Errorf("pgjournal: %w", journal.Invalidf("deadline cannot be encoded (%v)", err))
	}
	conv := d.GetConversationId()
	return s.writeTx(ctx, "schedule deadline", conv, func(tx pgx.Tx) error {
		if err := checkDeleted(ctx, tx, conv); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO lz_deadlines (conv, call, at_s, at_n, data) VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (conv, call) DO UPDATE SET at_s = excluded.at_s, at_n = excluded.at_n, data = excluded.data`,
			[]byte(conv), []byte(d.GetToolCallId()), d.GetAt().GetSeconds(), d.GetAt().GetNanos(), data)
		return err
	})
}

// CancelDeadline implements journal.Deadlines.
func (s *Store) CancelDeadline(ctx context.Context, conversationID, toolCallID string) error {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	if err := validConv(conversationID); err != nil {
		return err
	}
	if err := journal.ValidateID("tool call id", toolCallID); err != nil {
		return fmt.Errorf("pgjournal: %w", err)
	}
	_, err = s.execCommit(ctx, "cancel deadline", "DELETE FROM lz_deadlines WHERE conv = $1 AND call = $2", []byte(conversationID), []byte(toolCallID))
	return err
}

// Deadlines implements journal.Deadlines. It reads every due deadline
// before calling fn, so fn may call any method. A row that does not decode
// (decodeDeadline) is passed over and reported at the end.
func (s *Store) Deadlines(ctx context.Context, dueBy time.Time, fn func(*messages.Deadline) error) error {
	caller := ctx // fn runs after the query, past the bound of the call's own context
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	q := "SELECT conv, call, data FROM lz_deadlines ORDER BY at_s, at_n, call, conv"
	args := []any{}
	if !dueBy.IsZero() {
		q = "SELECT conv, call, data FROM lz_deadlines WHERE (at_s, at_n) <= ($1, $2) ORDER BY at_s, at_n, call, conv"
		ts := timestamppb.New(dueBy)
		args = append(args, ts.GetSeconds(), ts.GetNanos())
	}
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return s.wrap(ctx, "deadlines", err)
	}
	var due []*messages.Deadline
	var bad journal.PassedOver
	for rows.Next() {
		var conv, call, data []byte
		if err := rows.Scan(&conv, &call, &data); err != nil {
			rows.Close()
			return s.wrap(ctx, "deadlines", err)
		}
		d, err := decodeDeadline(data, string(conv), string(call))
		if err != nil {
			bad.Add(err)
			continue
		}
		due = append(due, d)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return s.wrap(ctx, "deadlines", err)
	}
	for _, d := range due {
		if err := s.stillOpen(caller); err != nil {
			return err
		}
		if err := fn(d); err != nil {
			return err
		}
	}
	return bad.Err("pgjournal: deadlines")
}

// ---- Audit ----

// PutModelCall implements journal.Audit. It checks mc first, audit on or
// off (ErrInvalid); with audit off it then stores nothing.
func (s *Store) PutModelCall(ctx context.Context, mc *messages.ModelCall) error {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	if err := journal.ValidateModelCall(mc); err != nil {
		return fmt.Errorf("pgjournal: %w", err)
	}
	if !s.audit {
		return nil
	}
	data, err := proto.Marshal(mc)
	if err != nil {
		return fmt.Errorf("pgjournal: %w", journal.Invalidf("model call of %q cannot be encoded (%v)", mc.GetConversationId(), err))
	}
	if len(data) > journal.MaxRecordBytes {
		return fmt.Errorf("pgjournal: %w", journal.Invalidf("model call of %q of %d bytes exceeds %d", mc.GetConversationId(), len(data), journal.MaxRecordBytes))
	}
	var cs *int64
	var cn *int32
	if c := mc.GetCreated(); c != nil {
		sec, nano := c.GetSeconds(), c.GetNanos()
		cs, cn = &sec, &nano
	}
	conv := mc.GetConversationId()
	return s.writeTx(ctx, "put model call", conv, func(tx pgx.Tx) error {
		if err := checkDeleted(ctx, tx, conv); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO lz_audit (conv, turn_ref, created_s, created_n, data) VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (conv, turn_ref) DO UPDATE SET created_s = excluded.created_s, created_n = excluded.created_n, data = excluded.data`,
			[]byte(conv), int64(mc.GetTurnRef()), cs, cn, data)
		return err
	})
}

// ModelCalls implements journal.Audit. With audit off it returns nothing,
// whatever rows a Store with audit on wrote to the database.
func (s *Store) ModelCalls(ctx context.Context, conversationID string) ([]*messages.ModelCall, error) {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()
	if err := validConv(conversationID); err != nil {
		return nil, err
	}
	if !s.audit {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, "SELECT turn_ref, data FROM lz_audit WHERE conv = $1", []byte(conversationID))
	if err != nil {
		return nil, s.wrap(ctx, "model calls", err)
	}
	defer rows.Close()
	var out []*messages.ModelCall
	for rows.Next() {
		var turn int64
		var data []byte
		if err := rows.Scan(&turn, &data); err != nil {
			return nil, s.wrap(ctx, "model calls", err)
		}
		mc, err := decodeModelCall(data, conversationID, turn)
		if err != nil {
			return nil, err
		}
		out = append(out, mc)
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrap(ctx, "model calls", err)
	}
	// turn_ref is stored as a signed bigint; order as the unsigned TurnRef.
	slices.SortFunc(out, func(a, b *messages.ModelCall) int {
		switch {
		case a.GetTurnRef() < b.GetTurnRef():
			return -1
		case a.GetTurnRef() > b.GetTurnRef():
			return 1
		}
		return 0
	})
	return out, nil
}

// GCModelCalls implements journal.Audit. A row without a created time
// counts as older than any time. With audit off it removes nothing.
func (s *Store) GCModelCalls(ctx context.Context, conversationID string, olderThan time.Time) (int, error) {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return 0, err
	}
	defer cancel()
	if err := validConv(conversationID); err != nil {
		return 0, err
	}
	if !s.audit {
		return 0, nil
	}
	ts := timestamppb.New(olderThan)
	tag, err := s.execCommit(ctx, "gc model calls", "DELETE FROM lz_audit WHERE conv = $1 AND (created_s IS NULL OR (created_s, created_n) < ($2, $3))",
		[]byte(conversationID), ts.GetSeconds(), ts.GetNanos())
	if err != nil {
		return 0, err
	}
	return int(tag.RowsAffected()), nil
}

// ---- Conversations ----

// Conversation implements journal.Conversations.
func (s *Store) Conversation(ctx context.Context, id string) (*messages.Conversation, error) {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()
	if err := validConv(id); err != nil {
		return nil, err
	}
	var row []byte
	var deleted bool
	err = s.pool.QueryRow(ctx, "SELECT row, deleted FROM lz_conversations WHERE id = $1", []byte(id)).Scan(&row, &deleted)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, fmt.Errorf("pgjournal: conversation %q: %w", id, journal.ErrNotFound)
	case err != nil:
		return nil, s.wrap(ctx, "conversation", err)
	case deleted:
		return nil, fmt.Errorf("pgjournal: conversation %q: %w", id, journal.ErrDeleted)
	case row == nil:
		return nil, fmt.Errorf("pgjournal: conversation %q: %w", id, journal.ErrNotFound)
	}
	return decodeConversation(row, id)
}

// ListPendingToolCalls implements journal.ToolCalls, from the partial
// index of pending rows: its cost is that of the page.
func (s *Store) ListPendingToolCalls(ctx context.Context, cursor string, limit int) ([]*messages.ToolCallRecord, string, error) {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return nil, "", err
	}
	defer cancel()
	afterConv, afterCall, err := journal.ParsePendingCursor(cursor)
	if err != nil {
		return nil, "", fmt.Errorf("pgjournal: %w", err)
	}
	if limit, err = journal.PageSize("pending tool calls", limit); err != nil {
		return nil, "", fmt.Errorf("pgjournal: %w", err)
	}
	rows, err := s.pool.Query(ctx, "SELECT conv, id, data FROM lz_tool_calls WHERE status = 1 AND (conv, id) > ($1, $2) ORDER BY conv, id LIMIT $3",
		[]byte(afterConv), []byte(afterCall), onePast(limit))
	if err != nil {
		return nil, "", s.wrap(ctx, "list pending tool calls", err)
	}
	defer rows.Close()
	var out []*messages.ToolCallRecord
	next := ""
	for rows.Next() {
		var conv, id, data []byte
		if err := rows.Scan(&conv, &id, &data); err != nil {
			return nil, "", s.wrap(ctx, "list pending tool calls", err)
		}
		if len(out) == limit {
			last := out[limit-1]
			next = journal.PendingCursor(last.GetConversationId(), last.GetId())
			break
		}
		rec, err := decodePending(data, string(id), string(conv))
		if err != nil {
			return nil, "", err
		}
		out = append(out, rec)
	}
	if err := rows.Err(); err != nil {
		return nil, "", s.wrap(ctx, "list pending tool calls", err)
	}
	return out, next, nil
}

// PutConversation implements journal.Conversations. Settings keys follow
// the rules of ids, as metadata keys do.
func (s *Store) PutConversation(ctx context.Context, u journal.ConversationUpdate) error {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	if err := validConv(u.ID); err != nil {
		return err
	}
	if err := journal.ValidateMetadata(u.ID, u.Settings); err != nil {
		return fmt.Errorf("pgjournal: settings: %w", err)
	}
	if !journal.ValidStatus(u.Status) {
		return fmt.Errorf("pgjournal: %w", journal.Invalidf("conversation %q: unknown status %d", u.ID, u.Status))
	}
	if err := journal.ValidateCreated(u.ID, u.Created); err != nil {
		return fmt.Errorf("pgjournal: %w", err)
	}
	if u.FSMState != nil {
		if err := journal.ValidateFSMState(u.ID, u.FSMState); err != nil {
			return fmt.Errorf("pgjournal: %w", err)
		}
	}
	now := time.Now()
	return s.writeTx(ctx, "put conversation", u.ID, func(tx pgx.Tx) error {
		var raw []byte
		var deleted bool
		err := tx.QueryRow(ctx, "SELECT deleted, row FROM lz_conversations WHERE id = $1", []byte(u.ID)).Scan(&deleted, &raw)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if deleted {
			return fmt.Errorf("put conversation %q: %w", u.ID, journal.ErrDeleted)
		}
		row := &messages.Conversation{Id: u.ID, Status: messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE, Created: timestamppb.New(now)}
		if raw != nil {
			if row, err = decodeConversation(raw, u.ID); err != nil {
				return err
			}
		}
		for k, v := range u.Settings {
			if v == "" {
				delete(row.Settings, k)
				continue
			}
			if row.Settings == nil {
				row.Settings = make(map[string]string)
			}
			row.Settings[k] = v
		}
		if u.Status != messages.ConversationStatus_CONVERSATION_STATUS_UNSPECIFIED {
			row.Status = u.Status
		}
		if u.FSMState != nil {
			row.FsmState = proto.Clone(u.FSMState).(*messages.FSMState)
		}
		if u.Created != nil {
			row.Created = proto.Clone(u.Created).(*timestamppb.Timestamp)
		}
		row.Updated = timestamppb.New(now)
		data, err := proto.Marshal(row)
		if err != nil {
			return journal.Invalidf("conversation %q cannot be encoded (%v)", u.ID, err)
		}
		if len(data) > journal.MaxRecordBytes {
			return journal.Invalidf("conversation %q of %d bytes exceeds %d", u.ID, len(data), journal.MaxRecordBytes)
		}
		_, err = tx.Exec(ctx, `INSERT INTO lz_conversations (id, row, status) VALUES ($1, $2, $3)
			ON CONFLICT (id) DO UPDATE SET row = excluded.row, status = excluded.status`, []byte(u.ID), data, int32(row.GetStatus()))
		return err
	})
}

// PutFSMState implements journal.Conversations. A nil st is ErrInvalid.
func (s *Store) PutFSMState(ctx context.Context, id string, st *messages.FSMState) error {
	if st == nil {
		_, cancel, err := s.enter(ctx)
		if err != nil {
			return err
		}
		cancel()
		return fmt.Errorf("pgjournal: %w", journal.Invalidf("nil fsm_state for %q", id))
	}
	return s.PutConversation(ctx, journal.ConversationUpdate{ID: id, FSMState: st})
}

// ListConversations implements journal.Conversations, in bytewise id order.
func (s *Store) ListConversations(ctx context.Context, cursor string, limit int) ([]*messages.Conversation, string, error) {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return nil, "", err
	}
	defer cancel()
	if limit, err = journal.PageSize("conversations", limit); err != nil {
		return nil, "", fmt.Errorf("pgjournal: %w", err)
	}
	rows, err := s.pool.Query(ctx, "SELECT id, row FROM lz_conversations WHERE row IS NOT NULL AND id > $1 ORDER BY id LIMIT $2",
		[]byte(cursor), onePast(limit))
	if err != nil {
		return nil, "", s.wrap(ctx, "list conversations", err)
	}
	defer rows.Close()
	var out []*messages.Conversation
	var ids []string
	for rows.Next() {
		var id, raw []byte
		if err := rows.Scan(&id, &raw); err != nil {
			return nil, "", s.wrap(ctx, "list conversations", err)
		}
		row, err := decodeConversation(raw, string(id))
		if err != nil {
			return nil, "", err
		}
		out, ids = append(out, row), append(ids, string(id))
	}
	if err := rows.Err(); err != nil {
		return nil, "", s.wrap(ctx, "list conversations", err)
	}
	next := ""
	if len(out) > limit {
		out, ids = out[:limit], ids[:limit]
		next = ids[limit-1]
	}
	return out, next, nil
}

// ListActiveConversations implements journal.Conversations, in bytewise
// id order: a walk of the partial index of the ACTIVE rows
// (lz_conversations_active), whose status column every write of a row sets
// in the same statement.
func (s *Store) ListActiveConversations(ctx context.Context, cursor string, limit int) ([]string, string, error) {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return nil, "", err
	}
	defer cancel()
	after, limit, err := journal.ParseActiveCursor(cursor, limit)
	if err != nil {
		return nil, "", fmt.Errorf("pgjournal: %w", err)
	}
	rows, err := s.pool.Query(ctx, "SELECT id FROM lz_conversations WHERE status = 1 AND id > $1 ORDER BY id LIMIT $2",
		[]byte(after), onePast(limit))
	if err != nil {
		return nil, "", s.wrap(ctx, "list active conversations", err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id []byte
		if err := rows.Scan(&id); err != nil {
			return nil, "", s.wrap(ctx, "list active conversations", err)
		}
		ids = append(ids, string(id))
	}
	if err := rows.Err(); err != nil {
		return nil, "", s.wrap(ctx, "list active conversations", err)
	}
	next := ""
	if len(ids) > limit {
		ids = ids[:limit]
		next = journal.ActiveCursor(ids[limit-1])
	}
	return ids, next, nil
}

// convTables are the tables of a conversation's records, keyed by conv.
var convTables = []string{"lz_events", "lz_summaries", "lz_tool_calls", "lz_deadlines", "lz_audit", "lz_metadata", "lz_file_checkpoints", "lz_schedules"}

// heldQuery reports whether any of convTables holds a record of conv $1.
var heldQuery = func() string {
	q := "SELECT false"
	for _, table := range convTables {
		q += " OR EXISTS (SELECT 1 FROM " + table + " WHERE conv = $1)"
	}
	return q
}()

// DeleteConversation implements journal.Conversations: one transaction
// deletes every record of the conversation and leaves the tombstone.
func (s *Store) DeleteConversation(ctx context.Context, id string) error {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	if err := validConv(id); err != nil {
		return err
	}
	return s.writeTx(ctx, "delete", id, func(tx pgx.Tx) error {
		var hasRow, deleted bool
		err := tx.QueryRow(ctx, "SELECT row IS NOT NULL, deleted FROM lz_conversations WHERE id = $1", []byte(id)).Scan(&hasRow, &deleted)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if deleted {
			return fmt.Errorf("delete %q: already deleted: %w", id, journal.ErrNotFound)
		}
		if !hasRow {
			// Records written without a row (metadata, tool calls,
			// deadlines, audit rows) are the conversation's too.
			var held bool
			if err := tx.QueryRow(ctx, heldQuery, []byte(id)).Scan(&held); err != nil {
				return err
			}
			if !held {
				return fmt.Errorf("delete %q: %w", id, journal.ErrNotFound)
			}
		}
		b := &pgx.Batch{}
		for _, table := range convTables {
			b.Queue("DELETE FROM "+table+" WHERE conv = $1", []byte(id))
		}
		b.Queue(`INSERT INTO lz_conversations (id, deleted) VALUES ($1, true)
			ON CONFLICT (id) DO UPDATE SET deleted = true, row = NULL, last_seq = 0, status = 0`, []byte(id))
		return tx.SendBatch(ctx, b).Close()
	})
}

// checkMergedMetadata refuses, with ErrInvalid, a merge of kv that leaves
// the metadata of conv over journal.MaxRecordBytes, as ValidateMetadata
// counts it (keys and values). tx holds conv's lock.
func checkMergedMetadata(ctx context.Context, tx pgx.Tx, conv string, kv map[string]string) error {
	rows, err := tx.Query(ctx, "SELECT key, octet_length(value) FROM lz_metadata WHERE conv = $1", []byte(conv))
	if err != nil {
		return err
	}
	defer rows.Close()
	total := 0
	for rows.Next() {
		var k []byte
		var n int
		if err := rows.Scan(&k, &n); err != nil {
			return err
		}
		if _, merged := kv[string(k)]; !merged {
			total += len(k) + n
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for k, v := range kv {
		if v != "" {
			total += len(k) + len(v)
		}
	}
	if total > journal.MaxRecordBytes {
		return journal.Invalidf("metadata of %q of %d bytes exceeds %d", conv, total, journal.MaxRecordBytes)
	}
	return nil
}

// Metadata implements journal.Conversations.
func (s *Store) Metadata(ctx context.Context, id string) (map[string]string, error) {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()
	if err := validConv(id); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, "SELECT key, value FROM lz_metadata WHERE conv = $1", []byte(id))
	if err != nil {
		return nil, s.wrap(ctx, "metadata", err)
	}
	defer rows.Close()
	out := make(map[string]string)
	for rows.Next() {
		var k, v []byte
		if err := rows.Scan(&k, &v); err != nil {
			return nil, s.wrap(ctx, "metadata", err)
		}
		key, val, err := decodeMetadata(id, k, v)
		if err != nil {
			return nil, err
		}
		out[key] = val
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrap(ctx, "metadata", err)
	}
	return out, nil
}

// PutMetadata implements journal.Conversations. It does not create the
// conversation row.
func (s *Store) PutMetadata(ctx context.Context, id string, kv map[string]string) error {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	if err := validConv(id); err != nil {
		return err
	}
	if err := journal.ValidateMetadata(id, kv); err != nil {
		return fmt.Errorf("pgjournal: %w", err)
	}
	return s.writeTx(ctx, "put metadata", id, func(tx pgx.Tx) error {
		if err := checkDeleted(ctx, tx, id); err != nil {
			return err
		}
		if err := checkMergedMetadata(ctx, tx, id, kv); err != nil {
			return err
		}
		var keys, vals, dels [][]byte
		for k, v := range kv {
			if v == "" {
				dels = append(dels, []byte(k))
				continue
			}
			keys, vals = append(keys, []byte(k)), append(vals, []byte(v))
		}
		b := &pgx.Batch{}
		if len(dels) > 0 {
			b.Queue("DELETE FROM lz_metadata WHERE conv = $1 AND key = ANY($2::bytea[])", []byte(id), dels)
		}
		if len(keys) > 0 {
			b.Queue(`INSERT INTO lz_metadata (conv, key, value) SELECT $1, k, v FROM unnest($2::bytea[], $3::bytea[]) AS u(k, v)
				ON CONFLICT (conv, key) DO UPDATE SET value = excluded.value`, []byte(id), keys, vals)
		}
		if b.Len() == 0 {
			return nil
		}
		return tx.SendBatch(ctx, b).Close()
	})
}
