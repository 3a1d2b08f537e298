package journal_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func userEv(text string) *messages.Event {
	return &messages.Event{Body: &messages.Event_UserMsg{UserMsg: &messages.UserMessage{
		Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: text}}},
	}}}
}

// sizedEv returns a user message whose encoding, with Seq seq, is n bytes.
func sizedEv(t *testing.T, n int, seq uint64) *messages.Event {
	t.Helper()
	ev := userEv(strings.Repeat("x", n))
	ev.Seq = seq
	text := &ev.GetUserMsg().GetContent()[0].GetPart().(*messages.ContentPart_Text).Text
	for size := proto.Size(ev); size != n; size = proto.Size(ev) {
		require.Greater(t, size, n)
		*text = (*text)[:len(*text)-(size-n)]
	}
	return ev
}

func call(conv, id string) *messages.ToolCallRecord {
	return &messages.ToolCallRecord{Id: id, ConversationId: conv, Name: "ask", Executor: messages.Executor_EXECUTOR_HUMAN}
}

// validReq returns a request that passes, changed by mut.
func validReq(mut func(*messages.AppendRequest)) *messages.AppendRequest {
	req := &messages.AppendRequest{
		ConversationId: "c",
		ExpectedLast:   3,
		Events:         []*messages.Event{userEv("a"), userEv("b")},
		ToolCalls:      []*messages.ToolCallRecord{call("c", "c/1")},
		Resolutions:    []*messages.ToolResolution{{ToolCallId: "c/0", Status: messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED}},
		Schedule:       []*messages.Deadline{{ConversationId: "c", ToolCallId: "c/1", At: timestamppb.Now()}},
		Cancel:         []string{"c/2"},
		FsmState:       &messages.FSMState{State: messages.AgentState_AGENT_STATE_IDLE},
	}
	if mut != nil {
		mut(req)
	}
	return req
}

// ValidateAppendShape returns ValidateAppend's error for every request but
// those whose only problem is an event's encoding.
func TestValidateAppendShapeAgrees(t *testing.T) {
	long := strings.Repeat("x", journal.MaxIDBytes+1)
	pending := messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING
	cases := []struct {
		name string
		req  *messages.AppendRequest
	}{
		{"Valid", validReq(nil)},
		{"ValidEmpty", &messages.AppendRequest{ConversationId: "c"}},
		{"ValidAtLimit", validReq(func(r *messages.AppendRequest) {
			r.Events = []*messages.Event{sizedEv(t, journal.MaxEventBytes, 0), sizedEv(t, journal.MaxEventBytes, 1<<40)}
		})},
		{"Nil", nil},
		{"EmptyConversation", validReq(func(r *messages.AppendRequest) { r.ConversationId = "" })},
		{"LongConversation", validReq(func(r *messages.AppendRequest) { r.ConversationId = long })},
		{"ConversationNotUTF8", validReq(func(r *messages.AppendRequest) { r.ConversationId = "\xff" })},
		{"UnfencedWithEvents", validReq(func(r *messages.AppendRequest) { r.Unfenced = true })},
		{"TooManyEvents", validReq(func(r *messages.AppendRequest) {
			r.Events = make([]*messages.Event, journal.MaxEventsPerAppend+1)
			for i := range r.Events {
				r.Events[i] = userEv("x")
			}
		})},
		{"NilEvent", validReq(func(r *messages.AppendRequest) { r.Events[1] = nil })},
		{"EventWithoutBody", validReq(func(r *messages.AppendRequest) { r.Events[1].Body = nil })},
		{"NilToolCall", validReq(func(r *messages.AppendRequest) { r.ToolCalls[0] = nil })},
		{"ToolCallWithoutID", validReq(func(r *messages.AppendRequest) { r.ToolCalls[0].Id = "" })},
		{"ToolCallOfOtherConversation", validReq(func(r *messages.AppendRequest) { r.ToolCalls[0].ConversationId = "d" })},
		{"ToolCallWithResultSeq", validReq(func(r *messages.AppendRequest) { r.ToolCalls[0].ResultSeq = 1 })},
		{"ToolCallNotUTF8", validReq(func(r *messages.AppendRequest) { r.ToolCalls[0].Name = "\xff" })},
		{"NilResolution", validReq(func(r *messages.AppendRequest) { r.Resolutions[0] = nil })},
		{"ResolutionWithoutID", validReq(func(r *messages.AppendRequest) { r.Resolutions[0].ToolCallId = "" })},
		{"PendingResolution", validReq(func(r *messages.AppendRequest) { r.Resolutions[0].Status = pending })},
		{"NilDeadline", validReq(func(r *messages.AppendRequest) { r.Schedule[0] = nil })},
		{"DeadlineWithoutTime", validReq(func(r *messages.AppendRequest) { r.Schedule[0].At = nil })},
		{"DeadlineOfOtherConversation", validReq(func(r *messages.AppendRequest) { r.Schedule[0].ConversationId = "d" })},
		{"DeadlineWithoutCall", validReq(func(r *messages.AppendRequest) { r.Schedule[0].ToolCallId = "" })},
		{"CancelEmptyID", validReq(func(r *messages.AppendRequest) { r.Cancel[0] = "" })},
		{"CancelLongID", validReq(func(r *messages.AppendRequest) { r.Cancel[0] = long })},
		{"FSMStateTooLarge", validReq(func(r *messages.AppendRequest) {
			r.FsmState.Pending = map[string]*messages.PendingCall{strings.Repeat("k", journal.MaxRecordBytes): {}}
		})},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			full, shape := journal.ValidateAppend(c.req), journal.ValidateAppendShape(c.req)
			if full == nil {
				require.NoError(t, shape)
				return
			}
			require.ErrorIs(t, full, journal.ErrInvalid)
			require.ErrorIs(t, shape, journal.ErrInvalid)
			require.Equal(t, full.Error(), shape.Error())
		})
	}
}

