package tests

import (
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

// Logs damaged by hand edits, imports or writers other than the runtime,
// each written through the Store directly (each write valid), then served
// by a runtime.

// damagedLog appends evs to conversation c as one write of a Store
// writer, the conversation IDLE.
func damagedLog(t *testing.T, store journal.Store, evs ...*messages.Event) {
	t.Helper()
	now := journal.Timestamp(time.Date(2026, 11, 1, 8, 0, 0, 0, time.UTC))
	for _, ev := range evs {
		ev.Time = now
		if ev.GetUserMsg() != nil {
			ev.Author = user.Identity().Proto()
		}
	}
	_, err := store.Append(ctxT(t), &messages.AppendRequest{ConversationId: "c",
		Status: messages.ConversationStatus_CONVERSATION_STATUS_IDLE, Events: evs})
	require.NoError(t, err)
}

func userEv(text string) *messages.Event {
	return &messages.Event{Body: &messages.Event_UserMsg{UserMsg: agent.UserMessage(agent.TextPart(text))}}
}

func assistantEv(text string, ids ...string) *messages.Event {
	a := agent.Reply(text)
	for _, id := range ids {
		a.ToolCalls = append(a.ToolCalls, &messages.ToolCall{Id: id, Name: "lookup_order", Arguments: `{"id":1}`})
	}
	return &messages.Event{Body: &messages.Event_AssistantMsg{AssistantMsg: a}}
}

func resultEv(id string) *messages.Event {
	return &messages.Event{Body: &messages.Event_ToolResult{ToolResult: &messages.ToolResultEvent{ToolCallId: id, Name: "lookup_order",
		Outcome: &messages.ToolOutcome{Outcome: &messages.ToolOutcome_Content{Content: `{"order":1}`}}}}}
}

// TestDamagedCallWithoutItsToolCallEventCompacts: a call an assistant
// message names with no tool_call event is owed nothing (nothing
// dispatched it): it does not run, the model reads a result of code
// missing for it, and summaries end after it again. It stayed open for
// SafePoint for good, so no summary could end after it: the conversation
// never compacted again.
func TestDamagedCallWithoutItsToolCallEventCompacts(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		store := openStore(t, kind)
		damagedLog(t, store, userEv("refund"), assistantEv("", "call-bare-1"))
		h := newHarness(t, store, func(o *lazarus.Options) {
			o.Summarizer = snapshot.Deterministic{}
			o.Summary = snapshot.Policy{MaxEvents: 3, MaxTokens: -1, KeepRecent: 1}
		})
		ctx := ctxT(t)
		h.model.Push("c", scripted.Text("done"))
		end, err := h.rt.SendAndWait(ctx, "c", "and?", user)
		require.NoError(t, err)
		require.Equal(t, "done", end.Text)
		require.Eventually(t, func() bool {
			s, err := store.LatestSummary(ctx, "c")
			return err == nil && s.GetToSeq() >= 3
		}, wait, time.Millisecond, "a summary ends after the call")
		res := toolResults(h.model.Turns("c")[0], "call-bare-1")
		require.Len(t, res, 1)
		require.Equal(t, agent.CodeMissing, res[0].GetError().GetCode())
		require.Empty(t, h.runs.of("lookup_order"), "nothing runs it")
	})
}

// TestDamagedOrphanResultAtTheEndOwesNoTurn: a log that ends in a tool
// result whose call is nowhere (the model's context leaves it out) owes
// no model turn: a wake calls no model, and the next message's turn is the
// first. The revival owed a turn for it and called the model for nothing.
func TestDamagedOrphanResultAtTheEndOwesNoTurn(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		store := openStore(t, kind)
		damagedLog(t, store, userEv("hi"), assistantEv("hello"), resultEv("call-ghost-1"))
		h := newHarness(t, store, nil)
		ctx := ctxT(t)
		h.model.Push("c", scripted.Text("answer"))
		require.NoError(t, h.rt.Wake(ctx, "c"))
		end, err := h.rt.SendAndWait(ctx, "c", "next", user)
		require.NoError(t, err)
		require.Equal(t, "answer", end.Text)
		require.Equal(t, 1, h.model.Calls("c"), "only the new message's turn")
		require.Empty(t, toolResults(h.model.Turns("c")[0], "call-ghost-1"))
	})
}

// TestDamagedCallIDInTwoMessages: a call id that two assistant messages
// make is sent once, in the first (OpenAI and Anthropic refuse a context
// that holds an id twice), answered by the log's result; a message that
// held only that call is left out. The context held the id twice, and
// every later turn would be refused.
func TestDamagedCallIDInTwoMessages(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		store := openStore(t, kind)
		damagedLog(t, store, userEv("look"), assistantEv("", "call-dup-1"), resultEv("call-dup-1"),
			assistantEv("", "call-dup-1"), assistantEv("found it"))
		h := newHarness(t, store, nil)
		ctx := ctxT(t)
		h.model.Push("c", scripted.Text("answer"))
		_, err := h.rt.SendAndWait(ctx, "c", "next", user)
		require.NoError(t, err)
		turn := h.model.Turns("c")[0]
		made := map[string]int{}
		answered := map[string]int{}
		for _, ev := range turn.Context {
			for _, tc := range ev.GetAssistantMsg().GetToolCalls() {
				made[agent.CallID(tc)]++
			}
			if tr := ev.GetToolResult(); tr != nil {
				require.Equal(t, 1, made[tr.GetToolCallId()], "a result at seq %d answers a call made once", ev.GetSeq())
				answered[tr.GetToolCallId()]++
			}
		}
		require.Equal(t, map[string]int{"call-dup-1": 1}, made)
		require.Equal(t, map[string]int{"call-dup-1": 1}, answered)
		require.Equal(t, `{"order":1}`, toolResults(turn, "call-dup-1")[0].GetContent(), "the log's result")
	})
}

// TestDamagedNamedAgentsOrphanResultOwesNoTurn: with named agents, a
// log whose agent's last event is a tool result whose call is nowhere owes
// that agent no turn: a wake calls neither model, and the next message's
// turn is the first.
func TestDamagedNamedAgentsOrphanResultOwesNoTurn(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		store := openStore(t, kind)
		evs := []*messages.Event{userEv("hi"), assistantEv("hello"), resultEv("call-ghost-1")}
		for _, ev := range evs {
			ev.Agent = "critic"
		}
		damagedLog(t, store, evs...)
		crit := scripted.New(scripted.Options{})
		h := newHarness(t, store, withCritic(crit))
		ctx := ctxT(t)
		h.model.Push("c", scripted.Text("answer"))
		require.NoError(t, h.rt.Wake(ctx, "c"))
		end, err := h.rt.SendAndWait(ctx, "c", "next", user)
		require.NoError(t, err)
		require.Equal(t, "answer", end.Text)
		require.Equal(t, 1, h.model.Calls("c"), "only the new message's turn")
		require.Zero(t, crit.Calls("c"), "the critic owes no turn")
	})
}
