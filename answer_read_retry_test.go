package lazarus_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/actors/actorstest"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

// unreadableAfterLoss is a Store that, once lost reports that its inner
// Store lost the reply of a write (answerLostReplyStore,
// expireLostReplyStore), fails the next failReads reads of a tool-call row
// with journal.ErrUnavailable: the Store unavailable for a moment just
// after the COMMIT.
type unreadableAfterLoss struct {
	journal.Store
	lost      func() bool
	failReads atomic.Int32
	failed    atomic.Int32
}

func (s *unreadableAfterLoss) ToolCall(ctx context.Context, id string) (*messages.ToolCallRecord, error) {
	if s.lost() && s.failReads.Add(-1) >= 0 {
		s.failed.Add(1)
		return nil, fmt.Errorf("test: server unreachable: %w", journal.ErrUnavailable)
	}
	return s.Store.ToolCall(ctx, id)
}

// advanceThroughFailedReads waits for each of the store's three failed
// reads and the retry the delivery arms after it (100ms, 200ms, 400ms on
// clock), and advances clock to it.
func advanceThroughFailedReads(t *testing.T, clock *actorstest.ManualClock, store *unreadableAfterLoss) {
	t.Helper()
	for i, backoff := range []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond} {
		due := clock.Now().Add(backoff)
		require.Eventually(t, func() bool {
			return store.failed.Load() == int32(i+1) && slices.ContainsFunc(clock.Dues(), due.Equal)
		}, 20*time.Second, time.Millisecond, "read %d failed; the next is armed %v later", i+1, backoff)
		clock.Advance(backoff)
	}
}

// levelLog records the level and message of every record it is handed.
type levelLog struct {
	mu   sync.Mutex
	recs []string
}

func (l *levelLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *levelLog) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = append(l.recs, r.Level.String()+" "+r.Message)
	return nil
}
func (l *levelLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *levelLog) WithGroup(string) slog.Handler      { return l }

// matching returns the records whose message starts with prefix.
func (l *levelLog) matching(prefix string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, r := range l.recs {
		if _, msg, _ := strings.Cut(r, " "); strings.HasPrefix(msg, prefix) {
			out = append(out, r)
		}
	}
	return out
}

// TestAnsweredRowUnreadableForAMomentIsDelivered: an answer whose write
// landed with its outcome reported unknown, to a live activation that
// never passivates; the Store then fails the reads of the call's row three
// times. The delivery reads the row again after 100ms, 200ms and 400ms on
// the runtime's clock, and the activation records the answer once and runs
// its turn. A failed read delivered nothing: the activation, which does
// not read the row again, waited for ever for an answer the Store held.
// The first failure is logged at warn level and the recovery at info
// level, once each (the retries logged nothing).
func TestAnsweredRowUnreadableForAMomentIsDelivered(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	clock := actorstest.NewManualClock(time.Unix(1_700_000_000, 0))
	model := scripted.New(scripted.Options{})
	inner := answerLostReplyStore()
	store := &unreadableAfterLoss{Store: inner, lost: inner.lost.Load}
	store.failReads.Store(3)
	logs := &levelLog{}
	rt, err := lazarus.Open(lazarus.Options{Store: store, Model: model, Clock: clock, IdleTimeout: -1, ResumeInterval: -1,
		Logger: slog.New(logs), Tools: []agent.Tool{{Name: toolApprove, Executor: messages.Executor_EXECUTOR_HUMAN, Timeout: time.Hour}}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = rt.Close() })
	callID := suspend(ctx, t, rt, model, "h")
	model.Push("h", scripted.Text("thanks"))
	sub, err := rt.Subscribe(ctx, "h", 0)
	require.NoError(t, err)

	err = rt.Resolve(ctx, callID, `{"approved":true}`, user)
	require.ErrorIs(t, err, lazarus.ErrUnknownOutcome)
	advanceThroughFailedReads(t, clock, store)
	awaitFinalAnswer(t, sub)
	require.Equal(t, int32(3), store.failed.Load())
	require.True(t, rt.IsActive("h"), "the activation still live (it never passivates)")
	require.Eventually(t, func() bool { return len(logs.matching("answer delivery:")) == 2 }, 10*time.Second, time.Millisecond)
	require.Equal(t, []string{"WARN answer delivery: failed; trying again with backoff", "INFO answer delivery: recovered"}, logs.matching("answer delivery:"))
	evs, err := rt.History(ctx, "h", 0, 0)
	require.NoError(t, err)
	res, results := resultsOf(evs, callID)
	require.Equal(t, 1, res, "one resolution")
	require.Equal(t, 1, results, "one tool_result")
}