// Where ValidateAppend fails on an event's encoding, ValidateAppendShape
// leaves it to EncodeAppendEvent, which returns the same error.
func TestValidateAppendShapeLeavesEncoding(t *testing.T) {
	cases := []struct {
		name     string
		mut      func(*messages.AppendRequest)
		bad      int    // the event that fails to encode
		shapeErr string // ValidateAppendShape's error, "" for none
	}{
		{"NotUTF8", func(r *messages.AppendRequest) { r.Events[1] = userEv("\xff") }, 1, ""},
		{"RequestIDNotUTF8", func(r *messages.AppendRequest) { r.Events[0].RequestId = "\xff" }, 0, ""},
		{"TooLarge", func(r *messages.AppendRequest) { r.Events[1] = sizedEv(t, journal.MaxEventBytes+1, 0) }, 1, ""},
		{"TooLargeWithSeq", func(r *messages.AppendRequest) { r.Events[0] = sizedEv(t, journal.MaxEventBytes+1, 7) }, 0, ""},
		{"NotUTF8AndBadToolCall", func(r *messages.AppendRequest) {
			r.Events[0] = userEv("\xff")
			r.ToolCalls[0].ConversationId = "d"
		}, 0, "tool call c/1 names conversation"},
		{"NotUTF8AndNilEvent", func(r *messages.AppendRequest) {
			r.Events[0] = userEv("\xff")
			r.Events = append(r.Events, nil)
		}, 0, `event 2 of append to "c": nil event`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req := validReq(c.mut)
			full := journal.ValidateAppend(req)
			require.ErrorIs(t, full, journal.ErrInvalid)
			require.Contains(t, full.Error(), `event `+string(rune('0'+c.bad))+` of append to "c": event `)
			shape := journal.ValidateAppendShape(req)
			if c.shapeErr == "" {
				require.NoError(t, shape)
			} else {
				require.ErrorIs(t, shape, journal.ErrInvalid)
				require.ErrorContains(t, shape, c.shapeErr)
			}
			for i, ev := range req.GetEvents() {
				if ev == nil {
					continue
				}
				dst := []byte("prefix")
				out, err := journal.EncodeAppendEvent(dst, req, i, ev.GetSeq())
				if i != c.bad {
					require.NoError(t, err, "event %d", i)
					want, err := proto.Marshal(ev)
					require.NoError(t, err)
					require.Equal(t, append([]byte("prefix"), want...), out)
					continue
				}
				require.ErrorIs(t, err, journal.ErrInvalid)
				require.Equal(t, full.Error(), err.Error())
			}
		})
	}
}

