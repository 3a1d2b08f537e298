package memjournal

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Options configures a Store. The zero value is valid and means audit off.
type Options struct {
	// Audit turns on the audit rows of journal.Audit. Default false:
	// PutModelCall only checks its call (ErrInvalid), ModelCalls returns
	// nothing and GCModelCalls removes nothing.
	Audit bool
}

// Store is the in-memory journal.Store. Create it with New; the zero value
// is not usable.
type Store struct {
	audit  bool
	closed atomic.Bool

	mu sync.Mutex
	st *state // nil only after ReopenForTesting moved it away
}

var _ journal.Store = (*Store)(nil)

// state is everything a Store holds. Every record in it is owned by the
// state: it was cloned on the way in and is cloned on the way out.
type state struct {
	convs     map[string]*conv
	deleted   map[string]struct{}                 // tombstones
	toolCalls map[string]*messages.ToolCallRecord // by tool call id, all conversations
	deadlines map[deadlineKey]*messages.Deadline  // all conversations
	// active holds the ids of the conversations whose row is ACTIVE, kept
	// by every change of a row (indexActive) and by a delete.
	active map[string]struct{}
	// found is the metadata index: key, then value, then the ids holding
	// the pair; kept by every change of metadata (setMeta) and by a delete.
	found map[string]map[string]map[string]struct{}
	// files holds the blobs and file checkpoints (files.go).
	files fileState
	// schedules holds every schedule, by conversation and id (see
	// schedule.go).
	schedules map[scheduleKey]*messages.Schedule
}

type deadlineKey struct{ conv, call string }

// scheduleKey names a schedule: ids are per conversation.
type scheduleKey struct{ conv, id string }

// conv holds one conversation's records. It exists as soon as any record of
// the conversation does; row is nil until the conversation row is created.
type conv struct {
	row       *messages.Conversation
	base      uint64              // seqs 1..base are not in events (a fork's log starts after its summary)
	events    []*messages.Event   // events[i].Seq == base+i+1
	summaries []*messages.Summary // ascending ToSeq, unique
	calls     map[string]struct{} // ids of the conversation's tool calls
	pending   map[string]struct{} // ids of its pending tool calls
	deadlines map[string]struct{} // tool call ids with a deadline
	audit     map[uint64]*messages.ModelCall
	meta      map[string]string
	schedules map[string]struct{} // ids of its schedules
}

// holdsRecords reports whether anything is stored under the conversation:
// a row, or records written without one (metadata, tool call rows,
// deadlines, audit rows). An entry left empty (metadata merged away, say)
// holds nothing.
func (c *conv) holdsRecords() bool {
	return c != nil && (c.row != nil || len(c.events) > 0 || len(c.summaries) > 0 || len(c.calls) > 0 ||
		len(c.deadlines) > 0 || len(c.audit) > 0 || len(c.meta) > 0 || len(c.schedules) > 0)
}

func (c *conv) lastSeq() uint64 {
	if c == nil {
		return 0
	}
	return c.base + uint64(len(c.events))
}

// New returns an empty Store. It cannot fail.
func New(opts Options) *Store {
	return &Store{audit: opts.Audit, st: newState()}
}

func newState() *state {
	return &state{
		convs:     make(map[string]*conv),
		deleted:   make(map[string]struct{}),
		toolCalls: make(map[string]*messages.ToolCallRecord),
		deadlines: make(map[deadlineKey]*messages.Deadline),
		active:    make(map[string]struct{}),
		found:     make(map[string]map[string]map[string]struct{}),
		files:     newFileState(),
		schedules: make(map[scheduleKey]*messages.Schedule),
	}
}

// indexActive puts id in the index of ACTIVE conversations if its row is
// ACTIVE, and takes it out otherwise. Every change of a row calls it, under
// the lock that the change holds.
func (st *state) indexActive(id string, c *conv) {
	if c != nil && c.row.GetStatus() == messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE {
		st.active[id] = struct{}{}
	} else {
		delete(st.active, id)
	}
}

// ReopenForTesting closes s and returns a new Store holding s's data, as a
// durable adapter holds its data across Close and Open. It lets the durable
// cases of journal/journaltest (reopen, crash) run against this adapter,
// which loses nothing on a simulated crash because every write is complete
// when its call returns. s must not be used afterwards; calling
// ReopenForTesting twice on the same Store panics.
func (s *Store) ReopenForTesting() *Store {
	s.closed.Store(true)
	s.mu.Lock()
	st := s.st
	s.st = nil
	s.mu.Unlock()
	if st == nil {
		panic("memjournal: ReopenForTesting on a Store whose data already moved")
	}
	return &Store{audit: s.audit, st: st}
}

// Close closes the Store: every later call returns an error wrapping
// journal.ErrClosed, and a call in flight that has not yet taken the lock
// does too. It keeps the data, as a durable adapter keeps its data across
// Close and Open, so that ReopenForTesting can hand it to a new Store; the
// memory goes when the Store value is no longer referenced. It is safe to
// call more than once; later calls return nil.
func (s *Store) Close() error {
	s.closed.Store(true)
	return nil
}

