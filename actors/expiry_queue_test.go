package actors

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lazarusrt/lazarus/journal"
)

// checkDeadlineHeap verifies the heap property and the index.
func checkDeadlineHeap(t *testing.T, h *deadlineHeap) {
	t.Helper()
	require.Len(t, h.index, len(h.entries))
	for i := range h.entries {
		require.Equal(t, i, h.index[h.entries[i].call])
		if i > 0 {
			p := (i - 1) / 2
			require.False(t, h.entries[i].before(&h.entries[p]), "entry %d sorts before its parent", i)
		}
	}
}

// TestExpiryHeapAgainstModel applies random puts, replaces and removes to
// the heap and to a map, then drains the heap and compares it with the
// map's sorted entries.
func TestExpiryHeapAgainstModel(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	h := newDeadlineHeap()
	model := map[string]deadlineEntry{}
	for step := range 20000 {
		call := fmt.Sprintf("call-%d", rng.IntN(500))
		switch rng.IntN(4) {
		case 0, 1, 2: // put or replace; times collide often to test the tie-break
			at := int64(rng.IntN(100))
			conv := fmt.Sprintf("conv-%d", rng.IntN(10))
			h.put(conv, call, at)
			model[call] = deadlineEntry{at: at, call: call, conv: conv}
		case 3:
			_, had := model[call]
			require.Equal(t, had, h.remove(call))
			delete(model, call)
		}
		if step%1000 == 0 {
			checkDeadlineHeap(t, h)
		}
	}
	checkDeadlineHeap(t, h)
	want := make([]deadlineEntry, 0, len(model))
	for _, e := range model {
		want = append(want, e)
	}
	slices.SortFunc(want, func(a, b deadlineEntry) int {
		return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.call, b.call))
	})
	got := make([]deadlineEntry, 0, len(want))
	for h.len() > 0 {
		got = append(got, h.pop())
	}
	require.Equal(t, want, got)
	require.Empty(t, h.index)
}

func TestExpiryUnixNanos(t *testing.T) {
	ts := time.Date(2030, 5, 6, 7, 8, 9, 123, time.UTC)
	require.Equal(t, ts.UnixNano(), unixNanos(timestamppb.New(ts)))
	require.Equal(t, int64(math.MaxInt64), unixNanos(&timestamppb.Timestamp{Seconds: 253402300799})) // year 9999
	require.Equal(t, int64(math.MinInt64), unixNanos(&timestamppb.Timestamp{Seconds: -62135596800})) // year 1
}

func TestExpiryClassifyError(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want expireVerdict
	}{
		{"success", nil, verdictDeliver},
		{"stale", fmt.Errorf("x: %w", journal.ErrStale), verdictStale},
		{"invalid", journal.ErrInvalid, verdictDrop},
		{"deleted", journal.ErrDeleted, verdictDrop},
		{"closed", journal.ErrClosed, verdictRetry},
		{"corrupt", journal.ErrCorrupt, verdictRetry},
		{"internal", fmt.Errorf("disk on fire"), verdictRetry},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, classifyExpireError(tc.err))
		})
	}
}

type sentExpire struct {
	req        uint64
	conv, call string
}

// queueHarness drives an expiryQueue and records what it sends.
type queueHarness struct {
	q    *expiryQueue
	sent []sentExpire
}

func newQueueHarness(maxInFlight int) *queueHarness {
	return &queueHarness{q: newExpiryQueue(100, maxInFlight, 10, 1000)}
}

func (h *queueHarness) due(now int64) []sentExpire {
	h.sent = nil
	h.q.due(now, func(req uint64, conv, call string) { h.sent = append(h.sent, sentExpire{req, conv, call}) })
	return h.sent
}

func wakeAt(t *testing.T, q *expiryQueue) int64 {
	t.Helper()
	at, ok := q.wake()
	require.True(t, ok, "expected a wake-up time")
	return at
}

