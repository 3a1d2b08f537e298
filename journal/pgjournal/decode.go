package pgjournal

import (
	"unicode/utf8"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// The records read back are checked against the columns of their row, as
// pebblejournal checks them against their key: a record no write could
// have stored (other ids or seq than its row, an enum field holding a
// number its enum does not declare, an event without a body, a summary of
// an empty or reversed span, a deadline at an invalid time, a metadata key
// that is not an id or a value that is not UTF-8, a negative last_seq) is
// journal.ErrCorrupt naming its row, never a record handed to the caller.
// So is a read of a log whose seqs skip (checkSeqs): a history with a hole
// is never returned. So are bytes that do not decode, and a record larger
// than any write stores (journal.MaxEventBytes for an event,
// journal.MaxRecordBytes for any other record, with storedSlack; written
// before a bound existed, or by another writer): decode refuses it before
// decoding it.

// decodeEvent decodes the event of row (conv, seq). A value cut at a field
// boundary decodes, with its seq but without a body: no write stores one.
func decodeEvent(data []byte, conv string, seq int64) (*messages.Event, error) {
	ev, err := decode(data, &messages.Event{}, "event %q/%d", conv, seq)
	if err != nil {
		return nil, err
	}
	if ev.GetSeq() != uint64(seq) {
		return nil, journal.Corruptf("pgjournal: event %q/%d holds seq %d", conv, seq, ev.GetSeq())
	}
	if ev.GetBody() == nil {
		return nil, journal.Corruptf("pgjournal: event %q/%d has no body", conv, seq)
	}
	return ev, nil
}

// checkSeqs returns an error wrapping journal.ErrCorrupt, naming the first
// row out of place, unless evs (in ascending order) are consecutive and,
// when first is not 0, start at first. what names the read in the error.
func checkSeqs(conv, what string, evs []*messages.Event, first uint64) error {
	if got, want, gap := journal.SeqGap(evs, first); gap {
		return journal.Corruptf("pgjournal: %s of conversation %q: the log has a gap: row %q/%d where seq %d should be "+
			"(rows of lz_events were removed under the store)", what, conv, conv, got, want)
	}
	return nil
}

// decodeLastSeq checks the last_seq column of conversation conv's row: a
// seq is never negative (the column is a bigint; no write stores one below
// 0), and one that is is journal.ErrCorrupt, not a seq near 2^64.
func decodeLastSeq(conv string, last int64) (uint64, error) {
	if last < 0 {
		return 0, journal.Corruptf("pgjournal: conversation %q: last_seq %d", conv, last)
	}
	return uint64(last), nil
}

// decodeMetadata checks the metadata row (conv, key): its key follows the
// rules of ids and its value is UTF-8, as PutMetadata requires of both.
func decodeMetadata(conv string, key, value []byte) (string, string, error) {
	if err := journal.ValidateID("metadata key", string(key)); err != nil {
		return "", "", journal.Corruptf("pgjournal: metadata %q of %q: %v", key, conv, err)
	}
	if len(value) > journal.MaxRecordBytes {
		return "", "", journal.Corruptf("pgjournal: metadata %q of %q: the value of %d bytes exceeds %d", key, conv, len(value), journal.MaxRecordBytes)
	}
	if !utf8.Valid(value) {
		return "", "", journal.Corruptf("pgjournal: metadata %q of %q: the value is not UTF-8", key, conv)
	}
	return string(key), string(value), nil
}

// decodeSummary decodes the summary of row (conv, toSeq).
func decodeSummary(data []byte, conv string, toSeq int64) (*messages.Summary, error) {
	sum, err := decode(data, &messages.Summary{}, "summary %q/%d", conv, toSeq)
	if err != nil {
		return nil, err
	}
	if sum.GetToSeq() != uint64(toSeq) || sum.GetFromSeq() < 1 || sum.GetFromSeq() > sum.GetToSeq() {
		return nil, journal.Corruptf("pgjournal: summary %q/%d covers %d..%d", conv, toSeq, sum.GetFromSeq(), sum.GetToSeq())
	}
	return sum, nil
}

// decodeToolCall decodes the tool call row id of conv.
func decodeToolCall(data []byte, id, conv string) (*messages.ToolCallRecord, error) {
	rec, err := decode(data, &messages.ToolCallRecord{}, "tool call %q", id)
	if err != nil {
		return nil, err
	}
	if rec.GetId() != id || rec.GetConversationId() != conv {
		return nil, journal.Corruptf("pgjournal: tool call %q of %q holds tool call %q of %q", id, conv, rec.GetId(), rec.GetConversationId())
	}
	return rec, nil
}

// decodePending decodes a row the pending index listed: a pending row.
func decodePending(data []byte, id, conv string) (*messages.ToolCallRecord, error) {
	rec, err := decodeToolCall(data, id, conv)
	if err != nil {
		return nil, err
	}
	if rec.GetStatus() != messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING {
		return nil, journal.Corruptf("pgjournal: tool call %q of %q: pending row holds a %v record", id, conv, rec.GetStatus())
	}
	return rec, nil
}

// decodeConversation decodes the row of conversation id.
func decodeConversation(data []byte, id string) (*messages.Conversation, error) {
	row, err := decode(data, &messages.Conversation{}, "conversation %q", id)
	if err != nil {
		return nil, err
	}
	if row.GetId() != id {
		return nil, journal.Corruptf("pgjournal: conversation %q holds the row of %q", id, row.GetId())
	}
	return row, nil
}

// decodeDeadline decodes the deadline of call in conv.
func decodeDeadline(data []byte, conv, call string) (*messages.Deadline, error) {
	d, err := decode(data, &messages.Deadline{}, "deadline of %q in %q", call, conv)
	if err != nil {
		return nil, err
	}
	if d.GetConversationId() != conv || d.GetToolCallId() != call {
		return nil, journal.Corruptf("pgjournal: deadline of %q in %q holds the deadline of %q in %q", call, conv, d.GetToolCallId(), d.GetConversationId())
	}
	if err := d.GetAt().CheckValid(); err != nil {
		return nil, journal.Corruptf("pgjournal: deadline of %q in %q: time: %v", call, conv, err)
	}
	return d, nil
}

// decodeModelCall decodes the audit row (conv, turn).
func decodeModelCall(data []byte, conv string, turn int64) (*messages.ModelCall, error) {
	mc, err := decode(data, &messages.ModelCall{}, "model call %q/%d", conv, turn)
	if err != nil {
		return nil, err
	}
	if mc.GetConversationId() != conv || mc.GetTurnRef() != uint64(turn) {
		return nil, journal.Corruptf("pgjournal: model call %q/%d holds turn %d of %q", conv, turn, mc.GetTurnRef(), mc.GetConversationId())
	}
	return mc, nil
}

// decodeFileCheckpoint decodes the file checkpoint of row (conv, seq, path).
func decodeFileCheckpoint(data []byte, conv string, seq int64, path string) (*messages.FileCheckpoint, error) {
	cp, err := decode(data, &messages.FileCheckpoint{}, "file checkpoint %q/%d %q", conv, seq, path)
	if err != nil {
		return nil, err
	}
	if cp.GetConversationId() != conv || cp.GetSeq() != uint64(seq) || cp.GetPath() != path {
		return nil, journal.Corruptf("pgjournal: file checkpoint %q/%d %q holds the checkpoint of %q at %d, %q", conv, seq, path, cp.GetConversationId(), cp.GetSeq(), cp.GetPath())
	}
	if err := journal.ValidateFileCheckpoint(cp); err != nil {
		return nil, journal.Corruptf("pgjournal: file checkpoint %q/%d %q: %v", conv, seq, path, err)
	}
	return cp, nil
}
