package lazarus

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/snapshot"
)

// RewindOptions are the options of Rewind. The zero value is a rewind with
// no reason recorded.
type RewindOptions struct {
	// Reason is recorded in the rewind event (History shows it); at most a
	// short text, empty by default.
	Reason string
	// Files also restores the files that server tools changed after
	// toSeq (through their agent.Checkpointer) to their state at toSeq:
	// each such file gets the content and the permission bits it had
	// before the first call after toSeq that changed it (exactly as
	// recorded, 0000 included), or is removed if it did not exist then (a
	// directory made in a file's place after toSeq goes once the recorded
	// files in it are removed; one that still holds a file no checkpoint
	// recorded stays, and the restore fails). It
	// needs Options.Files.Root (else the error wraps
	// agent.ErrNoCheckpoints and nothing is written). In a fork, only the
	// calls made in it count: the records of the calls it copied stay
	// with the source (see Fork). Default false: the files keep their
	// current content.
	Files bool
}

// Rewind moves the conversation's head back to toSeq: the model no longer
// sees the events after toSeq (its working set drops them), while the log
// keeps them: one atomic write appends a rewind event marking the span,
// and History still shows what happened (HistoryView marks the span).
// The log is never rewritten. toSeq 0 rewinds to the start.
//
// Every tool call still open in the rewound span is resolved in the same
// write as errored with code agent.CodeCanceled: its deadline no longer
// fires and a late Resolve or Reject of it gets an error wrapping
// journal.ErrStale; a server tool still running for such a call has its
// context cancelled once the rewind is durable, and what it returns is not
// recorded (its effect, if it had one, stays). A model call running when
// the rewind arrives is
// cancelled (subscribers get an Update with Restart set). A rewind owes no
// turn: the next Send starts one. Schedules (Schedule) are the
// conversation's, not its log's: a rewind leaves them, those made in the
// rewound span (by a schedule tool's call, say) too; CancelSchedule
// removes one.
//
// toSeq must be at most the last seq, on the current head (not in a span an
// earlier rewind skipped), and not a point where a tool call is open
// (between a call and its result); in a fork, not before the summary it
// copied;
// otherwise the error wraps journal.ErrInvalid and nothing is written, as
// for a reason that does not fit in an event (journal.MaxEventBytes) or is
// not UTF-8 (with the event's time and request id counted), and a scope
// whose identity agent.ValidateIdentity refuses; a refused rewind leaves
// the conversation as it was (a turn under way goes on: a model call
// running is not cancelled, as it is by a rewind written). An
// unknown conversation gets an error wrapping journal.ErrNotFound; a
// deleted one, journal.ErrDeleted where the Store reports tombstones. It
// returns once the rewind is durable. After ErrUnknownOutcome, read History
// before retrying (a repeated rewind appends another rewind event, with the
// same effect).
//
// A target the latest summary covers works: it is checked against the whole
// log (a read that grows with the log), and the model's context then starts
// from the latest summary at or before toSeq (or from the start). When a
// summary covering the target lands between that check and the rewind's
// turn, the core refuses the target it cannot check, and Rewind checks the
// log again and sends it again (a few times at most; then the refusal,
// wrapping journal.ErrInvalid, is returned and nothing is written).
//
// With opts.Files, the files are restored once the rewind is durable (see
// RewindWithReport, which also says which).
func (r *Runtime) Rewind(ctx context.Context, conversationID string, toSeq uint64, opts RewindOptions, scope agent.Scope) error {
	_, err := r.RewindWithReport(ctx, conversationID, toSeq, opts, scope)
	return err
}

