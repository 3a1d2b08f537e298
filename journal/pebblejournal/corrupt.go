package pebblejournal

import (
	"errors"

	"github.com/cockroachdb/pebble/v2"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// Damage on disk.
//
// Pebble reports damaged files (a block whose checksum does not match, a
// WAL or MANIFEST it cannot parse) with its own errors; storageErr makes
// every one of them wrap journal.ErrCorrupt as well, keeping Pebble's text.
// A damaged block fails only the reads that touch it: the store stays
// open, and conversations whose data lies elsewhere keep working.
//
// Pebble's replay stops at the first record of a write-ahead log it cannot
// read and treats the rest as a torn write, so a lost or damaged older log
// leaves a hole in the logs it held. The reads of a log therefore check
// that its seqs are consecutive from where they must start (seq 1, the
// summary point, or the query's bound) and return journal.ErrCorrupt
// instead of a history with a hole (checkSeqs).

// corruptError is a Pebble error that also wraps journal.ErrCorrupt.
type corruptError struct{ err error }

func (e *corruptError) Error() string   { return e.err.Error() + " (" + journal.ErrCorrupt.Error() + ")" }
func (e *corruptError) Unwrap() []error { return []error{e.err, journal.ErrCorrupt} }

// storageErr returns err, wrapping journal.ErrCorrupt too if Pebble says it
// is corruption.
func storageErr(err error) error {
	if err == nil || errors.Is(err, journal.ErrCorrupt) || !pebble.IsCorruptionError(err) {
		return err
	}
	return &corruptError{err}
}

// checkSeqs returns an error wrapping journal.ErrCorrupt unless evs (in
// ascending order) are consecutive and, when first is not 0, start at
// first. what names the read in the error.
func checkSeqs(conv, what string, evs []*messages.Event, first uint64) error {
	if got, want, gap := journal.SeqGap(evs, first); gap {
		return journal.Corruptf("pebblejournal: %s of conversation %q: the log has a gap: seq %d where %d should be "+
			"(events were lost from the store, for example with a damaged or deleted write-ahead log; run lazarus check)",
			what, conv, got, want)
	}
	return nil
}
