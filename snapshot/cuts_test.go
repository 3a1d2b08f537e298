package snapshot_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/snapshot"
)

func trackerIDs(o *snapshot.CallTracker, seq uint64) []string {
	var out []string
	for _, c := range o.At(seq) {
		out = append(out, c.ID)
	}
	return out
}

// TestCallTrackerFollowsRewinds: the calls open at a seq are those of the
// head at that seq: a rewind to t makes the calls open at t the open ones,
// and a rewind inside a span a later rewind skips has no effect.
func TestCallTrackerFollowsRewinds(t *testing.T) {
	var o snapshot.CallTracker
	for _, ev := range log(1, user(""), asst("", "a"), call("a"), rewind(1), user(""), rewind(3), user("")) {
		o.Add(ev)
	}
	require.Empty(t, trackerIDs(&o, 1))
	require.Equal(t, []string{"a"}, trackerIDs(&o, 2), "issued at 2")
	require.Equal(t, uint64(2), o.At(2)[0].Seq)
	require.Equal(t, []string{"a"}, trackerIDs(&o, 3))
	require.Empty(t, trackerIDs(&o, 4), "the rewind to 1 skips the call")
	require.Empty(t, trackerIDs(&o, 5))
	require.Equal(t, []string{"a"}, trackerIDs(&o, 6), "the rewind to 3 brings it back")
	require.Equal(t, []string{"a"}, trackerIDs(&o, 7))
}

// TestCallWithoutItsToolCallEventIsNotOwed: a call an assistant_msg names
// whose tool_call event does not follow it (a damaged or imported log;
// the runtime writes it right after) is open only up to the tool_call
// events after that message: nothing owes it, so it no longer keeps every
// later summary from ending after it. It used to stay open for good, and
// the conversation never compacted again.
func TestCallWithoutItsToolCallEventIsNotOwed(t *testing.T) {
	evs := log(1, user("q"), asst("", "bare", "b"), call("b"), result("b", "1"), asst("done"), user("q2"), asst("fine"))
	var o snapshot.CallTracker
	for _, ev := range evs {
		o.Add(ev)
	}
	require.Equal(t, []string{"bare", "b"}, trackerIDs(&o, 2))
	require.Equal(t, []string{"bare", "b"}, trackerIDs(&o, 3), "open among the tool_call events of its message")
	require.Empty(t, trackerIDs(&o, 4), "closed by the first other event")
	require.Empty(t, trackerIDs(&o, 7))

	ws, err := snapshot.Rebuild(nil, evs)
	require.NoError(t, err)
	require.Equal(t, uint64(7), ws.SafePoint(0))
	require.Equal(t, uint64(4), ws.SafePoint(3))
	require.Equal(t, uint64(1), ws.SafePoint(4), "not inside the message's append")
	require.Empty(t, ws.OpenCalls(), "and nothing owes it")

	// Its tool_call event later on issues it again: then it is owed.
	late := log(1, user("q"), asst("", "x"), user("q2"), call("x"))
	ws, err = snapshot.Rebuild(nil, late)
	require.NoError(t, err)
	require.Equal(t, uint64(3), ws.SafePoint(0))
	require.Len(t, ws.OpenCalls(), 1)

	// Last in the log, it is open: a summary may not end on it yet.
	ws, err = snapshot.Rebuild(nil, log(1, user("q"), asst("", "x")))
	require.NoError(t, err)
	require.Equal(t, uint64(1), ws.SafePoint(0))
}

// runtimeLogs are logs the runtime could write: each call's tool_call
// event right after the assistant_msg issuing it, rewinds to points where no
// call is open; some end with a call open.
func runtimeLogs() map[string][]*messages.Event {
	return map[string][]*messages.Event{
		"calls": log(1, user("q"), asst("", "a", "b"), call("a"), call("b"), result("a", "1"), result("b", "2"), asst("done"),
			user("q2"), asst("", "c"), call("c"), suspension("c")),
		"rewinds": log(1, user("q"), asst("", "a"), call("a"), result("a", "1"), asst("done"),
			user("q2"), asst("", "b"), call("b"), result("b", "2"), asst("done"),
			rewind(6), asst("", "c"), call("c"), result("c", "3"), asst("done"), user("q3"), asst("", "d"), call("d")),
		"rewind to the start": log(1, user("q"), asst("", "a"), call("a"), rewind(0), user("q"), asst("", "b"), call("b"), result("b", "1")),
	}
}

// TestCallTrackerCountsAsSafePoint: on the head, a seq has no call open
// for CallTracker exactly where SafePoint may end a summary.
func TestCallTrackerCountsAsSafePoint(t *testing.T) {
	for name, evs := range runtimeLogs() {
		var o snapshot.CallTracker
		for _, ev := range evs {
			o.Add(ev)
		}
		ws, err := snapshot.Rebuild(nil, evs)
		require.NoError(t, err)
		for _, ev := range evs {
			s := ev.GetSeq()
			if !ws.OnHead(s) {
				continue
			}
			safe := ws.SafePoint(int(ws.LastSeq-s)) == s
			require.Equal(t, safe, len(o.At(s)) == 0, "%s: seq %d", name, s)
		}
	}
}

