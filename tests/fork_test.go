package tests

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/snapshot"
)

// summarizing makes a summary once 3 events are past the last one, keeping
// the newest event out of it.
func summarizing(o *lazarus.Options) {
	o.Summarizer = snapshot.Deterministic{}
	o.Summary = snapshot.Policy{MaxEvents: 3, MaxTokens: -1, KeepRecent: 1}
}

// userTexts returns the texts of the user messages of a model context.
func userTexts(evs []*messages.Event) []string {
	var out []string
	for _, ev := range evs {
		if m := ev.GetUserMsg(); m != nil {
			out = append(out, m.GetContent()[0].GetText())
		}
	}
	return out
}

// TestForkOnEveryStore: a fork copies the summary and the events after it,
// survives the delete of its source and a kill, and goes on on its own.
func TestForkOnEveryStore(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), summarizing)
		ctx := ctxT(t)
		h.model.Push("src", scripted.Text("one"), scripted.Text("two"), scripted.Text("three"), scripted.Text("src goes on"))
		for _, text := range []string{"first", "second", "third"} { // seqs 1-6
			_, err := h.rt.SendAndWait(ctx, "src", text, user)
			require.NoError(t, err)
		}
		require.Eventually(t, func() bool {
			s, err := h.store.SummaryBefore(ctx, "src", 6)
			return err == nil && s.GetToSeq() >= 3
		}, wait, time.Millisecond, "a summary covers seq 3")
		base, err := h.store.SummaryBefore(ctx, "src", 6)
		require.NoError(t, err)
		require.NoError(t, h.rt.MergeMetadata(ctx, "src", map[string]string{"name": "original"}))

		require.NoError(t, h.rt.Fork(ctx, "src", 6, "dst"))
		row, err := h.store.Conversation(ctx, "dst")
		require.NoError(t, err)
		require.Equal(t, "src", row.GetForkedFrom().GetConversationId())
		require.Equal(t, uint64(6), row.GetForkedFrom().GetSeq())
		require.Equal(t, messages.ConversationStatus_CONVERSATION_STATUS_IDLE, row.GetStatus(), "the fork owes no turn")
		evs := h.history("dst")
		require.Equal(t, base.GetToSeq()+1, evs[0].GetSeq(), "the copy starts after the summary")
		require.Equal(t, uint64(6), evs[len(evs)-1].GetSeq())
		ch, err := h.rt.Chapters(ctx, "dst", 0)
		require.NoError(t, err)
		require.Equal(t, base.GetToSeq(), ch.Summary.GetToSeq(), "the chapter says which summary covers the events before it")
		require.Equal(t, base.GetContent(), ch.Summary.GetContent())
		require.Zero(t, ch.Prev, "the events the summary covers are not in the fork's log")
		for _, before := range []uint64{2, base.GetToSeq() + 1} {
			_, err = h.rt.Chapters(ctx, "dst", before)
			require.ErrorIs(t, err, journal.ErrInvalid, "a page before the fork's first event (before %d)", before)
		}
		first, err := h.rt.Chapters(ctx, "dst", base.GetToSeq()+2)
		require.NoError(t, err)
		require.Equal(t, base.GetToSeq(), first.Summary.GetToSeq(), "the page of the fork's first event")
		require.Len(t, first.Events, 1)
		view, err := h.rt.HistoryView(ctx, "dst", lazarus.HistoryOptions{Effective: true})
		require.NoError(t, err)
		require.Len(t, view, len(evs), "no rewind: the effective view is the copied log")
		require.Equal(t, evs[0].GetSeq(), view[0].Event.GetSeq())
		md, err := h.rt.Metadata(ctx, "dst")
		require.NoError(t, err)
		require.Equal(t, "original", md["name"], "the metadata is copied")

		// The source goes on and is deleted: the fork is whole.
		_, err = h.rt.SendAndWait(ctx, "src", "fourth", user)
		require.NoError(t, err)
		require.NoError(t, h.rt.Delete(ctx, "src"))
		require.Equal(t, evs, h.history("dst"))

		// The fork goes on from the copied summary, then a kill, then a
		// revival from its own log.
		h.model.Push("dst", scripted.Text("fork one"), scripted.Text("fork two"))
		end, err := h.rt.SendAndWait(ctx, "dst", "in the fork", user) // 7, 8
		require.NoError(t, err)
		require.Equal(t, "fork one", end.Text)
		turns := h.model.Turns("dst")
		require.Equal(t, base.GetContent(), turns[0].Summary.GetContent(), "the model sees the copied summary")
		require.NotContains(t, userTexts(turns[0].Context), "fourth", "nothing of the source after the fork point")
		require.Equal(t, "in the fork", userTexts(turns[0].Context)[len(userTexts(turns[0].Context))-1])
		h.rt.Kill("dst")
		end, err = h.rt.SendAndWait(ctx, "dst", "after a kill", user) // 9, 10
		require.NoError(t, err)
		require.Equal(t, "fork two", end.Text)
		turns = h.model.Turns("dst")
		last := turns[len(turns)-1]
		// A summary of the fork may have folded its first message away.
		seen := last.Summary.GetContent() + strings.Join(userTexts(last.Context), "\n")
		require.Contains(t, seen, "in the fork", "the revived working set is the fork's")
		require.NotContains(t, seen, "fourth")
		evs = h.history("dst")
		require.Equal(t, uint64(10), evs[len(evs)-1].GetSeq())
		require.ErrorIs(t, h.rt.Rewind(ctx, "dst", base.GetToSeq()-1, lazarus.RewindOptions{}, user), journal.ErrInvalid,
			"the fork's log holds nothing before its summary to rewind to")
		require.Len(t, h.history("dst"), len(evs), "a refused rewind writes nothing")
		require.NoError(t, h.rt.Rewind(ctx, "dst", base.GetToSeq(), lazarus.RewindOptions{}, user), "back to the copied summary")
		h.model.Push("dst", scripted.Text("fork three"))
		end, err = h.rt.SendAndWait(ctx, "dst", "from the summary", user)
		require.NoError(t, err)
		require.Equal(t, "fork three", end.Text)
		turns = h.model.Turns("dst")
		last = turns[len(turns)-1]
		require.Equal(t, base.GetContent(), last.Summary.GetContent())
		require.Equal(t, []string{"from the summary"}, userTexts(last.Context))
		evs = h.history("dst")

		// Fork of a deleted source, into an existing or deleted id.
		require.ErrorIs(t, h.rt.Fork(ctx, "src", 2, "other"), journal.ErrDeleted)
		require.ErrorIs(t, h.rt.Fork(ctx, "nobody", 2, "other"), journal.ErrNotFound)
		require.ErrorIs(t, h.rt.Fork(ctx, "dst", 8, "dst"), journal.ErrExists)
		require.ErrorIs(t, h.rt.Fork(ctx, "dst", 8, "src"), journal.ErrDeleted)
		require.ErrorIs(t, h.rt.Fork(ctx, "dst", evs[len(evs)-1].GetSeq()+1, "other"), journal.ErrInvalid, "after the last seq")
		require.ErrorIs(t, h.rt.Fork(ctx, "dst", 0, "other"), journal.ErrInvalid)
		err = h.rt.Fork(ctx, "dst", base.GetToSeq(), "other")
		require.ErrorIs(t, err, journal.ErrInvalid, "the fork's log has no history at its summary's end")
		require.ErrorContains(t, err, fmt.Sprintf("the history at seq %d is not in the log (it starts after it)", base.GetToSeq()))
		_, err = h.store.Conversation(ctx, "other")
		require.ErrorIs(t, err, journal.ErrNotFound, "a refused fork writes nothing")

		// A fork of the fork, at its last seq (after the rewind to its
		// summary): the model sees the same context.
		lastSeq := evs[len(evs)-1].GetSeq()
		require.NoError(t, h.rt.Fork(ctx, "dst", lastSeq, "dst3"))
		h.model.Push("dst3", scripted.Text("third generation"))
		end, err = h.rt.SendAndWait(ctx, "dst3", "deeper", user)
		require.NoError(t, err)
		require.Equal(t, "third generation", end.Text)
		turns = h.model.Turns("dst3")
		require.Equal(t, base.GetContent(), turns[0].Summary.GetContent())
		require.Equal(t, []string{"from the summary", "deeper"}, userTexts(turns[0].Context))
	})
}

