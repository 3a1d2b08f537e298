package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// The export format: what `lazarus export` writes and `lazarus import`
// reads (format "lazarus-export", version 1).
//
// JSON lines: UTF-8 text, one JSON object per line. Every line carries a
// "type" tag; every line but the header names its conversation and holds
// one record:
//
//	{"type":"header","format":"lazarus-export","version":1}
//	{"type":"conversation","conversation":ID,"record":Conversation}
//	{"type":"metadata","conversation":ID,"record":{"key":K,"value":V}}
//	{"type":"event","conversation":ID,"record":Event}
//	{"type":"summary","conversation":ID,"record":Summary}
//	{"type":"tool_call","conversation":ID,"record":ToolCallRecord}
//	{"type":"deadline","conversation":ID,"record":Deadline}
//
// A record is the protojson encoding of the message of package messages
// that its type names (lazarus/v1/records.proto): field names as in the
// .proto file ("fsm_state", "tool_call_id"), 64-bit integers as strings,
// timestamps in RFC 3339, enums by name, bytes in base64. A metadata
// record is one key/value pair of the conversation's metadata.
//
// The header comes first. One section per conversation follows: its
// conversation line, then its metadata (by key), its events (ascending seq:
// 1, 2, 3, ... with no gap), summaries (ascending to_seq), tool call rows
// (by id) and deadlines (by tool call id). Export writes exactly this
// order, compact and deterministic, so two exports of the same data are
// equal byte for byte. Files can be concatenated: a later header (of the
// same version) is allowed before a section.
//
// Audit rows (model calls) and tombstones are not exported.
//
// # Import rules
//
// Import reads the whole input and validates all of it before it writes
// anything; any violation rejects the whole input, naming the line:
//
//   - the first line is a version 1 header; every line is one JSON object
//     with no unknown field, in the envelope or in the record, and no enum
//     value this build does not know;
//   - a section starts with its conversation line, every other line names
//     the conversation of its section, and a conversation appears once;
//     its row has a status, and settings with non-empty values;
//   - events run 1..n; every record passes the Store's validation and
//     limits (journal.Validate*); a summary covers events that exist;
//   - a tool call row belongs to its section's conversation, has a
//     status, and is named by a tool_call event of its log; tool call ids
//     are unique in the input; a deadline is of a tool call of its
//     section, at most one per call; metadata keys are unique and values
//     non-empty.
//
// Then it checks the target Store: a conversation that exists, or was
// deleted (its id is tombstoned), or a tool call id another conversation
// owns, rejects the whole input; import never overwrites.
//
// Then it writes, through the Store contract, so the Store re-checks
// everything (the append fence re-checks every seq). One AppendBatch (one
// durable write) carries every conversation's events, tool call rows,
// deadlines, status and fsm_state; the checks above leave none of its
// requests a reason to fail on its own, so short of an I/O error it is all
// or nothing. Then each conversation's settings, metadata and summaries
// follow in small writes; an I/O error there is reported naming what was
// written.
//
// What comes back: every record exactly as exported, except the
// conversation row's "updated", which the Store sets to the time of the
// import, and its "created", which the Store sets to the time of the first
// event (as for a conversation a runtime wrote; the import time when the
// log is empty). An active conversation resumes (its turn runs) when a
// runtime opens the target.
const (
	formatName    = "lazarus-export"
	formatVersion = 1

	typeHeader       = "header"
	typeConversation = "conversation"
	typeMetadata     = "metadata"
	typeEvent        = "event"
	typeSummary      = "summary"
	typeToolCall     = "tool_call"
	typeDeadline     = "deadline"
)

// maxLineBytes bounds one line of input. The largest record (4 MiB, see
// journal.MaxRecordBytes) needs at most about 6 times that in JSON when
// every byte is an escaped control character.
const maxLineBytes = 32 << 20

// section is one conversation's records, as exported or imported.
type section struct {
	row       *messages.Conversation
	metadata  map[string]string
	events    []*messages.Event
	summaries []*messages.Summary
	toolCalls []*messages.ToolCallRecord
	deadlines []*messages.Deadline
}

func (s *section) id() string { return s.row.GetId() }

// envelope is one line of the format.
type envelope struct {
	Type         string          `json:"type"`
	Format       string          `json:"format,omitempty"`
	Version      int             `json:"version,omitempty"`
	Conversation *string         `json:"conversation,omitempty"`
	Record       json.RawMessage `json:"record,omitempty"`
}

