package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/snapshot"
)

// wait bounds every wait of these tests; nothing sleeps.
const wait = 20 * time.Second

var user = agent.Scope{UserID: "operator-test"}

// tools are the fixture's tools: a server lookup and a human approval.
func tools() []agent.Tool {
	return []agent.Tool{
		{
			Name: "lookup", Description: "look an order up", Executor: messages.Executor_EXECUTOR_SERVER,
			Run: func(context.Context, agent.Invocation) (string, error) { return `{"order":42,"amount":120}`, nil },
		},
		{
			Name: "approve", Description: "a human approves a refund", Executor: messages.Executor_EXECUTOR_HUMAN,
			Timeout: time.Hour,
			Prompt:  func(args string) string { return "Approve the refund " + args + "?" },
		},
	}
}

// fixture is a Pebble directory a real runtime wrote, then closed:
//
//   - "finished": a server call, then a final answer (idle), with a
//     summary, metadata, settings and three pending schedules
//     (finished-cron, finished-every, finished-once);
//   - "waiting": a server call, then a human call: suspended, one pending
//     human call (waitingCall) with a deadline;
//   - "answered": a human call answered through Runtime.Resolve
//     (answeredCall), then a final answer (idle).
type fixture struct {
	dir          string
	waitingCall  string
	answeredCall string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{dir: t.TempDir()}
	model := scripted.New(scripted.Options{})
	model.Push("finished",
		scripted.Reply("Let me look.", scripted.Call("lookup", `{"order":42}`)),
		scripted.Text("Order 42 is on its way.\nAnything else?"))
	model.Push("waiting",
		scripted.Reply("Checking the order.", scripted.Call("lookup", `{"order":7}`)),
		scripted.Reply("I need an approval.", scripted.Call("approve", `{"amount":50}`)))
	model.Push("answered",
		scripted.Reply("", scripted.Call("approve", `{"amount":10}`)),
		scripted.Text("Refund done."))
	rt, err := lazarus.Open(lazarus.Options{
		Dir: f.dir, Model: model, Tools: tools(), IdleTimeout: -1,
		Summary:    snapshot.Policy{MaxEvents: 3, KeepRecent: 1},
		Summarizer: snapshot.Deterministic{},
		Audit:      lazarus.AuditOptions{Enabled: true},
	})
	require.NoError(t, err)
	ctx := ctxT(t)

	_, err = rt.Send(ctx, "finished", "Where is my order 42?", user)
	require.NoError(t, err)
	awaitEvent(t, rt, "finished", func(ev *messages.Event) bool { return assistantText(ev) == "Order 42 is on its way.\nAnything else?" })
	require.Eventually(t, func() bool {
		_, err := rt.Store().LatestSummary(ctx, "finished")
		return err == nil
	}, wait, time.Millisecond, "the summary of finished")
	require.NoError(t, rt.Store().PutMetadata(ctx, "finished", map[string]string{"owner": "alice", "display name": "Order 42"}))
	// Pending schedules of each kind, none due while a test runs: a cron
	// expression in a zone (next on a 29 February), an interval, a one-off.
	for _, spec := range []lazarus.ScheduleSpec{
		{ID: "finished-cron", Cron: "0 9 29 2 *", TimeZone: "Europe/Paris", Text: "Any news on order 42?"},
		{ID: "finished-every", Every: 240 * time.Hour, Text: "Check order 42 again."},
		{ID: "finished-once", After: 480 * time.Hour, Text: "Close the file of order 42."},
	} {
		_, err := rt.Schedule(ctx, "finished", spec, user)
		require.NoError(t, err)
	}

	_, err = rt.Send(ctx, "waiting", "Refund order 7, please.", user)
	require.NoError(t, err)
	susp := awaitEvent(t, rt, "waiting", func(ev *messages.Event) bool { return ev.GetSuspension() != nil })
	f.waitingCall = susp.GetSuspension().GetPending()[0].GetToolCallId()

	_, err = rt.Send(ctx, "answered", "Refund 10.", user)
	require.NoError(t, err)
	susp = awaitEvent(t, rt, "answered", func(ev *messages.Event) bool { return ev.GetSuspension() != nil })
	f.answeredCall = susp.GetSuspension().GetPending()[0].GetToolCallId()
	require.NoError(t, rt.Resolve(ctx, f.answeredCall, `{"approved":true}`, user))
	awaitEvent(t, rt, "answered", func(ev *messages.Event) bool { return assistantText(ev) == "Refund done." })

	// Wait until the rows say what the logs say (status is written with
	// the last event, so this is immediate), then close.
	for id, want := range map[string]messages.ConversationStatus{
		"finished": messages.ConversationStatus_CONVERSATION_STATUS_IDLE,
		"waiting":  messages.ConversationStatus_CONVERSATION_STATUS_SUSPENDED,
		"answered": messages.ConversationStatus_CONVERSATION_STATUS_IDLE,
	} {
		row, err := rt.Store().Conversation(ctx, id)
		require.NoError(t, err)
		require.Equal(t, want, row.GetStatus(), id)
	}
	require.NoError(t, rt.Close())
	return f
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	t.Cleanup(cancel)
	return ctx
}

