package pgjournal

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
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
	idb     []byte                 // the id's bytes, once the batch writes events
	corrupt error                  // the stored row did not decode: its requests fail with it
}

// callState is what a batch knows of one tool call row.
type callState struct {
	rec     *messages.ToolCallRecord // nil: no row
	exists  bool                     // the table has the row
	dirty   bool
	corrupt error // the stored row did not decode: the requests naming it fail with it
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
	// dlCorrupt holds the errors of the committed deadlines of dlBase's
	// keys that are not valid times.
	dlCorrupt map[deadlineKey]error
	evConv    [][]byte
	evSeq     []int64
	evData    [][]byte
	// scheds holds the schedules the batch fires (see schedule.go).
	scheds map[schedKey]*schedState
}

// AppendBatch implements journal.EventLog in one transaction: one round
// trip takes the conversations' locks and reads their heads and the tool
// call rows the requests name; each request is then checked in Go against
// that state as moved on by the requests before it (so a failing request
// writes nothing and fails no other: a stored record that is corrupt fails
// the requests that meet it, with journal.ErrCorrupt, and no other); a second round trip writes what the
// passing requests changed, one statement per table, and commits. A
// transaction the server rolls back because of a concurrent writer (a tool
// call id inserted meanwhile, a deadlock) is run again, up to
// maxBatchAttempts times, from the reads, after a short wait (awaitRerun),
// as the writes outside AppendBatch run theirs (writeTx); a ctx that ends
// during the wait fails every request with its error, nothing written. The
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
	// The events are encoded here, once, with the seqs they get if their
	// request passes (ExpectedLast+1...: only fenced requests carry
	// events), into one buffer for the batch; a request that fails later
	// gets its events' seqs back.
	eb := s.getBuf()
	defer s.putBuf(eb)
	first := make([]int, len(reqs)) // index in eb.ends of each request's first event
	for i, req := range reqs {
		if err := journal.ValidateAppendShape(req); err != nil {
			// ValidateAppend's own error: an event that cannot be encoded
			// comes before the later checks.
			if full := journal.ValidateAppend(req); full != nil {
				err = full
			}
			results[i].Err = fmt.Errorf("pgjournal: %w", err)
			continue
		}
		first[i] = len(eb.ends)
		if err := eb.encode(req); err != nil {
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
		if req.GetStatus() == messages.ConversationStatus_CONVERSATION_STATUS_SUSPENDED {
			// The calls it names pending decide the status it writes
			// (journal.StatusWritten).
			for id := range req.GetFsmState().GetPending() {
				if !seenCall[id] {
					seenCall[id] = true
					callIDs = append(callIDs, id)
				}
			}
		}
	}
	// restore gives the events of reqs[i] back the seqs they came with.
	restore := func(i int) {
		evs := reqs[i].GetEvents()
		for j := len(evs) - 1; j >= 0; j-- {
			evs[j].Seq = eb.given[first[i]+j]
		}
	}
	if len(convs) == 0 {
		return results
	}

	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		for i := range reqs {
			if ok[i] {
				restore(i)
			}
		}
		return failAll(s.wrap(ctx, "append", err))
	}
	// A connection left inside a transaction (any failure below) is
	// destroyed by Release rather than reused.
	defer conn.Release()
	fast := useByteaArrays(conn.Conn())
	fireConvs, fireIDs := fireKeys(reqs, ok)
	valid := slices.Clone(ok)
	stray := map[string]error{} // see strayEvents
	for attempt := 1; ; attempt++ {
		b, err := s.readBatch(ctx, conn.Conn(), fast, convs, callIDs, due)
		if err == nil {
			err = b.readSchedules(ctx, conn.Conn(), fireConvs, fireIDs)
		}
		if err != nil {
			err = s.wrap(ctx, "append", err)
		} else {
			for c, serr := range stray {
				if h := b.heads[c]; h.corrupt == nil {
					h.corrupt = serr
				}
			}
			now := time.Now()
			for i, req := range reqs {
				if !ok[i] {
					continue
				}
				if err := b.check(req); err != nil {
					results[i].Err = fmt.Errorf("pgjournal: %w", err)
					ok[i] = false
					restore(i)
					continue
				}
				results[i] = b.apply(req, now, eb, first[i])
			}
			err = s.writeBatch(ctx, conn.Conn(), fast, b, eb)
			if err == nil {
				return results
			}
		}
		if attempt < maxBatchAttempts && lostRace(err) {
			// Another writer's transaction, which the batch's locks do
			// not order with it, took a tool call id the batch inserts
			// (or deadlocked with it): the server rolled the batch back.
			// Once rolled back here, a new read sees what that writer
			// committed, and only the requests it concerns fail; the
			// whole batch failed with ErrConflict, which told every
			// other conversation of it that its fence was lost.
			// It waits a little first (awaitRerun), so that it does not
			// meet that writer again at once.
			if _, rerr := conn.Exec(ctx, "ROLLBACK"); rerr == nil {
				found, werr := s.strayEvents(ctx, conn.Conn(), fast, err, b, stray)
				if werr == nil && !found {
					werr = s.awaitRerun(ctx, "append", attempt)
				}
				if werr == nil {
					eb.rows = eb.rows[:0]
					for i := range reqs {
						if valid[i] {
							ok[i], results[i] = true, journal.AppendResult{}
							reseq(reqs[i])
						}
					}
					continue
				}
				err = werr
			}
		}
		for i := range reqs {
			if ok[i] {
				restore(i)
			}
		}
		return failAll(err)
	}
}

