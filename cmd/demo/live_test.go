package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/providertest"
	"github.com/lazarusrt/lazarus/messages"
)

// TestLiveDemoOnAnOpenAICompatibleServer runs --model openai against a local
// server that answers every call with a streamed text: the demo kills the
// conversation mid-answer, restarts the runtime, and its checks hold.
func TestLiveDemoOnAnOpenAICompatibleServer(t *testing.T) {
	rs, err := providertest.Load("../../agent/openai/testdata/text.txt")
	require.NoError(t, err)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { providertest.Write(w, rs[0]) }))
	defer srv.Close()
	t.Setenv("OPENAI_BASE_URL", srv.URL)
	t.Setenv("OPENAI_API_KEY", "k")
	t.Setenv("OPENAI_MODEL", "local-model")
	var stdout, stderr bytes.Buffer
	code := cli(context.Background(), []string{"--model", "openai", "--dir", t.TempDir() + "/store"}, &stdout, &stderr)
	require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	assert.Contains(t, stdout.String(), "check: the log holds 2 questions and 2 answers")
}

func TestLiveDemoNeedsAModelName(t *testing.T) {
	t.Setenv("OPENAI_MODEL", "")
	var stdout, stderr bytes.Buffer
	assert.Equal(t, exitFailed, cli(context.Background(), []string{"--model", "openai"}, &stdout, &stderr))
	assert.Equal(t, exitUsage, cli(context.Background(), []string{"--model", "nope"}, &stdout, &stderr))
}

// TestLiveDemoRefusesADirectoryItCannotUse: --model openai holds --dir to
// the rules the flag documents for every demo: a directory that is not
// empty (here, an earlier live demo's store), or that cannot be created,
// is a usage error (status 2), said once, before any call to the model.
// The live demo used to open any --dir: on an earlier run's store it asked
// the model again and failed its check (status 1), and on a file it failed
// to open the store (status 1).
func TestLiveDemoRefusesADirectoryItCannotUse(t *testing.T) {
	rs, err := providertest.Load("../../agent/openai/testdata/text.txt")
	require.NoError(t, err)
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		calls.Add(1)
		providertest.Write(w, rs[0])
	}))
	defer srv.Close()
	t.Setenv("OPENAI_BASE_URL", srv.URL)
	t.Setenv("OPENAI_API_KEY", "k")
	t.Setenv("OPENAI_MODEL", "local-model")
	store := filepath.Join(t.TempDir(), "store")
	var stdout, stderr bytes.Buffer
	require.Equal(t, exitOK, cli(context.Background(), []string{"--model", "openai", "--dir", store}, &stdout, &stderr), "stderr:\n%s", stderr.String())
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	for dir, says := range map[string]string{store: "is not empty", file: "cannot be used", filepath.Join(file, "store"): "cannot be used"} {
		before := calls.Load()
		stdout.Reset()
		stderr.Reset()
		assert.Equal(t, exitUsage, cli(context.Background(), []string{"--model", "openai", "--dir", dir}, &stdout, &stderr), "--dir %s; stderr:\n%s", dir, stderr.String())
		assert.Contains(t, stderr.String(), "--dir "+dir+" ")
		assert.Contains(t, stderr.String(), says)
		assert.Equal(t, 1, strings.Count(stderr.String(), "demo:"), "said once:\n%s", stderr.String())
		assert.Equal(t, before, calls.Load(), "--dir %s: the model is not called", dir)
	}
}

// fakeOpenAI points --model openai at a local server that answers every
// call with a streamed text, and returns how many calls it served.
func fakeOpenAI(t *testing.T) *atomic.Int64 {
	t.Helper()
	rs, err := providertest.Load("../../agent/openai/testdata/text.txt")
	require.NoError(t, err)
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		calls.Add(1)
		providertest.Write(w, rs[0])
	}))
	t.Cleanup(srv.Close)
	t.Setenv("OPENAI_BASE_URL", srv.URL)
	t.Setenv("OPENAI_API_KEY", "k")
	t.Setenv("OPENAI_MODEL", "local-model")
	return &calls
}

