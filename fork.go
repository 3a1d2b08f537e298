package lazarus

import (
	"context"
	"errors"
	"fmt"

	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/snapshot"
)

// Fork creates the conversation newID whose history is the effective
// history of conversationID up to atSeq: what the model saw at atSeq, with
// the spans earlier rewinds skipped left out as they are in the source.
// The copy shares nothing mutable with the source: deleting either later
// leaves the other whole, and each goes on on its own.
//
// The copy starts from the latest summary that ends before atSeq (so that
// at least the event at atSeq is copied), is on the head at atSeq (a
// summary of a span a rewind skipped is passed over for an earlier one)
// and ends inside no tool call, and copies that summary and the events after it, unchanged
// and with their seqs; the events the summary covers are not copied. So its
// cost is that of the events after the summary, not of the whole log, and
// the new conversation's History starts after the summary (Chapters says
// which summary covers the events before). The new conversation gets the
// source's settings and metadata, and its row names the source and atSeq
// (Conversation.ForkedFrom); tool call rows, deadlines, schedules
// (Schedule), audit rows and file checkpoints are not copied (a rewind of the new conversation with
// RewindOptions.Files restores only what its own calls changed). It is made in one atomic Store write (journal.Forks): a crash
// leaves all of it or none of it.
//
// atSeq must be on the source's log (1 <= atSeq <= its last seq) and not a
// point where a tool call is open (between a call and its result, as for
// Rewind): a fork owes no tool call, so fork before the call or after its
// result; otherwise the error wraps journal.ErrInvalid, as it does when the
// summary and events copied encode to more than journal.MaxForkBytes (a
// history after its latest summary written in many appends; nothing is
// written, and the source's events are read only up to that bound, not
// whole). When the history at
// atSeq owes a turn, as the conversation's core decides it
// (actors.OwesTurn: it ends with a user message or a tool result; with
// named agents, an agent's last own event is a message or a handoff to it,
// or a result of its call), the new conversation is ACTIVE and Fork wakes
// it, so the turn runs (as resume does after a restart). Otherwise it is
// IDLE, and its next Send starts a turn.
//
// An unknown source wraps journal.ErrNotFound, a deleted one
// journal.ErrDeleted; a newID that exists wraps journal.ErrExists, one that
// was deleted journal.ErrDeleted; an invalid id wraps journal.ErrInvalid,
// as does metadata that, merged over what newID already holds without a
// row (MergeMetadata), exceeds journal.MaxRecordBytes.
// Nothing is written in these cases. It returns once the copy is durable.
func (r *Runtime) Fork(ctx context.Context, conversationID string, atSeq uint64, newID string) error {
	return r.ForkWith(ctx, conversationID, atSeq, newID, ForkOptions{})
}

// ForkOptions are the options of ForkWith. The zero value is Fork's.
type ForkOptions struct {
	// Metadata is merged over the source's metadata in the fork's own
	// write (a key here replaces the source's value; an empty value
	// removes the key, from the source's copy and from any metadata the
	// new id held without a row), so the new conversation never shows the source's
	// value of a key set here, not even for a moment (an owner, say).
	// Keys and the merged size are checked as by MergeMetadata. Default:
	// nil, the source's metadata as it is.
	Metadata map[string]string
}

