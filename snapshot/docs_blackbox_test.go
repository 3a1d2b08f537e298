package snapshot_test

// Black-box tests of the package's godoc: each test names the promise it
// checks, and uses only the exported API.

import (
	"context"
	"math"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/snapshot"
)

func bbUser(seq uint64, text string) *messages.Event {
	return &messages.Event{Seq: seq, Body: &messages.Event_UserMsg{UserMsg: agent.UserMessage(agent.TextPart(text))}}
}

func bbRewind(seq, to uint64) *messages.Event {
	return &messages.Event{Seq: seq, Body: &messages.Event_Rewind{Rewind: &messages.Rewind{ToSeq: to}}}
}

// Rebuild: a summary must cover 1 <= FromSeq <= ToSeq; events non-nil,
// contiguous from summary.ToSeq+1; a rewind targets a seq before its own.
// Anything else wraps journal.ErrCorrupt, never a panic.
func TestBBRebuildHostile(t *testing.T) {
	cases := map[string]struct {
		s   *messages.Summary
		evs []*messages.Event
	}{
		"from 0":            {&messages.Summary{FromSeq: 0, ToSeq: 2}, nil},
		"from after to":     {&messages.Summary{FromSeq: 3, ToSeq: 2}, nil},
		"nil event":         {nil, []*messages.Event{nil}},
		"seq 0":             {nil, []*messages.Event{bbUser(0, "a")}},
		"gap":               {nil, []*messages.Event{bbUser(1, "a"), bbUser(3, "b")}},
		"not after summary": {&messages.Summary{FromSeq: 1, ToSeq: 2}, []*messages.Event{bbUser(2, "a")}},
		"repeated":          {nil, []*messages.Event{bbUser(1, "a"), bbUser(1, "b")}},
		"rewind forward":    {nil, []*messages.Event{bbUser(1, "a"), bbRewind(2, 5)}},
		"rewind to itself":  {nil, []*messages.Event{bbUser(1, "a"), bbRewind(2, 2)}},
		"huge seq":          {nil, []*messages.Event{bbUser(1<<63, "a")}},
	}
	for name, tc := range cases {
		_, err := snapshot.Rebuild(tc.s, tc.evs)
		require.ErrorIs(t, err, journal.ErrCorrupt, name)
	}
	w, err := snapshot.Rebuild(nil, nil)
	require.NoError(t, err)
	assert.Zero(t, w.LastSeq)
	assert.Empty(t, w.Render())
	assert.Nil(t, w.LastRendered())
	assert.Empty(t, w.OpenCalls())
	assert.Zero(t, w.SafePoint(0))
	assert.False(t, w.EndsWithUserMsg())
	assert.Nil(t, w.Evicted())
	assert.Nil(t, w.Requester())
	_, ok := w.Plan(0)
	assert.False(t, ok)
	assert.False(t, snapshot.Policy{MaxEvents: 1, MaxTokens: 1}.Due(w))
	assert.False(t, w.OnHead(0))
	assert.False(t, w.OnHead(1))
}

// Append adds nothing when it refuses: a nil event, a gap, a forward
// rewind; errors wrap journal.ErrCorrupt.
func TestBBAppendHostile(t *testing.T) {
	w, err := snapshot.Rebuild(nil, []*messages.Event{bbUser(1, "a")})
	require.NoError(t, err)
	for name, evs := range map[string][]*messages.Event{
		"nil":            {nil},
		"good then nil":  {bbUser(2, "b"), nil},
		"gap":            {bbUser(3, "c")},
		"rewind forward": {bbRewind(2, 3)},
		"good then gap":  {bbUser(2, "b"), bbUser(4, "d")},
	} {
		require.ErrorIs(t, w.Append(evs...), journal.ErrCorrupt, name)
		assert.Equal(t, uint64(1), w.LastSeq, name)
		assert.Len(t, w.Events, 1, name)
		assert.Len(t, w.Render(), 1, name)
	}
	require.NoError(t, w.Append())
	require.NoError(t, w.Append(bbUser(2, "b")))
	assert.Equal(t, uint64(2), w.LastSeq)
}

