package tests

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/snapshot"
)

// forEachStore runs a scenario on every adapter.
func forEachStore(t *testing.T, f func(t *testing.T, kind string)) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) { f(t, kind) })
	}
}

func TestKillAndRevive(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), nil)
		ctx := ctxT(t)
		h.model.Push("refund",
			scripted.Reply("looking it up", scripted.Call("lookup_order", `{"id":42}`)),
			scripted.Reply("this needs approval", scripted.Call("approve_refund", `{"amount":120}`)),
			scripted.Text("refund done"))
		h.model.Push("other", scripted.Text("hello there"), scripted.Text("still here"))

		_, err := h.rt.Send(ctx, "refund", "refund order 42", user)
		require.NoError(t, err)
		susp := h.awaitEvent("refund", 0, isSuspension)
		callID := pendingCallID(t, susp)

		_, err = h.rt.Send(ctx, "other", "hi", user)
		require.NoError(t, err)
		h.awaitEvent("other", 0, isAssistantText("hello there"))

		require.True(t, h.rt.Kill("refund"))
		require.False(t, h.rt.IsActive("refund"))

		// The journal, the expiry actor and other conversations carry on.
		_, err = h.rt.Send(ctx, "other", "are you there?", user)
		require.NoError(t, err)
		h.awaitEvent("other", 0, isAssistantText("still here"))
		require.False(t, h.rt.IsActive("refund"), "nothing revives a conversation but its own commands")
		h.awaitDeadlineArmed(callID) // the expiry actor still holds the dead conversation's deadline

		require.NoError(t, h.rt.Resolve(ctx, callID, `{"approved":true}`, user))
		h.awaitEvent("refund", susp.GetSeq(), isAssistantText("refund done"))

		evs := h.history("refund")
		requireGapFree(t, evs)
		require.Equal(t, []string{
			"user_msg",
			"assistant_msg", "tool_call:lookup_order", "tool_result:lookup_order",
			"assistant_msg", "tool_call:approve_refund", "suspension",
			"resolution:TOOL_CALL_STATUS_RESOLVED", "tool_result:approve_refund",
			"assistant_msg",
		}, types(evs))
		require.Len(t, h.runs.of("lookup_order"), 1, "the server tool ran once")
		last := h.model.Turns("refund")[2]
		got := toolResults(last, callID)
		require.Len(t, got, 1)
		require.Equal(t, `{"approved":true}`, got[0].GetContent())
		require.Eventually(t, func() bool { return h.clock.Timers() == 0 }, wait, time.Millisecond,
			"the answered call's deadline is cancelled")
	})
}

func TestDoubleClick(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), nil)
		ctx := ctxT(t)
		h.model.Push("c", scripted.Reply("", scripted.Call("approve_refund", `{"amount":5}`)), scripted.Text("ok"))
		_, err := h.rt.Send(ctx, "c", "refund", user)
		require.NoError(t, err)
		id := pendingCallID(t, h.awaitEvent("c", 0, isSuspension))

		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = h.rt.Resolve(ctx, id, `{"click":`+string(rune('0'+i))+`}`, user)
			}()
		}
		wg.Wait()
		wins := 0
		for _, err := range errs {
			if err == nil {
				wins++
			} else {
				require.ErrorIs(t, err, journal.ErrStale)
			}
		}
		require.Equal(t, 1, wins, "exactly one click wins")
		h.awaitEvent("c", 0, isAssistantText("ok"))
		turns := h.model.Turns("c")
		require.Len(t, toolResults(turns[len(turns)-1], id), 1, "the model sees one result")
		require.Equal(t, 1, strings.Count(strings.Join(types(h.history("c")), ","), "resolution"))
	})
}

func TestKillExpireLateAnswer(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), nil)
		ctx := ctxT(t)
		h.model.Push("c",
			scripted.Reply("asking a human", scripted.Call("approve_refund", `{"amount":900}`)),
			// After the timeout the model tries a tool that needs a real
			// user: under the system scope it must fail as a tool error.
			scripted.Reply("", scripted.Call("whoami", `{}`)),
			scripted.Text("timed out; nobody approved"))
		_, err := h.rt.Send(ctx, "c", "refund 900", user)
		require.NoError(t, err)
		id := pendingCallID(t, h.awaitEvent("c", 0, isSuspension))
		require.True(t, h.rt.Kill("c"))
		h.awaitDeadlineArmed(id)

		h.clock.Advance(59 * time.Minute)
		require.False(t, h.rt.IsActive("c"), "nothing fires before the deadline")
		h.clock.Advance(time.Minute)

		h.awaitEvent("c", 0, isAssistantText("timed out; nobody approved"))
		err = h.rt.Resolve(ctx, id, `{"approved":true}`, user)
		require.ErrorIs(t, err, journal.ErrStale, "the human's late answer is refused")

		row, err := h.store.ToolCall(ctx, id)
		require.NoError(t, err)
		require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_EXPIRED, row.GetStatus())
		evs := h.history("c")
		require.Equal(t, []string{
			"user_msg", "assistant_msg", "tool_call:approve_refund", "suspension",
			"resolution:TOOL_CALL_STATUS_EXPIRED", "tool_result:approve_refund",
			"assistant_msg", "tool_call:whoami", "tool_result:whoami",
			"assistant_msg",
		}, types(evs))
		require.Equal(t, "system", evs[4].GetResolution().GetBy())
		require.Equal(t, "expired", evs[5].GetToolResult().GetOutcome().GetError().GetCode())
		require.Equal(t, agent.CodeScope, evs[8].GetToolResult().GetOutcome().GetError().GetCode(),
			"a tool that needs a user fails under the system scope")
		require.Empty(t, h.runs.of("whoami"), "the tool body never ran under the system scope")
	})
}

