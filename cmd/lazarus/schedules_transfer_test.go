package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/journal/pgjournal"
	"github.com/lazarusrt/lazarus/journal/pgjournal/pgtest"
	"github.com/lazarusrt/lazarus/messages"
)

// regexpReplace replaces the first match of expr in in, which must match.
func regexpReplace(t testing.TB, in, expr, repl string) string {
	t.Helper()
	loc := regexp.MustCompile(expr).FindStringIndex(in)
	require.NotNil(t, loc, "no match of %s", expr)
	return in[:loc[0]] + repl + in[loc[1]:]
}

// scheduleOnly is a one-file export of conversation id, IDLE, with no
// events and the three schedules of the fixture's export finished, moved
// to it, their ids prefixed with prefix.
func scheduleOnly(t testing.TB, finished, id, prefix string) string {
	t.Helper()
	out := []string{
		`{"type":"header","format":"lazarus-export","version":5}`,
		fmt.Sprintf(`{"type":"conversation","conversation":%q,"record":{"id":%q,"status":"CONVERSATION_STATUS_IDLE"}}`, id, id),
	}
	n := 0
	for _, l := range outLines(finished) {
		if !strings.HasPrefix(l, `{"type":"schedule"`) {
			continue
		}
		l = strings.Replace(l, `"conversation":"finished"`, fmt.Sprintf(`"conversation":%q`, id), 1)
		l = strings.Replace(l, `"conversation_id":"finished"`, fmt.Sprintf(`"conversation_id":%q`, id), 1)
		l = strings.Replace(l, `"id":"finished-`, `"id":"`+prefix+`finished-`, 1)
		out = append(out, l)
		n++
	}
	require.Equal(t, 3, n, "the fixture's finished has three schedules")
	out = append(out, fmt.Sprintf(`{"type":"end","conversation":%q,"record":{"last_seq":0,"tool_calls":0,"summaries":0,"deadlines":0,"schedules":%d,"metadata":0}}`, id, n))
	out = append(out, fmt.Sprintf(`{"type":"trailer","record":{"conversations":1,"lines":%d}}`, len(out)))
	return strings.Join(out, "\n") + "\n"
}

// revisionRE matches the revision of a schedule record.
var revisionRE = regexp.MustCompile(`,"revision":"[^"]*"`)

// withoutRevisions is an export with its schedules' revisions taken out,
// as a build before revisions wrote them.
func withoutRevisions(in string) string { return revisionRE.ReplaceAllString(in, "") }

