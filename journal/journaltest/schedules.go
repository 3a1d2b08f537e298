package journaltest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// scheduleCases check journal.ScheduleStore, which every adapter of this
// module implements: records, the fire in Append (at most once per
// occurrence, atomic with the append's events), listing and deletes.
var scheduleCases = []suiteCase{
	{name: "PutListDelete", run: testSchedulePutListDelete},
	{name: "SameIDInTwoConversations", run: testScheduleSameIDInTwoConversations},
	{name: "FireAdvancesWithItsMessage", run: testScheduleFire},
	{name: "FireOnceOnly", run: testScheduleFireOnce},
	{name: "StaleFireWritesNothing", run: testScheduleStaleFire},
	{name: "FireOfAReplacedRevisionIsStale", run: testScheduleFireOfReplacedRevision},
	{name: "FireInBatchOrder", run: testScheduleFireBatch},
	{name: "SkipIsConditional", run: testScheduleSkip},
	{name: "BadInput", run: testScheduleBadInput},
	{name: "LimitPerConversation", run: testScheduleLimit},
	{name: "GoesWithConversation", run: testScheduleDelete},
	{name: "SurvivesReopen", run: testScheduleReopen, durable: true},
	{name: "TimesStopWhenDoneOrClosed", run: testScheduleTimesStop},
}

// testScheduleTimesStop: ScheduleTimes stops as Deadlines does: at the
// first error fn returns, which it returns; a ctx done while it lists ends
// it before the next call of fn with ctx's error (no sentinel), a Close
// with ErrClosed.
func testScheduleTimesStop(t *testing.T, e env) {
	t.Run("fn error", func(t *testing.T) {
		st := e.open(t).Store
		s := scheduleStore(t, st)
		appendEvents(t, st, "c", userEv(1, "hi"))
		for i, id := range []string{"s1", "s2", "s3"} {
			require.NoError(t, s.PutSchedule(t.Context(), sched("c", id, 100+i)))
		}
		stop := errors.New("stop here")
		var seen []string
		err := s.ScheduleTimes(t.Context(), func(_, id string, _ time.Time) error {
			seen = append(seen, id)
			if len(seen) == 2 {
				return stop
			}
			return nil
		})
		require.ErrorIs(t, err, stop)
		for _, sentinel := range sentinels {
			require.NotErrorIs(t, err, sentinel)
		}
		assert.Equal(t, []string{"s1", "s2"}, seen, "iteration stops at the first error")
	})
	for _, closing := range []bool{false, true} {
		t.Run(fmt.Sprint("closing=", closing), func(t *testing.T) {
			st := e.open(t).Store
			s := scheduleStore(t, st)
			appendEvents(t, st, "c", userEv(1, "hi"))
			for i, id := range []string{"s1", "s2", "s3", "s4"} {
				require.NoError(t, s.PutSchedule(t.Context(), sched("c", id, 100+i)))
			}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			var seen []string
			err := s.ScheduleTimes(ctx, func(_, id string, _ time.Time) error {
				seen = append(seen, id)
				if len(seen) == 2 {
					if closing {
						require.NoError(t, st.Close())
					} else {
						cancel()
					}
				}
				return nil
			})
			if closing {
				requireSentinel(t, err, journal.ErrClosed)
			} else {
				require.ErrorIs(t, err, context.Canceled)
				for _, sentinel := range sentinels {
					require.NotErrorIs(t, err, sentinel)
				}
			}
			assert.Equal(t, []string{"s1", "s2"}, seen, "fn is not called once the listing must stop")
		})
	}
}

func scheduleStore(t testing.TB, s journal.Store) journal.ScheduleStore {
	t.Helper()
	ss, ok := s.(journal.ScheduleStore)
	if !ok {
		t.Fatalf("journaltest: %T does not implement journal.ScheduleStore", s)
	}
	return ss
}

