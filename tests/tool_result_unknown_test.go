package tests

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// faultStore reports the first writes (fail of them; -1: every one) that
// carry an event match selects as failed with err, having committed them
// (landed) or not: with errLostCommit, a COMMIT whose reply was lost,
// either way; with errFenced (not landed), a row another writer keeps
// winning, or one damaged so that the fence never holds.
type faultStore struct {
	journal.Store
	err    error
	landed bool
	match  func(*messages.Event) bool
	fail   int32
	lost   atomic.Int32 // writes reported failed so far
}

var (
	errLostCommit = fmt.Errorf("test: connection lost during COMMIT: %w", journal.ErrUnknownOutcome)
	errFenced     = fmt.Errorf("test: expected last seq moved: %w", journal.ErrConflict)
)

func (s *faultStore) AppendBatch(ctx context.Context, reqs []*messages.AppendRequest) []journal.AppendResult {
	target := -1
	for i, req := range reqs {
		for _, ev := range req.GetEvents() {
			if target < 0 && s.match(ev) && (s.fail < 0 || s.lost.Load() < s.fail) {
				target = i
			}
		}
	}
	if target < 0 {
		return s.Store.AppendBatch(ctx, reqs)
	}
	s.lost.Add(1)
	var out []journal.AppendResult
	if s.landed {
		out = s.Store.AppendBatch(ctx, reqs)
	} else {
		// The others of the batch commit; the target does not.
		rest := append(append([]*messages.AppendRequest{}, reqs[:target]...), reqs[target+1:]...)
		got := s.Store.AppendBatch(ctx, rest)
		out = append(append(append([]journal.AppendResult{}, got[:target]...), journal.AppendResult{}), got[target:]...)
	}
	out[target] = journal.AppendResult{Err: s.err}
	return out
}

func isToolResult(ev *messages.Event) bool { return ev.GetToolResult() != nil }

func isAnswer(ev *messages.Event) bool { return ev.GetAssistantMsg() != nil }

// TestServerResultOfUnknownOutcome: the write recording a server tool's
// result ends with journal.ErrUnknownOutcome; the activation stops, and
// the runtime wakes the conversation again at once (no command, no
// resume scan), the new activation reading from the log whether it
// landed. Landed: the tool is not run again, and the log holds its
// result once. Not landed: the call is run again once, under the same id,
// and its result is recorded once. Either way the model is not asked
// again for the decision that made the call, and the turn then runs.
func TestServerResultOfUnknownOutcome(t *testing.T) {
	for _, landed := range []bool{true, false} {
		t.Run(fmt.Sprintf("landed=%v", landed), func(t *testing.T) {
			forEachStore(t, func(t *testing.T, kind string) {
				store := &faultStore{Store: openStore(t, kind), err: errLostCommit, landed: landed, match: isToolResult, fail: 1}
				// NoResume: Open's resume scan, which runs in the background
				// (slowest on postgres), could otherwise wake the conversation
				// (it is ACTIVE) and run the turn in the re-wake's stead.
				h := newHarness(t, store, func(o *lazarus.Options) { o.NoResume = true })
				ctx := ctxT(t)
				h.model.Push("c", scripted.Reply("charging", scripted.Call("charge", `{"amount":5}`)), scripted.Text("charged"))
				_, err := h.rt.Send(ctx, "c", "charge me", user)
				require.NoError(t, err)
				var id string
				select {
				case id = <-h.chargeStarted:
				case <-ctx.Done():
					t.Fatal("the charge never started")
				}

				h.awaitEvent("c", 0, isAssistantText("charged"))
				require.Equal(t, int32(1), store.lost.Load(), "the result's write was reported unknown")
				want := []string{id}
				if !landed {
					want = []string{id, id}
				}
				require.Equal(t, want, h.runs.of("charge"), "run again only if its result was not durable, and under the same id")
				require.Equal(t, 2, h.model.Calls("c"), "the model was not asked again for the call")
				evs := h.history("c")
				require.Equal(t, []string{"user_msg", "assistant_msg", "tool_call:charge", "tool_result:charge", "assistant_msg"}, types(evs))
				// One more turn: the model answers one conversation at a
				// time, in order, so a late extra call or run would come
				// before this turn's call; once it has ended, the counts are
				// final.
				h.model.Push("c", scripted.Text("later"))
				_, err = h.rt.SendAndWait(ctx, "c", "and now?", user)
				require.NoError(t, err)
				require.Equal(t, 3, h.model.Calls("c"), "no extra model call after the turn")
				require.Equal(t, want, h.runs.of("charge"), "no extra run after the turn")
				row, err := h.rt.Store().ToolCall(ctx, id)
				require.NoError(t, err)
				require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED, row.GetStatus())
			})
		})
	}
}

