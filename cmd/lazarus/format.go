package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/lazarusrt/lazarus/journal"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// The export format: what `lazarus export` writes and `lazarus import`
// reads (format "lazarus-export", version 5; versions 4, 3 and 2 are
// still read).
//
// JSON lines: UTF-8 text, one JSON object per line, every line ended by a
// newline. Every line carries a "type" tag; every line but the header and
// the trailer names its conversation:
//
//	{"type":"header","format":"lazarus-export","version":5}
//	{"type":"conversation","conversation":ID,"record":Conversation}
//	{"type":"metadata","conversation":ID,"record":{"key":K,"value":V}}
//	{"type":"event","conversation":ID,"record":Event}
//	{"type":"tool_call","conversation":ID,"record":ToolCallRecord}
//	{"type":"summary","conversation":ID,"record":Summary}
//	{"type":"deadline","conversation":ID,"record":Deadline}
//	{"type":"schedule","conversation":ID,"record":Schedule}
//	{"type":"end","conversation":ID,"record":End}
//	{"type":"trailer","record":{"conversations":C,"lines":L}}
//
// A record is the protojson encoding of the message of package messages
// that its type names (lazarus/v1/records.proto; Schedule is in
// lazarus/v1/schedule.proto): field names as in the
// .proto file ("fsm_state", "tool_call_id"), 64-bit integers as strings,
// timestamps in RFC 3339, enums by name, bytes in base64. A metadata
// record is one key/value pair of the conversation's metadata. End is
// {"last_seq":N,"tool_calls":K,"summaries":S,"deadlines":D,"schedules":W,"metadata":M}
// (plain JSON numbers): what the section holds.
//
// The header comes first. One section per conversation follows: its
// conversation line, its metadata (by key), its events (seq 1, 2, 3, ...
// with no gap), each tool_call event directly followed by the row of its
// call, then its summaries (ascending to_seq), its deadlines (by tool call
// id), its pending schedules (journal.ScheduleStore: by schedule id) and
// its end line. The trailer closes the file: it counts the
// sections and the lines before it (the header included). Export writes
// exactly this order, compact and deterministic, so two exports of the same
// data are equal byte for byte. Files can be concatenated: a header may
// follow a trailer.
//
// The end lines and the trailer make a cut anywhere visible: an input that
// stops before its last trailer, or within a line, or before the newline
// of its last line, is refused.
//
// A fork (a row with forked_from, journal.Forks) is a section like any
// other, but for two things. Its log starts after the summary it copied
// (its base), when it copied one: that summary's line comes right after
// the metadata, before the events, which run from its to_seq+1; its other
// summaries follow the events as usual (the end line counts the base
// among the summaries). And its tool_call events up to its origin's seq
// (forked_from.seq: the events it copied) have no row line: their rows
// are the source's. Its own calls, after that seq, have their rows.
//
// Audit rows (model calls), tombstones and file checkpoints
// (journal.FileCheckpoints: the records and their blobs) are not
// exported. A source Store without journal.ScheduleStore has no
// schedules: its sections have none.
//
// Version 4 is version 5 without schedule revisions: a schedule with a
// "revision" in it is refused (a build that wrote version 4 had none; a
// schedule without one, in any version, is a record from before
// revisions). Version 3 is version 4 without forks: a row with forked_from
// in it is refused. Version 2 is version 3 without schedule lines, and with an end record
// without "schedules": it is still read (a file of version 2 holds no
// schedules; a schedule line in it, or a "schedules" count in its end
// record, is refused). Each file of a concatenated input is read by the
// version of its own header.
//
// Version 1 (no end lines, no trailer, rows grouped after the events) is
// refused: a cut at a section boundary of a version 1 file cannot be told
// from its end, which is the fault version 2 exists to catch. Export the
// source again with this build.
//
// # Import rules
//
// Import reads the input twice. The first pass checks all of it and writes
// nothing; any violation rejects the whole input, naming the line:
//
//   - the first line is a version 5 (or 4, 3, 2) header; every line is valid
//     UTF-8 and one JSON object
//     with no unknown field, in the envelope or in the record, and no enum
//     value this build does not know, ended by a newline;
//   - a section starts with its conversation line, every other line names
//     the conversation of its section, the line types come in the order
//     above, and a conversation appears once; its row has a status,
//     settings with non-empty values, and a fork origin (forked_from) only
//     from version 4, with a valid id and a seq;
//   - events run 1..n (a fork's from its base's to_seq+1, its base line
//     before them); every tool_call event is followed by the row of its
//     call, but a fork's up to its origin's seq, which have none, and every
//     row follows its event (so each names the other); a fork's base
//     covers less than its origin's seq, and its log reaches that seq;
//     no tool_result event answers a call whose row is pending (a call's
//     row is resolved in the write of its result);
//     every record passes the Store's validation and limits
//     (journal.Validate*, and every append request import will make);
//     summaries cover events that exist; fsm_state.last_seq, when the row
//     has an fsm_state, is at most n (the runtime leaves the cache behind
//     the log in the middle of a turn; the log wins);
//   - a tool call row has a status and belongs to its section's
//     conversation; tool call ids are unique in the input; a deadline is of
//     a tool call of its section, at most one per call; metadata keys are
//     unique and values non-empty;
//   - a schedule passes journal.ValidateSchedule, names its section's
//     conversation, has a revision only from version 5, and comes by id (one per id, at most
//     journal.MaxSchedulesPerConversation in a section); schedule ids are
//     per conversation, so two sections may each hold one of the same id;
//   - the end line counts what its section holds, and the trailer counts
//     the sections and lines of its file; the input ends with a trailer.
//
// The same pass checks the target Store, when the directory holds one: a
// conversation that exists, or was deleted (its id is tombstoned), or has
// metadata but no row (a Store keeps metadata without a row), or a
// tool call id another conversation owns, rejects the whole input; import never overwrites. A target Store without
// journal.ScheduleStore rejects an input that holds a schedule, with an
// error wrapping errors.ErrUnsupported (an input without one imports);
// so does a new directory's, checked once it is created and before its
// first write.
//
// The second pass reads the input again and writes it, through the Store
// contract (the append fence re-checks every seq). It re-checks every line
// as the first pass did, and before each write it checks that the input
// read so far is byte for byte what the first pass read (a SHA-256 at each
// write); an input read from a pipe is spooled to an unlinked temporary
// file by the first pass, so only a --file that another process changes
// can differ. A conversation is written in this order: its events and rows
// in appends of at most importChunkEvents events or importChunkBytes bytes
// of input, the first of which creates its row with status ENDED (a
// runtime resumes only ACTIVE conversations; a fork's first is a
// journal.Forks.Fork with its base, its origin and copied events only,
// status ENDED, and its own events start a new append); its summaries; its
// schedules (journal.ScheduleStore.PutSchedule, one at a time; the first
// creates the row, ENDED, if the conversation has no events); its
// settings and created time, and its metadata; then one append with its status, fsm_state and
// deadlines. A runtime that meets a schedule of an ENDED conversation
// removes it when it comes due; so an incomplete conversation keeps its
// status ENDED whatever it holds.
// So a conversation is complete in the target once it has its exported
// status, and a failed write or a crash leaves at most the conversation
// being written incomplete and ENDED; the error names it. A write that
// fails with journal.ErrUnknownOutcome may have landed: the error names
// its conversation as one that may be in the target, ENDED unless that
// write gave it its exported status.
//
// Memory: neither command holds a conversation's log. Export holds one
// page of events; import one line and one append of events. Besides, per
// conversation being read: its metadata (at most journal.MaxRecordBytes),
// its deadlines (one per pending human call), the to_seq of each of its
// summaries, and on export its schedules (at most
// journal.MaxSchedulesPerConversation; import holds one); and for the
// whole input: the ids of its conversations, 16 bytes per tool call id
// (the uniqueness check) and 32 bytes per write (the digests of the second
// pass).
//
// What comes back: every record exactly as exported, except the
// conversation row's "updated", which the Store sets to the time of the
// import. Its "created" is written back with its settings
// (journal.ConversationUpdate.Created), after the write that created the
// row set it otherwise (the first event's time, or the import's). An
// active conversation resumes (its turn runs) when a runtime opens the
// target.
const (
	formatName    = "lazarus-export"
	formatVersion = 5
	// formatVersionRevisions is the first version whose schedules carry
	// their revision (messages.Schedule.Revision).
	formatVersionRevisions = 5
	// formatVersionForks is the first version that carries forks: version
	// 5 without schedule revisions.
	formatVersionForks = 4
	// formatVersionSchedules is the first version with schedule lines:
	// version 4 without forks.
	formatVersionSchedules = 3
	// formatVersionNoSchedules is the oldest version read: version 3
	// without schedules.
	formatVersionNoSchedules = 2

	typeHeader       = "header"
	typeConversation = "conversation"
	typeMetadata     = "metadata"
	typeEvent        = "event"
	typeToolCall     = "tool_call"
	typeSummary      = "summary"
	typeDeadline     = "deadline"
	typeSchedule     = "schedule"
	typeEnd          = "end"
	typeTrailer      = "trailer"
)

