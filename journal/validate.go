package journal

import (
	"sync"
	"time"
	"unicode/utf8"

	"github.com/lazarusrt/lazarus/messages"
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
	bp := encodeBufs.Get().(*[]byte)
	b, err := proto.MarshalOptions{}.MarshalAppend((*bp)[:0], m)
	n := len(b)
	if cap(b) <= maxPooledBuf {
		*bp = b[:0]
		encodeBufs.Put(bp)
	}
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

// ValidateEvent checks one event before it is appended: a body is set and
// it fits MaxEventBytes.
func ValidateEvent(ev *messages.Event) error {
	if ev == nil {
		return Invalidf("nil event")
	}
	if ev.GetBody() == nil {
		return Invalidf("event without a body")
	}
	return checkSize("event", ev, MaxEventBytes)
}

// ValidateToolCall checks a tool call row: its ids, that it fits, and that
// it does not set the storage-internal result_seq.
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
	if rec.GetResultSeq() != 0 {
		return Invalidf("tool call %s sets result_seq, which only a store sets", rec.GetId())
	}
	return checkSize("tool call "+rec.GetId(), rec, MaxRecordBytes)
}

// ValidateDeadline checks a deadline: its ids and a set time.
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

// ValidateAppend checks everything in req that can be checked without
// reading the Store: ids, counts, sizes, statuses; and that every tool call,
// deadline and resolution names req's conversation where it names one.
func ValidateAppend(req *messages.AppendRequest) error {
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
	for i, ev := range req.GetEvents() {
		if err := ValidateEvent(ev); err != nil {
			return Invalidf("event %d of append to %q: %v", i, conv, err)
		}
	}
	for _, tc := range req.GetToolCalls() {
		if err := ValidateToolCall(tc); err != nil {
			return err
		}
		if tc.GetConversationId() != conv {
			return Invalidf("tool call %s names conversation %q in an append to %q", tc.GetId(), tc.GetConversationId(), conv)
		}
	}
	for _, r := range req.GetResolutions() {
		if r == nil {
			return Invalidf("nil resolution in append to %q", conv)
		}
		if err := ValidateResolution(r.GetToolCallId(), r.GetStatus()); err != nil {
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
	if st := req.GetFsmState(); st != nil {
		if err := checkSize("fsm_state of "+conv, st, MaxRecordBytes); err != nil {
			return err
		}
	}
	return nil
}

// ValidateSummary checks a summary against the conversation's last seq:
// 1 <= FromSeq <= ToSeq <= lastSeq, and that it fits.
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
	return checkSize("summary of "+conv, s, MaxRecordBytes)
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

// Timestamp converts t to its protobuf form; the zero time gives nil, which
// is how records say "unset".
func Timestamp(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}
