package crash

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/snapshot"
)

// checkInput is what the invariant check knows besides the store.
type checkInput struct {
	// convs are the conversations the workload writes; any other
	// conversation in the store is a violation.
	convs []string
	// ledger holds what was acknowledged. Nil: nothing to compare.
	ledger *ledger
	// side holds the recorded runs of the work tool. Nil: no side file.
	side []sideRecord
	// final: the run has settled; every call must have its result, and
	// every conversation must end with the model's final answer.
	final bool
	// keys: tool calls carry the workload's decision keys (workloadModel);
	// check that each decision is in the log once.
	keys bool
}

// verdict is the outcome of one check.
type verdict struct {
	violations []string
	// events is how many stored events were read and checked; acks how
	// many acknowledged facts were compared with them.
	events, acks int
	// redispatches counts tool call ids whose work ran in more than one
	// process: a call re-dispatched after a crash, under the same id.
	redispatches int
	// summaries counts the summaries checked.
	summaries int
}

const maxViolations = 60

func (v *verdict) fail(format string, args ...any) {
	if len(v.violations) == maxViolations {
		v.violations = append(v.violations, "... (more violations not listed)")
	}
	if len(v.violations) < maxViolations {
		v.violations = append(v.violations, fmt.Sprintf(format, args...))
	}
}

func (v *verdict) String() string {
	return fmt.Sprintf("%d violations:\n  %s", len(v.violations), strings.Join(v.violations, "\n  "))
}

// callFacts is what the logs say about one tool call.
type callFacts struct {
	conv        string
	ev          *messages.ToolCallEvent
	seq         uint64 // of the tool_call event
	issuedAt    uint64 // of the assistant_msg naming it (0 if none)
	results     []*messages.ToolResultEvent
	resultSeq   uint64
	resolutions []*messages.Resolution
}

// verifyStore checks every invariant of RELIABILITY.md that the store's
// contents can show, against what was acknowledged:
//
//   - every acknowledged event (Send's user_msg, every event a subscriber
//     saw) is present with the same content; seqs run 1..n with no gap;
//   - every tool call has one row, in its conversation, with at most one
//     tool_result and one resolution in the log, which agree with the row;
//     a pending human call has its deadline and no deadline outlives its
//     call; an acknowledged answer was the only one and is the row's;
//   - a model decision appears in the log once, with one tool call id, and
//     the work tool ran only for ids the log holds, for each decision under
//     one id, never twice in one process;
//   - the index of ACTIVE conversations lists exactly the ACTIVE rows;
//   - every summary covers 1..ToSeq with ToSeq <= the last seq and ends
//     where no call is open; revival (LoadSince) equals a full replay cut
//     at the same summary.
func verifyStore(ctx context.Context, s journal.Store, in checkInput) *verdict {
	v := &verdict{}
	want := map[string]bool{}
	for _, c := range in.convs {
		want[c] = true
	}
	rows := map[string]*messages.Conversation{}
	for cursor := ""; ; {
		page, next, err := s.ListConversations(ctx, cursor, 100)
		if err != nil {
			v.fail("ListConversations: %v", err)
			return v
		}
		for _, r := range page {
			rows[r.GetId()] = r
			if !want[r.GetId()] {
				v.fail("conversation %q is in the store but the workload never wrote it", r.GetId())
			}
		}
		if next == "" {
			break
		}
		cursor = next
	}
	// The index Open resumes from lists exactly the ACTIVE rows: it is
	// written in the same atomic write as the status, so no kill can split
	// them.
	listed := map[string]bool{}
	for cursor := ""; ; {
		page, next, err := s.ListActiveConversations(ctx, cursor, 100)
		if err != nil {
			v.fail("ListActiveConversations: %v", err)
			return v
		}
		for _, id := range page {
			listed[id] = true
			if want[id] && rows[id].GetStatus() != messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE {
				v.fail("conversation %q is in the active index but its row is %v", id, rows[id].GetStatus())
			}
		}
		if next == "" {
			break
		}
		cursor = next
	}
	for id, r := range rows {
		if want[id] && r.GetStatus() == messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE && !listed[id] {
			v.fail("conversation %q is ACTIVE but missing from the active index", id)
		}
	}
	deadlines := map[string]*messages.Deadline{}
	err := s.Deadlines(ctx, time.Time{}, func(d *messages.Deadline) error {
		if _, dup := deadlines[d.GetToolCallId()]; dup {
			v.fail("tool call %s has two deadlines", d.GetToolCallId())
		}
		deadlines[d.GetToolCallId()] = d
		return nil
	})
	if err != nil {
		v.fail("Deadlines: %v", err)
		return v
	}

	calls := map[string]*callFacts{} // every tool call of every log, by id
	keys := map[string]string{}      // decision key -> tool call id, from the logs
	usedDeadlines := map[string]bool{}
	for _, conv := range in.convs {
		v.checkConversation(ctx, s, conv, rows[conv], in, calls, keys, deadlines, usedDeadlines)
	}
	for id, d := range deadlines {
		if !usedDeadlines[id] {
			v.fail("deadline of tool call %s (conversation %q) outlives its pending call", id, d.GetConversationId())
		}
	}
	if in.ledger != nil {
		for id, statuses := range in.ledger.resolves {
			v.acks += len(statuses)
			if calls[id] == nil {
				v.fail("tool call %s was answered (acknowledged) but no log holds it", id)
			}
		}
	}
	if in.side != nil {
		v.checkSide(in.side, calls)
	}
	return v
}

