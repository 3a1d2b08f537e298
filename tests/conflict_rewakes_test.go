package tests

import "testing"

// TestConflictsInARowStopTheRewakes: a Store that refuses every answer's
// write with journal.ErrConflict (another writer that keeps winning, a
// damaged row) does not have the conversation revived and its model called
// for ever: the first activation and three re-wakes call the model (four
// calls), the next re-wake is not sent (one warning says so), and the
// conversation is left stopped. Its next command runs the turn once the
// Store takes the write. (The re-wakes were unbounded: the model was
// called again for every conflict.)
func TestConflictsInARowStopTheRewakes(t *testing.T) {
	store := &faultStore{Store: openStore(t, "memory"), err: errFenced, match: isAnswer, fail: 4}
	requireRewakesStop(t, store, "writes fenced off in a row")
}
