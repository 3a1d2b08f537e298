package pebblejournal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

var ctx = context.Background()

// openMem opens a store on a fresh in-memory filesystem and closes it when
// the test ends.
func openMem(t testing.TB, opts Options) *Store {
	t.Helper()
	if opts.FS == nil {
		opts.FS = vfs.NewMem()
	}
	s, err := Open("db", opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func userEvent(text string) *messages.Event {
	return &messages.Event{Body: &messages.Event_UserMsg{UserMsg: &messages.UserMessage{
		Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: text}}},
	}}}
}

func appendN(t testing.TB, s *Store, conv string, after uint64, n int) uint64 {
	t.Helper()
	evs := make([]*messages.Event, n)
	for i := range evs {
		evs[i] = userEvent(fmt.Sprintf("%s #%d", conv, after+uint64(i)+1))
	}
	res, err := s.Append(ctx, &messages.AppendRequest{ConversationId: conv, ExpectedLast: after, Events: evs})
	require.NoError(t, err)
	return res.LastSeq
}

func pendingCall(conv, id string) *messages.ToolCallRecord {
	return &messages.ToolCallRecord{Id: id, ConversationId: conv, Name: "ask", Executor: messages.Executor_EXECUTOR_HUMAN}
}

func TestSmoke(t *testing.T) {
	s := openMem(t, Options{Audit: true})
	last := appendN(t, s, "c", 0, 3)
	require.EqualValues(t, 3, last)

	_, err := s.Append(ctx, &messages.AppendRequest{ConversationId: "c", ExpectedLast: 2, Events: []*messages.Event{userEvent("x")}})
	require.ErrorIs(t, err, journal.ErrConflict)

	evs, err := s.Events(ctx, "c", journal.EventQuery{})
	require.NoError(t, err)
	require.Len(t, evs, 3)
	for i, ev := range evs {
		require.EqualValues(t, i+1, ev.GetSeq())
	}
	evs, err = s.Events(ctx, "c", journal.EventQuery{Before: 3, Limit: 1})
	require.NoError(t, err)
	require.Len(t, evs, 1)
	require.EqualValues(t, 2, evs[0].GetSeq())

	require.NoError(t, s.PutSummary(ctx, "c", &messages.Summary{FromSeq: 1, ToSeq: 2, Content: "s"}))
	sum, evs, err := s.LoadSince(ctx, "c")
	require.NoError(t, err)
	require.EqualValues(t, 2, sum.GetToSeq())
	require.Len(t, evs, 1)
	require.EqualValues(t, 3, evs[0].GetSeq())
	_, err = s.SummaryBefore(ctx, "c", 2)
	require.ErrorIs(t, err, journal.ErrNotFound)

	// A tool call upserted and scheduled in one append, resolved later.
	at := timestamppb.New(time.Unix(1000, 0))
	res, err := s.Append(ctx, &messages.AppendRequest{
		ConversationId: "c", ExpectedLast: 3, Events: []*messages.Event{userEvent("call")},
		ToolCalls: []*messages.ToolCallRecord{pendingCall("c", "t1")},
		Schedule:  []*messages.Deadline{{ConversationId: "c", ToolCallId: "t1", At: at}},
	})
	require.NoError(t, err)
	require.EqualValues(t, 4, res.FirstSeq)
	pend, err := s.PendingToolCalls(ctx, "c")
	require.NoError(t, err)
	require.Len(t, pend, 1)
	var dls []*messages.Deadline
	require.NoError(t, s.Deadlines(ctx, time.Time{}, func(d *messages.Deadline) error { dls = append(dls, d); return nil }))
	require.Len(t, dls, 1)

	rec, err := s.ResolveToolCall(ctx, "t1", messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED, nil, time.Unix(5, 0))
	require.NoError(t, err)
	require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED, rec.GetStatus())
	_, err = s.ResolveToolCall(ctx, "t1", messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED, nil, time.Unix(5, 0))
	require.ErrorIs(t, err, journal.ErrStale)
	pend, err = s.PendingToolCalls(ctx, "c")
	require.NoError(t, err)
	require.Empty(t, pend)
	dls = nil
	require.NoError(t, s.Deadlines(ctx, time.Time{}, func(d *messages.Deadline) error { dls = append(dls, d); return nil }))
	require.Empty(t, dls)

	require.NoError(t, s.PutMetadata(ctx, "c", map[string]string{"k": "v"}))
	require.NoError(t, s.PutModelCall(ctx, &messages.ModelCall{ConversationId: "c", TurnRef: 1}))
	require.NoError(t, s.DeleteConversation(ctx, "c"))
	_, err = s.Append(ctx, &messages.AppendRequest{ConversationId: "c", Events: []*messages.Event{userEvent("x")}})
	require.ErrorIs(t, err, journal.ErrDeleted)
	evs, err = s.Events(ctx, "c", journal.EventQuery{})
	require.NoError(t, err)
	require.Empty(t, evs)
	_, err = s.ToolCall(ctx, "t1")
	require.ErrorIs(t, err, journal.ErrNotFound)
	md, err := s.Metadata(ctx, "c")
	require.NoError(t, err)
	require.Empty(t, md)
	require.ErrorIs(t, s.DeleteConversation(ctx, "c"), journal.ErrNotFound)

	require.NoError(t, s.Close())
	require.NoError(t, s.Close())
	_, err = s.LastSeq(ctx, "c")
	require.ErrorIs(t, err, journal.ErrClosed)
}

// TestConcurrentResolvers: of 1,000 concurrent resolvers of one call,
// exactly one succeeds; the others get ErrStale; the deadline is gone.
func TestConcurrentResolvers(t *testing.T) {
	s := openMem(t, Options{})
	_, err := s.Append(ctx, &messages.AppendRequest{
		ConversationId: "c", Events: []*messages.Event{userEvent("q")},
		ToolCalls: []*messages.ToolCallRecord{pendingCall("c", "t")},
		Schedule:  []*messages.Deadline{{ConversationId: "c", ToolCallId: "t", At: timestamppb.New(time.Unix(100, 0))}},
	})
	require.NoError(t, err)
	const n = 1000
	var wins, stale atomic.Int32
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			var err error
			if i%2 == 0 {
				_, err = s.ResolveToolCall(ctx, "t", messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED,
					&messages.ToolOutcome{Outcome: &messages.ToolOutcome_Content{Content: fmt.Sprint(i)}}, time.Unix(int64(i), 0))
			} else {
				res := s.AppendBatch(ctx, []*messages.AppendRequest{{ConversationId: "c", Unfenced: true,
					Resolutions: []*messages.ToolResolution{{ToolCallId: "t", Status: messages.ToolCallStatus_TOOL_CALL_STATUS_EXPIRED}}}})
				err = res[0].Err
			}
			switch {
			case err == nil:
				wins.Add(1)
			case errors.Is(err, journal.ErrStale):
				stale.Add(1)
			default:
				t.Errorf("resolver %d: %v", i, err)
			}
		})
	}
	close(start)
	wg.Wait()
	require.EqualValues(t, 1, wins.Load())
	require.EqualValues(t, n-1, stale.Load())
	n2 := 0
	require.NoError(t, s.Deadlines(ctx, time.Time{}, func(*messages.Deadline) error { n2++; return nil }))
	require.Zero(t, n2)
	pend, err := s.PendingToolCalls(ctx, "c")
	require.NoError(t, err)
	require.Empty(t, pend)
}

