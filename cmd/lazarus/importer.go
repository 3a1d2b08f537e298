package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"strings"
	"unicode/utf8"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/snapshot"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

var (
	// errTruncated: the input stops before its end (no trailer, a section
	// without its end line, a last line without its newline). It wraps
	// journal.ErrInvalid.
	errTruncated = fmt.Errorf("the input is cut short (an export ends with a trailer line): %w", journal.ErrInvalid)
	// errInputChanged: the second pass of an import read other bytes than
	// the first.
	errInputChanged = errors.New("the input changed while it was imported")
)

// Import writes a conversation's events in appends of at most
// importChunkEvents events and importChunkBytes bytes of input lines, its
// events' and their tool call rows' (more only for a single event and its
// row): the memory an import holds, and well within journal.MaxAppendBytes.
const (
	importChunkEvents = journal.MaxEventsPerAppend
	importChunkBytes  = 4 << 20
)

// importOptions tunes an import; the zero value is the default.
type importOptions struct {
	// chunkEvents and chunkBytes bound one append (defaults above).
	chunkEvents, chunkBytes int
	// dryRun stops after the first pass.
	dryRun bool
	// onSection is called with the description of each conversation, as
	// the first pass (dryRun) or the second pass completes it.
	onSection func(desc string)
	// onNoCreated is called, in the second pass, with each conversation
	// whose exported row has no "created" (an export of this tool always
	// has one): the Store's stays, its first event's time or the import's.
	onNoCreated func(id string)
	// prog reports progress (nil: none).
	prog *progress
}

// importStream imports the export in: a first pass checks all of it
// (against the target Store if open(false) finds one) and writes nothing;
// a second pass writes it, into open(true). See the import rules in
// format.go. An input that cannot seek (a pipe) is spooled to an unlinked
// temporary file by the first pass. The stores open returns belong to the
// caller.
func importStream(ctx context.Context, in io.Reader, open func(create bool) (journal.Store, error), o importOptions) error {
	if o.chunkEvents <= 0 {
		o.chunkEvents = importChunkEvents
	}
	if o.chunkBytes <= 0 {
		o.chunkBytes = importChunkBytes
	}
	st, err := open(false)
	switch {
	case errors.Is(err, errNoStore):
		st = nil // a new directory: nothing in it to conflict with
	case err != nil:
		return err
	}
	first, rewind, cleanup, err := rewindable(in)
	if err != nil {
		return err
	}
	defer cleanup()
	p1 := newImporter(ctx, first, st, false, o)
	if err := p1.run(); err != nil {
		// It may quote a value of the input, as long as its line.
		err = clipReject(err)
		var te *targetError
		if errors.As(err, &te) {
			err = clipReject(te.err)
			if o.dryRun {
				return fmt.Errorf("nothing would be imported: %w", err)
			}
			return fmt.Errorf("nothing imported: %w", err)
		}
		if o.dryRun {
			return fmt.Errorf("nothing would be imported: %w", err)
		}
		if ctx.Err() != nil {
			// Stopped (an interrupt), not refused: the input may be fine.
			return fmt.Errorf("nothing imported: %w", err)
		}
		return fmt.Errorf("input rejected, nothing imported: %w", err)
	}
	if o.dryRun {
		if o.onSection != nil {
			for _, d := range p1.described {
				o.onSection(d)
			}
		}
		return nil
	}
	if st == nil {
		if st, err = open(true); err != nil {
			return err
		}
	}
	if _, ok := st.(journal.ScheduleStore); !ok && p1.hasSchedules {
		return fmt.Errorf("nothing imported: %w", noSchedules(st))
	}
	second, err := rewind()
	if err != nil {
		return fmt.Errorf("nothing imported: rewind the input: %w", err)
	}
	o.prog.phase("import: writing")
	p2 := newImporter(ctx, second, st, true, o)
	p2.checkpoints = p1.checkpoints
	if err := p2.run(); err != nil {
		return p2.failure(err)
	}
	if p2.r.digest() != p1.r.digest() {
		// Every write matched the first pass; only bytes after the last
		// one differ, and they were checked again.
		return fmt.Errorf("every conversation was imported, but %w after the last write", errInputChanged)
	}
	return nil
}

// rewindable returns a reader for the first pass, and a rewind that
// returns one for the second giving the same bytes: in itself, sought back,
// if it can seek, else a spool the first pass fills.
func rewindable(in io.Reader) (first io.Reader, rewind func() (io.Reader, error), cleanup func(), err error) {
	if rs, ok := in.(io.ReadSeeker); ok {
		if start, err := rs.Seek(0, io.SeekCurrent); err == nil {
			return rs, func() (io.Reader, error) {
				_, err := rs.Seek(start, io.SeekStart)
				return rs, err
			}, func() {}, nil
		}
	}
	spool, err := os.CreateTemp("", "lazarus-import-*")
	if err != nil {
		return nil, nil, nil, fmt.Errorf("spool the input: %w", err)
	}
	// Unlinked at once: nothing else can open it, and it goes with the
	// process.
	_ = os.Remove(spool.Name())
	return io.TeeReader(in, spool), func() (io.Reader, error) {
		_, err := spool.Seek(0, io.SeekStart)
		return spool, err
	}, func() { _ = spool.Close() }, nil
}

// lineReader reads the input line by line, hashing what it consumed.
type lineReader struct {
	br    *bufio.Reader
	sum   hash.Hash
	n     int64 // lines read
	bytes int64
	buf   []byte
}

func newLineReader(r io.Reader) *lineReader {
	return &lineReader{br: bufio.NewReaderSize(r, 64<<10), sum: sha256.New()}
}

