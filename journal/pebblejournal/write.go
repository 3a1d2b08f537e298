package pebblejournal

import (
	"context"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Append implements journal.EventLog.
func (s *Store) Append(ctx context.Context, req *messages.AppendRequest) (journal.AppendResult, error) {
	var res [1]journal.AppendResult
	s.appendBatch(ctx, []*messages.AppendRequest{req}, res[:])
	return res[0], res[0].Err
}

// AppendBatch implements journal.EventLog: every request that passes its
// checks is committed in one synced Pebble batch (one WAL sync for all).
func (s *Store) AppendBatch(ctx context.Context, reqs []*messages.AppendRequest) []journal.AppendResult {
	res := make([]journal.AppendResult, len(reqs))
	s.appendBatch(ctx, reqs, res)
	return res
}

// appendBatch is AppendBatch, writing the result of reqs[i] in res[i]. A
// single request of events alone, to a conversation whose head is cached,
// takes appendEvents.
func (s *Store) appendBatch(ctx context.Context, reqs []*messages.AppendRequest, res []journal.AppendResult) {
	if len(reqs) == 1 {
		if r, ok := s.appendEvents(ctx, reqs[0]); ok {
			res[0] = r
			return
		}
	}
	failAll := func(idx []int, err error) {
		for _, i := range idx {
			res[i] = journal.AppendResult{Err: err}
		}
	}
	if err := s.begin(ctx); err != nil {
		for i := range res {
			res[i].Err = err
		}
		return
	}
	defer s.end()

	var ls lockSet
	// valid and applied hold indexes of reqs; a single Append's stay on
	// the stack.
	var validBuf, appliedBuf [4]int
	valid, applied := validBuf[:0], appliedBuf[:0]
	for i, req := range reqs {
		// The events' encoding is checked by txn.apply, which encodes
		// each event once, into what it writes.
		if err := journal.ValidateAppendShape(req); err != nil {
			res[i].Err = fmt.Errorf("pebblejournal: %w", err)
			continue
		}
		valid = append(valid, i)
		ls.addConv(s.convStripe(req.GetConversationId()))
		for _, tc := range req.GetToolCalls() {
			ls.addID(s.idStripe(tc.GetId()))
		}
	}
	if len(valid) == 0 {
		return
	}
	s.lock(&ls)
	defer s.unlock(&ls)
	if ctx != nil && ctx.Err() != nil {
		failAll(valid, fmt.Errorf("pebblejournal: %w", ctx.Err()))
		return
	}

	// A batch kept from an earlier group commit, with its buffer.
	t := s.newGroupTxn()
	defer t.close()
	for _, i := range valid {
		r, err := t.apply(reqs[i])
		if err != nil {
			res[i].Err = err
			continue
		}
		res[i] = r
		applied = append(applied, i)
	}
	if len(applied) == 0 {
		return
	}
	if err := t.commit(); err != nil {
		failAll(applied, err)
	}
}

// PutSummary implements journal.Summaries.
func (s *Store) PutSummary(ctx context.Context, conversationID string, sum *messages.Summary) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	defer s.end()
	if err := journal.ValidateID("conversation id", conversationID); err != nil {
		return fmt.Errorf("pebblejournal: %w", err)
	}
	if err := journal.ValidateSummaryShape(conversationID, sum); err != nil {
		return fmt.Errorf("pebblejournal: %w", err)
	}
	defer s.lockConv(conversationID)()
	t := s.newTxn()
	defer t.close()
	cs, err := t.live(conversationID)
	if err != nil {
		return err
	}
	last, err := t.lastSeq(cs)
	if err != nil {
		return err
	}
	if err := journal.ValidateSummary(conversationID, sum, last); err != nil {
		return fmt.Errorf("pebblejournal: %w", err)
	}
	v, err := proto.Marshal(sum)
	if err != nil {
		return journal.Invalidf("pebblejournal: summary of %q cannot be encoded (%v)", conversationID, err)
	}
	_ = t.b.Set(seqKey(famSummary, conversationID, sum.GetToSeq()), v, nil)
	return t.commit()
}

// UpsertToolCall implements journal.ToolCalls.
func (s *Store) UpsertToolCall(ctx context.Context, rec *messages.ToolCallRecord) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	defer s.end()
	if err := journal.ValidateToolCall(rec); err != nil {
		return fmt.Errorf("pebblejournal: %w", err)
	}
	defer s.lockConvAndID(rec.GetConversationId(), rec.GetId())()
	t := s.newTxn()
	defer t.close()
	cs, err := t.live(rec.GetConversationId())
	if err != nil {
		return err
	}
	if err := t.upsertCall(cs, rec); err != nil {
		return err
	}
	return t.commit()
}

