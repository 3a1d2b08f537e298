package server_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/server"
)

// noSchedules is a Store that keeps no schedules: it has the methods of
// journal.Store only.
type noSchedules struct{ journal.Store }

// TestSchedulesOnAStoreWithoutThemAreUnsupported: on a Store that does
// not implement journal.ScheduleStore, the schedule routes answer 501
// unsupported (what the server is, not a failure of the request), with a
// fixed message that does not name the Store, as the package
// documentation and the OpenAPI document say.
func TestSchedulesOnAStoreWithoutThemAreUnsupported(t *testing.T) {
	store := noSchedules{memjournal.New(memjournal.Options{})}
	var _ journal.Store = store
	_, isScheduleStore := any(store).(journal.ScheduleStore)
	require.False(t, isScheduleStore)
	n := startNodeIn(t, "", newScripted(), server.Options{}, func(o *lazarus.Options) { o.Store = store })
	conv := n.create(t, tokAlice, nil)
	base := "/v1/conversations/" + conv.ID + "/schedules"
	for _, req := range []struct {
		method, path string
		body         any
	}{
		{"GET", base, nil},
		{"POST", base, map[string]any{"after": "1h", "text": "x"}},
		{"DELETE", base + "/s-1", nil},
	} {
		status, out := n.call(t, req.method, req.path, tokAlice, req.body)
		requireError(t, status, out, http.StatusNotImplemented, server.CodeUnsupported)
		require.NotContains(t, string(out), "noSchedules", "%s %s", req.method, req.path)
	}
	// Who may not see the conversation still gets its 404 first.
	status, out := n.call(t, "GET", base, tokBob, nil)
	requireError(t, status, out, http.StatusNotFound, server.CodeNotFound)
}