// maxLineBytes bounds one line of input. The largest record (4 MiB, see
// journal.MaxRecordBytes) needs at most about 6 times that in JSON when
// every byte is an escaped control character.
const maxLineBytes = 32 << 20

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

// endRecord is the record of an end line: what its section holds.
type endRecord struct {
	LastSeq   *uint64 `json:"last_seq"`
	ToolCalls *uint64 `json:"tool_calls"`
	Summaries *uint64 `json:"summaries"`
	Deadlines *uint64 `json:"deadlines"`
	// Schedules is absent in version 2.
	Schedules *uint64 `json:"schedules,omitempty"`
	Metadata  *uint64 `json:"metadata"`
}

// trailerRecord is the record of a trailer line: the sections and the
// lines (header included) of its file before it.
type trailerRecord struct {
	Conversations *uint64 `json:"conversations"`
	Lines         *uint64 `json:"lines"`
}

// counts is what a section holds, as its end line states it.
type counts struct {
	lastSeq, toolCalls, summaries, deadlines, schedules, metadata uint64
}

func (c counts) record() endRecord {
	return endRecord{LastSeq: &c.lastSeq, ToolCalls: &c.toolCalls, Summaries: &c.summaries, Deadlines: &c.deadlines, Schedules: &c.schedules, Metadata: &c.metadata}
}

