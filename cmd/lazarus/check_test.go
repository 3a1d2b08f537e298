package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal/pebblejournal"
	"github.com/lazarusrt/lazarus/messages"
)

// flushToTables moves everything the fixture's runtime wrote from the
// write-ahead log into table files, with the store's own level settings
// (L0 uncompressed), so a test can damage a table.
func flushToTables(t *testing.T, dir string) []string {
	t.Helper()
	o := &pebble.Options{FormatMajorVersion: pebblejournal.FormatMajorVersion, Logger: quietPebble{}}
	pebblejournal.SetLevelOptions(o)
	db, err := pebble.Open(dir, o)
	require.NoError(t, err)
	require.NoError(t, db.Flush())
	require.NoError(t, db.Close())
	tables, err := filepath.Glob(filepath.Join(dir, "*.sst"))
	require.NoError(t, err)
	require.NotEmpty(t, tables)
	return tables
}

// quietPebble discards Pebble's log lines.
type quietPebble struct{}

func (quietPebble) Infof(string, ...any)  {}
func (quietPebble) Errorf(string, ...any) {}
func (quietPebble) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}

func TestCheckSound(t *testing.T) {
	f := newFixture(t)
	r := cliRun(t, "", "check", "--dir", f.dir)
	requireOK(t, r)
	require.Contains(t, r.stdout, "3 conversations")
	require.Equal(t, "sound", outLines(r.stdout)[len(outLines(r.stdout))-1])

	r = cliRun(t, "", "check", "--json", "--dir", f.dir)
	requireOK(t, r)
	var out checkOutput
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out))
	require.True(t, out.Sound)
	require.Equal(t, 3, out.Conversations)
	require.Empty(t, out.Problems)
}

