package pebblejournal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/snapshot"
)

// maxCheckProblems bounds the problems a CheckReport lists; the rest are
// only counted.
const maxCheckProblems = 1000

// CheckReport is what Check found. The store is sound when Problems is
// empty.
type CheckReport struct {
	// Conversations, Events, ToolCalls and Deadlines count the records
	// read.
	Conversations, Events, ToolCalls, Deadlines int
	// Problems describes each piece of damage found, one line each, at most
	// maxCheckProblems of them.
	Problems []string
	// More counts the problems found beyond those listed.
	More int
}

// Sound reports whether Check found no damage.
func (r *CheckReport) Sound() bool { return len(r.Problems) == 0 && r.More == 0 }

// AddProblem records one more problem found by a check outside Check
// (lazarus check adds its own): listed, or only counted in More once
// Problems holds its bound.
func (r *CheckReport) AddProblem(p string) { r.problem("%s", p) }

func (r *CheckReport) problem(format string, args ...any) {
	if len(r.Problems) == maxCheckProblems {
		r.More++
		return
	}
	r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
}

// convCheck is what Check learns of one conversation.
type convCheck struct {
	row       *messages.Conversation
	tombstone bool
	lastSeq   uint64            // last event seq seen, 0 if none
	first     uint64            // first event seq seen, 0 if none
	summaries map[uint64]uint64 // FromSeq of its summaries, by ToSeq
	gap       bool              // a gap was reported already
	calls     map[string]uint64 // tool call ids of its tool_call events, with their seqs
	pending   map[string]bool   // ids of its pending rows
	owed      map[string]bool   // ids of its pending rows (pending loses those indexed)
	indexed   bool              // the active index lists it
}

