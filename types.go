package lazarus

import (
	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/messages"
)

// Clock supplies time to a Runtime (Options.Clock): deadlines, idle
// passivation, audit sweeps and the times written into events. Implement
// it to drive a Runtime from a fake clock in tests.
type Clock = actors.Clock

// SystemClock returns the Clock of the operating system (the default).
func SystemClock() Clock { return actors.SystemClock() }

// Update is one thing that happened in a conversation, as a subscriber
// sees it: a durable event, a streamed text delta, an error (with Retry
// set: a failed model call that will be retried), and, when a turn is
// over, its end (TurnEnd).
type Update = actors.Update

// TurnEnd says that a turn is over, and how (see Update.TurnEnd).
type TurnEnd = actors.TurnEnd

// TurnOutcome is how a turn ended.
type TurnOutcome = actors.TurnOutcome

// The outcomes of a turn.
const (
	// TurnAnswered: the model answered without calling a tool.
	TurnAnswered = actors.TurnAnswered
	// TurnSuspended: the turn waits on human calls.
	TurnSuspended = actors.TurnSuspended
	// TurnFailed: the model kept failing, or kept calling tools wrongly;
	// a turn_failed event records it. The next message, or Wake, runs the
	// turn again.
	TurnFailed = actors.TurnFailed
	// TurnCancelled: the conversation's actor was killed mid-turn, and
	// the turn runs again when the conversation is next woken (TurnEnd.Seq
	// is 0); or a Rewind or an Edit took the turn back, and it is not run
	// again (the end comes with the rewind event, and TurnEnd.Seq is its).
	TurnCancelled = actors.TurnCancelled
)

// TurnEndOf returns the end of a turn that the event ev records (an
// assistant message without tool calls, a suspension, a turn_failed
// event), or nil. Use it on
// History's events; live updates carry it in Update.TurnEnd.
func TurnEndOf(ev *messages.Event) *TurnEnd { return actors.TurnEndOf(ev) }

// RetryPolicy is the retry of failed model calls (Options.ModelRetry); see
// actors.RetryPolicy for its fields and defaults.
type RetryPolicy = actors.RetryPolicy

// Retry describes a retry of a failed model call, as subscribers see it
// (Update.Retry): the attempt that failed and the wait before the next.
type Retry = actors.Retry

// TurnError is the Err of a failed turn's end read from its turn_failed
// event: the error's text, a short code (actors.CodeRateLimited, ...) and
// the attempts made. errors.Is matches the sentinel its code stands for
// (agent.ErrRateLimited, ...).
type TurnError = actors.TurnError

// DefaultRetryable reports whether a failed model call is retried under the
// default RetryPolicy: the transient errors agent.ErrRateLimited,
// agent.ErrUnavailable, agent.ErrInterrupted, agent.ErrIncomplete,
// agent.ErrMalformed and context.DeadlineExceeded. agent.ErrPanicked,
// agent.ErrContextLength, agent.ErrRefused and agent.ErrRequest are never
// retried, whatever the policy.
func DefaultRetryable(err error) bool { return actors.DefaultRetryable(err) }

// ErrInvalidToolCalls is the error of a turn failed because the model
// answered with invalid tool calls more than Options.MaxInvalidToolAnswers
// times in a row.
var ErrInvalidToolCalls = actors.ErrInvalidToolCalls

// DefaultMaxInvalidToolAnswers is the default of
// Options.MaxInvalidToolAnswers.
const DefaultMaxInvalidToolAnswers = actors.DefaultMaxInvalidToolAnswers