func TestExpiryQueueDueInOrder(t *testing.T) {
	h := newQueueHarness(100)
	h.q.schedule("c1", "b", 50)
	h.q.schedule("c1", "a", 50)
	h.q.schedule("c2", "z", 10)
	h.q.schedule("c2", "late", 500)
	require.Equal(t, int64(10), wakeAt(t, h.q))
	require.Empty(t, h.due(9), "nothing is due before its time")
	got := h.due(50)
	require.Equal(t, []sentExpire{{101, "c2", "z"}, {102, "c1", "a"}, {103, "c1", "b"}}, got)
	// Next wake: the earliest of the reply timeouts (sent at 50, +1000) and
	// the next deadline (500).
	require.Equal(t, int64(500), wakeAt(t, h.q))
}

func TestExpiryQueueReplies(t *testing.T) {
	h := newQueueHarness(100)
	h.q.schedule("c", "ok", 1)
	h.q.schedule("c", "stale", 1)
	h.q.schedule("c", "broken", 1)
	h.q.schedule("c", "invalid", 1)
	sent := h.due(1)
	require.Len(t, sent, 4)
	reqOf := map[string]uint64{}
	for _, s := range sent {
		reqOf[s.call] = s.req
	}

	v, conv, call := h.q.reply(2, reqOf["ok"], nil)
	require.Equal(t, verdictDeliver, v)
	require.Equal(t, "c", conv)
	require.Equal(t, "ok", call)

	v, _, _ = h.q.reply(2, reqOf["stale"], journal.ErrStale)
	require.Equal(t, verdictStale, v)

	v, _, _ = h.q.reply(2, reqOf["invalid"], journal.ErrInvalid)
	require.Equal(t, verdictDrop, v)

	v, _, call = h.q.reply(2, reqOf["broken"], journal.ErrClosed)
	require.Equal(t, verdictRetry, v)
	require.Equal(t, "broken", call)
	require.Equal(t, int64(12), wakeAt(t, h.q), "retried after retryAfter")
	require.Empty(t, h.due(11))
	require.Equal(t, []sentExpire{{105, "c", "broken"}}, h.due(12))

	v, _, _ = h.q.reply(13, reqOf["ok"], nil)
	require.Equal(t, verdictIgnore, v, "a reply is used once")
	v, _, _ = h.q.reply(13, 99999, nil)
	require.Equal(t, verdictIgnore, v, "unknown request ids are ignored")
}

func TestExpiryQueueCancelOrRescheduleWhileInFlight(t *testing.T) {
	h := newQueueHarness(100)
	h.q.schedule("c", "cancelled", 1)
	h.q.schedule("c", "moved", 1)
	sent := h.due(1)
	require.Len(t, sent, 2)

	h.q.cancel("cancelled")
	h.q.schedule("c", "moved", 300)

	// Failures are not retried: the cancel or the new deadline decides.
	v, _, _ := h.q.reply(2, sent[0].req, journal.ErrClosed)
	require.Equal(t, verdictIgnore, v)
	v, _, _ = h.q.reply(2, sent[1].req, journal.ErrClosed)
	require.Equal(t, verdictIgnore, v)
	require.Equal(t, int64(300), wakeAt(t, h.q))
	require.Equal(t, []sentExpire{{103, "c", "moved"}}, h.due(300))

	// A success still delivers after a cancel: the call did expire.
	h.q.cancel("moved")
	v, _, call := h.q.reply(301, 103, nil)
	require.Equal(t, verdictDeliver, v)
	require.Equal(t, "moved", call)
	_, ok := h.q.wake()
	require.False(t, ok, "nothing left")
}

func TestExpiryQueueReplyTimeout(t *testing.T) {
	h := newQueueHarness(100)
	h.q.schedule("c", "x", 0)
	first := h.due(0)
	require.Len(t, first, 1)
	require.Equal(t, int64(1000), wakeAt(t, h.q), "the reply timeout")
	require.Empty(t, h.due(999))
	second := h.due(1000)
	require.Len(t, second, 1)
	require.NotEqual(t, first[0].req, second[0].req)

	// The first attempt's late success delivers; the second's stale reply
	// then changes nothing.
	v, _, _ := h.q.reply(1001, first[0].req, nil)
	require.Equal(t, verdictDeliver, v)
	v, _, _ = h.q.reply(1001, second[0].req, journal.ErrStale)
	require.Equal(t, verdictIgnore, v)
	_, ok := h.q.wake()
	require.False(t, ok)

	// A timed-out attempt of a call rescheduled meanwhile is not resent.
	h.q.schedule("c", "y", 2000)
	require.Len(t, h.due(2000), 1)
	h.q.schedule("c", "y", 5000)
	require.Empty(t, h.due(3000))
	require.Equal(t, int64(5000), wakeAt(t, h.q))
	require.Len(t, h.due(5000), 1)
}