// Compact: s must cover 1 <= FromSeq <= ToSeq with Summary.ToSeq <=
// s.ToSeq <= LastSeq; otherwise journal.ErrInvalid and nothing changes. A
// nil s is refused the same way, not a panic.
func TestBBCompactHostile(t *testing.T) {
	w, err := snapshot.Rebuild(nil, []*messages.Event{bbUser(1, "a"), bbUser(2, "b")})
	require.NoError(t, err)
	for name, s := range map[string]*messages.Summary{
		"nil":           nil,
		"from 0":        {FromSeq: 0, ToSeq: 1},
		"from after to": {FromSeq: 2, ToSeq: 1},
		"past last":     {FromSeq: 1, ToSeq: 3},
	} {
		require.ErrorIs(t, w.Compact(s), journal.ErrInvalid, name)
		assert.Nil(t, w.Summary, name)
		assert.Len(t, w.Events, 2, name)
	}
	require.NoError(t, w.Compact(&messages.Summary{FromSeq: 1, ToSeq: 1}))
	require.ErrorIs(t, w.Compact(&messages.Summary{FromSeq: 1, ToSeq: 0}), journal.ErrInvalid, "before the summary")
	assert.Len(t, w.Events, 1)
}

// CheckRewind: at most LastSeq, not below the summary, on the head;
// errors wrap journal.ErrInvalid; the summary's ToSeq (0 without) is
// always valid.
func TestBBCheckRewind(t *testing.T) {
	w, err := snapshot.Rebuild(nil, []*messages.Event{bbUser(1, "a"), bbUser(2, "b"), bbRewind(3, 1), bbUser(4, "c")})
	require.NoError(t, err)
	require.NoError(t, w.CheckRewind(0))
	require.NoError(t, w.CheckRewind(1))
	require.NoError(t, w.CheckRewind(4))
	require.ErrorIs(t, w.CheckRewind(2), journal.ErrInvalid, "rewound away: not on the head")
	require.ErrorIs(t, w.CheckRewind(5), journal.ErrInvalid)
	require.ErrorIs(t, w.CheckRewind(^uint64(0)), journal.ErrInvalid)
}

// Deterministic: errors wrap journal.ErrInvalid for an empty span, a nil
// event, a span not ascending after prev.ToSeq; ctx.Err() when done. Every
// event is one line, even with hostile text; the same inputs give the same
// content; the content stays within MaxBytes.
func TestBBDeterministicHostile(t *testing.T) {
	ctx := context.Background()
	d := snapshot.Deterministic{}
	for name, evs := range map[string][]*messages.Event{
		"empty":      nil,
		"nil":        {nil},
		"descending": {bbUser(2, "a"), bbUser(1, "b")},
		"repeated":   {bbUser(1, "a"), bbUser(1, "b")},
	} {
		_, err := d.Summarize(ctx, "c", nil, evs)
		require.ErrorIs(t, err, journal.ErrInvalid, name)
	}
	_, err := d.Summarize(ctx, "c", &messages.Summary{FromSeq: 1, ToSeq: 5}, []*messages.Event{bbUser(5, "a")})
	require.ErrorIs(t, err, journal.ErrInvalid, "not after prev.ToSeq")
	done, cancel := context.WithCancel(ctx)
	cancel()
	_, err = d.Summarize(done, "c", nil, []*messages.Event{bbUser(1, "a")})
	require.ErrorIs(t, err, context.Canceled)

	hostile := "line1\nline2\r\nline3\u2028\xff"
	evs := []*messages.Event{
		bbUser(1, hostile),
		{Seq: 2, Body: &messages.Event_AssistantMsg{AssistantMsg: agent.Reply(hostile, agent.Call("n\nm", "{\"a\":\n1}"))}},
		{Seq: 3, Body: &messages.Event_ToolResult{ToolResult: &messages.ToolResultEvent{Name: "n\nm", ToolCallId: "x",
			Outcome: agent.ErrorOutcome("co\nde", hostile)}}},
		{Seq: 4, Body: &messages.Event_Handoff{Handoff: &messages.Handoff{From: "a\nb", Message: hostile}}},
		{Seq: 5},
	}
	s, err := d.Summarize(ctx, "c", nil, evs)
	require.NoError(t, err)
	lines := strings.Split(s.GetContent(), "\n")
	assert.Len(t, lines, 1+len(evs), "a header, then one line per event: %q", s.GetContent())
	assert.Equal(t, snapshot.DeterministicVersion, s.GetVersion())
	assert.Equal(t, uint64(1), s.GetFromSeq())
	assert.Equal(t, uint64(5), s.GetToSeq())
	assert.Nil(t, s.GetCreated())
	again, err := d.Summarize(ctx, "c", nil, evs)
	require.NoError(t, err)
	assert.Equal(t, s.GetContent(), again.GetContent())

	big := []*messages.Event{bbUser(1, strings.Repeat("é", 10000)), bbUser(2, "tail")}
	for _, bound := range []int{0, 1, 100} {
		s, err := snapshot.Deterministic{MaxBytes: bound}.Summarize(ctx, "c", nil, big)
		require.NoError(t, err)
		limit := bound
		if bound == 0 {
			limit = snapshot.DefaultDeterministicMaxBytes
		}
		header := strings.SplitN(s.GetContent(), "\n", 2)[0]
		assert.LessOrEqual(t, len(s.GetContent()), max(limit, len(header)), "MaxBytes %d", bound)
		assert.True(t, utf8.ValidString(s.GetContent()), "MaxBytes %d: cut at a rune boundary", bound)
	}
	s, err = snapshot.Deterministic{MaxBytes: -1}.Summarize(ctx, "c", nil, big)
	require.NoError(t, err)
	assert.Greater(t, len(s.GetContent()), 20000, "no bound")
}