func TestCrashMidTurnRerunsOnce(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), nil)
		ctx := ctxT(t)
		h.model.Push("c", scripted.Text("the answer"))
		entered := h.model.Hold("c")
		_, err := h.rt.Send(ctx, "c", "question", user)
		require.NoError(t, err)
		recv(t, entered, "model call entered")
		require.True(t, h.rt.Kill("c"), "killed while the model call is in flight")
		require.Equal(t, 1, h.model.Calls("c"))
		require.Equal(t, []string{"user_msg"}, types(h.history("c")))

		require.NoError(t, h.rt.Wake(ctx, "c"))
		h.awaitEvent("c", 0, isAssistantText("the answer"))
		require.Equal(t, 2, h.model.Calls("c"), "the interrupted turn ran again")
		require.Equal(t, []string{"user_msg", "assistant_msg"}, types(h.history("c")))

		// Exactly once: another revival owes nothing. Wake returns before
		// a model call it would start, so the next turn is the witness: a
		// re-run of the answered turn would be a third call (taking the
		// next reply, or cancelled by the next message) and show in the log.
		require.True(t, h.rt.Kill("c"))
		require.NoError(t, h.rt.Wake(ctx, "c"))
		h.model.Push("c", scripted.Text("the next answer"))
		seq, err := h.rt.Send(ctx, "c", "next question", user)
		require.NoError(t, err)
		h.awaitEvent("c", seq, isAssistantText("the next answer"))
		require.Equal(t, 3, h.model.Calls("c"), "the revival after the answer called the model again")
		require.Equal(t, []string{"user_msg", "assistant_msg", "user_msg", "assistant_msg"}, types(h.history("c")))
	})
}

func TestCrashMidToolRedispatchesSameID(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), nil)
		h.chargeGate = make(chan struct{})
		ctx := ctxT(t)
		h.model.Push("c", scripted.Reply("charging", scripted.Call("charge", `{"amount":5}`)), scripted.Text("charged"))
		_, err := h.rt.Send(ctx, "c", "charge me", user)
		require.NoError(t, err)
		first := recv(t, h.chargeStarted, "charge started")
		require.True(t, h.rt.Kill("c"), "killed while the server tool runs")
		require.Equal(t, 1, h.model.Calls("c"))

		close(h.chargeGate)
		require.NoError(t, h.rt.Wake(ctx, "c"))
		h.awaitEvent("c", 0, isAssistantText("charged"))

		require.Equal(t, []string{first, first}, h.runs.of("charge"),
			"re-dispatched under the same tool call id, never a new one")
		require.Equal(t, 2, h.model.Calls("c"), "the model was not asked again for the interrupted turn")
		evs := h.history("c")
		require.Equal(t, []string{"user_msg", "assistant_msg", "tool_call:charge", "tool_result:charge", "assistant_msg"}, types(evs))
		require.Equal(t, first, evs[2].GetToolCall().GetCall().GetId())
	})
}

// countingStore records the revival reads made of it.
type countingStore struct {
	journal.Store
	mu        sync.Mutex
	loadSince int
	loaded    []*messages.Event // what LoadSince returned, last call
	summary   *messages.Summary
}

func (s *countingStore) LoadSince(ctx context.Context, id string) (*messages.Summary, []*messages.Event, error) {
	sum, evs, err := s.Store.LoadSince(ctx, id)
	s.mu.Lock()
	s.loadSince++
	s.loaded, s.summary = evs, sum
	s.mu.Unlock()
	return sum, evs, err
}

func (s *countingStore) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.loadSince, s.loaded, s.summary = 0, nil, nil
}

