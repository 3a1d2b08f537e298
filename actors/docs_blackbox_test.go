package actors_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/snapshot"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
)

// Black-box tests of the package's helpers, from their doc.

// TestBBValidateAgentName: "1 to MaxAgentNameBytes bytes of ASCII letters,
// digits, '_', '-' and '.', and not DefaultAgentName. Errors wrap
// journal.ErrInvalid."
func TestBBValidateAgentName(t *testing.T) {
	for _, ok := range []string{"a", "Z", "0", "_", "-", ".", "..", "Default", "billing-v2.1_eu", strings.Repeat("x", actors.MaxAgentNameBytes)} {
		require.NoError(t, actors.ValidateAgentName(ok), "%q", ok)
	}
	for _, bad := range []string{"", actors.DefaultAgentName, strings.Repeat("x", actors.MaxAgentNameBytes+1),
		"a b", "a/b", "a\x00b", "é", "\xff", "a\n", "ａ", "a:b", "a@b", "a+b", "a*b", strings.Repeat("é", 32)} {
		err := actors.ValidateAgentName(bad)
		require.ErrorIs(t, err, journal.ErrInvalid, "%q", bad)
	}
	huge := strings.Repeat("x", 1<<20)
	err := actors.ValidateAgentName(huge)
	require.ErrorIs(t, err, journal.ErrInvalid)
	require.Less(t, len(err.Error()), 200, "a name refused for its size is not quoted")
}

// TestBBNewToolCallID: "call_" and 26 characters; ids minted later sort
// after earlier ones; each is a valid tool call id for the Store; minting
// never panics, whatever the time.
func TestBBNewToolCallID(t *testing.T) {
	re := regexp.MustCompile(`^call_[a-z2-7]{26}$`)
	base := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	prev := ""
	for i, d := range []time.Duration{0, 1, 2, time.Microsecond, time.Second, time.Hour, 24 * 365 * time.Hour} {
		id := actors.NewToolCallIDAt(base.Add(d))
		require.Regexp(t, re, id)
		require.NoError(t, journal.ValidateID("tool call id", id))
		if i > 0 {
			require.Less(t, prev, id, "minted at a later time, sorts later")
		}
		prev = id
	}
	now := actors.NewToolCallID()
	require.Regexp(t, re, now)
	require.NotEqual(t, now, actors.NewToolCallID(), "random bits make two ids of one instant differ")
	a, b := actors.NewToolCallIDAt(base), actors.NewToolCallIDAt(base)
	require.NotEqual(t, a, b)
	for _, at := range []time.Time{{}, time.Unix(0, 0), time.Unix(-1, 0), time.Unix(math.MaxInt64, 0), time.Unix(math.MinInt64, 0)} {
		require.Regexp(t, re, actors.NewToolCallIDAt(at), "%v", at)
	}
}

// TestBBExpiredOutcomeAndSystemIdentity: "a tool error with code
// \"expired\". Each call returns a new value"; the system's identity, a new
// message on each call.
func TestBBExpiredOutcomeAndSystemIdentity(t *testing.T) {
	o := actors.ExpiredOutcome()
	require.Equal(t, "expired", o.GetError().GetCode())
	o.GetError().Code = "changed"
	require.Equal(t, "expired", actors.ExpiredOutcome().GetError().GetCode(), "a new value each call")
	require.NotSame(t, actors.ExpiredOutcome(), actors.ExpiredOutcome())

	id := actors.SystemIdentity()
	require.Equal(t, agent.SystemUserID, id.GetUserId())
	id.UserId = "someone"
	require.Equal(t, agent.SystemUserID, actors.SystemIdentity().GetUserId(), "a new message each call")
}

