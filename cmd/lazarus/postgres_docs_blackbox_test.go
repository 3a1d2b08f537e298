package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/journal/pgjournal/pgtest"
)

// TestDocsPostgresFromTheEnvironment: $LAZARUS_POSTGRES gives the commands
// their PostgreSQL store when no --dir is given ('lazarus --help'); a
// --dir given wins over it. 'lazarus serve' takes it too.
func TestDocsPostgresFromTheEnvironment(t *testing.T) {
	f := newFixture(t)
	dsn := pgtest.NewDatabase(t)
	t.Setenv(envDir, "")
	t.Setenv(envPostgres, "")
	exported := cliRun(t, "", "export", "finished", "--dir", f.dir)
	requireOK(t, exported)
	requireOK(t, cliRun(t, exported.stdout, "import", "--postgres", dsn))

	t.Setenv(envPostgres, dsn)
	r := cliRun(t, "", "conversations")
	requireOK(t, r)
	require.Contains(t, r.stdout, "finished")
	require.NotContains(t, r.stdout, "waiting", "the database's conversations, not the directory's")
	r = cliRun(t, "", "show", "finished")
	requireOK(t, r)
	require.Contains(t, r.stdout, "Order 42 is on its way.")

	r = cliRun(t, "", "conversations", "--dir", f.dir)
	requireOK(t, r)
	require.Contains(t, r.stdout, "waiting", "--dir wins over $LAZARUS_POSTGRES")

	// serve too: a node started with neither --dir nor --postgres runs on
	// the database of $LAZARUS_POSTGRES.
	p := startServe(t, testTokens)
	require.Contains(t, p.stderr.String(), "lazarus serve: opening the store: postgresql")
	require.NotContains(t, p.stderr.String(), dsn)
	r = cliCtx(ctxT(t), "send", "from the node", "--server", p.url, "--token", "alice-token")
	requireOK(t, r)
	conv := sentLine.FindStringSubmatch(r.stdout)[2]
	require.Equal(t, exitOK, p.stop(t), p.stderr.String())
	r = cliRun(t, "", "show", conv)
	requireOK(t, r)
	require.Contains(t, r.stdout, `"from the node"`)
}