// next returns the next line without its newline (valid until the next
// call), io.EOF at the end of the input, or an error wrapping errTruncated
// for a last line without a newline.
func (r *lineReader) next() ([]byte, error) {
	r.buf = r.buf[:0]
	for {
		frag, err := r.br.ReadSlice('\n')
		if len(r.buf)+len(frag) > maxLineBytes+1 {
			return nil, lineError(r.n+1, "longer than %d bytes", maxLineBytes)
		}
		r.buf = append(r.buf, frag...)
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			if len(r.buf) == 0 {
				return nil, io.EOF
			}
			return nil, fmt.Errorf("line %d: no newline at its end: %w", r.n+1, errTruncated)
		case err != nil:
			return nil, fmt.Errorf("read input: %w", err)
		}
		r.n++
		r.bytes += int64(len(r.buf))
		r.sum.Write(r.buf)
		return r.buf[:len(r.buf)-1], nil
	}
}

func (r *lineReader) digest() (d [sha256.Size]byte) {
	r.sum.Sum(d[:0])
	return d
}

// Phases of a section: the line types allowed next.
const (
	phaseMetadata = iota
	phaseEvents
	phaseSummaries
	phaseDeadlines
	phaseSchedules
)

// sectionState is what an import holds of the conversation it reads: its
// row, metadata and deadlines, counts, and the append being filled.
type sectionState struct {
	id       string
	row      *messages.Conversation
	ordinal  uint32
	line     int64
	phase    int
	metadata map[string]string
	mdBytes  int
	n        counts
	// wantRow is the call of the tool_call event just read: its row must
	// come next.
	wantRow     string
	lastSummary uint64
	// base is the summary a fork copied (nil for a conversation, or a
	// fork whose log starts at 1), and start its to_seq (0 without one):
	// the log starts just after it.
	base         *messages.Summary
	start        uint64
	lastDeadline string
	deadlines    []*messages.Deadline
	// lastSchedule is the id of the last schedule line ("" before one).
	lastSchedule string
	// pending holds a digest of the id of each call of the section whose
	// row is pending: no tool_result event may answer it.
	pending map[[16]byte]bool
	// open tracks the calls open on the head of the log at each seq: a
	// summary line must end where none is.
	open snapshot.CallTracker
	// baseCut reads the events after base, and owed holds the ids of the
	// section's pending rows (with base only): base must end where no call
	// is open, as a revival decides it without the log before it.
	baseCut    snapshot.CutFinder
	owed       map[string]bool
	chunk      *messages.AppendRequest
	chunkBytes int
	// rowWritten: the second pass has created the row (status ENDED).
	rowWritten bool
}

// importer is one pass over an export.
type importer struct {
	ctx   context.Context
	r     *lineReader
	st    journal.Store // pass 1: the target to check, or nil; pass 2: the target
	write bool
	o     importOptions

	// checkpoints are the input's digests at each write: recorded by the
	// first pass, checked by the second.
	checkpoints [][sha256.Size]byte
	ck          int

	sawHeader bool
	inFile    bool
	// version is the format version of the current file's header.
	version   int
	fileLines uint64
	fileConvs uint64
	convSeen  map[string]int64
	// calls maps a digest of each tool call id of the input to the ordinal
	// of its conversation: 16 bytes a call. The only memory that grows
	// with the input.
	calls map[[16]byte]uint32
	// hasSchedules says that the input holds a schedule. (Schedule ids
	// are per conversation: a section's come by id, one per id, and its
	// conversation is not in the target, so no id can clash.)
	hasSchedules bool
	nconv        uint32
	cur          *sectionState

	// imported are the conversations the second pass completed.
	imported []string
	// described are the conversations a dry run would import.
	described []string
}

func newImporter(ctx context.Context, r io.Reader, st journal.Store, write bool, o importOptions) *importer {
	return &importer{ctx: ctx, r: newLineReader(r), st: st, write: write, o: o,
		convSeen: map[string]int64{}, calls: map[[16]byte]uint32{}}
}

func callKey(id string) (k [16]byte) {
	s := sha256.Sum256([]byte(id))
	copy(k[:], s[:])
	return k
}

// run reads the whole input.
func (im *importer) run() error {
	for {
		if err := im.ctx.Err(); err != nil {
			return err
		}
		line, err := im.r.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		im.o.prog.update(uint64(im.r.n), im.r.bytes)
		if err := im.line(line); err != nil {
			return err
		}
	}
	im.o.prog.done()
	switch {
	case !im.sawHeader:
		return fmt.Errorf("empty input: no %s header: %w", formatName, errTruncated)
	case im.cur != nil:
		return fmt.Errorf("the input ends inside the section of conversation %s (line %d), before its end line: %w", displayID(im.cur.id), im.cur.line, errTruncated)
	case im.inFile:
		return fmt.Errorf("the input ends after line %d without a trailer: %w", im.r.n, errTruncated)
	}
	return nil
}

// noSchedules is the error of a target that cannot hold the input's
// schedules.
func noSchedules(st journal.Store) error {
	return fmt.Errorf("the input holds schedules and the target store (%T) keeps none (it does not implement journal.ScheduleStore): %w", st, errors.ErrUnsupported)
}

