package pgjournal

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/pgjournal/pgtest"
	"github.com/lazarusrt/lazarus/messages"
)

// silentTimeout is the Options.Timeout of the Stores the server stops
// answering: long enough for their calls before that on a loaded machine
// (300 ms failed a migration in a CI run), short enough to wait out.
const silentTimeout = 3 * time.Second

// silentStore opens a Store on dsn of one connection, through a
// commitDropper; goSilent makes that connection's server stop answering:
// the next statement sent on it runs on the server, and its reply never
// comes.
func silentStore(t *testing.T, dsn string, opts Options) (s *Store, goSilent func()) {
	t.Helper()
	// Migrated first, with the default timeout: the Store under test only
	// checks the schema's version when it opens.
	m, err := Open(t.Context(), dsn, Options{})
	require.NoError(t, err)
	require.NoError(t, m.Close())
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	proxy := newCommitDropper(t, u.Host)
	u.Host = proxy.l.Addr().String()
	q := u.Query()
	q.Set("pool_max_conns", "1")
	u.RawQuery = q.Encode()
	s = open(t, u.String(), opts)
	return s, func() {
		proxy.raw, proxy.hold = []byte("lz-go-silent"), true
		proxy.armed.Store(true)
		var got string
		require.NoError(t, s.pool.QueryRow(t.Context(), "SELECT 'lz-go-silent'").Scan(&got))
		<-proxy.dropped
	}
}

// TestTimeoutOfAReadIsUnavailable: a read that Options.Timeout ends, the
// server having stopped answering, is journal.ErrUnavailable (wrapping
// context.DeadlineExceeded), as Open's is. It was a bare
// context.DeadlineExceeded, no journal sentinel.
func TestTimeoutOfAReadIsUnavailable(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	s, goSilent := silentStore(t, dsn, Options{Timeout: silentTimeout})
	ctx := t.Context()
	_, err := s.Append(ctx, &messages.AppendRequest{ConversationId: "c", Events: []*messages.Event{userEvent("hi")}})
	require.NoError(t, err)

	goSilent()
	_, err = s.LastSeq(ctx, "c")
	require.ErrorIs(t, err, journal.ErrUnavailable)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NotErrorIs(t, err, journal.ErrUnknownOutcome)
	require.ErrorContains(t, err, "Options.Timeout")

	last, err := s.LastSeq(ctx, "c")
	require.NoError(t, err, "the pool reconnects")
	require.EqualValues(t, 1, last)
}

// TestCallerDeadlineStaysTheCallers: a read that the caller's ctx ends
// before Options.Timeout, the server having stopped answering, returns
// that context's error and no journal sentinel.
func TestCallerDeadlineStaysTheCallers(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	s, goSilent := silentStore(t, dsn, Options{Timeout: time.Minute})
	goSilent()
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	_, err := s.LastSeq(ctx, "c")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NotErrorIs(t, err, journal.ErrUnavailable)
	require.NotErrorIs(t, err, journal.ErrUnknownOutcome)
}

// TestTimeoutOfAWriteBeforeCommitIsUnavailable: a write that
// Options.Timeout ends before its COMMIT was sent (its transaction's
// first statement unanswered: a write of its own transaction, PutMetadata,
// and an append, which reads its heads first) is journal.ErrUnavailable,
// and nothing is written. Both were a bare context.DeadlineExceeded.
func TestTimeoutOfAWriteBeforeCommitIsUnavailable(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	ctx := t.Context()
	writes := map[string]func(*Store) error{
		"PutMetadata": func(s *Store) error { return s.PutMetadata(ctx, "c", map[string]string{"k": "v"}) },
		"Append": func(s *Store) error {
			_, err := s.Append(ctx, &messages.AppendRequest{ConversationId: "c", ExpectedLast: 1, Events: []*messages.Event{userEvent("again")}})
			return err
		},
	}
	_, err := open(t, dsn, Options{}).Append(ctx, &messages.AppendRequest{ConversationId: "c", Events: []*messages.Event{userEvent("hi")}})
	require.NoError(t, err)
	for name, write := range writes {
		s, goSilent := silentStore(t, dsn, Options{Timeout: silentTimeout})
		goSilent()
		err := write(s)
		require.ErrorIs(t, err, journal.ErrUnavailable, name)
		require.ErrorIs(t, err, context.DeadlineExceeded, name)
		require.NotErrorIs(t, err, journal.ErrUnknownOutcome, name)
	}

	s := open(t, dsn, Options{})
	md, err := s.Metadata(ctx, "c")
	require.NoError(t, err)
	require.Empty(t, md, "PutMetadata wrote nothing")
	last, err := s.LastSeq(ctx, "c")
	require.NoError(t, err)
	require.EqualValues(t, 1, last, "Append wrote nothing")
}

// TestTimeoutOfACommittingWriteIsUnknownOutcome: a write of one statement
// that commits on its own (CancelDeadline), sent to a server that then
// stops answering, ended by Options.Timeout, is journal.ErrUnknownOutcome,
// not ErrUnavailable: the statement ran on the server.
func TestTimeoutOfACommittingWriteIsUnknownOutcome(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	s, goSilent := silentStore(t, dsn, Options{Timeout: silentTimeout})
	ctx := t.Context()
	_, err := s.Append(ctx, &messages.AppendRequest{ConversationId: "c", Events: []*messages.Event{userEvent("hello")},
		Schedule: []*messages.Deadline{
			{ConversationId: "c", ToolCallId: "tc0", At: timestamppb.New(time.Unix(100, 0))},
			{ConversationId: "c", ToolCallId: "tc", At: timestamppb.New(time.Unix(100, 0))},
		}})
	require.NoError(t, err)
	// The statement prepared on the connection: the next one is sent whole
	// at once, and runs, though its reply never comes.
	require.NoError(t, s.CancelDeadline(ctx, "c", "tc0"))

	goSilent()
	err = s.CancelDeadline(ctx, "c", "tc")
	require.ErrorIs(t, err, journal.ErrUnknownOutcome)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NotErrorIs(t, err, journal.ErrUnavailable)
	require.Eventually(t, func() bool {
		n := 0
		err := s.Deadlines(ctx, time.Time{}, func(*messages.Deadline) error { n++; return nil })
		return err == nil && n == 0
	}, 10*time.Second, 20*time.Millisecond, "the cancel ran")
}
