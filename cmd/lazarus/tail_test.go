package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/pebblejournal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/server"
)

// syncBuffer is a bytes.Buffer safe for one writer and one reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startTail runs the CLI with args in the background; the returned
// function waits (bounded) for its exit status.
func startTail(t *testing.T, args ...string) (stdout, stderr *syncBuffer, exit func() int) {
	t.Helper()
	stdout, stderr = &syncBuffer{}, &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- newCLI(strings.NewReader(""), stdout, stderr).run(ctx, args)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return stdout, stderr, func() int {
		t.Helper()
		select {
		case code := <-done:
			done <- code // for the cleanup
			return code
		case <-time.After(wait):
			t.Fatalf("tail did not exit within %v; stdout:\n%s\nstderr:\n%s", wait, stdout, stderr)
			return -1
		}
	}
}

// openWhenFree opens the directory's store, retrying while a poll of tail
// holds it.
func openWhenFree(t *testing.T, dir string) journal.Store {
	t.Helper()
	var (
		st  journal.Store
		err error
	)
	require.Eventually(t, func() bool {
		st, err = pebblejournal.Open(dir, pebblejournal.Options{})
		return err == nil || !isLocked(err)
	}, wait, time.Millisecond)
	require.NoError(t, err)
	return st
}

func userMsg(text string) *messages.Event {
	return &messages.Event{Time: journal.Timestamp(time.Now()), Body: &messages.Event_UserMsg{UserMsg: &messages.UserMessage{
		Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: text}}},
	}}}
}

func TestTail(t *testing.T) {
	f := newFixture(t)

	t.Run("from a seq, then stop after max", func(t *testing.T) {
		r := cliRun(t, "", "tail", "waiting", "--dir", f.dir, "--from", "1", "--max", "2")
		requireOK(t, r)
		lines := outLines(r.stdout)
		require.Len(t, lines, 2)
		require.Regexp(t, `^\s+2  .*assistant_msg`, lines[0])
		require.Regexp(t, `^\s+3  .*tool_call`, lines[1])
	})

	t.Run("follows events written between polls", func(t *testing.T) {
		stdout, stderr, exit := startTail(t, "tail", "waiting", "--dir", f.dir, "--interval", "2ms", "--max", "9")
		require.Eventually(t, func() bool { return strings.Contains(stdout.String(), "suspension") }, wait, time.Millisecond)
		require.Len(t, outLines(stdout.String()), 7, "the backlog: the whole short log")

		st := openWhenFree(t, f.dir)
		_, err := st.Append(ctxT(t), &messages.AppendRequest{ConversationId: "waiting", ExpectedLast: 7,
			Events: []*messages.Event{userMsg("still there?"), userMsg("hello?")}})
		require.NoError(t, err)
		require.NoError(t, st.Close())

		require.Equal(t, exitOK, exit(), stderr.String())
		lines := outLines(stdout.String())
		require.Len(t, lines, 9)
		require.Regexp(t, `^\s+8  .*user_msg\s+"still there\?"$`, lines[7])
		require.Regexp(t, `^\s+9  .*user_msg\s+"hello\?"$`, lines[8])
	})

	t.Run("json lines", func(t *testing.T) {
		r := cliRun(t, "", "tail", "waiting", "--dir", f.dir, "--json", "--from", "8", "--max", "1")
		requireOK(t, r)
		require.Regexp(t, `^\{"seq":"9","time":"[^"]+","user_msg":\{"content":\[\{"text":"hello\?"\}\]\}\}\n$`, r.stdout)
	})

	t.Run("stops when a runtime takes the directory", func(t *testing.T) {
		stdout, stderr, exit := startTail(t, "tail", "waiting", "--dir", f.dir, "--interval", "2ms", "--grace", "20ms")
		require.Eventually(t, func() bool { return strings.Contains(stdout.String(), "hello?") }, wait, time.Millisecond)
		var (
			rt  *lazarus.Runtime
			err error
		)
		require.Eventually(t, func() bool {
			rt, err = lazarus.Open(lazarus.Options{Dir: f.dir, Model: scripted.New(scripted.Options{}), Tools: tools(), NoResume: true})
			return err == nil || !isLocked(err)
		}, wait, time.Millisecond)
		require.NoError(t, err)
		defer func() { require.NoError(t, rt.Close()) }()
		require.Equal(t, exitBusy, exit())
		require.Contains(t, stderr.String(), "held for 20ms or more: cannot follow waiting")
		require.Contains(t, stderr.String(), "use Runtime.Subscribe in the runtime's process")
	})

	t.Run("unknown conversation", func(t *testing.T) {
		r := cliRun(t, "", "tail", "nobody", "--dir", f.dir)
		require.Equal(t, exitNotFound, r.code)
		require.Contains(t, r.stderr, "no conversation nobody")
	})
}

