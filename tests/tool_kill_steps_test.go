package tests

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/messages"
)

// The steps of a server call a kill or a lost write can cut, each with its
// test: the answer opening the call not yet durable
// (TestAnswerWithACallOfUnknownOutcome, not landed); durable but not yet run
// (the same, landed); running (TestCrashMidToolRedispatchesSameID); run but
// its result not durable (TestServerResultOfUnknownOutcome, not landed);
// its result durable, the model not yet answered
// (TestRevivalAfterAServerResultCallsOnlyTheModel).

func isCallAnswer(ev *messages.Event) bool { return ev.GetToolCall() != nil }

// TestAnswerWithACallOfUnknownOutcome: the write of a model answer that
// opens a server call ends with journal.ErrUnknownOutcome. Not landed: the
// tool never ran (a call runs only once its tool_call is durable), the
// re-woken activation asks the model again, and the call it makes runs
// once under its own id. Landed: the re-woken activation finds the call
// open in the log and runs it once under that id, and the model is not
// asked again for the decision.
func TestAnswerWithACallOfUnknownOutcome(t *testing.T) {
	for _, landed := range []bool{true, false} {
		t.Run(fmt.Sprintf("landed=%v", landed), func(t *testing.T) {
			forEachStore(t, func(t *testing.T, kind string) {
				store := &faultStore{Store: openStore(t, kind), err: errLostCommit, landed: landed, match: isCallAnswer, fail: 1}
				h := newHarness(t, store, func(o *lazarus.Options) { o.NoResume = true })
				ctx := ctxT(t)
				h.model.Push("c", scripted.Reply("charging", scripted.Call("charge", `{"amount":5}`)))
				if !landed {
					// The model asked again for the lost answer's decision.
					h.model.Push("c", scripted.Reply("charging again", scripted.Call("charge", `{"amount":5}`)))
				}
				h.model.Push("c", scripted.Text("charged"))
				_, err := h.rt.Send(ctx, "c", "charge me", user)
				require.NoError(t, err)
				h.awaitEvent("c", 0, isAssistantText("charged"))
				require.Equal(t, int32(1), store.lost.Load(), "the answer's write was reported unknown")

				evs := h.history("c")
				require.Equal(t, []string{"user_msg", "assistant_msg", "tool_call:charge", "tool_result:charge", "assistant_msg"}, types(evs),
					"one call in the log, answered once")
				id := evs[2].GetToolCall().GetCall().GetId()
				require.Equal(t, []string{id}, h.runs.of("charge"), "the durable call ran once, under its id; no other call ran")
				calls := 2 // the answer that landed, the final one
				if !landed {
					calls = 3 // the lost answer, asked again, the final one
				}
				require.Equal(t, calls, h.model.Calls("c"))
				wantText := "charging"
				if !landed {
					wantText = "charging again"
				}
				require.True(t, isAssistantText(wantText)(evs[1]), "the answer in the log is %q", wantText)

				// One more turn: a late extra run or model call would come
				// before its end.
				h.model.Push("c", scripted.Text("later"))
				_, err = h.rt.SendAndWait(ctx, "c", "and now?", user)
				require.NoError(t, err)
				require.Equal(t, calls+1, h.model.Calls("c"), "no extra model call")
				require.Equal(t, []string{id}, h.runs.of("charge"), "no extra run")
				row, err := h.rt.Store().ToolCall(ctx, id)
				require.NoError(t, err)
				require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED, row.GetStatus())
			})
		})
	}
}

// TestRevivalAfterAServerResultCallsOnlyTheModel: killed while the model
// is called after a server tool's result is durable, the revived
// activation calls the model again once and does not run the tool again;
// the log holds the result and the answer once.
func TestRevivalAfterAServerResultCallsOnlyTheModel(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), nil)
		h.chargeGate = make(chan struct{})
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
		entered := h.model.Hold("c") // the call after the result
		close(h.chargeGate)
		select {
		case <-entered:
		case <-ctx.Done():
			t.Fatal("the model was not called after the result")
		}
		require.True(t, slices.Contains(types(h.history("c")), "tool_result:charge"), "the result is durable before the model is called")
		require.True(t, h.rt.Kill("c"), "killed while the model answers the result")

		require.NoError(t, h.rt.Wake(ctx, "c"))
		h.awaitEvent("c", 0, isAssistantText("charged"))
		require.Equal(t, []string{id}, h.runs.of("charge"), "the tool is not run again")
		require.Equal(t, 3, h.model.Calls("c"), "the interrupted call, and its re-run")
		require.Equal(t, []string{"user_msg", "assistant_msg", "tool_call:charge", "tool_result:charge", "assistant_msg"}, types(h.history("c")))
	})
}
