package tests

import (
	"context"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/actors"
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

// TestRowFollowsTheLogThroughAMessageWhileAHumanCallIsOpen: a human call
// is opened, a user message is sent while it is open, the call is
// answered, and the turn ends. After each step the conversation row
// (status and fsm_state) says what the log says: the message sent while
// the call is open leaves the conversation suspended on it (the model is
// not called: its result is owed first), and once the answer is recorded
// the row is active with nothing pending while the model answers. The
// send wrote the row ACTIVE with awaiting_input, and the answer's write
// left that cache, naming the answered call, until the turn ended.
func TestRowFollowsTheLogThroughAMessageWhileAHumanCallIsOpen(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), nil)
		ctx := ctxT(t)
		id := h.suspendOne("c")
		requireRowFollowsTheLog(t, h, "c", messages.ConversationStatus_CONVERSATION_STATUS_SUSPENDED, "human call opened")

		_, err := h.rt.Send(ctx, "c", "and please hurry", user)
		require.NoError(t, err)
		require.Equal(t, 1, h.model.Calls("c"), "the model waits for the call's result")
		requireRowFollowsTheLog(t, h, "c", messages.ConversationStatus_CONVERSATION_STATUS_SUSPENDED, "message sent while the call is open")

		entered := h.model.Hold("c")
		h.model.Push("c", scripted.Text("refunded"))
		require.NoError(t, h.rt.Resolve(ctx, id, `{"approved":true}`, user))
		awaitEntered(t, entered, "answer given")
		requireRowFollowsTheLog(t, h, "c", messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE, "answer given, the model answering")

		h.model.Release("c")
		h.awaitEvent("c", 0, isAssistantText("refunded"))
		requireRowFollowsTheLog(t, h, "c", messages.ConversationStatus_CONVERSATION_STATUS_IDLE, "turn ended")
		require.Equal(t, []string{"user_msg", "assistant_msg", "tool_call:approve_refund", "suspension", "user_msg",
			"resolution:TOOL_CALL_STATUS_RESOLVED", "tool_result:approve_refund", "assistant_msg"}, types(h.history("c")))
	})
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

// TestKillAfterAMessageWhileAHumanCallIsOpenCancelsNoTurn: a user message
// sent while a human call is open starts no turn (the model waits for the
// call's result), so a Kill then cancels none: subscribers see no
// TurnCancelled end, and the next end is the answer the model gives once
// the call is answered. The row said ACTIVE after the message, and Kill,
// which reads it, told subscribers the turn was cancelled although it then
// ran to its answer.
func TestKillAfterAMessageWhileAHumanCallIsOpenCancelsNoTurn(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), nil)
		ctx := ctxT(t)
		id := h.suspendOne("c", scripted.Text("refunded"))
		seq, err := h.rt.Send(ctx, "c", "and please hurry", user)
		require.NoError(t, err)
		sub, err := h.rt.Subscribe(ctx, "c", seq)
		require.NoError(t, err)
		require.True(t, h.rt.Kill("c"))
		require.NoError(t, h.rt.Resolve(ctx, id, `{"approved":true}`, user))
		u := h.awaitUpdate(sub, func(u actors.Update) bool { return u.TurnEnd != nil })
		require.Equal(t, actors.TurnAnswered, u.TurnEnd.Outcome, "the first end after the message: %+v", u.TurnEnd)
		require.Equal(t, "refunded", u.TurnEnd.Text)
		requireRowFollowsTheLog(t, h, "c", messages.ConversationStatus_CONVERSATION_STATUS_IDLE, "turn ended")
	})
}