// metadataRecord is the record of a metadata line.
type metadataRecord struct {
	Key   *string `json:"key"`
	Value *string `json:"value"`
}

// exporter writes the format to w.
type exporter struct {
	enc *json.Encoder
}

func newExporter(w io.Writer) (*exporter, error) {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	e := &exporter{enc: enc}
	return e, enc.Encode(envelope{Type: typeHeader, Format: formatName, Version: formatVersion})
}

func (e *exporter) line(typ, conv string, m proto.Message) error {
	rec, err := protoJSON(m)
	if err != nil {
		return fmt.Errorf("encode %s of %q: %w", typ, conv, err)
	}
	return e.enc.Encode(envelope{Type: typ, Conversation: &conv, Record: rec})
}

// section writes one conversation in the order the format documents.
func (e *exporter) section(s *section) error {
	id := s.id()
	if err := e.line(typeConversation, id, s.row); err != nil {
		return err
	}
	for _, k := range slices.Sorted(maps.Keys(s.metadata)) {
		rec, err := json.Marshal(metadataRecord{Key: &k, Value: ptr(s.metadata[k])})
		if err != nil {
			return err
		}
		if err := e.enc.Encode(envelope{Type: typeMetadata, Conversation: &id, Record: rec}); err != nil {
			return err
		}
	}
	for _, group := range []struct {
		typ  string
		recs []proto.Message
	}{
		{typeEvent, asMessages(s.events)},
		{typeSummary, asMessages(s.summaries)},
		{typeToolCall, asMessages(s.toolCalls)},
		{typeDeadline, asMessages(s.deadlines)},
	} {
		for _, m := range group.recs {
			if err := e.line(group.typ, id, m); err != nil {
				return err
			}
		}
	}
	return nil
}

func ptr[T any](v T) *T { return &v }

func asMessages[M proto.Message](in []M) []proto.Message {
	out := make([]proto.Message, len(in))
	for i, m := range in {
		out[i] = m
	}
	return out
}

// exportPage is how many events export reads at a time.
const exportPage = 1024