// TestBBTurnEndOf: each kind of event that ends a turn, and nil for any
// other (nil and bodiless events included, never a panic).
func TestBBTurnEndOf(t *testing.T) {
	text := func(s string) *messages.ContentPart {
		return &messages.ContentPart{Part: &messages.ContentPart_Text{Text: s}}
	}
	for _, ev := range []*messages.Event{nil, {}, {Seq: 3},
		{Body: &messages.Event_UserMsg{UserMsg: &messages.UserMessage{}}},
		{Body: &messages.Event_AssistantMsg{AssistantMsg: &messages.AssistantMessage{ToolCalls: []*messages.ToolCall{{Id: "c"}}}}},
		{Body: &messages.Event_Rewind{Rewind: &messages.Rewind{}}},
		{Body: &messages.Event_AssistantMsg{}}, {Body: &messages.Event_Suspension{}}, {Body: &messages.Event_TurnFailed{}},
	} {
		end := actors.TurnEndOf(ev)
		switch ev.GetBody().(type) {
		case *messages.Event_AssistantMsg, *messages.Event_Suspension, *messages.Event_TurnFailed:
			if _, ok := ev.GetBody().(*messages.Event_AssistantMsg); ok && len(ev.GetAssistantMsg().GetToolCalls()) > 0 {
				require.Nil(t, end, "%v", ev)
			} else {
				require.NotNil(t, end, "%v: a nil body message still ends its turn", ev)
			}
		default:
			require.Nil(t, end, "%v", ev)
		}
	}

	end := actors.TurnEndOf(&messages.Event{Seq: 7, Body: &messages.Event_AssistantMsg{AssistantMsg: &messages.AssistantMessage{
		Content: []*messages.ContentPart{text("a"), {Part: &messages.ContentPart_Image{}}, text("b")}}}})
	require.Equal(t, actors.TurnAnswered, end.Outcome)
	require.EqualValues(t, 7, end.Seq)
	require.Equal(t, "a\nb", end.Text, "text parts joined by newlines")

	pending := []*messages.PendingCall{{ToolCallId: "h"}}
	end = actors.TurnEndOf(&messages.Event{Seq: 8, Body: &messages.Event_Suspension{Suspension: &messages.Suspension{Pending: pending}}})
	require.Equal(t, actors.TurnSuspended, end.Outcome)
	require.Len(t, end.Pending, 1)

	end = actors.TurnEndOf(&messages.Event{Seq: 9, Body: &messages.Event_TurnFailed{TurnFailed: &messages.TurnFailed{
		Message: "slow down", Code: actors.CodeRateLimited, Attempts: 3}}})
	require.Equal(t, actors.TurnFailed, end.Outcome)
	var te *actors.TurnError
	require.ErrorAs(t, end.Err, &te)
	require.Equal(t, 3, te.Attempts)
	require.ErrorIs(t, end.Err, agent.ErrRateLimited)
	require.Equal(t, "slow down", end.Err.Error())

	end = actors.TurnEndOf(&messages.Event{Seq: 10, Body: &messages.Event_Rewind{Rewind: &messages.Rewind{CancelledTurn: true}}})
	require.Equal(t, actors.TurnCancelled, end.Outcome)
	require.EqualValues(t, 10, end.Seq)
	require.ErrorIs(t, end.Err, actors.ErrTurnCancelled)

	for o, name := range map[actors.TurnOutcome]string{actors.TurnAnswered: "answered", actors.TurnSuspended: "suspended",
		actors.TurnFailed: "failed", actors.TurnCancelled: "cancelled", 0: "unknown", 99: "unknown"} {
		require.Equal(t, name, o.String())
	}
}

// TestBBTurnErrorCodes: TurnFailureCode gives the code of the first
// sentinel err wraps, else CodeModel; a TurnError unwraps to the sentinel
// of its code, nil for CodeModel and unknown codes; the two agree.
func TestBBTurnErrorCodes(t *testing.T) {
	for code, sentinel := range map[string]error{
		actors.CodeRateLimited: agent.ErrRateLimited, actors.CodeUnavailable: agent.ErrUnavailable,
		actors.CodeInterrupted: agent.ErrInterrupted, actors.CodeMalformed: agent.ErrMalformed,
		actors.CodeIncomplete: agent.ErrIncomplete, actors.CodeContextLength: agent.ErrContextLength,
		actors.CodeRefused: agent.ErrRefused, actors.CodeRequest: agent.ErrRequest, actors.CodePanicked: agent.ErrPanicked,
		actors.CodeTimeout: context.DeadlineExceeded, actors.CodeInvalidAnswer: journal.ErrInvalid,
		actors.CodeInvalidToolCalls: actors.ErrInvalidToolCalls,
	} {
		require.Equal(t, code, actors.TurnFailureCode(fmt.Errorf("x: %w", sentinel)), code)
		te := &actors.TurnError{Message: "m", Code: code}
		require.ErrorIs(t, te, sentinel, code)
		require.Equal(t, code, actors.TurnFailureCode(te), "a TurnError read back has the code it was written with")
	}
	require.Equal(t, actors.CodeModel, actors.TurnFailureCode(errors.New("other")))
	require.Equal(t, actors.CodeModel, actors.TurnFailureCode(nil))
	for _, code := range []string{actors.CodeModel, "", "from_a_newer_build", "\xff"} {
		require.NoError(t, (&actors.TurnError{Code: code}).Unwrap(), "%q", code)
	}
	require.True(t, actors.Permanent(actors.ErrInvalidToolCalls))
	require.False(t, actors.Permanent(nil))
	require.False(t, actors.DefaultRetryable(nil))
}

