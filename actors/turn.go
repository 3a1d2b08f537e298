package actors

import (
	"errors"
	"fmt"
	"strings"

	"github.com/lazarusrt/lazarus/messages"
)

// ErrTurnCancelled is the Err of a TurnCancelled end: the conversation's
// actor was killed while its turn was in progress, or a rewind (or an
// edit) took the turn back (the Err of that end wraps it).
var ErrTurnCancelled = errors.New("lazarus: turn cancelled: the conversation's actor was killed")

// rewoundError is the Err of a turn a rewind took back.
type rewoundError struct{ seq uint64 }

func (e rewoundError) Error() string {
	return fmt.Sprintf("lazarus: turn cancelled by the rewind at seq %d", e.seq)
}

func (e rewoundError) Is(target error) bool { return target == ErrTurnCancelled }

// TurnOutcome is how a turn ended.
type TurnOutcome int

// The outcomes of a turn.
const (
	// TurnAnswered: the model answered without calling a tool; nothing is
	// owed until the next message.
	TurnAnswered TurnOutcome = iota + 1
	// TurnSuspended: the turn waits on human calls (a suspension event);
	// it continues once they are answered or expire.
	TurnSuspended
	// TurnFailed: the model kept failing (its error was not retryable, or
	// the retry policy gave up) or kept answering with invalid tool calls.
	// A turn_failed event records it; the turn is not run again until a
	// new message or an explicit wake.
	TurnFailed
	// TurnCancelled: the conversation's actor was stopped (a kill) while
	// the turn was in progress, and the turn runs again when the
	// conversation is next woken; or a rewind (or an edit) took the turn
	// back, and it is not run again (its rewind event records it).
	TurnCancelled
)

// String names the outcome ("answered", "suspended", "failed",
// "cancelled").
func (o TurnOutcome) String() string {
	switch o {
	case TurnAnswered:
		return "answered"
	case TurnSuspended:
		return "suspended"
	case TurnFailed:
		return "failed"
	case TurnCancelled:
		return "cancelled"
	}
	return "unknown"
}

// TurnEnd says that a turn is over, and how.
type TurnEnd struct {
	// Outcome is how the turn ended.
	Outcome TurnOutcome
	// Seq is the seq of the event that ended the turn: the assistant
	// message (answered), the suspension (suspended) or the turn_failed
	// event (failed), the rewind (cancelled by a rewind or an edit). 0
	// for a turn cancelled by a kill, which no event records, and for a
	// failure that was never written (the activation's write failed).
	Seq uint64
	// Text is the text of the answer (answered): its text parts, joined
	// by newlines.
	Text string
	// Pending lists the human calls the turn waits on (suspended).
	Pending []*messages.PendingCall
	// Err is why the turn failed or was cancelled. The Err of a failure
	// read from its turn_failed event is a *TurnError.
	Err error
}

// TurnEndOf returns the end of a turn that the durable event ev records,
// or nil if ev ends no turn. An assistant message without tool calls ends
// its turn answered; a suspension ends it suspended; a turn_failed event
// ends it failed, with a *TurnError; a rewind that took back a turn in
// progress (Rewind.cancelled_turn) ends it cancelled, with an error
// wrapping ErrTurnCancelled.
func TurnEndOf(ev *messages.Event) *TurnEnd {
	switch b := ev.GetBody().(type) {
	case *messages.Event_AssistantMsg:
		if len(b.AssistantMsg.GetToolCalls()) > 0 {
			return nil
		}
		var text []string
		for _, p := range b.AssistantMsg.GetContent() {
			if t, ok := p.GetPart().(*messages.ContentPart_Text); ok {
				text = append(text, t.Text)
			}
		}
		return &TurnEnd{Outcome: TurnAnswered, Seq: ev.GetSeq(), Text: strings.Join(text, "\n")}
	case *messages.Event_Suspension:
		return &TurnEnd{Outcome: TurnSuspended, Seq: ev.GetSeq(), Pending: b.Suspension.GetPending()}
	case *messages.Event_TurnFailed:
		f := b.TurnFailed
		return &TurnEnd{Outcome: TurnFailed, Seq: ev.GetSeq(),
			Err: &TurnError{Message: f.GetMessage(), Code: f.GetCode(), Attempts: int(f.GetAttempts())}}
	case *messages.Event_Rewind:
		if b.Rewind.GetCancelledTurn() {
			return &TurnEnd{Outcome: TurnCancelled, Seq: ev.GetSeq(), Err: rewoundError{seq: ev.GetSeq()}}
		}
	}
	return nil
}
