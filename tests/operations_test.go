package tests

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// requireGone asserts the Store holds nothing of conv and refuses writes to
// it with ErrDeleted.
func requireGone(t *testing.T, st journal.Store, conv string) {
	t.Helper()
	ctx := ctxT(t)
	last, err := st.LastSeq(ctx, conv)
	require.NoError(t, err)
	require.Zero(t, last, "no event of the deleted conversation is left")
	pend, err := st.PendingToolCalls(ctx, conv)
	require.NoError(t, err)
	require.Empty(t, pend)
	require.NoError(t, st.Deadlines(ctx, time.Time{}, func(d *messages.Deadline) error {
		if d.GetConversationId() == conv {
			return fmt.Errorf("deadline %s of the deleted conversation is left", d.GetToolCallId())
		}
		return nil
	}))
	_, err = st.Append(ctx, &messages.AppendRequest{ConversationId: conv, Events: []*messages.Event{{
		Body: &messages.Event_UserMsg{UserMsg: &messages.UserMessage{Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: "x"}}}}},
	}}})
	require.ErrorIs(t, err, journal.ErrDeleted, "the tombstone is written")
}

// TestDeleteOnline: Delete of a conversation waiting on a human stops its
// actor, cancels its deadline's timer (the clock passing the deadline
// expires nothing), removes it from the Store with a tombstone, and later
// sends to it fail with ErrDeleted; another conversation is untouched.
func TestDeleteOnline(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), nil)
		ctx := ctxT(t)
		for _, c := range []string{"c", "other"} {
			h.model.Push(c, scripted.Reply("asking", scripted.Call("approve_refund", `{"amount":5}`)), scripted.Text("never"))
			_, err := h.rt.Send(ctx, c, "refund", user)
			require.NoError(t, err)
		}
		id := pendingCallID(t, h.awaitEvent("c", 0, isSuspension))
		other := pendingCallID(t, h.awaitEvent("other", 0, isSuspension))
		h.awaitDeadlineArmed(id)
		require.True(t, h.rt.IsActive("c"))

		require.NoError(t, h.rt.Delete(ctx, "c"))
		require.False(t, h.rt.IsActive("c"), "no activation is left running")
		requireGone(t, h.store, "c")
		require.True(t, h.rt.IsActive("other"))

		// The expiry actor drops the deleted call's timer; the other's
		// stays armed.
		h.awaitDeadlineArmed(other)
		require.Eventually(t, func() bool { return h.clock.Timers() == 1 }, wait, time.Millisecond,
			"the deleted call's timer is cancelled (timers %d)", h.clock.Timers())

		_, err := h.rt.Send(ctx, "c", "again", user)
		require.ErrorIs(t, err, journal.ErrDeleted)
		require.Equal(t, 1, h.model.Calls("c"), "the deleted conversation's model is not called again")
		err = h.rt.Resolve(ctx, id, `{"approved":true}`, user)
		require.Error(t, err, "the deleted call cannot be answered")
		requireGone(t, h.store, "c")

		err = h.rt.Delete(ctx, "c")
		require.ErrorIs(t, err, journal.ErrDeleted, "deleting twice")
		require.NoError(t, h.rt.Resolve(ctx, other, `{"approved":true}`, user))
		h.awaitEvent("other", 0, isAssistantText("never"))
	})
}

// TestDeleteDuringAModelCall: a delete while the model is answering
// abandons the call; the answer, when the model returns, is written
// nowhere.
func TestDeleteDuringAModelCall(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		// The resume scan runs in the background after Open: one that
		// lists c after the send below wakes it, and that wake waits for
		// the delete. It must not revive c after Delete returns.
		h := newHarness(t, openStore(t, kind), nil)
		ctx := ctxT(t)
		held := h.model.Hold("c")
		h.model.Push("c", scripted.Text("too late"))
		_, err := h.rt.Send(ctx, "c", "hello", user)
		require.NoError(t, err)
		select {
		case <-held:
		case <-ctx.Done():
			t.Fatal("the model call never started")
		}
		require.NoError(t, h.rt.Delete(ctx, "c"))
		require.False(t, h.rt.IsActive("c"))
		require.ErrorIs(t, h.rt.Wake(ctx, "c"), journal.ErrDeleted)
		require.False(t, h.rt.IsActive("c"), "a wake after the delete revives nothing")
		h.model.Release("c")
		requireGone(t, h.store, "c")
	})
}

