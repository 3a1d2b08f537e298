package supervisor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/extensions"

	"github.com/lazarusrt/lazarus/journal"
)

// errRetired: the activation a caller holds has retired (passivated, killed
// or stopped); the caller must ensure a new one and send again.
var errRetired = errors.New("supervisor: activation retired")

// activation is one live (or starting, or stopping) conversation actor.
type activation struct {
	id  string
	gen uint64

	ready chan struct{} // closed once pid or err is set
	pid   *actor.PID
	err   error

	done chan struct{} // closed once the actor has terminated

	mu      sync.Mutex // guards sent, retired, killed, cause, thenTold, deleting and endHeld; held across a send
	sent    uint64     // commands sent to this activation
	retired bool
	killed  bool  // Kill stopped the actor: the re-wakes it asked for are dropped
	cause   error // why the actor stopped itself, if it did (see stopped)
	// thenTold: Kill stopped the actor and calls its then once it has
	// terminated, instead of Config.Terminated.
	thenTold bool
	// deleting: a Delete holds the actor's end (see holdEnd); endHeld: the
	// actor terminated meanwhile, and Config.Terminated was not called.
	deleting, endHeld bool
}

// tellTerminated reports whether Config.Terminated is to be told of the
// actor's end now: not if Kill's then is told instead (thenTold), nor
// while a Delete holds it (the end is then held, see releaseEnd).
func (a *activation) tellTerminated() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.deleting {
		a.endHeld = true
		return false
	}
	return !a.thenTold
}

// holdEnd makes the actor's end, until releaseEnd, one that Delete decides
// to tell Config.Terminated of: a delete that succeeds ends the
// conversation's subscriptions itself, so nothing need void the deltas of
// its model call first.
func (a *activation) holdEnd() {
	a.mu.Lock()
	a.deleting = true
	a.mu.Unlock()
}

// releaseEnd ends holdEnd and reports whether the actor terminated while
// it held: Config.Terminated was then not told, and the caller tells it
// unless the delete succeeded. If not, the actor's end is told as any.
func (a *activation) releaseEnd() (held bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.deleting = false
	held, a.endHeld = a.endHeld, false
	return held && !a.thenTold
}

// stopped records why the activation's actor is stopping itself, before it
// retires.
func (a *activation) stopped(cause error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.cause = cause
}

// stopCause returns the cause recorded by stopped, if any.
func (a *activation) stopCause() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cause
}

// registry maps conversation ids to their single activation. It is shared
// by the runtime's callers and the supervisor actor; it never spawns by
// itself: ensure's caller passes the spawn function.
//
// An activation stays registered from its spawn until its actor has
// terminated, even once retired, so that a successor is spawned only after
// its predecessor is gone: two activations of one id never overlap in this
// process.
type registry struct {
	mu    sync.Mutex
	byID  map[string]*activation
	byPID map[string]*activation
	// gens hands out the activations' generations: the actor system's
	// (generationsOf) once the Supervisor runs on one.
	gens *atomic.Uint64
	// blocked maps the ids being deleted or killed to a channel closed
	// when the delete or kill ends; no activation of them is created
	// meanwhile (see block).
	blocked map[string]chan struct{}
	// gone holds the ids this process deleted most recently (at most
	// goneKept, the oldest forgotten first, in the order of goneRing): no
	// activation of them is created, since it could only read the
	// tombstone and stop. An id forgotten here is still refused by the
	// Store; this only spares a wake that was already under way (a resume
	// scan's, a timer's) from reviving the conversation for a moment.
	gone     map[string]struct{}
	goneRing []string
	goneNext int
	// spawnFailed, if set, is told the id of an activation whose spawn
	// failed, once it is unregistered: no actor ran, so no Terminated
	// comes to send what the supervisor actor deferred behind it (an
	// activation retired while it was spawning, see stopUnowned).
	spawnFailed func(id string)
}

// generations is the extension of an actor system that hands out the
// generations of the activations spawned on it, which name their actors
// (conv-<gen>). It is one counter for the system, not one per registry: a
// Supervisor stopped and another started on the same system (a Runtime
// closed and opened again on an application's system) would otherwise
// name their activations alike, and a message still on its way to an
// activation of the first (a timer's tick) would reach the second's
// activation of that name, as its own.
type generations struct{ n atomic.Uint64 }

var (
	generationsID = extensions.NextExtensionID()
	// generationsMu guards this package's slot in the systems' extensions.
	generationsMu sync.Mutex
)

