package lazarus_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/stretchr/testify/require"
)

// Every entry that takes an id, given ids that are empty, oversized, not
// UTF-8, unknown or odd, answers either nothing (nil) or an error that wraps
// a sentinel, and never an error that quotes an oversized id whole.
func TestHostileIDsGetShortSentinelErrors(t *testing.T) {
	ctx := context.Background()
	model := agent.ModelFunc(func(ctx context.Context, turn agent.Turn, onDelta func(string)) (*messages.AssistantMessage, error) {
		return agent.Text("ok"), nil
	})
	rt, err := lazarus.Open(lazarus.Options{Model: model, Dir: t.TempDir()})
	require.NoError(t, err)
	defer rt.Close()
	_, err = rt.SendAndWait(ctx, "good", "hi", agent.Scope{UserID: "u"})
	require.NoError(t, err)
	ids := []string{"", "\x00", "a\x00b", "bad\xff", strings.Repeat("x", 100000), "missing", "good", " ", "a/b", "\u202e"}
	sentinels := []error{journal.ErrInvalid, journal.ErrNotFound, journal.ErrStale, journal.ErrEnded, journal.ErrDeleted, lazarus.ErrBadSchedule, lazarus.ErrScheduleInPast, lazarus.ErrNoSchedule, lazarus.ErrForbidden, journal.ErrConflict, journal.ErrExists, agent.ErrNoCheckpoints}
	check := func(what, id string, err error) {
		if err == nil {
			return
		}
		if len(err.Error()) > 1024 {
			t.Errorf("%s(%q): an error of %d bytes", what, trunc(id), len(err.Error()))
		}
		if s := repeatedSentinelText(err); s != "" {
			t.Errorf("%s(%q): the text %q shows more than once in %.500q", what, trunc(id), s, err)
		}
		for _, s := range sentinels {
			if errors.Is(err, s) {
				return
			}
		}
		t.Errorf("%s(%q): no sentinel: %.300v", what, trunc(id), err)
	}
	sc := agent.Scope{UserID: "u"}
	for _, id := range ids {
		_, err := rt.History(ctx, id, 0, 10)
		check("History", id, err)
		_, err = rt.History(ctx, id, 0, -1)
		check("History-neg", id, err)
		_, err = rt.HistoryView(ctx, id, lazarus.HistoryOptions{})
		check("HistoryView", id, err)
		_, err = rt.Chapters(ctx, id, 0)
		check("Chapters", id, err)
		_, err = rt.Chapters(ctx, id, 1<<62)
		check("Chapters-big", id, err)
		_, err = rt.Metadata(ctx, id)
		check("Metadata", id, err)
		check("MergeMetadata", id, rt.MergeMetadata(ctx, id, map[string]string{"": "x"}))
		check("MergeMetadata2", id, rt.MergeMetadata(ctx, id, map[string]string{"k\xff": "x"}))
		_, err = rt.Settings(ctx, id)
		check("Settings", id, err)
		check("Rewind0", id, rt.Rewind(ctx, id, 0, lazarus.RewindOptions{}, sc))
		check("RewindBig", id, rt.Rewind(ctx, id, 1<<62, lazarus.RewindOptions{}, sc))
		_, err = rt.Edit(ctx, id, 0, "x", sc)
		check("Edit0", id, err)
		_, err = rt.Edit(ctx, id, 1, "", sc)
		check("Edit-empty", id, err)
		check("Fork", id, rt.Fork(ctx, id, 1<<62, id+"-f"))
		check("Fork-same", id, rt.Fork(ctx, id, 1, id))
		check("Fork-bad-new", id, rt.Fork(ctx, id, 1, "\xff"))
		_, err = rt.Schedule(ctx, id, lazarus.ScheduleSpec{}, sc)
		check("Schedule-empty", id, err)
		_, err = rt.Schedule(ctx, id, lazarus.ScheduleSpec{Text: "x", Cron: "nonsense"}, sc)
		check("Schedule-cron", id, err)
		_, err = rt.Schedule(ctx, id, lazarus.ScheduleSpec{Text: "x", After: -time.Second}, sc)
		check("Schedule-neg", id, err)
		_, err = rt.Schedule(ctx, id, lazarus.ScheduleSpec{Text: "x", Cron: "@daily", TimeZone: "Nowhere/City"}, sc)
		check("Schedule-tz", id, err)
		_, err = rt.Schedules(ctx, id)
		check("Schedules", id, err)
		check("CancelSchedule", id, rt.CancelSchedule(ctx, id, "nope"))
		check("CancelSchedule-empty", id, rt.CancelSchedule(ctx, id, ""))
		_, err = rt.Subscribe(ctx, id, 1<<62)
		check("Subscribe", id, err)
		check("Wake", id, rt.Wake(ctx, id))
		rt.Kill(id)
		_ = rt.IsActive(id)
		_ = rt.Owner(id)
		check("Configure", id, rt.Configure(ctx, id, agent.Settings{Temperature: ptr(-5.0)}))
		_, err = rt.Send(ctx, id, "", sc)
		check("Send-empty", id, err)
		_, err = rt.Send(ctx, id, "x\xff", sc)
		check("Send-badutf", id, err)
		check("Resolve", id, rt.Resolve(ctx, id, "", sc))
		check("Resolve2", id, rt.Resolve(ctx, id, "null", sc))
		check("Reject", id, rt.Reject(ctx, id, "", sc))
		check("Reschedule", id, rt.Reschedule(ctx, id, time.Time{}))
		_, _, err = rt.Find(ctx, id, id, id, -1)
		check("Find", id, err)
		_, _, err = rt.PendingCalls(ctx, id, -5)
		check("PendingCalls", id, err)
		_, err = rt.RewindWithReport(ctx, id, 1, lazarus.RewindOptions{Files: true}, sc)
		check("RewindFiles", id, err)
	}
	for _, id := range ids {
		if id == "good" {
			continue
		}
		evs, err := rt.History(ctx, id, 0, 0)
		if err == nil {
			require.Empty(t, evs, "nothing was written to %q", trunc(id))
		}
	}
	big := strings.Repeat("x", 100000)
	_, err = rt.Send(ctx, big, "hi", sc)
	require.ErrorIs(t, err, journal.ErrInvalid)
	check("Send-big-id", big, err)
	err = rt.Resolve(ctx, big, "{}", sc)
	require.ErrorIs(t, err, journal.ErrInvalid)
	check("Resolve-big-id", big, err)
	err = rt.Fork(ctx, "good", 1, big)
	require.ErrorIs(t, err, journal.ErrInvalid)
	check("Fork-big-id", big, err)
	// Oversized inputs to a conversation that exists.
	huge := strings.Repeat("y", journal.MaxEventBytes+1)
	_, err = rt.Send(ctx, "good", huge, sc)
	require.ErrorIs(t, err, journal.ErrInvalid)
	check("Send-huge", "good", err)
	_, err = rt.Edit(ctx, "good", 1, huge, sc)
	check("Edit-huge", "good", err)
	err = rt.Rewind(ctx, "good", 1, lazarus.RewindOptions{Reason: huge}, sc)
	check("Rewind-huge", "good", err)
	err = rt.Configure(ctx, "good", agent.Settings{SystemPrompt: huge})
	require.ErrorIs(t, err, journal.ErrInvalid)
	check("Configure-huge", "good", err)
	err = rt.MergeMetadata(ctx, "good", map[string]string{"k": huge})
	check("MergeMetadata-huge", "good", err)
	_, err = rt.Schedule(ctx, "good", lazarus.ScheduleSpec{Text: huge, After: time.Hour}, sc)
	require.ErrorIs(t, err, journal.ErrInvalid)
	check("Schedule-huge", "good", err)
	_, err = rt.Schedule(ctx, "good", lazarus.ScheduleSpec{Text: "x", At: time.Now().Add(-time.Hour)}, sc)
	check("Schedule-past", "good", err)
	check("Reschedule-past", "good", rt.Reschedule(ctx, "missing", time.Now().Add(-time.Hour)))
	for _, id := range ids {
		check("End", id, rt.End(ctx, id))
		check("Delete", id, rt.Delete(ctx, id))
	}
}

