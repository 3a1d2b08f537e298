package snapshot_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/snapshot"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRebuild(t *testing.T) {
	cases := []struct {
		name     string
		summary  *messages.Summary
		events   []*messages.Event
		wantLast uint64
		wantErr  string // fragment naming the problem; "" means valid
	}{
		{"empty conversation", nil, nil, 0, ""},
		{"events from 1", nil, log(1, user("a"), asst("b")), 2, ""},
		{"summary, no events after", summary(1, 7), nil, 7, ""},
		{"summary and events after", summary(1, 7), log(8, user("a"), asst("b")), 9, ""},
		{"first event not 1", nil, log(2, user("a")), 0, "has seq 2, want 1"},
		{"gap in the middle", nil, append(log(1, user("a")), log(3, user("c"))...), 0, "has seq 3, want 2"},
		{"duplicate seq", nil, append(log(1, user("a")), log(1, user("b"))...), 0, "has seq 1, want 2"},
		{"descending", nil, append(log(2, user("a")), log(1, user("b"))...), 0, "has seq 2, want 1"},
		{"overlaps the summary", summary(1, 7), log(7, user("a")), 0, "has seq 7, want 8"},
		{"gap after the summary", summary(1, 7), log(9, user("a")), 0, "has seq 9, want 8"},
		{"nil event", nil, []*messages.Event{nil}, 0, "is nil (want seq 1)"},
		{"summary from 0", summary(0, 3), nil, 0, "summary covers seq 0..3"},
		{"summary backwards", summary(5, 3), nil, 0, "summary covers seq 5..3"},
		{"rewind forwards", nil, log(1, user("a"), rewind(2)), 0, "rewind at seq 2 targets seq 2"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w, err := snapshot.Rebuild(tc.summary, tc.events)
			if tc.wantErr != "" {
				require.ErrorIs(t, err, journal.ErrCorrupt)
				assert.Contains(t, err.Error(), tc.wantErr)
				assert.Nil(t, w)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.wantLast, w.LastSeq)
			assert.Equal(t, tc.summary, w.Summary)
			assert.Equal(t, seqs(tc.events), seqs(w.Events))
		})
	}
}

func TestAppend(t *testing.T) {
	w, err := snapshot.Rebuild(summary(1, 3), log(4, user("a")))
	require.NoError(t, err)

	err = w.Append(log(5, asst("b"), user("c"))...)
	require.NoError(t, err)
	assert.Equal(t, uint64(6), w.LastSeq)
	assert.Equal(t, []uint64{4, 5, 6}, seqs(w.Events))

	err = w.Append(append(log(7, asst("d")), log(9, user("e"))...)...)
	require.ErrorIs(t, err, journal.ErrCorrupt)
	assert.Contains(t, err.Error(), "has seq 9, want 8")
	assert.Equal(t, uint64(6), w.LastSeq, "a rejected append adds nothing")
	assert.Equal(t, []uint64{4, 5, 6}, seqs(w.Events))

	require.NoError(t, w.Append(), "appending nothing is fine")
	require.NoError(t, w.Append(log(7, asst("d"))...))
	assert.Equal(t, uint64(7), w.LastSeq)
}