func TestRevivalFromSummary(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		store := &countingStore{Store: openStore(t, kind)}
		h := newHarness(t, store, func(o *lazarus.Options) {
			o.Summarizer = snapshot.Deterministic{}
			o.Summary = snapshot.Policy{MaxEvents: 6, KeepRecent: 2}
		})
		ctx := ctxT(t)
		for i := range 8 {
			text := "answer " + string(rune('a'+i))
			h.model.Push("c", scripted.Text(text))
			_, err := h.rt.Send(ctx, "c", "question", user)
			require.NoError(t, err)
			h.awaitEvent("c", 0, isAssistantText(text))
		}
		require.Eventually(t, func() bool {
			s, err := store.LatestSummary(ctx, "c")
			return err == nil && s.GetToSeq() >= 10
		}, wait, time.Millisecond, "a summary was written")

		h.model.Push("c", scripted.Text("final"))
		entered := h.model.Hold("c")
		_, err := h.rt.Send(ctx, "c", "one more", user)
		require.NoError(t, err)
		recv(t, entered, "model call entered")
		before := h.model.Turns("c")[h.model.Calls("c")-1]
		require.NotNil(t, before.Summary, "the turn starts from the summary")

		require.True(t, h.rt.Kill("c"))
		store.reset()
		require.NoError(t, h.rt.Wake(ctx, "c"))
		h.awaitEvent("c", 0, isAssistantText("final"))

		after := h.model.Turns("c")[h.model.Calls("c")-1]
		store.mu.Lock()
		defer store.mu.Unlock()
		// A summary started after the last turn may land while the held
		// model call runs, before the kill: the revival then starts from
		// that newer one. Either way it starts from what it read.
		require.True(t, proto.Equal(store.summary, after.Summary), "the revived turn starts from the summary the revival read")
		require.LessOrEqual(t, before.Summary.GetToSeq(), after.Summary.GetToSeq(), "never from an older summary")
		if proto.Equal(before.Summary, after.Summary) {
			require.Len(t, after.Context, len(before.Context))
			for i := range before.Context {
				require.True(t, proto.Equal(before.Context[i], after.Context[i]), "context event %d", i)
			}
		}
		require.Equal(t, 1, store.loadSince, "revival reads the summary and later events, once")
		require.NotNil(t, store.summary)
		require.NotEmpty(t, store.loaded)
		require.Equal(t, store.summary.GetToSeq()+1, store.loaded[0].GetSeq(),
			"revival never reads the events the summary covers")
	})
}

func TestFSMStateDisagreeingWithLogLoses(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), nil)
		ctx := ctxT(t)
		h.model.Push("c", scripted.Text("first"), scripted.Text("second"))
		_, err := h.rt.Send(ctx, "c", "one", user)
		require.NoError(t, err)
		h.awaitEvent("c", 0, isAssistantText("first"))
		require.True(t, h.rt.Kill("c"))

		// A cache that lies: awaiting a call that never existed, at a seq
		// beyond the log.
		require.NoError(t, h.store.PutFSMState(ctx, "c", &messages.FSMState{
			State:   messages.AgentState_AGENT_STATE_AWAITING_INPUT,
			LastSeq: 99,
			Pending: map[string]*messages.PendingCall{"bogus": {ToolCallId: "bogus", Executor: messages.Executor_EXECUTOR_HUMAN}},
		}))
		_, err = h.rt.Send(ctx, "c", "two", user)
		require.NoError(t, err)
		h.awaitEvent("c", 0, isAssistantText("second"))
		require.Equal(t, []string{"user_msg", "assistant_msg", "user_msg", "assistant_msg"}, types(h.history("c")))
		conv, err := h.store.Conversation(ctx, "c")
		require.NoError(t, err)
		require.Equal(t, uint64(4), conv.GetFsmState().GetLastSeq(), "the cache is rewritten from the log")
		require.Empty(t, conv.GetFsmState().GetPending())
		require.Equal(t, messages.AgentState_AGENT_STATE_IDLE, conv.GetFsmState().GetState())
	})
}

func TestPassivationAndRevival(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), func(o *lazarus.Options) { o.IdleTimeout = time.Minute })
		ctx := ctxT(t)
		h.model.Push("c", scripted.Text("first"), scripted.Text("second"))
		_, err := h.rt.Send(ctx, "c", "one", user)
		require.NoError(t, err)
		h.awaitEvent("c", 0, isAssistantText("first"))
		require.True(t, h.rt.IsActive("c"))
		require.Eventually(t, func() bool { return h.clock.Timers() == 1 }, wait, time.Millisecond, "the idle timer is armed")

		h.clock.Advance(59 * time.Second)
		require.True(t, h.rt.IsActive("c"), "not idle long enough")
		h.clock.Advance(time.Second)
		require.Eventually(t, func() bool { return !h.rt.IsActive("c") }, wait, time.Millisecond, "passivated")
		require.Equal(t, 0, h.rt.Active())

		_, err = h.rt.Send(ctx, "c", "two", user)
		require.NoError(t, err)
		h.awaitEvent("c", 0, isAssistantText("second"))
		require.Equal(t, []string{"user_msg", "assistant_msg", "user_msg", "assistant_msg"}, types(h.history("c")))
	})
}

