package agent_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/lazarusrt/lazarus/agent"
)

type named time.Duration

func (n named) Error() string             { return "busy" }
func (n named) RetryAfter() time.Duration { return time.Duration(n) }

// RetryAfter reads the wait of an error, or of one it wraps, that has a
// method RetryAfter() time.Duration returning more than 0; any other error
// (nil included) names none.
func TestRetryAfter(t *testing.T) {
	d, ok := agent.RetryAfter(fmt.Errorf("x: %w", named(time.Minute)))
	assert.True(t, ok)
	assert.Equal(t, time.Minute, d)
	for _, err := range []error{nil, errors.New("x"), agent.ErrRateLimited, named(0), named(-time.Second)} {
		d, ok := agent.RetryAfter(err)
		assert.False(t, ok, "%v", err)
		assert.Zero(t, d)
	}
}
