// Package pebblejournal is the embedded, durable journal.Store of Lazarus,
// on Pebble (github.com/cockroachdb/pebble/v2).
//
//	s, err := pebblejournal.Open(dir, pebblejournal.Options{})
//	...
//	defer s.Close()
//
// # Durability
//
// Every write method commits one Pebble batch with a WAL sync: a nil error
// means the write survives a crash or a power cut. AppendBatch commits all
// the requests that pass their checks in one synced batch (group commit),
// and concurrent callers writing different conversations commit in parallel
// so that Pebble groups their syncs too.
//
// Pebble has no transactions. Conditional writes (the append fence,
// resolve-only-if-pending, tool call id ownership, the tombstone check) hold
// striped per-conversation and per-tool-call-id locks across their
// read-check-commit; the lock order is documented on Store. Two small
// in-memory caches spare a write most point reads: each recently written
// conversation's last seq and row (and that it has no tombstone), so an
// append neither seeks to the end of its log nor reads the row it rewrites;
// and each recently written pending tool call's owner and row, so that
// resolving it reads neither. They are sound because only this Store writes
// the directory, a write updates them once committed while it still holds
// the locks of what it changed, and a failed write drops what it touched.
// The conversation row holds no last seq: the log's last key is the head,
// read with one reverse seek when the cache does not hold it (after Open),
// and an append writes the row only when it creates it or sets the
// status, the fsm_state or settings.
//
// An Append (or an AppendBatch of one request) of events alone to a
// conversation whose head is cached with its row, not ENDED, the most
// frequent write, skips the overlay of rows, calls and deadlines that
// other writes build: it checks and encodes the events, checks the fence
// against the cached head, and commits one synced batch of the event keys.
// Every other fenced append reads the row, to refuse one to an ENDED
// conversation (journal.CheckEnded).
//
// # Fatal storage errors
//
// Pebble reports errors it cannot recover from (a failed WAL write or sync,
// a failed MANIFEST write) through its logger's Fatalf,
// which by default exits the process. This package's logger does not exit
// and does not panic: it logs the error at Error level and marks the store
// failed. From then on every method (reads too: Pebble may show a write that
// never became durable) returns an error wrapping journal.ErrClosed that says
// the store failed; the commit that hit the error returns it as well,
// although Pebble's Commit returned nil. Close still releases the directory;
// reopening recovers what was durable. Not panicking is safe because no call
// reaches Pebble after the failure: only Pebble's own background work runs
// until Close, and it fails on its own.
//
// A full disk is such an error: the store's error then wraps
// journal.ErrNoSpace as well. Open reserves the room the replay of the
// write-ahead log needs before it starts Pebble, and refuses at once with
// an error wrapping journal.ErrNoSpace when the disk cannot hold it (Pebble
// would otherwise retry the failing flush forever); a failed flush is
// followed by a pause growing to a second, so it is not retried in a tight
// loop (see space.go).
//
// # Key layout
//
// Every key starts with one byte naming its record family. Conversation ids,
// tool call ids and metadata keys are escaped (0x00 becomes 0x00 0xFF) and
// terminated with 0x00 0x01, which keeps them prefix-free and in bytewise
// order: the keys of id "a" never interleave with those of "a/b", "a\x00b"
// or "ab", and [family|id, family|id with its last byte 0x02) is exactly one
// conversation's range. Seqs and turn refs are big-endian uint64. Values are
// protobuf records from package messages unless noted.
//
//	0x00 "layout"                      layout version (text)
//	0x01 conv                          conversation row (Conversation)
//	0x02 conv                          tombstone (Tombstone)
//	0x03 conv seq                      event (Event)
//	0x04 conv to_seq                   summary (Summary)
//	0x05 conv call                     tool call row (ToolCallRecord)
//	0x06 conv call                     pending tool call index (empty)
//	0x07 conv call                     deadline (Deadline)
//	0x08 conv turn_ref                 audit row (ModelCall)
//	0x09 conv key                      metadata value (UTF-8 text)
//	0x0a conv                          active conversation index (empty)
//	0x0b key hash(value) conv          metadata index (the value)
//	0x0d conv schedule                 scheduled wake-up (Schedule)
//	0x0e schedule                      retired: schedule id -> conversation id (text)
//	0x0f conv seq path                 file checkpoint (FileCheckpoint)
//	0x10 sha256 chunk                  blob content, a chunk (raw bytes)
//	0x1a seconds nanos schedule conv   schedules by next occurrence (empty)
//	0x1b 'b' sha256                    blob description (FileBlob)
//	0x1b 'r' sha256 conv seq path      blob reference of a file checkpoint (empty)
//	0x21 seconds nanos call conv       deadlines by time (empty)
//	0x22 call                          tool call id -> conversation id (text)
//
// A resolved tool call row whose result was appended in the same write as
// its tool_result event (the runtime's server calls) does not hold the
// result a second time: it keeps the event's seq in result_seq, and reads
// put the event's outcome back.
//
// The schedule families (journal.ScheduleStore) came without a layout
// change: a store written before them has none of their keys. A fire in an
// append moves 0x0d and 0x1a in the append's batch. Schedule ids are per
// conversation. Family 0x0e, which once kept them unique across the store,
// is retired without a layout change: nothing reads it or writes it any
// more, Check ignores it, and on a store that holds such keys when it
// opens, the delete, replace or last fire of a schedule deletes its id's
// key.
//
// Layout v2 brought result_seq and moved the owner index from 0x20 to 0x22.
// Layout v3 brought the active index (0x0a): one key per conversation whose
// row is ACTIVE, set or deleted in the batch that moves the row's status
// across ACTIVE (the old status is the row the write loaded, usually from
// the head cache, so a write that keeps the status writes no index key),
// and deleted with the conversation. ListActiveConversations walks it. Open
// upgrades a v1 store: it moves the owner keys, in batches of 4,096; then
// it gives a v1 or v2 store its active index in one synced batch that
// clears the family, sets the key of every ACTIVE row and records v3, so a
// crash during the upgrade leaves the store as it was.
//
// The metadata index (0x0b) came without a new layout version (it only adds
// keys): one key per conversation and metadata pair, holding the value's
// hash in the key and the value itself, set and deleted in the batch that
// changes the pair (PutMetadata, Fork, DeleteConversation). A store without
// the marker key 0x00 "find-index" was written before it: Open builds the
// index in one synced batch that sets the marker. A fork's log starts after
// the summary it copied (events from its ToSeq+1); reads and Check accept
// that start when the summary is there.
//
// In the deadline index, seconds are 8 bytes big-endian with the sign bit
// flipped and nanos 4 bytes big-endian, so keys sort by time, then tool call
// id. Tool call ids are unique across conversations; the 0x22 index finds a
// call's conversation, and a new call must check that its id is not
// claimed. That check is a point read which, for a random id, consults a
// bloom filter in every level of the LSM (often reading the filter from
// disk, since compactions keep writing new tables). The index is therefore
// the last family, and the runtime mints time-ordered ids
// (actors.NewToolCallID): a new id's key sorts after every table's last key,
// so the read ends in the memtables without touching a table.
// PendingToolCalls walks 0x06 (its cost is the number of pending calls),
// ListPendingToolCalls walks it across conversations from its cursor, and
// Deadlines walks 0x21 from a low-water mark.
//
// File checkpoints (no layout change: a store without them has none) keep
// a blob's chunks (sha256 is 32 bytes, the chunk index 4 bytes
// big-endian), each written in its own unsynced batch as the content is
// read, then its description in a synced batch: a blob without a
// description is an unfinished upload, which the sweeper removes. A
// record's reference key is written in its batch, so the sweeper knows a
// blob is referenced with one seek; both, and the sweep, run under the
// blob's lock (striped).
//
// Reads use bounded iterators; tails and backward pages iterate in reverse,
// so LastSeq, LatestSummary and LoadSince cost one reverse seek plus the
// events they return, whatever the length of the log.
//
// DeleteConversation writes one synced batch: a range delete over each of
// families 0x03-0x09 and 0x0f for the conversation, point deletes of its
// blob references (0x1b 'r'), of its row, of its
// active index key (0x0a) and of its entries in the two global indexes
// (0x21, 0x22), point deletes of its schedules (0x0d, 0x1a, and 0x0e when the
// store holds retired keys), and its
// tombstone (0x02), which makes every later write to the id fail with
// journal.ErrDeleted.
//
// Stored bytes are decoded defensively: a value that does not decode, or
// disagrees with its key, and a malformed key give an error wrapping
// journal.ErrCorrupt that quotes the key; nothing panics.
//
// Damage on disk is reported as journal.ErrCorrupt too, and only where it
// is (see corrupt.go): a block whose checksum fails fails the reads that
// touch it, with Pebble's text, and the store stays open; Open of damaged
// files (WAL, MANIFEST) fails with an error wrapping ErrCorrupt; a read of
// a log with a gap (events lost with a write-ahead log) fails with
// ErrCorrupt instead of returning a history with a hole. Store.Check
// verifies a whole store offline (lazarus check).
//
// # Concurrency and lifetime
//
// A Store is safe for concurrent use. Close waits for calls in progress,
// closes Pebble, and is idempotent; afterwards every method returns an error
// wrapping journal.ErrClosed, before looking at its ctx (a call whose ctx is
// done gets ErrClosed, not ctx's error, as from a failed store). One
// directory can be open in one Store (one process) at a time: Pebble holds a
// lock file, and the package keeps the directories its Stores have open by
// canonical path (dirlock.go), since Pebble's lock, keyed by the path as
// given, lets one process take it again through a symlink or a relative path.
package pebblejournal