func TestBadInputThroughRuntime(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), nil)
		ctx := ctxT(t)
		h.model.Push("ok", scripted.Text("fine"), scripted.Text("still fine"))
		_, err := h.rt.Send(ctx, "ok", "hello", user)
		require.NoError(t, err)
		h.awaitEvent("ok", 0, isAssistantText("fine"))

		t.Run("resolve unknown call", func(t *testing.T) {
			err := h.rt.Resolve(ctx, "no-such-call", `{}`, user)
			require.ErrorIs(t, err, journal.ErrStale)
			require.ErrorIs(t, err, journal.ErrNotFound)
		})
		t.Run("resolve with an oversized result", func(t *testing.T) {
			big := `"` + strings.Repeat("x", agent.MaxResultBytes) + `"`
			require.ErrorIs(t, h.rt.Resolve(ctx, "x", big, user), journal.ErrInvalid)
		})
		t.Run("resolve with a result that is not JSON", func(t *testing.T) {
			require.ErrorIs(t, h.rt.Resolve(ctx, "x", `{nope`, user), journal.ErrInvalid)
			// Checked before the call is looked up: a JSON string of
			// invalid UTF-8 could never be stored.
			require.ErrorIs(t, h.rt.Resolve(ctx, "x", "\"\xff\"", user), journal.ErrInvalid)
		})
		t.Run("bad conversation ids", func(t *testing.T) {
			for _, id := range []string{"", strings.Repeat("x", journal.MaxIDBytes+1), "bad\xff"} {
				_, err := h.rt.Send(ctx, id, "hi", user)
				require.ErrorIs(t, err, journal.ErrInvalid, "id %q", id)
			}
		})
		t.Run("oversized message", func(t *testing.T) {
			_, err := h.rt.Send(ctx, "big", strings.Repeat("x", journal.MaxEventBytes+1), user)
			require.ErrorIs(t, err, journal.ErrInvalid)
			require.Empty(t, h.history("big"), "nothing written")
		})
		// A call the model gets wrong is recorded with an error result
		// (code invalid) that the model sees on its next call; the call
		// never runs, and the model is called again.
		for _, tc := range []struct{ name, tool, args, problem string }{
			{"unknown tool from the model", "no_such_tool", `{}`, `unknown tool "no_such_tool"`},
			{"malformed tool arguments from the model", "lookup_order", `{"id":`, "not valid JSON"},
			{"tool arguments that are not an object", "lookup_order", `[1,2]`, "an array, not a JSON object"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				conv := "bad-" + strings.ReplaceAll(tc.name, " ", "-")
				h.model.Push(conv, scripted.Reply("", &messages.ToolCall{Name: tc.tool, Arguments: tc.args}), scripted.Text("corrected"))
				_, err := h.rt.Send(ctx, conv, "do it", user)
				require.NoError(t, err)
				h.awaitEvent(conv, 0, isAssistantText("corrected"))
				evs := h.history(conv)
				require.Equal(t, []string{"user_msg", "assistant_msg", "tool_call:" + tc.tool, "tool_result:" + tc.tool, "assistant_msg"}, types(evs))
				res := evs[3].GetToolResult()
				require.Equal(t, evs[2].GetToolCall().GetCall().GetId(), res.GetToolCallId())
				require.Equal(t, agent.CodeInvalid, res.GetOutcome().GetError().GetCode())
				require.Contains(t, res.GetOutcome().GetError().GetMessage(), tc.problem)
				row, err := h.rt.Store().ToolCall(ctx, res.GetToolCallId())
				require.NoError(t, err)
				require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_ERRORED, row.GetStatus(), "the row is terminal")
				require.Empty(t, h.runs.of(tc.tool))
			})
		}
		// Answers only the Store refuses (it checks before writing): text
		// that is not UTF-8, an answer over the event limit. The turn fails
		// (not retried: calling again would most likely fail the same way)
		// with nothing of the answer written, only turn_failed, and the
		// same activation serves the next message.
		for _, tc := range []struct{ name, text string }{
			{"answer text that is not UTF-8", "caf\xe9"},
			{"oversized answer", strings.Repeat("x", journal.MaxEventBytes+1)},
		} {
			t.Run(tc.name, func(t *testing.T) {
				conv := "refused-" + strings.ReplaceAll(tc.name, " ", "-")
				h.model.Push(conv, scripted.Text(tc.text), scripted.Text("recovered"))
				sub, err := h.rt.Subscribe(ctx, conv, 0)
				require.NoError(t, err)
				_, err = h.rt.Send(ctx, conv, "do it", user)
				require.NoError(t, err)
				u := h.awaitUpdate(sub, func(u actors.Update) bool { return u.TurnEnd != nil })
				require.Equal(t, lazarus.TurnFailed, u.TurnEnd.Outcome)
				require.ErrorIs(t, u.TurnEnd.Err, journal.ErrInvalid)
				require.Equal(t, []string{"user_msg", "turn_failed:invalid_answer"}, types(h.history(conv)), "nothing of the answer written")
				require.True(t, h.rt.IsActive(conv), "the activation carries on")
				_, err = h.rt.Send(ctx, conv, "again", user)
				require.NoError(t, err)
				h.awaitEvent(conv, 0, isAssistantText("recovered"))
			})
		}
		_, err = h.rt.Send(ctx, "ok", "and you?", user)
		require.NoError(t, err)
		h.awaitEvent("ok", 0, isAssistantText("still fine"))
	})
}

func TestSubscribeHasNoGap(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), nil)
		ctx := ctxT(t)
		const turns = 20
		for i := range turns {
			h.model.Push("c", scripted.Text("reply "+string(rune('A'+i))))
		}
		done := make(chan error, 1)
		go func() {
			for range turns {
				if _, err := h.rt.Send(ctx, "c", "msg", user); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
		// Subscribe while the conversation is being written.
		sub, err := h.rt.Subscribe(ctx, "c", 0)
		require.NoError(t, err)
		require.NoError(t, recv(t, done, "writer return"))
		// A message may interrupt the turn before it, so the number of
		// answers varies; once the last message is answered the log is
		// complete.
		var total int
		require.Eventually(t, func() bool {
			evs, err := h.rt.History(ctx, "c", 0, 0)
			total = len(evs)
			return err == nil && total > 0 && evs[total-1].GetAssistantMsg() != nil
		}, wait, time.Millisecond)
		require.GreaterOrEqual(t, total, turns+1)
		var got []uint64
		for u := range sub {
			if u.Event != nil {
				got = append(got, u.Event.GetSeq())
				if len(got) == total {
					break
				}
			}
		}
		require.Len(t, got, total)
		for i, seq := range got {
			require.Equal(t, uint64(i+1), seq, "every event once, in order")
		}
	})
}