// collect reads one conversation's records from st, except its deadlines
// (see collectDeadlines). Tool call rows are found through the log (every
// row is written with its tool_call event) and the pending index.
func collect(ctx context.Context, st journal.Store, id string) (*section, error) {
	row, err := st.Conversation(ctx, id)
	if err != nil {
		if errors.Is(err, journal.ErrNotFound) {
			return nil, fmt.Errorf("no conversation %s: %w", displayID(id), err)
		}
		return nil, err
	}
	s := &section{row: row}
	if s.metadata, err = st.Metadata(ctx, id); err != nil {
		return nil, err
	}
	ids := map[string]bool{}
	for after := uint64(0); ; {
		evs, err := st.Events(ctx, id, journal.EventQuery{After: after, Before: pageEnd(after, exportPage)})
		if err != nil {
			return nil, err
		}
		if len(evs) == 0 {
			break
		}
		for _, ev := range evs {
			if tc := ev.GetToolCall(); tc != nil {
				ids[tc.GetCall().GetId()] = true
			}
		}
		s.events = append(s.events, evs...)
		after = evs[len(evs)-1].GetSeq()
	}
	for sum, err := st.LatestSummary(ctx, id); ; sum, err = st.SummaryBefore(ctx, id, sum.GetToSeq()) {
		if errors.Is(err, journal.ErrNotFound) {
			break
		}
		if err != nil {
			return nil, err
		}
		s.summaries = append(s.summaries, sum)
	}
	slices.Reverse(s.summaries)
	pending, err := st.PendingToolCalls(ctx, id)
	if err != nil {
		return nil, err
	}
	for _, p := range pending {
		ids[p.GetId()] = true
	}
	for _, call := range slices.Sorted(maps.Keys(ids)) {
		rec, err := st.ToolCall(ctx, call)
		if errors.Is(err, journal.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if rec.GetConversationId() == id {
			s.toolCalls = append(s.toolCalls, rec)
		}
	}
	return s, nil
}

// collectDeadlines reads every deadline of the Store once and hands each
// section its own, sorted by tool call id. The Store has no per-conversation
// deadline read, so this costs one pass over all scheduled deadlines.
func collectDeadlines(ctx context.Context, st journal.Store, secs map[string]*section) error {
	err := st.Deadlines(ctx, time.Time{}, func(d *messages.Deadline) error {
		if s := secs[d.GetConversationId()]; s != nil {
			s.deadlines = append(s.deadlines, d)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, s := range secs {
		slices.SortFunc(s.deadlines, func(a, b *messages.Deadline) int { return cmp.Compare(a.GetToolCallId(), b.GetToolCallId()) })
	}
	return nil
}

// lineError is a rejected input line.
func lineError(n int, format string, args ...any) error {
	return fmt.Errorf("line %d: %s: %w", n, fmt.Sprintf(format, args...), journal.ErrInvalid)
}

// strictJSON decodes records: unknown fields are errors.
var strictJSON = protojson.UnmarshalOptions{}

// readExport parses and validates a whole input (see the package comment
// of this file for the rules). It reads nothing from a Store and never
// panics; every error wraps journal.ErrInvalid and names the line.
func readExport(r io.Reader) ([]*section, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxLineBytes)
	var (
		secs     []*section
		cur      *section
		curLine  int
		header   bool
		convSeen = map[string]int{}
		callSeen = map[string]string{} // tool call id -> conversation
		n        int
	)
	finish := func() error {
		if cur == nil {
			return nil
		}
		if err := validateSection(cur, callSeen); err != nil {
			if !errors.Is(err, journal.ErrInvalid) {
				err = fmt.Errorf("%w: %w", err, journal.ErrInvalid)
			}
			return fmt.Errorf("conversation %s (line %d): %w", displayID(cur.id()), curLine, err)
		}
		secs = append(secs, cur)
		cur = nil
		return nil
	}
	for sc.Scan() {
		n++
		text := bytes.TrimSpace(sc.Bytes())
		if len(text) == 0 {
			continue
		}
		var env envelope
		dec := json.NewDecoder(bytes.NewReader(text))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&env); err != nil {
			return nil, lineError(n, "not a JSON object of this format (%v)", err)
		}
		if _, err := dec.Token(); !errors.Is(err, io.EOF) {
			return nil, lineError(n, "more than one JSON value on the line")
		}
		if env.Type == typeHeader {
			if env.Format != formatName || env.Version != formatVersion {
				return nil, lineError(n, "header of format %q version %d; this build reads %q version %d", env.Format, env.Version, formatName, formatVersion)
			}
			if env.Conversation != nil || len(env.Record) > 0 {
				return nil, lineError(n, "a header has no conversation and no record")
			}
			if err := finish(); err != nil {
				return nil, err
			}
			header = true
			continue
		}
		if !header {
			return nil, lineError(n, "the input does not start with a %s header (is it a lazarus export?)", formatName)
		}
		if env.Format != "" || env.Version != 0 {
			return nil, lineError(n, "only a header has a format and a version")
		}
		if env.Conversation == nil {
			return nil, lineError(n, "%s line without a conversation", env.Type)
		}
		conv := *env.Conversation
		if len(env.Record) == 0 {
			return nil, lineError(n, "%s line without a record", env.Type)
		}
		if env.Type == typeConversation {
			if err := finish(); err != nil {
				return nil, err
			}
			row := &messages.Conversation{}
			if err := unmarshalRecord(env.Record, row); err != nil {
				return nil, lineError(n, "conversation record: %v", err)
			}
			if row.GetId() != conv {
				return nil, lineError(n, "conversation record of id %q on a line of conversation %q", row.GetId(), conv)
			}
			if err := journal.ValidateID("conversation id", conv); err != nil {
				return nil, lineError(n, "%v", err)
			}
			if prev, ok := convSeen[conv]; ok {
				return nil, lineError(n, "conversation %s appears again (first on line %d)", displayID(conv), prev)
			}
			convSeen[conv] = n
			cur, curLine = &section{row: row, metadata: map[string]string{}}, n
			continue
		}
		if cur == nil {
			return nil, lineError(n, "%s line before any conversation line", env.Type)
		}
		if conv != cur.id() {
			return nil, lineError(n, "%s line of conversation %q in the section of %q", env.Type, conv, cur.id())
		}
		if err := cur.add(env.Type, env.Record); err != nil {
			return nil, lineError(n, "%v", err)
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, lineError(n+1, "longer than %d bytes", maxLineBytes)
		}
		return nil, fmt.Errorf("read input: %w", err)
	}
	if !header {
		return nil, fmt.Errorf("empty input: no %s header: %w", formatName, journal.ErrInvalid)
	}
	if err := finish(); err != nil {
		return nil, err
	}
	return secs, nil
}

// add decodes one record line into the section, checking what one line
// can show.
func (s *section) add(typ string, raw json.RawMessage) error {
	switch typ {
	case typeMetadata:
		var kv metadataRecord
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&kv); err != nil || kv.Key == nil || kv.Value == nil {
			return fmt.Errorf(`metadata record is not {"key": "...", "value": "..."} (%v)`, err)
		}
		if err := journal.ValidateID("metadata key", *kv.Key); err != nil {
			return err
		}
		if *kv.Value == "" {
			return fmt.Errorf("metadata %q has an empty value (the Store reads an empty value as a delete)", *kv.Key)
		}
		if _, dup := s.metadata[*kv.Key]; dup {
			return fmt.Errorf("metadata key %q appears twice", *kv.Key)
		}
		s.metadata[*kv.Key] = *kv.Value
	case typeEvent:
		ev := &messages.Event{}
		if err := unmarshalRecord(raw, ev); err != nil {
			return fmt.Errorf("event record: %v", err)
		}
		if want := uint64(len(s.events)) + 1; ev.GetSeq() != want {
			return fmt.Errorf("event of seq %d, want %d (events run 1, 2, 3, ... in order)", ev.GetSeq(), want)
		}
		if err := journal.ValidateEvent(ev); err != nil {
			return fmt.Errorf("event %d: %v", ev.GetSeq(), err)
		}
		s.events = append(s.events, ev)
	case typeSummary:
		sum := &messages.Summary{}
		if err := unmarshalRecord(raw, sum); err != nil {
			return fmt.Errorf("summary record: %v", err)
		}
		s.summaries = append(s.summaries, sum)
	case typeToolCall:
		rec := &messages.ToolCallRecord{}
		if err := unmarshalRecord(raw, rec); err != nil {
			return fmt.Errorf("tool_call record: %v", err)
		}
		s.toolCalls = append(s.toolCalls, rec)
	case typeDeadline:
		d := &messages.Deadline{}
		if err := unmarshalRecord(raw, d); err != nil {
			return fmt.Errorf("deadline record: %v", err)
		}
		s.deadlines = append(s.deadlines, d)
	default:
		return fmt.Errorf("unknown line type %q", typ)
	}
	return nil
}

// unmarshalRecord decodes a protojson record strictly and checks its enums
// and timestamps.
func unmarshalRecord(raw json.RawMessage, m proto.Message) error {
	if err := strictJSON.Unmarshal(raw, m); err != nil {
		return err
	}
	return checkRecord(m.ProtoReflect())
}

var timestampName = (&timestamppb.Timestamp{}).ProtoReflect().Descriptor().FullName()

// checkRecord walks a decoded record: every enum value must be one this
// build declares (protojson accepts any number), and every timestamp must
// be valid.
func checkRecord(m protoreflect.Message) error {
	if m.Descriptor().FullName() == timestampName {
		ts := m.Interface().(*timestamppb.Timestamp)
		if err := ts.CheckValid(); err != nil {
			return err
		}
		return nil
	}
	var err error
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList():
			l := v.List()
			for i := 0; i < l.Len() && err == nil; i++ {
				err = checkValue(fd, l.Get(i))
			}
		case fd.IsMap():
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				err = checkValue(fd.MapValue(), mv)
				return err == nil
			})
		default:
			err = checkValue(fd, v)
		}
		return err == nil
	})
	return err
}