func ptr[T any](v T) *T { return &v }

// sentinelsOfText are the sentinels whose text an error should say at most
// once: those of package journal and of this package.
var sentinelsOfText = []error{
	journal.ErrConflict, journal.ErrStale, journal.ErrNotFound, journal.ErrClosed,
	journal.ErrCorrupt, journal.ErrInvalid, journal.ErrDeleted, journal.ErrNoSpace,
	journal.ErrUnavailable, journal.ErrUnknownOutcome, journal.ErrExists, journal.ErrEnded,
	journal.ErrTooLarge,
	lazarus.ErrUnknownAgent, lazarus.ErrNoOwner, lazarus.ErrLagged, lazarus.ErrClosed,
	lazarus.ErrUnknownOutcome, lazarus.ErrBadSchedule, lazarus.ErrScheduleInPast,
	lazarus.ErrNoSchedule, lazarus.ErrTurnCancelled, lazarus.ErrTurnFailed,
	lazarus.ErrInvalidToolCalls,
}

// repeatedSentinelText returns the text of a sentinel that shows more than
// once in err's message, or "".
func repeatedSentinelText(err error) string {
	for _, s := range sentinelsOfText {
		if strings.Count(err.Error(), s.Error()) > 1 {
			return s.Error()
		}
	}
	return ""
}

func trunc(s string) string {
	if len(s) > 20 {
		return s[:20] + "..."
	}
	return s
}

