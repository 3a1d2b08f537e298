package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"time"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/snapshot"
	"google.golang.org/protobuf/proto"
)

// exporter writes the format to w, counting its lines for the trailer.
type exporter struct {
	w     *bufio.Writer
	enc   *json.Encoder
	lines uint64
	convs uint64
	// bytes counts what was encoded, for progress.
	bytes int64
	prog  *progress
	// page is how many events it reads at a time (default exportPage).
	page uint64
}

// countingWriter counts the bytes written through it.
type countingWriter struct {
	w io.Writer
	n *int64
}

func (c countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	*c.n += int64(n)
	return n, err
}

// newExporter writes the header to w. The caller ends with finish.
func newExporter(w io.Writer, prog *progress) (*exporter, error) {
	e := &exporter{w: bufio.NewWriterSize(w, 64<<10), prog: prog, page: exportPage}
	e.enc = json.NewEncoder(countingWriter{w: e.w, n: &e.bytes})
	e.enc.SetEscapeHTML(false)
	return e, e.encode(envelope{Type: typeHeader, Format: formatName, Version: formatVersion})
}

func (e *exporter) encode(env envelope) error {
	if err := e.enc.Encode(env); err != nil {
		return err
	}
	e.lines++
	e.prog.update(e.lines, e.bytes)
	return nil
}

func (e *exporter) line(typ, conv string, m proto.Message) error {
	rec, err := protoJSON(m)
	if err != nil {
		return fmt.Errorf("encode %s of %q: %w", typ, conv, err)
	}
	return e.encode(envelope{Type: typ, Conversation: &conv, Record: rec})
}

func (e *exporter) plain(typ string, conv *string, v any) error {
	rec, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return e.encode(envelope{Type: typ, Conversation: conv, Record: rec})
}

// finish writes the trailer and flushes.
func (e *exporter) finish() error {
	if err := e.plain(typeTrailer, nil, trailerRecord{Conversations: ptr(e.convs), Lines: ptr(e.lines)}); err != nil {
		return err
	}
	return e.w.Flush()
}

// exportPage is how many events export reads at a time.
const exportPage = 1024

// testHookExportPage, if set (by tests only, before the command runs), is
// called by export with its context between two pages of events.
var testHookExportPage func(ctx context.Context)

// damaged is the error of a conversation export finds inconsistent: an
// export of it would be refused by import, so export refuses it first.
func damaged(id, format string, args ...any) error {
	return fmt.Errorf("conversation %s is damaged in the store (%s); run 'lazarus check': %w",
		displayID(id), fmt.Sprintf(format, args...), journal.ErrCorrupt)
}

