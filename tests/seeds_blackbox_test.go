package tests

// Black-box tests of the behaviours the seed documents promise and the
// README, the package documentation and RELIABILITY.md say Lazarus provides,
// written against the public API as those documents show it. They pin the
// combinations and boundaries the other tests leave out: delete while the
// agent is dead, paging at every page size, chapters cut at every seq, an
// edit of a dead conversation with a human call open, a deadline moved and
// fired while the agent is dead, one agent's view across a fork, a restart
// on a directory that revives from a summary, and replays of answers across
// kills.

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/snapshot"
)

// seqsOf lists the seqs of events.
func seqsOf(evs []*messages.Event) []uint64 {
	out := make([]uint64, 0, len(evs))
	for _, ev := range evs {
		out = append(out, ev.GetSeq())
	}
	return out
}

// suspendOnApproval has the model of conv ask a human (approve_refund, a
// one-hour deadline) and returns the turn's end.
func (h *harness) suspendOnApproval(conv, text string) lazarus.TurnEnd {
	h.t.Helper()
	h.model.Push(conv, scripted.Reply("needs approval", scripted.Call("approve_refund", `{"amount":120}`)))
	end, err := h.rt.SendAndWait(ctxT(h.t), conv, text, user)
	require.NoError(h.t, err)
	require.Equal(h.t, lazarus.TurnSuspended, end.Outcome)
	require.Len(h.t, end.Pending, 1)
	return end
}

// TestSeedsDeleteWhileDead: a conversation waiting on a human, with
// metadata and a schedule, is killed and then deleted while its actor is
// dead. Every call naming it afterwards fails with journal.ErrDeleted (an
// answer or a Reschedule of its call with journal.ErrStale), its call leaves
// the pending index, its metadata leaves Find, and neither its deadline nor
// its schedule fires later: nothing revives it. A subscription opened
// before the kill ends with an update wrapping journal.ErrDeleted. Another
// conversation is untouched.
func TestSeedsDeleteWhileDead(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), nil)
		ctx := ctxT(t)
		end := h.suspendOnApproval("doomed", "refund order 42")
		callID := end.Pending[0].GetToolCallId()
		h.awaitDeadlineArmed(callID)
		require.NoError(t, h.rt.MergeMetadata(ctx, "doomed", map[string]string{"topic": "seed-delete"}))
		_, err := h.rt.Schedule(ctx, "doomed", lazarus.ScheduleSpec{After: 2 * time.Hour, Text: "wake up"}, user)
		require.NoError(t, err)
		h.model.Push("kept", scripted.Text("kept answer"))
		_, err = h.rt.SendAndWait(ctx, "kept", "keep me", user)
		require.NoError(t, err)
		require.NoError(t, h.rt.MergeMetadata(ctx, "kept", map[string]string{"topic": "seed-delete"}))

		sub, err := h.rt.Subscribe(ctx, "doomed", end.Seq)
		require.NoError(t, err)
		require.True(t, h.rt.Kill("doomed"))
		require.False(t, h.rt.IsActive("doomed"))
		require.NoError(t, h.rt.Delete(ctx, "doomed"))
		var last lazarus.Update
		for u := range sub {
			last = u
		}
		require.ErrorIs(t, last.Err, journal.ErrDeleted, "a subscription of the dead conversation ends with the delete")
		require.False(t, h.rt.IsActive("doomed"))
		calls := h.model.Calls("doomed")

		// The answer and the deadline went with it.
		require.ErrorIs(t, h.rt.Resolve(ctx, callID, `{"approved":true}`, user), journal.ErrStale)
		require.ErrorIs(t, h.rt.Reject(ctx, callID, "no", user), journal.ErrStale)
		require.ErrorIs(t, h.rt.Reschedule(ctx, callID, h.clock.Now().Add(time.Minute)), journal.ErrStale)
		pending, _, err := h.rt.PendingCalls(ctx, "", 0)
		require.NoError(t, err)
		for _, p := range pending {
			require.NotEqual(t, "doomed", p.GetConversationId(), "a deleted conversation's call is not pending")
		}
		ids, _, err := h.rt.Find(ctx, "topic", "seed-delete", "", 0)
		require.NoError(t, err)
		require.Equal(t, []string{"kept"}, ids, "Find lists the survivor only")

		// Past the deadline and the schedule: nothing fires, nothing revives.
		h.clock.Advance(3 * time.Hour)
		require.False(t, h.rt.IsActive("doomed"))
		require.Equal(t, calls, h.model.Calls("doomed"), "no model call for a deleted conversation")

		// Every call naming it says so.
		_, err = h.rt.Send(ctx, "doomed", "hello?", user)
		require.ErrorIs(t, err, journal.ErrDeleted)
		require.ErrorIs(t, h.rt.Wake(ctx, "doomed"), journal.ErrDeleted)
		_, err = h.rt.History(ctx, "doomed", 0, 0)
		require.ErrorIs(t, err, journal.ErrDeleted)
		_, err = h.rt.HistoryView(ctx, "doomed", lazarus.HistoryOptions{})
		require.ErrorIs(t, err, journal.ErrDeleted)
		_, err = h.rt.Subscribe(ctx, "doomed", 0)
		require.ErrorIs(t, err, journal.ErrDeleted)
		_, err = h.rt.Chapters(ctx, "doomed", 0)
		require.ErrorIs(t, err, journal.ErrDeleted)
		_, err = h.rt.Metadata(ctx, "doomed")
		require.ErrorIs(t, err, journal.ErrDeleted)
		require.ErrorIs(t, h.rt.MergeMetadata(ctx, "doomed", map[string]string{"k": "v"}), journal.ErrDeleted)
		_, err = h.rt.Settings(ctx, "doomed")
		require.ErrorIs(t, err, journal.ErrDeleted)
		require.ErrorIs(t, h.rt.Configure(ctx, "doomed", agent.Settings{SystemPrompt: "x"}), journal.ErrDeleted)
		require.ErrorIs(t, h.rt.Rewind(ctx, "doomed", 1, lazarus.RewindOptions{}, user), journal.ErrDeleted)
		_, err = h.rt.Edit(ctx, "doomed", 1, "other", user)
		require.ErrorIs(t, err, journal.ErrDeleted)
		require.ErrorIs(t, h.rt.End(ctx, "doomed"), journal.ErrDeleted)
		_, err = h.rt.Schedule(ctx, "doomed", lazarus.ScheduleSpec{After: time.Hour, Text: "x"}, user)
		require.ErrorIs(t, err, journal.ErrDeleted)
		require.ErrorIs(t, h.rt.Fork(ctx, "doomed", 1, "copy"), journal.ErrDeleted)
		require.ErrorIs(t, h.rt.Fork(ctx, "kept", 2, "doomed"), journal.ErrDeleted, "a deleted id is never written again")
		require.ErrorIs(t, h.rt.Delete(ctx, "doomed"), journal.ErrDeleted)
		require.False(t, h.rt.IsActive("doomed"))

		// The other conversation goes on.
		h.model.Push("kept", scripted.Text("still here"))
		end2, err := h.rt.SendAndWait(ctx, "kept", "again", user)
		require.NoError(t, err)
		require.Equal(t, "still here", end2.Text)
	})
}

