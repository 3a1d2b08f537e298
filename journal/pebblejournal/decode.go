package pebblejournal

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/cockroachdb/pebble/v2"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"google.golang.org/protobuf/proto"
)

// Every stored value is decoded here, defensively: bad bytes, a record
// holding an enum number its enum does not declare (journal.CheckEnums:
// proto3 decodes one, no write stores one), or a record that disagrees
// with the key it is stored under, give an error wrapping
// journal.ErrCorrupt that names the key. Nothing here panics on any input.

func unmarshal(k, v []byte, m proto.Message) error {
	if err := proto.Unmarshal(v, m); err != nil {
		return journal.Corruptf("pebblejournal: %s value at key %s (%d bytes): %v", famName(k[0]), keyString(k), len(v), err)
	}
	if err := journal.CheckEnums(m); err != nil {
		return corruptValue(k, "%v", err)
	}
	return nil
}

func corruptValue(k []byte, format string, args ...any) error {
	return journal.Corruptf("pebblejournal: %s value at key %s: %s", famName(k[0]), keyString(k), fmt.Sprintf(format, args...))
}

// decodeEvent decodes the event at k = famEvent | conv | seq, where prefix is
// famEvent | conv.
func decodeEvent(k, v, prefix []byte) (*messages.Event, error) {
	seq, err := parseSeqKey(k, prefix)
	if err != nil {
		return nil, err
	}
	ev := &messages.Event{}
	if err := unmarshal(k, v, ev); err != nil {
		return nil, err
	}
	if ev.GetSeq() != seq {
		return nil, corruptValue(k, "event seq %d under key seq %d", ev.GetSeq(), seq)
	}
	if ev.GetBody() == nil {
		// No write stores one (journal.ValidateEvent): a value cut at a
		// field boundary decodes so.
		return nil, corruptValue(k, "event %d without a body", seq)
	}
	return ev, nil
}

// decodeSummary decodes the summary at k = famSummary | conv | to_seq.
func decodeSummary(k, v, prefix []byte) (*messages.Summary, error) {
	seq, err := parseSeqKey(k, prefix)
	if err != nil {
		return nil, err
	}
	s := &messages.Summary{}
	if err := unmarshal(k, v, s); err != nil {
		return nil, err
	}
	if s.GetToSeq() != seq || s.GetFromSeq() < 1 || s.GetFromSeq() > s.GetToSeq() {
		return nil, corruptValue(k, "summary %d..%d under key seq %d", s.GetFromSeq(), s.GetToSeq(), seq)
	}
	return s, nil
}

// decodeModelCall decodes the audit row at k = famAudit | conv | turn_ref.
func decodeModelCall(k, v, prefix []byte, conv string) (*messages.ModelCall, error) {
	turn, err := parseSeqKey(k, prefix)
	if err != nil {
		return nil, err
	}
	mc := &messages.ModelCall{}
	if err := unmarshal(k, v, mc); err != nil {
		return nil, err
	}
	if mc.GetTurnRef() != turn || mc.GetConversationId() != conv {
		return nil, corruptValue(k, "model call of %q turn %d", mc.GetConversationId(), mc.GetTurnRef())
	}
	return mc, nil
}

// decodeToolCall decodes the tool call row of call in conv stored at k.
func decodeToolCall(k, v []byte, conv, call string) (*messages.ToolCallRecord, error) {
	rec := &messages.ToolCallRecord{}
	if err := unmarshal(k, v, rec); err != nil {
		return nil, err
	}
	if rec.GetId() != call || rec.GetConversationId() != conv {
		return nil, corruptValue(k, "tool call %q of %q", rec.GetId(), rec.GetConversationId())
	}
	return rec, nil
}

// decodeConversation decodes the row of conv stored at k.
func decodeConversation(k, v []byte, conv string) (*messages.Conversation, error) {
	c := &messages.Conversation{}
	if err := unmarshal(k, v, c); err != nil {
		return nil, err
	}
	if c.GetId() != conv {
		return nil, corruptValue(k, "row of conversation %q", c.GetId())
	}
	return c, nil
}

// decodeDeadline decodes the deadline of call in conv stored at k.
func decodeDeadline(k, v []byte, conv, call string) (*messages.Deadline, error) {
	d := &messages.Deadline{}
	if err := unmarshal(k, v, d); err != nil {
		return nil, err
	}
	if d.GetConversationId() != conv || d.GetToolCallId() != call {
		return nil, corruptValue(k, "deadline of %q in %q", d.GetToolCallId(), d.GetConversationId())
	}
	if err := d.GetAt().CheckValid(); err != nil {
		return nil, corruptValue(k, "deadline time: %v", err)
	}
	return d, nil
}

// decodeSchedule decodes schedule id of conv stored at k: the record names
// its key's ids and holds what every stored schedule holds (ValidateSchedule:
// a next occurrence, a positive interval if any, a payload), so that no
// reader computes with a record no write could have stored.
func decodeSchedule(k, v []byte, conv, id string) (*messages.Schedule, error) {
	sc := &messages.Schedule{}
	if err := unmarshal(k, v, sc); err != nil {
		return nil, err
	}
	if sc.GetId() != id || sc.GetConversationId() != conv {
		return nil, corruptValue(k, "schedule %q of %q", sc.GetId(), sc.GetConversationId())
	}
	if err := journal.ValidateSchedule(sc); err != nil {
		return nil, corruptValue(k, "schedule: %v", err)
	}
	return sc, nil
}

// decodeOwner decodes a tool call owner entry: the raw conversation id.
func decodeOwner(k, v []byte) (string, error) {
	conv := string(v)
	if err := journal.ValidateID("conversation id", conv); err != nil {
		return "", corruptValue(k, "owner: %v", err)
	}
	return conv, nil
}

// decodeMetadataValue checks a metadata value: raw UTF-8.
func decodeMetadataValue(k, v []byte) (string, error) {
	if !utf8.Valid(v) {
		return "", corruptValue(k, "metadata value is not UTF-8")
	}
	return string(v), nil
}

// get reads key and, if present, calls decode with its value (valid only
// during the call).
func (s *Store) get(key []byte, decode func(v []byte) error) (found bool, err error) {
	v, closer, err := s.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("pebblejournal: read %s: %w", keyString(key), storageErr(err))
	}
	defer closer.Close()
	if decode != nil {
		if err := decode(v); err != nil {
			return true, err
		}
	}
	return true, nil
}