// line checks one line and, in the second pass, writes what it completes.
func (im *importer) line(raw []byte) error {
	n := im.r.n
	if !utf8.Valid(raw) {
		// encoding/json would decode it, each bad byte replaced by
		// U+FFFD: a metadata value would be imported changed.
		return lineError(n, "not valid UTF-8 (an export is UTF-8 text)")
	}
	text := bytes.TrimSpace(raw)
	var env envelope
	dec := json.NewDecoder(bytes.NewReader(text))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&env); err != nil {
		return lineError(n, "not a JSON object of this format (%v)", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return lineError(n, "more than one JSON value on the line")
	}
	if env.Type == typeHeader {
		switch {
		case env.Format != formatName || env.Version > formatVersion || env.Version < 1:
			return lineError(n, "header of format %q version %d; this build reads %q versions %d to %d", env.Format, env.Version, formatName, formatVersionNoSchedules, formatVersion)
		case env.Version == 1:
			return lineError(n, "an export of version 1, which has no end lines, so a cut in it cannot be detected; this build reads versions %d to %d only: export the source again with this build", formatVersionNoSchedules, formatVersion)
		case env.Conversation != nil || len(env.Record) > 0:
			return lineError(n, "a header has no conversation and no record")
		case im.cur != nil:
			return fmt.Errorf("line %d: a header inside the section of conversation %s, which has no end line: %w", n, displayID(im.cur.id), errTruncated)
		case im.inFile:
			return fmt.Errorf("line %d: a header, but the file before it has no trailer: %w", n, errTruncated)
		}
		im.sawHeader, im.inFile, im.fileLines, im.fileConvs, im.version = true, true, 1, 0, env.Version
		return nil
	}
	if !im.inFile {
		if !im.sawHeader {
			return lineError(n, "the input does not start with a %s header (is it a lazarus export?)", formatName)
		}
		return lineError(n, "after a trailer only a header may follow")
	}
	im.fileLines++
	if env.Format != "" || env.Version != 0 {
		return lineError(n, "only a header has a format and a version")
	}
	if len(env.Record) == 0 {
		return lineError(n, "%s line without a record", env.Type)
	}
	if env.Type == typeTrailer {
		return im.trailer(n, env)
	}
	if env.Conversation == nil {
		return lineError(n, "%s line without a conversation", env.Type)
	}
	conv := *env.Conversation
	if env.Type == typeConversation {
		if im.cur != nil {
			return fmt.Errorf("line %d: conversation line, but the section of conversation %s before it has no end line: %w", n, displayID(im.cur.id), errTruncated)
		}
		return im.conversation(n, conv, env.Record)
	}
	s := im.cur
	if s == nil {
		return lineError(n, "%s line outside a conversation's section", env.Type)
	}
	if conv != s.id {
		return lineError(n, "%s line of conversation %q in the section of %q", env.Type, conv, s.id)
	}
	if s.wantRow != "" && env.Type != typeToolCall {
		return lineError(n, "tool_call event %d is not followed by the row of its call %s", s.n.lastSeq, displayID(s.wantRow))
	}
	var err error
	switch env.Type {
	case typeMetadata:
		err = im.metadata(s, env.Record)
	case typeEvent:
		err = im.event(s, env.Record, len(raw)+1)
	case typeToolCall:
		err = im.toolCall(s, env.Record, len(raw)+1)
	case typeSummary:
		if s.phase == phaseMetadata && s.row.GetForkedFrom() != nil {
			err = im.base(s, env.Record)
			break
		}
		err = im.summary(s, env.Record)
	case typeDeadline:
		err = im.deadline(s, env.Record)
	case typeSchedule:
		err = im.schedule(s, env.Record)
	case typeEnd:
		err = im.end(s, env.Record)
	default:
		err = invalid(fmt.Errorf("unknown line type %q", env.Type))
	}
	var te *targetError
	if err != nil && !errors.As(err, &te) {
		return fmt.Errorf("line %d: %w", n, err)
	}
	return err
}

// targetError is a conflict with the target found by the first pass: the
// input is fine, the target refuses it.
type targetError struct{ err error }

func (e *targetError) Error() string { return e.err.Error() }
func (e *targetError) Unwrap() error { return e.err }

