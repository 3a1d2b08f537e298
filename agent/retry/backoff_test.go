package retry_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/url"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/lazarusrt/lazarus/agent/retry"
)

// TestBackoffNeverOverflows: a cap near the largest Duration ("no cap")
// bounds the doubled backoff instead of letting it wrap negative.
func TestBackoffNeverOverflows(t *testing.T) {
	for _, p := range []retry.Policy{
		{InitialBackoff: 1 << 62, MaxBackoff: math.MaxInt64},
		{InitialBackoff: time.Second, MaxBackoff: math.MaxInt64},
		{InitialBackoff: 3, MaxBackoff: math.MaxInt64 - 1},
	} {
		prev := time.Duration(0)
		for n := 2; n < 80; n++ {
			d := p.Backoff(n)
			assert.GreaterOrEqual(t, d, prev, "attempt %d of %+v", n, p)
			assert.LessOrEqual(t, d, p.MaxBackoff)
			prev = d
		}
		assert.Equal(t, p.MaxBackoff, p.Backoff(80))
	}
	assert.Equal(t, retry.DefaultInitialBackoff, retry.Policy{}.Backoff(2))
	assert.Equal(t, retry.DefaultMaxBackoff, retry.Policy{}.Backoff(100))
}

func TestRetryableMarks(t *testing.T) {
	assert.Nil(t, retry.Retryable(nil, time.Second))
	assert.True(t, retry.IsRetryable(fmt.Errorf("x: %w", retry.Retryable(io.EOF, 0))))
	assert.ErrorIs(t, retry.Retryable(io.EOF, 0), io.EOF)
	assert.False(t, retry.IsRetryable(io.EOF))
	assert.True(t, retry.Transient(fmt.Errorf("x: %w", io.ErrUnexpectedEOF)))
	assert.True(t, retry.Transient(&net.OpError{Op: "dial", Err: errors.New("refused")}))
	assert.False(t, retry.Transient(errors.New("no key")))
	// An http.Client's *url.Error is a net.Error whatever it wraps: a
	// cause that is the request's or the configuration's is not transient;
	// any other is (an HTTP/2 stream reset, say).
	assert.False(t, retry.Transient(&url.Error{Op: "Post", URL: "htp://x", Err: errors.New(`unsupported protocol scheme "htp"`)}))
	assert.True(t, retry.Transient(fmt.Errorf("x: %w", &url.Error{Op: "Post", URL: "http://x", Err: &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}})))
	assert.True(t, retry.Transient(&url.Error{Op: "Post", URL: "http://x", Err: io.ErrUnexpectedEOF}))
	assert.True(t, retry.Transient(&url.Error{Op: "Post", URL: "http://x", Err: context.DeadlineExceeded}), "a client timeout")
	assert.True(t, retry.Transient(&url.Error{Op: "Post", URL: "http://x", Err: errors.New("http2: server sent GOAWAY and closed the connection")}))
	assert.False(t, retry.Transient(&url.Error{Op: "Post", URL: "https://x", Err: &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}}))
	assert.False(t, retry.Transient(&url.Error{Op: "Post", URL: "https://x", Err: tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}}))
	assert.False(t, retry.Transient(&url.Error{Op: "Post", URL: "http:///v1", Err: errors.New("http: no Host in request URL")}))
}
