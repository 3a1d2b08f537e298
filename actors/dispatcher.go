package actors

import (
	"sync"

	"github.com/asynkron/protoactor-go/actor"
)

// DefaultMailboxWorkers is how many goroutines a supervisor's
// WorkerDispatcher runs the conversation actors' mailboxes on.
const DefaultMailboxWorkers = 16

// mailboxThroughput is how many messages a mailbox handles before it yields
// its goroutine: protoactor's default.
const mailboxThroughput = 300

// workerQueue bounds the mailboxes waiting for a worker; beyond it Schedule
// starts a goroutine, as protoactor's default dispatcher always does.
const workerQueue = 8192

// WorkerDispatcher is a protoactor Dispatcher that runs mailboxes on a fixed
// set of long-lived goroutines instead of starting a goroutine each time a
// mailbox gets work. With thousands of conversation actors that each wake
// several times per turn, that saves a goroutine's creation (and its stack's
// growth) per wake, and keeps fewer goroutines runnable at once: on two
// cores the runtime's load generator ran 3-9% more events per second
// (BENCHMARKS.md).
//
// Schedule never blocks: when every worker is busy and the queue is full,
// or once Close was called, it starts a goroutine for the mailbox. A
// mailbox whose actor blocks holds a worker for as long as it blocks; the
// conversation actor never blocks in Receive.
type WorkerDispatcher struct {
	queue chan func()
	wg    sync.WaitGroup

	mu     sync.RWMutex
	closed bool // guarded by mu; queue is closed with it
}

// NewWorkerDispatcher starts a WorkerDispatcher with workers goroutines
// (DefaultMailboxWorkers if workers <= 0). Close stops them.
func NewWorkerDispatcher(workers int) *WorkerDispatcher {
	return newWorkerDispatcher(workers, workerQueue)
}

func newWorkerDispatcher(workers, queue int) *WorkerDispatcher {
	if workers <= 0 {
		workers = DefaultMailboxWorkers
	}
	d := &WorkerDispatcher{queue: make(chan func(), queue)}
	d.wg.Add(workers)
	for range workers {
		go func() {
			defer d.wg.Done()
			for fn := range d.queue {
				fn()
			}
		}()
	}
	return d
}

// Schedule implements actor.Dispatcher: fn runs on a worker, or on a new
// goroutine if none can take it now.
func (d *WorkerDispatcher) Schedule(fn func()) {
	d.mu.RLock()
	if !d.closed {
		select {
		case d.queue <- fn:
			d.mu.RUnlock()
			return
		default:
		}
	}
	d.mu.RUnlock()
	go fn()
}

// Throughput implements actor.Dispatcher: protoactor's default of 300
// messages per turn of a mailbox.
func (d *WorkerDispatcher) Throughput() int { return mailboxThroughput }

// Close lets the workers run what is queued and waits for them to exit.
// Mailboxes scheduled afterwards run on goroutines of their own. Close is
// idempotent.
func (d *WorkerDispatcher) Close() {
	d.mu.Lock()
	if !d.closed {
		d.closed = true
		close(d.queue)
	}
	d.mu.Unlock()
	d.wg.Wait()
}

var _ actor.Dispatcher = (*WorkerDispatcher)(nil)
