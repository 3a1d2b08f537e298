package actors_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/actors/actorstest"
)

var _ actors.Clock = (*actorstest.ManualClock)(nil)

func TestClockSystem(t *testing.T) {
	c := actors.SystemClock()
	require.WithinDuration(t, time.Now(), c.Now(), time.Minute)
	done := make(chan struct{})
	c.AfterFunc(0, func() { close(done) })
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("SystemClock.AfterFunc(0) did not run")
	}
	stop := c.AfterFunc(time.Hour, func() { t.Error("stopped callback ran") })
	require.True(t, stop())
	require.False(t, stop())
}
