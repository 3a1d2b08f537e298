package lazarus

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/internal/leakcheck"
)

// A call forwarded to the owner and in flight when its own Runtime is
// closed returns once Close has stopped the Runtime, as a local call in
// flight does (the contract of the entry calls), with an error wrapping
// ErrClosed and, the owner having had it, ErrUnknownOutcome. It waited
// for the owner's answer, then for ClusterOptions.RequestTimeout and the
// retries that follow, up to its context's end or Options.CallTimeout.
func TestForwardedCallInFlightAtCloseEndsWithErrClosed(t *testing.T) {
	p, hold, release, bound := newHeldPair(t)
	scope := agent.Scope{UserID: "u"}
	hold.armed.Store(true)
	type result struct {
		name string
		err  error
	}
	done := make(chan result, 2)
	go func() {
		_, err := p.caller.Send(context.Background(), p.conv, "held", scope)
		done <- result{"send", err}
	}()
	select {
	case <-hold.held:
	case <-bound.Done():
		t.Fatal("the owner never wrote the send")
	}
	go func() {
		done <- result{"rewind", p.caller.Rewind(context.Background(), p.conv, 1, RewindOptions{}, scope)}
	}()
	closed := make(chan error, 1)
	go func() { closed <- p.caller.Close() }()
	for range 2 {
		select {
		case res := <-done:
			require.ErrorIs(t, res.err, ErrClosed, "%s", res.name)
			if res.name == "send" {
				require.ErrorIs(t, res.err, ErrUnknownOutcome, "the owner had the send: %v", res.err)
			}
		case <-bound.Done():
			t.Fatal("a forwarded call outlived the Close of its Runtime")
		}
	}
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-bound.Done():
		t.Fatal("Close did not return")
	}
	release()
}

// A member that forwards calls and follows a subscription on another
// member's gateway, closed with a forwarded send in flight (held on the
// owner) and the subscription open, leaves no goroutine once Close
// returned and the owner closed: the follower, the gateway's stream and
// its request goroutines, and the send's wait on the owner all end. The
// send waited on after Close, up to ClusterOptions.RequestTimeout.
func TestForwardingMemberCloseLeavesNoGoroutine(t *testing.T) {
	if !leakcheck.Isolate(t) {
		return
	}
	base := leakcheck.Take()
	p, hold, release, bound := newHeldPair(t)
	scope := agent.Scope{UserID: "u"}
	updates, err := p.caller.Subscribe(context.Background(), p.conv, 0)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		p.owner.gw.mu.Lock()
		defer p.owner.gw.mu.Unlock()
		return len(p.owner.gw.serving) == 1
	}, 10*time.Second, time.Millisecond, "the owner serves the follower's stream")
	hold.armed.Store(true)
	sent := make(chan error, 1)
	go func() {
		_, err := p.caller.Send(context.Background(), p.conv, "held", scope)
		sent <- err
	}()
	select {
	case <-hold.held:
	case <-bound.Done():
		t.Fatal("the owner never wrote the send")
	}
	require.NoError(t, p.caller.Close())
	for range updates { // closed by Close
	}
	release()
	require.NoError(t, p.owner.Close())
	p.caller.system.Shutdown()
	p.owner.system.Shutdown()
	base.Check(t, 20*time.Second)
	require.ErrorIs(t, <-sent, ErrClosed)
}
