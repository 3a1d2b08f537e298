package actors_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

// damagedListings is a Store whose Deadlines and ScheduleTimes list every
// record of the Store underneath and then report a damaged one, as an
// adapter does when it passes over a record that does not decode.
type damagedListings struct {
	*memjournal.Store
	deadlineReads, scheduleReads atomic.Int32
}

func (s *damagedListings) Deadlines(ctx context.Context, dueBy time.Time, fn func(*messages.Deadline) error) error {
	s.deadlineReads.Add(1)
	if err := s.Store.Deadlines(ctx, dueBy, fn); err != nil {
		return err
	}
	var bad journal.PassedOver
	bad.Add(journal.Corruptf("test: deadline key %q", "damaged"))
	return bad.Err("test: deadlines")
}

func (s *damagedListings) ScheduleTimes(ctx context.Context, fn func(conversationID, id string, next time.Time) error) error {
	s.scheduleReads.Add(1)
	if err := s.Store.ScheduleTimes(ctx, fn); err != nil {
		return err
	}
	var bad journal.PassedOver
	bad.Add(journal.Corruptf("test: schedule key %q", "damaged"))
	return bad.Err("test: schedule times")
}

// errorLog records the messages and errors of the error-level records it
// is handed.
type errorLog struct {
	mu   sync.Mutex
	recs []string
}

func (l *errorLog) Enabled(_ context.Context, level slog.Level) bool { return level >= slog.LevelError }
func (l *errorLog) Handle(_ context.Context, r slog.Record) error {
	line := r.Message
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "err" {
			line += ": " + a.Value.String()
		}
		return true
	})
	l.mu.Lock()
	l.recs = append(l.recs, line)
	l.mu.Unlock()
	return nil
}
func (l *errorLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *errorLog) WithGroup(string) slog.Handler      { return l }

func (l *errorLog) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.recs...)
}

// TestExpiryArmsWhatADamagedListingYields: when the Store's Deadlines and
// ScheduleTimes end with journal.ErrCorrupt (a damaged record passed
// over), the expiry actor arms every deadline and schedule they listed,
// logs the damage once per rebuild at error level, and does not read the
// Store again for it. The rebuild used to fail and be retried every
// RetryAfter forever, and none of the node's deadlines fired.
func TestExpiryArmsWhatADamagedListingYields(t *testing.T) {
	mem := memjournal.New(memjournal.Options{})
	store := &damagedListings{Store: mem}
	pendingHumanCall(t, mem, "conv", "a", expiryT0.Add(time.Minute))
	pendingHumanCall(t, mem, "conv", "b", expiryT0.Add(2*time.Minute))
	putSchedule(t, mem, "sched", "s", expiryT0.Add(30*time.Second))
	h := newExpiryHarness(t, store, withRealJournal(t, mem))
	fires := make(chan fired, 10)
	h.opts.Fire = func(conv, id string, at time.Time) { fires <- fired{conv, id, at} }
	h.opts.ReplyTimeout = time.Hour // no second hand of the schedule in this test
	log := &errorLog{}
	h.opts.Logger = slog.New(log)
	h.start()

	h.waitArmed(t, expiryT0.Add(30*time.Second)) // not RetryAfter: no read again
	h.clock.Advance(30 * time.Second)
	require.Equal(t, fired{"sched", "s", expiryT0.Add(30 * time.Second)}, nextFire(t, fires))
	h.waitArmed(t, expiryT0.Add(time.Minute))
	h.clock.Advance(30 * time.Second)
	require.Equal(t, delivery{"conv", "a"}, h.nextDelivery(t))
	requireExpired(t, mem, "a")
	h.waitArmed(t, expiryT0.Add(2*time.Minute))
	h.clock.Advance(time.Minute)
	require.Equal(t, delivery{"conv", "b"}, h.nextDelivery(t))
	requireExpired(t, mem, "b")

	require.Equal(t, int32(1), store.deadlineReads.Load(), "the Store's deadlines were read once")
	require.Equal(t, int32(1), store.scheduleReads.Load(), "the Store's schedules were read once")
	lines := log.lines()
	require.Len(t, lines, 1, "the damage is logged once: %q", lines)
	require.Contains(t, lines[0], `deadline key "damaged"`)
	require.Contains(t, lines[0], `schedule key "damaged"`)
	require.Contains(t, lines[0], journal.ErrCorrupt.Error())

	// A membership change rebuilds again, and logs the damage again, once.
	h.sys.Root.Send(h.pid, &actors.ExpiryRebuild{})
	require.Eventually(t, func() bool { return store.scheduleReads.Load() == 2 }, replyWait, time.Millisecond)
	// The damage is logged once the rebuild has read both listings.
	require.Eventually(t, func() bool { return len(log.lines()) == 2 }, replyWait, time.Millisecond)
	require.Equal(t, int32(2), store.deadlineReads.Load())
	require.True(t, strings.Contains(log.lines()[1], journal.ErrCorrupt.Error()))
}