// TestDeleteRacingSends: sends racing a delete either land before it (and
// are deleted with the rest) or fail with ErrDeleted; nothing is left in
// the Store afterwards.
func TestDeleteRacingSends(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), nil)
		ctx := ctxT(t)
		for range 8 {
			h.model.Push("c", scripted.Text("ok"))
		}
		_, err := h.rt.Send(ctx, "c", "first", user)
		require.NoError(t, err)
		var wg sync.WaitGroup
		errs := make([]error, 8)
		for i := range errs {
			wg.Go(func() {
				_, errs[i] = h.rt.Send(ctx, "c", fmt.Sprintf("send %d", i), user)
			})
		}
		require.NoError(t, h.rt.Delete(ctx, "c"))
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				require.ErrorIs(t, err, journal.ErrDeleted, "send %d", i)
			}
		}
		requireGone(t, h.store, "c")
	})
}

// TestDeleteBadInput: unknown conversations, bad ids and a closed runtime
// give their sentinels.
func TestDeleteBadInput(t *testing.T) {
	h := newHarness(t, openStore(t, "memory"), nil)
	ctx := ctxT(t)
	require.ErrorIs(t, h.rt.Delete(ctx, "never"), journal.ErrNotFound)
	require.ErrorIs(t, h.rt.Delete(ctx, ""), journal.ErrInvalid)
	require.ErrorIs(t, h.rt.Delete(ctx, "bad\xff"), journal.ErrInvalid)
	require.NoError(t, h.rt.Close())
	require.ErrorIs(t, h.rt.Delete(ctx, "never"), lazarus.ErrClosed)
}

// TestPendingCalls: the pending human calls of every conversation, paged
// in conversation order; a server call that is running (between two human
// ones in that order) is not listed; an answered call and a deleted
// conversation's call drop out.
func TestPendingCalls(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), nil)
		ctx := ctxT(t)
		h.chargeGate = make(chan struct{})
		defer close(h.chargeGate)
		h.model.Push("p15", scripted.Reply("", scripted.Call("charge", `{}`)), scripted.Text("charged"))
		_, err := h.rt.Send(ctx, "p15", "charge", user)
		require.NoError(t, err)
		select {
		case <-h.chargeStarted:
		case <-ctx.Done():
			t.Fatal("the charge never started")
		}
		calls := map[string]string{}
		for _, c := range []string{"p3", "p1", "p2"} {
			h.model.Push(c, scripted.Reply("", scripted.Call("approve_refund", `{"amount":1}`)), scripted.Text("done"))
			_, err := h.rt.Send(ctx, c, "refund", user)
			require.NoError(t, err)
			calls[c] = pendingCallID(t, h.awaitEvent(c, 0, isSuspension))
		}
		list := func(limit int) []string {
			t.Helper()
			var got []string
			cursor := ""
			for range 10 {
				rows, next, err := h.rt.PendingCalls(ctx, cursor, limit)
				require.NoError(t, err)
				if limit > 0 {
					require.LessOrEqual(t, len(rows), limit)
				}
				for _, r := range rows {
					require.Equal(t, messages.Executor_EXECUTOR_HUMAN, r.GetExecutor())
					require.Equal(t, calls[r.GetConversationId()], r.GetId())
					require.Equal(t, "approve_refund", r.GetName())
					got = append(got, r.GetConversationId())
				}
				if next == "" {
					return got
				}
				cursor = next
			}
			t.Fatal("paging did not end")
			return nil
		}
		all, _, err := h.store.ListPendingToolCalls(ctx, "", 0)
		require.NoError(t, err)
		require.Len(t, all, 4, "the Store lists the running server call too")
		require.Equal(t, []string{"p1", "p2", "p3"}, list(0))
		require.Equal(t, []string{"p1", "p2", "p3"}, list(1), "pages of one")
		require.Equal(t, []string{"p1", "p2", "p3"}, list(2))

		require.NoError(t, h.rt.Resolve(ctx, calls["p1"], `{"approved":true}`, user))
		require.NoError(t, h.rt.Delete(ctx, "p3"))
		require.Equal(t, []string{"p2"}, list(0))

		_, _, err = h.rt.PendingCalls(ctx, "", -1)
		require.ErrorIs(t, err, journal.ErrInvalid)
		_, _, err = h.rt.PendingCalls(ctx, "not a cursor", 1)
		require.ErrorIs(t, err, journal.ErrInvalid)
	})
}

