package tests

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/actors/actorstest"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/journal/pebblejournal"
	"github.com/lazarusrt/lazarus/journal/pgjournal"
	"github.com/lazarusrt/lazarus/journal/pgjournal/pgtest"
	"github.com/lazarusrt/lazarus/messages"
)

// wait bounds every wait of these tests; nothing here sleeps.
const wait = 20 * time.Second

var user = agent.Scope{UserID: "alice"}

// storeKinds are the adapters every scenario runs on.
var storeKinds = []string{"memory", "pebble", "postgres"}

// TestMain starts the PostgreSQL server of the "postgres" kind.
func TestMain(m *testing.M) { pgtest.Main(m) }

func openStore(t testing.TB, kind string) journal.Store {
	t.Helper()
	return openStoreAudit(t, kind, false)
}

// openStoreAudit opens a store of kind, with its model-call audit on if
// audit is.
func openStoreAudit(t testing.TB, kind string, audit bool) journal.Store {
	t.Helper()
	switch kind {
	case "memory":
		return memjournal.New(memjournal.Options{Audit: audit})
	case "pebble":
		s, err := pebblejournal.Open(t.TempDir(), pebblejournal.Options{Audit: audit})
		require.NoError(t, err)
		// Closed before its directory is removed (cleanups run last
		// first): an open store's delayed flush would otherwise find its
		// directory gone, and Pebble panics on a WAL it cannot create.
		t.Cleanup(func() { _ = s.Close() })
		return s
	case "postgres":
		s, err := pgjournal.Open(context.Background(), pgtest.NewDatabase(t), pgjournal.Options{Audit: audit})
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() }) // after the runtime's Close, registered later
		return s
	}
	t.Fatalf("unknown store kind %q", kind)
	return nil
}

// toolRuns records every execution of a server tool, by tool call id.
type toolRuns struct {
	mu   sync.Mutex
	runs map[string][]string // tool name -> tool call ids, in order
}

func (r *toolRuns) add(name, id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.runs == nil {
		r.runs = map[string][]string{}
	}
	r.runs[name] = append(r.runs[name], id)
}

func (r *toolRuns) of(name string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.runs[name]...)
}

// harness is a Runtime on a scripted model, a manual clock and a set of
// tools, on one store.
type harness struct {
	t     *testing.T
	rt    *lazarus.Runtime
	store journal.Store
	model *scripted.Model
	clock *actorstest.ManualClock
	runs  *toolRuns

	// chargeGate, when set, blocks the "charge" tool until it is closed;
	// chargeStarted receives each tool call id as a charge starts.
	chargeGate    chan struct{}
	chargeStarted chan string
}

func (h *harness) tools() []agent.Tool {
	return []agent.Tool{
		{
			Name: "lookup_order", Description: "look an order up", Executor: messages.Executor_EXECUTOR_SERVER,
			Run: func(_ context.Context, inv agent.Invocation) (string, error) {
				h.runs.add(inv.Name, inv.ToolCallID)
				return `{"order":42,"amount":120}`, nil
			},
		},
		{
			Name: "charge", Description: "charge a card", Executor: messages.Executor_EXECUTOR_SERVER,
			Run: func(ctx context.Context, inv agent.Invocation) (string, error) {
				h.runs.add(inv.Name, inv.ToolCallID)
				select {
				case h.chargeStarted <- inv.ToolCallID:
				default:
				}
				if h.chargeGate != nil {
					select {
					case <-h.chargeGate:
					case <-ctx.Done():
						return "", ctx.Err()
					}
				}
				return fmt.Sprintf(`{"charged":true,"idempotency_key":%q}`, inv.ToolCallID), nil
			},
		},
		{
			Name: "whoami", Description: "needs a real user", Executor: messages.Executor_EXECUTOR_SERVER, RequiresUser: true,
			Run: func(_ context.Context, inv agent.Invocation) (string, error) {
				h.runs.add(inv.Name, inv.ToolCallID)
				return fmt.Sprintf(`{"user":%q}`, inv.Scope.UserID), nil
			},
		},
		{
			Name: "approve_refund", Description: "a human approves", Executor: messages.Executor_EXECUTOR_HUMAN,
			Timeout: time.Hour,
		},
	}
}

func newHarness(t *testing.T, store journal.Store, mod func(*lazarus.Options)) *harness {
	t.Helper()
	h := &harness{
		t: t, store: store,
		model:         scripted.New(scripted.Options{}),
		clock:         actorstest.NewManualClock(time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)),
		runs:          &toolRuns{},
		chargeStarted: make(chan string, 16),
	}
	opts := lazarus.Options{
		Store:       store,
		Model:       h.model,
		Tools:       h.tools(),
		Clock:       h.clock,
		IdleTimeout: -1,
	}
	if mod != nil {
		mod(&opts)
		if m, ok := opts.Model.(*scripted.Model); ok {
			h.model = m // a model scripted before Open
		}
	}
	rt, err := lazarus.Open(opts)
	require.NoError(t, err)
	h.rt = rt
	t.Cleanup(func() {
		require.NoError(t, rt.Close())
	})
	return h
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	t.Cleanup(cancel)
	return ctx
}

