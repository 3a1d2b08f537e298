package pgjournal

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// FuzzDecodeRow hands arbitrary bytes, as the data column of a row of
// each table, to the decoder its reads use (kind picks the table; key the
// row's key column where it is bytes): each returns a record that matches
// its row and holds only declared enum numbers, or an error wrapping
// journal.ErrCorrupt; none panics. TestCorruptRecords plants such rows in
// a database; this runs without one. In a plain `go test` only the seeds
// run.
func FuzzDecodeRow(f *testing.F) {
	const conv, call = "fz", "t"
	marshal := func(m proto.Message) []byte {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	at := timestamppb.New(time.Unix(1, 0))
	for kind, m := range []proto.Message{
		&messages.Event{Seq: 1, Body: &messages.Event_UserMsg{UserMsg: &messages.UserMessage{}}},
		&messages.Summary{FromSeq: 1, ToSeq: 1},
		&messages.ToolCallRecord{Id: call, ConversationId: conv, Status: messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING},
		&messages.ToolCallRecord{Id: call, ConversationId: conv, Status: 99},
		&messages.Conversation{Id: conv, Status: 42},
		&messages.Deadline{ConversationId: conv, ToolCallId: call, At: at},
		&messages.ModelCall{ConversationId: conv, TurnRef: 1},
		&messages.FileCheckpoint{ConversationId: conv, Seq: 1, Path: "a"},
		&messages.Schedule{Id: "s", ConversationId: conv, Next: at},
	} {
		f.Add(byte(kind), []byte("k"), marshal(m))
	}
	f.Add(byte(0), []byte{}, []byte{0xff, 0x01})
	f.Add(byte(5), []byte{}, marshal(&messages.Deadline{ConversationId: conv, ToolCallId: call, At: &timestamppb.Timestamp{Nanos: -1}}))
	f.Add(byte(9), []byte("\xff"), []byte("v"))
	f.Add(byte(9), []byte("k"), []byte("\xff"))
	f.Fuzz(func(t *testing.T, kind byte, key, data []byte) {
		var rec proto.Message
		var err error
		switch kind % 10 {
		case 0:
			var ev *messages.Event
			if ev, err = decodeEvent(data, conv, 1); err == nil {
				rec = ev
				if ev.GetSeq() != 1 || ev.GetBody() == nil {
					t.Fatalf("event of row 1: %v", ev)
				}
			}
		case 1:
			var sum *messages.Summary
			if sum, err = decodeSummary(data, conv, 3); err == nil {
				rec = sum
				if sum.GetToSeq() != 3 || sum.GetFromSeq() < 1 || sum.GetFromSeq() > 3 {
					t.Fatalf("summary of row 3: %v", sum)
				}
			}
		case 2:
			var tc *messages.ToolCallRecord
			if tc, err = decodeToolCall(data, call, conv); err == nil {
				rec = tc
				if tc.GetId() != call || tc.GetConversationId() != conv {
					t.Fatalf("tool call of row %q: %v", call, tc)
				}
			}
		case 3:
			var tc *messages.ToolCallRecord
			if tc, err = decodePending(data, call, conv); err == nil {
				rec = tc
				if tc.GetStatus() != messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING {
					t.Fatalf("pending row: %v", tc)
				}
			}
		case 4:
			var row *messages.Conversation
			if row, err = decodeConversation(data, conv); err == nil {
				rec = row
				if row.GetId() != conv {
					t.Fatalf("conversation of row %q: %v", conv, row)
				}
			}
		case 5:
			var d *messages.Deadline
			if d, err = decodeDeadline(data, conv, call); err == nil {
				rec = d
				if d.GetAt().CheckValid() != nil || d.GetConversationId() != conv || d.GetToolCallId() != call {
					t.Fatalf("deadline of row: %v", d)
				}
			}
		case 6:
			var mc *messages.ModelCall
			if mc, err = decodeModelCall(data, conv, 1); err == nil {
				rec = mc
			}
		case 7:
			var cp *messages.FileCheckpoint
			if cp, err = decodeFileCheckpoint(data, conv, 1, string(key)); err == nil {
				rec = cp
				if journal.ValidateFileCheckpoint(cp) != nil {
					t.Fatalf("file checkpoint: %v", cp)
				}
			}
		case 8:
			var sc *messages.Schedule
			if sc, err = decodeSchedule(key, data, conv); err == nil {
				rec = sc
				if journal.ValidateSchedule(sc) != nil {
					t.Fatalf("schedule: %v", sc)
				}
			}
		case 9:
			var k, v string
			if k, v, err = decodeMetadata(conv, key, data); err == nil && (journal.ValidateID("metadata key", k) != nil || v != string(data)) {
				t.Fatalf("metadata %q = %q", k, v)
			}
		}
		if err != nil {
			if !errors.Is(err, journal.ErrCorrupt) {
				t.Fatalf("kind %d: %v", kind%10, err)
			}
			return
		}
		if rec != nil {
			if err := journal.CheckEnums(rec); err != nil {
				t.Fatalf("kind %d: a record with an undeclared enum number: %v", kind%10, err)
			}
		}
	})
}