// scheduleSkipper returns s as a journal.ScheduleSkipper, failing the test
// if it is not one: the runtime takes a ScheduleStore without it, but the
// suite holds an adapter to the conditional skip.
func scheduleSkipper(t testing.TB, s journal.Store) journal.ScheduleSkipper {
	t.Helper()
	k, ok := s.(journal.ScheduleSkipper)
	if !ok {
		t.Fatalf("journaltest: %T does not implement journal.ScheduleSkipper", s)
	}
	return k
}

func sched(conv, id string, next int) *messages.Schedule {
	return &messages.Schedule{Id: id, ConversationId: conv, Next: ts(next), Every: durationpb.New(time.Minute),
		Payload: &messages.UserMessage{Content: text("wake " + id)}, Created: ts(0)}
}

// fireReq is the conversation actor's write of one occurrence: the wake's
// user message and the fire, fenced after last.
func fireReq(conv string, last uint64, id string, occ, next int) *messages.AppendRequest {
	f := &messages.ScheduleFire{ScheduleId: id, Occurrence: ts(occ)}
	if next >= 0 {
		f.Next = ts(next)
	}
	return &messages.AppendRequest{ConversationId: conv, ExpectedLast: last, Events: []*messages.Event{userEv(occ, "wake")}, ScheduleFire: f}
}

type schedTime struct {
	conv, id string
	next     time.Time
}

func scheduleTimes(t testing.TB, s journal.ScheduleStore) []schedTime {
	t.Helper()
	var out []schedTime
	require.NoError(t, s.ScheduleTimes(t.Context(), func(conv, id string, next time.Time) error {
		out = append(out, schedTime{conv, id, next.UTC()})
		return nil
	}))
	return out
}

func testSchedulePutListDelete(t *testing.T, e env) {
	st := e.open(t).Store
	s := scheduleStore(t, st)
	ctx := t.Context()
	appendEvents(t, st, "c", userEv(1, "hi"))
	appendEvents(t, st, "d", userEv(1, "hi"))
	require.NoError(t, s.PutSchedule(ctx, sched("c", "s2", 200)))
	require.NoError(t, s.PutSchedule(ctx, sched("c", "s1", 300)))
	require.NoError(t, s.PutSchedule(ctx, sched("d", "s3", 100)))
	got, err := s.ConversationSchedules(ctx, "c")
	require.NoError(t, err)
	requireProtos(t, []*messages.Schedule{sched("c", "s1", 300), sched("c", "s2", 200)}, got, "ordered by id")
	none, err := s.ConversationSchedules(ctx, "unknown")
	require.NoError(t, err)
	assert.Empty(t, none)
	assert.Equal(t, []schedTime{{"d", "s3", tm(100)}, {"c", "s2", tm(200)}, {"c", "s1", tm(300)}}, scheduleTimes(t, s), "in time order")

	// Replacing a schedule moves its time.
	require.NoError(t, s.PutSchedule(ctx, sched("c", "s1", 50)))
	assert.Equal(t, []schedTime{{"c", "s1", tm(50)}, {"d", "s3", tm(100)}, {"c", "s2", tm(200)}}, scheduleTimes(t, s))

	requireSentinel(t, s.PutSchedule(ctx, sched("nobody", "s9", 10)), journal.ErrNotFound, "a conversation without a row")
	requireSentinel(t, s.DeleteSchedule(ctx, "d", "s1"), journal.ErrNotFound, "of another conversation")
	requireSentinel(t, s.DeleteSchedule(ctx, "c", "nope"), journal.ErrNotFound)
	requireSentinel(t, s.DeleteSchedule(ctx, "c", ""), journal.ErrInvalid, "an empty schedule id")
	requireSentinel(t, s.DeleteSchedule(ctx, "", "s1"), journal.ErrInvalid, "an empty conversation id")
	require.NoError(t, s.DeleteSchedule(ctx, "c", "s1"))
	requireSentinel(t, s.DeleteSchedule(ctx, "c", "s1"), journal.ErrNotFound, "twice")
	assert.Equal(t, []schedTime{{"d", "s3", tm(100)}, {"c", "s2", tm(200)}}, scheduleTimes(t, s))
}