func TestExpiryQueueMaxInFlight(t *testing.T) {
	h := newQueueHarness(2)
	for i := range 5 {
		h.q.schedule("c", fmt.Sprintf("k%d", i), 1)
	}
	sent := h.due(1)
	require.Len(t, sent, 2)
	// At capacity the due deadlines do not count for the wake-up time; the
	// reply timeout of the oldest attempt does.
	require.Equal(t, int64(1001), wakeAt(t, h.q))
	v, _, _ := h.q.reply(2, sent[0].req, nil)
	require.Equal(t, verdictDeliver, v)
	require.Equal(t, []sentExpire{{103, "c", "k2"}}, h.due(2))
}

// TestExpiryQueueAttemptsCompact checks that the FIFO of attempts does not
// grow without bound as flights finish.
func TestExpiryQueueAttemptsCompact(t *testing.T) {
	h := newQueueHarness(10)
	for i := range 5000 {
		h.q.schedule("c", fmt.Sprintf("k%d", i), int64(i))
		for _, s := range h.due(int64(i)) {
			v, _, _ := h.q.reply(int64(i), s.req, nil)
			require.Equal(t, verdictDeliver, v)
		}
		_, _ = h.q.wake()
	}
	require.Empty(t, h.q.flights)
	require.Empty(t, h.q.byReq)
	require.Less(t, len(h.q.attempts)-h.q.head, 2)
}

// TestExpiryQueueRescheduledDuringFlight: a deadline moved while its expire
// is in flight decides once that expire comes back stale (the Store saw
// the moved deadline); a delivered expire forgets it (the call is done).
func TestExpiryQueueRescheduledDuringFlight(t *testing.T) {
	h := newQueueHarness(100)
	h.q.schedule("c", "moved", 10)
	h.q.schedule("c", "done", 10)
	sent := h.due(10)
	require.Len(t, sent, 2)
	h.q.schedule("c", "moved", 500) // a reschedule committed before the expire
	h.q.schedule("c", "done", 600)  // one committed after the expire: it is stale in the Store

	v, _, _ := h.q.reply(11, sent[1].req, journal.ErrStale) // "moved"
	require.Equal(t, verdictStale, v)
	v, _, _ = h.q.reply(11, sent[0].req, nil) // "done" expired
	require.Equal(t, verdictDeliver, v)
	require.Equal(t, int64(500), wakeAt(t, h.q), "the moved deadline is still armed")
	require.Empty(t, h.due(499))
	require.Equal(t, []sentExpire{{103, "c", "moved"}}, h.due(600), "the moved call expires at its new time, the done one never again")

	// A stale reply with no schedule meanwhile (answered) leaves nothing.
	v, _, _ = h.q.reply(601, 103, journal.ErrStale)
	require.Equal(t, verdictStale, v)
	_, ok := h.q.wake()
	require.False(t, ok, "nothing left")
}

// TestExpiryQueueStaleEarlierAttempt: an expire sent for the old deadline
// comes back stale after a second one went out for the new deadline; the
// second's reply decides.
func TestExpiryQueueStaleEarlierAttempt(t *testing.T) {
	h := newQueueHarness(100)
	h.q.schedule("c", "x", 10)
	first := h.due(10)
	require.Len(t, first, 1)
	h.q.schedule("c", "x", 15) // a reschedule committed before the first expire
	second := h.due(15)
	require.Len(t, second, 1)

	v, _, _ := h.q.reply(16, first[0].req, journal.ErrStale)
	require.Equal(t, verdictIgnore, v, "the attempt for the new deadline is still out")
	v, conv, call := h.q.reply(16, second[0].req, nil)
	require.Equal(t, verdictDeliver, v)
	require.Equal(t, "c", conv)
	require.Equal(t, "x", call)
	require.Empty(t, h.q.flights)
	require.Empty(t, h.q.byReq)
	_, ok := h.q.wake()
	require.False(t, ok, "nothing left")
}