// TestConcurrentFence: of concurrent appends with the same expected last
// seq, exactly one succeeds; the log has no gaps.
func TestConcurrentFence(t *testing.T) {
	s := openMem(t, Options{})
	const writers, rounds = 16, 20
	start := make(chan struct{})
	var wg sync.WaitGroup
	var wins atomic.Int32
	for w := range writers {
		wg.Go(func() {
			<-start
			for range rounds {
				last, err := s.LastSeq(ctx, "c")
				if err != nil {
					t.Error(err)
					return
				}
				_, err = s.Append(ctx, &messages.AppendRequest{ConversationId: "c", ExpectedLast: last,
					Events: []*messages.Event{userEvent(fmt.Sprint(w)), userEvent(fmt.Sprint(w))}})
				switch {
				case err == nil:
					wins.Add(1)
				case !errors.Is(err, journal.ErrConflict):
					t.Error(err)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	evs, err := s.Events(ctx, "c", journal.EventQuery{})
	require.NoError(t, err)
	require.Len(t, evs, 2*int(wins.Load()))
	for i := 0; i < len(evs); i += 2 {
		require.EqualValues(t, i+1, evs[i].GetSeq())
		// Both events of one append come from the same writer.
		require.Equal(t, evs[i].GetUserMsg().GetContent()[0].GetText(), evs[i+1].GetUserMsg().GetContent()[0].GetText())
	}
}

// TestConcurrentClaims: conversations racing to claim one tool call id:
// exactly one owns it.
func TestConcurrentClaims(t *testing.T) {
	s := openMem(t, Options{})
	const n = 64
	start := make(chan struct{})
	var wg sync.WaitGroup
	var wins atomic.Int32
	for i := range n {
		wg.Go(func() {
			<-start
			conv := fmt.Sprintf("c%d", i)
			var err error
			if i%2 == 0 {
				err = s.UpsertToolCall(ctx, pendingCall(conv, "shared"))
			} else {
				_, err = s.Append(ctx, &messages.AppendRequest{ConversationId: conv, Events: []*messages.Event{userEvent("x")},
					ToolCalls: []*messages.ToolCallRecord{pendingCall(conv, "shared")}})
			}
			switch {
			case err == nil:
				wins.Add(1)
			case !errors.Is(err, journal.ErrConflict):
				t.Error(err)
			}
		})
	}
	close(start)
	wg.Wait()
	require.EqualValues(t, 1, wins.Load())
}

// TestBatchRequestsSeeEachOther: later requests of a batch see the earlier
// ones, and a failing request leaves no trace while the others commit.
func TestBatchRequestsSeeEachOther(t *testing.T) {
	s := openMem(t, Options{})
	res := s.AppendBatch(ctx, []*messages.AppendRequest{
		{ConversationId: "a", Events: []*messages.Event{userEvent("1")}, ToolCalls: []*messages.ToolCallRecord{pendingCall("a", "t")}},
		{ConversationId: "a", ExpectedLast: 1, Events: []*messages.Event{userEvent("2")},
			ToolCalls: []*messages.ToolCallRecord{pendingCall("a", "u")},
			Resolutions: []*messages.ToolResolution{
				{ToolCallId: "t", Status: messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED},
				{ToolCallId: "nope", Status: messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED},
			}},
		{ConversationId: "a", ExpectedLast: 1, Events: []*messages.Event{userEvent("2")},
			Resolutions: []*messages.ToolResolution{{ToolCallId: "t", Status: messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED}}},
		{ConversationId: "b", ToolCalls: []*messages.ToolCallRecord{pendingCall("b", "t")}},
		nil,
	})
	require.NoError(t, res[0].Err)
	require.ErrorIs(t, res[1].Err, journal.ErrStale)
	require.NoError(t, res[2].Err)
	require.EqualValues(t, 2, res[2].FirstSeq)
	require.ErrorIs(t, res[3].Err, journal.ErrConflict)
	require.ErrorIs(t, res[4].Err, journal.ErrInvalid)
	_, err := s.ToolCall(ctx, "u")
	require.ErrorIs(t, err, journal.ErrNotFound)
	rec, err := s.ToolCall(ctx, "t")
	require.NoError(t, err)
	require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED, rec.GetStatus())
	last, err := s.LastSeq(ctx, "a")
	require.NoError(t, err)
	require.EqualValues(t, 2, last)
}

// TestDeadlinesLowWater: resolved deadlines are skipped from the low-water
// mark on, and a deadline scheduled below the mark is still found.
func TestDeadlinesLowWater(t *testing.T) {
	s := openMem(t, Options{})
	base := time.Unix(10_000, 0)
	for i := range 50 {
		id := fmt.Sprintf("t%02d", i)
		require.NoError(t, s.UpsertToolCall(ctx, pendingCall("c", id)))
		require.NoError(t, s.ScheduleDeadline(ctx, &messages.Deadline{ConversationId: "c", ToolCallId: id, At: timestamppb.New(base.Add(time.Duration(i) * time.Second))}))
	}
	list := func(dueBy time.Time) []string {
		var out []string
		require.NoError(t, s.Deadlines(ctx, dueBy, func(d *messages.Deadline) error {
			out = append(out, d.GetToolCallId())
			return nil
		}))
		return out
	}
	require.Len(t, list(time.Time{}), 50)
	require.Len(t, list(base.Add(9*time.Second)), 10)
	for i := range 40 {
		_, err := s.ResolveToolCall(ctx, fmt.Sprintf("t%02d", i), messages.ToolCallStatus_TOOL_CALL_STATUS_EXPIRED, nil, time.Time{})
		require.NoError(t, err)
	}
	require.Empty(t, list(base.Add(39*time.Second)))
	got := list(time.Time{})
	require.Len(t, got, 10)
	require.Equal(t, "t40", got[0])
	low, _, _ := s.dl.startScan()
	require.NotNil(t, low)
	// Earlier than the mark: found, first.
	require.NoError(t, s.ScheduleDeadline(ctx, &messages.Deadline{ConversationId: "d", ToolCallId: "early", At: timestamppb.New(base.Add(-time.Hour))}))
	got = list(time.Time{})
	require.Len(t, got, 11)
	require.Equal(t, "early", got[0])
	// Paging: more deadlines than one page.
	for i := range deadlinePage + 10 {
		require.NoError(t, s.ScheduleDeadline(ctx, &messages.Deadline{ConversationId: "p", ToolCallId: fmt.Sprintf("p%04d", i), At: timestamppb.New(base.Add(time.Hour))}))
	}
	got = list(time.Time{})
	require.Len(t, got, 11+deadlinePage+10)
	require.Equal(t, "p0000", got[11])
	// fn may call the store (the gate is not held while fn runs).
	require.NoError(t, s.Deadlines(ctx, time.Time{}, func(d *messages.Deadline) error {
		_, err := s.LastSeq(ctx, d.GetConversationId())
		return err
	}))
}

// TestCorruptValue: a stored value that does not decode is reported as
// ErrCorrupt naming the key, by every read that meets it.
func TestCorruptValue(t *testing.T) {
	s := openMem(t, Options{})
	appendN(t, s, "c", 0, 3)
	require.NoError(t, s.UpsertToolCall(ctx, pendingCall("c", "t")))
	require.NoError(t, s.db.Set(seqKey(famEvent, "c", 2), []byte{0xFF, 0xFF, 0xFF}, nil))
	require.NoError(t, s.db.Set(idKey(famToolCall, "c", "t"), []byte("\x0a\x01x"), nil)) // id "x" under "t"
	// Written behind the Store's back: forget what its caches know.
	s.calls.drop(s.idStripe("t"), "t")

	_, err := s.Events(ctx, "c", journal.EventQuery{})
	require.ErrorIs(t, err, journal.ErrCorrupt)
	require.Contains(t, err.Error(), keyString(seqKey(famEvent, "c", 2)))
	_, _, err = s.LoadSince(ctx, "c")
	require.ErrorIs(t, err, journal.ErrCorrupt)
	evs, err := s.Events(ctx, "c", journal.EventQuery{After: 2})
	require.NoError(t, err)
	require.Len(t, evs, 1)

	_, err = s.ToolCall(ctx, "t")
	require.ErrorIs(t, err, journal.ErrCorrupt)
	_, err = s.PendingToolCalls(ctx, "c")
	require.ErrorIs(t, err, journal.ErrCorrupt)
	_, err = s.ResolveToolCall(ctx, "t", messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED, nil, time.Time{})
	require.ErrorIs(t, err, journal.ErrCorrupt)

	// A malformed key inside a conversation's range.
	require.NoError(t, s.db.Set(append(convKey(famEvent, "c"), 1, 2, 3), []byte{}, nil))
	_, err = s.LastSeq(ctx, "c")
	require.ErrorIs(t, err, journal.ErrCorrupt)
}

// TestSecondOpenFails: one directory, one open Store.
func TestSecondOpenFails(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	require.NoError(t, err)
	_, err = Open(dir, Options{})
	require.Error(t, err)
	require.ErrorIs(t, err, ErrLocked)
	require.Contains(t, err.Error(), "another Store")
	t.Log(err)
	appendN(t, s, "c", 0, 1)
	require.NoError(t, s.Close())
	s, err = Open(dir, Options{})
	require.NoError(t, err)
	last, err := s.LastSeq(ctx, "c")
	require.NoError(t, err)
	require.EqualValues(t, 1, last)
	require.NoError(t, s.Close())
}

// logRecorder is a slog.Handler that keeps messages at Error level.
type logRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *logRecorder) WithGroup(string) slog.Handler            { return r }
func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	if rec.Level < slog.LevelError {
		return nil
	}
	var b strings.Builder
	b.WriteString(rec.Message)
	rec.Attrs(func(a slog.Attr) bool { fmt.Fprintf(&b, " %s=%v", a.Key, a.Value); return true })
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, b.String())
	return nil
}

func (r *logRecorder) errors() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.msgs...)
}

