package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/pebblejournal"
	"github.com/lazarusrt/lazarus/messages"
)

// exportOf returns the export of the fixture's conversations ids.
func exportOf(t *testing.T, f *fixture, ids ...string) string {
	t.Helper()
	r := cliRun(t, "", append([]string{"export", "--dir", f.dir}, ids...)...)
	requireOK(t, r)
	return r.stdout
}

// section is one conversation's records, read whole from a Store (tests
// only: the commands stream).
type section struct {
	row       *messages.Conversation
	metadata  map[string]string
	events    []*messages.Event
	summaries []*messages.Summary
	toolCalls []*messages.ToolCallRecord
	deadlines []*messages.Deadline
	schedules []*messages.Schedule
}

// collect reads one conversation of st whole.
func collect(t testing.TB, st journal.Store, id string) *section {
	t.Helper()
	ctx := context.Background()
	row, err := st.Conversation(ctx, id)
	require.NoError(t, err)
	s := &section{row: row}
	s.metadata, err = st.Metadata(ctx, id)
	require.NoError(t, err)
	s.events, err = st.Events(ctx, id, journal.EventQuery{})
	require.NoError(t, err)
	ids := map[string]bool{}
	for _, ev := range s.events {
		if tc := ev.GetToolCall(); tc != nil {
			ids[tc.GetCall().GetId()] = true
		}
	}
	for sum, err := st.LatestSummary(ctx, id); !errors.Is(err, journal.ErrNotFound); sum, err = st.SummaryBefore(ctx, id, sum.GetToSeq()) {
		require.NoError(t, err)
		s.summaries = append(s.summaries, sum)
	}
	slices.Reverse(s.summaries)
	pending, err := st.PendingToolCalls(ctx, id)
	require.NoError(t, err)
	for _, p := range pending {
		ids[p.GetId()] = true
	}
	for _, call := range slices.Sorted(maps.Keys(ids)) {
		rec, err := st.ToolCall(ctx, call)
		if errors.Is(err, journal.ErrNotFound) {
			continue
		}
		require.NoError(t, err)
		if rec.GetConversationId() == id {
			s.toolCalls = append(s.toolCalls, rec)
		}
	}
	require.NoError(t, st.Deadlines(ctx, time.Time{}, func(d *messages.Deadline) error {
		if d.GetConversationId() == id {
			s.deadlines = append(s.deadlines, d)
		}
		return nil
	}))
	slices.SortFunc(s.deadlines, func(a, b *messages.Deadline) int { return cmp.Compare(a.GetToolCallId(), b.GetToolCallId()) })
	if ss, ok := st.(journal.ScheduleStore); ok {
		s.schedules, err = ss.ConversationSchedules(ctx, id)
		require.NoError(t, err)
	}
	return s
}

// expectedCreated is the "created" the Store gives an imported row: the
// time of its first event, or nil (the import time) if it has none.
func expectedCreated(s *section) *timestamppb.Timestamp {
	if len(s.events) == 0 {
		return nil
	}
	return s.events[0].GetTime()
}

// collectAll reads every conversation of st whole.
func collectAll(t testing.TB, st journal.Store) map[string]*section {
	t.Helper()
	secs := map[string]*section{}
	require.NoError(t, eachConversation(context.Background(), st, func(row *messages.Conversation) error {
		secs[row.GetId()] = collect(t, st, row.GetId())
		return nil
	}))
	return secs
}

func collectDir(t *testing.T, dir string) map[string]*section {
	t.Helper()
	st, err := pebblejournal.Open(dir, pebblejournal.Options{})
	require.NoError(t, err)
	defer func() { require.NoError(t, st.Close()) }()
	return collectAll(t, st)
}

func requireProtos[M proto.Message](t testing.TB, what string, want, got []M) {
	t.Helper()
	require.Len(t, got, len(want), what)
	for i := range want {
		require.True(t, proto.Equal(want[i], got[i]), "%s %d:\nwant %v\ngot  %v", what, i, want[i], got[i])
	}
}