// TestExpiryQueueStaleAfterUnknownOutcome: an expire whose reply says its
// outcome is unknown is retried; a stale reply to the retry is
// verdictStaleUnsure (the first attempt may have expired the call, and
// only the row can tell), once. A stale reply after a failure that wrote
// nothing, or after a cancel (another writer answered first, so the
// unknown attempt did not land), is plain verdictStale.
func TestExpiryQueueStaleAfterUnknownOutcome(t *testing.T) {
	unknown := fmt.Errorf("connection lost during COMMIT: %w", journal.ErrUnknownOutcome)

	h := newQueueHarness(100)
	h.q.schedule("c", "x", 10)
	first := h.due(10)
	require.Len(t, first, 1)
	v, _, _ := h.q.reply(11, first[0].req, unknown)
	require.Equal(t, verdictRetry, v)
	retry := h.due(21)
	require.Len(t, retry, 1, "retried after retryAfter")
	v, conv, call := h.q.reply(22, retry[0].req, journal.ErrStale)
	require.Equal(t, verdictStaleUnsure, v)
	require.Equal(t, "c", conv)
	require.Equal(t, "x", call)
	require.Empty(t, h.q.unsure, "settled")
	_, ok := h.q.wake()
	require.False(t, ok, "nothing left")

	// A failure that wrote nothing: stale is stale.
	h.q.schedule("c", "y", 30)
	first = h.due(30)
	v, _, _ = h.q.reply(31, first[0].req, journal.ErrUnavailable)
	require.Equal(t, verdictRetry, v)
	retry = h.due(41)
	v, _, _ = h.q.reply(42, retry[0].req, journal.ErrStale)
	require.Equal(t, verdictStale, v)

	// Unknown, then cancelled before the retry (the answer that cancels
	// it committed, so the unknown expire did not).
	h.q.schedule("c", "z", 50)
	first = h.due(50)
	v, _, _ = h.q.reply(51, first[0].req, unknown)
	require.Equal(t, verdictRetry, v)
	h.q.cancel("z")
	require.Empty(t, h.q.unsure)
	require.Empty(t, h.due(100), "nothing retried")

	// Unknown, then the retry lands: delivered, settled.
	h.q.schedule("c", "w", 200)
	first = h.due(200)
	v, _, _ = h.q.reply(201, first[0].req, unknown)
	require.Equal(t, verdictRetry, v)
	retry = h.due(211)
	v, _, _ = h.q.reply(212, retry[0].req, nil)
	require.Equal(t, verdictDeliver, v)
	require.Empty(t, h.q.unsure)
}

// TestExpiryQueueForgetsUnsureCallsCancelledInFlight: an expire whose call
// is cancelled (answered by another writer, or its conversation deleted)
// while the expire is in flight, and whose reply then says its outcome is
// unknown, is not retried, and nothing is left of it: no later reply or
// cancel of that call comes to settle an unsure mark, so one kept would be
// kept for good, one per such call.
func TestExpiryQueueForgetsUnsureCallsCancelledInFlight(t *testing.T) {
	unknown := fmt.Errorf("connection lost during COMMIT: %w", journal.ErrUnknownOutcome)
	h := newQueueHarness(2000)
	const n = 1000
	for i := range n {
		h.q.schedule("c", fmt.Sprintf("call-%d", i), 10)
	}
	sent := h.due(10)
	require.Len(t, sent, n)
	for i := range n {
		h.q.cancel(fmt.Sprintf("call-%d", i))
	}
	for _, s := range sent {
		v, _, _ := h.q.reply(11, s.req, unknown)
		require.Equal(t, verdictIgnore, v, "cancelled: not retried")
	}
	require.Empty(t, h.q.flights)
	require.Empty(t, h.q.byReq)
	require.Zero(t, len(h.q.unsure), "no mark is left for calls nothing will settle")
	require.Empty(t, h.due(1000), "nothing retried")
	_, ok := h.q.wake()
	require.False(t, ok, "nothing left")
}