func TestRender(t *testing.T) {
	cases := []struct {
		name    string
		summary *messages.Summary
		events  []*messages.Event
		want    []uint64
	}{
		{"empty", nil, nil, []uint64{}},
		{"only user, assistant and tool results render", nil, log(1,
			user("q"), asst("", "c1"), call("c1"), suspension("c1"), resolution("c1"), result("c1", `1`), asst("done"), unknown()),
			[]uint64{1, 2, 6, 7}},
		{"rewind skips the span and itself", nil, log(1,
			user("a"), asst("b"), user("c"), asst("d"), rewind(2), user("c2")),
			[]uint64{1, 2, 6}},
		{"rewind to 0 skips everything before", nil, log(1,
			user("a"), asst("b"), rewind(0), user("fresh")),
			[]uint64{4}},
		{"no-op rewind to the previous seq", nil, log(1,
			user("a"), asst("b"), rewind(2), user("c")),
			[]uint64{1, 2, 4}},
		{"chained rewinds", nil, log(1,
			user("a"), asst("b"), user("c"), asst("d"), rewind(2), user("e"), asst("f"), rewind(6), user("g")),
			[]uint64{1, 2, 6, 9}},
		{"outer rewind covers an inner one", nil, log(1,
			user("a"), asst("b"), user("c"), rewind(1), user("d"), asst("e"), rewind(2), user("f")),
			[]uint64{1, 2, 8}},
		{"a later rewind undoes an earlier one", nil, log(1,
			// 6 rewinds to 1 (skipping 2..5); 8 rewinds to 5, past 6, which then has no effect.
			user("a"), asst("b"), user("c"), asst("d"), user("e"), rewind(1), user("x"), rewind(5), asst("f")),
			[]uint64{1, 2, 3, 4, 5, 9}},
		{"rewind to a rewind keeps that rewind's effect", nil, log(1,
			user("a"), asst("b"), user("c"), rewind(2), user("d"), rewind(4), asst("e")),
			[]uint64{1, 2, 7}},
		{"after a summary", summary(1, 10), log(11,
			user("a"), asst("b"), rewind(11), asst("b2")),
			[]uint64{11, 14}},
		{"rewind to the summary's end", summary(1, 10), log(11,
			user("a"), asst("b"), rewind(10), user("c")),
			[]uint64{14}},
		{"rewind past the summary", summary(1, 10), log(11,
			user("a"), rewind(4), user("c")),
			[]uint64{13}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w, err := snapshot.Rebuild(tc.summary, tc.events)
			require.NoError(t, err)
			assert.Equal(t, tc.want, seqs(w.Render()))
			assert.Equal(t, lastOf(w.Render()), w.LastRendered())

			// The same, one event at a time, rendering after each.
			w, err = snapshot.Rebuild(tc.summary, nil)
			require.NoError(t, err)
			for i, ev := range tc.events {
				require.NoError(t, w.Append(ev))
				fresh, err := snapshot.Rebuild(tc.summary, tc.events[:i+1])
				require.NoError(t, err)
				require.Equal(t, seqs(fresh.Render()), seqs(w.Render()), "after seq %d", ev.GetSeq())
				require.Equal(t, lastOf(fresh.Render()), w.LastRendered(), "after seq %d", ev.GetSeq())
			}
			assert.Equal(t, tc.want, seqs(w.Render()))
		})
	}
}

func TestRewoundPastSummary(t *testing.T) {
	cases := []struct {
		name    string
		summary *messages.Summary
		events  []*messages.Event
		wantSeq uint64
		want    bool
	}{
		{"no rewind", summary(1, 10), log(11, user("a")), 0, false},
		{"rewind within the events", summary(1, 10), log(11, user("a"), asst("b"), rewind(11)), 0, false},
		{"rewind to the summary's end", summary(1, 10), log(11, user("a"), rewind(10)), 0, false},
		{"rewind below the summary", summary(1, 10), log(11, user("a"), rewind(4), user("b")), 4, true},
		{"skipped rewind below the summary", summary(1, 10), log(11, user("a"), rewind(4), user("b"), rewind(11)), 0, false},
		{"no summary, rewind to 0", nil, log(1, user("a"), rewind(0)), 0, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w, err := snapshot.Rebuild(tc.summary, tc.events)
			require.NoError(t, err)
			seq, rewound := w.RewoundPastSummary()
			assert.Equal(t, tc.want, rewound)
			assert.Equal(t, tc.wantSeq, seq)
		})
	}
}

