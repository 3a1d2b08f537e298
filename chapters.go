package lazarus

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// Chapter is a page of History cut by summary: the events after one
// summary, up to the page's end. Chapters read from the newest backwards
// follow the summaries, each page saying which summary covers the events
// before it.
type Chapter struct {
	// Summary covers the events before Events (its FromSeq..ToSeq); nil
	// for the first chapter, which starts at seq 1.
	Summary *messages.Summary
	// Events are the log's events after Summary's ToSeq up to the page's
	// end, in ascending seq, rewinds and rewound spans included (as in
	// History).
	Events []*messages.Event
	// Prev is the before of the previous chapter (pass it to Chapters);
	// 0 when there is none: this is the first chapter, or the events
	// before it are not in the log (a fork's log starts after the summary
	// it copied). For a chapter Cut, it is the before of the rest of this
	// chapter: its oldest event's seq.
	Prev uint64
	// Cut is true when ChaptersWithin's bound cut the chapter: Events are
	// its newest events, not all those after Summary, and the next page
	// (Prev) holds the rest of it, with the same Summary. Never true of
	// Chapters.
	Cut bool
}

// Chapters returns the chapter that ends just before seq before (before 0:
// the newest chapter, up to the last seq): the latest summary whose ToSeq
// is below the page's last seq, and the events after it up to that seq.
// Page backwards with Chapter.Prev. Its cost is that of the chapter's
// events, not of the log. Chapters are the conversation's, not one
// agent's (there is no agent filter, unlike HistoryOptions.Agent): with
// named agents a chapter holds every agent's events, and its summary
// record each named agent's summary at the same seq (Summary.Agents);
// snapshot.VisibleTo keeps the events of one agent's view. A conversation
// without events returns an empty chapter; a deleted one, an error wrapping
// journal.ErrDeleted. A page before a fork's first event (the events its
// copied summary covers are not in its log) is an error wrapping
// journal.ErrInvalid.
func (r *Runtime) Chapters(ctx context.Context, conversationID string, before uint64) (Chapter, error) {
	return r.ChaptersWithin(ctx, conversationID, before, 0)
}

// ChaptersWithin is Chapters bounded by bytes, as HistoryWithin bounds
// History: of the chapter's events, it returns the newest whose encoded
// sizes (proto.Size) sum to at most maxBytes, and one at least, so paging
// always gets on, and the bound reaches the Store's read
// (journal.EventQuery.MaxBytes). A chapter cut short says so
// (Chapter.Cut), and its Prev resumes it before the oldest event it holds.
// maxBytes 0 is Chapters' (no bound); a negative maxBytes wraps
// journal.ErrInvalid.
func (r *Runtime) ChaptersWithin(ctx context.Context, conversationID string, before uint64, maxBytes int) (Chapter, error) {
	op := fmt.Sprintf("lazarus: chapter of %q before seq %d", clipID(conversationID), before)
	if err := r.enter(ctx); err != nil {
		return Chapter{}, fmt.Errorf("%s: %w", op, err)
	}
	if err := journal.ValidateID("conversation id", conversationID); err != nil {
		return Chapter{}, fmt.Errorf("%s: %w", op, err)
	}
	if maxBytes < 0 {
		return Chapter{}, fmt.Errorf("%s: %w", op, journal.Invalidf("negative max bytes"))
	}
	end := before - 1
	if before == 0 {
		last, err := r.store.LastSeq(ctx, conversationID)
		if err != nil {
			return Chapter{}, r.callErr(op, err)
		}
		end = last
	}
	if end == 0 {
		return Chapter{}, r.deleted(ctx, conversationID)
	}
	sum, err := r.store.SummaryBefore(ctx, conversationID, end)
	switch {
	case errors.Is(err, journal.ErrNotFound):
		sum = nil
	case err != nil:
		return Chapter{}, r.callErr(op, err)
	}
	q := journal.EventQuery{After: sum.GetToSeq(), Before: end + 1, MaxBytes: maxBytes}
	if maxBytes > 0 {
		q.Limit = math.MaxInt // the newest, as the pages before it follow
	}
	evs, err := r.store.Events(ctx, conversationID, q)
	if err != nil {
		return Chapter{}, r.callErr(op, err)
	}
	if maxBytes > 0 && len(evs) > 0 && evs[0].GetSeq() > sum.GetToSeq()+1 {
		// Cut by the bound: the rest of the chapter is before the
		// oldest event read (the log is contiguous from the summary's
		// end, a fork's from the summary it copied).
		return Chapter{Summary: sum, Events: evs, Prev: evs[0].GetSeq(), Cut: true}, nil
	}
	if len(evs) == 0 {
		if err := r.deleted(ctx, conversationID); err != nil {
			return Chapter{}, fmt.Errorf("%s: %w", op, err)
		}
		// No event up to end in a log that holds some: a fork's log,
		// which starts after the summary it copied, asked for a page
		// before its first event.
		last, err := r.store.LastSeq(ctx, conversationID)
		if err != nil {
			return Chapter{}, r.callErr(op, err)
		}
		if last > 0 {
			return Chapter{}, fmt.Errorf("%s: %w", op, journal.Invalidf("the log holds no event up to seq %d (a fork's log starts after the summary it copied)", end))
		}
	}
	ch := Chapter{Summary: sum, Events: evs}
	if sum != nil {
		// The previous chapter ends at the summary's ToSeq, if the log
		// holds that event (a fork's log does not hold what its first
		// summary covers).
		at, err := r.store.Events(ctx, conversationID, journal.EventQuery{After: sum.GetToSeq() - 1, Before: sum.GetToSeq() + 1})
		if err != nil {
			return Chapter{}, r.callErr(op, err)
		}
		if len(at) > 0 {
			ch.Prev = sum.GetToSeq() + 1
		}
	}
	return ch, nil
}
