package pebblejournal

import (
	"bytes"
	"cmp"
	"fmt"
	"maps"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// txn is one synced write: an overlay of the rows it reads and changes, over
// the committed state. The caller holds the locks of every conversation and
// claimed tool call id it touches (see Store), so what it read stays true
// until it commits. Requests are applied one by one; a failing request rolls
// its overlay changes back and the others still commit. commit writes the
// final state of every changed row, with its index entries, in one batch.
//
// A txn, its maps and its buffers come from txnPool and go back to it on
// close, so that a write allocates little of its own (see BENCHMARKS.md,
// one busy conversation).
type txn struct {
	s  *Store
	b  *pebble.Batch
	it *pebble.Iterator // for last-seq lookups; created lazily, after the locks
	// reuse: the batch goes back to Store.batches on close, unless its
	// commit failed (commitFailed).
	reuse, commitFailed bool
	// ts is the txn's time (rows' updated, tombstones' deleted), taken
	// when first needed (see now).
	ts *timestamppb.Timestamp
	// convList holds the txn's conversations in the order it met them;
	// convs indexes them once there are more than convScan.
	convList []*convState
	convs    map[string]*convState
	calls    map[string]*callState
	dls      map[dlKey]*dlState
	// known holds, for each conversation whose deadlines the txn looked
	// at, all of them as committed before the txn (see knownDeadlines).
	known map[string]map[string]*timestamppb.Timestamp
	// scheds holds the schedules fired by the txn's requests so far, as
	// they leave them (nil: removed); see schedule.go.
	scheds map[schedKey]*messages.Schedule
	// The undo logs of the overlay: the state of a conversation, call or
	// deadline before a change (see mark and rollback).
	undoConv []convUndo
	undoCall []callUndo
	undoDl   []dlUndo
	seqs     []seqUndo // seqs set on caller's events, restored if the commit fails
	// slab holds the txn's convStates (see newConv).
	slab []convState
	// key is a scratch buffer for keys (Batch.Set copies them).
	key []byte
	// enc holds the encoded events of the request being applied, event i
	// in enc.buf[enc.ends[i-1]:enc.ends[i]]; taken from encPool when first
	// needed, given back by close.
	enc *eventScratch
}

type (
	convUndo struct {
		cs   *convState
		prev convState
	}
	callUndo struct {
		c    *callState
		prev callState
	}
	dlUndo struct {
		d    *dlState
		prev dlState
	}
)

// txnPool keeps closed txns with their maps and buffers.
var txnPool = sync.Pool{New: func() any {
	return &txn{
		convs: make(map[string]*convState),
		calls: make(map[string]*callState),
		dls:   make(map[dlKey]*dlState),
		known: make(map[string]map[string]*timestamppb.Timestamp),
	}
}}

// maxPooledEntries bounds the entries of a map or slice a pooled txn keeps:
// enough for a group commit of a few hundred requests, which would
// otherwise grow them again each time, while a pooled txn pins at most a
// few hundred KiB. (Clearing a map costs its capacity, but an empty map,
// such as convs for a txn of a few conversations, clears at once.)
const maxPooledEntries = 1024

// eventScratch is a reusable buffer for the encoded events of one request.
type eventScratch struct {
	buf  []byte
	ends []int
}

// maxPooledScratch bounds the buffers kept in encPool, so that one large
// request does not pin its buffer.
const maxPooledScratch = 256 << 10

var encPool = sync.Pool{New: func() any { return &eventScratch{buf: make([]byte, 0, 16<<10)} }}

type convState struct {
	id     string
	stripe int // convStripe(id)
	// headDls is the deadlines the head cache knew when the txn first
	// met the conversation (nil: none or unknown), which updateCaches
	// keeps if the txn did not look at them.
	headDls   map[string]*timestamppb.Timestamp
	tomb      bool
	seqLoaded bool
	lastSeq   uint64
	hasRow    bool // known to have a row (from the head cache)
	rowLoaded bool
	row       *messages.Conversation // nil if absent; replaced, never mutated
	rowDirty  bool
	// origActive says whether the committed row (before this txn) is
	// ACTIVE, so that flush changes the active index only when the status
	// crosses ACTIVE; origKnown says it was set, when the committed row
	// was first loaded (from the head cache or Pebble), which every
	// setRow is preceded by.
	origActive, origKnown bool
}

// loadedRow records the committed row of cs, as first loaded.
func (cs *convState) loadedRow(row *messages.Conversation) {
	cs.rowLoaded, cs.row = true, row
	if !cs.origKnown {
		cs.origKnown, cs.origActive = true, isActive(row)
	}
}

// isActive reports whether row (nil: none) is ACTIVE, so indexed in
// family famActive.
func isActive(row *messages.Conversation) bool {
	return row.GetStatus() == messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE
}

type callState struct {
	id          string
	origOwner   string // from the owner index; "" if the id is unclaimed
	owner       string
	rec         *messages.ToolCallRecord // nil if none; replaced, never mutated
	origPending bool
	dirty       bool
}

type dlKey struct{ conv, call string }

type dlState struct {
	orig, cur *timestamppb.Timestamp // nil: no deadline
	dirty     bool
}

type seqUndo struct {
	ev  *messages.Event
	seq uint64
}

func (s *Store) newTxn() *txn { return s.newTxnWith(s.db.NewBatch()) }

// newGroupTxn returns a txn for a group commit (AppendBatch): its batch,
// often hundreds of KiB, comes from and goes back to Store.batches.
func (s *Store) newGroupTxn() *txn {
	t := s.newTxnWith(s.takeBatch())
	t.reuse = true
	return t
}

func (s *Store) newTxnWith(b *pebble.Batch) *txn {
	t := txnPool.Get().(*txn)
	t.s, t.b = s, b
	return t
}

// now returns the txn's time, the same for all its records.
func (t *txn) now() *timestamppb.Timestamp {
	if t.ts == nil {
		t.ts = timestamppb.New(t.s.now())
	}
	return t.ts
}

// close releases the txn's iterator and batch, and puts it back in
// txnPool. The txn must not be used afterwards.
func (t *txn) close() {
	if t.it != nil {
		_ = t.it.Close()
	}
	if t.reuse {
		t.s.giveBatch(t.b, t.commitFailed)
	} else {
		_ = t.b.Close()
	}
	if t.enc != nil {
		putScratch(t.enc)
	}
	*t = txn{
		convList: resetSlice(t.convList),
		convs:    resetMap(t.convs),
		calls:    resetMap(t.calls),
		dls:      resetMap(t.dls),
		known:    resetMap(t.known),
		undoConv: resetSlice(t.undoConv),
		undoCall: resetSlice(t.undoCall),
		undoDl:   resetSlice(t.undoDl),
		seqs:     resetSlice(t.seqs),
		slab:     resetSlice(t.slab),
		key:      t.key[:0],
	}
	if cap(t.key) > maxPooledScratch {
		t.key = nil
	}
	txnPool.Put(t)
}

// resetMap empties m for reuse, or returns a new map if m grew beyond
// maxPooledEntries.
func resetMap[K comparable, V any](m map[K]V) map[K]V {
	if len(m) > maxPooledEntries {
		return make(map[K]V)
	}
	clear(m)
	return m
}

// resetSlice empties s for reuse, dropping what its elements point to, or
// returns nil if s grew beyond maxPooledEntries.
func resetSlice[E any](s []E) []E {
	if cap(s) > maxPooledEntries {
		return nil
	}
	clear(s)
	return s[:0]
}

// undoMark is where the undo logs stood at mark: mark and rollback
// bracket one request.
type undoMark struct{ conv, call, dl int }

func (t *txn) mark() undoMark { return undoMark{len(t.undoConv), len(t.undoCall), len(t.undoDl)} }

// rollback restores every state saved since m, latest first, so that a
// state saved twice gets its first value back.
func (t *txn) rollback(m undoMark) {
	for i := len(t.undoConv) - 1; i >= m.conv; i-- {
		*t.undoConv[i].cs = t.undoConv[i].prev
	}
	for i := len(t.undoCall) - 1; i >= m.call; i-- {
		*t.undoCall[i].c = t.undoCall[i].prev
	}
	for i := len(t.undoDl) - 1; i >= m.dl; i-- {
		*t.undoDl[i].d = t.undoDl[i].prev
	}
	t.undoConv, t.undoCall, t.undoDl = t.undoConv[:m.conv], t.undoCall[:m.call], t.undoDl[:m.dl]
}

func (t *txn) saveConv(cs *convState) { t.undoConv = append(t.undoConv, convUndo{cs, *cs}) }

func (t *txn) saveCall(c *callState) { t.undoCall = append(t.undoCall, callUndo{c, *c}) }

func (t *txn) saveDeadline(d *dlState) { t.undoDl = append(t.undoDl, dlUndo{d, *d}) }

// newConv returns a new convState for id, from the txn's slab: a group
// commit of many conversations allocates a few slabs, not a state each.
// A slab that is full is replaced, not grown, so the states already
// handed out stay where they are.
func (t *txn) newConv(id string, stripe int) *convState {
	if len(t.slab) == cap(t.slab) {
		t.slab = make([]convState, 0, min(max(2*cap(t.slab), 4), 256))
	}
	t.slab = t.slab[:len(t.slab)+1]
	cs := &t.slab[len(t.slab)-1]
	cs.id, cs.stripe = id, stripe
	return cs
}

// convScan is how many conversations a txn finds by a scan of convList
// before it indexes them in convs: most txns write one.
const convScan = 4

// findConv returns the state of conversation id if the txn has met it.
func (t *txn) findConv(id string) *convState {
	if len(t.convList) <= convScan {
		for _, cs := range t.convList {
			if cs.id == id {
				return cs
			}
		}
		return nil
	}
	return t.convs[id]
}

// addConv records cs among the txn's conversations.
func (t *txn) addConv(cs *convState) {
	t.convList = append(t.convList, cs)
	switch n := len(t.convList); {
	case n == convScan+1:
		for _, c := range t.convList {
			t.convs[c.id] = c
		}
	case n > convScan+1:
		t.convs[cs.id] = cs
	}
}

// conv returns the state of a conversation, reading its tombstone, or
// taking it from the head cache.
func (t *txn) conv(id string) (*convState, error) {
	if cs := t.findConv(id); cs != nil {
		return cs, nil
	}
	stripe := t.s.convStripe(id)
	if h, ok := t.s.heads.get(stripe, id); ok {
		cs := t.newConv(id, stripe)
		cs.seqLoaded, cs.lastSeq, cs.hasRow, cs.headDls = true, h.lastSeq, h.hasRow, h.dls
		if h.row != nil {
			cs.loadedRow(h.row)
		}
		t.addConv(cs)
		return cs, nil
	}
	k := convKey(famTombstone, id)
	found, err := t.s.get(k, func(v []byte) error { return unmarshal(k, v, &messages.Tombstone{}) })
	if err != nil {
		return nil, err
	}
	cs := t.newConv(id, stripe)
	cs.tomb = found
	t.addConv(cs)
	return cs, nil
}

// live returns the state of a conversation that may be written: ErrDeleted
// if it has a tombstone.
func (t *txn) live(id string) (*convState, error) {
	cs, err := t.conv(id)
	if err != nil {
		return nil, err
	}
	if cs.tomb {
		return nil, fmt.Errorf("pebblejournal: conversation %q: %w", id, journal.ErrDeleted)
	}
	return cs, nil
}

// lastSeq returns the conversation's last seq (with this txn's appends).
func (t *txn) lastSeq(cs *convState) (uint64, error) {
	if cs.seqLoaded {
		return cs.lastSeq, nil
	}
	seq, err := t.s.lastSeqWith(&t.it, cs.id)
	if err != nil {
		return 0, err
	}
	cs.seqLoaded, cs.lastSeq = true, seq
	return seq, nil
}

// row returns the conversation's row (nil if none).
func (t *txn) row(cs *convState) (*messages.Conversation, error) {
	if cs.rowLoaded {
		return cs.row, nil
	}
	k := convKey(famConv, cs.id)
	var row *messages.Conversation
	_, err := t.s.get(k, func(v []byte) (err error) {
		row, err = decodeConversation(k, v, cs.id)
		return err
	})
	if err != nil {
		return nil, err
	}
	cs.loadedRow(row)
	return row, nil
}

// hasRow reports whether the conversation has a row, without reading it
// when the log is not empty: the first append creates the row, and only
// DeleteConversation removes it, together with the log.
func (t *txn) hasRow(cs *convState) (bool, error) {
	if !cs.rowLoaded && (cs.hasRow || cs.seqLoaded && cs.lastSeq > 0) {
		return true, nil
	}
	row, err := t.row(cs)
	return row != nil, err
}

// setRow replaces the conversation's row in the overlay.
func (t *txn) setRow(cs *convState, row *messages.Conversation) error {
	if err := checkSize("row of conversation "+cs.id, row, journal.MaxRecordBytes); err != nil {
		return err
	}
	t.saveConv(cs)
	row.Updated = t.now()
	cs.rowLoaded, cs.row, cs.rowDirty = true, row, true
	return nil
}

// editRow returns a copy of the row to change (a new row if there is none,
// with status ACTIVE, created at created or now if nil), to be passed to
// setRow.
func (t *txn) editRow(cs *convState, created *timestamppb.Timestamp) (*messages.Conversation, error) {
	row, err := t.row(cs)
	if err != nil {
		return nil, err
	}
	if row == nil {
		// created is the caller's (an event's time): the row, which the
		// head cache keeps, gets a copy.
		if created != nil {
			created = proto.Clone(created).(*timestamppb.Timestamp)
		}
		return &messages.Conversation{
			Id:      cs.id,
			Status:  messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE,
			Created: cmp.Or(created, t.now()),
		}, nil
	}
	return copyRow(row), nil
}

// copyRow returns a copy of row to change. Rows are replaced, never
// mutated, so its messages are shared; only the settings map, which
// UpsertConversation edits in place, is copied. (A proto.Clone of the row
// and its fsm_state on every append cost ~2% of the runtime's CPU.)
// TestCopyRowCopiesEveryField fails when a field is added to Conversation
// and not here.
func copyRow(row *messages.Conversation) *messages.Conversation {
	return &messages.Conversation{
		Id:       row.GetId(),
		Settings: maps.Clone(row.GetSettings()),
		Status:   row.GetStatus(),
		FsmState: row.GetFsmState(),
		Created:  row.GetCreated(),
		Updated:  row.GetUpdated(),
		// ForkedFrom is set once, by Fork, and never edited.
		ForkedFrom: row.GetForkedFrom(),
	}
}

// ensureRow creates the conversation's row if it has none.
func (t *txn) ensureRow(cs *convState, created *timestamppb.Timestamp) error {
	ok, err := t.hasRow(cs)
	if err != nil || ok {
		return err
	}
	row, err := t.editRow(cs, created)
	if err != nil {
		return err
	}
	return t.setRow(cs, row)
}

// call returns the state of a tool call id: its owner and row.
func (t *txn) call(id string) (*callState, error) {
	if c, ok := t.calls[id]; ok {
		return c, nil
	}
	c := &callState{id: id}
	if p, ok := t.s.calls.get(t.s.idStripe(id), id); ok {
		c.origOwner, c.owner, c.rec, c.origPending = p.owner, p.owner, p.rec, true
		t.calls[id] = c
		return c, nil
	}
	ok := ownerKey(id)
	if _, err := t.s.get(ok, func(v []byte) (err error) {
		c.origOwner, err = decodeOwner(ok, v)
		return err
	}); err != nil {
		return nil, err
	}
	c.owner = c.origOwner
	if c.owner != "" {
		rk := idKey(famToolCall, c.owner, id)
		found, err := t.s.get(rk, func(v []byte) (err error) {
			c.rec, err = decodeToolCall(rk, v, c.owner, id)
			return err
		})
		if err != nil {
			return nil, err
		}
		if !found {
			return nil, corruptKey(ok, fmt.Sprintf("owner %q has no row %s", c.owner, keyString(rk)))
		}
		c.origPending = c.rec.GetStatus() == messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING
	}
	t.calls[id] = c
	return c, nil
}

// upsertCall inserts or replaces a tool call row of conv. The caller holds
// the id's lock.
func (t *txn) upsertCall(cs *convState, rec *messages.ToolCallRecord) error {
	c, err := t.call(rec.GetId())
	if err != nil {
		return err
	}
	if c.owner != "" && c.owner != cs.id {
		return fmt.Errorf("pebblejournal: tool call %q belongs to conversation %q, not %q: %w", rec.GetId(), c.owner, cs.id, journal.ErrConflict)
	}
	if rec.GetStatus() == messages.ToolCallStatus_TOOL_CALL_STATUS_UNSPECIFIED {
		rec = proto.Clone(rec).(*messages.ToolCallRecord)
		rec.Status = messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING
	}
	t.saveCall(c)
	c.owner, c.rec, c.dirty = cs.id, rec, true
	return nil
}

// resolveCall moves a pending call of conv to a terminal status and removes
// its deadline. ErrStale if the call is unknown, of another conversation or
// not pending. If resultSeq is not zero, the same write appends result as
// the outcome of the tool_result event at that seq: the stored row then
// keeps the seq instead of a second copy of the result (see fillResult),
// and the returned row is in that stored form.
func (t *txn) resolveCall(conv, id string, status messages.ToolCallStatus, result *messages.ToolOutcome, at *timestamppb.Timestamp, by *messages.Identity, resultSeq uint64) (*messages.ToolCallRecord, error) {
	c, err := t.call(id)
	if err != nil {
		return nil, err
	}
	switch {
	case c.rec == nil:
		return nil, fmt.Errorf("pebblejournal: resolve tool call %q: unknown: %w", id, journal.ErrStale)
	case c.owner != conv:
		return nil, fmt.Errorf("pebblejournal: resolve tool call %q: it belongs to conversation %q, not %q: %w", id, c.owner, conv, journal.ErrStale)
	case c.rec.GetStatus() != messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING:
		return nil, fmt.Errorf("pebblejournal: resolve tool call %q: it is %v: %w", id, c.rec.GetStatus(), journal.ErrStale)
	}
	rec := copyCall(c.rec)
	rec.Status, rec.Result, rec.Resolved, rec.Resolver = status, result, at, nil
	if by != nil {
		rec.Resolver = proto.Clone(by).(*messages.Identity)
	}
	if resultSeq != 0 {
		rec.Result, rec.ResultSeq = nil, resultSeq
	}
	if err := checkSize("tool call "+id, rec, journal.MaxRecordBytes); err != nil {
		return nil, err
	}
	t.saveCall(c)
	c.rec, c.dirty = rec, true
	if err := t.setDeadline(conv, id, nil); err != nil {
		return nil, err
	}
	return rec, nil
}

// copyCall returns a copy of rec to change, sharing its messages: rows
// are replaced, never mutated, and a resolved row (the common change) does
// not stay in the call cache, so nothing changes the shared messages while
// the txn uses them. Where a copy leaves the Store (ResolveToolCall), it is
// cloned whole. (A proto.Clone, by reflection, of every resolved call was
// ~1% of the runtime's CPU.) TestCopyCallCopiesEveryField fails when a
// field is added to ToolCallRecord and not here.
func copyCall(rec *messages.ToolCallRecord) *messages.ToolCallRecord {
	return &messages.ToolCallRecord{
		Id:             rec.GetId(),
		ConversationId: rec.GetConversationId(),
		Name:           rec.GetName(),
		Executor:       rec.GetExecutor(),
		Status:         rec.GetStatus(),
		Args:           rec.GetArgs(),
		Result:         rec.GetResult(),
		Created:        rec.GetCreated(),
		Resolved:       rec.GetResolved(),
		Deadline:       rec.GetDeadline(),
		Prompt:         rec.GetPrompt(),
		ResultSeq:      rec.GetResultSeq(),
		Requester:      rec.GetRequester(),
		Resolver:       rec.GetResolver(),
	}
}

// rescheduleCall replaces the deadline of a pending call of conv (removes
// it if at is nil): in its row and in its deadline record. ErrStale if the
// call is unknown, of another conversation or not pending, as resolveCall.
func (t *txn) rescheduleCall(conv, id string, at *timestamppb.Timestamp) error {
	if at != nil {
		if err := checkTime(at, id); err != nil {
			return err
		}
	}
	c, err := t.call(id)
	if err != nil {
		return err
	}
	switch {
	case c.rec == nil:
		return fmt.Errorf("pebblejournal: reschedule tool call %q: unknown: %w", id, journal.ErrStale)
	case c.owner != conv:
		return fmt.Errorf("pebblejournal: reschedule tool call %q: it belongs to conversation %q, not %q: %w", id, c.owner, conv, journal.ErrStale)
	case c.rec.GetStatus() != messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING:
		return fmt.Errorf("pebblejournal: reschedule tool call %q: it is %v: %w", id, c.rec.GetStatus(), journal.ErrStale)
	}
	rec := copyCall(c.rec)
	rec.Deadline = at
	if err := checkSize("tool call "+id, rec, journal.MaxRecordBytes); err != nil {
		return err
	}
	t.saveCall(c)
	c.rec, c.dirty = rec, true
	return t.setDeadline(conv, id, at)
}

// deadline returns the state of the deadline of call in conv.
func (t *txn) deadline(conv, call string) (*dlState, error) {
	key := dlKey{conv, call}
	if d, ok := t.dls[key]; ok {
		return d, nil
	}
	all, err := t.knownDeadlines(conv)
	if err != nil {
		return nil, err
	}
	d := &dlState{orig: all[call]}
	d.cur = d.orig
	t.dls[key] = d
	return d, nil
}

// knownDeadlines returns every committed deadline of conv: from the head
// cache if it knows them, else read with one scan of the conversation's
// deadlines (usually none or a few) and then remembered in the head cache,
// so that later resolutions of the conversation's calls read nothing. The
// caller holds conv's lock, under which every deadline write happens.
func (t *txn) knownDeadlines(conv string) (map[string]*timestamppb.Timestamp, error) {
	if all, ok := t.known[conv]; ok {
		return all, nil
	}
	if h, ok := t.s.heads.get(t.s.convStripe(conv), conv); ok && h.dls != nil {
		t.known[conv] = h.dls
		return h.dls, nil
	}
	all := map[string]*timestamppb.Timestamp{}
	prefix := convKey(famDeadline, conv)
	err := t.s.scan(prefix, convEnd(famDeadline, conv), func(k, v []byte) error {
		call, err := parseIDKey(k, prefix)
		if err != nil {
			return err
		}
		rec, err := decodeDeadline(k, v, conv, call)
		if err != nil {
			return err
		}
		all[call] = rec.GetAt()
		return nil
	})
	if err != nil {
		return nil, err
	}
	t.known[conv] = all
	return all, nil
}

// finalDeadlines returns the deadlines of each conversation in t.known as
// this txn leaves them (known before, with its changes applied), or nil
// for a conversation whose deadlines it did not look at.
func (t *txn) finalDeadlines() map[string]map[string]*timestamppb.Timestamp {
	if len(t.known) == 0 {
		return nil // the txn changed no deadline either: it looks first
	}
	out := make(map[string]map[string]*timestamppb.Timestamp, len(t.known))
	for key, d := range t.dls {
		if !d.dirty || proto.Equal(d.orig, d.cur) {
			continue
		}
		all, ok := out[key.conv]
		if !ok {
			all = maps.Clone(t.known[key.conv])
			out[key.conv] = all
		}
		if d.cur == nil {
			delete(all, key.call)
		} else {
			all[key.call] = d.cur
		}
	}
	for conv, all := range t.known {
		if _, ok := out[conv]; !ok {
			out[conv] = all
		}
	}
	return out
}

// setDeadline schedules (at != nil) or cancels (nil) the deadline of call.
func (t *txn) setDeadline(conv, call string, at *timestamppb.Timestamp) error {
	d, err := t.deadline(conv, call)
	if err != nil {
		return err
	}
	if d.cur == nil && at == nil {
		return nil
	}
	t.saveDeadline(d)
	d.cur, d.dirty = at, true
	return nil
}

// apply applies one validated append request to the overlay, staging its
// events in the batch. On error the overlay is as before.
func (t *txn) apply(req *messages.AppendRequest) (res journal.AppendResult, err error) {
	m, sm := t.mark(), len(t.seqs)
	defer func() {
		if err != nil {
			t.rollback(m)
			t.restoreSeqsFrom(sm)
		}
	}()
	conv := req.GetConversationId()
	// Events are encoded and checked first, as ValidateAppend would have
	// before anything else (the caller checked req with
	// ValidateAppendShape), and staged last.
	if err := t.encodeEvents(req); err != nil {
		return res, err
	}
	cs, err := t.live(conv)
	if err != nil {
		return res, err
	}
	res.FirstSeq, res.LastSeq = req.GetExpectedLast(), req.GetExpectedLast()
	var last uint64
	if !req.GetUnfenced() {
		if last, err = t.lastSeq(cs); err != nil {
			return res, err
		}
		if last != req.GetExpectedLast() {
			return res, fmt.Errorf("pebblejournal: append to %q after %d (last is %d): %w", conv, req.GetExpectedLast(), last, journal.ErrConflict)
		}
		if req.GetStatus() != messages.ConversationStatus_CONVERSATION_STATUS_ENDED {
			row, err := t.row(cs)
			if err != nil {
				return res, err
			}
			if err := journal.CheckEnded(req, row.GetStatus()); err != nil {
				return res, fmt.Errorf("pebblejournal: %w", err)
			}
		}
	}
	for _, tc := range req.GetToolCalls() {
		if err := t.upsertCall(cs, tc); err != nil {
			return res, err
		}
	}
	for _, r := range req.GetResolutions() {
		if due := req.GetDueBy(); due != nil {
			d, err := t.deadline(conv, r.GetToolCallId())
			if err != nil {
				return res, err
			}
			if d.cur == nil || d.cur.AsTime().After(due.AsTime()) {
				return res, fmt.Errorf("pebblejournal: resolve tool call %q: no deadline due by %v: %w", r.GetToolCallId(), due.AsTime(), journal.ErrStale)
			}
		}
		resultSeq := resultEvent(req, r, last)
		if _, err := t.resolveCall(conv, r.GetToolCallId(), r.GetStatus(), r.GetResult(), r.GetAt(), r.GetBy(), resultSeq); err != nil {
			return res, err
		}
	}
	// A new row is created at the time of the request's first event, if
	// it has one, as memjournal does.
	var created *timestamppb.Timestamp
	if evs := req.GetEvents(); len(evs) > 0 {
		created = evs[0].GetTime()
	}
	if req.GetFsmState() != nil || req.GetStatus() != messages.ConversationStatus_CONVERSATION_STATUS_UNSPECIFIED || len(req.GetSettings()) > 0 {
		row, err := t.editRow(cs, created)
		if err != nil {
			return res, err
		}
		if st := req.GetFsmState(); st != nil {
			// A copy: the row is kept (head cache) and shared by the
			// rows copied from it; the caller's record is its own.
			row.FsmState = proto.Clone(st).(*messages.FSMState)
		}
		if s := req.GetStatus(); s != messages.ConversationStatus_CONVERSATION_STATUS_UNSPECIFIED {
			// The calls of conv change only under its lock, which this
			// write holds.
			s, err := journal.StatusWritten(row.GetStatus(), s, req.GetFsmState(), func(id string) (bool, error) {
				c, err := t.call(id)
				if err != nil {
					return false, err
				}
				return c.owner == conv && c.rec != nil && journal.IsTerminal(c.rec.GetStatus()), nil
			})
			if err != nil {
				return res, err
			}
			row.Status = s
		}
		if kv := req.GetSettings(); len(kv) > 0 {
			row.Settings = journal.MergeSettings(row.GetSettings(), kv)
		}
		if err := t.setRow(cs, row); err != nil {
			return res, err
		}
	} else if err := t.ensureRow(cs, created); err != nil {
		return res, err
	}
	for _, d := range req.GetSchedule() {
		if err := checkTime(d.GetAt(), d.GetToolCallId()); err != nil {
			return res, err
		}
		if err := t.setDeadline(conv, d.GetToolCallId(), d.GetAt()); err != nil {
			return res, err
		}
	}
	for _, id := range req.GetCancel() {
		if err := t.setDeadline(conv, id, nil); err != nil {
			return res, err
		}
	}
	for _, d := range req.GetReschedule() {
		if err := t.rescheduleCall(conv, d.GetToolCallId(), d.GetAt()); err != nil {
			return res, err
		}
	}
	fired, err := t.checkFire(conv, req.GetScheduleFire())
	if err != nil {
		return res, err
	}
	t.stageFire(conv, fired, req.GetScheduleFire())
	// Events last: nothing after this can fail. encodeEvents gave them
	// the seqs after ExpectedLast, which is last: only a fenced request
	// carries events. (The key's seq is not read back from the event: one
	// given twice holds the seq of its last position.)
	if evs := req.GetEvents(); len(evs) > 0 {
		t.key = stageEvents(t.b, t.enc, appendID(append(t.key[:0], famEvent), conv), last, len(evs))
		t.saveConv(cs)
		cs.lastSeq = last + uint64(len(evs))
		res.FirstSeq, res.LastSeq = last+1, cs.lastSeq
	}
	return res, nil
}

// encodeEvents gives the events of req the seqs after its ExpectedLast,
// recording the caller's in t.seqs, and encodes them into t.enc, checked
// with journal.EncodeAppendEvent: an event that cannot be encoded or
// exceeds MaxEventBytes (as the caller gave it) fails the request with
// ErrInvalid before anything of it is staged. Only fenced requests carry
// events (see journal.ValidateAppendShape), and apply fails one whose
// ExpectedLast is not the conversation's last seq, so these are the seqs
// the events get. The caller (apply) restores the seqs if req fails.
func (t *txn) encodeEvents(req *messages.AppendRequest) error {
	evs := req.GetEvents()
	if len(evs) == 0 {
		return nil
	}
	if t.enc == nil {
		t.enc = encPool.Get().(*eventScratch)
	}
	e := t.enc
	e.buf, e.ends = e.buf[:0], e.ends[:0]
	first := req.GetExpectedLast() + 1
	for i, ev := range evs {
		given := ev.GetSeq()
		t.seqs = append(t.seqs, seqUndo{ev, given})
		ev.Seq = first + uint64(i)
		if given != 0 && given != ev.Seq {
			given = t.callerSeq(ev, given)
		}
		var err error
		e.buf, err = journal.EncodeAppendEvent(e.buf, req, i, given)
		if err != nil {
			return fmt.Errorf("pebblejournal: %w", err)
		}
		e.ends = append(e.ends, len(e.buf))
	}
	return nil
}

// callerSeq returns the Seq the caller gave ev, which has seq now: the
// first one recorded in t.seqs if this txn set ev's Seq before (an event
// given twice), else seq. ValidateAppend, which the checks of the events
// stand for, saw the events before the store set any seq. This scans
// t.seqs, so it is for the rare events whose seq is neither unset nor the
// one they get (the runtime sets the right one).
func (t *txn) callerSeq(ev *messages.Event, seq uint64) uint64 {
	for _, u := range t.seqs[:len(t.seqs)-1] {
		if u.ev == ev {
			return u.seq
		}
	}
	return seq
}

// resultEvent returns the seq that the fenced request req (appending after
// last) gives to a tool_result event of r's call whose outcome is r's
// result, or 0 if it has none: the row's result is then stored only there.
// The runtime passes the same outcome message to both, which is checked
// first; an equal copy qualifies too.
func resultEvent(req *messages.AppendRequest, r *messages.ToolResolution, last uint64) uint64 {
	if req.GetUnfenced() || r.GetResult() == nil {
		return 0
	}
	for i, ev := range req.GetEvents() {
		tr := ev.GetToolResult()
		if tr == nil || tr.GetToolCallId() != r.GetToolCallId() {
			continue
		}
		if out := tr.GetOutcome(); out == r.GetResult() || proto.Equal(out, r.GetResult()) {
			return last + 1 + uint64(i)
		}
	}
	return 0
}

// commit writes the overlay into the batch and commits it synced, then
// records its state in the head and call caches. On failure it restores the
// seqs it set on the caller's events and drops what it touched from the
// caches.
func (t *txn) commit() error {
	minAdd, err := t.flush()
	if err == nil {
		if minAdd != nil {
			t.s.dl.beginAdd(minAdd)
			defer t.s.dl.endAdd()
		}
		err = t.s.commit(t.b)
		t.commitFailed = err != nil
	}
	if err != nil {
		t.restoreSeqs()
	}
	t.updateCaches(err == nil)
	return err
}

// restoreSeqs restores every seq the txn set on the caller's events.
func (t *txn) restoreSeqs() { t.restoreSeqsFrom(0) }

// restoreSeqsFrom restores the seqs recorded in t.seqs from index m on, in
// reverse order (an event given twice gets back its first value), and
// forgets them.
func (t *txn) restoreSeqsFrom(m int) {
	for i := len(t.seqs) - 1; i >= m; i-- {
		t.seqs[i].ev.Seq = t.seqs[i].seq
	}
	t.seqs = t.seqs[:m]
}

// updateCaches records in the head and call caches what the txn knows of
// its conversations and of the calls it wrote, once its commit returned:
// their new state if ok, nothing (the entries are dropped) if not.
func (t *txn) updateCaches(ok bool) {
	var dls map[string]map[string]*timestamppb.Timestamp
	if ok {
		dls = t.finalDeadlines()
	}
	for _, cs := range t.convList {
		if !ok || cs.tomb || !cs.seqLoaded {
			t.s.heads.drop(cs.stripe, cs.id)
			continue
		}
		hasRow := cs.hasRow || cs.lastSeq > 0 || (cs.rowLoaded && cs.row != nil)
		h := head{lastSeq: cs.lastSeq, hasRow: hasRow, dls: dls[cs.id]}
		if cs.rowLoaded {
			h.row = cs.row
		}
		if h.dls == nil {
			// The txn did not look at its deadlines: the cache's entry
			// (the one it started from, if any; none appeared since, as
			// only a writer holding the lock puts one) still holds.
			h.dls = cs.headDls
		}
		t.s.heads.put(cs.stripe, cs.id, h)
	}
	// Conversations whose deadlines changed without the txn loading their
	// head (CancelDeadline, a resolve on its own) keep an entry only if it
	// is brought up to date.
	for conv := range t.known {
		if t.findConv(conv) != nil {
			continue
		}
		stripe := t.s.convStripe(conv)
		h, found := t.s.heads.get(stripe, conv)
		switch {
		case !found:
		case !ok:
			t.s.heads.drop(stripe, conv)
		default:
			h.dls = dls[conv]
			t.s.heads.put(stripe, conv, h)
		}
	}
	for id, c := range t.calls {
		if !c.dirty {
			continue // only a writer of the call may record it (see callCache)
		}
		stripe := t.s.idStripe(id)
		if ok && c.rec.GetStatus() == messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING {
			// A copy: the row may be the caller's, who may change it once
			// the call returned.
			t.s.calls.put(stripe, id, cachedCall{owner: c.owner, rec: proto.Clone(c.rec).(*messages.ToolCallRecord)})
		} else {
			t.s.calls.drop(stripe, id)
		}
	}
}

// flush writes the final state of every changed row into the batch. It
// returns the smallest deadline-by-time key it adds, if any.
func (t *txn) flush() (minAdd []byte, err error) {
	b := t.b
	for _, cs := range t.convList {
		if !cs.rowDirty {
			continue
		}
		v, err := proto.Marshal(cs.row)
		if err != nil {
			return nil, journal.Invalidf("pebblejournal: row of %q cannot be encoded (%v)", cs.id, err)
		}
		t.key = appendID(append(t.key[:0], famConv), cs.id)
		_ = b.Set(t.key, v, nil)
		// The active index changes with the status, in this batch. The
		// committed status is known (the row was loaded before it was
		// edited, usually from the head cache), so a write that leaves
		// the status on the same side of ACTIVE touches no index key.
		t.key[0] = famActive
		switch active := isActive(cs.row); {
		case cs.origKnown && active == cs.origActive:
		case active:
			_ = b.Set(t.key, nil, nil)
		default:
			_ = b.Delete(t.key, nil)
		}
	}
	for _, c := range t.calls {
		if !c.dirty {
			continue
		}
		v, err := proto.Marshal(c.rec)
		if err != nil {
			return nil, journal.Invalidf("pebblejournal: tool call %q cannot be encoded (%v)", c.id, err)
		}
		if c.owner != c.origOwner {
			t.key = appendID(append(t.key[:0], famCallOwner), c.id)
			_ = b.Set(t.key, []byte(c.owner), nil)
		}
		t.key = appendID(appendID(append(t.key[:0], famToolCall), c.owner), c.id)
		_ = b.Set(t.key, v, nil)
		t.key[0] = famPending
		pending := c.rec.GetStatus() == messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING
		switch {
		case pending && (!c.origPending || c.owner != c.origOwner):
			_ = b.Set(t.key, nil, nil)
		case !pending && c.origPending:
			_ = b.Delete(t.key, nil)
		}
	}
	for key, d := range t.dls {
		if !d.dirty || proto.Equal(d.orig, d.cur) {
			continue
		}
		if d.orig != nil {
			_ = b.Delete(byTimeKey(d.orig, key.call, key.conv), nil)
		}
		if d.cur == nil {
			_ = b.Delete(idKey(famDeadline, key.conv, key.call), nil)
			continue
		}
		v, err := proto.Marshal(&messages.Deadline{ConversationId: key.conv, ToolCallId: key.call, At: d.cur})
		if err != nil {
			return nil, journal.Invalidf("pebblejournal: deadline of %q cannot be encoded (%v)", key.call, err)
		}
		_ = b.Set(idKey(famDeadline, key.conv, key.call), v, nil)
		tk := byTimeKey(d.cur, key.call, key.conv)
		_ = b.Set(tk, nil, nil)
		if minAdd == nil || bytes.Compare(tk, minAdd) < 0 {
			minAdd = tk
		}
	}
	return minAdd, nil
}

// checkTime rejects a timestamp outside the range protobuf allows; the
// deadline index relies on it being normalized.
func checkTime(at *timestamppb.Timestamp, call string) error {
	if err := at.CheckValid(); err != nil {
		return journal.Invalidf("pebblejournal: deadline of tool call %q: %v", call, err)
	}
	return nil
}

// checkSize rejects a record that cannot be encoded or exceeds max bytes.
func checkSize(what string, m proto.Message, max int) error {
	n := proto.Size(m)
	if n > max {
		return journal.Invalidf("pebblejournal: %s of %d bytes exceeds %d", what, n, max)
	}
	return nil
}