// requireImported checks that got (read back from a Store) is want (what
// was imported), exactly, but for the row times the Store sets: updated
// (now) and created (the first event's time; a fork's, the time of the
// import).
func requireImported(t testing.TB, want, got *section) {
	t.Helper()
	w := proto.Clone(want.row).(*messages.Conversation)
	g := proto.Clone(got.row).(*messages.Conversation)
	w.Updated, g.Updated = nil, nil
	if c := expectedCreated(want); c != nil && w.GetForkedFrom() == nil {
		w.Created = c
	} else {
		w.Created, g.Created = nil, nil
	}
	require.True(t, proto.Equal(w, g), "conversation row:\nwant %v\ngot  %v", w, g)
	require.Equal(t, len(want.metadata), len(got.metadata), "metadata")
	for k, v := range want.metadata {
		require.Equal(t, v, got.metadata[k], "metadata %q", k)
	}
	requireProtos(t, "event", want.events, got.events)
	requireProtos(t, "summary", sortedBy(want.summaries, (*messages.Summary).GetToSeq), got.summaries)
	requireProtos(t, "tool call", sortedBy(want.toolCalls, (*messages.ToolCallRecord).GetId), got.toolCalls)
	requireProtos(t, "deadline", sortedBy(want.deadlines, (*messages.Deadline).GetToolCallId), got.deadlines)
	requireProtos(t, "schedule", sortedBy(want.schedules, (*messages.Schedule).GetId), got.schedules)
}

func sortedBy[M any, K cmp.Ordered](in []M, key func(M) K) []M {
	out := slices.Clone(in)
	slices.SortStableFunc(out, func(a, b M) int { return cmp.Compare(key(a), key(b)) })
	return out
}

func TestExportImportRoundTrip(t *testing.T) {
	f := newFixture(t)
	st, err := pebblejournal.Open(f.dir, pebblejournal.Options{})
	require.NoError(t, err)
	require.NoError(t, st.PutConversation(ctxT(t), journal.ConversationUpdate{ID: "finished", Settings: map[string]string{"lang": "en", "tier": "gold"}}))
	require.NoError(t, st.Close())
	src := collectDir(t, f.dir)
	// The fixture has every kind of record.
	require.Len(t, src, 3)
	require.NotEmpty(t, src["finished"].summaries)
	require.Len(t, src["finished"].metadata, 2)
	require.Len(t, src["finished"].row.GetSettings(), 2)
	require.Len(t, src["waiting"].deadlines, 1)
	require.Len(t, src["waiting"].toolCalls, 2)
	require.NotNil(t, src["waiting"].row.GetFsmState())
	require.Len(t, src["finished"].schedules, 3)

	exportFile := filepath.Join(t.TempDir(), "all.jsonl")
	requireOK(t, cliRun(t, "", "export", "--all", "--dir", f.dir, "--file", exportFile))
	exported, err := os.ReadFile(exportFile)
	require.NoError(t, err)
	require.Equal(t, exportOf(t, f, "answered", "finished", "waiting"), string(exported), "--file and stdout agree; export is deterministic")
	lines := outLines(string(exported))
	require.Equal(t, `{"type":"header","format":"lazarus-export","version":5}`, lines[0])
	require.Regexp(t, `^\{"type":"conversation","conversation":"answered","record":\{"id":"answered",`, lines[1])

	dst := filepath.Join(t.TempDir(), "restored")
	r := cliRun(t, "", "import", "--file", exportFile, "--dir", dst)
	requireOK(t, r)
	require.Contains(t, r.stdout, "imported conversation waiting (suspended, 7 events, 0 summaries, 2 tool calls, 1 deadlines, 0 schedules, 0 metadata keys)\n")
	require.Contains(t, r.stdout, "imported conversation finished (idle, 5 events, 1 summaries, 1 tool calls, 0 deadlines, 3 schedules, 2 metadata keys)\n")

	got := collectDir(t, dst)
	require.Len(t, got, 3)
	for id, want := range src {
		t.Run(id, func(t *testing.T) {
			requireImported(t, want, got[id])
			// And the row times the Store set are the source's too: a
			// runtime creates a row with its first event.
			require.True(t, proto.Equal(want.row.GetCreated(), got[id].row.GetCreated()))
		})
	}
	// Exporting the copy gives the same file, but for "updated".
	again := strings.Split(cliRun(t, "", "export", "--all", "--dir", dst).stdout, "\n")
	for i, line := range lines {
		if strings.Contains(line, `"type":"conversation"`) {
			continue
		}
		require.Equal(t, line, again[i])
	}

	// The copy is live: a runtime resumes it and takes the pending answer.
	model := scripted.New(scripted.Options{})
	model.Push("waiting", scripted.Text("Thanks, refunded."))
	rt, err := lazarus.Open(lazarus.Options{Dir: dst, Model: model, Tools: tools(), IdleTimeout: -1})
	require.NoError(t, err)
	require.NoError(t, rt.Resolve(ctxT(t), f.waitingCall, `{"approved":true}`, user))
	awaitEvent(t, rt, "waiting", func(ev *messages.Event) bool { return assistantText(ev) == "Thanks, refunded." })
	// And its schedules are the runtime's: listed, and cancellable.
	scheds, err := rt.Schedules(ctxT(t), "finished")
	require.NoError(t, err)
	requireProtos(t, "schedule", src["finished"].schedules, scheds)
	require.NoError(t, rt.CancelSchedule(ctxT(t), "finished", "finished-once"))
	require.NoError(t, rt.Close())

	t.Run("dry run writes nothing", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "new")
		r := cliRun(t, string(exported), "import", "--dry-run", "--dir", dir)
		requireOK(t, r)
		require.Contains(t, r.stdout, "would import conversation finished")
		require.NoDirExists(t, dir)
		r = cliRun(t, string(exported), "import", "--dry-run", "--dir", f.dir)
		require.Equal(t, exitError, r.code)
		require.Contains(t, r.stderr, "nothing would be imported: conversation answered already exists")
	})
}