// TestSeedsHistoryPagesAtEveryLimit: paging History backwards (the oldest
// seq received as the next before) at every page size from 1 to past the
// log returns each event exactly once, each page in ascending seq and of at
// most limit events; HistoryView pages the same way; the bounds: before 1
// is empty, before past the log and limit past the log are the whole log, a
// negative limit of HistoryView is ErrInvalid, and an unknown conversation's
// view has no entries.
func TestSeedsHistoryPagesAtEveryLimit(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), nil)
		ctx := ctxT(t)
		h.model.Push("p",
			scripted.Reply("looking", scripted.Call("lookup_order", `{"id":1}`)), scripted.Text("one"),
			scripted.Text("two"),
			scripted.Reply("again", scripted.Call("lookup_order", `{"id":2}`)), scripted.Text("three"))
		for _, text := range []string{"a", "b", "c"} {
			end, err := h.rt.SendAndWait(ctx, "p", text, user)
			require.NoError(t, err)
			require.Equal(t, lazarus.TurnAnswered, end.Outcome)
		}
		all := h.history("p")
		requireGapFree(t, all)
		n := len(all)
		require.Greater(t, n, 8)
		want := seqsOf(all)

		for limit := 1; limit <= n+1; limit++ {
			var got []uint64
			before := uint64(0)
			for pages := 0; ; pages++ {
				require.Less(t, pages, n+2, "limit %d: paging ends", limit)
				page, err := h.rt.History(ctx, "p", before, limit)
				require.NoError(t, err)
				if len(page) == 0 {
					break
				}
				require.LessOrEqual(t, len(page), limit)
				seqs := seqsOf(page)
				require.True(t, slices.IsSorted(seqs), "limit %d: a page is ascending: %v", limit, seqs)
				if before != 0 {
					require.Equal(t, before-1, seqs[len(seqs)-1], "limit %d: a page ends just before its before", limit)
				}
				got = append(seqs, got...)
				before = seqs[0]
			}
			require.Equal(t, want, got, "limit %d: every event once", limit)

			// HistoryView pages alike.
			got = nil
			before = 0
			for {
				page, err := h.rt.HistoryView(ctx, "p", lazarus.HistoryOptions{Before: before, Limit: limit})
				require.NoError(t, err)
				if len(page) == 0 {
					break
				}
				require.LessOrEqual(t, len(page), limit)
				var seqs []uint64
				for _, e := range page {
					require.False(t, e.Rewound)
					seqs = append(seqs, e.Event.GetSeq())
				}
				got = append(seqs, got...)
				before = seqs[0]
			}
			require.Equal(t, want, got, "HistoryView, limit %d", limit)
		}

		page, err := h.rt.History(ctx, "p", 1, 0)
		require.NoError(t, err)
		require.Empty(t, page, "nothing before seq 1")
		page, err = h.rt.History(ctx, "p", uint64(n)+100, 0)
		require.NoError(t, err)
		require.Equal(t, want, seqsOf(page), "before past the log: everything")
		page, err = h.rt.History(ctx, "p", 0, n+100)
		require.NoError(t, err)
		require.Equal(t, want, seqsOf(page))
		page, err = h.rt.History(ctx, "p", uint64(n), 2)
		require.NoError(t, err)
		require.Equal(t, []uint64{uint64(n) - 2, uint64(n) - 1}, seqsOf(page))

		_, err = h.rt.HistoryView(ctx, "p", lazarus.HistoryOptions{Limit: -1})
		require.ErrorIs(t, err, journal.ErrInvalid)
		entries, err := h.rt.HistoryView(ctx, "nobody", lazarus.HistoryOptions{})
		require.NoError(t, err)
		require.Empty(t, entries)
	})
}