// TestRewoundBelow: whether a summary ending at a seq would stand for
// events a later rewind on the head took back. Rewinds at or before that
// seq are the summary's own, and a rewind that a later one skipped does
// not count.
func TestRewoundBelow(t *testing.T) {
	cases := []struct {
		name    string
		summary *messages.Summary
		events  []*messages.Event
		seq     uint64
		want    bool
	}{
		{"no rewind", nil, log(1, user("a"), asst("b"), user("c")), 2, false},
		{"rewind to the seq", nil, log(1, user("a"), asst("b"), rewind(2), user("c")), 2, false},
		{"rewind below the seq", nil, log(1, user("a"), asst("b"), rewind(1), user("c")), 2, true},
		{"rewind to 0", nil, log(1, user("a"), asst("b"), rewind(0), user("c")), 2, true},
		{"rewind before the seq is the summary's", nil, log(1, user("a"), rewind(0), user("c"), asst("d")), 4, false},
		{"skipped rewind below the seq", nil, log(1, user("a"), asst("b"), user("c"), rewind(1), user("d"), rewind(3)), 3, false},
		{"after a summary", summary(1, 10), log(11, user("a"), asst("b"), rewind(11)), 12, true},
		{"after a summary, to its end", summary(1, 10), log(11, user("a"), asst("b"), rewind(10)), 10, false},
		{"seq at the end", nil, log(1, user("a"), asst("b")), 2, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w, err := snapshot.Rebuild(tc.summary, tc.events)
			require.NoError(t, err)
			assert.Equal(t, tc.want, w.RewoundBelow(tc.seq))
		})
	}
}

// TestEvicted: what the rendered context leaves out, for the audit: the
// span a summary stands for, and each span a rewind on the head skipped
// (a rewind that is itself skipped skips nothing).
func TestEvicted(t *testing.T) {
	cases := []struct {
		name    string
		summary *messages.Summary
		events  []*messages.Event
		want    []string
	}{
		{"the whole log", nil, log(1, user("a"), asst("b")), nil},
		{"a summary", summary(1, 10), log(11, user("a"), asst("b")), []string{"summary:1-10"}},
		{"a rewind", nil, log(1, user("a"), asst("b"), user("c"), asst("d"), rewind(2), user("e")), []string{"rewound:3-4"}},
		{"a rewind to the start", nil, log(1, user("a"), asst("b"), rewind(0)), []string{"rewound:1-2"}},
		{"a summary and two rewinds", summary(1, 10),
			log(11, user("a"), asst("b"), rewind(11), user("c"), asst("d"), user("e"), rewind(15), user("f")),
			[]string{"summary:1-10", "rewound:12-12", "rewound:16-16"}},
		{"a skipped rewind skips nothing", nil,
			log(1, user("a"), asst("b"), user("c"), rewind(2), user("d"), rewind(3)), []string{"rewound:4-5"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w, err := snapshot.Rebuild(tc.summary, tc.events)
			require.NoError(t, err)
			assert.Equal(t, tc.want, w.Evicted())
		})
	}
}

func TestOpenCalls(t *testing.T) {
	cases := []struct {
		name   string
		events []*messages.Event
		want   []string
	}{
		{"none", log(1, user("a"), asst("b")), nil},
		{"answered", log(1, user("a"), asst("", "c1"), call("c1"), result("c1", `1`)), nil},
		{"unanswered", log(1, user("a"), asst("", "c1"), call("c1")), []string{"c1"}},
		{"in log order, answered ones left out", log(1,
			user("a"), asst("", "c1", "c2", "c3"), call("c1"), call("c2"), call("c3"), result("c2", `2`)),
			[]string{"c1", "c3"}},
		{"suspended human call", log(1,
			user("a"), asst("", "h1"), call("h1"), suspension("h1")),
			[]string{"h1"}},
		{"resolved human call", log(1,
			user("a"), asst("", "h1"), call("h1"), suspension("h1"), resolution("h1"), result("h1", `"yes"`)),
			nil},
		{"call in a rewound span is not open", log(1,
			user("a"), asst("", "c1"), call("c1"), rewind(1), user("again")),
			nil},
		{"result in a rewound span does not count", log(1,
			user("a"), asst("", "c1"), call("c1"), result("c1", `1`), rewind(3)),
			[]string{"c1"}},
		{"a call named by two tool_call events is owed once, by the first", log(1,
			user("a"), asst("", "c1", "c2"), call("c1"), call("c2"), call("c1")),
			[]string{"c1", "c2"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w, err := snapshot.Rebuild(nil, tc.events)
			require.NoError(t, err)
			var got []string
			for _, c := range w.OpenCalls() {
				got = append(got, c.GetCall().GetId())
			}
			assert.Equal(t, tc.want, got)
			for _, c := range w.OpenCalls() {
				first := slices.IndexFunc(tc.events, func(ev *messages.Event) bool {
					return ev.GetToolCall().GetCall().GetId() == c.GetCall().GetId()
				})
				assert.Same(t, tc.events[first].GetToolCall(), c, "the first event naming the call")
			}
		})
	}
}

