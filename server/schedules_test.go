package server_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/server"
)

// TestSchedulesOverHTTP: the owner lists, creates and cancels a
// conversation's schedules; a schedule is stored with its author and next
// occurrence, fires as a user message that starts a turn, and a one-shot
// is gone once fired; a stranger sees none; bad bodies write
// nothing; an ended conversation takes none.
func TestSchedulesOverHTTP(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	n := startNode(t, model, server.Options{})
	conv := n.create(t, tokAlice, nil)
	path := "/v1/conversations/" + conv.ID + "/schedules"
	listed := func(t testingT, token string) []server.Schedule {
		t.Helper()
		var list server.ScheduleList
		n.must(t, http.StatusOK, "GET", path, token, nil, &list)
		require.NotNil(t, list.Schedules, "a list, never null")
		return list.Schedules
	}
	require.Empty(t, listed(t, tokAlice))

	// A daily one: stored with its author and next occurrence, listed,
	// hidden from a stranger, cancelled once.
	before := time.Now()
	var daily server.Schedule
	n.must(t, http.StatusCreated, "POST", path, tokAlice,
		server.CreateSchedule{ID: "daily", Cron: "0 9 * * *", TimeZone: "Europe/Paris", Text: "good morning"}, &daily)
	require.Equal(t, "daily", daily.ID)
	require.Equal(t, conv.ID, daily.ConversationID)
	require.Equal(t, "0 9 * * *", daily.Cron)
	require.Equal(t, "Europe/Paris", daily.TimeZone)
	require.Equal(t, "good morning", daily.Text)
	require.Equal(t, "alice", daily.Author.UserID)
	require.NotNil(t, daily.Next)
	require.True(t, daily.Next.After(before), "next %v", daily.Next)
	paris, err := time.LoadLocation("Europe/Paris")
	require.NoError(t, err)
	require.Equal(t, 9, daily.Next.In(paris).Hour())
	require.Equal(t, []server.Schedule{daily}, listed(t, tokAlice))
	require.Equal(t, []server.Schedule{daily}, listed(t, tokOlga), "an operator sees them")
	status, body := n.call(t, "GET", path, tokBob, nil)
	require.Equal(t, http.StatusNotFound, status, "%s", body)
	status, body = n.call(t, "DELETE", path+"/daily", tokBob, nil)
	require.Equal(t, http.StatusNotFound, status, "%s", body)
	require.Len(t, listed(t, tokAlice), 1, "a stranger cancelled it")
	n.must(t, http.StatusNoContent, "DELETE", path+"/daily", tokAlice, nil, nil)
	require.Empty(t, listed(t, tokAlice))
	status, body = n.call(t, "DELETE", path+"/daily", tokAlice, nil)
	require.Equal(t, http.StatusNotFound, status, "%s", body)
	require.Equal(t, server.CodeNotFound, errorCode(t, body))
	require.JSONEq(t, `{"error":{"code":"not_found","message":"no schedule \"daily\" in conversation \"`+conv.ID+`\""}}`,
		string(body), "a plain message, not the Store's")

	// A near one fires: its text is appended as alice's message, a turn
	// follows, and the one-shot is gone.
	model.Push(conv.ID, scripted.Text("pong"))
	st := n.stream(t, ctx, tokAlice, conv.ID, "")
	defer st.close()
	var near server.Schedule
	n.must(t, http.StatusCreated, "POST", path, tokAlice, server.CreateSchedule{After: "50ms", Text: "ping"}, &near)
	require.NotEmpty(t, near.ID)
	require.Empty(t, near.Every)
	untilTurnEnd(t, st, 0, "answered")
	evs := historyOf(t, n, tokAlice, conv.ID, "")
	require.Equal(t, []string{"u:ping", "a:pong"}, texts(evs))
	// No ScopeLoader on this node: the wake runs under the system's scope.
	require.Equal(t, "system", evs[0].GetAuthor().GetUserId())
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Empty(c, listed(c, tokAlice)) }, 10*time.Second, 5*time.Millisecond, "a one-shot is gone once fired")

	// A repeating one shows its interval.
	var every server.Schedule
	n.must(t, http.StatusCreated, "POST", path, tokAlice, server.CreateSchedule{ID: "hourly", Every: "1h", Text: "tick"}, &every)
	require.Equal(t, "1h0m0s", every.Every)
	n.must(t, http.StatusNoContent, "DELETE", path+"/hourly", tokOlga, nil, nil)
	// An interval may start after a delay (or at a time): its first occurrence.
	var delayed server.Schedule
	sent := time.Now()
	n.must(t, http.StatusCreated, "POST", path, tokAlice, server.CreateSchedule{ID: "later", After: "10m", Every: "1h", Text: "tick"}, &delayed)
	require.Equal(t, "1h0m0s", delayed.Every)
	require.NotNil(t, delayed.Next)
	require.False(t, delayed.Next.Before(sent.Add(10*time.Minute)), "next %v", delayed.Next)
	require.False(t, delayed.Next.After(time.Now().Add(10*time.Minute)), "next %v", delayed.Next)
	n.must(t, http.StatusNoContent, "DELETE", path+"/later", tokOlga, nil, nil)

	// Bad bodies: 400, nothing stored.
	last := n.lastSeq(t, ctx, conv.ID)
	for _, b := range []string{
		`{"text":""}`,
		`{"text":"no time"}`,
		`{"after":"soon","text":"x"}`,
		`{"every":"500ms","text":"x"}`,
		`{"after":"-1m","text":"x"}`,
		`{"at":"2000-01-01T00:00:00Z","text":"x"}`,
		`{"cron":"nonsense","text":"x"}`,
		`{"cron":"@daily","time_zone":"Nowhere/City","text":"x"}`,
		`{"after":"1m","cron":"@daily","text":"x"}`,
		`{"every":"1h","cron":"@daily","text":"x"}`,
		`{"after":"1m","time_zone":"UTC","text":"x"}`,
		`{"after":"1m","text":"x","extra":1}`,
		`{"id":"` + strings.Repeat("x", 300) + `","after":"1m","text":"x"}`,
		`not json`,
	} {
		status, body := n.call(t, "POST", path, tokAlice, b)
		require.Equal(t, http.StatusBadRequest, status, "%s: %s", b, body)
		require.Equal(t, server.CodeInvalid, errorCode(t, body), b)
	}
	require.Empty(t, listed(t, tokAlice))
	require.Equal(t, last, n.lastSeq(t, ctx, conv.ID))

	// An ended conversation takes no schedule.
	n.must(t, http.StatusOK, "POST", "/v1/conversations/"+conv.ID+"/end", tokAlice, nil, nil)
	status, body = n.call(t, "POST", path, tokAlice, server.CreateSchedule{After: "1m", Text: "x"})
	require.Equal(t, http.StatusConflict, status, "%s", body)
	require.Equal(t, server.CodeEnded, errorCode(t, body))
	require.Empty(t, listed(t, tokAlice))
}