// TestImportScheduleRevisions: export format version 5 carries each
// schedule's revision, and an import keeps it (a fire of a replaced
// revision is stale, so the copy must know which definition it holds). A
// revision in a file of version 4 or 3, which no build that wrote those
// versions had, is refused with journal.ErrInvalid naming the line and
// the version, nothing written (before version 5, a newer build's file
// relabelled as 4 imported its revisions, and an older build refused it
// with an unknown field rather than a version); a version 4 file, whose
// schedules have none, imports, and so does a version 5 file with a
// schedule from before revisions.
func TestImportScheduleRevisions(t *testing.T) {
	f := newFixture(t)
	finished := exportOf(t, f, "finished")
	require.Contains(t, finished, `{"type":"header","format":"lazarus-export","version":5}`)
	require.Len(t, revisionRE.FindAllString(finished, -1), 3, "each of finished's schedules carries its revision")
	src := parseExport(t, []byte(finished))["finished"]
	require.Len(t, src.schedules, 3)

	t.Run("a round trip keeps each revision", func(t *testing.T) {
		st := memStore(t)
		require.NoError(t, importInto(ctxT(t), st, strings.NewReader(finished), importOptions{}))
		got := collect(t, st, "finished")
		requireImported(t, src, got)
		require.Len(t, got.schedules, 3)
		for i, sc := range got.schedules {
			require.NotEmpty(t, src.schedules[i].GetRevision())
			require.Equal(t, src.schedules[i].GetRevision(), sc.GetRevision(), sc.GetId())
		}
		var b bytes.Buffer
		require.NoError(t, exportTo(ctxT(t), st, []string{"finished"}, &b, nil))
		require.Equal(t, withoutUpdated(finished), withoutUpdated(b.String()))
	})

	for _, v := range []int{4, 3} {
		t.Run(fmt.Sprintf("a revision in a version %d file is refused", v), func(t *testing.T) {
			in := strings.Replace(finished, `"version":5`, fmt.Sprintf(`"version":%d`, v), 1)
			err := importStream(ctxT(t), strings.NewReader(in), noWrites(t), importOptions{})
			require.ErrorIs(t, err, journal.ErrInvalid)
			require.ErrorContains(t, err, fmt.Sprintf("line 12: schedule finished-cron has a revision, in an export of version %d, which carries none", v))
			st := memStore(t)
			before := dump(t, st)
			require.ErrorIs(t, importInto(ctxT(t), st, strings.NewReader(in), importOptions{}), journal.ErrInvalid)
			require.Equal(t, before, dump(t, st), "nothing written")
		})
	}

	for _, v := range []int{5, 4} {
		t.Run(fmt.Sprintf("a version %d file without revisions imports", v), func(t *testing.T) {
			in := strings.Replace(withoutRevisions(finished), `"version":5`, fmt.Sprintf(`"version":%d`, v), 1)
			st := memStore(t)
			require.NoError(t, importInto(ctxT(t), st, strings.NewReader(in), importOptions{}))
			got := collect(t, st, "finished")
			requireImported(t, parseExport(t, []byte(in))["finished"], got)
			require.Len(t, got.schedules, 3)
			for _, sc := range got.schedules {
				require.Empty(t, sc.GetRevision(), sc.GetId())
			}
		})
	}
}

// noScheduleStore is a Store without journal.ScheduleStore.
type noScheduleStore struct{ journal.Store }

// TestScheduleRoundTripOnEveryStore: a conversation's pending schedules
// (cron in a zone, interval, one-off) are exported after its deadlines
// and come back exactly, on memjournal, pebblejournal and pgjournal; so
// do those of a conversation without events, whose first schedule creates
// its row, and two forks (one from a summary, one of a whole log whose
// copied tool calls have their rows in the source). An export of the copy
// is the source's export but for the rows' "updated" (the forks'
// "created" was the time of the import).
func TestScheduleRoundTripOnEveryStore(t *testing.T) {
	f := newFixture(t)
	forkFinished(t, f)
	forkWhole(t, f)
	ids := []string{"answered", "finished", "waiting", "forked", "whole"}
	all := exportOf(t, f, ids...)
	require.Equal(t, 3, strings.Count(all, `{"type":"schedule","conversation":"finished",`))
	require.Equal(t, 2, strings.Count(all, `"forked_from":{"conversation_id":"finished"`))
	input := all + scheduleOnly(t, exportOf(t, f, "finished"), "later", "later-")
	src := parseExport(t, []byte(input))
	for _, tc := range []struct {
		name string
		open func(t *testing.T) journal.Store
	}{
		{"memjournal", func(t *testing.T) journal.Store {
			st := memjournal.New(memjournal.Options{})
			t.Cleanup(func() { _ = st.Close() })
			return st
		}},
		{"pebblejournal", func(t *testing.T) journal.Store { return memStore(t) }},
		{"pgjournal", func(t *testing.T) journal.Store {
			st, err := pgjournal.Open(ctxT(t), pgtest.NewDatabase(t), pgjournal.Options{})
			require.NoError(t, err)
			t.Cleanup(func() { _ = st.Close() })
			return st
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := tc.open(t)
			_, ok := st.(journal.ScheduleStore)
			require.True(t, ok)
			require.NoError(t, importInto(ctxT(t), st, strings.NewReader(input), importOptions{}))
			got := collectAll(t, st)
			for id, want := range src {
				require.Contains(t, got, id)
				requireImported(t, want, got[id])
			}
			require.Len(t, got["finished"].schedules, 3)
			require.Len(t, got["later"].schedules, 3)
			require.Equal(t, "later-finished-cron", got["later"].schedules[0].GetId())
			require.Equal(t, messages.ConversationStatus_CONVERSATION_STATUS_IDLE, got["later"].row.GetStatus())

			var b bytes.Buffer
			require.NoError(t, exportTo(ctxT(t), st, ids, &b, nil))
			require.Equal(t, withoutUpdated(all), withoutUpdated(b.String()))
		})
	}
}

