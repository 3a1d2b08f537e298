package journal

import (
	"context"

	"google.golang.org/protobuf/proto"

	"github.com/lazarusrt/lazarus/messages"
)

// Forks creates a conversation from a copy of another's history.
type Forks interface {
	// Fork creates req.ConversationId in one atomic write: its log is
	// req.Events with their seqs unchanged (they follow req.Summary's ToSeq
	// contiguously, or start at 1 without a summary), req.Summary is its
	// only summary, and its row gets req.Status, req.Settings,
	// req.Origin (as ForkedFrom), and req.Metadata is merged into its
	// metadata (which a conversation without a row may have) and indexed
	// as by PutMetadata. The new log starts after the summary: Events and
	// LoadSince see the copied events only, and LastSeq is the last copied
	// seq. The copy shares nothing with the source: deleting either leaves
	// the other whole.
	//
	// If the request breaks a rule of ValidateFork (it encodes to more
	// than MaxForkBytes, say) it returns ErrInvalid;
	// if the id was deleted, ErrDeleted; if it has a row or events,
	// ErrExists; if the metadata the merge leaves holds more than
	// MaxRecordBytes of keys and values (as PutMetadata refuses),
	// ErrInvalid, checked after ErrDeleted and ErrExists. In every error
	// case nothing is written. A crash during
	// the write leaves all of it or none of it.
	Fork(ctx context.Context, req *messages.ForkRequest) error
}

// MetadataIndex finds conversations by a metadata pair.
type MetadataIndex interface {
	// FindConversations returns the ids of up to limit conversations
	// (limit 0 means 100) whose metadata holds key with exactly value,
	// ordered by id, bytewise, after cursor ("" for the first page; else a
	// FindCursor), and the cursor of the next page ("" when there is
	// none). An invalid key, a cursor that is not a FindCursor, or a
	// negative limit is ErrInvalid; an empty value finds nothing (an empty
	// value deletes a key).
	//
	// The adapter keeps an index of the pairs, changed in the same atomic
	// write as the metadata (PutMetadata, Fork, DeleteConversation), so
	// the ids listed are exactly the conversations whose metadata, read at
	// the same moment, holds the pair, and the cost depends on the page
	// and the number of conversations holding the pair only, not on the
	// number of conversations.
	FindConversations(ctx context.Context, key, value, cursor string, limit int) ([]string, string, error)
}

// FindCursor returns the cursor of MetadataIndex.FindConversations that
// resumes after the conversation conversationID: the id itself, as for
// ActiveCursor.
func FindCursor(conversationID string) string { return conversationID }

// ParseFind checks the arguments of a FindConversations call and returns
// the id to resume after ("" for the first page) and the limit to use (100
// for 0). Errors wrap ErrInvalid.
func ParseFind(key, value, cursor string, limit int) (after string, pageSize int, err error) {
	if err := ValidateID("metadata key", key); err != nil {
		return "", 0, err
	}
	if err := ValidateMetadata("find", map[string]string{key: value}); err != nil {
		return "", 0, err
	}
	after, pageSize, err = ParseActiveCursor(cursor, limit)
	if err != nil {
		return "", 0, Invalidf("find %q: %v", key, err)
	}
	return after, pageSize, nil
}

// ValidateFork checks a ForkRequest before a Store writes it: a valid
// conversation id; a valid summary if set (1 <= FromSeq <= ToSeq); at
// least one event; events that pass ValidateEvent, their seqs not counting
// against MaxEventBytes (as in the Append that logged them, so every event
// a log holds can be copied), with seqs
// contiguous from the summary's ToSeq+1 (1 without a summary), every rewind
// targeting an earlier seq; events that name a tool call as ValidateAppend
// requires (a tool_call event carries a call with a valid id and an
// executor that is server or human; a tool_result, resolution or handoff
// event names a call by a valid id, a resolution with a terminal status; a
// suspension's pending calls have valid ids and executors of their enum),
// except that a tool_call event's row is not required (a copied call's row
// is the source's); status ACTIVE, IDLE or ENDED (lazarus import
// writes a fork ENDED, and gives it its status once the rest of it is
// written); valid settings and metadata; last, that the whole request
// encodes to at most MaxForkBytes (it may hold more events than
// MaxEventsPerAppend and more bytes than MaxAppendBytes). Errors wrap
// ErrInvalid.
func ValidateFork(req *messages.ForkRequest) error {
	if req == nil {
		return Invalidf("nil fork request")
	}
	conv := req.GetConversationId()
	if err := ValidateID("conversation id", conv); err != nil {
		return err
	}
	next := uint64(1)
	if s := req.GetSummary(); s != nil {
		if err := ValidateSummary(conv, s, s.GetToSeq()); err != nil {
			return err
		}
		next = s.GetToSeq() + 1
	}
	if len(req.GetEvents()) == 0 {
		return Invalidf("fork %q copies no event", conv)
	}
	for i, ev := range req.GetEvents() {
		if err := validateCopiedEvent(ev); err != nil {
			return Invalidf("event %d of fork %q: %v", i, conv, err)
		}
		if err := checkCallEvent(ev); err != nil {
			return Invalidf("event %d of fork %q: %v", i, conv, err)
		}
		if ev.GetSeq() != next {
			return Invalidf("event %d of fork %q has seq %d, want %d", i, conv, ev.GetSeq(), next)
		}
		if rw := ev.GetRewind(); rw != nil && rw.GetToSeq() >= ev.GetSeq() {
			return Invalidf("rewind at seq %d of fork %q targets seq %d, not an earlier one", ev.GetSeq(), conv, rw.GetToSeq())
		}
		next++
	}
	switch req.GetStatus() {
	case messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE, messages.ConversationStatus_CONVERSATION_STATUS_IDLE,
		messages.ConversationStatus_CONVERSATION_STATUS_ENDED:
	default:
		return Invalidf("fork %q with status %s", conv, req.GetStatus())
	}
	if err := ValidateMetadata(conv, req.GetSettings()); err != nil {
		return err
	}
	if err := ValidateMetadata(conv, req.GetMetadata()); err != nil {
		return err
	}
	if o := req.GetOrigin(); o != nil {
		if err := ValidateID("fork origin", o.GetConversationId()); err != nil {
			return err
		}
	}
	if n := proto.Size(req); n > MaxForkBytes {
		return Invalidf("fork %q of %d bytes exceeds %d", conv, n, MaxForkBytes)
	}
	return nil
}
