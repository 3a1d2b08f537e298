package pebblejournal

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"google.golang.org/protobuf/proto"
)

// Each read uses one Pebble iterator, so it sees one consistent committed
// state. Pebble applies a batch to the memtable before its WAL sync
// completes, so an iterator could see a write that is not durable yet. The
// reads of a conversation's log (Events, LastSeq, LoadSince) therefore open
// their iterator under the conversation's stripe lock, which every write
// holds across its synced commit: they never see an event before the write
// that produced it has returned, so nothing streamed or revived from them
// can be lost by a crash. The other reads take no lock.

// Events implements journal.EventLog. With a Limit it iterates backward from
// the upper bound, so a page costs its size, not the length of the log.
func (s *Store) Events(ctx context.Context, conversationID string, q journal.EventQuery) ([]*messages.Event, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	defer s.end()
	if err := journal.ValidateID("conversation id", conversationID); err != nil {
		return nil, fmt.Errorf("pebblejournal: %w", err)
	}
	if q.Limit < 0 || q.MaxBytes < 0 {
		return nil, journal.Invalidf("pebblejournal: negative event limit %d or max bytes %d", q.Limit, q.MaxBytes)
	}
	if q.After == math.MaxUint64 || (q.Before != 0 && q.Before <= q.After+1) {
		return nil, nil
	}
	lower, upper := eventRange(conversationID, q.After, q.Before)
	it, err := s.newDurableIter(conversationID, lower, upper)
	if err != nil {
		return nil, err
	}
	evs, err := readEvents(it, convKey(famEvent, conversationID), q.Limit, q.MaxBytes)
	if err = closeIter(it, err); err != nil {
		return nil, err
	}
	// The log is gap-free from seq 1: the range starts at After+1, unless
	// a Limit cut it, or the log is a fork's, which starts after the
	// summary it copied.
	first := q.After + 1
	if q.Limit > 0 && (len(evs) == q.Limit || q.MaxBytes > 0) {
		first = 0
	}
	if len(evs) > 0 && first != 0 && evs[0].GetSeq() > first {
		k := seqKey(famSummary, conversationID, evs[0].GetSeq()-1)
		if found, err := s.get(k, nil); err != nil {
			return nil, err
		} else if found {
			first = evs[0].GetSeq()
		}
	}
	if err := checkSeqs(conversationID, "events", evs, first); err != nil {
		return nil, err
	}
	return evs, nil
}

// eventRange returns the key range of the events after..before (both
// exclusive; before 0 means no bound).
func eventRange(conv string, after, before uint64) (lower, upper []byte) {
	lower = seqKey(famEvent, conv, after+1)
	if before == 0 {
		upper = convEnd(famEvent, conv)
	} else {
		upper = seqKey(famEvent, conv, before)
	}
	return lower, upper
}

// readEvents decodes the events of it's bounds in ascending order: all of
// them, or the last limit ones (read backward) if limit > 0; with maxBytes
// > 0, those read first while their sizes sum to at most maxBytes, and one
// at least (EventQuery.MaxBytes).
func readEvents(it *pebble.Iterator, prefix []byte, limit, maxBytes int) ([]*messages.Event, error) {
	var out []*messages.Event
	size := 0
	full := func() bool { return maxBytes > 0 && len(out) > 0 && size > maxBytes }
	decode := func() error {
		v, err := it.ValueAndErr()
		if err != nil {
			return fmt.Errorf("pebblejournal: read %s: %w", keyString(it.Key()), storageErr(err))
		}
		ev, err := decodeEvent(it.Key(), v, prefix)
		if err != nil {
			return err
		}
		if maxBytes > 0 {
			if size += proto.Size(ev); len(out) > 0 && size > maxBytes {
				return nil // not kept: full ends the read
			}
		}
		out = append(out, ev)
		return nil
	}
	if limit > 0 {
		for ok := it.Last(); ok && len(out) < limit && !full(); ok = it.Prev() {
			if err := decode(); err != nil {
				return nil, err
			}
		}
		slices.Reverse(out)
	} else {
		for ok := it.First(); ok && !full(); ok = it.Next() {
			if err := decode(); err != nil {
				return nil, err
			}
		}
	}
	if err := it.Error(); err != nil {
		return nil, fmt.Errorf("pebblejournal: iterate events: %w", storageErr(err))
	}
	return out, nil
}