// strayEvents is called once a batch's transaction rolled back on err: if
// that is the key of lz_events (eventsKey), it reads which of the batch's
// conversations already hold an event at a seq the batch was to write
// (findStrayEvents) and records them in stray. Running the batch again
// would meet the row again. found reports whether it found any.
func (s *Store) strayEvents(ctx context.Context, conn *pgx.Conn, fast bool, err error, b *batch, stray map[string]error) (found bool, _ error) {
	if b == nil || !eventsKey(err) {
		return false, nil
	}
	got, err := findStrayEvents(ctx, conn, fast, b.evConv, b.evSeq)
	if err != nil {
		return false, s.wrap(ctx, "append", err)
	}
	maps.Copy(stray, got)
	return len(got) > 0, nil
}

// eventsKey reports whether err is the server's report of an insert that
// broke the key of lz_events (conv, seq).
func eventsKey(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505" && pgErr.ConstraintName == "lz_events_pkey"
}

// summariesKey reports whether err is the server's report of an insert
// that broke the key of lz_summaries (conv, to_seq).
func summariesKey(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505" && pgErr.ConstraintName == "lz_summaries_pkey"
}

// findStrayEvents reads which of the conversations convs[i] already hold
// an event at seqs[i], a write of theirs having broken the key of
// lz_events (eventsKey) and rolled back, and returns for each an error
// wrapping journal.ErrCorrupt that names it and the lowest such seq. The
// write held the conversation's lock from its read of last_seq on and
// wrote past it, so no writer inserted that row: the table was changed
// under the store (a row copied in, last_seq lowered by hand), and running
// the write again meets the row again.
func findStrayEvents(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, fast bool, convs [][]byte, seqs []int64) (map[string]error, error) {
	rows, err := q.Query(ctx, `SELECT e.conv, min(e.seq) FROM lz_events e
		JOIN unnest($1::bytea[], $2::int8[]) AS x(conv, seq) ON e.conv = x.conv AND e.seq = x.seq GROUP BY e.conv`,
		byteas(fast, convs), seqs)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	stray := map[string]error{}
	for rows.Next() {
		var conv []byte
		var seq int64
		if err := rows.Scan(&conv, &seq); err != nil {
			return nil, err
		}
		stray[string(conv)] = journal.Corruptf("pgjournal: conversation %q: lz_events holds seq %d, past its last_seq", conv, seq)
	}
	return stray, rows.Err()
}

