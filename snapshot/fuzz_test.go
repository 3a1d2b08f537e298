package snapshot_test

import (
	"context"
	"encoding/binary"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/snapshot"
)

// Fuzz input: records, each a kind byte, a uvarint length and that many
// bytes of a protobuf record. Kind%3 == 0 is an event, given the next seq
// (kind 3 keeps the seq it decodes, as a damaged store may hold); kind%3
// == 1 is a summary (the last one is the working set's); kind%3 == 2 is
// ignored here (FuzzRevival reads it as a tool call row).

func fuzzRecord(kind byte, m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		panic(err)
	}
	out := binary.AppendUvarint([]byte{kind}, uint64(len(b)))
	return append(out, b...)
}

// decodeLog decodes the fuzz input; a record that does not decode is
// skipped, as is a truncated one.
func decodeLog(data []byte) (summary *messages.Summary, events []*messages.Event) {
	for len(data) > 0 {
		kind := data[0]
		n, k := binary.Uvarint(data[1:])
		if k <= 0 || n > uint64(len(data)-1-k) {
			return
		}
		rec := data[1+k : 1+k+int(n)]
		data = data[1+k+int(n):]
		switch kind % 3 {
		case 0:
			ev := &messages.Event{}
			if proto.Unmarshal(rec, ev) != nil {
				continue
			}
			if kind != 3 {
				ev.Seq = summary.GetToSeq() + uint64(len(events)) + 1
			}
			events = append(events, ev)
		case 1:
			s := &messages.Summary{}
			if proto.Unmarshal(rec, s) != nil {
				continue
			}
			summary = s
		}
	}
	return summary, events
}

func fuzzSeeds() [][]byte {
	withAgent := func(ev *messages.Event, agent string, audience ...string) *messages.Event {
		ev.Agent, ev.Audience = agent, audience
		return ev
	}
	rewindTo := func(to uint64) *messages.Event {
		return &messages.Event{Body: &messages.Event_Rewind{Rewind: &messages.Rewind{ToSeq: to}}}
	}
	handoff := &messages.Event{Agent: "triage", Body: &messages.Event_Handoff{Handoff: &messages.Handoff{From: "triage", To: "billing", Message: "over to you"}}}
	logs := [][]proto.Message{
		{},
		{user("hi"), asst("hello")},
		{user("look 42 up"), asst("", "c1"), call("c1"), result("c1", `{"ok":true}`), asst("done")},
		{user("a"), asst("b"), user("c"), rewindTo(1), user("d"), asst("e")},
		{user("a"), asst("", "c1"), call("c1"), user("b"), result("c2", "x"), rewindTo(0), rewindTo(5)},
		{&messages.Summary{FromSeq: 1, ToSeq: 2, Content: "earlier"}, user("a"), asst("b"), rewindTo(1)},
		{&messages.Summary{FromSeq: 1, ToSeq: 2, Content: "s", Agents: []*messages.Summary{{Agent: "billing", FromSeq: 1, ToSeq: 2}}},
			withAgent(user("to billing"), "", "billing"), handoff, withAgent(asst("paid"), "billing"), withAgent(user("all"), "", snapshot.Broadcast)},
		{user("a"), asst("", "c1", "c1"), call("c1"), call("c1"), result("c1", "x"), result("c1", "y"), suspension("c1")},
		{user("a"), asst("", "c1"), call("c1"), call("c1")}, // a call's tool_call event twice, unanswered
	}
	var out [][]byte
	for _, l := range logs {
		var b []byte
		for _, m := range l {
			kind := byte(0)
			if _, ok := m.(*messages.Summary); ok {
				kind = 1
			}
			b = append(b, fuzzRecord(kind, m)...)
		}
		out = append(out, b)
	}
	// A seq the store got wrong, and a rewind to its own seq.
	out = append(out, append(fuzzRecord(0, user("a")), fuzzRecord(3, &messages.Event{Seq: 5, Body: &messages.Event_UserMsg{}})...))
	out = append(out, append(fuzzRecord(0, user("a")), fuzzRecord(0, rewindTo(2))...))
	return out
}