// conversation streams one conversation in the order the format
// documents, holding one page of events at a time (and its schedules, at
// most journal.MaxSchedulesPerConversation). deadlines are the
// conversation's, sorted by tool call id. It checks what import will
// check: the log runs 1..LastSeq (a fork's from just after the summary it
// copied, which is written before its events, to LastSeq, which is not
// before its origin's seq), fsm_state.last_seq is at most LastSeq
// (a cache behind the log is what a turn in progress leaves), every
// tool_call event has its row (of this conversation; a fork's copied ones,
// up to its origin's seq, have theirs in the source and none is written), every pending row
// has its event, no tool_result event answers a call whose row is
// pending, every deadline is of a row of this conversation, and
// every schedule is valid and of this conversation; a
// failed check is an error wrapping journal.ErrCorrupt, and the output
// then has no end line for the conversation, so import refuses it. A
// summary that ends inside a tool call (a Store takes one put by hand;
// the runtime never writes one, and a revival passes it over) is left
// out, as import would refuse it; a fork's copied summary that does (as
// a revival decides it, snapshot.CutFinder) cannot be left out, its log
// starting after it, and is damage.
// The conversation may be written meanwhile: export holds its log up to
// the last seq of the state consistentState read, with that state's row,
// pending calls' rows, deadlines and schedules, and summaries up to that
// seq.
func (e *exporter) conversation(ctx context.Context, st journal.Store, id string, deadlines []*messages.Deadline) error {
	snap, err := consistentState(ctx, st, id, deadlines)
	if err != nil {
		return err
	}
	row, md, last, pending := snap.row, snap.metadata, snap.last, snap.pending
	deadlines = snap.deadlines
	if fsm := row.GetFsmState(); fsm != nil && fsm.GetLastSeq() > last {
		return damaged(id, "its fsm_state says the log ends at seq %d, the log ends at %d", fsm.GetLastSeq(), last)
	}
	// Summaries, ascending: walk down collecting their seqs only; each is
	// read again when written, so at most one summary is held.
	var tos []uint64
	for sum, err := st.LatestSummary(ctx, id); ; sum, err = st.SummaryBefore(ctx, id, sum.GetToSeq()) {
		if errors.Is(err, journal.ErrNotFound) {
			break
		}
		if err != nil {
			return err
		}
		if sum.GetToSeq() <= last {
			// One written after the state was read may cover events
			// past the exported prefix.
			tos = append(tos, sum.GetToSeq())
		}
	}
	slices.Reverse(tos)
	// A fork's log starts after the summary it copied (its base), or at 1
	// if it copied none; its copied tool_call events (up to its origin's
	// seq) have no rows in it.
	var start, copied uint64
	origin := row.GetForkedFrom()
	if origin != nil {
		if start, err = forkStart(ctx, st, id, tos); err != nil {
			return err
		}
		copied = origin.GetSeq()
		if copied <= start || copied > last {
			return damaged(id, "it is a fork of %s at seq %d, and its log holds seqs %d..%d", displayID(origin.GetConversationId()), copied, start+1, last)
		}
	}
	unseen := map[string]*messages.ToolCallRecord{}
	for _, p := range pending {
		unseen[p.GetId()] = p
	}
	var n counts
	exportedPending := map[string]bool{} // calls whose row was written pending
	if err := e.line(typeConversation, id, row); err != nil {
		return err
	}
	for _, k := range slices.Sorted(maps.Keys(md)) {
		if err := e.plain(typeMetadata, &id, metadataRecord{Key: &k, Value: ptr(md[k])}); err != nil {
			return err
		}
		n.metadata++
	}
	if start > 0 {
		// A fork's base summary comes before its events.
		if err := e.summary(ctx, st, id, start); err != nil {
			return err
		}
		tos = tos[1:]
		n.summaries++
		n.lastSeq = start
	}
	var open snapshot.CallTracker
	var baseCut snapshot.CutFinder // the events after a fork's base
	for n.lastSeq < last {
		before := pageEnd(n.lastSeq, e.page)
		if before == 0 || before > last+1 {
			before = last + 1
		}
		evs, err := st.Events(ctx, id, journal.EventQuery{After: n.lastSeq, Before: before})
		if err != nil {
			return err
		}
		if len(evs) == 0 {
			break
		}
		if n.lastSeq > start && testHookExportPage != nil {
			testHookExportPage(ctx)
		}
		for _, ev := range evs {
			if ev.GetSeq() != n.lastSeq+1 {
				return damaged(id, "its log jumps from seq %d to %d", n.lastSeq, ev.GetSeq())
			}
			n.lastSeq = ev.GetSeq()
			if tr := ev.GetToolResult(); tr != nil && exportedPending[tr.GetToolCallId()] {
				return damaged(id, "tool_result event %d answers call %s, whose row is pending", ev.GetSeq(), displayID(tr.GetToolCallId()))
			}
			if err := e.line(typeEvent, id, ev); err != nil {
				return err
			}
			open.Add(ev)
			baseCut.Add(ev)
			tc := ev.GetToolCall()
			if tc == nil || ev.GetSeq() <= copied {
				// A copied call's row is its source's.
				continue
			}
			call := tc.GetCall().GetId()
			// A call pending in the state read is exported as it was
			// then (it may be resolved since, by a write past the
			// prefix); any other row is terminal, and stays as it is.
			rec, err := unseen[call], error(nil)
			if rec == nil {
				rec, err = st.ToolCall(ctx, call)
			}
			switch {
			case errors.Is(err, journal.ErrNotFound):
				return damaged(id, "tool_call event %d names call %s, which has no row", ev.GetSeq(), displayID(call))
			case err != nil:
				return err
			case rec.GetConversationId() != id:
				return damaged(id, "tool_call event %d names call %s, whose row is of conversation %s", ev.GetSeq(), displayID(call), displayID(rec.GetConversationId()))
			}
			if err := e.line(typeToolCall, id, rec); err != nil {
				return err
			}
			if rec.GetStatus() == messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING {
				exportedPending[call] = true
			}
			delete(unseen, call)
			n.toolCalls++
		}
	}
	if n.lastSeq != last {
		return damaged(id, "its log ends at seq %d, its last seq is %d", n.lastSeq, last)
	}
	if len(unseen) > 0 {
		return damaged(id, "pending call %s has no tool_call event", displayID(slices.Min(slices.Collect(maps.Keys(unseen)))))
	}
	if start > 0 {
		// The base cannot be left out (the log starts after it), and
		// import refuses it if it ends inside a tool call, decided as a
		// revival decides it: the events after it, and the calls the
		// fork owes (its rows written pending, its fsm_state's pending).
		owed := maps.Clone(exportedPending)
		for call := range row.GetFsmState().GetPending() {
			if owed == nil {
				owed = map[string]bool{}
			}
			owed[call] = true
		}
		if baseCut.Cuts(owed) {
			return damaged(id, "the summary up to seq %d that it copied as a fork, which its log starts after, ends inside a tool call: a call issued at or before seq %d is answered or owed after it, and import refuses it", start, start)
		}
	}
	for _, to := range tos {
		if len(open.At(to)) > 0 {
			continue
		}
		if err := e.summary(ctx, st, id, to); err != nil {
			return err
		}
		n.summaries++
	}
	for _, d := range deadlines {
		rec, err := st.ToolCall(ctx, d.GetToolCallId())
		if err != nil && !errors.Is(err, journal.ErrNotFound) {
			return err
		}
		if err != nil || rec.GetConversationId() != id {
			return damaged(id, "deadline of %s, which is no tool call of the conversation", displayID(d.GetToolCallId()))
		}
		if err := e.line(typeDeadline, id, d); err != nil {
			return err
		}
		n.deadlines++
	}
	if err := e.schedules(id, snap.schedules, &n); err != nil {
		return err
	}
	if err := e.plain(typeEnd, &id, n.record()); err != nil {
		return err
	}
	e.convs++
	return nil
}