// TestImportSchedulesPerConversation: schedule ids are per conversation.
// A schedule id the target already has (of another conversation) and the
// same schedule ids in two conversations of the input import, each
// conversation's schedules its own; a target that keeps no schedules
// refuses the whole input before the first write; a version 2 export (no
// schedules) still imports, alone or concatenated with a version 4 one; a
// source that keeps no schedules exports none.
func TestImportSchedulesPerConversation(t *testing.T) {
	f := newFixture(t)
	finished := exportOf(t, f, "finished")
	waiting := exportOf(t, f, "waiting")

	t.Run("a schedule id the target has", func(t *testing.T) {
		st := memStore(t)
		at := timestamppb.New(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
		mine := &messages.Schedule{Id: "finished-every", ConversationId: "existing", Next: at,
			Payload: &messages.UserMessage{Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: "mine"}}}}}
		ss := st.(journal.ScheduleStore)
		require.NoError(t, ss.PutSchedule(ctxT(t), mine))
		require.NoError(t, importInto(ctxT(t), st, strings.NewReader(waiting+finished), importOptions{}))
		got := collectAll(t, st)
		requireImported(t, parseExport(t, []byte(finished))["finished"], got["finished"])
		require.Len(t, got["finished"].schedules, 3)
		theirs, err := ss.ConversationSchedules(ctxT(t), "existing") // memStore's
		require.NoError(t, err)
		require.Len(t, theirs, 1)
		require.True(t, proto.Equal(mine, theirs[0]), "the target's schedule of that id is untouched")
	})

	t.Run("the same schedule ids in two conversations", func(t *testing.T) {
		input := finished + scheduleOnly(t, finished, "later", "")
		st := memStore(t)
		require.NoError(t, importInto(ctxT(t), st, strings.NewReader(input), importOptions{}))
		got := collectAll(t, st)
		src := parseExport(t, []byte(input))
		for _, id := range []string{"finished", "later"} {
			requireImported(t, src[id], got[id])
			require.Len(t, got[id].schedules, 3, id)
		}
		for i := range 3 {
			require.Equal(t, got["finished"].schedules[i].GetId(), got["later"].schedules[i].GetId())
			require.Equal(t, "later", got["later"].schedules[i].GetConversationId())
		}
	})

	t.Run("a target that keeps no schedules", func(t *testing.T) {
		inner := memStore(t)
		before := dump(t, inner)
		st := noScheduleStore{inner}
		err := importInto(ctxT(t), st, strings.NewReader(waiting+finished), importOptions{})
		require.ErrorIs(t, err, errors.ErrUnsupported)
		require.ErrorContains(t, err, "nothing imported: the input holds schedules and the target store")
		require.Equal(t, before, dump(t, inner))

		// A new directory's store is checked once created, before any write.
		err = importStream(ctxT(t), strings.NewReader(waiting+finished), func(create bool) (journal.Store, error) {
			if !create {
				return nil, errNoStore
			}
			return st, nil
		}, importOptions{})
		require.ErrorIs(t, err, errors.ErrUnsupported)
		require.ErrorContains(t, err, "nothing imported: the input holds schedules")
		require.Equal(t, before, dump(t, inner))

		// An input without schedules imports.
		require.NoError(t, importInto(ctxT(t), st, strings.NewReader(waiting), importOptions{}))
		requireImported(t, parseExport(t, []byte(waiting))["waiting"], collect(t, inner, "waiting"))
	})

	t.Run("a version 2 export imports", func(t *testing.T) {
		v2 := strings.Replace(strings.Replace(waiting, `"version":5`, `"version":2`, 1), `"schedules":0,`, ``, 1)
		require.NotEqual(t, waiting, v2)
		st := memStore(t)
		require.NoError(t, importInto(ctxT(t), st, strings.NewReader(v2+finished), importOptions{}))
		got := collectAll(t, st)
		requireImported(t, parseExport(t, []byte(waiting))["waiting"], got["waiting"])
		requireImported(t, parseExport(t, []byte(finished))["finished"], got["finished"])
		require.Len(t, got["finished"].schedules, 3)
	})

	t.Run("a source that keeps no schedules exports none", func(t *testing.T) {
		st := memStore(t)
		require.NoError(t, importInto(ctxT(t), st, strings.NewReader(finished), importOptions{}))
		var b bytes.Buffer
		require.NoError(t, exportTo(ctxT(t), noScheduleStore{st}, []string{"finished"}, &b, nil))
		require.NotContains(t, b.String(), `"type":"schedule"`)
		require.Contains(t, b.String(), `"deadlines":0,"schedules":0,"metadata":2}`)
	})
}

