package tests

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/snapshot"
)

// The runtime ends its summaries where no tool call is open, but a Store
// takes any summary whose span is in the log (one put by hand, or one
// imported before import refused them).
// A revival from a summary that ends inside a call passes it over for an
// earlier one (none here: the whole log), so the activation still owes
// exactly the calls the log leaves open and never shows the model a result
// without its call.

// cutSummary puts a summary of events 1..to, as a Store takes it.
func cutSummary(t *testing.T, h *harness, conv string, to uint64) {
	t.Helper()
	require.NoError(t, h.store.PutSummary(ctxT(t), conv, &messages.Summary{
		FromSeq: 1, ToSeq: to, Content: "the user asked for a refund", Created: journal.Timestamp(h.clock.Now())}))
}

// TestRevivalFromASummaryCoveringAPendingHumanCall: the answer to a human
// call whose tool_call event the latest summary covers is recorded and
// reaches the model; it used to be accepted and lost (the revived
// activation did not know the call).
func TestRevivalFromASummaryCoveringAPendingHumanCall(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), nil)
		ctx := ctxT(t)
		h.model.Push("c", scripted.Reply("", scripted.Call("approve_refund", `{"amount":5}`)), scripted.Text("approved"))
		_, err := h.rt.Send(ctx, "c", "refund", user)
		require.NoError(t, err)
		susp := h.awaitEvent("c", 0, isSuspension)
		id := pendingCallID(t, susp)
		require.True(t, h.rt.Kill("c"))
		cutSummary(t, h, "c", susp.GetSeq())

		require.NoError(t, h.rt.Resolve(ctx, id, `{"ok":true}`, user)) // revives the conversation
		h.awaitEvent("c", 0, isAssistantText("approved"))
		require.Equal(t, []string{
			"user_msg", "assistant_msg", "tool_call:approve_refund", "suspension",
			"resolution:TOOL_CALL_STATUS_RESOLVED", "tool_result:approve_refund", "assistant_msg",
		}, types(h.history("c")))
		require.Equal(t, 2, h.model.Calls("c"))
		last := h.model.Turns("c")[1]
		require.Nil(t, last.Summary, "the cut summary is passed over")
		require.Len(t, toolResults(last, id), 1)
	})
}

// TestRevivalFromASummaryCoveringARunningServerCall: a server call whose
// tool_call event the latest summary covers, killed while it ran, is
// dispatched again under its id when the conversation revives.
func TestRevivalFromASummaryCoveringARunningServerCall(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), nil)
		h.chargeGate = make(chan struct{})
		ctx := ctxT(t)
		h.model.Push("c", scripted.Reply("", scripted.Call("charge", `{"amount":5}`)), scripted.Text("charged"))
		_, err := h.rt.Send(ctx, "c", "charge", user)
		require.NoError(t, err)
		var first string
		select {
		case first = <-h.chargeStarted:
		case <-ctx.Done():
			t.Fatal("the charge tool never started")
		}
		require.True(t, h.rt.Kill("c"))
		last, err := h.store.LastSeq(ctx, "c")
		require.NoError(t, err)
		cutSummary(t, h, "c", last) // user_msg, assistant_msg, tool_call

		close(h.chargeGate)
		require.NoError(t, h.rt.Wake(ctx, "c"))
		h.awaitEvent("c", 0, isAssistantText("charged"))
		require.Equal(t, []string{first, first}, h.runs.of("charge"), "re-dispatched under the same id")
		ts := types(h.history("c"))
		require.Equal(t, 1, count(ts, "tool_result:charge"), "%v", ts)
		require.Len(t, toolResults(h.model.Turns("c")[1], first), 1)
	})
}

// TestRevivalFromASummaryEndingBeforeAResult: a summary that covers a call
// but not its result would show the model the result without its call;
// the revived turn starts from the whole log instead, and the call that
// has its result is not run again.
func TestRevivalFromASummaryEndingBeforeAResult(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), nil)
		ctx := ctxT(t)
		h.model.Push("c", scripted.Reply("", scripted.Call("lookup_order", `{"id":1}`)), scripted.Text("found"), scripted.Text("again"))
		_, err := h.rt.Send(ctx, "c", "look", user)
		require.NoError(t, err)
		h.awaitEvent("c", 0, isAssistantText("found"))
		require.True(t, h.rt.Kill("c"))
		cutSummary(t, h, "c", 3) // user_msg, assistant_msg, tool_call; the result is at 4

		_, err = h.rt.Send(ctx, "c", "and again", user)
		require.NoError(t, err)
		h.awaitEvent("c", 0, isAssistantText("again"))
		turn := h.model.Turns("c")[2]
		require.Nil(t, turn.Summary, "the cut summary is passed over")
		issued := map[string]bool{}
		for _, ev := range turn.Context {
			for _, c := range ev.GetAssistantMsg().GetToolCalls() {
				issued[c.GetId()] = true
			}
			if tr := ev.GetToolResult(); tr != nil {
				require.True(t, issued[tr.GetToolCallId()], "a result at seq %d without its call", ev.GetSeq())
			}
		}
		require.Len(t, h.runs.of("lookup_order"), 1)
	})
}