// awaitEvent returns the first event of conv that matches, history then
// live, failing the test after the bound.
func awaitEvent(t *testing.T, rt *lazarus.Runtime, conv string, match func(*messages.Event) bool) *messages.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	ch, err := rt.Subscribe(ctx, conv, 0)
	require.NoError(t, err)
	for u := range ch {
		if u.Event != nil && match(u.Event) {
			return u.Event
		}
	}
	t.Fatalf("conversation %q: no matching event within %v", conv, wait)
	return nil
}

func assistantText(ev *messages.Event) string {
	var b strings.Builder
	for _, p := range ev.GetAssistantMsg().GetContent() {
		b.WriteString(p.GetText())
	}
	return b.String()
}

// result is what one run of the CLI printed and returned.
type result struct {
	stdout, stderr string
	code           int
}

// cliRun runs the CLI in-process with args and stdin, as main does.
func cliRun(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(args, strings.NewReader(stdin), &out, &errb)
	return result{out.String(), errb.String(), code}
}

// cliAt runs the CLI with a fixed clock.
func cliAt(t *testing.T, now time.Time, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	c := newCLI(strings.NewReader(""), &out, &errb)
	c.now = func() time.Time { return now }
	code := c.run(ctxT(t), args)
	return result{out.String(), errb.String(), code}
}

func requireOK(t *testing.T, r result) {
	t.Helper()
	require.Equal(t, exitOK, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	require.Empty(t, r.stderr)
}

func TestHelpOnEveryCommand(t *testing.T) {
	r := cliRun(t, "", "--help")
	requireOK(t, r)
	for _, cmd := range commands {
		require.Contains(t, r.stdout, cmd.name)
	}
	require.Contains(t, r.stdout, "Exit status")
	requireOK(t, cliRun(t, "", "help"))
	for _, cmd := range commands {
		t.Run(cmd.name, func(t *testing.T) {
			for _, args := range [][]string{{cmd.name, "--help"}, {cmd.name, "-h"}, {"help", cmd.name}} {
				r := cliRun(t, "", args...)
				requireOK(t, r)
				require.Contains(t, r.stdout, "Usage: lazarus "+cmd.name)
				if cmd.noStore {
					// It works on a live node only: no store flags.
					require.NotContains(t, r.stdout, "\n  --dir ")
					require.NotContains(t, r.stdout, "\n  --postgres ")
				} else {
					require.Contains(t, r.stdout, "--dir")
				}
			}
		})
	}
	// The help of the commands that follow or mirror the runtime points to
	// the in-process way.
	require.Contains(t, cliRun(t, "", "tail", "--help").stdout, "Runtime.Subscribe")
	// tail --json prints JSON lines, not one document.
	require.Contains(t, cliRun(t, "", "tail", "--help").stdout, "one protojson line (JSON lines)")
	require.NotContains(t, cliRun(t, "", "tail", "--help").stdout, "one JSON document")
	require.Contains(t, cliRun(t, "", "export", "--help").stdout, `{"type":"event","conversation":ID,"record":<Event>}`)
}

func TestUsageErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no command", nil, "Commands:"},
		{"unknown command", []string{"frobnicate"}, `unknown command "frobnicate"`},
		{"unknown flag", []string{"conversations", "--dir", dir, "--nope"}, "flag provided but not defined: -nope"},
		{"missing id", []string{"show", "--dir", dir}, "missing argument"},
		{"extra argument", []string{"show", "a", "b", "--dir", dir}, `unexpected argument "b"`},
		{"bad limit", []string{"conversations", "--dir", dir, "--limit", "0"}, "--limit must be in 1..10000"},
		{"where key too long", []string{"conversations", "--dir", dir, "--where", strings.Repeat("k", 300) + "=v"}, "metadata key of 300 bytes"},
		{"resolve without result", []string{"resolve", "tc", "--dir", dir}, "exactly one of --result and --reject"},
		{"resolve with both", []string{"resolve", "tc", "--dir", dir, "--result", "1", "--reject", "no"}, "exactly one of --result and --reject"},
		{"resolve bad json", []string{"resolve", "tc", "--dir", dir, "--result", "yes"}, "not a JSON value"},
		{"gc-audit without older-than", []string{"gc-audit", "--dir", dir}, "--older-than is required"},
		{"export nothing", []string{"export", "--dir", dir}, "or pass --all"},
		{"tail bad interval", []string{"tail", "x", "--dir", dir, "--interval", "0s"}, "--interval must be positive"},
		{"token without a node", []string{"conversations", "--dir", dir, "--token", "secret"}, "--token is for --server"},
		{"top-level token without a node", []string{"--token", "secret", "pending", "--dir", dir}, "--token is for --server"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := cliRun(t, "", tc.args...)
			require.Equal(t, exitUsage, r.code, r.stderr)
			require.Contains(t, r.stderr, tc.want)
			require.Empty(t, r.stdout)
		})
	}
}

