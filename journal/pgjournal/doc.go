// Package pgjournal is the journal.Store on PostgreSQL (through pgx/v5 and
// its pgxpool), the store that several nodes of a deployment share. It
// passes journal/journaltest unchanged.
//
// # Schema
//
// The schema is a list of versioned migrations embedded in the binary
// (migrations/NNNN_name.sql). Open applies the ones the database lacks,
// each in its own transaction, under a session advisory lock, so that
// processes starting at once apply each migration once; the versions
// applied are in lz_schema. A database whose schema is newer than the code
// is refused (ErrSchemaTooNew). Ids are bytea (any byte, NUL included,
// sorted bytewise); records are their protobuf encoding, next to the
// columns that queries need: conversation id and seq (lz_events), to_seq
// (lz_summaries), tool call status (lz_tool_calls, with a partial index of
// the pending rows), deadline time (lz_deadlines), audit creation time.
// lz_conversations holds each conversation's last seq, its tombstone flag,
// its row and the row's status (schema version 2), which every write of
// the row sets in the same statement; a partial index of the ACTIVE ones
// (lz_conversations_active) is what ListActiveConversations walks. The
// migration to version 2 reads the status of the rows written before it
// from their protobuf bytes. Version 3 leaves half of each page of
// lz_conversations free (fillfactor 50), so that the update every append
// makes (last_seq) can stay on its page without an index entry, and
// compresses large records (tool results, tool call rows, summaries) with
// lz4 instead of pglz when the server is built with it. Version 5 adds
// lz_schedules (journal.ScheduleStore): one row per schedule, its next
// occurrence in columns, indexed by conversation and by time (the expiry
// actor's rebuild reads the time index alone); a fire in an append reads
// its schedule FOR UPDATE in the batch's transaction, only when a request
// fires one. (Version 4 is a placeholder that changes nothing, until the
// change that owns that number lands.) Version 7 keys lz_schedules by
// (conv, id): schedule ids are per conversation.
//
// # Writes
//
// Every write of a conversation takes a transaction-scoped advisory lock
// keyed by a hash of its id, so that the checks of a write (tombstone,
// fence, tool call owners, pending status) and the write itself do not
// interleave with another write of the same conversation. AppendBatch is
// one transaction for all its requests (one WAL flush): one round trip
// begins it, takes the locks (sorted, so that batches never deadlock) and
// reads the heads and the tool call rows named (FOR UPDATE); each request
// is then checked in Go, in batch order, against that state as moved on by
// the requests before it, so a failing request writes nothing and fails no
// other; a second round trip writes and commits: one multi-row statement
// (arrays, UNNEST) per table and kind, the new conversations and tool
// calls inserted, the ones read updated in place, a conversation's row
// bytes and status rewritten only when they changed (an append that only
// moves last_seq changes no indexed column). Each event is encoded once,
// before the first round trip, into a buffer the Store keeps from batch to
// batch; the bytea[] parameters are encoded by the Store in one pass (it
// registers, on each connection an AppendBatch uses, a bytea[] codec that
// encodes its own parameter type and hands every other value to pgx's).
// ResolveToolCall reads its row FOR UPDATE: of concurrent resolvers, one
// wins and the others find the call no longer pending.
//
// # Errors
//
// A transaction the server rolls back because of another writer's (a
// deadlock, SQLSTATE 40P01; a serialization failure, 40001; a unique
// violation from a row a concurrent transaction inserted, 23505) wrote
// nothing: every write runs it again, from its reads, 3 runs in all at most
// (AppendBatch, and the writes outside it: ResolveToolCall, UpsertToolCall,
// PutSummary, Fork, DeleteConversation, PutMetadata, PutConversation, the
// deadline, schedule, audit and file checkpoint writes, each migration of
// Open), so that the rerun's checks report what the other writer left (a
// call it resolved is ErrStale, a conversation it created is ErrExists) and
// a lost race is not mistaken for a lost fence. Each rerun comes after a
// short wait (a few milliseconds, growing, at most 20ms, part of it random)
// so that two writers that collided do not collide again at once; a
// context that ends during the wait ends the write with its error, nothing
// written. A race lost 3 times is journal.ErrConflict. PutFileBlob, which reads its blob from the caller's
// reader once, is not run again. A write whose connection was lost once its
// COMMIT was sent is never run again (see below).
//
// A connection refused, reset or closed, or a server shutting down, is
// journal.ErrUnavailable: nothing was written. A connection lost once
// COMMIT was sent is journal.ErrUnknownOutcome: the write may have
// committed. So is a session the server ends (a backend terminated, a
// shutdown) once a write outside AppendBatch sent its COMMIT (or its one
// statement that commits on its own): its client cannot tell whether the
// commit's reply came first. Read the log before retrying; the append fence makes the
// retry of an append that did commit fail with ErrConflict. An append
// whose COMMIT's reply was read succeeds, whatever the connection does
// after it (a backend terminated right after its COMMIT). Each call is
// bounded by Options.Timeout: a call it ends (a server that stopped
// answering) is journal.ErrUnavailable, nothing written, unless it ended a
// write once its COMMIT (or its one statement that commits on its own) was
// sent, which is journal.ErrUnknownOutcome; a call the caller's context
// ends first returns that context's error (ErrUnknownOutcome too once the
// COMMIT was sent).
//
// Stored bytes are read defensively, as pebblejournal reads them: a record
// that does not decode, or disagrees with the columns of its row, a
// metadata row whose key breaks the rules of ids or whose value is not
// UTF-8, and a read of a log whose seqs skip (Events, LoadSince: rows of
// lz_events removed under the store) give an error wrapping
// journal.ErrCorrupt that names the row, never a record, or a history with
// a hole, handed to the caller. In an AppendBatch, such a record fails
// the requests that meet it (its conversation's row, a tool call row, a
// deadline or a schedule a request checks, an event row already at a seq
// past its conversation's last_seq) and no other; a Fork that meets such
// an event row, or a summary row already at its summary's to_seq, fails
// with that error too.
//
// # Reconnection
//
// When a new connection fails (refused, timed out, the server shutting
// down, starting up or out of slots) the Store takes the server to be
// down: it resets the pool and, for Options.ReconnectBackoff (default
// DefaultReconnectBackoff), every call fails at once with
// journal.ErrUnavailable, without dialing. Then one call tries the server
// (a ping on a fresh connection) while the others keep failing at once: if
// it gets through, every call goes through again; if not, the backoff
// doubles, up to Options.MaxReconnectBackoff (default
// DefaultMaxReconnectBackoff). An outage so costs at most one connection
// attempt per backoff whatever the load, and calls succeed again at most
// MaxReconnectBackoff after the server is back. An established connection
// that drops fails its call with ErrUnavailable (or ErrUnknownOutcome during
// COMMIT) without opening the breaker: the next call dials, and the
// breaker opens if that fails.
package pgjournal
