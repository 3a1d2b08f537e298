package pgjournal

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Append implements journal.EventLog: it is a batch of one.
func (s *Store) Append(ctx context.Context, req *messages.AppendRequest) (journal.AppendResult, error) {
	res := s.AppendBatch(ctx, []*messages.AppendRequest{req})[0]
	return res, res.Err
}

// head is what a batch knows of one conversation: read from the database
// when the batch starts, then moved on by each request that passes.
type head struct {
	lastSeq uint64
	deleted bool
	row     *messages.Conversation // nil: no conversation row
	exists  bool                   // the table has a row for the id (maybe a tombstone)
	dirty   bool                   // last_seq or the row changed
	rowSet  bool                   // the row changed: write its bytes and status
}

// callState is what a batch knows of one tool call row.
type callState struct {
	rec    *messages.ToolCallRecord // nil: no row
	exists bool                     // the table has the row
	dirty  bool
}

type deadlineKey struct{ conv, call string }

// batch is the state of one AppendBatch between its reads and its writes.
type batch struct {
	heads     map[string]*head
	calls     map[string]*callState
	deadlines map[deadlineKey]*messages.Deadline // nil value: delete
	dlOrder   []deadlineKey
	// dlBase holds the committed deadlines that the requests' DueBy checks
	// need (absent: none).
	dlBase map[deadlineKey]*timestamppb.Timestamp
	evConv [][]byte
	evSeq  []int64
	evData [][]byte
	// scheds holds the schedules the batch fires (see schedule.go).
	scheds map[string]*schedState
}

// AppendBatch implements journal.EventLog in one transaction: one round
// trip takes the conversations' locks and reads their heads and the tool
// call rows the requests name; each request is then checked in Go against
// that state as moved on by the requests before it (so a failing request
// writes nothing and fails no other); a second round trip writes what the
// passing requests changed, one statement per table, and commits. The
// caller's events get their seqs only if the commit succeeded.
func (s *Store) AppendBatch(ctx context.Context, reqs []*messages.AppendRequest) []journal.AppendResult {
	results := make([]journal.AppendResult, len(reqs))
	failAll := func(err error) []journal.AppendResult {
		for i := range results {
			if results[i].Err == nil {
				results[i] = journal.AppendResult{Err: err}
			}
		}
		return results
	}
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return failAll(err)
	}
	defer cancel()

	ok := make([]bool, len(reqs))
	var convs, callIDs []string
	var due []deadlineKey // deadlines an expiry (DueBy) checks
	seenConv := map[string]bool{}
	seenCall := map[string]bool{}
	for i, req := range reqs {
		if err := journal.ValidateAppend(req); err != nil {
			results[i].Err = fmt.Errorf("pgjournal: %w", err)
			continue
		}
		ok[i] = true
		if c := req.GetConversationId(); !seenConv[c] {
			seenConv[c] = true
			convs = append(convs, c)
		}
		for _, tc := range req.GetToolCalls() {
			if !seenCall[tc.GetId()] {
				seenCall[tc.GetId()] = true
				callIDs = append(callIDs, tc.GetId())
			}
		}
		for _, r := range req.GetResolutions() {
			if !seenCall[r.GetToolCallId()] {
				seenCall[r.GetToolCallId()] = true
				callIDs = append(callIDs, r.GetToolCallId())
			}
			if req.GetDueBy() != nil {
				due = append(due, deadlineKey{req.GetConversationId(), r.GetToolCallId()})
			}
		}
		for _, d := range req.GetReschedule() {
			if !seenCall[d.GetToolCallId()] {
				seenCall[d.GetToolCallId()] = true
				callIDs = append(callIDs, d.GetToolCallId())
			}
		}
	}
	if len(convs) == 0 {
		return results
	}

	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return failAll(s.wrap("append", err))
	}
	// A connection left inside a transaction (any failure below) is
	// destroyed by Release rather than reused.
	defer conn.Release()

	b, err := s.readBatch(ctx, conn.Conn(), convs, callIDs, due)
	if err != nil {
		return failAll(s.wrap("append", err))
	}
	if err := b.readSchedules(ctx, conn.Conn(), fireIDs(reqs, ok)); err != nil {
		return failAll(s.wrap("append", err))
	}
	now := time.Now()
	given := make([][]uint64, len(reqs))
	for i, req := range reqs {
		if !ok[i] {
			continue
		}
		if err := b.check(req); err != nil {
			results[i].Err = fmt.Errorf("pgjournal: %w", err)
			ok[i] = false
			continue
		}
		res, seqs, err := b.apply(req, now)
		if err != nil {
			results[i].Err = fmt.Errorf("pgjournal: %w", err)
			ok[i] = false
			continue
		}
		results[i], given[i] = res, seqs
	}
	if err := s.writeBatch(ctx, conn.Conn(), b); err != nil {
		for i, req := range reqs {
			if ok[i] {
				for j, ev := range req.GetEvents() {
					ev.Seq = given[i][j]
				}
			}
		}
		return failAll(err)
	}
	return results
}

