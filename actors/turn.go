package actors

import (
	"strings"

	"github.com/lazarusrt/lazarus/messages"
)

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
	// the turn was in progress; the turn runs again when the conversation
	// is next woken.
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
	// event (failed). 0 for a turn cancelled by a kill, which no event
	// records, and for a failure that was never written (the activation's
	// write failed); the rewind event's for a turn a rewind took back
	// (lazarus.SendAndWait).
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
// ends it failed, with a *TurnError.
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
	}
	return nil
}
