package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent/scripted"
)

// These tests hold the commands to what their help texts and the package
// doc promise, from the outside: exit statuses, what goes to stdout and
// what to stderr, and what a repeated or refused command leaves behind.

// TestDocsUnknownIDs: every command that names a conversation exits 5
// ("no such conversation") for an id the store never had, printing
// nothing on stdout and saying why on stderr; the commands that name a
// tool call print "stale" on stdout and exit 3 instead.
func TestDocsUnknownIDs(t *testing.T) {
	f := newFixture(t)
	before := exportOf(t, f, "finished", "waiting", "answered")
	for _, args := range [][]string{
		{"show", "nope"}, {"show", "nope", "--json"}, {"tail", "nope", "--max", "1"}, {"pending", "--conversation", "nope"},
		{"pending", "--conversation", "nope", "--json"}, {"schedules", "nope"}, {"export", "nope"},
		{"export", "finished", "nope"}, {"delete", "nope"}, {"delete", "nope", "--yes"},
		{"gc-audit", "--older-than", "0s", "--conversation", "nope"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			r := cliRun(t, "", append(args, "--dir", f.dir)...)
			require.Equal(t, exitNotFound, r.code, r.stderr)
			require.Empty(t, r.stdout, "nothing on stdout, not even a partial export")
			require.Contains(t, r.stderr, "lazarus "+args[0]+": ")
			require.Contains(t, r.stderr, "nope")
		})
	}
	for _, args := range [][]string{
		{"resolve", "nope", "--result", "true"}, {"resolve", "nope", "--reject", "no"},
		{"resolve", f.answeredCall, "--reject", "no"}, {"reschedule", "nope", "--never"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			r := cliRun(t, "", append(args, "--dir", f.dir)...)
			require.Equal(t, exitStale, r.code, r.stderr)
			require.Equal(t, "stale\n", r.stdout)
			require.Contains(t, r.stderr, "lazarus "+args[0]+": ")
		})
	}
	require.Equal(t, before, exportOf(t, f, "finished", "waiting", "answered"), "nothing changed")
}

// TestDocsRepeatedCommands: what is done once is refused, not done again,
// the second time: import never overwrites (nor does its dry run accept
// what the target already has), a deleted conversation is not found, a
// cancelled schedule is not found, an answered call is stale.
func TestDocsRepeatedCommands(t *testing.T) {
	f := newFixture(t)
	exported := exportOf(t, f, "finished")
	target := filepath.Join(t.TempDir(), "target")

	r := cliRun(t, exported, "import", "--dir", target)
	requireOK(t, r)
	require.True(t, strings.HasPrefix(r.stdout, "imported conversation finished ("), r.stdout)
	for _, args := range [][]string{{"import"}, {"import", "--dry-run"}} {
		r = cliRun(t, exported, append(args, "--dir", target)...)
		require.Equal(t, exitError, r.code, "%v: %s", args, r.stderr)
		require.Empty(t, r.stdout, args)
		require.Contains(t, r.stderr, "conversation finished already exists in the target; import never overwrites")
	}
	r = cliRun(t, exported+exported, "import", "--dir", filepath.Join(t.TempDir(), "twice"))
	require.Equal(t, exitError, r.code, "an input holding a conversation twice: %s", r.stderr)
	require.Empty(t, r.stdout)
	require.Equal(t, exported, withSameUpdated(t, exported, cliRun(t, "", "export", "finished", "--dir", target).stdout),
		"the refused imports changed nothing")

	r = cliRun(t, "", "schedules", "finished", "--cancel", "finished-once", "--dir", f.dir)
	requireOK(t, r)
	require.Equal(t, "finished-once (conversation finished) cancelled\n", r.stdout)
	r = cliRun(t, "", "schedules", "finished", "--cancel", "finished-once", "--dir", f.dir)
	require.Equal(t, exitNotFound, r.code, r.stderr)
	require.Empty(t, r.stdout)
	r = cliRun(t, "", "schedules", "finished", "--dir", f.dir)
	requireOK(t, r)
	require.NotContains(t, r.stdout, "finished-once")
	require.Len(t, outLines(r.stdout), 2, "the other two schedules stay: %s", r.stdout)

	requireOK(t, cliRun(t, "", "resolve", f.waitingCall, "--reject", "not today", "--as", "carol", "--dir", f.dir))
	for _, args := range [][]string{
		{"resolve", f.waitingCall, "--reject", "not today"}, {"resolve", f.waitingCall, "--result", "true"},
		{"reschedule", f.waitingCall, "--in", "1h"},
	} {
		r = cliRun(t, "", append(args, "--dir", f.dir)...)
		require.Equal(t, exitStale, r.code, "%v: %s", args, r.stderr)
		require.Equal(t, "stale\n", r.stdout)
	}

	requireOK(t, cliRun(t, "", "delete", "answered", "--yes", "--dir", f.dir))
	r = cliRun(t, "", "delete", "answered", "--yes", "--dir", f.dir)
	require.Equal(t, exitNotFound, r.code, r.stderr)
	require.Empty(t, r.stdout)
}

// withSameUpdated returns got with the rows' "updated" of want: import
// sets it to the time of the import (import --help).
func withSameUpdated(t *testing.T, want, got string) string {
	t.Helper()
	w := updatedRE.FindAllString(want, -1)
	i := 0
	return updatedRE.ReplaceAllStringFunc(got, func(s string) string {
		require.Less(t, i, len(w), "more rows than exported")
		i++
		return w[i-1]
	})
}