// ExtensionID implements extensions.Extension.
func (*generations) ExtensionID() extensions.ExtensionID { return generationsID }

// generationsOf returns the counter of system's activations.
func generationsOf(system *actor.ActorSystem) *atomic.Uint64 {
	generationsMu.Lock()
	defer generationsMu.Unlock()
	if g, ok := system.Extensions.Get(generationsID).(*generations); ok {
		return &g.n
	}
	g := &generations{}
	system.Extensions.Register(g)
	return &g.n
}

// goneKept is how many deleted ids the registry remembers (see gone; the
// doc of Supervisor.Delete names the number).
const goneKept = 4096

// errGone: the conversation was deleted by this process (see registry.gone).
var errGone = fmt.Errorf("deleted by this runtime: %w", journal.ErrDeleted)

func newRegistry() *registry {
	return &registry{byID: map[string]*activation{}, byPID: map[string]*activation{}, gens: new(atomic.Uint64)}
}

// claim returns the live activation of id, or creates a new one that the
// caller must spawn (mine is true), or, when the registered activation is
// retired but not yet terminated, returns its done channel to wait on.
//
// It returns nothing at all (no activation, no channel) for an id this
// process deleted (see gone): the caller answers errGone.
func (r *registry) claim(id string) (a *activation, mine bool, wait <-chan struct{}) {
	a, mine, wait, _ = r.claimOwned(id, nil)
	return a, mine, wait
}

// claimOwned is claim, except that with owns set it creates no activation
// of an id owns rejects: it returns nothing and moved true. owns is asked
// under the registry's lock, which stopUnowned holds while it asks it
// too: an activation it creates is one a later stopUnowned sees.
func (r *registry) claimOwned(id string, owns func(string) bool) (a *activation, mine bool, wait <-chan struct{}, moved bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ch, ok := r.blocked[id]; ok {
		return nil, false, ch, false
	}
	if _, ok := r.gone[id]; ok {
		return nil, false, nil, false
	}
	if old, ok := r.byID[id]; ok {
		old.mu.Lock()
		retired := old.retired
		old.mu.Unlock()
		if !retired {
			return old, false, nil, false
		}
		return nil, false, old.done, false
	}
	if owns != nil && !owns(id) {
		return nil, false, nil, true
	}
	a = &activation{id: id, gen: r.gens.Add(1), ready: make(chan struct{}), done: make(chan struct{})}
	r.byID[id] = a
	return a, true, nil, false
}

// ensure returns the live activation of id, spawning it if there is none.
// Concurrent callers for one id get the same activation: exactly one of them
// spawns, the others wait for it. It blocks while a retired predecessor is
// still stopping, so it must not be called from the supervisor actor (which
// uses claim).
// It stops waiting, with ctx.Err(), when ctx ends, its own spawn included:
// the caller that claims the activation runs spawn on a goroutine of its
// own, which records the outcome whether or not anyone still waits (an
// activation spawned for nobody is live, and passivates when idle).
func (r *registry) ensure(ctx context.Context, id string, spawn func(a *activation) (*actor.PID, error)) (*activation, error) {
	return r.ensureOwned(ctx, id, nil, spawn)
}

