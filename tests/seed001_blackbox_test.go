package tests

// Black-box tests of seed 001 (persistence and resumability), sentence by
// sentence where the other tests leave a promise out: the fsm_state cache
// that forgot a human call loses to the log; content parts and tool-call
// arguments come back from storage as they were written (the seed's
// deserializer edge cases), through a restart; and the summarizer's "the
// latest summary covers up to seq N" is read from the summaries, not
// carried in the agent, so it survives a kill and a new Runtime.

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/snapshot"
)

// TestSeed001CacheThatForgotAHumanCallLosesToTheLog: the fsm_state cache
// of a conversation waiting on a human is overwritten, while its actor is
// dead, with one that owes nothing (idle, no pending call, an older
// last_seq). The log still holds the open call, and the log wins: a user
// message then does not call the model (it still owes the call's result),
// the row is rewritten from the log (suspended, awaiting_input, the call
// pending with its executor, kind and prompt from its row), the call is still answerable, and the answer runs the model
// once with both the answer and the message.
func TestSeed001CacheThatForgotAHumanCallLosesToTheLog(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), nil)
		ctx := ctxT(t)
		id := h.suspendOne("c")
		require.True(t, h.rt.Kill("c"))
		before, err := h.store.Conversation(ctx, "c")
		require.NoError(t, err)
		owed := before.GetFsmState().GetPending()[id]
		require.NotNil(t, owed, "the cache names the call before it is overwritten")
		require.NoError(t, h.store.PutFSMState(ctx, "c", &messages.FSMState{
			State:   messages.AgentState_AGENT_STATE_IDLE,
			LastSeq: 1,
			Pending: map[string]*messages.PendingCall{},
		}))

		seq, err := h.rt.Send(ctx, "c", "any news?", user)
		require.NoError(t, err)
		require.Equal(t, 1, h.model.Calls("c"), "the model is not called while the call's result is owed")
		requireRowFollowsTheLog(t, h, "c", messages.ConversationStatus_CONVERSATION_STATUS_SUSPENDED, "message after the lying cache")
		row, err := h.store.Conversation(ctx, "c")
		require.NoError(t, err)
		require.True(t, proto.Equal(owed, row.GetFsmState().GetPending()[id]),
			"the call is pending again with its executor, kind and prompt: %v", row.GetFsmState().GetPending()[id])

		h.model.Push("c", scripted.Text("approved, done"))
		require.NoError(t, h.rt.Resolve(ctx, id, `{"approved":true}`, user))
		h.awaitEvent("c", seq, isAssistantText("approved, done"))
		turns := h.model.Turns("c")
		require.Len(t, turns, 2, "one model call after the answer")
		require.Len(t, toolResults(turns[1], id), 1, "the model sees the answer once")
		require.Equal(t, "any news?", userTexts(turns[1].Context)[len(userTexts(turns[1].Context))-1])
		requireRowFollowsTheLog(t, h, "c", messages.ConversationStatus_CONVERSATION_STATUS_IDLE, "turn ended")
	})
}