// TestSeedsChaptersAtEverySeq: Chapters(before) for every before from 1 to
// one past the last seq returns the chapter that ends just before it: its
// events run without a gap from just after its summary up to before-1, and
// its summary is the latest whose span ends below that last seq (none for
// the first chapter, which starts at 1). Prev points at the chapter before.
// Before 1 is an empty chapter, before past the log the newest one, and an
// unknown conversation's chapter is empty.
func TestSeedsChaptersAtEverySeq(t *testing.T) {
	h := newHarness(t, openStore(t, "memory"), summarizing)
	ctx := ctxT(t)
	var summaries []*messages.Summary
	latest := func() uint64 {
		s, err := h.store.LatestSummary(ctx, "c")
		if err != nil {
			return 0
		}
		return s.GetToSeq()
	}
	for i, text := range []string{"a", "b", "c", "d", "e", "f", "g"} {
		h.model.Push("c", scripted.Text("answer "+text))
		_, err := h.rt.SendAndWait(ctx, "c", text, user)
		require.NoError(t, err)
		if i%2 == 1 {
			prev := uint64(0)
			if len(summaries) > 0 {
				prev = summaries[len(summaries)-1].GetToSeq()
			}
			require.Eventually(t, func() bool { return latest() > prev }, wait, time.Millisecond, "a summary after %q", text)
			s, err := h.store.LatestSummary(ctx, "c")
			require.NoError(t, err)
			summaries = append(summaries, s)
		}
	}
	require.GreaterOrEqual(t, len(summaries), 3)
	all := h.history("c")
	last := all[len(all)-1].GetSeq()

	first, err := h.rt.Chapters(ctx, "c", 1)
	require.NoError(t, err)
	require.Empty(t, first.Events, "nothing before seq 1")
	require.Nil(t, first.Summary)
	require.Zero(t, first.Prev)
	for before := uint64(2); before <= last+1; before++ {
		ch, err := h.rt.Chapters(ctx, "c", before)
		require.NoError(t, err, "before %d", before)
		require.NotEmpty(t, ch.Events, "before %d", before)
		seqs := seqsOf(ch.Events)
		require.Equal(t, before-1, seqs[len(seqs)-1], "before %d: the chapter ends just before it", before)
		var want *messages.Summary
		for _, s := range summaries {
			if s.GetToSeq() < before-1 {
				want = s
			}
		}
		// A summary may land after the loop above (the last turn's): the
		// page's summary is that one or a later one, still below its end.
		if want == nil {
			require.Nil(t, ch.Summary, "before %d: the first chapter has no summary", before)
			require.Equal(t, uint64(1), seqs[0])
			require.Zero(t, ch.Prev)
		} else {
			require.NotNil(t, ch.Summary, "before %d", before)
			require.GreaterOrEqual(t, ch.Summary.GetToSeq(), want.GetToSeq(), "before %d: the latest summary below the page's end", before)
			require.Less(t, ch.Summary.GetToSeq(), before-1, "before %d", before)
			require.Equal(t, ch.Summary.GetToSeq()+1, seqs[0], "before %d: events start after the summary", before)
			require.Equal(t, ch.Summary.GetToSeq()+1, ch.Prev, "before %d", before)
		}
		for i, s := range seqs {
			require.Equal(t, seqs[0]+uint64(i), s, "before %d: no gap", before)
		}
	}
	newest, err := h.rt.Chapters(ctx, "c", 0)
	require.NoError(t, err)
	require.Equal(t, last, newest.Events[len(newest.Events)-1].GetSeq(), "before 0: the newest chapter")
	past, err := h.rt.Chapters(ctx, "c", last+100)
	require.NoError(t, err)
	require.Equal(t, seqsOf(newest.Events), seqsOf(past.Events), "before past the log: the newest chapter")

	empty, err := h.rt.Chapters(ctx, "nobody", 0)
	require.NoError(t, err)
	require.Empty(t, empty.Events)
	require.Nil(t, empty.Summary)
	require.Zero(t, empty.Prev)
}

// TestSeedsEditWhileDeadCancelsTheOpenCall: a conversation waiting on a
// human is killed; an Edit of its user message revives it, cancels the open
// call in the same write (errored, code canceled; a late answer and a
// Reschedule are ErrStale), and runs a turn on the new text: the model sees
// the new message and nothing of the rewound span. The old deadline passing
// later expires nothing, and the row's fsm_state owes nothing.
func TestSeedsEditWhileDeadCancelsTheOpenCall(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), nil)
		ctx := ctxT(t)
		end := h.suspendOnApproval("e", "refund order 42")
		callID := end.Pending[0].GetToolCallId()
		h.awaitDeadlineArmed(callID)
		require.True(t, h.rt.Kill("e"))

		h.model.Push("e", scripted.Text("order 43 refunded"))
		ch, err := h.rt.Subscribe(ctx, "e", end.Seq)
		require.NoError(t, err)
		newSeq, err := h.rt.Edit(ctx, "e", 1, "refund order 43", user)
		require.NoError(t, err)
		u := h.awaitUpdate(ch, func(u lazarus.Update) bool { return u.TurnEnd != nil && u.Event != nil && u.Event.GetSeq() > newSeq })
		require.Equal(t, lazarus.TurnAnswered, u.TurnEnd.Outcome)
		require.Equal(t, "order 43 refunded", u.TurnEnd.Text)

		row, err := h.store.ToolCall(ctx, callID)
		require.NoError(t, err)
		require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_ERRORED, row.GetStatus())
		require.Equal(t, agent.CodeCanceled, row.GetResult().GetError().GetCode())
		require.ErrorIs(t, h.rt.Resolve(ctx, callID, `{"approved":true}`, user), journal.ErrStale)
		require.ErrorIs(t, h.rt.Reschedule(ctx, callID, h.clock.Now().Add(time.Hour)), journal.ErrStale)

		turns := h.model.Turns("e")
		last := turns[len(turns)-1]
		require.Equal(t, []string{"refund order 43"}, userTexts(last.Context), "the model sees the new text only")
		for _, ev := range last.Context {
			require.Nil(t, ev.GetToolCall(), "nothing of the rewound span")
		}

		before := len(h.history("e"))
		h.clock.Advance(2 * time.Hour)
		require.Len(t, h.history("e"), before, "the cancelled call's deadline wrote nothing")
		conv, err := h.store.Conversation(ctx, "e")
		require.NoError(t, err)
		require.Empty(t, conv.GetFsmState().GetPending())
		require.Equal(t, messages.AgentState_AGENT_STATE_IDLE, conv.GetFsmState().GetState())
		require.Equal(t, uint64(before), conv.GetFsmState().GetLastSeq())
		pending, _, err := h.rt.PendingCalls(ctx, "", 0)
		require.NoError(t, err)
		require.Empty(t, pending)
	})
}

