package tests

import (
	"slices"
	"time"

	"github.com/lazarusrt/lazarus/messages"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
)

// TestConfigureOfAnEndedConversationIsRefused: ending is for good and an
// ended conversation runs no turn, so settings for its turns are refused
// with journal.ErrEnded and nothing is written, by its live activation and
// by a revived one alike.
func TestConfigureOfAnEndedConversationIsRefused(t *testing.T) {
	h := newHarness(t, memjournal.New(memjournal.Options{}), nil)
	ctx := ctxT(t)
	h.model.Push("c", scripted.Text("hi"))
	require.NoError(t, h.rt.Configure(ctx, "c", agent.Settings{SystemPrompt: "before"}))
	_, err := h.rt.SendAndWait(ctx, "c", "hello", user)
	require.NoError(t, err)
	require.NoError(t, h.rt.End(ctx, "c"))

	require.ErrorIs(t, h.rt.Configure(ctx, "c", agent.Settings{SystemPrompt: "after"}), journal.ErrEnded, "live activation")
	h.rt.Kill("c")
	require.ErrorIs(t, h.rt.Configure(ctx, "c", agent.Settings{SystemPrompt: "after"}), journal.ErrEnded, "revived activation")
	s, err := h.rt.Settings(ctx, "c")
	require.NoError(t, err)
	require.Equal(t, "before", s.SystemPrompt, "nothing written")
	require.Len(t, h.history("c"), 2)
}

// TestEndAfterARejectedApprovalOutlivesItsDeadline: End is refused while a
// human approval is pending; once it is answered (rejected), the turn runs
// and End succeeds; the approval's deadline passing later, across a kill,
// writes nothing and calls no model on the ended conversation.
func TestEndAfterARejectedApprovalOutlivesItsDeadline(t *testing.T) {
	h := newHarness(t, memjournal.New(memjournal.Options{}), nil)
	ctx := ctxT(t)
	id := h.suspendOne("c", scripted.Text("not refunded"))
	deadline := h.deadlineOf(id)
	require.ErrorIs(t, h.rt.End(ctx, "c"), journal.ErrInvalid, "an approval is pending")
	require.NoError(t, h.rt.Resolve(ctx, id, `{"approved":false}`, agent.Scope{UserID: "bob"}))
	h.awaitEvent("c", 0, isAssistantText("not refunded"))
	require.NoError(t, h.rt.End(ctx, "c"))
	before := len(h.history("c"))
	calls := h.model.Calls("c")
	h.rt.Kill("c")

	require.Eventually(t, func() bool { return !slices.ContainsFunc(h.clock.Dues(), h.armedFor(deadline).Equal) },
		wait, time.Millisecond, "the answered call's deadline timer is dropped (timers %v)", h.clock.Dues())
	h.clock.Advance(deadline.Sub(h.clock.Now()) + time.Minute)
	_, err := h.rt.Send(ctx, "c", "more", user)
	require.ErrorIs(t, err, journal.ErrEnded)
	require.Len(t, h.history("c"), before, "nothing written after End")
	require.Equal(t, calls, h.model.Calls("c"), "no model call after End")
	row, err := h.store.ToolCall(ctx, id)
	require.NoError(t, err)
	require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED.String(), row.GetStatus().String(), "the answer stands, not an expiry")
}

// TestEndOfAConfiguredConversationBeforeItsFirstMessage: a conversation
// Configure created (idle, no events) is at rest: End ends it, a send is
// then refused with ErrEnded, a Wake runs no turn, its metadata can still be
// merged, and Delete deletes it.
func TestEndOfAConfiguredConversationBeforeItsFirstMessage(t *testing.T) {
	h := newHarness(t, memjournal.New(memjournal.Options{}), nil)
	ctx := ctxT(t)
	require.NoError(t, h.rt.Configure(ctx, "c", agent.Settings{Model: "m1"}))
	require.NoError(t, h.rt.End(ctx, "c"))
	_, err := h.rt.Send(ctx, "c", "hello", user)
	require.ErrorIs(t, err, journal.ErrEnded)
	require.NoError(t, h.rt.Wake(ctx, "c"))
	require.Zero(t, h.model.Calls("c"), "an ended conversation runs no turn")
	require.NoError(t, h.rt.MergeMetadata(ctx, "c", map[string]string{"name": "x"}))
	require.Empty(t, h.history("c"))
	require.NoError(t, h.rt.Delete(ctx, "c"))
	require.ErrorIs(t, h.rt.End(ctx, "c"), journal.ErrDeleted)
	require.ErrorIs(t, h.rt.Configure(ctx, "c", agent.Settings{Model: "m2"}), journal.ErrDeleted)
}