// LastSeq implements journal.EventLog with one reverse seek.
func (s *Store) LastSeq(ctx context.Context, conversationID string) (uint64, error) {
	if err := s.begin(ctx); err != nil {
		return 0, err
	}
	defer s.end()
	if err := journal.ValidateID("conversation id", conversationID); err != nil {
		return 0, fmt.Errorf("pebblejournal: %w", err)
	}
	it, err := s.newDurableIter(conversationID, convKey(famEvent, conversationID), convEnd(famEvent, conversationID))
	if err != nil {
		return 0, err
	}
	seq, err := s.lastSeqWith(&it, conversationID)
	return seq, closeIter(it, err)
}

// lastSeqWith positions *itp (creating it if nil) at the conversation's
// last event and returns its seq, 0 if none.
func (s *Store) lastSeqWith(itp **pebble.Iterator, conv string) (uint64, error) {
	lower, upper := convKey(famEvent, conv), convEnd(famEvent, conv)
	if *itp == nil {
		it, err := s.newIter(lower, upper)
		if err != nil {
			return 0, err
		}
		*itp = it
	} else {
		(*itp).SetBounds(lower, upper)
	}
	it := *itp
	if !it.Last() {
		if err := it.Error(); err != nil {
			return 0, fmt.Errorf("pebblejournal: last seq of %q: %w", conv, storageErr(err))
		}
		return 0, nil
	}
	return parseSeqKey(it.Key(), lower)
}

// LoadSince implements journal.EventLog: a reverse seek finds the latest
// summary, then the iterator (same view) reads only the events after it.
func (s *Store) LoadSince(ctx context.Context, conversationID string) (*messages.Summary, []*messages.Event, error) {
	if err := s.begin(ctx); err != nil {
		return nil, nil, err
	}
	defer s.end()
	if err := journal.ValidateID("conversation id", conversationID); err != nil {
		return nil, nil, fmt.Errorf("pebblejournal: %w", err)
	}
	sumPrefix := convKey(famSummary, conversationID)
	it, err := s.newDurableIter(conversationID, sumPrefix, convEnd(famSummary, conversationID))
	if err != nil {
		return nil, nil, err
	}
	sum, err := lastSummary(it, sumPrefix)
	if err != nil {
		return nil, nil, closeIter(it, err)
	}
	after := sum.GetToSeq()
	if after == math.MaxUint64 {
		return sum, nil, closeIter(it, nil)
	}
	lower, upper := eventRange(conversationID, after, 0)
	it.SetBounds(lower, upper)
	evs, err := readEvents(it, convKey(famEvent, conversationID), 0, 0)
	if err = closeIter(it, err); err != nil {
		return nil, nil, err
	}
	if err := checkSeqs(conversationID, "revival read", evs, after+1); err != nil {
		return nil, nil, err
	}
	return sum, evs, nil
}

// lastSummary decodes the last summary within it's bounds, nil if none.
func lastSummary(it *pebble.Iterator, prefix []byte) (*messages.Summary, error) {
	if !it.Last() {
		if err := it.Error(); err != nil {
			return nil, fmt.Errorf("pebblejournal: iterate summaries: %w", storageErr(err))
		}
		return nil, nil
	}
	v, err := it.ValueAndErr()
	if err != nil {
		return nil, fmt.Errorf("pebblejournal: read %s: %w", keyString(it.Key()), storageErr(err))
	}
	return decodeSummary(it.Key(), v, prefix)
}

// LatestSummary implements journal.Summaries.
func (s *Store) LatestSummary(ctx context.Context, conversationID string) (*messages.Summary, error) {
	return s.summaryBelow(ctx, conversationID, 0, true)
}

// SummaryBefore implements journal.Summaries.
func (s *Store) SummaryBefore(ctx context.Context, conversationID string, toSeq uint64) (*messages.Summary, error) {
	return s.summaryBelow(ctx, conversationID, toSeq, false)
}

// summaryBelow returns the summary with the greatest ToSeq < below (no bound
// if latest), by one reverse seek.
func (s *Store) summaryBelow(ctx context.Context, conv string, below uint64, latest bool) (*messages.Summary, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	defer s.end()
	if err := journal.ValidateID("conversation id", conv); err != nil {
		return nil, fmt.Errorf("pebblejournal: %w", err)
	}
	prefix := convKey(famSummary, conv)
	upper := convEnd(famSummary, conv)
	if !latest {
		if below == 0 {
			return nil, fmt.Errorf("pebblejournal: summary of %q before 0: %w", conv, journal.ErrNotFound)
		}
		upper = seqKey(famSummary, conv, below)
	}
	it, err := s.newIter(prefix, upper)
	if err != nil {
		return nil, err
	}
	sum, err := lastSummary(it, prefix)
	if err = closeIter(it, err); err != nil {
		return nil, err
	}
	if sum == nil {
		return nil, fmt.Errorf("pebblejournal: summary of %q: %w", conv, journal.ErrNotFound)
	}
	return sum, nil
}

