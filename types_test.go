package lazarus_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
)

// fixedClock is a Clock a user writes without importing package actors.
type fixedClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fixedClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fixedClock) AfterFunc(time.Duration, func()) func() bool { return func() bool { return true } }

var _ lazarus.Clock = (*fixedClock)(nil)

func TestRootTypesServeTheAPI(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	rt, err := lazarus.Open(lazarus.Options{Model: scripted.New(scripted.Options{}), Clock: &fixedClock{now: at}})
	require.NoError(t, err)
	defer rt.Close()

	var updates <-chan lazarus.Update
	updates, err = rt.Subscribe(ctx, "c", 0)
	require.NoError(t, err)
	_, err = rt.Send(ctx, "c", "hi", agent.Scope{UserID: "u"})
	require.NoError(t, err)
	u := <-updates
	require.Equal(t, at, u.Event.GetTime().AsTime(), "events are stamped by the Clock of Options")
	require.NotNil(t, lazarus.SystemClock().Now())
}