func (v *verdict) checkConversation(ctx context.Context, s journal.Store, conv string, row *messages.Conversation, in checkInput,
	calls map[string]*callFacts, keys map[string]string, deadlines map[string]*messages.Deadline, usedDeadlines map[string]bool) {
	evs, err := s.Events(ctx, conv, journal.EventQuery{})
	if err != nil {
		v.fail("conversation %q: Events: %v", conv, err)
		return
	}
	v.events += len(evs)
	for i, ev := range evs {
		if ev.GetSeq() != uint64(i+1) {
			v.fail("conversation %q: event %d has seq %d: the log has a gap or is out of order", conv, i, ev.GetSeq())
			return
		}
	}
	last := uint64(len(evs))
	if last > 0 && row == nil {
		v.fail("conversation %q has %d events but no conversation row", conv, last)
	}

	// Acknowledged facts.
	if in.ledger != nil {
		for seq, h := range in.ledger.events[conv] {
			v.acks++
			switch {
			case seq > last:
				v.fail("conversation %q: acknowledged event %d is missing (the log ends at %d)", conv, seq, last)
			case eventHash(evs[seq-1]) != h:
				v.fail("conversation %q: event %d differs from the one a subscriber saw", conv, seq)
			}
		}
		for _, a := range in.ledger.sends[conv] {
			v.acks++
			if a.seq == 0 || a.seq > last {
				v.fail("conversation %q: acknowledged send %s at seq %d is missing (the log ends at %d)", conv, a.requestID, a.seq, last)
				continue
			}
			if ev := evs[a.seq-1]; ev.GetUserMsg() == nil || ev.GetRequestId() != a.requestID {
				v.fail("conversation %q: seq %d is not the acknowledged send %s", conv, a.seq, a.requestID)
			}
		}
	}

	// What the log says about each tool call.
	var order []string
	for i, ev := range evs {
		seq := ev.GetSeq()
		switch {
		case ev.GetAssistantMsg() != nil:
			tcs := ev.GetAssistantMsg().GetToolCalls()
			for j, tc := range tcs {
				k := i + 1 + j
				if k >= len(evs) || evs[k].GetToolCall().GetCall().GetId() != tc.GetId() || tc.GetId() == "" {
					v.fail("conversation %q: assistant_msg %d names call %d (%q) but event %d is not its tool_call", conv, seq, j, tc.GetId(), k+1)
				}
			}
		case ev.GetToolCall() != nil:
			tc := ev.GetToolCall()
			id := tc.GetCall().GetId()
			if prev := calls[id]; prev != nil {
				v.fail("tool call id %s appears twice in the logs (%q seq %d, %q seq %d)", id, prev.conv, prev.seq, conv, seq)
				continue
			}
			f := &callFacts{conv: conv, ev: tc, seq: seq}
			for j := i - 1; j >= 0; j-- {
				if am := evs[j].GetAssistantMsg(); am != nil {
					f.issuedAt = evs[j].GetSeq()
					break
				}
			}
			calls[id] = f
			order = append(order, id)
			if key := callKey(tc.GetCall().GetArguments()); key != "" && in.keys {
				if !strings.HasPrefix(key, hexID(conv)+".") {
					v.fail("conversation %q: call %s carries decision key %s of another conversation", conv, id, key)
				}
				if other, ok := keys[key]; ok {
					v.fail("decision %s is in the log twice, as calls %s and %s: the model was asked again for a decision it had made", key, other, id)
				}
				keys[key] = id
			}
		case ev.GetToolResult() != nil:
			tr := ev.GetToolResult()
			f := calls[tr.GetToolCallId()]
			if f == nil || f.conv != conv {
				v.fail("conversation %q: tool_result %d for call %s, which it never issued", conv, seq, tr.GetToolCallId())
				continue
			}
			f.results = append(f.results, tr)
			f.resultSeq = seq
		case ev.GetResolution() != nil:
			r := ev.GetResolution()
			f := calls[r.GetToolCallId()]
			if f == nil || f.conv != conv {
				v.fail("conversation %q: resolution %d for call %s, which it never issued", conv, seq, r.GetToolCallId())
				continue
			}
			if len(f.results) > 0 {
				v.fail("conversation %q: resolution %d of call %s comes after its tool_result", conv, seq, r.GetToolCallId())
			}
			f.resolutions = append(f.resolutions, r)
		case ev.GetSuspension() != nil:
			for _, p := range ev.GetSuspension().GetPending() {
				f := calls[p.GetToolCallId()]
				if f == nil || f.conv != conv || f.ev.GetExecutor() != messages.Executor_EXECUTOR_HUMAN || len(f.results) > 0 {
					v.fail("conversation %q: suspension %d waits on %s, which is not an open human call", conv, seq, p.GetToolCallId())
				}
			}
		}
	}

	var acked map[string][]string
	if in.ledger != nil {
		acked = in.ledger.resolves
	}
	for _, id := range order {
		v.checkCall(ctx, s, id, calls[id], in.final, acked, deadlines, usedDeadlines)
	}
	pending, err := s.PendingToolCalls(ctx, conv)
	if err != nil {
		v.fail("conversation %q: PendingToolCalls: %v", conv, err)
	}
	for _, p := range pending {
		if f := calls[p.GetId()]; f == nil || f.conv != conv || len(f.results) > 0 {
			v.fail("conversation %q: row %s is pending but the log has no open call for it", conv, p.GetId())
		}
	}

	v.checkSummaries(ctx, s, conv, evs, calls)

	if in.final {
		if len(pending) > 0 {
			v.fail("conversation %q: %d calls still pending after the run settled", conv, len(pending))
		}
		if last > 0 {
			if am := evs[last-1].GetAssistantMsg(); am == nil || len(am.GetToolCalls()) > 0 {
				v.fail("conversation %q: after the run settled the log ends in a %s, not the model's final answer", conv, eventType(evs[last-1]))
			}
		}
		if row != nil && row.GetStatus() != messages.ConversationStatus_CONVERSATION_STATUS_IDLE {
			v.fail("conversation %q: status %v after the run settled", conv, row.GetStatus())
		}
	}
}

