package lazarus_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
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
