package pebblejournal

import (
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

func ownerTestSchedule(conv, id string, next int64) *messages.Schedule {
	return &messages.Schedule{Id: id, ConversationId: conv, Next: timestamppb.New(time.Unix(next, 0)),
		Payload: &messages.UserMessage{Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: "wake " + id}}}}}
}

// ownerKeys returns the keys of the retired schedule owner family, as
// schedule id -> conversation id.
func ownerKeys(t *testing.T, s *Store) map[string]string {
	t.Helper()
	out := map[string]string{}
	require.NoError(t, s.scan([]byte{famScheduleOwner}, familyEnd(famScheduleOwner), func(k, v []byte) error {
		id, rest, ok := decodeID(k[1:])
		require.True(t, ok)
		require.Empty(t, rest)
		out[id] = string(v)
		return nil
	}))
	return out
}

func requireSound(t *testing.T, s *Store) {
	t.Helper()
	rep, err := s.Check(ctx)
	require.NoError(t, err)
	require.True(t, rep.Sound(), "%v", rep.Problems)
}

// TestLegacyScheduleOwnerKeys: a store written while schedule ids were
// unique across the store holds an owner key (family 0x0e) per schedule.
// It stays readable and sound; another conversation may take an id such a
// key names; the delete, the replace and the last fire of a schedule
// remove its id's key; and a store without such keys never gets one.
func TestLegacyScheduleOwnerKeys(t *testing.T) {
	fs := vfs.NewMem()
	s, err := Open("db", Options{FS: fs})
	require.NoError(t, err)
	for _, conv := range []string{"a", "b"} {
		_, err := s.Append(ctx, &messages.AppendRequest{ConversationId: conv, Events: []*messages.Event{userEvent("hi")}})
		require.NoError(t, err)
	}
	require.NoError(t, s.PutSchedule(ctx, ownerTestSchedule("a", "daily", 100)))
	require.NoError(t, s.PutSchedule(ctx, ownerTestSchedule("a", "other", 200)))
	require.NoError(t, s.PutSchedule(ctx, ownerTestSchedule("b", "once", 300)))
	require.False(t, s.scheduleOwners)
	require.Empty(t, ownerKeys(t, s), "a store without owner keys gets none")
	// What the build that kept ids unique wrote besides.
	for id, conv := range map[string]string{"daily": "a", "other": "a", "once": "b"} {
		require.NoError(t, s.putRawForTesting(scheduleOwnerKey(id), []byte(conv)))
	}
	require.NoError(t, s.Close())

	s, err = Open("db", Options{FS: fs})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	require.True(t, s.scheduleOwners)
	requireSound(t, s)

	// b takes the id an owner key gives to a.
	require.NoError(t, s.PutSchedule(ctx, ownerTestSchedule("b", "daily", 150)))
	got, err := s.ConversationSchedules(ctx, "a")
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Equal(t, "daily", got[0].GetId())
	require.Equal(t, int64(100), got[0].GetNext().GetSeconds(), "a's schedule is untouched")
	requireSound(t, s)

	// The replace of a schedule removes its id's key.
	require.NoError(t, s.PutSchedule(ctx, ownerTestSchedule("a", "other", 250)))
	require.Equal(t, map[string]string{"daily": "a", "once": "b"}, ownerKeys(t, s))
	// So do its delete (here b's daily: the key named a; nothing needs it)
	require.NoError(t, s.DeleteSchedule(ctx, "b", "daily"))
	require.Equal(t, map[string]string{"once": "b"}, ownerKeys(t, s))
	// and its last fire.
	_, err = s.Append(ctx, &messages.AppendRequest{ConversationId: "b", ExpectedLast: 1, Events: []*messages.Event{userEvent("wake")},
		ScheduleFire: &messages.ScheduleFire{ScheduleId: "once", Occurrence: timestamppb.New(time.Unix(300, 0))}})
	require.NoError(t, err)
	require.Empty(t, ownerKeys(t, s))
	requireSound(t, s)

	got, err = s.ConversationSchedules(ctx, "a")
	require.NoError(t, err)
	require.Len(t, got, 2, "a keeps both schedules")
	var times []string
	require.NoError(t, s.ScheduleTimes(ctx, func(conv, id string, _ time.Time) error {
		times = append(times, conv+"/"+id)
		return nil
	}))
	require.Equal(t, []string{"a/daily", "a/other"}, times)
	require.NoError(t, s.DeleteConversation(ctx, "a"))
	_, err = s.ConversationSchedules(ctx, "a")
	require.NoError(t, err)
	require.NoError(t, s.PutSchedule(ctx, ownerTestSchedule("b", "other", 500)))
	require.ErrorIs(t, s.PutSchedule(ctx, ownerTestSchedule("a", "other", 500)), journal.ErrDeleted)
	requireSound(t, s)
}
