package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/server"
)

// TestScheduleListBoundedByBytes: a listing of a conversation's schedules
// holds, in id order, those after its cursor whose JSON fits
// Options.MaxPageBytes, at least one, and its next_cursor resumes after the
// last it holds: paging reads every schedule once; the last page has no
// next_cursor (a listing that fits is one page, its body as before
// paging). A bad cursor is 400 invalid.
func TestScheduleListBoundedByBytes(t *testing.T) {
	big := strings.Repeat("x", 1000)
	// Two schedules' JSON fit, a third does not.
	n := startNode(t, newScripted(), server.Options{MaxPageBytes: 2500})
	conv := n.create(t, tokAlice, nil)
	path := "/v1/conversations/" + conv.ID + "/schedules"
	for i := range 5 {
		n.must(t, http.StatusCreated, "POST", path, tokAlice,
			server.CreateSchedule{ID: fmt.Sprintf("s%d", i), After: "1h", Text: big}, nil)
	}

	var ids []string
	var sizes []int
	next := path
	for {
		var page server.ScheduleList
		n.must(t, http.StatusOK, "GET", next, tokAlice, nil, &page)
		require.NotEmpty(t, page.Schedules, "every page makes progress")
		bytes := 0
		for _, sc := range page.Schedules {
			b, err := json.Marshal(sc)
			require.NoError(t, err)
			bytes += len(b)
			ids = append(ids, sc.ID)
		}
		require.LessOrEqual(t, bytes, 2500, "the page's schedules fit MaxPageBytes")
		sizes = append(sizes, len(page.Schedules))
		if page.NextCursor == "" {
			break
		}
		require.Equal(t, page.Schedules[len(page.Schedules)-1].ID, page.NextCursor)
		next = path + "?cursor=" + url.QueryEscape(page.NextCursor)
	}
	require.Equal(t, []string{"s0", "s1", "s2", "s3", "s4"}, ids, "every schedule once, by id")
	require.Equal(t, []int{2, 2, 1}, sizes)

	// A cursor need not name a schedule: the page starts after it.
	page := server.ScheduleList{}
	n.must(t, http.StatusOK, "GET", path+"?cursor=s2a", tokAlice, nil, &page)
	require.Equal(t, "s3", page.Schedules[0].ID)
	status, body := n.call(t, "GET", path+"?cursor=s9", tokAlice, nil)
	require.Equal(t, http.StatusOK, status, "%s", body)
	require.JSONEq(t, `{"schedules":[]}`, string(body))
	status, body = n.call(t, "GET", path+"?cursor="+strings.Repeat("a", 300), tokAlice, nil)
	require.Equal(t, http.StatusBadRequest, status, "%s", body)
	require.Contains(t, string(body), `"invalid"`)

	// A bound below one schedule still returns one a page.
	one := startNode(t, newScripted(), server.Options{MaxPageBytes: 1})
	conv = one.create(t, tokAlice, nil)
	path = "/v1/conversations/" + conv.ID + "/schedules"
	for _, id := range []string{"a", "b"} {
		one.must(t, http.StatusCreated, "POST", path, tokAlice, server.CreateSchedule{ID: id, After: "1h", Text: "x"}, nil)
	}
	page = server.ScheduleList{}
	one.must(t, http.StatusOK, "GET", path, tokAlice, nil, &page)
	require.Len(t, page.Schedules, 1)
	require.Equal(t, "a", page.NextCursor)
	page = server.ScheduleList{}
	one.must(t, http.StatusOK, "GET", path+"?cursor=a", tokAlice, nil, &page)
	require.Len(t, page.Schedules, 1)
	require.Equal(t, "b", page.Schedules[0].ID)
	require.Empty(t, page.NextCursor)
}
