package journaltest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
	"google.golang.org/protobuf/proto"
)

var modelCases = []suiteCase{
	{name: "MatchesMemjournal", run: testModel},
}

// testModel applies one random sequence of operations to a fresh memjournal
// (the oracle) and to the store under test, and requires the same result
// from both after every operation: the same sentinel errors, and records
// that are proto.Equal (conversation rows without their created and updated
// times, which come from each store's clock). Durable stores are also
// reopened and crashed between operations; with no call in flight, a crash
// must lose nothing.
func testModel(t *testing.T, e env) {
	sd := seed(t)
	h := e.open(t)
	oracle := memjournal.New(memjournal.Options{Audit: e.feat.Audit})
	t.Cleanup(func() { _ = oracle.Close() })
	m := &model{
		t: t, ctx: t.Context(), seed: sd, rng: newRand(sd), h: h, sut: h.Store, oracle: oracle, durable: e.feat.Durable,
		convs:   []string{"a", "a/b", "ab", "a\x00", "b", "c\x00d", "conv-" + strings.Repeat("x", journal.MaxIDBytes-16), "\u00e9"},
		callsOf: map[string][]string{}, outcomes: map[string]int{},
	}
	n := opsCount(t)
	for i := range n {
		m.op = i
		m.step()
		if (i+1)%250 == 0 {
			m.compareAll()
		}
	}
	m.compareAll()
	keys := slices.Sorted(maps.Keys(m.outcomes))
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "\n  %-28s %5d", k, m.outcomes[k])
	}
	t.Logf("model test: %d operations, seed %d; outcomes:%s", n, sd, b.String())
}

type model struct {
	t           *testing.T
	ctx         context.Context
	seed        uint64
	rng         *rand.Rand
	h           *Harness
	sut, oracle journal.Store
	durable     bool

	convs    []string            // live conversations
	deleted  []string            // deleted ones (a successful delete replaces its id in convs)
	callsOf  map[string][]string // tool call ids minted for each conversation
	minted   int
	sec      int
	op       int
	history  []string
	cur      string         // the name of the current operation
	outcomes map[string]int // "Append ErrConflict": how often
}

// fail stops the test with everything needed to replay it.
func (m *model) fail(format string, args ...any) {
	m.t.Helper()
	m.t.Fatalf("model test, operation %d (%s): %s\nreplay with %s=%d\nrecent operations, oldest first:\n  %s",
		m.op, m.cur, fmt.Sprintf(format, args...), SeedEnv, m.seed, strings.Join(m.history, "\n  "))
}

func (m *model) log(format string, args ...any) {
	m.cur, _, _ = strings.Cut(format, " ")
	m.history = append(m.history, fmt.Sprintf("%d: ", m.op)+fmt.Sprintf(format, args...))
	if len(m.history) > 12 {
		m.history = m.history[1:]
	}
}

func (m *model) sameErr(want, got error) {
	m.t.Helper()
	m.count(want)
	if !sameErr(want, got) {
		m.fail("errors differ\n  memjournal: %v\n  under test: %v", want, got)
	}
}

// count records the outcome of the current operation.
func (m *model) count(err error) {
	name := "ok"
	if err != nil {
		name = "other error"
		for _, s := range sentinels {
			if errors.Is(err, s) {
				name = strings.TrimPrefix(s.Error(), "journal: ")
				break
			}
		}
	}
	m.outcomes[m.cur+": "+name]++
}

func (m *model) sameProto(what string, want, got proto.Message) {
	m.t.Helper()
	if !proto.Equal(want, got) {
		m.fail("%s differs\n  memjournal: %s\n  under test: %s", what, show(want), show(got))
	}
}

func sameProtos[M proto.Message](m *model, what string, want, got []M) {
	m.t.Helper()
	if !protosEqual(want, got) {
		m.fail("%s differ\n  memjournal %d: %s\n  under test %d: %s", what, len(want), showAll(want), len(got), showAll(got))
	}
}

func (m *model) pick(xs []string) string { return xs[m.rng.IntN(len(xs))] }
func (m *model) chance(pct int) bool     { return m.rng.IntN(100) < pct }