func TestDirectory(t *testing.T) {
	t.Run("no directory given", func(t *testing.T) {
		t.Setenv(envDir, "")
		r := cliRun(t, "", "conversations")
		require.Equal(t, exitUsage, r.code)
		require.Contains(t, r.stderr, "pass --dir DIR or set $LAZARUS_DIR")
	})
	t.Run("from the environment and before the command", func(t *testing.T) {
		f := newFixture(t)
		t.Setenv(envDir, f.dir)
		r := cliRun(t, "", "conversations")
		requireOK(t, r)
		require.Contains(t, r.stdout, "waiting")
		t.Setenv(envDir, "")
		r = cliRun(t, "", "--dir", f.dir, "conversations")
		requireOK(t, r)
		require.Contains(t, r.stdout, "waiting")
	})
	t.Run("missing directory is not created", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "typo")
		r := cliRun(t, "", "stats", "--dir", dir)
		require.Equal(t, exitNotFound, r.code)
		require.Contains(t, r.stderr, "does not exist")
		require.NoDirExists(t, dir)
		exported := exportOf(t, newFixture(t), "finished")
		for _, args := range [][]string{
			{"conversations"}, {"show", "c"}, {"tail", "c"}, {"pending"}, {"resolve", "tc", "--result", "true"},
			{"reschedule", "tc", "--never"}, {"schedules", "c"}, {"export", "--all"}, {"delete", "c", "--yes"},
			{"gc-audit", "--older-than", "0s"}, {"check"},
		} {
			r := cliRun(t, "", append(args, "--dir", dir)...)
			require.Equal(t, exitNotFound, r.code, "%v: %s", args, r.stderr)
			require.Contains(t, r.stderr, "does not exist", args)
			require.NoDirExists(t, dir, args)
		}
		r = cliRun(t, exported, "import", "--dry-run", "--dir", dir)
		requireOK(t, r)
		require.NoDirExists(t, dir, "a dry run creates nothing")
		r = cliRun(t, "{}\n", "import", "--dir", dir)
		require.Equal(t, exitError, r.code, r.stderr)
		require.NoDirExists(t, dir, "a refused import creates nothing")
	})
	t.Run("directory without a store is left alone", func(t *testing.T) {
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("mine"), 0o644))
		r := cliRun(t, "", "conversations", "--dir", dir)
		require.Equal(t, exitNotFound, r.code)
		require.Contains(t, r.stderr, "holds no Pebble files")
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		require.Len(t, entries, 1)
		r = cliRun(t, exportOf(t, newFixture(t), "finished"), "import", "--dir", dir)
		require.Equal(t, exitNotFound, r.code, "import does not create a store among foreign files")
	})
	t.Run("a LOCK file alone is no store", func(t *testing.T) {
		// What is left of a store whose other files were lost, or of
		// another program's directory: Pebble would create a new, empty
		// store beside it, and the command would report no conversations.
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, "LOCK"), nil, 0o644))
		for _, args := range [][]string{{"conversations"}, {"stats"}, {"check"}, {"export", "--all"}} {
			r := cliRun(t, "", append(args, "--dir", dir)...)
			require.Equal(t, exitNotFound, r.code, "%v: %s", args, r.stderr)
			require.Contains(t, r.stderr, "holds no Pebble store", args)
			require.Empty(t, r.stdout, args)
		}
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		require.Len(t, entries, 1, "nothing was created")
	})
}

