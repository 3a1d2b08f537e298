package main

import (
	"bytes"
	"os"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/journal/pgjournal/pgtest"
)

// TestRunOnPostgresSmall: README "On PostgreSQL" says `cmd/loadgen
// --postgres DSN` works on such a database: a brief run there measures
// turns on the PostgreSQL journal and says so in its report, and on stderr
// says the phase runs there, in a schema of that database, not in the
// directory (which then only names the schema).
func TestRunOnPostgresSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the load generator for a few seconds")
	}
	srv, err := pgtest.Start()
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	dir := t.TempDir()
	dsn := srv.NewDatabase(t)
	pcfg, err := pgxpool.ParseConfig(dsn)
	require.NoError(t, err)
	var stderr bytes.Buffer
	cfg, err := parseFlags([]string{"--postgres", dsn, "--conversations", "4", "--duration", "500ms", "--warmup", "100ms",
		"--min-measured", "3", "--kill-every", "0", "--baseline=false", "--dir", dir}, &stderr)
	require.NoError(t, err)
	rep, err := run(t.Context(), cfg)
	require.NoError(t, err)
	require.True(t, rep.Config.OnPostgres, "the report says the run was on PostgreSQL")
	require.GreaterOrEqual(t, rep.Runtime.Turns, uint64(3))
	require.Positive(t, rep.Runtime.SendAck.Count)
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, ents, "nothing written to the Pebble directory: the journal was PostgreSQL")
	require.Contains(t, stderr.String(), "loadgen: runtime phase: 4 conversations for 500ms on PostgreSQL, database "+pcfg.ConnConfig.Database+" on ")
	require.Contains(t, stderr.String(), "in a fresh schema lazarus_loadgen_runtime_*, dropped at the end\n")
	require.NotContains(t, stderr.String(), dir, "the directory holds nothing of the run")
}