// TestAnswerOfUnknownOutcomeRunsItsTurnOnce: the write of the model's
// final answer ends with journal.ErrUnknownOutcome; with no further
// command the runtime wakes the conversation again, and the new activation
// finds the answer in the log (landed: the model is not called again) or
// calls the model again and writes the answer (not landed). The log holds
// the answer once either way. The turn waited for the next command.
func TestAnswerOfUnknownOutcomeRunsItsTurnOnce(t *testing.T) {
	for _, landed := range []bool{true, false} {
		t.Run(fmt.Sprintf("landed=%v", landed), func(t *testing.T) {
			forEachStore(t, func(t *testing.T, kind string) {
				store := &faultStore{Store: openStore(t, kind), err: errLostCommit, landed: landed, match: isAnswer, fail: 1}
				h := newHarness(t, store, func(o *lazarus.Options) { o.NoResume = true })
				ctx := ctxT(t)
				h.model.Push("c", scripted.Text("first"), scripted.Text("second"))
				_, err := h.rt.Send(ctx, "c", "hello", user)
				require.NoError(t, err)

				want, calls := "first", 1
				if !landed {
					want, calls = "second", 2
				}
				// Read from the Store (the subscriber's side is
				// TestSubscriberGetsTheAnswerOfUnknownOutcome).
				require.EventuallyWithT(t, func(c *assert.CollectT) {
					evs := h.historyOf(c, "c")
					require.Greater(c, len(evs), 1)
					assert.True(c, isAssistantText(want)(evs[len(evs)-1]), "the last event is the answer")
				}, wait, time.Millisecond, "the answer %q is in the log", want)
				require.Equal(t, int32(1), store.lost.Load(), "the answer's write was reported unknown")
				require.Equal(t, []string{"user_msg", "assistant_msg"}, types(h.history("c")), "the answer is in the log once")
				// A call the new activation made for the answered turn
				// would come before the next turn's (one model call of a
				// conversation at a time, its turns in order): once that
				// turn has ended, the count is final.
				h.model.Push("c", scripted.Text("later"))
				_, err = h.rt.SendAndWait(ctx, "c", "and now?", user)
				require.NoError(t, err)
				require.Equal(t, calls+1, h.model.Calls("c"), "the model is called again only if the answer did not land")
				require.Equal(t, []string{"user_msg", "assistant_msg", "user_msg", "assistant_msg"}, types(h.history("c")), "the answer is in the log once")
			})
		})
	}
}

// warnSignal is a slog handler that closes seen at the first Warn record
// whose message starts with prefix.
type warnSignal struct {
	prefix string
	seen   chan struct{}
	once   sync.Once
}

func (w *warnSignal) Enabled(context.Context, slog.Level) bool { return true }
func (w *warnSignal) WithAttrs([]slog.Attr) slog.Handler       { return w }
func (w *warnSignal) WithGroup(string) slog.Handler            { return w }
func (w *warnSignal) Handle(_ context.Context, r slog.Record) error {
	if r.Level == slog.LevelWarn && strings.HasPrefix(r.Message, w.prefix) {
		w.once.Do(func() { close(w.seen) })
	}
	return nil
}

// TestUnknownOutcomesInARowStopTheRewakes: a Store that reports every
// answer's write as journal.ErrUnknownOutcome, landing none, does not have
// the conversation revived and its model called for good: the first
// activation and three re-wakes call the model (four calls), the next
// re-wake is not sent (a warning says so), and the conversation is left
// stopped. Its next command runs the turn once the Store works again.
func TestUnknownOutcomesInARowStopTheRewakes(t *testing.T) {
	store := &faultStore{Store: openStore(t, "memory"), err: errLostCommit, match: isAnswer, fail: 4}
	requireRewakesStop(t, store, "writes of unknown outcome in a row")
}