// stubSummarizer summarizes anything to a fixed text.
type stubSummarizer struct{}

func (stubSummarizer) Summarize(_ context.Context, _ string, _ *messages.Summary, _ []*messages.Event) (*messages.Summary, error) {
	return &messages.Summary{Content: "summary", Version: "v1"}, nil
}

// FuzzRebuild: a working set rebuilt from any stored (summary, events),
// however inconsistent (a tool_result for no call, rewinds past the head or
// into a summary, duplicated call ids, agents' entries out of order), is
// either refused with an error wrapping journal.ErrCorrupt, or answers
// every read without a panic (and owes each open call once); a rewind target is refused with
// journal.ErrInvalid or accepted; a summary Plan.Run makes of it is one
// Compact takes, and the working set then still reads.
func FuzzRebuild(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		summary, events := decodeLog(data)
		ws, err := snapshot.Rebuild(summary, events)
		if err != nil {
			require.ErrorIs(t, err, journal.ErrCorrupt)
			return
		}
		readAll(t, ws)
		base := summary.GetToSeq()
		for seq := base; seq <= ws.LastSeq+1 && seq < base+64; seq++ {
			if err := ws.CheckRewind(seq); err != nil {
				require.ErrorIs(t, err, journal.ErrInvalid)
			}
			ws.OnHead(seq)
			ws.RewoundBelow(seq)
		}
		names := agentNames(ws)
		for keep := range 3 {
			for _, p := range planAll(ws, keep, names) {
				sum, err := p.Run(t.Context(), stubSummarizer{}, "c")
				require.NoError(t, err)
				probe, err := snapshot.Rebuild(ws.Summary, ws.Events)
				require.NoError(t, err)
				require.NoError(t, probe.Compact(sum), "the summary of a plan is one Compact takes")
				readAll(t, probe)
			}
		}
		// Appending what was stored again after the head is refused or taken.
		if len(events) > 0 {
			again := proto.Clone(events[len(events)-1]).(*messages.Event)
			again.Seq = ws.LastSeq + 1
			if err := ws.Append(again); err != nil {
				require.ErrorIs(t, err, journal.ErrCorrupt)
			}
			readAll(t, ws)
		}
	})
}

// planAll returns the plans a runtime may make of ws.
func planAll(ws *snapshot.WorkingSet, keep int, names []string) []snapshot.Plan {
	var out []snapshot.Plan
	if p, ok := ws.Plan(keep); ok {
		out = append(out, p)
	}
	if p, ok := ws.PlanAgents(keep, names); ok {
		out = append(out, p)
	}
	return out
}

// agentNames are the names the events and summary of ws give agents.
func agentNames(ws *snapshot.WorkingSet) []string {
	var names []string
	add := func(n string) {
		if n != "" && n != snapshot.Broadcast && !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	for _, ev := range ws.Events {
		add(ev.GetAgent())
		for _, a := range ev.GetAudience() {
			add(a)
		}
	}
	for _, a := range ws.Summary.GetAgents() {
		add(a.GetAgent())
	}
	slices.Sort(names)
	return names
}

// readAll calls every read of ws.
func readAll(t *testing.T, ws *snapshot.WorkingSet) {
	t.Helper()
	r := ws.Render()
	require.Equal(t, ws.LastRendered(), last(r))
	ws.Evicted()
	ws.RewoundPastSummary()
	ids := map[string]bool{}
	for _, c := range ws.OpenCalls() {
		require.False(t, ids[c.GetCall().GetId()], "call %q is owed twice", c.GetCall().GetId())
		ids[c.GetCall().GetId()] = true
	}
	ws.EndsWithUserMsg()
	ws.Requester()
	ws.HoldsAgents()
	ws.SafePoint(0)
	snapshot.EstimateTokens(r)
	for _, n := range append([]string{""}, agentNames(ws)...) {
		ws.RenderFor(n)
		ws.SummaryFor(n)
	}
}

func last(evs []*messages.Event) *messages.Event {
	if len(evs) == 0 {
		return nil
	}
	return evs[len(evs)-1]
}
