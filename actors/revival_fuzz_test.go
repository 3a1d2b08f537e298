package actors

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/snapshot"
)

// revivalStore is a conversation "c" as a damaged Store may hold it:
// whatever events, summaries and tool call rows, with no check. It answers
// the revival read (load); any other method panics (the embedded Store is
// nil), which a fuzz run would report as a read load did not make before.
type revivalStore struct {
	journal.Store
	summaries []*messages.Summary
	events    []*messages.Event
	rows      map[string]*messages.ToolCallRecord
}

func (s *revivalStore) Conversation(context.Context, string) (*messages.Conversation, error) {
	return &messages.Conversation{Id: "c", Status: messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE,
		FsmState: &messages.FSMState{LastSeq: s.last()}}, nil
}

func (s *revivalStore) last() uint64 {
	var last uint64
	for _, ev := range s.events {
		last = max(last, ev.GetSeq())
	}
	return last
}

// before returns the summary with the greatest ToSeq below seq (the last
// of equals), nil if none.
func (s *revivalStore) before(seq uint64) *messages.Summary {
	var out *messages.Summary
	for _, sum := range s.summaries {
		if sum.GetToSeq() < seq && (out == nil || sum.GetToSeq() >= out.GetToSeq()) {
			out = sum
		}
	}
	return out
}

func (s *revivalStore) after(q journal.EventQuery) []*messages.Event {
	var out []*messages.Event
	for _, ev := range s.events {
		if ev.GetSeq() > q.After && (q.Before == 0 || ev.GetSeq() < q.Before) {
			out = append(out, ev)
		}
		if q.Limit > 0 && len(out) == q.Limit {
			break
		}
	}
	return out
}

func (s *revivalStore) LoadSince(context.Context, string) (*messages.Summary, []*messages.Event, error) {
	sum := s.before(^uint64(0))
	return sum, s.after(journal.EventQuery{After: sum.GetToSeq()}), nil
}

func (s *revivalStore) LastSeq(context.Context, string) (uint64, error) { return s.last(), nil }

func (s *revivalStore) SummaryBefore(_ context.Context, _ string, seq uint64) (*messages.Summary, error) {
	if sum := s.before(seq); sum != nil {
		return sum, nil
	}
	return nil, journal.ErrNotFound
}

func (s *revivalStore) Events(_ context.Context, _ string, q journal.EventQuery) ([]*messages.Event, error) {
	return s.after(q), nil
}

func (s *revivalStore) ToolCall(_ context.Context, id string) (*messages.ToolCallRecord, error) {
	if row, ok := s.rows[id]; ok {
		return row, nil
	}
	return nil, journal.ErrNotFound
}

func (s *revivalStore) PendingToolCalls(context.Context, string) ([]*messages.ToolCallRecord, error) {
	var out []*messages.ToolCallRecord
	for _, row := range s.rows {
		if row.GetConversationId() == "c" && row.GetStatus() == messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING {
			out = append(out, row)
		}
	}
	slices.SortFunc(out, func(a, b *messages.ToolCallRecord) int { return strings.Compare(a.GetId(), b.GetId()) })
	return out, nil
}

// decodeRevival decodes the fuzz input: records, each a kind byte, a
// uvarint length and that many bytes of a protobuf record. Kind%3 == 0 is
// an event, given the next seq (kind 3 keeps the seq it decodes, as a
// damaged store may hold); kind%3 == 1 a summary; kind%3 == 2 a tool call
// row. Without any row, every tool_call event gets a pending row of "c",
// so that the revival goes past the rows' checks.
func decodeRevival(data []byte) *revivalStore {
	s := &revivalStore{rows: map[string]*messages.ToolCallRecord{}}
	anyRow := false
	for len(data) > 0 {
		kind := data[0]
		n, k := binary.Uvarint(data[1:])
		if k <= 0 || n > uint64(len(data)-1-k) {
			break
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
				ev.Seq = uint64(len(s.events)) + 1
			}
			s.events = append(s.events, ev)
		case 1:
			sum := &messages.Summary{}
			if proto.Unmarshal(rec, sum) == nil {
				s.summaries = append(s.summaries, sum)
			}
		case 2:
			row := &messages.ToolCallRecord{}
			if proto.Unmarshal(rec, row) == nil {
				s.rows[row.GetId()] = row
				anyRow = true
			}
		}
	}
	if !anyRow {
		for _, ev := range s.events {
			if tc := ev.GetToolCall(); tc != nil {
				s.rows[tc.GetCall().GetId()] = &messages.ToolCallRecord{Id: tc.GetCall().GetId(), ConversationId: "c",
					Name: tc.GetCall().GetName(), Args: tc.GetCall().GetArguments(), Executor: tc.GetExecutor(),
					Status: messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING, Requester: &messages.Identity{UserId: "bob"}}
			}
		}
	}
	return s
}

