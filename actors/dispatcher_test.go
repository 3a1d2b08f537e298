package actors

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestWorkerDispatcherRunsEverything: every scheduled function runs once,
// from many schedulers at once, on a worker or (when the queue is full) on
// a goroutine of its own.
func TestWorkerDispatcherRunsEverything(t *testing.T) {
	d := newWorkerDispatcher(4, 64)
	defer d.Close()
	const schedulers, each = 8, 625
	var ran atomic.Int64
	var done sync.WaitGroup
	done.Add(schedulers * each)
	var wg sync.WaitGroup
	for range schedulers {
		wg.Go(func() {
			for range each {
				d.Schedule(func() { ran.Add(1); done.Done() })
			}
		})
	}
	wg.Wait()
	all := make(chan struct{})
	go func() { done.Wait(); close(all) }()
	select {
	case <-all:
	case <-time.After(10 * time.Second):
		t.Fatalf("%d of %d scheduled functions ran", ran.Load(), schedulers*each)
	}
	require.EqualValues(t, schedulers*each, ran.Load())
}

// TestWorkerDispatcherCloseRunsQueued: Close returns only after the work
// queued for the workers has run, and is idempotent.
func TestWorkerDispatcherCloseRunsQueued(t *testing.T) {
	d := newWorkerDispatcher(1, 16)
	release := make(chan struct{})
	holding := make(chan struct{})
	d.Schedule(func() { close(holding); <-release })
	<-holding
	var ran atomic.Int64
	for range 10 { // queued behind the blocked worker
		d.Schedule(func() { ran.Add(1) })
	}
	close(release)
	d.Close()
	require.EqualValues(t, 10, ran.Load())
	d.Close()
}

// TestWorkerDispatcherNeverBlocks: with every worker blocked and the queue
// full, Schedule still returns, and the work runs on a goroutine of its own;
// after Close, work still runs.
func TestWorkerDispatcherNeverBlocks(t *testing.T) {
	d := newWorkerDispatcher(1, 1)
	release := make(chan struct{})
	holding := make(chan struct{})
	d.Schedule(func() { close(holding); <-release }) // the only worker
	<-holding
	d.Schedule(func() {}) // fills the queue
	ran := make(chan struct{})
	d.Schedule(func() { close(ran) }) // neither a worker nor room: its own goroutine
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("work scheduled while the workers were busy did not run")
	}
	close(release)
	d.Close()

	after := make(chan struct{})
	d.Schedule(func() { close(after) })
	select {
	case <-after:
	case <-time.After(10 * time.Second):
		t.Fatal("work scheduled after Close did not run")
	}
}
