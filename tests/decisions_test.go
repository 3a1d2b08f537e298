package tests

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/snapshot"
)

// TestFSMStatePendingCarriesThePrompt: each pending entry of the fsm_state
// cache is {executor, kind, prompt}, the prompt being what the row says the
// human is asked; both when the answer that asks is written and when a
// revived activation rewrites the cache (one of two calls answered while
// the conversation was dead).
func TestFSMStatePendingCarriesThePrompt(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), nil)
		ctx := ctxT(t)
		h.model.Push("c", scripted.Reply("two approvals",
			scripted.Call("approve_refund", `{"amount":5}`), scripted.Call("approve_refund", `{"amount":7}`)))
		_, err := h.rt.Send(ctx, "c", "refund twice", user)
		require.NoError(t, err)
		pending := h.awaitEvent("c", 0, isSuspension).GetSuspension().GetPending()
		require.Len(t, pending, 2)

		requirePending := func(ids ...string) {
			t.Helper()
			conv, err := h.store.Conversation(ctx, "c")
			require.NoError(t, err)
			st := conv.GetFsmState()
			require.Equal(t, messages.AgentState_AGENT_STATE_AWAITING_INPUT, st.GetState())
			require.Len(t, st.GetPending(), len(ids))
			for _, id := range ids {
				row, err := h.store.ToolCall(ctx, id)
				require.NoError(t, err)
				require.NotEmpty(t, row.GetPrompt())
				p := st.GetPending()[id]
				require.NotNil(t, p, "call %s is pending", id)
				require.Equal(t, row.GetPrompt(), p.GetPrompt(), "the cache carries the row's prompt")
				require.Equal(t, messages.Executor_EXECUTOR_HUMAN, p.GetExecutor())
				require.Equal(t, "approve_refund", p.GetKind())
			}
		}
		first, second := pending[0].GetToolCallId(), pending[1].GetToolCallId()
		requirePending(first, second)

		// Answered while the conversation is dead: the revived activation
		// records the answer and rewrites the cache from what it revived.
		require.True(t, h.rt.Kill("c"))
		require.NoError(t, h.rt.Resolve(ctx, first, `{"approved":true}`, user))
		h.awaitEvent("c", 0, func(ev *messages.Event) bool { return ev.GetToolResult().GetToolCallId() == first })
		requirePending(second)
	})
}

// sendRetries sends one message n times at once with request id rid, as a
// client retrying after timeouts does, and returns the seqs it was answered
// with.
func sendRetries(t *testing.T, h *harness, conv, rid string, n int) []uint64 {
	t.Helper()
	ctx := ctxT(t)
	msg := &messages.UserMessage{Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: "pay " + rid}}}}
	seqs, errs := make([]uint64, n), make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			seqs[i], errs[i] = h.rt.SendMessage(ctx, conv, msg, lazarus.SendOptions{RequestID: rid}, user)
		})
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	return seqs
}

// requireAppendedOnce checks that every request id of seqs is in the log
// once, at the seq each of its sends was answered with.
func requireAppendedOnce(t *testing.T, h *harness, conv string, seqs map[string][]uint64) {
	t.Helper()
	at := map[string][]uint64{}
	for _, ev := range h.history(conv) {
		if rid := ev.GetRequestId(); rid != "" {
			at[rid] = append(at[rid], ev.GetSeq())
		}
	}
	for rid, got := range seqs {
		require.Len(t, at[rid], 1, "request %s appended once", rid)
		for _, seq := range got {
			require.Equal(t, at[rid][0], seq, "every send of request %s answered with its seq", rid)
		}
	}
}

// TestConcurrentRetriesAppendOnce: twenty concurrent sends with one request
// id to a new conversation append one user_msg, and all are answered with
// its seq. Retries that arrived while the first copy was being written
// were appended again: the duplicate check looked only at the sends seen
// and queued, not at those of the write in flight.
func TestConcurrentRetriesAppendOnce(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), nil)
		seqs := map[string][]uint64{}
		for round := range 5 {
			conv := fmt.Sprint("c", round)
			requireAppendedOnce(t, h, conv, map[string][]uint64{"pay": sendRetries(t, h, conv, "pay", 20)})
		}
		// And on a live conversation.
		for round := range 5 {
			rid := fmt.Sprint("again-", round)
			seqs[rid] = sendRetries(t, h, "c0", rid, 20)
		}
		requireAppendedOnce(t, h, "c0", seqs)
	})
}

