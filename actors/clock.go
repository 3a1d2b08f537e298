package actors

import "time"

// Clock is the source of time of the actors. Production code uses
// SystemClock; tests use actorstest.ManualClock, so that nothing in a test
// waits on the wall clock.
//
// Decision logic takes the current time as an argument; only the wiring calls
// a Clock. A callback given to AfterFunc never touches actor state: it sends a
// message to the actor, so every state change goes through the mailbox.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// AfterFunc calls f once, on a goroutine of the Clock's choosing, after
	// at least d has passed (at once when d <= 0). stop cancels the call; it
	// returns true if it prevented f from running, false if f already ran or
	// was already stopped. f must not block.
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

// SystemClock returns the Clock of the operating system: time.Now and
// time.AfterFunc.
func SystemClock() Clock { return systemClock{} }

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}
