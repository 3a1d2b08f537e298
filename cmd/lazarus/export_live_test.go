package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// requirePrefixImport imports export into a new store and requires that
// it imports cleanly, that its log is a prefix of src's, and that the
// imported row agrees with it (its fsm_state not past the log, every
// pending call's event in it).
func requirePrefixImport(t *testing.T, src journal.Store, export string) uint64 {
	t.Helper()
	ctx := ctxT(t)
	dst := memStore(t)
	require.NoError(t, importStream(ctx, strings.NewReader(export), func(bool) (journal.Store, error) { return dst, nil }, importOptions{}))
	last, err := dst.LastSeq(ctx, "c")
	require.NoError(t, err)
	got, err := dst.Events(ctx, "c", journal.EventQuery{})
	require.NoError(t, err)
	want, err := src.Events(ctx, "c", journal.EventQuery{Before: last + 1})
	require.NoError(t, err)
	require.Len(t, got, len(want))
	for i := range want {
		require.True(t, proto.Equal(want[i], got[i]), "event %d differs from the source's", i+1)
	}
	row, err := dst.Conversation(ctx, "c")
	require.NoError(t, err)
	require.LessOrEqual(t, row.GetFsmState().GetLastSeq(), last)
	var again bytes.Buffer
	require.NoError(t, exportTo(ctx, dst, []string{"c"}, &again, nil), "the copy exports")
	return last
}

// TestExportOfAConversationWrittenMeanwhile: a message sent to the
// conversation while export reads its log (between two pages) is not in
// the export, which is the log as it was when export read the row: it
// imports, and its log is a prefix of the source's. Export read events
// until it found none, so it took the new ones too and then refused its
// own read as a damaged log ("its log ends at seq N, its last seq is M").
func TestExportOfAConversationWrittenMeanwhile(t *testing.T) {
	ctx := ctxT(t)
	st := memStore(t)
	model := scripted.New(scripted.Options{})
	rt, err := lazarus.Open(lazarus.Options{Store: st, Model: model, IdleTimeout: -1, Audit: lazarus.AuditOptions{Enabled: true}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = rt.Close() })
	for i := range 3 {
		seq, err := rt.Send(ctx, "c", fmt.Sprintf("message %d", i), user)
		require.NoError(t, err)
		awaitEvent(t, rt, "c", func(ev *messages.Event) bool { return ev.GetSeq() > seq && ev.GetAssistantMsg() != nil })
	}
	before, err := st.LastSeq(ctx, "c")
	require.NoError(t, err)

	sent := false
	testHookExportPage = func(context.Context) {
		if sent {
			return
		}
		sent = true
		seq, err := rt.Send(ctx, "c", "written during the export", user)
		require.NoError(t, err)
		awaitEvent(t, rt, "c", func(ev *messages.Event) bool { return ev.GetSeq() > seq && ev.GetAssistantMsg() != nil })
	}
	t.Cleanup(func() { testHookExportPage = nil })
	var out bytes.Buffer
	require.NoError(t, exportPaged(ctx, st, []string{"c"}, &out, nil, 1))
	require.True(t, sent, "the hook ran between two pages")
	after, err := st.LastSeq(ctx, "c")
	require.NoError(t, err)
	require.Greater(t, after, before)
	require.Equal(t, before, requirePrefixImport(t, st, out.String()), "the export holds the log as it was when export started")
}

// TestExportWhileASendLoopWrites: exports taken while a loop sends to the
// conversation (each message answered by the scripted model) all import,
// each a prefix of the source's log with a row that agrees with it.
// Export failed on the first page read after an append, as in
// TestExportOfAConversationWrittenMeanwhile.
func TestExportWhileASendLoopWrites(t *testing.T) {
	ctx := ctxT(t)
	st := memStore(t)
	model := scripted.New(scripted.Options{})
	rt, err := lazarus.Open(lazarus.Options{Store: st, Model: model, IdleTimeout: -1, Audit: lazarus.AuditOptions{Enabled: true}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = rt.Close() })
	_, err = rt.Send(ctx, "c", "first", user)
	require.NoError(t, err)

	const sends = 150
	first, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		<-first // so that the first export is of the log before the loop
		for i := range sends {
			if _, err := rt.Send(ctx, "c", fmt.Sprintf("loop %d", i), user); err != nil {
				t.Errorf("send %d: %v", i, err)
				return
			}
		}
	}()
	var lasts []uint64
	for running := true; running || len(lasts) < 3; {
		select {
		case <-done:
			running = false
		default:
		}
		var out bytes.Buffer
		require.NoError(t, exportPaged(ctx, st, []string{"c"}, &out, nil, 2))
		lasts = append(lasts, requirePrefixImport(t, st, out.String()))
		if len(lasts) == 1 {
			close(first)
		}
	}
	<-done
	require.Less(t, lasts[0], lasts[len(lasts)-1], "the conversation was written during the exports")
}