// TestExpiryQueueKeepsUnsureAcrossAReschedule: the same race with a
// reschedule instead of a cancel keeps the mark: the attempt for the new
// deadline may find the call expired by the unknown one.
func TestExpiryQueueKeepsUnsureAcrossAReschedule(t *testing.T) {
	unknown := fmt.Errorf("connection lost during COMMIT: %w", journal.ErrUnknownOutcome)
	h := newQueueHarness(100)
	h.q.schedule("c", "x", 10)
	first := h.due(10)
	require.Len(t, first, 1)
	h.q.schedule("c", "x", 50)
	v, _, _ := h.q.reply(11, first[0].req, unknown)
	require.Equal(t, verdictIgnore, v, "the new deadline decides")
	require.Contains(t, h.q.unsure, "x")
	second := h.due(50)
	require.Len(t, second, 1)
	v, _, _ = h.q.reply(51, second[0].req, journal.ErrStale)
	require.Equal(t, verdictStaleUnsure, v)
	require.Empty(t, h.q.unsure)
}

// TestExpiryQueueTimedOutAttemptOfACancelledCallStillDelivers: an expire
// whose own commit cancels its deadline (the journal's Committed hook sends
// CancelExpiry just before the reply) while its reply timeout has passed
// (a commit slower than the timeout, the actor not yet woken by its timer)
// is not resent, and its reply, when it comes, still decides: a success
// delivers the expiry. Before, the attempt was forgotten at the timeout and
// its success ignored: the call was expired in the Store and nothing told
// its conversation.
func TestExpiryQueueTimedOutAttemptOfACancelledCallStillDelivers(t *testing.T) {
	h := newQueueHarness(100)
	h.q.schedule("c", "x", 10)
	sent := h.due(10)
	require.Len(t, sent, 1)
	h.q.cancel("x") // the expire's own commit
	require.Empty(t, h.due(1010), "cancelled: not sent again at the reply timeout")
	_, ok := h.q.wake()
	require.False(t, ok, "no timer for an attempt that is not resent")
	v, conv, call := h.q.reply(1011, sent[0].req, nil)
	require.Equal(t, verdictDeliver, v)
	require.Equal(t, "c", conv)
	require.Equal(t, "x", call)
	require.Empty(t, h.q.flights)
	require.Empty(t, h.q.byReq)

	// Cancelled by another writer's answer: the late reply is stale, and
	// nothing is left.
	h.q.schedule("c", "y", 2000)
	sent = h.due(2000)
	require.Len(t, sent, 1)
	h.q.cancel("y")
	require.Empty(t, h.due(3000))
	v, _, _ = h.q.reply(3001, sent[0].req, journal.ErrStale)
	require.Equal(t, verdictStale, v)
	require.Empty(t, h.q.flights)
	require.Empty(t, h.q.byReq)
	require.Empty(t, h.q.unsure)
}

