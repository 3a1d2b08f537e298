package journal

import (
	"fmt"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/lazarusrt/lazarus/messages"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Documented limits. Input beyond them is rejected with ErrInvalid before
// anything is written.
const (
	// MaxIDBytes bounds conversation ids, tool call ids and metadata keys.
	// Ids are 1..MaxIDBytes bytes of valid UTF-8; any byte, including '/'
	// and NUL, is allowed: the key layout escapes them.
	MaxIDBytes = 256
	// MaxEventBytes bounds one encoded event.
	MaxEventBytes = 1 << 20
	// MaxEventsPerAppend bounds the events of one AppendRequest.
	MaxEventsPerAppend = 1024
	// MaxAppendBytes bounds one AppendRequest as a whole: its encoding
	// (proto.Size of the request as given, event seqs unset) may be at
	// most this many bytes. MaxEventBytes and MaxEventsPerAppend alone
	// would let an append reach 1 GiB, past what a Store takes in one
	// write: PostgreSQL refuses a parameter or a value of 1 GB and more
	// (pgjournal sends a write's events as one bytea[] parameter), and
	// Pebble a batch of 4 GiB. 64 MiB is well under both, with room for
	// the rows, seqs and keys a Store adds and for the journal actor to
	// commit such an append alone; it still holds 64 events at
	// MaxEventBytes, and the runtime splits what it writes (queued sends,
	// tool results, an import) into appends within it.
	MaxAppendBytes = 64 << 20
	// MaxForkBytes bounds one ForkRequest as a whole: its encoding
	// (proto.Size, event seqs included) may be at most this many bytes.
	// A fork copies a log written in any number of appends in one atomic
	// write, so it is bounded on its own, past MaxAppendBytes and
	// MaxEventsPerAppend (512 copied events at MaxEventBytes) and under
	// what a Store takes in one write: pgjournal sends the copied events
	// as one bytea[] parameter, which PostgreSQL refuses at 1 GB, and
	// Pebble refuses (panics on) a batch of 4 GiB.
	MaxForkBytes = 512 << 20
	// MaxRecordBytes bounds any other single encoded record (tool call row,
	// summary, audit row, metadata value, conversation row).
	MaxRecordBytes = 4 << 20
)

// ValidateID checks a conversation id, tool call id or metadata key. what
// names the id in the error ("conversation id").
func ValidateID(what, id string) error {
	switch {
	case id == "":
		return Invalidf("empty %s", what)
	case len(id) > MaxIDBytes:
		return Invalidf("%s of %d bytes exceeds %d", what, len(id), MaxIDBytes)
	case !utf8.ValidString(id):
		return Invalidf("%s %q is not valid UTF-8", what, id)
	}
	return nil
}

// checkSize reports ErrInvalid when m encodes to more than max bytes or
// cannot be encoded (for example, a string field that is not UTF-8).
// It encodes m (the encoder is what checks that strings are UTF-8) into a
// pooled buffer, so a check allocates nothing in the common case.
func checkSize(what string, m proto.Message, max int) error {
	bp := getBuf()
	b, err := proto.MarshalOptions{}.MarshalAppend((*bp)[:0], m)
	n := len(b)
	putBuf(bp, b)
	if err != nil {
		return Invalidf("%s cannot be encoded (%v)", what, err)
	}
	if n > max {
		return Invalidf("%s of %d bytes exceeds %d", what, n, max)
	}
	return nil
}

// maxPooledBuf bounds the buffers checkSize keeps for reuse, so that one
// large record does not pin its buffer.
const maxPooledBuf = 64 << 10

var encodeBufs = sync.Pool{New: func() any { b := make([]byte, 0, 4<<10); return &b }}

// getBuf takes a buffer from encodeBufs; putBuf gives it back as b (the
// buffer grown by appends to it), unless it grew beyond maxPooledBuf.
func getBuf() *[]byte { return encodeBufs.Get().(*[]byte) }

func putBuf(bp *[]byte, b []byte) {
	if cap(b) <= maxPooledBuf {
		*bp = b[:0]
		encodeBufs.Put(bp)
	}
}

// ValidateEvent checks one event before it is appended: it is not nil, a
// body is set, its time is unset or one CheckTime accepts, every enum in it holds a value of its enum (CheckEnums), it
// can be encoded (every string is valid UTF-8) and its encoding fits
// MaxEventBytes. It encodes ev into a pooled buffer, so a
// check allocates nothing in the common case.
func ValidateEvent(ev *messages.Event) error {
	bp := getBuf()
	b, err := EncodeEvent((*bp)[:0], ev)
	putBuf(bp, b)
	return err
}

// validateCopiedEvent is ValidateEvent for an event copied from a log
// (ValidateFork): its Seq, which the store that logged it set, does not
// count against MaxEventBytes, as it did not in the Append that logged it,
// so every event an Append took can be copied.
func validateCopiedEvent(ev *messages.Event) error {
	if err := checkEventShape(ev); err != nil {
		return err
	}
	bp := getBuf()
	b, err := encodeEvent((*bp)[:0], ev, 0)
	putBuf(bp, b)
	return err
}

// EncodeEvent appends the protobuf encoding of ev to dst and returns the
// extended buffer. It fails exactly when ValidateEvent does, with the same
// error (wrapping ErrInvalid): ev is nil, has no body, has a time outside
// the years 1 to 9999 ("event time: ..."), holds an enum
// number its enum does not declare ("event: ... not a value of ..."),
// cannot be encoded ("event cannot be encoded (...)") or encodes to more than MaxEventBytes
// ("event of N bytes exceeds ..."). On error the returned buffer is dst
// with undefined bytes appended after len(dst); only its capacity is
// meant for reuse.
func EncodeEvent(dst []byte, ev *messages.Event) ([]byte, error) {
	if err := checkEventShape(ev); err != nil {
		return dst, err
	}
	return encodeEvent(dst, ev, ev.GetSeq())
}

// EncodeAppendEvent is, for a store, the encoding and check of event i of
// req that ValidateAppendShape leaves out. The store has set the event's
// Seq to the seq it assigns; givenSeq is the Seq the caller gave the event
// (the same value if the store did not change it). It appends the encoding
// of the event, with its current Seq, to dst and returns the extended
// buffer, which is what the store writes.
//
// It fails exactly when ValidateAppend, called on req as the caller gave
// it, fails on event i, with the same error (wrapping ErrInvalid): "event i
// of append to "conv": event cannot be encoded (...)" or "... event of N
// bytes exceeds MaxEventBytes". The limit applies to the event as the
// caller gave it, with givenSeq, as ValidateAppend measures it: the store's
// own seq does not count against it, so the store accepts exactly what
// ValidateAppend accepts. On error the returned buffer is dst with undefined
// bytes appended after len(dst). i must index req.GetEvents(), and the
// event must have passed ValidateAppendShape (not nil, with a body).
func EncodeAppendEvent(dst []byte, req *messages.AppendRequest, i int, givenSeq uint64) ([]byte, error) {
	out, err := encodeEvent(dst, req.GetEvents()[i], givenSeq)
	if err != nil {
		return out, appendEventError(req, i, err)
	}
	return out, nil
}

// checkEventShape checks what ValidateEvent checks without encoding ev.
func checkEventShape(ev *messages.Event) error {
	if ev == nil {
		return Invalidf("nil event")
	}
	if ev.GetBody() == nil {
		return Invalidf("event without a body")
	}
	if err := CheckTime("event time", ev.GetTime()); err != nil {
		return err
	}
	if tc := ev.GetToolCall(); tc != nil {
		if _, ok := messages.Executor_name[int32(tc.GetExecutor())]; !ok {
			// As ValidateToolCall refuses for the row: a revived
			// conversation would neither run nor wait on such a call.
			return Invalidf("tool_call event of %s has unknown executor %d", tc.GetCall().GetId(), tc.GetExecutor())
		}
	}
	if err := CheckEnums(ev); err != nil {
		// A resolution's status or a suspension's executor, say: a
		// reader of the stored event would take it as damage.
		return Invalidf("event: %v", err)
	}
	return nil
}

// encodeEvent appends the encoding of ev, which has a body, to dst, and
// checks that it can be encoded (the encoder is what checks that strings
// are UTF-8) and that it fits MaxEventBytes once its Seq is givenSeq
// instead of its current one.
func encodeEvent(dst []byte, ev *messages.Event, givenSeq uint64) ([]byte, error) {
	out, err := proto.MarshalOptions{}.MarshalAppend(dst, ev)
	if err != nil {
		return out, Invalidf("event cannot be encoded (%v)", err)
	}
	n := len(out) - len(dst)
	if seq := ev.GetSeq(); seq != givenSeq {
		n += seqFieldSize(givenSeq) - seqFieldSize(seq)
	}
	if n > MaxEventBytes {
		return out, Invalidf("event of %d bytes exceeds %d", n, MaxEventBytes)
	}
	return out, nil
}

// seqFieldNum is the field number of Event.seq.
var seqFieldNum = (&messages.Event{}).ProtoReflect().Descriptor().Fields().ByName("seq").Number()

// seqFieldSize returns the bytes that Event.seq takes in an encoding when
// it is seq: none for 0 (proto3 does not encode a zero scalar).
func seqFieldSize(seq uint64) int {
	if seq == 0 {
		return 0
	}
	return protowire.SizeTag(seqFieldNum) + protowire.SizeVarint(seq)
}

// appendEventError names event i of req in err, as ValidateAppend does.
func appendEventError(req *messages.AppendRequest, i int, err error) error {
	return Invalidf("event %d of append to %q: %v", i, req.GetConversationId(), err)
}

// ValidateToolCall checks a tool call row: its ids; that its status is a
// value of its enum (unspecified stores as pending); that its executor is
// server or human (an unspecified one names nobody to answer the call: a
// revival could neither run it nor wait on it); that a server call has no
// deadline (deadlines are when pending human calls expire); that its
// created, resolved and deadline times, each of which may be unset, are
// valid timestamps if set (CheckTime); that it fits; and that it does not
// set the storage-internal result_seq.
func ValidateToolCall(rec *messages.ToolCallRecord) error {
	if rec == nil {
		return Invalidf("nil tool call")
	}
	if err := ValidateID("tool call id", rec.GetId()); err != nil {
		return err
	}
	if err := ValidateID("conversation id", rec.GetConversationId()); err != nil {
		return err
	}
	if _, ok := messages.ToolCallStatus_name[int32(rec.GetStatus())]; !ok {
		return Invalidf("tool call %s has unknown status %d", rec.GetId(), rec.GetStatus())
	}
	if !knownExecutor(rec.GetExecutor()) {
		return Invalidf("tool call %s has executor %v, neither server nor human", rec.GetId(), rec.GetExecutor())
	}
	if rec.GetExecutor() == messages.Executor_EXECUTOR_SERVER && rec.GetDeadline() != nil {
		return Invalidf("server tool call %s has a deadline (only pending human calls expire)", rec.GetId())
	}
	for _, t := range []struct {
		name string
		ts   *timestamppb.Timestamp
	}{{"created", rec.GetCreated()}, {"resolved", rec.GetResolved()}, {"deadline", rec.GetDeadline()}} {
		if err := CheckTime("tool call "+rec.GetId()+": "+t.name, t.ts); err != nil {
			return err
		}
	}
	if rec.GetResultSeq() != 0 {
		return Invalidf("tool call %s sets result_seq, which only a store sets", rec.GetId())
	}
	return checkSize("tool call "+rec.GetId(), rec, MaxRecordBytes)
}

// knownExecutor reports whether e is server or human: who answers a call.
func knownExecutor(e messages.Executor) bool {
	return e == messages.Executor_EXECUTOR_SERVER || e == messages.Executor_EXECUTOR_HUMAN
}

// ValidateCreated checks the created time of a ConversationUpdate of
// conversation id: nil (the row keeps its own) or a valid timestamp
// (years 1 to 9999). Errors wrap ErrInvalid.
func ValidateCreated(id string, created *timestamppb.Timestamp) error {
	return CheckTime(fmt.Sprintf("conversation %q: created", id), created)
}

// CheckTime is the rule every time a Store takes is held to: ts may be
// nil (unset) but, if set, must be a valid timestamp (CheckValid: within
// the years 1 to 9999, its nanos within a second), else an error wrapping
// ErrInvalid that starts with what. A time outside that range cannot be
// converted back to a time.Time faithfully nor compared alike by every
// adapter, so no write stores one: the times of a deadline, a reschedule,
// an append's due_by and resolutions, an fsm_state's retry_not_before, a
// model call, a conversation update, a tool call row, an event, a summary,
// a schedule and a file checkpoint are all checked by it.
func CheckTime(what string, ts *timestamppb.Timestamp) error {
	if ts == nil {
		return nil
	}
	if err := ts.CheckValid(); err != nil {
		return Invalidf("%s: %v", what, err)
	}
	return nil
}

// ValidateResolvedAt checks the time a ResolveToolCall stamps its call
// with: the zero time (no Resolved time) or one CheckTime accepts. Errors
// wrap ErrInvalid.
func ValidateResolvedAt(toolCallID string, at time.Time) error {
	return CheckTime("resolve "+toolCallID+": time", Timestamp(at))
}

// ValidStatus reports whether s is a value of the ConversationStatus enum
// (unspecified included: it leaves a row's status unchanged).
func ValidStatus(s messages.ConversationStatus) bool {
	_, ok := messages.ConversationStatus_name[int32(s)]
	return ok
}

// ValidateFSMState checks the fsm_state cache of conversation conv: st is
// not nil; its state is idle or awaiting_input (the only states ever
// persisted), or unspecified; each pending entry is keyed by a valid tool
// call id, is not nil, names no other call (its tool_call_id is the key or
// empty) and has an executor that is a value of its enum; it does not
// contradict itself: awaiting_input names a pending call (it waits on one
// or more human calls), idle names no pending human call (one makes the
// state awaiting_input); its retry_not_before, if set, is a time CheckTime
// accepts; and it fits MaxRecordBytes.
func ValidateFSMState(conv string, st *messages.FSMState) error {
	if st == nil {
		return Invalidf("nil fsm_state for %q", conv)
	}
	switch st.GetState() {
	case messages.AgentState_AGENT_STATE_UNSPECIFIED, messages.AgentState_AGENT_STATE_IDLE, messages.AgentState_AGENT_STATE_AWAITING_INPUT:
	default:
		return Invalidf("fsm_state of %q in state %v: only idle and awaiting_input are persisted", conv, st.GetState())
	}
	for id, p := range st.GetPending() {
		if err := ValidateID("pending tool call id in the fsm_state of "+conv, id); err != nil {
			return err
		}
		if p == nil {
			return Invalidf("fsm_state of %q: nil pending entry for %s", conv, id)
		}
		if p.GetToolCallId() != "" && p.GetToolCallId() != id {
			return Invalidf("fsm_state of %q: the pending entry for %s names call %s", conv, id, p.GetToolCallId())
		}
		if _, ok := messages.Executor_name[int32(p.GetExecutor())]; !ok {
			return Invalidf("fsm_state of %q: pending call %s has unknown executor %d", conv, id, p.GetExecutor())
		}
		if p.GetExecutor() == messages.Executor_EXECUTOR_HUMAN && st.GetState() == messages.AgentState_AGENT_STATE_IDLE {
			return Invalidf("fsm_state of %q is idle with human call %s pending (awaiting_input waits on it)", conv, id)
		}
	}
	if st.GetState() == messages.AgentState_AGENT_STATE_AWAITING_INPUT && len(st.GetPending()) == 0 {
		return Invalidf("fsm_state of %q is awaiting_input with no pending call", conv)
	}
	if err := CheckTime("fsm_state of "+conv+": retry_not_before", st.GetRetryNotBefore()); err != nil {
		return err
	}
	return checkSize("fsm_state of "+conv, st, MaxRecordBytes)
}

// ValidateDeadline checks a deadline: its ids and a set time, which must be
// a valid timestamp (within the years 1 to 9999), as ValidateReschedule's.
func ValidateDeadline(d *messages.Deadline) error {
	if d == nil {
		return Invalidf("nil deadline")
	}
	if err := ValidateID("conversation id", d.GetConversationId()); err != nil {
		return err
	}
	if err := ValidateID("tool call id", d.GetToolCallId()); err != nil {
		return err
	}
	if d.GetAt() == nil {
		return Invalidf("deadline of %s without a time", d.GetToolCallId())
	}
	if err := d.GetAt().CheckValid(); err != nil {
		return Invalidf("deadline of %s: %v", d.GetToolCallId(), err)
	}
	return nil
}

// ValidateModelCall checks an audit row: its conversation id; its
// created time, which may be unset but, if set, must be a valid timestamp
// (within the years 1 to 9999), as a deadline's time: GCModelCalls compares
// it, so a time with its nanos out of range would compare differently in
// different adapters; that every enum in it (those of its rendered
// events) holds a value of its enum (CheckEnums), as a reader requires;
// and that it can be encoded (every string is valid UTF-8) and fits
// MaxRecordBytes. A failed call's row (error set, no usage) is valid as an
// answered call's is. Every adapter's PutModelCall checks its call with
// it first, audit on or off.
func ValidateModelCall(mc *messages.ModelCall) error {
	if mc == nil {
		return Invalidf("nil model call")
	}
	if err := ValidateID("conversation id", mc.GetConversationId()); err != nil {
		return err
	}
	if c := mc.GetCreated(); c != nil {
		if err := c.CheckValid(); err != nil {
			return Invalidf("model call %d of %q: created: %v", mc.GetTurnRef(), mc.GetConversationId(), err)
		}
	}
	if err := CheckEnums(mc); err != nil {
		return Invalidf("model call %d of %q: %v", mc.GetTurnRef(), mc.GetConversationId(), err)
	}
	return checkSize(fmt.Sprintf("model call %d of %q", mc.GetTurnRef(), mc.GetConversationId()), mc, MaxRecordBytes)
}

// ValidateReschedule checks one entry of AppendRequest.Reschedule: its ids,
// and its time, which may be unset (the call's deadline is removed) but, if
// set, must be a valid timestamp (within the years 1 to 9999).
func ValidateReschedule(d *messages.Deadline) error {
	if d == nil {
		return Invalidf("nil new deadline")
	}
	if err := ValidateID("conversation id", d.GetConversationId()); err != nil {
		return err
	}
	if err := ValidateID("tool call id", d.GetToolCallId()); err != nil {
		return err
	}
	if at := d.GetAt(); at != nil {
		if err := at.CheckValid(); err != nil {
			return Invalidf("new deadline of %s: %v", d.GetToolCallId(), err)
		}
	}
	return nil
}

// IsTerminal reports whether s is a terminal tool call status (resolved,
// errored or expired).
func IsTerminal(s messages.ToolCallStatus) bool {
	return s == messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED ||
		s == messages.ToolCallStatus_TOOL_CALL_STATUS_ERRORED ||
		s == messages.ToolCallStatus_TOOL_CALL_STATUS_EXPIRED
}

// ValidateResolution checks the arguments of a resolve: a tool call id and a
// terminal status.
func ValidateResolution(toolCallID string, status messages.ToolCallStatus) error {
	if err := ValidateID("tool call id", toolCallID); err != nil {
		return err
	}
	if !IsTerminal(status) {
		return Invalidf("resolve %s to non-terminal status %v", toolCallID, status)
	}
	return nil
}

// ValidateResolutionResult checks the result of a resolve: it can be
// encoded (every string is valid UTF-8) and its encoding fits
// MaxRecordBytes. A nil result passes. Whether the row it lands in still
// fits MaxRecordBytes depends on the stored row: ResolvedRowFits checks
// that.
func ValidateResolutionResult(toolCallID string, result *messages.ToolOutcome) error {
	if result == nil {
		return nil
	}
	return checkSize("result of tool call "+toolCallID, result, MaxRecordBytes)
}

// ResolvedRowFits reports ErrInvalid when row, a tool call row with
// resolution r of req applied, cannot be encoded or its encoding exceeds
// MaxRecordBytes: the resolution would leave a row no store can keep. A
// result that a tool_result event of the same fenced request carries
// (an equal outcome for the same call) does not count: a store may keep it
// once, in the event, which MaxEventBytes bounds. req may be nil (a
// ResolveToolCall).
func ResolvedRowFits(row *messages.ToolCallRecord, req *messages.AppendRequest, r *messages.ToolResolution) error {
	if req != nil && r != nil && resultInEvent(req, r) {
		row = proto.CloneOf(row)
		row.Result = nil
	}
	return checkSize("tool call "+row.GetId()+" with its resolution", row, MaxRecordBytes)
}

// AppendedRowFits reports ErrInvalid when the conversation row that req's
// fsm_state, status and settings leave (row is the row before req, nil if
// none) cannot be encoded or exceeds MaxRecordBytes: settings merged over
// many requests may grow it past the limit, as metadata may (see
// ValidateMetadata). It changes neither row nor req.
func AppendedRowFits(row *messages.Conversation, req *messages.AppendRequest) error {
	if req.GetFsmState() == nil && req.GetStatus() == messages.ConversationStatus_CONVERSATION_STATUS_UNSPECIFIED && len(req.GetSettings()) == 0 {
		return nil
	}
	if len(req.GetSettings()) == 0 {
		// The common append (fsm_state, status): a bound that counts the
		// old fsm_state too avoids copying the row when it fits anyway.
		n := proto.Size(req.GetFsmState()) + rowSlack
		if row != nil {
			n += proto.Size(row)
		}
		if n <= MaxRecordBytes {
			return nil
		}
	}
	next := &messages.Conversation{Id: req.GetConversationId()}
	if row != nil {
		next = proto.CloneOf(row)
	}
	if st := req.GetFsmState(); st != nil {
		next.FsmState = st
	}
	if st := req.GetStatus(); st != messages.ConversationStatus_CONVERSATION_STATUS_UNSPECIFIED {
		next.Status = st
	}
	if kv := req.GetSettings(); len(kv) > 0 {
		next.Settings = MergeSettings(next.GetSettings(), kv)
	}
	return checkSize("conversation "+req.GetConversationId()+" as the append leaves it", next, MaxRecordBytes)
}

// rowSlack bounds the bytes that the fsm_state field's tag and length, the
// status and the id of a new row add to a conversation row.
const rowSlack = 32 + MaxIDBytes

// resultInEvent reports whether fenced req has a tool_result event of r's
// call whose outcome is r's result.
func resultInEvent(req *messages.AppendRequest, r *messages.ToolResolution) bool {
	if req.GetUnfenced() || r.GetResult() == nil {
		return false
	}
	for _, ev := range req.GetEvents() {
		tr := ev.GetToolResult()
		if tr == nil || tr.GetToolCallId() != r.GetToolCallId() {
			continue
		}
		if out := tr.GetOutcome(); out == r.GetResult() || proto.Equal(out, r.GetResult()) {
			return true
		}
	}
	return false
}

// ValidateAppend checks everything in req that can be checked without
// reading the Store: ids, counts, sizes, statuses, times (every time it
// carries, its events', rows', deadlines', resolutions' and due_by, is
// unset or one CheckTime accepts); that every tool call,
// deadline and resolution names req's conversation where it names one; and
// that every tool_call event carries a call with a valid id whose row, of
// the event's executor, req upserts (so that no crash leaves a call in the
// log without its row), every tool_result, resolution and handoff event
// names a call by a valid id, every resolution event has a terminal
// status, every suspension names its pending calls by valid ids, and no
// deadline is scheduled for a server call whose row req upserts; its rows
// and fsm_state are checked as ValidateToolCall and ValidateFSMState check
// them; last, that the whole request encodes to at most MaxAppendBytes.
// It is ValidateAppendShape plus, for every event, the check of EncodeEvent
// (it can be encoded and fits MaxEventBytes), in the same order: an event's
// error is reported where ValidateAppendShape would look at the event.
func ValidateAppend(req *messages.AppendRequest) error {
	return validateAppend(req, true)
}

// ValidateAppendShape checks req exactly as ValidateAppend does, in the
// same order and with the same errors, except that it does not encode the
// events: it checks that each is not nil, has a body, a valid time if
// any and only declared enum values, but not that it can be encoded (its strings are
// valid UTF-8) nor that its encoding fits MaxEventBytes. So: where ValidateAppend returns nil, so does it; where
// ValidateAppend returns an error other than an event's encoding error, it
// returns the same error; where ValidateAppend returns an event's encoding
// error, it returns nil or the error of a check that ValidateAppend makes
// after encoding that event (a later event's nil or missing body, tool
// calls, resolutions, deadlines, cancels, reschedules, fsm_state).
//
// What it leaves to the caller: a store that calls it instead of
// ValidateAppend, to encode each event only once, must itself encode every
// event of req with EncodeAppendEvent (or checks equal to it), and, if any
// event cannot be encoded or exceeds MaxEventBytes, reject req with that
// error (wrapping ErrInvalid and naming the event's index and the
// conversation: "event i of append to "conv": event cannot be encoded
// (...)" or "...: event of N bytes exceeds ...") before it writes anything
// of req.
func ValidateAppendShape(req *messages.AppendRequest) error {
	return validateAppend(req, false)
}

// validateAppend is ValidateAppend, which encodes the events if encode is
// set, and ValidateAppendShape, which does not.
func validateAppend(req *messages.AppendRequest, encode bool) error {
	if req == nil {
		return Invalidf("nil append request")
	}
	conv := req.GetConversationId()
	if err := ValidateID("conversation id", conv); err != nil {
		return err
	}
	if req.GetUnfenced() && len(req.GetEvents()) > 0 {
		return Invalidf("unfenced append to %q carries %d events", conv, len(req.GetEvents()))
	}
	if n := len(req.GetEvents()); n > MaxEventsPerAppend {
		return Invalidf("append of %d events to %q exceeds %d", n, conv, MaxEventsPerAppend)
	}
	if err := checkAppendEvents(req, encode); err != nil {
		return err
	}
	for _, tc := range req.GetToolCalls() {
		if err := ValidateToolCall(tc); err != nil {
			return err
		}
		if tc.GetConversationId() != conv {
			return Invalidf("tool call %s names conversation %q in an append to %q", tc.GetId(), tc.GetConversationId(), conv)
		}
	}
	if err := checkCallEvents(req); err != nil {
		return err
	}
	for _, r := range req.GetResolutions() {
		if r == nil {
			return Invalidf("nil resolution in append to %q", conv)
		}
		if err := ValidateResolution(r.GetToolCallId(), r.GetStatus()); err != nil {
			return err
		}
		if err := CheckTime("resolution of tool call "+r.GetToolCallId()+": at", r.GetAt()); err != nil {
			return err
		}
		if err := checkSize("resolution of tool call "+r.GetToolCallId(), r, MaxRecordBytes); err != nil {
			return err
		}
	}
	for _, d := range req.GetSchedule() {
		if err := ValidateDeadline(d); err != nil {
			return err
		}
		if d.GetConversationId() != conv {
			return Invalidf("deadline of %s names conversation %q in an append to %q", d.GetToolCallId(), d.GetConversationId(), conv)
		}
	}
	for _, id := range req.GetCancel() {
		if err := ValidateID("tool call id", id); err != nil {
			return err
		}
	}
	if at := req.GetDueBy(); at != nil {
		if err := at.CheckValid(); err != nil {
			return Invalidf("due_by of append to %q: %v", conv, err)
		}
	}
	for _, d := range req.GetReschedule() {
		if err := ValidateReschedule(d); err != nil {
			return err
		}
		if d.GetConversationId() != conv {
			return Invalidf("new deadline of %s names conversation %q in an append to %q", d.GetToolCallId(), d.GetConversationId(), conv)
		}
	}
	if err := ValidateMetadata(conv, req.GetSettings()); err != nil {
		return err
	}
	if f := req.GetScheduleFire(); f != nil {
		if req.GetUnfenced() {
			return Invalidf("unfenced append to %q carries a schedule fire", conv)
		}
		if err := ValidateScheduleFire(f); err != nil {
			return err
		}
	}
	if !ValidStatus(req.GetStatus()) {
		return Invalidf("append to %q sets unknown status %d", conv, req.GetStatus())
	}
	if st := req.GetFsmState(); st != nil {
		if err := ValidateFSMState(conv, st); err != nil {
			return err
		}
	}
	// Checked last: every part is known to be there and of its shape.
	if n := proto.Size(req); n > MaxAppendBytes {
		return Invalidf("append of %d bytes to %q exceeds %d", n, conv, MaxAppendBytes)
	}
	return nil
}

// checkAppendEvents checks the events of req: each is not nil and has a
// body, and, if encode is set, can be encoded and fits MaxEventBytes (into
// one pooled buffer, so a check allocates nothing in the common case).
func checkAppendEvents(req *messages.AppendRequest, encode bool) error {
	evs := req.GetEvents()
	if len(evs) == 0 {
		return nil
	}
	var bp *[]byte
	if encode {
		bp = getBuf()
		defer func() { putBuf(bp, *bp) }()
	}
	for i, ev := range evs {
		if err := checkEventShape(ev); err != nil {
			return appendEventError(req, i, err)
		}
		if !encode {
			continue
		}
		b, err := EncodeAppendEvent((*bp)[:0], req, i, ev.GetSeq())
		*bp = b
		if err != nil {
			return err
		}
	}
	return nil
}

// checkCallEvents checks the events of req that name a tool call: each
// passes checkCallEvent, and a tool_call event's call has its row (with the
// event's executor) upserted by req in the same write, so that no crash
// leaves a call in the log without its row. It also checks that req
// schedules no deadline for a server call whose row it upserts. The events
// have passed checkEventShape and req's rows ValidateToolCall.
func checkCallEvents(req *messages.AppendRequest) error {
	var rows map[string]*messages.ToolCallRecord
	rowsByID := func() map[string]*messages.ToolCallRecord {
		if rows == nil {
			rows = make(map[string]*messages.ToolCallRecord, len(req.GetToolCalls()))
			for _, tc := range req.GetToolCalls() {
				rows[tc.GetId()] = tc
			}
		}
		return rows
	}
	for i, ev := range req.GetEvents() {
		err := checkCallEvent(ev)
		if tc := ev.GetToolCall(); err == nil && tc != nil {
			id := tc.GetCall().GetId()
			row, ok := rowsByID()[id]
			switch {
			case !ok:
				err = Invalidf("tool_call event of %s without its row in the same append", id)
			case row.GetExecutor() != tc.GetExecutor():
				err = Invalidf("tool_call event of %s has executor %v, its row %v", id, tc.GetExecutor(), row.GetExecutor())
			}
		}
		if err != nil {
			return appendEventError(req, i, err)
		}
	}
	if len(req.GetToolCalls()) > 0 {
		for _, d := range req.GetSchedule() {
			if row := rowsByID()[d.GetToolCallId()]; row != nil && row.GetExecutor() == messages.Executor_EXECUTOR_SERVER {
				return Invalidf("append to %q schedules a deadline for server tool call %s (only pending human calls expire)", req.GetConversationId(), d.GetToolCallId())
			}
		}
	}
	return nil
}

// checkCallEvent checks one event, which has passed checkEventShape, if it
// names a tool call, on its own (what ValidateAppend and ValidateFork both
// check; whether a tool_call event's row exists is the caller's): a
// tool_call event carries a call with a valid id and an executor that is
// server or human (a row can have no other: ValidateToolCall); a
// tool_result, a resolution or a handoff event names a call by a valid id,
// a resolution with a terminal status; a suspension's pending calls have
// valid ids and executors that are values of their enum.
func checkCallEvent(ev *messages.Event) error {
	switch b := ev.GetBody().(type) {
	case *messages.Event_ToolCall:
		if b.ToolCall.GetCall() == nil {
			return Invalidf("tool_call event without a call")
		}
		id := b.ToolCall.GetCall().GetId()
		if err := ValidateID("tool call id of a tool_call event", id); err != nil {
			return err
		}
		if !knownExecutor(b.ToolCall.GetExecutor()) {
			return Invalidf("tool_call event of %s has executor %v, neither server nor human", id, b.ToolCall.GetExecutor())
		}
	case *messages.Event_ToolResult:
		return ValidateID("tool call id of a tool_result event", b.ToolResult.GetToolCallId())
	case *messages.Event_Resolution:
		if err := ValidateID("tool call id of a resolution event", b.Resolution.GetToolCallId()); err != nil {
			return err
		}
		if !IsTerminal(b.Resolution.GetStatus()) {
			return Invalidf("resolution event of %s with status %v, not a terminal one", b.Resolution.GetToolCallId(), b.Resolution.GetStatus())
		}
	case *messages.Event_Suspension:
		return checkSuspension(b.Suspension)
	case *messages.Event_Handoff:
		return ValidateID("tool call id of a handoff event", b.Handoff.GetToolCallId())
	}
	return nil
}

// checkSuspension checks the pending calls of a suspension event: each
// names a call by a valid id, with an executor that is a value of its
// enum.
func checkSuspension(s *messages.Suspension) error {
	for _, p := range s.GetPending() {
		id := p.GetToolCallId()
		if err := ValidateID("tool call id of a suspension's pending call", id); err != nil {
			return err
		}
		if _, ok := messages.Executor_name[int32(p.GetExecutor())]; !ok {
			return Invalidf("suspension's pending call %s has unknown executor %d", id, p.GetExecutor())
		}
	}
	return nil
}

// ValidateSummary checks a summary against the conversation's last seq:
// 1 <= FromSeq <= ToSeq <= lastSeq, its created time (unset or one
// CheckTime accepts), its agents' entries, and that it fits.
func ValidateSummary(conv string, s *messages.Summary, lastSeq uint64) error {
	if s == nil {
		return Invalidf("nil summary for %q", conv)
	}
	if s.GetFromSeq() < 1 || s.GetFromSeq() > s.GetToSeq() {
		return Invalidf("summary of %q covers %d..%d", conv, s.GetFromSeq(), s.GetToSeq())
	}
	if s.GetToSeq() > lastSeq {
		return Invalidf("summary of %q covers up to %d but the log ends at %d", conv, s.GetToSeq(), lastSeq)
	}
	if err := CheckTime(fmt.Sprintf("summary of %q: created", conv), s.GetCreated()); err != nil {
		return err
	}
	if p := SummaryAgentsProblem(s); p != "" {
		return Invalidf("summary of %q: %s", conv, p)
	}
	return checkSize("summary of "+conv, s, MaxRecordBytes)
}

// ValidateSummaryShape checks what ValidateSummary checks of a summary by
// itself, whatever the log holds: not nil, 1 <= FromSeq <= ToSeq, its
// created time, its agents' entries, and that it fits. An adapter runs it before it reads
// the conversation, so that a summary no log could take is ErrInvalid
// whether the conversation was deleted or not, as an append's input is
// (see Summaries.PutSummary); ToSeq <= LastSeq is checked after.
func ValidateSummaryShape(conv string, s *messages.Summary) error {
	return ValidateSummary(conv, s, s.GetToSeq())
}

// SummaryAgentsProblem says what is wrong with the named agents' entries
// of a stored summary (Summary.agents), "" if nothing: the record itself
// names no agent; each entry names one, once, covers 1 <= FromSeq <= ToSeq
// with the record's ToSeq, and holds no entries of its own; the agents
// owed a turn (Summary.owed) are named once each, in order, at a seq the
// summary covers, and only the record has them.
func SummaryAgentsProblem(s *messages.Summary) string {
	for i, o := range s.GetOwed() {
		switch {
		case o.GetSeq() < 1 || o.GetSeq() > s.GetToSeq():
			return fmt.Sprintf("agent %q is owed a turn at seq %d, which the summary (up to %d) does not cover", o.GetAgent(), o.GetSeq(), s.GetToSeq())
		case i > 0 && o.GetAgent() <= s.GetOwed()[i-1].GetAgent():
			return fmt.Sprintf("the agents owed a turn are not in order, or named twice (%q)", o.GetAgent())
		}
	}
	if len(s.GetAgents()) == 0 && s.GetAgent() == "" {
		return ""
	}
	if s.GetAgent() != "" {
		return fmt.Sprintf("the stored summary names agent %q (only its entries may)", s.GetAgent())
	}
	seen := make(map[string]bool, len(s.GetAgents()))
	for i, a := range s.GetAgents() {
		switch {
		case a.GetAgent() == "":
			return fmt.Sprintf("agent entry %d names no agent", i)
		case seen[a.GetAgent()]:
			return fmt.Sprintf("agent %q has two entries", a.GetAgent())
		case a.GetToSeq() != s.GetToSeq() || a.GetFromSeq() < 1 || a.GetFromSeq() > a.GetToSeq():
			return fmt.Sprintf("agent %q's entry covers %d..%d, not up to %d", a.GetAgent(), a.GetFromSeq(), a.GetToSeq(), s.GetToSeq())
		case len(a.GetAgents()) > 0 || len(a.GetOwed()) > 0:
			return fmt.Sprintf("agent %q's entry holds entries of its own", a.GetAgent())
		}
		seen[a.GetAgent()] = true
	}
	return ""
}

// ValidateMetadata checks metadata keys (as ids) and the encoded size of the
// values.
func ValidateMetadata(conv string, kv map[string]string) error {
	total := 0
	for k, v := range kv {
		if err := ValidateID("metadata key", k); err != nil {
			return err
		}
		if !utf8.ValidString(v) {
			return Invalidf("metadata %q of %q is not valid UTF-8", k, conv)
		}
		total += len(k) + len(v)
	}
	if total > MaxRecordBytes {
		return Invalidf("metadata of %q of %d bytes exceeds %d", conv, total, MaxRecordBytes)
	}
	return nil
}

// SeqGap reports the first event of evs (in ascending order) out of place:
// evs must be consecutive and, when first is not 0, start at first. It
// returns that event's seq and the seq expected there, and ok false when
// there is no gap. Adapters use it to report a log with a hole as corrupt.
func SeqGap(evs []*messages.Event, first uint64) (got, want uint64, ok bool) {
	if len(evs) == 0 {
		return 0, 0, false
	}
	want = first
	if want == 0 {
		want = evs[0].GetSeq()
	}
	for _, ev := range evs {
		if ev.GetSeq() != want {
			return ev.GetSeq(), want, true
		}
		want++
	}
	return 0, 0, false
}

// MergeSettings returns a new map: row's settings with kv merged in, key by
// key (an empty value removes its key). Neither argument is modified.
// Metadata merges by the same rule (PutMetadata, lazarus ForkOptions).
func MergeSettings(row, kv map[string]string) map[string]string {
	out := make(map[string]string, len(row)+len(kv))
	for k, v := range row {
		out[k] = v
	}
	for k, v := range kv {
		if v == "" {
			delete(out, k)
		} else {
			out[k] = v
		}
	}
	return out
}

// Timestamp converts t to its protobuf form; the zero time gives nil, which
// is how records say "unset".
func Timestamp(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

// StatusWritten returns the status an append that states st (not
// unspecified) writes into its conversation's row, given the status row
// the row has as the append finds it (as the writes committed before it,
// and the requests before it in a batch, left it; ACTIVE for a row the
// append creates), its fsm_state and answered, which reports whether a
// call of the conversation is terminal in the Store once the request's
// own upserts and resolutions are applied: st, except that
//
//   - an ENDED row stays ENDED, whatever st. End is for good: a write
//     that states another status (an answer's or an expiry's ACTIVE, a
//     writer's IDLE) was decided on a read of the row, and an End that
//     committed since must win. The rest of an unfenced write goes
//     through: an expiry or an answer is still recorded, in a
//     conversation that stays ended (a fenced write that does not state
//     ENDED is refused: CheckEnded). Only PutConversation sets another
//     status on an ENDED row.
//   - a SUSPENDED stated while a call fsm names pending is answered
//     becomes ACTIVE. Such an answer is durable and not yet in the log
//     (the writer still sees its call open), and the answer's own write
//     made the row ACTIVE so that Open resumes the conversation and its
//     revival records the answer; a SUSPENDED committed after that write
//     would undo it.
//
// Deciding in the append's own atomic write, against the rows as they
// are then, leaves no instant at which the row says SUSPENDED over an
// answer not in the log, and no read-then-write window in which an ended
// conversation is reopened. Every adapter applies it (see
// EventLog.Append).
func StatusWritten(row, st messages.ConversationStatus, fsm *messages.FSMState, answered func(toolCallID string) (bool, error)) (messages.ConversationStatus, error) {
	if row == messages.ConversationStatus_CONVERSATION_STATUS_ENDED {
		return row, nil
	}
	if st != messages.ConversationStatus_CONVERSATION_STATUS_SUSPENDED {
		return st, nil
	}
	for id := range fsm.GetPending() {
		ok, err := answered(id)
		if err != nil {
			return st, err
		}
		if ok {
			return messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE, nil
		}
	}
	return st, nil
}

// CheckEnded is the rule every adapter applies, in the append's own
// atomic write, to a fenced append (req.Unfenced false) that does not
// itself state ENDED: if the conversation's row is ENDED (row is its
// status as the writes committed before the append, and the requests
// before it in a batch, left it), the append is refused with an error
// wrapping ErrEnded, and nothing of it is written. End writes no event,
// so it does not move the log's last seq, and the fence alone would let a
// writer that read the log before the End (a stale activation in a
// cluster, paused or partitioned) append a message, an answer or tool
// results into an ended log, acknowledged, or merge its settings or
// fsm_state into the row. A request that states ENDED (an End, a write of
// lazarus import) and an unfenced one (an expiry, an answer given outside
// the conversation's actor, which StatusWritten keeps ENDED) pass. It
// returns nil otherwise.
func CheckEnded(req *messages.AppendRequest, row messages.ConversationStatus) error {
	if req.GetUnfenced() || row != messages.ConversationStatus_CONVERSATION_STATUS_ENDED ||
		req.GetStatus() == messages.ConversationStatus_CONVERSATION_STATUS_ENDED {
		return nil
	}
	return fmt.Errorf("append to %q: the conversation was ended (a fenced append to it must state ENDED): %w", req.GetConversationId(), ErrEnded)
}