// TestLostAnswerDeliveryIsResumedAfterAMessage: a human answer is durable
// in its call's row, with the row's status ACTIVE (what Resolve and an
// expiry write), but its delivery to the conversation is lost, as when the
// process dies between the two. Meanwhile the live activation, which
// still sees the call open, writes a user message, which leaves the
// conversation suspended as the activation sees it. That write keeps the
// row ACTIVE, so the next Open resumes the conversation with no command,
// records the answer and runs the turn (RELIABILITY.md, guarantee 6); had
// it restated SUSPENDED over the answer's ACTIVE, the answer would wait
// for a command that may never come.
func TestLostAnswerDeliveryIsResumedAfterAMessage(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		store := openStore(t, kind)
		h := newHarness(t, store, nil)
		ctx := ctxT(t)
		id := h.suspendOne("c")

		// What Resolve writes, without its delivery.
		_, err := store.Append(ctx, &messages.AppendRequest{ConversationId: "c", Unfenced: true,
			Status: messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE,
			Resolutions: []*messages.ToolResolution{{ToolCallId: id, Status: messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED,
				Result: &messages.ToolOutcome{Outcome: &messages.ToolOutcome_Content{Content: `{"approved":true}`}},
				At:     journal.Timestamp(h.clock.Now()), By: user.Identity().Proto()}}})
		require.NoError(t, err)
		_, err = h.rt.Send(ctx, "c", "and please hurry", user)
		require.NoError(t, err)
		row, err := store.Conversation(ctx, "c")
		require.NoError(t, err)
		require.Equal(t, messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE, row.GetStatus(), "an answer is owed its recording")
		require.NoError(t, h.rt.Close())

		model2 := scripted.New(scripted.Options{})
		model2.Push("c", scripted.Text("after the restart"))
		h2 := newHarness(t, store, func(o *lazarus.Options) { o.Model = model2 })
		// No command: Open's resume records the answer and runs the turn.
		h2.awaitEvent("c", 0, isAssistantText("after the restart"))
		require.Equal(t, []string{"user_msg", "assistant_msg", "tool_call:approve_refund", "suspension", "user_msg",
			"resolution:TOOL_CALL_STATUS_RESOLVED", "tool_result:approve_refund", "assistant_msg"}, types(h2.history("c")))
		requireRowFollowsTheLog(t, h2, "c", messages.ConversationStatus_CONVERSATION_STATUS_IDLE, "turn ended")
	})
}

// TestRowFollowsTheLogAsHumanCallsAreAnsweredOneByOne: two human calls
// are open; the first is answered while the conversation is live, the
// second once it was killed. The row says what the log says after each:
// SUSPENDED awaiting the second call, then ACTIVE with nothing pending
// while the model answers, then IDLE.
func TestRowFollowsTheLogAsHumanCallsAreAnsweredOneByOne(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), nil)
		ctx := ctxT(t)
		h.model.Push("c", scripted.Reply("two approvals",
			scripted.Call("approve_refund", `{"amount":5}`), scripted.Call("approve_refund", `{"amount":7}`)))
		_, err := h.rt.Send(ctx, "c", "refund twice", user)
		require.NoError(t, err)
		pending := h.awaitEvent("c", 0, isSuspension).GetSuspension().GetPending()
		require.Len(t, pending, 2)
		first, second := pending[0].GetToolCallId(), pending[1].GetToolCallId()
		requireRowFollowsTheLog(t, h, "c", messages.ConversationStatus_CONVERSATION_STATUS_SUSPENDED, "two human calls opened")

		require.NoError(t, h.rt.Resolve(ctx, first, `{"approved":true}`, user))
		h.awaitEvent("c", 0, func(ev *messages.Event) bool { return ev.GetToolResult().GetToolCallId() == first })
		requireRowFollowsTheLog(t, h, "c", messages.ConversationStatus_CONVERSATION_STATUS_SUSPENDED, "first call answered")

		require.True(t, h.rt.Kill("c"))
		entered := h.model.Hold("c")
		h.model.Push("c", scripted.Text("both refunded"))
		require.NoError(t, h.rt.Resolve(ctx, second, `{"approved":true}`, user))
		awaitEntered(t, entered, "second call answered")
		requireRowFollowsTheLog(t, h, "c", messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE, "second call answered, the model answering")

		h.model.Release("c")
		h.awaitEvent("c", 0, isAssistantText("both refunded"))
		requireRowFollowsTheLog(t, h, "c", messages.ConversationStatus_CONVERSATION_STATUS_IDLE, "turn ended")
	})
}

// TestRowFollowsTheLogThroughRewindAndEdit: while a human call is open and
// a message was sent after it, a rewind to the first message (which
// cancels the call) leaves the row IDLE with nothing pending; an edit of
// that message then makes it ACTIVE while the model answers, and IDLE
// once it answered. After each step the row says what the log says.
func TestRowFollowsTheLogThroughRewindAndEdit(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), nil)
		ctx := ctxT(t)
		h.suspendOne("c")
		_, err := h.rt.Send(ctx, "c", "and please hurry", user)
		require.NoError(t, err)
		requireRowFollowsTheLog(t, h, "c", messages.ConversationStatus_CONVERSATION_STATUS_SUSPENDED, "message sent while the call is open")

		require.NoError(t, h.rt.Rewind(ctx, "c", 1, lazarus.RewindOptions{}, user))
		requireRowFollowsTheLog(t, h, "c", messages.ConversationStatus_CONVERSATION_STATUS_IDLE, "rewound to the first message")

		entered := h.model.Hold("c")
		h.model.Push("c", scripted.Text("edited answer"))
		_, err = h.rt.Edit(ctx, "c", 1, "refund 9", user)
		require.NoError(t, err)
		awaitEntered(t, entered, "edited")
		requireRowFollowsTheLog(t, h, "c", messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE, "edited, the model answering")

		h.model.Release("c")
		h.awaitEvent("c", 0, isAssistantText("edited answer"))
		requireRowFollowsTheLog(t, h, "c", messages.ConversationStatus_CONVERSATION_STATUS_IDLE, "turn ended")
	})
}