// EncodeAppendEvent measures the limit on the event with the seq the
// caller gave, not the one the store set.
func TestEncodeAppendEventGivenSeq(t *testing.T) {
	for _, given := range []uint64{0, 1, 1 << 40} {
		for _, size := range []int{journal.MaxEventBytes, journal.MaxEventBytes + 1} {
			ev := sizedEv(t, size, given)
			req := &messages.AppendRequest{ConversationId: "c", ExpectedLast: 299, Events: []*messages.Event{userEv("a"), ev}}
			want := journal.ValidateAppend(req)
			ev.Seq = 301
			out, err := journal.EncodeAppendEvent(nil, req, 1, given)
			if want == nil {
				require.NoError(t, err)
				got := &messages.Event{}
				require.NoError(t, proto.Unmarshal(out, got))
				require.True(t, proto.Equal(ev, got))
				continue
			}
			require.Error(t, err)
			require.Equal(t, want.Error(), err.Error(), "given %d, size %d", given, size)
			require.Equal(t, size > journal.MaxEventBytes, err != nil)
		}
	}
}

// EncodeEvent fails exactly when ValidateEvent does, with its error, and
// otherwise appends the event's encoding.
func TestEncodeEventMatchesValidateEvent(t *testing.T) {
	cases := []*messages.Event{
		nil,
		{},
		userEv("fine"),
		userEv("\xff"),
		sizedEv(t, journal.MaxEventBytes, 3),
		sizedEv(t, journal.MaxEventBytes+1, 0),
		sizedEv(t, journal.MaxEventBytes+1, 3),
	}
	for i, ev := range cases {
		want := journal.ValidateEvent(ev)
		out, err := journal.EncodeEvent([]byte{1, 2}, ev)
		if want != nil {
			require.True(t, errors.Is(err, journal.ErrInvalid), "case %d: %v", i, err)
			require.Equal(t, want.Error(), err.Error(), "case %d", i)
			continue
		}
		require.NoError(t, err, "case %d", i)
		enc, err := proto.Marshal(ev)
		require.NoError(t, err)
		require.Equal(t, append([]byte{1, 2}, enc...), out, "case %d", i)
	}
}

// A turn_failed event is an event like any other: validation accepts it,
// and refuses one whose text is not UTF-8, as for every string.
func TestValidateTurnFailed(t *testing.T) {
	ev := &messages.Event{Body: &messages.Event_TurnFailed{TurnFailed: &messages.TurnFailed{Message: "model: rate limited", Code: "rate_limited", Attempts: 3}}}
	require.NoError(t, journal.ValidateEvent(ev))
	require.NoError(t, journal.ValidateAppend(&messages.AppendRequest{ConversationId: "c", Events: []*messages.Event{userEv("hi"), ev},
		Status: messages.ConversationStatus_CONVERSATION_STATUS_IDLE}))
	bad := &messages.Event{Body: &messages.Event_TurnFailed{TurnFailed: &messages.TurnFailed{Message: "caf\xe9"}}}
	require.ErrorIs(t, journal.ValidateEvent(bad), journal.ErrInvalid)
}