// TestDocsExportFileIsNeverHalfWritten: export --file writes a temporary
// file and renames it into place, so an export that fails (an unknown id
// after a good one) leaves neither PATH nor a temporary file, and one that
// succeeds leaves exactly what stdout would have had.
func TestDocsExportFileIsNeverHalfWritten(t *testing.T) {
	f := newFixture(t)
	out := t.TempDir()
	path := filepath.Join(out, "export.jsonl")
	r := cliRun(t, "", "export", "finished", "nope", "--file", path, "--dir", f.dir)
	require.Equal(t, exitNotFound, r.code, r.stderr)
	require.Empty(t, r.stdout)
	entries, err := os.ReadDir(out)
	require.NoError(t, err)
	require.Empty(t, entries, "no file, no temporary file")

	r = cliRun(t, "", "export", "finished", "--file", path, "--dir", f.dir)
	requireOK(t, r)
	require.Empty(t, r.stdout, "the export went to the file")
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, exportOf(t, f, "finished"), string(b))
	entries, err = os.ReadDir(out)
	require.NoError(t, err)
	require.Len(t, entries, 1)
}

// TestDocsUsageErrorsPrintTheSynopsis: a bad flag value is exit status 2,
// with the error and the command's synopsis on stderr and nothing on
// stdout; 'lazarus help' of an unknown command is one too.
func TestDocsUsageErrorsPrintTheSynopsis(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"show", "c", "--limit", "-1"}, "--limit must not be negative"},
		{[]string{"show", "c", "--from", "x"}, `invalid value "x" for flag -from`},
		{[]string{"conversations", "--limit", "10001"}, "--limit must be in 1..10000, not 10001"},
		{[]string{"gc-audit", "--older-than", "soon"}, `invalid value "soon" for flag -older-than`},
		{[]string{"gc-audit", "--older-than", "-1h"}, "--older-than must not be negative"},
		{[]string{"export", "finished", "--all"}, "name the conversations to export, or pass --all"},
		{[]string{"serve", "extra"}, `unexpected argument "extra"`},
		{[]string{"serve", "--shutdown-timeout", "soon"}, `invalid value "soon" for flag -shutdown-timeout`},
		{[]string{"serve", "--postgres", "postgres://127.0.0.1:1/none"}, "--dir and --postgres both given"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			r := cliRun(t, "", append(tc.args, "--dir", dir)...)
			require.Equal(t, exitUsage, r.code, r.stderr)
			require.Empty(t, r.stdout)
			require.Contains(t, r.stderr, "lazarus "+tc.args[0]+": "+tc.want)
			require.Contains(t, r.stderr, "usage: lazarus "+tc.args[0]+" ")
			require.Contains(t, r.stderr, "Run 'lazarus "+tc.args[0]+" --help' for details.")
		})
	}
	r := cliRun(t, "", "help", "frobnicate")
	require.Equal(t, exitUsage, r.code)
	require.Empty(t, r.stdout)
	require.Contains(t, r.stderr, `unknown command "frobnicate"`)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries, "no usage error created a store")
}

// TestDocsServeStartFailures: serve's exit statuses when it cannot start,
// each with the reason on stderr and nothing on stdout: 4 for a directory
// another process holds, 2 without a store, 1 for a bad configuration, a
// bad listen address or one already taken (found before the store is
// opened: no store is created).
func TestDocsServeStartFailures(t *testing.T) {
	t.Setenv(envDir, "")
	t.Setenv(envPostgres, "")
	f := newFixture(t)
	cfg := filepath.Join(t.TempDir(), "node.json")
	require.NoError(t, os.WriteFile(cfg, []byte(`{"dir": "store", "nope": 1}`), 0o600))
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	fresh := filepath.Join(t.TempDir(), "fresh")

	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no store", []string{"--listen", "127.0.0.1:0"}, exitUsage, "no store: pass --dir DIR or --postgres DSN"},
		{"unknown config field", []string{"--config", cfg}, exitError, `bad configuration: ` + cfg + `: json: unknown field "nope"`},
		{"missing config", []string{"--config", cfg + ".missing"}, exitError, "bad configuration: open " + cfg + ".missing"},
		{"unknown model", []string{"--dir", fresh, "--model", "bogus"}, exitError, `bad configuration: model provider "bogus": want scripted or openai`},
		{"address taken", []string{"--dir", fresh, "--listen", taken.Addr().String()}, exitError, "listen tcp " + taken.Addr().String() + ": bind: address already in use"},
		{"bad address", []string{"--dir", fresh, "--listen", "no-port"}, exitError, "listen tcp: address no-port: missing port in address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := cliRun(t, "", append([]string{"serve"}, tc.args...)...)
			require.Equal(t, tc.code, r.code, r.stderr)
			require.Empty(t, r.stdout)
			require.Contains(t, r.stderr, "lazarus serve: "+tc.want)
			require.NotContains(t, r.stderr, "opening the store")
			_, err := os.Stat(fresh)
			require.ErrorIs(t, err, os.ErrNotExist, "no store created")
		})
	}

	rt, err := lazarus.Open(lazarus.Options{Dir: f.dir, Model: scripted.New(scripted.Options{}), Tools: tools(), NoResume: true})
	require.NoError(t, err)
	defer rt.Close()
	r := cliRun(t, "", "serve", "--dir", f.dir, "--listen", "127.0.0.1:0")
	require.Equal(t, exitBusy, r.code, r.stderr)
	require.Empty(t, r.stdout)
	require.Contains(t, r.stderr, "the directory is held by another process")
	require.NotContains(t, r.stderr, "listening on")
}
