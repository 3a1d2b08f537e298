//go:build !race

package snapshot_test

import (
	"testing"

	"github.com/lazarusrt/lazarus/snapshot"
	"github.com/stretchr/testify/require"
)

// TestPerEventPathDoesNotAllocate pins what the conversation actor calls
// after every event: once the working set's view is current, asking for the
// last rendered event, the context, or whether a summary is due allocates
// nothing. (The race detector allocates on its own, hence the build tag.)
func TestPerEventPathDoesNotAllocate(t *testing.T) {
	w, err := snapshot.Rebuild(nil, serverTurns(30))
	require.NoError(t, err)
	due := snapshot.Policy{MaxEvents: 10, KeepRecent: 3}
	require.True(t, due.Due(w))
	notDue := snapshot.Policy{}
	require.False(t, notDue.Due(w))
	cases := []struct {
		name string
		f    func()
	}{
		{"LastRendered", func() { w.LastRendered() }},
		{"EndsWithUserMsg", func() { w.EndsWithUserMsg() }},
		{"Render", func() { w.Render() }},
		{"Due, not due", func() { notDue.Due(w) }},
		{"Due, due", func() { due.Due(w) }},
		{"SafePoint", func() { w.SafePoint(3) }},
		{"RewoundPastSummary", func() { w.RewoundPastSummary() }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			require.Zero(t, testing.AllocsPerRun(100, tc.f))
		})
	}
}