func TestImportRefuses(t *testing.T) {
	f := newFixture(t)
	all := exportOf(t, f, "answered", "finished", "waiting")
	before := exportOf(t, f, "answered", "finished", "waiting")

	t.Run("export of an unknown conversation writes nothing", func(t *testing.T) {
		r := cliRun(t, "", "export", "waiting", "nobody", "--dir", f.dir)
		require.Equal(t, exitNotFound, r.code)
		require.Empty(t, r.stdout)
		require.Contains(t, r.stderr, "no conversation nobody")
		require.Empty(t, sentinelTextRepeated(r.stderr), r.stderr)
		file := filepath.Join(t.TempDir(), "out.jsonl")
		r = cliRun(t, "", "export", "nobody", "--file", file, "--dir", f.dir)
		require.Equal(t, exitNotFound, r.code)
		require.NoFileExists(t, file)
	})

	t.Run("an existing conversation", func(t *testing.T) {
		r := cliRun(t, all, "import", "--dir", f.dir)
		require.Equal(t, exitError, r.code)
		require.Contains(t, r.stderr, "nothing imported: conversation answered already exists in the target; import never overwrites")
		require.Equal(t, before, exportOf(t, f, "answered", "finished", "waiting"))
	})

	t.Run("a later conversation of the input exists", func(t *testing.T) {
		dir := t.TempDir() + "/target"
		requireOK(t, cliRun(t, exportOf(t, f, "waiting"), "import", "--dir", dir))
		r := cliRun(t, all, "import", "--dir", dir)
		require.Equal(t, exitError, r.code)
		require.Contains(t, r.stderr, "conversation waiting already exists")
		got := collectDir(t, dir)
		require.Len(t, got, 1, "answered and finished were not imported either")
	})

	t.Run("metadata without a row in the target", func(t *testing.T) {
		// A Store keeps metadata of an id without a row (a create that
		// stopped after its first write): it was merged into the
		// imported conversation's.
		dir := filepath.Join(t.TempDir(), "target")
		st, err := pebblejournal.Open(dir, pebblejournal.Options{})
		require.NoError(t, err)
		require.NoError(t, st.PutMetadata(ctxT(t), "finished", map[string]string{"stray": "left over"}))
		err = importInto(ctxT(t), st, strings.NewReader(exportOf(t, f, "finished")), importOptions{})
		require.ErrorIs(t, err, journal.ErrConflict)
		require.ErrorContains(t, err, "nothing imported: conversation finished has no row in the target, but 1 metadata keys; import never overwrites")
		_, err = st.Conversation(ctxT(t), "finished")
		require.ErrorIs(t, err, journal.ErrNotFound, "nothing written")
		md, err := st.Metadata(ctxT(t), "finished")
		require.NoError(t, err)
		require.Equal(t, map[string]string{"stray": "left over"}, md)
		require.NoError(t, st.Close())
		r := cliRun(t, exportOf(t, f, "finished"), "import", "--dir", dir)
		require.Equal(t, exitError, r.code)
		require.Contains(t, r.stderr, "has no row in the target, but 1 metadata keys")
	})

	t.Run("a tool call id the target has", func(t *testing.T) {
		renamed := strings.NewReplacer(`"conversation":"waiting"`, `"conversation":"waiting-2"`,
			`"conversation_id":"waiting"`, `"conversation_id":"waiting-2"`, `"id":"waiting"`, `"id":"waiting-2"`).Replace(exportOf(t, f, "waiting"))
		r := cliRun(t, renamed, "import", "--dir", f.dir)
		require.Equal(t, exitError, r.code)
		require.Contains(t, r.stderr, "already belongs to conversation waiting in the target")
		require.Equal(t, before, exportOf(t, f, "answered", "finished", "waiting"))
		require.Len(t, collectDir(t, f.dir), 3)
	})
}

