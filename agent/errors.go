package agent

import (
	"errors"
	"time"
)

// Sentinels of model failures, shared by every provider (agent/openai,
// agent/anthropic), so that an application or a retry policy branches on the
// condition with errors.Is whatever the provider. A provider's error wraps
// exactly one of them, and also the SDK's own error when there is one (for
// errors.As). Each has a defined outcome in the providers:
//
//	ErrRateLimited    retried after the server's retry-after-ms or
//	                  Retry-After (the former first), bounded;
//	                  returned once the attempts run out or the wait is too
//	                  long, naming the server's wait (RetryAfter); returned
//	                  at once when the account is out of credit (OpenAI's
//	                  insufficient_quota)
//	ErrUnavailable    retried with backoff, bounded (5xx, 408, 409,
//	                  overloaded, an error event of the server's, a
//	                  connection that failed before any text was streamed)
//	ErrInterrupted    the turn fails (the stream broke after text was
//	                  streamed: retrying would stream that text again)
//	ErrMalformed      the turn fails (a chunk that does not decode or is
//	                  longer than the SDK's decoder reads, 32 MiB; an answer
//	                  whose text is not valid UTF-8)
//	ErrIncomplete     the turn fails (the stream ended without a finish reason)
//	ErrContextLength  the turn fails (the request exceeds the model's window)
//	ErrRefused        the turn fails (the model refused; the refusal is in the
//	                  error's text)
//	ErrRequest        the turn fails (any other rejected request: a bad key,
//	                  an unknown model, as a 4xx or as an error event in
//	                  the stream, even after text; a base URL the HTTP
//	                  client cannot use, a server certificate that does not
//	                  verify; a tool's Parameters that are not a JSON
//	                  object, also journal.ErrInvalid, before any request)
//
// "The turn fails" above means the provider's call returns the error. A
// failed call writes nothing: the deltas streamed before the failure never
// become an event. The runtime then retries the call per its own policy
// (lazarus.Options.ModelRetry: by default ErrRateLimited, ErrUnavailable,
// ErrInterrupted, ErrMalformed and ErrIncomplete are retried, never
// ErrContextLength, ErrRefused, ErrRequest or ErrPanicked), waiting at
// least the wait the error names (RetryAfter; a longer one than the
// policy's bound fails the turn at once), telling subscribers of each
// retry, and when it gives up records the failure durably (a turn_failed
// event). The runtime also bounds each call
// (lazarus.Options.ModelTimeout): a call past its bound has its context
// cancelled and fails with an error wrapping context.DeadlineExceeded,
// retried by default, whatever the provider returned after the cancel.
//
// ErrRateLimited also stands for an account out of credit (OpenAI's
// insufficient_quota): the provider does not retry it, but the runtime's
// default policy does, as any ErrRateLimited (3 calls in all by default),
// before the turn fails. An application that wants such a turn to fail at
// once sets a lazarus.RetryPolicy.Retryable of its own.
var (
	// ErrRateLimited: the provider answered 429 (a rate or quota limit),
	// or said the account is out of credit (OpenAI's insufficient_quota,
	// with any status).
	ErrRateLimited = errors.New("agent: model rate limited")
	// ErrUnavailable: the provider failed on its side (5xx, 408, 409,
	// overloaded) or could not be reached.
	ErrUnavailable = errors.New("agent: model unavailable")
	// ErrInterrupted: the stream broke (connection reset, an error event
	// of the server's or a rate limit) after text had been streamed.
	ErrInterrupted = errors.New("agent: model stream interrupted")
	// ErrMalformed: a streamed chunk could not be decoded (a line longer
	// than the SDK's stream decoder reads, 32 MiB, included), or the answer's
	// text, model name or a call's id is not valid UTF-8.
	ErrMalformed = errors.New("agent: malformed model response")
	// ErrIncomplete: the stream ended without a finish (stop) reason.
	ErrIncomplete = errors.New("agent: model stream ended without a finish reason")
	// ErrContextLength: the request exceeds the model's context window.
	ErrContextLength = errors.New("agent: context exceeds the model's window")
	// ErrRefused: the model refused to answer.
	ErrRefused = errors.New("agent: model refused")
	// ErrRequest: the provider rejected the request for another reason
	// (a 4xx, or an error event in the stream that says so), or
	// it could not be sent as configured (an unusable base URL, a server
	// certificate that does not verify, a tool's Parameters that are not a
	// JSON object).
	ErrRequest = errors.New("agent: model request rejected")
)

// RetryAfter returns the wait that err, the error of a failed model call,
// asks for before the next call: the provider's retry-after-ms or
// Retry-After of its last attempt (a 429, say, whether the provider gave up
// after its own attempts or because the wait was longer than its
// retry.Policy.MaxRetryAfter). It reports false when err names no wait.
//
// An error names a wait when it, or an error it wraps (errors.As), has a
// method RetryAfter() time.Duration that returns more than 0: the errors of
// agent/openai and agent/anthropic do when the server named one, and the
// error of a Model of the application's own may. The runtime's retry
// (lazarus.RetryPolicy) waits at least that long before it calls again.
func RetryAfter(err error) (time.Duration, bool) {
	var h interface{ RetryAfter() time.Duration }
	if errors.As(err, &h) {
		if d := h.RetryAfter(); d > 0 {
			return d, true
		}
	}
	return 0, false
}
