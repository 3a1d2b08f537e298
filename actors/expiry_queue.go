package actors

import (
	"errors"
	"math"
	"slices"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lazarusrt/lazarus/journal"
)

// This file holds the decision logic of the expiry actor, as pure code: no
// clock, no actor, no I/O. Time is an int64 of Unix nanoseconds passed in by
// the caller. expiry.go wires it to a Clock and to the journal actor.

// deadlineEntry is one scheduled expiry: 40 bytes plus the bytes of its two
// strings, which it shares with the message it came from.
type deadlineEntry struct {
	at   int64  // Unix nanoseconds
	call string // tool call id: the key
	conv string // conversation id
}

// before orders entries by time, then tool call id.
func (e *deadlineEntry) before(o *deadlineEntry) bool {
	if e.at != o.at {
		return e.at < o.at
	}
	return e.call < o.call
}

// deadlineHeap is a min-heap of deadlines ordered by (time, tool call id),
// with an index from tool call id to heap position, so replacing and
// removing a deadline cost O(log n). It holds at most one entry per tool
// call. Entries are stored by value: no allocation per entry besides the
// slice and map growth.
type deadlineHeap struct {
	entries []deadlineEntry
	index   map[string]int // tool call id -> position in entries
}

func newDeadlineHeap() *deadlineHeap {
	return &deadlineHeap{index: make(map[string]int)}
}

func (h *deadlineHeap) len() int { return len(h.entries) }

// put adds the deadline of call, replacing the one it had.
func (h *deadlineHeap) put(conv, call string, at int64) {
	if i, ok := h.index[call]; ok {
		e := &h.entries[i]
		old := e.at
		e.at, e.conv = at, conv
		if at < old {
			h.up(i)
		} else {
			h.down(i)
		}
		return
	}
	h.entries = append(h.entries, deadlineEntry{at: at, call: call, conv: conv})
	h.up(len(h.entries) - 1) // sets the index of the new entry
}

// remove deletes the deadline of call and reports whether it had one.
func (h *deadlineHeap) remove(call string) bool {
	i, ok := h.index[call]
	if !ok {
		return false
	}
	h.removeAt(i)
	return true
}

// min returns the earliest entry, if any. The pointer is valid until the
// next change of the heap.
func (h *deadlineHeap) min() (*deadlineEntry, bool) {
	if len(h.entries) == 0 {
		return nil, false
	}
	return &h.entries[0], true
}

// pop removes and returns the earliest entry; the heap must not be empty.
func (h *deadlineHeap) pop() deadlineEntry {
	e := h.entries[0]
	h.removeAt(0)
	return e
}

func (h *deadlineHeap) removeAt(i int) {
	last := len(h.entries) - 1
	delete(h.index, h.entries[i].call)
	if i != last {
		h.entries[i] = h.entries[last]
	}
	h.entries[last] = deadlineEntry{} // drop the string references
	h.entries = h.entries[:last]
	if i != last && !h.up(i) {
		h.down(i)
	}
	if len(h.entries) == 0 && cap(h.entries) > 1024 {
		h.entries = nil // give a drained heap's memory back
		h.index = make(map[string]int)
	}
}

// up moves entry i towards the root and records its final position in the
// index; it reports whether it moved. It moves a hole rather than swapping,
// so each level costs one index write.
func (h *deadlineHeap) up(i int) bool {
	e := h.entries[i]
	start := i
	for i > 0 {
		p := (i - 1) / 2
		if !e.before(&h.entries[p]) {
			break
		}
		h.entries[i] = h.entries[p]
		h.index[h.entries[i].call] = i
		i = p
	}
	h.entries[i] = e
	h.index[e.call] = i
	return i != start
}

// down moves entry i towards the leaves and records its final position in
// the index.
func (h *deadlineHeap) down(i int) {
	e := h.entries[i]
	n := len(h.entries)
	for {
		c := 2*i + 1
		if c >= n {
			break
		}
		if r := c + 1; r < n && h.entries[r].before(&h.entries[c]) {
			c = r
		}
		if !h.entries[c].before(&e) {
			break
		}
		h.entries[i] = h.entries[c]
		h.index[h.entries[i].call] = i
		i = c
	}
	h.entries[i] = e
	h.index[e.call] = i
}

// expireFlight is one tool call whose expire was sent to the journal and not
// yet answered. Each send is an attempt with its own request id; a new
// attempt is sent when the last one got no reply within the reply timeout.
type expireFlight struct {
	conv    string
	last    uint64   // request id of the latest attempt
	reqs    []uint64 // request ids of every attempt not yet answered
	noRetry bool     // a schedule or cancel of the call arrived meanwhile
}

