package pebblejournal

import (
	"strings"
	"testing"
	"time"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// TestBadInputErrorsNameTheAdapter: input a method refuses is ErrInvalid,
// and its error starts with "pebblejournal: " as every other error of the
// adapter does (and as memjournal's and pgjournal's name theirs), whichever
// check of package journal found the problem.
func TestBadInputErrorsNameTheAdapter(t *testing.T) {
	s := openMem(t, Options{Audit: true})
	_, err := s.Append(ctx, &messages.AppendRequest{ConversationId: "c", Events: []*messages.Event{{Time: timestamppb.Now(),
		Body: &messages.Event_UserMsg{UserMsg: &messages.UserMessage{}}}}})
	require.NoError(t, err)
	notUTF8 := &messages.Event{Body: &messages.Event_UserMsg{UserMsg: &messages.UserMessage{
		Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: "\xff"}}}}}}
	cases := map[string]func() error{
		"Append":      func() error { _, err := s.Append(ctx, &messages.AppendRequest{}); return err },
		"AppendBatch": func() error { return s.AppendBatch(ctx, []*messages.AppendRequest{{}})[0].Err },
		// Events alone to a conversation with a cached head: appendEvents.
		"Append event encoding": func() error {
			_, err := s.Append(ctx, &messages.AppendRequest{ConversationId: "c", ExpectedLast: 1, Events: []*messages.Event{notUTF8}})
			return err
		},
		"AppendBatch event encoding": func() error {
			return s.AppendBatch(ctx, []*messages.AppendRequest{
				{ConversationId: "c", ExpectedLast: 1, Events: []*messages.Event{notUTF8}}, {ConversationId: "d"}})[0].Err
		},
		"PutSummary id":      func() error { return s.PutSummary(ctx, "", &messages.Summary{FromSeq: 1, ToSeq: 1}) },
		"PutSummary shape":   func() error { return s.PutSummary(ctx, "c", &messages.Summary{}) },
		"PutSummary range":   func() error { return s.PutSummary(ctx, "c", &messages.Summary{FromSeq: 1, ToSeq: 5}) },
		"UpsertToolCall":     func() error { return s.UpsertToolCall(ctx, nil) },
		"ResolveToolCall":    func() error { _, err := s.ResolveToolCall(ctx, "", 0, nil, time.Time{}); return err },
		"ScheduleDeadline":   func() error { return s.ScheduleDeadline(ctx, nil) },
		"CancelDeadline":     func() error { return s.CancelDeadline(ctx, "", "x") },
		"PutModelCall":       func() error { return s.PutModelCall(ctx, nil) },
		"GCModelCalls":       func() error { _, err := s.GCModelCalls(ctx, "", time.Time{}); return err },
		"PutConversation":    func() error { return s.PutConversation(ctx, journal.ConversationUpdate{}) },
		"PutFSMState":        func() error { return s.PutFSMState(ctx, "", nil) },
		"PutMetadata":        func() error { return s.PutMetadata(ctx, "", nil) },
		"PutMetadata values": func() error { return s.PutMetadata(ctx, "c", map[string]string{"k": "\xff"}) },
		"DeleteConversation": func() error { return s.DeleteConversation(ctx, "") },
		"Events":             func() error { _, err := s.Events(ctx, "", journal.EventQuery{}); return err },
		"Events limit":       func() error { _, err := s.Events(ctx, "c", journal.EventQuery{Limit: -1}); return err },
		"LastSeq":            func() error { _, err := s.LastSeq(ctx, ""); return err },
		"LoadSince":          func() error { _, _, err := s.LoadSince(ctx, ""); return err },
		"LatestSummary":      func() error { _, err := s.LatestSummary(ctx, ""); return err },
		"SummaryBefore":      func() error { _, err := s.SummaryBefore(ctx, "", 1); return err },
		"ToolCall":           func() error { _, err := s.ToolCall(ctx, ""); return err },
		"PendingToolCalls":   func() error { _, err := s.PendingToolCalls(ctx, ""); return err },
		"ListPendingToolCalls": func() error {
			_, _, err := s.ListPendingToolCalls(ctx, "x", 0)
			return err
		},
		"ListActiveConversations": func() error {
			_, _, err := s.ListActiveConversations(ctx, "", -1)
			return err
		},
		"ModelCalls":            func() error { _, err := s.ModelCalls(ctx, ""); return err },
		"Conversation":          func() error { _, err := s.Conversation(ctx, ""); return err },
		"Metadata":              func() error { _, err := s.Metadata(ctx, ""); return err },
		"Fork":                  func() error { return s.Fork(ctx, nil) },
		"FindConversations":     func() error { _, _, err := s.FindConversations(ctx, "", "v", "", 0); return err },
		"PutSchedule":           func() error { return s.PutSchedule(ctx, nil) },
		"DeleteSchedule":        func() error { return s.DeleteSchedule(ctx, "", "s") },
		"ConversationSchedules": func() error { _, err := s.ConversationSchedules(ctx, ""); return err },
		"FileCheckpoints":       func() error { _, err := s.FileCheckpoints(ctx, "", 0); return err },
		"PutFileCheckpoint":     func() error { _, err := s.PutFileCheckpoint(ctx, nil); return err },
	}
	for name, do := range cases {
		err := do()
		if assert.ErrorIs(t, err, journal.ErrInvalid, name) {
			assert.True(t, strings.HasPrefix(err.Error(), "pebblejournal: "), "%s: %q does not name the adapter", name, err)
		}
	}
}