func TestImportRejectsBadInput(t *testing.T) {
	f := newFixture(t)
	waiting := exportOf(t, f, "waiting")
	finished := exportOf(t, f, "finished")
	wl := outLines(waiting)
	// wl: 0 header, 1 conversation, 2..4 events 1..3, 5 the row of event
	// 3's call, 6..8 events 4..6, 9 the row of event 6's call, 10 event 7,
	// 11 deadline, 12 end, 13 trailer.
	require.Len(t, wl, 14, waiting)
	join := func(ls ...string) string { return strings.Join(ls, "\n") + "\n" }
	without := func(i int) string { return join(slices.Delete(slices.Clone(wl), i, i+1)...) }
	replace := func(in, old, new string) string {
		require.Contains(t, in, old)
		return strings.Replace(in, old, new, 1)
	}
	swapped := slices.Clone(wl)
	swapped[2], swapped[3] = swapped[3], swapped[2]
	rowFirst := slices.Clone(wl)
	rowFirst[4], rowFirst[5] = rowFirst[5], rowFirst[4]
	v1 := replace(waiting, `"version":5`, `"version":1`)
	fl := outLines(finished)
	// fl: 0 header, 1 conversation, 2..3 metadata, 4..6 events 1..3, 7 the
	// row of event 3's call, 8..9 events 4..5, 10 summary, 11..13
	// schedules finished-cron, finished-every, finished-once, 14 end, 15
	// trailer.
	require.Len(t, fl, 16, finished)
	require.Contains(t, fl[11], `{"type":"schedule","conversation":"finished","record":{"id":"finished-cron","conversation_id":"finished","next":"`)
	schedSwapped := slices.Clone(fl)
	schedSwapped[11], schedSwapped[12] = schedSwapped[12], schedSwapped[11]
	schedFirst := slices.Clone(fl)
	schedFirst[10], schedFirst[11] = schedFirst[11], schedFirst[10]
	// waiting with a schedule line (finished's, moved) before its deadline.
	schedBeforeDeadline := slices.Insert(slices.Clone(wl), 11,
		strings.ReplaceAll(strings.ReplaceAll(fl[11], `"conversation":"finished"`, `"conversation":"waiting"`), `"conversation_id":"finished"`, `"conversation_id":"waiting"`))

	for _, tc := range []struct {
		name, input, want string
	}{
		{"empty", "", "empty input"},
		{"not json", "hello\n", "line 1: not a JSON object of this format"},
		{"no header", join(wl[1:]...), "line 1: the input does not start with a lazarus-export header"},
		{"newer version", replace(waiting, `"version":5`, `"version":6`), `line 1: header of format "lazarus-export" version 6; this build reads "lazarus-export" versions 2 to 5`},
		{"version 1", v1, "line 1: an export of version 1, which has no end lines"},
		{"unknown envelope field", replace(waiting, `{"type":"event",`, `{"type":"event","extra":1,`), `line 3: not a JSON object of this format (json: unknown field "extra")`},
		{"unknown record field", replace(waiting, `"record":{"seq":"1",`, `"record":{"seq":"1","colour":"red",`), `line 3: event record: `},
		{"unknown line type", replace(waiting, `{"type":"deadline",`, `{"type":"alarm",`), `line 12: unknown line type "alarm"`},
		{"unknown enum value", replace(waiting, `"status":"CONVERSATION_STATUS_SUSPENDED"`, `"status":42`), "enum value 42 is not one of lazarus.v1.ConversationStatus"},
		{"two values on a line", replace(waiting, `"version":5}`, `"version":5} {}`), "line 1: more than one JSON value"},
		{"gap in seqs", without(3), "line 4: event of seq 3, want 2"},
		{"events out of order", join(swapped...), "line 3: event of seq 2, want 1"},
		{"row before its event", join(rowFirst...), "line 5: tool call row call_"},
		{"event without its row", without(5), "line 6: tool_call event 3 is not followed by the row of its call"},
		{"record before its conversation", join(wl[0], wl[2]), "line 2: event line outside a conversation's section"},
		{"line of another conversation", replace(waiting, `{"type":"event","conversation":"waiting","record":{"seq":"3"`, `{"type":"event","conversation":"other","record":{"seq":"3"`), `line 5: event line of conversation "other" in the section of "waiting"`},
		{"conversation twice", waiting + waiting, "conversation waiting appears again (first on line 2)"},
		{"row twice", join(append(slices.Clone(wl[:6]), wl[5:]...)...), "line 7: tool call row call_"},
		{"deadline of an unknown call", replace(waiting, `{"type":"deadline","conversation":"waiting","record":{"conversation_id":"waiting","tool_call_id":"`, `{"type":"deadline","conversation":"waiting","record":{"conversation_id":"waiting","tool_call_id":"zz`), "which is no tool call of this conversation"},
		{"summary past the log", strings.Replace(finished, `"to_seq":"`, `"to_seq":"9`, 1), "summary of \"finished\" covers"},
		{"not UTF-8", replace(finished, `"value":"alice"`, "\"value\":\"al\xffce\""), "line 4: not valid UTF-8"},
		{"metadata with an empty value", replace(finished, `"value":"alice"`, `"value":""`), `metadata "owner" has an empty value`},
		{"truncated in a line", waiting[:len(waiting)-20], "line 14: no newline at its end"},
		{"truncated at a line", join(wl[:6]...), "the input ends inside the section of conversation waiting (line 2), before its end line"},
		{"truncated before the trailer", join(wl[:13]...), "the input ends after line 13 without a trailer"},
		{"an end line that miscounts", replace(waiting, `"last_seq":7,"tool_calls":2`, `"last_seq":7,"tool_calls":3`), "line 13: the end line of conversation waiting counts 7 events, 3 tool calls"},
		{"a trailer that miscounts", replace(waiting, `"lines":13`, `"lines":12`), "line 14: the trailer counts 1 conversations in 12 lines, the file has 1 in 13"},
		{"fsm_state past the log", replace(waiting, `"last_seq":"7"`, `"last_seq":"8"`), "the fsm_state of conversation waiting says its log ends at seq 8, its log ends at 7"},
		{"invalid timestamp", replace(waiting, `"time":"`, `"time":"99999-`), "line 3: event record: "},
		{"no status", replace(waiting, `"status":"CONVERSATION_STATUS_SUSPENDED",`, ``), "conversation record without a status"},
		{"schedule of another conversation", replace(finished, `"id":"finished-every","conversation_id":"finished"`, `"id":"finished-every","conversation_id":"other"`), `line 13: schedule finished-every names conversation "other"`},
		{"schedule without a next occurrence", regexpReplace(t, finished, `"id":"finished-once","conversation_id":"finished","next":"[^"]*",`, `"id":"finished-once","conversation_id":"finished",`), `line 14: schedule "finished-once" has no next occurrence`},
		{"schedule without a payload", regexpReplace(t, finished, `"payload":\{"content":\[\{"text":"Check order 42 again."\}\]\},`, ``), `line 13: schedule "finished-every" has no payload`},
		{"schedule with a negative interval", replace(finished, `"every":"864000s"`, `"every":"-864000s"`), `line 13: interval of schedule "finished-every" must be positive`},
		{"schedule with an unknown field", replace(finished, `"id":"finished-once",`, `"id":"finished-once","color":"red",`), `line 14: schedule record: `},
		{"schedules out of order", join(schedSwapped...), "line 13: schedule finished-cron after schedule finished-every (schedules come by id, one per id)"},
		{"schedule before a summary", join(schedFirst...), "line 12: summary line after the deadlines or schedules"},
		{"schedule before a deadline", join(schedBeforeDeadline...), "line 13: deadline line after the schedules"},
		{"schedule twice", join(append(slices.Clone(fl[:13]), fl[12:]...)...), "line 14: schedule finished-every after schedule finished-every"},
		{"schedule in a version 2 export", replace(finished, `"version":5`, `"version":2`), "line 12: schedule line in an export of version 2, which has none"},
		{"schedule with a revision in a version 4 export", replace(finished, `"version":5`, `"version":4`), "line 12: schedule finished-cron has a revision, in an export of version 4, which carries none"},
		{"end line without schedules", replace(finished, `"schedules":3,`, ``), `line 15: end record is not {"last_seq": N, "tool_calls": K, "summaries": S, "deadlines": D, "schedules": W, "metadata": M}`},
		{"end line that miscounts schedules", replace(finished, `"schedules":3,`, `"schedules":2,`), "line 15: the end line of conversation finished counts 5 events, 1 tool calls, 1 summaries, 0 deadlines, 2 schedules and 2 metadata keys; its section has 5, 1, 1, 0, 3 and 2"},
		{"version 2 end line with schedules", replace(replace(waiting, `"version":5`, `"version":2`), `"schedules":0,`, `"schedules":1,`), `line 13: end record of version 2 is not`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "target")
			r := cliRun(t, tc.input, "import", "--dir", dir)
			require.Equal(t, exitError, r.code, r.stdout)
			require.Contains(t, r.stderr, "input rejected, nothing imported")
			require.Contains(t, r.stderr, tc.want)
			require.Empty(t, r.stdout)
			require.NoDirExists(t, dir, "bad input is rejected before the store is opened")

			require.ErrorIs(t, checkInput(strings.NewReader(tc.input)), journal.ErrInvalid)
		})
	}
}