// ToolCall implements journal.ToolCalls.
func (s *Store) ToolCall(ctx context.Context, toolCallID string) (*messages.ToolCallRecord, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	defer s.end()
	if err := journal.ValidateID("tool call id", toolCallID); err != nil {
		return nil, fmt.Errorf("pebblejournal: %w", err)
	}
	// A pending call's row, as last committed, may be in the call cache
	// (see callCache): no iterator then. The copy is the caller's.
	if p, found := s.calls.get(s.idStripe(toolCallID), toolCallID); found {
		return proto.Clone(p.rec).(*messages.ToolCallRecord), nil
	}
	ok := ownerKey(toolCallID)
	it, err := s.newIter(ok, append(bytes.Clone(ok), 0))
	if err != nil {
		return nil, err
	}
	rec, err := s.toolCallWith(it, toolCallID)
	if err = closeIter(it, err); err != nil {
		return nil, err
	}
	if rec == nil {
		return nil, fmt.Errorf("pebblejournal: tool call %q: %w", toolCallID, journal.ErrNotFound)
	}
	return rec, nil
}

// toolCallWith reads a tool call through its owner with one iterator (one
// view): nil if the id is unknown.
func (s *Store) toolCallWith(it *pebble.Iterator, call string) (*messages.ToolCallRecord, error) {
	ok := ownerKey(call)
	v, found, err := iterGet(it, ok)
	if err != nil || !found {
		return nil, err
	}
	conv, err := decodeOwner(ok, v)
	if err != nil {
		return nil, err
	}
	rk := idKey(famToolCall, conv, call)
	v, found, err = iterGet(it, rk)
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, corruptKey(ok, fmt.Sprintf("owner %q has no row %s", conv, keyString(rk)))
	}
	rec, err := decodeToolCall(rk, v, conv, call)
	if err != nil {
		return nil, err
	}
	return rec, fillResult(it, rk, rec)
}

// fillResult puts back the result of a row stored with result_seq (see
// txn.resolveCall): the outcome of the tool_result event at that seq of
// the row's conversation, read through it (same view). rk is the row's key,
// quoted if the event is missing or is not the call's result.
func fillResult(it *pebble.Iterator, rk []byte, rec *messages.ToolCallRecord) error {
	seq := rec.GetResultSeq()
	if seq == 0 {
		return nil
	}
	ek := seqKey(famEvent, rec.GetConversationId(), seq)
	v, found, err := iterGet(it, ek)
	if err != nil {
		return err
	}
	if !found {
		return corruptKey(rk, fmt.Sprintf("its result is in event %d, which is missing", seq))
	}
	ev, err := decodeEvent(ek, v, convKey(famEvent, rec.GetConversationId()))
	if err != nil {
		return err
	}
	tr := ev.GetToolResult()
	if tr == nil || tr.GetToolCallId() != rec.GetId() || tr.GetOutcome() == nil {
		return corruptKey(rk, fmt.Sprintf("its result is in event %d, which is not its tool_result", seq))
	}
	rec.Result, rec.ResultSeq = tr.GetOutcome(), 0
	return nil
}

// iterGet points it at exactly key (bounds [key, key+0x00)) and returns its
// value, valid until it moves. It uses a prefix seek, so bloom filters skip
// tables without the key.
func iterGet(it *pebble.Iterator, key []byte) ([]byte, bool, error) {
	it.SetBounds(key, append(key[:len(key):len(key)], 0))
	if !it.SeekPrefixGE(key) || !bytes.Equal(it.Key(), key) {
		if err := it.Error(); err != nil {
			return nil, false, fmt.Errorf("pebblejournal: read %s: %w", keyString(key), storageErr(err))
		}
		return nil, false, nil
	}
	v, err := it.ValueAndErr()
	if err != nil {
		return nil, false, fmt.Errorf("pebblejournal: read %s: %w", keyString(key), storageErr(err))
	}
	return v, true, nil
}

