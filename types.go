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
// sees it: a durable event, a streamed text delta, an error, and, when a
// turn is over, its end (TurnEnd).
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
	// TurnFailed: the model failed or its answer was refused; the next
	// command runs the turn again.
	TurnFailed = actors.TurnFailed
	// TurnCancelled: the conversation's actor was killed mid-turn; the
	// turn runs again when the conversation is next woken.
	TurnCancelled = actors.TurnCancelled
)

// TurnEndOf returns the end of a turn that the event ev records (an
// assistant message without tool calls, a suspension), or nil. Use it on
// History's events; live updates carry it in Update.TurnEnd.
func TurnEndOf(ev *messages.Event) *TurnEnd { return actors.TurnEndOf(ev) }