func (v *verdict) checkCall(ctx context.Context, s journal.Store, id string, f *callFacts, final bool,
	acked map[string][]string, deadlines map[string]*messages.Deadline, usedDeadlines map[string]bool) {
	human := f.ev.GetExecutor() == messages.Executor_EXECUTOR_HUMAN
	switch {
	case len(f.results) > 1:
		v.fail("call %s (conversation %q) has %d tool_results", id, f.conv, len(f.results))
	case len(f.results) == 0 && final:
		v.fail("call %s (conversation %q) never got its tool_result", id, f.conv)
	}
	if len(f.resolutions) > 1 {
		v.fail("call %s (conversation %q) was resolved %d times in the log", id, f.conv, len(f.resolutions))
	}
	if !human && len(f.resolutions) > 0 {
		v.fail("server call %s (conversation %q) has a resolution event", id, f.conv)
	}
	if human && len(f.results) == 1 && len(f.resolutions) != 1 {
		v.fail("human call %s (conversation %q) has a tool_result but %d resolutions", id, f.conv, len(f.resolutions))
	}
	row, err := s.ToolCall(ctx, id)
	if err != nil {
		v.fail("call %s (conversation %q): its row: %v", id, f.conv, err)
		return
	}
	if row.GetConversationId() != f.conv || row.GetExecutor() != f.ev.GetExecutor() || row.GetName() != f.ev.GetCall().GetName() {
		v.fail("call %s: row says %q/%v/%s, the log %q/%v/%s", id, row.GetConversationId(), row.GetExecutor(), row.GetName(),
			f.conv, f.ev.GetExecutor(), f.ev.GetCall().GetName())
	}
	status := row.GetStatus()
	terminal := journal.IsTerminal(status)
	if len(f.results) == 1 {
		if !terminal {
			v.fail("call %s (conversation %q) has its tool_result in the log but its row is %v", id, f.conv, status)
		} else if !proto.Equal(row.GetResult(), f.results[0].GetOutcome()) {
			v.fail("call %s (conversation %q): the row's result differs from the log's tool_result", id, f.conv)
		}
	}
	if len(f.resolutions) == 1 && f.resolutions[0].GetStatus() != status {
		v.fail("call %s (conversation %q): resolved %v in the log, %v in its row", id, f.conv, f.resolutions[0].GetStatus(), status)
	}
	if human {
		_, hasDeadline := deadlines[id]
		switch {
		case status == messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING && !hasDeadline:
			v.fail("pending human call %s (conversation %q) has no deadline: it would never expire", id, f.conv)
		case status != messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING && hasDeadline:
			v.fail("call %s (conversation %q) is %v but still has a deadline", id, f.conv, status)
		}
		if hasDeadline {
			usedDeadlines[id] = true
		}
	}
	statuses := acked[id]
	if len(statuses) > 1 {
		v.fail("call %s (conversation %q) was answered successfully %d times (%v): more than one resolver won", id, f.conv, len(statuses), statuses)
	}
	if len(statuses) >= 1 && statuses[0] != status.String() {
		v.fail("call %s (conversation %q): the acknowledged answer was %s but the row is %v", id, f.conv, statuses[0], status)
	}
}