// TestBBRetryPolicyHostile: WithDefaults and Delay never panic and never
// give a negative or out-of-bounds wait, whatever the fields: the wait is
// between InitialInterval and MaximumInterval, and MaximumAttempts is at
// least 1.
func TestBBRetryPolicyHostile(t *testing.T) {
	for _, p := range []actors.RetryPolicy{
		{}, {InitialInterval: -time.Second, MaximumInterval: -time.Second, MaximumAttempts: math.MinInt},
		{BackoffCoefficient: math.NaN()}, {BackoffCoefficient: math.Inf(1)}, {BackoffCoefficient: math.Inf(-1)},
		{BackoffCoefficient: 0.5}, {BackoffCoefficient: math.MaxFloat64, InitialInterval: math.MaxInt64},
		{InitialInterval: math.MaxInt64, MaximumInterval: time.Nanosecond}, {MaximumAttempts: math.MaxInt},
	} {
		w := p.WithDefaults()
		require.Positive(t, w.InitialInterval, "%+v", p)
		require.GreaterOrEqual(t, w.BackoffCoefficient, 1.0, "%+v: less than 1 means the default", p)
		require.GreaterOrEqual(t, w.MaximumInterval, w.InitialInterval, "%+v", p)
		require.GreaterOrEqual(t, w.MaximumAttempts, 1, "%+v", p)
		require.NotNil(t, w.Retryable)
		for _, attempt := range []int{math.MinInt, -1, 0, 1, 2, 3, 64, 1 << 20, math.MaxInt} {
			d := w.Delay(attempt)
			require.GreaterOrEqual(t, d, w.InitialInterval, "%+v attempt %d", p, attempt)
			require.LessOrEqual(t, d, w.MaximumInterval, "%+v attempt %d", p, attempt)
		}
	}
}

// TestBBWorkerDispatcher: "DefaultMailboxWorkers if workers <= 0";
// Schedule runs every function, before and after Close; Close is
// idempotent; Throughput is protoactor's default of 300.
func TestBBWorkerDispatcher(t *testing.T) {
	for _, workers := range []int{math.MinInt, -1, 0, 1, 3} {
		d := actors.NewWorkerDispatcher(workers)
		require.Equal(t, 300, d.Throughput())
		var wg sync.WaitGroup
		const n = 200
		wg.Add(2 * n)
		for range n {
			d.Schedule(wg.Done)
		}
		d.Close()
		d.Close()
		for range n {
			d.Schedule(wg.Done)
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("workers %d: not every scheduled function ran", workers)
		}
	}
}

