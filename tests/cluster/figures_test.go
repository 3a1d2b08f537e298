package cluster_test

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestClusterFigures measures what BENCHMARKS.md reports for the cluster:
// acknowledged sends per second through 1 and 3 members on the same
// PostgreSQL, and the latency of a send through the conversation's owner
// against one through another member (the remote hop). It runs only with
// LAZARUS_CLUSTER_FIGURES=1 (a minute of load).
func TestClusterFigures(t *testing.T) {
	if os.Getenv("LAZARUS_CLUSTER_FIGURES") == "" {
		t.Skip("set LAZARUS_CLUSTER_FIGURES=1 to measure")
	}
	for _, n := range []int{1, 3} {
		c := startCluster(t, n, "--model-delay", "0s")
		convs := convIDs(fmt.Sprintf("f%d-", n), 64)
		var sent atomic.Int64
		stop := time.Now().Add(10 * time.Second)
		var wg sync.WaitGroup
		for w := range 32 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; time.Now().Before(stop); i++ {
					nd := c.nodes[(w+i)%n]
					if _, err := nd.send(convs[(w*7+i)%len(convs)], "hello", fmt.Sprintf("f-%d-%d", w, i)); err == nil {
						sent.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		t.Logf("%d member(s): %.0f acknowledged sends/s (each a user_msg and an assistant_msg event)", n, float64(sent.Load())/10)
		if n == 3 {
			// Local against remote: the same member takes the HTTP call; the
			// conversation lives on it, or on another.
			entry := c.nodes[0]
			var local, remote []time.Duration
			for i := 0; len(local) < 200 || len(remote) < 200; i++ {
				conv := fmt.Sprintf("lat-%d", i)
				start := time.Now()
				_, err := entry.send(conv, "hello", "")
				require.NoError(t, err)
				if d := time.Since(start); entry.owner(conv) == entry.addr {
					local = append(local, d)
				} else {
					remote = append(remote, d)
				}
			}
			t.Logf("send through the owner: p50 %v p99 %v; through another member: p50 %v p99 %v",
				percentile(local, 0.5), percentile(local, 0.99), percentile(remote, 0.5), percentile(remote, 0.99))
		}
		for _, nd := range c.nodes {
			nd.kill()
		}
	}
}