// checkSummaries checks every summary of conv against its log, and that
// revival from the latest one equals a full replay.
func (v *verdict) checkSummaries(ctx context.Context, s journal.Store, conv string, evs []*messages.Event, calls map[string]*callFacts) {
	last := uint64(len(evs))
	sum, err := s.LatestSummary(ctx, conv)
	if err != nil && !errors.Is(err, journal.ErrNotFound) {
		v.fail("conversation %q: LatestSummary: %v", conv, err)
		return
	}
	latest := sum
	for n := 0; sum != nil && n < 100000; n++ {
		v.summaries++
		if sum.GetFromSeq() < 1 || sum.GetFromSeq() > sum.GetToSeq() || sum.GetToSeq() > last {
			v.fail("conversation %q: summary %d..%d covers events that do not exist (the log ends at %d)", conv, sum.GetFromSeq(), sum.GetToSeq(), last)
		} else {
			to := sum.GetToSeq()
			for id, f := range calls {
				if f.conv != conv {
					continue
				}
				issued := f.seq
				if f.issuedAt > 0 && f.issuedAt < issued {
					issued = f.issuedAt
				}
				if issued <= to && (len(f.results) == 0 || f.resultSeq > to) {
					v.fail("conversation %q: summary ending at %d cuts call %s open (issued at %d, result at %d)", conv, to, id, issued, f.resultSeq)
				}
			}
		}
		prev, err := s.SummaryBefore(ctx, conv, sum.GetToSeq())
		if errors.Is(err, journal.ErrNotFound) {
			break
		}
		if err != nil {
			v.fail("conversation %q: SummaryBefore(%d): %v", conv, sum.GetToSeq(), err)
			break
		}
		if prev.GetToSeq() >= sum.GetToSeq() {
			v.fail("conversation %q: SummaryBefore(%d) returned ToSeq %d", conv, sum.GetToSeq(), prev.GetToSeq())
			break
		}
		sum = prev
	}

	// Revival equals full replay.
	ls, levs, err := s.LoadSince(ctx, conv)
	if err != nil {
		v.fail("conversation %q: LoadSince: %v", conv, err)
		return
	}
	if !proto.Equal(ls, latest) {
		v.fail("conversation %q: LoadSince's summary is not the latest summary", conv)
	}
	revived, err := snapshot.Rebuild(ls, levs)
	if err != nil {
		v.fail("conversation %q: revival from LoadSince: %v", conv, err)
		return
	}
	replay, err := snapshot.Rebuild(nil, evs)
	if err != nil {
		v.fail("conversation %q: full replay: %v", conv, err)
		return
	}
	if ls != nil && ls.GetToSeq() <= replay.LastSeq {
		if err := replay.Compact(ls); err != nil {
			v.fail("conversation %q: full replay cut at the summary: %v", conv, err)
			return
		}
	}
	if revived.LastSeq != replay.LastSeq {
		v.fail("conversation %q: revival ends at %d, full replay at %d", conv, revived.LastSeq, replay.LastSeq)
	}
	a, b := revived.Render(), replay.Render()
	same := len(a) == len(b)
	for i := 0; same && i < len(a); i++ {
		same = proto.Equal(a[i], b[i])
	}
	if !same {
		v.fail("conversation %q: revival renders %d events, full replay %d, and they differ", conv, len(a), len(b))
	}
	if x, y := openIDs(revived), openIDs(replay); x != y {
		v.fail("conversation %q: revival owes calls [%s], full replay [%s]", conv, x, y)
	}
}