// TestBBOwesTurn: "not after a turn_failed or a rewind at the end;
// otherwise the last event the model sees is a user message or a tool
// result" (a result the context leaves out is not seen, with named agents
// too); a nil or empty working set (no conversation) owes nothing, and
// never panics.
func TestBBOwesTurn(t *testing.T) {
	user := &messages.Event{Body: &messages.Event_UserMsg{UserMsg: &messages.UserMessage{}}}
	answer := &messages.Event{Body: &messages.Event_AssistantMsg{AssistantMsg: &messages.AssistantMessage{}}}
	failed := &messages.Event{Body: &messages.Event_TurnFailed{TurnFailed: &messages.TurnFailed{Code: actors.CodeModel}}}
	ws := func(evs ...*messages.Event) *snapshot.WorkingSet {
		var log []*messages.Event
		for i, ev := range evs {
			ev = proto.Clone(ev).(*messages.Event)
			ev.Seq = uint64(i + 1)
			log = append(log, ev)
		}
		w, err := snapshot.Rebuild(nil, log)
		require.NoError(t, err)
		return w
	}
	require.False(t, actors.OwesTurn(nil, nil))
	require.False(t, actors.OwesTurn(nil, []string{"a"}))
	require.False(t, actors.OwesTurn(ws(), nil))
	require.True(t, actors.OwesTurn(ws(user), nil))
	require.False(t, actors.OwesTurn(ws(user, answer), nil))
	require.False(t, actors.OwesTurn(ws(user, failed), nil))
	require.True(t, actors.OwesTurn(ws(user, answer, user), nil))

	// A result the context leaves out (an orphan, a second result) answers
	// nothing: the event before it decides.
	calls := &messages.Event{Body: &messages.Event_AssistantMsg{AssistantMsg: &messages.AssistantMessage{
		ToolCalls: []*messages.ToolCall{{Id: "x", Name: "pay"}}}}}
	result := func(id string) *messages.Event {
		return &messages.Event{Body: &messages.Event_ToolResult{ToolResult: &messages.ToolResultEvent{ToolCallId: id, Name: "pay",
			Outcome: &messages.ToolOutcome{Outcome: &messages.ToolOutcome_Content{Content: "1"}}}}}
	}
	require.True(t, actors.OwesTurn(ws(user, calls, result("x")), nil))
	require.False(t, actors.OwesTurn(ws(user, answer, result("ghost")), nil), "an orphan")
	require.True(t, actors.OwesTurn(ws(user, result("ghost")), nil), "the user message still owes one")
	require.False(t, actors.OwesTurn(ws(user, calls, result("x"), answer, result("x")), nil), "a second result")
	require.False(t, actors.OwesTurn(ws(result("ghost")), nil), "nothing the model sees")

	// The same with named agents: an agent's result that answers no call
	// is not its last event, the one before it decides.
	critics := []string{"critic"}
	of := func(ev *messages.Event) *messages.Event {
		ev = proto.Clone(ev).(*messages.Event)
		ev.Agent = "critic"
		return ev
	}
	require.True(t, actors.OwesTurn(ws(of(user), of(calls), of(result("x"))), critics))
	require.False(t, actors.OwesTurn(ws(of(user), of(answer), of(result("ghost"))), critics), "an orphan")
	require.True(t, actors.OwesTurn(ws(of(user), of(result("ghost"))), critics), "the user message still owes one")
	require.False(t, actors.OwesTurn(ws(of(user), of(calls), of(result("x")), of(answer), of(result("x"))), critics), "a second result")
	require.False(t, actors.OwesTurn(ws(of(result("ghost"))), critics), "nothing the model sees")
	require.False(t, actors.OwesTurn(ws(user, answer, result("ghost")), critics), "the default agent's orphan")
	require.True(t, actors.OwesTurn(ws(of(user), answer, result("ghost")), critics), "the critic's message still owes one")
}