// TestFatalWALErrorFailsStore: when the WAL cannot be written or synced,
// Pebble calls Logger.Fatalf and its Commit returns nil. The store must not
// acknowledge that write, must refuse every later call with ErrClosed (a
// call whose ctx is done too), must
// log the error, and must still close; what was acknowledged before
// survives a reopen.
func TestFatalWALErrorFailsStore(t *testing.T) {
	mem := vfs.NewMem()
	var on atomic.Bool
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if !on.Load() || !strings.HasSuffix(op.Path, ".log") {
			return nil
		}
		switch op.Kind {
		case errorfs.OpFileWrite, errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
			return errorfs.ErrInjected
		}
		return nil
	})
	rec := &logRecorder{}
	s, err := Open("db", Options{FS: errorfs.Wrap(mem, inj), Logger: slog.New(rec)})
	require.NoError(t, err)
	appendN(t, s, "c", 0, 2)

	on.Store(true)
	_, err = s.Append(ctx, &messages.AppendRequest{ConversationId: "c", ExpectedLast: 2, Events: []*messages.Event{userEvent("lost")}})
	require.ErrorIs(t, err, journal.ErrClosed)
	require.Contains(t, err.Error(), "fatal storage error")
	t.Log(err)

	_, err = s.Append(ctx, &messages.AppendRequest{ConversationId: "c", ExpectedLast: 3, Events: []*messages.Event{userEvent("later")}})
	require.ErrorIs(t, err, journal.ErrClosed)
	_, err = s.ResolveToolCall(ctx, "t", messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED, nil, time.Time{})
	require.ErrorIs(t, err, journal.ErrClosed)
	_, err = s.LastSeq(ctx, "c")
	require.ErrorIs(t, err, journal.ErrClosed)
	done, cancel := context.WithCancel(ctx)
	cancel()
	_, err = s.LastSeq(done, "c")
	require.ErrorIs(t, err, journal.ErrClosed, "a failed store says so before a done ctx")
	require.NotErrorIs(t, err, context.Canceled)
	require.NotEmpty(t, rec.errors())
	require.Contains(t, strings.Join(rec.errors(), "\n"), "fatal")

	on.Store(false)
	_ = s.Close() // may report the WAL error; must not panic or hang
	require.NoError(t, s.Close())

	s, err = Open("db", Options{FS: mem})
	require.NoError(t, err)
	defer s.Close()
	evs, err := s.Events(ctx, "c", journal.EventQuery{})
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(evs), 2)
	require.Equal(t, "c #1", evs[0].GetUserMsg().GetContent()[0].GetText())
}