// ForkWith is Fork with options (ForkOptions).
func (r *Runtime) ForkWith(ctx context.Context, conversationID string, atSeq uint64, newID string, opts ForkOptions) error {
	op := fmt.Sprintf("lazarus: fork %q at seq %d into %q", clipID(conversationID), atSeq, clipID(newID))
	if err := r.enter(ctx); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if err := journal.ValidateID("new conversation id", newID); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if err := journal.ValidateMetadata(newID, opts.Metadata); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if err := r.checkConversation(ctx, "fork", conversationID); err != nil {
		return err
	}
	if atSeq == 0 {
		return fmt.Errorf("%s: %w", op, journal.Invalidf("seq 0 holds no history"))
	}
	last, err := r.store.LastSeq(ctx, conversationID)
	if err != nil {
		return r.callErr(op, err)
	}
	if atSeq > last {
		return fmt.Errorf("%s: %w", op, journal.Invalidf("seq %d is after the last seq %d", atSeq, last))
	}
	sum, evs, ws, err := forkPoint(ctx, r.store, conversationID, atSeq, journal.MaxForkBytes)
	if err != nil {
		return r.callErr(op, err)
	}
	if err := ws.CheckRewind(atSeq); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	row, err := r.store.Conversation(ctx, conversationID)
	if err != nil {
		return r.callErr(op, err)
	}
	md, err := r.store.Metadata(ctx, conversationID)
	if err != nil {
		return r.callErr(op, err)
	}
	if len(opts.Metadata) > 0 {
		md = journal.MergeSettings(md, opts.Metadata)
		if err := journal.ValidateMetadata(newID, md); err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
		// A key removed here is passed on empty, so the Store removes it
		// from metadata newID may hold without a row too.
		for k, v := range opts.Metadata {
			if v == "" {
				md[k] = ""
			}
		}
	}
	status := messages.ConversationStatus_CONVERSATION_STATUS_IDLE
	owed := actors.OwesTurn(ws, r.agentNames())
	if owed {
		status = messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE
	}
	req := &messages.ForkRequest{
		ConversationId: newID,
		Summary:        sum,
		Events:         evs,
		Status:         status,
		Settings:       row.GetSettings(),
		Metadata:       md,
		Origin:         &messages.ForkOrigin{ConversationId: conversationID, Seq: atSeq},
	}
	if err := r.store.Fork(ctx, req); err != nil {
		return r.callErr(op, err)
	}
	if owed {
		// The turn the copy owes runs now; if the wake fails, the resume
		// scan of the next Open runs it (the row is ACTIVE).
		if err := r.wake(ctx, newID, false); err != nil {
			r.log.Warn("fork: waking the new conversation failed; the next resume runs its turn", "conversation", newID, "err", err)
		}
	}
	return nil
}

// forkPoint reads what a fork at atSeq copies: the latest summary with
// ToSeq < atSeq that is on the head at atSeq and ends inside no tool call
// (actors.SummaryCutsACall; nil if none), the events after it up to
// atSeq, and the working set they make. A rewind on the head
// that goes below a summary makes it read again from an earlier one, so
// the cost is that of the events after the summary it ends with. Each read
// of events stops at maxBytes (journal.EventQuery.MaxBytes): events that
// encode to more make a ForkRequest over journal.MaxForkBytes, refused
// (journal.ErrInvalid) before the rest is read.
func forkPoint(ctx context.Context, store journal.Store, id string, atSeq uint64, maxBytes int) (*messages.Summary, []*messages.Event, *snapshot.WorkingSet, error) {
	below := atSeq
	for {
		sum, err := store.SummaryBefore(ctx, id, below)
		switch {
		case errors.Is(err, journal.ErrNotFound):
			sum = nil
		case err != nil:
			return nil, nil, nil, err
		}
		from := sum.GetToSeq()
		evs, err := store.Events(ctx, id, journal.EventQuery{After: from, Before: atSeq + 1, MaxBytes: maxBytes})
		if err != nil {
			return nil, nil, nil, err
		}
		if uint64(len(evs)) != atSeq-from || (len(evs) > 0 && evs[0].GetSeq() != from+1) {
			// The source was deleted meanwhile, or is a fork whose log
			// starts after a summary the head at atSeq does not pass, or
			// the read stopped at maxBytes.
			if _, err := store.Conversation(ctx, id); err != nil {
				return nil, nil, nil, err
			}
			if len(evs) > 0 && evs[0].GetSeq() == from+1 && evs[len(evs)-1].GetSeq() < atSeq {
				// An earlier summary would copy more still.
				return nil, nil, nil, journal.Invalidf("the events after seq %d up to seq %d encode to more than %d bytes, more than a fork copies", from, atSeq, maxBytes)
			}
			if len(evs) > 0 {
				return nil, nil, nil, journal.Invalidf("the history at seq %d is not in the log (it starts at seq %d)", atSeq, evs[0].GetSeq())
			}
			return nil, nil, nil, journal.Invalidf("the history at seq %d is not in the log (it starts after it)", atSeq)
		}
		ws, err := snapshot.Rebuild(sum, evs)
		if err != nil {
			return nil, nil, nil, err
		}
		if t, rewound := ws.RewoundPastSummary(); rewound && sum != nil {
			below = t + 1
			continue
		}
		if sum != nil {
			// One that ends inside a call (not the runtime's: an
			// import's or one put by hand) would hide the call from
			// ws.CheckRewind and from the fork.
			cut, err := actors.SummaryCutsACall(ctx, store, id, sum, evs)
			if err != nil {
				return nil, nil, nil, err
			}
			if cut {
				below = sum.GetToSeq()
				continue
			}
		}
		return sum, evs, ws, nil
	}
}