// exportState is what export reads of a conversation before its log: its
// row, metadata, last seq, pending calls' rows, deadlines and schedules,
// as they were at one moment.
type exportState struct {
	row       *messages.Conversation
	metadata  map[string]string
	last      uint64
	pending   []*messages.ToolCallRecord
	deadlines []*messages.Deadline
	schedules []*messages.Schedule
}

// exportAttempts bounds the reads of a conversation's state that a writer
// may spoil before export gives up on it.
const exportAttempts = 50

// consistentState reads the state of conversation id that its export
// holds, consistent with its log up to the last seq read, however the
// conversation is written meanwhile: it reads the last seq, the row, the
// pending calls (and deadlines), the metadata and the schedules, then the
// row, the pending calls, the schedules and the last seq again, and keeps
// the first reading whose second read is the same. Every write that
// changes one of them without an event either resolves or reschedules a
// pending call (the pending rows differ), rewrites the row (it differs)
// or puts or deletes a schedule (they differ), and a pending call comes
// only with its event, as does an occurrence of a schedule (its message
// and its schedule's next, in one write): so at the second read of the
// row, the log ended at the last seq, the row, the pending calls and the
// schedules were those read (none fired past the log read), and so were
// the deadlines (read between, which change only with the pending calls;
// deadlines is the Store's, read before, used while it agrees with the
// pending rows). A conversation written between each of exportAttempts
// readings is an error wrapping journal.ErrConflict.
func consistentState(ctx context.Context, st journal.Store, id string, deadlines []*messages.Deadline) (exportState, error) {
	var s exportState
	for attempt := 1; ; attempt++ {
		var err error
		if s.last, err = st.LastSeq(ctx, id); err != nil {
			return s, err
		}
		if s.row, err = st.Conversation(ctx, id); err != nil {
			if noConversation(err) {
				return s, fmt.Errorf("no conversation %s: %w (%w)", displayID(id), journal.ErrNotFound, err)
			}
			return s, err
		}
		if s.pending, err = st.PendingToolCalls(ctx, id); err != nil {
			return s, err
		}
		if !deadlinesAgree(s.pending, deadlines) {
			dls, err := deadlinesOf(ctx, st, []string{id})
			if err != nil {
				return s, err
			}
			deadlines = dls[id]
		}
		s.deadlines = deadlines
		if s.metadata, err = st.Metadata(ctx, id); err != nil {
			return s, err
		}
		if s.schedules, err = schedulesOf(ctx, st, id); err != nil {
			return s, err
		}
		row, err := st.Conversation(ctx, id)
		if err != nil {
			return s, err
		}
		pending, err := st.PendingToolCalls(ctx, id)
		if err != nil {
			return s, err
		}
		schedules, err := schedulesOf(ctx, st, id)
		if err != nil {
			return s, err
		}
		last, err := st.LastSeq(ctx, id)
		if err != nil {
			return s, err
		}
		if last == s.last && proto.Equal(row, s.row) && protosEqual(pending, s.pending) && protosEqual(schedules, s.schedules) {
			return s, nil
		}
		if attempt == exportAttempts {
			return s, fmt.Errorf("conversation %s was written during each of %d readings of its state; export it again when it is less busy: %w", displayID(id), exportAttempts, journal.ErrConflict)
		}
		// Let the writer finish what it is at before reading again.
		t := time.NewTimer(time.Duration(attempt) * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return s, ctx.Err()
		case <-t.C:
		}
	}
}

