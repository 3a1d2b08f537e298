// Package memjournal is the in-memory adapter of journal.Store.
//
// It keeps everything in Go maps behind one mutex. It is not durable: data
// lives as long as the Store value. Close does not drop it: a closed Store
// refuses every call (journal.ErrClosed) but still holds its data until
// the value is no longer referenced, or until ReopenForTesting hands it to
// a new Store. It serves three purposes: tests of
// packages that need a Store (actors, snapshot, the runtime), ephemeral
// runtimes that need no persistence, and the oracle of the model tests in
// journal/journaltest, against which every other adapter is compared.
//
// It implements every method of journal.Store exactly as documented there,
// and passes the conformance suite in journal/journaltest.
//
// # Copies
//
// Records are deep-copied (proto.Clone) on the way in and on the way out, so
// a caller never shares memory with the Store: changing a record after a
// call, or a record a call returned, never changes what the Store holds.
// The one documented exception is Append, which sets Seq on the events of the
// caller's request once the append has succeeded.
//
// # Append
//
// The checks of one AppendRequest run in this order, and the first that fails
// decides the error: the request's shape (journal.ValidateAppend, ErrInvalid);
// the tombstone (ErrDeleted); the fence, unless the request is unfenced
// (ErrConflict); an ENDED row, unless the request is unfenced or states
// ENDED (ErrEnded, journal.CheckEnded); the owners of its tool call ids
// (ErrConflict); its resolutions (ErrStale). Nothing is written before every check passed. A
// request that passed is applied in this order: events, tool call upserts,
// resolutions (each also cancels its call's deadline), fsm_state and status,
// scheduled deadlines, cancelled deadlines. So a request may resolve a call it
// upserts, and a deadline it both schedules and cancels ends up cancelled.
//
// Any successful append creates the conversation's row if it has none:
// status ACTIVE (or the request's status), created at the time of the
// request's first event, or now when that event has no time or the request
// has no events.
//
// # Concurrency
//
// Every method is safe for concurrent use. Validation and copying run
// outside the lock; the lock is held only to check and apply.
package memjournal
