package scripted_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
)

func text(msg *messages.AssistantMessage) string {
	var b strings.Builder
	for _, p := range msg.GetContent() {
		b.WriteString(p.GetText())
	}
	return b.String()
}

func turn(conv string) agent.Turn { return agent.Turn{ConversationID: conv} }

// result of a Generate run in a goroutine.
type result struct {
	msg *messages.AssistantMessage
	err error
}

func generateAsync(ctx context.Context, m *scripted.Model, conv string) <-chan result {
	done := make(chan result, 1)
	go func() {
		msg, err := m.Generate(ctx, turn(conv), nil)
		done <- result{msg, err}
	}()
	return done
}

func TestConstructors(t *testing.T) {
	cases := []struct {
		name string
		got  *messages.AssistantMessage
		want *messages.AssistantMessage
	}{
		{"text", scripted.Text("hi"), &messages.AssistantMessage{Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: "hi"}}}}},
		{"reply without text has no part", scripted.Reply("", scripted.Call("lookup", `{"q":1}`)),
			&messages.AssistantMessage{ToolCalls: []*messages.ToolCall{{Name: "lookup", Arguments: `{"q":1}`}}}},
		{"reply with text and two calls", scripted.Reply("let me check", scripted.Call("a", `{}`), scripted.Call("b", `{"x":2}`)),
			&messages.AssistantMessage{
				Content:   []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: "let me check"}}},
				ToolCalls: []*messages.ToolCall{{Name: "a", Arguments: `{}`}, {Name: "b", Arguments: `{"x":2}`}},
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.True(t, proto.Equal(tc.want, tc.got), "got %v", tc.got)
			for _, c := range tc.got.GetToolCalls() {
				assert.Empty(t, c.GetId(), "the runtime mints ids")
			}
		})
	}
}

func TestRepliesInOrderThenDefault(t *testing.T) {
	boom := errors.New("provider down")
	cases := []struct {
		name  string
		opts  scripted.Options
		push  func(m *scripted.Model)
		texts []string // expected texts, "!" + error text for an error
	}{
		{"queued then default", scripted.Options{}, func(m *scripted.Model) {
			m.Push("c", scripted.Text("one"), scripted.Text("two"))
		}, []string{"one", "two", scripted.DefaultReply, scripted.DefaultReply}},
		{"queued error", scripted.Options{}, func(m *scripted.Model) {
			m.Push("c", scripted.Text("one"))
			m.PushError("c", boom)
			m.Push("c", scripted.Text("three"))
		}, []string{"one", "!provider down", "three"}},
		{"custom default", scripted.Options{Default: func(conv string, turn agent.Turn) (*messages.AssistantMessage, error) {
			return scripted.Text(fmt.Sprintf("default for %s after %d events", conv, len(turn.Context))), nil
		}}, func(*scripted.Model) {}, []string{"default for c after 0 events"}},
		{"default error", scripted.Options{Default: func(string, agent.Turn) (*messages.AssistantMessage, error) {
			return nil, boom
		}}, func(*scripted.Model) {}, []string{"!provider down"}},
		{"other conversations' queues are separate", scripted.Options{}, func(m *scripted.Model) {
			m.Push("other", scripted.Text("not mine"))
			m.Push("c", scripted.Text("mine"))
		}, []string{"mine", scripted.DefaultReply}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := scripted.New(tc.opts)
			tc.push(m)
			for i, want := range tc.texts {
				msg, err := m.Generate(context.Background(), turn("c"), nil)
				if e, isErr := strings.CutPrefix(want, "!"); isErr {
					require.ErrorIs(t, err, boom, "call %d", i)
					assert.Equal(t, e, err.Error())
					continue
				}
				require.NoError(t, err, "call %d", i)
				assert.Equal(t, want, text(msg), "call %d", i)
				assert.Equal(t, scripted.ModelName, msg.GetModel())
			}
			assert.Equal(t, len(tc.texts), m.Calls("c"))
		})
	}
}

func TestRepliesAreCopies(t *testing.T) {
	m := scripted.New(scripted.Options{})
	reply := scripted.Reply("x", scripted.Call("a", `{}`))
	m.Push("c", reply, reply)
	reply.ToolCalls[0].Name = "changed after push"

	first, err := m.Generate(context.Background(), turn("c"), nil)
	require.NoError(t, err)
	assert.Equal(t, "a", first.GetToolCalls()[0].GetName())
	first.ToolCalls[0].Id = "minted-by-runtime"

	second, err := m.Generate(context.Background(), turn("c"), nil)
	require.NoError(t, err)
	assert.Empty(t, second.GetToolCalls()[0].GetId(), "the runtime's change to one reply must not leak into the next")

	m.Push("c", nil)
	empty, err := m.Generate(context.Background(), turn("c"), nil)
	require.NoError(t, err)
	assert.Empty(t, empty.GetContent())
	assert.Empty(t, empty.GetToolCalls())
}

