package main

import (
	"bytes"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal/pebblejournal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/server"
)

func TestSchedules(t *testing.T) {
	dir := t.TempDir()
	rt, err := lazarus.Open(lazarus.Options{Dir: dir, Model: scripted.New(scripted.Options{}), IdleTimeout: -1})
	require.NoError(t, err)
	ctx := ctxT(t)
	_, err = rt.Send(ctx, "c", "hi", user)
	require.NoError(t, err)
	_, err = rt.Schedule(ctx, "c", lazarus.ScheduleSpec{ID: "daily", Cron: "0 9 * * *", TimeZone: "Europe/Paris", Text: "good morning"}, user)
	require.NoError(t, err)
	_, err = rt.Schedule(ctx, "c", lazarus.ScheduleSpec{ID: "tick", Every: time.Hour, Text: "tick"}, user)
	require.NoError(t, err)
	require.NoError(t, rt.Close())

	r := cliRun(t, "", "schedules", "c", "--dir", dir)
	requireOK(t, r)
	require.Contains(t, r.stdout, "daily")
	require.Contains(t, r.stdout, `cron "0 9 * * *" in Europe/Paris`)
	require.Contains(t, r.stdout, "every 1h0m0s")
	require.Contains(t, r.stdout, `"good morning"`)

	requireOK(t, cliRun(t, "", "schedules", "c", "--dir", dir, "--cancel", "daily"))
	r = cliRun(t, "", "schedules", "c", "--dir", dir)
	requireOK(t, r)
	require.NotContains(t, r.stdout, "daily")
	require.Contains(t, r.stdout, "tick")
	require.Equal(t, exitNotFound, cliRun(t, "", "schedules", "c", "--dir", dir, "--cancel", "daily").code)
	require.Equal(t, exitUsage, cliRun(t, "", "schedules", "--dir", dir).code)

	// No such conversation: exit 5, as for the other commands.
	r = cliRun(t, "", "schedules", "nobody", "--dir", dir)
	require.Equal(t, exitNotFound, r.code, r.stderr)
	require.Contains(t, r.stderr, "no conversation nobody")
	require.Empty(t, r.stdout)
	// A bad schedule id is a usage error, and nothing changes.
	r = cliRun(t, "", "schedules", "c", "--dir", dir, "--cancel", strings.Repeat("x", 1000))
	require.Equal(t, exitUsage, r.code, r.stderr)
	require.Contains(t, r.stderr, "schedule id")
	r = cliRun(t, "", "schedules", "c", "--dir", dir, "--cancel", "")
	require.Equal(t, exitUsage, r.code, r.stderr)
	r = cliRun(t, "", "schedules", "c", "--dir", dir)
	requireOK(t, r)
	require.Contains(t, r.stdout, "tick")
}

