package pebblejournal

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// TestCorruptScheduleRecords: a schedule record whose bytes do not decode,
// decode to a record that disagrees with its key, or lost the fields every
// stored schedule has (its next occurrence, a positive interval, a payload)
// is reported by every read of it as journal.ErrCorrupt naming its key,
// never returned as a schedule (an interval of zero would divide by zero
// in the runtime's next occurrence).
func TestCorruptScheduleRecords(t *testing.T) {
	good := func() *messages.Schedule {
		return &messages.Schedule{Id: "s", ConversationId: "c", Next: timestamppb.New(time.Unix(1000, 0)),
			Every:   durationpb.New(time.Minute),
			Payload: &messages.UserMessage{Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: "tick"}}}}}
	}
	for name, value := range map[string][]byte{
		"garbage":       {0xFF, 0x01},
		"other id":      mustMarshal(func() *messages.Schedule { sc := good(); sc.Id = "x"; return sc }()),
		"other conv":    mustMarshal(func() *messages.Schedule { sc := good(); sc.ConversationId = "d"; return sc }()),
		"no next":       mustMarshal(func() *messages.Schedule { sc := good(); sc.Next = nil; return sc }()),
		"zero interval": mustMarshal(func() *messages.Schedule { sc := good(); sc.Every = &durationpb.Duration{}; return sc }()),
		"no payload":    mustMarshal(func() *messages.Schedule { sc := good(); sc.Payload = nil; return sc }()),
		"truncated":     mustMarshal(good())[:4],
	} {
		t.Run(name, func(t *testing.T) {
			s := openMem(t, Options{})
			_, err := s.Append(ctx, &messages.AppendRequest{ConversationId: "c", Events: []*messages.Event{userEvent("hi")}})
			require.NoError(t, err)
			require.NoError(t, s.PutSchedule(ctx, good()))
			k := idKey(famSchedule, "c", "s")
			require.NoError(t, s.putRawForTesting(k, value))

			_, err = s.ConversationSchedules(ctx, "c")
			require.ErrorIs(t, err, journal.ErrCorrupt)
			require.Contains(t, err.Error(), keyString(k), "the error names the key")
			err = s.DeleteSchedule(ctx, "c", "s")
			require.ErrorIs(t, err, journal.ErrCorrupt)
			err = s.PutSchedule(ctx, good())
			require.ErrorIs(t, err, journal.ErrCorrupt)
			_, err = s.Append(ctx, &messages.AppendRequest{ConversationId: "c", ExpectedLast: 1, Events: []*messages.Event{userEvent("wake")},
				ScheduleFire: &messages.ScheduleFire{ScheduleId: "s", Occurrence: timestamppb.New(time.Unix(1000, 0)), Next: timestamppb.New(time.Unix(1060, 0))}})
			require.ErrorIs(t, err, journal.ErrCorrupt)
			last, err := s.LastSeq(ctx, "c")
			require.NoError(t, err)
			require.Equal(t, uint64(1), last, "nothing written")
		})
	}
}

// TestCorruptEventWithoutBody: an event value cut after its seq (a valid
// protobuf record without a body, which no write stores) is journal.ErrCorrupt
// naming its key on the reads of the log, not an event handed to the model.
func TestCorruptEventWithoutBody(t *testing.T) {
	s := openMem(t, Options{})
	_, err := s.Append(ctx, &messages.AppendRequest{ConversationId: "c", Events: []*messages.Event{userEvent("hi"), userEvent("again")}})
	require.NoError(t, err)
	k := seqKey(famEvent, "c", 2)
	require.NoError(t, s.putRawForTesting(k, mustMarshal(&messages.Event{Seq: 2})))
	_, err = s.Events(ctx, "c", journal.EventQuery{})
	require.ErrorIs(t, err, journal.ErrCorrupt)
	require.Contains(t, err.Error(), keyString(k))
	_, _, err = s.LoadSince(ctx, "c")
	require.ErrorIs(t, err, journal.ErrCorrupt)
	evs, err := s.Events(ctx, "c", journal.EventQuery{Before: 2})
	require.NoError(t, err, "the events before it still read")
	require.Len(t, evs, 1)
}