// testScheduleSameIDInTwoConversations: schedule ids are per
// conversation. Two conversations each hold a schedule "daily", independent
// in every respect: put, replace, list, times, fire (alone, and both in one
// batch), delete, and the delete of one conversation.
func testScheduleSameIDInTwoConversations(t *testing.T, e env) {
	st := e.open(t).Store
	s := scheduleStore(t, st)
	ctx := t.Context()
	appendEvents(t, st, "c", userEv(1, "hi"))
	appendEvents(t, st, "d", userEv(1, "hi"))
	require.NoError(t, s.PutSchedule(ctx, sched("c", "daily", 200)))
	require.NoError(t, s.PutSchedule(ctx, sched("d", "daily", 100)), "the id of another conversation's schedule")
	list := func(conv string) []*messages.Schedule {
		t.Helper()
		got, err := s.ConversationSchedules(ctx, conv)
		require.NoError(t, err)
		return got
	}
	requireProtos(t, []*messages.Schedule{sched("c", "daily", 200)}, list("c"))
	requireProtos(t, []*messages.Schedule{sched("d", "daily", 100)}, list("d"))
	assert.Equal(t, []schedTime{{"d", "daily", tm(100)}, {"c", "daily", tm(200)}}, scheduleTimes(t, s))

	// Replacing one moves its time only; at the same time, the
	// conversation id orders them.
	require.NoError(t, s.PutSchedule(ctx, sched("d", "daily", 200)))
	assert.Equal(t, []schedTime{{"c", "daily", tm(200)}, {"d", "daily", tm(200)}}, scheduleTimes(t, s))
	requireProtos(t, []*messages.Schedule{sched("c", "daily", 200)}, list("c"))

	// A fire moves its conversation's schedule only.
	appendOK(t, st, fireReq("c", 1, "daily", 200, 260))
	requireProtos(t, []*messages.Schedule{sched("c", "daily", 260)}, list("c"))
	requireProtos(t, []*messages.Schedule{sched("d", "daily", 200)}, list("d"))
	_, err := st.Append(ctx, fireReq("c", 2, "daily", 200, 260))
	requireSentinel(t, err, journal.ErrStale, "the other conversation's occurrence is not this one's")
	assert.Equal(t, uint64(2), lastSeq(t, st, "c"))

	// Both in one batch: each request fires its own conversation's.
	results := st.AppendBatch(ctx, []*messages.AppendRequest{
		fireReq("c", 2, "daily", 260, 320),
		fireReq("d", 1, "daily", 200, -1),
	})
	require.Len(t, results, 2)
	require.NoError(t, results[0].Err)
	require.NoError(t, results[1].Err)
	requireProtos(t, []*messages.Schedule{sched("c", "daily", 320)}, list("c"))
	assert.Empty(t, list("d"), "a fire without next removes d's only")
	assert.Equal(t, []schedTime{{"c", "daily", tm(320)}}, scheduleTimes(t, s))

	// Deletes: of one conversation's schedule, and of a conversation.
	require.NoError(t, s.PutSchedule(ctx, sched("d", "daily", 400)))
	requireSentinel(t, s.DeleteSchedule(ctx, "e", "daily"), journal.ErrNotFound, "a third conversation has none")
	require.NoError(t, s.DeleteSchedule(ctx, "c", "daily"))
	assert.Empty(t, list("c"))
	requireProtos(t, []*messages.Schedule{sched("d", "daily", 400)}, list("d"))
	require.NoError(t, s.PutSchedule(ctx, sched("c", "daily", 500)))
	require.NoError(t, st.DeleteConversation(ctx, "d"))
	requireProtos(t, []*messages.Schedule{sched("c", "daily", 500)}, list("c"))
	assert.Equal(t, []schedTime{{"c", "daily", tm(500)}}, scheduleTimes(t, s))
	appendOK(t, st, fireReq("c", 3, "daily", 500, 560))
	assert.Equal(t, []schedTime{{"c", "daily", tm(560)}}, scheduleTimes(t, s))

	// At the same time, the id orders before the conversation id.
	appendEvents(t, st, "b", userEv(1, "hi"))
	require.NoError(t, s.PutSchedule(ctx, sched("c", "aaa", 560)))
	require.NoError(t, s.PutSchedule(ctx, sched("b", "zzz", 560)))
	assert.Equal(t, []schedTime{{"c", "aaa", tm(560)}, {"c", "daily", tm(560)}, {"b", "zzz", tm(560)}}, scheduleTimes(t, s),
		"ascending time, then id, then conversation id")
}