// expireAttempt is one send, in the FIFO of sends used for reply timeouts.
type expireAttempt struct {
	call   string
	req    uint64
	sentAt int64
}

// expireVerdict says what to do with the reply to an expire.
type expireVerdict int

const (
	// verdictIgnore: the reply is unknown (an earlier incarnation's, or an
	// attempt superseded by a newer one) or needs nothing more.
	verdictIgnore expireVerdict = iota
	// verdictDeliver: the call expired durably; deliver the resolution.
	verdictDeliver
	// verdictStale: the call was answered (or is unknown): drop silently.
	verdictStale
	// verdictDrop: the write can never succeed (invalid, deleted): drop and
	// log.
	verdictDrop
	// verdictRetry: the write failed (closed, I/O); retried after RetryAfter.
	verdictRetry
	// verdictStaleUnsure: stale, after an earlier attempt whose outcome
	// was unknown (journal.ErrUnknownOutcome): that attempt may be the
	// one that expired the call, and nothing delivered it. The call's row
	// decides (ExpiryOptions.DeliverIfExpired).
	verdictStaleUnsure
)

// classifyExpireError maps a journal error to a verdict: nil delivers,
// ErrStale drops silently, errors that no retry can fix drop with a log,
// anything else (closed, I/O, internal) retries.
func classifyExpireError(err error) expireVerdict {
	switch {
	case err == nil:
		return verdictDeliver
	case errors.Is(err, journal.ErrStale):
		return verdictStale
	case errors.Is(err, journal.ErrInvalid), errors.Is(err, journal.ErrDeleted),
		errors.Is(err, journal.ErrNotFound), errors.Is(err, journal.ErrConflict):
		return verdictDrop
	default:
		return verdictRetry
	}
}

// expiryQueue is the state machine of the expiry actor: the deadlines not
// yet due, the expires in flight, and what to send when. It is not safe for
// concurrent use; the expiry actor owns it.
type expiryQueue struct {
	heap     *deadlineHeap
	flights  map[string]*expireFlight // by tool call id
	byReq    map[uint64]string        // request id -> tool call id, every unanswered attempt
	attempts []expireAttempt          // sends in time order; entries of finished flights are skipped lazily
	// unsure holds the calls an attempt of which ended with its outcome
	// unknown, until a reply or a cancel settles them.
	unsure map[string]struct{}
	// later holds, in time order, the other times a call's deadline may
	// be at: a reschedule of unknown outcome left it either where it was
	// or where it moved (scheduleUnsure). The heap arms the earliest; an
	// expire of it found stale arms the next.
	later   map[string][]int64
	head    int // first live index of attempts
	nextReq uint64

	maxInFlight  int
	retryAfter   int64
	replyTimeout int64
}

func newExpiryQueue(firstReq uint64, maxInFlight int, retryAfter, replyTimeout int64) *expiryQueue {
	return &expiryQueue{
		heap:         newDeadlineHeap(),
		flights:      make(map[string]*expireFlight),
		byReq:        make(map[uint64]string),
		unsure:       make(map[string]struct{}),
		later:        make(map[string][]int64),
		nextReq:      firstReq,
		maxInFlight:  maxInFlight,
		retryAfter:   retryAfter,
		replyTimeout: replyTimeout,
	}
}

// schedule sets the deadline of call, replacing an earlier one. If an
// expire of call is in flight and fails, it is not retried: the new
// deadline decides.
func (q *expiryQueue) schedule(conv, call string, at int64) {
	q.heap.put(conv, call, at)
	delete(q.later, call) // a committed write decides
	if f := q.flights[call]; f != nil {
		f.noRetry = true
	}
}

// scheduleUnsure records that a write of unknown outcome moved the
// deadline of call to at: the deadline is now either at (it landed) or
// the time armed before (it did not). The earlier of the two is armed
// and the other kept in later: an expire sent for the earlier one that
// the Store finds stale (the deadline is not due by then, or the call
// was answered) arms the next, so neither outcome loses its time, and an
// expire sent for a time the deadline is not at changes nothing (due_by).
// With no deadline armed and no expire in flight, at is armed.
func (q *expiryQueue) scheduleUnsure(conv, call string, at int64) {
	i, armed := q.heap.index[call]
	if !armed {
		if q.flights[call] == nil {
			q.heap.put(conv, call, at)
			return
		}
		// The expire in flight decides first; a stale or failed one
		// leaves at to arm.
		q.addLater(call, at)
		return
	}
	old := q.heap.entries[i].at
	if at == old {
		return
	}
	q.addLater(call, max(at, old))
	if at < old {
		q.heap.put(conv, call, at)
	}
}