// TestCrashKeepsAcknowledged: every append that returned nil survives a
// crash, whatever part of the unsynced data survives with it.
func TestCrashKeepsAcknowledged(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	fs := vfs.NewCrashableMem()
	s, err := Open("db", Options{FS: fs})
	require.NoError(t, err)
	acked := map[string]uint64{}
	for round := range 5 {
		var wg sync.WaitGroup
		var mu sync.Mutex
		for c := range 8 {
			conv := fmt.Sprintf("c%d", c)
			mu.Lock()
			last := acked[conv]
			mu.Unlock()
			wg.Go(func() {
				for i := range 10 {
					_, err := s.Append(ctx, &messages.AppendRequest{ConversationId: conv, ExpectedLast: last,
						Events: []*messages.Event{userEvent(fmt.Sprint(i)), userEvent(fmt.Sprint(i))}})
					if err != nil {
						t.Error(err)
						return
					}
					last += 2
				}
				mu.Lock()
				acked[conv] = last
				mu.Unlock()
			})
		}
		wg.Wait()
		clone := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: rng.IntN(101), RNG: rng})
		require.NoError(t, s.Close()) // the old store, on the old filesystem
		fs = clone
		s, err = Open("db", Options{FS: fs})
		require.NoError(t, err, "round %d", round)
		for conv, want := range acked {
			evs, err := s.Events(ctx, conv, journal.EventQuery{})
			require.NoError(t, err)
			require.Len(t, evs, int(want), conv)
		}
	}
	require.NoError(t, s.Close())
}

// TestCloseWhileBusy: Close waits for calls in progress; calls that start
// after it fail with ErrClosed; nothing panics.
func TestCloseWhileBusy(t *testing.T) {
	s, err := Open("db", Options{FS: vfs.NewMem()})
	require.NoError(t, err)
	start := make(chan struct{})
	var wg sync.WaitGroup
	var closedSeen atomic.Int32
	var running sync.WaitGroup // each writer has committed once
	running.Add(8)
	for g := range 8 {
		wg.Go(func() {
			<-start
			conv := fmt.Sprint("c", g)
			last := uint64(0)
			for {
				res, err := s.Append(ctx, &messages.AppendRequest{ConversationId: conv, ExpectedLast: last, Events: []*messages.Event{userEvent("x")}})
				if err == nil {
					if last == 0 {
						running.Done()
					}
					last = res.LastSeq
					_, err = s.Events(ctx, conv, journal.EventQuery{Limit: 5})
				}
				if err != nil {
					if !errors.Is(err, journal.ErrClosed) {
						t.Errorf("%s: %v", conv, err)
					}
					closedSeen.Add(1)
					return
				}
			}
		})
	}
	close(start)
	running.Wait()
	require.NoError(t, s.Close())
	wg.Wait()
	require.EqualValues(t, 8, closedSeen.Load())
	require.NoError(t, s.Close())
}

func TestOptionsValidated(t *testing.T) {
	_, err := Open("db", Options{FS: vfs.NewMem(), CacheSize: -1})
	require.ErrorIs(t, err, journal.ErrInvalid)
	o, err := Options{}.withDefaults()
	require.NoError(t, err)
	require.EqualValues(t, DefaultCacheSize, o.CacheSize)
	require.EqualValues(t, DefaultMemTableSize, o.MemTableSize)
	require.Positive(t, o.MaxConcurrentCompactions)
	require.LessOrEqual(t, o.MaxConcurrentCompactions, DefaultMaxConcurrentCompactions)
	require.NotNil(t, o.Logger)
}

// TestLayoutVersionChecked: a store written with another key layout is
// refused on Open.
func TestLayoutVersionChecked(t *testing.T) {
	fs := vfs.NewMem()
	s, err := Open("db", Options{FS: fs})
	require.NoError(t, err)
	require.NoError(t, s.putRawForTesting(layoutKey, []byte("lazarus.pebblejournal.v0")))
	require.NoError(t, s.Close())
	_, err = Open("db", Options{FS: fs})
	require.ErrorIs(t, err, journal.ErrCorrupt)
	require.Contains(t, err.Error(), "layout")
}

// TestLayoutV1Upgraded: a v1 store (owner index in family 0x20) opens: its
// owner keys move to 0x22, in several batches when there are many, the
// store is then marked v2, and its calls read as before.
func TestLayoutV1Upgraded(t *testing.T) {
	fs := vfs.NewMem()
	s, err := Open("db", Options{FS: fs})
	require.NoError(t, err)
	_, err = s.Append(ctx, &messages.AppendRequest{ConversationId: "c", Events: []*messages.Event{userEvent("x")},
		ToolCalls: []*messages.ToolCallRecord{pendingCall("c", "t1")}})
	require.NoError(t, err)
	// Make it a v1 store: its owner key, and many more, in the old family.
	v1Owner := func(call string) []byte { return append([]byte{famCallOwnerV1}, ownerKey(call)[1:]...) }
	require.NoError(t, s.deleteRawForTesting(ownerKey("t1")))
	require.NoError(t, s.putRawForTesting(v1Owner("t1"), []byte("c")))
	b := s.db.NewBatch()
	extra := upgradeChunk + 10
	for i := range extra {
		require.NoError(t, b.Set(v1Owner(fmt.Sprintf("old-%05d", i)), []byte("gone"), nil))
	}
	require.NoError(t, s.commit(b))
	require.NoError(t, b.Close())
	require.NoError(t, s.putRawForTesting(layoutKey, []byte(layoutV1)))
	require.NoError(t, s.Close())

	s, err = Open("db", Options{FS: fs})
	require.NoError(t, err)
	defer s.Close()
	found, err := s.get(layoutKey, func(v []byte) error {
		require.Equal(t, layoutVersion, string(v))
		return nil
	})
	require.NoError(t, err)
	require.True(t, found)
	row, err := s.ToolCall(ctx, "t1")
	require.NoError(t, err, "the call is found through the moved owner key")
	require.Equal(t, "c", row.GetConversationId())
	old, moved := 0, 0
	require.NoError(t, s.scan([]byte{famCallOwnerV1}, familyEnd(famCallOwnerV1), func(k, v []byte) error { old++; return nil }))
	require.NoError(t, s.scan([]byte{famCallOwner}, familyEnd(famCallOwner), func(k, v []byte) error { moved++; return nil }))
	require.Zero(t, old)
	require.Equal(t, extra+1, moved)
}