// DefaultFindPage is the page size of Find when limit is 0.
const DefaultFindPage = 100

// Find returns the ids of up to limit conversations (limit 0 means
// DefaultFindPage) whose metadata holds key with exactly value (set with
// MergeMetadata; a title under the key "name" is the common case), ordered
// by id, after cursor ("" for the first page), and the cursor of the next
// page ("" when there is none). It reads the Store's metadata index
// (journal.MetadataIndex), so its cost depends on the page and the
// conversations holding the pair, not on the number of conversations. An
// invalid key or cursor, or a negative limit, wraps journal.ErrInvalid; an
// empty value finds nothing. An id left with metadata and no conversation
// row (a crash between the two writes that create a conversation with
// metadata, RELIABILITY.md's known gaps) is listed too; the server and the
// lazarus command leave such ids out by reading each row.
func (r *Runtime) Find(ctx context.Context, key, value, cursor string, limit int) ([]string, string, error) {
	if err := r.enter(ctx); err != nil {
		return nil, "", fmt.Errorf("lazarus: find %q: %w", clipID(key), err)
	}
	ids, next, err := r.store.FindConversations(ctx, key, value, cursor, limit)
	if err != nil {
		return nil, "", r.callErr(fmt.Sprintf("lazarus: find %q", clipID(key)), err)
	}
	return ids, next, nil
}

// End ends the conversation: its row's status becomes ENDED, written by its
// actor in order with its other writes. Later Send, SendMessage, Edit,
// Rewind and Configure calls fail with an error wrapping journal.ErrEnded
// and write nothing; History, Subscribe, Metadata and Delete work as before; an
// ended conversation is not resumed after a restart and runs no turn, not
// even on an explicit Wake. Ending is for good: there is no call to reopen
// a conversation (Fork it to go on from its history).
//
// A conversation is ended at rest: while a turn runs or is owed, or a tool
// call is open, End fails with an error wrapping journal.ErrInvalid and
// writes nothing (end it once the turn is over, after rejecting what is
// pending). An End that meets a write in flight (right after SendAndWait
// returns, the turn's last write may still be on its way to the actor)
// waits for it, and is decided as if it arrived once it landed; a Send,
// Rewind, Edit or Configure that arrived while it waited is then queued to
// be written, and End fails as above (journal.ErrInvalid), saying so.
// Ending an ended conversation succeeds. Unknown and deleted conversations
// fail as in Rewind. It returns once the status is durable.
func (r *Runtime) End(ctx context.Context, conversationID string) error {
	op := fmt.Sprintf("lazarus: end %q", clipID(conversationID))
	if err := r.enter(ctx); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if err := r.checkConversation(ctx, "end", conversationID); err != nil {
		return err
	}
	res, err := r.ask(ctx, conversationID, &actors.Command{Scope: agent.SystemScope, Msg: &messages.EndConversation{}})
	if err != nil {
		return r.callErr(op, err)
	}
	if err := agentReplyErr(res); err != nil {
		return r.callErr(op, err)
	}
	return nil
}