func (q *expiryQueue) addLater(call string, at int64) {
	times := q.later[call]
	i, found := slices.BinarySearch(times, at)
	if !found {
		q.later[call] = slices.Insert(times, i, at)
	}
}

// armLater arms the earliest time later holds for call, if any, and
// forgets it.
func (q *expiryQueue) armLater(conv, call string) {
	times := q.later[call]
	if len(times) == 0 {
		return
	}
	q.heap.put(conv, call, times[0])
	if len(times) == 1 {
		delete(q.later, call)
	} else {
		q.later[call] = times[1:]
	}
}

// resetDeadlines drops every deadline not yet sent and keeps the expires
// in flight, whose replies still decide (an expire written is delivered).
// An expire in flight whose conversation owns no longer reports is not
// sent again: another member's expiry actor holds its deadline now.
func (q *expiryQueue) resetDeadlines(owns func(conv string) bool) {
	q.heap = newDeadlineHeap()
	clear(q.later)
	for call := range q.unsure {
		if q.flights[call] == nil {
			delete(q.unsure, call) // its retry was a deadline not yet sent
		}
	}
	for _, f := range q.flights {
		if owns != nil && !owns(f.conv) {
			f.noRetry = true
		}
	}
}

// cancel removes the deadline of call. If an expire of call is in flight
// and fails, it is not retried.
func (q *expiryQueue) cancel(call string) {
	q.heap.remove(call)
	delete(q.later, call)
	if q.flights[call] == nil {
		// Answered by another writer first: no attempt of the expiry
		// landed (it would have made that answer stale).
		delete(q.unsure, call)
	}
	if f := q.flights[call]; f != nil {
		f.noRetry = true
	}
}

// due sends (through send) what is due at now: new attempts for expires
// whose last attempt got no reply within the reply timeout (unless the call
// was rescheduled or cancelled meanwhile: such a flight is kept, not resent,
// until its reply decides), then expires of due deadlines in (time, tool call id) order while fewer than maxInFlight
// calls are in flight.
func (q *expiryQueue) due(now int64, send func(req uint64, conv, call string)) {
	for q.head < len(q.attempts) {
		a := q.attempts[q.head]
		f := q.flights[a.call]
		if f == nil || f.last != a.req {
			q.popAttempt() // answered or superseded
			continue
		}
		if addNanos(a.sentAt, q.replyTimeout) > now {
			break
		}
		q.popAttempt()
		if f.noRetry {
			// Rescheduled or cancelled meanwhile: the heap decides, and a
			// new attempt could expire the call before its new deadline.
			// The flight stays until its reply, which still decides: the
			// cancel may be the one the attempt's own commit sent (the
			// journal reports a commit before its reply), and a success
			// forgotten here would leave the call expired undelivered.
			continue
		}
		q.send(now, a.call, f, send)
	}
	for len(q.flights) < q.maxInFlight {
		e, ok := q.heap.min()
		if !ok || e.at > now {
			break
		}
		d := q.heap.pop()
		f := q.flights[d.call]
		if f == nil {
			f = &expireFlight{conv: d.conv}
			q.flights[d.call] = f
		}
		f.conv, f.noRetry = d.conv, false
		q.send(now, d.call, f, send)
	}
}

func (q *expiryQueue) send(now int64, call string, f *expireFlight, send func(req uint64, conv, call string)) {
	q.nextReq++
	req := q.nextReq
	f.last = req
	f.reqs = append(f.reqs, req)
	q.byReq[req] = call
	q.attempts = append(q.attempts, expireAttempt{call: call, req: req, sentAt: now})
	send(req, f.conv, call)
}

func (q *expiryQueue) popAttempt() {
	q.attempts[q.head] = expireAttempt{}
	q.head++
	switch {
	case q.head == len(q.attempts):
		q.attempts, q.head = q.attempts[:0], 0
	case q.head > 1024 && q.head > len(q.attempts)/2:
		n := copy(q.attempts, q.attempts[q.head:])
		clear(q.attempts[n:])
		q.attempts, q.head = q.attempts[:n], 0
	}
}