// TestDeleteRacingTheAnswerOfAPendingApproval: an answer racing Delete
// either lands first (and goes with the rest) or is stale; either way the
// conversation stays deleted, its call is gone, and its deadline, cancelled,
// fires nothing later.
func TestDeleteRacingTheAnswerOfAPendingApproval(t *testing.T) {
	h := newHarness(t, memjournal.New(memjournal.Options{}), nil)
	ctx := ctxT(t)
	id := h.suspendOne("c", scripted.Text("done"))
	deadline := h.deadlineOf(id)
	answered := make(chan error, 1)
	go func() { answered <- h.rt.Resolve(ctx, id, `{"approved":true}`, agent.Scope{UserID: "bob"}) }()
	require.NoError(t, h.rt.Delete(ctx, "c"))
	if err := recv(t, answered, "the answer's outcome"); err != nil {
		require.ErrorIs(t, err, journal.ErrStale)
	}
	require.ErrorIs(t, h.rt.Resolve(ctx, id, `{"approved":true}`, agent.Scope{UserID: "bob"}), journal.ErrStale, "a late answer")
	require.Eventually(t, func() bool { return !slices.ContainsFunc(h.clock.Dues(), h.armedFor(deadline).Equal) },
		wait, time.Millisecond, "the deleted call's deadline timer is dropped (timers %v)", h.clock.Dues())
	h.clock.Advance(deadline.Sub(h.clock.Now()) + time.Minute)
	_, err := h.store.Conversation(ctx, "c")
	require.ErrorIs(t, err, journal.ErrDeleted)
	_, err = h.store.ToolCall(ctx, id)
	require.ErrorIs(t, err, journal.ErrNotFound)
	require.ErrorIs(t, h.rt.Wake(ctx, "c"), journal.ErrDeleted)
}

// TestEndedConversationHoldingAnAnsweredCallStaysAsItIs: a conversation
// ENDED while its log holds an open call (what an import cut short leaves:
// its rows and events, status ENDED) is inert, as End promises: a command
// that activates it records no answer the Store holds, so its log does not
// grow, and runs no turn.
func TestEndedConversationHoldingAnAnsweredCallStaysAsItIs(t *testing.T) {
	store := memjournal.New(memjournal.Options{})
	ctx := ctxT(t)
	_, err := store.Append(ctx, endedWithOpenCall(true))
	require.NoError(t, err)
	h := newHarness(t, store, nil)

	_, err = h.rt.Send(ctx, "c", "more", user)
	require.ErrorIs(t, err, journal.ErrEnded)
	// End waits for a write the activation has in flight: the history
	// read after it shows any answer recorded.
	require.NoError(t, h.rt.End(ctx, "c"))
	require.Len(t, h.history("c"), 3, "nothing appended to the ended conversation")
	require.Zero(t, h.model.Calls("c"))
	row, err := store.Conversation(ctx, "c")
	require.NoError(t, err)
	require.Equal(t, messages.ConversationStatus_CONVERSATION_STATUS_ENDED, row.GetStatus())
}

// TestConfigureAndEndDuringAModelCall: Configure during a model call
// returns once durable without cancelling it (the call answers with the
// settings it started with; the next call gets the new ones); End during it
// is refused with ErrInvalid, and succeeds once the turn is over.
func TestConfigureAndEndDuringAModelCall(t *testing.T) {
	h := newHarness(t, memjournal.New(memjournal.Options{}), nil)
	ctx := ctxT(t)
	require.NoError(t, h.rt.Configure(ctx, "c", agent.Settings{SystemPrompt: "old"}))
	h.model.Push("c", scripted.Text("first"), scripted.Text("second"))
	entered := h.model.Hold("c")
	_, err := h.rt.Send(ctx, "c", "one", user)
	require.NoError(t, err)
	recv(t, entered, "the held model call")
	require.NoError(t, h.rt.Configure(ctx, "c", agent.Settings{SystemPrompt: "new"}))
	require.ErrorIs(t, h.rt.End(ctx, "c"), journal.ErrInvalid, "a turn is running")
	h.model.Release("c")
	h.awaitEvent("c", 0, isAssistantText("first"))
	_, err = h.rt.SendAndWait(ctx, "c", "two", user)
	require.NoError(t, err)
	turns := h.model.Turns("c")
	require.Len(t, turns, 2, "the held call was not cancelled by Configure")
	require.Equal(t, "old", turns[0].Settings.SystemPrompt)
	require.Equal(t, "new", turns[1].Settings.SystemPrompt)
	require.NoError(t, h.rt.End(ctx, "c"))
}
