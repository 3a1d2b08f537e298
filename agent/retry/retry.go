// Package retry is the provider-level retry policy of the model providers
// (agent/openai, agent/anthropic): bounded attempts with exponential backoff,
// honouring a server's retry-after-ms or Retry-After (see After), with a
// sleep seam for tests.
//
// A provider marks an error worth another attempt with Retryable; Do retries
// only those. The providers mark a failure retryable only while nothing of
// the answer has been streamed (a 429, a 5xx, a connection that failed before
// the first delta), so a retried call never streams text twice.
package retry

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Defaults of Policy's zero fields.
const (
	DefaultMaxAttempts    = 4
	DefaultInitialBackoff = 500 * time.Millisecond
	DefaultMaxBackoff     = 30 * time.Second
	DefaultMaxRetryAfter  = time.Minute
)

// ErrNilAttempt is the error Do returns when its attempt is nil: there is
// nothing to call, so no attempt is made.
var ErrNilAttempt = errors.New("retry: nil attempt")

// Policy bounds the attempts of one model call. The zero value is the
// defaults.
type Policy struct {
	// MaxAttempts is how many attempts a call gets in all, the first
	// included. 0 means DefaultMaxAttempts; 1 (or less than 0) never retries.
	MaxAttempts int
	// InitialBackoff is the wait before the second attempt when the server
	// named none; it doubles for each later attempt. Zero or less means
	// DefaultInitialBackoff.
	InitialBackoff time.Duration
	// MaxBackoff caps the doubled backoff. Zero or less means
	// DefaultMaxBackoff.
	MaxBackoff time.Duration
	// MaxRetryAfter is the longest server-named wait (After) that is
	// honoured; a longer one ends the call with its error at once. Zero or
	// less means DefaultMaxRetryAfter.
	MaxRetryAfter time.Duration
	// Sleep waits d or until ctx is done (then it returns ctx.Err()).
	// Default: a timer. Tests pass one that records d and returns at once.
	Sleep func(ctx context.Context, d time.Duration) error
}