// TestRevivalFromTheRuntimesSummaryOwesTheSuspendedTurn: a conversation
// summarized up to its last idle point, then suspended on a human call
// beside a server call whose result is in the log, is killed. Revived from
// the summary, it owes exactly the human call: the server tool is not run
// again, the answer is recorded once, and the model is called once more,
// from that summary, with both calls and both results. (The runtime makes
// summaries only while idle, so none is made while the call is owed.)
func TestRevivalFromTheRuntimesSummaryOwesTheSuspendedTurn(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), func(o *lazarus.Options) {
			o.Summarizer = snapshot.Deterministic{}
			o.Summary = snapshot.Policy{MaxEvents: 1, KeepRecent: -1}
		})
		ctx := ctxT(t)
		for i := range 4 {
			text := fmt.Sprintf("answer %d", i)
			h.model.Push("c", scripted.Text(text))
			_, err := h.rt.Send(ctx, "c", "question", user)
			require.NoError(t, err)
			h.awaitEvent("c", 0, isAssistantText(text))
		}
		require.Eventually(t, func() bool {
			s, err := h.store.LatestSummary(ctx, "c")
			return err == nil && s.GetToSeq() == 8
		}, wait, time.Millisecond, "a summary of the four turns")
		h.model.Push("c", scripted.Reply("", scripted.Call("lookup_order", `{"id":1}`), scripted.Call("approve_refund", `{"amount":5}`)),
			scripted.Text("refunded"))
		_, err := h.rt.Send(ctx, "c", "refund order 1", user)
		require.NoError(t, err)
		id := pendingCallID(t, h.awaitEvent("c", 0, isSuspension))
		h.awaitEvent("c", 0, func(ev *messages.Event) bool { return ev.GetToolResult().GetName() == "lookup_order" })

		require.True(t, h.rt.Kill("c"))
		require.NoError(t, h.rt.Resolve(ctx, id, `{"ok":true}`, user))
		h.awaitEvent("c", 0, isAssistantText("refunded"))

		require.Len(t, h.runs.of("lookup_order"), 1, "a call with a result is not run again")
		require.Equal(t, 6, h.model.Calls("c"))
		turn := h.model.Turns("c")[5]
		require.Equal(t, uint64(8), turn.Summary.GetToSeq(), "the revived turn starts from the summary")
		var calls []string
		for _, ev := range turn.Context {
			for _, c := range ev.GetAssistantMsg().GetToolCalls() {
				calls = append(calls, c.GetName())
				require.Len(t, toolResults(turn, c.GetId()), 1, "call %s", c.GetName())
			}
		}
		require.Equal(t, []string{"lookup_order", "approve_refund"}, calls)
		ts := types(h.history("c"))
		require.Equal(t, 1, count(ts, "tool_result:approve_refund"), "%v", ts)
		require.Equal(t, 1, count(ts, "tool_result:lookup_order"), "%v", ts)
	})
}

// TestForkOfAConversationWithASummaryCuttingACall: a fork is refused at a
// point where a call is open, and one at a point where none is copies
// the call and its result, even when the summary before the fork point
// ends inside the call: the fork is taken from the events (an earlier
// summary, none here) rather than from that summary. Forked from that
// summary, the copy at the suspension owed no call though the call was
// open there, and the copy after the answer started at the result of a
// call it did not hold and could not be revived (ErrCorrupt).
func TestForkOfAConversationWithASummaryCuttingACall(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), nil)
		ctx := ctxT(t)
		h.model.Push("c", scripted.Reply("", scripted.Call("approve_refund", `{"amount":5}`)), scripted.Text("approved"))
		_, err := h.rt.Send(ctx, "c", "refund", user)
		require.NoError(t, err)
		susp := h.awaitEvent("c", 0, isSuspension) // user_msg, assistant_msg, tool_call, suspension
		id := pendingCallID(t, susp)
		require.True(t, h.rt.Kill("c"))
		cutSummary(t, h, "c", susp.GetSeq()-1) // up to the tool_call event

		err = h.rt.Fork(ctx, "c", susp.GetSeq(), "pending")
		require.ErrorIs(t, err, journal.ErrInvalid, "the call is open at the fork point")
		require.ErrorContains(t, err, "tool call is still open")

		require.NoError(t, h.rt.Resolve(ctx, id, `{"ok":true}`, user))
		done := h.awaitEvent("c", 0, isAssistantText("approved")) // resolution, tool_result, assistant_msg
		err = h.rt.Fork(ctx, "c", susp.GetSeq()+1, "resolved")
		require.ErrorIs(t, err, journal.ErrInvalid, "the call is open at its resolution, before its result")

		require.NoError(t, h.rt.Fork(ctx, "c", done.GetSeq(), "f"))
		h.model.Push("f", scripted.Text("forked"))
		_, err = h.rt.Send(ctx, "f", "and now?", user)
		require.NoError(t, err)
		h.awaitEvent("f", 0, isAssistantText("forked"))
		turn := h.model.Turns("f")[0]
		require.Nil(t, turn.Summary, "the fork holds no summary that cuts the call")
		require.Len(t, toolResults(turn, id), 1)
		issued := false
		for _, ev := range turn.Context {
			for _, c := range ev.GetAssistantMsg().GetToolCalls() {
				issued = issued || c.GetId() == id
			}
			if tr := ev.GetToolResult(); tr != nil {
				require.True(t, issued, "a result at seq %d without its call", ev.GetSeq())
			}
		}
	})
}
