package actorstest_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/actors/actorstest"
)

var t0 = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

func TestManualClockAdvanceRunsDueCallbacksInOrder(t *testing.T) {
	c := actorstest.NewManualClock(t0)
	var got []string
	var seen []time.Time
	record := func(name string) func() {
		return func() { got = append(got, name); seen = append(seen, c.Now()) }
	}
	c.AfterFunc(3*time.Second, record("c"))
	c.AfterFunc(time.Second, record("a"))
	c.AfterFunc(2*time.Second, record("b1"))
	c.AfterFunc(2*time.Second, record("b2"))
	require.Equal(t, 4, c.Timers())

	c.Advance(999 * time.Millisecond)
	require.Empty(t, got, "nothing is due before its time")
	require.Equal(t, t0.Add(999*time.Millisecond), c.Now())

	c.Advance(time.Millisecond + 1500*time.Millisecond)
	require.Equal(t, []string{"a", "b1", "b2"}, got)
	require.Equal(t, []time.Time{t0.Add(time.Second), t0.Add(2 * time.Second), t0.Add(2 * time.Second)}, seen)
	require.Equal(t, t0.Add(2500*time.Millisecond), c.Now())
	require.Equal(t, 1, c.Timers())
	next, ok := c.Next()
	require.True(t, ok)
	require.Equal(t, t0.Add(3*time.Second), next)
}

func TestManualClockStop(t *testing.T) {
	c := actorstest.NewManualClock(t0)
	ran := false
	stop := c.AfterFunc(time.Second, func() { ran = true })
	require.True(t, stop())
	require.False(t, stop(), "a second stop reports nothing was prevented")
	require.Equal(t, 0, c.Timers())
	_, ok := c.Next()
	require.False(t, ok)
	c.Advance(time.Hour)
	require.False(t, ran)

	stop = c.AfterFunc(time.Second, func() { ran = true })
	c.Advance(time.Second)
	require.True(t, ran)
	require.False(t, stop(), "stop after the callback ran")
}

func TestManualClockCallbacksMayScheduleMore(t *testing.T) {
	c := actorstest.NewManualClock(t0)
	var at []time.Time
	var tick func()
	tick = func() {
		at = append(at, c.Now())
		c.AfterFunc(time.Second, tick)
	}
	c.AfterFunc(time.Second, tick)
	c.Advance(3500 * time.Millisecond)
	require.Equal(t, []time.Time{t0.Add(time.Second), t0.Add(2 * time.Second), t0.Add(3 * time.Second)}, at)
	require.Equal(t, 1, c.Timers())
}

func TestManualClockNonPositiveDelayRunsOnNextAdvance(t *testing.T) {
	c := actorstest.NewManualClock(t0)
	ran := 0
	c.AfterFunc(0, func() { ran++ })
	c.AfterFunc(-time.Second, func() {
		ran++
		require.Equal(t, t0, c.Now(), "time never moves backwards")
	})
	require.Equal(t, 0, ran)
	c.Advance(0)
	require.Equal(t, 2, ran)
}

func TestManualClockConcurrentUse(t *testing.T) {
	c := actorstest.NewManualClock(t0)
	var mu sync.Mutex
	fired := 0
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				stop := c.AfterFunc(time.Millisecond, func() { mu.Lock(); fired++; mu.Unlock() })
				_ = c.Now()
				c.Advance(time.Millisecond)
				stop()
			}
		}()
	}
	wg.Wait()
	c.Advance(time.Second)
	require.Equal(t, 0, c.Timers())
	require.Equal(t, 800, fired, "every callback either ran or was stopped first; stop after Advance is a no-op")
}

// TestManualClockJumpMovesNowNotTheTimers: a jump moves Now and runs no
// callback; each one still waits the elapsed time it was armed for.
func TestManualClockJumpMovesNowNotTheTimers(t *testing.T) {
	c := actorstest.NewManualClock(t0)
	ran := false
	c.AfterFunc(time.Hour, func() { ran = true })
	c.Jump(2 * time.Hour)
	require.Equal(t, t0.Add(2*time.Hour), c.Now())
	require.False(t, ran)
	next, ok := c.Next()
	require.True(t, ok)
	require.Equal(t, t0.Add(3*time.Hour), next, "still an hour of elapsed time away")
	c.Advance(time.Hour - time.Nanosecond)
	require.False(t, ran)
	c.Advance(time.Nanosecond)
	require.True(t, ran)

	c.Jump(-time.Hour) // back: the same
	require.Equal(t, t0.Add(2*time.Hour), c.Now())
}