// TestSendRequestIDIsBounded: an idempotency key is an id (1 to
// journal.MaxIDBytes bytes of UTF-8): a longer or broken one is refused
// before anything is written, where it used to be taken and then dropped
// silently from the summaries that carry keys.
func TestSendRequestIDIsBounded(t *testing.T) {
	ctx := context.Background()
	model := agent.ModelFunc(func(ctx context.Context, turn agent.Turn, onDelta func(string)) (*messages.AssistantMessage, error) {
		return agent.Text("ok"), nil
	})
	rt, err := lazarus.Open(lazarus.Options{Model: model})
	require.NoError(t, err)
	defer rt.Close()
	msg := agent.UserMessage(agent.TextPart("hi"))
	sc := agent.Scope{UserID: "u"}
	for _, key := range []string{strings.Repeat("k", journal.MaxIDBytes+1), "k\xff"} {
		_, err := rt.SendMessage(ctx, "c", msg, lazarus.SendOptions{RequestID: key}, sc)
		require.ErrorIs(t, err, journal.ErrInvalid)
		require.Less(t, len(err.Error()), 1024)
	}
	evs, err := rt.History(ctx, "c", 0, 0)
	require.NoError(t, err)
	require.Empty(t, evs, "nothing was written")
	seq, err := rt.SendMessage(ctx, "c", msg, lazarus.SendOptions{RequestID: strings.Repeat("k", journal.MaxIDBytes)}, sc)
	require.NoError(t, err, "a key of the limit is taken")
	again, err := rt.SendMessage(ctx, "c", msg, lazarus.SendOptions{RequestID: strings.Repeat("k", journal.MaxIDBytes)}, sc)
	require.NoError(t, err)
	require.Equal(t, seq, again, "and keeps its promise")
}

// TestHostileStringsAreNotEchoedWhole: a cursor, a cron expression, a time
// zone or an agent name of 100,000 bytes is refused with an error wrapping
// journal.ErrInvalid that does not quote it whole (each made an error of
// its size).
func TestHostileStringsAreNotEchoedWhole(t *testing.T) {
	ctx := context.Background()
	model := agent.ModelFunc(func(ctx context.Context, turn agent.Turn, onDelta func(string)) (*messages.AssistantMessage, error) {
		return agent.Text("ok"), nil
	})
	rt, err := lazarus.Open(lazarus.Options{Model: model})
	require.NoError(t, err)
	defer rt.Close()
	sc := agent.Scope{UserID: "u"}
	_, err = rt.SendAndWait(ctx, "c", "hi", sc)
	require.NoError(t, err)
	big := strings.Repeat("x", 100000)
	schedule := func(spec lazarus.ScheduleSpec) error {
		spec.Text = "wake"
		_, err := rt.Schedule(ctx, "c", spec, sc)
		return err
	}
	cases := []struct {
		name string
		err  func() error
	}{
		{"PendingCalls cursor", func() error { _, _, err := rt.PendingCalls(ctx, big, 0); return err }},
		{"PendingCalls cursor of a valid length", func() error { _, _, err := rt.PendingCalls(ctx, "3:"+big[:500], 0); return err }},
		{"Find cursor", func() error { _, _, err := rt.Find(ctx, "k", "v", big, 0); return err }},
		{"Schedule cron", func() error { return schedule(lazarus.ScheduleSpec{Cron: big}) }},
		{"Schedule cron @every", func() error { return schedule(lazarus.ScheduleSpec{Cron: "@every " + big}) }},
		{"Schedule cron TZ=", func() error { return schedule(lazarus.ScheduleSpec{Cron: "TZ=" + big}) }},
		{"Schedule time zone", func() error { return schedule(lazarus.ScheduleSpec{Cron: "@daily", TimeZone: big}) }},
		{"Open agent name", func() error {
			_, err := lazarus.Open(lazarus.Options{Model: model, Agents: []lazarus.Agent{{Name: big}}})
			return err
		}},
	}
	for _, c := range cases {
		err := c.err()
		require.ErrorIs(t, err, journal.ErrInvalid, c.name)
		require.Less(t, len(err.Error()), 1024, "%s: %.200v", c.name, err)
	}
	scs, err := rt.Schedules(ctx, "c")
	require.NoError(t, err)
	require.Empty(t, scs, "nothing was written")
}

// TestRejectReasonIsCutAndMadeUTF8: Reject records its reason as
// agent.ErrorOutcome does, as its godoc says: bytes that are not UTF-8
// become U+FFFD, a reason over agent.MaxErrorBytes is cut there, and an
// empty one is an error without a message; none is refused.
func TestRejectReasonIsCutAndMadeUTF8(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	model := scripted.New(scripted.Options{})
	rt := openContract(t, memjournal.New(memjournal.Options{}), model, 0)
	long := strings.Repeat("r", agent.MaxErrorBytes+10)
	for _, c := range []struct{ reason, want string }{
		{"", ""},
		{"no\xff", "no\uFFFD"},
		{long, long[:agent.MaxErrorBytes-3] + "..."},
	} {
		conv := fmt.Sprintf("reject-%d", len(c.reason))
		id := suspend(ctx, t, rt, model, conv)
		require.NoError(t, rt.Reject(ctx, id, c.reason, user))
		row, err := rt.Store().ToolCall(ctx, id)
		require.NoError(t, err)
		require.Equal(t, agent.CodeRejected, row.GetResult().GetError().GetCode())
		require.Equal(t, c.want, row.GetResult().GetError().GetMessage())
	}
}