// TestExpiryQueueUnsureRescheduleKeepsBothTimes: a reschedule of unknown
// outcome (scheduleUnsure) arms the earlier of the old and the new time
// and keeps the other: an expire of the earlier that the Store finds
// stale (the deadline is not due by then: the write went the other way)
// arms the other, and one it applies is the last. So the call expires at
// the time the Store holds whether the write landed or not, moved
// earlier or later; a committed schedule or a cancel drops the kept
// time. Before, the unknown reschedule was not told to the queue: moved
// later and landed, the old time's stale expire left nothing armed.
func TestExpiryQueueUnsureRescheduleKeepsBothTimes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		move   int64
		landed bool
		stale  bool  // whether the first expire the queue sends is stale
		second int64 // when the next is sent, if the first was stale
	}{
		{name: "later, landed", move: 50, landed: true, stale: true, second: 50},
		{name: "later, not landed", move: 50},
		{name: "earlier, landed", move: 5, landed: true},
		{name: "earlier, not landed", move: 5, stale: true, second: 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newQueueHarness(100)
			h.q.schedule("c", "x", 10)
			h.q.scheduleUnsure("c", "x", tc.move)
			firstAt := min(int64(10), tc.move)
			require.Equal(t, firstAt, wakeAt(t, h.q), "the earlier time armed (landed: %v)", tc.landed)
			sent := h.due(firstAt)
			require.Len(t, sent, 1)
			if !tc.stale {
				v, _, _ := h.q.reply(firstAt, sent[0].req, nil)
				require.Equal(t, verdictDeliver, v)
				_, ok := h.q.wake()
				require.False(t, ok, "nothing left once the call expired")
				require.Empty(t, h.q.later)
				return
			}
			v, _, _ := h.q.reply(firstAt, sent[0].req, journal.ErrStale)
			require.Equal(t, verdictStale, v)
			require.Equal(t, tc.second, wakeAt(t, h.q), "the other time armed")
			require.Empty(t, h.due(tc.second-1))
			sent = h.due(tc.second)
			require.Len(t, sent, 1)
			v, _, _ = h.q.reply(tc.second, sent[0].req, nil)
			require.Equal(t, verdictDeliver, v)
			_, ok := h.q.wake()
			require.False(t, ok, "nothing left once the call expired")
			require.Empty(t, h.q.later)
		})
	}

	t.Run("answered: the kept time is stale too, then nothing", func(t *testing.T) {
		h := newQueueHarness(100)
		h.q.schedule("c", "x", 10)
		h.q.scheduleUnsure("c", "x", 50)
		sent := h.due(10)
		v, _, _ := h.q.reply(10, sent[0].req, journal.ErrStale)
		require.Equal(t, verdictStale, v)
		sent = h.due(50)
		require.Len(t, sent, 1)
		v, _, _ = h.q.reply(50, sent[0].req, journal.ErrStale)
		require.Equal(t, verdictStale, v)
		_, ok := h.q.wake()
		require.False(t, ok)
		require.Empty(t, h.q.later)
	})

	t.Run("a committed schedule or a cancel drops the kept time", func(t *testing.T) {
		h := newQueueHarness(100)
		h.q.schedule("c", "x", 10)
		h.q.scheduleUnsure("c", "x", 50)
		h.q.schedule("c", "x", 30)
		require.Empty(t, h.q.later)
		require.Equal(t, int64(30), wakeAt(t, h.q))
		h.q.scheduleUnsure("c", "x", 40)
		h.q.cancel("x")
		require.Empty(t, h.q.later)
		_, ok := h.q.wake()
		require.False(t, ok)
	})

	t.Run("while an expire is in flight", func(t *testing.T) {
		h := newQueueHarness(100)
		h.q.schedule("c", "x", 10)
		sent := h.due(10)
		require.Len(t, sent, 1)
		h.q.scheduleUnsure("c", "x", 50) // landed before the expire: it is stale
		v, _, _ := h.q.reply(10, sent[0].req, journal.ErrStale)
		require.Equal(t, verdictStale, v)
		require.Equal(t, int64(50), wakeAt(t, h.q), "the new time armed")

		h = newQueueHarness(100)
		h.q.schedule("c", "x", 10)
		sent = h.due(10)
		h.q.scheduleUnsure("c", "x", 50) // did not land: the expire applies
		v, _, _ = h.q.reply(10, sent[0].req, nil)
		require.Equal(t, verdictDeliver, v)
		_, ok := h.q.wake()
		require.False(t, ok)
		require.Empty(t, h.q.later)
	})

	t.Run("with nothing armed, the time is armed", func(t *testing.T) {
		h := newQueueHarness(100)
		h.q.scheduleUnsure("c", "x", 50)
		require.Equal(t, int64(50), wakeAt(t, h.q))
		require.Empty(t, h.q.later)
	})

	t.Run("a rebuild drops the kept times", func(t *testing.T) {
		h := newQueueHarness(100)
		h.q.schedule("c", "x", 10)
		h.q.scheduleUnsure("c", "x", 50)
		h.q.resetDeadlines(nil)
		require.Empty(t, h.q.later)
	})
}