// TestSeqGap: the first event out of place, from the first one's seq or
// from a given first seq.
func TestSeqGap(t *testing.T) {
	evs := func(seqs ...uint64) []*messages.Event {
		out := make([]*messages.Event, len(seqs))
		for i, s := range seqs {
			out[i] = &messages.Event{Seq: s}
		}
		return out
	}
	for _, tc := range []struct {
		name      string
		evs       []*messages.Event
		first     uint64
		got, want uint64
		gap       bool
	}{
		{"empty", nil, 5, 0, 0, false},
		{"consecutive", evs(3, 4, 5), 0, 0, 0, false},
		{"consecutive from first", evs(3, 4, 5), 3, 0, 0, false},
		{"hole", evs(3, 4, 6, 7), 0, 6, 5, true},
		{"late start", evs(4, 5), 3, 4, 3, true},
		{"repeat", evs(1, 2, 2), 1, 2, 3, true},
	} {
		got, want, gap := journal.SeqGap(tc.evs, tc.first)
		require.Equal(t, tc.gap, gap, tc.name)
		require.Equal(t, tc.got, got, tc.name)
		require.Equal(t, tc.want, want, tc.name)
	}
}

// TestValidateModelCall: an audit row needs a conversation id, and its
// created time may be unset but, if set, must be a valid timestamp.
func TestValidateModelCall(t *testing.T) {
	require.NoError(t, journal.ValidateModelCall(&messages.ModelCall{ConversationId: "c"}), "no created time")
	require.NoError(t, journal.ValidateModelCall(&messages.ModelCall{ConversationId: "c", Created: &timestamppb.Timestamp{Seconds: 100, Nanos: 999_999_999}}))
	for name, mc := range map[string]*messages.ModelCall{
		"nil":             nil,
		"no conversation": {},
		"nanos too many":  {ConversationId: "c", Created: &timestamppb.Timestamp{Seconds: 100, Nanos: 1_000_000_000}},
		"negative nanos":  {ConversationId: "c", Created: &timestamppb.Timestamp{Seconds: 100, Nanos: -1}},
		"year 10000":      {ConversationId: "c", Created: &timestamppb.Timestamp{Seconds: 253402300800}},
		"before year 1":   {ConversationId: "c", Created: &timestamppb.Timestamp{Seconds: -62135596801}},
	} {
		require.ErrorIs(t, journal.ValidateModelCall(mc), journal.ErrInvalid, name)
	}
}

// TestStoredTimesChecked: every time a write stores is held to CheckTime's
// rule, the limits included: the edges of the years 1 to 9999 pass, one
// second beyond either or nanos outside a second is ErrInvalid, wherever
// the time sits (an event, an appended or upserted row, a resolution, a
// summary, a fork's events, an fsm_state's retry_not_before,
// ResolveToolCall's at). Unset times pass.
func TestStoredTimesChecked(t *testing.T) {
	first := &timestamppb.Timestamp{Seconds: -62135596800}
	last := &timestamppb.Timestamp{Seconds: 253402300799, Nanos: 999_999_999}
	fork := func(ts *timestamppb.Timestamp) error {
		ev := userEv("a")
		ev.Seq, ev.Time = 1, ts
		return journal.ValidateFork(&messages.ForkRequest{ConversationId: "f", Events: []*messages.Event{ev},
			Status: messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE})
	}
	checks := map[string]func(*timestamppb.Timestamp) error{
		"event": func(ts *timestamppb.Timestamp) error {
			ev := userEv("a")
			ev.Time = ts
			return journal.ValidateEvent(ev)
		},
		"appended event": func(ts *timestamppb.Timestamp) error {
			return journal.ValidateAppendShape(validReq(func(r *messages.AppendRequest) { r.Events[1].Time = ts }))
		},
		"row created": func(ts *timestamppb.Timestamp) error {
			rec := call("c", "c/1")
			rec.Created = ts
			return journal.ValidateToolCall(rec)
		},
		"row resolved": func(ts *timestamppb.Timestamp) error {
			rec := call("c", "c/1")
			rec.Resolved = ts
			return journal.ValidateToolCall(rec)
		},
		"row deadline": func(ts *timestamppb.Timestamp) error {
			return journal.ValidateAppend(validReq(func(r *messages.AppendRequest) { r.ToolCalls[0].Deadline = ts }))
		},
		"resolution": func(ts *timestamppb.Timestamp) error {
			return journal.ValidateAppend(validReq(func(r *messages.AppendRequest) { r.Resolutions[0].At = ts }))
		},
		"summary": func(ts *timestamppb.Timestamp) error {
			return journal.ValidateSummaryShape("c", &messages.Summary{FromSeq: 1, ToSeq: 1, Created: ts})
		},
		"fork event": fork,
		"fsm_state retry_not_before": func(ts *timestamppb.Timestamp) error {
			return journal.ValidateAppend(validReq(func(r *messages.AppendRequest) { r.FsmState.RetryNotBefore = ts }))
		},
		"resolve at": func(ts *timestamppb.Timestamp) error {
			return journal.ValidateResolvedAt("c/1", ts.AsTime())
		},
	}
	for name, check := range checks {
		require.NoError(t, check(nil), "%s unset", name)
		require.NoError(t, check(first), "%s at the start of year 1", name)
		require.NoError(t, check(last), "%s at the end of year 9999", name)
		for bad, ts := range map[string]*timestamppb.Timestamp{
			"year 10000":    {Seconds: 253402300800},
			"before year 1": {Seconds: -62135596801},
		} {
			require.ErrorIs(t, check(ts), journal.ErrInvalid, "%s %s", name, bad)
		}
		if name != "resolve at" { // a time.Time has no such nanos
			require.ErrorIs(t, check(&timestamppb.Timestamp{Seconds: 100, Nanos: 1_000_000_000}), journal.ErrInvalid, "%s nanos out of range", name)
		}
	}
	require.NoError(t, journal.ValidateResolvedAt("c/1", time.Time{}), "the zero time: no Resolved time")
}

