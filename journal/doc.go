// Package journal defines the persistence contract of Lazarus: the Store,
// its sentinel errors, and the limits every adapter enforces.
//
// The log of each conversation is append-only and canonical: events get
// seqs 1, 2, 3, ... with no gaps. A conversation made by Forks.Fork is the
// one exception to where it starts: its log starts right after the summary
// it copied (seqs ToSeq+1, ToSeq+2, ...), the summary standing for the
// events before. Everything else a Store holds (summaries,
// tool-call rows, the fsm_state cache, deadlines, audit rows, metadata) is
// either derived from the log or a row whose changes are written in the same
// atomic write as the events that cause them.
//
// # Operations by name
//
// The design brief (and the persistence behaviour it comes from) names the
// Store's operations; they are these methods:
//
//   - append (append_event): EventLog.Append, EventLog.AppendBatch (many
//     requests, one sync). The request carries the seq the writer believes
//     is last (ExpectedLast) and the rows, fsm_state and deadline changes
//     written with the events.
//   - events, with after, before and limit (stream_events): EventLog.Events
//     with an EventQuery; the last seq: EventLog.LastSeq.
//   - load since (load_since), the revival read: EventLog.LoadSince.
//   - put summary, latest summary, the summary before a given one
//     (put_summary, latest_summary): Summaries.PutSummary,
//     Summaries.LatestSummary, Summaries.SummaryBefore.
//   - conversation get, upsert, put fsm_state, list, delete
//     (get_conversation, put_conversation, put_fsm_state):
//     Conversations.Conversation, Conversations.PutConversation (a
//     ConversationUpdate merging settings, status and fsm_state),
//     Conversations.PutFSMState, Conversations.ListConversations (and
//     ListActiveConversations, the ACTIVE index),
//     Conversations.DeleteConversation (leaves a tombstone).
//   - tool call upsert, get, pending, resolve (upsert_tool_call,
//     get_tool_call, pending_tool_calls, resolve_tool_call):
//     ToolCalls.UpsertToolCall, ToolCalls.ToolCall,
//     ToolCalls.PendingToolCalls (ListPendingToolCalls across
//     conversations), ToolCalls.ResolveToolCall; an Append may also carry
//     resolutions, with the same rules.
//   - deadline schedule, cancel, list due or all (schedule_expiry,
//     cancel_expiry): Deadlines.ScheduleDeadline, Deadlines.CancelDeadline,
//     Deadlines.Deadlines (dueBy zero lists all). The store keeps the time;
//     the expiry actor runs the timers.
//   - audit record, list by turn, delete older than a TTL (put_model_call,
//     model_calls, gc_model_calls): Audit.PutModelCall, Audit.ModelCalls,
//     Audit.GCModelCalls (an absolute time: now minus the TTL).
//   - metadata: Conversations.Metadata, Conversations.PutMetadata (and
//     MetadataIndex.FindConversations).
//   - close: Store.Close.
//
// Where the behaviour returns nil or {:error, :stale}, these return
// errors wrapping ErrNotFound or ErrStale; see the sentinels.
//
// # Durability
//
// For a durable adapter, a nil error from a write method means the write
// survives a process crash and a power cut. Nothing may be acknowledged to a
// user, streamed to a subscriber or acted upon before that nil return.
//
// # Fencing
//
// Append takes the seq the writer believes is last. If the log has moved on,
// the append writes nothing and fails with ErrConflict. This is what keeps
// two activations of one conversation from corrupting its log.
//
// # Adapters
//
//   - journal/memjournal: in memory; ephemeral; the oracle of model tests.
//   - journal/pebblejournal: embedded and durable on Pebble; the default.
//   - journal/pgjournal: durable on PostgreSQL, shared by the members of a
//     cluster.
//
// All three pass the conformance suite in journal/journaltest unchanged;
// the durable ones also its reopen and crash cases.
//
// # Pebble key layout
//
// pebblejournal gives each record family a one-byte key prefix and escapes
// ids so that they are prefix-free and order-preserving (0x00 becomes
// 0x00 0xFF; every id ends with 0x00 0x01): an event is
// 0x03 | conv | seq (big-endian uint64), so a conversation's events are
// one contiguous, seq-ordered key range, the id "a" never sees the keys of
// "a/b" or "a\x00b", and deleting a conversation is one range delete per
// family. The full layout is in the pebblejournal package documentation.
package journal
