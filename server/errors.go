package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"unicode/utf8"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/journal"
)

// The codes of the errors the API answers (see the package documentation
// for the status of each). They are stable: clients branch on them.
const (
	CodeInvalid              = "invalid"
	CodeTooLarge             = "too_large"
	CodeUnauthenticated      = "unauthenticated"
	CodeForbidden            = "forbidden"
	CodeNotFound             = "not_found"
	CodeMethodNotAllowed     = "method_not_allowed"
	CodeStale                = "stale"
	CodeConflict             = "conflict"
	CodeDeleted              = "deleted"
	CodeEnded                = "ended"
	CodeUnknownOutcome       = "unknown_outcome"
	CodeTimeout              = "timeout"
	CodeClosed               = "closed"
	CodeUnavailable          = "unavailable"
	CodeLagged               = "lagged"
	CodeTooManySubscriptions = "too_many_subscriptions"
	CodeUnsupported          = "unsupported"
	CodeInternal             = "internal"
)

// apiError is an error with its HTTP status and code.
type apiError struct {
	status int
	code   string
	msg    string
}

func (e *apiError) Error() string { return e.msg }

func errInvalid(msg string) *apiError {
	return &apiError{status: http.StatusBadRequest, code: CodeInvalid, msg: msg}
}

var errNotFound = &apiError{status: http.StatusNotFound, code: CodeNotFound, msg: "not found"}

// The Retry-After (in seconds) of the error answers that have one: a
// request refused for a while rather than for what it is. It is a hint;
// the server promises nothing of the state after it.
const (
	// RetryAfterUnavailable is that of 503 unavailable: the store failed
	// (or the request was cancelled) and nothing was written.
	RetryAfterUnavailable = 1
	// RetryAfterTooManySubscriptions is that of 429
	// too_many_subscriptions: a slot frees when one of the conversation's
	// streams ends, which no one can say when; a client that tries again
	// sooner gets another 429.
	RetryAfterTooManySubscriptions = 5
)

// retryAfter is the Retry-After of an error answered with code, 0 for
// none: closed (the runtime will not serve again; when its replacement
// will is not known here) and the codes that are no refusal for a while
// have none.
func retryAfter(code string) int {
	switch code {
	case CodeUnavailable:
		return RetryAfterUnavailable
	case CodeTooManySubscriptions:
		return RetryAfterTooManySubscriptions
	}
	return 0
}

// classify returns the status and code of err.
func classify(err error) (int, string) {
	var ae *apiError
	switch {
	case errors.As(err, &ae):
		return ae.status, ae.code
	case errors.Is(err, lazarus.ErrTooManySubscriptions):
		return http.StatusTooManyRequests, CodeTooManySubscriptions
	case errors.Is(err, journal.ErrStale):
		// Before ErrInvalid: an answer to a call that is not pending wraps
		// both (lazarus.Runtime.Resolve), and is a conflict.
		return http.StatusConflict, CodeStale
	case errors.Is(err, journal.ErrInvalid):
		return http.StatusBadRequest, CodeInvalid
	case errors.Is(err, lazarus.ErrUnknownOutcome), errors.Is(err, journal.ErrUnknownOutcome):
		return http.StatusGatewayTimeout, CodeUnknownOutcome
	case errors.Is(err, lazarus.ErrClosed), errors.Is(err, journal.ErrClosed):
		return http.StatusServiceUnavailable, CodeClosed
	case errors.Is(err, journal.ErrDeleted):
		return http.StatusGone, CodeDeleted
	case errors.Is(err, journal.ErrEnded):
		return http.StatusConflict, CodeEnded
	case errors.Is(err, journal.ErrNotFound):
		return http.StatusNotFound, CodeNotFound
	case errors.Is(err, journal.ErrConflict), errors.Is(err, journal.ErrExists):
		return http.StatusConflict, CodeConflict
	case errors.Is(err, lazarus.ErrForbidden):
		return http.StatusForbidden, CodeForbidden
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout, CodeTimeout
	case errors.Is(err, journal.ErrUnavailable), errors.Is(err, journal.ErrNoSpace), errors.Is(err, context.Canceled):
		return http.StatusServiceUnavailable, CodeUnavailable
	case errors.Is(err, errors.ErrUnsupported):
		// The Runtime's Store lacks what the route needs (schedules):
		// what this server is, not a failure of the request.
		return http.StatusNotImplemented, CodeUnsupported
	}
	return http.StatusInternalServerError, CodeInternal
}

// clientGone reports whether err is r's failure because its client ended
// it: r's context is cancelled and err wraps context.Canceled.
func clientGone(r *http.Request, err error) bool {
	return errors.Is(r.Context().Err(), context.Canceled) && errors.Is(err, context.Canceled)
}

type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// writeError answers err, the failure of r, as JSON with its status and
// code. A 5xx is logged as a failure of the server, but for a request its
// client ended (it went away, and its context with it: the error wraps
// context.Canceled), which is the client's doing and logged at debug
// level, whatever the call's outcome. A code with a retryAfter carries
// it in a Retry-After header.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	status, code := classify(err)
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="lazarus"`)
	}
	if secs := retryAfter(code); secs > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(secs))
	}
	switch {
	case status < 500, status == http.StatusNotImplemented:
	case clientGone(r, err):
		s.log.Debug("server: request ended by its client", "status", status, "code", code, "err", err)
	default:
		s.log.Warn("server: request failed", "status", status, "code", code, "err", err)
	}
	writeJSON(w, status, errorBody{Error: errorDetail{Code: code, Message: publicMessage(status, code, err)}})
}

// maxMessageBytes bounds the message of an error answer: one that quotes
// what the request sent (a field, a duration, a query parameter) is cut,
// so that a large request does not make an answer of its size.
const maxMessageBytes = 1024

// publicMessage is the message of an error answered with status and code:
// the error's own for a 4xx, which speaks of the request (cut after
// maxMessageBytes), and for a 5xx a fixed text of its code, as the error's
// own may name what the client need not see (a file of the store, the
// database's host and user, another conversation): the server logs it.
func publicMessage(status int, code string, err error) string {
	if status < 500 || code == CodeLagged {
		msg := err.Error()
		if len(msg) <= maxMessageBytes {
			return msg
		}
		cut := maxMessageBytes
		for cut > 0 && !utf8.RuneStart(msg[cut]) {
			cut--
		}
		return fmt.Sprintf("%s...(%d bytes)", msg[:cut], len(msg))
	}
	switch code {
	case CodeClosed:
		return "the runtime is closed"
	case CodeUnavailable:
		return "the store is unavailable or the request was cancelled; nothing was written: retry"
	case CodeUnknownOutcome:
		return "the write may or may not have happened: retry (a send with the same request_id)"
	case CodeTimeout:
		return "the call timed out"
	case CodeUnsupported:
		return "this server's store does not support the request (it keeps no schedules)"
	}
	return "internal error"
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
