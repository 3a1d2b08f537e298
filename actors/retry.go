package actors

import (
	"context"
	"errors"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal"
)

// Defaults of RetryPolicy's zero fields.
const (
	DefaultRetryInitialInterval    = time.Second
	DefaultRetryBackoffCoefficient = 2.0
	DefaultRetryMaximumInterval    = time.Minute
	DefaultRetryMaximumAttempts    = 3
	DefaultRetryMaximumRetryAfter  = 10 * time.Minute
)

// DefaultMaxInvalidToolAnswers is how many model answers in a row, within
// one turn, may contain invalid tool calls (ConversationConfig.MaxInvalidToolAnswers)
// before the turn fails.
const DefaultMaxInvalidToolAnswers = 3

// RetryPolicy is the runtime's retry of a failed model call, shaped like
// Temporal's RetryPolicy. The zero value is the defaults: 3 attempts in
// all, waiting 1s then 2s.
//
// It is a second layer above the providers' own retry (agent/retry), which
// retries a single Generate call (a 429 after its Retry-After, a 5xx or a
// failed connection before any text was streamed) and returns the
// sentinel error once its attempts run out. The runtime counts that
// returned error as one failed attempt of the turn, waits (on the Clock),
// and calls Generate again with the same context: at worst a turn makes
// MaximumAttempts times the provider's attempts of HTTP requests. Every
// retry is announced to subscribers (Update.Retry).
//
// When the failed call's error names a wait (agent.RetryAfter: a provider's
// Retry-After, say of a 429 it gave up on), the runtime waits the longer of
// that and its own delay (Delay), so that it does not call a rate-limited
// provider again sooner than the provider asked. A wait longer than
// MaximumRetryAfter fails the turn at once, as the providers' own retry
// does past its MaxRetryAfter: a call sooner than the provider asked would
// be refused again, spending an attempt and a request for nothing, while a
// failed turn is durable (turn_failed) and tells the application at once,
// which may send again when it sees fit. Waits are on the Clock, between
// calls: ConversationConfig.ModelTimeout bounds each call, never a wait.
//
// A retry waiting its delay is abandoned when a new message arrives (the
// turn restarts with it, attempts counted from 1 again), when the
// conversation is killed, and when its actor stops. The turn is still
// owed then, and a revived activation runs it from attempt 1: at once,
// unless the error named a wait. The time of such a retry (the failure's
// time plus the wait, on the Clock) is written to the conversation's row
// (FSMState.retry_not_before), and an activation revived before it, with
// nothing written to the log since, calls the model no sooner.
type RetryPolicy struct {
	// InitialInterval is the wait before the second attempt. 0 (or less)
	// means DefaultRetryInitialInterval.
	InitialInterval time.Duration
	// BackoffCoefficient multiplies the wait for each later attempt. Less
	// than 1 (0 included), or NaN, means DefaultRetryBackoffCoefficient.
	BackoffCoefficient float64
	// MaximumInterval caps the wait. 0 (or less) means
	// DefaultRetryMaximumInterval. It is raised to InitialInterval if below
	// it.
	MaximumInterval time.Duration
	// MaximumAttempts is how many model calls a turn makes in all, the
	// first included, before it fails. 0 means DefaultRetryMaximumAttempts;
	// 1 or less than 0 never retries.
	MaximumAttempts int
	// MaximumRetryAfter is the longest wait a failed call's error may name
	// (agent.RetryAfter) that is honoured; a longer one fails the turn at
	// once. 0 (or less) means DefaultRetryMaximumRetryAfter.
	MaximumRetryAfter time.Duration
	// Retryable reports whether a failed model call is worth another
	// attempt. Nil means DefaultRetryable. It is never asked about a
	// permanent failure (see Permanent): those fail the turn at once.
	Retryable func(error) bool
}

