package pebblejournal

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// maxFastEvents bounds the events of a request appendEvents takes: one bit
// each in a word.
const maxFastEvents = 64

// onlyEvents reports whether req is the runtime's most frequent write: a
// fenced append of events and nothing else. TestOnlyEventsKnowsEveryField
// fails when a field is added to AppendRequest and not checked here.
func onlyEvents(req *messages.AppendRequest) bool {
	return len(req.GetEvents()) > 0 &&
		!req.GetUnfenced() &&
		len(req.GetToolCalls()) == 0 &&
		len(req.GetResolutions()) == 0 &&
		req.GetFsmState() == nil &&
		len(req.GetSchedule()) == 0 &&
		len(req.GetCancel()) == 0 &&
		req.GetStatus() == messages.ConversationStatus_CONVERSATION_STATUS_UNSPECIFIED &&
		len(req.GetReschedule()) == 0 &&
		req.GetDueBy() == nil &&
		len(req.GetSettings()) == 0 &&
		req.GetScheduleFire() == nil
}

// appendEvents is Append of the runtime's most frequent write, which
// onlyEvents accepts, to a conversation whose head the head cache holds
// with its row, not ENDED: it then has a row and no tombstone, and the
// request changes nothing but its log. It does what txn.apply and txn.commit do for such a request
// (the events' checks and seqs, the fence, one synced batch, the head)
// without a txn and its overlay of rows, calls and deadlines, which would
// stay empty: on one busy conversation, sequential synced Appends, that
// machinery was most of the Store's own work per Append (BENCHMARKS.md).
//
// It takes the request only if each event's Seq is unset or the one it
// gets (the runtime sets the right one), so that restoring the caller's
// seqs after a failure is one bit per event. ok is false, with nothing
// done and no lock held, for any other request, or when the head cache
// does not hold the conversation; Append then takes the general path.
func (s *Store) appendEvents(ctx context.Context, req *messages.AppendRequest) (res journal.AppendResult, ok bool) {
	evs := req.GetEvents()
	if len(evs) > maxFastEvents || !onlyEvents(req) {
		return res, false
	}
	first := req.GetExpectedLast() + 1
	var unset uint64 // bit i: the caller left event i's Seq unset
	for i, ev := range evs {
		switch ev.GetSeq() {
		case 0:
			unset |= 1 << i
		case first + uint64(i):
		default:
			return res, false
		}
	}
	if err := s.begin(ctx); err != nil {
		return journal.AppendResult{Err: err}, true
	}
	defer s.end()
	if err := journal.ValidateAppendShape(req); err != nil {
		return journal.AppendResult{Err: fmt.Errorf("pebblejournal: %w", err)}, true
	}
	conv := req.GetConversationId()
	stripe := s.convStripe(conv)
	mu := &s.convLocks[stripe]
	mu.Lock()
	defer mu.Unlock()
	h, cached := s.heads.get(stripe, conv)
	if !cached || !h.hasRow || h.row == nil || h.row.GetStatus() == messages.ConversationStatus_CONVERSATION_STATUS_ENDED {
		// The general path reads the row, and refuses the append if it is
		// ENDED (journal.CheckEnded).
		return res, false
	}
	if ctx != nil && ctx.Err() != nil {
		return journal.AppendResult{Err: fmt.Errorf("pebblejournal: %w", ctx.Err())}, true
	}
	// restore gives the events back the seqs the caller gave them.
	restore := func() {
		for i, ev := range evs {
			if unset&(1<<i) != 0 {
				ev.Seq = 0
			}
		}
	}
	// As in txn.apply: the events are encoded and checked first, then the
	// fence.
	e := encPool.Get().(*eventScratch)
	defer putScratch(e)
	for i, ev := range evs {
		var given uint64
		if unset&(1<<i) == 0 {
			given = first + uint64(i)
		}
		ev.Seq = first + uint64(i)
		var err error
		if e.buf, err = journal.EncodeAppendEvent(e.buf, req, i, given); err != nil {
			restore()
			return journal.AppendResult{Err: fmt.Errorf("pebblejournal: %w", err)}, true
		}
		e.ends = append(e.ends, len(e.buf))
	}
	last := h.lastSeq
	if last != req.GetExpectedLast() {
		restore()
		return journal.AppendResult{Err: fmt.Errorf("pebblejournal: append to %q after %d (last is %d): %w", conv, req.GetExpectedLast(), last, journal.ErrConflict)}, true
	}
	b := s.db.NewBatch()
	var kb [64]byte
	stageEvents(b, e, appendID(append(kb[:0], famEvent), conv), last, len(evs))
	err := s.commit(b)
	_ = b.Close()
	if err != nil {
		restore()
		s.heads.drop(stripe, conv)
		return journal.AppendResult{Err: err}, true
	}
	h.lastSeq = last + uint64(len(evs))
	s.heads.stripes[stripe][conv] = h // the entry is there: no eviction
	return journal.AppendResult{FirstSeq: last + 1, LastSeq: h.lastSeq}, true
}

// stageEvents sets in b the n events encoded in e, the seqs after last,
// under prefix (famEvent | conv), which it may extend. It returns the
// extended buffer.
func stageEvents(b *pebble.Batch, e *eventScratch, prefix []byte, last uint64, n int) []byte {
	key, start := prefix, 0
	for i := range n {
		key = binary.BigEndian.AppendUint64(key[:len(prefix)], last+1+uint64(i))
		end := e.ends[i]
		// Set copies key and value. It fails only for an indexed batch,
		// which this is not.
		_ = b.Set(key, e.buf[start:end], nil)
		start = end
	}
	return key
}

// takeBatch returns a batch kept by an earlier write, with its buffer, or a
// new one; giveBatch gives it back (see Store.batches), unless its commit
// failed: Pebble may still hold it.
func (s *Store) takeBatch() *pebble.Batch {
	select {
	case b := <-s.batches:
		return b
	default:
		return s.db.NewBatch(pebble.WithMaxRetainedSizeBytes(maxReusedBatchBytes))
	}
}

func (s *Store) giveBatch(b *pebble.Batch, commitFailed bool) {
	if commitFailed {
		_ = b.Close()
		return
	}
	b.Reset() // keeps its buffer, unless Pebble still holds it
	select {
	case s.batches <- b:
	default:
		_ = b.Close()
	}
}

// putScratch gives e back to encPool, unless it grew beyond
// maxPooledScratch.
func putScratch(e *eventScratch) {
	if cap(e.buf) <= maxPooledScratch {
		e.buf, e.ends = e.buf[:0], e.ends[:0]
		encPool.Put(e)
	}
}