// Check verifies the whole store, meant for a store no runtime is using
// (lazarus check): every block is read (Pebble verifies its checksum),
// every record decodes and agrees with its key, every log is gap-free from
// seq 1 (or from the summary a fork copied), no fsm_state is ahead of its log, every summary lies inside
// its log and ends where no tool call is open (snapshot's rule, as import
// and a revival apply it: snapshot.CallTracker on the log, and
// snapshot.CutFinder for the summary a fork's log starts after), every tool_call event has its row and every row its owner entry,
// the pending index lists exactly the pending rows, the active index
// exactly the ACTIVE rows, and the two deadline indexes agree with each
// other and name pending calls, and the file checkpoints agree with their
// blobs (files.go: checkFiles). Damage goes into
// the report; the error is for a check that could not run (a closed store,
// ctx done).
func (s *Store) Check(ctx context.Context) (*CheckReport, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	defer s.end()
	r := &CheckReport{}
	convs := map[string]*convCheck{}
	conv := func(id string) *convCheck {
		c := convs[id]
		if c == nil {
			c = &convCheck{calls: map[string]uint64{}, pending: map[string]bool{}}
			convs[id] = c
		}
		return c
	}
	family := func(fam byte, fn func(k, v []byte)) error {
		err := s.scan([]byte{fam}, familyEnd(fam), func(k, v []byte) error {
			fn(k, v)
			return ctx.Err()
		})
		if ctxErr := ctx.Err(); ctxErr != nil {
			return fmt.Errorf("pebblejournal: check: %w", ctxErr)
		}
		if err != nil {
			r.problem("%s records: unreadable, the rest of the family was not checked: %v", famName(fam), err)
		}
		return nil
	}
	// convID splits famX | conv | rest.
	convID := func(k []byte) (string, []byte, bool) {
		id, rest, ok := decodeID(k[1:])
		if !ok {
			r.problem("malformed %s key %s", famName(k[0]), keyString(k))
		}
		return id, rest, ok
	}

	steps := []struct {
		fam byte
		fn  func(k, v []byte)
	}{
		{famConv, func(k, v []byte) {
			id, _, ok := convID(k)
			if !ok {
				return
			}
			row, err := decodeConversation(k, v, id)
			if err != nil {
				r.problem("%v", err)
				return
			}
			r.Conversations++
			conv(id).row = row
		}},
		{famTombstone, func(k, _ []byte) {
			if id, _, ok := convID(k); ok {
				conv(id).tombstone = true
			}
		}},
		{famEvent, func(k, v []byte) {
			id, _, ok := convID(k)
			if !ok {
				return
			}
			c := conv(id)
			ev, err := decodeEvent(k, v, convKey(famEvent, id))
			if err != nil {
				r.problem("%v", err)
				return
			}
			r.Events++
			if c.first == 0 {
				// A fork's log starts after its summary: checked at the end.
				c.first, c.lastSeq = ev.GetSeq(), ev.GetSeq()-1
			}
			if seq := ev.GetSeq(); seq != c.lastSeq+1 && !c.gap {
				c.gap = true
				r.problem("conversation %q: the log has a gap: seq %d where %d should be", id, seq, c.lastSeq+1)
			}
			c.lastSeq = ev.GetSeq()
			if tc := ev.GetToolCall(); tc != nil {
				c.calls[tc.GetCall().GetId()] = ev.GetSeq()
			}
		}},
		{famSummary, func(k, v []byte) {
			id, _, ok := convID(k)
			if !ok {
				return
			}
			sum, err := decodeSummary(k, v, convKey(famSummary, id))
			if err != nil {
				r.problem("%v", err)
				return
			}
			if conv(id).summaries == nil {
				conv(id).summaries = map[uint64]uint64{}
			}
			conv(id).summaries[sum.GetToSeq()] = sum.GetFromSeq()
			if last := conv(id).lastSeq; sum.GetToSeq() > last {
				r.problem("conversation %q: summary to seq %d is beyond the log's last seq %d", id, sum.GetToSeq(), last)
			}
		}},
		{famToolCall, func(k, v []byte) {
			id, rest, ok := convID(k)
			if !ok {
				return
			}
			call, _, ok := decodeID(rest)
			if !ok {
				r.problem("malformed tool call key %s", keyString(k))
				return
			}
			rec, err := decodeToolCall(k, v, id, call)
			if err != nil {
				r.problem("%v", err)
				return
			}
			r.ToolCalls++
			c := conv(id)
			if rec.GetStatus() == messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING {
				c.pending[call] = true
				if c.owed == nil {
					c.owed = map[string]bool{}
				}
				c.owed[call] = true
			}
			if rs := rec.GetResultSeq(); rs > c.lastSeq {
				r.problem("tool call %q of conversation %q: its result is in event %d, beyond the log's last seq %d", call, id, rs, c.lastSeq)
			}
			owner, found, err := s.checkGet(ownerKey(call))
			switch {
			case err != nil:
				r.problem("tool call %q: owner entry unreadable: %v", call, err)
			case !found:
				r.problem("tool call %q of conversation %q: no owner entry", call, id)
			case string(owner) != id:
				r.problem("tool call %q of conversation %q: the owner entry names %q", call, id, owner)
			}
		}},
		{famPending, func(k, _ []byte) {
			id, rest, ok := convID(k)
			if !ok {
				return
			}
			call, _, ok := decodeID(rest)
			if !ok {
				r.problem("malformed pending key %s", keyString(k))
				return
			}
			c := conv(id)
			if !c.pending[call] {
				r.problem("conversation %q: pending index lists tool call %q, whose row is missing or not pending", id, call)
			}
			delete(c.pending, call) // what is left lacks an entry
		}},
		{famActive, func(k, v []byte) {
			id, rest, ok := convID(k)
			if !ok {
				return
			}
			if len(rest) != 0 || len(v) != 0 {
				r.problem("malformed active-conversation key %s (or a value where none belongs)", keyString(k))
				return
			}
			conv(id).indexed = true
		}},
		{famDeadline, func(k, v []byte) {
			id, rest, ok := convID(k)
			if !ok {
				return
			}
			call, _, ok := decodeID(rest)
			if !ok {
				r.problem("malformed deadline key %s", keyString(k))
				return
			}
			d, err := decodeDeadline(k, v, id, call)
			if err != nil {
				r.problem("%v", err)
				return
			}
			r.Deadlines++
			if _, found, err := s.checkGet(byTimeKey(d.GetAt(), call, id)); err != nil || !found {
				r.problem("deadline of tool call %q (conversation %q): missing from the by-time index (%v)", call, id, err)
			}
		}},
		{famSchedule, func(k, v []byte) {
			id, rest, ok := convID(k)
			if !ok {
				return
			}
			s.checkSchedule(r, k, v, id, rest)
		}},
		{famScheduleByTime, func(k, _ []byte) { s.checkScheduleTime(r, k) }},
		{famDeadlineByTime, func(k, _ []byte) {
			_, call, id, err := parseByTimeKey(k)
			if err != nil {
				r.problem("%v", err)
				return
			}
			if _, found, err := s.checkGet(idKey(famDeadline, id, call)); err != nil || !found {
				r.problem("by-time deadline of tool call %q (conversation %q): no deadline record (%v)", call, id, err)
			}
		}},
	}
	for _, st := range steps {
		if err := family(st.fam, st.fn); err != nil {
			return nil, err
		}
	}
	for id, c := range convs {
		for call := range c.pending {
			r.problem("conversation %q: pending tool call %q is missing from the pending index", id, call)
		}
		switch active := isActive(c.row); {
		case c.indexed && c.row == nil:
			r.problem("conversation %q: the active index lists it, but it has no row", id)
		case c.indexed && !active:
			r.problem("conversation %q: the active index lists it, but its row is %v", id, c.row.GetStatus())
		case active && !c.indexed:
			r.problem("conversation %q: its row is ACTIVE, but it is missing from the active index", id)
		}
		if _, base := c.summaries[c.first-1]; c.first > 1 && !base {
			r.problem("conversation %q: the log has a gap: seq %d where 1 should be (and no summary ends at seq %d, as for a fork)", id, c.first, c.first-1)
		}
		if c.tombstone && (c.row != nil || c.lastSeq > 0) {
			r.problem("conversation %q: deleted, but records remain", id)
		}
		if c.row == nil && !c.tombstone && c.lastSeq > 0 {
			r.problem("conversation %q: events without a conversation row", id)
		}
		// A cache behind its log is only stale; ahead of it, events are
		// missing from the end of the log.
		if fs := c.row.GetFsmState(); fs != nil && fs.GetLastSeq() > c.lastSeq {
			r.problem("conversation %q: fsm_state says last seq %d, the log ends at %d", id, fs.GetLastSeq(), c.lastSeq)
		}
		for call, seq := range c.calls {
			if from := c.row.GetForkedFrom(); from != nil && seq <= from.GetSeq() {
				continue // copied by a fork: its row is the source's
			}
			if _, found, err := s.checkGet(idKey(famToolCall, id, call)); err != nil || !found {
				r.problem("conversation %q: tool_call event %q has no row (%v)", id, call, err)
			}
		}
	}
	for id, c := range convs {
		if err := s.checkCuts(ctx, r, id, c); err != nil {
			return nil, err
		}
	}
	if err := s.checkFiles(ctx, r); err != nil {
		return nil, err
	}
	return r, nil
}