// memStore opens a Pebble store on an in-memory filesystem with one
// conversation, "existing", that owns the tool call "tc-existing".
func memStore(t testing.TB) journal.Store {
	t.Helper()
	st, err := pebblejournal.Open("db", pebblejournal.Options{FS: vfs.NewMem(), Audit: true, CacheSize: 1 << 20, MemTableSize: 1 << 20})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	at := timestamppb.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	call := &messages.ToolCall{Id: "tc-existing", Name: "approve", Arguments: `{}`}
	_, err = st.Append(context.Background(), &messages.AppendRequest{
		ConversationId: "existing",
		Events: []*messages.Event{
			{Time: at, Body: &messages.Event_UserMsg{UserMsg: &messages.UserMessage{Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: "hi"}}}}}},
			{Time: at, Body: &messages.Event_AssistantMsg{AssistantMsg: &messages.AssistantMessage{ToolCalls: []*messages.ToolCall{call}}}},
			{Time: at, Body: &messages.Event_ToolCall{ToolCall: &messages.ToolCallEvent{Call: call, Executor: messages.Executor_EXECUTOR_HUMAN}}},
		},
		ToolCalls: []*messages.ToolCallRecord{{Id: "tc-existing", ConversationId: "existing", Name: "approve",
			Executor: messages.Executor_EXECUTOR_HUMAN, Status: messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING, Created: at}},
		Status: messages.ConversationStatus_CONVERSATION_STATUS_SUSPENDED,
	})
	require.NoError(t, err)
	return st
}