// recv returns the next value of ch, and fails the test if none comes
// within wait (a regression fails the test, not the whole run's timeout).
func recv[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(wait):
		t.Fatalf("no %s within %v", what, wait)
		panic("unreachable")
	}
}

// awaitEvent subscribes after seq and returns the first durable event that
// matches, failing the test after the bound.
func (h *harness) awaitEvent(conv string, after uint64, match func(*messages.Event) bool) *messages.Event {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	ch, err := h.rt.Subscribe(ctx, conv, after)
	require.NoError(h.t, err)
	for u := range ch {
		if u.Event != nil && match(u.Event) {
			return u.Event
		}
	}
	h.t.Fatalf("conversation %q: no matching event after seq %d within %v", conv, after, wait)
	return nil
}

// awaitUpdate returns the first live update (event, delta or error) that
// matches.
func (h *harness) awaitUpdate(ch <-chan actors.Update, match func(actors.Update) bool) actors.Update {
	h.t.Helper()
	for u := range ch {
		if match(u) {
			return u
		}
	}
	h.t.Fatalf("no matching update within %v", wait)
	return actors.Update{}
}

func isSuspension(ev *messages.Event) bool { return ev.GetSuspension() != nil }

func isAssistantText(text string) func(*messages.Event) bool {
	return func(ev *messages.Event) bool {
		for _, p := range ev.GetAssistantMsg().GetContent() {
			if p.GetText() == text {
				return true
			}
		}
		return false
	}
}

// types lists the event types of a history, in order.
func types(evs []*messages.Event) []string {
	out := make([]string, 0, len(evs))
	for _, ev := range evs {
		switch ev.GetBody().(type) {
		case *messages.Event_UserMsg:
			out = append(out, "user_msg")
		case *messages.Event_AssistantMsg:
			out = append(out, "assistant_msg")
		case *messages.Event_ToolCall:
			out = append(out, "tool_call:"+ev.GetToolCall().GetCall().GetName())
		case *messages.Event_ToolResult:
			out = append(out, "tool_result:"+ev.GetToolResult().GetName())
		case *messages.Event_Suspension:
			out = append(out, "suspension")
		case *messages.Event_Resolution:
			out = append(out, "resolution:"+ev.GetResolution().GetStatus().String())
		case *messages.Event_Rewind:
			out = append(out, "rewind")
		case *messages.Event_TurnFailed:
			out = append(out, "turn_failed:"+ev.GetTurnFailed().GetCode())
		default:
			out = append(out, "unknown")
		}
	}
	return out
}

func (h *harness) history(conv string) []*messages.Event {
	h.t.Helper()
	return h.historyOf(h.t, conv)
}

// testingT is what a helper needs of its test: a *testing.T, or the
// *assert.CollectT of a require.EventuallyWithT condition, which runs on
// a goroutine of its own, where the test's FailNow must not be called.
type testingT interface {
	require.TestingT
	Helper()
}

// historyOf is history failing t rather than the harness's test.
func (h *harness) historyOf(t testingT, conv string) []*messages.Event {
	t.Helper()
	evs, err := h.rt.History(ctxT(h.t), conv, 0, 0)
	require.NoError(t, err)
	return evs
}

// requireGapFree checks that seqs run 1..n.
func requireGapFree(t *testing.T, evs []*messages.Event) {
	t.Helper()
	for i, ev := range evs {
		require.Equal(t, uint64(i+1), ev.GetSeq(), "seq of event %d", i)
	}
}

// pendingCallID returns the id of the only pending call a suspension names.
func pendingCallID(t *testing.T, ev *messages.Event) string {
	t.Helper()
	p := ev.GetSuspension().GetPending()
	require.Len(t, p, 1)
	return p[0].GetToolCallId()
}

// toolResults counts, in a turn's context, the tool results of call id.
func toolResults(turn agent.Turn, id string) []*messages.ToolOutcome {
	var out []*messages.ToolOutcome
	for _, ev := range turn.Context {
		if ev.GetToolResult().GetToolCallId() == id {
			out = append(out, ev.GetToolResult().GetOutcome())
		}
	}
	return out
}

// awaitDeadlineArmed waits until the expiry actor's timer is armed for the
// deadline of tool call id, as stored in its row.
func (h *harness) awaitDeadlineArmed(id string) {
	h.t.Helper()
	row, err := h.store.ToolCall(ctxT(h.t), id)
	require.NoError(h.t, err)
	want := h.armedFor(row.GetDeadline().AsTime())
	// A timer at the deadline, not necessarily the earliest: while an
	// expiry's write is unanswered the expiry actor also waits for its
	// reply (ExpiryOptions.ReplyTimeout).
	require.Eventually(h.t, func() bool {
		return slices.ContainsFunc(h.clock.Dues(), want.Equal)
	}, wait, time.Millisecond, "a timer armed for the deadline %v (timers %v)", want, h.clock.Dues())
}

// armedFor is when the expiry actor's timer for at is due, armed now: at,
// or actors.MaxTimerSpan from now if at is further.
func (h *harness) armedFor(at time.Time) time.Time {
	if capped := h.clock.Now().Add(actors.MaxTimerSpan); capped.Before(at) {
		return capped
	}
	return at
}