// dyingStore stands for a process killed right after one write lands: once
// armed, the first batch that commits a request of conv stating SUSPENDED
// is committed, and every write after it fails, as nothing more of that
// process reaches the Store.
type dyingStore struct {
	journal.Store
	conv string
	mu   sync.Mutex
	arm  bool
	dead chan struct{}
}

func (d *dyingStore) isDead() bool {
	select {
	case <-d.dead:
		return true
	default:
		return false
	}
}

func (d *dyingStore) AppendBatch(ctx context.Context, reqs []*messages.AppendRequest) []journal.AppendResult {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.isDead() {
		out := make([]journal.AppendResult, len(reqs))
		for i := range out {
			out[i].Err = journal.ErrUnavailable
		}
		return out
	}
	res := d.Store.AppendBatch(ctx, reqs)
	for i, r := range reqs {
		if d.arm && r.GetConversationId() == d.conv && res[i].Err == nil &&
			r.GetStatus() == messages.ConversationStatus_CONVERSATION_STATUS_SUSPENDED {
			close(d.dead)
			break
		}
	}
	return res
}

func (d *dyingStore) Append(ctx context.Context, req *messages.AppendRequest) (journal.AppendResult, error) {
	res := d.AppendBatch(ctx, []*messages.AppendRequest{req})
	return res[0], res[0].Err
}

// TestAnswerOverwrittenBySuspendedWriteIsResumedAfterAKill: two human
// calls are open; the answer to the second is durable (its row resolved,
// the conversation row ACTIVE), then the live activation records the
// answer to the first, stating SUSPENDED since the second is open in its
// view, and the process dies right after that write lands, before the
// second answer is delivered. The Store wrote ACTIVE, not SUSPENDED (a
// call the write names pending is answered: journal.StatusWritten), so
// the next Open resumes the conversation with no command, records the
// second answer and runs the turn (RELIABILITY.md, guarantee 6). The
// write used to leave the row SUSPENDED, and the answer waited for the
// conversation's next command; no step of the activation after the write
// could have closed that, as the process may die right after it lands.
func TestAnswerOverwrittenBySuspendedWriteIsResumedAfterAKill(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		inner := openStore(t, kind)
		store := &dyingStore{Store: inner, conv: "c", dead: make(chan struct{})}
		h := newHarness(t, store, nil)
		ctx := ctxT(t)
		h.model.Push("c", scripted.Reply("two approvals",
			scripted.Call("approve_refund", `{"amount":5}`), scripted.Call("approve_refund", `{"amount":7}`)))
		_, err := h.rt.Send(ctx, "c", "refund twice", user)
		require.NoError(t, err)
		pending := h.awaitEvent("c", 0, isSuspension).GetSuspension().GetPending()
		require.Len(t, pending, 2)
		first, second := pending[0].GetToolCallId(), pending[1].GetToolCallId()

		// What Resolve(second) writes, its delivery not made.
		_, err = inner.Append(ctx, &messages.AppendRequest{ConversationId: "c", Unfenced: true,
			Status: messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE,
			Resolutions: []*messages.ToolResolution{{ToolCallId: second, Status: messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED,
				Result: &messages.ToolOutcome{Outcome: &messages.ToolOutcome_Content{Content: `{"approved":true}`}},
				At:     journal.Timestamp(h.clock.Now()), By: user.Identity().Proto()}}})
		require.NoError(t, err)

		store.mu.Lock()
		store.arm = true
		store.mu.Unlock()
		require.NoError(t, h.rt.Resolve(ctx, first, `{"approved":true}`, user))
		select {
		case <-store.dead:
		case <-ctx.Done():
			t.Fatal("the activation never recorded the first answer")
		}
		require.NoError(t, h.rt.Close())

		row, err := inner.Conversation(ctx, "c")
		require.NoError(t, err)
		require.Equal(t, messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE, row.GetStatus(),
			"the write stating SUSPENDED over a durable answer not in the log wrote ACTIVE")

		model2 := scripted.New(scripted.Options{})
		model2.Push("c", scripted.Text("both refunded"))
		h2 := newHarness(t, inner, func(o *lazarus.Options) { o.Model = model2 })
		// No command: Open's resume records the second answer and runs the turn.
		h2.awaitEvent("c", 0, isAssistantText("both refunded"))
	})
}