// TestCutsACallAgreesWithCallTracker: on the logs the runtime writes, a
// summary ending at any seq on the head ends inside a tool call for
// WorkingSet.CutsACall (given the calls the Store owes: those open at the
// log's end) exactly when CallTracker finds a call open there.
func TestCutsACallAgreesWithCallTracker(t *testing.T) {
	for name, evs := range runtimeLogs() {
		var o snapshot.CallTracker
		for _, ev := range evs {
			o.Add(ev)
		}
		owed := map[string]bool{}
		for _, c := range o.At(uint64(len(evs))) {
			owed[c.ID] = true
		}
		full, err := snapshot.Rebuild(nil, evs)
		require.NoError(t, err)
		for _, ev := range evs {
			s := ev.GetSeq()
			if !full.OnHead(s) {
				continue
			}
			ws, err := snapshot.Rebuild(summary(1, s), evs[s:])
			require.NoError(t, err)
			require.Equal(t, len(o.At(s)) > 0, ws.CutsACall(owed), "%s: a summary ending at seq %d", name, s)
		}
	}
}

// TestCutsACall: what the events after a summary and the calls the Store
// owes tell of whether it ends inside a tool call.
func TestCutsACall(t *testing.T) {
	evs := log(1, user("q"), asst("", "a"), call("a"), result("a", "1"), asst("done"), user("q2"), asst("", "b"), call("b"))
	cuts := func(to uint64, owed ...string) bool {
		t.Helper()
		ws, err := snapshot.Rebuild(summary(1, to), evs[to:])
		require.NoError(t, err)
		o := map[string]bool{}
		for _, id := range owed {
			o[id] = true
		}
		return ws.CutsACall(o)
	}
	require.False(t, cuts(5, "b"), "b is issued after the summary")
	require.False(t, cuts(1, "b"))
	require.True(t, cuts(2, "b"), "a's tool_call event and result follow the assistant_msg that issued it")
	require.True(t, cuts(3, "b"), "a's result follows, its call does not")
	require.True(t, cuts(7, "b"), "b's tool_call event follows the assistant_msg that issued it")
	require.True(t, cuts(8, "b"), "b is owed and issued at or before the summary's end")
	require.False(t, cuts(8), "nothing owed, nothing after")
	require.True(t, cuts(5, "x"), "owed, and issued by no event after the summary")

	ws, err := snapshot.Rebuild(nil, evs)
	require.NoError(t, err)
	require.False(t, ws.CutsACall(map[string]bool{"x": true}), "no summary")
}

// randomCallLog returns a random log the runtime could write, n events
// from seq 1: user_msgs, assistant_msgs issuing up to three calls each
// followed by their tool_call events, the calls' results in any order
// (some never come), and rewinds to any earlier seq, the start included.
func randomCallLog(r *rand.Rand, n int) []*messages.Event {
	var evs, pending []*messages.Event
	next := 0
	for len(evs) < n {
		if len(pending) > 0 {
			evs, pending = append(evs, pending[0]), pending[1:]
			continue
		}
		switch r.IntN(6) {
		case 0:
			evs = append(evs, user("q"))
		case 1, 2:
			var ids []string
			for range r.IntN(4) {
				ids = append(ids, fmt.Sprint("c", next))
				next++
			}
			evs = append(evs, asst("", ids...))
			for _, id := range ids {
				pending = append(pending, call(id))
			}
		case 3, 4:
			evs = append(evs, result(fmt.Sprint("c", r.IntN(next+1)), "r"))
		case 5:
			evs = append(evs, rewind(uint64(r.IntN(len(evs)+1))))
		}
	}
	return log(1, evs...)
}

// TestSafePointAgreesWithCallTrackerOnRandomLogs: on random logs, at every
// seq on the head, SafePoint may end a summary exactly where CallTracker
// finds no call open, from no summary and from a summary ending where
// CallTracker finds none.
func TestSafePointAgreesWithCallTrackerOnRandomLogs(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 300 {
		evs := randomCallLog(r, 1+r.IntN(40))
		var o snapshot.CallTracker
		for _, ev := range evs {
			o.Add(ev)
		}
		check := func(from uint64) {
			t.Helper()
			ws, err := snapshot.Rebuild(nil, evs)
			if from > 0 {
				ws, err = snapshot.Rebuild(summary(1, from), evs[from:])
			}
			require.NoError(t, err)
			if _, below := ws.RewoundPastSummary(); below {
				return // the runtime rebuilds from an earlier summary
			}
			for _, ev := range evs[from:] {
				s := ev.GetSeq()
				if !ws.OnHead(s) {
					continue
				}
				safe := ws.SafePoint(int(ws.LastSeq-s)) == s
				require.Equal(t, len(o.At(s)) == 0, safe, "log %d from seq %d: seq %d", i, from, s)
			}
		}
		check(0)
		if s := uint64(1 + r.IntN(len(evs))); len(o.At(s)) == 0 {
			check(s)
		}
	}
}
