package snapshot_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/snapshot"
	"github.com/stretchr/testify/require"
)

// serverTurns returns n turns of the load generator's workload as the log
// holds them, numbered from 1: user_msg, assistant_msg with a call, its
// tool_call event, its tool_result and the final assistant_msg (~4 KB).
func serverTurns(n int) []*messages.Event {
	var evs []*messages.Event
	for i := range n {
		id := fmt.Sprint("c", i)
		evs = append(evs,
			user(strings.Repeat("the user asks about something ", 13)),
			asstCalls(strings.Repeat("let me look that up for you ", 21), "tool_"+id, `{"query":"`+strings.Repeat("q", 188)+`"}`),
			call(id),
			result(id, `{"results":[`+strings.Repeat(`{"title":"a result","snippet":"some text about it"},`, 40)+`{}]}`),
			asst(strings.Repeat("here is what I found, in short ", 26)),
		)
		evs[len(evs)-4].GetAssistantMsg().GetToolCalls()[0].Id = id
	}
	return log(1, evs...)
}

// BenchmarkRender renders a working set of 40 turns (200 events) that
// did not change since the last call.
func BenchmarkRender(b *testing.B) {
	w, err := snapshot.Rebuild(nil, serverTurns(40))
	require.NoError(b, err)
	b.ReportAllocs()
	for b.Loop() {
		if len(w.Render()) == 0 {
			b.Fatal("nothing rendered")
		}
	}
}

// BenchmarkPolicyDue asks the default Policy about a working set of 20
// turns (100 events, ~20k tokens): not due, the common case.
func BenchmarkPolicyDue(b *testing.B) {
	w, err := snapshot.Rebuild(nil, serverTurns(20))
	require.NoError(b, err)
	b.ReportAllocs()
	for b.Loop() {
		if (snapshot.Policy{}).Due(w) {
			b.Fatal("due")
		}
	}
}

// BenchmarkTurn replays what the conversation actor asks of its working set
// for each durable event: Append it, check whether a model turn is owed
// (the last rendered event), then render the model's context if it is, or
// ask the Policy otherwise. The working set grows to 200 events and starts
// again.
func BenchmarkTurn(b *testing.B) {
	evs := serverTurns(40)
	w, err := snapshot.Rebuild(nil, nil)
	require.NoError(b, err)
	b.ReportAllocs()
	for b.Loop() {
		if int(w.LastSeq) == len(evs) {
			b.StopTimer()
			w, err = snapshot.Rebuild(nil, nil)
			require.NoError(b, err)
			b.StartTimer()
		}
		if err := w.Append(evs[w.LastSeq]); err != nil {
			b.Fatal(err)
		}
		r := w.Render()
		last := r[len(r)-1]
		if last.GetUserMsg() != nil || last.GetToolResult() != nil {
			if len(w.Render()) == 0 {
				b.Fatal("nothing rendered")
			}
		} else {
			(snapshot.Policy{}).Due(w)
		}
	}
}

// BenchmarkPolicyDueOver asks a Policy that is due about a working set of
// 40 turns (200 events): the events are over the limit, so it looks for a
// safe point.
func BenchmarkPolicyDueOver(b *testing.B) {
	w, err := snapshot.Rebuild(nil, serverTurns(40))
	require.NoError(b, err)
	b.ReportAllocs()
	for b.Loop() {
		if !(snapshot.Policy{MaxEvents: 100}).Due(w) {
			b.Fatal("not due")
		}
	}
}

// BenchmarkPlan takes the plan of a summary of a working set of 40 turns
// (200 events), keeping the default 20 recent events.
func BenchmarkPlan(b *testing.B) {
	w, err := snapshot.Rebuild(nil, serverTurns(40))
	require.NoError(b, err)
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := w.Plan(snapshot.DefaultKeepRecent); !ok {
			b.Fatal("no plan")
		}
	}
}