// TestExpiredRowUnreadableForAMomentIsDelivered: an expire whose write
// landed with its outcome reported unknown, for a call a live activation
// awaits (passivation off); its retry is stale, and the Store then fails
// the reads of the call's row three times. The row is read again after
// 100ms, 200ms and 400ms on the runtime's clock, and the activation
// records the expiry once and runs its turn. A failed read delivered
// nothing, and the activation waited for ever for an expiry the Store held.
func TestExpiredRowUnreadableForAMomentIsDelivered(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	clock := actorstest.NewManualClock(time.Unix(1_700_000_000, 0))
	model := scripted.New(scripted.Options{})
	inner := expireLostReplyStore()
	store := &unreadableAfterLoss{Store: inner, lost: inner.lost.Load}
	store.failReads.Store(3)
	rt, err := lazarus.Open(lazarus.Options{Store: store, Model: model, Clock: clock, IdleTimeout: -1, ResumeInterval: -1,
		Tools: []agent.Tool{{Name: toolApprove, Executor: messages.Executor_EXECUTOR_HUMAN, Timeout: time.Minute}}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = rt.Close() })
	callID := suspend(ctx, t, rt, model, "h")
	model.Push("h", scripted.Text("too late"))
	sub, err := rt.Subscribe(ctx, "h", 0)
	require.NoError(t, err)

	deadline := clock.Now().Add(time.Minute)
	require.Eventually(t, func() bool {
		next, ok := clock.Next()
		return ok && next.Equal(deadline)
	}, 20*time.Second, time.Millisecond, "the deadline armed")
	clock.Advance(time.Minute)
	require.Eventually(t, inner.lost.Load, 20*time.Second, time.Millisecond, "the expire written, its outcome reported unknown")
	// The expiry actor writes it again after its retry delay (a second on
	// its clock); the Store says stale, and the row is read.
	retry := clock.Now().Add(time.Second)
	require.Eventually(t, func() bool { return slices.ContainsFunc(clock.Dues(), retry.Equal) },
		20*time.Second, time.Millisecond, "the expire's retry armed")
	clock.Advance(time.Second)
	advanceThroughFailedReads(t, clock, store)
	awaitFinalAnswer(t, sub)
	require.Equal(t, int32(3), store.failed.Load())
	evs, err := rt.History(ctx, "h", 0, 0)
	require.NoError(t, err)
	res, results := resultsOf(evs, callID)
	require.Equal(t, 1, res, "one resolution")
	require.Equal(t, 1, results, "one tool_result")
}

// lateLandingStore reports the first write that answers a tool call
// (Resolve's: resolutions, no events) as journal.ErrUnknownOutcome without
// writing it, and writes it once a read of the call's row made after that
// has returned: a PostgreSQL COMMIT whose reply was lost, still running
// on the server when the runtime reads the row.
type lateLandingStore struct {
	*memjournal.Store
	mu      sync.Mutex
	held    *messages.AppendRequest
	landed  atomic.Bool
	pending atomic.Int32 // reads of the row made while the answer was held
	never   bool         // the answer never lands
}

func (s *lateLandingStore) AppendBatch(ctx context.Context, reqs []*messages.AppendRequest) []journal.AppendResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(reqs) == 1 && s.held == nil && !s.landed.Load() &&
		len(reqs[0].GetResolutions()) > 0 && len(reqs[0].GetEvents()) == 0 {
		s.held = reqs[0]
		return []journal.AppendResult{{Err: fmt.Errorf("test: connection lost during COMMIT: %w", journal.ErrUnknownOutcome)}}
	}
	return s.Store.AppendBatch(ctx, reqs)
}

func (s *lateLandingStore) ToolCall(ctx context.Context, id string) (*messages.ToolCallRecord, error) {
	row, err := s.Store.ToolCall(ctx, id)
	s.mu.Lock()
	defer s.mu.Unlock()
	if held := s.held; held != nil {
		s.pending.Add(1)
		if s.never {
			return row, err
		}
		s.held = nil
		if res := s.Store.AppendBatch(ctx, []*messages.AppendRequest{held}); res[0].Err != nil {
			return nil, res[0].Err
		}
		s.landed.Store(true)
	}
	return row, err
}