// PendingToolCalls implements journal.ToolCalls: the pending index of the
// conversation, then one seek per pending row, all in one view.
func (s *Store) PendingToolCalls(ctx context.Context, conversationID string) ([]*messages.ToolCallRecord, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	defer s.end()
	if err := journal.ValidateID("conversation id", conversationID); err != nil {
		return nil, fmt.Errorf("pebblejournal: %w", err)
	}
	prefix := convKey(famPending, conversationID)
	it, err := s.newIter(prefix, convEnd(famPending, conversationID))
	if err != nil {
		return nil, err
	}
	var ids []string
	for ok := it.First(); ok; ok = it.Next() {
		id, err := parseIDKey(it.Key(), prefix)
		if err != nil {
			return nil, closeIter(it, err)
		}
		ids = append(ids, id)
	}
	if err := it.Error(); err != nil {
		return nil, closeIter(it, err)
	}
	out := make([]*messages.ToolCallRecord, 0, len(ids))
	for _, id := range ids {
		rk := idKey(famToolCall, conversationID, id)
		v, found, err := iterGet(it, rk)
		if err != nil {
			return nil, closeIter(it, err)
		}
		if !found {
			return nil, closeIter(it, corruptKey(idKey(famPending, conversationID, id), "pending entry without a row"))
		}
		rec, err := decodeToolCall(rk, v, conversationID, id)
		if err != nil {
			return nil, closeIter(it, err)
		}
		if rec.GetStatus() != messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING {
			return nil, closeIter(it, corruptKey(idKey(famPending, conversationID, id), fmt.Sprintf("pending entry of a %v row", rec.GetStatus())))
		}
		out = append(out, rec)
	}
	if err := closeIter(it, nil); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// ListPendingToolCalls implements journal.ToolCalls: a walk of the pending
// index of every conversation (family 0x06, ordered by conversation then
// tool call id) from the cursor's key, then one seek per row, in one view.
func (s *Store) ListPendingToolCalls(ctx context.Context, cursor string, limit int) ([]*messages.ToolCallRecord, string, error) {
	if err := s.begin(ctx); err != nil {
		return nil, "", err
	}
	defer s.end()
	afterConv, afterCall, err := journal.ParsePendingCursor(cursor)
	if err != nil {
		return nil, "", fmt.Errorf("pebblejournal: %w", err)
	}
	if limit, err = journal.PageSize("pending tool calls", limit); err != nil {
		return nil, "", fmt.Errorf("pebblejournal: %w", err)
	}
	lower := []byte{famPending}
	if cursor != "" {
		// The smallest key after the cursor's: ids are prefix-free, so no
		// key lies between k and k|0x00.
		lower = append(idKey(famPending, afterConv, afterCall), 0)
	}
	it, err := s.newIter(lower, familyEnd(famPending))
	if err != nil {
		return nil, "", err
	}
	type key struct{ conv, call string }
	var keys []key
	for ok := it.First(); ok && len(keys) <= limit; ok = it.Next() {
		k := it.Key()
		conv, rest, ok := decodeID(k[1:])
		var call string
		if ok {
			call, rest, ok = decodeID(rest)
		}
		if !ok || len(rest) != 0 || journal.ValidateID("id", conv) != nil || journal.ValidateID("id", call) != nil {
			return nil, "", closeIter(it, corruptKey(k, "malformed conversation or tool call id"))
		}
		keys = append(keys, key{conv, call})
	}
	if err := it.Error(); err != nil {
		return nil, "", closeIter(it, fmt.Errorf("pebblejournal: iterate: %w", storageErr(err)))
	}
	next := ""
	if len(keys) > limit {
		keys = keys[:limit]
		next = journal.PendingCursor(keys[limit-1].conv, keys[limit-1].call)
	}
	out := make([]*messages.ToolCallRecord, 0, len(keys))
	for _, k := range keys {
		rk := idKey(famToolCall, k.conv, k.call)
		v, found, err := iterGet(it, rk)
		if err != nil {
			return nil, "", closeIter(it, err)
		}
		if !found {
			return nil, "", closeIter(it, corruptKey(idKey(famPending, k.conv, k.call), "pending entry without a row"))
		}
		rec, err := decodeToolCall(rk, v, k.conv, k.call)
		if err != nil {
			return nil, "", closeIter(it, err)
		}
		if rec.GetStatus() != messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING {
			return nil, "", closeIter(it, corruptKey(idKey(famPending, k.conv, k.call), fmt.Sprintf("pending entry of a %v row", rec.GetStatus())))
		}
		out = append(out, rec)
	}
	if err := closeIter(it, nil); err != nil {
		return nil, "", err
	}
	return out, next, nil
}

// deadlinePage is how many deadlines Deadlines reads per iterator; it calls
// fn between pages without holding the iterator or the store's gate.
const deadlinePage = 256

// Deadlines implements journal.Deadlines. It scans the time-ordered index
// from a low-water mark, so deadlines already resolved or cancelled (whose
// deletes Pebble may still hold) are not walked again and again. An index
// key that does not parse is passed over and reported at the end; the
// low-water mark never passes it.
func (s *Store) Deadlines(ctx context.Context, dueBy time.Time, fn func(*messages.Deadline) error) error {
	var upper []byte
	if dueBy.IsZero() {
		upper = familyEnd(famDeadlineByTime)
	} else {
		upper = byTimeUpper(dueBy)
	}
	var lower []byte
	var bad journal.PassedOver
	first := true
	for {
		page, next, err := s.deadlinePage(ctx, lower, upper, first, &bad)
		if err != nil {
			return err
		}
		for _, d := range page {
			if err := s.begin(ctx); err != nil {
				return err
			}
			s.end()
			if err := fn(d); err != nil {
				return err
			}
		}
		if next == nil {
			return bad.Err("pebblejournal: deadlines")
		}
		lower, first = next, false
	}
}

// deadlinePage reads up to deadlinePage keys from lower (from the low-water
// mark when first) and returns their deadlines and where the next page
// starts (nil at the end). A key that does not parse goes to bad.
func (s *Store) deadlinePage(ctx context.Context, lower, upper []byte, first bool, bad *journal.PassedOver) ([]*messages.Deadline, []byte, error) {
	if err := s.begin(ctx); err != nil {
		return nil, nil, err
	}
	defer s.end()
	var gen uint64
	var raise bool
	if first {
		lower, gen, raise = s.dl.startScan()
		if lower == nil {
			lower = []byte{famDeadlineByTime}
		}
		if bytes.Compare(lower, upper) >= 0 {
			return nil, nil, nil
		}
	}
	it, err := s.newIter(lower, upper)
	if err != nil {
		return nil, nil, err
	}
	var out []*messages.Deadline
	var next, firstKey []byte
	read := 0
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		if read == deadlinePage {
			next = bytes.Clone(k)
			break
		}
		read++
		if firstKey == nil {
			firstKey = bytes.Clone(k) // a damaged key too: the mark stays below it
		}
		at, call, conv, err := parseByTimeKey(k)
		if err != nil {
			bad.Add(err)
			continue
		}
		out = append(out, &messages.Deadline{ConversationId: conv, ToolCallId: call, At: at})
	}
	if err := closeIter(it, nil); err != nil {
		return nil, nil, err
	}
	if first && raise {
		if firstKey == nil {
			firstKey = upper // nothing live below upper
		}
		s.dl.raise(firstKey, gen)
	}
	return out, next, nil
}