func revivalRecord(kind byte, m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		panic(err)
	}
	return append(binary.AppendUvarint([]byte{kind}, uint64(len(b))), b...)
}

func revivalSeeds() [][]byte {
	rewindTo := func(to uint64) *messages.Event {
		return &messages.Event{Body: &messages.Event_Rewind{Rewind: &messages.Rewind{ToSeq: to}}}
	}
	lookup := &messages.ToolCall{Id: "c1", Name: "lookup", Arguments: "{}"}
	approve := &messages.ToolCall{Id: "c2", Name: "approve", Arguments: "{}"}
	toA := user("r3")
	toA.Audience = []string{"a"}
	ofA := answer()
	ofA.Agent = "a"
	handoff := &messages.Event{Agent: "a", Body: &messages.Event_Handoff{Handoff: &messages.Handoff{From: "a", To: "", Message: "back"}}}
	logs := [][]proto.Message{
		{},
		{user("r1")},
		{user("r1"), answer()},
		{user("r1"), answer(lookup), call("c1", server)},
		{user("r1"), answer(approve), call("c2", human)},
		{user("r1"), answer(lookup), call("c1", server), result("c1"), failed()},
		{user("r1"), answer(lookup), call("c1", server), result("c9"), result("c1"), result("c1")},
		{user("r1"), answer(), user("r2"), rewindTo(1), user("r3"), rewindTo(0)},
		{&messages.Summary{FromSeq: 1, ToSeq: 2, Content: "s"}, user("r1"), answer(), user("r2"), rewindTo(1)},
		{&messages.Summary{FromSeq: 1, ToSeq: 4, Content: "past the log"}, user("r1"), answer()},
		{&messages.Summary{FromSeq: 1, ToSeq: 3, Content: "late"}, &messages.Summary{FromSeq: 1, ToSeq: 1, Content: "early"},
			user("r1"), answer(), user("r2"), answer(), rewindTo(2)},
		{user("r1"), toA, ofA, handoff},
		{&messages.Summary{FromSeq: 1, ToSeq: 3, Content: "cuts c2"}, user("r1"), answer(approve), call("c2", human)},
		{&messages.Summary{FromSeq: 1, ToSeq: 3, Content: "cuts c1"}, user("r1"), answer(lookup), call("c1", server), result("c1")},
		{user("r1"), answer(lookup, lookup), call("c1", server), call("c1", human),
			&messages.ToolCallRecord{Id: "c1", ConversationId: "d", Executor: server, Status: messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED}},
		{user("r1"), answer(approve), call("c2", human),
			&messages.ToolCallRecord{Id: "c2", ConversationId: "c", Executor: human, Status: messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED,
				Result: &messages.ToolOutcome{Outcome: &messages.ToolOutcome_Content{Content: `"yes"`}}}},
	}
	var out [][]byte
	for _, l := range logs {
		var b []byte
		for _, m := range l {
			kind := byte(0)
			switch m.(type) {
			case *messages.Summary:
				kind = 1
			case *messages.ToolCallRecord:
				kind = 2
			}
			b = append(b, revivalRecord(kind, m)...)
		}
		out = append(out, b)
	}
	return out
}

