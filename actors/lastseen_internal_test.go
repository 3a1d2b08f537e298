package actors

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/snapshot"
)

// seenLog builds a working set from bodies, numbering them from seq 1.
func seenLog(t testing.TB, bodies ...*messages.Event) *snapshot.WorkingSet {
	t.Helper()
	for i, ev := range bodies {
		ev.Seq = uint64(i + 1)
	}
	ws, err := snapshot.Rebuild(nil, bodies)
	require.NoError(t, err)
	return ws
}

func seenUser() *messages.Event {
	return &messages.Event{Body: &messages.Event_UserMsg{UserMsg: &messages.UserMessage{}}}
}

func seenAsks(ids ...string) *messages.Event {
	m := &messages.AssistantMessage{}
	for _, id := range ids {
		m.ToolCalls = append(m.ToolCalls, &messages.ToolCall{Id: id, Name: "t"})
	}
	return &messages.Event{Body: &messages.Event_AssistantMsg{AssistantMsg: m}}
}

func seenCall(id string) *messages.Event {
	return &messages.Event{Body: &messages.Event_ToolCall{ToolCall: &messages.ToolCallEvent{Call: &messages.ToolCall{Id: id, Name: "t"}}}}
}

func seenResult(id string) *messages.Event {
	return &messages.Event{Body: &messages.Event_ToolResult{ToolResult: &messages.ToolResultEvent{ToolCallId: id}}}
}

// TestLastSeenFastPathAgreesWithTheScan: on sound logs and on each kind of
// damaged one, lastSeen (its fast path where it applies) names the event
// the full scan names.
func TestLastSeenFastPathAgreesWithTheScan(t *testing.T) {
	cases := map[string]struct {
		log  func() []*messages.Event
		fast bool // the fast path decides
	}{
		"answered call": {func() []*messages.Event {
			return []*messages.Event{seenUser(), seenAsks("a"), seenCall("a"), seenResult("a")}
		}, true},
		"second of two calls": {func() []*messages.Event {
			return []*messages.Event{seenUser(), seenAsks("a", "b"), seenCall("a"), seenCall("b"), seenResult("a"), seenResult("b")}
		}, true},
		"call named by its tool_call event only": {func() []*messages.Event {
			return []*messages.Event{seenUser(), seenCall("a"), seenResult("a")}
		}, true},
		"orphan at the end": {func() []*messages.Event {
			return []*messages.Event{seenUser(), seenAsks("a"), seenCall("a"), seenResult("a"), seenResult("z")}
		}, false},
		"second result at the end": {func() []*messages.Event {
			return []*messages.Event{seenUser(), seenAsks("a"), seenCall("a"), seenResult("a"), seenResult("a")}
		}, false},
		"result before its call is named": {func() []*messages.Event {
			return []*messages.Event{seenUser(), seenResult("a"), seenAsks("a"), seenCall("a"), seenResult("a")}
		}, false},
		"tool_call event after the result": {func() []*messages.Event {
			return []*messages.Event{seenUser(), seenResult("a"), seenCall("a")}
		}, false},
		"one call id in two messages": {func() []*messages.Event {
			return []*messages.Event{seenUser(), seenAsks("a"), seenResult("a"), seenUser(), seenAsks("a"), seenResult("a")}
		}, false},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			ws := seenLog(t, c.log()...)
			_, fast := lastAnswers(ws)
			require.Equal(t, c.fast, fast, "fast path taken")
			require.Same(t, lastSeenScan(ws), lastSeen(ws))
		})
	}
}

// BenchmarkLastSeen compares lastSeen on a sound log of 50 answered calls
// (its fast path) with the full scan it avoids (the baseline).
func BenchmarkLastSeen(b *testing.B) {
	var evs []*messages.Event
	for i := range 50 {
		id := fmt.Sprintf("c%d", i)
		evs = append(evs, seenUser(), seenAsks(id), seenCall(id), seenResult(id))
	}
	ws := seenLog(b, evs...)
	b.Run("scan", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			require.NotNil(b, lastSeenScan(ws))
		}
	})
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			require.NotNil(b, lastSeen(ws))
		}
	})
}

// TestOwedAgentSoundLogDoesNotAllocate: on a sound log with named agents
// ending in results that answer their calls, owedAgent's check that a
// result answers a call takes the fast path and allocates nothing; on a
// log ending in an orphan the event before it decides.
func TestOwedAgentSoundLogDoesNotAllocate(t *testing.T) {
	var evs []*messages.Event
	for i := range 20 {
		id := fmt.Sprintf("c%d", i)
		evs = append(evs, seenUser(), seenAsks(id), seenCall(id), seenResult(id))
	}
	for _, ev := range evs[len(evs)/2:] {
		ev.Agent = "critic"
	}
	ws := seenLog(t, evs...)
	known := func(string) bool { return true }
	a, ok := owedAgent(ws, known)
	require.True(t, ok)
	require.Equal(t, "", a, "the default agent's result is the older")
	require.Zero(t, testing.AllocsPerRun(100, func() { owedAgent(ws, known) }))

	answer, orphan := seenAsks(), seenResult("ghost")
	for _, ev := range append(evs, answer, orphan) {
		ev.Agent = "critic"
	}
	ws = seenLog(t, append(evs, answer, orphan)...)
	_, ok = owedAgent(ws, known)
	require.False(t, ok, "the critic's orphan owes nothing")
}
