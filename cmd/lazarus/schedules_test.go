package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent/scripted"
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