// TestLayoutV2Upgraded: a v2 store (no active index) opens: the index is
// built from the rows, once, stale keys that a v2 build could have left in
// its family are dropped, the store is marked v3, and the index then
// follows the rows.
func TestLayoutV2Upgraded(t *testing.T) {
	fs := vfs.NewMem()
	s, err := Open("db", Options{FS: fs})
	require.NoError(t, err)
	setStatus := func(s *Store, conv string, st messages.ConversationStatus) {
		t.Helper()
		last, err := s.LastSeq(ctx, conv)
		require.NoError(t, err)
		_, err = s.Append(ctx, &messages.AppendRequest{ConversationId: conv, ExpectedLast: last, Status: st})
		require.NoError(t, err)
	}
	var want []string
	for i := range 50 {
		conv := fmt.Sprintf("c%02d", i)
		appendN(t, s, conv, 0, 1)
		if i%7 == 0 {
			want = append(want, conv)
			continue
		}
		setStatus(s, conv, messages.ConversationStatus(2+i%3))
	}
	// Make it a v2 store: no index, except a stale key of an idle row.
	require.NoError(t, s.db.DeleteRange([]byte{famActive}, familyEnd(famActive), nil))
	require.NoError(t, s.putRawForTesting(convKey(famActive, "c01"), nil))
	require.NoError(t, s.putRawForTesting(layoutKey, []byte(layoutV2)))
	require.NoError(t, s.Close())

	s, err = Open("db", Options{FS: fs})
	require.NoError(t, err)
	defer s.Close()
	found, err := s.get(layoutKey, func(v []byte) error {
		require.Equal(t, layoutVersion, string(v))
		return nil
	})
	require.NoError(t, err)
	require.True(t, found)
	ids, next, err := s.ListActiveConversations(ctx, "", 1000)
	require.NoError(t, err)
	require.Empty(t, next)
	require.Equal(t, want, ids)
	rep, err := s.Check(ctx)
	require.NoError(t, err)
	require.True(t, rep.Sound(), "%v", rep.Problems)

	setStatus(s, "c00", messages.ConversationStatus_CONVERSATION_STATUS_IDLE)
	setStatus(s, "c01", messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE)
	ids, _, err = s.ListActiveConversations(ctx, "", 1000)
	require.NoError(t, err)
	require.Equal(t, append([]string{"c01"}, want[1:]...), ids)
}

// TestStatusWriteTouchesIndexOnlyOnChange: a row write that keeps the
// status on the same side of ACTIVE writes no key of the active index (no
// tombstones pile up in the family that resume walks), one that crosses
// it writes one.
func TestStatusWriteTouchesIndexOnlyOnChange(t *testing.T) {
	s := openMem(t, Options{})
	appendN(t, s, "c", 0, 1) // created ACTIVE: one Set
	indexWrites := func(st messages.ConversationStatus) int {
		t.Helper()
		tx := s.newTxn()
		defer tx.close()
		last, err := s.LastSeq(ctx, "c")
		require.NoError(t, err)
		defer s.lockConv("c")()
		_, err = tx.apply(&messages.AppendRequest{ConversationId: "c", ExpectedLast: last, Status: st})
		require.NoError(t, err)
		_, err = tx.flush()
		require.NoError(t, err)
		n := 0
		r := tx.b.Reader()
		for {
			_, k, _, ok, err := r.Next()
			require.NoError(t, err)
			if !ok {
				break
			}
			if len(k) > 0 && k[0] == famActive {
				n++
			}
		}
		require.NoError(t, tx.commit())
		return n
	}
	require.Equal(t, 0, indexWrites(messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE), "ACTIVE to ACTIVE")
	require.Equal(t, 1, indexWrites(messages.ConversationStatus_CONVERSATION_STATUS_IDLE), "ACTIVE to IDLE")
	require.Equal(t, 0, indexWrites(messages.ConversationStatus_CONVERSATION_STATUS_SUSPENDED), "IDLE to SUSPENDED")
	require.Equal(t, 1, indexWrites(messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE), "SUSPENDED to ACTIVE")
	ids, _, err := s.ListActiveConversations(ctx, "", 0)
	require.NoError(t, err)
	require.Equal(t, []string{"c"}, ids)
}

// TestFatalWALErrorUnderLoad: concurrent writers in flight when the WAL
// fails all return (none hangs, none is acknowledged after the failure), and
// Close returns.
func TestFatalWALErrorUnderLoad(t *testing.T) {
	var on atomic.Bool
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if on.Load() && strings.HasSuffix(op.Path, ".log") &&
			(op.Kind == errorfs.OpFileWrite || op.Kind == errorfs.OpFileSync || op.Kind == errorfs.OpFileSyncData) {
			return errorfs.ErrInjected
		}
		return nil
	})
	s, err := Open("db", Options{FS: errorfs.Wrap(vfs.NewMem(), inj)})
	require.NoError(t, err)
	var wg sync.WaitGroup
	var running sync.WaitGroup
	running.Add(16)
	var ackedAfter atomic.Int32
	for g := range 16 {
		wg.Go(func() {
			conv := fmt.Sprint("c", g)
			last := uint64(0)
			for {
				failing := on.Load()
				res, err := s.Append(ctx, &messages.AppendRequest{ConversationId: conv, ExpectedLast: last, Events: []*messages.Event{userEvent("x")}})
				if err != nil {
					if !errors.Is(err, journal.ErrClosed) {
						t.Errorf("%s: %v", conv, err)
					}
					return
				}
				if failing {
					ackedAfter.Add(1)
				}
				if last == 0 {
					running.Done()
				}
				last = res.LastSeq
			}
		})
	}
	running.Wait()
	on.Store(true)
	wg.Wait()
	require.Zero(t, ackedAfter.Load(), "appends acknowledged after the WAL failed")
	_ = s.Close()
}

