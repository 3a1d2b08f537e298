package actors

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/snapshot"
)

// TestResultsWrittenWithinTheAppendLimit: more results ready at once than
// one append may carry (here 700 human calls that expired while the
// conversation was dead: a resolution and a tool_result each) are written
// in several writes, each within journal.MaxEventsPerAppend, which the
// Store would otherwise refuse, every revival again; then the model is
// called once.
func TestResultsWrittenWithinTheAppendLimit(t *testing.T) {
	const n = 700
	tools, err := agent.NewRegistry(
		agent.Tool{Name: "lookup", Executor: server, Run: func(context.Context, agent.Invocation) (string, error) { return "", nil }},
		agent.Tool{Name: "approve", Executor: human, Timeout: time.Minute},
	)
	require.NoError(t, err)
	c := newCore(coreConfig{ID: "c", Tools: tools, Policy: snapshot.Policy{}.WithDefaults(),
		Retry: RetryPolicy{}.WithDefaults(), MaxInvalidToolAnswers: 1}, slog.New(slog.DiscardHandler))
	log := []*messages.Event{user("r1"), answer()}
	rows := map[string]*messages.ToolCallRecord{}
	for i := range n {
		id := fmt.Sprintf("call_%d", i)
		log = append(log, call(id, human))
		rows[id] = &messages.ToolCallRecord{Id: id, ConversationId: "c", Name: "approve", Executor: human,
			Status: messages.ToolCallStatus_TOOL_CALL_STATUS_EXPIRED, Result: agent.ErrorOutcome(agent.CodeExpired, "expired")}
	}
	for i, ev := range log {
		ev.Seq = uint64(i + 1)
	}
	ws, err := snapshot.Rebuild(nil, log)
	require.NoError(t, err)
	c.step(t0, &inLoaded{ws: ws, rows: rows, scope: agent.SystemScope})
	effs := c.step(t0, wake(false))
	results, writes := 0, uint64(0)
	for {
		var w *effWrite
		models := 0
		for _, e := range effs {
			switch e := e.(type) {
			case effWrite:
				w = &e
			case effStartModel:
				models++
			}
		}
		if w == nil {
			require.Equal(t, n, results, "every result written before the model is called")
			require.Equal(t, 1, models)
			break
		}
		require.Zero(t, models, "the model waits for every result")
		require.NoError(t, journal.ValidateAppendShape(w.req))
		for _, ev := range w.req.GetEvents() {
			if ev.GetToolResult() != nil {
				results++
			}
		}
		writes++
		require.Equal(t, writes, w.id)
		effs = c.step(t0, ok(w.id))
	}
	require.Greater(t, writes, uint64(1))
	require.Empty(t, c.order, "no call left open")
}

// TestSendsWrittenWithinTheAppendLimit: more sends queued behind a write in
// flight than one append may carry (a flood of messages to one
// conversation while its Store is slow) are written in several writes,
// each within journal.MaxEventsPerAppend, in the order they arrived, and
// every caller gets its seq. (They were written as one append, which the
// Store refused as ErrInvalid: every one of those sends failed, and the
// activation stopped.)
func TestSendsWrittenWithinTheAppendLimit(t *testing.T) {
	const n = journal.MaxEventsPerAppend + 300
	c := newCore(coreConfig{ID: "c", Policy: snapshot.Policy{}.WithDefaults(), Retry: RetryPolicy{}.WithDefaults()},
		slog.New(slog.DiscardHandler))
	ws, err := snapshot.Rebuild(nil, nil)
	require.NoError(t, err)
	c.step(t0, &inLoaded{ws: ws, rows: map[string]*messages.ToolCallRecord{}, scope: agent.SystemScope})
	require.Equal(t, []string{"write[" + wUser + "]"}, words(c.step(t0, send("r0"))))
	c.inflight.req.GetEvents()[0].Seq = 1 // as the journal numbers it
	for i := 1; i <= n; i++ {
		require.Empty(t, words(c.step(t0, send(fmt.Sprint("r", i)))), "queued behind the write in flight")
	}
	replies, writes, seq := 0, 0, uint64(1)
	effs := c.step(t0, ok(c.inflight.id))
	for {
		var w *effWrite
		for _, e := range effs {
			switch e := e.(type) {
			case effWrite:
				w = &e
			case effReply:
				r := e.msg.(*messages.AgentSendReply)
				require.Nil(t, r.GetError(), "send %s", r.GetRequestId())
				require.Equal(t, fmt.Sprint("r", replies), r.GetRequestId(), "answered in the order sent")
				replies++
			}
		}
		if w == nil {
			break
		}
		require.NoError(t, journal.ValidateAppendShape(w.req))
		for _, ev := range w.req.GetEvents() {
			seq++
			ev.Seq = seq // as the journal numbers them
		}
		writes++
		effs = c.step(t0, ok(w.id))
	}
	require.Equal(t, n+1, replies, "every send answered")
	require.Equal(t, 2, writes, "the queued sends took two writes")
}

// gathered is the bytes of req's events and resolutions, as the core's
// appendBudget counts them.
func gathered(req *messages.AppendRequest) int {
	n := 0
	for _, ev := range req.GetEvents() {
		n += fieldBytes(ev)
	}
	for _, r := range req.GetResolutions() {
		n += fieldBytes(r)
	}
	return n
}