func openIDs(w *snapshot.WorkingSet) string {
	var ids []string
	for _, c := range w.OpenCalls() {
		ids = append(ids, c.GetCall().GetId())
	}
	return strings.Join(ids, " ")
}

// checkSide checks the recorded runs of the work tool against the logs.
func (v *verdict) checkSide(side []sideRecord, calls map[string]*callFacts) {
	byKey := map[string]map[string]bool{}
	runs := map[string]map[int]int{} // id -> cycle -> runs
	for _, r := range side {
		v.acks++
		f := calls[r.id]
		switch {
		case f == nil:
			v.fail("work ran for tool call %s (conversation %q, decision %s), which no log holds", r.id, r.conv, r.key)
		case f.conv != r.conv || f.ev.GetExecutor() != messages.Executor_EXECUTOR_SERVER || callKey(f.ev.GetCall().GetArguments()) != r.key:
			v.fail("work ran for tool call %s as %q/%s, but the log holds it as %q/%s", r.id, r.conv, r.key, f.conv, callKey(f.ev.GetCall().GetArguments()))
		}
		if byKey[r.key] == nil {
			byKey[r.key] = map[string]bool{}
		}
		byKey[r.key][r.id] = true
		if runs[r.id] == nil {
			runs[r.id] = map[int]int{}
		}
		runs[r.id][r.cycle]++
	}
	for key, ids := range byKey {
		if len(ids) > 1 {
			var list []string
			for id := range ids {
				list = append(list, id)
			}
			sort.Strings(list)
			v.fail("one model decision (%s) ran under %d tool call ids: %s", key, len(ids), strings.Join(list, ", "))
		}
	}
	for id, byCycle := range runs {
		for cycle, n := range byCycle {
			if n > 1 {
				v.fail("tool call %s ran %d times in one process (cycle %d)", id, n, cycle)
			}
		}
		if len(byCycle) > 1 {
			v.redispatches++
		}
	}
	for id, f := range calls {
		if f.ev.GetExecutor() == messages.Executor_EXECUTOR_SERVER && len(f.results) > 0 && runs[id] == nil {
			v.fail("server call %s (conversation %q) has a result but its tool never ran", id, f.conv)
		}
	}
}

func eventType(ev *messages.Event) string {
	switch ev.GetBody().(type) {
	case *messages.Event_UserMsg:
		return "user_msg"
	case *messages.Event_AssistantMsg:
		if len(ev.GetAssistantMsg().GetToolCalls()) > 0 {
			return "assistant_msg with calls"
		}
		return "assistant_msg"
	case *messages.Event_ToolCall:
		return "tool_call"
	case *messages.Event_ToolResult:
		return "tool_result"
	case *messages.Event_Suspension:
		return "suspension"
	case *messages.Event_Resolution:
		return "resolution"
	case *messages.Event_Rewind:
		return "rewind"
	case *messages.Event_TurnFailed:
		return "turn_failed"
	}
	return "unknown"
}
