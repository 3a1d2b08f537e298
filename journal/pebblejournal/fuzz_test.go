package pebblejournal

import (
	"errors"
	"testing"
	"time"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// putRawForTesting stores value under key directly in Pebble, bypassing
// every check: how tests plant corrupt records.
func (s *Store) putRawForTesting(key, value []byte) error {
	return s.db.Set(key, value, nil)
}

func (s *Store) deleteRawForTesting(key []byte) error {
	return s.db.Delete(key, nil)
}

// fuzzKey builds the key a FuzzDecodeRecord input targets: family fam of
// conversation conv (or a global family) followed by suffix.
func fuzzKey(fam byte, conv string, suffix []byte) []byte {
	switch fam {
	case famCallOwner, famDeadlineByTime:
		return append([]byte{fam}, suffix...)
	case famConv, famTombstone, famActive:
		if len(suffix) == 0 {
			return convKey(fam, conv)
		}
	}
	return append(convKey(fam, conv), suffix...)
}

// fuzzFamilies are the families a FuzzDecodeRecord input can target; its
// first byte picks one.
var fuzzFamilies = []byte{famConv, famTombstone, famEvent, famSummary, famToolCall, famPending,
	famDeadline, famAudit, famMetadata, famCallOwner, famDeadlineByTime, famActive}

func mustMarshal(m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}

// FuzzDecodeRecord stores arbitrary bytes under an arbitrary key of some
// record family of a conversation (or of a global index), then reads the
// conversation through every Store method. Each must return a valid record,
// nil, or an error wrapping journal.ErrCorrupt (writes may also fail with
// their usual sentinels); none may panic.
func FuzzDecodeRecord(f *testing.F) {
	seq1 := []byte{0, 0, 0, 0, 0, 0, 0, 1}
	call := appendID(nil, "t")
	f.Add(byte(2), seq1, mustMarshal(&messages.Event{Seq: 1, Body: &messages.Event_UserMsg{UserMsg: &messages.UserMessage{}}}))
	f.Add(byte(2), seq1, []byte{0xFF, 0x01})
	f.Add(byte(2), []byte{0, 1}, []byte{})
	f.Add(byte(3), seq1, mustMarshal(&messages.Summary{FromSeq: 1, ToSeq: 1}))
	f.Add(byte(4), call, mustMarshal(&messages.ToolCallRecord{Id: "t", ConversationId: "fz", Status: messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING}))
	f.Add(byte(5), call, []byte{})
	f.Add(byte(0), []byte{}, mustMarshal(&messages.Conversation{Id: "fz"}))
	f.Add(byte(1), []byte{}, []byte("\x0a\x02\x08\x01"))
	f.Add(byte(6), call, mustMarshal(&messages.Deadline{ConversationId: "fz", ToolCallId: "t", At: timestamppb.New(time.Unix(1, 0))}))
	f.Add(byte(7), seq1, mustMarshal(&messages.ModelCall{ConversationId: "fz", TurnRef: 1}))
	f.Add(byte(8), appendID(nil, "k"), []byte("\xff"))
	f.Add(byte(9), call, []byte("fz"))
	f.Add(byte(9), call, []byte(""))
	f.Add(byte(10), byTimeKey(timestamppb.New(time.Unix(1, 0)), "t", "fz")[1:], []byte{})
	f.Add(byte(10), []byte{1, 2, 3}, []byte{})

	s := openMem(f, Options{Audit: true})
	f.Fuzz(func(t *testing.T, fam byte, suffix, value []byte) {
		const conv = "fz"
		key := fuzzKey(fuzzFamilies[int(fam)%len(fuzzFamilies)], conv, suffix)
		if err := s.putRawForTesting(key, value); err != nil {
			t.Fatal(err)
		}
		defer func() {
			// Leave the store as it was for the next input.
			_ = s.deleteRawForTesting(key)
			b := s.db.NewBatch()
			for _, fam := range append([]byte{famConv, famTombstone}, convFamilies...) {
				_ = b.DeleteRange(convKey(fam, conv), convEnd(fam, conv), nil)
			}
			_ = b.DeleteRange(ownerKey("t"), append(ownerKey("t"), 0), nil)
			if err := b.Commit(nil); err != nil {
				t.Fatal(err)
			}
		}()
		check := func(what string, err error, allowed ...error) {
			t.Helper()
			if err == nil || errors.Is(err, journal.ErrCorrupt) {
				return
			}
			for _, a := range allowed {
				if errors.Is(err, a) {
					return
				}
			}
			t.Fatalf("%s with %x = %x: %v", what, key, value, err)
		}
		evs, err := s.Events(ctx, conv, journal.EventQuery{})
		check("Events", err)
		for i, ev := range evs {
			if ev.GetSeq() == 0 {
				t.Fatalf("event %d without a seq", i)
			}
		}
		_, err = s.Events(ctx, conv, journal.EventQuery{Before: 5, Limit: 2})
		check("Events limit", err)
		_, err = s.LastSeq(ctx, conv)
		check("LastSeq", err)
		sum, _, err := s.LoadSince(ctx, conv)
		check("LoadSince", err)
		if sum != nil && (sum.GetFromSeq() < 1 || sum.GetFromSeq() > sum.GetToSeq()) {
			t.Fatalf("invalid summary %v", sum)
		}
		_, err = s.LatestSummary(ctx, conv)
		check("LatestSummary", err, journal.ErrNotFound)
		_, err = s.SummaryBefore(ctx, conv, 2)
		check("SummaryBefore", err, journal.ErrNotFound)
		_, err = s.ToolCall(ctx, "t")
		check("ToolCall", err, journal.ErrNotFound)
		_, err = s.PendingToolCalls(ctx, conv)
		check("PendingToolCalls", err)
		err = s.Deadlines(ctx, time.Time{}, func(*messages.Deadline) error { return nil })
		check("Deadlines", err)
		_, err = s.ModelCalls(ctx, conv)
		check("ModelCalls", err)
		_, err = s.Conversation(ctx, conv)
		check("Conversation", err, journal.ErrNotFound, journal.ErrDeleted)
		_, _, err = s.ListConversations(ctx, "", 10)
		check("ListConversations", err)
		_, _, err = s.ListActiveConversations(ctx, "", 10)
		check("ListActiveConversations", err)
		_, err = s.Metadata(ctx, conv)
		check("Metadata", err)
		// Writes read what they check.
		_, err = s.Append(ctx, &messages.AppendRequest{ConversationId: conv, ExpectedLast: 0, Events: []*messages.Event{userEvent("x")}})
		check("Append", err, journal.ErrConflict, journal.ErrDeleted)
		_, err = s.ResolveToolCall(ctx, "t", messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED, nil, time.Time{})
		check("ResolveToolCall", err, journal.ErrStale)
		_, err = s.GCModelCalls(ctx, conv, time.Now())
		check("GCModelCalls", err)
		err = s.DeleteConversation(ctx, conv)
		check("DeleteConversation", err, journal.ErrNotFound)
		// The deadline index may hold a planted key of another conversation.
		if key[0] == famDeadlineByTime {
			_ = s.deleteRawForTesting(key)
		}
	})
}
