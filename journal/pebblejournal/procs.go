package pebblejournal

import (
	"os"
	"runtime"
	"sync"
)

// Pebble's WAL syncs (fdatasync, one per group commit, back to back under
// load) and the writes of its flushes and compactions are system calls
// that block for a millisecond or more. A goroutine in a system call keeps
// its P until the scheduler's monitor takes the P back, and the monitor
// does so only for a call it sees on two of its checks in a row; once the
// process has had nothing to take back for a while the monitor checks
// every 10 ms, so a sync shorter than that keeps its P to the end. Under
// a steady load the WAL syncer alone then holds a P more than half of the
// time: on two cores, the actors, the subscribers and Pebble's own flushes
// share what is left, about one core, and each flush or collection
// becomes a backlog that takes acknowledgements tens or hundreds of
// milliseconds (BENCHMARKS.md, "Open loop"). An execution trace shows it as
// a P that is neither idle nor running Go code while hundreds of
// goroutines are runnable.
//
// So, when asked (Options.RaiseGOMAXPROCS) and unless GOMAXPROCS was set
// in the environment, the stores of a process raise GOMAXPROCS by one
// while at least one of them is open: the P a blocked sync holds is then
// one the rest of the process did not count on. It is not the default: a
// library does not change a process-wide setting on its own; the
// commands that run a node ask for it.

// procs counts the open stores that raised GOMAXPROCS.
var procs struct {
	mu     sync.Mutex
	stores int
	before int // GOMAXPROCS when the first of them opened
	raised int // what they set it to
}

// raiseProcs raises GOMAXPROCS by one if no other open store did, and
// returns the function that takes it back when the last of them closes.
// It does nothing (and returns a no-op) when the GOMAXPROCS environment
// variable is set: the operator chose the value.
func raiseProcs() (release func()) {
	if os.Getenv("GOMAXPROCS") != "" {
		return func() {}
	}
	procs.mu.Lock()
	defer procs.mu.Unlock()
	if procs.stores == 0 {
		procs.before = runtime.GOMAXPROCS(0)
		procs.raised = procs.before + 1
		runtime.GOMAXPROCS(procs.raised)
	}
	procs.stores++
	var once sync.Once
	return func() { once.Do(lowerProcs) }
}

// lowerProcs is the release of one store. When the last one closes it
// gives back the value GOMAXPROCS had before (Go's automatic default when
// that is what it was), unless someone else changed GOMAXPROCS meanwhile:
// their value stands.
func lowerProcs() {
	procs.mu.Lock()
	defer procs.mu.Unlock()
	if procs.stores--; procs.stores > 0 {
		return
	}
	if runtime.GOMAXPROCS(0) != procs.raised {
		return
	}
	runtime.SetDefaultGOMAXPROCS()
	if runtime.GOMAXPROCS(0) != procs.before {
		runtime.GOMAXPROCS(procs.before)
	}
}