func TestEndsWithUserMsg(t *testing.T) {
	cases := []struct {
		name   string
		events []*messages.Event
		want   bool
	}{
		{"empty", nil, false},
		{"user last", log(1, user("a")), true},
		{"assistant last", log(1, user("a"), asst("b")), false},
		{"tool result last", log(1, user("a"), asst("", "c"), call("c"), result("c", `1`)), false},
		{"user then non-rendered events", log(1, user("a"), unknown()), true},
		{"user hidden by a rewind", log(1, user("a"), asst("b"), user("c"), rewind(2)), false},
		{"user after a rewind", log(1, user("a"), asst("b"), rewind(1)), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w, err := snapshot.Rebuild(nil, tc.events)
			require.NoError(t, err)
			assert.Equal(t, tc.want, w.EndsWithUserMsg())
		})
	}
}

// toolRound is a user message, an assistant message calling c, the call and
// its result, and the final answer: seqs start..start+4.
func toolRound(c string) []*messages.Event {
	return []*messages.Event{user("q " + c), asst("", c), call(c), result(c, `1`), asst("a " + c)}
}

func TestSafePoint(t *testing.T) {
	cases := []struct {
		name    string
		summary *messages.Summary
		events  []*messages.Event
		keep    int
		want    uint64
	}{
		{"empty", nil, nil, 0, 0},
		{"no calls, keep none", nil, log(1, user("a"), asst("b"), user("c")), 0, 3},
		{"no calls, keep 1", nil, log(1, user("a"), asst("b"), user("c")), 1, 2},
		{"negative keep is 0", nil, log(1, user("a"), asst("b")), -5, 2},
		{"keep everything", nil, log(1, user("a"), asst("b")), 2, 0},
		{"keep more than there is", nil, log(1, user("a"), asst("b")), 10, 0},
		{"not between an assistant message and its calls", nil, log(1, toolRound("c1")...), 2, 1},
		{"not between a call and its result", nil, log(1, toolRound("c1")...), 1, 4},
		{"after the result", nil, log(1, toolRound("c1")...), 0, 5},
		{"open call blocks everything after it", nil, log(1,
			user("a"), asst("b"), user("c"), asst("", "h1"), call("h1"), suspension("h1"), user("more"), asst("more")),
			0, 3},
		{"two calls, one open", nil, log(1,
			user("a"), asst("", "c1", "c2"), call("c1"), call("c2"), result("c1", `1`), asst("x"), result("c2", `2`), asst("y")),
			0, 8},
		{"two calls, both open until the second result", nil, log(1,
			user("a"), asst("", "c1", "c2"), call("c1"), call("c2"), result("c1", `1`), asst("x"), result("c2", `2`), asst("y")),
			2, 1},
		{"must be after the summary", summary(1, 10), log(11, user("a"), asst("", "h"), call("h")), 0, 11},
		{"none after the summary", summary(1, 10), log(11, asst("", "h"), call("h"), user("x")), 0, 0},
		{"keep reaches into the summary", summary(1, 10), log(11, user("a"), asst("b")), 2, 0},
		{"not inside a rewound span", nil, log(1,
			user("a"), asst("b"), user("c"), asst("d"), rewind(2), user("e"), asst("f")),
			3, 2},
		{"the rewind event may end a summary", nil, log(1,
			user("a"), asst("b"), user("c"), asst("d"), rewind(2), user("e"), asst("f")),
			2, 5},
		{"a call hidden by a rewind does not block", nil, log(1,
			user("a"), asst("", "c1"), call("c1"), rewind(1), user("b"), asst("c")),
			0, 6},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w, err := snapshot.Rebuild(tc.summary, tc.events)
			require.NoError(t, err)
			assert.Equal(t, tc.want, w.SafePoint(tc.keep))
		})
	}
}