// TestMetadata: metadata merges key by key (an empty value removes a key),
// is read back, and is refused for unknown, deleted or bad input.
func TestMetadata(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), nil)
		ctx := ctxT(t)
		h.model.Push("c", scripted.Text("hi"))
		_, err := h.rt.Send(ctx, "c", "hello", user)
		require.NoError(t, err)

		md, err := h.rt.Metadata(ctx, "c")
		require.NoError(t, err)
		require.Empty(t, md)
		require.NoError(t, h.rt.MergeMetadata(ctx, "c", map[string]string{"title": "Refund", "owner": "ann"}))
		require.NoError(t, h.rt.MergeMetadata(ctx, "c", map[string]string{"owner": "", "tag": "vip"}))
		require.NoError(t, h.rt.MergeMetadata(ctx, "c", nil), "an empty merge changes nothing")
		md, err = h.rt.Metadata(ctx, "c")
		require.NoError(t, err)
		require.Equal(t, map[string]string{"title": "Refund", "tag": "vip"}, md)
		stored, err := h.store.Metadata(ctx, "c")
		require.NoError(t, err)
		require.Equal(t, md, stored, "written through the Store")

		require.ErrorIs(t, h.rt.MergeMetadata(ctx, "c", map[string]string{"": "v"}), journal.ErrInvalid)
		require.ErrorIs(t, h.rt.MergeMetadata(ctx, "c", map[string]string{"k": "\xff"}), journal.ErrInvalid)
		require.ErrorIs(t, h.rt.MergeMetadata(ctx, "", map[string]string{"k": "v"}), journal.ErrInvalid)
		md, err = h.rt.Metadata(ctx, "c")
		require.NoError(t, err)
		require.Equal(t, map[string]string{"title": "Refund", "tag": "vip"}, md, "refused merges write nothing")

		require.ErrorIs(t, h.rt.MergeMetadata(ctx, "never", map[string]string{"k": "v"}), journal.ErrNotFound)
		_, err = h.rt.Metadata(ctx, "never")
		require.ErrorIs(t, err, journal.ErrNotFound)
		md, err = h.store.Metadata(ctx, "never")
		require.NoError(t, err)
		require.Empty(t, md, "a refused merge creates nothing")

		require.NoError(t, h.rt.Delete(ctx, "c"))
		_, err = h.rt.Metadata(ctx, "c")
		require.ErrorIs(t, err, journal.ErrDeleted, "metadata of a deleted conversation")
		err = h.rt.MergeMetadata(ctx, "c", map[string]string{"k": "v"})
		require.ErrorIs(t, err, journal.ErrDeleted, "merge into a deleted conversation")

		require.NoError(t, h.rt.Close())
		_, err = h.rt.Metadata(ctx, "c")
		require.ErrorIs(t, err, lazarus.ErrClosed)
		require.ErrorIs(t, h.rt.MergeMetadata(ctx, "c", map[string]string{"k": "v"}), lazarus.ErrClosed)
	})
}

// TestDeleteEndsSubscriptions: a subscription to a deleted conversation
// gets an update wrapping ErrDeleted, then its channel closes; one to
// another conversation goes on.
func TestDeleteEndsSubscriptions(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), nil)
		ctx := ctxT(t)
		h.model.Push("c", scripted.Text("hi"))
		h.model.Push("other", scripted.Text("hi"), scripted.Text("still here"))
		for _, c := range []string{"c", "other"} {
			_, err := h.rt.Send(ctx, c, "hello", user)
			require.NoError(t, err)
			h.awaitEvent(c, 0, isAssistantText("hi"))
		}
		ch, err := h.rt.Subscribe(ctx, "c", 0)
		require.NoError(t, err)
		otherCh, err := h.rt.Subscribe(ctx, "other", 0)
		require.NoError(t, err)
		h.awaitUpdate(ch, func(u actors.Update) bool { return u.Event.GetSeq() == 2 })
		require.NoError(t, h.rt.Delete(ctx, "c"))
		var rest []actors.Update
		for u := range ch {
			rest = append(rest, u)
		}
		require.Len(t, rest, 1, "one last update, then the channel closes")
		require.ErrorIs(t, rest[0].Err, journal.ErrDeleted)

		_, err = h.rt.Send(ctx, "other", "again", user)
		require.NoError(t, err)
		h.awaitUpdate(otherCh, func(u actors.Update) bool {
			require.NoError(t, u.Err)
			return u.Event != nil && isAssistantText("still here")(u.Event)
		})
	})
}