// TestForkRespectsRewindsAndPendingCalls: a fork copies the effective
// history (a rewind's skipped span stays out of what the model sees), a
// fork at a point with an open call is refused, and a fork that owes a
// turn runs it.
func TestForkRespectsRewindsAndPendingCalls(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), nil)
		ctx := ctxT(t)
		h.suspendOne("c") // 1 user_msg, 2 assistant_msg, 3 tool_call, 4 suspension
		require.ErrorIs(t, h.rt.Fork(ctx, "c", 4, "x"), journal.ErrInvalid, "the call is open at seq 4")
		require.ErrorIs(t, h.rt.Fork(ctx, "c", 3, "x"), journal.ErrInvalid, "the call is open at seq 3")
		_, err := h.store.Conversation(ctx, "x")
		require.ErrorIs(t, err, journal.ErrNotFound)

		require.NoError(t, h.rt.Rewind(ctx, "c", 1, lazarus.RewindOptions{}, user)) // 5
		h.model.Push("c", scripted.Text("second answer"))
		_, err = h.rt.Send(ctx, "c", "something else", user) // 6, then 7
		require.NoError(t, err)
		h.awaitEvent("c", 6, isAssistantText("second answer"))

		// At seq 6 the model owes a turn: the fork runs it, on a context
		// without the rewound span.
		h.model.Push("f", scripted.Text("forked answer"))
		require.NoError(t, h.rt.Fork(ctx, "c", 6, "f"))
		h.awaitEvent("f", 6, isAssistantText("forked answer"))
		turns := h.model.Turns("f")
		require.Len(t, turns, 1)
		require.Equal(t, []string{"refund 900", "something else"}, userTexts(turns[0].Context))
		require.Len(t, turns[0].Context, 2, "the rewound span (the call) is not in the fork's context")
		view, err := h.rt.HistoryView(ctx, "f", lazarus.HistoryOptions{Effective: true})
		require.NoError(t, err)
		var seqs []uint64
		for _, e := range view {
			seqs = append(seqs, e.Event.GetSeq())
		}
		require.Equal(t, []uint64{1, 6, 7}, seqs)
		pending, _, err := h.rt.PendingCalls(ctx, "", 0)
		require.NoError(t, err)
		require.Empty(t, pending, "the fork owes no call")
	})
}