func testScheduleFire(t *testing.T, e env) {
	st := e.open(t).Store
	s := scheduleStore(t, st)
	ctx := t.Context()
	appendEvents(t, st, "c", userEv(1, "hi"))
	require.NoError(t, s.PutSchedule(ctx, sched("c", "rep", 100)))
	require.NoError(t, s.PutSchedule(ctx, sched("c", "once", 150)))

	res := appendOK(t, st, fireReq("c", 1, "rep", 100, 160))
	assert.Equal(t, uint64(2), res.LastSeq)
	got, err := s.ConversationSchedules(ctx, "c")
	require.NoError(t, err)
	want := sched("c", "rep", 160)
	requireProtos(t, []*messages.Schedule{sched("c", "once", 150), want}, got, "next moved, the rest kept")
	assert.Equal(t, []schedTime{{"c", "once", tm(150)}, {"c", "rep", tm(160)}}, scheduleTimes(t, s))

	appendOK(t, st, fireReq("c", 2, "once", 150, -1))
	got, err = s.ConversationSchedules(ctx, "c")
	require.NoError(t, err)
	requireProtos(t, []*messages.Schedule{want}, got, "a fire without next removes the schedule")
	assert.Equal(t, []schedTime{{"c", "rep", tm(160)}}, scheduleTimes(t, s))
	assert.Len(t, allEvents(t, st, "c"), 3)
	// The removed id is free again.
	require.NoError(t, s.PutSchedule(ctx, sched("c", "once", 400)))
}

func testScheduleFireOnce(t *testing.T, e env) {
	st := e.open(t).Store
	s := scheduleStore(t, st)
	appendEvents(t, st, "c", userEv(1, "hi"))
	require.NoError(t, s.PutSchedule(t.Context(), sched("c", "rep", 100)))
	appendOK(t, st, fireReq("c", 1, "rep", 100, 160))
	// The same occurrence again (a second delivery, a revived actor):
	// stale, nothing written.
	_, err := st.Append(t.Context(), fireReq("c", 2, "rep", 100, 160))
	requireSentinel(t, err, journal.ErrStale)
	assert.Equal(t, uint64(2), lastSeq(t, st, "c"))
	assert.Equal(t, []schedTime{{"c", "rep", tm(160)}}, scheduleTimes(t, s))
}

func testScheduleStaleFire(t *testing.T, e env) {
	st := e.open(t).Store
	s := scheduleStore(t, st)
	ctx := t.Context()
	appendEvents(t, st, "c", userEv(1, "hi"))
	appendEvents(t, st, "d", userEv(1, "hi"))
	require.NoError(t, s.PutSchedule(ctx, sched("c", "rep", 100)))
	require.NoError(t, s.PutSchedule(ctx, sched("d", "other", 100)))
	for name, req := range map[string]*messages.AppendRequest{
		"wrong occurrence":     fireReq("c", 1, "rep", 99, 160),
		"unknown schedule":     fireReq("c", 1, "nope", 100, 160),
		"another conversation": fireReq("c", 1, "other", 100, 160),
	} {
		_, err := st.Append(ctx, req)
		requireSentinel(t, err, journal.ErrStale, name)
	}
	require.NoError(t, s.DeleteSchedule(ctx, "c", "rep"))
	_, err := st.Append(ctx, fireReq("c", 1, "rep", 100, 160))
	requireSentinel(t, err, journal.ErrStale, "cancelled")
	assert.Equal(t, uint64(1), lastSeq(t, st, "c"), "no message of a stale fire")
	assert.Equal(t, []schedTime{{"d", "other", tm(100)}}, scheduleTimes(t, s))
}