// requireRewakesStop: store refuses the first four answers' writes of
// conversation c, landing none. The first activation and three re-wakes
// call the model (four calls), the next re-wake is not sent (a warning
// starting with prefix says so), and the conversation is left stopped;
// its next command runs the turn once the Store takes the write.
func requireRewakesStop(t *testing.T, store *faultStore, prefix string) {
	t.Helper()
	warned := &warnSignal{prefix: prefix, seen: make(chan struct{})}
	h := newHarness(t, store, func(o *lazarus.Options) {
		o.NoResume = true
		o.Logger = slog.New(warned)
	})
	ctx := ctxT(t)
	h.model.Push("c", scripted.Text("a1"), scripted.Text("a2"), scripted.Text("a3"), scripted.Text("a4"), scripted.Text("a5"), scripted.Text("a6"))
	_, err := h.rt.Send(ctx, "c", "hello", user)
	require.NoError(t, err)

	select {
	case <-warned.seen:
	case <-ctx.Done():
		t.Fatalf("no warning that the re-wakes stopped (model calls: %d, refused writes: %d, log: %v)", h.model.Calls("c"), store.lost.Load(), types(h.history("c")))
	}
	require.Equal(t, int32(4), store.lost.Load())
	require.Equal(t, 4, h.model.Calls("c"), "the first activation and three re-wakes called the model")
	require.Eventually(t, func() bool { return !h.rt.IsActive("c") }, wait, time.Millisecond, "the last activation stopped")
	require.Equal(t, 4, h.model.Calls("c"), "no re-wake after the warning")
	require.Equal(t, []string{"user_msg"}, types(h.history("c")))

	_, err = h.rt.Send(ctx, "c", "again", user)
	require.NoError(t, err)
	h.awaitEvent("c", 0, isAssistantText("a5"))
	require.Equal(t, []string{"user_msg", "user_msg", "assistant_msg"}, types(h.history("c")))
}

// TestSubscriberGetsTheAnswerOfUnknownOutcome: the write of a turn's final
// answer ends with journal.ErrUnknownOutcome. The journal actor publishes
// only the writes the Store reported committed, so an answer that landed
// unreported reaches no subscriber through a commit; the re-woken
// activation reads it from the log, and a subscriber that subscribed
// before the turn gets it then, with no further command: every event of
// the log once, in seq order. (Not landed: the re-woken activation writes
// the answer again, and that commit is published.) A later turn's events
// follow, with no duplicate.
func TestSubscriberGetsTheAnswerOfUnknownOutcome(t *testing.T) {
	for _, landed := range []bool{true, false} {
		t.Run(fmt.Sprintf("landed=%v", landed), func(t *testing.T) {
			forEachStore(t, func(t *testing.T, kind string) {
				store := &faultStore{Store: openStore(t, kind), err: errLostCommit, landed: landed, match: isAnswer, fail: 1}
				h := newHarness(t, store, func(o *lazarus.Options) { o.NoResume = true })
				ctx := ctxT(t)
				updates, err := h.rt.Subscribe(ctx, "c", 0)
				require.NoError(t, err)
				h.model.Push("c", scripted.Text("first"), scripted.Text("second"), scripted.Text("third"))
				_, err = h.rt.Send(ctx, "c", "hello", user)
				require.NoError(t, err)

				var got []*messages.Event
				next := func(what string) *messages.Event {
					t.Helper()
					for {
						select {
						case u, ok := <-updates:
							require.True(t, ok, "the subscription ended waiting for %s (got %d events)", what, len(got))
							if u.Event != nil {
								got = append(got, u.Event)
								return u.Event
							}
						case <-ctx.Done():
							t.Fatalf("waited %v for %s: the subscriber got %v", wait, what, types(got))
						}
					}
				}
				want := "first"
				if !landed {
					want = "second"
				}
				next("the user message")
				answer := next("the answer")
				require.True(t, isAssistantText(want)(answer), "the answer %q, got %v", want, types(got))
				require.Equal(t, int32(1), store.lost.Load(), "the answer's write was reported unknown")

				// A later turn: its events follow the answer, none twice.
				_, err = h.rt.Send(ctx, "c", "again", user)
				require.NoError(t, err)
				next("the second user message")
				next("the second answer")
				require.Equal(t, []string{"user_msg", "assistant_msg", "user_msg", "assistant_msg"}, types(got))
				requireGapFree(t, got)
				require.Equal(t, types(h.history("c")), types(got), "the subscriber got the log")
			})
		})
	}
}