type modelFunc = agent.ModelFunc

// LLM: without Model every summary fails with journal.ErrInvalid; an answer
// with no text or with tool calls is journal.ErrInvalid; the model's error
// is returned; the Version is "llm/1:<model>", which SummaryModel reads.
func TestBBLLMHostile(t *testing.T) {
	ctx := context.Background()
	evs := []*messages.Event{bbUser(1, "hi")}
	_, err := snapshot.LLM{}.Summarize(ctx, "c", nil, evs)
	require.ErrorIs(t, err, journal.ErrInvalid)
	for name, answer := range map[string]*messages.AssistantMessage{
		"nil":        nil,
		"empty":      {},
		"tool calls": agent.Reply("s", agent.Call("x", "{}")),
	} {
		m := modelFunc(func(context.Context, agent.Turn, func(string)) (*messages.AssistantMessage, error) {
			return answer, nil
		})
		_, err := snapshot.LLM{Model: m}.Summarize(ctx, "c", nil, evs)
		require.ErrorIs(t, err, journal.ErrInvalid, name)
	}
	var seen agent.Turn
	m := modelFunc(func(_ context.Context, turn agent.Turn, _ func(string)) (*messages.AssistantMessage, error) {
		seen = turn
		msg := agent.Text("the summary")
		msg.Model = "m1"
		return msg, nil
	})
	s, err := snapshot.LLM{Model: m}.Summarize(ctx, "c", nil, evs)
	require.NoError(t, err)
	assert.Equal(t, "the summary", s.GetContent())
	assert.Equal(t, "m1", snapshot.SummaryModel(s))
	assert.Equal(t, snapshot.LLMVersion+":m1", s.GetVersion())
	assert.Empty(t, seen.Tools, "a turn without tools")
	require.Len(t, seen.Context, 1, "one user message")
	_, err = snapshot.LLM{Model: m}.Summarize(ctx, "c", nil, nil)
	require.ErrorIs(t, err, journal.ErrInvalid, "a bad span, as Deterministic")
	assert.Equal(t, "", snapshot.SummaryModel(nil))
	assert.Equal(t, "", snapshot.SummaryModel(&messages.Summary{Version: snapshot.DeterministicVersion}))
}

// Plan.Run: a nil s with events to fold, or an s that returns neither a
// summary nor an error, wraps journal.ErrInvalid; with no events it does
// not call s.
func TestBBPlanRun(t *testing.T) {
	ctx := context.Background()
	w, err := snapshot.Rebuild(nil, []*messages.Event{bbUser(1, "a"), {Seq: 2, Body: &messages.Event_AssistantMsg{AssistantMsg: agent.Text("b")}}})
	require.NoError(t, err)
	p, ok := w.Plan(0)
	require.True(t, ok)
	_, err = p.Run(ctx, nil, "c")
	require.ErrorIs(t, err, journal.ErrInvalid)
	_, err = p.Run(ctx, nilSummarizer{}, "c")
	require.ErrorIs(t, err, journal.ErrInvalid)
	s, err := p.Run(ctx, snapshot.Deterministic{}, "c")
	require.NoError(t, err)
	assert.Equal(t, uint64(1), s.GetFromSeq())
	assert.Equal(t, uint64(2), s.GetToSeq())
	empty := snapshot.Plan{FromSeq: 1, ToSeq: 3}
	s, err = empty.Run(ctx, nil, "c")
	require.NoError(t, err, "no events to fold: s is not called")
	assert.Empty(t, s.GetContent())
	assert.Equal(t, uint64(3), s.GetToSeq())
}

type nilSummarizer struct{}

func (nilSummarizer) Summarize(context.Context, string, *messages.Summary, []*messages.Event) (*messages.Summary, error) {
	return nil, nil
}

