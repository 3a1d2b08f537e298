package main

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/lazarusrt/lazarus/journal/pgjournal"
	"github.com/lazarusrt/lazarus/journal/pgjournal/pgtest"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) {
	runChild() // a re-executed test binary: serve, or an MCP server
	pgtest.Main(m)
}

// TestPostgresStore: --postgres works the commands on a PostgreSQL store
// as --dir does on Pebble: a Pebble store exported and imported there
// lists the same conversations and schedules, exports the same file but
// for the rows' "updated", and its pending call resolves.
func TestPostgresStore(t *testing.T) {
	f := newFixture(t)
	dsn := pgtest.NewDatabase(t)
	exported := cliRun(t, "", "export", "--all", "--dir", f.dir)
	requireOK(t, exported)
	requireOK(t, cliRun(t, exported.stdout, "import", "--postgres", dsn))

	want := cliRun(t, "", "conversations", "--dir", f.dir)
	requireOK(t, want)
	got := cliRun(t, "", "--postgres", dsn, "conversations")
	requireOK(t, got)
	// The import writes the rows anew: the UPDATED column differs.
	stamp := regexp.MustCompile(`\d{4}-\d\d-\d\dT\S+`)
	require.Equal(t, stamp.ReplaceAllString(want.stdout, "T"), stamp.ReplaceAllString(got.stdout, "T"))

	again := cliRun(t, "", "export", "--all", "--postgres", dsn)
	requireOK(t, again)
	require.Equal(t, withoutUpdated(exported.stdout), withoutUpdated(again.stdout))
	require.Equal(t, 3, strings.Count(again.stdout, `{"type":"schedule"`))
	wantSch := cliRun(t, "", "schedules", "finished", "--dir", f.dir)
	requireOK(t, wantSch)
	gotSch := cliRun(t, "", "schedules", "finished", "--postgres", dsn)
	requireOK(t, gotSch)
	require.Equal(t, wantSch.stdout, gotSch.stdout)
	require.Contains(t, gotSch.stdout, "finished-every")

	r := cliRun(t, "", "resolve", f.waitingCall, "--postgres", dsn, "--result", "true")
	requireOK(t, r)
	r = cliRun(t, "", "resolve", f.waitingCall, "--postgres", dsn, "--result", "true")
	require.Equal(t, exitStale, r.code, r.stderr)

	r = cliRun(t, "", "conversations", "--postgres", dsn, "--dir", f.dir)
	require.Equal(t, exitUsage, r.code, r.stderr)
}

// TestServePostgres: 'lazarus serve --postgres' runs a node on a
// PostgreSQL store; a message sent through it is there after SIGTERM, as
// the offline commands read it.
func TestServePostgres(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	p := startServe(t, testTokens, "--postgres", dsn)
	require.NotContains(t, p.stderr.String(), dsn, "the DSN (which may hold a password) is not printed")
	ctx := ctxT(t)
	r := cliCtx(ctx, "send", "hello", "--server", p.url, "--token", "alice-token")
	requireOK(t, r)
	conv := sentLine.FindStringSubmatch(r.stdout)[2]
	require.Equal(t, exitOK, p.stop(t), p.stderr.String())

	r = cliRun(t, "", "show", conv, "--postgres", dsn)
	requireOK(t, r)
	require.Contains(t, r.stdout, `user_msg       "hello" from alice`)
}

// TestTailPostgres: tail --postgres polls the database as it polls a
// directory, and follows a conversation while another process holds the
// store open and writes it (no lock to wait on, as its help says).
func TestTailPostgres(t *testing.T) {
	require.Contains(t, cliRun(t, "", "tail", "--help").stdout, "With --postgres it polls the database the same way")
	f := newFixture(t)
	dsn := pgtest.NewDatabase(t)
	exported := cliRun(t, "", "export", "--all", "--dir", f.dir)
	requireOK(t, exported)
	requireOK(t, cliRun(t, exported.stdout, "import", "--postgres", dsn))
	st, err := pgjournal.Open(ctxT(t), dsn, pgjournal.Options{})
	require.NoError(t, err)
	defer func() { require.NoError(t, st.Close()) }()

	stdout, stderr, exit := startTail(t, "tail", "waiting", "--postgres", dsn, "--interval", "20ms", "--grace", "0s", "--max", "9")
	require.Eventually(t, func() bool { return strings.Contains(stdout.String(), "suspension") }, wait, time.Millisecond)
	require.Len(t, outLines(stdout.String()), 7, "the backlog: the whole short log")
	_, err = st.Append(ctxT(t), &messages.AppendRequest{ConversationId: "waiting", ExpectedLast: 7,
		Events: []*messages.Event{userMsg("still there?"), userMsg("hello?")}})
	require.NoError(t, err)
	require.Equal(t, exitOK, exit(), stderr.String())
	lines := outLines(stdout.String())
	require.Len(t, lines, 9)
	require.Regexp(t, `^\s+9  .*user_msg\s+"hello\?"$`, lines[8])
}