// ModelCalls implements journal.Audit.
func (s *Store) ModelCalls(ctx context.Context, conversationID string) ([]*messages.ModelCall, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	defer s.end()
	if err := journal.ValidateID("conversation id", conversationID); err != nil {
		return nil, fmt.Errorf("pebblejournal: %w", err)
	}
	if !s.audit {
		return nil, nil
	}
	var out []*messages.ModelCall
	prefix := convKey(famAudit, conversationID)
	err := s.scan(prefix, convEnd(famAudit, conversationID), func(k, v []byte) error {
		mc, err := decodeModelCall(k, v, prefix, conversationID)
		if err != nil {
			return err
		}
		out = append(out, mc)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Conversation implements journal.Conversations.
func (s *Store) Conversation(ctx context.Context, id string) (*messages.Conversation, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	defer s.end()
	if err := journal.ValidateID("conversation id", id); err != nil {
		return nil, fmt.Errorf("pebblejournal: %w", err)
	}
	k := convKey(famConv, id)
	var row *messages.Conversation
	found, err := s.get(k, func(v []byte) (err error) {
		row, err = decodeConversation(k, v, id)
		return err
	})
	if err != nil {
		return nil, err
	}
	if !found {
		// The tombstone is read only when there is no row: a deleted
		// conversation has none, and a live one pays nothing more.
		tk := convKey(famTombstone, id)
		deleted, err := s.get(tk, func(v []byte) error { return unmarshal(tk, v, &messages.Tombstone{}) })
		switch {
		case err != nil:
			return nil, err
		case deleted:
			return nil, fmt.Errorf("pebblejournal: conversation %q: %w", id, journal.ErrDeleted)
		}
		return nil, fmt.Errorf("pebblejournal: conversation %q: %w", id, journal.ErrNotFound)
	}
	return row, nil
}

// ListConversations implements journal.Conversations.
func (s *Store) ListConversations(ctx context.Context, cursor string, limit int) ([]*messages.Conversation, string, error) {
	if err := s.begin(ctx); err != nil {
		return nil, "", err
	}
	defer s.end()
	limit, err := journal.PageSize("conversations", limit)
	if err != nil {
		return nil, "", fmt.Errorf("pebblejournal: %w", err)
	}
	lower := []byte{famConv}
	if cursor != "" {
		lower = convEnd(famConv, cursor) // the first key after cursor's
	}
	it, err := s.newIter(lower, familyEnd(famConv))
	if err != nil {
		return nil, "", err
	}
	prefix := []byte{famConv}
	var out []*messages.Conversation
	next := ""
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		id, err := parseIDKey(k, prefix)
		if err != nil {
			return nil, "", closeIter(it, err)
		}
		if len(out) == limit {
			next = out[len(out)-1].GetId()
			break
		}
		v, err := it.ValueAndErr()
		if err != nil {
			return nil, "", closeIter(it, fmt.Errorf("pebblejournal: read %s: %w", keyString(k), storageErr(err)))
		}
		row, err := decodeConversation(k, v, id)
		if err != nil {
			return nil, "", closeIter(it, err)
		}
		out = append(out, row)
	}
	if err := closeIter(it, nil); err != nil {
		return nil, "", err
	}
	return out, next, nil
}

// ListActiveConversations implements journal.Conversations: a walk of the
// active index (family 0x0a) from the cursor's key; it reads no row, so its
// cost is the page, whatever the number of conversations.
func (s *Store) ListActiveConversations(ctx context.Context, cursor string, limit int) ([]string, string, error) {
	if err := s.begin(ctx); err != nil {
		return nil, "", err
	}
	defer s.end()
	after, limit, err := journal.ParseActiveCursor(cursor, limit)
	if err != nil {
		return nil, "", fmt.Errorf("pebblejournal: %w", err)
	}
	lower := []byte{famActive}
	if after != "" {
		lower = convEnd(famActive, after) // the first key after the cursor's
	}
	it, err := s.newIter(lower, familyEnd(famActive))
	if err != nil {
		return nil, "", err
	}
	prefix := []byte{famActive}
	var out []string
	next := ""
	for ok := it.First(); ok; ok = it.Next() {
		if len(out) == limit {
			next = journal.ActiveCursor(out[len(out)-1])
			break
		}
		id, err := parseIDKey(it.Key(), prefix)
		if err != nil {
			return nil, "", closeIter(it, err)
		}
		out = append(out, id)
	}
	if err := closeIter(it, nil); err != nil {
		return nil, "", err
	}
	return out, next, nil
}

// Metadata implements journal.Conversations.
func (s *Store) Metadata(ctx context.Context, id string) (map[string]string, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	defer s.end()
	if err := journal.ValidateID("conversation id", id); err != nil {
		return nil, fmt.Errorf("pebblejournal: %w", err)
	}
	return s.metadata(id)
}

// metadata reads the committed metadata of id.
func (s *Store) metadata(id string) (map[string]string, error) {
	out := make(map[string]string)
	prefix := convKey(famMetadata, id)
	err := s.scan(prefix, convEnd(famMetadata, id), func(k, v []byte) error {
		key, err := parseIDKey(k, prefix)
		if err != nil {
			return err
		}
		val, err := decodeMetadataValue(k, v)
		if err != nil {
			return err
		}
		out[key] = val
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// newDurableIter opens an iterator under conv's stripe lock, so its view
// holds no write of conv whose synced commit is still in flight.
// A write whose sync failed has already marked the store failed when it
// releases the lock, and its batch may be in the memtable: the read then
// fails too.
func (s *Store) newDurableIter(conv string, lower, upper []byte) (*pebble.Iterator, error) {
	unlock := s.lockConv(conv)
	defer unlock()
	if f := s.failure(); f != nil {
		return nil, f
	}
	return s.newIter(lower, upper)
}
