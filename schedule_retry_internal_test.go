package lazarus

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/lazarusrt/lazarus/actors/actorstest"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/messages"
)

// runRetry runs retryScheduleArm on a manual clock, stepping the clock
// past each wait it arms, and returns its result.
func runRetry(t *testing.T, ctx context.Context, read func(context.Context) (proto.Message, error), tell func(context.Context, proto.Message) error) error {
	t.Helper()
	clock := actorstest.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	done := make(chan error, 1)
	go func() { done <- retryScheduleArm(ctx, clock, read, tell) }()
	for {
		select {
		case err := <-done:
			return err
		case <-time.After(time.Millisecond):
		}
		if clock.Timers() > 0 {
			clock.Advance(scheduleRetryMax)
		}
	}
}

func TestRetryScheduleArmTellsTheRecordAsItIsThen(t *testing.T) {
	arm := &messages.ScheduleArm{ConversationId: "c", ScheduleId: "s"}
	disarm := &messages.ScheduleDisarm{ConversationId: "c", ScheduleId: "s"}
	reads, tells := 0, []proto.Message{}
	err := runRetry(t, context.Background(),
		func(context.Context) (proto.Message, error) {
			reads++
			if reads < 3 {
				return arm, nil
			}
			return disarm, nil // cancelled meanwhile: the owner must hear that, not the arm
		},
		func(_ context.Context, m proto.Message) error {
			tells = append(tells, m)
			if len(tells) < 3 {
				return errors.New("owner unreachable")
			}
			return nil
		})
	require.NoError(t, err)
	require.Equal(t, 3, reads, "the record is read before each attempt")
	require.Equal(t, []proto.Message{arm, arm, disarm}, tells, "each attempt tells what the record said then; none after the first success")
}

func TestRetryScheduleArmGivesUpAfterItsTime(t *testing.T) {
	fail := errors.New("owner unreachable")
	tells := 0
	err := runRetry(t, context.Background(),
		func(context.Context) (proto.Message, error) { return &messages.ScheduleDisarm{}, nil },
		func(context.Context, proto.Message) error { tells++; return fail })
	require.ErrorIs(t, err, fail)
	// 0.2 + 0.4 + ... + 5 s each step, the clock moving 5 s a wait: two
	// minutes are about 24 attempts, never an endless loop.
	require.Greater(t, tells, 5)
	require.Less(t, tells, 100)
}

func TestRetryScheduleArmEndsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	clock := actorstest.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	err := retryScheduleArm(ctx, clock,
		func(context.Context) (proto.Message, error) { t.Error("read after the end"); return nil, nil },
		func(context.Context, proto.Message) error { t.Error("told after the end"); return nil })
	require.NoError(t, err)
	require.Zero(t, clock.Timers(), "its timer is stopped")
}

func TestScheduleChangeReadsTheRecord(t *testing.T) {
	ctx := context.Background()
	clock := actorstest.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	model := agent.ModelFunc(func(context.Context, agent.Turn, func(string)) (*messages.AssistantMessage, error) {
		return agent.Text("ok"), nil
	})
	rt, err := Open(Options{Model: model, Clock: clock})
	require.NoError(t, err)
	defer rt.Close()
	_, err = rt.Send(ctx, "c", "hi", agent.Scope{})
	require.NoError(t, err)
	sc, err := rt.Schedule(ctx, "c", ScheduleSpec{After: time.Hour, Text: "x"}, agent.Scope{})
	require.NoError(t, err)

	m, err := rt.scheduleChange(ctx, "c", sc.GetId(), "")
	require.NoError(t, err)
	arm, ok := m.(*messages.ScheduleArm)
	require.True(t, ok, "a pending schedule is armed: %v", m)
	require.Equal(t, sc.GetId(), arm.GetScheduleId())
	require.True(t, sc.GetNext().AsTime().Equal(arm.GetNext().AsTime()))
	require.Equal(t, sc.GetRevision(), arm.GetRevision(), "the arm names the record's revision")

	require.NoError(t, rt.CancelSchedule(ctx, "c", sc.GetId()))
	m, err = rt.scheduleChange(ctx, "c", sc.GetId(), sc.GetRevision())
	require.NoError(t, err)
	require.IsType(t, &messages.ScheduleDisarm{}, m, "a removed schedule is disarmed")
	require.Equal(t, sc.GetRevision(), m.(*messages.ScheduleDisarm).GetRevision(),
		"the disarm names the revision of the change retried: a schedule made again since keeps its timer")
	m, err = rt.scheduleChange(ctx, "unknown", "s", "")
	require.NoError(t, err)
	require.IsType(t, &messages.ScheduleDisarm{}, m)
}