// readBatch begins the transaction, takes the locks of convs and reads
// their heads, the rows of callIDs and the deadlines of due, in one round
// trip.
func (s *Store) readBatch(ctx context.Context, conn *pgx.Conn, convs, callIDs []string, due []deadlineKey) (*batch, error) {
	pb := &pgx.Batch{}
	pb.Queue("BEGIN")
	// The locks are a statement of their own: the head read after them
	// takes its snapshot (read committed) once it holds them, so that it
	// sees what the batch that held them last committed.
	pb.Queue("SELECT count(pg_advisory_xact_lock(k)) FROM unnest($1::int8[]) AS k", lockKeys(convs))
	pb.Queue("SELECT id, last_seq, deleted, row FROM lz_conversations WHERE id = ANY($1::bytea[])", toBytes(convs))
	if len(callIDs) > 0 {
		pb.Queue("SELECT data FROM lz_tool_calls WHERE id = ANY($1::bytea[]) ORDER BY id FOR UPDATE", toBytes(callIDs))
	}
	if len(due) > 0 {
		dconv, dcall := make([][]byte, len(due)), make([][]byte, len(due))
		for i, k := range due {
			dconv[i], dcall[i] = []byte(k.conv), []byte(k.call)
		}
		pb.Queue(`SELECT d.conv, d.call, d.at_s, d.at_n FROM lz_deadlines d
			JOIN unnest($1::bytea[], $2::bytea[]) AS x(conv, call) ON d.conv = x.conv AND d.call = x.call`, dconv, dcall)
	}
	br := conn.SendBatch(ctx, pb)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, err
	}
	if _, err := br.Exec(); err != nil {
		return nil, err
	}
	b := &batch{heads: make(map[string]*head, len(convs)), calls: make(map[string]*callState, len(callIDs)), deadlines: map[deadlineKey]*messages.Deadline{}}
	for _, c := range convs {
		b.heads[c] = &head{}
	}
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var id, row []byte
		var last int64
		var deleted bool
		if err := rows.Scan(&id, &last, &deleted, &row); err != nil {
			rows.Close()
			return nil, err
		}
		h := b.heads[string(id)]
		if h == nil {
			continue
		}
		h.lastSeq, h.deleted, h.exists = uint64(last), deleted, true
		if row != nil {
			h.row = &messages.Conversation{}
			if err := proto.Unmarshal(row, h.row); err != nil {
				rows.Close()
				return nil, journal.Corruptf("conversation row %q", id)
			}
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for _, id := range callIDs {
		b.calls[id] = &callState{}
	}
	if len(callIDs) > 0 {
		rows, err = br.Query()
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var data []byte
			if err := rows.Scan(&data); err != nil {
				rows.Close()
				return nil, err
			}
			rec := &messages.ToolCallRecord{}
			if err := proto.Unmarshal(data, rec); err != nil {
				rows.Close()
				return nil, journal.Corruptf("tool call row")
			}
			if cs := b.calls[rec.GetId()]; cs != nil {
				cs.rec, cs.exists = rec, true
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	if len(due) > 0 {
		b.dlBase = make(map[deadlineKey]*timestamppb.Timestamp, len(due))
		rows, err = br.Query()
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var conv, call []byte
			var atS int64
			var atN int32
			if err := rows.Scan(&conv, &call, &atS, &atN); err != nil {
				rows.Close()
				return nil, err
			}
			b.dlBase[deadlineKey{string(conv), string(call)}] = &timestamppb.Timestamp{Seconds: atS, Nanos: atN}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	return b, br.Close()
}

// deadlineAt returns the deadline of k as the requests applied so far leave
// it; nil if none. Only the deadlines readBatch was asked for are known.
func (b *batch) deadlineAt(k deadlineKey) *timestamppb.Timestamp {
	if d, ok := b.deadlines[k]; ok {
		return d.GetAt() // nil: deleted
	}
	return b.dlBase[k]
}

func toBytes(ss []string) [][]byte {
	out := make([][]byte, len(ss))
	for i, s := range ss {
		out[i] = []byte(s)
	}
	return out
}

func statusOrPending(st messages.ToolCallStatus) messages.ToolCallStatus {
	if st == messages.ToolCallStatus_TOOL_CALL_STATUS_UNSPECIFIED {
		return messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING
	}
	return st
}

// check runs the checks of Append that need the state, in the contract's
// order, without changing anything.
func (b *batch) check(req *messages.AppendRequest) error {
	id := req.GetConversationId()
	h := b.heads[id]
	if h.deleted {
		return fmt.Errorf("append to %q: %w", id, journal.ErrDeleted)
	}
	if !req.GetUnfenced() && req.GetExpectedLast() != h.lastSeq {
		return fmt.Errorf("append to %q after %d (last is %d): %w", id, req.GetExpectedLast(), h.lastSeq, journal.ErrConflict)
	}
	status := map[string]messages.ToolCallStatus{}
	for _, tc := range req.GetToolCalls() {
		if rec := b.calls[tc.GetId()].rec; rec != nil && rec.GetConversationId() != id {
			return fmt.Errorf("tool call %q of %q in an append to %q: %w", tc.GetId(), rec.GetConversationId(), id, journal.ErrConflict)
		}
		status[tc.GetId()] = statusOrPending(tc.GetStatus())
	}
	for _, r := range req.GetResolutions() {
		call := r.GetToolCallId()
		cur, ok := status[call]
		if !ok {
			rec := b.calls[call].rec
			if rec == nil || rec.GetConversationId() != id {
				return fmt.Errorf("resolve %q in an append to %q: unknown call: %w", call, id, journal.ErrStale)
			}
			cur = rec.GetStatus()
		}
		if cur != messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING {
			return fmt.Errorf("resolve %q in an append to %q: status is %v: %w", call, id, cur, journal.ErrStale)
		}
		if due := req.GetDueBy(); due != nil {
			if at := b.deadlineAt(deadlineKey{id, call}); at == nil || at.AsTime().After(due.AsTime()) {
				return fmt.Errorf("resolve %q in an append to %q: no deadline due by %v: %w", call, id, due.AsTime(), journal.ErrStale)
			}
		}
		status[call] = r.GetStatus()
	}
	for _, d := range req.GetReschedule() {
		call := d.GetToolCallId()
		cur, ok := status[call]
		if !ok {
			rec := b.calls[call].rec
			if rec == nil || rec.GetConversationId() != id {
				return fmt.Errorf("reschedule %q in an append to %q: unknown call: %w", call, id, journal.ErrStale)
			}
			cur = rec.GetStatus()
		}
		if cur != messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING {
			return fmt.Errorf("reschedule %q in an append to %q: status is %v: %w", call, id, cur, journal.ErrStale)
		}
	}
	return b.checkFire(id, req.GetScheduleFire())
}

// apply applies a checked request to the batch's state, in the contract's
// order. It sets the seqs of the request's events and returns the seqs they
// had, to put back if the commit fails. It fails (changing nothing) only if
// an event cannot be encoded.
func (b *batch) apply(req *messages.AppendRequest, now time.Time) (journal.AppendResult, []uint64, error) {
	id := req.GetConversationId()
	h := b.heads[id]
	res := journal.AppendResult{FirstSeq: req.GetExpectedLast(), LastSeq: req.GetExpectedLast()}
	evs := req.GetEvents()
	given := make([]uint64, len(evs))
	if len(evs) > 0 {
		data := make([][]byte, len(evs))
		for j, ev := range evs {
			given[j] = ev.GetSeq()
			ev.Seq = h.lastSeq + 1 + uint64(j)
			enc, err := journal.EncodeAppendEvent(nil, req, j, given[j])
			if err != nil {
				for k := 0; k <= j; k++ {
					evs[k].Seq = given[k]
				}
				return res, nil, err
			}
			data[j] = enc
		}
		for j := range evs {
			b.evConv = append(b.evConv, []byte(id))
			b.evSeq = append(b.evSeq, int64(evs[j].GetSeq()))
			b.evData = append(b.evData, data[j])
		}
		res.FirstSeq = h.lastSeq + 1
		h.lastSeq += uint64(len(evs))
		res.LastSeq = h.lastSeq
		h.dirty = true
	}
	if h.row == nil {
		created := timestamppb.New(now)
		if len(evs) > 0 && evs[0].GetTime() != nil {
			created = proto.Clone(evs[0].GetTime()).(*timestamppb.Timestamp)
		}
		h.row = &messages.Conversation{
			Id:      id,
			Status:  messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE,
			Created: created,
			Updated: timestamppb.New(now),
		}
		h.dirty, h.rowSet = true, true
	}
	for _, tc := range req.GetToolCalls() {
		rec := proto.Clone(tc).(*messages.ToolCallRecord)
		rec.Status = statusOrPending(rec.GetStatus())
		cs := b.calls[rec.GetId()]
		cs.rec, cs.dirty = rec, true
	}
	for _, r := range req.GetResolutions() {
		cs := b.calls[r.GetToolCallId()]
		rec := proto.Clone(cs.rec).(*messages.ToolCallRecord)
		rec.Status = r.GetStatus()
		rec.Result = nil
		if r.GetResult() != nil {
			rec.Result = proto.Clone(r.GetResult()).(*messages.ToolOutcome)
		}
		rec.Resolved = nil
		if r.GetAt() != nil {
			rec.Resolved = proto.Clone(r.GetAt()).(*timestamppb.Timestamp)
		}
		rec.Resolver = nil
		if r.GetBy() != nil {
			rec.Resolver = proto.Clone(r.GetBy()).(*messages.Identity)
		}
		cs.rec, cs.dirty = rec, true
		b.setDeadline(deadlineKey{id, rec.GetId()}, nil)
	}
	changed := false
	if fsm := req.GetFsmState(); fsm != nil {
		h.row.FsmState = proto.Clone(fsm).(*messages.FSMState)
		changed = true
	}
	if st := req.GetStatus(); st != messages.ConversationStatus_CONVERSATION_STATUS_UNSPECIFIED {
		h.row.Status = st
		changed = true
	}
	if kv := req.GetSettings(); len(kv) > 0 {
		h.row.Settings = journal.MergeSettings(h.row.GetSettings(), kv)
		changed = true
	}
	if changed {
		h.row.Updated = timestamppb.New(now)
		h.dirty, h.rowSet = true, true
	}
	for _, d := range req.GetSchedule() {
		b.setDeadline(deadlineKey{id, d.GetToolCallId()}, proto.Clone(d).(*messages.Deadline))
	}
	for _, call := range req.GetCancel() {
		b.setDeadline(deadlineKey{id, call}, nil)
	}
	for _, d := range req.GetReschedule() {
		cs := b.calls[d.GetToolCallId()]
		rec := proto.Clone(cs.rec).(*messages.ToolCallRecord)
		rec.Deadline = nil
		var dl *messages.Deadline
		if d.GetAt() != nil {
			rec.Deadline = proto.Clone(d.GetAt()).(*timestamppb.Timestamp)
			dl = proto.Clone(d).(*messages.Deadline)
		}
		cs.rec, cs.dirty = rec, true
		b.setDeadline(deadlineKey{id, rec.GetId()}, dl)
	}
	b.applyFire(req.GetScheduleFire())
	return res, given, nil
}

func (b *batch) setDeadline(k deadlineKey, d *messages.Deadline) {
	if _, ok := b.deadlines[k]; !ok {
		b.dlOrder = append(b.dlOrder, k)
	}
	b.deadlines[k] = d
}

// writeBatch writes what the batch changed and commits, in one round trip.
// The transaction is left open (and the connection then destroyed) on
// failure.
func (s *Store) writeBatch(ctx context.Context, conn *pgx.Conn, b *batch) error {
	pb := &pgx.Batch{}
	// New conversations are inserted; the others updated in place, their
	// row bytes and status only if the row changed (NULL keeps them), so
	// that an append that only moves last_seq changes no indexed column
	// and the server can update the row on its page (a HOT update, with
	// the free space the table's fillfactor leaves) without touching an
	// index.
	var nid, uid, nrow, urow [][]byte
	var nlast, ulast []int64
	var nstatus, ustatus []*int32
	for id, h := range b.heads {
		if !h.dirty {
			continue
		}
		var row []byte
		var status *int32
		if h.rowSet || !h.exists {
			enc, err := proto.Marshal(h.row)
			if err != nil {
				return fmt.Errorf("pgjournal: append: encode conversation row: %w", err)
			}
			st := int32(h.row.GetStatus())
			row, status = enc, &st
		}
		if h.exists {
			uid, ulast, urow, ustatus = append(uid, []byte(id)), append(ulast, int64(h.lastSeq)), append(urow, row), append(ustatus, status)
		} else {
			nid, nlast, nrow, nstatus = append(nid, []byte(id)), append(nlast, int64(h.lastSeq)), append(nrow, row), append(nstatus, status)
		}
	}
	if len(b.evSeq) > 0 {
		pb.Queue("INSERT INTO lz_events (conv, seq, data) SELECT * FROM unnest($1::bytea[], $2::int8[], $3::bytea[])", b.evConv, b.evSeq, b.evData)
	}
	// status keeps the partial index of ACTIVE rows in step with the row,
	// in the same statement. The batch holds the conversations' locks, so
	// no other writer inserts a row of theirs in between.
	if len(nid) > 0 {
		pb.Queue("INSERT INTO lz_conversations (id, last_seq, row, status) SELECT * FROM unnest($1::bytea[], $2::int8[], $3::bytea[], $4::int4[])",
			nid, nlast, nrow, nstatus)
	}
	if len(uid) > 0 {
		pb.Queue(`UPDATE lz_conversations c SET last_seq = u.last_seq, row = coalesce(u.row, c.row), status = coalesce(u.status, c.status)
			FROM unnest($1::bytea[], $2::int8[], $3::bytea[], $4::int4[]) AS u(id, last_seq, row, status) WHERE c.id = u.id`,
			uid, ulast, urow, ustatus)
	}
	// Tool calls: new ids are inserted (an id another conversation's batch
	// took meanwhile is a unique violation: ErrConflict, nothing written),
	// the rows the batch read and locked are updated.
	var cid, cconv, cdata, kid, kconv, kdata [][]byte
	var cstatus, kstatus []int32
	for id, cs := range b.calls {
		if !cs.dirty {
			continue
		}
		data, err := proto.Marshal(cs.rec)
		if err != nil {
			return fmt.Errorf("pgjournal: append: encode tool call %q: %w", id, err)
		}
		if cs.exists {
			kid, kconv, kdata = append(kid, []byte(id)), append(kconv, []byte(cs.rec.GetConversationId())), append(kdata, data)
			kstatus = append(kstatus, int32(cs.rec.GetStatus()))
			continue
		}
		cid, cconv, cdata = append(cid, []byte(id)), append(cconv, []byte(cs.rec.GetConversationId())), append(cdata, data)
		cstatus = append(cstatus, int32(cs.rec.GetStatus()))
	}
	if len(cid) > 0 {
		pb.Queue("INSERT INTO lz_tool_calls (id, conv, status, data) SELECT * FROM unnest($1::bytea[], $2::bytea[], $3::int4[], $4::bytea[])",
			cid, cconv, cstatus, cdata)
	}
	if len(kid) > 0 {
		pb.Queue(`UPDATE lz_tool_calls t SET conv = u.conv, status = u.status, data = u.data
			FROM unnest($1::bytea[], $2::bytea[], $3::int4[], $4::bytea[]) AS u(id, conv, status, data) WHERE t.id = u.id`,
			kid, kconv, kstatus, kdata)
	}
	var dconv, dcall, ddata, xconv, xcall [][]byte
	var dats []int64
	var datn []int32
	for _, k := range b.dlOrder {
		d := b.deadlines[k]
		if d == nil {
			xconv, xcall = append(xconv, []byte(k.conv)), append(xcall, []byte(k.call))
			continue
		}
		data, err := proto.Marshal(d)
		if err != nil {
			return fmt.Errorf("pgjournal: append: encode deadline: %w", err)
		}
		dconv, dcall, ddata = append(dconv, []byte(k.conv)), append(dcall, []byte(k.call)), append(ddata, data)
		dats, datn = append(dats, d.GetAt().GetSeconds()), append(datn, d.GetAt().GetNanos())
	}
	if len(xconv) > 0 {
		pb.Queue("DELETE FROM lz_deadlines d USING unnest($1::bytea[], $2::bytea[]) AS x(conv, call) WHERE d.conv = x.conv AND d.call = x.call", xconv, xcall)
	}
	if len(dconv) > 0 {
		pb.Queue(`INSERT INTO lz_deadlines (conv, call, at_s, at_n, data) SELECT * FROM unnest($1::bytea[], $2::bytea[], $3::int8[], $4::int4[], $5::bytea[])
			ON CONFLICT (conv, call) DO UPDATE SET at_s = excluded.at_s, at_n = excluded.at_n, data = excluded.data`, dconv, dcall, dats, datn, ddata)
	}
	if err := b.queueSchedules(pb); err != nil {
		return err
	}
	n := pb.Len()
	pb.Queue("COMMIT")
	br := conn.SendBatch(ctx, pb)
	for i := 0; i < n; i++ {
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			// The server reports a failed statement and skips the rest,
			// COMMIT included; a lost connection may have lost it anywhere,
			// COMMIT included.
			return s.wrapCommit("append", err)
		}
	}
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return s.wrapCommit("append: commit", err)
	}
	if err := br.Close(); err != nil {
		return s.wrapCommit("append: commit", err)
	}
	if conn.PgConn().TxStatus() != 'I' {
		return fmt.Errorf("pgjournal: append: commit left the transaction open: %w", journal.ErrUnknownOutcome)
	}
	return nil
}

var _ = errors.New
