package journal_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// allSentinels is every sentinel of package journal.
var allSentinels = []error{
	journal.ErrConflict, journal.ErrStale, journal.ErrNotFound, journal.ErrClosed,
	journal.ErrCorrupt, journal.ErrInvalid, journal.ErrDeleted, journal.ErrNoSpace,
	journal.ErrUnavailable, journal.ErrUnknownOutcome, journal.ErrExists, journal.ErrEnded,
	journal.ErrTooLarge,
}

// requireTextOnce fails t unless err wraps want and the text of every
// sentinel shows at most once in its message.
func requireTextOnce(t *testing.T, err, want error) {
	t.Helper()
	require.ErrorIs(t, err, want)
	for _, s := range allSentinels {
		require.LessOrEqual(t, strings.Count(err.Error(), s.Error()), 1, "the text of %v in %q", s, err)
	}
}

// TestSentinelTextOnce feeds bad input to the exported checks of package
// journal, among them those that name a cause that is itself a check's
// error (an event of an append or a fork, a find's cursor), and asserts
// that each error says its sentinel once while errors.Is holds.
func TestSentinelTextOnce(t *testing.T) {
	noBody := &messages.Event{}
	user := userEv("hi")
	big := userEv(strings.Repeat("x", journal.MaxEventBytes+1))
	badUTF8 := userEv("\xff")
	cases := []struct {
		name string
		err  error
	}{
		{"ValidateID", journal.ValidateID("conversation id", "")},
		{"ValidateEvent", journal.ValidateEvent(noBody)},
		{"ValidateAppend nil event", journal.ValidateAppend(&messages.AppendRequest{ConversationId: "c", Events: []*messages.Event{user, nil}})},
		{"ValidateAppend no body", journal.ValidateAppend(&messages.AppendRequest{ConversationId: "c", Events: []*messages.Event{noBody}})},
		{"ValidateAppend oversized", journal.ValidateAppend(&messages.AppendRequest{ConversationId: "c", Events: []*messages.Event{big}})},
		{"ValidateAppend not UTF-8", journal.ValidateAppend(&messages.AppendRequest{ConversationId: "c", Events: []*messages.Event{badUTF8}})},
		{"ValidateAppendShape", journal.ValidateAppendShape(&messages.AppendRequest{ConversationId: "c", Events: []*messages.Event{noBody}})},
		{"ValidateFork no body", journal.ValidateFork(&messages.ForkRequest{ConversationId: "f", Events: []*messages.Event{noBody}})},
		{"ValidateFork oversized", journal.ValidateFork(&messages.ForkRequest{ConversationId: "f", Events: []*messages.Event{big}})},
		{"ValidateFork tool call without a call", journal.ValidateFork(&messages.ForkRequest{ConversationId: "f", Events: []*messages.Event{
			{Seq: 1, Body: &messages.Event_ToolCall{ToolCall: &messages.ToolCallEvent{}}}}})},
		{"ParseFind bad cursor", func() error { _, _, err := journal.ParseFind("k", "v", "\xff", 10); return err }()},
		{"ParseFind negative limit", func() error { _, _, err := journal.ParseFind("k", "v", "", -1); return err }()},
		{"ParseActiveCursor", func() error { _, _, err := journal.ParseActiveCursor("", -1); return err }()},
		{"PageSize", func() error { _, err := journal.PageSize("conversations", -1); return err }()},
		{"ValidateSchedule", journal.ValidateSchedule(&messages.Schedule{Id: "s", ConversationId: "c",
			Next: &timestamppb.Timestamp{Seconds: -1 << 62}})},
		{"ValidateToolCall", journal.ValidateToolCall(&messages.ToolCallRecord{Id: ""})},
		{"ValidateDeadline", journal.ValidateDeadline(&messages.Deadline{ToolCallId: "t", ConversationId: "c",
			At: &timestamppb.Timestamp{Seconds: -1 << 62}})},
		{"ValidateReschedule", journal.ValidateReschedule(&messages.Deadline{ToolCallId: "t", ConversationId: "c",
			At: &timestamppb.Timestamp{Seconds: -1 << 62}})},
		{"ValidateModelCall", journal.ValidateModelCall(&messages.ModelCall{ConversationId: "c", TurnRef: 1,
			Created: &timestamppb.Timestamp{Seconds: -1 << 62}})},
		{"ValidateFileCheckpoint", journal.ValidateFileCheckpoint(&messages.FileCheckpoint{})},
		{"ValidateMetadata", journal.ValidateMetadata("c", map[string]string{"": "v"})},
		{"Invalidf of an invalid cause", journal.Invalidf("outer: %v", journal.Invalidf("inner"))},
		{"Corruptf of a corrupt cause", journal.Corruptf("outer: %v", journal.Corruptf("inner"))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.Error(t, c.err)
			want := journal.ErrInvalid
			if errors.Is(c.err, journal.ErrCorrupt) {
				want = journal.ErrCorrupt
			}
			requireTextOnce(t, c.err, want)
		})
	}
}

// TestSentinelfKeepsSentinels asserts that Invalidf and Corruptf wrap their
// sentinel, and only it, whether or not a cause they name already says it:
// a cause is named, not wrapped.
func TestSentinelfKeepsSentinels(t *testing.T) {
	inner := journal.Invalidf("inner")
	err := journal.Invalidf("outer: %v", inner)
	require.ErrorIs(t, err, journal.ErrInvalid)
	require.Equal(t, "outer: inner: journal: invalid input", err.Error())
	require.NotErrorIs(t, journal.Invalidf("outer: %v", journal.Corruptf("x")), journal.ErrCorrupt)
	require.NotErrorIs(t, journal.Corruptf("outer: %v", journal.Invalidf("x")), journal.ErrInvalid)
	require.Equal(t, "outer: x: journal: invalid input: journal: corrupt record", journal.Corruptf("outer: %v", journal.Invalidf("x")).Error())
	require.Equal(t, "plain: journal: invalid input", journal.Invalidf("plain").Error())
}