// enter reports why a call cannot start: the Store is closed or ctx is done.
func (s *Store) enter(ctx context.Context) error {
	if s.closed.Load() {
		return fmt.Errorf("memjournal: %w", journal.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memjournal: %w", err)
	}
	return nil
}

// lock takes the mutex and returns the state, or ErrClosed if the Store was
// closed in the meantime. On error the mutex is not held.
func (s *Store) lock() (*state, error) {
	s.mu.Lock()
	if s.closed.Load() || s.st == nil {
		s.mu.Unlock()
		return nil, fmt.Errorf("memjournal: %w", journal.ErrClosed)
	}
	return s.st, nil
}

// lockConversation is the prologue of the methods that read one
// conversation: it checks ctx and the id, then takes the lock. On success
// the caller must unlock s.mu.
func (s *Store) lockConversation(ctx context.Context, conversationID string) (*state, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	if err := journal.ValidateID("conversation id", conversationID); err != nil {
		return nil, fmt.Errorf("memjournal: %w", err)
	}
	return s.lock()
}

func clone[M proto.Message](m M) M { return proto.Clone(m).(M) }

func cloneAll[M proto.Message](ms []M) []M {
	if len(ms) == 0 {
		return nil
	}
	out := make([]M, len(ms))
	for i, m := range ms {
		out[i] = clone(m)
	}
	return out
}

func deletedErr(op, id string) error {
	return fmt.Errorf("memjournal: %s %q: %w", op, id, journal.ErrDeleted)
}

// conv returns the conversation's records, creating an empty entry (with no
// row) if needed.
func (st *state) conv(id string) *conv {
	c := st.convs[id]
	if c == nil {
		c = &conv{}
		st.convs[id] = c
	}
	return c
}

// ---- EventLog ----

// Append implements journal.EventLog.
func (s *Store) Append(ctx context.Context, req *messages.AppendRequest) (journal.AppendResult, error) {
	res := s.AppendBatch(ctx, []*messages.AppendRequest{req})[0]
	return res, res.Err
}

// AppendBatch implements journal.EventLog. Requests are checked and applied
// one after the other under one lock hold, so a request sees the effects of
// the earlier requests of the batch.
func (s *Store) AppendBatch(ctx context.Context, reqs []*messages.AppendRequest) []journal.AppendResult {
	results := make([]journal.AppendResult, len(reqs))
	if err := s.enter(ctx); err != nil {
		for i := range results {
			results[i].Err = err
		}
		return results
	}
	// Validate and copy outside the lock.
	copies := make([]*messages.AppendRequest, len(reqs))
	for i, req := range reqs {
		if err := journal.ValidateAppend(req); err != nil {
			results[i].Err = fmt.Errorf("memjournal: %w", err)
			continue
		}
		copies[i] = clone(req)
	}
	now := time.Now()
	st, err := s.lock()
	if err != nil {
		for i := range results {
			if results[i].Err == nil {
				results[i].Err = err
			}
		}
		return results
	}
	for i, req := range copies {
		if req == nil {
			continue
		}
		if err := st.checkAppend(req); err != nil {
			results[i].Err = err
			continue
		}
		results[i] = st.applyAppend(req, now)
	}
	s.mu.Unlock()
	// Report the assigned seqs on the caller's events, as the contract says.
	for i, req := range reqs {
		if copies[i] == nil || results[i].Err != nil {
			continue
		}
		for j, ev := range req.GetEvents() {
			ev.Seq = results[i].FirstSeq + uint64(j)
		}
	}
	return results
}

func statusOrPending(s messages.ToolCallStatus) messages.ToolCallStatus {
	if s == messages.ToolCallStatus_TOOL_CALL_STATUS_UNSPECIFIED {
		return messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING
	}
	return s
}

// checkAppend runs every check of req that needs the state, without changing
// anything.
func (st *state) checkAppend(req *messages.AppendRequest) error {
	id := req.GetConversationId()
	if _, ok := st.deleted[id]; ok {
		return deletedErr("append to", id)
	}
	last := st.convs[id].lastSeq()
	if !req.GetUnfenced() && req.GetExpectedLast() != last {
		return fmt.Errorf("memjournal: append to %q after %d (last is %d): %w", id, req.GetExpectedLast(), last, journal.ErrConflict)
	}
	if c := st.convs[id]; c != nil {
		if err := journal.CheckEnded(req, c.row.GetStatus()); err != nil {
			return fmt.Errorf("memjournal: %w", err)
		}
	}
	// The status each tool call will have once the request's upserts and
	// earlier resolutions are applied.
	var status map[string]messages.ToolCallStatus
	if len(req.GetToolCalls())+len(req.GetResolutions())+len(req.GetReschedule()) > 0 {
		status = make(map[string]messages.ToolCallStatus)
	}
	for _, tc := range req.GetToolCalls() {
		if row := st.toolCalls[tc.GetId()]; row != nil && row.GetConversationId() != id {
			return fmt.Errorf("memjournal: tool call %q of %q in an append to %q: %w", tc.GetId(), row.GetConversationId(), id, journal.ErrConflict)
		}
		status[tc.GetId()] = statusOrPending(tc.GetStatus())
	}
	for _, r := range req.GetResolutions() {
		call := r.GetToolCallId()
		cur, ok := status[call]
		if !ok {
			row := st.toolCalls[call]
			if row == nil {
				return fmt.Errorf("memjournal: resolve %q in an append to %q: unknown call: %w", call, id, journal.ErrStale)
			}
			if row.GetConversationId() != id {
				return fmt.Errorf("memjournal: resolve %q in an append to %q: a call of another conversation: %w", call, id, journal.ErrStale)
			}
			cur = row.GetStatus()
		}
		if cur != messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING {
			return fmt.Errorf("memjournal: resolve %q in an append to %q: status is %v: %w", call, id, cur, journal.ErrStale)
		}
		if due := req.GetDueBy(); due != nil {
			d := st.deadlines[deadlineKey{id, call}]
			if d == nil || d.GetAt().AsTime().After(due.AsTime()) {
				return fmt.Errorf("memjournal: resolve %q in an append to %q: no deadline due by %v: %w", call, id, due.AsTime(), journal.ErrStale)
			}
		}
		if err := st.checkResolvedRow(req, r); err != nil {
			return err
		}
		status[call] = r.GetStatus()
	}
	for _, d := range req.GetReschedule() {
		call := d.GetToolCallId()
		cur, ok := status[call]
		if !ok {
			row := st.toolCalls[call]
			if row == nil {
				return fmt.Errorf("memjournal: reschedule %q in an append to %q: unknown call: %w", call, id, journal.ErrStale)
			}
			if row.GetConversationId() != id {
				return fmt.Errorf("memjournal: reschedule %q in an append to %q: a call of another conversation: %w", call, id, journal.ErrStale)
			}
			cur = row.GetStatus()
		}
		if cur != messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING {
			return fmt.Errorf("memjournal: reschedule %q in an append to %q: status is %v: %w", call, id, cur, journal.ErrStale)
		}
	}
	var row *messages.Conversation
	if c := st.convs[id]; c != nil {
		row = c.row
	}
	if err := journal.AppendedRowFits(row, req); err != nil {
		return fmt.Errorf("memjournal: %w", err)
	}
	return st.checkFire(id, req.GetScheduleFire())
}

// checkResolvedRow reports ErrInvalid when resolution r of req would leave
// its call's row (as req's upserts leave it, else as stored) too large to
// keep, as a durable adapter finds when it encodes the row.
func (st *state) checkResolvedRow(req *messages.AppendRequest, r *messages.ToolResolution) error {
	row := st.toolCalls[r.GetToolCallId()]
	for _, tc := range req.GetToolCalls() {
		if tc.GetId() == r.GetToolCallId() {
			row = tc
		}
	}
	res := clone(row)
	res.Status, res.Result, res.Resolved, res.Resolver = r.GetStatus(), r.GetResult(), r.GetAt(), r.GetBy()
	if err := journal.ResolvedRowFits(res, req, r); err != nil {
		return fmt.Errorf("memjournal: resolve %q in an append to %q: %w", r.GetToolCallId(), req.GetConversationId(), err)
	}
	return nil
}

// applyAppend applies a checked request. req is the Store's own copy.
func (st *state) applyAppend(req *messages.AppendRequest, now time.Time) journal.AppendResult {
	id := req.GetConversationId()
	c := st.conv(id)
	res := journal.AppendResult{FirstSeq: req.GetExpectedLast(), LastSeq: req.GetExpectedLast()}
	if c.row == nil {
		created := timestamppb.New(now)
		if evs := req.GetEvents(); len(evs) > 0 && evs[0].GetTime() != nil {
			created = clone(evs[0].GetTime())
		}
		c.row = &messages.Conversation{
			Id:      id,
			Status:  messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE,
			Created: created,
			Updated: timestamppb.New(now),
		}
	}
	if evs := req.GetEvents(); len(evs) > 0 {
		res.FirstSeq = c.lastSeq() + 1
		for _, ev := range evs {
			ev.Seq = c.lastSeq() + 1
			c.events = append(c.events, ev)
		}
		res.LastSeq = c.lastSeq()
	}
	for _, tc := range req.GetToolCalls() {
		st.putToolCall(c, tc)
	}
	for _, r := range req.GetResolutions() {
		row := st.toolCalls[r.GetToolCallId()]
		st.resolve(c, row, r.GetStatus(), r.GetResult(), r.GetAt())
		row.Resolver = r.GetBy()
	}
	changed := false
	if fsm := req.GetFsmState(); fsm != nil {
		c.row.FsmState = fsm
		changed = true
	}
	if s := req.GetStatus(); s != messages.ConversationStatus_CONVERSATION_STATUS_UNSPECIFIED {
		s, _ = journal.StatusWritten(c.row.GetStatus(), s, req.GetFsmState(), func(call string) (bool, error) {
			row := st.toolCalls[call]
			return row != nil && row.GetConversationId() == id && journal.IsTerminal(row.GetStatus()), nil
		})
		c.row.Status = s
		changed = true
	}
	if kv := req.GetSettings(); len(kv) > 0 {
		c.row.Settings = journal.MergeSettings(c.row.GetSettings(), kv)
		changed = true
	}
	if changed {
		c.row.Updated = timestamppb.New(now)
	}
	for _, d := range req.GetSchedule() {
		st.schedule(c, d)
	}
	for _, call := range req.GetCancel() {
		st.cancel(c, id, call)
	}
	for _, d := range req.GetReschedule() {
		// The row is replaced, not changed in place: a reader may hold it.
		row := clone(st.toolCalls[d.GetToolCallId()])
		row.Deadline = d.GetAt()
		st.putToolCall(c, row)
		if d.GetAt() == nil {
			st.cancel(c, id, d.GetToolCallId())
		} else {
			st.schedule(c, d)
		}
	}
	st.applyFire(c, id, req.GetScheduleFire())
	st.indexActive(id, c)
	return res
}

// putToolCall stores rec (the Store's own copy) as the row of its id.
func (st *state) putToolCall(c *conv, rec *messages.ToolCallRecord) {
	rec.Status = statusOrPending(rec.GetStatus())
	st.toolCalls[rec.GetId()] = rec
	if c.calls == nil {
		c.calls = make(map[string]struct{})
	}
	c.calls[rec.GetId()] = struct{}{}
	c.setPending(rec)
}

func (c *conv) setPending(rec *messages.ToolCallRecord) {
	if rec.GetStatus() == messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING {
		if c.pending == nil {
			c.pending = make(map[string]struct{})
		}
		c.pending[rec.GetId()] = struct{}{}
	} else {
		delete(c.pending, rec.GetId())
	}
}

// resolve moves row (pending, of conversation c) to status. result and at
// are the Store's own copies.
func (st *state) resolve(c *conv, row *messages.ToolCallRecord, status messages.ToolCallStatus, result *messages.ToolOutcome, at *timestamppb.Timestamp) {
	row.Status = status
	row.Result = result
	row.Resolved = at
	c.setPending(row)
	st.cancel(c, row.GetConversationId(), row.GetId())
}

func (st *state) schedule(c *conv, d *messages.Deadline) {
	st.deadlines[deadlineKey{d.GetConversationId(), d.GetToolCallId()}] = d
	if c.deadlines == nil {
		c.deadlines = make(map[string]struct{})
	}
	c.deadlines[d.GetToolCallId()] = struct{}{}
}

func (st *state) cancel(c *conv, convID, call string) {
	delete(st.deadlines, deadlineKey{convID, call})
	if c != nil {
		delete(c.deadlines, call)
	}
}

// Events implements journal.EventLog.
func (s *Store) Events(ctx context.Context, conversationID string, q journal.EventQuery) ([]*messages.Event, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	if err := journal.ValidateID("conversation id", conversationID); err != nil {
		return nil, fmt.Errorf("memjournal: %w", err)
	}
	if q.Limit < 0 || q.MaxBytes < 0 {
		return nil, fmt.Errorf("memjournal: events of %q: %w", conversationID, journal.Invalidf("negative limit %d or max bytes %d", q.Limit, q.MaxBytes))
	}
	st, err := s.lock()
	if err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	c := st.convs[conversationID]
	n := c.lastSeq()
	lo, hi := q.After, n // seqs lo+1..hi, which are events[lo-base:hi-base]
	if q.Before > 0 && q.Before-1 < hi {
		hi = q.Before - 1
	}
	if c != nil && lo < c.base {
		lo = c.base
	}
	if lo >= hi {
		return nil, nil
	}
	if q.Limit > 0 && hi-lo > uint64(q.Limit) {
		lo = hi - uint64(q.Limit)
	}
	evs := c.events[lo-c.base : hi-c.base]
	if q.MaxBytes > 0 {
		// Taken from the end the Limit keeps: the newest with one.
		n, size := 0, 0
		for ; n < len(evs); n++ {
			i := n
			if q.Limit > 0 {
				i = len(evs) - 1 - n
			}
			if size += proto.Size(evs[i]); n > 0 && size > q.MaxBytes {
				break
			}
		}
		if q.Limit > 0 {
			evs = evs[len(evs)-n:]
		} else {
			evs = evs[:n]
		}
	}
	return cloneAll(evs), nil
}

// LastSeq implements journal.EventLog.
func (s *Store) LastSeq(ctx context.Context, conversationID string) (uint64, error) {
	st, err := s.lockConversation(ctx, conversationID)
	if err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	return st.convs[conversationID].lastSeq(), nil
}

// LoadSince implements journal.EventLog. Its cost is that of copying the
// summary and the events after it.
func (s *Store) LoadSince(ctx context.Context, conversationID string) (*messages.Summary, []*messages.Event, error) {
	st, err := s.lockConversation(ctx, conversationID)
	if err != nil {
		return nil, nil, err
	}
	defer s.mu.Unlock()
	c := st.convs[conversationID]
	if c == nil {
		return nil, nil, nil
	}
	var sum *messages.Summary
	from := uint64(0)
	if n := len(c.summaries); n > 0 {
		sum = clone(c.summaries[n-1])
		from = max(sum.GetToSeq(), c.base) - c.base
	}
	return sum, cloneAll(c.events[from:]), nil
}

// ---- Summaries ----

// PutSummary implements journal.Summaries. ErrDeleted after the
// conversation was deleted.
func (s *Store) PutSummary(ctx context.Context, conversationID string, sum *messages.Summary) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	if err := journal.ValidateID("conversation id", conversationID); err != nil {
		return fmt.Errorf("memjournal: %w", err)
	}
	if err := journal.ValidateSummaryShape(conversationID, sum); err != nil {
		return fmt.Errorf("memjournal: %w", err)
	}
	sum = clone(sum)
	st, err := s.lock()
	if err != nil {
		return err
	}
	defer s.mu.Unlock()
	if _, ok := st.deleted[conversationID]; ok {
		return deletedErr("put summary of", conversationID)
	}
	c := st.convs[conversationID]
	if err := journal.ValidateSummary(conversationID, sum, c.lastSeq()); err != nil {
		return fmt.Errorf("memjournal: %w", err)
	}
	i, found := slices.BinarySearchFunc(c.summaries, sum.GetToSeq(), func(e *messages.Summary, to uint64) int {
		return cmpUint(e.GetToSeq(), to)
	})
	if found {
		c.summaries[i] = sum
	} else {
		c.summaries = slices.Insert(c.summaries, i, sum)
	}
	return nil
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// LatestSummary implements journal.Summaries.
func (s *Store) LatestSummary(ctx context.Context, conversationID string) (*messages.Summary, error) {
	return s.summaryBefore(ctx, conversationID, 0, true)
}

// SummaryBefore implements journal.Summaries.
func (s *Store) SummaryBefore(ctx context.Context, conversationID string, toSeq uint64) (*messages.Summary, error) {
	return s.summaryBefore(ctx, conversationID, toSeq, false)
}

// summaryBefore serves both: the latest summary, or the one before toSeq.
func (s *Store) summaryBefore(ctx context.Context, conversationID string, toSeq uint64, latest bool) (*messages.Summary, error) {
	st, err := s.lockConversation(ctx, conversationID)
	if err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	var sums []*messages.Summary
	if c := st.convs[conversationID]; c != nil {
		sums = c.summaries
	}
	i := len(sums) // sums[:i] have ToSeq < toSeq
	if !latest {
		i = sort.Search(len(sums), func(j int) bool { return sums[j].GetToSeq() >= toSeq })
	}
	if i == 0 {
		if latest {
			return nil, fmt.Errorf("memjournal: summary of %q: %w", conversationID, journal.ErrNotFound)
		}
		return nil, fmt.Errorf("memjournal: summary of %q before %d: %w", conversationID, toSeq, journal.ErrNotFound)
	}
	return clone(sums[i-1]), nil
}

// ---- ToolCalls ----

// UpsertToolCall implements journal.ToolCalls. A row with an unspecified
// status, new or replacing one, is stored as pending. It does not create the
// conversation row. ErrDeleted after the conversation was deleted.
func (s *Store) UpsertToolCall(ctx context.Context, rec *messages.ToolCallRecord) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	if err := journal.ValidateToolCall(rec); err != nil {
		return fmt.Errorf("memjournal: %w", err)
	}
	rec = clone(rec)
	id := rec.GetConversationId()
	st, err := s.lock()
	if err != nil {
		return err
	}
	defer s.mu.Unlock()
	if _, ok := st.deleted[id]; ok {
		return deletedErr("upsert tool call "+rec.GetId()+" of", id)
	}
	if row := st.toolCalls[rec.GetId()]; row != nil && row.GetConversationId() != id {
		return fmt.Errorf("memjournal: tool call %q belongs to %q, not %q: %w", rec.GetId(), row.GetConversationId(), id, journal.ErrConflict)
	}
	st.putToolCall(st.conv(id), rec)
	return nil
}