func TestTailStopsOnInterrupt(t *testing.T) {
	f := newFixture(t)
	stdout, stderr := &syncBuffer{}, &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- newCLI(strings.NewReader(""), stdout, stderr).run(ctx, []string{"tail", "finished", "--dir", f.dir, "--interval", "1h"})
	}()
	require.Eventually(t, func() bool { return len(outLines(stdout.String())) == 5 }, wait, time.Millisecond)
	cancel()
	select {
	case code := <-done:
		require.Equal(t, exitOK, code)
		require.Empty(t, stderr.String())
	case <-time.After(wait):
		t.Fatal("tail did not stop")
	}
	// The directory is free: tail holds it only during a poll.
	requireOK(t, cliRun(t, "", "stats", "--dir", f.dir))
}

// TestTailServerFromPastTheLog: tail --server --from a seq the log has not
// reached waits for the log to pass it, as tail on a directory does: the
// node refuses a stream that starts past the log's end, so tail starts it
// at the end and skips what is not after --from.
func TestTailServerFromPastTheLog(t *testing.T) {
	ctx := ctxT(t)
	m := server.NewMetrics()
	rt, err := lazarus.Open(lazarus.Options{Model: scripted.New(scripted.Options{}), IdleTimeout: -1, Metrics: m.Hooks()})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, rt.Close()) })
	tokens, err := server.NewBearerTokens(map[string]agent.Identity{"ops-token": {UserID: "ops", Roles: []string{"operator"}}})
	require.NoError(t, err)
	node := httptest.NewServer(server.New(rt, server.Options{Authenticator: tokens, Metrics: m}))
	t.Cleanup(node.Close)
	_, err = rt.SendAndWait(ctx, "c1", "hi", agent.SystemScope)
	require.NoError(t, err)
	last, err := rt.Store().LastSeq(ctx, "c1")
	require.NoError(t, err)

	done := make(chan result, 1)
	go func() {
		done <- cliCtx(ctx, "tail", "c1", "--from", strconv.FormatUint(last+1, 10), "--max", "1", "--json",
			"--server", node.URL, "--token", "ops-token")
	}()
	subscriptions := func(c *assert.CollectT) float64 {
		mfs, err := m.Registry().Gather()
		require.NoError(c, err)
		for _, mf := range mfs {
			if mf.GetName() == "lazarus_subscriptions" {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		return 0
	}
	var early *result
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		select {
		case r := <-done:
			early = &r
		default:
			assert.Equal(c, float64(1), subscriptions(c))
		}
	}, wait, time.Millisecond)
	require.Nil(t, early, "tail ended before the log passed --from")

	_, err = rt.SendAndWait(ctx, "c1", "again", agent.SystemScope)
	require.NoError(t, err)
	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		t.Fatal("tail did not end")
	}
	requireOK(t, r)
	require.Equal(t, 1, strings.Count(r.stdout, "\n"), "%s", r.stdout)
	require.Contains(t, r.stdout, fmt.Sprintf(`"seq":"%d"`, last+2))
}
