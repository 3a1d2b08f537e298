package pgjournal

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/lazarusrt/lazarus/actors/actorstest"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/pgjournal/pgtest"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func userEvent(text string) *messages.Event {
	return &messages.Event{Body: &messages.Event_UserMsg{UserMsg: &messages.UserMessage{
		Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: text}}}}}}
}

func textOf(ev *messages.Event) string {
	return ev.GetUserMsg().GetContent()[0].GetText()
}

func open(t *testing.T, dsn string, opts Options) *Store {
	t.Helper()
	s, err := Open(t.Context(), dsn, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestSchemaTooNew: a database migrated by newer code is refused.
func TestSchemaTooNew(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	s := open(t, dsn, Options{})
	require.NoError(t, s.Close())

	conn, err := pgx.Connect(t.Context(), dsn)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	_, err = conn.Exec(t.Context(), "INSERT INTO lz_schema (version) VALUES ($1)", SchemaVersion()+1)
	require.NoError(t, err)

	_, err = Open(t.Context(), dsn, Options{})
	require.ErrorIs(t, err, ErrSchemaTooNew)
}

// TestConcurrentOpenMigratesOnce: stores opening at once on an empty
// database all succeed, and each migration is applied once.
func TestConcurrentOpenMigratesOnce(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	const n = 4
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := Open(context.Background(), dsn, Options{})
			errs[i] = err
			if err == nil {
				_ = s.Close()
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	conn, err := pgx.Connect(t.Context(), dsn)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var rows, maxV int
	require.NoError(t, conn.QueryRow(t.Context(), "SELECT count(*), max(version) FROM lz_schema").Scan(&rows, &maxV))
	assert.Equal(t, SchemaVersion(), rows)
	assert.Equal(t, SchemaVersion(), maxV)
}

// TestBadDSN: a DSN that does not parse is ErrInvalid; a server that does
// not answer is ErrUnavailable.
func TestBadDSN(t *testing.T) {
	_, err := Open(t.Context(), "postgres://%zz", Options{})
	require.ErrorIs(t, err, journal.ErrInvalid)
	_, err = Open(t.Context(), "postgres://postgres@127.0.0.1:1/x?sslmode=disable&connect_timeout=5", Options{})
	require.ErrorIs(t, err, journal.ErrUnavailable)
}

// TestServerRestart: while the server is down, calls fail with
// ErrUnavailable (never an acknowledgement) and at once, without a dial,
// except for one reconnection attempt per backoff, the backoff doubling up
// to its maximum; once the server is back, the next attempt reconnects and
// every acknowledged write is there. The connection attempts are counted by
// the pool's BeforeConnect hook; the backoff runs on a manual clock.
func TestServerRestart(t *testing.T) {
	srv, err := pgtest.Start()
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	dsn := srv.NewDatabase(t)
	cfg, err := pgxpool.ParseConfig(dsn)
	require.NoError(t, err)
	var dials atomic.Int64
	cfg.BeforeConnect = func(context.Context, *pgx.ConnConfig) error {
		dials.Add(1) // every connection the pool tries to make
		return nil
	}
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	clock := actorstest.NewManualClock(time.Unix(1_000_000, 0))
	const first, most = 100 * time.Millisecond, 400 * time.Millisecond
	s, err := OpenPool(t.Context(), pool, Options{Timeout: 10 * time.Second, ReconnectBackoff: first, MaxReconnectBackoff: most, Clock: clock})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	ctx := t.Context()

	res, err := s.Append(ctx, &messages.AppendRequest{ConversationId: "c", Events: []*messages.Event{userEvent("before")}})
	require.NoError(t, err)
	require.EqualValues(t, 1, res.LastSeq)

	srv.StopServer()
	_, err = s.Append(ctx, &messages.AppendRequest{ConversationId: "c", ExpectedLast: 1, Events: []*messages.Event{userEvent("down")}})
	require.ErrorIs(t, err, journal.ErrUnavailable)
	// The pool's connections are dead; the call that finds no live one
	// dials, fails, and opens the breaker.
	for i, start := 0, dials.Load(); dials.Load() == start; i++ {
		require.Less(t, i, 2*DefaultMaxConns, "a call dials once the dead connections are gone")
		_, err := s.LastSeq(ctx, "c")
		require.ErrorIs(t, err, journal.ErrUnavailable)
		require.LessOrEqual(t, dials.Load(), start+1, "one dial opens the breaker")
	}
	// failFast makes n calls of several kinds and checks that each fails
	// with ErrUnavailable and that none dialed.
	failFast := func(n int, why string) {
		t.Helper()
		before := dials.Load()
		for range n {
			_, err := s.LastSeq(ctx, "c")
			require.ErrorIs(t, err, journal.ErrUnavailable, why)
			res := s.AppendBatch(ctx, []*messages.AppendRequest{{ConversationId: "c", ExpectedLast: 1, Events: []*messages.Event{userEvent("down")}}})
			require.ErrorIs(t, res[0].Err, journal.ErrUnavailable, why)
		}
		require.Equal(t, before, dials.Load(), "no dial: %s", why)
	}
	// attempt advances the clock by d, then checks that exactly one call
	// (the reconnection attempt) dials, and that it fails.
	attempt := func(d time.Duration) {
		t.Helper()
		clock.Advance(d)
		before := dials.Load()
		_, err := s.LastSeq(ctx, "c")
		require.ErrorIs(t, err, journal.ErrUnavailable)
		require.Greater(t, dials.Load(), before, "the attempt after %v dials", d)
		failFast(20, "right after a failed attempt")
	}
	failFast(50, "the first backoff")
	clock.Advance(first - time.Millisecond)
	failFast(10, "before the first backoff has passed")
	attempt(time.Millisecond) // at 100ms; the backoff is now 200ms
	clock.Advance(first)
	failFast(10, "the backoff doubled")
	attempt(first) // at 200ms: 400ms
	attempt(most)  // at most: stays at most
	attempt(most)  //
	clock.Advance(most / 2)
	failFast(10, "the backoff stays at its maximum")
	attempt(most / 2)

	require.NoError(t, srv.Resume())
	failFast(10, "the server is back, but the backoff has not passed")
	clock.Advance(most)
	last, err := s.LastSeq(ctx, "c")
	require.NoError(t, err, "the attempt after the backoff reconnects")
	require.EqualValues(t, 1, last, "the failed appends wrote nothing")
	res, err = s.Append(ctx, &messages.AppendRequest{ConversationId: "c", ExpectedLast: 1, Events: []*messages.Event{userEvent("after")}})
	require.NoError(t, err)
	require.EqualValues(t, 2, res.LastSeq)
	evs, err := s.Events(ctx, "c", journal.EventQuery{})
	require.NoError(t, err)
	require.Len(t, evs, 2)
	assert.Equal(t, "before", textOf(evs[0]))
	assert.Equal(t, "after", textOf(evs[1]))
}

// TestServerRestartDefaults: a Store opened with the zero Options reconnects
// on its own once the server is back (with the system clock: within
// DefaultMaxReconnectBackoff plus a dial).
func TestServerRestartDefaults(t *testing.T) {
	srv, err := pgtest.Start()
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	s := open(t, srv.NewDatabase(t), Options{})
	ctx := t.Context()
	_, err = s.Append(ctx, &messages.AppendRequest{ConversationId: "c", Events: []*messages.Event{userEvent("before")}})
	require.NoError(t, err)
	srv.StopServer()
	_, err = s.LastSeq(ctx, "c")
	require.ErrorIs(t, err, journal.ErrUnavailable)
	require.NoError(t, srv.Resume())
	require.Eventually(t, func() bool {
		_, err := s.LastSeq(ctx, "c")
		return err == nil
	}, 30*time.Second, 10*time.Millisecond, "the store reconnects")
	res, err := s.Append(ctx, &messages.AppendRequest{ConversationId: "c", ExpectedLast: 1, Events: []*messages.Event{userEvent("after")}})
	require.NoError(t, err)
	require.EqualValues(t, 2, res.LastSeq)
}

// TestMigrationBuildsActiveIndex: a database at schema version 1 (no
// status column) gets the index of ACTIVE conversations from the status
// inside each row's protobuf bytes, whatever else the row holds (settings,
// fsm_state, times), and deleted conversations stay out of it.
func TestMigrationBuildsActiveIndex(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	s := open(t, dsn, Options{})
	ctx := t.Context()
	var want []string
	for i := range 40 {
		id := fmt.Sprintf("c%02d\x00é", i)
		_, err := s.Append(ctx, &messages.AppendRequest{ConversationId: id, Events: []*messages.Event{userEvent("x")},
			FsmState: &messages.FSMState{LastSeq: 1, State: messages.AgentState_AGENT_STATE_IDLE}})
		require.NoError(t, err)
		require.NoError(t, s.PutConversation(ctx, journal.ConversationUpdate{ID: id, Settings: map[string]string{"model": strings.Repeat("m", i*10)},
			Status: messages.ConversationStatus(1 + i%4)}))
		if i%4 == 0 {
			want = append(want, id)
		}
	}
	require.NoError(t, s.DeleteConversation(ctx, want[0]))
	want = want[1:]
	require.NoError(t, s.Close())

	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, `DROP INDEX lz_conversations_active; ALTER TABLE lz_conversations DROP COLUMN status; DELETE FROM lz_schema WHERE version >= 2`)
	require.NoError(t, err)

	s = open(t, dsn, Options{})
	ids, next, err := s.ListActiveConversations(ctx, "", 1000)
	require.NoError(t, err)
	require.Empty(t, next)
	require.Equal(t, want, ids)
	var indexed bool
	require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) = 1 FROM pg_indexes WHERE indexname = 'lz_conversations_active'").Scan(&indexed))
	require.True(t, indexed)
}

// TestWriteSettings: schema version 3 leaves room for in-page updates of
// conversation rows and compresses large records with lz4 (the test
// server is built with it).
func TestWriteSettings(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	open(t, dsn, Options{})
	conn, err := pgx.Connect(t.Context(), dsn)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var opts []string
	require.NoError(t, conn.QueryRow(t.Context(), "SELECT reloptions FROM pg_class WHERE relname = 'lz_conversations'").Scan(&opts))
	assert.Contains(t, opts, "fillfactor=50")
	rows, err := conn.Query(t.Context(), `SELECT c.relname || '.' || a.attname, a.attcompression::text FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
		WHERE c.relname IN ('lz_events', 'lz_tool_calls', 'lz_summaries') AND a.attname = 'data' ORDER BY 1`)
	require.NoError(t, err)
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
		var col, method string
		err := r.Scan(&col, &method)
		return col + "=" + method, err
	})
	require.NoError(t, err)
	assert.Equal(t, []string{"lz_events.data=l", "lz_summaries.data=l", "lz_tool_calls.data=l"}, got)
}