// TestBBCheckRewindInLog: a target at or after the latest summary's end,
// or in a conversation without a summary, is left to the core (false, nil,
// nil); one the summary covers is checked against the whole log; an edit
// must name a user message on the head; refused targets wrap
// journal.ErrInvalid; an unknown conversation or a hostile id is an error or
// left to the core, never a panic.
func TestBBCheckRewindInLog(t *testing.T) {
	ctx := context.Background()
	store := memjournal.New(memjournal.Options{})
	user := func(s string) *messages.Event {
		return &messages.Event{Body: &messages.Event_UserMsg{UserMsg: &messages.UserMessage{
			Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: s}}}}}}
	}
	answer := &messages.Event{Body: &messages.Event_AssistantMsg{AssistantMsg: &messages.AssistantMessage{}}}
	var evs []*messages.Event
	for i := range 3 {
		evs = append(evs, user(fmt.Sprint("u", i)), proto.Clone(answer).(*messages.Event))
	}
	_, err := store.Append(ctx, &messages.AppendRequest{ConversationId: "c", Events: evs})
	require.NoError(t, err)

	checked, edited, err := actors.CheckRewindInLog(ctx, store, "c", 1, 0)
	require.False(t, checked, "no summary: left to the core")
	require.Nil(t, edited)
	require.NoError(t, err)

	require.NoError(t, store.PutSummary(ctx, "c", &messages.Summary{FromSeq: 1, ToSeq: 4, Content: "s"}))
	for _, toSeq := range []uint64{4, 5, 6, 7, math.MaxUint64} {
		checked, _, err := actors.CheckRewindInLog(ctx, store, "c", toSeq, 0)
		require.False(t, checked, "toSeq %d at or after the summary's end: left to the core", toSeq)
		require.NoError(t, err)
	}
	checked, edited, err = actors.CheckRewindInLog(ctx, store, "c", 2, 0)
	require.NoError(t, err)
	require.True(t, checked)
	require.Nil(t, edited)

	checked, edited, err = actors.CheckRewindInLog(ctx, store, "c", 2, 3)
	require.NoError(t, err)
	require.True(t, checked)
	require.EqualValues(t, 3, edited.GetSeq())
	require.Equal(t, "u1", edited.GetUserMsg().GetContent()[0].GetText())

	for _, editSeq := range []uint64{2, 4, 7, 1000, math.MaxUint64} {
		checked, _, err := actors.CheckRewindInLog(ctx, store, "c", 2, editSeq)
		require.False(t, checked, "edit of seq %d", editSeq)
		require.ErrorIs(t, err, journal.ErrInvalid, "edit of seq %d: not a user message on the head", editSeq)
	}
	for _, id := range []string{"unknown", "", "\xff", strings.Repeat("x", 1<<16)} {
		checked, _, err := actors.CheckRewindInLog(ctx, store, id, 1, 1)
		require.False(t, checked, "%.10q", id)
		if err != nil {
			require.True(t, errors.Is(err, journal.ErrInvalid) || errors.Is(err, journal.ErrNotFound), "%.10q: %v", id, err)
		}
	}
}

// hugeBatches is a Store that asks for any number of concurrent batches.
type hugeBatches struct {
	journal.Store
	n int
}

func (s hugeBatches) ConcurrentBatches() int { return s.n }

// TestBBJournalOptionsBounds: "The zero value is valid"; a MaxBatch of zero
// or less means the default; MaxInflight, and what a Store asks for through
// ConcurrentBatches, are capped at MaxJournalInflight, so that no value
// makes the actor fail to start (it made a channel and a goroutine per
// batch in flight). Writes are committed and answered in every case.
func TestBBJournalOptionsBounds(t *testing.T) {
	for name, tc := range map[string]struct {
		opts  actors.JournalOptions
		store func(journal.Store) journal.Store
	}{
		"zero":                     {},
		"negative":                 {opts: actors.JournalOptions{MaxBatch: -1, MaxInflight: -1}},
		"huge MaxInflight":         {opts: actors.JournalOptions{MaxBatch: math.MaxInt, MaxInflight: math.MaxInt}},
		"huge ConcurrentBatches":   {store: func(s journal.Store) journal.Store { return hugeBatches{s, math.MaxInt} }},
		"negative ConcurrentBatch": {store: func(s journal.Store) journal.Store { return hugeBatches{s, math.MinInt} }},
	} {
		sys := newTestSystem(t)
		var store journal.Store = memjournal.New(memjournal.Options{})
		if tc.store != nil {
			store = tc.store(store)
		}
		pid := sys.Root.Spawn(actors.NewJournal(store, tc.opts))
		for i := range 3 {
			res, err := sys.Root.RequestFuture(pid, write(uint64(i+1), userAppend("a", uint64(i), "x")), replyWait).Result()
			require.NoError(t, err, name)
			r, ok := res.(*messages.JournalWriteReply)
			require.True(t, ok, "%s: reply is %T", name, res)
			require.NoError(t, replyErr(r), name)
			require.EqualValues(t, i+1, r.GetReply().GetLastSeq(), name)
		}
	}
}