func checkValue(fd protoreflect.FieldDescriptor, v protoreflect.Value) error {
	switch fd.Kind() {
	case protoreflect.EnumKind:
		if fd.Enum().Values().ByNumber(v.Enum()) == nil {
			return fmt.Errorf("field %s: enum value %d is not one of %s", fd.Name(), v.Enum(), fd.Enum().FullName())
		}
	case protoreflect.MessageKind, protoreflect.GroupKind:
		if err := checkRecord(v.Message()); err != nil {
			return fmt.Errorf("field %s: %w", fd.Name(), err)
		}
	}
	return nil
}

// latest is the largest timestamp protobuf allows: the worst case of the
// timestamps the Store adds to a row.
var latest = &timestamppb.Timestamp{Seconds: 253402300799, Nanos: 999999999}

// validateSection checks a complete section: what needs more than one
// line. callSeen maps every tool call id of earlier sections to its
// conversation.
func validateSection(s *section, callSeen map[string]string) error {
	id := s.id()
	row := s.row
	if row.GetStatus() == messages.ConversationStatus_CONVERSATION_STATUS_UNSPECIFIED {
		return errors.New("conversation record without a status")
	}
	for k, v := range row.GetSettings() {
		if v == "" {
			return fmt.Errorf("setting %q has an empty value (the Store reads an empty value as a delete)", k)
		}
	}
	if err := journal.ValidateMetadata(id, row.GetSettings()); err != nil {
		return fmt.Errorf("settings: %w", err)
	}
	worst := proto.Clone(row).(*messages.Conversation)
	worst.Created, worst.Updated = latest, latest
	if n := proto.Size(worst); n > journal.MaxRecordBytes {
		return fmt.Errorf("conversation record of %d bytes exceeds %d: %w", n, journal.MaxRecordBytes, journal.ErrInvalid)
	}
	if err := journal.ValidateMetadata(id, s.metadata); err != nil {
		return fmt.Errorf("metadata: %w", err)
	}
	last := uint64(len(s.events))
	sums := map[uint64]bool{}
	for _, sum := range s.summaries {
		if err := journal.ValidateSummary(id, sum, last); err != nil {
			return err
		}
		if sums[sum.GetToSeq()] {
			return fmt.Errorf("two summaries up to seq %d", sum.GetToSeq())
		}
		sums[sum.GetToSeq()] = true
	}
	named := map[string]bool{} // tool call ids of tool_call events
	for _, ev := range s.events {
		if tc := ev.GetToolCall(); tc != nil {
			named[tc.GetCall().GetId()] = true
		}
	}
	calls := map[string]bool{}
	for _, rec := range s.toolCalls {
		if err := journal.ValidateToolCall(rec); err != nil {
			return err
		}
		call := rec.GetId()
		switch {
		case rec.GetConversationId() != id:
			return fmt.Errorf("tool call %s names conversation %q", displayID(call), rec.GetConversationId())
		case rec.GetStatus() == messages.ToolCallStatus_TOOL_CALL_STATUS_UNSPECIFIED:
			return fmt.Errorf("tool call %s without a status", displayID(call))
		case calls[call]:
			return fmt.Errorf("tool call %s appears twice", displayID(call))
		case callSeen[call] != "":
			return fmt.Errorf("tool call %s also appears in conversation %q (tool call ids are unique)", displayID(call), callSeen[call])
		case !named[call]:
			return fmt.Errorf("tool call %s has no tool_call event in the log (a row is written with its event)", displayID(call))
		}
		calls[call] = true
	}
	dls := map[string]bool{}
	for _, d := range s.deadlines {
		if err := journal.ValidateDeadline(d); err != nil {
			return err
		}
		call := d.GetToolCallId()
		switch {
		case d.GetConversationId() != id:
			return fmt.Errorf("deadline of %s names conversation %q", displayID(call), d.GetConversationId())
		case !calls[call]:
			return fmt.Errorf("deadline of %s, which is no tool call of this conversation", displayID(call))
		case dls[call]:
			return fmt.Errorf("two deadlines of tool call %s", displayID(call))
		}
		dls[call] = true
	}
	for _, req := range s.requests() {
		if err := journal.ValidateAppend(req); err != nil {
			return err
		}
	}
	for call := range calls {
		callSeen[call] = id
	}
	return nil
}