// TestFindOnEveryStore: Find pages through the conversations holding a
// metadata pair, and follows its changes.
func TestFindOnEveryStore(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), nil)
		ctx := ctxT(t)
		var want []string
		for _, id := range []string{"a", "b", "c", "d", "e"} {
			h.model.Push(id, scripted.Text("hi"))
			_, err := h.rt.SendAndWait(ctx, id, "hello", user)
			require.NoError(t, err)
			name := "weekly report"
			if id == "c" {
				name = "other"
			} else {
				want = append(want, id)
			}
			require.NoError(t, h.rt.MergeMetadata(ctx, id, map[string]string{"name": name}))
		}
		var got []string
		cursor := ""
		for pages := 0; ; pages++ {
			require.Less(t, pages, 10)
			ids, next, err := h.rt.Find(ctx, "name", "weekly report", cursor, 2)
			require.NoError(t, err)
			require.LessOrEqual(t, len(ids), 2)
			got = append(got, ids...)
			if next == "" {
				break
			}
			cursor = next
		}
		require.Equal(t, want, got)
		require.NoError(t, h.rt.MergeMetadata(ctx, "a", map[string]string{"name": ""}))
		require.NoError(t, h.rt.Delete(ctx, "b"))
		ids, next, err := h.rt.Find(ctx, "name", "weekly report", "", 0)
		require.NoError(t, err)
		require.Equal(t, []string{"d", "e"}, ids)
		require.Empty(t, next)
		_, _, err = h.rt.Find(ctx, "", "x", "", 0)
		require.ErrorIs(t, err, journal.ErrInvalid)
		_, _, err = h.rt.Find(ctx, "name", "x", "", -1)
		require.ErrorIs(t, err, journal.ErrInvalid)
	})
}

// TestEndOnEveryStore: an ended conversation takes no message, keeps its
// history, stays ended across a kill, and is not in the active index.
func TestEndOnEveryStore(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), nil)
		ctx := ctxT(t)
		h.suspendOne("busy")
		require.ErrorIs(t, h.rt.End(ctx, "busy"), journal.ErrInvalid, "a call is open")
		require.ErrorIs(t, h.rt.End(ctx, "nobody"), journal.ErrNotFound)

		h.model.Push("c", scripted.Text("hi"))
		_, err := h.rt.SendAndWait(ctx, "c", "hello", user) // 1, 2
		require.NoError(t, err)
		// The turn's last write may still be in flight when SendAndWait
		// returns: End waits for it.
		require.NoError(t, h.rt.End(ctx, "c"), "ends right after the turn")
		require.NoError(t, h.rt.End(ctx, "c"), "ending an ended conversation succeeds")
		row, err := h.store.Conversation(ctx, "c")
		require.NoError(t, err)
		require.Equal(t, messages.ConversationStatus_CONVERSATION_STATUS_ENDED, row.GetStatus())

		_, err = h.rt.Send(ctx, "c", "more", user)
		require.ErrorIs(t, err, journal.ErrEnded)
		require.ErrorIs(t, h.rt.Rewind(ctx, "c", 0, lazarus.RewindOptions{}, user), journal.ErrEnded)
		h.rt.Kill("c")
		_, err = h.rt.Send(ctx, "c", "after a kill", user)
		require.ErrorIs(t, err, journal.ErrEnded, "a revived activation reads the status")
		require.Len(t, h.history("c"), 2, "the history stays readable and nothing was appended")
		active, _, err := h.store.ListActiveConversations(ctx, "", 0)
		require.NoError(t, err)
		require.NotContains(t, active, "c", "an ended conversation is not resumed")
		// It can still be forked, and the fork takes messages.
		h.model.Push("c2", scripted.Text("again"))
		require.NoError(t, h.rt.Fork(ctx, "c", 2, "c2"))
		end, err := h.rt.SendAndWait(ctx, "c2", "go on", user)
		require.NoError(t, err)
		require.Equal(t, "again", end.Text)
	})
}