// ToolCall implements journal.ToolCalls.
func (s *Store) ToolCall(ctx context.Context, toolCallID string) (*messages.ToolCallRecord, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	if err := journal.ValidateID("tool call id", toolCallID); err != nil {
		return nil, fmt.Errorf("memjournal: %w", err)
	}
	st, err := s.lock()
	if err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	row := st.toolCalls[toolCallID]
	if row == nil {
		return nil, fmt.Errorf("memjournal: tool call %q: %w", toolCallID, journal.ErrNotFound)
	}
	return clone(row), nil
}

// PendingToolCalls implements journal.ToolCalls.
func (s *Store) PendingToolCalls(ctx context.Context, conversationID string) ([]*messages.ToolCallRecord, error) {
	st, err := s.lockConversation(ctx, conversationID)
	if err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	c := st.convs[conversationID]
	if c == nil || len(c.pending) == 0 {
		return nil, nil
	}
	ids := make([]string, 0, len(c.pending))
	for id := range c.pending {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	out := make([]*messages.ToolCallRecord, len(ids))
	for i, id := range ids {
		out[i] = clone(st.toolCalls[id])
	}
	return out, nil
}

// ListPendingToolCalls implements journal.ToolCalls. Its cost depends on
// the number of conversations with pending calls and on those calls.
func (s *Store) ListPendingToolCalls(ctx context.Context, cursor string, limit int) ([]*messages.ToolCallRecord, string, error) {
	if err := s.enter(ctx); err != nil {
		return nil, "", err
	}
	afterConv, afterCall, err := journal.ParsePendingCursor(cursor)
	if err != nil {
		return nil, "", fmt.Errorf("memjournal: %w", err)
	}
	if limit, err = journal.PageSize("pending tool calls", limit); err != nil {
		return nil, "", fmt.Errorf("memjournal: %w", err)
	}
	st, err := s.lock()
	if err != nil {
		return nil, "", err
	}
	defer s.mu.Unlock()
	type key struct{ conv, call string }
	var keys []key
	for id, c := range st.convs {
		if len(c.pending) == 0 || id < afterConv {
			continue
		}
		for call := range c.pending {
			if cursor == "" || journal.PendingAfter(id, call, afterConv, afterCall) {
				keys = append(keys, key{id, call})
			}
		}
	}
	slices.SortFunc(keys, func(a, b key) int {
		if c := strings.Compare(a.conv, b.conv); c != 0 {
			return c
		}
		return strings.Compare(a.call, b.call)
	})
	next := ""
	if len(keys) > limit {
		keys = keys[:limit]
		next = journal.PendingCursor(keys[limit-1].conv, keys[limit-1].call)
	}
	out := make([]*messages.ToolCallRecord, len(keys))
	for i, k := range keys {
		out[i] = clone(st.toolCalls[k.call])
	}
	return out, next, nil
}

// ResolveToolCall implements journal.ToolCalls. A zero at leaves the row's
// resolved time unset.
func (s *Store) ResolveToolCall(ctx context.Context, toolCallID string, status messages.ToolCallStatus, result *messages.ToolOutcome, at time.Time) (*messages.ToolCallRecord, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	if err := journal.ValidateResolution(toolCallID, status); err != nil {
		return nil, fmt.Errorf("memjournal: %w", err)
	}
	if err := journal.ValidateResolvedAt(toolCallID, at); err != nil {
		return nil, fmt.Errorf("memjournal: %w", err)
	}
	if err := journal.ValidateResolutionResult(toolCallID, result); err != nil {
		return nil, fmt.Errorf("memjournal: %w", err)
	}
	if result != nil {
		result = clone(result)
	}
	st, err := s.lock()
	if err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	row := st.toolCalls[toolCallID]
	if row == nil {
		return nil, fmt.Errorf("memjournal: resolve %q: unknown call: %w", toolCallID, journal.ErrStale)
	}
	if row.GetStatus() != messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING {
		return nil, fmt.Errorf("memjournal: resolve %q: status is %v: %w", toolCallID, row.GetStatus(), journal.ErrStale)
	}
	res := clone(row)
	res.Status, res.Result, res.Resolved, res.Resolver = status, result, journal.Timestamp(at), nil
	if err := journal.ResolvedRowFits(res, nil, nil); err != nil {
		return nil, fmt.Errorf("memjournal: resolve %q: %w", toolCallID, err)
	}
	st.resolve(st.conv(row.GetConversationId()), row, status, result, journal.Timestamp(at))
	row.Resolver = nil
	return clone(row), nil
}

// ---- Deadlines ----

// ScheduleDeadline implements journal.Deadlines. Deadlines are keyed by
// conversation and tool call id.
func (s *Store) ScheduleDeadline(ctx context.Context, d *messages.Deadline) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	if err := journal.ValidateDeadline(d); err != nil {
		return fmt.Errorf("memjournal: %w", err)
	}
	d = clone(d)
	st, err := s.lock()
	if err != nil {
		return err
	}
	defer s.mu.Unlock()
	if _, ok := st.deleted[d.GetConversationId()]; ok {
		return deletedErr("schedule deadline of "+d.GetToolCallId()+" in", d.GetConversationId())
	}
	st.schedule(st.conv(d.GetConversationId()), d)
	return nil
}