// ResolveToolCall implements journal.ToolCalls. Concurrent resolvers of one
// call serialize on its conversation's lock; the first commits, the others
// then find it not pending.
func (s *Store) ResolveToolCall(ctx context.Context, toolCallID string, status messages.ToolCallStatus, result *messages.ToolOutcome, at time.Time) (*messages.ToolCallRecord, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	defer s.end()
	if err := journal.ValidateResolution(toolCallID, status); err != nil {
		return nil, fmt.Errorf("pebblejournal: %w", err)
	}
	if err := journal.ValidateResolvedAt(toolCallID, at); err != nil {
		return nil, fmt.Errorf("pebblejournal: %w", err)
	}
	if err := journal.ValidateResolutionResult(toolCallID, result); err != nil {
		return nil, fmt.Errorf("pebblejournal: %w", err)
	}
	ok := ownerKey(toolCallID)
	var conv string
	found, err := s.get(ok, func(v []byte) (err error) {
		conv, err = decodeOwner(ok, v)
		return err
	})
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, fmt.Errorf("pebblejournal: resolve tool call %q: unknown: %w", toolCallID, journal.ErrStale)
	}
	// The owner was read without a lock; resolveCall checks it again under
	// the conversation's lock.
	return s.resolveLocked(ctx, conv, toolCallID, status, result, at)
}

func (s *Store) resolveLocked(ctx context.Context, conv, toolCallID string, status messages.ToolCallStatus, result *messages.ToolOutcome, at time.Time) (*messages.ToolCallRecord, error) {
	defer s.lockConv(conv)()
	if ctx != nil && ctx.Err() != nil {
		return nil, fmt.Errorf("pebblejournal: %w", ctx.Err())
	}
	t := s.newTxn()
	defer t.close()
	rec, err := t.resolveCall(conv, toolCallID, status, result, journal.Timestamp(at), nil, 0)
	if err != nil {
		return nil, err
	}
	if err := t.commit(); err != nil {
		return nil, err
	}
	// The caller's own copy: rec shares messages with the row it
	// replaced (see copyCall), which concurrent readers may still hold.
	return proto.Clone(rec).(*messages.ToolCallRecord), nil
}

// ScheduleDeadline implements journal.Deadlines.
func (s *Store) ScheduleDeadline(ctx context.Context, d *messages.Deadline) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	defer s.end()
	if err := journal.ValidateDeadline(d); err != nil {
		return fmt.Errorf("pebblejournal: %w", err)
	}
	if err := checkTime(d.GetAt(), d.GetToolCallId()); err != nil {
		return err
	}
	conv := d.GetConversationId()
	defer s.lockConv(conv)()
	t := s.newTxn()
	defer t.close()
	if _, err := t.live(conv); err != nil {
		return err
	}
	if err := t.setDeadline(conv, d.GetToolCallId(), d.GetAt()); err != nil {
		return err
	}
	return t.commit()
}

// CancelDeadline implements journal.Deadlines.
func (s *Store) CancelDeadline(ctx context.Context, conversationID, toolCallID string) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	defer s.end()
	if err := journal.ValidateID("conversation id", conversationID); err != nil {
		return fmt.Errorf("pebblejournal: %w", err)
	}
	if err := journal.ValidateID("tool call id", toolCallID); err != nil {
		return fmt.Errorf("pebblejournal: %w", err)
	}
	defer s.lockConv(conversationID)()
	t := s.newTxn()
	defer t.close()
	if err := t.setDeadline(conversationID, toolCallID, nil); err != nil {
		return err
	}
	return t.commit()
}

// PutModelCall implements journal.Audit. It checks mc first, audit on or
// off (ErrInvalid); with audit off it then stores nothing.
func (s *Store) PutModelCall(ctx context.Context, mc *messages.ModelCall) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	defer s.end()
	if err := journal.ValidateModelCall(mc); err != nil {
		return fmt.Errorf("pebblejournal: %w", err)
	}
	if !s.audit {
		return nil
	}
	conv := mc.GetConversationId()
	if err := checkSize(fmt.Sprintf("model call %d of %q", mc.GetTurnRef(), conv), mc, journal.MaxRecordBytes); err != nil {
		return err
	}
	v, err := proto.Marshal(mc)
	if err != nil {
		return journal.Invalidf("pebblejournal: model call of %q cannot be encoded (%v)", conv, err)
	}
	defer s.lockConv(conv)()
	t := s.newTxn()
	defer t.close()
	if _, err := t.live(conv); err != nil {
		return err
	}
	_ = t.b.Set(seqKey(famAudit, conv, mc.GetTurnRef()), v, nil)
	return t.commit()
}

