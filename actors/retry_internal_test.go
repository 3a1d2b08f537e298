package actors

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/lazarusrt/lazarus/agent"

	"github.com/stretchr/testify/require"
)

// The text a turn_failed event stores is valid UTF-8 and bounded, clipped
// on a rune boundary, so the event can always be written.
func TestTurnErrorText(t *testing.T) {
	require.Equal(t, "short", turnErrorText(errors.New("short")))
	require.Equal(t, "bad \uFFFD byte", turnErrorText(errors.New("bad \xff byte")))
	long := turnErrorText(errors.New(strings.Repeat("é", MaxTurnErrorBytes)))
	require.LessOrEqual(t, len(long), MaxTurnErrorBytes)
	require.True(t, utf8.ValidString(long))
	require.True(t, strings.HasSuffix(long, "é..."), long[len(long)-10:])
}

// waitFor is a failure of a Model of the application's own that names a
// wait (agent.RetryAfter).
type waitFor time.Duration

func (w waitFor) Error() string             { return "busy" }
func (w waitFor) Unwrap() error             { return agent.ErrRateLimited }
func (w waitFor) RetryAfter() time.Duration { return time.Duration(w) }

// A retry waits the longer of the policy's delay and the wait the error
// names; a named wait past MaximumRetryAfter (default ten minutes) fails
// the turn at once; no named wait is the policy's delay.
func TestRetryHonoursTheNamedWait(t *testing.T) {
	p := RetryPolicy{}.WithDefaults()
	require.Equal(t, DefaultRetryMaximumRetryAfter, p.MaximumRetryAfter)
	for _, tc := range []struct {
		err     error
		attempt int
		want    time.Duration
		ok      bool
	}{
		{agent.ErrRateLimited, 1, time.Second, true},
		{waitFor(5 * time.Minute), 1, 5 * time.Minute, true},
		{fmt.Errorf("model: %w", waitFor(5*time.Minute)), 2, 5 * time.Minute, true},
		{waitFor(time.Millisecond), 2, 2 * time.Second, true},
		{waitFor(0), 1, time.Second, true},
		{waitFor(10 * time.Minute), 1, 10 * time.Minute, true},
		{waitFor(10*time.Minute + 1), 1, 0, false},
		{waitFor(time.Second), 3, 0, false},
	} {
		d, ok := p.retry(tc.err, tc.attempt)
		require.Equal(t, tc.ok, ok, "%v after %v", tc.err, tc.attempt)
		require.Equal(t, tc.want, d, "%#v", tc.err)
	}
	q := RetryPolicy{MaximumRetryAfter: time.Minute}.WithDefaults()
	_, ok := q.retry(waitFor(2*time.Minute), 1)
	require.False(t, ok)
}