// conv picks a conversation: a live one mostly, a deleted one sometimes.
func (m *model) conv() string {
	if len(m.deleted) > 0 && m.chance(5) {
		return m.pick(m.deleted)
	}
	return m.pick(m.convs)
}

// allConvs is every conversation the test used, live and deleted.
func (m *model) allConvs() []string { return append(slices.Clone(m.convs), m.deleted...) }

// mint returns a new tool call id for conv. An id is only ever used by the
// conversation it was minted for, or to provoke a conflict.
func (m *model) mint(conv string) string {
	m.minted++
	id := fmt.Sprintf("tc-%d", m.minted)
	m.callsOf[conv] = append(m.callsOf[conv], id)
	return id
}

// callOf returns an id minted for conv (a new one if it has none, or
// sometimes).
func (m *model) callOf(conv string) string {
	if len(m.callsOf[conv]) == 0 || m.chance(10) {
		return m.mint(conv)
	}
	return m.pick(m.callsOf[conv])
}

// foreignCall returns an id with a row in another conversation, or "".
func (m *model) foreignCall(conv string) string {
	other := m.conv()
	if other == conv || len(m.callsOf[other]) == 0 {
		return ""
	}
	id := m.pick(m.callsOf[other])
	if row, err := m.oracle.ToolCall(m.ctx, id); err != nil || row.GetConversationId() == conv {
		return ""
	}
	return id
}

// pendingOf returns the ids of conv's pending calls, per the oracle.
func (m *model) pendingOf(conv string) []string {
	rows, err := m.oracle.PendingToolCalls(m.ctx, conv)
	if err != nil {
		m.fail("oracle PendingToolCalls: %v", err)
	}
	return callIDs(rows)
}

func (m *model) statusAny() messages.ToolCallStatus {
	return []messages.ToolCallStatus{0, 0, 0, pending, resolved, errored, expired}[m.rng.IntN(7)]
}

func (m *model) terminal() messages.ToolCallStatus {
	return []messages.ToolCallStatus{resolved, errored, expired}[m.rng.IntN(3)]
}

func (m *model) outcome() *messages.ToolOutcome {
	if m.chance(30) {
		return errorOutcome("tool", fmt.Sprint("failed at ", m.sec))
	}
	return contentOutcome(fmt.Sprintf(`{"n":%d}`, m.sec))
}

func (m *model) event(conv string) *messages.Event {
	switch m.rng.IntN(5) {
	case 0:
		return assistantEv(m.sec, textLike(m.rng, 40), m.callOf(conv))
	case 1:
		return toolCallEv(m.sec, m.callOf(conv))
	case 2:
		return toolResultEv(m.sec, m.callOf(conv), fmt.Sprint(m.sec))
	case 3:
		return resolutionEv(m.sec, m.callOf(conv), m.terminal())
	}
	return userEv(m.sec, textLike(m.rng, 1+m.rng.IntN(80)))
}

func (m *model) toolCallRow(conv, id string) *messages.ToolCallRecord {
	rec := humanCall(conv, id)
	rec.Created = ts(m.sec)
	if m.chance(30) {
		rec.Executor = messages.Executor_EXECUTOR_SERVER
	}
	rec.Status = m.statusAny()
	if journal.IsTerminal(rec.Status) {
		rec.Result, rec.Resolved = m.outcome(), ts(m.sec)
	}
	return rec
}

func (m *model) fsm() *messages.FSMState {
	if m.chance(50) {
		return idleState(m.rng.Uint64N(20))
	}
	return awaiting(m.rng.Uint64N(20), fmt.Sprint("tc-", m.rng.IntN(m.minted+1)))
}