func TestCheckRewind(t *testing.T) {
	events := log(11,
		user("a"), asst("b"), // 11, 12
		user("c"), asst("", "c1"), call("c1"), result("c1", `1`), asst("d"), // 13..17
		user("e"), asst("f"), rewind(14-1), // 18, 19, 20: skips 14..19
		user("g")) // 21
	w, err := snapshot.Rebuild(summary(1, 10), events)
	require.NoError(t, err)
	cases := []struct {
		name string
		to   uint64
		want string // "" means valid
	}{
		{"to the summary's end", 10, ""},
		{"to a visible message", 12, ""},
		{"to the rewind target", 13, ""},
		{"to the rewind event", 20, ""},
		{"to the last seq", 21, ""},
		{"after the last seq", 22, "after the last seq 21"},
		{"inside the summary", 9, "inside the summary ending at seq 10"},
		{"into a rewound span", 17, "an earlier rewind skipped"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := w.CheckRewind(tc.to)
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, journal.ErrInvalid)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	t.Run("on the head", func(t *testing.T) {
		// The summary's events and those after the log are not; a
		// rewound span is not, though the seq before it is.
		for seq := uint64(0); seq <= 22; seq++ {
			want := (seq > 10 && seq < 14) || (seq >= 20 && seq <= 21)
			assert.Equal(t, want, w.OnHead(seq), "seq %d", seq)
		}
	})
	t.Run("between a call and its result", func(t *testing.T) {
		w, err := snapshot.Rebuild(nil, log(1, toolRound("c1")...))
		require.NoError(t, err)
		for _, to := range []uint64{2, 3} {
			err := w.CheckRewind(to)
			require.ErrorIs(t, err, journal.ErrInvalid, "to %d", to)
			assert.Contains(t, err.Error(), "a tool call is still open")
		}
		require.NoError(t, w.CheckRewind(0))
		require.NoError(t, w.CheckRewind(4))
	})
}

func TestCompact(t *testing.T) {
	newSet := func(t *testing.T) *snapshot.WorkingSet {
		w, err := snapshot.Rebuild(summary(1, 2), log(3, user("a"), asst("b"), user("c")))
		require.NoError(t, err)
		return w
	}
	cases := []struct {
		name       string
		s          *messages.Summary
		wantErr    string
		wantEvents []uint64
	}{
		{"drops covered events", summary(1, 4), "", []uint64{5}},
		{"covers everything", summary(1, 5), "", []uint64{}},
		{"same end as the current summary", summary(1, 2), "", []uint64{3, 4, 5}},
		{"nil", nil, "nil summary", nil},
		{"bad span", summary(4, 3), "covers seq 4..3", nil},
		{"older than the current summary", summary(1, 1), "outside 2..5", nil},
		{"beyond the log", summary(1, 6), "outside 2..5", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := newSet(t)
			err := w.Compact(tc.s)
			if tc.wantErr != "" {
				require.ErrorIs(t, err, journal.ErrInvalid)
				assert.Contains(t, err.Error(), tc.wantErr)
				assert.Equal(t, []uint64{3, 4, 5}, seqs(w.Events), "unchanged")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.s, w.Summary)
			assert.Equal(t, tc.wantEvents, seqs(w.Events))
			assert.Equal(t, uint64(5), w.LastSeq)
			require.NoError(t, w.Append(log(6, asst("d"))...), "appends continue after a compaction")
		})
	}
}

