package journal

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/lazarusrt/lazarus/messages"
)

// Sentinel errors. Every error a Store returns for one of these conditions
// wraps the sentinel, so callers branch with errors.Is, never on text.
var (
	// ErrConflict: an append's expected last seq is not the log's last seq
	// (another writer moved the log on), or a tool call id is already used by
	// another conversation. Nothing was written.
	ErrConflict = errors.New("journal: conflict")
	// ErrStale: a tool call is unknown or no longer pending. Nothing changed.
	ErrStale = errors.New("journal: tool call is not pending")
	// ErrNotFound: the conversation, summary or tool call does not exist.
	ErrNotFound = errors.New("journal: not found")
	// ErrClosed: the Store was closed, or refuses writes after a fatal I/O
	// error.
	ErrClosed = errors.New("journal: store closed")
	// ErrCorrupt: stored bytes cannot be decoded (the error names the key),
	// a file of the store is damaged (the error keeps the adapter's own
	// text), or a conversation's log has a gap.
	ErrCorrupt = errors.New("journal: corrupt record")
	// ErrInvalid: the input breaks a documented rule or limit. Nothing was
	// written.
	ErrInvalid = errors.New("journal: invalid input")
	// ErrDeleted: the conversation was deleted; its id cannot be written
	// again. Nothing was written.
	ErrDeleted = errors.New("journal: conversation deleted")
	// ErrNoSpace: the disk holding the store is full. An adapter returns it
	// from its Open when it cannot start for want of space (free some and
	// open again), and wraps it, together with ErrClosed, in the errors of a
	// store that stopped because a write found the disk full.
	ErrNoSpace = errors.New("journal: no space left on the store's disk")
	// ErrUnavailable: a networked store could not be reached, did not
	// answer within its own time bound, or lost its connection before the
	// write was sent for commit. Nothing was written; the call may be
	// retried once the store is back.
	ErrUnavailable = errors.New("journal: store unavailable")
	// ErrUnknownOutcome: the connection to a networked store was lost, or
	// its own time bound ended the call, while the write was committing: it
	// may or may not have been written. Read the log (LastSeq) before
	// retrying; the append fence (ExpectedLast) makes a retry of an append
	// that did commit fail with ErrConflict instead of writing twice.
	ErrUnknownOutcome = errors.New("journal: write outcome unknown")
	// ErrExists: a fork names a conversation that already exists (it has a
	// row or events). Nothing was written.
	ErrExists = errors.New("journal: conversation exists")
	// ErrEnded: the conversation was ended (status ENDED): it takes no new
	// message, rewind or settings. Its history stays readable. A Store
	// refuses with it a fenced append to an ENDED conversation that does
	// not itself state ENDED (CheckEnded), nothing written.
	ErrEnded = errors.New("journal: conversation ended")
)

// codes gives each sentinel its wire code. Its order decides an error's
// Error.code when the error wraps more than one sentinel (the first that
// matches; the others go in Error.also): codes added later come last, so a
// peer that knows only the earlier codes and reads code alone still sees
// the sentinel it knew (ErrClosed of a store stopped on a full disk,
// ErrInvalid of a blob over its limit). A context's errors come last of
// all: an error wrapping a sentinel too (a write of unknown outcome cut by
// its context) keeps the sentinel's code, and a peer that does not know
// the context codes reads a context's error alone as INTERNAL, as it did
// before they were added.
var codes = []struct {
	err  error
	code messages.ErrorCode
}{
	{ErrConflict, messages.ErrorCode_ERROR_CODE_CONFLICT},
	{ErrStale, messages.ErrorCode_ERROR_CODE_STALE},
	{ErrNotFound, messages.ErrorCode_ERROR_CODE_NOT_FOUND},
	{ErrClosed, messages.ErrorCode_ERROR_CODE_CLOSED},
	{ErrCorrupt, messages.ErrorCode_ERROR_CODE_CORRUPT},
	{ErrInvalid, messages.ErrorCode_ERROR_CODE_INVALID},
	{ErrDeleted, messages.ErrorCode_ERROR_CODE_DELETED},
	{ErrUnknownOutcome, messages.ErrorCode_ERROR_CODE_UNKNOWN_OUTCOME},
	{ErrUnavailable, messages.ErrorCode_ERROR_CODE_UNAVAILABLE},
	{ErrEnded, messages.ErrorCode_ERROR_CODE_ENDED},
	{ErrExists, messages.ErrorCode_ERROR_CODE_EXISTS},
	{ErrNoSpace, messages.ErrorCode_ERROR_CODE_NO_SPACE},
	{ErrTooLarge, messages.ErrorCode_ERROR_CODE_TOO_LARGE},
	{context.DeadlineExceeded, messages.ErrorCode_ERROR_CODE_DEADLINE_EXCEEDED},
	{context.Canceled, messages.ErrorCode_ERROR_CODE_CANCELED},
}