// TestChaptersFollowTheSummaries: reading chapters from the newest back
// gives the whole log, each chapter after the summary it names.
func TestChaptersFollowTheSummaries(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), summarizing)
		ctx := ctxT(t)
		h.model.Push("c", scripted.Text("1"), scripted.Text("2"), scripted.Text("3"), scripted.Text("4"), scripted.Text("5"))
		send := func(texts ...string) {
			for _, text := range texts {
				_, err := h.rt.SendAndWait(ctx, "c", text, user)
				require.NoError(t, err)
			}
		}
		latest := func() uint64 {
			s, err := h.store.LatestSummary(ctx, "c")
			if err != nil {
				return 0
			}
			return s.GetToSeq()
		}
		send("a", "b") // seqs 1-4: a summary is due
		require.Eventually(t, func() bool { return latest() > 0 }, wait, time.Millisecond, "a first summary")
		first := latest()
		send("c", "d", "e") // seqs 5-10: another is due
		require.Eventually(t, func() bool { return latest() > first }, wait, time.Millisecond, "a second summary")
		var seqs []uint64
		var chapters int
		before := uint64(0)
		for {
			ch, err := h.rt.Chapters(ctx, "c", before)
			require.NoError(t, err)
			chapters++
			require.NotEmpty(t, ch.Events)
			require.Equal(t, ch.Summary.GetToSeq()+1, ch.Events[0].GetSeq(), "the chapter starts after its summary")
			for i := len(ch.Events) - 1; i >= 0; i-- {
				seqs = append([]uint64{ch.Events[i].GetSeq()}, seqs...)
			}
			if ch.Prev == 0 {
				require.Nil(t, ch.Summary, "the first chapter has no summary")
				break
			}
			require.Equal(t, ch.Summary.GetToSeq()+1, ch.Prev)
			before = ch.Prev
		}
		require.Greater(t, chapters, 2)
		requireGapFree(t, h.history("c"))
		require.Len(t, seqs, 10)
		require.Equal(t, uint64(1), seqs[0])
		require.Equal(t, uint64(10), seqs[9])
		_, err := h.rt.Chapters(ctx, "", 0)
		require.ErrorIs(t, err, journal.ErrInvalid)
	})
}

// TestForkWithMetadata: ForkWith merges its metadata over the source's in
// the fork's own write (a key replaced, one removed, one added), and the
// metadata index finds the fork by the new value only; a removed key is
// removed from metadata the new id held without a row too; bad metadata
// writes nothing.
func TestForkWithMetadata(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), nil)
		ctx := ctxT(t)
		h.model.Push("src", scripted.Text("one"))
		_, err := h.rt.SendAndWait(ctx, "src", "first", user)
		require.NoError(t, err)
		require.NoError(t, h.rt.MergeMetadata(ctx, "src", map[string]string{"owner": "alice", "topic": "pay", "draft": "yes"}))

		require.NoError(t, h.rt.ForkWith(ctx, "src", 2, "dst", lazarus.ForkOptions{
			Metadata: map[string]string{"owner": "bob", "draft": "", "copy": "1"}}))
		md, err := h.rt.Metadata(ctx, "dst")
		require.NoError(t, err)
		require.Equal(t, map[string]string{"owner": "bob", "topic": "pay", "copy": "1"}, md)
		ids, _, err := h.rt.Find(ctx, "owner", "alice", "", 0)
		require.NoError(t, err)
		require.Equal(t, []string{"src"}, ids, "the fork never had the source's owner")
		ids, _, err = h.rt.Find(ctx, "owner", "bob", "", 0)
		require.NoError(t, err)
		require.Equal(t, []string{"dst"}, ids)

		// An id may hold metadata without a row (a Store-level write): a
		// key removed by the options is removed from it too, the others
		// are merged into it.
		require.NoError(t, h.store.PutMetadata(ctx, "pre", map[string]string{"draft": "old", "keep": "k"}))
		require.NoError(t, h.rt.ForkWith(ctx, "src", 2, "pre", lazarus.ForkOptions{
			Metadata: map[string]string{"draft": ""}}))
		md, err = h.rt.Metadata(ctx, "pre")
		require.NoError(t, err)
		require.Equal(t, map[string]string{"owner": "alice", "topic": "pay", "keep": "k"}, md)

		err = h.rt.ForkWith(ctx, "src", 2, "bad", lazarus.ForkOptions{Metadata: map[string]string{"": "x"}})
		require.ErrorIs(t, err, journal.ErrInvalid)
		_, err = h.store.Conversation(ctx, "bad")
		require.ErrorIs(t, err, journal.ErrNotFound, "nothing written")
	})
}