// testScheduleFireOfReplacedRevision: a fire computed from one definition
// of a schedule (its Revision) is stale against a definition put since,
// even one whose next is the fire's occurrence (replaced, or cancelled and
// put again, at the same time): nothing written, the new definition as it
// was; the new one's fire applies, and its next keeps its revision, which
// the following fire must carry.
func testScheduleFireOfReplacedRevision(t *testing.T, e env) {
	ctx := t.Context()
	rev := func(sc *messages.Schedule, r string) *messages.Schedule { sc.Revision = r; return sc }
	fire := func(last uint64, occ, next int, r string) *messages.AppendRequest {
		req := fireReq("c", last, "rep", occ, next)
		req.ScheduleFire.Revision = r
		return req
	}
	for _, cancelled := range []bool{false, true} {
		t.Run(fmt.Sprint("cancelled=", cancelled), func(t *testing.T) {
			st := e.open(t).Store
			s := scheduleStore(t, st)
			appendEvents(t, st, "c", userEv(1, "hi"))
			require.NoError(t, s.PutSchedule(ctx, rev(sched("c", "rep", 100), "old")))
			if cancelled {
				require.NoError(t, s.DeleteSchedule(ctx, "c", "rep"))
			}
			renewed := rev(sched("c", "rep", 100), "new")
			renewed.Every = durationpb.New(time.Hour)
			require.NoError(t, s.PutSchedule(ctx, renewed))

			for name, req := range map[string]*messages.AppendRequest{
				"the old revision's fire":     fire(1, 100, 160, "old"),
				"the old revision's last one": fire(1, 100, -1, "old"),
				"a fire of no revision":       fire(1, 100, 160, ""),
			} {
				_, err := st.Append(ctx, req)
				requireSentinel(t, err, journal.ErrStale, name)
			}
			results := st.AppendBatch(ctx, []*messages.AppendRequest{fire(1, 100, 160, "old")})
			require.Len(t, results, 1)
			requireSentinel(t, results[0].Err, journal.ErrStale, "in a batch")
			assert.Equal(t, uint64(1), lastSeq(t, st, "c"), "no message of a stale fire")
			all, err := s.ConversationSchedules(ctx, "c")
			require.NoError(t, err)
			require.Len(t, all, 1)
			assert.True(t, proto.Equal(renewed, all[0]), "the new definition untouched: %v", all[0])

			appendOK(t, st, fire(1, 100, 3700, "new"))
			all, err = s.ConversationSchedules(ctx, "c")
			require.NoError(t, err)
			require.Len(t, all, 1)
			assert.Equal(t, "new", all[0].GetRevision(), "a fire keeps the revision")
			assert.Equal(t, []schedTime{{"c", "rep", tm(3700)}}, scheduleTimes(t, s))
			_, err = st.Append(ctx, fire(2, 3700, 7300, "old"))
			requireSentinel(t, err, journal.ErrStale, "the old revision at the next occurrence")
			appendOK(t, st, fire(2, 3700, 7300, "new"))
			assert.Equal(t, uint64(3), lastSeq(t, st, "c"))
		})
	}
}