// TestSeed001ContentAndArgumentsSurviveARestart: a user message of text,
// an inline image (bytes that are not UTF-8) and a file by reference, and a
// server tool call whose JSON arguments hold what a decode and re-encode
// would change (a number past float64, escapes, key order, spaces, an
// empty object, null), are stored; the Runtime is killed mid-tool and
// closed. A new Runtime on the same directory re-dispatches the call with
// the same id and byte-identical arguments, and the model's next turn sees
// the message's parts and the call exactly as they were written.
func TestSeed001ContentAndArgumentsSurviveARestart(t *testing.T) {
	const args = `{"z": 12345678901234567890123, "a":"caf\u00e9 \"q\" \u2028", "n":null,"e":{}, "l":[1, 2.50, -0e0]}`
	msg := &messages.UserMessage{Content: []*messages.ContentPart{
		{Part: &messages.ContentPart_Text{Text: "what is in these?"}},
		{Part: &messages.ContentPart_Image{Image: &messages.Blob{MediaType: "image/png", Data: []byte{0x89, 'P', 'N', 'G', 0x00, 0xff, 0xfe}}}},
		{Part: &messages.ContentPart_File{File: &messages.Blob{MediaType: "application/pdf", Uri: "s3://bucket/report.pdf", Name: "report.pdf"}}},
	}}
	dir := t.TempDir()
	ctx := ctxT(t)

	var mu sync.Mutex
	var seen []agent.Invocation
	gate := make(chan struct{})
	started := make(chan struct{}, 4)
	tool := agent.Tool{
		Name: "inspect", Description: "inspect the attachments", Executor: messages.Executor_EXECUTOR_SERVER,
		Run: func(ctx context.Context, inv agent.Invocation) (string, error) {
			mu.Lock()
			seen = append(seen, inv)
			mu.Unlock()
			started <- struct{}{}
			select {
			case <-gate:
				return `{"ok":true}`, nil
			case <-ctx.Done():
				return "", ctx.Err()
			}
		},
	}
	open := func(m *scripted.Model) *lazarus.Runtime {
		rt, err := lazarus.Open(lazarus.Options{Dir: dir, Model: m, Tools: []agent.Tool{tool}, IdleTimeout: -1})
		require.NoError(t, err)
		return rt
	}
	awaitStart := func(step string) {
		t.Helper()
		select {
		case <-started:
		case <-ctx.Done():
			t.Fatalf("%s: the tool never started", step)
		}
	}

	m1 := scripted.New(scripted.Options{})
	m1.Push("c", scripted.Reply("let me look", scripted.Call("inspect", args)))
	rt := open(m1)
	_, err := rt.SendMessage(ctx, "c", msg, lazarus.SendOptions{}, user)
	require.NoError(t, err)
	awaitStart("first run")
	require.True(t, rt.Kill("c"))
	require.NoError(t, rt.Close())

	m2 := scripted.New(scripted.Options{})
	m2.Push("c", scripted.Text("a png and a pdf"))
	close(gate)
	rt = open(m2)
	t.Cleanup(func() { _ = rt.Close() })
	awaitStart("re-dispatch after the restart")
	require.NoError(t, m2.WaitCalls(ctx, "c", 1))

	mu.Lock()
	require.Len(t, seen, 2)
	require.Equal(t, seen[0].ToolCallID, seen[1].ToolCallID, "re-dispatched under the same id")
	require.Equal(t, args, seen[0].Arguments)
	require.Equal(t, args, seen[1].Arguments, "the arguments come back byte for byte")
	id := seen[0].ToolCallID
	mu.Unlock()

	row, err := rt.Store().ToolCall(ctx, id)
	require.NoError(t, err)
	require.Equal(t, args, row.GetArgs(), "the tool call row keeps the arguments as written")

	turns := m2.Turns("c")
	require.Len(t, turns, 1)
	var gotMsg *messages.UserMessage
	var gotCall *messages.ToolCall
	for _, ev := range turns[0].Context {
		if ev.GetUserMsg() != nil {
			gotMsg = ev.GetUserMsg()
		}
		for _, c := range ev.GetAssistantMsg().GetToolCalls() {
			gotCall = c
		}
		if c := ev.GetToolCall().GetCall(); c != nil {
			gotCall = c
		}
	}
	require.True(t, proto.Equal(msg, gotMsg), "the message's parts come back as sent: %v", gotMsg)
	require.NotNil(t, gotCall)
	require.Equal(t, id, gotCall.GetId())
	require.Equal(t, args, gotCall.GetArguments())
	require.Len(t, toolResults(turns[0], id), 1)
}

// recordingSummarizer is snapshot.Deterministic that records the prev
// summary and the first and last seq of every span it is asked to fold.
type recordingSummarizer struct {
	mu    sync.Mutex
	calls []summarizeCall
}

type summarizeCall struct {
	prev        *messages.Summary
	first, last uint64
}

func (s *recordingSummarizer) Summarize(ctx context.Context, conv string, prev *messages.Summary, evs []*messages.Event) (*messages.Summary, error) {
	s.mu.Lock()
	c := summarizeCall{}
	if prev != nil {
		c.prev = proto.Clone(prev).(*messages.Summary)
	}
	if len(evs) > 0 {
		c.first, c.last = evs[0].GetSeq(), evs[len(evs)-1].GetSeq()
	}
	s.calls = append(s.calls, c)
	s.mu.Unlock()
	return snapshot.Deterministic{}.Summarize(ctx, conv, prev, evs)
}

func (s *recordingSummarizer) snapshot() []summarizeCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]summarizeCall(nil), s.calls...)
}