// dump is the whole content of st, as export writes it.
func dump(t testing.TB, st journal.Store) string {
	t.Helper()
	var ids []string
	require.NoError(t, eachConversation(context.Background(), st, func(row *messages.Conversation) error {
		ids = append(ids, row.GetId())
		return nil
	}))
	var b bytes.Buffer
	require.NoError(t, exportTo(context.Background(), st, ids, &b, nil))
	return b.String()
}

// importInto imports in into st (the test's store).
func importInto(ctx context.Context, st journal.Store, in io.Reader, o importOptions) error {
	return importStream(ctx, in, func(bool) (journal.Store, error) { return st, nil }, o)
}

// checkInput runs the first pass of an import on in, with no target.
func checkInput(in io.Reader) error {
	return importStream(context.Background(), in, func(bool) (journal.Store, error) { return nil, errNoStore }, importOptions{dryRun: true})
}

// parseExport decodes an export that import accepted into its sections,
// without checking anything.
func parseExport(t testing.TB, data []byte) map[string]*section {
	t.Helper()
	secs := map[string]*section{}
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		var env envelope
		require.NoError(t, json.Unmarshal([]byte(line), &env))
		if env.Conversation == nil {
			continue
		}
		id := *env.Conversation
		var m proto.Message
		switch env.Type {
		case typeConversation:
			row := &messages.Conversation{}
			secs[id] = &section{row: row, metadata: map[string]string{}}
			m = row
		case typeMetadata:
			var kv metadataRecord
			require.NoError(t, json.Unmarshal(env.Record, &kv))
			secs[id].metadata[*kv.Key] = *kv.Value
		case typeEvent:
			ev := &messages.Event{}
			secs[id].events = append(secs[id].events, ev)
			m = ev
		case typeToolCall:
			rec := &messages.ToolCallRecord{}
			secs[id].toolCalls = append(secs[id].toolCalls, rec)
			m = rec
		case typeSummary:
			sum := &messages.Summary{}
			secs[id].summaries = append(secs[id].summaries, sum)
			m = sum
		case typeDeadline:
			d := &messages.Deadline{}
			secs[id].deadlines = append(secs[id].deadlines, d)
			m = d
		case typeSchedule:
			sc := &messages.Schedule{}
			secs[id].schedules = append(secs[id].schedules, sc)
			m = sc
		}
		if m != nil {
			require.NoError(t, protojson.Unmarshal(env.Record, m))
		}
	}
	return secs
}