// CancelDeadline implements journal.Deadlines.
func (s *Store) CancelDeadline(ctx context.Context, conversationID, toolCallID string) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	if err := journal.ValidateID("conversation id", conversationID); err != nil {
		return fmt.Errorf("memjournal: %w", err)
	}
	if err := journal.ValidateID("tool call id", toolCallID); err != nil {
		return fmt.Errorf("memjournal: %w", err)
	}
	st, err := s.lock()
	if err != nil {
		return err
	}
	defer s.mu.Unlock()
	st.cancel(st.convs[conversationID], conversationID, toolCallID)
	return nil
}

// Deadlines implements journal.Deadlines. fn runs without the Store's lock
// held, on copies taken when the call started, so fn may call any method.
// The Store holds only records its writes validated, so it never passes
// one over as corrupt.
func (s *Store) Deadlines(ctx context.Context, dueBy time.Time, fn func(*messages.Deadline) error) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	st, err := s.lock()
	if err != nil {
		return err
	}
	var due []*messages.Deadline
	for _, d := range st.deadlines {
		if dueBy.IsZero() || !d.GetAt().AsTime().After(dueBy) {
			due = append(due, clone(d))
		}
	}
	s.mu.Unlock()
	slices.SortFunc(due, func(a, b *messages.Deadline) int {
		if c := a.GetAt().AsTime().Compare(b.GetAt().AsTime()); c != 0 {
			return c
		}
		if c := strings.Compare(a.GetToolCallId(), b.GetToolCallId()); c != 0 {
			return c
		}
		return strings.Compare(a.GetConversationId(), b.GetConversationId())
	})
	for _, d := range due {
		if err := s.enter(ctx); err != nil {
			return err
		}
		if err := fn(d); err != nil {
			return err
		}
	}
	return nil
}

