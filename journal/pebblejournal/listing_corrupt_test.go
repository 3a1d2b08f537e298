package pebblejournal

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// TestDeadlinesPassOverACorruptKey: a deadline-by-time key that does not
// parse (cut short, an invalid time) is passed over: every other deadline
// is listed, in order and across pages, and Deadlines then returns
// journal.ErrCorrupt naming the first bad key and counting both, on every
// listing (the low-water mark does not move past a bad key). The listing
// used to stop at the first, so the expiry actor's rebuild failed and
// armed none of the node's deadlines.
func TestDeadlinesPassOverACorruptKey(t *testing.T) {
	s := openMem(t, Options{})
	base := time.Unix(10_000, 0)
	var want []string
	for i := range deadlinePage + 10 {
		id := fmt.Sprintf("t%04d", i)
		require.NoError(t, s.ScheduleDeadline(ctx, &messages.Deadline{ConversationId: "c", ToolCallId: id, At: timestamppb.New(base.Add(time.Duration(i) * time.Second))}))
		want = append(want, id)
	}
	short := byTimeKey(timestamppb.New(base.Add(-time.Hour)), "x", "c")[:1+timeLen-4] // first of all
	badTime := appendID(appendID(appendTime([]byte{famDeadlineByTime}, base.Add(100*time.Second).Unix(), 1_500_000_000), "y"), "c")
	require.NoError(t, s.putRawForTesting(short, nil))
	require.NoError(t, s.putRawForTesting(badTime, nil))

	for range 2 { // the second listing starts from the low-water mark the first set
		var got []string
		err := s.Deadlines(ctx, time.Time{}, func(d *messages.Deadline) error {
			got = append(got, d.GetToolCallId())
			return nil
		})
		require.ErrorIs(t, err, journal.ErrCorrupt)
		require.Contains(t, err.Error(), keyString(short), "the error names the first bad key")
		require.Contains(t, err.Error(), "2 corrupt record(s)")
		require.Equal(t, want, got, "every other deadline, in order")
	}

	// Up to a time: the bad key before it is reported, the later one not.
	var got []string
	err := s.Deadlines(ctx, base.Add(5*time.Second), func(d *messages.Deadline) error {
		got = append(got, d.GetToolCallId())
		return nil
	})
	require.ErrorIs(t, err, journal.ErrCorrupt)
	require.Contains(t, err.Error(), "1 corrupt record(s)")
	require.Equal(t, want[:6], got)

	// fn's error stops the listing and is returned as is.
	stop := fmt.Errorf("stop")
	require.Equal(t, stop, s.Deadlines(ctx, time.Time{}, func(*messages.Deadline) error { return stop }))
}

// TestScheduleTimesPassOverACorruptKey: a schedule-by-time key that does
// not parse is passed over as a deadline's is: ScheduleTimes lists every
// other schedule in order, then returns journal.ErrCorrupt naming the key.
// It used to stop there, failing the expiry actor's rebuild.
func TestScheduleTimesPassOverACorruptKey(t *testing.T) {
	s := openMem(t, Options{})
	_, err := s.Append(ctx, &messages.AppendRequest{ConversationId: "c", Events: []*messages.Event{userEvent("hi")}})
	require.NoError(t, err)
	base := time.Unix(10_000, 0)
	var want []string
	for i := range 5 {
		id := fmt.Sprintf("s%d", i)
		require.NoError(t, s.PutSchedule(ctx, &messages.Schedule{Id: id, ConversationId: "c", Next: timestamppb.New(base.Add(time.Duration(i) * time.Minute)),
			Every:   durationpb.New(time.Hour),
			Payload: &messages.UserMessage{Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: "tick"}}}}}))
		want = append(want, id)
	}
	bad := appendID(appendTime([]byte{famScheduleByTime}, base.Add(90*time.Second).Unix(), 0), "z") // no conversation id
	require.NoError(t, s.putRawForTesting(bad, nil))

	var got []string
	err = s.ScheduleTimes(ctx, func(conv, id string, next time.Time) error {
		got = append(got, id)
		return nil
	})
	require.ErrorIs(t, err, journal.ErrCorrupt)
	require.Contains(t, err.Error(), keyString(bad))
	require.Contains(t, err.Error(), "1 corrupt record(s)")
	require.Equal(t, want, got)
}