// TestCachesFollowWrites: the row and pending-call caches hold what was
// last written, a caller changing its request afterwards changes nothing,
// and a resolved call leaves the cache (a second resolve reads Pebble and
// is stale).
func TestCachesFollowWrites(t *testing.T) {
	s := openMem(t, Options{})
	row := pendingCall("c", "t1")
	row.Args = `{"a":1}`
	res, err := s.Append(ctx, &messages.AppendRequest{ConversationId: "c", Events: []*messages.Event{userEvent("x")},
		ToolCalls: []*messages.ToolCallRecord{row}, FsmState: &messages.FSMState{LastSeq: 1}})
	require.NoError(t, err)
	row.Args = `{"changed":"by the caller"}` // after the call: must not reach the cache
	p, ok := s.calls.get(s.idStripe("t1"), "t1")
	require.True(t, ok, "a written pending call is cached")
	require.Equal(t, `{"a":1}`, p.rec.GetArgs())
	h, ok := s.heads.get(s.convStripe("c"), "c")
	require.True(t, ok)
	require.EqualValues(t, 1, h.row.GetFsmState().GetLastSeq(), "the row is cached with the head")
	// ToolCall serves the pending call from the cache, with a copy of its own.
	got, err := s.ToolCall(ctx, "t1")
	require.NoError(t, err)
	require.True(t, proto.Equal(p.rec, got))
	got.Args = `{"changed":"by the reader"}`
	again, err := s.ToolCall(ctx, "t1")
	require.NoError(t, err)
	require.Equal(t, `{"a":1}`, again.GetArgs(), "a reader's copy is its own")

	res, err = s.Append(ctx, &messages.AppendRequest{ConversationId: "c", ExpectedLast: res.LastSeq,
		Resolutions: []*messages.ToolResolution{{ToolCallId: "t1", Status: messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED,
			Result: &messages.ToolOutcome{Outcome: &messages.ToolOutcome_Content{Content: `{"ok":true}`}}}}})
	require.NoError(t, err)
	_, ok = s.calls.get(s.idStripe("t1"), "t1")
	require.False(t, ok, "a resolved call leaves the cache")
	got, err = s.ToolCall(ctx, "t1")
	require.NoError(t, err)
	require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED, got.GetStatus())
	require.Equal(t, `{"a":1}`, got.GetArgs())
	_, err = s.ResolveToolCall(ctx, "t1", messages.ToolCallStatus_TOOL_CALL_STATUS_EXPIRED, nil, time.Time{})
	require.ErrorIs(t, err, journal.ErrStale)

	// A rejected append changes nothing, in Pebble or in the caches.
	_, err = s.Append(ctx, &messages.AppendRequest{ConversationId: "c", ExpectedLast: 0, Events: []*messages.Event{userEvent("late")}})
	require.ErrorIs(t, err, journal.ErrConflict)
	last, err := s.LastSeq(ctx, "c")
	require.NoError(t, err)
	require.Equal(t, res.LastSeq, last)
}

// TestConcurrentBatches: AppendBatch calls run concurrently, writing the
// same conversations with fences; every append lands once, gap-free, and
// the head cache agrees with Pebble at the end.
func TestConcurrentBatches(t *testing.T) {
	s := openMem(t, Options{})
	const convs, writers, rounds = 8, 4, 50
	var mu sync.Mutex
	last := map[string]uint64{}
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for r := range rounds {
				mu.Lock()
				reqs := make([]*messages.AppendRequest, convs)
				for c := range convs {
					conv := fmt.Sprint("c", c)
					reqs[c] = &messages.AppendRequest{ConversationId: conv, ExpectedLast: last[conv],
						Events: []*messages.Event{userEvent(fmt.Sprintf("w%d r%d", w, r))}}
				}
				mu.Unlock()
				for i, res := range s.AppendBatch(ctx, reqs) {
					if res.Err != nil {
						if !errors.Is(res.Err, journal.ErrConflict) {
							t.Errorf("append to %s: %v", reqs[i].GetConversationId(), res.Err)
						}
						continue
					}
					mu.Lock()
					conv := reqs[i].GetConversationId()
					last[conv] = max(last[conv], res.LastSeq)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	for c := range convs {
		conv := fmt.Sprint("c", c)
		evs, err := s.Events(ctx, conv, journal.EventQuery{})
		require.NoError(t, err)
		require.Len(t, evs, int(last[conv]))
		for i, ev := range evs {
			require.EqualValues(t, i+1, ev.GetSeq())
		}
		h, ok := s.heads.get(s.convStripe(conv), conv)
		require.True(t, ok)
		require.Equal(t, last[conv], h.lastSeq)
	}
}

// serverTurn appends, to a new conversation, a server call and then its
// result, with the resolution sharing the event's outcome as the runtime
// sends it; it returns the outcome.
func serverTurn(t *testing.T, s *Store, conv, call string) *messages.ToolOutcome {
	t.Helper()
	out := &messages.ToolOutcome{Outcome: &messages.ToolOutcome_Content{Content: `{"hits":[1,2,3]}`}}
	_, err := s.Append(ctx, &messages.AppendRequest{
		ConversationId: conv,
		Events: []*messages.Event{{Body: &messages.Event_ToolCall{ToolCall: &messages.ToolCallEvent{
			Call: &messages.ToolCall{Id: call, Name: "search", Arguments: "{}"}, Executor: messages.Executor_EXECUTOR_SERVER}}}},
		ToolCalls: []*messages.ToolCallRecord{{Id: call, ConversationId: conv, Name: "search", Executor: messages.Executor_EXECUTOR_SERVER}},
	})
	require.NoError(t, err)
	_, err = s.Append(ctx, &messages.AppendRequest{
		ConversationId: conv, ExpectedLast: 1,
		Events:      []*messages.Event{{Body: &messages.Event_ToolResult{ToolResult: &messages.ToolResultEvent{ToolCallId: call, Name: "search", Outcome: out}}}},
		Resolutions: []*messages.ToolResolution{{ToolCallId: call, Status: messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED, Result: out}},
	})
	require.NoError(t, err)
	return out
}

// rawToolCall decodes a tool call row as stored, without filling its result.
func rawToolCall(t *testing.T, s *Store, conv, call string) *messages.ToolCallRecord {
	t.Helper()
	k := idKey(famToolCall, conv, call)
	var rec *messages.ToolCallRecord
	found, err := s.get(k, func(v []byte) (err error) {
		rec, err = decodeToolCall(k, v, conv, call)
		return err
	})
	require.NoError(t, err)
	require.True(t, found)
	return rec
}

// TestResultStoredOnce: a result appended with its tool_result event is
// stored once, in the event; the row keeps the event's seq and reads back
// whole.
func TestResultStoredOnce(t *testing.T) {
	s := openMem(t, Options{})
	out := serverTurn(t, s, "c", "call-1")
	raw := rawToolCall(t, s, "c", "call-1")
	require.Nil(t, raw.GetResult(), "the row does not hold a second copy")
	require.EqualValues(t, 2, raw.GetResultSeq())
	row, err := s.ToolCall(ctx, "call-1")
	require.NoError(t, err)
	require.True(t, proto.Equal(out, row.GetResult()), "got %v", row.GetResult())
	require.Zero(t, row.GetResultSeq())
	require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED, row.GetStatus())
}

// TestResultEventCorrupt: a row whose result_seq names a missing event, or
// an event that is not its tool_result, reads as ErrCorrupt naming the row.
func TestResultEventCorrupt(t *testing.T) {
	s := openMem(t, Options{})
	serverTurn(t, s, "c", "call-1")
	require.NoError(t, s.deleteRawForTesting(seqKey(famEvent, "c", 2)))
	_, err := s.ToolCall(ctx, "call-1")
	require.ErrorIs(t, err, journal.ErrCorrupt)
	require.Contains(t, err.Error(), "missing")

	serverTurn(t, s, "d", "call-2")
	other := &messages.Event{Seq: 2, Body: &messages.Event_UserMsg{UserMsg: &messages.UserMessage{}}}
	v, err := proto.Marshal(other)
	require.NoError(t, err)
	require.NoError(t, s.putRawForTesting(seqKey(famEvent, "d", 2), v))
	_, err = s.ToolCall(ctx, "call-2")
	require.ErrorIs(t, err, journal.ErrCorrupt)
	require.Contains(t, err.Error(), "not its tool_result")
}

// TestDeadlineCacheFollowsWrites: once a conversation's deadlines are
// known to the head cache, every kind of deadline write keeps that
// knowledge equal to what Pebble holds.
func TestDeadlineCacheFollowsWrites(t *testing.T) {
	s := openMem(t, Options{})
	at := func(sec int64) *timestamppb.Timestamp { return &timestamppb.Timestamp{Seconds: 1_000_000 + sec} }
	stored := func() map[string]int64 {
		out := map[string]int64{}
		require.NoError(t, s.Deadlines(ctx, time.Time{}, func(d *messages.Deadline) error {
			out[d.GetToolCallId()] = d.GetAt().GetSeconds()
			return nil
		}))
		return out
	}
	cached := func() map[string]int64 {
		h, ok := s.heads.get(s.convStripe("c"), "c")
		require.True(t, ok, "the conversation has a head")
		require.NotNil(t, h.dls, "its deadlines are known")
		out := map[string]int64{}
		for id, ts := range h.dls {
			out[id] = ts.GetSeconds()
		}
		return out
	}
	// A deadline scheduled before the conversation is written to.
	require.NoError(t, s.ScheduleDeadline(ctx, &messages.Deadline{ConversationId: "c", ToolCallId: "early", At: at(1)}))
	res, err := s.Append(ctx, &messages.AppendRequest{ConversationId: "c", Events: []*messages.Event{userEvent("x")},
		ToolCalls: []*messages.ToolCallRecord{pendingCall("c", "t1"), pendingCall("c", "t2")},
		Schedule:  []*messages.Deadline{{ConversationId: "c", ToolCallId: "t1", At: at(5)}, {ConversationId: "c", ToolCallId: "t2", At: at(6)}}})
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"early": 1_000_001, "t1": 1_000_005, "t2": 1_000_006}, stored())
	require.Equal(t, stored(), cached())

	require.NoError(t, s.ScheduleDeadline(ctx, &messages.Deadline{ConversationId: "c", ToolCallId: "t2", At: at(9)}))
	require.Equal(t, stored(), cached(), "a reschedule")
	require.NoError(t, s.CancelDeadline(ctx, "c", "early"))
	require.Equal(t, stored(), cached(), "a cancel")
	_, err = s.ResolveToolCall(ctx, "t1", messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED, nil, time.Time{})
	require.NoError(t, err)
	require.Equal(t, stored(), cached(), "a resolve on its own")
	_, err = s.Append(ctx, &messages.AppendRequest{ConversationId: "c", ExpectedLast: res.LastSeq,
		Resolutions: []*messages.ToolResolution{{ToolCallId: "t2", Status: messages.ToolCallStatus_TOOL_CALL_STATUS_ERRORED}}})
	require.NoError(t, err)
	require.Empty(t, stored())
	require.Equal(t, stored(), cached(), "a resolve in an append")

	// A failed write leaves no stale knowledge behind.
	_, err = s.Append(ctx, &messages.AppendRequest{ConversationId: "c", ExpectedLast: 0,
		Schedule: []*messages.Deadline{{ConversationId: "c", ToolCallId: "t3", At: at(7)}}, Events: []*messages.Event{userEvent("late")}})
	require.ErrorIs(t, err, journal.ErrConflict)
	require.Empty(t, stored())
	if h, ok := s.heads.get(s.convStripe("c"), "c"); ok && h.dls != nil {
		require.Empty(t, h.dls)
	}
}

