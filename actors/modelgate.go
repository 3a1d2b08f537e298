package actors

import (
	"context"
	"sync"
)

// ModelGate keeps the model calls of each conversation from overlapping, as
// agent.Model promises: Generate is never called twice at once for one
// conversation. A turn's model call waits, before it calls Generate, until
// the previous call of its conversation has returned (and, with audit on,
// written its audit row), even one that was cancelled (a newer message, a
// kill) and is still winding down: within an activation, and across
// activations when they share the gate (the supervisor passes one to all
// of them). A summary takes its turn at the
// gate too (its Summarizer may call a model, snapshot.LLM often the
// conversation's own): a turn's call waits while it runs, and it waits for
// a turn's call. A call whose turn is cancelled while it waits gives up
// without calling Generate. A Model that never
// returns after its context is cancelled therefore stalls its
// conversation's later turns (and no other conversation's).
//
// The zero value is ready to use. It is safe for concurrent use, and holds
// memory only for conversations with a model call in flight.
type ModelGate struct {
	mu    sync.Mutex
	calls map[string]*gateEntry
}

// gateEntry is the model call in flight of one conversation.
type gateEntry struct {
	done    chan struct{} // closed when the call returned
	waiting int           // calls waiting for it
}

// enter waits until conversation conv has no model call in flight, then
// marks one in flight, and returns the function that ends it. It returns
// ctx's error if ctx ends first.
func (g *ModelGate) enter(ctx context.Context, conv string) (leave func(), err error) {
	g.mu.Lock()
	for {
		if err := ctx.Err(); err != nil {
			// A turn cancelled before its call started: no call at all.
			g.mu.Unlock()
			return nil, err
		}
		leave, cur := g.take(conv)
		if leave != nil {
			g.mu.Unlock()
			return leave, nil
		}
		cur.waiting++
		g.mu.Unlock()
		select {
		case <-cur.done:
		case <-ctx.Done():
		}
		g.mu.Lock()
		cur.waiting--
	}
}

// tryEnter marks a model call of conversation conv in flight and returns
// the function that ends it, or reports false if a call is in flight: enter
// without the wait, for a caller that cannot block (the simulator of the
// tests).
func (g *ModelGate) tryEnter(conv string) (leave func(), ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	leave, _ = g.take(conv)
	return leave, leave != nil
}

// take, with g.mu held, marks a call of conv in flight and returns the
// function that ends it; or, if one is in flight, returns that one's entry.
func (g *ModelGate) take(conv string) (leave func(), cur *gateEntry) {
	if g.calls == nil {
		g.calls = map[string]*gateEntry{}
	}
	if cur, busy := g.calls[conv]; busy {
		return nil, cur
	}
	e := &gateEntry{done: make(chan struct{})}
	g.calls[conv] = e
	return func() {
		g.mu.Lock()
		delete(g.calls, conv)
		g.mu.Unlock()
		close(e.done)
	}, nil
}

// WaitingForTesting returns how many model calls of conversation conv wait
// for the one in flight to return.
func (g *ModelGate) WaitingForTesting(conv string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if e := g.calls[conv]; e != nil {
		return e.waiting
	}
	return 0
}

// InFlightForTesting returns how many conversations have a model call in
// flight: the entries the gate holds.
func (g *ModelGate) InFlightForTesting() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.calls)
}
