package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/pebblejournal"
	"github.com/lazarusrt/lazarus/messages"
)

// deadlinesIn lists the deadline records of a store directory.
func deadlinesIn(t *testing.T, dir string) map[string]time.Time {
	t.Helper()
	st, err := pebblejournal.Open(dir, pebblejournal.Options{})
	require.NoError(t, err)
	defer func() { require.NoError(t, st.Close()) }()
	out := map[string]time.Time{}
	require.NoError(t, st.Deadlines(ctxT(t), time.Time{}, func(d *messages.Deadline) error {
		out[d.GetToolCallId()] = d.GetAt().AsTime()
		return nil
	}))
	return out
}

func TestReschedule(t *testing.T) {
	f := newFixture(t)
	now := time.Date(2030, 5, 1, 12, 0, 0, 0, time.UTC)

	r := cliAt(t, now, "reschedule", f.waitingCall, "--dir", f.dir, "--in", "48h")
	requireOK(t, r)
	require.Contains(t, r.stdout, "now expires at")
	want := now.Add(48 * time.Hour)
	require.True(t, want.Equal(readCall(t, f.dir, f.waitingCall).GetDeadline().AsTime()), "the row holds the new deadline")
	require.True(t, want.Equal(deadlinesIn(t, f.dir)[f.waitingCall]), "the deadline record too")

	at := time.Date(2031, 1, 2, 3, 4, 5, 0, time.UTC)
	requireOK(t, cliRun(t, "", "reschedule", f.waitingCall, "--dir", f.dir, "--at", at.Format(time.RFC3339)))
	require.True(t, at.Equal(readCall(t, f.dir, f.waitingCall).GetDeadline().AsTime()))

	r = cliRun(t, "", "reschedule", f.waitingCall, "--dir", f.dir, "--never")
	requireOK(t, r)
	require.Contains(t, r.stdout, "never expires")
	require.Nil(t, readCall(t, f.dir, f.waitingCall).GetDeadline())
	require.NotContains(t, deadlinesIn(t, f.dir), f.waitingCall)
	require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING, readCall(t, f.dir, f.waitingCall).GetStatus())

	t.Run("usage", func(t *testing.T) {
		for name, args := range map[string][]string{
			"no deadline":  {"reschedule", f.waitingCall, "--dir", f.dir},
			"two of them":  {"reschedule", f.waitingCall, "--dir", f.dir, "--never", "--in", "1h"},
			"bad time":     {"reschedule", f.waitingCall, "--dir", f.dir, "--at", "tomorrow"},
			"out of range": {"reschedule", f.waitingCall, "--dir", f.dir, "--at", "0000-01-01T00:00:00Z"},
		} {
			r := cliRun(t, "", args...)
			require.Equal(t, exitUsage, r.code, name)
		}
		require.Nil(t, readCall(t, f.dir, f.waitingCall).GetDeadline(), "nothing written")
	})
	t.Run("an answered call is stale", func(t *testing.T) {
		r := cliRun(t, "", "reschedule", f.answeredCall, "--dir", f.dir, "--in", "1h")
		require.Equal(t, exitStale, r.code)
		require.Equal(t, "stale\n", r.stdout)
	})
	t.Run("an unknown call is stale", func(t *testing.T) {
		r := cliRun(t, "", "reschedule", "tc-nope", "--dir", f.dir, "--in", "1h")
		require.Equal(t, exitStale, r.code)
		require.Contains(t, r.stderr, "no tool call tc-nope")
	})
	t.Run("a server call has no deadline", func(t *testing.T) {
		st, err := pebblejournal.Open(f.dir, pebblejournal.Options{})
		require.NoError(t, err)
		evs, err := st.Events(ctxT(t), "waiting", journal.EventQuery{})
		require.NoError(t, err)
		require.NoError(t, st.Close())
		r := cliRun(t, "", "reschedule", evs[2].GetToolCall().GetCall().GetId(), "--dir", f.dir, "--in", "1h")
		require.Equal(t, exitError, r.code)
		require.Contains(t, r.stderr, "it has no deadline")
	})

	// A deadline moved into the past: the next runtime expires the call
	// as soon as it opens the directory.
	requireOK(t, cliRun(t, "", "reschedule", f.waitingCall, "--dir", f.dir, "--in", "-1m"))
	model := scripted.New(scripted.Options{})
	model.Push("waiting", scripted.Text("Nobody approved in time."))
	rt, err := lazarus.Open(lazarus.Options{Dir: f.dir, Model: model, Tools: tools(), IdleTimeout: -1})
	require.NoError(t, err)
	defer func() { require.NoError(t, rt.Close()) }()
	awaitEvent(t, rt, "waiting", func(ev *messages.Event) bool { return assistantText(ev) == "Nobody approved in time." })
	row, err := rt.Store().ToolCall(ctxT(t), f.waitingCall)
	require.NoError(t, err)
	require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_EXPIRED, row.GetStatus())
}

// TestRescheduleAtTheFirstInstant: --at takes a time, and the first
// instant of year 1 is one, in the past: the call expires as soon as a
// runtime opens the directory, as any past --at makes it. (It was read as
// Go's zero time, which Runtime.Reschedule takes for "no deadline": the
// command printed "never expires" and removed the deadline.)
func TestRescheduleAtTheFirstInstant(t *testing.T) {
	f := newFixture(t)
	r := cliRun(t, "", "reschedule", f.waitingCall, "--dir", f.dir, "--at", "0001-01-01T00:00:00Z")
	requireOK(t, r)
	require.Contains(t, r.stdout, "now expires at")
	first := time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)
	deadline := readCall(t, f.dir, f.waitingCall).GetDeadline()
	require.NotNil(t, deadline, "the call keeps a deadline")
	require.True(t, first.Equal(deadline.AsTime()), "the row holds the time given: %v", deadline.AsTime())
	require.True(t, first.Equal(deadlinesIn(t, f.dir)[f.waitingCall]), "the deadline record too")

	model := scripted.New(scripted.Options{})
	model.Push("waiting", scripted.Text("Nobody approved in time."))
	rt, err := lazarus.Open(lazarus.Options{Dir: f.dir, Model: model, Tools: tools(), IdleTimeout: -1})
	require.NoError(t, err)
	defer func() { require.NoError(t, rt.Close()) }()
	awaitEvent(t, rt, "waiting", func(ev *messages.Event) bool { return assistantText(ev) == "Nobody approved in time." })
	row, err := rt.Store().ToolCall(ctxT(t), f.waitingCall)
	require.NoError(t, err)
	require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_EXPIRED, row.GetStatus(), "the next runtime expires the call")
}