// strictDecode decodes a plain JSON record with no unknown field.
func strictDecode(raw json.RawMessage, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

func (im *importer) trailer(n int64, env envelope) error {
	if env.Conversation != nil {
		return lineError(n, "a trailer names no conversation")
	}
	if im.cur != nil {
		return fmt.Errorf("line %d: trailer, but the section of conversation %s before it has no end line: %w", n, displayID(im.cur.id), errTruncated)
	}
	var tr trailerRecord
	if err := strictDecode(env.Record, &tr); err != nil || tr.Conversations == nil || tr.Lines == nil {
		return lineError(n, `trailer record is not {"conversations": C, "lines": L} (%v)`, err)
	}
	lines := im.fileLines - 1 // the trailer itself is not counted
	if *tr.Conversations != im.fileConvs || *tr.Lines != lines {
		return fmt.Errorf("line %d: the trailer counts %d conversations in %d lines, the file has %d in %d (lines were lost or added): %w",
			n, *tr.Conversations, *tr.Lines, im.fileConvs, lines, errTruncated)
	}
	im.inFile = false
	return nil
}

func (im *importer) conversation(n int64, conv string, raw json.RawMessage) error {
	row := &messages.Conversation{}
	if err := unmarshalRecord(raw, row); err != nil {
		return lineError(n, "conversation record: %v", err)
	}
	if row.GetId() != conv {
		return lineError(n, "conversation record of id %q on a line of conversation %q", row.GetId(), conv)
	}
	if err := journal.ValidateID("conversation id", conv); err != nil {
		return lineError(n, "%v", err)
	}
	if prev, ok := im.convSeen[conv]; ok {
		return lineError(n, "conversation %s appears again (first on line %d)", displayID(conv), prev)
	}
	if err := validateRow(row, im.version); err != nil {
		return lineError(n, "conversation %s: %v", displayID(conv), err)
	}
	im.convSeen[conv] = n
	im.nconv++
	im.cur = &sectionState{id: conv, row: row, ordinal: im.nconv, line: n, metadata: map[string]string{}}
	if im.st != nil && !im.write {
		if err := im.checkTarget(conv); err != nil {
			return &targetError{err}
		}
	}
	return nil
}

// latest is the largest timestamp protobuf allows: the worst case of the
// timestamps the Store adds to a row.
var latest = &timestamppb.Timestamp{Seconds: 253402300799, Nanos: 999999999}

// validateRow checks a conversation row on its own, in an export of
// format version.
func validateRow(row *messages.Conversation, version int) error {
	if row.GetStatus() == messages.ConversationStatus_CONVERSATION_STATUS_UNSPECIFIED {
		return errors.New("conversation record without a status")
	}
	if o := row.GetForkedFrom(); o != nil {
		if version < formatVersionForks {
			// Those versions carry no fork's log; the section would be
			// imported as an ordinary conversation.
			return fmt.Errorf("conversation record of a fork (of %s) in an export of version %d, which carries no fork", displayID(o.GetConversationId()), version)
		}
		if err := journal.ValidateID("fork origin", o.GetConversationId()); err != nil {
			return err
		}
		if o.GetSeq() == 0 {
			return fmt.Errorf("conversation record of a fork (of %s) at seq 0", displayID(o.GetConversationId()))
		}
	}
	for k, v := range row.GetSettings() {
		if v == "" {
			return fmt.Errorf("setting %q has an empty value (the Store reads an empty value as a delete)", k)
		}
	}
	if err := journal.ValidateMetadata(row.GetId(), row.GetSettings()); err != nil {
		return fmt.Errorf("settings: %w", err)
	}
	if err := journal.ValidateCreated(row.GetId(), row.GetCreated()); err != nil {
		return err
	}
	worst := proto.Clone(row).(*messages.Conversation)
	worst.Created, worst.Updated = latest, latest
	if n := proto.Size(worst); n > journal.MaxRecordBytes {
		return fmt.Errorf("conversation record of %d bytes exceeds %d", n, journal.MaxRecordBytes)
	}
	return nil
}

// checkTarget checks that the target has nothing of conversation id.
func (im *importer) checkTarget(id string) error {
	ctx, st := im.ctx, im.st
	_, err := st.Conversation(ctx, id)
	switch {
	case err == nil:
		return fmt.Errorf("conversation %s already exists in the target; import never overwrites: %w", displayID(id), journal.ErrConflict)
	case errors.Is(err, journal.ErrDeleted):
		return fmt.Errorf("conversation %s was deleted in the target, and a deleted id can never be written again: %w", displayID(id), err)
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
	// A Store keeps metadata without a row (a create that stopped after
	// its first write leaves some): import would merge into it, and the
	// conversation would come back with keys it never had.
	if md, err := st.Metadata(ctx, id); err != nil {
		return err
	} else if len(md) > 0 {
		return fmt.Errorf("conversation %s has no row in the target, but %d metadata keys; import never overwrites: %w", displayID(id), len(md), journal.ErrConflict)
	}
	return nil
}

func (im *importer) metadata(s *sectionState, raw json.RawMessage) error {
	if s.phase != phaseMetadata {
		return invalid(errors.New("metadata line after the events (metadata comes right after the conversation line)"))
	}
	var kv metadataRecord
	if err := strictDecode(raw, &kv); err != nil || kv.Key == nil || kv.Value == nil {
		return invalid(fmt.Errorf(`metadata record is not {"key": "...", "value": "..."} (%v)`, err))
	}
	if err := journal.ValidateID("metadata key", *kv.Key); err != nil {
		return err
	}
	if *kv.Value == "" {
		return invalid(fmt.Errorf("metadata %q has an empty value (the Store reads an empty value as a delete)", *kv.Key))
	}
	if _, dup := s.metadata[*kv.Key]; dup {
		return invalid(fmt.Errorf("metadata key %q appears twice", *kv.Key))
	}
	s.mdBytes += len(*kv.Key) + len(*kv.Value)
	if s.mdBytes > journal.MaxRecordBytes {
		return invalid(fmt.Errorf("metadata of %d bytes exceeds %d", s.mdBytes, journal.MaxRecordBytes))
	}
	s.metadata[*kv.Key] = *kv.Value
	s.n.metadata++
	return invalid(journal.ValidateMetadata(s.id, map[string]string{*kv.Key: *kv.Value}))
}

func (im *importer) event(s *sectionState, raw json.RawMessage, size int) error {
	if s.phase > phaseEvents {
		return invalid(errors.New("event line after the summaries, deadlines or schedules"))
	}
	s.phase = phaseEvents
	ev := &messages.Event{}
	if err := unmarshalRecord(raw, ev); err != nil {
		return invalid(fmt.Errorf("event record: %v", err))
	}
	if want := s.n.lastSeq + 1; ev.GetSeq() != want {
		if s.n.lastSeq == s.start && s.row.GetForkedFrom() != nil {
			return invalid(fmt.Errorf("event of seq %d, want %d (a fork's events run from 1, or from just after the summary it copied, whose line comes before them)", ev.GetSeq(), want))
		}
		return invalid(fmt.Errorf("event of seq %d, want %d (events run 1, 2, 3, ... in order)", ev.GetSeq(), want))
	}
	// Measured as the Append that logged it measured it: without its seq,
	// which the store set and which does not count against
	// journal.MaxEventBytes, so every event a Store holds can be imported.
	seq := ev.GetSeq()
	ev.Seq = 0
	err := journal.ValidateEvent(ev)
	ev.Seq = seq
	if err != nil {
		return fmt.Errorf("event %d: %w", seq, invalid(err))
	}
	if tr := ev.GetToolResult(); tr != nil && s.pending[callKey(tr.GetToolCallId())] {
		// A call's row is resolved in the write of its result.
		return invalid(fmt.Errorf("tool_result event %d answers call %s, whose row is pending", ev.GetSeq(), displayID(tr.GetToolCallId())))
	}
	copied := s.copied()
	forked := s.row.GetForkedFrom() != nil
	if s.chunk != nil && ((len(s.chunk.Events) >= im.o.chunkEvents || s.chunkBytes+size > im.o.chunkBytes) && (!forked || ev.GetSeq() > copied+1) ||
		ev.GetSeq() == copied+1 && forked) {
		// A fork's first write (Store.Fork) holds its copied events, all
		// of them whatever the chunk bounds (their tool_call events have
		// no rows, which an Append refuses): its own start in a later
		// append.
		if err := im.flush(s); err != nil {
			return err
		}
	}
	if s.chunk == nil {
		// Every append of an import states ENDED: the first creates the
		// row so, and a Store refuses a fenced append to an ENDED row
		// that does not (journal.CheckEnded).
		s.chunk = &messages.AppendRequest{ConversationId: s.id, ExpectedLast: s.n.lastSeq,
			Status: messages.ConversationStatus_CONVERSATION_STATUS_ENDED}
	}
	s.chunk.Events = append(s.chunk.Events, ev)
	s.chunkBytes += size
	s.open.Add(ev)
	if s.base != nil {
		s.baseCut.Add(ev)
	}
	s.n.lastSeq = ev.GetSeq()
	if tc := ev.GetToolCall(); tc != nil && ev.GetSeq() > copied {
		// A fork's copied call has its row in its source, not here.
		s.wantRow = tc.GetCall().GetId()
	}
	return nil
}

// copied is the last seq a fork copied from its source (its origin's
// seq), 0 for a conversation that is no fork.
func (s *sectionState) copied() uint64 { return s.row.GetForkedFrom().GetSeq() }

// base reads the summary a fork copied, which comes before its events:
// its log starts just after it. It is written with the fork's first
// events, in one Store.Fork.
func (im *importer) base(s *sectionState, raw json.RawMessage) error {
	sum := &messages.Summary{}
	if err := unmarshalRecord(raw, sum); err != nil {
		return invalid(fmt.Errorf("summary record: %v", err))
	}
	if err := journal.ValidateSummary(s.id, sum, sum.GetToSeq()); err != nil {
		return invalid(err)
	}
	if o := s.row.GetForkedFrom(); sum.GetToSeq() >= o.GetSeq() {
		return invalid(fmt.Errorf("the summary a fork of %s at seq %d copied covers up to seq %d, not an earlier one", displayID(o.GetConversationId()), o.GetSeq(), sum.GetToSeq()))
	}
	s.phase = phaseEvents
	s.base, s.start = sum, sum.GetToSeq()
	s.lastSummary = sum.GetToSeq()
	s.n.lastSeq = sum.GetToSeq()
	s.n.summaries++
	return nil
}

func (im *importer) toolCall(s *sectionState, raw json.RawMessage, size int) error {
	rec := &messages.ToolCallRecord{}
	if err := unmarshalRecord(raw, rec); err != nil {
		return invalid(fmt.Errorf("tool_call record: %v", err))
	}
	call := rec.GetId()
	if s.wantRow == "" || s.wantRow != call {
		return invalid(fmt.Errorf("tool call row %s does not follow its tool_call event (a row is written with its event, and exported right after it)", displayID(call)))
	}
	s.wantRow = ""
	if err := journal.ValidateToolCall(rec); err != nil {
		return invalid(err)
	}
	switch {
	case rec.GetConversationId() != s.id:
		return invalid(fmt.Errorf("tool call %s names conversation %q", displayID(call), rec.GetConversationId()))
	case rec.GetStatus() == messages.ToolCallStatus_TOOL_CALL_STATUS_UNSPECIFIED:
		return invalid(fmt.Errorf("tool call %s without a status", displayID(call)))
	}
	k := callKey(call)
	if _, dup := im.calls[k]; dup {
		return invalid(fmt.Errorf("tool call %s appears twice in the input (tool call ids are unique)", displayID(call)))
	}
	im.calls[k] = s.ordinal
	if rec.GetStatus() == messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING {
		if s.pending == nil {
			s.pending = map[[16]byte]bool{}
		}
		s.pending[k] = true
		if s.base != nil {
			if s.owed == nil {
				s.owed = map[string]bool{}
			}
			s.owed[call] = true
		}
	}
	if im.st != nil && !im.write {
		row, err := im.st.ToolCall(im.ctx, call)
		switch {
		case err == nil:
			return &targetError{fmt.Errorf("tool call id %s already belongs to conversation %s in the target: %w", displayID(call), displayID(row.GetConversationId()), journal.ErrConflict)}
		case !errors.Is(err, journal.ErrNotFound):
			return &targetError{err}
		}
	}
	s.chunk.ToolCalls = append(s.chunk.ToolCalls, rec)
	// A row counts against the chunk's bytes as its event does: rows of
	// up to journal.MaxRecordBytes each, uncounted, could take an append
	// of importChunkEvents events past journal.MaxAppendBytes.
	s.chunkBytes += size
	s.n.toolCalls++
	return nil
}

func (im *importer) summary(s *sectionState, raw json.RawMessage) error {
	if s.phase > phaseSummaries {
		return invalid(errors.New("summary line after the deadlines or schedules"))
	}
	s.phase = phaseSummaries
	sum := &messages.Summary{}
	if err := unmarshalRecord(raw, sum); err != nil {
		return invalid(fmt.Errorf("summary record: %v", err))
	}
	if err := journal.ValidateSummary(s.id, sum, s.n.lastSeq); err != nil {
		return invalid(err)
	}
	if sum.GetToSeq() <= s.lastSummary {
		return invalid(fmt.Errorf("summary up to seq %d after one up to %d (summaries come in ascending to_seq, one per to_seq)", sum.GetToSeq(), s.lastSummary))
	}
	if open := s.open.At(sum.GetToSeq()); len(open) > 0 {
		// The runtime ends a summary where no call is open; revived
		// from this one, the conversation would lose the call or show
		// its result without it (the revival passes it over).
		return invalid(fmt.Errorf("summary of seq %d..%d ends inside tool call %s, issued at seq %d and not answered by seq %d (a summary ends where no tool call is open)",
			sum.GetFromSeq(), sum.GetToSeq(), displayID(open[0].ID), open[0].Seq, sum.GetToSeq()))
	}
	s.lastSummary = sum.GetToSeq()
	s.n.summaries++
	if err := im.flush(s); err != nil {
		return err
	}
	if err := im.checkpoint(); err != nil {
		return err
	}
	if im.write {
		if err := im.st.PutSummary(im.ctx, s.id, sum); err != nil {
			return fmt.Errorf("summary up to seq %d: %w", sum.GetToSeq(), err)
		}
	}
	return nil
}

func (im *importer) deadline(s *sectionState, raw json.RawMessage) error {
	if s.phase > phaseDeadlines {
		return invalid(errors.New("deadline line after the schedules"))
	}
	s.phase = phaseDeadlines
	d := &messages.Deadline{}
	if err := unmarshalRecord(raw, d); err != nil {
		return invalid(fmt.Errorf("deadline record: %v", err))
	}
	if err := journal.ValidateDeadline(d); err != nil {
		return invalid(err)
	}
	call := d.GetToolCallId()
	switch {
	case d.GetConversationId() != s.id:
		return invalid(fmt.Errorf("deadline of %s names conversation %q", displayID(call), d.GetConversationId()))
	case call <= s.lastDeadline:
		return invalid(fmt.Errorf("deadline of %s after the one of %s (deadlines come by tool call id, one per call)", displayID(call), displayID(s.lastDeadline)))
	}
	if o, ok := im.calls[callKey(call)]; !ok || o != s.ordinal {
		return invalid(fmt.Errorf("deadline of %s, which is no tool call of this conversation", displayID(call)))
	}
	s.lastDeadline = call
	s.deadlines = append(s.deadlines, d)
	s.n.deadlines++
	return nil
}

// schedule checks a schedule line and, in the second pass, writes it with
// PutSchedule: the conversation's row exists by then (its first append
// created it, or the first schedule line creates it, ENDED, for a
// conversation without events), so the rule that a conversation without
// its exported status is incomplete still holds.
func (im *importer) schedule(s *sectionState, raw json.RawMessage) error {
	if im.version < formatVersionSchedules {
		return invalid(fmt.Errorf("schedule line in an export of version %d, which has none", im.version))
	}
	s.phase = phaseSchedules
	sc := &messages.Schedule{}
	if err := unmarshalRecord(raw, sc); err != nil {
		return invalid(fmt.Errorf("schedule record: %v", err))
	}
	if err := journal.ValidateSchedule(sc); err != nil {
		return invalid(err)
	}
	id := sc.GetId()
	if sc.GetRevision() != "" && im.version < formatVersionRevisions {
		// No build that wrote that version had revisions: the line was
		// edited, or the header was.
		return invalid(fmt.Errorf("schedule %s has a revision, in an export of version %d, which carries none", displayID(id), im.version))
	}
	switch {
	case sc.GetConversationId() != s.id:
		return invalid(fmt.Errorf("schedule %s names conversation %q", displayID(id), sc.GetConversationId()))
	case s.n.schedules > 0 && id <= s.lastSchedule:
		return invalid(fmt.Errorf("schedule %s after schedule %s (schedules come by id, one per id)", displayID(id), displayID(s.lastSchedule)))
	case s.n.schedules >= journal.MaxSchedulesPerConversation:
		return invalid(fmt.Errorf("more than %d schedules", journal.MaxSchedulesPerConversation))
	}
	im.hasSchedules = true
	if im.st != nil && !im.write {
		if _, ok := im.st.(journal.ScheduleStore); !ok {
			return &targetError{noSchedules(im.st)}
		}
	}
	s.lastSchedule = id
	s.n.schedules++
	if err := im.flush(s); err != nil {
		return err
	}
	if err := im.checkpoint(); err != nil {
		return err
	}
	if !im.write {
		return nil
	}
	ss, ok := im.st.(journal.ScheduleStore)
	if !ok {
		return noSchedules(im.st) // importStream checked it before the first write
	}
	if !s.rowWritten {
		u := journal.ConversationUpdate{ID: s.id, Status: messages.ConversationStatus_CONVERSATION_STATUS_ENDED}
		if err := im.st.PutConversation(im.ctx, u); err != nil {
			return fmt.Errorf("the row, before schedule %s: %w", displayID(id), err)
		}
		s.rowWritten = true
	}
	if err := ss.PutSchedule(im.ctx, sc); err != nil {
		return fmt.Errorf("schedule %s: %w", displayID(id), err)
	}
	return nil
}

// end checks the section against its end line, then writes what is left:
// the last append of events, settings, metadata, the append that gives
// the conversation its fsm_state and deadlines, and then its status.
func (im *importer) end(s *sectionState, raw json.RawMessage) error {
	var e endRecord
	err := strictDecode(raw, &e)
	switch {
	case im.version == formatVersionNoSchedules && (err != nil || e.LastSeq == nil || e.ToolCalls == nil || e.Summaries == nil || e.Deadlines == nil || e.Metadata == nil || e.Schedules != nil):
		return invalid(fmt.Errorf(`end record of version %d is not {"last_seq": N, "tool_calls": K, "summaries": S, "deadlines": D, "metadata": M} (%v)`, im.version, err))
	case im.version == formatVersionNoSchedules:
		e.Schedules = ptr[uint64](0)
	case err != nil || e.LastSeq == nil || e.ToolCalls == nil || e.Summaries == nil || e.Deadlines == nil || e.Schedules == nil || e.Metadata == nil:
		return invalid(fmt.Errorf(`end record is not {"last_seq": N, "tool_calls": K, "summaries": S, "deadlines": D, "schedules": W, "metadata": M} (%v)`, err))
	}
	got := counts{*e.LastSeq, *e.ToolCalls, *e.Summaries, *e.Deadlines, *e.Schedules, *e.Metadata}
	if got != s.n {
		return fmt.Errorf("the end line of conversation %s counts %d events, %d tool calls, %d summaries, %d deadlines, %d schedules and %d metadata keys; its section has %d, %d, %d, %d, %d and %d (lines were lost or added): %w",
			displayID(s.id), got.lastSeq, got.toolCalls, got.summaries, got.deadlines, got.schedules, got.metadata,
			s.n.lastSeq, s.n.toolCalls, s.n.summaries, s.n.deadlines, s.n.schedules, s.n.metadata, errTruncated)
	}
	if o := s.row.GetForkedFrom(); o != nil && s.n.lastSeq < o.GetSeq() {
		return invalid(fmt.Errorf("conversation %s is a fork of %s at seq %d, and its log ends at seq %d (a fork holds the events it copied)", displayID(s.id), displayID(o.GetConversationId()), o.GetSeq(), s.n.lastSeq))
	}
	if fsm := s.row.GetFsmState(); fsm != nil && fsm.GetLastSeq() > s.n.lastSeq {
		return invalid(fmt.Errorf("the fsm_state of conversation %s says its log ends at seq %d, its log ends at %d", displayID(s.id), fsm.GetLastSeq(), s.n.lastSeq))
	}
	if s.base != nil {
		owed := s.owed
		for call := range s.row.GetFsmState().GetPending() {
			if owed == nil {
				owed = map[string]bool{}
			}
			owed[call] = true
		}
		if s.baseCut.Cuts(owed) {
			// The fork's log holds nothing before it: revived, the
			// fork would pass it over and find no history.
			return invalid(fmt.Errorf("the summary of seq %d..%d that fork %s copied ends inside a tool call: a call issued at or before seq %d is answered or owed after it (a summary ends where no tool call is open)",
				s.base.GetFromSeq(), s.base.GetToSeq(), displayID(s.id), s.base.GetToSeq()))
		}
	}
	if err := journal.ValidateMetadata(s.id, s.metadata); err != nil {
		return invalid(err)
	}
	if err := im.flush(s); err != nil {
		return err
	}
	last := &messages.AppendRequest{
		ConversationId: s.id,
		ExpectedLast:   s.n.lastSeq,
		Schedule:       s.deadlines,
		Status:         s.row.GetStatus(),
		FsmState:       s.row.GetFsmState(),
	}
	if err := journal.ValidateAppend(last); err != nil {
		return invalid(err)
	}
	// Checked with the exported status, written stating ENDED (finish).
	if err := im.checkpoint(); err != nil {
		return err
	}
	im.fileConvs++
	im.cur = nil
	if im.write {
		if err := im.finish(s, last); err != nil {
			im.cur = s // still incomplete, for the failure report
			return err
		}
		im.imported = append(im.imported, s.id)
		if s.row.GetCreated() == nil && im.o.onNoCreated != nil {
			im.o.onNoCreated(s.id)
		}
	}
	switch {
	case im.write && im.o.onSection != nil:
		im.o.onSection(describe(s))
	case !im.write && im.o.dryRun:
		// Said only once the whole input passed.
		im.described = append(im.described, describe(s))
	}
	return nil
}

// finish writes the end of a conversation in the second pass.
func (im *importer) finish(s *sectionState, last *messages.AppendRequest) error {
	ctx, st := im.ctx, im.st
	if !s.rowWritten || len(s.row.GetSettings()) > 0 || s.row.GetCreated() != nil {
		// A conversation without events gets its row here, still ENDED.
		// Every row gets its exported "created" back, which the write
		// that created it set otherwise.
		u := journal.ConversationUpdate{ID: s.id, Settings: s.row.GetSettings(), Created: s.row.GetCreated()}
		if !s.rowWritten {
			u.Status = messages.ConversationStatus_CONVERSATION_STATUS_ENDED
		}
		if err := st.PutConversation(ctx, u); err != nil {
			return fmt.Errorf("settings and created time: %w", err)
		}
		s.rowWritten = true
	}
	if len(s.metadata) > 0 {
		if err := st.PutMetadata(ctx, s.id, s.metadata); err != nil {
			return fmt.Errorf("metadata: %w", err)
		}
	}
	// The row is still ENDED: an append never changes an ENDED status
	// (journal.StatusWritten), and a fenced one must state ENDED to be
	// taken (journal.CheckEnded), so the status the section gives it is
	// set last, by the one write that may, as the append would have
	// written it were the row not ENDED. Until then the conversation
	// stays ENDED, as an import cut short leaves it.
	want := last.GetStatus()
	last.Status = messages.ConversationStatus_CONVERSATION_STATUS_ENDED
	if _, err := st.Append(ctx, last); err != nil {
		return fmt.Errorf("status, fsm_state and deadlines: %w", err)
	}
	if want == messages.ConversationStatus_CONVERSATION_STATUS_UNSPECIFIED || want == messages.ConversationStatus_CONVERSATION_STATUS_ENDED {
		return nil
	}
	written := func() (messages.ConversationStatus, error) {
		return journal.StatusWritten(messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE, want, last.GetFsmState(), func(call string) (bool, error) {
			rec, err := st.ToolCall(ctx, call)
			if errors.Is(err, journal.ErrNotFound) {
				return false, nil
			}
			return err == nil && rec.GetConversationId() == s.id && journal.IsTerminal(rec.GetStatus()), err
		})
	}
	status, err := written()
	if err != nil {
		return fmt.Errorf("status: %w", err)
	}
	if err := st.PutConversation(ctx, journal.ConversationUpdate{ID: s.id, Status: status}); err != nil {
		return fmt.Errorf("status: %w", err)
	}
	if status != messages.ConversationStatus_CONVERSATION_STATUS_SUSPENDED {
		return nil
	}
	// An answer that landed after the read above, while the row was still
	// ENDED (an expiry of a runtime that armed the deadlines written here,
	// on a shared target), left the status alone, and SUSPENDED would hide
	// it from the next runtime. Read again now that the row is SUSPENDED:
	// an answer that lands from here on makes the row ACTIVE itself.
	again, err := written()
	if err != nil {
		return fmt.Errorf("status: %w", err)
	}
	if again != status {
		if err := st.PutConversation(ctx, journal.ConversationUpdate{ID: s.id, Status: again}); err != nil {
			return fmt.Errorf("status: %w", err)
		}
	}
	return nil
}

// flush writes the append being filled, in the second pass; the first
// checks it as the Store will.
func (im *importer) flush(s *sectionState) error {
	if s.chunk == nil {
		return nil
	}
	req := s.chunk
	s.chunk, s.chunkBytes = nil, 0
	if o := s.row.GetForkedFrom(); o != nil && req.GetExpectedLast() == s.start {
		return im.fork(s, req)
	}
	for _, ev := range req.GetEvents() {
		// The store sets each event's seq (ExpectedLast+1, ...); given, it
		// would count against journal.MaxEventBytes, as it did not in the
		// Append that logged the event.
		ev.Seq = 0
	}
	if err := journal.ValidateAppend(req); err != nil {
		return invalid(err)
	}
	if err := im.checkpoint(); err != nil {
		return err
	}
	if !im.write {
		return nil
	}
	if _, err := im.st.Append(im.ctx, req); err != nil {
		return fmt.Errorf("events %d..%d: %w", req.GetExpectedLast()+1, req.GetExpectedLast()+uint64(len(req.GetEvents())), err)
	}
	s.rowWritten = true
	return nil
}

// fork writes the first append of a fork's section as a Store.Fork: its
// base summary, its first copied events (no rows: event cuts the append
// before its own events), its origin, and status ENDED until its end line
// gives it its own. Settings and metadata come later, as for any section.
func (im *importer) fork(s *sectionState, req *messages.AppendRequest) error {
	if len(req.GetToolCalls()) > 0 {
		// event cuts the first append before the first row.
		return fmt.Errorf("internal error: the first write of fork %s holds tool call rows", displayID(s.id))
	}
	fr := &messages.ForkRequest{
		ConversationId: s.id,
		Summary:        s.base,
		Events:         req.GetEvents(),
		Status:         messages.ConversationStatus_CONVERSATION_STATUS_ENDED,
		Origin:         s.row.GetForkedFrom(),
	}
	if err := journal.ValidateFork(fr); err != nil {
		return invalid(err)
	}
	if err := im.checkpoint(); err != nil {
		return err
	}
	if !im.write {
		return nil
	}
	if err := im.st.Fork(im.ctx, fr); err != nil {
		return fmt.Errorf("the fork's summary and events %d..%d: %w", s.start+1, s.start+uint64(len(fr.GetEvents())), err)
	}
	s.rowWritten = true
	return nil
}

// checkpoint comes before each write: the first pass records the digest
// of the input read so far, the second checks it is the same.
func (im *importer) checkpoint() error {
	d := im.r.digest()
	if !im.write {
		im.checkpoints = append(im.checkpoints, d)
		return nil
	}
	if im.ck >= len(im.checkpoints) || im.checkpoints[im.ck] != d {
		return fmt.Errorf("%w (its bytes up to here differ from the first read)", errInputChanged)
	}
	im.ck++
	return nil
}

// failure is the error of a second pass that stopped: it says what was
// written.
func (im *importer) failure(err error) error {
	if !errors.Is(err, errInputChanged) && errors.Is(err, journal.ErrInvalid) {
		// The first pass accepted these bytes: they changed.
		err = fmt.Errorf("%w: %w", errInputChanged, err)
	}
	var incomplete string
	switch s := im.cur; {
	case s != nil && errors.Is(err, journal.ErrUnknownOutcome):
		// The failed write may have landed: the first of the
		// conversation (which created it, ENDED) or its last (which gave
		// it its status).
		incomplete = fmt.Sprintf("; conversation %s may be in the target (the outcome of a write of it is unknown): unless it has its exported status, it is incomplete, with status ENDED, which a runtime does not resume (import again into an empty directory)", displayID(s.id))
	case s != nil && s.rowWritten:
		incomplete = fmt.Sprintf("; conversation %s is incomplete in the target, with status ENDED, which a runtime does not resume (import again into an empty directory)", displayID(s.id))
	}
	if len(im.imported) == 0 && incomplete == "" {
		return fmt.Errorf("nothing imported: %w", err)
	}
	return fmt.Errorf("import failed part-way: %d conversations were imported completely (%s)%s: %w",
		len(im.imported), listIDs(im.imported), incomplete, err)
}

// listIDs names up to 5 conversations.
func listIDs(ids []string) string {
	if len(ids) == 0 {
		return "none"
	}
	out := make([]string, 0, 6)
	for i, id := range ids {
		if i == 5 {
			out = append(out, fmt.Sprintf("and %d more", len(ids)-5))
			break
		}
		out = append(out, displayID(id))
	}
	return strings.Join(out, ", ")
}

func describe(s *sectionState) string {
	return fmt.Sprintf("conversation %s (%s, %d events, %d summaries, %d tool calls, %d deadlines, %d schedules, %d metadata keys)",
		displayID(s.id), statusName(s.row.GetStatus()), s.n.lastSeq, s.n.summaries, s.n.toolCalls, s.n.deadlines, s.n.schedules, s.n.metadata)
}
