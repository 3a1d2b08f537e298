package pgjournal

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/pgjournal/pgtest"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
// ErrUnavailable (never an acknowledgement); once it is back, the pool
// reconnects and every acknowledged write is there.
func TestServerRestart(t *testing.T) {
	srv, err := pgtest.Start()
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	dsn := srv.NewDatabase(t)
	s := open(t, dsn, Options{Timeout: 10 * time.Second})
	ctx := t.Context()

	res, err := s.Append(ctx, &messages.AppendRequest{ConversationId: "c", Events: []*messages.Event{userEvent("before")}})
	require.NoError(t, err)
	require.EqualValues(t, 1, res.LastSeq)

	srv.StopServer()
	_, err = s.Append(ctx, &messages.AppendRequest{ConversationId: "c", ExpectedLast: 1, Events: []*messages.Event{userEvent("down")}})
	require.ErrorIs(t, err, journal.ErrUnavailable)
	_, err = s.LastSeq(ctx, "c")
	require.ErrorIs(t, err, journal.ErrUnavailable)

	require.NoError(t, srv.Resume())
	require.Eventually(t, func() bool {
		_, err := s.LastSeq(ctx, "c")
		return err == nil
	}, 30*time.Second, 50*time.Millisecond, "the pool reconnects")
	last, err := s.LastSeq(ctx, "c")
	require.NoError(t, err)
	require.EqualValues(t, 1, last, "the failed append wrote nothing")
	res, err = s.Append(ctx, &messages.AppendRequest{ConversationId: "c", ExpectedLast: 1, Events: []*messages.Event{userEvent("after")}})
	require.NoError(t, err)
	require.EqualValues(t, 2, res.LastSeq)
	evs, err := s.Events(ctx, "c", journal.EventQuery{})
	require.NoError(t, err)
	require.Len(t, evs, 2)
	assert.Equal(t, "before", textOf(evs[0]))
	assert.Equal(t, "after", textOf(evs[1]))
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