// TestLiveDemoHonoursTheOutputFlags: the live demo follows the flags the
// package doc gives every demo. --quiet writes one line; --json the
// scripted demo's records (acts, steps, the durable events, the check, a
// summary, the result), without steps under --quiet too; --verbose the
// runtime's debug logs on stderr; --fast, which cannot apply (no pauses,
// the model's pace), is a usage error before any call to the model. The
// live demo used to ignore all four and print its narration and the
// model's stream whatever they said.
func TestLiveDemoHonoursTheOutputFlags(t *testing.T) {
	calls := fakeOpenAI(t)
	live := func(args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := cli(context.Background(), append([]string{"--model", "openai"}, args...), &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}

	code, out, errOut := live("--quiet")
	require.Equal(t, exitOK, code, "stderr:\n%s", errOut)
	assert.Equal(t, 1, strings.Count(out, "\n"), "--quiet: one line:\n%s", out)
	assert.True(t, strings.HasPrefix(out, "demo: live demo on openai: 1 check passed; 4 events, 2 questions and 2 answers; the answer was killed mid-stream and re-run;"), out)

	for _, quiet := range []bool{false, true} {
		args := []string{"--json"}
		if quiet {
			args = append(args, "--quiet")
		}
		code, out, errOut := live(args...)
		require.Equal(t, exitOK, code, "%q: stderr:\n%s", args, errOut)
		var recs []record
		for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
			var rec record
			require.NoError(t, json.Unmarshal([]byte(line), &rec), "%q: every line is a record: %s", args, line)
			recs = append(recs, rec)
		}
		kinds := map[string]int{}
		var events []string
		for _, r := range recs {
			kinds[r.Kind]++
			if r.Kind == "event" {
				events = append(events, r.Event)
			}
		}
		assert.Equal(t, 2, kinds["act"], "%q", args)
		assert.Equal(t, []string{"user_msg", "assistant_msg", "user_msg", "assistant_msg"}, events, "%q: the durable events", args)
		if quiet {
			assert.Zero(t, kinds["step"], "--json --quiet: no steps")
		} else {
			assert.Positive(t, kinds["step"], "--json: the narration as steps")
		}
		require.Equal(t, 1, kinds["check"], "%q", args)
		require.GreaterOrEqual(t, len(recs), 2)
		sum, res := recs[len(recs)-2], recs[len(recs)-1]
		require.Equal(t, "summary", sum.Kind, "%q", args)
		require.NotNil(t, sum.Summary)
		assert.Equal(t, summary{Events: 4, Conversations: 1, Revivals: []revival{}, Checks: 1, ElapsedMillis: sum.Summary.ElapsedMillis}, *sum.Summary, "%q", args)
		require.Equal(t, "result", res.Kind, "%q", args)
		require.NotNil(t, res.OK)
		assert.True(t, *res.OK, "%q", args)
	}

	code, _, errOut = live()
	require.Equal(t, exitOK, code, "stderr:\n%s", errOut)
	assert.NotContains(t, errOut, "level=DEBUG", "no debug logs without --verbose")
	code, _, errOut = live("--verbose")
	require.Equal(t, exitOK, code, "stderr:\n%s", errOut)
	assert.Contains(t, errOut, "level=DEBUG", "--verbose: the runtime's debug logs on stderr")

	before := calls.Load()
	code, out, errOut = live("--fast")
	assert.Equal(t, exitUsage, code, "stderr:\n%s", errOut)
	assert.Equal(t, 1, strings.Count(errOut, "--fast is for the scripted demo"), "said once:\n%s", errOut)
	assert.Empty(t, out)
	assert.Equal(t, before, calls.Load(), "--fast: the model is not called")
}