func TestPlanAndRun(t *testing.T) {
	ctx := context.Background()
	// 1..5 a tool round, 6 an open human call's assistant message, 7 its call.
	w, err := snapshot.Rebuild(nil, append(log(1, toolRound("c1")...), log(6, asst("", "h1"), call("h1"))...))
	require.NoError(t, err)

	p, ok := w.Plan(0)
	require.True(t, ok)
	assert.Equal(t, uint64(1), p.FromSeq)
	assert.Equal(t, uint64(5), p.ToSeq, "the open human call keeps the summary before it")
	assert.Nil(t, p.Prev)
	assert.Equal(t, []uint64{1, 2, 4, 5}, seqs(p.Events), "rendered events only")
	assert.Same(t, w.Events[0], p.Events[0], "the plan shares the working set's records")
	first := p.Events[0]
	p.Events[0] = nil
	assert.NotNil(t, w.Render()[0], "in a slice of its own")
	p.Events[0] = first

	s, err := p.Run(ctx, snapshot.Deterministic{}, "conv")
	require.NoError(t, err)
	assert.Equal(t, uint64(1), s.GetFromSeq())
	assert.Equal(t, uint64(5), s.GetToSeq())
	assert.Equal(t, snapshot.DeterministicVersion, s.GetVersion())

	require.NoError(t, w.Compact(s))
	assert.Equal(t, []uint64{6}, seqs(w.Render()))
	assert.Equal(t, "h1", w.OpenCalls()[0].GetCall().GetId(), "the open call survives compaction")
	_, ok = w.Plan(0)
	assert.False(t, ok, "nothing more can be summarized while h1 is open")

	// Resolve h1 and add a turn; then summarize again, folding the previous summary.
	require.NoError(t, w.Append(log(8, suspension("h1"), resolution("h1"), result("h1", `"yes"`), asst("thanks"))...))
	p2, ok := w.Plan(1)
	require.True(t, ok)
	assert.Equal(t, uint64(10), p2.ToSeq, "ends after the result, keeping one event")
	assert.Equal(t, uint64(1), p2.FromSeq, "from the previous summary's start")
	assert.Equal(t, s.GetContent(), p2.Prev.GetContent())
	s2, err := p2.Run(ctx, snapshot.Deterministic{}, "conv")
	require.NoError(t, err)
	assert.Equal(t, uint64(1), s2.GetFromSeq())
	assert.Equal(t, uint64(10), s2.GetToSeq())
	assert.Contains(t, s2.GetContent(), "[1] user: q c1", "the earlier summary is folded in")
	assert.Contains(t, s2.GetContent(), `[10] tool tool_h1: "yes"`)
}

func TestPlanRunEndsAtSafePointBeyondLastRendered(t *testing.T) {
	// The safe point (5) is a non-rendered event after the last rendered (3).
	w, err := snapshot.Rebuild(nil, log(1, user("a"), asst("b"), user("c"), unknown(), unknown(), user("d")))
	require.NoError(t, err)
	p, ok := w.Plan(1)
	require.True(t, ok)
	s, err := p.Run(context.Background(), snapshot.Deterministic{}, "conv")
	require.NoError(t, err)
	assert.Equal(t, uint64(5), s.GetToSeq())
}

func TestPlanRunWithoutRenderedEvents(t *testing.T) {
	// The rewind at 13 skips 11 and 12: nothing to fold up to the safe point 13.
	prev := summary(1, 10)
	w, err := snapshot.Rebuild(prev, log(11, user("a"), asst("b"), rewind(10), user("c")))
	require.NoError(t, err)
	p, ok := w.Plan(1)
	require.True(t, ok)
	assert.Empty(t, p.Events)
	s, err := p.Run(context.Background(), failing{}, "conv")
	require.NoError(t, err, "the summarizer is not called")
	assert.Equal(t, uint64(1), s.GetFromSeq())
	assert.Equal(t, uint64(13), s.GetToSeq())
	assert.Equal(t, prev.GetContent(), s.GetContent())
	assert.Equal(t, prev.GetVersion(), s.GetVersion())
}