// FuzzRevival: the revival of a conversation from whatever a damaged
// Store holds (events of any body in any order, seqs out of line,
// summaries past the log or covering nothing, rows missing, foreign or
// of another executor) either fails with an error wrapping
// journal.ErrCorrupt, and the core then stops with it and refuses every
// command, or revives; the core then takes commands, answers, model and
// tool results, and write replies without a panic.
func FuzzRevival(f *testing.F) {
	for _, s := range revivalSeeds() {
		f.Add(s)
	}
	tools, err := agent.NewRegistry(
		agent.Tool{Name: "lookup", Executor: server, Run: func(context.Context, agent.Invocation) (string, error) { return "", nil }},
		agent.Tool{Name: "approve", Executor: human, Timeout: time.Minute},
		HandoffTool(),
	)
	require.NoError(f, err)
	quiet := slog.New(slog.DiscardHandler)
	f.Fuzz(func(t *testing.T, data []byte) {
		st := decodeRevival(data)
		ctx := t.Context()
		l := load(ctx, st, "c")
		if l.err == nil {
			loader := func(_ context.Context, id agent.Identity) (agent.Scope, error) { return agent.ScopeOf(id), nil }
			l.scope = resumeScope(ctx, l.ws, loader, quiet)
			l.callScopes = callScopes(ctx, l, loader, quiet)
		} else {
			require.ErrorIs(t, l.err, journal.ErrCorrupt)
		}
		c := newCore(coreConfig{ID: "c", Tools: tools, Policy: snapshot.Policy{}.WithDefaults(), Summarize: true,
			Retry: RetryPolicy{}.WithDefaults(), MaxInvalidToolAnswers: 1, HumanTimeout: time.Minute,
			NewID:  func(at time.Time) string { return fmt.Sprintf("call_%d", at.UnixNano()) },
			Agents: map[string]AgentConfig{"a": {Settings: agent.Settings{SystemPrompt: "I am a"}}}}, quiet)
		d := &coreDriver{t: t, c: c, now: t0}
		d.step(l)
		if l.err != nil {
			require.True(t, c.stopped())
			require.ErrorIs(t, c.cause, journal.ErrCorrupt)
			d.step(send("after"))
			return
		}
		// Commands a caller may send a revived conversation, each followed
		// by the work it starts.
		var cmds []input
		cmds = append(cmds, wake(true), send("r-fuzz"))
		for _, id := range c.order {
			cmds = append(cmds, &inCommand{sender: "answerer", cmd: &Command{Scope: agent.SystemScope, Msg: &messages.AgentResolved{
				ToolCallId: id, Status: messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED, By: "fuzz",
				Result: &messages.ToolOutcome{Outcome: &messages.ToolOutcome_Content{Content: `"ok"`}}}}})
		}
		if last := c.ws.LastSeq; last > 0 {
			cmds = append(cmds, &inCommand{sender: "rewinder", cmd: &Command{Scope: agent.SystemScope,
				Msg: &messages.AgentRewind{ToSeq: last - 1, RequestId: "rw"}}})
		}
		cmds = append(cmds, &inCommand{sender: "ender", cmd: &Command{Scope: agent.SystemScope, Msg: &messages.EndConversation{}}})
		for _, in := range cmds {
			d.step(in)
			d.drain()
		}
	})
}

// input is one input of the core.
type input = any

// coreDriver performs the core's effects as a driver would, at once and
// successfully, and feeds back their results.
type coreDriver struct {
	t     *testing.T
	c     *core
	now   time.Time
	queue []input
}

func (d *coreDriver) step(in input) {
	d.now = d.now.Add(time.Second)
	for _, e := range d.c.step(d.now, in) {
		switch e := e.(type) {
		case effWrite:
			d.queue = append(d.queue, &inWriteReply{id: e.id})
		case effStartModel:
			d.queue = append(d.queue, &inModelDone{turn: e.turn, msg: &messages.AssistantMessage{
				Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: "answer"}}}}})
		case effRunTool:
			d.queue = append(d.queue, &inToolDone{id: e.inv.ToolCallID,
				outcome: &messages.ToolOutcome{Outcome: &messages.ToolOutcome_Content{Content: `{"done":true}`}}})
		case effSummarize:
			d.queue = append(d.queue, &inSummaryDone{err: fmt.Errorf("no summarizer here")})
		case effArmRetry:
			d.queue = append(d.queue, &inRetryTick{gen: e.gen})
		}
	}
}

// drain feeds back the results of the effects, a bounded number of them
// (a model that always answers the same might go on forever).
func (d *coreDriver) drain() {
	for i := 0; i < 64 && len(d.queue) > 0; i++ {
		in := d.queue[0]
		d.queue = d.queue[1:]
		d.step(in)
	}
	d.queue = nil
}