// TestLiveDemoShowsNoVoidText: the live demo's output of a streamed answer
// honours Update.Restart. After the kill (onDelta returns true), the
// killed call's leftover deltas are not shown: the Restart that voids
// them ends that, and the re-run's text follows; text shown before a
// Restart otherwise is marked void; an answer none of whose text was
// shown since the kill or the Restart (the killed call's, written before
// the kill stopped it) is shown whole. The live demo used to print every
// delta, so the killed call's rest ran into the re-run's answer
// (", world!Hello, world!").
func TestLiveDemoShowsNoVoidText(t *testing.T) {
	answer := func(seq uint64, text string) lazarus.Update {
		return lazarus.Update{Event: &messages.Event{Seq: seq, Body: &messages.Event_AssistantMsg{AssistantMsg: agent.Text(text)}}}
	}
	deltas := func(ds ...string) []lazarus.Update {
		var us []lazarus.Update
		for _, d := range ds {
			us = append(us, lazarus.Update{Delta: d})
		}
		return us
	}
	cancelled := lazarus.Update{Restart: true, TurnEnd: &actors.TurnEnd{Outcome: actors.TurnCancelled, Err: lazarus.ErrTurnCancelled}}
	show := func(onDelta func(string) bool, us ...lazarus.Update) string {
		ch := make(chan lazarus.Update, len(us))
		for _, u := range us {
			ch <- u
		}
		close(ch)
		var out bytes.Buffer
		l := &liveOut{w: &out, text: true}
		a, err := l.show(ch, onDelta)
		require.NoError(t, err)
		require.NotNil(t, a)
		return out.String()
	}
	killOnce := func() func(string) bool {
		killed := false
		return func(string) bool {
			if killed {
				return false
			}
			killed = true
			return true
		}
	}
	var us []lazarus.Update
	us = append(us, deltas("Hello", ", world", "!")...)
	us = append(us, cancelled)
	us = append(us, deltas("Hello", ", world", "!")...)
	us = append(us, answer(3, "Hello, world!"))
	out := show(killOnce(), us...)
	assert.True(t, strings.HasPrefix(out, "HelloHello, world!\n   [durable at seq 3:"), "the killed call's rest is dropped:\n%s", out)

	out = show(nil, us...)
	assert.True(t, strings.HasPrefix(out, "Hello, world!\n   [void: "), "text shown before a Restart is marked void:\n%s", out)
	assert.Contains(t, out, "again]\n   Hello, world!\n   [durable at seq 3:")

	us = append(deltas("Hello", ", world", "!"), answer(2, "Hello, world!"))
	out = show(killOnce(), us...)
	assert.True(t, strings.HasPrefix(out, "HelloHello, world!\n   [durable at seq 2:"), "the killed call's answer, durable, is shown whole:\n%s", out)

	us = append(deltas("Hello", ", world", "!"), cancelled, answer(2, "Hello, world!"))
	out = show(killOnce(), us...)
	assert.True(t, strings.HasPrefix(out, "HelloHello, world!\n   [durable at seq 2:"), "an answer none of whose text was shown is shown whole:\n%s", out)
}

// TestLiveDemoDropsTheKilledCallsText runs the live demo on the local
// server: after the kill's narration comes one answer, whole, and no
// leftover of the killed call's stream (the local server streams the
// whole answer at once, so the kill often comes after the killed call's
// answer was written: that answer is the one shown).
func TestLiveDemoDropsTheKilledCallsText(t *testing.T) {
	fakeOpenAI(t)
	var stdout, stderr bytes.Buffer
	require.Equal(t, exitOK, cli(context.Background(), []string{"--model", "openai"}, &stdout, &stderr), "stderr:\n%s", stderr.String())
	out := stdout.String()
	_, after, ok := strings.Cut(out, "the turn re-runs]\n   ")
	require.True(t, ok, out)
	assert.True(t, strings.HasPrefix(after, "Hello, world!\n   [durable at seq 2:"), "the answer alone:\n%s", out)
}

// TestLiveDemoGoesOnAfterAModelCallsRetry runs the live demo on a local
// server whose first answer is a 429 with Retry-After: the runtime makes
// the call again, the demo shows the retry and goes on, and its checks
// hold. The demo took the retry's update (its Err set) for the turn's
// failure and ended with status 1.
func TestLiveDemoGoesOnAfterAModelCallsRetry(t *testing.T) {
	rs, err := providertest.Load("../../agent/openai/testdata/text.txt")
	require.NoError(t, err)
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", "1")
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusTooManyRequests)
			// insufficient_quota: the client does not retry it itself.
			_, _ = w.Write([]byte(`{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}}`))
			return
		}
		providertest.Write(w, rs[0])
	}))
	t.Cleanup(srv.Close)
	t.Setenv("OPENAI_BASE_URL", srv.URL)
	t.Setenv("OPENAI_API_KEY", "k")
	t.Setenv("OPENAI_MODEL", "local-model")
	var stdout, stderr bytes.Buffer
	code := cli(context.Background(), []string{"--model", "openai"}, &stdout, &stderr)
	require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	out := stdout.String()
	assert.Contains(t, out, "[the model call failed (attempt 1: ")
	assert.Contains(t, out, "the runtime tries again in 1s]")
	assert.Contains(t, out, "check: the log holds 2 questions and 2 answers")
	assert.GreaterOrEqual(t, calls.Load(), int64(3), "the failed call, its retry and the later calls")
}