// TestExportHelpSaysWhatIsNotExported: the help of export and import
// names what an export does not carry.
func TestExportHelpSaysWhatIsNotExported(t *testing.T) {
	for _, cmd := range []string{"export", "import"} {
		r := cliRun(t, "", cmd, "--help")
		require.Contains(t, r.stdout+r.stderr, "Not exported: audit rows (model calls), tombstones of deleted\nconversations, and file checkpoints", cmd)
		require.Contains(t, r.stdout+r.stderr, `{"type":"schedule","conversation":ID,"record":<Schedule>}`, cmd)
	}
}

// PutSchedule (with the three methods below, which make failAt a
// journal.ScheduleStore) is a write that can fail.
func (s *failAt) PutSchedule(ctx context.Context, sc *messages.Schedule) error {
	return s.write(func() error { return s.Store.(journal.ScheduleStore).PutSchedule(ctx, sc) })
}

func (s *failAt) DeleteSchedule(ctx context.Context, conv, id string) error {
	return s.write(func() error { return s.Store.(journal.ScheduleStore).DeleteSchedule(ctx, conv, id) })
}

func (s *failAt) ConversationSchedules(ctx context.Context, conv string) ([]*messages.Schedule, error) {
	return s.Store.(journal.ScheduleStore).ConversationSchedules(ctx, conv)
}

func (s *failAt) ScheduleTimes(ctx context.Context, fn func(conv, id string, next time.Time) error) error {
	return s.Store.(journal.ScheduleStore).ScheduleTimes(ctx, fn)
}

// TestImportTwiceIsRefused: importing the same export again into the
// Store it went into is an error wrapping journal.ErrConflict that names
// the conversation, on memjournal, pebblejournal and pgjournal, and
// writes nothing: neither the conversations the target has nor one of
// the input it lacks.
func TestImportTwiceIsRefused(t *testing.T) {
	f := newFixture(t)
	once := exportOf(t, f, "finished", "waiting")
	twice := exportOf(t, f, "answered", "finished", "waiting")
	for _, tc := range []struct {
		name string
		open func(t *testing.T) journal.Store
	}{
		{"memjournal", func(t *testing.T) journal.Store {
			st := memjournal.New(memjournal.Options{})
			t.Cleanup(func() { _ = st.Close() })
			return st
		}},
		{"pebblejournal", func(t *testing.T) journal.Store { return memStore(t) }},
		{"pgjournal", func(t *testing.T) journal.Store {
			st, err := pgjournal.Open(ctxT(t), pgtest.NewDatabase(t), pgjournal.Options{})
			require.NoError(t, err)
			t.Cleanup(func() { _ = st.Close() })
			return st
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := tc.open(t)
			require.NoError(t, importInto(ctxT(t), st, strings.NewReader(once), importOptions{}))
			before := dump(t, st)
			for _, in := range []string{once, twice} {
				err := importInto(ctxT(t), st, strings.NewReader(in), importOptions{})
				require.ErrorIs(t, err, journal.ErrConflict)
				require.ErrorContains(t, err, "conversation finished already exists in the target")
				require.Equal(t, before, dump(t, st), "nothing written")
			}
			_, err := st.Conversation(ctxT(t), "answered")
			require.True(t, noConversation(err), "answered, which the target lacked, was not imported either: %v", err)
		})
	}
}