// TestSeedsRescheduledDeadlineFiresWhileDead: a human call's deadline is
// moved (sooner) while its conversation's actor is dead; the old time
// passing does nothing more, the new one expires it while the actor is
// still dead (as the system, status EXPIRED), the revived turn's model
// sees the expiry as a tool error, and a late answer is ErrStale.
func TestSeedsRescheduledDeadlineFiresWhileDead(t *testing.T) {
	h := newHarness(t, openStore(t, "pebble"), nil)
	ctx := ctxT(t)
	end := h.suspendOnApproval("r", "refund order 42")
	callID := end.Pending[0].GetToolCallId()
	h.awaitDeadlineArmed(callID)
	require.True(t, h.rt.Kill("r"))

	newDeadline := h.clock.Now().Add(10 * time.Minute)
	require.NoError(t, h.rt.Reschedule(ctx, callID, newDeadline))
	require.False(t, h.rt.IsActive("r"), "a Reschedule does not revive the conversation")
	pending, _, err := h.rt.PendingCalls(ctx, "", 0)
	require.NoError(t, err)
	require.Len(t, pending, 1)
	require.True(t, pending[0].GetDeadline().AsTime().Equal(newDeadline))
	h.awaitDeadlineArmed(callID)

	h.model.Push("r", scripted.Text("approval timed out"))
	ch, err := h.rt.Subscribe(ctx, "r", end.Seq)
	require.NoError(t, err)
	h.clock.Advance(10 * time.Minute)
	u := h.awaitUpdate(ch, func(u lazarus.Update) bool { return u.TurnEnd != nil })
	require.Equal(t, lazarus.TurnAnswered, u.TurnEnd.Outcome)
	require.Equal(t, "approval timed out", u.TurnEnd.Text)

	row, err := h.store.ToolCall(ctx, callID)
	require.NoError(t, err)
	require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_EXPIRED, row.GetStatus())
	var expiries int
	for _, ev := range h.history("r") {
		if r := ev.GetResolution(); r != nil && r.GetToolCallId() == callID {
			expiries++
			require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_EXPIRED, r.GetStatus())
			require.Equal(t, "system", r.GetBy())
			require.Equal(t, agent.SystemUserID, r.GetResolver().GetUserId())
		}
	}
	require.Equal(t, 1, expiries)
	turns := h.model.Turns("r")
	results := toolResults(turns[len(turns)-1], callID)
	require.Len(t, results, 1, "the revived model sees one result of the call")
	require.NotNil(t, results[0].GetError(), "an expiry is a tool error")

	before := len(h.history("r"))
	h.clock.Advance(2 * time.Hour) // past the old deadline
	require.Len(t, h.history("r"), before, "the old deadline fires nothing")
	require.ErrorIs(t, h.rt.Resolve(ctx, callID, `{"approved":true}`, user), journal.ErrStale)
	require.Len(t, h.history("r"), before)
}

// TestSeedsAgentViewsAcrossAFork: a conversation of two agents (the default
// and "critic", one message broadcast) is forked; each agent's view of the
// fork is exactly its view of the source up to the fork point, a message
// to the critic on the fork runs the critic's turn on its own view there
// (not the default agent's private events), and the source is untouched.
func TestSeedsAgentViewsAcrossAFork(t *testing.T) {
	h := newHarness(t, openStore(t, "memory"), func(o *lazarus.Options) {
		o.Agents = []lazarus.Agent{{Name: "critic"}}
	})
	ctx := ctxT(t)
	h.model.Push("src", scripted.Text("d1"), scripted.Text("c1"), scripted.Text("d2"))
	_, err := h.rt.SendMessageAndWait(ctx, "src", agent.UserMessage(agent.TextPart("private to default")), lazarus.SendOptions{}, user)
	require.NoError(t, err)
	_, err = h.rt.SendMessageAndWait(ctx, "src", agent.UserMessage(agent.TextPart("review this")), lazarus.SendOptions{Agent: "critic"}, user)
	require.NoError(t, err)
	_, err = h.rt.SendMessageAndWait(ctx, "src", agent.UserMessage(agent.TextPart("everyone")), lazarus.SendOptions{Broadcast: true}, user)
	require.NoError(t, err)
	srcAll := h.history("src")
	atSeq := srcAll[len(srcAll)-1].GetSeq()
	require.NoError(t, h.rt.Fork(ctx, "src", atSeq, "fork"))

	viewSeqs := func(conv string, v *lazarus.AgentView) []uint64 {
		entries, err := h.rt.HistoryView(ctx, conv, lazarus.HistoryOptions{Agent: v})
		require.NoError(t, err)
		var out []uint64
		for _, e := range entries {
			out = append(out, e.Event.GetSeq())
		}
		return out
	}
	for _, v := range []*lazarus.AgentView{nil, lazarus.ViewOf(""), lazarus.ViewOf("critic")} {
		require.Equal(t, viewSeqs("src", v), viewSeqs("fork", v), "view %v", v)
	}
	critic := viewSeqs("fork", lazarus.ViewOf("critic"))
	def := viewSeqs("fork", lazarus.ViewOf(""))
	require.NotEqual(t, critic, def)
	require.Less(t, len(critic), len(srcAll))

	h.model.Push("fork", scripted.Text("c2"))
	end, err := h.rt.SendMessageAndWait(ctx, "fork", agent.UserMessage(agent.TextPart("and now?")), lazarus.SendOptions{Agent: "critic"}, user)
	require.NoError(t, err)
	require.Equal(t, "c2", end.Text)
	turns := h.model.Turns("fork")
	require.Len(t, turns, 1)
	require.Equal(t, []string{"review this", "everyone", "and now?"}, userTexts(turns[0].Context),
		"the critic's model on the fork sees its own view")
	require.Len(t, h.history("src"), len(srcAll), "the source is untouched")
	require.Equal(t, critic, viewSeqs("src", lazarus.ViewOf("critic")))
}