// TestSchedulesOnANode: with --server, schedules lists a conversation's
// schedules through the node's API, every page (here one schedule a page),
// printing what it prints offline on the same store, with the same exit
// statuses; --cancel removes one through the node (exit 5 for one the
// conversation does not have, and for a conversation the token does not
// see).
func TestSchedulesOnANode(t *testing.T) {
	f := newFixture(t)
	ctx := ctxT(t)
	local := cliRun(t, "", "schedules", "finished", "--dir", f.dir)
	requireOK(t, local)
	require.Len(t, outLines(local.stdout), 3, local.stdout)

	rt, err := lazarus.Open(lazarus.Options{Dir: f.dir, Model: scripted.New(scripted.Options{}), Tools: tools(), NoResume: true})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, rt.Close()) })
	tokens, err := server.NewBearerTokens(map[string]agent.Identity{
		"ops-token": {UserID: "ops", Roles: []string{"operator"}},
		"zoe-token": {UserID: "zoe"},
	})
	require.NoError(t, err)
	node := httptest.NewServer(server.New(rt, server.Options{Authenticator: tokens, MaxPageBytes: 1}))
	t.Cleanup(node.Close)
	remote := func(tok string, args ...string) result {
		var out, errb bytes.Buffer
		code := newCLI(strings.NewReader(""), &out, &errb).run(ctx, append(args, "--server", node.URL, "--token", tok))
		return result{out.String(), errb.String(), code}
	}

	r := remote("ops-token", "schedules", "finished")
	requireOK(t, r)
	require.Equal(t, local.stdout, r.stdout)

	r = remote("ops-token", "schedules", "nobody")
	require.Equal(t, exitNotFound, r.code, r.stderr)
	require.Contains(t, r.stderr, "no conversation nobody")
	require.Empty(t, r.stdout)
	r = remote("zoe-token", "schedules", "finished")
	require.Equal(t, exitNotFound, r.code, "a conversation the token does not see: %s", r.stderr)
	r = remote("zoe-token", "schedules", "finished", "--cancel", "finished-once")
	require.Equal(t, exitNotFound, r.code, r.stderr)

	r = remote("ops-token", "schedules", "finished", "--cancel", "finished-once")
	requireOK(t, r)
	require.Equal(t, "finished-once (conversation finished) cancelled\n", r.stdout)
	r = remote("ops-token", "schedules", "finished", "--cancel", "finished-once")
	require.Equal(t, exitNotFound, r.code, r.stderr)
	r = remote("ops-token", "schedules", "finished")
	requireOK(t, r)
	require.Len(t, outLines(r.stdout), 2, r.stdout)
	require.NotContains(t, r.stdout, "finished-once")
	left, err := rt.Schedules(ctx, "finished")
	require.NoError(t, err)
	require.Len(t, left, 2)

	// A bad schedule id is still a usage error, found before the node is
	// asked.
	r = remote("ops-token", "schedules", "finished", "--cancel", strings.Repeat("x", 1000))
	require.Equal(t, exitUsage, r.code, r.stderr)
}

// TestScheduleTextPartsJoinedByNewlines: a schedule whose message has
// several text parts (and an image, which has none) is printed with its
// parts joined by newlines, as the node's API shows it
// (lazarus.ScheduleText): offline and with --server the same line (offline
// joined them with nothing).
func TestScheduleTextPartsJoinedByNewlines(t *testing.T) {
	dir := t.TempDir()
	ctx := ctxT(t)
	rt, err := lazarus.Open(lazarus.Options{Dir: dir, Model: scripted.New(scripted.Options{}), IdleTimeout: -1})
	require.NoError(t, err)
	_, err = rt.Send(ctx, "c", "hi", user)
	require.NoError(t, err)
	_, err = rt.Schedule(ctx, "c", lazarus.ScheduleSpec{ID: "parts", Every: time.Hour, Text: "first"}, user)
	require.NoError(t, err)
	require.NoError(t, rt.Close())

	st, err := pebblejournal.Open(dir, pebblejournal.Options{})
	require.NoError(t, err)
	all, err := st.ConversationSchedules(ctx, "c")
	require.NoError(t, err)
	require.Len(t, all, 1)
	sc := all[0]
	sc.Payload.Content = []*messages.ContentPart{
		{Part: &messages.ContentPart_Text{Text: "first"}},
		{Part: &messages.ContentPart_Image{Image: &messages.Blob{MediaType: "image/png", Uri: "https://example.com/a.png"}}},
		{Part: &messages.ContentPart_Text{Text: "second"}},
	}
	require.NoError(t, st.PutSchedule(ctx, sc))
	require.NoError(t, st.Close())

	local := cliRun(t, "", "schedules", "c", "--dir", dir)
	requireOK(t, local)
	require.Contains(t, local.stdout, "\t\"first\\nsecond\"\n", "the parts joined by a newline, quoted")

	rt, err = lazarus.Open(lazarus.Options{Dir: dir, Model: scripted.New(scripted.Options{}), IdleTimeout: -1, NoResume: true})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, rt.Close()) })
	tokens, err := server.NewBearerTokens(map[string]agent.Identity{"ops-token": {UserID: "ops", Roles: []string{"operator"}}})
	require.NoError(t, err)
	node := httptest.NewServer(server.New(rt, server.Options{Authenticator: tokens}))
	t.Cleanup(node.Close)
	var out, errb bytes.Buffer
	code := newCLI(strings.NewReader(""), &out, &errb).run(ctx, []string{"schedules", "c", "--server", node.URL, "--token", "ops-token"})
	require.Equal(t, exitOK, code, errb.String())
	require.Equal(t, local.stdout, out.String(), "the node's listing prints as the store's")
}