// TestAuditOffHidesEarlierRows: as in every adapter (journal.Audit), a store
// opened without Options.Audit neither lists nor collects the audit rows a
// store with audit on wrote to the same database; they are there again once
// audit is back on.
func TestAuditOffHidesEarlierRows(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	ctx := t.Context()
	on := open(t, dsn, Options{Audit: true})
	_, err := on.Append(ctx, &messages.AppendRequest{ConversationId: "c", Events: []*messages.Event{userEvent("hi")}})
	require.NoError(t, err)
	require.NoError(t, on.PutModelCall(ctx, &messages.ModelCall{ConversationId: "c", TurnRef: 1, Created: timestamppb.New(time.Unix(0, 0))}))

	off := open(t, dsn, Options{})
	calls, err := off.ModelCalls(ctx, "c")
	require.NoError(t, err)
	require.Empty(t, calls, "ModelCalls returns nothing with audit off")
	n, err := off.GCModelCalls(ctx, "c", time.Unix(1000, 0))
	require.NoError(t, err)
	require.Zero(t, n, "GCModelCalls removes nothing with audit off")

	calls, err = on.ModelCalls(ctx, "c")
	require.NoError(t, err)
	require.Len(t, calls, 1, "the row is still there")
}

// TestMigrationSchedulesPerConversation: a database at schema version 6
// (schedule ids unique across the store: lz_schedules keyed by id) keeps
// its schedules through the migration to version 7, after which another
// conversation may hold a schedule of an id already taken, each fired and
// listed as its own, and the time index orders ties by id then
// conversation.
func TestMigrationSchedulesPerConversation(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	ctx := t.Context()
	s := open(t, dsn, Options{})
	sched := func(conv, id string, sec int64) *messages.Schedule {
		return &messages.Schedule{Id: id, ConversationId: conv, Next: timestamppb.New(time.Unix(sec, 0)),
			Payload: &messages.UserMessage{Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: "wake " + id}}}}}
	}
	for _, conv := range []string{"c", "d\x00é"} {
		_, err := s.Append(ctx, &messages.AppendRequest{ConversationId: conv, Events: []*messages.Event{userEvent("hi")}})
		require.NoError(t, err)
	}
	require.NoError(t, s.PutSchedule(ctx, sched("c", "daily", 100)))
	require.NoError(t, s.PutSchedule(ctx, sched("c", "other", 200)))
	require.NoError(t, s.Close())

	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	// The schema of version 6, as its migration left it.
	_, err = conn.Exec(ctx, `ALTER TABLE lz_schedules DROP CONSTRAINT lz_schedules_pkey;
		ALTER TABLE lz_schedules ADD PRIMARY KEY (id);
		CREATE INDEX lz_schedules_conv ON lz_schedules (conv, id);
		DROP INDEX lz_schedules_next;
		CREATE INDEX lz_schedules_next ON lz_schedules (next_s, next_n, id) INCLUDE (conv);
		DELETE FROM lz_schema WHERE version >= 7`)
	require.NoError(t, err)

	s = open(t, dsn, Options{})
	require.NoError(t, s.PutSchedule(ctx, sched("d\x00é", "daily", 100)), "the id another conversation holds")
	for conv, want := range map[string][]string{"c": {"daily", "other"}, "d\x00é": {"daily"}} {
		got, err := s.ConversationSchedules(ctx, conv)
		require.NoError(t, err)
		var ids []string
		for _, sc := range got {
			ids = append(ids, sc.GetId())
		}
		require.Equal(t, want, ids, conv)
	}
	var times []string
	require.NoError(t, s.ScheduleTimes(ctx, func(conv, id string, _ time.Time) error {
		times = append(times, conv+"/"+id)
		return nil
	}))
	require.Equal(t, []string{"c/daily", "d\x00é/daily", "c/other"}, times)
	_, err = s.Append(ctx, &messages.AppendRequest{ConversationId: "d\x00é", ExpectedLast: 1, Events: []*messages.Event{userEvent("wake")},
		ScheduleFire: &messages.ScheduleFire{ScheduleId: "daily", Occurrence: timestamppb.New(time.Unix(100, 0))}})
	require.NoError(t, err)
	got, err := s.ConversationSchedules(ctx, "c")
	require.NoError(t, err)
	require.Len(t, got, 2, "c's daily stays when d's fires for the last time")
	require.NoError(t, s.DeleteSchedule(ctx, "c", "daily"))
	require.ErrorIs(t, s.DeleteSchedule(ctx, "d\x00é", "daily"), journal.ErrNotFound)

	var key string
	require.NoError(t, conn.QueryRow(ctx, `SELECT pg_get_indexdef(indexrelid) FROM pg_index WHERE indrelid = 'lz_schedules'::regclass AND indisprimary`).Scan(&key))
	require.Contains(t, key, "(conv, id)")
	var convIndex bool
	require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) > 0 FROM pg_indexes WHERE indexname = 'lz_schedules_conv'").Scan(&convIndex))
	require.False(t, convIndex, "the primary key serves the listing")
}

// TestDeleteWithAuditOffRemovesAuditRows: DeleteConversation removes every
// record of the conversation, the audit rows a store with audit on wrote
// included, even when the store that deletes has audit off.
func TestDeleteWithAuditOffRemovesAuditRows(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	ctx := t.Context()
	on := open(t, dsn, Options{Audit: true})
	_, err := on.Append(ctx, &messages.AppendRequest{ConversationId: "c", Events: []*messages.Event{userEvent("hi")}})
	require.NoError(t, err)
	require.NoError(t, on.PutModelCall(ctx, &messages.ModelCall{ConversationId: "c", TurnRef: 1, Created: timestamppb.New(time.Unix(0, 0))}))

	off := open(t, dsn, Options{})
	require.NoError(t, off.DeleteConversation(ctx, "c"))

	calls, err := on.ModelCalls(ctx, "c")
	require.NoError(t, err)
	require.Empty(t, calls, "the deleted conversation's audit rows went with it")
}