// TestSeedsRestartRevivesFromTheSummary: seed 004's test, on a directory:
// a runtime answers, summarizes and closes; a new runtime on the same
// directory, with a new scripted model, answers the next message from the
// latest summary plus the events after it (seed 001's snapshot), and the
// conversation's metadata and settings came back with it.
func TestSeedsRestartRevivesFromTheSummary(t *testing.T) {
	dir := t.TempDir()
	ctx := ctxT(t)
	open := func(m *scripted.Model) *lazarus.Runtime {
		rt, err := lazarus.Open(lazarus.Options{
			Dir: dir, Model: m, IdleTimeout: -1,
			Summarizer: snapshot.Deterministic{},
			Summary:    snapshot.Policy{MaxEvents: 3, MaxTokens: -1, KeepRecent: 1},
		})
		require.NoError(t, err)
		return rt
	}
	m1 := scripted.New(scripted.Options{})
	m1.Push("s", scripted.Text("Hi!"), scripted.Text("two"), scripted.Text("three"))
	rt := open(m1)
	for _, text := range []string{"Hello", "second", "third"} {
		_, err := rt.SendAndWait(ctx, "s", text, user)
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		s, err := rt.Store().LatestSummary(ctx, "s")
		return err == nil && s.GetToSeq() > 0
	}, wait, time.Millisecond)
	require.NoError(t, rt.MergeMetadata(ctx, "s", map[string]string{"name": "remember me"}))
	require.NoError(t, rt.Configure(ctx, "s", agent.Settings{SystemPrompt: "be brief"}))
	require.NoError(t, rt.Close())

	m2 := scripted.New(scripted.Options{})
	m2.Push("s", scripted.Text("I remember!"))
	rt = open(m2)
	t.Cleanup(func() { _ = rt.Close() })
	summary, err := rt.Store().LatestSummary(ctx, "s")
	require.NoError(t, err)
	end, err := rt.SendAndWait(ctx, "s", "Do you remember?", user)
	require.NoError(t, err)
	require.Equal(t, "I remember!", end.Text)

	turns := m2.Turns("s")
	require.Len(t, turns, 1)
	turn := turns[0]
	require.NotNil(t, turn.Summary, "the context starts from the summary")
	require.Equal(t, summary.GetToSeq(), turn.Summary.GetToSeq())
	require.Equal(t, summary.GetToSeq()+1, turn.Context[0].GetSeq(), "then the events after it")
	require.Equal(t, "Do you remember?", userTexts(turn.Context)[len(userTexts(turn.Context))-1])
	require.Equal(t, "be brief", turn.Settings.SystemPrompt, "settings came back")
	md, err := rt.Metadata(ctx, "s")
	require.NoError(t, err)
	require.Equal(t, map[string]string{"name": "remember me"}, md)
	ids, _, err := rt.Find(ctx, "name", "remember me", "", 0)
	require.NoError(t, err)
	require.Equal(t, []string{"s"}, ids)
	evs, err := rt.History(ctx, "s", 0, 0)
	require.NoError(t, err)
	requireGapFree(t, evs)
	require.Equal(t, "Hello", evs[0].GetUserMsg().GetContent()[0].GetText(), "the log keeps what the summary covers")
}

// TestSeedsAnswerReplaysAcrossKills: the answer to a human call, repeated
// after a kill, after the revival it caused, and after a Reject of the same
// call, is ErrStale each time and changes nothing: the log holds one
// resolution and one result of the call, the model is called once after it,
// and a send repeated with its RequestID after a kill that cancelled its
// turn's model call appends nothing and waits for the turn its first write
// started.
func TestSeedsAnswerReplaysAcrossKills(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), nil)
		ctx := ctxT(t)
		end := h.suspendOnApproval("a", "refund order 42")
		callID := end.Pending[0].GetToolCallId()
		require.True(t, h.rt.Kill("a"))

		h.model.Push("a", scripted.Text("refund sent"))
		ch, err := h.rt.Subscribe(ctx, "a", end.Seq)
		require.NoError(t, err)
		require.NoError(t, h.rt.Resolve(ctx, callID, `{"approved":true}`, agent.Scope{UserID: "bob"}))
		u := h.awaitUpdate(ch, func(u lazarus.Update) bool { return u.TurnEnd != nil })
		require.Equal(t, "refund sent", u.TurnEnd.Text)
		calls := h.model.Calls("a")

		require.ErrorIs(t, h.rt.Resolve(ctx, callID, `{"approved":true}`, agent.Scope{UserID: "bob"}), journal.ErrStale)
		h.rt.Kill("a")
		require.ErrorIs(t, h.rt.Resolve(ctx, callID, `{"approved":false}`, agent.Scope{UserID: "carol"}), journal.ErrStale)
		require.ErrorIs(t, h.rt.Reject(ctx, callID, "too late", agent.Scope{UserID: "carol"}), journal.ErrStale)
		require.NoError(t, h.rt.Wake(ctx, "a"))

		var resolutions, results int
		evs := h.history("a")
		for _, ev := range evs {
			if ev.GetResolution().GetToolCallId() == callID {
				resolutions++
				require.Equal(t, "user", ev.GetResolution().GetBy())
				require.Equal(t, "bob", ev.GetResolution().GetResolver().GetUserId(), "the first answer's resolver")
			}
			if ev.GetToolResult().GetToolCallId() == callID {
				results++
			}
		}
		require.Equal(t, 1, resolutions)
		require.Equal(t, 1, results)
		require.Equal(t, calls, h.model.Calls("a"), "no model call for a replayed answer")

		h.model.Push("a", scripted.Text("noted"))
		opts := lazarus.SendOptions{RequestID: "req-1"}
		entered := h.model.Hold("a")
		seq1, err := h.rt.SendMessage(ctx, "a", agent.UserMessage(agent.TextPart("thanks")), opts, user)
		require.NoError(t, err)
		recv(t, entered, "model call entered") // the turn's model call has started: the kill cancels it
		require.True(t, h.rt.Kill("a"))
		seq2, err := h.rt.SendMessage(ctx, "a", agent.UserMessage(agent.TextPart("thanks")), opts, user)
		require.NoError(t, err)
		require.Equal(t, seq1, seq2)
		endT, err := h.rt.SendMessageAndWait(ctx, "a", agent.UserMessage(agent.TextPart("thanks")), opts, user)
		require.NoError(t, err)
		require.Equal(t, "noted", endT.Text)
		var thanks int
		for _, ev := range h.history("a") {
			if ev.GetUserMsg() != nil && ev.GetUserMsg().GetContent()[0].GetText() == "thanks" {
				thanks++
			}
		}
		require.Equal(t, 1, thanks, "a replayed send appends nothing")
	})
}