// TestScheduleAtInThePastIsRefused: an "at" must be in the future, and the
// first instant of year 1 is not: 400 invalid, alone or before an
// "every", and nothing is stored. (It was read as Go's zero time, no at:
// with an every, a schedule every hour from now was created.)
func TestScheduleAtInThePastIsRefused(t *testing.T) {
	n := startNode(t, newScripted(), server.Options{})
	conv := n.create(t, tokAlice, nil)
	path := "/v1/conversations/" + conv.ID + "/schedules"
	for _, body := range []string{
		`{"at":"0001-01-01T00:00:00Z","text":"x"}`,
		`{"at":"0001-01-01T00:00:00Z","every":"1h","text":"x"}`,
		`{"at":"2001-01-01T00:00:00Z","every":"1h","text":"x"}`,
	} {
		status, out := n.call(t, "POST", path, tokAlice, body)
		require.Equal(t, http.StatusBadRequest, status, "%s: %s", body, out)
		require.Equal(t, server.CodeInvalid, errorCode(t, out), body)
	}
	var list server.ScheduleList
	n.must(t, http.StatusOK, "GET", path, tokAlice, nil, &list)
	require.Empty(t, list.Schedules, "nothing stored")
}

// TestScheduleZeroDurationsAreRefused: a given "every" must be at least a
// second and a given "after" a delay after now, so "0s" is bad input for
// either: 400 invalid, and nothing is stored. (Each was read as absent:
// an after and an every of "0s" made a one-shot, an every and an after
// of "0s" a schedule every interval from now.)
func TestScheduleZeroDurationsAreRefused(t *testing.T) {
	n := startNode(t, newScripted(), server.Options{})
	conv := n.create(t, tokAlice, nil)
	path := "/v1/conversations/" + conv.ID + "/schedules"
	for _, body := range []string{
		`{"after":"10m","every":"0s","text":"x"}`,
		`{"at":"2999-01-01T00:00:00Z","every":"0s","text":"x"}`,
		`{"after":"0s","every":"1h","text":"x"}`,
		`{"after":"0s","text":"x"}`,
		`{"every":"0s","text":"x"}`,
	} {
		status, out := n.call(t, "POST", path, tokAlice, body)
		require.Equal(t, http.StatusBadRequest, status, "%s: %s", body, out)
		require.Equal(t, server.CodeInvalid, errorCode(t, out), body)
	}
	var list server.ScheduleList
	n.must(t, http.StatusOK, "GET", path, tokAlice, nil, &list)
	require.Empty(t, list.Schedules, "nothing stored")
}