func TestSendIsIdempotentOnRequestID(t *testing.T) {
	h := newHarness(t, openStore(t, "memory"), nil)
	ctx := ctxT(t)
	msg := &messages.UserMessage{Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: "once"}}}}
	s1, err := h.rt.SendMessage(ctx, "c", msg, lazarus.SendOptions{RequestID: "r-1"}, user)
	require.NoError(t, err)
	h.awaitEvent("c", 0, func(ev *messages.Event) bool { return ev.GetAssistantMsg() != nil })
	require.True(t, h.rt.Kill("c"))
	s2, err := h.rt.SendMessage(ctx, "c", msg, lazarus.SendOptions{RequestID: "r-1"}, user)
	require.NoError(t, err)
	assert.Equal(t, s1, s2, "the retry is answered with the stored seq")
	require.Equal(t, []string{"user_msg", "assistant_msg"}, types(h.history("c")))
}

// TestSendIsIdempotentAcrossSummaries: a retried send is recognised after
// a summary has folded its message away, both by the live activation that
// compacted its working set and by one revived from that summary.
func TestSendIsIdempotentAcrossSummaries(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		store := openStore(t, kind)
		h := newHarness(t, store, func(o *lazarus.Options) {
			o.Summarizer = snapshot.Deterministic{}
			o.Summary = snapshot.Policy{MaxEvents: 4, KeepRecent: -1}
		})
		ctx := ctxT(t)
		msg := &messages.UserMessage{Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: "pay the invoice"}}}}
		first, err := h.rt.SendMessage(ctx, "c", msg, lazarus.SendOptions{RequestID: "pay-1"}, user)
		require.NoError(t, err)
		h.awaitEvent("c", first, func(ev *messages.Event) bool { return ev.GetAssistantMsg() != nil })
		for i := range 4 {
			_, err := h.rt.Send(ctx, "c", fmt.Sprint("more ", i), user)
			require.NoError(t, err)
		}
		require.Eventually(t, func() bool {
			s, err := store.LatestSummary(ctx, "c")
			return err == nil && s.GetToSeq() > first+2
		}, wait, time.Millisecond, "a summary folded the message away")
		countPaid := func() int {
			n := 0
			for _, ev := range h.history("c") {
				if ev.GetRequestId() == "pay-1" {
					n++
				}
			}
			return n
		}

		again, err := h.rt.SendMessage(ctx, "c", msg, lazarus.SendOptions{RequestID: "pay-1"}, user)
		require.NoError(t, err)
		require.Equal(t, first, again, "the live activation answers with the stored seq")
		require.Equal(t, 1, countPaid())

		require.True(t, h.rt.Kill("c"))
		again, err = h.rt.SendMessage(ctx, "c", msg, lazarus.SendOptions{RequestID: "pay-1"}, user)
		require.NoError(t, err)
		require.Equal(t, first, again, "a revived activation answers with the stored seq")
		require.Equal(t, 1, countPaid(), "the message was appended once")
	})
}

func TestClosedRuntimeRefusesCalls(t *testing.T) {
	h := newHarness(t, openStore(t, "memory"), nil)
	require.NoError(t, h.rt.Close())
	_, err := h.rt.Send(ctxT(t), "c", "hi", user)
	require.True(t, errors.Is(err, lazarus.ErrClosed))
	require.ErrorIs(t, h.rt.Resolve(ctxT(t), "x", `{}`, user), lazarus.ErrClosed)
	require.NoError(t, h.rt.Close(), "Close is idempotent")
}

// TestFencedActivationIsWokenAgain: another writer (here written straight to
// the Store; in practice a killed predecessor whose last write landed late)
// moves the log on while the model answers. The actor's write is fenced off
// with ErrConflict and it stops; the runtime wakes the conversation again so
// the owed answer does not wait for the next command.
func TestFencedActivationIsWokenAgain(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), nil)
		ctx := ctxT(t)
		h.model.Push("c", scripted.Text("answer to a stale context"), scripted.Text("answer after the fence"))
		entered := h.model.Hold("c")
		_, err := h.rt.Send(ctx, "c", "hi", user)
		require.NoError(t, err)
		recv(t, entered, "model call entered")
		_, err = h.store.Append(ctx, &messages.AppendRequest{ConversationId: "c", ExpectedLast: 1, Events: []*messages.Event{{
			Body: &messages.Event_UserMsg{UserMsg: &messages.UserMessage{Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: "from elsewhere"}}}}},
		}}})
		require.NoError(t, err)
		h.model.Release("c")

		h.awaitEvent("c", 0, isAssistantText("answer after the fence"))
		require.Equal(t, []string{"user_msg", "user_msg", "assistant_msg"}, types(h.history("c")))
		require.Equal(t, 2, h.model.Calls("c"))
	})
}