// TestCheckFindsDamagedTable flips a byte of a real table file: check
// exits 6 and names the damage with Pebble's checksum text.
func TestCheckFindsDamagedTable(t *testing.T) {
	f := newFixture(t)
	tables := flushToTables(t, f.dir)
	marker := []byte("Order 42 is on its way")
	flipped := false
	for _, p := range tables {
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		if i := bytes.Index(b, marker); i >= 0 {
			b[i+1] ^= 0xFF
			require.NoError(t, os.WriteFile(p, b, 0o644))
			flipped = true
		}
	}
	require.True(t, flipped, "the marker is in a table")

	// The fixture is small: its one data block also holds the layout
	// record, which Open reads, so the damage is found at Open or by the
	// walk, and reported either way.
	r := cliRun(t, "", "check", "--dir", f.dir)
	require.Equal(t, exitDamaged, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	require.Contains(t, r.stdout+r.stderr, "checksum")
	require.Contains(t, r.stderr, "the store is damaged")
}

// TestCheckFindsActiveIndexDamage: an entry of the index of ACTIVE
// conversations (what Open resumes) for a conversation whose row is idle
// is reported as damage (pebblejournal's TestCheck covers the other cases).
func TestCheckFindsActiveIndexDamage(t *testing.T) {
	f := newFixture(t)
	o := &pebble.Options{FormatMajorVersion: pebblejournal.FormatMajorVersion, Logger: quietPebble{}}
	pebblejournal.SetLevelOptions(o)
	db, err := pebble.Open(f.dir, o)
	require.NoError(t, err)
	// Family 0x0a, the id, its terminator 0x00 0x01 (see pebblejournal's
	// doc.go).
	require.NoError(t, db.Set([]byte("\x0afinished\x00\x01"), nil, pebble.Sync))
	require.NoError(t, db.Close())
	r := cliRun(t, "", "check", "--dir", f.dir)
	require.Equal(t, exitDamaged, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	require.Contains(t, r.stdout, `conversation "finished": the active index lists it, but its row is CONVERSATION_STATUS_IDLE`)
}

// TestCheckExitCodes: a MANIFEST too damaged to open is damage (6); a
// directory a runtime holds is busy (4); no store is 5; a stray argument
// is a usage error (2).
func TestCheckExitCodes(t *testing.T) {
	f := newFixture(t)

	rt, err := lazarus.Open(lazarus.Options{Dir: f.dir, Model: scripted.New(scripted.Options{}), Tools: tools(), NoResume: true})
	require.NoError(t, err)
	r := cliRun(t, "", "check", "--dir", f.dir)
	require.Equal(t, exitBusy, r.code, r.stderr)
	require.NoError(t, rt.Close())

	r = cliRun(t, "", "check", "--dir", filepath.Join(t.TempDir(), "none"))
	require.Equal(t, exitNotFound, r.code, r.stderr)
	r = cliRun(t, "", "check", "extra", "--dir", f.dir)
	require.Equal(t, exitUsage, r.code, r.stderr)

	flushToTables(t, f.dir)
	manifests, err := filepath.Glob(filepath.Join(f.dir, "MANIFEST-*"))
	require.NoError(t, err)
	require.NotEmpty(t, manifests)
	m := manifests[len(manifests)-1]
	b, err := os.ReadFile(m)
	require.NoError(t, err)
	b[len(b)/2] ^= 0xFF
	require.NoError(t, os.WriteFile(m, b, 0o644))
	r = cliRun(t, "", "check", "--dir", f.dir)
	require.Equal(t, exitDamaged, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	require.True(t, strings.Contains(r.stderr, "damaged"), r.stderr)

	// Every command that opens the store says the same: exit status 6.
	for _, args := range [][]string{
		{"conversations"}, {"show", "waiting"}, {"tail", "waiting"}, {"pending"},
		{"resolve", "tc", "--result", "true"}, {"reschedule", "tc", "--never"}, {"schedules", "finished"},
		{"export", "--all"}, {"import", "--dry-run"}, {"delete", "finished", "--yes"},
		{"gc-audit", "--older-than", "0s"}, {"stats"}, {"serve", "--listen", "127.0.0.1:0"},
	} {
		t.Run(args[0], func(t *testing.T) {
			r := cliRun(t, "", append(args, "--dir", f.dir)...)
			require.Equal(t, exitDamaged, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
			require.Contains(t, r.stderr, "the store is damaged")
		})
	}
}

// TestCheckFindsASummaryThatCutsACall: a summary that ends inside a tool
// call (its call issued at or before its end, its result after it or none
// yet), which the runtime never writes but a Store takes (one put by hand),
// is damage: exit 6, one line naming its span and the call, counted on
// the head as import counts it. The fixture's summary of finished, which
// ends where every call has its result, is not reported.
func TestCheckFindsASummaryThatCutsACall(t *testing.T) {
	f := newFixture(t)
	st, err := pebblejournal.Open(f.dir, pebblejournal.Options{})
	require.NoError(t, err)
	// waiting: lookup issued at 2, answered at 4; approve issued at 5,
	// pending. A summary to 4 cuts no call; to 6, approve's.
	require.NoError(t, st.PutSummary(ctxT(t), "waiting", &messages.Summary{FromSeq: 1, ToSeq: 4, Content: "sound"}))
	require.NoError(t, st.PutSummary(ctxT(t), "waiting", &messages.Summary{FromSeq: 1, ToSeq: 6, Content: "put by hand"}))
	require.NoError(t, st.Close())

	r := cliRun(t, "", "check", "--dir", f.dir)
	require.Equal(t, exitDamaged, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	want := fmt.Sprintf(`damage: conversation "waiting": summary of seq 1..6 ends inside tool call %q, issued at seq 5 and not answered by seq 6`, f.waitingCall)
	var damage []string
	for _, l := range outLines(r.stdout) {
		if strings.HasPrefix(l, "damage: ") {
			damage = append(damage, l)
		}
	}
	require.Len(t, damage, 1, r.stdout)
	require.True(t, strings.HasPrefix(damage[0], want), "got %q, want it to start with %q", damage[0], want)
	require.Contains(t, r.stderr, "the store is damaged: 1 problems found")

	r = cliRun(t, "", "check", "--json", "--dir", f.dir)
	require.Equal(t, exitDamaged, r.code, r.stderr)
	var out checkOutput
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out))
	require.False(t, out.Sound)
	require.Len(t, out.Problems, 1)
	require.Equal(t, strings.TrimPrefix(damage[0], "damage: "), out.Problems[0])
}

// TestCheckOfADamagedLogWithASummary: when the log under a summary has a
// hole, the read for open tool calls fails as damage, which check reports
// with the gap (exit 6); it does not stop check as a failure to run (1).
func TestCheckOfADamagedLogWithASummary(t *testing.T) {
	f := newFixture(t)
	o := &pebble.Options{FormatMajorVersion: pebblejournal.FormatMajorVersion, Logger: quietPebble{}}
	pebblejournal.SetLevelOptions(o)
	db, err := pebble.Open(f.dir, o)
	require.NoError(t, err)
	// Event 3 of finished (summary 1..4): family 0x03, the id, its
	// terminator 0x00 0x01, the seq big-endian (see pebblejournal's doc.go).
	require.NoError(t, db.Delete([]byte("\x03finished\x00\x01\x00\x00\x00\x00\x00\x00\x00\x03"), pebble.Sync))
	require.NoError(t, db.Close())
	r := cliRun(t, "", "check", "--dir", f.dir)
	require.Equal(t, exitDamaged, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	require.Contains(t, r.stdout, `damage: conversation "finished": the log has a gap: seq 4 where 3 should be`)
	require.Contains(t, r.stdout, `damage: conversation "finished": its summaries could not be checked for open tool calls: `)
}

// TestCheckIsPebbleOnly: check verifies a Pebble directory only, so it has
// no --postgres (its help lists none), refuses the top-level one as a
// usage error that says why, and reads $LAZARUS_DIR even when
// $LAZARUS_POSTGRES is set (it used to open, and migrate, that database
// only to fail: no offline check).
func TestCheckIsPebbleOnly(t *testing.T) {
	f := newFixture(t)
	require.NotContains(t, cliRun(t, "", "check", "--help").stdout, "\n  --postgres ")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"check", "--postgres", "postgres://u@127.0.0.1:1/app"}, "lazarus check: flag provided but not defined: -postgres"},
		{[]string{"--postgres", "postgres://u@127.0.0.1:1/app", "check"}, "lazarus check: --postgres is not for check, which works on a Pebble directory only (--dir)"},
	} {
		var out, errb lockedBuffer
		c := newCLI(strings.NewReader(""), &out, &errb)
		c.getenv = func(string) string { return "" }
		require.Equal(t, exitUsage, c.run(ctxT(t), tc.args), errb.String())
		require.Contains(t, errb.String(), tc.want)
		require.Empty(t, out.String())
	}
	var out, errb lockedBuffer
	c := newCLI(strings.NewReader(""), &out, &errb)
	env := map[string]string{envPostgres: "postgres://u@127.0.0.1:1/app", envDir: f.dir}
	c.getenv = func(k string) string { return env[k] }
	require.Equal(t, exitOK, c.run(ctxT(t), []string{"check"}), errb.String())
	require.Equal(t, "sound", outLines(out.String())[len(outLines(out.String()))-1])
}
