package main

import (
	"regexp"
	"testing"

	"github.com/lazarusrt/lazarus/journal/pgjournal/pgtest"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) {
	runChild() // a re-executed test binary: serve, or an MCP server
	pgtest.Main(m)
}

// TestPostgresStore: --postgres works the commands on a PostgreSQL store
// as --dir does on Pebble: a Pebble store exported and imported there
// lists the same conversations, and its pending call resolves.
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

	r := cliRun(t, "", "resolve", f.waitingCall, "--postgres", dsn, "--result", "true")
	requireOK(t, r)
	r = cliRun(t, "", "resolve", f.waitingCall, "--postgres", dsn, "--result", "true")
	require.Equal(t, exitStale, r.code, r.stderr)

	r = cliRun(t, "", "conversations", "--postgres", dsn, "--dir", f.dir)
	require.Equal(t, exitUsage, r.code, r.stderr)
}