// ErrorToProto turns an error into its wire form for an actor reply. It
// returns nil for a nil error. Every sentinel of this package that the
// error wraps, and context.DeadlineExceeded and context.Canceled, gets its
// code: the first in Error.code, the others in Error.also (a context's
// error is in Error.code only when the error wraps no sentinel). An error
// that wraps none of them gets ERROR_CODE_INTERNAL.
func ErrorToProto(err error) *messages.Error {
	if err == nil {
		return nil
	}
	e := &messages.Error{Code: messages.ErrorCode_ERROR_CODE_INTERNAL, Message: err.Error()}
	found := false
	for _, c := range codes {
		if !errors.Is(err, c.err) {
			continue
		}
		if !found {
			e.Code, found = c.code, true
		} else {
			e.Also = append(e.Also, c.code)
		}
	}
	return e
}

// ErrorFromProto is the inverse of ErrorToProto: the returned error carries
// the original message and wraps the sentinel (or the context's error) of
// each of its codes (Error.code and Error.also), so errors.Is keeps working
// across an actor boundary. A code it does not know (a newer peer's), INTERNAL and
// UNSPECIFIED wrap nothing; an error with no known code is a plain error
// with the message. It returns nil for nil.
func ErrorFromProto(e *messages.Error) error {
	if e == nil {
		return nil
	}
	var sentinels []error
	add := func(code messages.ErrorCode) {
		for _, c := range codes {
			if c.code == code && !slices.Contains(sentinels, c.err) {
				sentinels = append(sentinels, c.err)
			}
		}
	}
	add(e.GetCode())
	for _, code := range e.GetAlso() {
		add(code)
	}
	if len(sentinels) == 0 {
		return errors.New(e.GetMessage())
	}
	return &wireError{msg: e.GetMessage(), sentinels: sentinels}
}

// wireError is an error that came in a reply: its message, wrapping the
// sentinels of its codes.
type wireError struct {
	msg       string
	sentinels []error
}

func (e *wireError) Error() string   { return e.msg }
func (e *wireError) Unwrap() []error { return e.sentinels }

// Corruptf returns an error wrapping ErrCorrupt that names the location of
// the bad bytes. Its message ends with ErrCorrupt's text, unless an
// argument is an error whose message already holds that text (a cause
// named with %v): the text then shows once, where the cause says it. An
// argument is named, not wrapped: the result wraps ErrCorrupt alone.
func Corruptf(format string, args ...any) error {
	return sentinelf(ErrCorrupt, format, args)
}

// Invalidf returns an error wrapping ErrInvalid that names the problem. Its
// message ends with ErrInvalid's text, unless an argument is an error whose
// message already holds that text (a cause named with %v): the text then
// shows once, where the cause says it. An argument is named, not wrapped:
// the result wraps ErrInvalid alone.
func Invalidf(format string, args ...any) error {
	return sentinelf(ErrInvalid, format, args)
}

// sentinelf formats the message of Corruptf and Invalidf and wraps
// sentinel, adding its text only if no error argument holds it already.
func sentinelf(sentinel error, format string, args []any) error {
	msg := fmt.Sprintf(format, args...)
	text := sentinel.Error()
	for _, a := range args {
		if e, ok := a.(error); ok && e != nil && strings.Contains(e.Error(), text) && strings.Contains(msg, text) {
			return &namedError{msg: msg, sentinel: sentinel}
		}
	}
	return fmt.Errorf("%s: %w", msg, sentinel)
}

// namedError is an error whose message already says its sentinel's text.
type namedError struct {
	msg      string
	sentinel error
}

func (e *namedError) Error() string { return e.msg }
func (e *namedError) Unwrap() error { return e.sentinel }

// PassedOver collects the records a listing passed over because they are
// corrupt (Deadlines.Deadlines, ScheduleStore.ScheduleTimes), so that it
// lists every other record and reports the damage at the end. The zero
// value is empty and ready; it is not safe for concurrent use.
type PassedOver struct {
	first error
	n     int
}

// Add records err, the error (wrapping ErrCorrupt) of one record passed
// over.
func (p *PassedOver) Add(err error) {
	if p.first == nil {
		p.first = err
	}
	p.n++
}

// Err returns nil if no record was passed over. Otherwise it returns an
// error naming what was listed (what), how many records were passed over,
// and the first one's error, which it wraps; it wraps ErrCorrupt in any
// case.
func (p *PassedOver) Err(what string) error {
	if p.n == 0 {
		return nil
	}
	if !errors.Is(p.first, ErrCorrupt) {
		return fmt.Errorf("%s: passed over %d corrupt record(s), the first: %w (%w)", what, p.n, p.first, ErrCorrupt)
	}
	return fmt.Errorf("%s: passed over %d corrupt record(s), the first: %w", what, p.n, p.first)
}
