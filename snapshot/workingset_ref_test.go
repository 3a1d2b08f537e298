package snapshot_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/snapshot"
	"github.com/stretchr/testify/require"
)

// The first implementation of the working set's head (an index slice built
// on every call), kept as the oracle of the cached one. It reads only the
// exported fields.

func refHead(w *snapshot.WorkingSet) (idx []int, below uint64, isBelow bool) {
	base := w.Summary.GetToSeq()
	i := len(w.Events) - 1
	for i >= 0 {
		ev := w.Events[i]
		idx = append(idx, i)
		rw := ev.GetRewind()
		if rw == nil {
			i--
			continue
		}
		t := rw.GetToSeq()
		if t <= base {
			if t < base {
				below, isBelow = t, true
			}
			break
		}
		i = int(t - base - 1)
	}
	slices.Reverse(idx)
	return idx, below, isBelow
}

func refRender(w *snapshot.WorkingSet) []*messages.Event {
	idx, _, _ := refHead(w)
	out := []*messages.Event{}
	for _, i := range idx {
		switch w.Events[i].GetBody().(type) {
		case *messages.Event_UserMsg, *messages.Event_AssistantMsg, *messages.Event_ToolResult:
			out = append(out, w.Events[i])
		}
	}
	return out
}

func refOpenCalls(w *snapshot.WorkingSet) []*messages.ToolCallEvent {
	idx, _, _ := refHead(w)
	done := make(map[string]bool)
	for _, i := range idx {
		if tr := w.Events[i].GetToolResult(); tr != nil {
			done[tr.GetToolCallId()] = true
		}
	}
	var open []*messages.ToolCallEvent
	for _, i := range idx {
		if tc := w.Events[i].GetToolCall(); tc != nil && !done[tc.GetCall().GetId()] {
			done[tc.GetCall().GetId()] = true // each call once
			open = append(open, tc)
		}
	}
	return open
}

func refSafeSeqs(w *snapshot.WorkingSet) []uint64 {
	idx, _, _ := refHead(w)
	open := make(map[string]bool)
	bare := make(map[string]bool) // named by an assistant_msg, no tool_call event yet
	var safe []uint64
	for _, i := range idx {
		ev := w.Events[i]
		if ev.GetToolCall() == nil && ev.GetRewind() == nil {
			for id := range bare {
				delete(open, id) // its tool_call event did not follow: not owed
			}
			clear(bare)
		}
		switch {
		case ev.GetAssistantMsg() != nil:
			for _, c := range ev.GetAssistantMsg().GetToolCalls() {
				if c.GetId() != "" && !open[c.GetId()] {
					open[c.GetId()], bare[c.GetId()] = true, true
				}
			}
		case ev.GetToolCall() != nil:
			if id := ev.GetToolCall().GetCall().GetId(); id != "" {
				open[id] = true
				delete(bare, id)
			}
		case ev.GetToolResult() != nil:
			delete(open, ev.GetToolResult().GetToolCallId())
		}
		if len(open) == 0 {
			safe = append(safe, ev.GetSeq())
		}
	}
	return safe
}

func refSafePoint(w *snapshot.WorkingSet, keepRecent int) uint64 {
	keep := uint64(max(keepRecent, 0))
	if keep >= w.LastSeq {
		return 0
	}
	limit := w.LastSeq - keep
	safe := refSafeSeqs(w)
	for i := len(safe) - 1; i >= 0; i-- {
		if safe[i] <= limit {
			return safe[i]
		}
	}
	return 0
}

// refRewindOK is whether the first CheckRewind accepted toSeq.
func refRewindOK(w *snapshot.WorkingSet, toSeq uint64) bool {
	base := w.Summary.GetToSeq()
	switch {
	case toSeq > w.LastSeq, toSeq < base:
		return false
	case toSeq == base:
		return true
	}
	idx, _, _ := refHead(w)
	onHead := false
	for _, i := range idx {
		if w.Events[i].GetSeq() == toSeq {
			onHead = true
		}
	}
	return onHead && slices.Contains(refSafeSeqs(w), toSeq)
}