// WithDefaults returns p with its zero fields set to the defaults.
func (p RetryPolicy) WithDefaults() RetryPolicy {
	if p.InitialInterval <= 0 {
		p.InitialInterval = DefaultRetryInitialInterval
	}
	if !(p.BackoffCoefficient >= 1) { // NaN too
		p.BackoffCoefficient = DefaultRetryBackoffCoefficient
	}
	if p.MaximumInterval <= 0 {
		p.MaximumInterval = DefaultRetryMaximumInterval
	}
	p.MaximumInterval = max(p.MaximumInterval, p.InitialInterval)
	if p.MaximumAttempts == 0 {
		p.MaximumAttempts = DefaultRetryMaximumAttempts
	}
	if p.MaximumAttempts < 1 {
		p.MaximumAttempts = 1
	}
	if p.MaximumRetryAfter <= 0 {
		p.MaximumRetryAfter = DefaultRetryMaximumRetryAfter
	}
	if p.Retryable == nil {
		p.Retryable = DefaultRetryable
	}
	return p
}

// Delay is the wait before the attempt after attempt (counted from 1):
// InitialInterval times BackoffCoefficient^(attempt-1), at most
// MaximumInterval. p must have its defaults (WithDefaults).
func (p RetryPolicy) Delay(attempt int) time.Duration {
	d := float64(p.InitialInterval) * math.Pow(p.BackoffCoefficient, float64(max(attempt, 1)-1))
	if d >= float64(p.MaximumInterval) || math.IsInf(d, 0) || math.IsNaN(d) {
		return p.MaximumInterval
	}
	return time.Duration(d)
}

// retry reports whether a turn whose attempt (counted from 1) failed with
// err gets another attempt, and after which wait: the longer of Delay and
// the wait err names (agent.RetryAfter), none past MaximumRetryAfter. p
// must have its defaults.
func (p RetryPolicy) retry(err error, attempt int) (time.Duration, bool) {
	if attempt >= p.MaximumAttempts || Permanent(err) || !p.Retryable(err) {
		return 0, false
	}
	d := p.Delay(attempt)
	if after, ok := agent.RetryAfter(err); ok {
		if after > p.MaximumRetryAfter {
			return 0, false
		}
		d = max(d, after)
	}
	return d, true
}