// ensureOwned is ensure, except that with owns set it spawns no activation
// of an id owns rejects (see claimOwned): it returns ErrMoved.
func (r *registry) ensureOwned(ctx context.Context, id string, owns func(string) bool, spawn func(a *activation) (*actor.PID, error)) (*activation, error) {
	for {
		a, mine, wait, moved := r.claimOwned(id, owns)
		switch {
		case moved:
			return nil, ErrMoved
		case a == nil && wait == nil:
			return nil, errGone
		}
		if wait != nil {
			select {
			case <-wait:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			continue
		}
		if mine {
			// Not abandoned when ctx ends: spawn is under way (see
			// Supervisor.spawnFromOutside), and its outcome must be
			// recorded for the activation's next caller.
			go r.spawned(a, spawn)
		}
		select {
		case <-a.ready:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return a, a.err
	}
}

// spawned runs spawn for a new activation and records the outcome.
func (r *registry) spawned(a *activation, spawn func(a *activation) (*actor.PID, error)) {
	pid, err := spawn(a)
	r.mu.Lock()
	var failed func(string)
	if err != nil {
		a.err = err
		a.mu.Lock() // retired is read under a.mu alone (isLive, active)
		a.retired = true
		a.mu.Unlock()
		if r.byID[a.id] == a {
			delete(r.byID, a.id)
		}
		close(a.done)
		failed = r.spawnFailed
	} else if a.pid == nil { // not registered by the spawner itself (see register)
		a.pid = pid
		r.byPID[pid.String()] = a
	}
	r.mu.Unlock()
	close(a.ready)
	if failed != nil {
		failed(a.id)
	}
}

// register records the actor of a new activation. The supervisor actor
// calls it as it spawns the actor, inside the same Receive, so before it
// can handle that actor's Terminated: an actor that stops at once (its
// revival failed) is still found by terminated, and its successor is not
// kept waiting forever.
func (r *registry) register(a *activation, pid *actor.PID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	a.pid = pid
	r.byPID[pid.String()] = a
}

// lookup returns the registered activation of id, if any, without creating
// one. It may be retired.
func (r *registry) lookup(id string) *activation {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byID[id]
}

// lookupPID returns the registered activation of the actor pid, if any.
func (r *registry) lookupPID(pid *actor.PID) *activation {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byPID[pid.String()]
}

// isLive reports whether id has an activation that is not retired.
func (r *registry) isLive(id string) bool {
	a := r.lookup(id)
	if a == nil {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return !a.retired
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
// true, no more commands reach the activation; ensure spawns a successor
// once the actor has terminated.
func (r *registry) retire(a *activation, processed uint64, force bool) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !force && a.sent != processed {
		return false
	}
	a.retired = true
	return true
}

// kill retires the activation and, under the same lock, delivers the last
// message it will ever get (the kill order), so every command sent before it
// is still processed. It reports whether the activation was live.
func (r *registry) kill(a *activation, deliver func(pid *actor.PID)) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.retired {
		return false
	}
	a.retired, a.killed = true, true
	deliver(a.pid)
	return true
}

// wasKilled reports whether Kill stopped the actor.
func (a *activation) wasKilled() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.killed
}

// terminated forgets the activation of a stopped actor and wakes everyone
// waiting to spawn its successor.
func (r *registry) terminated(pid *actor.PID) *activation {
	r.mu.Lock()
	a := r.byPID[pid.String()]
	if a != nil {
		delete(r.byPID, pid.String())
		if r.byID[a.id] == a {
			delete(r.byID, a.id)
		}
	}
	r.mu.Unlock()
	if a != nil {
		a.mu.Lock()
		a.retired = true
		a.mu.Unlock()
		close(a.done)
	}
	return a
}

// stopUnowned retires every registered activation whose id owns rejects
// and that is not retired yet, under the registry's lock (so that an
// activation claimOwned creates after it is one of an id owns accepted
// then), and delivers the kill order to each, under its lock as kill
// does: the commands sent before it are still processed. An activation
// still being spawned gets its order once it is ready, from a goroutine
// that later runs. It returns how many it retired.
func (r *registry) stopUnowned(owns func(string) bool, deliver func(pid *actor.PID), later func(func())) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for id, a := range r.byID {
		if owns(id) {
			continue
		}
		a.mu.Lock()
		if a.retired {
			a.mu.Unlock()
			continue
		}
		a.retired = true
		n++
		// a.pid is set under r.mu (register, spawned), before ready closes.
		if pid := a.pid; pid != nil {
			deliver(pid)
		} else {
			later(func() {
				<-a.ready
				r.mu.Lock()
				pid := a.pid
				r.mu.Unlock()
				if pid != nil { // nil: its spawn failed, it never ran
					deliver(pid)
				}
			})
		}
		a.mu.Unlock()
	}
	return n
}

// active counts live (not retired) activations.
func (r *registry) active() int {
	r.mu.Lock()
	all := make([]*activation, 0, len(r.byID))
	for _, a := range r.byID {
		all = append(all, a)
	}
	r.mu.Unlock()
	n := 0
	for _, a := range all {
		a.mu.Lock()
		if !a.retired {
			n++
		}
		a.mu.Unlock()
	}
	return n
}

// releaseAll closes the done channel of every activation still registered,
// after the supervisor has stopped, so no caller waits forever.
func (r *registry) releaseAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for pid, a := range r.byPID {
		delete(r.byPID, pid)
		delete(r.byID, a.id)
		a.mu.Lock()
		a.retired = true
		a.mu.Unlock()
		close(a.done)
	}
}
