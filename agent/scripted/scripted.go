package scripted

import (
	"context"
	"slices"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/messages"
	"google.golang.org/protobuf/proto"
)

const (
	// DefaultReply is the text of the reply a Model gives when nothing is
	// queued for the conversation and Options.Default is nil.
	DefaultReply = "ok"
	// ModelName is set as the Model field of replies that have none.
	ModelName = "scripted"
)

// Options configure a Model. The zero value is ready to use.
type Options struct {
	// Default answers a Generate whose conversation has no reply queued.
	// It is called without the Model's lock held and may return an error,
	// which Generate returns. Default: Text(DefaultReply).
	Default func(conv string, turn agent.Turn) (*messages.AssistantMessage, error)
	// Chunk is the size, in runes, of the text deltas streamed to onDelta.
	// 0 (or less) streams each text part as one delta.
	Chunk int
	// Think is how long Generate waits (after any Hold is released, before
	// answering), returning early with ctx.Err() if ctx is done. Default 0.
	Think time.Duration
}

// Model is a scripted agent.Model. Safe for concurrent use.
type Model struct {
	opts  Options
	mu    sync.Mutex
	convs map[string]*conv
}

var _ agent.Model = (*Model)(nil)

type reply struct {
	msg *messages.AssistantMessage
	err error
}

type conv struct {
	queue   []reply
	turns   []agent.Turn
	calls   int
	called  chan struct{} // closed and replaced on every call
	armed   *gate         // the next Generate blocks on it
	blocked []*gate       // taken by a Generate, not yet released
	last    *gate         // the most recent Hold's gate
}

type gate struct {
	entered chan struct{} // closed when a Generate takes the gate
	release chan struct{} // closed by Release
}

// New returns a Model with nothing queued.
func New(opts Options) *Model {
	return &Model{opts: opts, convs: make(map[string]*conv)}
}

// conv returns the state of id, creating it. m.mu must be held.
func (m *Model) conv(id string) *conv {
	c, ok := m.convs[id]
	if !ok {
		c = &conv{called: make(chan struct{})}
		m.convs[id] = c
	}
	return c
}

// Push queues replies for conversation conv, after those already queued.
// Each Generate for conv returns a copy of the next one; a nil reply is an
// empty message. Push copies the replies: the caller may reuse them.
func (m *Model) Push(conv string, replies ...*messages.AssistantMessage) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.conv(conv)
	for _, r := range replies {
		if r == nil {
			r = &messages.AssistantMessage{}
		}
		c.queue = append(c.queue, reply{msg: proto.Clone(r).(*messages.AssistantMessage)})
	}
}

// PushError queues a failure: the Generate that reaches it returns err.
// A nil err is no failure: it queues an empty message, as Push does for a
// nil reply.
func (m *Model) PushError(conv string, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.conv(conv)
	if err == nil {
		c.queue = append(c.queue, reply{msg: &messages.AssistantMessage{}})
		return
	}
	c.queue = append(c.queue, reply{err: err})
}

// Queued returns how many replies and errors are queued for conv.
func (m *Model) Queued(conv string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.conv(conv).queue)
}

// Hold makes the next Generate for conv block, once it has started and
// recorded its turn, until Release(conv) or until its ctx is done. It
// returns a channel that is closed when that Generate is blocked. Calling
// Hold again before a Generate takes the hold returns the same channel; a
// hold applies to one Generate only.
func (m *Model) Hold(conv string) <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.conv(conv)
	if c.armed == nil {
		c.armed = &gate{entered: make(chan struct{}), release: make(chan struct{})}
		c.last = c.armed
	}
	return c.armed.entered
}

// Entered returns the channel the most recent Hold of conv returned: closed
// once a Generate is blocked on that hold. It returns nil (a channel that
// never fires) if conv was never held.
func (m *Model) Entered(conv string) <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	if g := m.conv(conv).last; g != nil {
		return g.entered
	}
	return nil
}

// Release unblocks every Generate of conv blocked on a hold and cancels a
// hold that no Generate has taken yet. Without a hold it does nothing.
func (m *Model) Release(conv string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.conv(conv)
	if c.armed != nil {
		close(c.armed.release)
		c.armed = nil
	}
	for _, g := range c.blocked {
		close(g.release)
	}
	c.blocked = nil
}

// Calls returns how many times Generate was called for conv, counting
// calls that failed or were cancelled.
func (m *Model) Calls(conv string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.conv(conv).calls
}

