package actors

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/messages"
)

// clockTimeoutCtx is the context of a server tool's run under its bound:
// it ends with context.DeadlineExceeded when a Clock's timer fires, as a
// context.WithTimeout would on the wall clock, or with its parent's error
// when the parent ends first. It reports no Deadline of its own: the
// Clock's time need not be the wall clock's.
type clockTimeoutCtx struct {
	parent context.Context
	done   chan struct{}
	mu     sync.Mutex
	err    error
}

func (c *clockTimeoutCtx) Deadline() (time.Time, bool) { return c.parent.Deadline() }
func (c *clockTimeoutCtx) Done() <-chan struct{}       { return c.done }
func (c *clockTimeoutCtx) Value(key any) any           { return c.parent.Value(key) }

func (c *clockTimeoutCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// end ends c with err, unless it has ended already.
func (c *clockTimeoutCtx) end(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err = err
		close(c.done)
	}
}

// withClockTimeout returns a child of parent that ends with
// context.DeadlineExceeded once d has passed on clock. release ends it
// (with context.Canceled, unless it has ended) and reports whether the
// bound passed first: the timer fired (its callback may still be on its
// way: the context is ended here then) before the parent ended.
func withClockTimeout(parent context.Context, clock Clock, d time.Duration) (ctx context.Context, release func() (timedOut bool)) {
	c := &clockTimeoutCtx{parent: parent, done: make(chan struct{})}
	stopParent := context.AfterFunc(parent, func() { c.end(parent.Err()) })
	stopTimer := clock.AfterFunc(d, func() { c.end(context.DeadlineExceeded) })
	return c, func() bool {
		if !stopTimer() {
			c.end(context.DeadlineExceeded)
		}
		stopParent()
		c.end(context.Canceled)
		return c.Err() == context.DeadlineExceeded
	}
}

// runTimeout returns the bound of a run of the server tool name: the
// tool's RunTimeout, else def; zero or negative means none.
func runTimeout(tools *agent.Registry, name string, def time.Duration) time.Duration {
	if t, ok := tools.Lookup(name); ok && t.RunTimeout != 0 {
		return t.RunTimeout
	}
	return def
}

// timedOutOutcome is the result of a run that returned an error once its
// bound had ended its context: a tool error of code agent.CodeTimeout the
// model sees, naming the bound, with what the tool returned.
func timedOutOutcome(name string, d time.Duration, out *messages.ToolOutcome) *messages.ToolOutcome {
	return agent.ErrorOutcome(agent.CodeTimeout, fmt.Sprintf("agent: tool %s: no result within the tool timeout, %v: %v (the tool returned: %s)",
		name, d, context.DeadlineExceeded, out.GetError().GetMessage()))
}