// TestStatusWritten: an ENDED row stays ENDED whatever is stated; else a
// status other than SUSPENDED is written as stated; SUSPENDED becomes
// ACTIVE when a call the fsm_state names pending is answered, and stays
// SUSPENDED when none is (or none is named); an error reading a call is
// returned.
func TestStatusWritten(t *testing.T) {
	const (
		active    = messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE
		suspended = messages.ConversationStatus_CONVERSATION_STATUS_SUSPENDED
		idle      = messages.ConversationStatus_CONVERSATION_STATUS_IDLE
		ended     = messages.ConversationStatus_CONVERSATION_STATUS_ENDED
	)
	fsm := &messages.FSMState{Pending: map[string]*messages.PendingCall{"a": {}, "b": {}}}
	answered := func(ids ...string) func(string) (bool, error) {
		return func(id string) (bool, error) {
			for _, a := range ids {
				if a == id {
					return true, nil
				}
			}
			return false, nil
		}
	}
	boom := errors.New("boom")
	for _, tc := range []struct {
		name     string
		row, st  messages.ConversationStatus
		fsm      *messages.FSMState
		answered func(string) (bool, error)
		want     messages.ConversationStatus
		err      error
	}{
		{"IdleAsStated", active, idle, fsm, answered("a"), idle, nil},
		{"ActiveAsStated", suspended, active, fsm, answered(), active, nil},
		{"SuspendedNothingAnswered", active, suspended, fsm, answered("c"), suspended, nil},
		{"SuspendedOneAnswered", idle, suspended, fsm, answered("b"), active, nil},
		{"SuspendedNoFSMState", active, suspended, nil, answered("a"), suspended, nil},
		{"ReadError", active, suspended, fsm, func(string) (bool, error) { return false, boom }, suspended, boom},
		{"EndedStaysEndedActive", ended, active, fsm, answered(), ended, nil},
		{"EndedStaysEndedIdle", ended, idle, fsm, answered(), ended, nil},
		{"EndedStaysEndedSuspendedAnswered", ended, suspended, fsm, answered("b"), ended, nil},
		{"EndedAsStated", active, ended, fsm, answered("b"), ended, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := journal.StatusWritten(tc.row, tc.st, tc.fsm, tc.answered)
			if tc.err != nil {
				require.ErrorIs(t, err, tc.err)
			} else {
				require.NoError(t, err)
			}
			require.Equal(t, tc.want, got)
		})
	}
}