func TestStreaming(t *testing.T) {
	twoParts := &messages.AssistantMessage{Content: []*messages.ContentPart{
		{Part: &messages.ContentPart_Text{Text: "héllo wörld"}},
		{Part: &messages.ContentPart_Image{Image: &messages.Blob{MediaType: "image/png"}}},
		{Part: &messages.ContentPart_Text{Text: "!!"}},
	}}
	cases := []struct {
		name  string
		chunk int
		reply *messages.AssistantMessage
		want  []string
	}{
		{"whole parts", 0, twoParts, []string{"héllo wörld", "!!"}},
		{"chunks of 4 runes", 4, twoParts, []string{"héll", "o wö", "rld", "!!"}},
		{"chunk larger than the text", 100, scripted.Text("hi"), []string{"hi"}},
		{"no text, no deltas", 3, scripted.Reply("", scripted.Call("a", `{}`)), nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := scripted.New(scripted.Options{Chunk: tc.chunk})
			m.Push("c", tc.reply)
			var got []string
			msg, err := m.Generate(context.Background(), turn("c"), func(s string) { got = append(got, s) })
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
			assert.Equal(t, text(msg), strings.Join(got, ""), "deltas add up to the text")
		})
	}
	t.Run("nil onDelta", func(t *testing.T) {
		m := scripted.New(scripted.Options{Chunk: 1})
		msg, err := m.Generate(context.Background(), turn("c"), nil)
		require.NoError(t, err)
		assert.Equal(t, scripted.DefaultReply, text(msg))
	})
}

func TestCancelDuringStreamKeepsReplyQueued(t *testing.T) {
	m := scripted.New(scripted.Options{Chunk: 1})
	m.Push("c", scripted.Text("abc"))
	ctx, cancel := context.WithCancel(context.Background())
	var got []string
	_, err := m.Generate(ctx, turn("c"), func(s string) {
		got = append(got, s)
		cancel() // the agent is killed mid-stream
	})
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, []string{"a"}, got)
	assert.Equal(t, 1, m.Queued("c"))

	msg, err := m.Generate(context.Background(), turn("c"), nil)
	require.NoError(t, err)
	assert.Equal(t, "abc", text(msg), "the revived agent gets the same reply")
}

func TestHoldRelease(t *testing.T) {
	m := scripted.New(scripted.Options{})
	m.Push("c", scripted.Text("answer"))
	assert.Nil(t, m.Entered("c"), "never held")

	entered := m.Hold("c")
	assert.Equal(t, entered, m.Hold("c"), "a second Hold before a Generate takes it is the same hold")
	assert.Equal(t, entered, m.Entered("c"))
	done := generateAsync(context.Background(), m, "c")
	<-entered
	assert.Equal(t, 1, m.Calls("c"), "the call is counted once it has entered")
	require.Len(t, m.Turns("c"), 1, "the turn is recorded before blocking")
	select {
	case r := <-done:
		t.Fatalf("Generate returned while held: %v %v", r.msg, r.err)
	default:
	}
	assert.Equal(t, 1, m.Queued("c"), "nothing consumed while held")

	m.Release("c")
	r := <-done
	require.NoError(t, r.err)
	assert.Equal(t, "answer", text(r.msg))

	// The hold was one-shot: the next Generate does not block.
	msg, err := m.Generate(context.Background(), turn("c"), nil)
	require.NoError(t, err)
	assert.Equal(t, scripted.DefaultReply, text(msg))
}

func TestHoldOnlyBlocksItsConversation(t *testing.T) {
	m := scripted.New(scripted.Options{})
	m.Hold("held")
	msg, err := m.Generate(context.Background(), turn("free"), nil)
	require.NoError(t, err)
	assert.Equal(t, scripted.DefaultReply, text(msg))
	m.Release("held")
	_, err = m.Generate(context.Background(), turn("held"), nil)
	require.NoError(t, err, "Release before any Generate cancels the hold")
}

