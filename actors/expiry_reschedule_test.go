package actors_test

import (
	"context"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

// TestExpiryLosesToRescheduleCommittedFirst plays the race of an expire
// fired at the old deadline against a reschedule that moved it later and
// committed first: the Store finds the expire stale (its DueBy is before
// the new deadline), nothing is delivered, and the call expires at its new
// deadline instead. The fake journal holds the expire so that the test
// decides the order; the writes themselves go to a real Store.
func TestExpiryLosesToRescheduleCommittedFirst(t *testing.T) {
	store := memjournal.New(memjournal.Options{})
	var j *fakeJournal
	h := newExpiryHarness(t, store, func(sys *actor.ActorSystem) *actor.PID {
		j = newFakeJournal(t, sys, nil)
		return j.pid
	})
	old, moved := expiryT0.Add(10*time.Second), expiryT0.Add(time.Hour)
	pendingHumanCall(t, store, "conv", "call", old)
	h.start()
	h.waitArmed(t, old) // rebuilt from the Store

	h.clock.Advance(10 * time.Second)
	first := j.next(t) // the expire of the old deadline, held
	require.Equal(t, "call", resolvedCall(t, first.w))
	require.True(t, old.Equal(first.w.GetRequest().GetDueBy().AsTime()), "an expire is only for a deadline due by its time")

	// The reschedule commits first; the journal actor reports it to the
	// expiry actor before it answers anything later.
	at := timestamppb.New(moved)
	_, err := store.Append(context.Background(), &messages.AppendRequest{ConversationId: "conv", Unfenced: true,
		Reschedule: []*messages.Deadline{{ConversationId: "conv", ToolCallId: "call", At: at}}})
	require.NoError(t, err)
	h.sys.Root.Send(h.pid, &messages.ScheduleExpiry{Deadline: &messages.Deadline{ConversationId: "conv", ToolCallId: "call", At: at}})

	_, err = store.Append(context.Background(), first.w.GetRequest())
	require.ErrorIs(t, err, journal.ErrStale, "the held expire is no longer due")
	j.answer(first, err)
	h.waitArmed(t, moved) // the moved deadline stays armed
	require.Len(t, h.deliveries, 0, "nothing expired")
	row, err := store.ToolCall(context.Background(), "call")
	require.NoError(t, err)
	require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING, row.GetStatus())

	h.clock.Advance(time.Hour - 10*time.Second)
	second := j.next(t)
	_, err = store.Append(context.Background(), second.w.GetRequest())
	require.NoError(t, err, "due at its new deadline")
	j.answer(second, nil)
	require.Equal(t, delivery{"conv", "call"}, h.nextDelivery(t))
	requireExpired(t, store, "call")
}

// TestExpiryRescheduledToSoonAfterTheOldExpire plays the same race with a
// new deadline that is already due when its report reaches the expiry
// actor, while the expire of the old one is still held: a second expire
// goes out for the new deadline, the first comes back stale, and the
// second, which expires the call, is delivered. The stale reply of the
// first attempt used to end the flight, so the second's success was
// ignored: the call was durably expired and its conversation never told.
func TestExpiryRescheduledToSoonAfterTheOldExpire(t *testing.T) {
	store := memjournal.New(memjournal.Options{})
	var j *fakeJournal
	h := newExpiryHarness(t, store, func(sys *actor.ActorSystem) *actor.PID {
		j = newFakeJournal(t, sys, nil)
		return j.pid
	})
	old, moved := expiryT0.Add(10*time.Second), expiryT0.Add(15*time.Second)
	pendingHumanCall(t, store, "conv", "call", old)
	h.start()
	h.waitArmed(t, old)

	h.clock.Advance(10 * time.Second)
	first := j.next(t) // the expire of the old deadline, held

	// The reschedule commits first, and its report reaches the expiry
	// actor once the new deadline has passed too.
	at := timestamppb.New(moved)
	_, err := store.Append(context.Background(), &messages.AppendRequest{ConversationId: "conv", Unfenced: true,
		Reschedule: []*messages.Deadline{{ConversationId: "conv", ToolCallId: "call", At: at}}})
	require.NoError(t, err)
	h.clock.Advance(5 * time.Second)
	h.sys.Root.Send(h.pid, &messages.ScheduleExpiry{Deadline: &messages.Deadline{ConversationId: "conv", ToolCallId: "call", At: at}})
	second := j.next(t)
	require.Equal(t, "call", resolvedCall(t, second.w))

	_, err = store.Append(context.Background(), first.w.GetRequest())
	require.ErrorIs(t, err, journal.ErrStale, "the first expire is not due by the new deadline")
	j.answer(first, err)
	_, err = store.Append(context.Background(), second.w.GetRequest())
	require.NoError(t, err, "the second expire is")
	j.answer(second, nil)
	requireExpired(t, store, "call")
	require.Equal(t, delivery{"conv", "call"}, h.nextDelivery(t), "the expired call is delivered")
}
