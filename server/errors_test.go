package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/journal"
)

// TestClassifyOrder: an error that wraps several sentinels gets the status
// of the one that says most: an answer to a call that is not pending wraps
// ErrStale and ErrInvalid (lazarus.Runtime.Resolve) and is a 409 stale; a
// fork into an existing id is a 409 conflict; a write of unknown outcome
// is a 504 unknown_outcome whatever context error it wraps.
func TestClassifyOrder(t *testing.T) {
	cases := []struct {
		err    error
		status int
		code   string
	}{
		{fmt.Errorf("resolve: %w (%w)", journal.ErrStale, journal.ErrInvalid), http.StatusConflict, CodeStale},
		{journal.ErrStale, http.StatusConflict, CodeStale},
		{journal.Invalidf("bad"), http.StatusBadRequest, CodeInvalid},
		{fmt.Errorf("fork: %w", journal.ErrExists), http.StatusConflict, CodeConflict},
		{fmt.Errorf("send: %w", journal.ErrDeleted), http.StatusGone, CodeDeleted},
		// A write cut after it was handed over (a Fork cut after COMMIT:
		// ErrUnknownOutcome with context.Canceled) may have landed: never
		// the 503 that says nothing was written.
		{fmt.Errorf("fork: %w: %w", lazarus.ErrUnknownOutcome, context.Canceled), http.StatusGatewayTimeout, CodeUnknownOutcome},
		{fmt.Errorf("put: %w: %w", journal.ErrUnknownOutcome, context.Canceled), http.StatusGatewayTimeout, CodeUnknownOutcome},
		{fmt.Errorf("send: %w: %w", lazarus.ErrUnknownOutcome, context.DeadlineExceeded), http.StatusGatewayTimeout, CodeUnknownOutcome},
		{fmt.Errorf("send: %w: closed: %w", lazarus.ErrUnknownOutcome, lazarus.ErrClosed), http.StatusGatewayTimeout, CodeUnknownOutcome},
		{fmt.Errorf("send: %w", context.Canceled), http.StatusServiceUnavailable, CodeUnavailable},
		{fmt.Errorf("send: %w: %w", lazarus.ErrNoOwner, context.DeadlineExceeded), http.StatusGatewayTimeout, CodeTimeout},
		{fmt.Errorf("send: %w: %w", lazarus.ErrUnknownAgent, journal.ErrInvalid), http.StatusBadRequest, CodeInvalid},
		{fmt.Errorf("schedules: %w", errors.ErrUnsupported), http.StatusNotImplemented, CodeUnsupported},
		{fmt.Errorf("subscribe: %w: 64 open", lazarus.ErrTooManySubscriptions), http.StatusTooManyRequests, CodeTooManySubscriptions},
		{fmt.Errorf("something else"), http.StatusInternalServerError, CodeInternal},
	}
	for _, tc := range cases {
		status, code := classify(tc.err)
		require.Equal(t, tc.status, status, "%v", tc.err)
		require.Equal(t, tc.code, code, "%v", tc.err)
	}
}

// TestCursorsNext: a page's next cursor is the plain position after one of
// the caller's rows, and sealed after another's row, or when the position
// itself starts like a sealed cursor (an id "~..."), which a plain cursor
// could not be told from; every cursor opens back to its position, and a
// forged sealed one is a bad request.
func TestCursorsNext(t *testing.T) {
	c := newCursors()
	require.Equal(t, "c-1", c.next("c-1", true))
	for _, tc := range []struct {
		pos string
		own bool
	}{{"c-1", false}, {"~mine", true}, {"~theirs", false}} {
		cur := c.next(tc.pos, tc.own)
		require.True(t, strings.HasPrefix(cur, sealedPrefix), cur)
		require.NotContains(t, cur, tc.pos)
		pos, err := c.open(cur)
		require.NoError(t, err)
		require.Equal(t, tc.pos, pos)
	}
	pos, err := c.open("c-1")
	require.NoError(t, err)
	require.Equal(t, "c-1", pos)
	_, err = c.open("~forged")
	status, code := classify(err)
	require.Equal(t, http.StatusBadRequest, status)
	require.Equal(t, CodeInvalid, code)
	_, err = newCursors().open(c.next("c-1", false))
	require.Error(t, err, "another server's cursor")
}

// TestErrorAnswersRetryAfter: a 503 unavailable carries Retry-After: 1 and
// a 429 too_many_subscriptions Retry-After: 5, as the package documents; a
// 503 closed and the other errors carry none.
func TestErrorAnswersRetryAfter(t *testing.T) {
	s := &Server{log: slog.New(slog.DiscardHandler)}
	for _, c := range []struct {
		err    error
		status int
		want   string
	}{
		{fmt.Errorf("append: %w", journal.ErrUnavailable), http.StatusServiceUnavailable, "1"},
		{fmt.Errorf("append: %w", journal.ErrNoSpace), http.StatusServiceUnavailable, "1"},
		{fmt.Errorf("subscribe: %w", lazarus.ErrTooManySubscriptions), http.StatusTooManyRequests, "5"},
		{fmt.Errorf("send: %w", lazarus.ErrClosed), http.StatusServiceUnavailable, ""},
		{journal.ErrNotFound, http.StatusNotFound, ""},
		{errors.New("boom"), http.StatusInternalServerError, ""},
	} {
		rec := httptest.NewRecorder()
		s.writeError(rec, httptest.NewRequest("GET", "/v1/conversations", nil), c.err)
		require.Equal(t, c.status, rec.Code, "%v", c.err)
		require.Equal(t, c.want, rec.Header().Get("Retry-After"), "%v", c.err)
		_, set := rec.Header()["Retry-After"]
		require.Equal(t, c.want != "", set, "%v", c.err)
	}
}