// request builds a random append for conv, expecting last (the seq the
// writer believes is last). Most are valid; some are fenced off, stale,
// conflicting, unfenced or invalid.
func (m *model) request(conv string, last uint64) *messages.AppendRequest {
	req := &messages.AppendRequest{ConversationId: conv, ExpectedLast: last}
	switch r := m.rng.IntN(100); {
	case r < 6:
		req.ExpectedLast = last + 1
	case r < 9 && last > 0:
		req.ExpectedLast = last - 1 - m.rng.Uint64N(last)
	case r < 20:
		req.Unfenced = true
		req.ExpectedLast = m.rng.Uint64N(3)
	}
	if !req.Unfenced || m.chance(3) {
		for range m.rng.IntN(4) {
			req.Events = append(req.Events, m.event(conv))
		}
	}
	if m.chance(2) {
		req.Events = append(req.Events, &messages.Event{Time: ts(m.sec)}) // no body: invalid
	}
	if m.chance(30) {
		for range 1 + m.rng.IntN(2) {
			id := m.mint(conv)
			if m.chance(15) {
				id = m.pick(m.callsOf[conv]) // replace a row, or create a late one
			}
			req.ToolCalls = append(req.ToolCalls, m.toolCallRow(conv, id))
		}
	}
	if m.chance(4) {
		if id := m.foreignCall(conv); id != "" {
			req.ToolCalls = append(req.ToolCalls, m.toolCallRow(conv, id)) // conflict
		}
	}
	if m.chance(35) {
		ids := m.pendingOf(conv)
		if len(ids) == 0 || m.chance(15) {
			ids = m.callsOf[m.conv()] // likely stale, or of another conversation
		}
		if len(ids) > 0 {
			req.Resolutions = append(req.Resolutions, &messages.ToolResolution{
				ToolCallId: m.pick(ids), Status: m.terminal(), Result: m.outcome(), At: ts(m.sec),
			})
		}
	}
	if m.chance(30) {
		req.FsmState = m.fsm()
	}
	if m.chance(20) {
		req.Status = messages.ConversationStatus(1 + m.rng.IntN(4))
	}
	if m.chance(20) {
		req.Schedule = append(req.Schedule, deadline(conv, m.callOf(conv), m.sec+m.rng.IntN(500)))
	}
	if m.chance(10) {
		req.Cancel = append(req.Cancel, m.callOf(conv))
	}
	if m.chance(12) {
		ids := m.pendingOf(conv)
		if len(ids) == 0 || m.chance(20) {
			ids = m.callsOf[m.conv()] // likely stale, or of another conversation
		}
		if len(ids) > 0 {
			d := &messages.Deadline{ConversationId: conv, ToolCallId: m.pick(ids)}
			if !m.chance(20) {
				d.At = ts(m.sec + m.rng.IntN(500))
			}
			req.Reschedule = append(req.Reschedule, d)
		}
	}
	if len(req.GetResolutions()) > 0 && m.chance(30) {
		req.DueBy = ts(m.sec + m.rng.IntN(600) - 100) // an expiry: only if the deadline is due
	}
	return req
}

func (m *model) lastSeq(conv string) uint64 {
	n, err := m.oracle.LastSeq(m.ctx, conv)
	if err != nil {
		m.fail("oracle LastSeq: %v", err)
	}
	return n
}

func withoutTimes(r *messages.Conversation) *messages.Conversation {
	if r == nil {
		return nil
	}
	r = cloneOf(r)
	r.Created, r.Updated = nil, nil
	return r
}

func withoutTimesAll(rs []*messages.Conversation) []*messages.Conversation {
	out := make([]*messages.Conversation, len(rs))
	for i, r := range rs {
		out[i] = withoutTimes(r)
	}
	return out
}

type weightedOp struct {
	weight int
	run    func(m *model)
}

var modelOps = []weightedOp{
	{30, (*model).opAppend},
	{6, (*model).opAppendBatch},
	{8, (*model).opEvents},
	{3, (*model).opLastSeq},
	{5, (*model).opLoadSince},
	{5, (*model).opPutSummary},
	{3, (*model).opSummaryBefore},
	{5, (*model).opUpsertToolCall},
	{4, (*model).opToolCall},
	{4, (*model).opPending},
	{2, (*model).opListPending},
	{7, (*model).opResolve},
	{4, (*model).opSchedule},
	{2, (*model).opCancel},
	{3, (*model).opDeadlines},
	{3, (*model).opAudit},
	{3, (*model).opPutConversation},
	{2, (*model).opPutFSMState},
	{3, (*model).opConversation},
	{3, (*model).opList},
	{2, (*model).opListActive},
	{3, (*model).opMetadata},
	{1, (*model).opDelete}, // 40% of the time: about one delete in 270 operations
	{1, (*model).opReopen},
}

