// Package actorstest holds test helpers for code built on package actors:
// a ManualClock that only moves when a test advances it.
package actorstest

import (
	"container/heap"
	"slices"
	"sync"
	"time"
)

// ManualClock is a Clock (see actors.Clock) whose time only moves when
// Advance or Jump is called. It is safe for concurrent use.
//
// Callbacks scheduled with AfterFunc run synchronously inside Advance, on the
// goroutine that called Advance, in order of due time (then of scheduling).
// While a callback runs, Now returns its due time. A callback may call Now,
// AfterFunc and the stop functions, but must not call Advance.
type ManualClock struct {
	// advanceMu serialises Advance calls, so callbacks run one at a time and
	// in due order even when several goroutines advance the clock.
	advanceMu sync.Mutex

	mu     sync.Mutex
	now    time.Time
	seq    uint64
	timers manualTimers
}

// NewManualClock returns a ManualClock set to start.
func NewManualClock(start time.Time) *ManualClock {
	return &ManualClock{now: start}
}

// Now returns the clock's current time.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc schedules f to run when the clock reaches Now()+d. With d <= 0, f
// is due at once but, like every callback, runs only on the next Advance
// (Advance(0) runs it). stop removes f if it has not run yet and reports
// whether it did.
func (c *ManualClock) AfterFunc(d time.Duration, f func()) (stop func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	t := &manualTimer{due: c.now.Add(d), seq: c.seq, f: f}
	heap.Push(&c.timers, t)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		if t.index < 0 {
			return false
		}
		heap.Remove(&c.timers, t.index)
		return true
	}
}

// Advance moves the clock forward by d (d < 0 counts as 0). Every callback
// that is due by the new time runs before Advance returns, synchronously, in
// order of due time then of scheduling, with Now set to the callback's due
// time while it runs (never moving backwards: an overdue callback sees the
// current time). Callbacks scheduled by callbacks run too if they are due by
// the new time. When Advance returns, Now is the old time plus d.
func (c *ManualClock) Advance(d time.Duration) {
	c.advanceMu.Lock()
	defer c.advanceMu.Unlock()
	if d < 0 {
		d = 0
	}
	c.mu.Lock()
	target := c.now.Add(d)
	for len(c.timers) > 0 && !c.timers[0].due.After(target) {
		t := heap.Pop(&c.timers).(*manualTimer)
		if t.due.After(c.now) {
			c.now = t.due
		}
		c.mu.Unlock()
		t.f()
		c.mu.Lock()
	}
	c.now = target
	c.mu.Unlock()
}

// Jump moves Now by d (forward or back) without any elapsed time for the
// timers: each scheduled callback moves with it, still due as long after
// the new Now as it was after the old one, and none runs. It models a step
// of the wall clock (an NTP step, a virtual machine's migration) or a
// resume from suspend, during which the system's timers, counting elapsed
// time, did not run. It waits for a running Advance to return; a callback
// must not call it.
func (c *ManualClock) Jump(d time.Duration) {
	c.advanceMu.Lock()
	defer c.advanceMu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	for _, t := range c.timers {
		t.due = t.due.Add(d) // the same shift for all: the heap's order holds
	}
}

// Timers returns how many callbacks are scheduled and have neither run nor
// been stopped. Tests wait on it (with a bounded require.Eventually) to know
// that an actor has armed or disarmed its timer, instead of sleeping.
func (c *ManualClock) Timers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// Next returns the due time of the earliest scheduled callback, and false
// when none is scheduled. Tests wait on it to know which deadline an actor's
// timer is armed for.
func (c *ManualClock) Next() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.timers) == 0 {
		return time.Time{}, false
	}
	return c.timers[0].due, true
}

// Dues returns the due times of the scheduled callbacks, earliest first.
func (c *ManualClock) Dues() []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]time.Time, 0, len(c.timers))
	for _, t := range c.timers {
		out = append(out, t.due)
	}
	slices.SortFunc(out, func(a, b time.Time) int { return a.Compare(b) })
	return out
}

type manualTimer struct {
	due   time.Time
	seq   uint64
	f     func()
	index int // position in the heap; -1 once run or stopped
}

// manualTimers is a container/heap of timers ordered by (due, seq).
type manualTimers []*manualTimer

func (h manualTimers) Len() int { return len(h) }
func (h manualTimers) Less(i, j int) bool {
	if !h[i].due.Equal(h[j].due) {
		return h[i].due.Before(h[j].due)
	}
	return h[i].seq < h[j].seq
}
func (h manualTimers) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}
func (h *manualTimers) Push(x any) {
	t := x.(*manualTimer)
	t.index = len(*h)
	*h = append(*h, t)
}
func (h *manualTimers) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	t.index = -1
	*h = old[:len(old)-1]
	return t
}