// TestResultsWrittenWithinTheAppendBudget: results ready at once whose
// bytes together are more than one append may carry (here with the
// budget lowered; by default half of journal.MaxAppendBytes, which 512
// results near agent.MaxResultBytes pass) are written in several writes,
// each within the budget, in log order; then the model is called once.
// (They were written as one append, which the Store refused as ErrInvalid,
// every revival again.)
func TestResultsWrittenWithinTheAppendBudget(t *testing.T) {
	const n, budget = 30, 8 << 10
	tools, err := agent.NewRegistry(
		agent.Tool{Name: "lookup", Executor: server, Run: func(context.Context, agent.Invocation) (string, error) { return "", nil }},
		agent.Tool{Name: "approve", Executor: human, Timeout: time.Minute},
	)
	require.NoError(t, err)
	c := newCore(coreConfig{ID: "c", Tools: tools, Policy: snapshot.Policy{}.WithDefaults(),
		Retry: RetryPolicy{}.WithDefaults(), MaxInvalidToolAnswers: 1, AppendBudget: budget}, slog.New(slog.DiscardHandler))
	log := []*messages.Event{user("r1"), answer()}
	rows := map[string]*messages.ToolCallRecord{}
	for i := range n {
		id := fmt.Sprintf("call_%d", i)
		log = append(log, call(id, human))
		rows[id] = &messages.ToolCallRecord{Id: id, ConversationId: "c", Name: "approve", Executor: human,
			Status: messages.ToolCallStatus_TOOL_CALL_STATUS_EXPIRED, Result: agent.ErrorOutcome(agent.CodeExpired, strings.Repeat("x", 1000))}
	}
	for i, ev := range log {
		ev.Seq = uint64(i + 1)
	}
	ws, err := snapshot.Rebuild(nil, log)
	require.NoError(t, err)
	c.step(t0, &inLoaded{ws: ws, rows: rows, scope: agent.SystemScope})
	effs := c.step(t0, wake(false))
	var results []string
	writes := 0
	for {
		var w *effWrite
		models := 0
		for _, e := range effs {
			switch e := e.(type) {
			case effWrite:
				w = &e
			case effStartModel:
				models++
			}
		}
		if w == nil {
			require.Equal(t, 1, models)
			break
		}
		require.Zero(t, models, "the model waits for every result")
		require.NoError(t, journal.ValidateAppendShape(w.req))
		require.LessOrEqual(t, gathered(w.req), budget)
		for _, ev := range w.req.GetEvents() {
			if r := ev.GetToolResult(); r != nil {
				results = append(results, r.GetToolCallId())
			}
		}
		writes++
		effs = c.step(t0, ok(w.id))
	}
	want := make([]string, n)
	for i := range want {
		want[i] = fmt.Sprintf("call_%d", i)
	}
	require.Equal(t, want, results, "every result written, in log order")
	require.Greater(t, writes, 2)
}

// TestSendsWrittenWithinTheAppendBudget: sends queued behind a write in
// flight whose messages together are more than one append may carry (here
// with the budget lowered; by default half of journal.MaxAppendBytes,
// which 33 messages near journal.MaxEventBytes pass) are written in
// several writes, each within the budget, in the order they arrived, and
// every caller gets its seq. (They were written as one append, which the
// Store refused as ErrInvalid: every one of those sends failed.)
func TestSendsWrittenWithinTheAppendBudget(t *testing.T) {
	const n, budget = 30, 8 << 10
	c := newCore(coreConfig{ID: "c", Policy: snapshot.Policy{}.WithDefaults(), Retry: RetryPolicy{}.WithDefaults(), AppendBudget: budget},
		slog.New(slog.DiscardHandler))
	ws, err := snapshot.Rebuild(nil, nil)
	require.NoError(t, err)
	c.step(t0, &inLoaded{ws: ws, rows: map[string]*messages.ToolCallRecord{}, scope: agent.SystemScope})
	require.Equal(t, []string{"write[" + wUser + "]"}, words(c.step(t0, send("r0"))))
	c.inflight.req.GetEvents()[0].Seq = 1 // as the journal numbers it
	for i := 1; i <= n; i++ {
		s := send(fmt.Sprint("r", i))
		s.cmd.Msg.(*messages.AgentSend).Message.Content[0].Part = &messages.ContentPart_Text{Text: strings.Repeat("x", 1000)}
		require.Empty(t, words(c.step(t0, s)), "queued behind the write in flight")
	}
	replies, writes, seq := 0, 0, uint64(1)
	effs := c.step(t0, ok(c.inflight.id))
	for {
		var w *effWrite
		for _, e := range effs {
			switch e := e.(type) {
			case effWrite:
				w = &e
			case effReply:
				r := e.msg.(*messages.AgentSendReply)
				require.Nil(t, r.GetError(), "send %s", r.GetRequestId())
				require.Equal(t, fmt.Sprint("r", replies), r.GetRequestId(), "answered in the order sent")
				require.Equal(t, uint64(replies+1), r.GetSeq())
				replies++
			}
		}
		if w == nil {
			break
		}
		require.NoError(t, journal.ValidateAppendShape(w.req))
		require.LessOrEqual(t, gathered(w.req), budget)
		for _, ev := range w.req.GetEvents() {
			seq++
			ev.Seq = seq // as the journal numbers them
		}
		writes++
		effs = c.step(t0, ok(w.id))
	}
	require.Equal(t, n+1, replies, "every send answered")
	require.Greater(t, writes, 2, "the queued sends took several writes")
}
