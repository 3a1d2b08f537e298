package pgjournal

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/lazarusrt/lazarus/journal"
)

// DefaultReconnectBackoff is the first wait, once the server is found
// unreachable, before a call may try it again, when
// Options.ReconnectBackoff is zero.
const DefaultReconnectBackoff = 100 * time.Millisecond

// DefaultMaxReconnectBackoff bounds the wait between two reconnection
// attempts when Options.MaxReconnectBackoff is zero.
const DefaultMaxReconnectBackoff = 2 * time.Second

// Clock is the time source of the reconnection backoff. actors.Clock and
// actorstest.ManualClock satisfy it.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// breaker keeps the Store off a server it found unreachable. Closed (up),
// every call goes through. A call whose new connection fails opens it
// (down): from then on calls fail at once with ErrUnavailable, touching
// neither the pool nor the network, until the backoff has passed; then one
// call probes the server (a ping, which dials) while the others keep
// failing at once. A probe that reaches the server closes the breaker; one
// that fails doubles the backoff, up to its maximum. So an outage costs at
// most one dial per backoff, whatever the load.
type breaker struct {
	clock      Clock
	first, max time.Duration

	mu      sync.Mutex
	down    bool
	probing bool
	backoff time.Duration
	next    time.Time // down: when the next probe may start
}

// admit decides whether a call may go to the server. probe is true for the
// one call that is to test the server (it must then report with
// probeDone); err wraps ErrUnavailable when the call must fail at once.
func (b *breaker) admit() (probe bool, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.down {
		return false, nil
	}
	now := b.clock.Now()
	if b.probing {
		return false, fmt.Errorf("pgjournal: %w: server unreachable, a reconnection attempt is under way", journal.ErrUnavailable)
	}
	if now.Before(b.next) {
		return false, fmt.Errorf("pgjournal: %w: server unreachable, next reconnection attempt in %v", journal.ErrUnavailable, b.next.Sub(now))
	}
	b.probing = true
	return true, nil
}

// fail records that a call found the server unreachable. It returns true
// if that opened the breaker (the server was taken to be up until then).
func (b *breaker) fail() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.down {
		return false
	}
	b.down, b.backoff = true, b.first
	b.next = b.clock.Now().Add(b.backoff)
	return true
}

// probeDone ends the probe: reached closes the breaker; otherwise the
// backoff doubles (up to max) from now.
func (b *breaker) probeDone(reached bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.probing = false
	if reached {
		b.down, b.backoff = false, 0
		return
	}
	if b.backoff > b.max/2 {
		b.backoff = b.max // doubling it would pass max, or wrap to a negative wait
	} else {
		b.backoff *= 2
	}
	b.next = b.clock.Now().Add(b.backoff)
}

// gate lets a call through the breaker: it fails at once while the server
// is taken to be down, and runs the probe (a ping on the pool) when it is
// time for one.
func (s *Store) gate(ctx context.Context) error {
	probe, err := s.br.admit()
	if err != nil || !probe {
		return err
	}
	if err := s.pool.Ping(ctx); err != nil {
		s.br.probeDone(false)
		return fmt.Errorf("pgjournal: reconnect: %w: %w", journal.ErrUnavailable, err)
	}
	s.br.probeDone(true)
	return nil
}

// unavailable is called with every error that the Store reports as
// journal.ErrUnavailable. An error of a new connection (the dial refused or
// timed out, the server shutting down, starting up or out of connection
// slots) means the server cannot be reached now: the first opens the
// breaker and resets the pool (its idle connections are presumed dead, the
// ones in use are closed when released), so that the probe dials a fresh
// connection. An established connection that drops does not open it: the
// next call dials, and if that fails the breaker opens.
func (s *Store) unavailable(err error) {
	var ce *pgconn.ConnectError
	if !errors.As(err, &ce) {
		return
	}
	if s.br.fail() {
		s.pool.Reset()
	}
}