// protosEqual says whether a and b hold equal messages in the same order.
func protosEqual[M proto.Message](a, b []M) bool {
	return slices.EqualFunc(a, b, func(x, y M) bool { return proto.Equal(x, y) })
}

// schedulesOf returns the schedules of conversation id, none if st keeps
// none (no journal.ScheduleStore).
func schedulesOf(ctx context.Context, st journal.Store, id string) ([]*messages.Schedule, error) {
	ss, ok := st.(journal.ScheduleStore)
	if !ok {
		return nil, nil
	}
	return ss.ConversationSchedules(ctx, id)
}

// deadlinesAgree says whether ds are the deadlines of the pending calls
// that have one, at their rows' times.
func deadlinesAgree(pending []*messages.ToolCallRecord, ds []*messages.Deadline) bool {
	at := make(map[string]*messages.Deadline, len(ds))
	for _, d := range ds {
		at[d.GetToolCallId()] = d
	}
	n := 0
	for _, p := range pending {
		if p.GetDeadline() == nil {
			continue
		}
		n++
		if d := at[p.GetId()]; d == nil || !proto.Equal(d.GetAt(), p.GetDeadline()) {
			return false
		}
	}
	return n == len(ds)
}

// summary writes the conversation's summary up to seq to.
func (e *exporter) summary(ctx context.Context, st journal.Store, id string, to uint64) error {
	sum, err := st.SummaryBefore(ctx, id, to+1)
	if err != nil {
		return err
	}
	if sum.GetToSeq() != to {
		return damaged(id, "its summary up to seq %d is gone", to)
	}
	return e.line(typeSummary, id, sum)
}

// forkStart returns the seq a fork's log starts after: 0 if it holds seq
// 1, else the to_seq of its lowest summary (tos, ascending), which is the
// summary it copied. No other summary may cover less: import would refuse
// it (and a runtime writes none).
func forkStart(ctx context.Context, st journal.Store, id string, tos []uint64) (uint64, error) {
	evs, err := st.Events(ctx, id, journal.EventQuery{Before: 2})
	if err != nil {
		return 0, err
	}
	if len(evs) > 0 {
		return 0, nil
	}
	if len(tos) == 0 {
		return 0, damaged(id, "it is a fork whose log does not start at seq 1, and it has no summary")
	}
	return tos[0], nil
}