// Permanent reports whether a model failure is never retried, whatever the
// policy: a panic of the model (agent.ErrPanicked), a request too large for
// the model's window (agent.ErrContextLength), a refusal (agent.ErrRefused),
// a rejected request (agent.ErrRequest), and too many answers with invalid
// tool calls (ErrInvalidToolCalls). Calling again would fail the same way.
func Permanent(err error) bool {
	for _, s := range []error{agent.ErrPanicked, agent.ErrContextLength, agent.ErrRefused, agent.ErrRequest, ErrInvalidToolCalls} {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

// DefaultRetryable is the default RetryPolicy.Retryable: the transient
// model failures agent.ErrRateLimited (an account out of credit, OpenAI's
// insufficient_quota, included), agent.ErrUnavailable,
// agent.ErrInterrupted, agent.ErrIncomplete, agent.ErrMalformed, and
// context.DeadlineExceeded (a timeout of the model call: the error of a call
// past ConversationConfig.ModelTimeout wraps it). Any other error
// (of a Model of the application's own, say, or an answer the Store
// refused, journal.ErrInvalid) is not retried.
func DefaultRetryable(err error) bool {
	for _, s := range []error{agent.ErrRateLimited, agent.ErrUnavailable, agent.ErrInterrupted, agent.ErrIncomplete, agent.ErrMalformed, context.DeadlineExceeded} {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

// errModelTimedOut is the cause with which the model timeout
// (ConversationConfig.ModelTimeout) cancels a call's context, telling it
// from the actor's own cancel.
var errModelTimedOut = errors.New("model call timed out")

// ErrInvalidToolCalls fails a turn whose model answered with invalid tool
// calls (an unknown tool, arguments that are not a JSON object) more times
// in a row than ConversationConfig.MaxInvalidToolAnswers allows.
var ErrInvalidToolCalls = errors.New("actors: too many answers in a row with invalid tool calls")

// Codes of a failed turn (TurnFailed.code, TurnError.Code): what failed, in
// a word.
const (
	CodeRateLimited      = "rate_limited"       // agent.ErrRateLimited
	CodeUnavailable      = "unavailable"        // agent.ErrUnavailable
	CodeInterrupted      = "interrupted"        // agent.ErrInterrupted
	CodeMalformed        = "malformed"          // agent.ErrMalformed
	CodeIncomplete       = "incomplete"         // agent.ErrIncomplete
	CodeContextLength    = "context_length"     // agent.ErrContextLength
	CodeRefused          = "refused"            // agent.ErrRefused
	CodeRequest          = "request"            // agent.ErrRequest
	CodePanicked         = "panicked"           // agent.ErrPanicked
	CodeTimeout          = "timeout"            // context.DeadlineExceeded
	CodeInvalidAnswer    = "invalid_answer"     // journal.ErrInvalid: the Store refused the answer
	CodeInvalidToolCalls = "invalid_tool_calls" // ErrInvalidToolCalls
	CodeModel            = "model"              // any other error
)

// failureCodes maps each code to the sentinel it stands for, in the order
// TurnFailureCode tries them.
var failureCodes = []struct {
	code string
	err  error
}{
	{CodeInvalidToolCalls, ErrInvalidToolCalls},
	{CodePanicked, agent.ErrPanicked},
	{CodeRateLimited, agent.ErrRateLimited},
	{CodeUnavailable, agent.ErrUnavailable},
	{CodeInterrupted, agent.ErrInterrupted},
	{CodeMalformed, agent.ErrMalformed},
	{CodeIncomplete, agent.ErrIncomplete},
	{CodeContextLength, agent.ErrContextLength},
	{CodeRefused, agent.ErrRefused},
	{CodeRequest, agent.ErrRequest},
	{CodeTimeout, context.DeadlineExceeded},
	{CodeInvalidAnswer, journal.ErrInvalid},
}

// TurnFailureCode returns the code of a turn failure: the code of the first
// sentinel err wraps, else CodeModel.
func TurnFailureCode(err error) string {
	for _, f := range failureCodes {
		if errors.Is(err, f.err) {
			return f.code
		}
	}
	return CodeModel
}

// MaxTurnErrorBytes bounds the message of a turn_failed event: a longer
// error text is clipped (on a rune boundary) with "...".
const MaxTurnErrorBytes = 4096

// turnErrorText is err's text as a turn_failed event stores it: valid
// UTF-8, at most MaxTurnErrorBytes.
func turnErrorText(err error) string {
	s := strings.ToValidUTF8(err.Error(), "\uFFFD")
	if len(s) <= MaxTurnErrorBytes {
		return s
	}
	cut := MaxTurnErrorBytes - len("...")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

// TurnError is the error of a turn that failed durably, as its turn_failed
// event records it (TurnEnd.Err of a TurnFailed end). It unwraps to the
// sentinel its code stands for (agent.ErrRateLimited for "rate_limited",
// ...), so errors.Is works on a failure read back from the log as on the
// live one.
type TurnError struct {
	// Message is the error's text.
	Message string
	// Code is the short reason (CodeRateLimited, ...; CodeModel for any
	// other error).
	Code string
	// Attempts is how many model calls the turn made.
	Attempts int
}

// Error returns the error's text.
func (e *TurnError) Error() string { return e.Message }

// Unwrap returns the sentinel of the error's code, or nil for CodeModel and
// codes this build does not know.
func (e *TurnError) Unwrap() error {
	for _, f := range failureCodes {
		if f.code == e.Code {
			return f.err
		}
	}
	return nil
}

// Retry describes a retry of a failed model call (Update.Retry).
type Retry struct {
	// Attempt is the attempt that failed, counted from 1; the next one is
	// Attempt+1.
	Attempt int
	// Delay is how long the runtime waits (on its Clock) before the next
	// attempt: RetryPolicy.Delay, or the wait the error names when longer
	// (see RetryPolicy).
	Delay time.Duration
}