// TestConcurrentRetriesAppendOnceAcrossKillsAndSummaries: concurrent
// retries of a send, interleaved with kills of the conversation and with
// summaries folding the messages away, append each message once.
func TestConcurrentRetriesAppendOnceAcrossKillsAndSummaries(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), func(o *lazarus.Options) {
			o.Summarizer = snapshot.Deterministic{}
			o.Summary = snapshot.Policy{MaxEvents: 4, KeepRecent: -1}
		})
		seqs := map[string][]uint64{}
		for round := range 8 {
			rid := fmt.Sprint("pay-", round)
			var wg sync.WaitGroup
			wg.Go(func() { seqs[rid] = sendRetries(t, h, "c", rid, 20) })
			if round%2 == 1 {
				h.rt.Kill("c") // at whatever point the sends have reached
			}
			wg.Wait()
			// Retries after the fact, once a summary may have folded it away.
			again := sendRetries(t, h, "c", rid, 5)
			seqs[rid] = append(seqs[rid], again...)
		}
		requireAppendedOnce(t, h, "c", seqs)
		require.Eventually(t, func() bool {
			s, err := h.store.LatestSummary(ctxT(t), "c")
			return err == nil && s.GetToSeq() > 0
		}, wait, time.Millisecond, "summaries were written")
	})
}

// scopeSeen is a run of a probe tool: which conversation, under which scope.
type scopeSeen struct {
	conv  string
	scope agent.Scope
}

// probeTools are server tools that report the scope each run gets: probe
// returns at once, slow_probe runs until its context ends, user_probe
// requires a user (so it runs only under one).
func probeTools(seen chan<- scopeSeen) []agent.Tool {
	run := func(block bool) func(context.Context, agent.Invocation) (string, error) {
		return func(ctx context.Context, inv agent.Invocation) (string, error) {
			seen <- scopeSeen{conv: inv.ConversationID, scope: inv.Scope}
			if block {
				<-ctx.Done()
				return "", ctx.Err()
			}
			return `{}`, nil
		}
	}
	return []agent.Tool{
		{Name: "probe", Description: "reports its scope", Executor: messages.Executor_EXECUTOR_SERVER, Run: run(false)},
		{Name: "slow_probe", Description: "reports its scope, then runs until cancelled", Executor: messages.Executor_EXECUTOR_SERVER, Run: run(true)},
		{Name: "user_probe", Description: "reports the user's scope", Executor: messages.Executor_EXECUTOR_SERVER, RequiresUser: true, Run: run(false)},
	}
}

// TestResumedWorkNeverRunsWithAZeroScope: work the runtime resumes on its
// own runs under agent.SystemScope (no ScopeLoader here), and work a send
// causes runs under that send's scope, whatever the race between a revival and the
// command that woke it (which was lost intermittently: a zero Scope). The
// cases of the report: a server call re-dispatched after Kill and Wake, the
// turn after an expiry on a killed conversation, and the next tool that
// requires a user after a Resolve on a killed conversation (it works for
// the requester, not for the resolver).
func TestResumedWorkNeverRunsWithAZeroScope(t *testing.T) {
	seen := make(chan scopeSeen, 64)
	h := newHarness(t, openStore(t, "memory"), func(o *lazarus.Options) {
		o.Tools = append(o.Tools, probeTools(seen)...)
	})
	ctx := ctxT(t)
	next := func(conv string) agent.Scope {
		t.Helper()
		select {
		case s := <-seen:
			require.Equal(t, conv, s.conv)
			require.NotEqual(t, agent.Scope{}, s.scope, "never a zero Scope")
			return s.scope
		case <-ctx.Done():
			t.Fatalf("conversation %q: no tool run", conv)
			return agent.Scope{}
		}
	}

	// Re-dispatched after Kill and Wake: the wake is the runtime's own.
	h.model.Push("a", scripted.Reply("", scripted.Call("slow_probe", `{}`)))
	_, err := h.rt.Send(ctx, "a", "probe slowly", user)
	require.NoError(t, err)
	require.Equal(t, user, next("a"))
	for range 20 {
		require.True(t, h.rt.Kill("a"))
		require.NoError(t, h.rt.Wake(ctx, "a"))
		require.Equal(t, agent.SystemScope, next("a"))
	}

	// The turn after an expiry on a killed conversation.
	h.model.Push("b", scripted.Reply("", scripted.Call("approve_refund", `{}`)), scripted.Reply("", scripted.Call("probe", `{}`)))
	_, err = h.rt.Send(ctx, "b", "refund", user)
	require.NoError(t, err)
	id := pendingCallID(t, h.awaitEvent("b", 0, isSuspension))
	require.True(t, h.rt.Kill("b"))
	h.awaitDeadlineArmed(id)
	h.clock.Advance(time.Hour)
	require.Equal(t, agent.SystemScope, next("b"))

	// A human answers a killed conversation: the tools go on working for
	// the requester, never as the answering user. With no ScopeLoader to
	// rebuild the requester's scope, the tool that needs a user is refused
	// (a tool error the model sees) and does not run.
	h.model.Push("c", scripted.Reply("", scripted.Call("approve_refund", `{}`)), scripted.Reply("", scripted.Call("user_probe", `{}`)))
	_, err = h.rt.Send(ctx, "c", "refund", user)
	require.NoError(t, err)
	id = pendingCallID(t, h.awaitEvent("c", 0, isSuspension))
	require.True(t, h.rt.Kill("c"))
	bob := agent.Scope{UserID: "bob"}
	require.NoError(t, h.rt.Resolve(ctx, id, `{"approved":true}`, bob))
	res := h.awaitEvent("c", 0, func(ev *messages.Event) bool { return ev.GetToolResult().GetName() == "user_probe" })
	require.Equal(t, agent.CodeScope, res.GetToolResult().GetOutcome().GetError().GetCode(), "refused: the system scope is not a user")
	require.Empty(t, seen, "user_probe never ran, and never as bob")
}