// RewindWithReport is Rewind, and reports what it did to the files
// (RewindOptions.Files). The files are restored after the rewind is
// durable, one by one, each written beside its place and renamed over it
// (so a crash leaves a file whole, old or restored). The temporary file
// written beside it is named ".lazarus-restore-" and 16 hex digits; a
// restore that fails removes its own, and one that a crash left is removed
// by the next restore in its directory of a Runtime opened after the crash:
// repeating the rewind, as below, clears them. The first failure stops the
// restore and is returned with the report of the files already restored;
// a restore that Close interrupts returns an error wrapping ErrClosed.
// Restoring is idempotent: after a failure or a crash, repeat
// the rewind with the same target (a new call appends another rewind
// event, with the same effect, and restores the files again; the retries
// of one call, when its activation died before answering, write one). A server tool that still
// runs after the rewind (its call was cancelled and its context with it,
// but it may not have returned yet) can change a file again after its
// restore.
func (r *Runtime) RewindWithReport(ctx context.Context, conversationID string, toSeq uint64, opts RewindOptions, scope agent.Scope) (RewindReport, error) {
	op := fmt.Sprintf("lazarus: rewind %q to seq %d", clipID(conversationID), toSeq)
	if err := r.enter(ctx); err != nil {
		return RewindReport{}, fmt.Errorf("%s: %w", op, err)
	}
	if err := agent.ValidateIdentity(scope.Identity()); err != nil {
		return RewindReport{}, fmt.Errorf("%s: scope: %w", op, err)
	}
	if opts.Files && r.files == nil {
		return RewindReport{}, fmt.Errorf("%s: files: %w", op, agent.ErrNoCheckpoints)
	}
	// The reason goes into the rewind event: checked here, before the
	// conversation is asked (it checks the event again as it writes it,
	// with its time and request id).
	if err := journal.ValidateEvent(&messages.Event{Body: &messages.Event_Rewind{Rewind: &messages.Rewind{ToSeq: toSeq, Reason: opts.Reason}}}); err != nil {
		return RewindReport{}, fmt.Errorf("%s: reason: %w", op, err)
	}
	if err := r.checkConversation(ctx, "rewind", conversationID); err != nil {
		return RewindReport{}, err
	}
	seq, err := r.askRewindChecked(ctx, op, conversationID, &messages.AgentRewind{ToSeq: toSeq, Reason: opts.Reason, RequestId: newRequestID()}, toSeq, 0, scope)
	if err != nil {
		return RewindReport{}, err
	}
	if !opts.Files {
		return RewindReport{Seq: seq}, nil
	}
	files, err := r.files.restore(ctx, conversationID, toSeq)
	if err != nil {
		err = fmt.Errorf("%s: files: %w", op, err)
		if r.isClosed() && !errors.Is(err, ErrClosed) {
			// Close closed the files' root (or the Store) under the
			// restore: say so, as for any call in flight at Close.
			err = fmt.Errorf("%w: %w", err, ErrClosed)
		}
	}
	return RewindReport{Seq: seq, Files: files}, err
}

