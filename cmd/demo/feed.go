package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// errFeedEnded is returned by await when a feed ended without the item.
var errFeedEnded = errors.New("its source ended first")

// feed is an append-only list that goroutines can wait on: the events a
// subscription delivered, the tool runs seen, the lines a child process
// wrote. The demo synchronises on feeds, never on sleeps.
type feed[T any] struct {
	mu      sync.Mutex
	items   []T
	changed chan struct{} // closed and replaced on every change
	ended   bool
	err     error // why the feed ended or failed, if it did
}

func newFeed[T any]() *feed[T] { return &feed[T]{changed: make(chan struct{})} }

func (f *feed[T]) notify() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// add appends v and wakes every waiter.
func (f *feed[T]) add(v T) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.items = append(f.items, v)
	f.notify()
}

// fail makes every later await that finds no match return err, while items
// may still arrive: a failed turn dooms whatever waits on its conversation.
func (f *feed[T]) fail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err == nil {
		f.err = err
	}
	f.notify()
}

// end marks the feed complete: nothing more will be added.
func (f *feed[T]) end() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ended = true
	f.notify()
}

// all returns a copy of the items so far.
func (f *feed[T]) all() []T {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]T(nil), f.items...)
}

// await returns the first item at index from or later that matches, and
// its index. It fails when ctx is done (naming what), when the feed failed,
// or when it ended without a match.
func (f *feed[T]) await(ctx context.Context, from int, what string, match func(T) bool) (T, int, error) {
	for {
		f.mu.Lock()
		for i := from; i < len(f.items); i++ {
			if match(f.items[i]) {
				v := f.items[i]
				f.mu.Unlock()
				return v, i, nil
			}
		}
		from = max(from, len(f.items))
		changed, ended, err := f.changed, f.ended, f.err
		f.mu.Unlock()
		var zero T
		switch {
		case err != nil:
			return zero, 0, fmt.Errorf("waiting for %s: %w", what, err)
		case ended:
			return zero, 0, fmt.Errorf("waiting for %s: %w", what, errFeedEnded)
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return zero, 0, fmt.Errorf("waiting for %s: %w", what, context.Cause(ctx))
		}
	}
}
