package main

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/journal/pgjournal/pgtest"
)

// TestRunOnPostgresSmall: README "On PostgreSQL" says `cmd/loadgen
// --postgres DSN` works on such a database: a brief run there measures
// turns on the PostgreSQL journal and says so in its report.
func TestRunOnPostgresSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the load generator for a few seconds")
	}
	srv, err := pgtest.Start()
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	dir := t.TempDir()
	cfg, err := parseFlags([]string{"--postgres", srv.NewDatabase(t), "--conversations", "4", "--duration", "500ms", "--warmup", "100ms",
		"--min-measured", "3", "--kill-every", "0", "--baseline=false", "--dir", dir}, nil)
	require.NoError(t, err)
	rep, err := run(t.Context(), cfg)
	require.NoError(t, err)
	require.True(t, rep.Config.OnPostgres, "the report says the run was on PostgreSQL")
	require.GreaterOrEqual(t, rep.Runtime.Turns, uint64(3))
	require.Positive(t, rep.Runtime.SendAck.Count)
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, ents, "nothing written to the Pebble directory: the journal was PostgreSQL")
}