// TestBusyDirectory: while a runtime holds the directory, every command
// fails at once with exit status 4 and a clear message, and changes
// nothing.
func TestBusyDirectory(t *testing.T) {
	f := newFixture(t)
	exported := exportOf(t, f, "finished")
	before := cliRun(t, "", "export", "--all", "--dir", f.dir)
	requireOK(t, before)

	rt, err := lazarus.Open(lazarus.Options{Dir: f.dir, Model: scripted.New(scripted.Options{}), Tools: tools(), NoResume: true})
	require.NoError(t, err)
	for _, args := range [][]string{
		{"conversations"}, {"show", "waiting"}, {"tail", "waiting"}, {"pending"},
		{"resolve", f.waitingCall, "--result", "true"}, {"export", "finished"}, {"import"},
		{"delete", "finished", "--yes"}, {"gc-audit", "--older-than", "0s"}, {"stats"},
		{"reschedule", f.waitingCall, "--never"}, {"schedules", "finished", "--cancel", "finished-once"},
		{"schedules", "finished"}, {"import", "--dry-run"}, {"check"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			r := cliRun(t, exported, append(args, "--dir", f.dir)...)
			require.Equal(t, exitBusy, r.code, r.stderr)
			require.Contains(t, r.stderr, "held by another process")
			require.Contains(t, r.stderr, "a live Lazarus runtime or another lazarus command has it open")
			require.NotContains(t, r.stdout, "resolved")
		})
	}
	require.NoError(t, rt.Close())
	after := cliRun(t, "", "export", "--all", "--dir", f.dir)
	requireOK(t, after)
	require.Equal(t, before.stdout, after.stdout, "nothing changed")
}

// outLines splits output into its lines.
func outLines(s string) []string {
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}

// TestHelpDespiteRefusedTopLevelFlags: a top-level flag the command does
// not take (a store before send, --postgres before check, --server before
// a store-only command) is a usage error, but not when the command line
// asks for the command's help: --help, -h and help COMMAND print it on
// stdout with status 0, as without the flag.
func TestHelpDespiteRefusedTopLevelFlags(t *testing.T) {
	for _, tc := range []struct {
		top     []string
		cmd     string
		refused string
	}{
		{[]string{"--dir", "d"}, "send", "--dir and --postgres name a store, and send works on a live node only"},
		{[]string{"--postgres", "postgres://db.invalid/app"}, "send", "--dir and --postgres name a store, and send works on a live node only"},
		{[]string{"--postgres", "postgres://db.invalid/app"}, "check", "--postgres is not for check"},
		{[]string{"--server", "http://127.0.0.1:1"}, "export", "--server and --token are for the commands that work on a live node, not export"},
		{[]string{"--token", "t"}, "serve", "--server and --token are for the commands that work on a live node, not serve"},
	} {
		t.Run(strings.Join(append(tc.top, tc.cmd), " "), func(t *testing.T) {
			for _, rest := range [][]string{{tc.cmd, "--help"}, {tc.cmd, "-h"}, {"help", tc.cmd}, {tc.cmd, "x", "-help"}} {
				r := cliRun(t, "", append(append([]string(nil), tc.top...), rest...)...)
				requireOK(t, r)
				require.True(t, strings.HasPrefix(r.stdout, "Usage: lazarus "+tc.cmd+" "), "%q prints the help: %s", rest, r.stdout)
			}
			// Without --help the flag is still refused, before anything runs.
			r := cliRun(t, "", append(append([]string(nil), tc.top...), tc.cmd, "--nope")...)
			require.Equal(t, exitUsage, r.code, r.stderr)
			require.Contains(t, r.stderr, "lazarus "+tc.cmd+": "+tc.refused)
			require.Empty(t, r.stdout)
		})
	}
}

// TestHelpAfterABadFlag: --help (or -h, -help=true) after a flag the
// command does not define, or a flag value that does not parse, still
// prints the command's help on stdout with status 0, as the package
// documents (the flag package stopped at the bad flag, and it was a usage
// error, status 2); after "--" it is an argument, and the bad flag is the
// usage error.
func TestHelpAfterABadFlag(t *testing.T) {
	for _, cmd := range commands {
		t.Run(cmd.name, func(t *testing.T) {
			for _, rest := range [][]string{{"--nope", "--help"}, {"--nope", "x", "-h"}, {"--json=maybe", "-help=true"}} {
				r := cliRun(t, "", append([]string{cmd.name}, rest...)...)
				requireOK(t, r)
				require.True(t, strings.HasPrefix(r.stdout, "Usage: lazarus "+cmd.name+" "), "%q prints the help: %s", rest, r.stdout)
				require.Empty(t, r.stderr, rest)
			}
			r := cliRun(t, "", cmd.name, "--nope", "--", "--help")
			require.Equal(t, exitUsage, r.code, r.stderr)
			require.Contains(t, r.stderr, "flag provided but not defined: -nope")
			require.Empty(t, r.stdout)
		})
	}
}