// WithDefaults returns p with its zero fields set to the defaults.
func (p Policy) WithDefaults() Policy {
	if p.MaxAttempts == 0 {
		p.MaxAttempts = DefaultMaxAttempts
	}
	if p.MaxAttempts < 1 {
		p.MaxAttempts = 1
	}
	if p.InitialBackoff <= 0 {
		p.InitialBackoff = DefaultInitialBackoff
	}
	if p.MaxBackoff <= 0 {
		p.MaxBackoff = DefaultMaxBackoff
	}
	if p.MaxRetryAfter <= 0 {
		p.MaxRetryAfter = DefaultMaxRetryAfter
	}
	if p.Sleep == nil {
		p.Sleep = sleep
	}
	return p
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// retryable marks an error as worth another attempt.
type retryable struct {
	err   error
	after time.Duration
}

func (r *retryable) Error() string { return r.err.Error() }
func (r *retryable) Unwrap() error { return r.err }

// hinted is an error returned by Do that names the server's wait
// (agent.RetryAfter reads it).
type hinted struct {
	err   error
	after time.Duration
}

func (h *hinted) Error() string             { return h.err.Error() }
func (h *hinted) Unwrap() error             { return h.err }
func (h *hinted) RetryAfter() time.Duration { return h.after }

// Retryable marks err as worth another attempt, no sooner than after (the
// server's Retry-After; 0 means the policy's backoff decides). errors.Is and
// errors.As see through the mark. Retryable(nil, d) is nil.
func Retryable(err error, after time.Duration) error {
	if err == nil {
		return nil
	}
	return &retryable{err: err, after: after}
}

// IsRetryable reports whether err carries a Retryable mark.
func IsRetryable(err error) bool {
	var r *retryable
	return errors.As(err, &r)
}

// Backoff is the wait before attempt n (2 for the first retry) when the
// server named none: InitialBackoff doubled n-2 times, capped at MaxBackoff.
// Zero fields of p mean their defaults.
func (p Policy) Backoff(n int) time.Duration {
	p = p.WithDefaults()
	d := p.InitialBackoff
	for i := 2; i < n && d < p.MaxBackoff; i++ {
		if d > p.MaxBackoff/2 {
			return p.MaxBackoff // doubling would pass the cap, or overflow
		}
		d *= 2
	}
	return min(d, p.MaxBackoff)
}

// Do calls attempt until it returns nil or an error not marked Retryable,
// the attempts run out, a server-named wait exceeds MaxRetryAfter, or ctx is
// done. Between attempts it waits the server's Retry-After when one was
// named, else Backoff. It returns attempt's last error, unmarked, wrapped
// with the number of attempts when there was more than one (whether they
// ran out or the last error was not Retryable), and naming the
// server's wait of the last attempt when there was one (its method
// RetryAfter() time.Duration, read by agent.RetryAfter; errors.Is and
// errors.As see through it); ctx.Err() if ctx ended a wait. A nil attempt is refused with ErrNilAttempt, before any
// attempt or wait.
func (p Policy) Do(ctx context.Context, attempt func(ctx context.Context) error) error {
	if attempt == nil {
		return ErrNilAttempt
	}
	p = p.WithDefaults()
	for n := 1; ; n++ {
		err := attempt(ctx)
		var r *retryable
		if err == nil {
			return nil
		}
		if !errors.As(err, &r) {
			if n > 1 {
				// A failure for good after retries (a 503, then a 400).
				return fmt.Errorf("after %d attempts: %w", n, err)
			}
			return err
		}
		if n >= p.MaxAttempts || r.after > p.MaxRetryAfter || ctx.Err() != nil {
			err := r.err
			if n > 1 {
				err = fmt.Errorf("after %d attempts: %w", n, r.err)
			}
			if r.after > 0 {
				// The caller (the runtime's retry) may honour the wait.
				err = &hinted{err: err, after: r.after}
			}
			return err
		}
		wait := r.after
		if wait <= 0 {
			wait = p.Backoff(n + 1)
		}
		if err := p.Sleep(ctx, wait); err != nil {
			return err
		}
	}
}

// After reads the wait a server named in h: retry-after-ms (milliseconds),
// else Retry-After (seconds, or an HTTP date, relative to now). It returns 0
// when there is none or it does not parse (NaN and Inf are not numbers of
// seconds here), or names a time already past. A wait too long for a
// time.Duration (a number of seconds past some 292 years, or too large
// for a float64) is the longest Duration, as a date that far ahead is:
// past any Policy's MaxRetryAfter, so that the call ends at once, as the
// server asked not to be called for that long.
func After(h http.Header, now time.Time) time.Duration {
	if v := h.Get("Retry-After-Ms"); v != "" {
		if d, ok := parseWait(v, time.Millisecond); ok {
			return d
		}
	}
	v := h.Get("Retry-After")
	if v == "" {
		return 0
	}
	if d, ok := parseWait(v, time.Second); ok {
		return d
	}
	if _, err := strconv.ParseFloat(v, 64); err == nil {
		return 0 // a number, not a wait: NaN, Inf, 0 or negative
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// parseWait reads v as a positive number of units, ok false when it is not
// one. A number too large for a Duration (or for a float64: ParseFloat's
// range error, not an Inf written as such) is the longest Duration.
func parseWait(v string, unit time.Duration) (time.Duration, bool) {
	f, err := strconv.ParseFloat(v, 64)
	switch {
	case err != nil && errors.Is(err, strconv.ErrRange) && f > 0:
		return math.MaxInt64, true
	case err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f <= 0:
		return 0, false
	}
	if d := f * float64(unit); d < math.MaxInt64 { // float64(MaxInt64) is 2^63
		return time.Duration(d), true
	}
	return math.MaxInt64, true
}

// Transient reports whether err is a failure of the connection rather than
// of the request: a network error (refused, reset, timed out), or a body
// that ended early. A provider retries such a failure while nothing has been
// streamed; any other error of unknown kind (a missing credential, a bad URL)
// is not worth another attempt. An http.Client wraps each failure in a
// *url.Error, which is a net.Error whatever its cause: it counts as
// transient unless its cause is the request's or the configuration's (see
// requestFault), which another attempt would only repeat.
func Transient(err error) bool {
	var ue *url.Error
	if errors.As(err, &ue) && !ue.Timeout() && requestFault(ue.Err) {
		return false
	}
	var ne net.Error
	var oe *net.OpError
	return errors.As(err, &ne) || errors.As(err, &oe) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EPIPE)
}

// requestFault reports whether the cause of an http.Client's failure is a
// fault of the request or of the configuration: a URL the client cannot use
// (an unsupported scheme, no host), a server certificate that does not
// verify, or a TLS handshake with a server that does not speak TLS. A nil
// cause (a *url.Error built without one) is none of these.
func requestFault(err error) bool {
	if err == nil {
		return false
	}
	var (
		verify    *tls.CertificateVerificationError
		header    tls.RecordHeaderError
		authority x509.UnknownAuthorityError
		host      x509.HostnameError
		invalid   x509.CertificateInvalidError
	)
	if errors.As(err, &verify) || errors.As(err, &header) || errors.As(err, &authority) || errors.As(err, &host) || errors.As(err, &invalid) {
		return true
	}
	// net/http exports no sentinels for these.
	s := err.Error()
	return strings.HasPrefix(s, "unsupported protocol scheme") || strings.HasPrefix(s, "http: no Host in request URL")
}
