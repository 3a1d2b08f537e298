package supervisor

import (
	"errors"
	"sync"

	"github.com/asynkron/protoactor-go/actor"
)

// errRetired: the activation a caller holds has retired (passivated, killed
// or stopped); the caller must ensure a new one and send again.
var errRetired = errors.New("supervisor: activation retired")

// activation is one live (or starting) conversation actor.
type activation struct {
	id  string
	gen uint64

	ready chan struct{} // closed once pid or err is set
	pid   *actor.PID
	err   error

	mu      sync.Mutex // guards sent and retired; held across a send
	sent    uint64     // commands sent to this activation
	retired bool
}

// registry maps conversation ids to their single activation. It is shared
// by the runtime's callers and the supervisor actor; it never spawns by
// itself: Ensure's caller passes the spawn function.
type registry struct {
	mu    sync.Mutex
	byID  map[string]*activation
	byPID map[string]*activation
	gen   uint64
}

func newRegistry() *registry {
	return &registry{byID: map[string]*activation{}, byPID: map[string]*activation{}}
}

// ensure returns the activation of id, creating it with spawn if there is
// none. Concurrent callers for one id get the same activation: exactly one
// of them spawns, the others wait for it.
func (r *registry) ensure(id string, spawn func(a *activation) (*actor.PID, error)) (*activation, error) {
	r.mu.Lock()
	a, ok := r.byID[id]
	if !ok {
		r.gen++
		a = &activation{id: id, gen: r.gen, ready: make(chan struct{})}
		r.byID[id] = a
	}
	r.mu.Unlock()
	if ok {
		<-a.ready
		return a, a.err
	}
	pid, err := spawn(a)
	r.mu.Lock()
	if err != nil {
		a.err = err
		a.retired = true
		if r.byID[id] == a {
			delete(r.byID, id)
		}
	} else {
		a.pid = pid
		r.byPID[pid.String()] = a
	}
	r.mu.Unlock()
	close(a.ready)
	return a, err
}

// lookup returns the live activation of id, if any, without creating one.
func (r *registry) lookup(id string) *activation {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byID[id]
}

// send delivers msg to the activation unless it has retired. The send count
// and the retired flag change under one lock, so an activation never retires
// while a message to it is unaccounted for.
func (r *registry) send(a *activation, deliver func(pid *actor.PID)) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.retired {
		return errRetired
	}
	a.sent++
	deliver(a.pid)
	return nil
}

// retire is the passivation handshake. Unless force, it succeeds only when
// the activation has processed every command sent to it. Once it returns
// true, no more commands reach the activation and ensure creates a new one.
func (r *registry) retire(a *activation, processed uint64, force bool) bool {
	a.mu.Lock()
	if !force && a.sent != processed {
		a.mu.Unlock()
		return false
	}
	a.retired = true
	a.mu.Unlock()
	r.mu.Lock()
	if r.byID[a.id] == a {
		delete(r.byID, a.id)
	}
	r.mu.Unlock()
	return true
}

// terminated forgets the activation of a stopped actor.
func (r *registry) terminated(pid *actor.PID) *activation {
	r.mu.Lock()
	a := r.byPID[pid.String()]
	delete(r.byPID, pid.String())
	r.mu.Unlock()
	if a != nil {
		r.retire(a, 0, true)
	}
	return a
}

// active counts live activations.
func (r *registry) active() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.byID)
}
