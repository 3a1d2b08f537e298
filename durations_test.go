package lazarus_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
)

// TestOpenRefusesHugeSubscriberBuffer: a SubscriberBuffer above
// MaxSubscriberBuffer is refused by Open with ErrInvalid, as Options says;
// it was taken, and in a cluster a subscription to a conversation another
// member owns made a channel of that size (math.MaxInt panics in make).
func TestOpenRefusesHugeSubscriberBuffer(t *testing.T) {
	for _, n := range []int{math.MaxInt, 1 << 40, lazarus.MaxSubscriberBuffer + 1} {
		_, err := lazarus.Open(lazarus.Options{Model: scripted.New(scripted.Options{}), SubscriberBuffer: n})
		require.ErrorIs(t, err, journal.ErrInvalid, "%d", n)
		require.ErrorContains(t, err, "Options.SubscriberBuffer")
	}
	rt, err := lazarus.Open(lazarus.Options{Model: scripted.New(scripted.Options{}), SubscriberBuffer: lazarus.MaxSubscriberBuffer})
	require.NoError(t, err, "MaxSubscriberBuffer itself is taken")
	require.NoError(t, rt.Close())
}

// TestScheduleBeyond2262NeverFires: a schedule whose first occurrence is
// past the year 2262 (an At of the year 3000, an After or an Every of
// math.MaxInt64) is taken and listed, as ScheduleSpec says, and never
// fires; the runtime's int64 nanoseconds of such a time wrapped to the
// past, and it fired at once.
func TestScheduleBeyond2262NeverFires(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rt, model, clock := scheduleConversation(ctx, t, lazarus.Options{}, agent.Scope{UserID: "alice"})
	for _, spec := range []lazarus.ScheduleSpec{
		{At: time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC), Text: "at"},
		{After: math.MaxInt64, Text: "after"},
		{Every: math.MaxInt64, Text: "every"},
	} {
		_, err := rt.Schedule(ctx, "c", spec, agent.Scope{UserID: "alice"})
		require.NoError(t, err, spec.Text)
	}
	_, err := rt.Schedule(ctx, "c", lazarus.ScheduleSpec{After: 3 * time.Minute, Text: "soon"}, agent.Scope{UserID: "alice"})
	require.NoError(t, err)
	for i := 1; i <= 3; i++ {
		advanceWhenArmed(t, clock, schedT0.Add(time.Duration(i)*time.Minute))
	}
	require.NoError(t, model.WaitCalls(ctx, "c", 2), "the near one fires")
	require.Equal(t, []string{"soon"}, wakes(ctx, t, rt, "c"), "the far ones do not")
	listed, err := rt.Schedules(ctx, "c")
	require.NoError(t, err)
	require.Len(t, listed, 3)
}

// TestOpenRefusesClusterPortsOutOfRange: a Port or AutoManagedPort outside
// 0 to 65535 is refused by Open with ErrInvalid, as ClusterOptions says;
// the member's listen failed instead, with an error wrapping no sentinel.
func TestOpenRefusesClusterPortsOutOfRange(t *testing.T) {
	for name, o := range map[string]lazarus.ClusterOptions{
		"negative port": {Port: -1, AutoManagedPort: 7101, Seeds: []string{"127.0.0.1:7101"}},
		"huge port":     {Port: math.MaxInt, AutoManagedPort: 7101, Seeds: []string{"127.0.0.1:7101"}},
		"port 65536":    {Port: 65536, AutoManagedPort: 7101, Seeds: []string{"127.0.0.1:7101"}},
		"huge health":   {AutoManagedPort: 1 << 20, Seeds: []string{"127.0.0.1:7101"}},
	} {
		_, err := lazarus.Open(lazarus.Options{Model: scripted.New(scripted.Options{}), Cluster: &o})
		require.ErrorIs(t, err, journal.ErrInvalid, name)
		require.ErrorContains(t, err, "Port", name)
	}
}
