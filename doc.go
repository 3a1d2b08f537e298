// Package lazarus makes LLM-agent conversations durable and resumable.
//
// Each conversation is owned by one actor. Its history is an append-only
// event log in a journal.Store: the embedded Pebble store in Options.Dir,
// PostgreSQL with Options.Postgres, or one of your own; with none of them,
// an in-memory store, which nothing survives (see Options.Store). The
// actor can be killed at any moment (idle passivation, a crash, a deploy) and
// the next user message or tool answer brings it back, rebuilt from the
// latest summary plus the events after it, knowing which tool calls it still
// owes the model. Deadlines on human answers are owned by an expiry actor
// outside the conversation, so they fire even while it is dead.
//
// A minimal program:
//
//	rt, err := lazarus.Open(lazarus.Options{Dir: "data", Model: myModel, Tools: myTools})
//	if err != nil { ... }
//	defer rt.Close()
//	seq, err := rt.Send(ctx, "conv-1", "refund order 42", scope)
//	updates, err := rt.Subscribe(ctx, "conv-1", 0)
//	...
//	err = rt.Resolve(ctx, toolCallID, `{"approved":true}`, scope)
//
// Every turn ends with an Update whose TurnEnd says how (answered,
// suspended on human calls, failed, cancelled); SendAndWait sends and
// returns that end.
//
// The promises: Send returns only once the message is durable; a human call
// is resolved exactly once (Resolve, Reject or expiry), every other attempt
// getting journal.ErrStale; a server tool runs at least once per call, always
// under the same tool call id, so tools make their side effects idempotent
// on it; the log is the truth, every cache and summary is derived from it.
// See ARCHITECTURE.md for how, and RELIABILITY.md for the tests behind each
// promise.
package lazarus