// gatedStore holds the first append of one conversation that carries an
// assistant message until gate is closed, signalling held when it does.
type gatedStore struct {
	journal.Store
	conv  string
	gate  chan struct{}
	held  chan struct{}
	armed atomic.Bool
	// loads, if set, receives whether the gate was open at each LoadSince
	// (a revival read) of conv.
	loads chan bool
}

func (g *gatedStore) LoadSince(ctx context.Context, conv string) (*messages.Summary, []*messages.Event, error) {
	if g.loads != nil && conv == g.conv {
		open := false
		select {
		case <-g.gate:
			open = true
		default:
		}
		g.loads <- open
	}
	return g.Store.LoadSince(ctx, conv)
}

func (g *gatedStore) AppendBatch(ctx context.Context, reqs []*messages.AppendRequest) []journal.AppendResult {
	for _, r := range reqs {
		if r.GetConversationId() != g.conv || !g.armed.Load() {
			continue
		}
		for _, ev := range r.GetEvents() {
			if ev.GetAssistantMsg() != nil && g.armed.CompareAndSwap(true, false) {
				g.held <- struct{}{}
				<-g.gate
			}
		}
	}
	return g.Store.AppendBatch(ctx, reqs)
}

// killWhileAnswerHeld sends "hi" to conversation k, waits until g holds
// the write of the model's answer, and kills k's actor meanwhile.
func killWhileAnswerHeld(ctx context.Context, t *testing.T, h *harness, g *gatedStore) {
	t.Helper()
	g.armed.Store(true)
	_, err := h.rt.Send(ctx, "k", "hi", user)
	require.NoError(t, err)
	select {
	case <-g.held:
	case <-ctx.Done():
		t.Fatal("the answer's write never reached the store")
	}
	require.True(t, h.rt.Kill("k"), "killed while its write is in the store")
}

// TestDeadlineOfAKilledWriterIsArmed (ARCHITECTURE.md, invariant 9): an
// activation is killed while its write of an answer that asks a human
// (the suspension and the call's deadline, one write) is in the Store. The
// write still commits, and the expiry actor arms the deadline from the
// commit itself, with no activation to tell it; at the deadline the call
// expires and the turn goes on.
func TestDeadlineOfAKilledWriterIsArmed(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		g := &gatedStore{Store: openStore(t, kind), conv: "k", gate: make(chan struct{}), held: make(chan struct{}, 1)}
		// No resume scan: a revival of k would arm nothing but would muddy
		// which actor armed the deadline.
		h := newHarness(t, g, func(o *lazarus.Options) { o.NoResume = true })
		ctx := ctxT(t)
		h.model.Push("k",
			scripted.Reply("asking a human", scripted.Call("approve_refund", `{"amount":900}`)),
			scripted.Text("timed out; nobody approved"))
		killWhileAnswerHeld(ctx, t, h, g)
		close(g.gate)

		id := pendingCallID(t, h.awaitEvent("k", 0, isSuspension))
		h.awaitDeadlineArmed(id)
		require.False(t, h.rt.IsActive("k"), "no activation armed it: the commit did")

		h.clock.Advance(time.Hour)
		h.awaitEvent("k", 0, isAssistantText("timed out; nobody approved"))
		row, err := h.store.ToolCall(ctx, id)
		require.NoError(t, err)
		require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_EXPIRED, row.GetStatus())
	})
}

// TestEventOfAKilledWriterReachesSubscribers: an activation is killed while
// its write of the model's answer is in the Store. The write still commits,
// and a live subscriber receives the answer although its writer never heard
// the reply (the answer would otherwise reach nobody: the next activation
// finds the turn complete and writes nothing more).
func TestEventOfAKilledWriterReachesSubscribers(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		g := &gatedStore{Store: openStore(t, kind), conv: "k", gate: make(chan struct{}), held: make(chan struct{}, 1)}
		// No resume scan: it runs in the background after Open, and one
		// that lists k after the send below would revive it, which is not
		// what this test is about.
		h := newHarness(t, g, func(o *lazarus.Options) { o.NoResume = true })
		ctx := ctxT(t)
		h.model.Push("k", scripted.Text("written by a killed writer"))
		sub, err := h.rt.Subscribe(ctx, "k", 0)
		require.NoError(t, err)
		killWhileAnswerHeld(ctx, t, h, g)
		close(g.gate)
		u := h.awaitUpdate(sub, func(u actors.Update) bool { return isAssistantText("written by a killed writer")(u.Event) })
		require.EqualValues(t, 2, u.Event.GetSeq())
		require.False(t, h.rt.IsActive("k"), "nobody revived it: the subscriber heard from the commit itself")
	})
}

// recordingStore keeps a copy of every request committed through AppendBatch.
type recordingStore struct {
	journal.Store
	mu   sync.Mutex
	reqs []*messages.AppendRequest
}