// Edit replaces the user message at seq with newText: one atomic write
// appends a rewind to seq-1 (the old message and everything after it leave
// what the model sees; the log keeps them, see Rewind) and the new message,
// and a turn follows, as after Send. It returns the new message's seq once
// the write is durable. Calls open after seq are cancelled as by Rewind.
// Files are left as they are (there is no RewindOptions.Files here): to
// put them back too, RewindWithReport to seq-1 with Files, then send the
// new text (two writes).
// If one of them is answered first (Resolve racing the edit), the answer
// wins: the edit fails with an error wrapping journal.ErrStale and writes
// nothing, and the turn goes on from the answer; a Rewind meets the same
// rule.
//
// seq must be a user message on the current head (one the newest summary
// covers works, checked as in Rewind), with no tool call open at seq-1;
// otherwise the error wraps
// journal.ErrInvalid and nothing is written. Unknown and deleted
// conversations fail as in Rewind; an empty newText, or one too large for
// its event (journal.MaxEventBytes, with the event's time, request id,
// author and address counted), wraps journal.ErrInvalid, and the
// conversation is left as it was, as by a refused Rewind. scope is the new message's author, as in Send; with
// named agents the new message is addressed as the one it replaces (its
// agent and audience), a summary covering it or not. The edit of a message
// addressed to an agent no longer in Options.Agents is refused as a send
// to it is: the error wraps ErrUnknownAgent and journal.ErrInvalid, and
// nothing is written.
func (r *Runtime) Edit(ctx context.Context, conversationID string, seq uint64, newText string, scope agent.Scope) (uint64, error) {
	op := fmt.Sprintf("lazarus: edit seq %d of %q", seq, clipID(conversationID))
	if err := r.enter(ctx); err != nil {
		return 0, fmt.Errorf("%s: %w", op, err)
	}
	msg := &messages.UserMessage{Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: newText}}}}
	if err := checkUserMessage(msg); err != nil {
		return 0, fmt.Errorf("%s: %w", op, err)
	}
	if err := agent.ValidateIdentity(scope.Identity()); err != nil {
		return 0, fmt.Errorf("%s: scope: %w", op, err)
	}
	rid := newRequestID()
	if err := journal.ValidateEvent(&messages.Event{RequestId: rid, Body: &messages.Event_UserMsg{UserMsg: msg}}); err != nil {
		return 0, fmt.Errorf("%s: %w", op, err)
	}
	if seq == 0 {
		return 0, fmt.Errorf("%s: %w", op, journal.Invalidf("seq 0 is no message"))
	}
	if err := r.checkConversation(ctx, "edit", conversationID); err != nil {
		return 0, err
	}
	if err := r.checkEditAgent(ctx, conversationID, seq); err != nil {
		return 0, r.callErr(op, err)
	}
	return r.askRewindChecked(ctx, op, conversationID, &messages.AgentRewind{EditSeq: seq, Message: msg, RequestId: rid, Reason: "edit"}, seq-1, seq, scope)
}

// checkEditAgent refuses the edit of the user message at seq when it is
// addressed to an agent the Runtime no longer has (ErrUnknownAgent, with
// journal.ErrInvalid): the new message, addressed as the one it replaces,
// would be one no agent answers, as a send to that agent is refused. Any
// other target is left to the conversation's checks.
func (r *Runtime) checkEditAgent(ctx context.Context, conversationID string, seq uint64) error {
	if seq == math.MaxUint64 {
		return nil // after any log: refused by the conversation
	}
	evs, err := r.store.Events(ctx, conversationID, journal.EventQuery{After: seq - 1, Before: seq + 1})
	if err != nil {
		return err
	}
	if len(evs) != 1 || evs[0].GetUserMsg() == nil {
		return nil
	}
	if a := evs[0].GetAgent(); a != "" && !r.HasAgent(a) {
		return fmt.Errorf("the message at seq %d is addressed to agent %q: %w (%w)", seq, clipID(a), ErrUnknownAgent, journal.ErrInvalid)
	}
	return nil
}

// rewindAttempts bounds the sends of one rewind or edit (see
// askRewindChecked).
const rewindAttempts = 3

// askRewindChecked sends the rewind to seq to (the edit of editSeq, if not
// 0) m, its target checked against the whole log when the latest summary
// covers it (actors.CheckRewindInLog; the core can check only what follows
// its summary). A summary that lands between that check and the command's
// turn makes the core refuse a target it cannot check (journal.ErrInvalid,
// nothing written): the log is checked again, and if a summary now covers
// the target the command goes again, checked, with the same request id (at
// most rewindAttempts sends). Any other refusal is returned as it is.
func (r *Runtime) askRewindChecked(ctx context.Context, op, conversationID string, m *messages.AgentRewind, to, editSeq uint64, scope agent.Scope) (uint64, error) {
	checked, edited, err := actors.CheckRewindInLog(ctx, r.store, conversationID, to, editSeq)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", op, err)
	}
	m.CheckedInLog = checked
	m.EditAgent, m.EditAudience = edited.GetAgent(), edited.GetAudience()
	for attempt := 1; ; attempt++ {
		seq, err := r.askRewind(ctx, op, conversationID, m, scope)
		if err == nil || m.GetCheckedInLog() || attempt == rewindAttempts || !errors.Is(err, journal.ErrInvalid) {
			return seq, err
		}
		// Refused unchecked: a summary may have landed over the target.
		checked, edited, cerr := actors.CheckRewindInLog(ctx, r.store, conversationID, to, editSeq)
		if cerr != nil || !checked {
			return seq, err // the core's refusal stands
		}
		m.CheckedInLog = true
		m.EditAgent, m.EditAudience = edited.GetAgent(), edited.GetAudience()
	}
}