// TestBatchesReused: a committed batch, and one that had nothing to commit,
// goes back to the store's free list and serves the next write.
func TestBatchesReused(t *testing.T) {
	s := openMem(t, Options{})
	last := appendN(t, s, "c", 0, 1)
	require.Len(t, s.batches, 1)
	b := <-s.batches
	s.batches <- b
	appendN(t, s, "c", last, 1)
	require.Len(t, s.batches, 1)
	require.Same(t, b, <-s.batches, "the next write took the same batch")
	s.batches <- b
	_, err := s.Append(ctx, &messages.AppendRequest{ConversationId: "c", ExpectedLast: 0, Events: []*messages.Event{userEvent("late")}})
	require.ErrorIs(t, err, journal.ErrConflict)
	require.Len(t, s.batches, 1, "a write that committed nothing gives its batch back too")
	require.True(t, (<-s.batches).Empty(), "reset")
}

// TestCopyRowCopiesEveryField: copyRow keeps every field of Conversation
// (a new field must be added to it), and its settings map is its own.
func TestCopyRowCopiesEveryField(t *testing.T) {
	row := &messages.Conversation{
		Id: "c", Settings: map[string]string{"k": "v"}, Status: messages.ConversationStatus_CONVERSATION_STATUS_SUSPENDED,
		FsmState: &messages.FSMState{LastSeq: 3}, Created: timestamppb.New(time.Unix(1, 0)), Updated: timestamppb.New(time.Unix(2, 0)),
		ForkedFrom: &messages.ForkOrigin{ConversationId: "src", Seq: 7},
	}
	fields := row.ProtoReflect().Descriptor().Fields()
	for i := range fields.Len() {
		require.True(t, row.ProtoReflect().Has(fields.Get(i)), "the fixture sets %s", fields.Get(i).Name())
	}
	cp := copyRow(row)
	require.True(t, proto.Equal(row, cp), "copyRow keeps every field: %v", cp)
	cp.Settings["k"] = "changed"
	require.Equal(t, "v", row.GetSettings()["k"], "the settings map is copied")
}

