// Package actors holds the actors of a Lazarus node, built on protoactor-go:
// the conversation actor (one per active conversation), the journal actor
// (the single writer of the Store) and the expiry actor (the timers of
// pending human calls).
//
// # Conversation actor
//
// NewConversation: the state machine of one conversation (idle, streaming,
// executing_tools, awaiting_input). On start it waits until the journal
// actor answered every write of the conversation it still holds (a
// JournalBarrier: a killed predecessor's last write lands first), then
// revives itself from the Store (conversation row, LoadSince, the rows of
// the calls still open) on a goroutine it owns, buffering commands until
// then. Its mailbox runs on the supervisor's WorkerDispatcher. Once the first
// command has said who asked (the work runs with its scope), a
// reconciler (advance) starts the next step from what the log says, which is
// also how every recovery rule applies after a kill: a log ending in a user
// message owes a model turn; an open server call is dispatched again with
// the same tool_call_id; an open human call waits; a call resolved in the
// Store but missing from the log is recorded. Every write goes through the
// journal actor, one at a time, fenced with the expected last seq; a failed
// or fenced write stops the actor and the next command revives it (after a
// fenced write or one of unknown outcome the runtime wakes it at once,
// ConversationConfig.Fenced and Unknown; a write of unknown outcome that
// landed was never reported committed, and the runtime learns from the new
// activation's revival read that the log holds it,
// ConversationConfig.Revived). Model
// calls and tool runs run on goroutines the actor owns and report back by
// message, so the actor never blocks and can be killed mid-call; a model
// call waits for the conversation's previous one to return (ModelGate),
// even a cancelled one of a killed activation, and so does a summary, whose
// Summarizer may call a model; a server tool's run waits likewise for the
// previous run of its tool_call_id (ToolGate). Commands
// (AgentSend, AgentResolved, AgentWake, AgentStop) arrive wrapped in a
// local-only Command that carries the caller's scope.
//
// The actor decides nothing itself: every decision above is made by the
// conversation's core (core.go, core_write.go), a pure state machine in the
// manner of etcd's raft. The actor turns each message into an input of the
// core, steps it with the Clock's time, and performs the effects it returns
// in order (journal writes, model calls to start or cancel, tool runs,
// summaries, replies, publications, timers, stopping). The core starts no
// goroutine, reads no clock and sends nothing, so its recovery rules are
// tested case by case (TestCoreRecoveryRules) and explored by a seeded
// simulator (TestSimulation).
//
// # Journal actor
//
// NewJournal: every durable write of the node goes through it as a
// *messages.JournalWrite. It commits whatever arrived while the previous
// commit was in flight as one Store.AppendBatch (one sync for many
// conversations) and replies *messages.JournalWriteReply only after that
// call returned. It answers a JournalBarrier once the conversation's last
// write received before it is answered. Errors travel in the reply (journal.ErrorToProto /
// journal.ErrorFromProto), so errors.Is works on the requester's side. On
// stop or restart it finishes and answers everything it accepted, and
// writes still queued behind the stop are answered with ErrClosed.
//
// # Expiry actor
//
// NewExpiry: holds every scheduled deadline in one min-heap (and every
// schedule's next occurrence in another) with one Clock timer for the
// earliest (armed for at most MaxTimerSpan, so a step of the
// wall clock or a suspend delays a due deadline by at most that), rebuilt
// from Store.Deadlines on start. A due
// deadline becomes an unfenced JournalWrite that resolves the call to
// EXPIRED through the Store's atomic "only if pending" rule, so it never
// races a late human answer into a double resolution; on success the
// runtime is told (ExpiryOptions.Deliver) to deliver the resolution to the
// conversation.
//
// # Rules every actor here follows
//
//   - Only Receive touches actor state. Work off the actor's goroutine (a
//     Store commit, a model call, a timer) reports back with a message to
//     the actor itself; such local-only notifications are plain Go values,
//     never sent across processes.
//   - Every goroutine has an owner that stops it and waits for it.
//   - Time comes from a Clock (SystemClock in production,
//     actorstest.ManualClock in tests); a timer callback only sends a
//     message.
//   - PIDs have no incarnation, so every request carries a request id and
//     replies are matched on it; a reply meant for an earlier incarnation is
//     ignored.
//   - Receive does not panic on bad input; supervisors restart these actors
//     without losing the message in hand.
package actors