func ptr[T any](v T) *T { return &v }

// lineError is a rejected input line. Like journal.Invalidf, which makes
// it, it says ErrInvalid's text once, even when an argument is an error
// that says it already.
func lineError(n int64, format string, args ...any) error {
	return journal.Invalidf("line %d: "+format, append([]any{n}, args...)...)
}

// maxRejectBytes bounds the text of the error of an input import
// rejects: it quotes what it found (an id, a type, an enum value) and a
// line may be 32 MiB.
const maxRejectBytes = 1 << 10

// clippedError is an error whose text is cut in the middle to
// maxRejectBytes, keeping its start (the line, the problem) and its end
// (the sentinel's text); errors.Is and errors.As see the whole of it.
type clippedError struct{ err error }

func (e *clippedError) Error() string {
	msg := e.err.Error()
	head, tail := runeCut(msg, maxRejectBytes*3/4), runeCut(msg, len(msg)-maxRejectBytes/4)
	return fmt.Sprintf("%s ...[%d bytes left out]... %s", msg[:head], tail-head, msg[tail:])
}

func (e *clippedError) Unwrap() error { return e.err }

// runeCut is i, or the start of the rune of s it falls in.
func runeCut(s string, i int) int {
	for i > 0 && i < len(s) && !utf8.RuneStart(s[i]) {
		i--
	}
	return i
}

// clipReject returns err, or err with its text cut to about maxRejectBytes
// if it is longer.
func clipReject(err error) error {
	if err == nil || len(err.Error()) <= maxRejectBytes {
		return err
	}
	return &clippedError{err: err}
}

// strictJSON decodes records: unknown fields are errors.
var strictJSON = protojson.UnmarshalOptions{}

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

// invalid makes sure err wraps journal.ErrInvalid.
func invalid(err error) error {
	if err == nil || errors.Is(err, journal.ErrInvalid) {
		return err
	}
	return fmt.Errorf("%w: %w", err, journal.ErrInvalid)
}