// ---- Audit ----

// PutModelCall implements journal.Audit. It checks mc first, audit on or
// off (ErrInvalid); with audit off it then does nothing. With audit on,
// ErrDeleted after the conversation was deleted.
func (s *Store) PutModelCall(ctx context.Context, mc *messages.ModelCall) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	if err := journal.ValidateModelCall(mc); err != nil {
		return fmt.Errorf("memjournal: %w", err)
	}
	if !s.audit {
		return nil
	}
	mc = clone(mc)
	id := mc.GetConversationId()
	st, err := s.lock()
	if err != nil {
		return err
	}
	defer s.mu.Unlock()
	if _, ok := st.deleted[id]; ok {
		return deletedErr("put model call of", id)
	}
	c := st.conv(id)
	if c.audit == nil {
		c.audit = make(map[uint64]*messages.ModelCall)
	}
	c.audit[mc.GetTurnRef()] = mc
	return nil
}

// ModelCalls implements journal.Audit.
func (s *Store) ModelCalls(ctx context.Context, conversationID string) ([]*messages.ModelCall, error) {
	st, err := s.lockConversation(ctx, conversationID)
	if err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	c := st.convs[conversationID]
	if c == nil || len(c.audit) == 0 {
		return nil, nil
	}
	out := make([]*messages.ModelCall, 0, len(c.audit))
	for _, mc := range c.audit {
		out = append(out, clone(mc))
	}
	slices.SortFunc(out, func(a, b *messages.ModelCall) int { return cmpUint(a.GetTurnRef(), b.GetTurnRef()) })
	return out, nil
}

