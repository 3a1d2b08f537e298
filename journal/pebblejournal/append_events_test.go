package pebblejournal

import (
	"testing"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// TestOnlyEventsKnowsEveryField: a request that sets any field of
// AppendRequest besides its conversation, fence and events is not one
// for appendEvents. A field added to AppendRequest fails this test until
// onlyEvents checks it.
func TestOnlyEventsKnowsEveryField(t *testing.T) {
	events := func() *messages.AppendRequest {
		return &messages.AppendRequest{ConversationId: "c", ExpectedLast: 1, Events: []*messages.Event{userEvent("x")}}
	}
	require.True(t, onlyEvents(events()))
	require.False(t, onlyEvents(&messages.AppendRequest{ConversationId: "c", ExpectedLast: 1}), "no events")
	fields := events().ProtoReflect().Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		switch fd.Name() {
		case "conversation_id", "expected_last", "events":
			continue
		}
		req := events()
		m := req.ProtoReflect()
		switch {
		case fd.IsMap():
			m.Mutable(fd).Map().Set(protoreflect.ValueOfString("k").MapKey(), protoreflect.ValueOfString("v"))
		case fd.IsList() && fd.Kind() == protoreflect.MessageKind:
			m.Mutable(fd).List().AppendMutable()
		case fd.IsList():
			m.Mutable(fd).List().Append(protoreflect.ValueOfString("x"))
		case fd.Kind() == protoreflect.MessageKind:
			m.Mutable(fd)
		case fd.Kind() == protoreflect.BoolKind:
			m.Set(fd, protoreflect.ValueOfBool(true))
		case fd.Kind() == protoreflect.EnumKind:
			m.Set(fd, protoreflect.ValueOfEnum(1))
		case fd.Kind() == protoreflect.StringKind:
			m.Set(fd, protoreflect.ValueOfString("x"))
		default:
			m.Set(fd, protoreflect.ValueOfUint64(1))
		}
		require.True(t, m.Has(fd), "the test sets %s", fd.Name())
		require.False(t, onlyEvents(req), "a request setting %s is not events only: check it in onlyEvents", fd.Name())
	}
}

