package actors_test

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

// hugeSpans are durations of a century and more; the last two, added to a
// time of this century, leave the range of int64 Unix nanoseconds (beyond
// the year 2262).
var hugeSpans = []time.Duration{1 << 62, math.MaxInt64 - 1<<60, math.MaxInt64}

// quietFor advances the clock by n spans of MaxTimerSpan, waiting after
// each for the actor to arm its timer again (the sign that it ran what the
// tick made due), so a fire or a write it made is already in its channel.
func (h *expiryHarness) quietFor(t *testing.T, n int, far time.Time) {
	t.Helper()
	for range n {
		h.clock.Advance(actors.MaxTimerSpan)
		h.waitArmed(t, far)
	}
}

// TestExpiryScheduleBeyond2262IsNever: a schedule occurrence valid as a
// timestamp but past the years int64 nanoseconds reach (a Store's record,
// or a ScheduleArm, of the year 2500 or 3000) is as good as never, as a
// deadline that far is: it is armed for MaxTimerSpan at a time and does
// not fire. The Unix nanoseconds of such a time wrapped to the past, and
// it fired at once.
func TestExpiryScheduleBeyond2262IsNever(t *testing.T) {
	store := memjournal.New(memjournal.Options{})
	far := time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)
	putSchedule(t, store, "c", "stored", far)
	h, ch := scheduleHarness(t, store)
	h.start()
	h.waitArmed(t, far)
	h.sys.Root.Send(h.pid, &messages.ScheduleArm{ConversationId: "c", ScheduleId: "armed", Next: timestamppb.New(time.Date(2500, 1, 1, 0, 0, 0, 0, time.UTC))})
	h.sys.Root.Send(h.pid, &messages.ScheduleArm{ConversationId: "c", ScheduleId: "max", Next: &timestamppb.Timestamp{Seconds: 253402300799}}) // year 9999
	h.quietFor(t, 3, far)
	requireNoFire(t, ch)
}

// TestExpiryHugeReplyTimeoutIsNotAtOnce: an unanswered expire is sent again
// after ReplyTimeout; a huge one (math.MaxInt64) means "not for centuries",
// and a schedule handed to Fire is handed again after ReplyTimeout, not at
// once. The sum of the send time and the timeout overflowed to the past,
// and the expire was sent again at every wake-up.
func TestExpiryHugeReplyTimeoutIsNotAtOnce(t *testing.T) {
	for _, span := range hugeSpans {
		t.Run(fmt.Sprint(span), func(t *testing.T) {
			var j *fakeJournal
			store := memjournal.New(memjournal.Options{})
			putSchedule(t, store, "c", "s", expiryT0.Add(-time.Hour))
			h := newExpiryHarness(t, store, func(sys *actor.ActorSystem) *actor.PID {
				j = newFakeJournal(t, sys, nil)
				return j.pid
			})
			ch := make(chan fired, 100)
			h.opts.Fire = func(conv, id string, at time.Time) { ch <- fired{conv, id, at} }
			h.opts.ReplyTimeout = span
			h.start()
			require.Equal(t, fired{"c", "s", expiryT0.Add(-time.Hour)}, nextFire(t, ch))
			h.schedule("conv", "call", expiryT0)
			require.Equal(t, "call", resolvedCall(t, j.next(t).w))
			far := expiryT0.Add(time.Hour * 24 * 365 * 100)
			h.waitArmed(t, far)
			h.quietFor(t, 3, far)
			j.requireNone(t)
			requireNoFire(t, ch)
		})
	}
}

// TestExpiryHugeRetryAfterIsNotAtOnce: a failed expire write is retried
// after RetryAfter; a huge one is not retried at once, nor armed at all
// when it falls past the int64 range. The sum of now and RetryAfter
// overflowed to the past.
func TestExpiryHugeRetryAfterIsNotAtOnce(t *testing.T) {
	for _, span := range hugeSpans {
		t.Run(fmt.Sprint(span), func(t *testing.T) {
			var j *fakeJournal
			h := newExpiryHarness(t, memjournal.New(memjournal.Options{}), func(sys *actor.ActorSystem) *actor.PID {
				j = newFakeJournal(t, sys, nil)
				return j.pid
			})
			h.opts.RetryAfter = span
			h.start()
			h.schedule("conv", "call", expiryT0)
			first := j.next(t)
			h.waitArmed(t, expiryT0.Add(30*time.Second)) // the default ReplyTimeout
			j.answer(first, fmt.Errorf("disk gone: %w", journal.ErrClosed))
			// The retry is far: armed for MaxTimerSpan, or, when it is due
			// at the saturated instant, "never", not armed at all.
			settled := func() bool {
				next, ok := h.clock.Next()
				return !ok || next.Equal(h.clock.Now().Add(actors.MaxTimerSpan)) && h.clock.Timers() == 1
			}
			for range 3 {
				require.Eventually(t, settled, replyWait, time.Millisecond)
				h.clock.Advance(actors.MaxTimerSpan)
			}
			require.Eventually(t, settled, replyWait, time.Millisecond)
			j.requireNone(t)
		})
	}
}

// TestExpiryHugeRetryAfterRebuild: after a failed read of the Store, the
// next read waits RetryAfter; a huge one does not read again at once
// (which, with a Store that keeps failing, read it at every wake-up).
func TestExpiryHugeRetryAfterRebuild(t *testing.T) {
	mem := memjournal.New(memjournal.Options{})
	store := &flakyDeadlines{Store: mem}
	h := newExpiryHarness(t, store, withRealJournal(t, mem))
	h.opts.RetryAfter = math.MaxInt64
	pendingHumanCall(t, mem, "conv", "call", expiryT0.Add(-time.Minute)) // already due
	h.start()
	far := expiryT0.Add(time.Hour * 24 * 365 * 100)
	h.waitArmed(t, far)
	h.quietFor(t, 3, far)
	store.mu.Lock()
	reads := store.reads
	store.mu.Unlock()
	require.Equal(t, 1, reads, "read once, not again at every wake-up")
	require.Len(t, h.deliveries, 0)
}