// TestSeedsFindPagesExactly: Find pages through the conversations holding
// a metadata pair at every page size, each id once in id order, the last
// page's cursor "" (no empty page after it); a cursor past the last id is an
// empty page; a conversation whose value changes, or that is deleted, leaves
// the pair's pages; one that is dead is still listed.
func TestSeedsFindPagesExactly(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), nil)
		ctx := ctxT(t)
		convs := []string{"f1", "f2", "f3", "f4"}
		for _, c := range convs {
			h.model.Push(c, scripted.Text("ok"))
			_, err := h.rt.SendAndWait(ctx, c, "hi", user)
			require.NoError(t, err)
			require.NoError(t, h.rt.MergeMetadata(ctx, c, map[string]string{"team": "blue"}))
		}
		h.rt.Kill("f2")
		pages := func(limit int) ([]string, int) {
			var got []string
			cursor, n := "", 0
			for {
				ids, next, err := h.rt.Find(ctx, "team", "blue", cursor, limit)
				require.NoError(t, err)
				n++
				require.LessOrEqual(t, len(ids), limit)
				require.NotEmpty(t, ids, "limit %d: no empty page", limit)
				got = append(got, ids...)
				if next == "" {
					return got, n
				}
				require.Less(t, n, 10)
				cursor = next
			}
		}
		for limit := 1; limit <= len(convs)+1; limit++ {
			got, n := pages(limit)
			require.Equal(t, convs, got, "limit %d", limit)
			require.Equal(t, (len(convs)+limit-1)/limit, n, "limit %d: pages", limit)
		}
		ids, next, err := h.rt.Find(ctx, "team", "blue", "f4", 2)
		require.NoError(t, err)
		require.Empty(t, ids)
		require.Empty(t, next)

		require.NoError(t, h.rt.MergeMetadata(ctx, "f1", map[string]string{"team": "red"}))
		require.NoError(t, h.rt.Delete(ctx, "f3"))
		got, _ := pages(1)
		require.Equal(t, []string{"f2", "f4"}, got)
		ids, _, err = h.rt.Find(ctx, "team", "red", "", 0)
		require.NoError(t, err)
		require.Equal(t, []string{"f1"}, ids)
	})
}

// TestSeedsAuditGCReachesDeadAndForkedConversations: with the audit on
// and a TTL, each answered model call has its row; a kill in the middle of
// a model call records nothing for it, and the revival's call one row; a
// fork copies no audit row; the TTL sweep, on the runtime's clock, removes
// the rows of a conversation whose actor is dead as well as a live one's;
// and a deleted conversation's rows go with it.
func TestSeedsAuditGCReachesDeadAndForkedConversations(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStoreAudit(t, kind, true), func(o *lazarus.Options) {
			o.Audit = lazarus.AuditOptions{Enabled: true, TTL: time.Hour}
		})
		ctx := ctxT(t)
		rows := func(conv string) int {
			calls, err := h.store.ModelCalls(ctx, conv)
			require.NoError(t, err)
			return len(calls)
		}
		h.model.Push("dead", scripted.Text("one"))
		_, err := h.rt.SendAndWait(ctx, "dead", "first", user)
		require.NoError(t, err)
		require.Equal(t, 1, rows("dead"))

		// A kill mid-call: nothing for the cancelled call, one row for the
		// revival's.
		h.model.Push("dead", scripted.Text("two"))
		entered := h.model.Hold("dead")
		_, err = h.rt.Send(ctx, "dead", "second", user)
		require.NoError(t, err)
		recv(t, entered, "model call entered")
		require.True(t, h.rt.Kill("dead"))
		require.Equal(t, 1, rows("dead"), "a cancelled call records nothing")
		require.NoError(t, h.rt.Wake(ctx, "dead"))
		h.awaitEvent("dead", 0, isAssistantText("two"))
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			calls, err := h.store.ModelCalls(ctx, "dead")
			require.NoError(c, err)
			assert.Len(c, calls, 2)
		}, wait, time.Millisecond, "the revival's call has its row")
		require.True(t, h.rt.Kill("dead"))

		h.model.Push("live", scripted.Text("hello"))
		_, err = h.rt.SendAndWait(ctx, "live", "hi", user)
		require.NoError(t, err)
		require.Equal(t, 1, rows("live"))
		require.NoError(t, h.rt.Fork(ctx, "live", 2, "forked"))
		require.Zero(t, rows("forked"), "a fork copies no audit row")

		h.model.Push("gone", scripted.Text("bye"))
		_, err = h.rt.SendAndWait(ctx, "gone", "hi", user)
		require.NoError(t, err)
		require.Equal(t, 1, rows("gone"))
		require.NoError(t, h.rt.Delete(ctx, "gone"))
		n, err := h.rt.GCAudit(ctx)
		require.NoError(t, err)
		require.Zero(t, n, "no row is older than the TTL yet")
		calls, err := h.store.ModelCalls(ctx, "gone")
		if err == nil {
			require.Empty(t, calls, "a deleted conversation's rows go with it")
		} else {
			require.ErrorIs(t, err, journal.ErrDeleted)
		}

		h.clock.Advance(2 * time.Hour) // sweeps at 30m, 60m, 90m, 120m
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			for _, conv := range []string{"dead", "live"} {
				calls, err := h.store.ModelCalls(ctx, conv)
				require.NoError(c, err)
				assert.Empty(c, calls, conv)
			}
		}, wait, time.Millisecond, "the sweep removes the rows of a dead conversation and of a live one")
		require.False(t, h.rt.IsActive("dead"), "the sweep revives nothing")
		history, err := h.rt.History(ctx, "dead", 0, 0)
		require.NoError(t, err)
		require.Len(t, history, 4, "the log is not the audit: the sweep leaves it")
	})
}