// overlapModel answers after 200 ms and returns 300 ms after its context is
// cancelled; it records the most calls of one conversation that ran at once.
type overlapModel struct {
	mu      sync.Mutex
	active  map[string]int
	maxSeen map[string]int
}

func (m *overlapModel) Generate(ctx context.Context, turn agent.Turn, _ func(string)) (*messages.AssistantMessage, error) {
	conv := turn.ConversationID
	m.mu.Lock()
	m.active[conv]++
	m.maxSeen[conv] = max(m.maxSeen[conv], m.active[conv])
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		m.active[conv]--
		m.mu.Unlock()
	}()
	select {
	case <-time.After(200 * time.Millisecond):
		return scripted.Text("answered"), nil
	case <-ctx.Done():
		<-time.After(300 * time.Millisecond) // a provider call slow to tear down
		return nil, ctx.Err()
	}
}

// TestModelCallsNeverOverlapThroughTheRuntime: sends in a row and kills of
// the conversation, with a model slow to return once cancelled: each send
// or kill cancels the call in flight, and the next call of the
// conversation, in the same activation or the next, waits for it to return.
// Generate never runs twice at once for one conversation, and the last
// message is answered.
func TestModelCallsNeverOverlapThroughTheRuntime(t *testing.T) {
	model := &overlapModel{active: map[string]int{}, maxSeen: map[string]int{}}
	h := newHarness(t, openStore(t, "memory"), func(o *lazarus.Options) { o.Model = model })
	ctx := ctxT(t)
	var last uint64
	for i := range 30 {
		seq, err := h.rt.Send(ctx, "c", fmt.Sprint("message ", i), user)
		require.NoError(t, err)
		last = seq
		if i%10 == 9 {
			h.rt.Kill("c")
			require.NoError(t, h.rt.Wake(ctx, "c"))
		}
	}
	h.awaitEvent("c", last, func(ev *messages.Event) bool { return ev.GetAssistantMsg() != nil })
	model.mu.Lock()
	defer model.mu.Unlock()
	require.Equal(t, 1, model.maxSeen["c"], "Generate never runs twice at once for one conversation")
}

// TestRetriedSendRunsTheTurnTheLogOwes: a send whose write landed while
// its activation died before answering (here: the message is in the log,
// and no activation runs) is retried; the retry, the first command of a
// new activation, is answered with the message's seq and runs the turn
// the log owes for it, without another command. (Here the retry reaches
// the activation while it revives; one that arrives after the revival is
// the core's case in actors TestCoreRecoveryRules.)
func TestRetriedSendRunsTheTurnTheLogOwes(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		store := openStore(t, kind)
		h := newHarness(t, store, nil)
		ctx := ctxT(t)
		msg := &messages.UserMessage{Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: "pay"}}}}
		// Scripted first: the resume scan of Open may still be paging and
		// wake the conversation as soon as its row is ACTIVE.
		h.model.Push("c", scripted.Text("paid"))
		// The write of the killed activation, after Open: the conversation
		// has no activation.
		_, err := store.Append(ctx, &messages.AppendRequest{ConversationId: "c",
			Status: messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE,
			Events: []*messages.Event{{
				RequestId: "pay-1", Author: user.Identity().Proto(), Time: journal.Timestamp(time.Now()),
				Body: &messages.Event_UserMsg{UserMsg: msg},
			}}})
		require.NoError(t, err)
		seq, err := h.rt.SendMessage(ctx, "c", msg, lazarus.SendOptions{RequestID: "pay-1"}, user)
		require.NoError(t, err)
		require.Equal(t, uint64(1), seq, "the retry is answered with the seq the log holds")
		h.awaitEvent("c", 0, isAssistantText("paid"))
		requireAppendedOnce(t, h, "c", map[string][]uint64{"pay-1": {seq}})
	})
}