// testScheduleSkip: SkipSchedule moves a schedule past an occurrence, or
// removes it, without an event, and only under a fire's condition: a skip
// of a revision replaced (or cancelled and put again) at the same
// occurrence, of another occurrence, of an unknown schedule or
// conversation is stale and leaves every record as it is.
func testScheduleSkip(t *testing.T, e env) {
	ctx := t.Context()
	rev := func(sc *messages.Schedule, r string) *messages.Schedule { sc.Revision = r; return sc }
	skip := func(id string, occ, next int, r string) *messages.ScheduleFire {
		f := &messages.ScheduleFire{ScheduleId: id, Occurrence: ts(occ), Revision: r}
		if next >= 0 {
			f.Next = ts(next)
		}
		return f
	}
	for _, cancelled := range []bool{false, true} {
		t.Run(fmt.Sprint("cancelled=", cancelled), func(t *testing.T) {
			st := e.open(t).Store
			s := scheduleStore(t, st)
			k := scheduleSkipper(t, st)
			appendEvents(t, st, "c", userEv(1, "hi"))
			require.NoError(t, s.PutSchedule(ctx, rev(sched("c", "rep", 100), "old")))
			if cancelled {
				require.NoError(t, s.DeleteSchedule(ctx, "c", "rep"))
			}
			renewed := rev(sched("c", "rep", 100), "new")
			renewed.Every = durationpb.New(time.Hour)
			require.NoError(t, s.PutSchedule(ctx, renewed))

			for name, c := range map[string]struct {
				conv string
				f    *messages.ScheduleFire
			}{
				"the old revision's skip":        {"c", skip("rep", 100, 160, "old")},
				"the old revision's last one":    {"c", skip("rep", 100, -1, "old")},
				"a skip of no revision":          {"c", skip("rep", 100, 160, "")},
				"another occurrence":             {"c", skip("rep", 160, 220, "new")},
				"an unknown schedule":            {"c", skip("other", 100, 160, "new")},
				"an unknown conversation":        {"nobody", skip("rep", 100, 160, "new")},
				"an unknown conversation's last": {"nobody", skip("rep", 100, -1, "new")},
			} {
				requireSentinel(t, k.SkipSchedule(ctx, c.conv, c.f), journal.ErrStale, name)
			}
			all, err := s.ConversationSchedules(ctx, "c")
			require.NoError(t, err)
			require.Len(t, all, 1)
			assert.True(t, proto.Equal(renewed, all[0]), "the new definition untouched: %v", all[0])

			require.NoError(t, k.SkipSchedule(ctx, "c", skip("rep", 100, 3700, "new")))
			all, err = s.ConversationSchedules(ctx, "c")
			require.NoError(t, err)
			require.Len(t, all, 1)
			moved := proto.Clone(renewed).(*messages.Schedule)
			moved.Next = ts(3700)
			assert.True(t, proto.Equal(moved, all[0]), "moved, the rest kept: %v", all[0])
			assert.Equal(t, []schedTime{{"c", "rep", tm(3700)}}, scheduleTimes(t, s))
			requireSentinel(t, k.SkipSchedule(ctx, "c", skip("rep", 100, 3700, "new")), journal.ErrStale, "the same occurrence again")
			// A fire of the occurrence skipped is stale; of the next, not.
			_, err = st.Append(ctx, func() *messages.AppendRequest {
				r := fireReq("c", 1, "rep", 100, 3700)
				r.ScheduleFire.Revision = "new"
				return r
			}())
			requireSentinel(t, err, journal.ErrStale, "a fire of the skipped occurrence")

			require.NoError(t, k.SkipSchedule(ctx, "c", skip("rep", 3700, -1, "new")))
			all, err = s.ConversationSchedules(ctx, "c")
			require.NoError(t, err)
			assert.Empty(t, all, "the last occurrence skipped: the schedule goes")
			assert.Empty(t, scheduleTimes(t, s))
			assert.Equal(t, uint64(1), lastSeq(t, st, "c"), "a skip writes no event")
		})
	}
	t.Run("bad input", func(t *testing.T) {
		st := e.open(t).Store
		s := scheduleStore(t, st)
		k := scheduleSkipper(t, st)
		appendEvents(t, st, "c", userEv(1, "hi"))
		require.NoError(t, s.PutSchedule(ctx, sched("c", "rep", 100)))
		for name, c := range map[string]struct {
			conv string
			f    *messages.ScheduleFire
		}{
			"no conversation id": {"", skip("rep", 100, 160, "")},
			"no fire":            {"c", nil},
			"no schedule id":     {"c", skip("", 100, 160, "")},
			"no occurrence":      {"c", &messages.ScheduleFire{ScheduleId: "rep"}},
			"an ill-formed rev":  {"c", skip("rep", 100, 160, "\xff")},
			"an invalid next":    {"c", &messages.ScheduleFire{ScheduleId: "rep", Occurrence: ts(100), Next: &timestamppb.Timestamp{Nanos: -1}}},
		} {
			requireSentinel(t, k.SkipSchedule(ctx, c.conv, c.f), journal.ErrInvalid, name)
		}
		assert.Equal(t, []schedTime{{"c", "rep", tm(100)}}, scheduleTimes(t, s), "nothing written")
	})
}