// requests returns the appends that write the section's log and rows: the
// first carries the first events (at most journal.MaxEventsPerAppend) with
// every tool call row, deadline, the status and fsm_state; the others the
// rest of the events, each fenced on the one before.
func (s *section) requests() []*messages.AppendRequest {
	first := &messages.AppendRequest{
		ConversationId: s.id(),
		ToolCalls:      s.toolCalls,
		Schedule:       s.deadlines,
		Status:         s.row.GetStatus(),
		FsmState:       s.row.GetFsmState(),
	}
	reqs := []*messages.AppendRequest{first}
	for i := 0; i < len(s.events); i += journal.MaxEventsPerAppend {
		chunk := s.events[i:min(i+journal.MaxEventsPerAppend, len(s.events))]
		if i == 0 {
			first.Events = chunk
			continue
		}
		reqs = append(reqs, &messages.AppendRequest{ConversationId: s.id(), ExpectedLast: uint64(i), Events: chunk})
	}
	return reqs
}

// importReport says what an import wrote.
type importReport struct {
	// created: conversations whose "created" the Store could not keep
	// (see the import rules).
	createdChanged []string
}

// importSections writes validated sections into st (see the import
// rules). On an error nothing was written, unless the error says
// otherwise.
func importSections(ctx context.Context, st journal.Store, secs []*section) (*importReport, error) {
	if err := preflight(ctx, st, secs); err != nil {
		return nil, fmt.Errorf("nothing imported: %w", err)
	}
	var reqs []*messages.AppendRequest
	var owner []int
	for i, s := range secs {
		for _, req := range s.requests() {
			// The Store sets Seq on the events it is given: give it copies,
			// so a failed write leaves the sections as they were.
			reqs = append(reqs, proto.Clone(req).(*messages.AppendRequest))
			owner = append(owner, i)
		}
	}
	failed := map[int]error{}
	if len(reqs) > 0 {
		for i, res := range st.AppendBatch(ctx, reqs) {
			if res.Err != nil && failed[owner[i]] == nil {
				failed[owner[i]] = res.Err
			}
		}
	}
	if len(failed) > 0 {
		var written, notWritten []string
		var first error
		for i, s := range secs {
			if err := failed[i]; err != nil {
				notWritten = append(notWritten, displayID(s.id()))
				first = cmp.Or(first, err)
			} else {
				written = append(written, displayID(s.id()))
			}
		}
		if len(written) == 0 {
			return nil, fmt.Errorf("nothing was imported: %w", first)
		}
		return nil, fmt.Errorf("import failed part-way: the logs of %s were written, not those of %s, and no summary, setting or metadata was: %w",
			strings.Join(written, ", "), strings.Join(notWritten, ", "), first)
	}
	rep := &importReport{}
	for i, s := range secs {
		id := s.id()
		err := func() error {
			if len(s.row.GetSettings()) > 0 {
				if err := st.PutConversation(ctx, journal.ConversationUpdate{ID: id, Settings: s.row.GetSettings()}); err != nil {
					return fmt.Errorf("settings: %w", err)
				}
			}
			if len(s.metadata) > 0 {
				if err := st.PutMetadata(ctx, id, s.metadata); err != nil {
					return fmt.Errorf("metadata: %w", err)
				}
			}
			for _, sum := range s.summaries {
				if err := st.PutSummary(ctx, id, sum); err != nil {
					return fmt.Errorf("summary up to seq %d: %w", sum.GetToSeq(), err)
				}
			}
			return nil
		}()
		if err != nil {
			done := make([]string, 0, i)
			for _, d := range secs[:i] {
				done = append(done, displayID(d.id()))
			}
			return nil, fmt.Errorf("import failed part-way: every log was written, and %s is complete, but conversation %s lacks some of its settings, metadata or summaries: %w",
				orNone(done), displayID(id), err)
		}
		if want := expectedCreated(s); want != nil && !proto.Equal(want, s.row.GetCreated()) {
			rep.createdChanged = append(rep.createdChanged, id)
		}
	}
	return rep, nil
}

