package supervisor

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func pidSpawner(count *atomic.Int64) func(a *activation) (*actor.PID, error) {
	return func(a *activation) (*actor.PID, error) {
		count.Add(1)
		return actor.NewPID("local", fmt.Sprintf("conv-%d", a.gen)), nil
	}
}

func TestEnsureSpawnsOnceUnderConcurrentCallers(t *testing.T) {
	r := newRegistry()
	var spawns atomic.Int64
	var wg sync.WaitGroup
	got := make([]*activation, 64)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a, err := r.ensure(t.Context(), "c", pidSpawner(&spawns))
			assert.NoError(t, err) // not require: this is not the test's goroutine
			got[i] = a
		}()
	}
	wg.Wait()
	require.Equal(t, int64(1), spawns.Load())
	for _, a := range got {
		require.Same(t, got[0], a)
	}
	require.Equal(t, 1, r.active())
}

func TestRetireRefusesWhileCommandsAreUnprocessed(t *testing.T) {
	r := newRegistry()
	var spawns atomic.Int64
	a, err := r.ensure(t.Context(), "c", pidSpawner(&spawns))
	require.NoError(t, err)
	delivered := 0
	require.NoError(t, r.send(a, func(*actor.PID) { delivered++ }))
	require.NoError(t, r.send(a, func(*actor.PID) { delivered++ }))
	require.Equal(t, 2, delivered)

	require.False(t, r.retire(a, 1, false), "one command is still on its way")
	require.True(t, r.isLive("c"))
	require.True(t, r.retire(a, 2, false))
	require.False(t, r.isLive("c"))
	require.ErrorIs(t, r.send(a, func(*actor.PID) { delivered++ }), errRetired)
	require.Equal(t, 2, delivered, "nothing reaches a retired activation")
}

func TestSuccessorWaitsForPredecessorToTerminate(t *testing.T) {
	r := newRegistry()
	var spawns atomic.Int64
	first, err := r.ensure(t.Context(), "c", pidSpawner(&spawns))
	require.NoError(t, err)
	require.True(t, r.kill(first, func(*actor.PID) {}))
	require.False(t, r.kill(first, func(*actor.PID) {}), "a retired activation is not killed twice")

	// ensure waits on what claim returns: the predecessor's done channel,
	// open until it has terminated.
	_, mine, wait := r.claim("c")
	require.False(t, mine, "no successor while the predecessor still runs")
	require.NotNil(t, wait)
	select {
	case <-wait:
		t.Fatal("done closed before the predecessor terminated")
	default:
	}
	require.Equal(t, int64(1), spawns.Load())

	r.terminated(first.pid)
	second, err := r.ensure(t.Context(), "c", pidSpawner(&spawns))
	require.NoError(t, err)
	require.NotSame(t, first, second)
	require.Greater(t, second.gen, first.gen)
	require.Equal(t, int64(2), spawns.Load())
}

func TestClaimNeverBlocks(t *testing.T) {
	r := newRegistry()
	var spawns atomic.Int64
	a, err := r.ensure(t.Context(), "c", pidSpawner(&spawns))
	require.NoError(t, err)
	r.retire(a, 0, true)
	got, mine, wait := r.claim("c")
	require.Nil(t, got)
	require.False(t, mine)
	require.NotNil(t, wait, "the supervisor actor is told to defer, not made to wait")
	r.terminated(a.pid)
	<-wait
	got, mine, wait = r.claim("c")
	require.NotNil(t, got)
	require.True(t, mine)
	require.Nil(t, wait)
}

func TestReleaseAllUnblocksWaiters(t *testing.T) {
	r := newRegistry()
	var spawns atomic.Int64
	a, err := r.ensure(t.Context(), "c", pidSpawner(&spawns))
	require.NoError(t, err)
	r.retire(a, 0, true)
	r.releaseAll()
	select {
	case <-a.done:
	default:
		t.Fatal("done not closed")
	}
	require.Equal(t, 0, r.active())
}

// TestFailedSpawnRacesNoReader: IsActive and Active read an activation's
// retired flag under its lock while a spawn of it fails; the failure must
// set the flag under the same lock (the race detector reported the two).
func TestFailedSpawnRacesNoReader(t *testing.T) {
	r := newRegistry()
	var wg sync.WaitGroup
	for range 20 {
		spawning := make(chan struct{})
		fail := make(chan struct{})
		wg.Add(2)
		go func() {
			defer wg.Done()
			_, err := r.ensure(t.Context(), "c", func(*activation) (*actor.PID, error) {
				close(spawning)
				<-fail
				return nil, fmt.Errorf("no spawn")
			})
			assert.Error(t, err)
		}()
		<-spawning
		go func() {
			defer wg.Done()
			for range 200 {
				r.isLive("c")
				r.active()
			}
		}()
		close(fail)
		wg.Wait()
	}
	require.Equal(t, 0, r.active())
}