func testScheduleFireBatch(t *testing.T, e env) {
	st := e.open(t).Store
	s := scheduleStore(t, st)
	appendEvents(t, st, "c", userEv(1, "hi"))
	require.NoError(t, s.PutSchedule(t.Context(), sched("c", "rep", 100)))
	results := st.AppendBatch(t.Context(), []*messages.AppendRequest{
		fireReq("c", 1, "rep", 100, 160),
		fireReq("c", 2, "rep", 100, 160), // the same occurrence: stale
		fireReq("c", 2, "rep", 160, 220), // the next one sees the first
	})
	require.Len(t, results, 3)
	require.NoError(t, results[0].Err)
	requireSentinel(t, results[1].Err, journal.ErrStale)
	require.NoError(t, results[2].Err)
	assert.Equal(t, uint64(3), lastSeq(t, st, "c"))
	assert.Equal(t, []schedTime{{"c", "rep", tm(220)}}, scheduleTimes(t, s))
}

func testScheduleBadInput(t *testing.T, e env) {
	st := e.open(t).Store
	s := scheduleStore(t, st)
	ctx := t.Context()
	appendEvents(t, st, "c", userEv(1, "hi"))
	bad := map[string]*messages.Schedule{
		"nil":        nil,
		"no id":      {ConversationId: "c", Next: ts(1), Payload: &messages.UserMessage{Content: text("x")}},
		"no next":    {Id: "s", ConversationId: "c", Payload: &messages.UserMessage{Content: text("x")}},
		"no payload": {Id: "s", ConversationId: "c", Next: ts(1)},
		"both":       {Id: "s", ConversationId: "c", Next: ts(1), Every: durationpb.New(time.Second), Cron: "* * * * *", Payload: &messages.UserMessage{Content: text("x")}},
		"negative":   {Id: "s", ConversationId: "c", Next: ts(1), Every: durationpb.New(-time.Second), Payload: &messages.UserMessage{Content: text("x")}},
		// Held to journal.CheckTime, as every stored time.
		"created in year 10000": {Id: "s", ConversationId: "c", Next: ts(1), Created: year10000, Payload: &messages.UserMessage{Content: text("x")}},
		"created nanos":         {Id: "s", ConversationId: "c", Next: ts(1), Created: badNanos, Payload: &messages.UserMessage{Content: text("x")}},
	}
	for name, sc := range bad {
		requireSentinel(t, s.PutSchedule(ctx, sc), journal.ErrInvalid, name)
	}
	assert.Empty(t, scheduleTimes(t, s))
	unfenced := fireReq("c", 1, "s", 1, 2)
	unfenced.Unfenced, unfenced.Events = true, nil
	_, err := st.Append(ctx, unfenced)
	requireSentinel(t, err, journal.ErrInvalid, "an unfenced fire")
	noOcc := fireReq("c", 1, "s", 1, 2)
	noOcc.ScheduleFire.Occurrence = nil
	_, err = st.Append(ctx, noOcc)
	requireSentinel(t, err, journal.ErrInvalid, "a fire without occurrence")
	assert.Equal(t, uint64(1), lastSeq(t, st, "c"))
}

