package actors

import (
	"log/slog"
	"runtime/debug"
)

// callback runs f, a callback a caller supplied in the options of an
// actor, logging and recovering its panic: user code must not fail the
// actor it runs on (a restart of the expiry actor would read the Store
// again and fire the same due deadline, panicking again; the journal
// actor would leave the rest of a committed batch unanswered; a
// conversation actor would stop in the middle of a step) nor, on a
// committer goroutine, the process.
func callback(log *slog.Logger, name string, f func()) {
	defer func() {
		if p := recover(); p != nil {
			log.Error("actors: "+name+" panicked", "panic", p, "stack", string(debug.Stack()))
		}
	}()
	f()
}