// Policy: the zero value is the defaults; TokenBudget(0) is
// DefaultMaxTokens, a negative budget never summarizes.
func TestBBPolicy(t *testing.T) {
	p := snapshot.Policy{}.WithDefaults()
	assert.Equal(t, snapshot.Policy{MaxEvents: snapshot.DefaultMaxEvents, MaxTokens: snapshot.DefaultMaxTokens, KeepRecent: snapshot.DefaultKeepRecent}, p)
	neg := snapshot.Policy{MaxEvents: -1, MaxTokens: -1, KeepRecent: -1}
	assert.Equal(t, neg, neg.WithDefaults(), "negative fields are kept")
	assert.Equal(t, snapshot.DefaultMaxTokens, snapshot.TokenBudget(0).WithDefaults().MaxTokens)
	assert.Equal(t, snapshot.DefaultKeepRecent, snapshot.TokenBudget(5).WithDefaults().KeepRecent)
	evs := make([]*messages.Event, 0, 50)
	for i := range 50 {
		evs = append(evs, bbUser(uint64(i+1), strings.Repeat("x", 400)))
	}
	w, err := snapshot.Rebuild(nil, evs)
	require.NoError(t, err)
	assert.False(t, snapshot.TokenBudget(-1).Due(w))
	assert.True(t, snapshot.TokenBudget(100).Due(w))
	assert.False(t, snapshot.Policy{MaxEvents: -1, MaxTokens: -1}.Due(w))
}

// Nil inputs of the pure helpers: no panic.
func TestBBNilHelpers(t *testing.T) {
	assert.Zero(t, snapshot.EstimateTokens(nil))
	assert.Equal(t, 4, snapshot.EstimateTokens([]*messages.Event{{}}), "framing only")
	assert.Equal(t, 4+1, snapshot.EstimateTokens([]*messages.Event{bbUser(1, "abc")}), "4 bytes a token, rounded up")
	assert.NotNil(t, snapshot.HandoffMessage(nil))
	assert.False(t, snapshot.VisibleTo(nil, "x"))
	assert.True(t, snapshot.VisibleTo(bbRewind(2, 1), "anyone"), "a rewind is visible to every agent")
	assert.True(t, snapshot.VisibleTo(&messages.Event{Agent: "a", Audience: []string{snapshot.Broadcast}}, "b"))
}

// Deterministic's documented line format: a header, then prev's body
// (without its header when prev is Deterministic's, whole otherwise), then
// one line per event.
func TestBBDeterministicFormat(t *testing.T) {
	ctx := context.Background()
	evs := []*messages.Event{
		bbUser(3, "hi"),
		{Seq: 4, Body: &messages.Event_AssistantMsg{AssistantMsg: agent.Reply("ok", agent.Call("lookup", `{"q":1}`))}},
		{Seq: 5, Body: &messages.Event_ToolResult{ToolResult: &messages.ToolResultEvent{Name: "lookup", ToolCallId: "x",
			Outcome: &messages.ToolOutcome{Outcome: &messages.ToolOutcome_Content{Content: `"r"`}}}}},
		{Seq: 6, Body: &messages.Event_ToolResult{ToolResult: &messages.ToolResultEvent{Name: "lookup", ToolCallId: "y",
			Outcome: agent.ErrorOutcome("tool", "boom")}}},
		{Seq: 7, Body: &messages.Event_Handoff{Handoff: &messages.Handoff{To: "b", Message: "yours"}}},
		{Seq: 8},
	}
	prev := &messages.Summary{FromSeq: 1, ToSeq: 2, Content: "earlier facts", Version: "other/1"}
	s, err := snapshot.Deterministic{}.Summarize(ctx, "c", prev, evs)
	require.NoError(t, err)
	lines := strings.Split(s.GetContent(), "\n")
	require.Len(t, lines, 8, "%q", s.GetContent())
	assert.Regexp(t, `^deterministic summary of seq 1\.\.8, sha256 [0-9a-f]{16}$`, lines[0])
	assert.Equal(t, []string{
		"earlier facts",
		"[3] user: hi",
		`[4] assistant: ok [call lookup {"q":1}]`,
		`[5] tool lookup: "r"`,
		"[6] tool lookup error (tool): boom",
		"[7] handoff from default: yours",
		"[8] unknown",
	}, lines[1:])

	next, err := snapshot.Deterministic{}.Summarize(ctx, "c", s, []*messages.Event{bbUser(9, "more")})
	require.NoError(t, err)
	nl := strings.Split(next.GetContent(), "\n")
	assert.Equal(t, append(append([]string{}, lines[1:]...), "[9] user: more"), nl[1:], "prev's header is dropped")
	assert.Regexp(t, `^deterministic summary of seq 1\.\.9, `, nl[0])
}