func (r *Runtime) askRewind(ctx context.Context, op, conversationID string, m *messages.AgentRewind, scope agent.Scope) (uint64, error) {
	res, err := r.ask(ctx, conversationID, &actors.Command{Scope: scope, Msg: m})
	if err != nil {
		return 0, r.callErr(op, err)
	}
	seq, err := sendReplyOf(res)
	if err != nil {
		return 0, r.callErr(op, err)
	}
	return seq, nil
}

// HistoryOptions select the events HistoryView returns. The zero value is
// the whole log, newest page unbounded.
type HistoryOptions struct {
	// Before and Limit page as in History: the newest Limit entries (0:
	// all) with a seq below Before (0: no bound).
	Before uint64
	Limit  int
	// MaxBytes, when positive, bounds the entries by their events' sizes
	// (proto.Size, summed), as HistoryWithin bounds History's page: of the
	// newest Limit entries, the newest whose sizes sum to at most
	// MaxBytes, and one at least, so paging always gets on. A page cut
	// short by MaxBytes resumes as one cut by Limit, before the oldest seq
	// it holds. Default 0: no bound; a negative MaxBytes wraps
	// journal.ErrInvalid.
	MaxBytes int
	// Effective, if set, keeps only what the model's context is built
	// from: the events on the conversation's head, without those in spans
	// a rewind skipped and without the rewind events themselves. Events
	// that a summary covers are kept (the model sees the summary in their
	// place). Default false: the full log.
	Effective bool
	// Agent, if set, keeps only the events that agent sees: those that
	// belong to it or are shared with it (see Agent); with Effective, what
	// its model's context is built from. The agent must be known (see
	// AgentView). Default nil: every agent's.
	Agent *AgentView
}

// HistoryEntry is one event of HistoryView.
type HistoryEntry struct {
	// Event is the stored event.
	Event *messages.Event
	// Rewound is true for an event in a span a rewind skipped: it is in the
	// log, and the model no longer sees it. Never true with
	// HistoryOptions.Effective.
	Rewound bool
}