// TestSeedsSummaryAfterARewindFoldsOnlyTheHead: a rewind below a summary,
// then enough turns for new summaries, then a kill: the summaries written
// after the rewind fold only what the model sees (nothing of the rewound
// span), and the revived turn starts from the latest summary plus the head's
// events after it, the rewound span nowhere in its context. The log keeps
// every event.
func TestSeedsSummaryAfterARewindFoldsOnlyTheHead(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), summarizing)
		ctx := ctxT(t)
		latest := func() *messages.Summary {
			s, err := h.store.LatestSummary(ctx, "s")
			if err != nil {
				return nil
			}
			return s
		}
		for _, text := range []string{"alpha", "bravo", "charlie"} { // seqs 1-6
			h.model.Push("s", scripted.Text("re "+text))
			_, err := h.rt.SendAndWait(ctx, "s", text, user)
			require.NoError(t, err)
		}
		require.Eventually(t, func() bool { return latest().GetToSeq() >= 3 }, wait, time.Millisecond, "a summary below the rewind's span end")
		require.NoError(t, h.rt.Rewind(ctx, "s", 2, lazarus.RewindOptions{Reason: "wrong turn"}, user)) // seq 7
		rewindSeq := uint64(7)
		for _, text := range []string{"delta", "echo", "foxtrot", "golf"} { // seqs 8-15
			h.model.Push("s", scripted.Text("re "+text))
			_, err := h.rt.SendAndWait(ctx, "s", text, user)
			require.NoError(t, err)
		}
		require.Eventually(t, func() bool { return latest().GetToSeq() > rewindSeq }, wait, time.Millisecond, "a summary past the rewind")
		s := latest()
		for _, gone := range []string{"bravo", "charlie"} {
			require.NotContains(t, s.GetContent(), gone, "the summary folds the head only")
		}
		require.Contains(t, s.GetContent(), "alpha")
		require.Contains(t, s.GetContent(), "delta")

		require.True(t, h.rt.Kill("s"))
		h.model.Push("s", scripted.Text("re hotel"))
		end, err := h.rt.SendAndWait(ctx, "s", "hotel", user)
		require.NoError(t, err)
		require.Equal(t, "re hotel", end.Text)
		turns := h.model.Turns("s")
		turn := turns[len(turns)-1]
		require.NotNil(t, turn.Summary)
		final := latest()
		require.GreaterOrEqual(t, final.GetToSeq(), turn.Summary.GetToSeq())
		require.NotContains(t, turn.Summary.GetContent(), "bravo")
		require.NotContains(t, turn.Summary.GetContent(), "charlie")
		for _, ev := range turn.Context {
			require.Greater(t, ev.GetSeq(), turn.Summary.GetToSeq(), "the context starts after its summary")
			require.False(t, ev.GetSeq() >= 3 && ev.GetSeq() <= 6, "seq %d is in the rewound span", ev.GetSeq())
			require.Nil(t, ev.GetRewind(), "a rewind event is not the model's")
		}
		require.Equal(t, "hotel", userTexts(turn.Context)[len(userTexts(turn.Context))-1])
		evs := h.history("s")
		requireGapFree(t, evs)
		require.Equal(t, "bravo", evs[2].GetUserMsg().GetContent()[0].GetText(), "the log keeps the rewound span")
	})
}