// TestHelpAsAFlagValue: a help flag where a flag's value is expected
// (send --to --help) asks for the help, for every flag taking a value of
// every command, as the package documents; the flag package took it as the
// value, and the command ran with --to "--help". Before the command it asks
// for the main help. A value that reads as a help flag is given with "=".
func TestHelpAsAFlagValue(t *testing.T) {
	for _, cmd := range commands {
		t.Run(cmd.name, func(t *testing.T) {
			help := cliRun(t, "", cmd.name, "--help")
			requireOK(t, help)
			var valued []string
			for _, line := range strings.Split(help.stdout, "\n") {
				// "  --to id": a flag taking a value.
				if f := strings.Fields(line); len(f) == 2 && strings.HasPrefix(line, "  --") {
					valued = append(valued, f[0])
				}
			}
			require.NotEmpty(t, valued, help.stdout)
			for _, flag := range valued {
				for _, h := range []string{"--help", "-h"} {
					for _, args := range [][]string{{cmd.name, flag, h}, {cmd.name, flag, h, "x"}, {cmd.name, "x", flag, h}} {
						r := cliRun(t, "", args...)
						requireOK(t, r)
						require.True(t, strings.HasPrefix(r.stdout, "Usage: lazarus "+cmd.name+" "), "%q prints the help: %s", args, r.stdout)
					}
				}
			}
		})
	}
	for _, flag := range []string{"--dir", "--postgres", "--server", "--token"} {
		for _, h := range []string{"--help", "-h"} {
			r := cliRun(t, "", flag, h, "conversations")
			requireOK(t, r)
			require.True(t, strings.HasPrefix(r.stdout, "lazarus is the operator's tool"), "%s %s prints the main help: %s", flag, h, r.stdout)
		}
	}
	// With "=" it is the value: send reaches its own checks.
	r := cliRun(t, "", "send", "--to=--help", "--request-id=-h", "hi")
	require.Equal(t, exitUsage, r.code, r.stderr)
	require.Contains(t, r.stderr, "send needs a live node")
	require.Empty(t, r.stdout)
}

// TestHelpAfterABadTopLevelFlag: a top-level flag lazarus does not define
// (or a bad value) before COMMAND --help, -h or help COMMAND still prints
// the command's help on stdout with status 0, as the package documents
// ("whatever flags come before it"; the flag package stopped at the bad
// flag, and it was a usage error, status 2); --help with no command
// before it (a bad value of its own included) prints the main help. Without a help, or with it after "--", the bad
// flag is the usage error.
func TestHelpAfterABadTopLevelFlag(t *testing.T) {
	for _, cmd := range commands {
		t.Run(cmd.name, func(t *testing.T) {
			for _, args := range [][]string{
				{"--nope", cmd.name, "--help"},
				{"--nope", "x", cmd.name, "-h"},
				{"--dir", t.TempDir(), "--nope", cmd.name, "--json=maybe", "-help=true"},
				{"--nope", "help", cmd.name},
			} {
				r := cliRun(t, "", args...)
				requireOK(t, r)
				require.True(t, strings.HasPrefix(r.stdout, "Usage: lazarus "+cmd.name+" "), "%q prints the help: %s", args, r.stdout)
			}
			for _, args := range [][]string{{"--nope", cmd.name}, {"--nope", cmd.name, "--", "--help"}} {
				r := cliRun(t, "", args...)
				require.Equal(t, exitUsage, r.code, "%q: %s", args, r.stderr)
				require.Contains(t, r.stderr, "lazarus: flag provided but not defined: -nope")
				require.Empty(t, r.stdout)
			}
		})
	}
	for _, args := range [][]string{{"--nope", "--help"}, {"--nope", "help"}, {"-h", "--nope"}, {"-help=maybe", "send", "--help"}} {
		r := cliRun(t, "", args...)
		requireOK(t, r)
		require.True(t, strings.HasPrefix(r.stdout, "lazarus is the operator's tool"), "%q prints the main help: %s", args, r.stdout)
	}
	r := cliRun(t, "", "--nope", "help", "bogus")
	require.Equal(t, exitUsage, r.code)
	require.Contains(t, r.stderr, `unknown command "bogus"`)
}