// TestAnswerLandingAfterTheDeliveryReadIsDelivered: an answer whose write
// is reported journal.ErrUnknownOutcome and lands only after the delivery
// read the call's row (still PENDING) once, to a live activation that
// never passivates. The delivery reads the row again 100ms later on the
// runtime's clock, and the activation records the answer once and runs its
// turn. A PENDING row ended the delivery: the activation, which does not
// read the row again, waited for ever for an answer the Store held.
func TestAnswerLandingAfterTheDeliveryReadIsDelivered(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	clock := actorstest.NewManualClock(time.Unix(1_700_000_000, 0))
	model := scripted.New(scripted.Options{})
	store := &lateLandingStore{Store: memjournal.New(memjournal.Options{})}
	rt, err := lazarus.Open(lazarus.Options{Store: store, Model: model, Clock: clock, IdleTimeout: -1, ResumeInterval: -1,
		Tools: []agent.Tool{{Name: toolApprove, Executor: messages.Executor_EXECUTOR_HUMAN, Timeout: time.Hour}}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = rt.Close() })
	callID := suspend(ctx, t, rt, model, "h")
	model.Push("h", scripted.Text("thanks"))
	sub, err := rt.Subscribe(ctx, "h", 0)
	require.NoError(t, err)

	err = rt.Resolve(ctx, callID, `{"approved":true}`, user)
	require.ErrorIs(t, err, lazarus.ErrUnknownOutcome)
	due := clock.Now().Add(100 * time.Millisecond)
	require.Eventually(t, func() bool {
		return store.landed.Load() && slices.ContainsFunc(clock.Dues(), due.Equal)
	}, 20*time.Second, time.Millisecond, "the row read PENDING, the answer landed after, and the next read armed")
	clock.Advance(100 * time.Millisecond)
	awaitFinalAnswer(t, sub)
	require.Equal(t, int32(1), store.pending.Load())
	evs, err := rt.History(ctx, "h", 0, 0)
	require.NoError(t, err)
	res, results := resultsOf(evs, callID)
	require.Equal(t, 1, res, "one resolution")
	require.Equal(t, 1, results, "one tool_result")
}

// TestAnswerThatNeverLandsEndsItsDelivery: an answer whose write is
// reported journal.ErrUnknownOutcome and never lands, to a live
// activation that never passivates. The delivery reads the PENDING row 20
// times, with the backoff between them (100ms doubling to 2s on the
// runtime's clock, about 30 s in all), then gives up, logged at debug
// level: it does not read the row for as long as the call is pending.
func TestAnswerThatNeverLandsEndsItsDelivery(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	clock := actorstest.NewManualClock(time.Unix(1_700_000_000, 0))
	model := scripted.New(scripted.Options{})
	store := &lateLandingStore{Store: memjournal.New(memjournal.Options{}), never: true}
	logs := &levelLog{}
	rt, err := lazarus.Open(lazarus.Options{Store: store, Model: model, Clock: clock, IdleTimeout: -1, ResumeInterval: -1,
		Logger: slog.New(logs), Tools: []agent.Tool{{Name: toolApprove, Executor: messages.Executor_EXECUTOR_HUMAN, Timeout: time.Hour}}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = rt.Close() })
	callID := suspend(ctx, t, rt, model, "h")

	err = rt.Resolve(ctx, callID, `{"approved":true}`, user)
	require.ErrorIs(t, err, lazarus.ErrUnknownOutcome)
	wait := 100 * time.Millisecond
	for i := int32(1); i < 20; i++ {
		due := clock.Now().Add(wait)
		require.Eventually(t, func() bool {
			return store.pending.Load() == i && slices.ContainsFunc(clock.Dues(), due.Equal)
		}, 20*time.Second, time.Millisecond, "read %d found the row PENDING; the next is armed %v later", i, wait)
		clock.Advance(wait)
		wait = min(2*wait, 2*time.Second)
	}
	require.Eventually(t, func() bool { return len(logs.matching("answer delivery: given up")) == 1 },
		20*time.Second, time.Millisecond, "the delivery gave up after its 20th read")
	require.Equal(t, int32(20), store.pending.Load())
	require.Equal(t, []string{"DEBUG answer delivery: the call is still pending; reading it again with backoff", "DEBUG answer delivery: given up"},
		logs.matching("answer delivery:"))
	require.False(t, slices.ContainsFunc(clock.Dues(), clock.Now().Add(2*time.Second).Equal), "no read armed after the last")
	row, err := store.ToolCall(ctx, callID)
	require.NoError(t, err)
	require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING, row.GetStatus(), "the answer never landed")
}