// WaitCalls blocks until Generate has been called at least n times for
// conv, or ctx is done (then it returns ctx.Err()).
func (m *Model) WaitCalls(ctx context.Context, conv string, n int) error {
	for {
		m.mu.Lock()
		c := m.conv(conv)
		calls, called := c.calls, c.called
		m.mu.Unlock()
		if calls >= n {
			return nil
		}
		select {
		case <-called:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Turns returns a deep copy of every Turn Generate received for conv, in
// call order, including calls that failed or were cancelled.
func (m *Model) Turns(conv string) []agent.Turn {
	m.mu.Lock()
	defer m.mu.Unlock()
	turns := m.conv(conv).turns
	out := make([]agent.Turn, len(turns))
	for i, t := range turns {
		out[i] = cloneTurn(t)
	}
	return out
}

// Generate implements agent.Model. In order: it records a copy of turn and
// counts the call; blocks on a Hold of the conversation, if one is armed;
// waits Options.Think; takes the next queued reply (or the default); streams
// its text to onDelta; and returns a copy of it, with Model set to ModelName
// if empty. If ctx is done at any point it returns ctx.Err() and the queued
// reply stays queued, so a revived agent re-running the turn gets it.
func (m *Model) Generate(ctx context.Context, turn agent.Turn, onDelta func(text string)) (*messages.AssistantMessage, error) {
	id := turn.ConversationID
	m.mu.Lock()
	c := m.conv(id)
	c.calls++
	c.turns = append(c.turns, cloneTurn(turn))
	close(c.called)
	c.called = make(chan struct{})
	g := c.armed
	if g != nil {
		c.armed = nil
		c.blocked = append(c.blocked, g)
		close(g.entered)
	}
	m.mu.Unlock()

	if g != nil {
		select {
		case <-g.release:
		case <-ctx.Done():
			m.unblock(id, g)
			return nil, ctx.Err()
		}
	}
	if err := wait(ctx, m.opts.Think); err != nil {
		return nil, err
	}

	r, queued := m.next(id)
	if err := ctx.Err(); err != nil {
		// ctx ended since the wait: the reply, error or not, stays queued.
		if queued {
			m.requeue(id, r)
		}
		return nil, err
	}
	if !queued {
		r = m.fallback(id, turn)
	}
	if r.err != nil {
		return nil, r.err
	}
	if err := stream(ctx, r.msg, m.opts.Chunk, onDelta); err != nil {
		if queued {
			m.requeue(id, r)
		}
		return nil, err
	}
	msg := proto.Clone(r.msg).(*messages.AssistantMessage)
	if msg.Model == "" {
		msg.Model = ModelName
	}
	return msg, nil
}

func (m *Model) unblock(id string, g *gate) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.conv(id)
	c.blocked = slices.DeleteFunc(c.blocked, func(b *gate) bool { return b == g })
}

func (m *Model) next(id string) (reply, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.conv(id)
	if len(c.queue) == 0 {
		return reply{}, false
	}
	r := c.queue[0]
	c.queue = c.queue[1:]
	return r, true
}

func (m *Model) requeue(id string, r reply) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.conv(id)
	c.queue = append([]reply{r}, c.queue...)
}

func (m *Model) fallback(id string, turn agent.Turn) reply {
	if m.opts.Default == nil {
		return reply{msg: Text(DefaultReply)}
	}
	msg, err := m.opts.Default(id, turn)
	if err == nil && msg == nil {
		msg = &messages.AssistantMessage{}
	}
	return reply{msg: msg, err: err}
}

func wait(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stream sends the text parts of msg to onDelta in chunks of n runes (whole
// parts if n <= 0), checking ctx before each chunk.
func stream(ctx context.Context, msg *messages.AssistantMessage, n int, onDelta func(string)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if onDelta == nil {
		return nil
	}
	for _, p := range msg.GetContent() {
		text := p.GetText()
		for text != "" {
			if err := ctx.Err(); err != nil {
				return err
			}
			cut := len(text)
			if n > 0 {
				cut = 0
				for i := 0; i < n && cut < len(text); i++ {
					_, size := utf8.DecodeRuneInString(text[cut:])
					cut += size
				}
			}
			onDelta(text[:cut])
			text = text[cut:]
		}
	}
	return nil
}

func cloneTurn(t agent.Turn) agent.Turn {
	c := agent.Turn{ConversationID: t.ConversationID, Tools: slices.Clone(t.Tools), Settings: t.Settings, Agent: t.Agent}
	if t.Settings.Temperature != nil {
		temp := *t.Settings.Temperature
		c.Settings.Temperature = &temp
	}
	if t.Summary != nil {
		c.Summary = proto.Clone(t.Summary).(*messages.Summary)
	}
	if t.Context != nil {
		c.Context = make([]*messages.Event, len(t.Context))
		for i, ev := range t.Context {
			c.Context[i] = proto.Clone(ev).(*messages.Event)
		}
	}
	return c
}

// Text is agent.Text: an assistant message holding text only.
func Text(text string) *messages.AssistantMessage { return agent.Text(text) }

// Call is agent.Call: a call of the named tool with JSON arguments. Its Id
// is empty: the runtime mints ids.
func Call(name, arguments string) *messages.ToolCall { return agent.Call(name, arguments) }

// Reply is agent.Reply: an assistant message with text (no text part if
// text is empty) and the given tool calls, in order.
func Reply(text string, calls ...*messages.ToolCall) *messages.AssistantMessage {
	return agent.Reply(text, calls...)
}