func TestHoldCancelledByContext(t *testing.T) {
	m := scripted.New(scripted.Options{})
	m.Push("c", scripted.Text("first"), scripted.Text("second"))
	ctx, kill := context.WithCancel(context.Background())
	entered := m.Hold("c")
	done := generateAsync(ctx, m, "c")
	<-entered
	kill() // the agent is killed mid-call

	r := <-done
	require.ErrorIs(t, r.err, context.Canceled)
	assert.Nil(t, r.msg)
	assert.Equal(t, 2, m.Queued("c"), "a cancelled call consumes nothing")

	// The revived agent's call can be held again: a new hold, a new channel.
	entered2 := m.Hold("c")
	assert.NotEqual(t, entered, entered2)
	assert.Equal(t, entered2, m.Entered("c"))
	done2 := generateAsync(context.Background(), m, "c")
	<-entered2
	m.Release("c")
	r2 := <-done2
	require.NoError(t, r2.err)
	assert.Equal(t, "first", text(r2.msg))
	assert.Equal(t, 2, m.Calls("c"))
}

func TestThinkHonoursContext(t *testing.T) {
	m := scripted.New(scripted.Options{Think: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	entered := m.Hold("c")
	done := generateAsync(ctx, m, "c")
	<-entered
	m.Release("c") // now it thinks for an hour, unless cancelled
	cancel()
	r := <-done
	require.ErrorIs(t, r.err, context.Canceled)

	quick := scripted.New(scripted.Options{Think: time.Nanosecond})
	msg, err := quick.Generate(context.Background(), turn("c"), nil)
	require.NoError(t, err)
	assert.Equal(t, scripted.DefaultReply, text(msg))
}

func TestTurnsAreDeepCopies(t *testing.T) {
	m := scripted.New(scripted.Options{})
	in := agent.Turn{
		ConversationID: "c",
		Summary:        &messages.Summary{FromSeq: 1, ToSeq: 4, Content: "earlier"},
		Context: []*messages.Event{{Seq: 5, Body: &messages.Event_UserMsg{UserMsg: &messages.UserMessage{
			Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: "hi"}}},
		}}}},
		Tools: []agent.ToolSpec{{Name: "lookup"}},
	}
	_, err := m.Generate(context.Background(), in, nil)
	require.NoError(t, err)
	_, err = m.Generate(context.Background(), agent.Turn{ConversationID: "c"}, nil)
	require.NoError(t, err)

	in.Summary.Content = "mutated"
	in.Context[0].Seq = 99
	in.Tools[0].Name = "mutated"

	turns := m.Turns("c")
	require.Len(t, turns, 2)
	assert.Equal(t, "earlier", turns[0].Summary.GetContent())
	assert.Equal(t, uint64(5), turns[0].Context[0].GetSeq())
	assert.Equal(t, "hi", turns[0].Context[0].GetUserMsg().GetContent()[0].GetText())
	assert.Equal(t, "lookup", turns[0].Tools[0].Name)
	assert.Nil(t, turns[1].Summary)
	assert.Empty(t, turns[1].Context)

	turns[0].Summary.Content = "mutated by reader"
	assert.Equal(t, "earlier", m.Turns("c")[0].Summary.GetContent(), "Turns returns copies")
	assert.Empty(t, m.Turns("other"))
}

func TestWaitCalls(t *testing.T) {
	m := scripted.New(scripted.Options{})
	waited := make(chan error, 1)
	go func() { waited <- m.WaitCalls(context.Background(), "c", 2) }()
	_, err := m.Generate(context.Background(), turn("c"), nil)
	require.NoError(t, err)
	_, err = m.Generate(context.Background(), turn("c"), nil)
	require.NoError(t, err)
	require.NoError(t, <-waited)

	require.NoError(t, m.WaitCalls(context.Background(), "c", 1), "already reached")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, m.WaitCalls(ctx, "c", 3), context.Canceled)
}

func TestConcurrentUse(t *testing.T) {
	m := scripted.New(scripted.Options{Chunk: 2})
	const convs, calls = 8, 20
	var wg sync.WaitGroup
	for i := range convs {
		conv := fmt.Sprintf("c%d", i)
		wg.Go(func() {
			for j := range calls {
				m.Push(conv, scripted.Text(fmt.Sprintf("%s-%d", conv, j)))
				msg, err := m.Generate(context.Background(), turn(conv), func(string) {})
				assert.NoError(t, err)
				assert.Equal(t, fmt.Sprintf("%s-%d", conv, j), text(msg))
				_ = m.Turns(conv)
			}
		})
	}
	wg.Wait()
	for i := range convs {
		assert.Equal(t, calls, m.Calls(fmt.Sprintf("c%d", i)))
	}
}