func (s *recordingStore) AppendBatch(ctx context.Context, reqs []*messages.AppendRequest) []journal.AppendResult {
	res := s.Store.AppendBatch(ctx, reqs)
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, r := range reqs {
		if res[i].Err == nil {
			s.reqs = append(s.reqs, proto.Clone(r).(*messages.AppendRequest))
		}
	}
	return res
}

func (s *recordingStore) of(conv string) []*messages.AppendRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*messages.AppendRequest
	for _, r := range s.reqs {
		if r.GetConversationId() == conv {
			out = append(out, r)
		}
	}
	return out
}

// TestRowWrittenOnlyWhenItChanges: a turn with a server tool call writes the
// conversation row when the turn starts (idle -> active) and when it ends
// (idle, with fsm_state), not in between; a turn that suspends on a human
// persists awaiting_input with its pending call. The row after each turn
// agrees with the log.
func TestRowWrittenOnlyWhenItChanges(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		rec := &recordingStore{Store: openStore(t, kind)}
		h := newHarness(t, rec, nil)
		ctx := ctxT(t)
		h.model.Push("c",
			scripted.Reply("looking", scripted.Call("lookup_order", `{"id":1}`)),
			scripted.Text("found it"),
			scripted.Reply("approve?", scripted.Call("approve_refund", `{"amount":5}`)))

		_, err := h.rt.Send(ctx, "c", "where is order 1?", user)
		require.NoError(t, err)
		h.awaitEvent("c", 0, isAssistantText("found it"))
		reqs := rec.of("c")
		require.Len(t, reqs, 4, "user message, call, result, answer")
		touches := func(r *messages.AppendRequest) bool {
			return r.GetFsmState() != nil || r.GetStatus() != messages.ConversationStatus_CONVERSATION_STATUS_UNSPECIFIED
		}
		require.Equal(t, []bool{true, false, false, true}, []bool{touches(reqs[0]), touches(reqs[1]), touches(reqs[2]), touches(reqs[3])})
		require.Equal(t, messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE, reqs[0].GetStatus())
		require.Equal(t, messages.ConversationStatus_CONVERSATION_STATUS_IDLE, reqs[3].GetStatus())

		row, err := rec.Conversation(ctx, "c")
		require.NoError(t, err)
		last, err := rec.LastSeq(ctx, "c")
		require.NoError(t, err)
		require.Equal(t, messages.ConversationStatus_CONVERSATION_STATUS_IDLE, row.GetStatus())
		require.Equal(t, messages.AgentState_AGENT_STATE_IDLE, row.GetFsmState().GetState())
		require.Equal(t, last, row.GetFsmState().GetLastSeq())
		require.Empty(t, row.GetFsmState().GetPending())

		_, err = h.rt.Send(ctx, "c", "refund it", user)
		require.NoError(t, err)
		callID := pendingCallID(t, h.awaitEvent("c", last, isSuspension))
		row, err = rec.Conversation(ctx, "c")
		require.NoError(t, err)
		last, err = rec.LastSeq(ctx, "c")
		require.NoError(t, err)
		require.Equal(t, messages.ConversationStatus_CONVERSATION_STATUS_SUSPENDED, row.GetStatus())
		require.Equal(t, messages.AgentState_AGENT_STATE_AWAITING_INPUT, row.GetFsmState().GetState())
		require.Equal(t, last, row.GetFsmState().GetLastSeq())
		require.Contains(t, row.GetFsmState().GetPending(), callID)
	})
}

// TestRevivalWaitsForItsPredecessorsWrite: an activation is killed while
// its answer's write is held in the Store; the conversation is woken at
// once. The new activation reads the log only after that write landed
// (JournalBarrier), so it builds on the answer: the turn is not redone and
// no write of it is fenced off.
func TestRevivalWaitsForItsPredecessorsWrite(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		g := &gatedStore{Store: openStore(t, kind), conv: "k", gate: make(chan struct{}), held: make(chan struct{}, 1), loads: make(chan bool, 4)}
		h := newHarness(t, g, nil)
		ctx := ctxT(t)
		h.model.Push("k", scripted.Text("the only answer"), scripted.Text("the answer to the second message"))
		killWhileAnswerHeld(ctx, t, h, g)
		recv(t, g.loads, "revival read") // the first activation's revival read, before its Send returned
		woken := make(chan error, 1)
		go func() { woken <- h.rt.Wake(ctx, "k") }()
		// While the write is held, the revival must not read the log. A
		// revival without the barrier reads it at once (well within the
		// bound); this one waits for the write.
		select {
		case <-g.loads:
			t.Fatal("the revival read the log while its predecessor's write was still in the journal")
		case <-time.After(300 * time.Millisecond):
		}
		close(g.gate)
		require.NoError(t, recv(t, woken, "Wake return"))
		require.True(t, recv(t, g.loads, "revival read"), "the revival read the log once the write had landed")

		_, err := h.rt.Send(ctx, "k", "and now?", user)
		require.NoError(t, err)
		h.awaitEvent("k", 2, isAssistantText("the answer to the second message"))
		require.Equal(t, []string{"user_msg", "assistant_msg", "user_msg", "assistant_msg"}, types(h.history("k")))
		require.Equal(t, 2, h.model.Calls("k"), "one model call per user message: nothing was redone")
	})
}