var modelWeights = func() int {
	n := 0
	for _, op := range modelOps {
		n += op.weight
	}
	return n
}()

func (m *model) step() {
	m.sec++
	r := m.rng.IntN(modelWeights)
	for _, op := range modelOps {
		if r < op.weight {
			op.run(m)
			return
		}
		r -= op.weight
	}
}

func (m *model) opAppend() {
	conv := m.conv()
	req := m.request(conv, m.lastSeq(conv))
	m.log("Append %s", show(req))
	want, got := cloneOf(req), cloneOf(req)
	wres, werr := m.oracle.Append(m.ctx, want)
	gres, gerr := m.sut.Append(m.ctx, got)
	m.sameErr(werr, gerr)
	m.sameErr(wres.Err, gres.Err)
	if werr == nil {
		if wres != gres {
			m.fail("results differ\n  memjournal: %+v\n  under test: %+v", wres, gres)
		}
		sameProtos(m, "events of the request (Seq set by Append)", want.GetEvents(), got.GetEvents())
	}
}

func (m *model) opAppendBatch() {
	n := 1 + m.rng.IntN(6)
	expect := map[string]uint64{}
	reqs := make([]*messages.AppendRequest, n)
	for i := range reqs {
		conv := m.conv()
		last, ok := expect[conv]
		if !ok {
			last = m.lastSeq(conv)
		}
		reqs[i] = m.request(conv, last)
		expect[conv] = last + uint64(len(reqs[i].GetEvents()))
	}
	m.log("AppendBatch %s", showAll(reqs))
	want := make([]*messages.AppendRequest, n)
	got := make([]*messages.AppendRequest, n)
	for i, r := range reqs {
		want[i], got[i] = cloneOf(r), cloneOf(r)
	}
	wres := m.oracle.AppendBatch(m.ctx, want)
	gres := m.sut.AppendBatch(m.ctx, got)
	if len(wres) != len(gres) {
		m.fail("%d results, want %d", len(gres), len(wres))
	}
	for i := range wres {
		m.count(wres[i].Err)
		if !sameErr(wres[i].Err, gres[i].Err) {
			m.fail("request %d: errors differ\n  memjournal: %v\n  under test: %v", i, wres[i].Err, gres[i].Err)
		}
		if wres[i].Err == nil && (wres[i].FirstSeq != gres[i].FirstSeq || wres[i].LastSeq != gres[i].LastSeq) {
			m.fail("request %d: results differ\n  memjournal: %+v\n  under test: %+v", i, wres[i], gres[i])
		}
	}
}

func (m *model) opEvents() {
	conv := m.conv()
	last := m.lastSeq(conv)
	q := journal.EventQuery{}
	if m.chance(50) {
		q.After = m.rng.Uint64N(last + 3)
	}
	if m.chance(50) {
		q.Before = m.rng.Uint64N(last + 3)
	}
	if m.chance(50) {
		q.Limit = m.rng.IntN(6)
	}
	m.log("Events %q %+v", conv, q)
	want, werr := m.oracle.Events(m.ctx, conv, q)
	got, gerr := m.sut.Events(m.ctx, conv, q)
	m.sameErr(werr, gerr)
	sameProtos(m, "events", want, got)
}

func (m *model) opLastSeq() {
	conv := m.conv()
	m.log("LastSeq %q", conv)
	want, werr := m.oracle.LastSeq(m.ctx, conv)
	got, gerr := m.sut.LastSeq(m.ctx, conv)
	m.sameErr(werr, gerr)
	if want != got {
		m.fail("last seq %d, want %d", got, want)
	}
}

func (m *model) opLoadSince() {
	conv := m.conv()
	m.log("LoadSince %q", conv)
	ws, we, werr := m.oracle.LoadSince(m.ctx, conv)
	gs, ge, gerr := m.sut.LoadSince(m.ctx, conv)
	m.sameErr(werr, gerr)
	m.sameProto("summary", ws, gs)
	sameProtos(m, "events", we, ge)
}

