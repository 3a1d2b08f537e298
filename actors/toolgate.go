package actors

import (
	"context"
	"strconv"
)

// ToolGate keeps the runs of each server tool call from overlapping: a run
// of one tool_call_id of a conversation waits, before the tool is called,
// until the previous run of that id has returned, even one of a killed or
// failed activation whose context was cancelled and which is still winding
// down (the recovery rule dispatches an open call again, under the same
// id, as soon as the next activation revives). Activations share the gate
// when they share the ToolGate (the supervisor passes one to all of them),
// so within one process a tool never runs twice at once for one id; runs
// in other processes are not seen. A run whose activation stops while it
// waits gives up without calling the tool. A tool that never returns after
// its context is cancelled therefore holds back its own call's later runs
// (and nothing else).
//
// The zero value is ready to use. It is safe for concurrent use, and holds
// memory only for tool calls with a run in flight.
type ToolGate struct {
	g ModelGate // keyed by toolKey
}

// toolKey is the gate's key of call id of conversation conv: the length of
// conv first, so that no two pairs share a key.
func toolKey(conv, id string) string {
	return strconv.Itoa(len(conv)) + ":" + conv + id
}

// enter waits until call id of conversation conv has no run in flight,
// then marks one in flight, and returns the function that ends it. It
// returns ctx's error if ctx ends first.
func (g *ToolGate) enter(ctx context.Context, conv, id string) (leave func(), err error) {
	return g.g.enter(ctx, toolKey(conv, id))
}

// WaitingForTesting returns how many runs of call id of conversation conv
// wait for the one in flight to return.
func (g *ToolGate) WaitingForTesting(conv, id string) int {
	return g.g.WaitingForTesting(toolKey(conv, id))
}

// InFlightForTesting returns how many tool calls have a run in flight: the
// entries the gate holds.
func (g *ToolGate) InFlightForTesting() int { return g.g.InFlightForTesting() }