// HistoryView returns the conversation's history in ascending seq, each
// event marked as rewound or not, as opts selects: the full log or the
// effective view (what the model sees). It finds the head by walking the
// log back from its newest event (a rewind can skip any earlier span),
// reading the Store backwards a bounded page at a time (at most 512
// events and 16 MiB a read) and stopping once the page it returns is
// complete (Limit entries, or MaxBytes of them): it holds one read and
// the entries kept, never the whole log. Its cost grows with the events
// at and after the oldest entry it returns, and with those before it that
// the selection passes over (another agent's, say); the effective view
// does not read the spans its walk skips. History is the full log without
// the marks. A negative limit or MaxBytes wraps journal.ErrInvalid, and so
// does the view of an agent not in Options.Agents, with ErrUnknownAgent
// (see AgentView); an unknown conversation returns no entries; a deleted
// one, an error wrapping journal.ErrDeleted.
func (r *Runtime) HistoryView(ctx context.Context, conversationID string, opts HistoryOptions) ([]HistoryEntry, error) {
	op := fmt.Sprintf("lazarus: history of %q", clipID(conversationID))
	if err := r.enter(ctx); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if opts.Limit < 0 {
		return nil, fmt.Errorf("%s: %w", op, journal.Invalidf("negative limit"))
	}
	if opts.MaxBytes < 0 {
		return nil, fmt.Errorf("%s: %w", op, journal.Invalidf("negative max bytes"))
	}
	if err := r.checkView(opts.Agent); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if err := journal.ValidateID("conversation id", conversationID); err != nil {
		return nil, fmt.Errorf("lazarus: history: %w", err)
	}
	// inPage reports whether seq may be in the page (below opts.Before);
	// the events at or after it are read only for the head's walk.
	inPage := func(seq uint64) bool { return opts.Before == 0 || seq < opts.Before }
	var (
		out  []HistoryEntry // newest first
		size int
		walk headWalk
		next uint64 // the next read's Before; 0: the log's end
	)
read:
	for {
		q := journal.EventQuery{Before: next, Limit: historyPage, MaxBytes: r.viewPageBytes}
		last := false // the read ends the page, whatever it returns
		if opts.Before == 0 || (next != 0 && next <= opts.Before) {
			// Every event of the read is in the page but those the
			// selection leaves out: read no more than the page's bytes,
			// nor, but for an agent's (which may leave out most), more
			// events than it lacks.
			if opts.Limit > 0 && opts.Agent == nil {
				q.Limit = min(q.Limit, opts.Limit-len(out))
			}
			if opts.MaxBytes > 0 && opts.MaxBytes-size <= q.MaxBytes {
				q.MaxBytes = max(1, opts.MaxBytes-size)
				// The Store stops where the page's bytes do (one event
				// at least, which the cut below refuses if it does not
				// fit), unless the selection leaves some out.
				last = !opts.Effective && opts.Agent == nil
			}
		}
		evs, err := r.store.Events(ctx, conversationID, q)
		if err != nil {
			return nil, r.callErr(op, err)
		}
		if len(evs) == 0 {
			break
		}
		for i := len(evs) - 1; i >= 0; i-- {
			ev := evs[i]
			on := walk.step(ev)
			if !inPage(ev.GetSeq()) || (opts.Effective && (!on || ev.GetRewind() != nil)) ||
				(opts.Agent != nil && !snapshot.VisibleTo(ev, opts.Agent.Name)) {
				continue
			}
			n := proto.Size(ev)
			if opts.MaxBytes > 0 && len(out) > 0 && size+n > opts.MaxBytes {
				break read
			}
			size += n
			out = append(out, HistoryEntry{Event: ev, Rewound: !on})
			if opts.Limit > 0 && len(out) == opts.Limit {
				break read
			}
		}
		if last && len(evs) < q.Limit {
			break // cut by the page's bytes, or the log's start
		}
		// The next read ends before the oldest event read, and skips what
		// neither the page nor the walk needs: past the walk's position,
		// the events at or after opts.Before (all of them for the
		// effective view, which keeps only the head).
		next = evs[0].GetSeq()
		switch {
		case opts.Effective:
			next = min(next, walk.pos+1)
		case opts.Before != 0:
			next = min(next, max(opts.Before, walk.pos+1))
		}
		if next <= 1 {
			break
		}
	}
	if len(out) == 0 {
		// No entries: a new conversation, an empty page, or a deleted
		// one, which says so.
		if err := r.deleted(ctx, conversationID); err != nil {
			return nil, fmt.Errorf("%s: %w", op, err)
		}
		return nil, nil
	}
	slices.Reverse(out)
	return out, nil
}

// headWalk marks the events of a log that are on the head, given newest
// first, the log's newest event first of all: walking back from the
// newest, a rewind jumps the walk to its target (see the snapshot
// package). The events between the walk's position and the last one given
// are off the head, so a caller may leave them out.
type headWalk struct {
	started bool
	pos     uint64 // the seq of the next event on the head; 0: none
}

// step reports whether ev, the event before the last one stepped, is on
// the head.
func (w *headWalk) step(ev *messages.Event) bool {
	if !w.started {
		w.started, w.pos = true, ev.GetSeq()
	}
	if ev.GetSeq() != w.pos {
		return false
	}
	if rw := ev.GetRewind(); rw != nil && rw.GetToSeq() < w.pos {
		w.pos = rw.GetToSeq()
	} else {
		w.pos--
	}
	return true
}
