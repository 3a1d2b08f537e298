package pgjournal

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/pgjournal/pgtest"
	"github.com/lazarusrt/lazarus/messages"
)

// TestDeadlinesPassOverACorruptRow: a deadline row whose bytes do not
// decode, or decode to another call's deadline, is passed over: every
// other deadline is listed in order, and Deadlines then returns
// journal.ErrCorrupt naming the first bad row and counting both. The
// listing used to stop at the first, so the expiry actor's rebuild failed
// and armed none of the node's deadlines.
func TestDeadlinesPassOverACorruptRow(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	s := open(t, dsn, Options{})
	conn, err := pgx.Connect(t.Context(), dsn)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	ctx := t.Context()
	base := time.Unix(10_000, 0)
	var want []string
	for i := range 6 {
		call := fmt.Sprintf("t%d", i)
		require.NoError(t, s.ScheduleDeadline(ctx, &messages.Deadline{ConversationId: "c", ToolCallId: call, At: timestamppb.New(base.Add(time.Duration(i) * time.Second))}))
		if i != 1 && i != 4 {
			want = append(want, call)
		}
	}
	_, err = conn.Exec(ctx, "UPDATE lz_deadlines SET data = $1 WHERE call = $2", []byte{0xFF, 0x01}, []byte("t1"))
	require.NoError(t, err)
	other, err := proto.Marshal(&messages.Deadline{ConversationId: "c", ToolCallId: "other", At: timestamppb.New(base)})
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "UPDATE lz_deadlines SET data = $1 WHERE call = $2", other, []byte("t4"))
	require.NoError(t, err)

	var got []string
	err = s.Deadlines(ctx, time.Time{}, func(d *messages.Deadline) error {
		got = append(got, d.GetToolCallId())
		return nil
	})
	require.ErrorIs(t, err, journal.ErrCorrupt)
	require.Contains(t, err.Error(), `deadline of "t1" in "c"`, "the error names the first bad row")
	require.Contains(t, err.Error(), "2 corrupt record(s)")
	require.Equal(t, want, got, "every other deadline, in order")

	// Up to a time before the second bad row: only the first is reported.
	got = nil
	err = s.Deadlines(ctx, base.Add(3*time.Second), func(d *messages.Deadline) error {
		got = append(got, d.GetToolCallId())
		return nil
	})
	require.ErrorIs(t, err, journal.ErrCorrupt)
	require.Contains(t, err.Error(), "1 corrupt record(s)")
	require.Equal(t, []string{"t0", "t2", "t3"}, got)

	// fn's error stops the listing and is returned as is.
	stop := fmt.Errorf("stop")
	require.Equal(t, stop, s.Deadlines(ctx, time.Time{}, func(*messages.Deadline) error { return stop }))
}

// TestScheduleTimesPassOverACorruptRow: a by-time row no write could have
// stored (nanoseconds out of range, an empty conversation id) is passed
// over as a deadline row is: ScheduleTimes lists every other schedule in
// order, then returns journal.ErrCorrupt naming the first bad row and
// counting both. The rows used to be listed as they stood, the first at a
// time carried into the next second.
func TestScheduleTimesPassOverACorruptRow(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	s := open(t, dsn, Options{})
	conn, err := pgx.Connect(t.Context(), dsn)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	ctx := t.Context()
	_, err = s.Append(ctx, &messages.AppendRequest{ConversationId: "c", Events: []*messages.Event{userEvent("hi")}})
	require.NoError(t, err)
	base := time.Unix(10_000, 0)
	var want []string
	for i := range 5 {
		id := fmt.Sprintf("s%d", i)
		require.NoError(t, s.PutSchedule(ctx, &messages.Schedule{Id: id, ConversationId: "c", Next: timestamppb.New(base.Add(time.Duration(i) * time.Minute)),
			Every:   durationpb.New(time.Hour),
			Payload: &messages.UserMessage{Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: "tick"}}}}}))
		if i != 1 && i != 3 {
			want = append(want, id)
		}
	}
	_, err = conn.Exec(ctx, "UPDATE lz_schedules SET next_n = 1500000000 WHERE id = $1", []byte("s1"))
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "UPDATE lz_schedules SET conv = ''::bytea WHERE id = $1", []byte("s3"))
	require.NoError(t, err)

	var got []string
	err = s.ScheduleTimes(ctx, func(conv, id string, next time.Time) error {
		require.Equal(t, "c", conv)
		got = append(got, id)
		return nil
	})
	require.ErrorIs(t, err, journal.ErrCorrupt)
	require.Contains(t, err.Error(), `schedule time of "s1"`, "the error names the first bad row")
	require.Contains(t, err.Error(), "2 corrupt record(s)")
	require.Equal(t, want, got, "every other schedule, in order")
}
