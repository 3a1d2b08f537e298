package pebblejournal

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lazarusrt/lazarus/messages"
)

// TestScheduleTimesPagesWithoutHoldingTheStore: ScheduleTimes reads its
// index a page at a time and calls fn with nothing held, so fn may read
// the Store (it ran under the store's gate, where a Close waiting on the
// gate would deadlock a read from fn); every schedule comes once, in
// time order, across pages.
func TestScheduleTimesPagesWithoutHoldingTheStore(t *testing.T) {
	s := openMem(t, Options{})
	const convs, per = 5, 900 // more than one page
	for c := range convs {
		conv := fmt.Sprint("c", c)
		_, err := s.Append(ctx, &messages.AppendRequest{ConversationId: conv, Events: []*messages.Event{userEvent("hi")}})
		require.NoError(t, err)
		for i := range per {
			require.NoError(t, s.PutSchedule(ctx, &messages.Schedule{Id: fmt.Sprintf("s%d-%d", c, i), ConversationId: conv,
				Next:    timestamppb.New(time.Unix(int64(1000+i*convs+c), 0)),
				Payload: &messages.UserMessage{Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: "tick"}}}}}))
		}
	}
	require.Greater(t, convs*per, scheduleTimesPage)
	seen := map[string]bool{}
	var last time.Time
	reads := 0
	require.NoError(t, s.ScheduleTimes(ctx, func(conv, id string, next time.Time) error {
		require.False(t, seen[id], "%s twice", id)
		seen[id] = true
		require.False(t, next.Before(last), "in time order")
		last = next
		if len(seen)%1000 == 0 {
			scs, err := s.ConversationSchedules(ctx, conv) // a read from fn
			require.NoError(t, err)
			require.Len(t, scs, per)
			reads++
		}
		return nil
	}))
	require.Len(t, seen, convs*per)
	require.Positive(t, reads)
}