func orNone(ids []string) string {
	if len(ids) == 0 {
		return "no conversation"
	}
	return strings.Join(ids, ", ")
}

// expectedCreated is the "created" the Store gives an imported row: the
// time of its first event, or nil (the import time) if it has none.
func expectedCreated(s *section) *timestamppb.Timestamp {
	if len(s.events) == 0 {
		return nil
	}
	return s.events[0].GetTime()
}

// preflight checks the target Store before anything is written: no
// conversation of the input exists or was deleted, and no tool call id of
// the input is taken.
func preflight(ctx context.Context, st journal.Store, secs []*section) error {
	for _, s := range secs {
		id := s.id()
		_, err := st.Conversation(ctx, id)
		switch {
		case err == nil:
			return fmt.Errorf("conversation %s already exists in the target; import never overwrites: %w", displayID(id), journal.ErrConflict)
		case !errors.Is(err, journal.ErrNotFound):
			return err
		}
		if last, err := st.LastSeq(ctx, id); err != nil {
			return err
		} else if last != 0 {
			return fmt.Errorf("conversation %s already has %d events in the target; import never overwrites: %w", displayID(id), last, journal.ErrConflict)
		}
		// An empty metadata merge writes nothing and fails only on a
		// tombstone: the contract's way to ask "was this id deleted?".
		if err := st.PutMetadata(ctx, id, nil); err != nil {
			if errors.Is(err, journal.ErrDeleted) {
				return fmt.Errorf("conversation %s was deleted in the target, and a deleted id can never be written again: %w", displayID(id), err)
			}
			return err
		}
		for _, rec := range s.toolCalls {
			row, err := st.ToolCall(ctx, rec.GetId())
			switch {
			case err == nil:
				return fmt.Errorf("tool call id %s already belongs to conversation %s in the target: %w", displayID(rec.GetId()), displayID(row.GetConversationId()), journal.ErrConflict)
			case !errors.Is(err, journal.ErrNotFound):
				return err
			}
		}
	}
	return nil
}