func (m *model) opPutSummary() {
	conv := m.conv()
	last := m.lastSeq(conv)
	from := m.rng.Uint64N(last + 2)
	to := from + m.rng.Uint64N(last+2)
	if m.chance(10) && from > 0 {
		to = from - 1
	}
	s := &messages.Summary{FromSeq: from, ToSeq: to, Content: textLike(m.rng, 30), Version: fmt.Sprint("v", m.sec), Created: ts(m.sec)}
	m.log("PutSummary %q %s", conv, show(s))
	m.sameErr(m.oracle.PutSummary(m.ctx, conv, s), m.sut.PutSummary(m.ctx, conv, cloneOf(s)))
}

func (m *model) opSummaryBefore() {
	conv := m.conv()
	if m.chance(40) {
		m.log("LatestSummary %q", conv)
		want, werr := m.oracle.LatestSummary(m.ctx, conv)
		got, gerr := m.sut.LatestSummary(m.ctx, conv)
		m.sameErr(werr, gerr)
		m.sameProto("summary", want, got)
		return
	}
	to := m.rng.Uint64N(m.lastSeq(conv) + 3)
	m.log("SummaryBefore %q %d", conv, to)
	want, werr := m.oracle.SummaryBefore(m.ctx, conv, to)
	got, gerr := m.sut.SummaryBefore(m.ctx, conv, to)
	m.sameErr(werr, gerr)
	m.sameProto("summary", want, got)
}

func (m *model) opUpsertToolCall() {
	conv := m.conv()
	id := m.callOf(conv)
	if m.chance(10) {
		if f := m.foreignCall(conv); f != "" {
			id = f
		}
	}
	rec := m.toolCallRow(conv, id)
	m.log("UpsertToolCall %s", show(rec))
	m.sameErr(m.oracle.UpsertToolCall(m.ctx, rec), m.sut.UpsertToolCall(m.ctx, cloneOf(rec)))
}

func (m *model) opToolCall() {
	id := m.callOf(m.conv())
	m.log("ToolCall %q", id)
	want, werr := m.oracle.ToolCall(m.ctx, id)
	got, gerr := m.sut.ToolCall(m.ctx, id)
	m.sameErr(werr, gerr)
	m.sameProto("tool call", want, got)
}

func (m *model) opPending() {
	conv := m.conv()
	m.log("PendingToolCalls %q", conv)
	want, werr := m.oracle.PendingToolCalls(m.ctx, conv)
	got, gerr := m.sut.PendingToolCalls(m.ctx, conv)
	m.sameErr(werr, gerr)
	sameProtos(m, "pending tool calls", want, got)
}

func (m *model) opListPending() {
	limit := 1 + m.rng.IntN(5)
	m.log("ListPendingToolCalls (pages of %d)", limit)
	cursor := ""
	for range 1000 {
		want, wnext, werr := m.oracle.ListPendingToolCalls(m.ctx, cursor, limit)
		got, gnext, gerr := m.sut.ListPendingToolCalls(m.ctx, cursor, limit)
		m.sameErr(werr, gerr)
		sameProtos(m, "pending tool calls of every conversation", want, got)
		if wnext != gnext {
			m.fail("ListPendingToolCalls after %q: next cursor %q, oracle %q", cursor, gnext, wnext)
		}
		if werr != nil || wnext == "" || wnext != gnext {
			return
		}
		cursor = wnext
	}
}

func (m *model) opResolve() {
	conv := m.conv()
	ids := m.pendingOf(conv)
	if len(ids) == 0 || m.chance(20) {
		ids = []string{m.callOf(conv)}
	}
	id := m.pick(ids)
	st := m.terminal()
	if m.chance(3) {
		st = pending // invalid
	}
	out, at := m.outcome(), tm(m.sec)
	m.log("ResolveToolCall %q %v %s", id, st, show(out))
	want, werr := m.oracle.ResolveToolCall(m.ctx, id, st, out, at)
	got, gerr := m.sut.ResolveToolCall(m.ctx, id, st, cloneOf(out), at)
	m.sameErr(werr, gerr)
	m.sameProto("resolved row", want, got)
}