// hidingSummaries is a Store whose next LatestSummary, once armed, finds
// none: as if the summary landed just after the Runtime's check.
type hidingSummaries struct {
	journal.Store
	hide atomic.Bool
}

func (s *hidingSummaries) LatestSummary(ctx context.Context, id string) (*messages.Summary, error) {
	if s.hide.CompareAndSwap(true, false) {
		return nil, fmt.Errorf("hidden: %w", journal.ErrNotFound)
	}
	return s.Store.LatestSummary(ctx, id)
}

// TestRewindMeetsASummaryLandingAfterItsCheck: the Runtime checks a
// rewind's target against the log only when the latest summary covers it;
// a summary that lands after that check makes the core refuse the target
// it cannot check. The Runtime checks again and sends the rewind (and an
// edit) again, checked: it succeeds, written once.
func TestRewindMeetsASummaryLandingAfterItsCheck(t *testing.T) {
	st := &hidingSummaries{Store: memjournal.New(memjournal.Options{})}
	h := newHarness(t, st, summarizing)
	ctx := ctxT(t)
	h.model.Push("c", scripted.Text("one"), scripted.Text("two"), scripted.Text("three"), scripted.Text("edited"))
	for _, text := range []string{"first", "second", "third"} { // seqs 1-6
		_, err := h.rt.SendAndWait(ctx, "c", text, user)
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		s, err := st.Store.LatestSummary(ctx, "c")
		return err == nil && s.GetToSeq() >= 3
	}, wait, time.Millisecond, "a summary covers seq 3")
	h.rt.Kill("c") // the next activation starts from the summary

	st.hide.Store(true)
	require.NoError(t, h.rt.Rewind(ctx, "c", 2, lazarus.RewindOptions{}, user))
	require.False(t, st.hide.Load(), "the first check did not see the summary")
	rewinds := 0
	for _, ev := range h.history("c") {
		if ev.GetRewind() != nil {
			rewinds++
			require.Equal(t, uint64(2), ev.GetRewind().GetToSeq())
		}
	}
	require.Equal(t, 1, rewinds, "written once")

	h.rt.Kill("c")
	st.hide.Store(true)
	seq, err := h.rt.Edit(ctx, "c", 1, "first, edited", user)
	require.NoError(t, err, "an edit below the summary too")
	require.Equal(t, "first, edited", h.history("c")[seq-1].GetUserMsg().GetContent()[0].GetText())
}

// TestMetadataAlwaysFitsAFork: MergeMetadata refuses a merge that leaves
// the conversation's metadata over journal.MaxRecordBytes, though each
// merge is under it, and writes nothing; so Fork, which copies the
// metadata in one record, can always fork it. Merges of 3 MiB each were
// accepted, and every fork of the conversation then failed with
// ErrInvalid.
func TestMetadataAlwaysFitsAFork(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), nil)
		ctx := ctxT(t)
		h.model.Push("src", scripted.Text("one"))
		_, err := h.rt.SendAndWait(ctx, "src", "first", user)
		require.NoError(t, err)
		big := strings.Repeat("x", 3<<20)
		require.NoError(t, h.rt.MergeMetadata(ctx, "src", map[string]string{"k1": big}))
		err = h.rt.MergeMetadata(ctx, "src", map[string]string{"k2": big})
		require.ErrorIs(t, err, journal.ErrInvalid, "6 MiB of metadata in all")
		md, err := h.rt.Metadata(ctx, "src")
		require.NoError(t, err)
		require.Equal(t, map[string]string{"k1": big}, md, "the refused merge wrote nothing")

		require.NoError(t, h.rt.Fork(ctx, "src", 2, "dst"))
		md, err = h.rt.Metadata(ctx, "dst")
		require.NoError(t, err)
		require.Equal(t, map[string]string{"k1": big}, md)
	})
}