// testScheduleLimit holds every adapter to MaxSchedulesPerConversation: a
// new id beyond it is ErrInvalid and writes nothing; replacing one at the
// limit, and a new id once one went (cancelled, or fired for the last
// time), succeed; another conversation has its own count.
func testScheduleLimit(t *testing.T, e env) {
	st := e.open(t).Store
	s := scheduleStore(t, st)
	ctx := t.Context()
	appendEvents(t, st, "c", userEv(1, "hi"))
	appendEvents(t, st, "d", userEv(1, "hi"))
	for i := range journal.MaxSchedulesPerConversation {
		require.NoError(t, s.PutSchedule(ctx, sched("c", fmt.Sprintf("s%04d", i), 100+i)))
	}
	over := sched("c", "s-over", 50)
	requireSentinel(t, s.PutSchedule(ctx, over), journal.ErrInvalid, "one schedule more than the limit")
	all, err := s.ConversationSchedules(ctx, "c")
	require.NoError(t, err)
	require.Len(t, all, journal.MaxSchedulesPerConversation, "nothing written")
	require.Equal(t, tm(100), scheduleTimes(t, s)[0].next, "nothing written")

	require.NoError(t, s.PutSchedule(ctx, sched("c", "s0001", 5000)), "replacing one at the limit")
	require.NoError(t, s.PutSchedule(ctx, sched("d", "d-1", 100)), "another conversation's count is its own")

	require.NoError(t, s.DeleteSchedule(ctx, "c", "s0002"))
	require.NoError(t, s.PutSchedule(ctx, over), "a cancelled one frees its place")
	requireSentinel(t, s.PutSchedule(ctx, sched("c", "s-over2", 50)), journal.ErrInvalid)

	appendOK(t, st, fireReq("c", 1, "s0000", 100, -1))
	require.NoError(t, s.PutSchedule(ctx, sched("c", "s-over2", 50)), "one fired for the last time frees its place")
	all, err = s.ConversationSchedules(ctx, "c")
	require.NoError(t, err)
	assert.Len(t, all, journal.MaxSchedulesPerConversation)
}

func testScheduleDelete(t *testing.T, e env) {
	st := e.open(t).Store
	s := scheduleStore(t, st)
	ctx := t.Context()
	appendEvents(t, st, "c", userEv(1, "hi"))
	appendEvents(t, st, "d", userEv(1, "hi"))
	require.NoError(t, s.PutSchedule(ctx, sched("c", "s1", 100)))
	require.NoError(t, s.PutSchedule(ctx, sched("c", "s2", 200)))
	require.NoError(t, s.PutSchedule(ctx, sched("d", "s3", 300)))
	require.NoError(t, st.DeleteConversation(ctx, "c"))
	got, err := s.ConversationSchedules(ctx, "c")
	require.NoError(t, err)
	assert.Empty(t, got)
	assert.Equal(t, []schedTime{{"d", "s3", tm(300)}}, scheduleTimes(t, s), "the other conversation's schedule stays")
	requireSentinel(t, s.PutSchedule(ctx, sched("c", "s4", 100)), journal.ErrDeleted)
	// The deleted conversation's ids are free for another.
	require.NoError(t, s.PutSchedule(ctx, sched("d", "s1", 100)))
}

func testScheduleReopen(t *testing.T, e env) {
	h := e.open(t)
	st := h.Store
	s := scheduleStore(t, st)
	appendEvents(t, st, "c", userEv(1, "hi"))
	require.NoError(t, s.PutSchedule(t.Context(), sched("c", "s1", 100)))
	require.NoError(t, s.PutSchedule(t.Context(), sched("c", "s2", 100)))
	appendOK(t, st, fireReq("c", 1, "s1", 100, 160))
	st = h.Reopen(t)
	s = scheduleStore(t, st)
	assert.Equal(t, []schedTime{{"c", "s2", tm(100)}, {"c", "s1", tm(160)}}, scheduleTimes(t, s))
	got, err := s.ConversationSchedules(t.Context(), "c")
	require.NoError(t, err)
	requireProtos(t, []*messages.Schedule{sched("c", "s1", 160), sched("c", "s2", 100)}, got)
	_, err = st.Append(t.Context(), fireReq("c", 2, "s1", 100, 160))
	requireSentinel(t, err, journal.ErrStale, "the fired occurrence stays fired")
}
