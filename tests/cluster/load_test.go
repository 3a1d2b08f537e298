package cluster_test

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestLoadSendsToEveryConversationThroughEveryMember: in the shapes the
// tests use, every conversation of the load is sent to through every
// member within a few rounds of each worker, so taking one member down
// leaves no conversation without sends.
func TestLoadSendsToEveryConversationThroughEveryMember(t *testing.T) {
	for _, shape := range []struct{ workers, convs, nodes int }{{4, 12, 3}, {6, 24, 3}} {
		through := make([]map[int]bool, shape.convs)
		for c := range through {
			through[c] = map[int]bool{}
		}
		for w := range shape.workers {
			for i := range 3 * shape.convs {
				c, n := pick(w, i, shape.workers, shape.convs, shape.nodes)
				through[c][n] = true
			}
		}
		for c, nodes := range through {
			require.Len(t, nodes, shape.nodes, "%d workers, %d conversations, %d members: conversation %d is sent to through members %v only",
				shape.workers, shape.convs, shape.nodes, c, nodes)
		}
	}
}