// FuzzImport feeds arbitrary input to the importer, on a Pebble store that
// already holds a conversation. The importer must never panic; when it
// fails, the store must be exactly as before (nothing half-written); when
// it succeeds, every imported record must read back exactly. The seed
// corpus (testdata/fuzz/FuzzImport) holds exports a runtime wrote and
// broken variants; regenerate it with -update-seeds. Fuzz with
//
//	go test -run '^$' -fuzz FuzzImport -fuzzminimizetime 100x ./cmd/lazarus/
//
// (the default minimization budget, 60s per new input, stalls the run).
func FuzzImport(f *testing.F) {
	f.Add([]byte(""))
	f.Add([]byte(`{"type":"header","format":"lazarus-export","version":1}` + "\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		st := memStore(t)
		ctx := context.Background()
		before := dump(t, st)
		err := importInto(ctx, st, bytes.NewReader(data), importOptions{})
		if err != nil {
			require.True(t, errors.Is(err, journal.ErrInvalid) || errors.Is(err, journal.ErrConflict), "an error of bad input or of a conflict with the target: %v", err)
			require.Equal(t, before, dump(t, st), "a failed import changed the store: %v", err)
			return
		}
		// What was imported reads back exactly.
		want := parseExport(t, data)
		got := collectAll(t, st)
		require.Len(t, got, len(want)+1)
		for id, w := range want {
			require.Contains(t, got, id)
			requireImported(t, w, got[id])
		}
	})
}