// TestExportOfAScheduleFiredMeanwhile: an occurrence of a schedule that
// fires while export reads the log (its user message appended past the
// exported prefix, the schedule's next moved on, in one write) is not in
// the export, and neither is its effect on the schedule: the export holds
// the schedule as it was with the log it holds, so the copy fires that
// occurrence. Export read the schedules after the log, so it held the
// moved next without the message: the occurrence was lost to the copy.
func TestExportOfAScheduleFiredMeanwhile(t *testing.T) {
	ctx := ctxT(t)
	st := memStore(t)
	at := timestamppb.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	text := func(s string) *messages.UserMessage {
		return &messages.UserMessage{Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: s}}}}
	}
	var evs []*messages.Event
	for i := range 3 {
		evs = append(evs, &messages.Event{Time: at, Body: &messages.Event_UserMsg{UserMsg: text(fmt.Sprintf("message %d", i))}})
	}
	_, err := st.Append(ctx, &messages.AppendRequest{ConversationId: "c", Events: evs, Status: messages.ConversationStatus_CONVERSATION_STATUS_IDLE})
	require.NoError(t, err)
	first := timestamppb.New(at.AsTime().Add(time.Hour))
	sched := &messages.Schedule{Id: "s1", ConversationId: "c", Next: first, Every: durationpb.New(time.Hour), Payload: text("wake up"), Created: at}
	ss := st.(journal.ScheduleStore)
	require.NoError(t, ss.PutSchedule(ctx, sched))

	fired := false
	testHookExportPage = func(context.Context) {
		if fired {
			return
		}
		fired = true
		// What the runtime writes for an occurrence: its message and the
		// schedule's next, in one fenced append.
		_, err := st.Append(ctx, &messages.AppendRequest{ConversationId: "c", ExpectedLast: 3,
			Events:       []*messages.Event{{Time: first, Body: &messages.Event_UserMsg{UserMsg: text("wake up")}}},
			ScheduleFire: &messages.ScheduleFire{ScheduleId: "s1", Occurrence: first, Next: timestamppb.New(first.AsTime().Add(time.Hour))}})
		require.NoError(t, err)
	}
	t.Cleanup(func() { testHookExportPage = nil })
	var out bytes.Buffer
	require.NoError(t, exportPaged(ctx, st, []string{"c"}, &out, nil, 1))
	require.True(t, fired, "the hook ran between two pages")
	require.Equal(t, uint64(3), requirePrefixImport(t, st, out.String()), "the export holds the log as it was when export started")

	src := parseExport(t, out.Bytes())
	require.Len(t, src["c"].schedules, 1)
	require.True(t, proto.Equal(sched, src["c"].schedules[0]),
		"the exported schedule is the one of the exported log, its occurrence not yet fired:\nwant %v\ngot  %v", sched, src["c"].schedules[0])
}

// TestExportOfACallResolvedMeanwhile: a pending call answered while
// export reads the log (its row resolved, its tool_result appended past
// the exported prefix) is exported pending, as it was with the log
// export holds; the copy imports with the call pending, its answer owed.
func TestExportOfACallResolvedMeanwhile(t *testing.T) {
	ctx := ctxT(t)
	st := memStore(t)
	at := timestamppb.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	result := &messages.ToolOutcome{Outcome: &messages.ToolOutcome_Content{Content: `{"approved":true}`}}
	resolved := false
	testHookExportPage = func(context.Context) {
		if resolved {
			return
		}
		resolved = true
		_, err := st.Append(ctx, &messages.AppendRequest{ConversationId: "existing", Unfenced: true,
			Resolutions: []*messages.ToolResolution{{ToolCallId: "tc-existing", Status: messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED, Result: result, At: at}},
			Status:      messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE})
		require.NoError(t, err)
		_, err = st.Append(ctx, &messages.AppendRequest{ConversationId: "existing", ExpectedLast: 3,
			Events: []*messages.Event{{Time: at, Body: &messages.Event_ToolResult{ToolResult: &messages.ToolResultEvent{ToolCallId: "tc-existing", Name: "approve", Outcome: result}}}}})
		require.NoError(t, err)
	}
	t.Cleanup(func() { testHookExportPage = nil })
	var out bytes.Buffer
	require.NoError(t, exportPaged(ctx, st, []string{"existing"}, &out, nil, 1))
	require.True(t, resolved, "the hook ran between two pages")
	row, err := st.ToolCall(ctx, "tc-existing")
	require.NoError(t, err)
	require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED, row.GetStatus())

	exported := parseExport(t, out.Bytes())["existing"]
	require.Len(t, exported.events, 3)
	require.Len(t, exported.toolCalls, 1)
	require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING, exported.toolCalls[0].GetStatus(), "the row as it was with the exported log")
	require.Equal(t, messages.ConversationStatus_CONVERSATION_STATUS_SUSPENDED, exported.row.GetStatus())
	dst := memjournal.New(memjournal.Options{})
	t.Cleanup(func() { _ = dst.Close() })
	require.NoError(t, importInto(ctx, dst, &out, importOptions{}))
	pending, err := dst.PendingToolCalls(ctx, "existing")
	require.NoError(t, err)
	require.Len(t, pending, 1)
	require.Equal(t, "tc-existing", pending[0].GetId())
}

// TestExportOfAConversationDeletedMeanwhile: a conversation deleted while
// export reads its log (by a node on the same database) fails its export
// with an error wrapping journal.ErrNotFound that says so (exit status 5),
// with no end line for it, so import refuses what was written. Export
// called it damaged (journal.ErrCorrupt, "run 'lazarus check'"), which
// sent the operator after a store that was sound.
func TestExportOfAConversationDeletedMeanwhile(t *testing.T) {
	ctx := ctxT(t)
	st := memStore(t)
	deleted := false
	testHookExportPage = func(context.Context) {
		if !deleted {
			deleted = true
			require.NoError(t, st.DeleteConversation(ctx, "existing"))
		}
	}
	t.Cleanup(func() { testHookExportPage = nil })
	var out bytes.Buffer
	err := exportPaged(ctx, st, []string{"existing"}, &out, nil, 1)
	require.True(t, deleted, "the hook ran between two pages")
	require.ErrorIs(t, err, journal.ErrNotFound)
	require.NotErrorIs(t, err, journal.ErrCorrupt)
	require.ErrorContains(t, err, "conversation existing was deleted while it was exported")
	require.Equal(t, exitNotFound, exitCode(err))
	require.ErrorIs(t, checkInput(&out), errTruncated, "what was written has no end line")
}