// TestAppendEventsOfACachedConversation: the Append of events only to a
// conversation the head cache holds (appendEvents) behaves as the general
// path: seqs given or left unset, the fence, bad events checked before
// the fence, the caller's seqs back after a failure, an event given twice,
// and a head that the next writes of either path agree with.
func TestAppendEventsOfACachedConversation(t *testing.T) {
	s := openMem(t, Options{})
	// Not for a conversation the head cache does not hold: nothing done.
	_, ok := s.appendEvents(ctx, &messages.AppendRequest{ConversationId: "c", Events: []*messages.Event{userEvent("x")}})
	require.False(t, ok)
	last := appendN(t, s, "c", 0, 1)
	require.EqualValues(t, 1, last)
	_, cached := s.heads.get(s.convStripe("c"), "c")
	require.True(t, cached)
	// Nor for events whose seqs the caller set otherwise.
	odd := userEvent("odd")
	odd.Seq = 7
	_, ok = s.appendEvents(ctx, &messages.AppendRequest{ConversationId: "c", ExpectedLast: last, Events: []*messages.Event{odd}})
	require.False(t, ok)
	require.EqualValues(t, 7, odd.GetSeq())
	n, err := s.LastSeq(ctx, "c")
	require.NoError(t, err)
	require.Equal(t, last, n)
	// Taken for events only, the seqs unset or right, of a cached head.
	probe := &messages.AppendRequest{ConversationId: "c", ExpectedLast: last - 1, Events: []*messages.Event{userEvent("probe")}}
	res, ok := s.appendEvents(ctx, probe)
	require.True(t, ok)
	require.ErrorIs(t, res.Err, journal.ErrConflict)

	// Seqs unset, or the ones they get.
	a, b := userEvent("a"), userEvent("b")
	b.Seq = last + 2
	res, err = s.Append(ctx, &messages.AppendRequest{ConversationId: "c", ExpectedLast: last, Events: []*messages.Event{a, b}})
	require.NoError(t, err)
	require.Equal(t, journal.AppendResult{FirstSeq: 2, LastSeq: 3}, res)
	require.EqualValues(t, []uint64{2, 3}, []uint64{a.GetSeq(), b.GetSeq()})
	last = res.LastSeq

	// Fenced off: the caller's seqs come back.
	c, d := userEvent("c"), userEvent("d")
	d.Seq = last + 1 // the seq it would have got after a wrong fence of last-1
	_, err = s.Append(ctx, &messages.AppendRequest{ConversationId: "c", ExpectedLast: last - 1, Events: []*messages.Event{userEvent("x"), c}})
	require.ErrorIs(t, err, journal.ErrConflict)
	require.Zero(t, c.GetSeq())
	_, err = s.Append(ctx, &messages.AppendRequest{ConversationId: "c", ExpectedLast: last - 1, Events: []*messages.Event{userEvent("x"), d}})
	require.ErrorIs(t, err, journal.ErrConflict)
	require.Equal(t, last+1, d.GetSeq())

	// A bad event fails the request whole, before its fence, with the text
	// ValidateAppend gives.
	good, bad := userEvent("good"), userEvent("\xff")
	for _, fence := range []uint64{last, last - 1} {
		req := &messages.AppendRequest{ConversationId: "c", ExpectedLast: fence, Events: []*messages.Event{good, bad}}
		want := journal.ValidateAppend(req)
		require.ErrorIs(t, want, journal.ErrInvalid)
		_, err = s.Append(ctx, req)
		require.ErrorIs(t, err, journal.ErrInvalid)
		require.Equal(t, "pebblejournal: "+want.Error(), err.Error())
		require.Zero(t, good.GetSeq())
		require.Zero(t, bad.GetSeq())
	}

	// One event twice: stored at both seqs, left with the last.
	twice := userEvent("twice")
	res, err = s.Append(ctx, &messages.AppendRequest{ConversationId: "c", ExpectedLast: last, Events: []*messages.Event{twice, twice}})
	require.NoError(t, err)
	require.Equal(t, journal.AppendResult{FirstSeq: last + 1, LastSeq: last + 2}, res)
	require.Equal(t, last+2, twice.GetSeq())
	last = res.LastSeq

	// The head agrees with Pebble, and with the general path's next write.
	n, err = s.LastSeq(ctx, "c")
	require.NoError(t, err)
	require.Equal(t, last, n)
	res, err = s.Append(ctx, &messages.AppendRequest{ConversationId: "c", ExpectedLast: last, Events: []*messages.Event{userEvent("call")},
		ToolCalls: []*messages.ToolCallRecord{pendingCall("c", "tc")}})
	require.NoError(t, err)
	last = res.LastSeq
	res, err = s.Append(ctx, &messages.AppendRequest{ConversationId: "c", ExpectedLast: last, Events: []*messages.Event{userEvent("after")}})
	require.NoError(t, err)
	require.Equal(t, journal.AppendResult{FirstSeq: last + 1, LastSeq: last + 1}, res)
	evs, err := s.Events(ctx, "c", journal.EventQuery{})
	require.NoError(t, err)
	require.Len(t, evs, int(res.LastSeq))
	for i, ev := range evs {
		require.EqualValues(t, i+1, ev.GetSeq())
	}
	require.Equal(t, "twice", evs[3].GetUserMsg().GetContent()[0].GetText())
	require.Equal(t, "twice", evs[4].GetUserMsg().GetContent()[0].GetText())

	// A deleted conversation's head leaves the cache: its appends are
	// refused by the general path.
	require.NoError(t, s.DeleteConversation(ctx, "c"))
	_, err = s.Append(ctx, &messages.AppendRequest{ConversationId: "c", ExpectedLast: res.LastSeq, Events: []*messages.Event{userEvent("late")}})
	require.ErrorIs(t, err, journal.ErrDeleted)
}