// reply applies the journal's answer to request req, received at now, and
// returns what to do with it and the call it was for.
func (q *expiryQueue) reply(now int64, req uint64, err error) (v expireVerdict, conv, call string) {
	call, ok := q.byReq[req]
	if !ok {
		return verdictIgnore, "", ""
	}
	delete(q.byReq, req)
	f := q.flights[call]
	if f == nil {
		return verdictIgnore, "", "" // cannot happen: finish removes every attempt of a flight
	}
	conv = f.conv
	if errors.Is(err, journal.ErrUnknownOutcome) {
		q.unsure[call] = struct{}{}
	}
	switch v = classifyExpireError(err); v {
	case verdictStale:
		if req != f.last {
			// An earlier attempt, stale for the deadline it was sent
			// for: the call was rescheduled, and the attempt sent for
			// the new deadline decides (it may expire the call).
			f.reqs = removeReq(f.reqs, req)
			return verdictIgnore, conv, call
		}
		// The call was answered, or its deadline moved: a deadline
		// scheduled while the expire was in flight is the new one (the
		// journal reports a commit's schedule before any later reply;
		// an answer's cancel removed it), so it stays.
		q.finish(call, f)
		if !f.noRetry {
			q.heap.remove(call)
			// A reschedule of unknown outcome may have moved the
			// deadline to a time not yet due.
			q.armLater(conv, call)
		}
		if _, ok := q.unsure[call]; ok {
			delete(q.unsure, call)
			return verdictStaleUnsure, conv, call
		}
		return v, conv, call
	case verdictDeliver, verdictDrop:
		// The call is terminal (or never will be): forget it entirely,
		// including a deadline scheduled while the expire was in flight.
		q.finish(call, f)
		q.heap.remove(call)
		delete(q.unsure, call)
		delete(q.later, call)
		return v, conv, call
	default: // verdictRetry
		if req != f.last {
			f.reqs = removeReq(f.reqs, req)
			return verdictIgnore, conv, call // a newer attempt is out
		}
		q.finish(call, f)
		if f.noRetry {
			if _, scheduled := q.heap.index[call]; !scheduled {
				// Cancelled while in flight (another writer answered
				// first, so no attempt landed; or the conversation went,
				// or moved to another member): nothing will settle the
				// mark, which would be kept for good.
				delete(q.unsure, call)
			}
			return verdictIgnore, conv, call // a newer schedule or a cancel decides
		}
		q.heap.put(conv, call, addNanos(now, q.retryAfter))
		return v, conv, call
	}
}

func (q *expiryQueue) finish(call string, f *expireFlight) {
	for _, r := range f.reqs {
		delete(q.byReq, r)
	}
	delete(q.flights, call)
}

func removeReq(reqs []uint64, req uint64) []uint64 {
	for i, r := range reqs {
		if r == req {
			return append(reqs[:i], reqs[i+1:]...)
		}
	}
	return reqs
}

// wake returns when due must next run: the earliest reply timeout of the
// attempts in flight, or the earliest deadline if there is room for another
// flight. ok is false when nothing is waiting.
func (q *expiryQueue) wake() (at int64, ok bool) {
	at = math.MaxInt64
	for q.head < len(q.attempts) {
		a := q.attempts[q.head]
		if f := q.flights[a.call]; f == nil || f.last != a.req {
			q.popAttempt()
			continue
		}
		at, ok = addNanos(a.sentAt, q.replyTimeout), true
		break
	}
	if len(q.flights) < q.maxInFlight {
		if e, has := q.heap.min(); has && e.at < at {
			at, ok = e.at, true
		}
	}
	return at, ok
}

// addNanos returns a+d saturated at the int64 range: an instant plus a huge
// span (a ReplyTimeout or RetryAfter of math.MaxInt64) is as good as
// never, not an instant in the past that is due at once.
func addNanos(a, d int64) int64 {
	s := a + d
	switch {
	case d > 0 && s < a:
		return math.MaxInt64
	case d < 0 && s > a:
		return math.MinInt64
	}
	return s
}

// unixNanos converts a protobuf time to Unix nanoseconds, clamped to the
// int64 range (beyond year 2262 a deadline is as good as never).
func unixNanos(ts *timestamppb.Timestamp) int64 {
	const maxSec = math.MaxInt64/int64(1e9) - 1
	const minSec = math.MinInt64/int64(1e9) + 1
	s := ts.GetSeconds()
	switch {
	case s >= maxSec:
		return math.MaxInt64
	case s <= minSec:
		return math.MinInt64
	}
	return s*1e9 + int64(ts.GetNanos())
}