// panickingSummarizer panics on its first n calls, then summarizes.
type panickingSummarizer struct {
	left  atomic.Int32
	calls atomic.Int32
}

func (p *panickingSummarizer) Summarize(ctx context.Context, id string, prev *messages.Summary, evs []*messages.Event) (*messages.Summary, error) {
	p.calls.Add(1)
	if p.left.Add(-1) >= 0 {
		panic("summarizer bug")
	}
	return snapshot.Deterministic{}.Summarize(ctx, id, prev, evs)
}

// A panic in user code called by the runtime (a Model's Generate, a
// Summarizer) fails that turn or summary and nothing else: the process,
// the activation and the other conversations go on.
func TestUserCodePanicsAreRecovered(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		var panicNext atomic.Bool
		sum := &panickingSummarizer{}
		sum.left.Store(1)
		store := openStore(t, kind)
		h := newHarness(t, store, func(o *lazarus.Options) {
			inner := o.Model
			o.Model = agent.ModelFunc(func(ctx context.Context, turn agent.Turn, onDelta func(string)) (*messages.AssistantMessage, error) {
				if turn.ConversationID == "p" && panicNext.CompareAndSwap(true, false) {
					panic("model bug")
				}
				return inner.Generate(ctx, turn, onDelta)
			})
			o.Summarizer = sum
			o.Summary = snapshot.Policy{MaxEvents: 4, KeepRecent: 1}
		})
		ctx := ctxT(t)

		panicNext.Store(true)
		sub, err := h.rt.Subscribe(ctx, "p", 0)
		require.NoError(t, err)
		_, err = h.rt.Send(ctx, "p", "hello", user)
		require.NoError(t, err)
		u := h.awaitUpdate(sub, func(u actors.Update) bool { return u.TurnEnd != nil })
		require.Equal(t, lazarus.TurnFailed, u.TurnEnd.Outcome)
		require.ErrorIs(t, u.TurnEnd.Err, agent.ErrPanicked, "a panic is never retried")
		require.Equal(t, []string{"user_msg", "turn_failed:panicked"}, types(h.history("p")), "nothing of the answer written")
		require.True(t, h.rt.IsActive("p"), "the activation carries on")

		// The next messages are served, and summaries go on after the one
		// whose summarizer panicked. A summary is tried when the
		// conversation goes idle and none is running, so on a busy machine
		// the panicking one may still be running at the next idle: send
		// until one is written (a bounded number of turns).
		summarized := func() bool {
			s, err := store.LatestSummary(ctx, "p")
			return err == nil && s != nil
		}
		for i := 0; i < 4 || (!summarized() && i < 40); i++ {
			text := fmt.Sprintf("answer %d", i)
			h.model.Push("p", scripted.Text(text))
			_, err = h.rt.Send(ctx, "p", "again", user)
			require.NoError(t, err)
			h.awaitEvent("p", 0, isAssistantText(text))
		}
		require.Eventually(t, summarized, wait, time.Millisecond, "a summary was written after the panic")
		require.GreaterOrEqual(t, sum.calls.Load(), int32(2), "the summarizer was called again after it panicked")
	})
}

// A subscriber sees the model's streamed text deltas of a turn, in order
// and before the turn's durable answer; together they are the answer's text.
func TestDeltasStreamBeforeTheAnswer(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), func(o *lazarus.Options) {
			o.Model = scripted.New(scripted.Options{Chunk: 3})
		})
		ctx := ctxT(t)
		const answer = "streamed, three runes at a time"
		h.model.Push("d", scripted.Text(answer))
		sub, err := h.rt.Subscribe(ctx, "d", 0)
		require.NoError(t, err)
		_, err = h.rt.Send(ctx, "d", "stream please", user)
		require.NoError(t, err)
		var deltas []string
		h.awaitUpdate(sub, func(u actors.Update) bool {
			if u.Delta != "" {
				deltas = append(deltas, u.Delta)
			}
			return isAssistantText(answer)(u.Event)
		})
		require.Greater(t, len(deltas), 1, "streamed in pieces")
		require.Equal(t, answer, strings.Join(deltas, ""))
	})
}

// A killed activation cancels the model call it started: Generate's ctx is
// done, so a provider call stops costing money for a turn nobody will read.
func TestKillCancelsTheModelCall(t *testing.T) {
	entered, returned := make(chan struct{}), make(chan error, 1)
	h := newHarness(t, openStore(t, "memory"), func(o *lazarus.Options) {
		inner := o.Model
		o.Model = agent.ModelFunc(func(ctx context.Context, turn agent.Turn, onDelta func(string)) (*messages.AssistantMessage, error) {
			if turn.ConversationID != "m" {
				return inner.Generate(ctx, turn, onDelta)
			}
			close(entered)
			<-ctx.Done()
			returned <- ctx.Err()
			return nil, ctx.Err()
		})
	})
	ctx := ctxT(t)
	_, err := h.rt.Send(ctx, "m", "think hard", user)
	require.NoError(t, err)
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("the model was never called")
	}
	require.True(t, h.rt.Kill("m"))
	select {
	case err := <-returned:
		require.ErrorIs(t, err, context.Canceled)
	case <-ctx.Done():
		t.Fatal("the model call was not cancelled")
	}
}