// checkCuts reports each summary of conversation id that ends inside a
// tool call, by snapshot's rule: one that ends in its log as
// snapshot.CallTracker decides it, reading the log from its start; the
// summary a fork copied, which its log starts just after, as a revival
// decides it (snapshot.CutFinder: the events after it and the calls the
// conversation owes). It reads the log again, one conversation at a time,
// and only that of a conversation with a summary; a log with a gap is not
// read (the gap is reported).
func (s *Store) checkCuts(ctx context.Context, r *CheckReport, id string, c *convCheck) error {
	if len(c.summaries) == 0 || c.lastSeq == 0 || c.tombstone {
		return nil
	}
	if _, base := c.summaries[c.first-1]; c.gap || c.first > 1 && !base {
		r.problem("conversation %q: its summaries could not be checked for open tool calls: the log has a gap", id)
		return nil
	}
	var open snapshot.CallTracker
	var base snapshot.CutFinder
	undecodable := false
	err := s.scan(convKey(famEvent, id), convEnd(famEvent, id), func(k, v []byte) error {
		ev, err := decodeEvent(k, v, convKey(famEvent, id))
		if err != nil {
			undecodable = true // reported by the first read
			return errStopScan
		}
		open.Add(ev)
		if c.first > 1 {
			base.Add(ev)
		}
		return ctx.Err()
	})
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("pebblejournal: check: %w", ctxErr)
	}
	if undecodable {
		err = errUndecodable
	}
	if err != nil {
		r.problem("conversation %q: its summaries could not be checked for open tool calls: %v", id, err)
		return nil
	}
	for _, to := range slices.Sorted(maps.Keys(c.summaries)) {
		from := c.summaries[to]
		if to < c.first {
			if to != c.first-1 {
				continue // before a fork's copied summary: not in its log
			}
			owed := maps.Clone(c.owed)
			for call := range c.row.GetFsmState().GetPending() {
				if owed == nil {
					owed = map[string]bool{}
				}
				owed[call] = true
			}
			if base.Cuts(owed) {
				r.problem("conversation %q: the summary of seq %d..%d it starts from (a fork's copy) ends inside a tool call: a call issued at or before seq %d is answered or owed after it (a summary ends where no tool call is open; a revival passes it over)",
					id, from, to, to)
			}
			continue
		}
		if calls := open.At(to); len(calls) > 0 {
			r.problem("conversation %q: summary of seq %d..%d ends inside tool call %q, issued at seq %d and not answered by seq %d (a summary ends where no tool call is open; a revival passes it over)",
				id, from, to, calls[0].ID, calls[0].Seq, to)
		}
	}
	return nil
}

// errUndecodable: checkCuts met an event that does not decode (the first
// read reported it).
var errUndecodable = errors.New("an event does not decode")

// checkGet reads one key for Check: its value (a copy), whether it exists.
func (s *Store) checkGet(k []byte) ([]byte, bool, error) {
	var out []byte
	found, err := s.get(k, func(v []byte) error {
		out = bytes.Clone(v)
		return nil
	})
	return out, found, err
}