func (m *model) opSchedule() {
	conv := m.conv()
	d := deadline(conv, m.callOf(conv), m.sec+m.rng.IntN(500))
	if m.chance(3) {
		d.At = nil // invalid
	}
	m.log("ScheduleDeadline %s", show(d))
	m.sameErr(m.oracle.ScheduleDeadline(m.ctx, d), m.sut.ScheduleDeadline(m.ctx, cloneOf(d)))
}

func (m *model) opCancel() {
	conv := m.conv()
	id := m.callOf(conv)
	m.log("CancelDeadline %q %q", conv, id)
	m.sameErr(m.oracle.CancelDeadline(m.ctx, conv, id), m.sut.CancelDeadline(m.ctx, conv, id))
}

func (m *model) opDeadlines() {
	var dueBy time.Time
	if m.chance(70) {
		dueBy = tm(m.rng.IntN(m.sec + 500))
	}
	m.log("Deadlines %v", dueBy)
	collect := func(s journal.Store) ([]*messages.Deadline, error) {
		var out []*messages.Deadline
		err := s.Deadlines(m.ctx, dueBy, func(d *messages.Deadline) error { out = append(out, d); return nil })
		return out, err
	}
	want, werr := collect(m.oracle)
	got, gerr := collect(m.sut)
	m.sameErr(werr, gerr)
	sameProtos(m, "deadlines", want, got)
}

func (m *model) opAudit() {
	conv := m.conv()
	switch m.rng.IntN(4) {
	case 0, 1:
		mc := modelCall(conv, m.rng.Uint64N(8), m.sec)
		m.log("PutModelCall %q turn %d", conv, mc.GetTurnRef())
		m.sameErr(m.oracle.PutModelCall(m.ctx, mc), m.sut.PutModelCall(m.ctx, cloneOf(mc)))
	case 2:
		m.log("ModelCalls %q", conv)
		want, werr := m.oracle.ModelCalls(m.ctx, conv)
		got, gerr := m.sut.ModelCalls(m.ctx, conv)
		m.sameErr(werr, gerr)
		sameProtos(m, "model calls", want, got)
	default:
		older := tm(m.rng.IntN(m.sec + 1))
		m.log("GCModelCalls %q %v", conv, older)
		want, werr := m.oracle.GCModelCalls(m.ctx, conv, older)
		got, gerr := m.sut.GCModelCalls(m.ctx, conv, older)
		m.sameErr(werr, gerr)
		if want != got {
			m.fail("removed %d, want %d", got, want)
		}
	}
}

func (m *model) kv() map[string]string {
	kv := map[string]string{}
	for range 1 + m.rng.IntN(3) {
		v := fmt.Sprint(m.sec)
		if m.chance(30) {
			v = "" // delete
		}
		kv[fmt.Sprint("k", m.rng.IntN(5))] = v
	}
	return kv
}

func (m *model) opPutConversation() {
	u := journal.ConversationUpdate{ID: m.conv()}
	if m.chance(60) {
		u.Settings = m.kv()
	}
	if m.chance(40) {
		u.Status = messages.ConversationStatus(m.rng.IntN(5))
	}
	if m.chance(40) {
		u.FSMState = m.fsm()
	}
	m.log("PutConversation %+v", u)
	got := u
	if u.FSMState != nil {
		got.FSMState = cloneOf(u.FSMState)
	}
	m.sameErr(m.oracle.PutConversation(m.ctx, u), m.sut.PutConversation(m.ctx, got))
}

func (m *model) opPutFSMState() {
	conv, st := m.conv(), m.fsm()
	m.log("PutFSMState %q %s", conv, show(st))
	m.sameErr(m.oracle.PutFSMState(m.ctx, conv, st), m.sut.PutFSMState(m.ctx, conv, cloneOf(st)))
}