// maxBatchAttempts bounds the transactions one AppendBatch, or any other
// write (writeTx, execCommit, PutSummary, a migration), runs when it loses
// races to other writers (see lostRace).
const maxBatchAttempts = 3

// lostRace reports whether err is the server's report of a write that
// rolled back because of a concurrent transaction the batch's checks could
// not see: a unique violation (a tool call id inserted meanwhile), a
// deadlock or a serialization failure.
func lostRace(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "23505" || pgErr.Code == "40P01" || pgErr.Code == "40001")
}

// The wait between two runs of a write that lost a race (see rerunWait).
const (
	firstRerunWait = 2 * time.Millisecond
	maxRerunWait   = 20 * time.Millisecond
)

// rerunWait returns the wait before the run after run attempt of a write
// that lost a race: firstRerunWait doubled at each run, at most
// maxRerunWait, of which a random part (up to half) is taken off, so that
// two writers that collided do not start their reruns together and collide
// again.
func rerunWait(attempt int) time.Duration {
	d := min(firstRerunWait<<(attempt-1), maxRerunWait)
	return d - rand.N(d/2+1)
}

// awaitRerun waits, after run attempt of a write that lost a race, before
// the next run (s.pause: sleepCtx unless a test replaced it). A ctx that
// ends first is the error, wrapped as wrap wraps it, for op: nothing was
// written.
func (s *Store) awaitRerun(ctx context.Context, op string, attempt int) error {
	if err := s.pause(ctx, rerunWait(attempt)); err != nil {
		return s.wrap(ctx, op, err)
	}
	return nil
}

// rerun runs once and, while it loses a race (lostRace), again after
// awaitRerun, up to maxBatchAttempts runs in all. An error that is not a
// lost race (an unknown outcome among them) is returned at once.
func (s *Store) rerun(ctx context.Context, op string, once func() error) error {
	for attempt := 1; ; attempt++ {
		err := once()
		if err == nil || attempt >= maxBatchAttempts || !lostRace(err) {
			return err
		}
		if err := s.awaitRerun(ctx, op, attempt); err != nil {
			return err
		}
	}
}