// TestSeed001SummaryStateIsReadFromTheSummaries: "the latest summary
// covers up to seq N" is derived from the stored summaries, not carried in
// the agent. After a summary is written, the agent is killed and then the
// whole Runtime replaced (on the same store, which outlives both, as the
// seed's supervisor-owned table does); the next summary folds the stored
// one and only the events after its to_seq, and the revived turns start
// from the stored summary.
func TestSeed001SummaryStateIsReadFromTheSummaries(t *testing.T) {
	store := memjournal.New(memjournal.Options{})
	ctx := ctxT(t)
	sum := &recordingSummarizer{}
	open := func(m *scripted.Model) *lazarus.Runtime {
		rt, err := lazarus.Open(lazarus.Options{
			Store: store, Model: m, IdleTimeout: -1, Summarizer: sum,
			Summary: snapshot.Policy{MaxEvents: 3, MaxTokens: -1, KeepRecent: 1},
		})
		require.NoError(t, err)
		return rt
	}
	m1 := scripted.New(scripted.Options{})
	m1.Push("s", scripted.Text("a1"), scripted.Text("a2"))
	rt := open(m1)
	for _, text := range []string{"u1", "u2"} {
		_, err := rt.SendAndWait(ctx, "s", text, user)
		require.NoError(t, err)
	}
	var first *messages.Summary
	require.Eventually(t, func() bool {
		s, err := store.LatestSummary(ctx, "s")
		first = s
		return err == nil && s.GetToSeq() > 0
	}, wait, time.Millisecond)
	require.True(t, rt.Kill("s"))
	require.NoError(t, rt.Close())
	calls := len(sum.snapshot())

	m2 := scripted.New(scripted.Options{})
	m2.Push("s", scripted.Text("a3"), scripted.Text("a4"), scripted.Text("a5"))
	rt = open(m2)
	t.Cleanup(func() { _ = rt.Close() })
	for _, text := range []string{"u3", "u4", "u5"} {
		_, err := rt.SendAndWait(ctx, "s", text, user)
		require.NoError(t, err)
	}
	turns := m2.Turns("s")
	require.NotEmpty(t, turns)
	require.NotNil(t, turns[0].Summary, "the revived turn starts from the stored summary")
	require.Equal(t, first.GetToSeq(), turns[0].Summary.GetToSeq())

	require.Eventually(t, func() bool { return len(sum.snapshot()) > calls }, wait, time.Millisecond, "a new summary after the revival")
	next := sum.snapshot()[calls]
	require.NotNil(t, next.prev, "the new summary folds the stored one")
	require.Equal(t, first.GetToSeq(), next.prev.GetToSeq())
	require.Equal(t, first.GetContent(), next.prev.GetContent())
	require.Equal(t, first.GetToSeq()+1, next.first, "and only the events after its span")
}

// TestSeed001CallRowTimestamps: the schema's inserted_at and resolved_at
// of a tool call row and of the events, on the runtime's clock, across a
// kill: a call's row is created when the model asked for it, resolved when
// the answer (or the expiry, at its deadline) was taken, and keeps its
// created time when resolved; the suspension and the resolution events
// carry the same times.
func TestSeed001CallRowTimestamps(t *testing.T) {
	for _, how := range []string{"resolve", "expiry"} {
		t.Run(how, func(t *testing.T) {
			forEachStore(t, func(t *testing.T, kind string) {
				h := newHarness(t, openStore(t, kind), nil)
				ctx := ctxT(t)
				asked := h.clock.Now()
				id := h.suspendOne("c", scripted.Text("done"))
				require.True(t, h.rt.Kill("c"))
				row, err := h.store.ToolCall(ctx, id)
				require.NoError(t, err)
				require.True(t, asked.Equal(row.GetCreated().AsTime()), "created %v, asked at %v", row.GetCreated().AsTime(), asked)
				require.Nil(t, row.GetResolved(), "a pending call has no resolved time")

				var answered time.Time
				if how == "resolve" {
					h.clock.Advance(10 * time.Minute)
					answered = h.clock.Now()
					require.NoError(t, h.rt.Resolve(ctx, id, `{"approved":true}`, user))
				} else {
					answered = row.GetDeadline().AsTime()
					h.clock.Advance(time.Hour)
				}
				h.awaitEvent("c", 0, isAssistantText("done"))
				row, err = h.store.ToolCall(ctx, id)
				require.NoError(t, err)
				require.True(t, asked.Equal(row.GetCreated().AsTime()), "resolving keeps the created time")
				require.True(t, answered.Equal(row.GetResolved().AsTime()), "resolved %v, answered at %v", row.GetResolved().AsTime(), answered)
				for _, ev := range h.history("c") {
					switch {
					case ev.GetSuspension() != nil:
						require.True(t, asked.Equal(ev.GetTime().AsTime()), "the suspension's time")
					case ev.GetResolution() != nil:
						require.True(t, answered.Equal(ev.GetTime().AsTime()), "the resolution's time: event %v", ev)
					}
				}
			})
		})
	}
}