// TestLevelOptions: L0 is written uncompressed, every level below with
// zstd in LowerLevelBlockSize blocks, and every level has the bloom
// filter, once Pebble fills in the levels SetLevelOptions leaves unset.
func TestLevelOptions(t *testing.T) {
	o := &pebble.Options{}
	SetLevelOptions(o)
	o.EnsureDefaults()
	require.Equal(t, sstable.NoCompression, o.Levels[0].Compression())
	for l := 1; l < len(o.Levels); l++ {
		require.Equal(t, sstable.BalancedCompression, o.Levels[l].Compression(), "level %d", l)
		require.Equal(t, LowerLevelBlockSize, o.Levels[l].BlockSize, "level %d", l)
	}
	for l := range o.Levels {
		require.NotNil(t, o.Levels[l].FilterPolicy, "level %d", l)
	}
}

// TestBatchFindsItsConversationsPastTheScan: a batch of more conversations
// than a txn scans (convScan) still finds each one it met, earlier
// requests included, with its state as the batch left it; and the next
// write, on a txn from the pool, starts from the committed state only.
func TestBatchFindsItsConversationsPastTheScan(t *testing.T) {
	s := openMem(t, Options{})
	n := convScan + 3
	reqs := make([]*messages.AppendRequest, 0, n+3)
	for i := range n {
		reqs = append(reqs, &messages.AppendRequest{ConversationId: fmt.Sprint("c", i), Events: []*messages.Event{userEvent("1")}})
	}
	reqs = append(reqs,
		&messages.AppendRequest{ConversationId: "c0", ExpectedLast: 1, Events: []*messages.Event{userEvent("2")}},
		&messages.AppendRequest{ConversationId: "c0", ExpectedLast: 1, Events: []*messages.Event{userEvent("2 again")}}, // fenced off
		&messages.AppendRequest{ConversationId: fmt.Sprint("c", n-1), ExpectedLast: 1, Events: []*messages.Event{userEvent("2"), userEvent("3")}},
	)
	res := s.AppendBatch(ctx, reqs)
	for i := range n {
		require.NoError(t, res[i].Err, "request %d", i)
	}
	require.NoError(t, res[n].Err)
	require.Equal(t, journal.AppendResult{FirstSeq: 2, LastSeq: 2}, res[n])
	require.ErrorIs(t, res[n+1].Err, journal.ErrConflict, "the batch's own append to c0 moved its head")
	require.NoError(t, res[n+2].Err)
	require.Equal(t, journal.AppendResult{FirstSeq: 2, LastSeq: 3}, res[n+2])

	// The next writes see what committed, nothing of the last txn's state.
	_, err := s.Append(ctx, &messages.AppendRequest{ConversationId: "c1", ExpectedLast: 2, Events: []*messages.Event{userEvent("2")}})
	require.ErrorIs(t, err, journal.ErrConflict)
	got, err := s.Append(ctx, &messages.AppendRequest{ConversationId: "c0", ExpectedLast: 2, Events: []*messages.Event{userEvent("3")}})
	require.NoError(t, err)
	require.Equal(t, journal.AppendResult{FirstSeq: 3, LastSeq: 3}, got)
	for i, want := range map[int]uint64{0: 3, 1: 1, n - 1: 3} {
		last, err := s.LastSeq(ctx, fmt.Sprint("c", i))
		require.NoError(t, err)
		require.Equal(t, want, last, "c%d", i)
	}
}

// TestCopyCallCopiesEveryField: copyCall keeps every field of
// ToolCallRecord (a new field must be added to it).
func TestCopyCallCopiesEveryField(t *testing.T) {
	at := timestamppb.New(time.Unix(1, 0))
	rec := &messages.ToolCallRecord{
		Id: "tc", ConversationId: "c", Name: "search", Executor: messages.Executor_EXECUTOR_HUMAN,
		Status: messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED, Args: "{}",
		Result:  &messages.ToolOutcome{Outcome: &messages.ToolOutcome_Content{Content: "ok"}},
		Created: at, Resolved: at, Deadline: at, Prompt: "approve?", ResultSeq: 4,
		Requester: &messages.Identity{UserId: "alice"}, Resolver: &messages.Identity{UserId: "bob"},
	}
	fields := rec.ProtoReflect().Descriptor().Fields()
	for i := range fields.Len() {
		require.True(t, rec.ProtoReflect().Has(fields.Get(i)), "the fixture sets %s", fields.Get(i).Name())
	}
	cp := copyCall(rec)
	require.True(t, proto.Equal(rec, cp), "copyCall keeps every field: %v", cp)
	require.NotSame(t, rec, cp)
}

// TestAuditOffHidesEarlierRows: rows written while audit was on are neither
// listed nor collected by a store opened with audit off (Options.Audit), and
// are there again once audit is back on.
func TestAuditOffHidesEarlierRows(t *testing.T) {
	fs := vfs.NewMem()
	ctx := t.Context()
	on, err := Open("db", Options{FS: fs, Audit: true})
	require.NoError(t, err)
	appendN(t, on, "c", 0, 1)
	require.NoError(t, on.PutModelCall(ctx, &messages.ModelCall{ConversationId: "c", TurnRef: 1, Created: timestamppb.New(time.Unix(0, 0))}))
	require.NoError(t, on.Close())

	off := openMem(t, Options{FS: fs})
	calls, err := off.ModelCalls(ctx, "c")
	require.NoError(t, err)
	require.Empty(t, calls, "ModelCalls returns nothing with audit off")
	n, err := off.GCModelCalls(ctx, "c", time.Unix(1000, 0))
	require.NoError(t, err)
	require.Zero(t, n, "GCModelCalls removes nothing with audit off")
	require.NoError(t, off.Close())

	again := openMem(t, Options{FS: fs, Audit: true})
	calls, err = again.ModelCalls(ctx, "c")
	require.NoError(t, err)
	require.Len(t, calls, 1, "the row is still there")
}

// TestDeleteWithAuditOffRemovesAuditRows: DeleteConversation removes every
// record of the conversation, the audit rows a store with audit on wrote
// included, even when the store that deletes has audit off: they do not
// come back once audit is on again.
func TestDeleteWithAuditOffRemovesAuditRows(t *testing.T) {
	fs := vfs.NewMem()
	ctx := t.Context()
	on, err := Open("db", Options{FS: fs, Audit: true})
	require.NoError(t, err)
	appendN(t, on, "c", 0, 1)
	require.NoError(t, on.PutModelCall(ctx, &messages.ModelCall{ConversationId: "c", TurnRef: 1, Created: timestamppb.New(time.Unix(0, 0))}))
	require.NoError(t, on.Close())

	off := openMem(t, Options{FS: fs})
	require.NoError(t, off.DeleteConversation(ctx, "c"))
	require.NoError(t, off.Close())

	again := openMem(t, Options{FS: fs, Audit: true})
	calls, err := again.ModelCalls(ctx, "c")
	require.NoError(t, err)
	require.Empty(t, calls, "the deleted conversation's audit rows went with it")
}
