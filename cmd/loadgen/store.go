package main

import (
	"context"
	"fmt"
	"github.com/cockroachdb/pebble/v2"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// countingStore is the Store the runtime phase hands the Runtime: it
// passes every call through and measures the journal actor's group
// commits (Store.AppendBatch): how many, how many requests and events
// each carried, how long each took.
type countingStore struct {
	journal.Store
	commits, requests, events atomic.Uint64
	commitTime                histogram
}

// AppendBatch implements journal.EventLog, counting.
func (s *countingStore) AppendBatch(ctx context.Context, reqs []*messages.AppendRequest) []journal.AppendResult {
	t0 := time.Now()
	res := s.Store.AppendBatch(ctx, reqs)
	s.commitTime.Record(time.Since(t0))
	s.commits.Add(1)
	s.requests.Add(uint64(len(reqs)))
	n := 0
	for _, r := range reqs {
		n += len(r.GetEvents())
	}
	s.events.Add(uint64(n))
	return res
}

// commitStats is what the report says of the group commits.
type commitStats struct {
	Commits           uint64  `json:"commits"`
	RequestsPerCommit float64 `json:"requests_per_commit"`
	EventsPerCommit   float64 `json:"events_per_commit"`
	CommitTime        latency `json:"commit_time"`
}

func (s *countingStore) stats() commitStats {
	c := s.commits.Load()
	return commitStats{
		Commits:           c,
		RequestsPerCommit: div(float64(s.requests.Load()), float64(c)),
		EventsPerCommit:   div(float64(s.events.Load()), float64(c)),
		CommitTime:        s.commitTime.summary(),
	}
}

// ConcurrentBatches implements actors.ConcurrentBatches for the store it
// wraps (1 for a store that does not ask for more), so that counting does
// not change how the journal actor commits.
func (s *countingStore) ConcurrentBatches() int {
	if c, ok := s.Store.(actors.ConcurrentBatches); ok {
		return c.ConcurrentBatches()
	}
	return 1
}

// printEvents is a Pebble event listener (--pebble-events) that prints
// the events that can hold writes up (flushes, compactions, WAL files,
// write stalls) to w, each with the time since start.
func printEvents(w io.Writer, start time.Time) *pebble.EventListener {
	var mu sync.Mutex
	p := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(w, "%8.3fs  pebble: %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	return &pebble.EventListener{
		FlushBegin:      func(i pebble.FlushInfo) { p("%s", i) },
		FlushEnd:        func(i pebble.FlushInfo) { p("%s", i) },
		CompactionBegin: func(i pebble.CompactionInfo) { p("%s", i) },
		CompactionEnd:   func(i pebble.CompactionInfo) { p("%s", i) },
		WALCreated:      func(i pebble.WALCreateInfo) { p("%s", i) },
		WriteStallBegin: func(i pebble.WriteStallBeginInfo) { p("%s", i) },
		WriteStallEnd:   func() { p("write stall ends") },
		DiskSlow:        func(i pebble.DiskSlowInfo) { p("%s", i) },
		BackgroundError: func(err error) { p("background error: %v", err) },
	}
}
