package journal

import (
	"context"
	"time"

	"github.com/lazarusrt/lazarus/messages"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Store is the persistence contract of Lazarus: an append-only event log per
// conversation plus the rows and caches that change with it. It is composed
// of small interfaces; an adapter implements all of them.
//
// Concurrency: every method is safe for concurrent use. Writes to one
// conversation are expected to come from one writer (its actor, through the
// journal actor); the append fence (AppendRequest.ExpectedLast) keeps the log
// correct when that expectation fails.
//
// Ownership: records passed in are owned by the Store for the duration of the
// call and must not be modified concurrently; Append sets Seq on the events
// it is given. Records and slices returned belong to the caller; the Store
// keeps no reference to them.
//
// Times: every time a Store takes (an event's, a tool call row's created,
// resolved and deadline, a resolution's, a deadline's, a summary's, a
// model call's, a ConversationUpdate's, a schedule's and a file
// checkpoint's created, ResolveToolCall's at) may be unset, or else must
// be a valid timestamp, within the years 1 to 9999 (CheckTime); any other
// is ErrInvalid and nothing is written.
//
// Errors: every error wraps one of the sentinels of this package where one
// applies. After Close, every method returns an error wrapping ErrClosed;
// so does a call whose ctx is done too: a closed store is checked before
// ctx, and its error wraps ErrClosed, not ctx's error (a caller that
// retries on a context error must not retry a store that cannot answer).
// On an open store, a call whose ctx is already done returns an error
// wrapping ctx's error and no sentinel, and writes nothing. A call that a
// networked store's own time bound ends (a timeout of its options, not
// ctx's) returns an error wrapping ErrUnavailable if nothing was written,
// ErrUnknownOutcome if it ended a write that may have committed.
type Store interface {
	EventLog
	Summaries
	ToolCalls
	Deadlines
	Audit
	Conversations
	Forks
	MetadataIndex
	// Close flushes and releases everything. It is safe to call more than
	// once; later calls return nil.
	Close() error
}

// AppendResult reports the seqs one AppendRequest was given, or why it failed.
type AppendResult struct {
	// FirstSeq and LastSeq are the seqs assigned to the request's events.
	// Both are ExpectedLast when the request carried no events.
	FirstSeq, LastSeq uint64
	// Err is nil on success. On failure nothing of the request was written.
	Err error
}

// EventQuery selects a range of a conversation's log.
type EventQuery struct {
	// After is an exclusive lower bound on seq. Zero means from the start.
	After uint64
	// Before is an exclusive upper bound on seq. Zero means no bound.
	Before uint64
	// Limit keeps at most this many events: the newest ones of the range,
	// still returned in ascending order. Zero means no limit; a negative
	// limit is ErrInvalid. Before+Limit is backward pagination: read the
	// newest page, then the page before the oldest seq already read.
	Limit int
	// MaxBytes, when positive, bounds the events kept by their sizes
	// (proto.Size of each event returned, summed): of the range, cut by
	// Limit if set, the events are taken from the end Limit keeps (the
	// newest with a Limit, the oldest without one) while their sizes sum
	// to at most MaxBytes, and always one at least, so a page of events
	// as large as the limits allow is bounded and paging always gets on.
	// A page MaxBytes cut resumes as one Limit cut: before its first seq
	// with a Limit, after its last without. Zero means no bound; a
	// negative MaxBytes is ErrInvalid.
	MaxBytes int
}

// EventLog is the append-only log of each conversation.
type EventLog interface {
	// Append writes req atomically and durably: its events get the seqs
	// ExpectedLast+1, ExpectedLast+2, ... and, in the same write, its tool
	// call rows are upserted, its resolutions applied, its fsm_state and
	// status replace the conversation's, its deadlines are scheduled or
	// cancelled, and its reschedules applied. The first append to a
	// conversation creates its row with status ACTIVE. The status written
	// is decided in the append's own write, against the row as committed
	// before it (and the requests before it in a batch) left it
	// (StatusWritten): a conversation whose row is ENDED stays ENDED
	// whatever status the request states, so an End is for good however
	// close a write decided on an earlier read of the row commits after
	// it (only PutConversation sets another status on an ENDED row). An
	// unfenced request to an ENDED row (an expiry, an answer given
	// outside the conversation's actor) is otherwise written as usual; a
	// fenced one is refused unless it states ENDED itself (CheckEnded,
	// below); and a status
	// SUSPENDED is written as ACTIVE when a call the request's fsm_state
	// names pending is terminal once its upserts and resolutions are
	// applied: an answer durable and not yet in the log keeps the
	// conversation where Open resumes it.
	//
	// Schedule and Cancel change only deadline records (the writer puts the
	// same time in the row it upserts). A Reschedule entry changes both, in
	// the same write: the pending call's row gets the entry's time as its
	// Deadline (none if unset) and its deadline record is replaced (removed
	// if unset). It is how a deadline moves once the call is pending.
	//
	// If ExpectedLast is not the log's last seq it returns ErrConflict
	// (unless req.Unfenced, which must carry no events); if the request is
	// fenced, does not state ENDED, and the conversation's row is ENDED
	// (as committed before the request, and the requests before it in a
	// batch, left it), ErrEnded (CheckEnded): End writes no event, so the
	// fence alone would let a writer that read the log before the End
	// append to the ended log, or change its row's settings or fsm_state;
	// if a resolution's
	// or a reschedule's call is unknown, of another conversation or not
	// pending, ErrStale (a resolution also removes its call's deadline; a
	// reschedule sees the call as the request's upserts and resolutions
	// leave it); if req.DueBy is set and a resolution's call has no
	// deadline at or before it (as committed before the request, and the
	// requests before it in a batch, left it), ErrStale: that is how an
	// expiry loses to a reschedule that moved the deadline later; if a
	// tool call id belongs to another conversation, ErrConflict; if the
	// conversation was deleted, ErrDeleted; if the request breaks a rule of
	// ValidateAppend (a resolution's result that cannot be encoded or
	// exceeds MaxRecordBytes, say), ErrInvalid. In every error case nothing
	// is written. The checks run in this order and the first that fails
	// decides the error: ErrInvalid, ErrDeleted, the fence's ErrConflict,
	// ErrEnded, the tool call owners' ErrConflict, ErrStale. One ErrInvalid depends on
	// the stored rows and is found with ErrStale's checks: a resolution
	// that would make its call's row exceed MaxRecordBytes (see
	// ResolvedRowFits), or settings and fsm_state that would make the
	// conversation row exceed it, however many merges it took (see
	// AppendedRowFits). A request that passed is applied in
	// this order: events, tool call upserts, resolutions, fsm_state and
	// status, scheduled deadlines, cancelled deadlines, reschedules (so a
	// request may resolve a call it upserts).
	//
	// For a durable adapter, a nil error means the write survives a crash or
	// a power cut. Append sets Seq on each event of req.Events.
	Append(ctx context.Context, req *messages.AppendRequest) (AppendResult, error)

	// AppendBatch commits many requests, of any conversations, in one
	// durable write (one sync). Each request succeeds or fails on its own,
	// with the same rules as Append; requests for the same conversation are
	// applied in order, so the second may expect the last seq of the first.
	// A stored record that is corrupt fails, with ErrCorrupt, the requests
	// that meet it (as Append would) and no other. The returned slice has one result per request, in order. A failure
	// of the write itself (I/O, closed) is reported in every result that had
	// not already failed on its own.
	AppendBatch(ctx context.Context, reqs []*messages.AppendRequest) []AppendResult

	// Events returns the events of q's range in ascending seq. An unknown
	// conversation has no events (nil, nil).
	Events(ctx context.Context, conversationID string, q EventQuery) ([]*messages.Event, error)

	// LastSeq returns the seq of the conversation's last event, 0 if none.
	LastSeq(ctx context.Context, conversationID string) (uint64, error)

	// LoadSince is the revival read: the latest summary (nil if none) and
	// the events after its ToSeq, or all events when there is no summary.
	// Its cost depends on the events after the summary, not on the length
	// of the log.
	LoadSince(ctx context.Context, conversationID string) (*messages.Summary, []*messages.Event, error)
}

// Summaries stores compaction summaries. They are derived: writing one never
// touches the log.
type Summaries interface {
	// PutSummary stores s, keyed by its ToSeq, replacing a summary with the
	// same ToSeq. s must satisfy 1 <= FromSeq <= ToSeq <= LastSeq, else
	// ErrInvalid. ErrDeleted after the conversation was deleted. As for
	// Append, a summary that is wrong by itself (nil, a bad range, one
	// that cannot be encoded or exceeds MaxRecordBytes: see
	// ValidateSummaryShape; a created time outside the years 1 to 9999,
	// say) is ErrInvalid first, deleted conversation or
	// not; ToSeq beyond LastSeq is checked after ErrDeleted.
	PutSummary(ctx context.Context, conversationID string, s *messages.Summary) error
	// LatestSummary returns the summary with the greatest ToSeq, or
	// ErrNotFound.
	LatestSummary(ctx context.Context, conversationID string) (*messages.Summary, error)
	// SummaryBefore returns the summary with the greatest ToSeq strictly
	// less than toSeq (the previous chapter), or ErrNotFound (always for
	// toSeq 0: zero is not "no bound"; LatestSummary is that).
	SummaryBefore(ctx context.Context, conversationID string, toSeq uint64) (*messages.Summary, error)
}

// ToolCalls stores one row per tool call, keyed by its id, which is unique
// across all conversations of the Store.
type ToolCalls interface {
	// UpsertToolCall inserts or replaces the row rec.Id. A row with an
	// unspecified status (new or replacing one) is stored as pending. A row
	// ValidateToolCall refuses (an executor neither server nor human, a
	// server call with a deadline, a created, resolved or deadline time
	// outside the years 1 to 9999, say) is ErrInvalid and nothing is
	// written. If the id belongs to another conversation it returns
	// ErrConflict; ErrDeleted after the conversation was deleted.
	UpsertToolCall(ctx context.Context, rec *messages.ToolCallRecord) error
	// ToolCall returns the row, or ErrNotFound.
	ToolCall(ctx context.Context, toolCallID string) (*messages.ToolCallRecord, error)
	// PendingToolCalls returns the conversation's pending rows, ordered by
	// id. Its cost depends on the number of pending calls only.
	PendingToolCalls(ctx context.Context, conversationID string) ([]*messages.ToolCallRecord, error)
	// ListPendingToolCalls returns up to limit pending rows (limit 0
	// means 100) of every conversation, ordered by conversation id then
	// tool call id, after cursor ("" for the first page; else a
	// PendingCursor), and the cursor of the next page ("" when there is
	// none). A cursor that is not a PendingCursor, or a negative limit, is
	// ErrInvalid (PageSize), as in every listing of a Store. In a
	// durable adapter its cost depends on the page and the number of
	// pending calls only, not on the number of conversations or of
	// answered calls.
	ListPendingToolCalls(ctx context.Context, cursor string, limit int) ([]*messages.ToolCallRecord, string, error)
	// ResolveToolCall atomically moves a pending call to status (resolved,
	// errored or expired) with result, stamped at time at, and removes its
	// deadline in the same write. result and at replace the row's Result
	// and Resolved, whatever the pending row held: a nil result leaves it
	// with none, the zero time with no Resolved time. It names no
	// resolver, so the row it leaves has no Resolver, whatever the pending
	// row held (an Append resolution sets the Resolver to its by, none
	// included). If the call is unknown or not pending it
	// returns ErrStale and changes nothing. A status that is not terminal,
	// an at outside the years 1 to 9999 (ValidateResolvedAt), or a result
	// that cannot be encoded or exceeds MaxRecordBytes, is ErrInvalid,
	// checked first; a result that would make the pending row
	// exceed MaxRecordBytes is ErrInvalid too, checked after ErrStale.
	// Either way nothing changes. Exactly one of any number of concurrent
	// resolvers of one call succeeds, whether they call ResolveToolCall or
	// Append with a resolution of it. It returns the updated row.
	ResolveToolCall(ctx context.Context, toolCallID string, status messages.ToolCallStatus, result *messages.ToolOutcome, at time.Time) (*messages.ToolCallRecord, error)
}

// Deadlines stores the durable expiry times of pending human calls, so the
// expiry actor can rebuild its timers after a restart.
type Deadlines interface {
	// ScheduleDeadline adds d, replacing an earlier deadline of the same
	// tool call of the same conversation: deadlines are keyed by
	// conversation and tool call id, as CancelDeadline names them, so a
	// deadline scheduled under another conversation's id neither replaces
	// nor is replaced by this one. It does not check that the call exists
	// or is pending: the expiry actor resolves through an Append
	// resolution with DueBy set, which does (ErrStale for a call unknown,
	// of another conversation, not pending or no longer due). A deadline
	// that ValidateDeadline refuses (an id missing or ill-formed, no time,
	// a time outside the years 1 to 9999) is ErrInvalid and nothing is
	// written; so is such an entry of AppendRequest.Schedule. ErrDeleted
	// after the conversation was deleted.
	ScheduleDeadline(ctx context.Context, d *messages.Deadline) error
	// CancelDeadline removes the deadline of a tool call of the
	// conversation (a deadline of that id under another conversation
	// stays). Cancelling one that does not exist is not an error, nor is
	// cancelling one of a deleted conversation (its deadlines went with
	// it).
	CancelDeadline(ctx context.Context, conversationID, toolCallID string) error
	// Deadlines calls fn for every deadline at or before dueBy (every
	// deadline when dueBy is zero), in ascending time, then tool call id.
	// It stops at the first error fn returns and returns it. If the Store
	// is closed or ctx is done while it lists (a shutdown cutting an
	// expiry actor's rebuild, say), it calls fn no more and returns an
	// error wrapping ErrClosed, or else ctx's error and no sentinel, as a
	// call made then would. fn may keep the record; it must not call the
	// Store's write methods.
	//
	// A stored deadline that cannot be decoded, or fails the adapter's
	// checks of it, is passed over: fn is called for every other deadline,
	// in order, and Deadlines then returns an error wrapping ErrCorrupt
	// that names the first such record and counts them (PassedOver),
	// unless fn or ctx stopped it first. One damaged record thus never
	// hides the others from the expiry actor's rebuild. Damage the adapter
	// cannot read past (a damaged file) ends the listing with ErrCorrupt
	// too, after the deadlines before it.
	Deadlines(ctx context.Context, dueBy time.Time, fn func(*messages.Deadline) error) error
}

// Audit stores what was rendered to the model on each model call, and how
// the call went: a row (messages.ModelCall) per call that returned, an
// answer or an error (ModelCall.error set, usage empty). It is off by
// default: unless the adapter was opened with audit on, PutModelCall
// checks its call and writes nothing, ModelCalls returns nothing and
// GCModelCalls removes nothing,
// also of the rows a durable Store opened with audit on wrote earlier
// (they stay, for the next Store opened with it on).
type Audit interface {
	// PutModelCall records mc (keyed by conversation and TurnRef),
	// replacing a row with the same TurnRef: a later call of the same turn
	// (a retry that answers after a failed call, say) replaces the earlier
	// call's row. mc is stored as given, a failed call's error included.
	// ErrInvalid, audit on or off, for a call that ValidateModelCall
	// refuses (nil, a created time set but no valid timestamp, a string
	// that is not UTF-8, one that exceeds MaxRecordBytes, say); with audit
	// on, ErrDeleted after the conversation was deleted. In either case
	// nothing is written.
	PutModelCall(ctx context.Context, mc *messages.ModelCall) error
	// ModelCalls returns the conversation's audit rows ordered by TurnRef.
	ModelCalls(ctx context.Context, conversationID string) ([]*messages.ModelCall, error)
	// GCModelCalls deletes the conversation's rows created before
	// olderThan and returns how many it removed. A row without a created
	// time counts as older than any time; a replaced row is aged by the
	// created time of the row that replaced it.
	GCModelCalls(ctx context.Context, conversationID string, olderThan time.Time) (int, error)
}

// AuditReporter is implemented by a Store that says whether its audit is
// on; every adapter of this module does. The runtime uses it to refuse
// options that contradict the Store it is given.
type AuditReporter interface {
	// AuditEnabled reports whether the Store was opened with audit on,
	// that is, whether PutModelCall records rows.
	AuditEnabled() bool
}

// ConversationUpdate is a merge into a conversation row: zero fields leave
// the row's value unchanged.
type ConversationUpdate struct {
	// ID names the conversation. Required.
	ID string
	// Settings are merged key by key; an empty value deletes the key.
	Settings map[string]string
	// Status replaces the status unless it is unspecified.
	Status messages.ConversationStatus
	// FSMState replaces the fsm_state cache unless nil.
	FSMState *messages.FSMState
	// Created replaces the row's created time unless nil; it must be a
	// valid timestamp (years 1 to 9999), else ErrInvalid. The runtime
	// never sets it: it is how an import keeps the created time of the
	// conversation it copies, which the write that created the row set
	// otherwise (an Append to the time of its first event, a Fork or a
	// PutConversation to now).
	Created *timestamppb.Timestamp
}

// Conversations stores one row per conversation, and its metadata.
//
// A row's Updated is the time, by the Store's clock, of the last write of
// the row itself: the write that created it, every PutConversation and
// PutFSMState, and every Append that carries fsm_state, a status or
// settings. Appends of events or tool calls alone, resolutions,
// summaries, metadata, deadlines and audit rows leave it unchanged.
type Conversations interface {
	// Conversation returns the row, or ErrNotFound; ErrDeleted after a
	// delete (the tombstone is what it finds).
	Conversation(ctx context.Context, id string) (*messages.Conversation, error)
	// PutConversation merges u into the row, creating it (status ACTIVE
	// unless u says otherwise) if absent. It sets the status u states,
	// whatever the row's (an ENDED one included, which no Append changes):
	// it is how an import gives a conversation it wrote ENDED the status
	// it exported; the runtime never calls it. ErrDeleted after a delete. An
	// unknown status, an fsm_state ValidateFSMState refuses (one in a
	// state other than idle or awaiting_input, say), or a created time
	// that is no valid timestamp, is ErrInvalid.
	PutConversation(ctx context.Context, u ConversationUpdate) error
	// PutFSMState replaces just the fsm_state cache, creating the row if
	// absent. ErrDeleted after a delete; ErrInvalid for an fsm_state
	// ValidateFSMState refuses.
	PutFSMState(ctx context.Context, id string, st *messages.FSMState) error
	// ListConversations returns up to limit rows (limit 0 means 100)
	// with ids greater than cursor, ordered by id, and the cursor of the
	// next page ("" when there is none). A negative limit is ErrInvalid
	// (PageSize).
	ListConversations(ctx context.Context, cursor string, limit int) ([]*messages.Conversation, string, error)
	// ListActiveConversations returns the ids of up to limit conversations
	// (limit 0 means 100) whose row has status ACTIVE (a turn is owed or a
	// server tool is running: what a runtime resumes after a restart),
	// ordered by id, bytewise, after cursor ("" for the first page; else
	// an ActiveCursor), and the cursor of the next page ("" when there is
	// none). A cursor that is not an ActiveCursor, or a negative limit, is
	// ErrInvalid.
	//
	// The adapter keeps an index of the ACTIVE rows, changed in the same
	// atomic write as the row's status: a conversation enters it when its
	// row is created (status ACTIVE unless the write says otherwise) or
	// set back to ACTIVE, leaves it when the row is set to any other
	// status, and leaves it when the conversation is deleted. So the ids
	// listed are exactly the conversations whose row, read at the same
	// moment, is ACTIVE, and the listing's cost depends on the page and
	// the number of ACTIVE conversations only, not on the number of
	// conversations.
	ListActiveConversations(ctx context.Context, cursor string, limit int) ([]string, string, error)
	// DeleteConversation removes every record of the conversation (events,
	// summaries, tool calls, deadlines, audit, metadata, row) in one atomic
	// write and leaves a tombstone: later writes fail with ErrDeleted.
	// Records written before the conversation had a row (metadata, tool
	// call rows, deadlines, audit rows) are its records too: a
	// conversation that has some and no row is deleted as one with a row
	// is. Deleting an unknown conversation (nothing stored under the id)
	// returns ErrNotFound and leaves no tombstone; so does deleting one
	// again (the delete leaves its tombstone in place): Conversation,
	// which returns ErrDeleted for it, is what tells the two apart.
	DeleteConversation(ctx context.Context, id string) error
	// Metadata returns the conversation's key/value pairs (empty map if
	// none).
	Metadata(ctx context.Context, id string) (map[string]string, error)
	// PutMetadata merges kv into the metadata; an empty value deletes a key.
	// It does not create the conversation row. ErrDeleted after a delete.
	// Keys and values are checked as by ValidateMetadata, and so is the
	// metadata the merge leaves: a merge that leaves more than
	// MaxRecordBytes of keys and values, however many merges it took, is
	// ErrInvalid and writes nothing (so the metadata always fits one
	// ForkRequest).
	PutMetadata(ctx context.Context, id string, kv map[string]string) error
}