// GCModelCalls implements journal.Audit.
func (s *Store) GCModelCalls(ctx context.Context, conversationID string, olderThan time.Time) (int, error) {
	if err := s.begin(ctx); err != nil {
		return 0, err
	}
	defer s.end()
	if err := journal.ValidateID("conversation id", conversationID); err != nil {
		return 0, fmt.Errorf("pebblejournal: %w", err)
	}
	if !s.audit {
		return 0, nil
	}
	defer s.lockConv(conversationID)()
	b := s.db.NewBatch()
	defer b.Close()
	n := 0
	prefix := convKey(famAudit, conversationID)
	err := s.scan(prefix, convEnd(famAudit, conversationID), func(k, v []byte) error {
		mc, err := decodeModelCall(k, v, prefix, conversationID)
		if err != nil {
			return err
		}
		if mc.GetCreated() == nil || mc.GetCreated().AsTime().Before(olderThan) {
			_ = b.Delete(k, nil)
			n++
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	if err := s.commit(b); err != nil {
		return 0, err
	}
	return n, nil
}

// PutConversation implements journal.Conversations.
func (s *Store) PutConversation(ctx context.Context, u journal.ConversationUpdate) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	defer s.end()
	return s.putConversation(u)
}

func (s *Store) putConversation(u journal.ConversationUpdate) error {
	if err := journal.ValidateID("conversation id", u.ID); err != nil {
		return fmt.Errorf("pebblejournal: %w", err)
	}
	if err := journal.ValidateMetadata(u.ID, u.Settings); err != nil {
		return fmt.Errorf("pebblejournal: settings: %w", err)
	}
	if !journal.ValidStatus(u.Status) {
		return journal.Invalidf("pebblejournal: conversation %q: unknown status %d", u.ID, u.Status)
	}
	if err := journal.ValidateCreated(u.ID, u.Created); err != nil {
		return fmt.Errorf("pebblejournal: %w", err)
	}
	if u.FSMState != nil {
		if err := journal.ValidateFSMState(u.ID, u.FSMState); err != nil {
			return fmt.Errorf("pebblejournal: %w", err)
		}
	}
	defer s.lockConv(u.ID)()
	t := s.newTxn()
	defer t.close()
	cs, err := t.live(u.ID)
	if err != nil {
		return err
	}
	row, err := t.editRow(cs, nil)
	if err != nil {
		return err
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
		row.FsmState = proto.Clone(u.FSMState).(*messages.FSMState) // the row may be cached: keep none of the caller's
	}
	if u.Created != nil {
		row.Created = proto.Clone(u.Created).(*timestamppb.Timestamp)
	}
	if err := t.setRow(cs, row); err != nil {
		return err
	}
	return t.commit()
}

// PutFSMState implements journal.Conversations. A nil st is ErrInvalid.
func (s *Store) PutFSMState(ctx context.Context, id string, st *messages.FSMState) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	defer s.end()
	if st == nil {
		return journal.Invalidf("pebblejournal: nil fsm_state for %q", id)
	}
	return s.putConversation(journal.ConversationUpdate{ID: id, FSMState: st})
}

// PutMetadata implements journal.Conversations.
func (s *Store) PutMetadata(ctx context.Context, id string, kv map[string]string) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	defer s.end()
	if err := journal.ValidateID("conversation id", id); err != nil {
		return fmt.Errorf("pebblejournal: %w", err)
	}
	if err := journal.ValidateMetadata(id, kv); err != nil {
		return fmt.Errorf("pebblejournal: %w", err)
	}
	defer s.lockConv(id)()
	t := s.newTxn()
	defer t.close()
	if _, err := t.live(id); err != nil {
		return err
	}
	cur, err := s.metadata(id)
	if err != nil {
		return err
	}
	if err := journal.ValidateMetadata(id, journal.MergeSettings(cur, kv)); err != nil {
		return fmt.Errorf("pebblejournal: %w", err)
	}
	for k, v := range kv {
		old, had, err := s.metaValue(id, k)
		if err != nil {
			return err
		}
		t.setMeta(id, k, v, old, had)
	}
	return t.commit()
}