// sleepCtx waits d, or less if ctx ends first, whose error it returns.
func sleepCtx(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// reseq gives the events of req the seqs after its ExpectedLast, as
// evBuf.encode gave them.
func reseq(req *messages.AppendRequest) {
	for j, ev := range req.GetEvents() {
		ev.Seq = req.GetExpectedLast() + 1 + uint64(j)
	}
}

// evBuf holds the encoded events of one AppendBatch: event k's bytes are
// buf[ends[k-1]:ends[k]], and given[k] is the seq it came with.
type evBuf struct {
	buf   []byte
	ends  []int
	given []uint64
	rows  []byte // the encoded rows writeBatch writes
}

// maxKeptBuf bounds the buffer a batch gives back to the Store.
const maxKeptBuf = 4 << 20

// getBuf returns an empty evBuf, one a batch gave back if there is one. The
// Store keeps them itself: a sync.Pool is emptied by every GC, and a busy
// runtime collects several times a second.
func (s *Store) getBuf() *evBuf {
	select {
	case e := <-s.bufs:
		return e
	default:
		return &evBuf{}
	}
}

// putBuf gives e back once its batch returned (pgx copies the parameters it
// sends).
func (s *Store) putBuf(e *evBuf) {
	if cap(e.buf) > maxKeptBuf || cap(e.rows) > maxKeptBuf {
		return
	}
	e.buf, e.ends, e.given, e.rows = e.buf[:0], e.ends[:0], e.given[:0], e.rows[:0]
	select {
	case s.bufs <- e:
	default:
	}
}

// encode gives the events of req the seqs after its ExpectedLast and
// encodes them (journal.EncodeAppendEvent checks each). On failure the
// events keep the seqs they came with and e is as before.
func (e *evBuf) encode(req *messages.AppendRequest) error {
	evs := req.GetEvents()
	n, m := len(e.buf), len(e.ends)
	for j, ev := range evs {
		given := ev.GetSeq()
		e.given = append(e.given, given)
		ev.Seq = req.GetExpectedLast() + 1 + uint64(j)
		var err error
		e.buf, err = journal.EncodeAppendEvent(e.buf, req, j, given)
		if err != nil {
			for k := j; k >= 0; k-- {
				evs[k].Seq = e.given[m+k]
			}
			e.buf, e.ends, e.given = e.buf[:n], e.ends[:m], e.given[:m]
			return err
		}
		e.ends = append(e.ends, len(e.buf))
	}
	return nil
}

// event returns the bytes of event k, once every event of the batch is
// encoded.
func (e *evBuf) event(k int) []byte {
	start := 0
	if k > 0 {
		start = e.ends[k-1]
	}
	return e.buf[start:e.ends[k]:e.ends[k]]
}

// readBatch begins the transaction, takes the locks of convs and reads
// their heads, the rows of callIDs and the deadlines of due, in one round
// trip.
func (s *Store) readBatch(ctx context.Context, conn *pgx.Conn, fast bool, convs, callIDs []string, due []deadlineKey) (*batch, error) {
	pb := &pgx.Batch{}
	pb.Queue("BEGIN")
	// The locks are a statement of their own: the head read after them
	// takes its snapshot (read committed) once it holds them, so that it
	// sees what the batch that held them last committed.
	pb.Queue("SELECT count(pg_advisory_xact_lock(k)) FROM unnest($1::int8[]) AS k", lockKeys(convs))
	pb.Queue("SELECT id, last_seq, deleted, row FROM lz_conversations WHERE id = ANY($1::bytea[])", byteas(fast, toBytes(convs)))
	if len(callIDs) > 0 {
		pb.Queue("SELECT id, conv, data FROM lz_tool_calls WHERE id = ANY($1::bytea[]) ORDER BY id FOR UPDATE", byteas(fast, toBytes(callIDs)))
	}
	if len(due) > 0 {
		dconv, dcall := make([][]byte, len(due)), make([][]byte, len(due))
		for i, k := range due {
			dconv[i], dcall[i] = []byte(k.conv), []byte(k.call)
		}
		pb.Queue(`SELECT d.conv, d.call, d.at_s, d.at_n FROM lz_deadlines d
			JOIN unnest($1::bytea[], $2::bytea[]) AS x(conv, call) ON d.conv = x.conv AND d.call = x.call`, byteas(fast, dconv), byteas(fast, dcall))
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
		if h.lastSeq, err = decodeLastSeq(string(id), last); err != nil {
			h.corrupt = err
			continue
		}
		h.deleted, h.exists = deleted, true
		if row != nil {
			if h.row, err = decodeConversation(row, string(id)); err != nil {
				h.corrupt = err
				continue
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
			var id, conv, data []byte
			if err := rows.Scan(&id, &conv, &data); err != nil {
				rows.Close()
				return nil, err
			}
			rec, err := decodeToolCall(data, string(id), string(conv))
			if cs := b.calls[string(id)]; cs != nil {
				cs.rec, cs.exists, cs.corrupt = rec, true, err
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	if len(due) > 0 {
		b.dlBase = make(map[deadlineKey]*timestamppb.Timestamp, len(due))
		b.dlCorrupt = map[deadlineKey]error{}
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
			at := &timestamppb.Timestamp{Seconds: atS, Nanos: atN}
			if err := at.CheckValid(); err != nil {
				// AsTime would read it as another time.
				b.dlCorrupt[deadlineKey{string(conv), string(call)}] = journal.Corruptf("pgjournal: deadline of %q in %q: at_s, at_n: %v", call, conv, err)
				continue
			}
			b.dlBase[deadlineKey{string(conv), string(call)}] = at
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
// order, without changing anything. A corrupt stored record the request
// meets fails it first, as the read of it would.
func (b *batch) check(req *messages.AppendRequest) error {
	if err := b.corrupt(req); err != nil {
		return fmt.Errorf("append: %w", err)
	}
	id := req.GetConversationId()
	h := b.heads[id]
	if h.deleted {
		return fmt.Errorf("append to %q: %w", id, journal.ErrDeleted)
	}
	if !req.GetUnfenced() && req.GetExpectedLast() != h.lastSeq {
		return fmt.Errorf("append to %q after %d (last is %d): %w", id, req.GetExpectedLast(), h.lastSeq, journal.ErrConflict)
	}
	// The row as read under the conversation's lock, and as the batch's
	// requests before this one left it.
	if err := journal.CheckEnded(req, h.row.GetStatus()); err != nil {
		return err
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
			if rec == nil {
				return fmt.Errorf("resolve %q in an append to %q: unknown call: %w", call, id, journal.ErrStale)
			}
			if rec.GetConversationId() != id {
				return fmt.Errorf("resolve %q in an append to %q: a call of another conversation: %w", call, id, journal.ErrStale)
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
		if err := b.checkResolvedRow(req, r); err != nil {
			return err
		}
		status[call] = r.GetStatus()
	}
	for _, d := range req.GetReschedule() {
		call := d.GetToolCallId()
		cur, ok := status[call]
		if !ok {
			rec := b.calls[call].rec
			if rec == nil {
				return fmt.Errorf("reschedule %q in an append to %q: unknown call: %w", call, id, journal.ErrStale)
			}
			if rec.GetConversationId() != id {
				return fmt.Errorf("reschedule %q in an append to %q: a call of another conversation: %w", call, id, journal.ErrStale)
			}
			cur = rec.GetStatus()
		}
		if cur != messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING {
			return fmt.Errorf("reschedule %q in an append to %q: status is %v: %w", call, id, cur, journal.ErrStale)
		}
	}
	if err := journal.AppendedRowFits(h.row, req); err != nil {
		return err
	}
	return b.checkFire(id, req.GetScheduleFire())
}

// corrupt returns the error of the first corrupt stored record req meets:
// its conversation row, a tool call row it names (AppendBatch read them),
// a committed deadline its DueBy check reads, or the schedule it fires.
func (b *batch) corrupt(req *messages.AppendRequest) error {
	id := req.GetConversationId()
	if err := b.heads[id].corrupt; err != nil {
		return err
	}
	call := func(c string) error {
		if cs := b.calls[c]; cs != nil {
			return cs.corrupt
		}
		return nil
	}
	for _, tc := range req.GetToolCalls() {
		if err := call(tc.GetId()); err != nil {
			return err
		}
	}
	for _, r := range req.GetResolutions() {
		if err := call(r.GetToolCallId()); err != nil {
			return err
		}
		k := deadlineKey{id, r.GetToolCallId()}
		if _, moved := b.deadlines[k]; req.GetDueBy() != nil && !moved && b.dlCorrupt[k] != nil {
			return b.dlCorrupt[k]
		}
	}
	for _, d := range req.GetReschedule() {
		if err := call(d.GetToolCallId()); err != nil {
			return err
		}
	}
	if req.GetStatus() == messages.ConversationStatus_CONVERSATION_STATUS_SUSPENDED {
		for c := range req.GetFsmState().GetPending() {
			if err := call(c); err != nil {
				return err
			}
		}
	}
	if f := req.GetScheduleFire(); f != nil {
		if st := b.scheds[schedKey{id, f.GetScheduleId()}]; st != nil {
			return st.corrupt
		}
	}
	return nil
}

// checkResolvedRow reports ErrInvalid when resolution r of req would leave
// its call's row (as req's upserts leave it, else as the batch has it) too
// large to keep, before the write that would fail to encode it, and with
// it every request of the batch.
func (b *batch) checkResolvedRow(req *messages.AppendRequest, r *messages.ToolResolution) error {
	var row *messages.ToolCallRecord
	if cs := b.calls[r.GetToolCallId()]; cs != nil {
		row = cs.rec
	}
	for _, tc := range req.GetToolCalls() {
		if tc.GetId() == r.GetToolCallId() {
			row = tc
		}
	}
	res := proto.Clone(row).(*messages.ToolCallRecord)
	res.Status, res.Result, res.Resolved, res.Resolver = r.GetStatus(), r.GetResult(), r.GetAt(), r.GetBy()
	if err := journal.ResolvedRowFits(res, req, r); err != nil {
		return fmt.Errorf("resolve %q in an append to %q: %w", r.GetToolCallId(), req.GetConversationId(), err)
	}
	return nil
}

// apply applies a checked request to the batch's state, in the contract's
// order. Its events, which already have their seqs, are the events of eb
// from index k.
func (b *batch) apply(req *messages.AppendRequest, now time.Time, eb *evBuf, k int) journal.AppendResult {
	id := req.GetConversationId()
	h := b.heads[id]
	res := journal.AppendResult{FirstSeq: req.GetExpectedLast(), LastSeq: req.GetExpectedLast()}
	evs := req.GetEvents()
	if len(evs) > 0 {
		if h.idb == nil {
			h.idb = []byte(id)
		}
		for j, ev := range evs {
			b.evConv = append(b.evConv, h.idb)
			b.evSeq = append(b.evSeq, int64(ev.GetSeq()))
			b.evData = append(b.evData, eb.event(k+j))
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
		// The rows of the calls it names pending were read FOR UPDATE
		// with the batch's.
		st, _ = journal.StatusWritten(h.row.GetStatus(), st, req.GetFsmState(), func(call string) (bool, error) {
			cs := b.calls[call]
			if cs == nil {
				return false, nil
			}
			rec := cs.rec
			return rec != nil && rec.GetConversationId() == id && journal.IsTerminal(rec.GetStatus()), nil
		})
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
	b.applyFire(id, req.GetScheduleFire())
	return res
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
func (s *Store) writeBatch(ctx context.Context, conn *pgx.Conn, fast bool, b *batch, eb *evBuf) error {
	// The rows are encoded into eb.rows, which the Store keeps from batch
	// to batch; a slice taken before it grew stays valid.
	marshal := func(m proto.Message) ([]byte, error) {
		start := len(eb.rows)
		out, err := proto.MarshalOptions{}.MarshalAppend(eb.rows, m)
		if err != nil {
			return nil, err
		}
		eb.rows = out
		return out[start:len(out):len(out)], nil
	}
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
			enc, err := marshal(h.row)
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
		pb.Queue("INSERT INTO lz_events (conv, seq, data) SELECT * FROM unnest($1::bytea[], $2::int8[], $3::bytea[])", byteas(fast, b.evConv), b.evSeq, byteas(fast, b.evData))
	}
	// status keeps the partial index of ACTIVE rows in step with the row,
	// in the same statement. The batch holds the conversations' locks, so
	// no other writer inserts a row of theirs in between.
	if len(nid) > 0 {
		pb.Queue("INSERT INTO lz_conversations (id, last_seq, row, status) SELECT * FROM unnest($1::bytea[], $2::int8[], $3::bytea[], $4::int4[])",
			byteas(fast, nid), nlast, byteas(fast, nrow), nstatus)
	}
	if len(uid) > 0 {
		pb.Queue(`UPDATE lz_conversations c SET last_seq = u.last_seq, row = coalesce(u.row, c.row), status = coalesce(u.status, c.status)
			FROM unnest($1::bytea[], $2::int8[], $3::bytea[], $4::int4[]) AS u(id, last_seq, row, status) WHERE c.id = u.id`,
			byteas(fast, uid), ulast, byteas(fast, urow), ustatus)
	}
	// Tool calls: new ids are inserted (an id another conversation's batch
	// took meanwhile is a unique violation, nothing written: AppendBatch
	// reads and checks again), the rows the batch read and locked are
	// updated.
	var cid, cconv, cdata, kid, kconv, kdata [][]byte
	var cstatus, kstatus []int32
	for id, cs := range b.calls {
		if !cs.dirty {
			continue
		}
		data, err := marshal(cs.rec)
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
			byteas(fast, cid), byteas(fast, cconv), cstatus, byteas(fast, cdata))
	}
	if len(kid) > 0 {
		pb.Queue(`UPDATE lz_tool_calls t SET conv = u.conv, status = u.status, data = u.data
			FROM unnest($1::bytea[], $2::bytea[], $3::int4[], $4::bytea[]) AS u(id, conv, status, data) WHERE t.id = u.id`,
			byteas(fast, kid), byteas(fast, kconv), kstatus, byteas(fast, kdata))
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
		data, err := marshal(d)
		if err != nil {
			return fmt.Errorf("pgjournal: append: encode deadline: %w", err)
		}
		dconv, dcall, ddata = append(dconv, []byte(k.conv)), append(dcall, []byte(k.call)), append(ddata, data)
		dats, datn = append(dats, d.GetAt().GetSeconds()), append(datn, d.GetAt().GetNanos())
	}
	if len(xconv) > 0 {
		pb.Queue("DELETE FROM lz_deadlines d USING unnest($1::bytea[], $2::bytea[]) AS x(conv, call) WHERE d.conv = x.conv AND d.call = x.call", byteas(fast, xconv), byteas(fast, xcall))
	}
	if len(dconv) > 0 {
		pb.Queue(`INSERT INTO lz_deadlines (conv, call, at_s, at_n, data) SELECT * FROM unnest($1::bytea[], $2::bytea[], $3::int8[], $4::int4[], $5::bytea[])
			ON CONFLICT (conv, call) DO UPDATE SET at_s = excluded.at_s, at_n = excluded.at_n, data = excluded.data`, byteas(fast, dconv), byteas(fast, dcall), dats, datn, byteas(fast, ddata))
	}
	if err := b.queueSchedules(pb); err != nil {
		return err
	}
	n := pb.Len()
	pb.Queue("COMMIT")
	// The statements' messages are built into the connection's write
	// buffer, which pgx starts small for every batch and grows by doubling;
	// grown once to what they need (the bytes of the batch's rows plus the
	// framing), it is allocated once.
	reserve := len(eb.buf) + len(eb.rows) + 64*(len(b.evSeq)+len(b.heads)+len(b.calls)+len(b.dlOrder)) + 4096
	conn.PgConn().Frontend().Send(reserveMsg(reserve))
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
	tag, err := br.Exec()
	if err != nil {
		_ = br.Close()
		return s.wrapCommit("append: commit", err)
	}
	if err := br.Close(); err != nil {
		if tag.String() == "COMMIT" {
			// The server committed and said so: an error after its reply
			// (the backend terminated right after it, FATAL 57P01) cannot
			// undo that, and wrapCommit would read a server's error as a
			// rollback.
			return nil
		}
		return s.wrapCommit("append: commit", err)
	}
	if conn.PgConn().TxStatus() != 'I' {
		return fmt.Errorf("pgjournal: append: commit left the transaction open: %w", journal.ErrUnknownOutcome)
	}
	return nil
}

// reserveMsg is a frontend message that writes nothing: sent first, it
// grows the connection's write buffer to hold n more bytes, so that the
// messages after it are appended without the buffer being copied as it
// grows. (A pgproto3 tracer, if one is set, logs it as an unknown message
// of length 0.)
type reserveMsg int

var _ pgproto3.FrontendMessage = reserveMsg(0)

// Frontend implements pgproto3.FrontendMessage.
func (reserveMsg) Frontend() {}

// Decode implements pgproto3.Message; reserveMsg is never received.
func (reserveMsg) Decode([]byte) error { return errors.New("pgjournal: reserveMsg is not decoded") }

// Encode implements pgproto3.Message: it appends nothing.
func (n reserveMsg) Encode(dst []byte) ([]byte, error) { return slices.Grow(dst, int(n)), nil }