func TestPlanRunErrors(t *testing.T) {
	w, err := snapshot.Rebuild(nil, log(1, user("a"), asst("b")))
	require.NoError(t, err)
	p, ok := w.Plan(0)
	require.True(t, ok)
	_, err = p.Run(context.Background(), failing{}, "conv")
	require.ErrorIs(t, err, errFailing)
	_, err = p.Run(context.Background(), nothing{}, "conv")
	require.ErrorContains(t, err, "summarizer returned no summary")
	require.ErrorIs(t, err, journal.ErrInvalid, "a summarizer that breaks its contract is named by a sentinel")
	_, err = p.Run(context.Background(), nil, "conv")
	require.ErrorIs(t, err, journal.ErrInvalid, "a nil summarizer is an error, not a panic")
}

var errFailing = assert.AnError

type failing struct{}

func (failing) Summarize(context.Context, string, *messages.Summary, []*messages.Event) (*messages.Summary, error) {
	return nil, errFailing
}

type nothing struct{}

func (nothing) Summarize(context.Context, string, *messages.Summary, []*messages.Event) (*messages.Summary, error) {
	return nil, nil
}

// withRequest gives ev an idempotency key.
func withRequest(ev *messages.Event, rid string) *messages.Event {
	ev.RequestId = rid
	return ev
}

func requestIDs(refs []*messages.RequestRef) []string {
	out := []string{}
	for _, r := range refs {
		out = append(out, fmt.Sprint(r.GetRequestId(), "@", r.GetSeq()))
	}
	return out
}

func TestSummaryCarriesRequests(t *testing.T) {
	ctx := context.Background()
	// The previous summary carried r1@2; events 11.. carry r2, r3 (one
	// rewound away: still carried, its event exists), and r4 after the safe
	// point.
	prev := summary(1, 10)
	prev.Requests = []*messages.RequestRef{{RequestId: "r1", Seq: 2}}
	w, err := snapshot.Rebuild(prev, log(11,
		withRequest(user("a"), "r2"), asst("b"), withRequest(user("c"), "r3"), rewind(12), user("d"), asst("e"),
		withRequest(user("f"), "r4")))
	require.NoError(t, err)
	p, ok := w.Plan(1)
	require.True(t, ok)
	require.Equal(t, uint64(16), p.ToSeq)
	s, err := p.Run(ctx, snapshot.Deterministic{}, "conv")
	require.NoError(t, err)
	assert.Equal(t, []string{"r1@2", "r2@11", "r3@13"}, requestIDs(s.GetRequests()), "oldest first; none after the safe point")
	assert.Equal(t, []string{"r1@2"}, requestIDs(prev.GetRequests()), "prev is not modified")
}