// The other event types' lines, as the doc lists them (it said "[n]
// <type>", which is not what version 1 writes); EstimateTokens counts a
// handoff's sender and message.
func TestBBDeterministicOtherTypes(t *testing.T) {
	s, err := snapshot.Deterministic{}.Summarize(context.Background(), "c", nil, []*messages.Event{
		bbRewind(2, 1),
		{Seq: 3, Body: &messages.Event_TurnFailed{TurnFailed: &messages.TurnFailed{Code: "model\nerror", Message: "x"}}},
		{Seq: 4, Body: &messages.Event_ToolCall{ToolCall: &messages.ToolCallEvent{Call: &messages.ToolCall{Name: "ask", Arguments: "{}"}}}},
		{Seq: 5, Body: &messages.Event_Suspension{Suspension: &messages.Suspension{}}},
		{Seq: 6, Body: &messages.Event_Resolution{Resolution: &messages.Resolution{}}},
	})
	require.NoError(t, err)
	lines := strings.Split(s.GetContent(), "\n")
	assert.Equal(t, []string{"[2] rewind to 1", "[3] turn failed (model error)", "[4] call ask {}", "[5] suspension", "[6] resolution"}, lines[1:])
	h := &messages.Event{Body: &messages.Event_Handoff{Handoff: &messages.Handoff{From: "abcd", Message: "efgh"}}}
	assert.Greater(t, snapshot.EstimateTokens([]*messages.Event{h}), 4, "a handoff's text counts")
}

// LLM: one user message holding Prompt (DefaultSummaryPrompt when empty),
// the previous summary and the span rendered one line per event as
// Deterministic renders them; MaxInputBytes drops the oldest lines first.
func TestBBLLMInput(t *testing.T) {
	ctx := context.Background()
	var sent string
	m := modelFunc(func(_ context.Context, turn agent.Turn, _ func(string)) (*messages.AssistantMessage, error) {
		require.Len(t, turn.Context, 1)
		var b strings.Builder
		for _, p := range turn.Context[0].GetUserMsg().GetContent() {
			b.WriteString(p.GetText())
		}
		sent = b.String()
		return agent.Text("s"), nil
	})
	prev := &messages.Summary{FromSeq: 1, ToSeq: 2, Content: "PREVIOUS", Version: "x/1"}
	evs := []*messages.Event{bbUser(3, "oldest "+strings.Repeat("o", 300)), bbUser(4, "newest")}
	_, err := snapshot.LLM{Model: m}.Summarize(ctx, "c", prev, evs)
	require.NoError(t, err)
	assert.Contains(t, sent, snapshot.DefaultSummaryPrompt)
	assert.Contains(t, sent, "PREVIOUS")
	assert.Contains(t, sent, "[3] user: oldest")
	assert.Contains(t, sent, "[4] user: newest")
	assert.Less(t, strings.Index(sent, snapshot.DefaultSummaryPrompt), strings.Index(sent, "PREVIOUS"))
	assert.Less(t, strings.Index(sent, "PREVIOUS"), strings.Index(sent, "[3] user"))

	_, err = snapshot.LLM{Model: m, Prompt: "MY PROMPT", MaxInputBytes: 100}.Summarize(ctx, "c", nil, evs)
	require.NoError(t, err)
	assert.Contains(t, sent, "MY PROMPT")
	assert.NotContains(t, sent, snapshot.DefaultSummaryPrompt)
	assert.NotContains(t, sent, "[3] user: oldest", "the oldest line is dropped first")
	assert.Contains(t, sent, "[4] user: newest")
}

// SafePoint(keepRecent) with keepRecent past LastSeq (up to MaxInt) has no
// safe point (no underflow); keepRecent < 0 counts as 0.
func TestBBSafePointBounds(t *testing.T) {
	evs := []*messages.Event{bbUser(1, "a"), {Seq: 2, Body: &messages.Event_AssistantMsg{AssistantMsg: agent.Text("b")}}}
	w, err := snapshot.Rebuild(nil, evs)
	require.NoError(t, err)
	for _, k := range []int{3, 1 << 40, math.MaxInt} {
		assert.Zero(t, w.SafePoint(k), "keepRecent %d", k)
		_, ok := w.Plan(k)
		assert.False(t, ok, "keepRecent %d", k)
		assert.False(t, snapshot.Policy{MaxEvents: 1, KeepRecent: k}.Due(w), "keepRecent %d", k)
	}
	assert.Equal(t, uint64(2), w.SafePoint(0))
	assert.Equal(t, uint64(2), w.SafePoint(-5))
	assert.Equal(t, uint64(2), w.SafePoint(math.MinInt))
	assert.True(t, snapshot.Policy{MaxEvents: 1, KeepRecent: -1}.Due(w))
}