// TestSeedsAnswerThenKillThenExpiry: a turn asks two humans; one answers
// (the conversation waits on the other, no model call), the actor is
// killed, the other call's deadline passes while it is dead: the expiry
// revives it and the model is called once, with the answer and the expiry
// as the two results; the row then owes nothing.
func TestSeedsAnswerThenKillThenExpiry(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), nil)
		ctx := ctxT(t)
		h.model.Push("t",
			scripted.Reply("", scripted.Call("approve_refund", `{"amount":1}`), scripted.Call("approve_refund", `{"amount":2}`)),
			scripted.Text("one approved, one expired"))
		end, err := h.rt.SendAndWait(ctx, "t", "ask two", user)
		require.NoError(t, err)
		require.Equal(t, lazarus.TurnSuspended, end.Outcome)
		require.Len(t, end.Pending, 2)
		answered, expiring := end.Pending[0].GetToolCallId(), end.Pending[1].GetToolCallId()
		h.awaitDeadlineArmed(expiring)

		require.NoError(t, h.rt.Resolve(ctx, answered, `{"approved":true}`, agent.Scope{UserID: "bob"}))
		h.awaitEvent("t", end.Seq, func(ev *messages.Event) bool {
			return ev.GetToolResult().GetToolCallId() == answered
		})
		require.Equal(t, 1, h.model.Calls("t"), "no model call while a call is still open")
		conv, err := h.store.Conversation(ctx, "t")
		require.NoError(t, err)
		require.Len(t, conv.GetFsmState().GetPending(), 1)
		require.Contains(t, conv.GetFsmState().GetPending(), expiring)
		require.Equal(t, messages.AgentState_AGENT_STATE_AWAITING_INPUT, conv.GetFsmState().GetState())

		h.rt.Kill("t")
		h.clock.Advance(2 * time.Hour)
		h.awaitEvent("t", end.Seq, isAssistantText("one approved, one expired"))
		require.Equal(t, 2, h.model.Calls("t"), "one model call for both results")
		last := h.model.Turns("t")[1]
		got := toolResults(last, answered)
		require.Len(t, got, 1)
		require.Nil(t, got[0].GetError())
		got = toolResults(last, expiring)
		require.Len(t, got, 1)
		require.Equal(t, "expired", got[0].GetError().GetCode())

		ts := types(h.history("t"))
		require.Equal(t, 1, count(ts, "resolution:TOOL_CALL_STATUS_RESOLVED"), "%v", ts)
		require.Equal(t, 1, count(ts, "resolution:TOOL_CALL_STATUS_EXPIRED"), "%v", ts)
		require.Equal(t, 2, count(ts, "tool_result:approve_refund"), "%v", ts)
		require.Eventually(t, func() bool {
			conv, err := h.store.Conversation(ctx, "t")
			return err == nil && len(conv.GetFsmState().GetPending()) == 0 &&
				conv.GetFsmState().GetState() == messages.AgentState_AGENT_STATE_IDLE &&
				conv.GetFsmState().GetLastSeq() == uint64(len(ts))
		}, wait, time.Millisecond, "the row owes nothing and follows the log")
	})
}

// TestSeedsEditOfOneAgentsMessageTruncatesEveryAgent: seed 003's
// truncate-to-edit ("across all agents in the session"): an Edit of the
// critic's message moves the conversation's head back for every agent, so
// the default agent's later exchange leaves both agents' effective views
// (the log keeps it, marked rewound), and the critic answers the new text
// from its view without it.
func TestSeedsEditOfOneAgentsMessageTruncatesEveryAgent(t *testing.T) {
	h := newHarness(t, openStore(t, "memory"), func(o *lazarus.Options) {
		o.Agents = []lazarus.Agent{{Name: "critic"}}
	})
	ctx := ctxT(t)
	h.model.Push("m", scripted.Text("d1"), scripted.Text("c1"), scripted.Text("d2"))
	send := func(text string, opts lazarus.SendOptions) lazarus.TurnEnd {
		end, err := h.rt.SendMessageAndWait(ctx, "m", agent.UserMessage(agent.TextPart(text)), opts, user)
		require.NoError(t, err)
		return end
	}
	send("hello default", lazarus.SendOptions{Broadcast: true}) // 1, 2
	send("critique", lazarus.SendOptions{Agent: "critic"})      // 3, 4
	send("later default", lazarus.SendOptions{Broadcast: true}) // 5, 6
	evs := h.history("m")
	require.Len(t, evs, 6)
	require.Equal(t, "critique", evs[2].GetUserMsg().GetContent()[0].GetText())

	h.model.Push("m", scripted.Text("c2"))
	newSeq, err := h.rt.Edit(ctx, "m", 3, "critique again", user)
	require.NoError(t, err)
	h.awaitEvent("m", newSeq, isAssistantText("c2"))
	turns := h.model.Turns("m")
	last := turns[len(turns)-1]
	require.Equal(t, []string{"hello default", "critique again"}, userTexts(last.Context), "the critic's turn sees the edit, not the later exchange")

	effective := func(v *lazarus.AgentView) []string {
		entries, err := h.rt.HistoryView(ctx, "m", lazarus.HistoryOptions{Effective: true, Agent: v})
		require.NoError(t, err)
		var out []string
		for _, e := range entries {
			require.False(t, e.Rewound)
			if m := e.Event.GetUserMsg(); m != nil {
				out = append(out, m.GetContent()[0].GetText())
			}
		}
		return out
	}
	require.Equal(t, []string{"hello default"}, effective(lazarus.ViewOf("")), "the default agent's later exchange is truncated too")
	require.Equal(t, []string{"hello default", "critique again"}, effective(lazarus.ViewOf("critic")))
	full, err := h.rt.HistoryView(ctx, "m", lazarus.HistoryOptions{})
	require.NoError(t, err)
	var rewound []uint64
	for _, e := range full {
		if e.Rewound {
			rewound = append(rewound, e.Event.GetSeq())
		}
	}
	require.Equal(t, []uint64{3, 4, 5, 6}, rewound, "the log keeps every agent's truncated events, marked")
}

// TestSeedsWakeOfAConversationWithNothingStored: Wake of an id that has no
// log activates it empty and writes nothing (History is empty, Delete finds
// nothing to delete); with an idle timeout it passivates like any other,
// and a later Send starts its log at seq 1.
func TestSeedsWakeOfAConversationWithNothingStored(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), func(o *lazarus.Options) { o.IdleTimeout = time.Minute })
		ctx := ctxT(t)
		require.NoError(t, h.rt.Wake(ctx, "nobody"))
		require.True(t, h.rt.IsActive("nobody"))
		evs, err := h.rt.History(ctx, "nobody", 0, 0)
		require.NoError(t, err)
		require.Empty(t, evs)

		require.Eventually(t, func() bool {
			h.clock.Advance(2 * time.Minute)
			return !h.rt.IsActive("nobody")
		}, wait, 10*time.Millisecond, "the empty activation passivates when idle")
		require.ErrorIs(t, h.rt.Delete(ctx, "nobody"), journal.ErrNotFound, "nothing was written")

		h.model.Push("nobody", scripted.Text("hello"))
		_, err = h.rt.SendAndWait(ctx, "nobody", "hi", user)
		require.NoError(t, err)
		require.Equal(t, uint64(1), h.history("nobody")[0].GetSeq())
	})
}