// DeleteConversation implements journal.Conversations: one synced batch of
// a range delete per conversation family, point deletes of the conversation's
// entries in the global indexes (tool call owners, deadlines by time), the
// row's and its active-index entry's deletes and the tombstone.
func (s *Store) DeleteConversation(ctx context.Context, id string) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	defer s.end()
	if err := journal.ValidateID("conversation id", id); err != nil {
		return fmt.Errorf("pebblejournal: %w", err)
	}
	defer s.lockConv(id)()
	t := s.newTxn()
	defer t.close()
	cs, err := t.conv(id)
	if err != nil {
		return err
	}
	if cs.tomb {
		return fmt.Errorf("pebblejournal: delete conversation %q: already deleted: %w", id, journal.ErrNotFound)
	}
	row, err := t.row(cs)
	if err != nil {
		return err
	}
	if row == nil {
		// Records written without a row (metadata, tool calls,
		// deadlines, audit rows) are the conversation's too.
		held, err := s.holdsRecords(id)
		if err != nil {
			return err
		}
		if !held {
			return fmt.Errorf("pebblejournal: delete conversation %q: %w", id, journal.ErrNotFound)
		}
	}
	b := t.b
	// Global index entries first: they are found through the
	// conversation's own keys, which the range deletes remove.
	callPrefix := convKey(famToolCall, id)
	err = s.scanKeys(callPrefix, convEnd(famToolCall, id), func(k []byte) error {
		call, err := parseIDKey(k, callPrefix)
		if err != nil {
			return err
		}
		c, err := t.call(call)
		if err != nil {
			return err
		}
		s.calls.drop(s.idStripe(call), call)
		if c.owner == id {
			_ = b.Delete(ownerKey(call), nil)
		}
		return nil
	})
	if err != nil {
		return err
	}
	dlPrefix := convKey(famDeadline, id)
	err = s.scan(dlPrefix, convEnd(famDeadline, id), func(k, v []byte) error {
		call, err := parseIDKey(k, dlPrefix)
		if err != nil {
			return err
		}
		d, err := decodeDeadline(k, v, id, call)
		if err != nil {
			return err
		}
		_ = b.Delete(byTimeKey(d.GetAt(), call, id), nil)
		return nil
	})
	if err != nil {
		return err
	}
	metaPrefix := convKey(famMetadata, id)
	err = s.scan(metaPrefix, convEnd(famMetadata, id), func(k, v []byte) error {
		key, err := parseIDKey(k, metaPrefix)
		if err != nil {
			return err
		}
		val, err := decodeMetadataValue(k, v)
		if err != nil {
			return err
		}
		_ = b.Delete(findKey(key, val, id), nil)
		return nil
	})
	if err != nil {
		return err
	}
	if err := s.deleteFileRefs(b, id); err != nil {
		return err
	}
	if err := t.deleteSchedules(id); err != nil {
		return err
	}
	for _, fam := range convFamilies {
		_ = b.DeleteRange(convKey(fam, id), convEnd(fam, id), nil)
	}
	_ = b.Delete(convKey(famConv, id), nil)
	_ = b.Delete(convKey(famActive, id), nil)
	tomb, err := proto.Marshal(&messages.Tombstone{Deleted: t.now()})
	if err != nil {
		return fmt.Errorf("pebblejournal: encode tombstone: %w", err)
	}
	_ = b.Set(convKey(famTombstone, id), tomb, nil)
	s.heads.drop(s.convStripe(id), id)
	return s.commit(b)
}

// holdsRecords reports whether a key of any of the conversation's
// families (convFamilies) is stored.
func (s *Store) holdsRecords(id string) (bool, error) {
	for _, fam := range convFamilies {
		it, err := s.newIter(convKey(fam, id), convEnd(fam, id))
		if err != nil {
			return false, err
		}
		found := it.First()
		if err := closeIter(it, nil); err != nil || found {
			return found, err
		}
	}
	return false, nil
}

// newIter returns an iterator bounded to [lower, upper).
func (s *Store) newIter(lower, upper []byte) (*pebble.Iterator, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return nil, fmt.Errorf("pebblejournal: new iterator at %s: %w", keyString(lower), storageErr(err))
	}
	return it, nil
}

// closeIter closes it and returns err, or the iterator's error if err is
// nil.
func closeIter(it *pebble.Iterator, err error) error {
	if cerr := it.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("pebblejournal: iterate: %w", storageErr(cerr))
	}
	return err
}

// scan calls fn for every key in [lower, upper) in order, with its value
// (valid only during the call).
func (s *Store) scan(lower, upper []byte, fn func(k, v []byte) error) error {
	it, err := s.newIter(lower, upper)
	if err != nil {
		return err
	}
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			return closeIter(it, fmt.Errorf("pebblejournal: read %s: %w", keyString(it.Key()), storageErr(err)))
		}
		if err := fn(it.Key(), v); err != nil {
			return closeIter(it, err)
		}
	}
	return closeIter(it, nil)
}

// scanKeys is scan without values.
func (s *Store) scanKeys(lower, upper []byte, fn func(k []byte) error) error {
	it, err := s.newIter(lower, upper)
	if err != nil {
		return err
	}
	for ok := it.First(); ok; ok = it.Next() {
		if err := fn(it.Key()); err != nil {
			return closeIter(it, err)
		}
	}
	return closeIter(it, nil)
}