// TestAppendedRowFits: the row an append leaves is measured as it will be:
// an fsm_state that replaces a large one fits (the bound that counts both
// is only a shortcut), settings merged beside large ones do not.
func TestAppendedRowFits(t *testing.T) {
	third := strings.Repeat("p", journal.MaxRecordBytes/3)
	fsm := func() *messages.FSMState {
		return &messages.FSMState{State: messages.AgentState_AGENT_STATE_AWAITING_INPUT,
			Pending: map[string]*messages.PendingCall{"tc": {ToolCallId: "tc", Prompt: third + third}}}
	}
	row := &messages.Conversation{Id: "c", FsmState: fsm()}
	require.NoError(t, journal.AppendedRowFits(row, &messages.AppendRequest{ConversationId: "c", FsmState: fsm()}), "a large fsm_state replacing one as large")
	require.NoError(t, journal.AppendedRowFits(nil, &messages.AppendRequest{ConversationId: "c", FsmState: fsm()}), "no row yet")
	require.NoError(t, journal.AppendedRowFits(row, &messages.AppendRequest{ConversationId: "c"}), "nothing of the row changes")
	err := journal.AppendedRowFits(row, &messages.AppendRequest{ConversationId: "c", Settings: map[string]string{"k": third}})
	require.ErrorIs(t, err, journal.ErrInvalid, "settings beside the fsm_state")
	err = journal.AppendedRowFits(&messages.Conversation{Id: "c", Settings: map[string]string{"k": third + third}}, &messages.AppendRequest{ConversationId: "c", FsmState: fsm()})
	require.ErrorIs(t, err, journal.ErrInvalid, "an fsm_state beside the settings")
	require.Equal(t, third+third, row.GetFsmState().GetPending()["tc"].GetPrompt(), "the row is not changed")
}

// TestCheckEnded: a fenced append to an ENDED row is refused with
// ErrEnded unless it states ENDED; an unfenced one, and any append to a
// row that is not ENDED (or absent), passes.
func TestCheckEnded(t *testing.T) {
	ended := messages.ConversationStatus_CONVERSATION_STATUS_ENDED
	active := messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE
	none := messages.ConversationStatus_CONVERSATION_STATUS_UNSPECIFIED
	for _, tc := range []struct {
		name    string
		req     *messages.AppendRequest
		row     messages.ConversationStatus
		refused bool
	}{
		{"FencedSendToEnded", &messages.AppendRequest{ConversationId: "c", ExpectedLast: 2, Events: []*messages.Event{userEv("x")}}, ended, true},
		{"FencedActiveToEnded", &messages.AppendRequest{ConversationId: "c", ExpectedLast: 2, Status: active}, ended, true},
		{"FencedSettingsToEnded", &messages.AppendRequest{ConversationId: "c", ExpectedLast: 2, Settings: map[string]string{"k": "v"}}, ended, true},
		{"FencedStatingEnded", &messages.AppendRequest{ConversationId: "c", ExpectedLast: 2, Events: []*messages.Event{userEv("x")}, Status: ended}, ended, false},
		{"UnfencedToEnded", &messages.AppendRequest{ConversationId: "c", Unfenced: true, Status: active}, ended, false},
		{"FencedToActive", &messages.AppendRequest{ConversationId: "c", ExpectedLast: 2, Events: []*messages.Event{userEv("x")}}, active, false},
		{"FencedToNoRow", &messages.AppendRequest{ConversationId: "c", Events: []*messages.Event{userEv("x")}}, none, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := journal.CheckEnded(tc.req, tc.row)
			if !tc.refused {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, journal.ErrEnded)
			require.False(t, errors.Is(err, journal.ErrInvalid) || errors.Is(err, journal.ErrConflict), "only ErrEnded: %v", err)
			require.Contains(t, err.Error(), `"c"`)
		})
	}
}
