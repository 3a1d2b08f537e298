package snapshot_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/lazarusrt/lazarus/snapshot"
)

// Policy.Due of a nil working set (nothing to summarize) is false, for
// every policy, never a panic.
func TestBBDueOfANilWorkingSet(t *testing.T) {
	for _, p := range []snapshot.Policy{{}, {MaxEvents: 1, MaxTokens: 1, KeepRecent: -1}, snapshot.TokenBudget(1)} {
		assert.False(t, p.Due(nil), "%+v", p)
	}
}