func (m *model) opConversation() {
	conv := m.conv()
	m.log("Conversation %q", conv)
	want, werr := m.oracle.Conversation(m.ctx, conv)
	got, gerr := m.sut.Conversation(m.ctx, conv)
	m.sameErr(werr, gerr)
	m.sameProto("conversation (times aside)", withoutTimes(want), withoutTimes(got))
}

func (m *model) opList() {
	cursor := ""
	if m.chance(60) {
		cursor = m.conv()
		if m.chance(30) {
			cursor += "\x00"
		}
	}
	limit := m.rng.IntN(5)
	m.log("ListConversations %q %d", cursor, limit)
	want, wnext, werr := m.oracle.ListConversations(m.ctx, cursor, limit)
	got, gnext, gerr := m.sut.ListConversations(m.ctx, cursor, limit)
	m.sameErr(werr, gerr)
	sameProtos(m, "conversations (times aside)", withoutTimesAll(want), withoutTimesAll(got))
	if wnext != gnext {
		m.fail("next cursor %q, want %q", gnext, wnext)
	}
}

func (m *model) opListActive() {
	cursor := ""
	if m.chance(60) {
		cursor = m.conv()
		if m.chance(30) {
			cursor += "\x00"
		}
	}
	limit := m.rng.IntN(5)
	if m.chance(5) {
		limit = -1
	}
	if m.chance(5) {
		cursor = "bad\xff"
	}
	m.log("ListActiveConversations %q %d", cursor, limit)
	want, wnext, werr := m.oracle.ListActiveConversations(m.ctx, cursor, limit)
	got, gnext, gerr := m.sut.ListActiveConversations(m.ctx, cursor, limit)
	m.sameErr(werr, gerr)
	if !slices.Equal(want, got) {
		m.fail("active conversations %q, want %q", got, want)
	}
	if wnext != gnext {
		m.fail("next cursor %q, want %q", gnext, wnext)
	}
}

func (m *model) opMetadata() {
	conv := m.conv()
	if m.chance(50) {
		kv := m.kv()
		m.log("PutMetadata %q %v", conv, kv)
		m.sameErr(m.oracle.PutMetadata(m.ctx, conv, kv), m.sut.PutMetadata(m.ctx, conv, kv))
		return
	}
	m.log("Metadata %q", conv)
	want, werr := m.oracle.Metadata(m.ctx, conv)
	got, gerr := m.sut.Metadata(m.ctx, conv)
	m.sameErr(werr, gerr)
	if fmt.Sprint(want) != fmt.Sprint(got) {
		m.fail("metadata %v, want %v", got, want)
	}
}

func (m *model) opDelete() {
	if !m.chance(40) {
		return
	}
	conv := m.conv()
	m.log("DeleteConversation %q", conv)
	err := m.oracle.DeleteConversation(m.ctx, conv)
	m.sameErr(err, m.sut.DeleteConversation(m.ctx, conv))
	if i := slices.Index(m.convs, conv); err == nil && i >= 0 {
		m.deleted = append(m.deleted, conv)
		base, _, _ := strings.Cut(conv, "#")
		m.convs[i] = fmt.Sprintf("%s#%d", base, m.op)
	}
}

func (m *model) opReopen() {
	if !m.durable {
		return
	}
	if m.chance(50) {
		m.log("Reopen")
		m.sut = m.h.Reopen(m.t)
	} else {
		m.log("Crash")
		m.sut = m.h.Crash(m.t, m.rng)
	}
	m.compareAll()
}

// compareAll compares everything the read methods show of both stores.
func (m *model) compareAll() {
	m.t.Helper()
	m.log("compare everything")
	convs := m.allConvs()
	var calls []string
	for _, conv := range convs {
		calls = append(calls, m.callsOf[conv]...)
	}
	slices.Sort(calls)
	want, err := readSnapshot(m.ctx, m.oracle, convs, calls)
	if err != nil {
		m.fail("reading memjournal: %v", err)
	}
	got, err := readSnapshot(m.ctx, m.sut, convs, calls)
	if err != nil {
		m.fail("reading the store under test: %v", err)
	}
	if d := want.withoutTimes().diff(got.withoutTimes()); d != "" {
		m.fail("the stores differ (memjournal first): %s", d)
	}
}