// GCModelCalls implements journal.Audit. A row without a created time
// counts as older than any time.
func (s *Store) GCModelCalls(ctx context.Context, conversationID string, olderThan time.Time) (int, error) {
	st, err := s.lockConversation(ctx, conversationID)
	if err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	c := st.convs[conversationID]
	if c == nil {
		return 0, nil
	}
	n := 0
	for turn, mc := range c.audit {
		if mc.GetCreated() == nil || mc.GetCreated().AsTime().Before(olderThan) {
			delete(c.audit, turn)
			n++
		}
	}
	return n, nil
}

// ---- Conversations ----

// Conversation implements journal.Conversations.
func (s *Store) Conversation(ctx context.Context, id string) (*messages.Conversation, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	if err := journal.ValidateID("conversation id", id); err != nil {
		return nil, fmt.Errorf("memjournal: %w", err)
	}
	st, err := s.lock()
	if err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	if _, ok := st.deleted[id]; ok {
		return nil, deletedErr("conversation", id)
	}
	c := st.convs[id]
	if c == nil || c.row == nil {
		return nil, fmt.Errorf("memjournal: conversation %q: %w", id, journal.ErrNotFound)
	}
	return clone(c.row), nil
}

// PutConversation implements journal.Conversations. A new row is created
// now, unless u.Created says when. Settings keys follow the rules of ids, as metadata keys do.
func (s *Store) PutConversation(ctx context.Context, u journal.ConversationUpdate) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	if err := journal.ValidateID("conversation id", u.ID); err != nil {
		return fmt.Errorf("memjournal: %w", err)
	}
	if err := journal.ValidateMetadata(u.ID, u.Settings); err != nil {
		return fmt.Errorf("memjournal: settings: %w", err)
	}
	if !journal.ValidStatus(u.Status) {
		return fmt.Errorf("memjournal: %w", journal.Invalidf("conversation %q: unknown status %d", u.ID, u.Status))
	}
	if err := journal.ValidateCreated(u.ID, u.Created); err != nil {
		return fmt.Errorf("memjournal: %w", err)
	}
	var fsm *messages.FSMState
	if u.FSMState != nil {
		if err := journal.ValidateFSMState(u.ID, u.FSMState); err != nil {
			return fmt.Errorf("memjournal: %w", err)
		}
		fsm = clone(u.FSMState)
	}
	now := time.Now()
	st, err := s.lock()
	if err != nil {
		return err
	}
	defer s.mu.Unlock()
	if _, ok := st.deleted[u.ID]; ok {
		return deletedErr("put conversation", u.ID)
	}
	var row *messages.Conversation
	if c := st.convs[u.ID]; c != nil && c.row != nil {
		row = clone(c.row)
	} else {
		row = &messages.Conversation{
			Id:      u.ID,
			Status:  messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE,
			Created: timestamppb.New(now),
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
	if fsm != nil {
		row.FsmState = fsm
	}
	if u.Created != nil {
		row.Created = clone(u.Created)
	}
	row.Updated = timestamppb.New(now)
	if n := proto.Size(row); n > journal.MaxRecordBytes {
		return fmt.Errorf("memjournal: %w", journal.Invalidf("conversation %q of %d bytes exceeds %d", u.ID, n, journal.MaxRecordBytes))
	}
	c := st.conv(u.ID)
	c.row = row
	st.indexActive(u.ID, c)
	return nil
}

// PutFSMState implements journal.Conversations. A nil st is ErrInvalid.
func (s *Store) PutFSMState(ctx context.Context, id string, fsm *messages.FSMState) error {
	if fsm == nil {
		if err := s.enter(ctx); err != nil {
			return err
		}
		return fmt.Errorf("memjournal: %w", journal.Invalidf("nil fsm_state for %q", id))
	}
	return s.PutConversation(ctx, journal.ConversationUpdate{ID: id, FSMState: fsm})
}

// ListConversations implements journal.Conversations. It lists the
// conversations that have a row. Each call sorts the ids of all
// conversations: O(n log n), fine for the sizes an in-memory store holds.
func (s *Store) ListConversations(ctx context.Context, cursor string, limit int) ([]*messages.Conversation, string, error) {
	if err := s.enter(ctx); err != nil {
		return nil, "", err
	}
	limit, err := journal.PageSize("conversations", limit)
	if err != nil {
		return nil, "", fmt.Errorf("memjournal: %w", err)
	}
	st, err := s.lock()
	if err != nil {
		return nil, "", err
	}
	defer s.mu.Unlock()
	var ids []string
	for id, c := range st.convs {
		if c.row != nil && id > cursor {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	next := ""
	if len(ids) > limit {
		ids = ids[:limit]
		next = ids[limit-1]
	}
	out := make([]*messages.Conversation, len(ids))
	for i, id := range ids {
		out[i] = clone(st.convs[id].row)
	}
	return out, next, nil
}

// ListActiveConversations implements journal.Conversations: it sorts the
// ids of the ACTIVE conversations (the index kept with every row change),
// so its cost depends on their number only.
func (s *Store) ListActiveConversations(ctx context.Context, cursor string, limit int) ([]string, string, error) {
	if err := s.enter(ctx); err != nil {
		return nil, "", err
	}
	after, limit, err := journal.ParseActiveCursor(cursor, limit)
	if err != nil {
		return nil, "", fmt.Errorf("memjournal: %w", err)
	}
	st, err := s.lock()
	if err != nil {
		return nil, "", err
	}
	defer s.mu.Unlock()
	var ids []string
	for id := range st.active {
		if id > after {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	next := ""
	if len(ids) > limit {
		ids = ids[:limit]
		next = journal.ActiveCursor(ids[limit-1])
	}
	return ids, next, nil
}

// DeleteConversation implements journal.Conversations. A conversation is
// unknown when it has no row, even if it has records that do not create one
// (metadata, deadlines, tool calls, audit rows written on their own).
func (s *Store) DeleteConversation(ctx context.Context, id string) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	if err := journal.ValidateID("conversation id", id); err != nil {
		return fmt.Errorf("memjournal: %w", err)
	}
	st, err := s.lock()
	if err != nil {
		return err
	}
	defer s.mu.Unlock()
	c := st.convs[id]
	if !c.holdsRecords() {
		return fmt.Errorf("memjournal: delete %q: %w", id, journal.ErrNotFound)
	}
	for call := range c.calls {
		delete(st.toolCalls, call)
	}
	for call := range c.deadlines {
		delete(st.deadlines, deadlineKey{id, call})
	}
	for k := range c.meta {
		st.setMeta(id, c, k, "")
	}
	for sid := range c.schedules {
		delete(st.schedules, scheduleKey{id, sid})
	}
	delete(st.convs, id)
	delete(st.active, id)
	st.files.dropConversation(id)
	st.deleted[id] = struct{}{}
	return nil
}

// Metadata implements journal.Conversations.
func (s *Store) Metadata(ctx context.Context, id string) (map[string]string, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	if err := journal.ValidateID("conversation id", id); err != nil {
		return nil, fmt.Errorf("memjournal: %w", err)
	}
	st, err := s.lock()
	if err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	out := make(map[string]string)
	if c := st.convs[id]; c != nil {
		for k, v := range c.meta {
			out[k] = v
		}
	}
	return out, nil
}

// PutMetadata implements journal.Conversations.
func (s *Store) PutMetadata(ctx context.Context, id string, kv map[string]string) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	if err := journal.ValidateID("conversation id", id); err != nil {
		return fmt.Errorf("memjournal: %w", err)
	}
	if err := journal.ValidateMetadata(id, kv); err != nil {
		return fmt.Errorf("memjournal: %w", err)
	}
	st, err := s.lock()
	if err != nil {
		return err
	}
	defer s.mu.Unlock()
	if _, ok := st.deleted[id]; ok {
		return deletedErr("put metadata of", id)
	}
	var cur map[string]string
	if c := st.convs[id]; c != nil {
		cur = c.meta
	}
	if err := journal.ValidateMetadata(id, journal.MergeSettings(cur, kv)); err != nil {
		return fmt.Errorf("memjournal: %w", err)
	}
	c := st.conv(id)
	for k, v := range kv {
		st.setMeta(id, c, k, v)
	}
	return nil
}

// AuditEnabled implements journal.AuditReporter: whether the Store was
// opened with Options.Audit.
func (s *Store) AuditEnabled() bool { return s.audit }

var _ journal.AuditReporter = (*Store)(nil)