// TestWorkingSetMatchesReference applies random appends (with rewinds
// anywhere, nested and below the summary) and compactions to a working set,
// and after each checks every derived answer against the reference, and
// that no slice Render returned before has changed. The seed is printed on
// failure.
func TestWorkingSetMatchesReference(t *testing.T) {
	for run := range 60 {
		seed := uint64(run)
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 7))
			w, err := snapshot.Rebuild(nil, nil)
			require.NoError(t, err)
			type handed struct {
				got  []*messages.Event
				want []*messages.Event
			}
			var given []handed
			var issued []string
			for step := range 150 {
				n := 1 + r.IntN(3)
				var evs []*messages.Event
				for range n {
					var ev *messages.Event
					switch k := r.IntN(20); {
					case k < 5:
						ev = user("u")
					case k < 8:
						id := fmt.Sprint("c", step, len(evs))
						issued = append(issued, id)
						ev = asst("a", id)
					case k < 10:
						ev = asst("done")
					case k < 12 && len(issued) > 0:
						ev = call(issued[r.IntN(len(issued))])
					case k < 15 && len(issued) > 0:
						ev = result(issued[r.IntN(len(issued))], "r")
					case k < 16:
						ev = suspension("x")
					case k < 17:
						ev = unknown()
					default:
						seq := w.LastSeq + uint64(len(evs)) + 1
						ev = rewind(r.Uint64N(seq)) // anywhere before it, the summary's span included
					}
					evs = append(evs, ev)
				}
				require.NoError(t, w.Append(log(w.LastSeq+1, evs...)...))
				if r.IntN(10) == 0 {
					if sp := w.SafePoint(r.IntN(8) - 1); sp > 0 {
						require.NoError(t, w.Compact(&messages.Summary{FromSeq: 1, ToSeq: sp, Content: "s", Version: "test/1"}))
					}
				}

				got, want := w.Render(), refRender(w)
				require.Equal(t, seqs(want), seqs(got), "step %d", step)
				for i := range want {
					require.Same(t, want[i], got[i])
				}
				require.Equal(t, len(got), cap(got), "appending to Render's slice must copy")
				given = append(given, handed{got, want})
				for i, h := range given {
					require.Equal(t, h.want, h.got, "the slice Render returned at step %d changed", i)
				}
				require.Equal(t, lastOf(want), w.LastRendered())
				require.Equal(t, lastOf(want).GetUserMsg() != nil, w.EndsWithUserMsg())
				require.Equal(t, refOpenCalls(w), w.OpenCalls())
				wantSeq, wantBelow := func() (uint64, bool) { _, b, ok := refHead(w); return b, ok }()
				gotSeq, gotBelow := w.RewoundPastSummary()
				require.Equal(t, wantBelow, gotBelow)
				require.Equal(t, wantSeq, gotSeq)
				for keep := -1; keep < 10; keep++ {
					require.Equal(t, refSafePoint(w, keep), w.SafePoint(keep), "keep %d", keep)
				}
				for to := w.Summary.GetToSeq(); to <= w.LastSeq+1; to++ {
					require.Equal(t, refRewindOK(w, to), w.CheckRewind(to) == nil, "rewind to %d", to)
				}
				for _, p := range []snapshot.Policy{{MaxEvents: 5, MaxTokens: -1, KeepRecent: 2}, {MaxEvents: -1, MaxTokens: 40, KeepRecent: 3}, {}} {
					d := p.WithDefaults()
					over := (d.MaxEvents > 0 && len(want) > d.MaxEvents) ||
						(d.MaxTokens > 0 && snapshot.EstimateTokens(want) > d.MaxTokens)
					require.Equal(t, over && refSafePoint(w, d.KeepRecent) > 0, p.Due(w), "policy %+v", p)
				}
			}
		})
	}
}

// TestRenderSliceIsStable hands a rendered slice to another goroutine, as
// the conversation actor hands the model its context, while the working set
// keeps changing (appends, a rewind, a compaction): the reader always sees
// what it was given, and the race detector sees no shared write.
func TestRenderSliceIsStable(t *testing.T) {
	w, err := snapshot.Rebuild(nil, serverTurns(4))
	require.NoError(t, err)
	given := w.Render()
	want := slices.Clone(given)
	done := make(chan []*messages.Event)
	go func() {
		var seen []*messages.Event
		for range 1000 {
			seen = append(seen[:0], given...)
		}
		done <- seen
	}()
	for range 50 {
		require.NoError(t, w.Append(log(w.LastSeq+1, user("more"), asst("ok"))...))
		w.Render()
	}
	require.NoError(t, w.Append(log(w.LastSeq+1, rewind(3))...))
	w.Render()
	require.NoError(t, w.Compact(&messages.Summary{FromSeq: 1, ToSeq: 3, Content: "s", Version: "test/1"}))
	w.Render()
	require.Equal(t, want, <-done)
	require.Equal(t, want, given)

	grown := append(given, user("mine"))
	require.Equal(t, want, given, "appending to a rendered slice leaves it alone")
	require.Len(t, grown, len(want)+1)
}
