package agent

import (
	"context"
	"errors"

	"github.com/lazarusrt/lazarus/messages"
)

// Turn is the input of one model call: what the model sees, and which tools
// it may call. The runtime builds it; a Model must not modify it or keep
// references to its records after Generate returns.
type Turn struct {
	// ConversationID names the conversation the turn belongs to.
	ConversationID string
	// Summary is the latest summary the context starts from, or nil. Its
	// Content stands for every event up to Summary.ToSeq.
	Summary *messages.Summary
	// Context is the rendered working set after the summary: user_msg,
	// assistant_msg and tool_result events, in ascending seq (see
	// snapshot.WorkingSet.Render), with every tool call paired with
	// exactly one result (PairResults: a synthetic result carries the seq
	// of the event before it).
	Context []*messages.Event
	// Tools are the tools the model may call, sorted by name.
	Tools []ToolSpec
	// Settings are the conversation's model settings (system prompt, model,
	// sampling, tool choice): the runtime's defaults under the
	// conversation's own. A Model applies each field that is set over its
	// own configuration, and keeps its own for the others.
	Settings Settings
	// Agent names the agent of a multi-agent conversation whose turn this
	// is; "" is the default agent (every turn of a conversation without
	// named agents). Context then holds only the events that agent sees.
	Agent string
}

// ErrPanicked is wrapped by the error the runtime reports when a Model's
// Generate or a Summarizer's Summarize panics. The runtime recovers the
// panic on the goroutine it called them on: the turn fails, durably and
// without a retry (a turn_failed event; the next message starts a new
// turn), a summary is skipped and tried again later, and the
// process and every other conversation go on. A panic in a goroutine the
// Model started itself is not recovered. Generate or Summarize calling
// runtime.Goexit (as t.FailNow does) is reported as a panic. (A panicking
// server tool becomes an error outcome of code CodePanic instead: the
// model sees it.)
var ErrPanicked = errors.New("agent: panicked")

// Model is a language model behind a provider-neutral interface.
// Implementations must be safe for concurrent use: the runtime calls Generate
// for many conversations at once (never twice at once for one conversation).
type Model interface {
	// Generate runs one model turn. It streams text deltas to onDelta (which
	// may be nil) as they arrive and returns the complete assistant message;
	// the concatenated deltas equal the message's text. Tool calls in the
	// returned message may have an empty Id: the runtime mints ids before it
	// stores the message, and it may modify the returned message, so a Model
	// must return a message it does not keep. Generate must honour ctx
	// cancellation, returning an error (ctx.Err() or one wrapping it) soon
	// after ctx is done; the runtime then discards the turn and re-runs it
	// after a revival, so a cancelled Generate must have had no side effects
	// beyond cost. The conversation's next call waits until a cancelled one
	// has returned. The message's text must be valid UTF-8 (the Store
	// takes nothing else): the runtime fails the turn of an answer whose
	// text is not, without writing any of it and without a retry (a
	// turn_failed event of code invalid_answer). The providers (agent/openai,
	// agent/anthropic) check the bytes they are sent, the text, the model
	// name and the calls' ids, and fail the call with ErrMalformed instead,
	// which the runtime's default policy retries. A call's name and
	// arguments are recorded, and checked, with bytes that are not UTF-8
	// replaced by U+FFFD.
	Generate(ctx context.Context, turn Turn, onDelta func(text string)) (*messages.AssistantMessage, error)
}

// ModelFunc adapts a function to the Model interface.
type ModelFunc func(ctx context.Context, turn Turn, onDelta func(text string)) (*messages.AssistantMessage, error)

// Generate calls f.
func (f ModelFunc) Generate(ctx context.Context, turn Turn, onDelta func(text string)) (*messages.AssistantMessage, error) {
	return f(ctx, turn, onDelta)
}

// ToolSpec is what a model is told about one tool.
type ToolSpec struct {
	// Name is the tool's name, as the model must call it.
	Name string
	// Description tells the model what the tool does and when to use it.
	Description string
	// Executor says who answers the call: the server or a human.
	Executor messages.Executor
	// Parameters is the JSON schema of the arguments object, as text; empty
	// means the tool takes no documented parameters.
	Parameters string
}
