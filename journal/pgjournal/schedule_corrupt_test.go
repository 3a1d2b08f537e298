package pgjournal

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/pgjournal/pgtest"
	"github.com/lazarusrt/lazarus/messages"
)

// TestCorruptScheduleRows: a schedule row whose bytes name other ids than
// the row, or lack what every stored schedule holds (a next occurrence, a
// positive interval, a payload), is journal.ErrCorrupt on every read, as
// undecodable bytes are, and a fire of it writes nothing; such a record
// used to be returned as is (an interval of zero then divided by zero).
func TestCorruptScheduleRows(t *testing.T) {
	var conv, id string // each case's own
	good := func() *messages.Schedule {
		return &messages.Schedule{Id: id, ConversationId: conv, Next: timestamppb.New(time.Unix(1000, 0)),
			Every:   durationpb.New(time.Minute),
			Payload: &messages.UserMessage{Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: "tick"}}}}}
	}
	marshal := func(edit func(*messages.Schedule)) func() []byte {
		return func() []byte {
			sc := good()
			edit(sc)
			b, err := proto.Marshal(sc)
			require.NoError(t, err)
			return b
		}
	}
	dsn := pgtest.NewDatabase(t)
	s := open(t, dsn, Options{})
	conn, err := pgx.Connect(t.Context(), dsn)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	for name, value := range map[string]func() []byte{
		"garbage":       func() []byte { return []byte{0xFF, 0x01} },
		"other id":      marshal(func(sc *messages.Schedule) { sc.Id = "x" }),
		"other conv":    marshal(func(sc *messages.Schedule) { sc.ConversationId = "d" }),
		"no next":       marshal(func(sc *messages.Schedule) { sc.Next = nil }),
		"zero interval": marshal(func(sc *messages.Schedule) { sc.Every = &durationpb.Duration{} }),
		"no payload":    marshal(func(sc *messages.Schedule) { sc.Payload = nil }),
		"over the limit": func() []byte { // a good record, with an unknown field past the limit
			b := marshal(func(*messages.Schedule) {})()
			b = protowire.AppendTag(b, 1000, protowire.BytesType)
			return protowire.AppendBytes(b, make([]byte, journal.MaxRecordBytes+storedSlack))
		},
	} {
		t.Run(name, func(t *testing.T) {
			conv, id = "c "+name, "s "+name
			_, err := s.Append(t.Context(), &messages.AppendRequest{ConversationId: conv, Events: []*messages.Event{userEvent("hi")}})
			require.NoError(t, err)
			require.NoError(t, s.PutSchedule(t.Context(), good()))
			_, err = conn.Exec(t.Context(), "UPDATE lz_schedules SET data = $1 WHERE id = $2", value(), []byte(id))
			require.NoError(t, err)

			_, err = s.ConversationSchedules(t.Context(), conv)
			require.ErrorIs(t, err, journal.ErrCorrupt)
			_, err = s.Append(t.Context(), &messages.AppendRequest{ConversationId: conv, ExpectedLast: 1, Events: []*messages.Event{userEvent("wake")},
				ScheduleFire: &messages.ScheduleFire{ScheduleId: id, Occurrence: timestamppb.New(time.Unix(1000, 0)), Next: timestamppb.New(time.Unix(1060, 0))}})
			require.ErrorIs(t, err, journal.ErrCorrupt)
			last, err := s.LastSeq(t.Context(), conv)
			require.NoError(t, err)
			require.Equal(t, uint64(1), last, "nothing written")
		})
	}
}
