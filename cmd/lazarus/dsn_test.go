package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/journal"
)

// malformedDSNs do not parse (pgxpool.ParseConfig fails); each holds the
// password s3cret, which no message may show.
var malformedDSNs = []string{
	"postgres://u:s3cret@db.invalid:badport/app",
	"host=db.invalid password=s3cret port=notaport",
	"postgres://u:s3cret@db.invalid/app?pool_max_conns=many",
}

// dsnCommands are a command line of every command that takes --postgres,
// complete but for the store.
var dsnCommands = [][]string{
	{"conversations"}, {"show", "c1"}, {"tail", "c1", "--max", "1"}, {"pending"},
	{"resolve", "call_1", "--result", "true"}, {"reschedule", "call_1", "--in", "1h"},
	{"schedules", "c1"}, {"export", "c1"}, {"import"}, {"delete", "c1", "--yes"},
	{"gc-audit", "--older-than", "1h"}, {"stats"},
	{"serve", "--listen", "127.0.0.1:0"},
}

// TestMalformedDSNIsAUsageError: a --postgres (before or after the
// command) or $LAZARUS_POSTGRES that is not a connection string at all is
// a usage error (exit 2) of every command that takes it, as a malformed
// --server URL is, with a message naming where it came from and not
// showing the password; nothing is opened or created.
func TestMalformedDSNIsAUsageError(t *testing.T) {
	for _, cmd := range dsnCommands {
		for _, dsn := range malformedDSNs {
			for _, where := range []string{"--postgres", "top-level --postgres", "$" + envPostgres} {
				name := cmd[0] + "/" + where
				t.Run(name, func(t *testing.T) {
					dir := filepath.Join(t.TempDir(), "store")
					var out, errb lockedBuffer
					c := newCLI(strings.NewReader(""), &out, &errb)
					env := map[string]string{}
					args := cmd
					switch where {
					case "--postgres":
						args = append(append([]string{}, cmd...), "--postgres", dsn)
					case "top-level --postgres":
						args = append([]string{"--postgres", dsn}, cmd...)
					default:
						env[envPostgres] = dsn
						env[envDir] = dir // ignored: $LAZARUS_POSTGRES wins, as documented
					}
					c.getenv = func(k string) string { return env[k] }
					code := c.run(ctxT(t), args)
					require.Equal(t, exitUsage, code, errb.String())
					from := "--postgres"
					if where == "$"+envPostgres {
						from = where
					}
					require.Contains(t, errb.String(), "lazarus "+cmd[0]+": "+from+": not a PostgreSQL connection string: ")
					require.NotContains(t, errb.String(), "s3cret")
					require.Empty(t, out.String())
					require.NoDirExists(t, dir, "nothing created")
				})
			}
		}
	}
}

// TestDSNThatParsesButCannotConnect: a DSN that parses but reaches no
// server is a failure (exit 1), not a usage error.
func TestDSNThatParsesButCannotConnect(t *testing.T) {
	var out, errb lockedBuffer
	c := newCLI(strings.NewReader(""), &out, &errb)
	c.getenv = func(string) string { return "" }
	code := c.run(ctxT(t), []string{"stats", "--postgres", "postgres://u:s3cret@127.0.0.1:1/app?connect_timeout=5"})
	require.Equal(t, exitError, code, errb.String())
	require.NotContains(t, errb.String(), "not a PostgreSQL connection string")
	require.NotContains(t, errb.String(), "s3cret")
}

// TestServeConfigMalformedDSN: a configuration file whose postgres does
// not parse is a bad configuration (exit 1, as the file's other bad
// values), naming the key and not showing the password, even when a flag
// chooses another store: the file itself is wrong.
func TestServeConfigMalformedDSN(t *testing.T) {
	path := filepath.Join(t.TempDir(), "node.json")
	require.NoError(t, os.WriteFile(path, []byte(`{"postgres": "postgres://u:s3cret@db.invalid:badport/app"}`), 0o600))
	for _, store := range [][]string{nil, {"--dir", filepath.Join(t.TempDir(), "store")}} {
		var out, errb lockedBuffer
		c := newCLI(strings.NewReader(""), &out, &errb)
		c.getenv = func(string) string { return "" }
		code := c.run(ctxT(t), append([]string{"serve", "--config", path, "--listen", "127.0.0.1:0"}, store...)) // bounded: a config taken serves until the context ends
		require.Equal(t, exitError, code, errb.String())
		require.Contains(t, errb.String(), "lazarus serve: bad configuration: "+path+": postgres: not a PostgreSQL connection string: ")
		require.NotContains(t, errb.String(), "s3cret")
		require.Empty(t, out.String())
		if store != nil {
			require.NoDirExists(t, store[1], "nothing created")
		}
	}
}

// TestBadDSNWrapsErrInvalid: the usage error of a malformed DSN wraps
// journal.ErrInvalid and maps to exit 2.
func TestBadDSNWrapsErrInvalid(t *testing.T) {
	c := newCLI(strings.NewReader(""), &lockedBuffer{}, &lockedBuffer{})
	c.getenv = func(string) string { return "" }
	fs := c.newFlags(statsCmd)
	require.NoError(t, fs.Parse([]string{"--postgres", malformedDSNs[0]}))
	_, _, err := c.openStore(fs, false)
	require.ErrorIs(t, err, journal.ErrInvalid)
	require.Equal(t, exitUsage, exitCode(err))
}

// TestStoreEnvironmentOrder: as the main help says, $LAZARUS_POSTGRES,
// when set, wins over $LAZARUS_DIR, and --dir wins over it.
func TestStoreEnvironmentOrder(t *testing.T) {
	require.Contains(t, cliRun(t, "", "--help").stdout, "($LAZARUS_POSTGRES, when set, wins over $LAZARUS_DIR, not over --dir)")
	f := newFixture(t)
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"stats"}, exitError}, // the database, which nothing serves
		{[]string{"stats", "--dir", f.dir}, exitOK},
	} {
		var out, errb lockedBuffer
		c := newCLI(strings.NewReader(""), &out, &errb)
		env := map[string]string{envPostgres: "postgres://u@127.0.0.1:1/app?connect_timeout=5", envDir: f.dir}
		c.getenv = func(k string) string { return env[k] }
		require.Equal(t, tc.code, c.run(ctxT(t), tc.args), errb.String())
		if tc.code == exitError {
			require.Contains(t, errb.String(), "pgjournal: open: ")
		}
	}
}