func TestSummaryRequestsAreBounded(t *testing.T) {
	var evs []*messages.Event
	for i := range snapshot.MaxSummaryRequests + 5 {
		evs = append(evs, withRequest(user("m"), fmt.Sprint("r", i)), asst("ok"))
	}
	w, err := snapshot.Rebuild(nil, log(1, evs...))
	require.NoError(t, err)
	p, ok := w.Plan(0)
	require.True(t, ok)
	require.Len(t, p.Requests, snapshot.MaxSummaryRequests)
	assert.Equal(t, "r5", p.Requests[0].GetRequestId(), "the newest are kept")
	assert.Equal(t, fmt.Sprint("r", snapshot.MaxSummaryRequests+4), p.Requests[len(p.Requests)-1].GetRequestId())

	// By bytes: a key too long to fit is not carried; the older short
	// ones still are, up to the byte bound.
	long := strings.Repeat("x", snapshot.MaxSummaryRequestBytes+1)
	half := strings.Repeat("y", snapshot.MaxSummaryRequestBytes/2)
	w, err = snapshot.Rebuild(nil, log(1,
		withRequest(user("a"), "short-1"), asst("ok"),
		withRequest(user("b"), half+"1"), asst("ok"),
		withRequest(user("c"), half+"2"), asst("ok"),
		withRequest(user("d"), long), asst("ok")))
	require.NoError(t, err)
	p, ok = w.Plan(0)
	require.True(t, ok)
	assert.Equal(t, []string{"short-1@1", half + "2@5"}, requestIDs(p.Requests), "the newest that fit, oldest first")
	total := 0
	for _, r := range p.Requests {
		total += len(r.GetRequestId())
	}
	assert.LessOrEqual(t, total, snapshot.MaxSummaryRequestBytes)

	// Keys of the runtime's longest (journal.MaxIDBytes): the newest
	// MaxSummaryRequests of them all fit.
	evs = nil
	for i := range snapshot.MaxSummaryRequests + 2 {
		key := fmt.Sprintf("%03d", i) + strings.Repeat("k", journal.MaxIDBytes-3)
		evs = append(evs, withRequest(user("m"), key), asst("ok"))
	}
	w, err = snapshot.Rebuild(nil, log(1, evs...))
	require.NoError(t, err)
	p, ok = w.Plan(0)
	require.True(t, ok)
	require.Len(t, p.Requests, snapshot.MaxSummaryRequests)
	assert.True(t, strings.HasPrefix(p.Requests[0].GetRequestId(), "002"), "the newest are kept")
}

// keepPrev is a summarizer with nothing to add: it returns the summary it
// was given, as a caching or "no change" summarizer may.
type keepPrev struct{}

func (keepPrev) Summarize(_ context.Context, _ string, prev *messages.Summary, _ []*messages.Event) (*messages.Summary, error) {
	return prev, nil
}

func TestPlanRunLeavesTheSummarizersRecordAlone(t *testing.T) {
	// The summarizer returns prev, the working set's own summary: Run sets
	// the span and keys on a copy, so the working set still starts after
	// seq 10, and a later Compact drops the events the new summary covers.
	prev := summary(1, 10)
	w, err := snapshot.Rebuild(prev, log(11, withRequest(user("a"), "r1"), asst("b"), user("c"), asst("d")))
	require.NoError(t, err)
	p, ok := w.Plan(2)
	require.True(t, ok)
	require.Equal(t, uint64(12), p.ToSeq)
	s, err := p.Run(context.Background(), keepPrev{}, "conv")
	require.NoError(t, err)
	assert.Equal(t, uint64(1), s.GetFromSeq())
	assert.Equal(t, uint64(12), s.GetToSeq())
	assert.Equal(t, prev.GetContent(), s.GetContent())
	assert.Equal(t, []string{"r1@11"}, requestIDs(s.GetRequests()))
	assert.Equal(t, uint64(10), prev.GetToSeq(), "the working set's summary is not modified")
	assert.Empty(t, prev.GetRequests(), "the working set's summary is not modified")
	require.NoError(t, w.Compact(s))
	assert.Equal(t, []uint64{13, 14}, seqs(w.Events), "the events after the new summary")
	assert.Equal(t, []uint64{13, 14}, seqs(w.Render()))

	// The same with named agents: an agent's entry returned as is.
	prev = summary(1, 10)
	prev.Agents = []*messages.Summary{{Agent: "a", FromSeq: 1, ToSeq: 10, Content: "a's"}}
	ev := user("x")
	ev.Agent = "a"
	w, err = snapshot.Rebuild(prev, log(11, ev, asst("y"), user("z")))
	require.NoError(t, err)
	p, ok = w.PlanAgents(1, []string{"a"})
	require.True(t, ok)
	require.Len(t, p.Agents, 1)
	s, err = p.Run(context.Background(), keepPrev{}, "conv")
	require.NoError(t, err)
	require.Len(t, s.GetAgents(), 1)
	assert.Equal(t, uint64(12), s.GetAgents()[0].GetToSeq())
	assert.Equal(t, uint64(10), prev.GetAgents()[0].GetToSeq(), "the working set's entry is not modified")
	assert.Equal(t, uint64(10), prev.GetToSeq())
}
