package tests

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/snapshot"
)

// requireRowFollowsTheLog reads the conversation row as the demo and
// export read it (Store().Conversation) and checks it against the log: the
// status is want, and the fsm_state cache is what the log implies at its
// last seq: last_seq is the log's, pending names exactly the calls open in
// the log, and the state is awaiting_input exactly when one of them is a
// human's (idle otherwise). Call it only where no write of the
// conversation is under way.
func requireRowFollowsTheLog(t *testing.T, h *harness, conv string, want messages.ConversationStatus, step string) {
	t.Helper()
	ctx := ctxT(t)
	row, err := h.rt.Store().Conversation(ctx, conv)
	require.NoError(t, err, step)
	evs, err := h.rt.Store().Events(ctx, conv, journal.EventQuery{})
	require.NoError(t, err, step)
	ws, err := snapshot.Rebuild(nil, evs)
	require.NoError(t, err, step)

	state, open := messages.AgentState_AGENT_STATE_IDLE, []string{}
	for _, call := range ws.OpenCalls() {
		open = append(open, call.GetCall().GetId())
		if call.GetExecutor() == messages.Executor_EXECUTOR_HUMAN {
			state = messages.AgentState_AGENT_STATE_AWAITING_INPUT
		}
	}
	st := row.GetFsmState()
	require.Equal(t, want, row.GetStatus(), "%s: the row's status", step)
	require.Equal(t, state, st.GetState(), "%s: the cached state (row %v)", step, st)
	require.ElementsMatch(t, open, slices.Collect(maps.Keys(st.GetPending())), "%s: the cached pending calls are the log's open calls", step)
	require.Equal(t, ws.LastSeq, st.GetLastSeq(), "%s: the cache is as of the log's last seq", step)
}

// awaitEntered waits for the model call held by Hold to start.
func awaitEntered(t *testing.T, entered <-chan struct{}, step string) {
	t.Helper()
	select {
	case <-entered:
	case <-time.After(wait):
		t.Fatalf("%s: no model call within %v", step, wait)
	}
}

// TestRowFollowsTheLogAfterAnAnswerToADeadConversation: a human call is
// answered (by Resolve, by Reject, or by its deadline passing) while the
// conversation has no live actor; the activation revived to record the
// answer leaves the row active with nothing pending while the model
// answers, and idle once the turn ends. The answer's own write had already
// made the row ACTIVE, so the revived activation, taking the row for one
// it need not rewrite, left the cache at awaiting_input with the answered
// call pending for the rest of the turn.
func TestRowFollowsTheLogAfterAnAnswerToADeadConversation(t *testing.T) {
	answers := map[string]func(ctx context.Context, h *harness, id string) error{
		"resolve": func(ctx context.Context, h *harness, id string) error {
			return h.rt.Resolve(ctx, id, `{"approved":true}`, user)
		},
		"reject": func(ctx context.Context, h *harness, id string) error {
			return h.rt.Reject(ctx, id, "not today", user)
		},
		"expiry": func(ctx context.Context, h *harness, id string) error {
			h.clock.Advance(time.Hour) // the tool's Timeout
			return nil
		},
	}
	for _, how := range []string{"resolve", "reject", "expiry"} {
		t.Run(how, func(t *testing.T) {
			forEachStore(t, func(t *testing.T, kind string) {
				h := newHarness(t, openStore(t, kind), nil)
				ctx := ctxT(t)
				id := h.suspendOne("c")
				require.True(t, h.rt.Kill("c"))
				requireRowFollowsTheLog(t, h, "c", messages.ConversationStatus_CONVERSATION_STATUS_SUSPENDED, "human call opened, actor killed")

				entered := h.model.Hold("c")
				h.model.Push("c", scripted.Text("done"))
				require.NoError(t, answers[how](ctx, h, id))
				awaitEntered(t, entered, "answered")
				requireRowFollowsTheLog(t, h, "c", messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE, "answered, the model answering")

				h.model.Release("c")
				h.awaitEvent("c", 0, isAssistantText("done"))
				requireRowFollowsTheLog(t, h, "c", messages.ConversationStatus_CONVERSATION_STATUS_IDLE, "turn ended")
			})
		})
	}
}