// schedules writes the conversation's pending schedules all (as
// consistentState read them), by id, and counts them in n. A schedule
// import would refuse (one of another conversation, or one that breaks
// journal.ValidateSchedule) is an error wrapping journal.ErrCorrupt.
func (e *exporter) schedules(id string, all []*messages.Schedule, n *counts) error {
	if len(all) > journal.MaxSchedulesPerConversation {
		return damaged(id, "it has %d schedules, more than %d", len(all), journal.MaxSchedulesPerConversation)
	}
	// By id as Go compares strings, which import checks, whatever order
	// the Store's index keeps.
	slices.SortFunc(all, func(a, b *messages.Schedule) int { return cmp.Compare(a.GetId(), b.GetId()) })
	for i, sc := range all {
		switch {
		case sc.GetConversationId() != id:
			return damaged(id, "its schedule %s names conversation %s", displayID(sc.GetId()), displayID(sc.GetConversationId()))
		case i > 0 && all[i-1].GetId() == sc.GetId():
			return damaged(id, "its schedule %s is listed twice", displayID(sc.GetId()))
		}
		if err := journal.ValidateSchedule(sc); err != nil {
			return damaged(id, "its schedule %s: %v", displayID(sc.GetId()), err)
		}
		if err := e.line(typeSchedule, id, sc); err != nil {
			return err
		}
		n.schedules++
	}
	return nil
}

// deadlinesOf reads every deadline of the Store once and returns those of
// the conversations ids, each sorted by tool call id. The Store has no
// per-conversation deadline read, so this costs one pass over all
// scheduled deadlines (one per pending human call).
func deadlinesOf(ctx context.Context, st journal.Store, ids []string) (map[string][]*messages.Deadline, error) {
	want := make(map[string]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	out := map[string][]*messages.Deadline{}
	err := st.Deadlines(ctx, time.Time{}, func(d *messages.Deadline) error {
		if want[d.GetConversationId()] {
			out[d.GetConversationId()] = append(out[d.GetConversationId()], d)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, ds := range out {
		slices.SortFunc(ds, func(a, b *messages.Deadline) int { return cmp.Compare(a.GetToolCallId(), b.GetToolCallId()) })
	}
	return out, nil
}

// exportTo writes the conversations ids of st to w.
func exportTo(ctx context.Context, st journal.Store, ids []string, w io.Writer, prog *progress) error {
	return exportPaged(ctx, st, ids, w, prog, exportPage)
}

// exportPaged is exportTo reading page events at a time.
func exportPaged(ctx context.Context, st journal.Store, ids []string, w io.Writer, prog *progress, page uint64) error {
	dls, err := deadlinesOf(ctx, st, ids)
	if err != nil {
		return err
	}
	e, err := newExporter(w, prog)
	if err != nil {
		return err
	}
	e.page = page
	for _, id := range ids {
		if err := e.conversation(ctx, st, id, dls[id]); err != nil {
			return deletedMeanwhile(ctx, st, id, err)
		}
	}
	return e.finish()
}

// deletedMeanwhile returns err, the error of the export of conversation
// id, unless it is one a delete of the conversation during its export
// causes (its log or rows gone part-way, which export takes for damage,
// journal.ErrCorrupt, or a Store's journal.ErrDeleted) and the
// conversation is gone now: then an error that says so, wrapping
// journal.ErrNotFound, as the export of a conversation the Store does not
// have.
func deletedMeanwhile(ctx context.Context, st journal.Store, id string, err error) error {
	if !errors.Is(err, journal.ErrCorrupt) && !errors.Is(err, journal.ErrDeleted) {
		return err
	}
	_, cerr := st.Conversation(ctx, id)
	if !noConversation(cerr) {
		return err
	}
	return fmt.Errorf("conversation %s was deleted while it was exported: %w (%w)", displayID(id), journal.ErrNotFound, cerr)
}