var updateSeeds = flag.Bool("update-seeds", false, "rewrite the seed corpus of FuzzImport from a runtime-written store")

// TestWriteFuzzSeeds regenerates testdata/fuzz/FuzzImport when run with
// -update-seeds; otherwise it checks the corpus is there.
func TestWriteFuzzSeeds(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzImport")
	if !*updateSeeds {
		entries, err := os.ReadDir(dir)
		require.NoError(t, err, "the seed corpus is committed; regenerate it with -update-seeds")
		require.NotEmpty(t, entries)
		return
	}
	fx := newFixture(t)
	all := exportOf(t, fx, "answered", "finished", "waiting")
	waiting := exportOf(t, fx, "waiting")
	var existing bytes.Buffer
	require.NoError(t, exportTo(context.Background(), memStore(t), []string{"existing"}, &existing, nil))
	wl := outLines(waiting)
	finished := exportOf(t, fx, "finished")
	// Forks of finished: one from its summary, one of its whole log.
	forkFinished(t, fx)
	forkWhole(t, fx)
	forks := exportOf(t, fx, "finished", "forked", "whole")
	seeds := map[string]string{
		"all":              all,
		"waiting":          waiting,
		"finished":         finished,
		"concatenated":     exportOf(t, fx, "answered") + exportOf(t, fx, "finished"),
		"existing":         existing.String(),
		"existing-call":    strings.ReplaceAll(existing.String(), "existing", "other"),
		"stolen-call":      strings.ReplaceAll(existing.String(), `"existing"`, `"thief"`),
		"gap":              strings.Join(append(slices.Clone(wl[:3]), wl[4:]...), "\n") + "\n",
		"truncated":        waiting[:len(waiting)/2],
		"duplicate":        waiting + waiting,
		"bad-enum":         strings.Replace(waiting, `"CONVERSATION_STATUS_SUSPENDED"`, `7`, 1),
		"header-only":      wl[0] + "\n",
		"no-events":        strings.Join([]string{wl[0], wl[1]}, "\n") + "\n",
		"crlf":             strings.ReplaceAll(waiting, "\n", "\r\n"),
		"deadline-unknown": strings.Replace(waiting, `"tool_call_id":"`, `"tool_call_id":"x`, 1),
		"cut-at-a-line":    strings.Join(wl[:6], "\n") + "\n",
		"no-trailer":       strings.Join(wl[:len(wl)-1], "\n") + "\n",
		"no-last-newline":  strings.TrimSuffix(waiting, "\n"),
		"row-missing":      strings.Join(append(slices.Clone(wl[:5]), wl[6:]...), "\n") + "\n",
		"version-1":        strings.Replace(waiting, `"version":5`, `"version":1`, 1),
		"version-2":        strings.Replace(strings.Replace(waiting, `"version":5`, `"version":2`, 1), `"schedules":0,`, ``, 1),
		"schedule-only":    scheduleOnly(t, finished, "later", "later-"),
		"schedule-twice":   finished + scheduleOnly(t, finished, "later", ""),
		"schedule-foreign": strings.Replace(finished, `"conversation_id":"finished","next"`, `"conversation_id":"other","next"`, 1),
		"schedule-in-v2":   strings.Replace(finished, `"version":5`, `"version":2`, 1),
		"version-3":        strings.Replace(waiting, `"version":5`, `"version":3`, 1),
		"forks":            forks,
		"fork-in-v3":       strings.Replace(withoutRevisions(forks), `"version":5`, `"version":3`, 1),
		"version-4":        strings.Replace(withoutRevisions(finished), `"version":5`, `"version":4`, 1),
		"revision-in-v4":   strings.Replace(finished, `"version":5`, `"version":4`, 1),
	}
	require.NoError(t, os.RemoveAll(dir))
	require.NoError(t, os.MkdirAll(dir, 0o755))
	for name, data := range seeds {
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", data)
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644))
	}
}
