package tests

// Black-box tests of RELIABILITY.md's promises that no other test pins as
// the document states them: the default model retry policy (which errors,
// how many calls, how far apart), a retry after an interrupted stream, the
// default bound on invalid tool answers, and the number of folded request
// ids a summary remembers (Limits). Written against the public API only.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/snapshot"
)

// TestRBDefaultModelRetryRetriesEachTransientError: with Options.ModelRetry
// left zero, each transient sentinel (wrapped, as a provider returns it) is
// called again after 1 s, then after 2 s, 3 calls in all; then the turn
// fails durably with a turn_failed event naming the error's code and 3
// attempts, nothing of the failed calls written.
func TestRBDefaultModelRetryRetriesEachTransientError(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code string
	}{
		{agent.ErrRateLimited, actors.CodeRateLimited},
		{agent.ErrUnavailable, actors.CodeUnavailable},
		{agent.ErrInterrupted, actors.CodeInterrupted},
		{agent.ErrIncomplete, actors.CodeIncomplete},
		{agent.ErrMalformed, actors.CodeMalformed},
		{context.DeadlineExceeded, actors.CodeTimeout},
	} {
		t.Run(tc.code, func(t *testing.T) {
			h := newHarness(t, openStore(t, "memory"), nil)
			for range 3 {
				h.model.PushError("c", fmt.Errorf("provider: %w", tc.err))
			}
			sub := subscribeAndSendHi(t, h)

			for attempt, delay := range []time.Duration{time.Second, 2 * time.Second} {
				u := h.awaitUpdate(sub, isRetry)
				require.ErrorIs(t, u.Err, tc.err)
				require.Equal(t, lazarus.Retry{Attempt: attempt + 1, Delay: delay}, *u.Retry)
				require.Equal(t, attempt+1, h.model.Calls("c"), "no call before the delay")
				h.clock.Advance(delay - time.Nanosecond)
				require.Equal(t, attempt+1, h.model.Calls("c"), "no call before the delay")
				h.clock.Advance(time.Nanosecond)
			}
			u := h.awaitUpdate(sub, isTurnEnd)
			require.Equal(t, lazarus.TurnFailed, u.TurnEnd.Outcome)
			require.ErrorIs(t, u.TurnEnd.Err, tc.err)
			var te *lazarus.TurnError
			require.ErrorAs(t, u.TurnEnd.Err, &te)
			require.Equal(t, tc.code, te.Code)
			require.Equal(t, 3, te.Attempts, "3 calls in all")
			require.Equal(t, 3, h.model.Calls("c"))
			evs := h.history("c")
			require.Equal(t, []string{"user_msg", "turn_failed:" + tc.code}, types(evs))
			fromLog := lazarus.TurnEndOf(evs[1])
			require.Equal(t, lazarus.TurnFailed, fromLog.Outcome)
			require.ErrorIs(t, fromLog.Err, tc.err, "the end read from the log maps its code back to the sentinel")
			require.Equal(t, 0, h.clock.Timers(), "no fourth call is planned")
		})
	}
}

// TestRBDefaultModelRetryNeverRetriesPermanentErrors: with the default
// policy, agent.ErrPanicked, ErrContextLength, ErrRefused and ErrRequest
// (wrapped) fail the turn at once: one call, no retry update, a turn_failed
// event of one attempt.
func TestRBDefaultModelRetryNeverRetriesPermanentErrors(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code string
	}{
		{agent.ErrPanicked, actors.CodePanicked},
		{agent.ErrContextLength, actors.CodeContextLength},
		{agent.ErrRefused, actors.CodeRefused},
		{agent.ErrRequest, actors.CodeRequest},
	} {
		t.Run(tc.code, func(t *testing.T) {
			h := newHarness(t, openStore(t, "memory"), nil)
			h.model.PushError("c", fmt.Errorf("provider: %w", tc.err))
			sub := subscribeAndSendHi(t, h)
			u := h.awaitUpdate(sub, func(u actors.Update) bool { return u.Retry != nil || u.TurnEnd != nil })
			require.Nil(t, u.Retry, "not retried")
			require.Equal(t, lazarus.TurnFailed, u.TurnEnd.Outcome)
			require.ErrorIs(t, u.TurnEnd.Err, tc.err)
			var te *lazarus.TurnError
			require.ErrorAs(t, u.TurnEnd.Err, &te)
			require.Equal(t, tc.code, te.Code)
			require.Equal(t, 1, te.Attempts)
			require.Equal(t, 1, h.model.Calls("c"))
			evs := h.history("c")
			require.Equal(t, []string{"user_msg", "turn_failed:" + tc.code}, types(evs))
			require.ErrorIs(t, lazarus.TurnEndOf(evs[1]).Err, tc.err, "the end read from the log maps its code back to the sentinel")
		})
	}
}

// TestRBRetryAfterAnInterruptedStreamStreamsAgain: a call that streamed part
// of its text and failed with agent.ErrInterrupted is retried; the retry's
// update voids the deltas streamed (Restart), the retry streams its text
// again from the start, and the answer is the retry's alone.
func TestRBRetryAfterAnInterruptedStreamStreamsAgain(t *testing.T) {
	var calls atomic.Int32
	model := agent.ModelFunc(func(ctx context.Context, _ agent.Turn, onDelta func(string)) (*messages.AssistantMessage, error) {
		if calls.Add(1) == 1 {
			onDelta("Hel")
			return nil, fmt.Errorf("stream cut: %w", agent.ErrInterrupted)
		}
		onDelta("Hello")
		onDelta(", world")
		return agent.Text("Hello, world"), nil
	})
	h := newHarness(t, openStore(t, "memory"), func(o *lazarus.Options) { o.Model = model })
	sub := subscribeAndSendHi(t, h)

	var deltas []string
	u := h.awaitUpdate(sub, func(u actors.Update) bool {
		if u.Delta != "" {
			deltas = append(deltas, u.Delta)
		}
		return u.Retry != nil
	})
	require.Equal(t, []string{"Hel"}, deltas)
	require.ErrorIs(t, u.Err, agent.ErrInterrupted)
	require.True(t, u.Restart, "the retry voids the deltas streamed")
	require.Equal(t, lazarus.Retry{Attempt: 1, Delay: time.Second}, *u.Retry)
	h.clock.Advance(time.Second)

	deltas = nil
	u = h.awaitUpdate(sub, func(u actors.Update) bool {
		if u.Delta != "" {
			deltas = append(deltas, u.Delta)
		}
		return u.TurnEnd != nil
	})
	require.Equal(t, []string{"Hello", ", world"}, deltas, "the retry streams its text from the start")
	require.Equal(t, lazarus.TurnAnswered, u.TurnEnd.Outcome)
	require.Equal(t, "Hello, world", u.TurnEnd.Text)
	evs := h.history("c")
	require.Equal(t, []string{"user_msg", "assistant_msg"}, types(evs))
	require.Equal(t, "Hello, world", evs[1].GetAssistantMsg().GetContent()[0].GetText())
}

// TestRBDefaultMaxInvalidToolAnswers: with Options.MaxInvalidToolAnswers
// left zero, three answers in a row with invalid calls each get an error
// result and the model is called again; the fourth fails the turn with
// ErrInvalidToolCalls, and is not written. Three, then a valid answer: the
// turn is answered.
func TestRBDefaultMaxInvalidToolAnswers(t *testing.T) {
	require.Equal(t, 3, lazarus.DefaultMaxInvalidToolAnswers)
	unknown := func() *messages.AssistantMessage { return scripted.Reply("", scripted.Call("no_such_tool", `{}`)) }
	notObject := func() *messages.AssistantMessage { return scripted.Reply("", scripted.Call("lookup_order", `"42"`)) }
	call := []string{"assistant_msg", "tool_call:", "tool_result:"}

	t.Run("fourth fails", func(t *testing.T) {
		h := newHarness(t, openStore(t, "memory"), nil)
		h.model.Push("c", unknown(), notObject(), unknown(), notObject())
		end, err := h.rt.SendAndWait(ctxT(t), "c", "go", user)
		require.ErrorIs(t, err, lazarus.ErrInvalidToolCalls)
		require.Equal(t, lazarus.TurnFailed, end.Outcome)
		var te *lazarus.TurnError
		require.ErrorAs(t, err, &te)
		require.Equal(t, actors.CodeInvalidToolCalls, te.Code)
		require.Equal(t, 4, te.Attempts)
		require.Equal(t, 4, h.model.Calls("c"))
		got := types(h.history("c"))
		require.Len(t, got, 1+3*len(call)+1, "three answers recorded, the fourth not: %v", got)
		require.Equal(t, "turn_failed:invalid_tool_calls", got[len(got)-1])
		require.Empty(t, h.runs.of("lookup_order"), "no invalid call runs")
	})
	t.Run("third then valid", func(t *testing.T) {
		h := newHarness(t, openStore(t, "memory"), nil)
		h.model.Push("c", unknown(), notObject(), unknown(), scripted.Text("sorry, done"))
		end, err := h.rt.SendAndWait(ctxT(t), "c", "go", user)
		require.NoError(t, err)
		require.Equal(t, lazarus.TurnAnswered, end.Outcome)
		require.Equal(t, "sorry, done", end.Text)
		require.Equal(t, 4, h.model.Calls("c"))
		evs := h.history("c")
		require.Len(t, evs, 1+3*len(call)+1)
		for _, ev := range evs {
			if r := ev.GetToolResult(); r != nil {
				require.Equal(t, agent.CodeInvalid, r.GetOutcome().GetError().GetCode())
			}
		}
	})
}

// TestRBFoldedRequestIDsAreBounded (Limits): of the sends summaries folded
// away, a retry with the request id of one of the newest
// snapshot.MaxSummaryRequests (32) is answered with its first seq and
// appends nothing, by the live activation and by a revived one; a retry of
// an older send appends again. (A send without a RequestID has a random
// one, which counts among the 32.)
func TestRBFoldedRequestIDsAreBounded(t *testing.T) {
	require.Equal(t, 32, snapshot.MaxSummaryRequests)
	forEachStore(t, func(t *testing.T, kind string) {
		store := openStore(t, kind)
		const maxEvents = 8
		h := newHarness(t, store, func(o *lazarus.Options) {
			o.Summarizer = snapshot.Deterministic{}
			o.Summary = snapshot.Policy{MaxEvents: maxEvents, KeepRecent: -1}
		})
		ctx := ctxT(t)
		// Keyed sends until more than 32 are folded and the latest summary
		// ends at the log's last event: no summary is due then, so the
		// folded sends stay as they are read below.
		for i := 0; ; i++ {
			require.Less(t, i, 200)
			_, err := h.rt.SendMessageAndWait(ctx, "c", agent.UserMessage(agent.TextPart(fmt.Sprint("pay ", i))),
				lazarus.SendOptions{RequestID: fmt.Sprint("pay-", i)}, user)
			require.NoError(t, err)
			evs := h.history("c")
			last := evs[len(evs)-1].GetSeq()
			var folded uint64
			s, err := store.LatestSummary(ctx, "c")
			if !errors.Is(err, journal.ErrNotFound) {
				require.NoError(t, err)
				folded = s.GetToSeq()
			}
			if last-folded > maxEvents {
				// Due: the summary folds every event.
				require.Eventually(t, func() bool {
					s, err := store.LatestSummary(ctx, "c")
					return err == nil && s.GetToSeq() == last
				}, wait, time.Millisecond)
				folded = last
			}
			if i > snapshot.MaxSummaryRequests && folded == last {
				break
			}
		}

		type sent struct {
			seq  uint64
			rid  string
			text string
		}
		var folded []sent
		for _, ev := range h.history("c") {
			if m := ev.GetUserMsg(); m != nil {
				folded = append(folded, sent{ev.GetSeq(), ev.GetRequestId(), m.GetContent()[0].GetText()})
			}
		}
		require.Greater(t, len(folded), snapshot.MaxSummaryRequests)
		count := func(rid string) int {
			k := 0
			for _, ev := range h.history("c") {
				if ev.GetRequestId() == rid {
					k++
				}
			}
			return k
		}
		retry := func(s sent) uint64 {
			seq, err := h.rt.SendMessage(ctx, "c", agent.UserMessage(agent.TextPart(s.text)), lazarus.SendOptions{RequestID: s.rid}, user)
			require.NoError(t, err)
			return seq
		}
		newest := folded[len(folded)-snapshot.MaxSummaryRequests:]
		for _, how := range []string{"live", "revived"} {
			if how == "revived" {
				require.True(t, h.rt.Kill("c"))
			}
			for _, s := range newest {
				require.Equal(t, s.seq, retry(s), "%s: the retry of %s is answered with its seq", how, s.rid)
				require.Equal(t, 1, count(s.rid), "%s: %s appended once", how, s.rid)
			}
		}
		// An older send is remembered no more: its retry appends.
		older := folded[len(folded)-snapshot.MaxSummaryRequests-1]
		require.Greater(t, retry(older), folded[len(folded)-1].seq)
		require.Equal(t, 2, count(older.rid), "a retry of an older send appends again")
	})
}

// TestRBHumanCallDeadlineDefaults: a human call whose tool sets no Timeout
// gets the deadline Options.HumanTimeout gives it: 24 hours by default, the
// option's when set, none when it is negative (the call is then never
// expired, however far the clock moves).
func TestRBHumanCallDeadlineDefaults(t *testing.T) {
	require.Equal(t, 24*time.Hour, lazarus.DefaultHumanTimeout)
	for _, tc := range []struct {
		name   string
		option time.Duration
		want   time.Duration // 0: no deadline
	}{
		{"default", 0, 24 * time.Hour},
		{"set", 2 * time.Hour, 2 * time.Hour},
		{"negative", -1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, openStore(t, "memory"), func(o *lazarus.Options) {
				o.HumanTimeout = tc.option
				o.Tools = append(o.Tools, agent.Tool{Name: "sign_off", Description: "a human signs off", Executor: messages.Executor_EXECUTOR_HUMAN})
			})
			ctx := ctxT(t)
			start := h.clock.Now()
			h.model.Push("c", scripted.Reply("", scripted.Call("sign_off", `{}`)), scripted.Text("expired"))
			end, err := h.rt.SendAndWait(ctx, "c", "sign it", user)
			require.NoError(t, err)
			require.Equal(t, lazarus.TurnSuspended, end.Outcome)
			pending, _, err := h.rt.PendingCalls(ctx, "", 0)
			require.NoError(t, err)
			require.Len(t, pending, 1)
			if tc.want == 0 {
				require.Nil(t, pending[0].GetDeadline(), "no deadline")
				h.clock.Advance(365 * 24 * time.Hour)
				pending, _, err = h.rt.PendingCalls(ctx, "", 0)
				require.NoError(t, err)
				require.Len(t, pending, 1, "still pending a year later")
				require.Equal(t, 1, h.model.Calls("c"))
				return
			}
			require.True(t, start.Add(tc.want).Equal(pending[0].GetDeadline().AsTime()), "deadline %v", pending[0].GetDeadline().AsTime())
			h.awaitDeadlineArmed(pending[0].GetId())
			for h.clock.Now().Before(start.Add(tc.want)) {
				h.clock.Advance(actors.MaxTimerSpan)
			}
			h.awaitEvent("c", end.Seq, isAssistantText("expired"))
			evs := h.history("c")
			require.Equal(t, "resolution:"+messages.ToolCallStatus_TOOL_CALL_STATUS_EXPIRED.String(), types(evs)[4])
		})
	}
}

// TestRBDefaultIdlePassivation: with Options.IdleTimeout left zero, a
// conversation at rest is passivated 5 minutes after its turn ended, and
// the next message revives it.
func TestRBDefaultIdlePassivation(t *testing.T) {
	require.Equal(t, 5*time.Minute, lazarus.DefaultIdleTimeout)
	h := newHarness(t, openStore(t, "memory"), func(o *lazarus.Options) { o.IdleTimeout = 0 })
	ctx := ctxT(t)
	h.model.Push("c", scripted.Text("one"), scripted.Text("two"))
	_, err := h.rt.SendAndWait(ctx, "c", "hi", user)
	require.NoError(t, err)
	require.True(t, h.rt.IsActive("c"))
	idleAt := h.clock.Now().Add(5 * time.Minute)
	require.Eventually(t, func() bool { return slices.ContainsFunc(h.clock.Dues(), idleAt.Equal) }, wait, time.Millisecond,
		"an idle timer due 5 minutes after the turn (timers %v)", h.clock.Dues())
	h.clock.Advance(5*time.Minute - time.Nanosecond)
	require.True(t, h.rt.IsActive("c"))
	h.clock.Advance(time.Nanosecond)
	require.Eventually(t, func() bool { return !h.rt.IsActive("c") }, wait, time.Millisecond, "passivated")
	end, err := h.rt.SendAndWait(ctx, "c", "again", user)
	require.NoError(t, err)
	require.Equal(t, "two", end.Text)
}

// TestRBEndHoldsAcrossARestart: an ended conversation stays ended for a new
// Runtime on the same Store: Send, SendMessage, Edit and Rewind fail with
// journal.ErrEnded and write nothing, Schedule too; Wake runs no turn;
// History, Subscribe and Metadata work as before.
func TestRBEndHoldsAcrossARestart(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		store := openStore(t, kind)
		first := newHarness(t, store, func(o *lazarus.Options) { o.NoResume = true })
		ctx := ctxT(t)
		first.model.Push("c", scripted.Text("hello"))
		_, err := first.rt.SendAndWait(ctx, "c", "hi", user)
		require.NoError(t, err)
		require.NoError(t, first.rt.MergeMetadata(ctx, "c", map[string]string{"k": "v"}))
		require.NoError(t, first.rt.End(ctx, "c"))
		require.NoError(t, first.rt.Close())

		second := newHarness(t, store, nil)
		before := second.history("c")
		require.Len(t, before, 2)
		_, err = second.rt.Send(ctx, "c", "more", user)
		require.ErrorIs(t, err, journal.ErrEnded)
		_, err = second.rt.SendMessage(ctx, "c", agent.UserMessage(agent.TextPart("more")), lazarus.SendOptions{RequestID: "r"}, user)
		require.ErrorIs(t, err, journal.ErrEnded)
		_, err = second.rt.Edit(ctx, "c", 1, "edited", user)
		require.ErrorIs(t, err, journal.ErrEnded)
		require.ErrorIs(t, second.rt.Rewind(ctx, "c", 1, lazarus.RewindOptions{}, user), journal.ErrEnded)
		_, err = second.rt.Schedule(ctx, "c", lazarus.ScheduleSpec{After: time.Hour, Text: "x"}, user)
		require.ErrorIs(t, err, journal.ErrEnded)
		require.NoError(t, second.rt.Wake(ctx, "c"))
		require.NoError(t, second.rt.End(ctx, "c"), "still at rest: the wake ran no turn")
		require.Equal(t, 0, second.model.Calls("c"))
		require.Equal(t, seqsOf(before), seqsOf(second.history("c")), "nothing written")
		md, err := second.rt.Metadata(ctx, "c")
		require.NoError(t, err)
		require.Equal(t, map[string]string{"k": "v"}, md)
		sub, err := second.rt.Subscribe(ctx, "c", 0)
		require.NoError(t, err)
		u := recv(t, sub, "update")
		require.Equal(t, uint64(1), u.Event.GetSeq(), "a subscription replays the log")
	})
}

// TestRBResolveAndRejectRaceAcrossAKill (guarantee 5): eight Resolves and
// eight Rejects of one human call race a Kill of its conversation: exactly
// one wins, every other gets journal.ErrStale (and journal.ErrInvalid, as
// Resolve's doc says), the row holds the winner's
// decision, and the log records it once (one resolution, one tool_result),
// which the model sees once.
func TestRBResolveAndRejectRaceAcrossAKill(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		// A Kill that lands after the winner's delivery was answered, but
		// before the activation recorded the answer, leaves the turn owed
		// with no live actor: the resume scan wakes it (ResumeInterval; by
		// default every 30 s, longer than this test waits).
		h := newHarness(t, openStore(t, kind), func(o *lazarus.Options) { o.ResumeInterval = 20 * time.Millisecond })
		ctx := ctxT(t)
		end := h.suspendOnApproval("c", "refund order 42")
		id := end.Pending[0].GetToolCallId()
		h.model.Push("c", scripted.Text("done"))

		const n = 16
		errs := make([]error, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				if i%2 == 0 {
					errs[i] = h.rt.Resolve(ctx, id, fmt.Sprintf(`{"approved":true,"click":%d}`, i), user)
				} else {
					errs[i] = h.rt.Reject(ctx, id, fmt.Sprint("no ", i), user)
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			h.rt.Kill("c")
		}()
		close(start)
		wg.Wait()
		winner := -1
		for i, err := range errs {
			if err == nil {
				require.Equal(t, -1, winner, "a second winner: %d and %d", winner, i)
				winner = i
				continue
			}
			require.ErrorIs(t, err, journal.ErrStale, "loser %d", i)
			require.ErrorIs(t, err, journal.ErrInvalid, "loser %d: an answer to a call not pending is bad input", i)
		}
		require.NotEqual(t, -1, winner, "one wins")

		row, err := h.store.ToolCall(ctx, id)
		require.NoError(t, err)
		if winner%2 == 0 {
			require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED, row.GetStatus())
			require.Contains(t, row.GetResult().GetContent(), fmt.Sprintf(`"click":%d`, winner))
		} else {
			require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_ERRORED, row.GetStatus())
		}
		h.awaitEvent("c", end.Seq, isAssistantText("done"))
		got := types(h.history("c"))
		resolutions, results := 0, 0
		for _, ty := range got {
			if strings.HasPrefix(ty, "resolution:") {
				resolutions++
			}
			if ty == "tool_result:approve_refund" {
				results++
			}
		}
		require.Equal(t, 1, resolutions, "%v", got)
		require.Equal(t, 1, results, "%v", got)
		turns := h.model.Turns("c")
		require.Len(t, toolResults(turns[len(turns)-1], id), 1, "the model sees one result")
	})
}

// TestRBDefaultMaxFileBytes (Limits): with Options.Files.MaxFileBytes left
// zero, a checkpoint of a file one byte over 64 MiB fails with
// journal.ErrTooLarge and records nothing.
func TestRBDefaultMaxFileBytes(t *testing.T) {
	require.EqualValues(t, 64<<20, lazarus.DefaultMaxFileBytes)
	errs := make(chan pathErr, 1)
	h, root := filesHarness(t, openStore(t, "memory"), errs, nil)
	ctx := ctxT(t)
	f, err := os.Create(filepath.Join(root, "big"))
	require.NoError(t, err)
	require.NoError(t, f.Truncate(64<<20+1)) // sparse: no 64 MiB written
	require.NoError(t, f.Close())
	h.model.Push("c", scripted.Reply("", writeCall(fileArgs{Path: "big", Content: "x"})), scripted.Text("done"))
	_, err = h.rt.SendAndWait(ctx, "c", "go", user)
	require.NoError(t, err)
	pe := recv(t, errs, "tool error")
	require.ErrorIs(t, pe.err, journal.ErrTooLarge)
	cps, err := h.rt.Store().(journal.FileCheckpoints).FileCheckpoints(ctx, "c", 0)
	require.NoError(t, err)
	require.Empty(t, cps, "nothing recorded")
}

// TestRBDeadlineAfterABackwardClockStep (guarantee 6): a step backwards of
// the wall clock delays a deadline by the step: the call is still pending
// while the clock reads before its deadline, however much time elapsed,
// and expires when the clock reads it.
func TestRBDeadlineAfterABackwardClockStep(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), nil)
		ctx := ctxT(t)
		id := h.suspendOne("c", scripted.Text("timed out"))
		deadline := h.deadlineOf(id)
		h.rt.Kill("c")
		h.clock.Jump(-2 * time.Hour)
		armed := func() {
			t.Helper()
			require.Eventually(t, func() bool {
				next, ok := h.clock.Next()
				return ok && next.Equal(h.armedFor(deadline))
			}, wait, time.Millisecond, "the deadline armed again (timers %v)", h.clock.Dues())
		}
		// Three hours of elapsed time, a minute at a time, to a minute
		// before the deadline: the timer fires and is armed again.
		for h.clock.Now().Before(deadline.Add(-actors.MaxTimerSpan)) {
			h.clock.Advance(actors.MaxTimerSpan)
			armed()
		}
		h.clock.Advance(deadline.Sub(h.clock.Now()) - time.Nanosecond)
		armed()
		row, err := h.store.ToolCall(ctx, id)
		require.NoError(t, err)
		require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING, row.GetStatus(), "not expired before the clock reads the deadline")
		require.Equal(t, 1, h.model.Calls("c"))
		h.clock.Advance(time.Nanosecond)
		h.awaitEvent("c", 0, isExpiredResult)
		h.awaitEvent("c", 0, isAssistantText("timed out"))
	})
}

// TestRBScheduleAfterAForwardClockStep (guarantee 13e): a repeating
// schedule whose occurrences a forward step of the wall clock made due
// (five of them) fires once, within actors.MaxTimerSpan of elapsed time,
// and its next occurrence is the first one after the time it fired.
func TestRBScheduleAfterAForwardClockStep(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), nil)
		ctx := ctxT(t)
		t0 := h.clock.Now()
		_, err := h.rt.SendAndWait(ctx, "c", "hi", user)
		require.NoError(t, err)
		sc, err := h.rt.Schedule(ctx, "c", lazarus.ScheduleSpec{Every: time.Hour, Text: "tick"}, user)
		require.NoError(t, err)
		require.True(t, t0.Add(time.Hour).Equal(sc.GetNext().AsTime()))
		wakes := func(t testingT) int {
			n := 0
			for _, ev := range h.historyOf(t, "c") {
				if m := ev.GetUserMsg(); m != nil && m.GetContent()[0].GetText() == "tick" {
					n++
				}
			}
			return n
		}
		armedAt := h.armedFor(t0.Add(time.Hour))
		require.Eventually(t, func() bool { return slices.ContainsFunc(h.clock.Dues(), armedAt.Equal) }, wait, time.Millisecond)

		h.clock.Jump(5*time.Hour + 30*time.Minute)
		h.clock.Advance(actors.MaxTimerSpan)
		require.NoError(t, h.model.WaitCalls(ctx, "c", 2), "the wake's turn")
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			listed, err := h.rt.Schedules(ctx, "c")
			require.NoError(c, err)
			require.Len(c, listed, 1)
			assert.True(c, listed[0].GetNext().AsTime().Equal(t0.Add(6*time.Hour)), "next %v", listed[0].GetNext().AsTime())
		}, wait, time.Millisecond, "next is the first occurrence after the fire")
		require.Equal(t, 1, wakes(t), "once, not once per occurrence the step skipped")

		next := h.armedFor(t0.Add(6 * time.Hour))
		require.Eventually(t, func() bool { return slices.ContainsFunc(h.clock.Dues(), next.Equal) }, wait, time.Millisecond)
		h.clock.Advance(t0.Add(6 * time.Hour).Sub(h.clock.Now()))
		require.NoError(t, h.model.WaitCalls(ctx, "c", 3))
		require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Equal(c, 2, wakes(c)) }, wait, time.Millisecond)
	})
}

// TestRBAnswersToCallsNotPending: Resolve and Reject of an expired call and
// of a call whose conversation was deleted fail with journal.ErrStale and
// journal.ErrInvalid, as of an answered or unknown one, and write nothing.
func TestRBAnswersToCallsNotPending(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), nil)
		ctx := ctxT(t)
		expired := h.suspendOne("expired", scripted.Text("timed out"))
		h.clock.Advance(time.Hour)
		h.awaitEvent("expired", 0, isAssistantText("timed out"))
		deleted := h.suspendOne("deleted")
		require.NoError(t, h.rt.Delete(ctx, "deleted"))
		before := seqsOf(h.history("expired"))
		for name, id := range map[string]string{"expired": expired, "deleted": deleted} {
			err := h.rt.Resolve(ctx, id, `{"approved":true}`, user)
			require.ErrorIs(t, err, journal.ErrStale, "Resolve of the %s call", name)
			require.ErrorIs(t, err, journal.ErrInvalid, "Resolve of the %s call", name)
			err = h.rt.Reject(ctx, id, "no", user)
			require.ErrorIs(t, err, journal.ErrStale, "Reject of the %s call", name)
			require.ErrorIs(t, err, journal.ErrInvalid, "Reject of the %s call", name)
		}
		require.Equal(t, before, seqsOf(h.history("expired")), "nothing written")
		row, err := h.store.ToolCall(ctx, expired)
		require.NoError(t, err)
		require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_EXPIRED, row.GetStatus())
	})
}

// TestRBSubscriptionOutlivesAKill ("What survives what"): a subscription
// belongs to the Runtime, not the actor: a Kill mid-turn gives it a
// cancelled turn end carrying the log's last seq at the kill
// (Update.After), and it goes on with the events of the next activation,
// whose answered end it gets from the durable event.
func TestRBSubscriptionOutlivesAKill(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		// NoResume: Open's resume scan, which runs in the background,
		// would otherwise wake the killed conversation (it is ACTIVE)
		// before the test's Wake.
		h := newHarness(t, openStore(t, kind), func(o *lazarus.Options) { o.NoResume = true })
		ctx := ctxT(t)
		sub, err := h.rt.Subscribe(ctx, "c", 0)
		require.NoError(t, err)
		entered := h.model.Hold("c")
		_, err = h.rt.Send(ctx, "c", "hi", user)
		require.NoError(t, err)
		recv(t, entered, "model call entered")
		require.True(t, h.rt.Kill("c"))
		u := h.awaitUpdate(sub, isTurnEnd)
		require.Nil(t, u.Event)
		require.Equal(t, lazarus.TurnCancelled, u.TurnEnd.Outcome)
		require.ErrorIs(t, u.TurnEnd.Err, lazarus.ErrTurnCancelled)
		require.Equal(t, uint64(1), u.After, "the log's last seq at the kill")
		h.model.Release("c")

		h.model.Push("c", scripted.Text("back"))
		require.NoError(t, h.rt.Wake(ctx, "c"))
		u = h.awaitUpdate(sub, isTurnEnd)
		require.Equal(t, lazarus.TurnAnswered, u.TurnEnd.Outcome)
		require.Equal(t, uint64(2), u.Event.GetSeq())
		require.Equal(t, "back", u.TurnEnd.Text)
	})
}

// TestRBRetryWaitingItsDelayIsRunOnOpen ("What survives what"): a model
// call waiting out its retry delay when the process stops leaves its turn
// owed (the conversation ACTIVE, nothing of the failed call written); the
// next Open runs it, from attempt 1, with no command.
func TestRBRetryWaitingItsDelayIsRunOnOpen(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		store := openStore(t, kind)
		first := newHarness(t, store, func(o *lazarus.Options) { o.NoResume = true })
		ctx := ctxT(t)
		first.model.PushError("c", agent.ErrUnavailable)
		sub, err := first.rt.Subscribe(ctx, "c", 0)
		require.NoError(t, err)
		_, err = first.rt.Send(ctx, "c", "hi", user)
		require.NoError(t, err)
		u := first.awaitUpdate(sub, isRetry)
		require.Equal(t, 1, u.Retry.Attempt)
		require.NoError(t, first.rt.Close())
		row, err := store.Conversation(ctx, "c")
		require.NoError(t, err)
		require.Equal(t, messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE, row.GetStatus(), "the turn is still owed")

		model := scripted.New(scripted.Options{})
		model.PushError("c", agent.ErrRateLimited)
		model.Push("c", scripted.Text("back"))
		second := newHarness(t, store, func(o *lazarus.Options) { o.Model = model })
		// Open's resume runs in the background, perhaps before any
		// subscription: its retry is read from the clock, not from an
		// update. A delay of 1 s is the first retry's: the count starts
		// again.
		require.NoError(t, model.WaitCalls(ctx, "c", 1))
		retryAt := second.clock.Now().Add(time.Second)
		require.Eventually(t, func() bool { return slices.ContainsFunc(second.clock.Dues(), retryAt.Equal) }, wait, time.Millisecond,
			"the first retry's timer (timers %v)", second.clock.Dues())
		require.Equal(t, 1, model.Calls("c"))
		second.clock.Advance(time.Second)
		second.awaitEvent("c", 0, isAssistantText("back"))
		require.Equal(t, 2, model.Calls("c"))
		require.Equal(t, []string{"user_msg", "assistant_msg"}, types(second.history("c")))
	})
}

// TestRBRewindAbandonsARetryWaitingItsDelay: a rewind owes no turn (Rewind's
// doc), so one that lands while a failed model call waits out its retry
// delay abandons the retry: the delay passes with no model call, the row
// is IDLE, and the next Send starts a turn on the rewound context.
func TestRBRewindAbandonsARetryWaitingItsDelay(t *testing.T) {
	for _, toSeq := range []uint64{0, 1} {
		t.Run(fmt.Sprint("to ", toSeq), func(t *testing.T) {
			h := newHarness(t, openStore(t, "memory"), nil)
			ctx := ctxT(t)
			h.model.PushError("c", agent.ErrUnavailable)
			sub := subscribeAndSendHi(t, h)
			h.awaitUpdate(sub, isRetry)
			require.NoError(t, h.rt.Rewind(ctx, "c", toSeq, lazarus.RewindOptions{}, user))
			require.Eventually(t, func() bool { return h.clock.Timers() == 0 }, wait, time.Millisecond, "the retry's timer stopped")
			h.clock.Advance(time.Minute)
			require.Equal(t, 1, h.model.Calls("c"), "no model call after the rewind")
			row, err := h.store.Conversation(ctx, "c")
			require.NoError(t, err)
			require.Equal(t, messages.ConversationStatus_CONVERSATION_STATUS_IDLE, row.GetStatus())
			require.Equal(t, []string{"user_msg", "rewind"}, types(h.history("c")))

			h.model.Push("c", scripted.Text("fresh"))
			end, err := h.rt.SendAndWait(ctx, "c", "again", user)
			require.NoError(t, err)
			require.Equal(t, "fresh", end.Text)
			turns := h.model.Turns("c")
			require.Len(t, turns[len(turns)-1].Context, int(toSeq)+1, "the rewound context and the new message")
		})
	}
}

// TestRBEndRefusedWhileATurnIsOwed: End ends a conversation at rest only:
// while a retry waits its delay (the turn is owed) or a server tool runs,
// it fails with journal.ErrInvalid and writes nothing; once the turn is
// over it ends it.
func TestRBEndRefusedWhileATurnIsOwed(t *testing.T) {
	t.Run("retry waiting", func(t *testing.T) {
		h := newHarness(t, openStore(t, "memory"), nil)
		ctx := ctxT(t)
		h.model.PushError("c", agent.ErrUnavailable)
		sub := subscribeAndSendHi(t, h)
		h.awaitUpdate(sub, isRetry)
		require.ErrorIs(t, h.rt.End(ctx, "c"), journal.ErrInvalid)
		row, err := h.store.Conversation(ctx, "c")
		require.NoError(t, err)
		require.NotEqual(t, messages.ConversationStatus_CONVERSATION_STATUS_ENDED, row.GetStatus())
		h.clock.Advance(time.Second)
		h.awaitUpdate(sub, isTurnEnd)
		require.Eventually(t, func() bool { return h.rt.End(ctx, "c") == nil }, wait, time.Millisecond, "ends once at rest")
	})
	t.Run("server tool running", func(t *testing.T) {
		h := newHarness(t, openStore(t, "memory"), nil)
		h.chargeGate = make(chan struct{})
		ctx := ctxT(t)
		h.model.Push("c", scripted.Reply("", scripted.Call("charge", `{"amount":5}`)), scripted.Text("charged"))
		_, err := h.rt.Send(ctx, "c", "charge it", user)
		require.NoError(t, err)
		recv(t, h.chargeStarted, "charge started")
		require.ErrorIs(t, h.rt.End(ctx, "c"), journal.ErrInvalid)
		close(h.chargeGate)
		h.awaitEvent("c", 0, isAssistantText("charged"))
		require.Eventually(t, func() bool { return h.rt.End(ctx, "c") == nil }, wait, time.Millisecond, "ends once at rest")
		evs := h.history("c")
		require.Equal(t, []string{"user_msg", "assistant_msg", "tool_call:charge", "tool_result:charge", "assistant_msg"}, types(evs))
	})
}

// TestRBScheduledWakeAbandonsARetry: a scheduled wake that meets a turn
// waiting out a retry delay acts as a new message does: the retry is
// abandoned, the turn restarts at once with both messages, its attempts
// counted from 1.
func TestRBScheduledWakeAbandonsARetry(t *testing.T) {
	h := newHarness(t, openStore(t, "memory"), withRetry(lazarus.RetryPolicy{InitialInterval: time.Hour}))
	ctx := ctxT(t)
	t0 := h.clock.Now()
	_, err := h.rt.SendAndWait(ctx, "c", "hello", user)
	require.NoError(t, err)
	_, err = h.rt.Schedule(ctx, "c", lazarus.ScheduleSpec{After: time.Minute, Text: "wake up"}, user)
	require.NoError(t, err)
	h.model.PushError("c", agent.ErrUnavailable)
	sub, err := h.rt.Subscribe(ctx, "c", 2)
	require.NoError(t, err)
	_, err = h.rt.Send(ctx, "c", "hi", user)
	require.NoError(t, err)
	u := h.awaitUpdate(sub, isRetry)
	require.Equal(t, time.Hour, u.Retry.Delay)

	h.model.Push("c", scripted.Text("both seen"))
	at := h.armedFor(t0.Add(time.Minute))
	require.Eventually(t, func() bool { return slices.ContainsFunc(h.clock.Dues(), at.Equal) }, wait, time.Millisecond)
	h.clock.Advance(time.Minute)
	u = h.awaitUpdate(sub, isTurnEnd)
	require.Equal(t, lazarus.TurnAnswered, u.TurnEnd.Outcome)
	require.Equal(t, "both seen", u.TurnEnd.Text)
	require.Equal(t, 3, h.model.Calls("c"), "the wake's call, not the retry's an hour later")
	turns := h.model.Turns("c")
	last := turns[len(turns)-1].Context
	var texts []string
	for _, ev := range last {
		if m := ev.GetUserMsg(); m != nil {
			texts = append(texts, m.GetContent()[0].GetText())
		}
	}
	require.Equal(t, []string{"hello", "hi", "wake up"}, texts)
	retryAt := t0.Add(time.Hour)
	require.Eventually(t, func() bool { return !slices.ContainsFunc(h.clock.Dues(), retryAt.Equal) }, wait, time.Millisecond,
		"the retry's timer is stopped (timers %v)", h.clock.Dues())
	h.clock.Advance(time.Hour)
	require.Equal(t, 3, h.model.Calls("c"), "the abandoned retry never runs")
}

// TestRBForkCopiesMetadataAndSharesNothing (guarantee 13c): a fork gets the
// source's metadata, indexed for Find in the fork's own write; a merge on
// either side leaves the other's, and deleting the source leaves the
// fork's metadata and log whole.
func TestRBForkCopiesMetadataAndSharesNothing(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), nil)
		ctx := ctxT(t)
		end, err := h.rt.SendAndWait(ctx, "src", "hi", user)
		require.NoError(t, err)
		require.NoError(t, h.rt.MergeMetadata(ctx, "src", map[string]string{"topic": "rb-fork", "owner": "alice"}))
		require.NoError(t, h.rt.Fork(ctx, "src", end.Seq, "copy"))
		find := func(k, v string) []string {
			t.Helper()
			ids, _, err := h.rt.Find(ctx, k, v, "", 0)
			require.NoError(t, err)
			return ids
		}
		md, err := h.rt.Metadata(ctx, "copy")
		require.NoError(t, err)
		require.Equal(t, map[string]string{"topic": "rb-fork", "owner": "alice"}, md)
		require.Equal(t, []string{"copy", "src"}, find("topic", "rb-fork"))

		require.NoError(t, h.rt.MergeMetadata(ctx, "copy", map[string]string{"topic": "", "owner": "bob"}))
		md, err = h.rt.Metadata(ctx, "src")
		require.NoError(t, err)
		require.Equal(t, map[string]string{"topic": "rb-fork", "owner": "alice"}, md, "the source keeps its own")
		require.Equal(t, []string{"src"}, find("topic", "rb-fork"))
		require.Equal(t, []string{"copy"}, find("owner", "bob"))

		require.NoError(t, h.rt.Delete(ctx, "src"))
		md, err = h.rt.Metadata(ctx, "copy")
		require.NoError(t, err)
		require.Equal(t, map[string]string{"owner": "bob"}, md)
		require.Empty(t, find("owner", "alice"))
		require.Equal(t, []string{"user_msg", "assistant_msg"}, types(h.history("copy")))
		h.model.Push("copy", scripted.Text("on its own"))
		end, err = h.rt.SendAndWait(ctx, "copy", "go on", user)
		require.NoError(t, err)
		require.Equal(t, "on its own", end.Text)
	})
}

// TestRBScheduleSpecBoundaries: At must be after now (At == now is in the
// past: ErrScheduleInPast with journal.ErrInvalid); an interval of
// MinScheduleInterval is taken, one a nanosecond shorter refused
// (ErrBadSchedule), as Every and as a cron "@every".
func TestRBScheduleSpecBoundaries(t *testing.T) {
	h := newHarness(t, openStore(t, "memory"), nil)
	ctx := ctxT(t)
	_, err := h.rt.SendAndWait(ctx, "c", "hi", user)
	require.NoError(t, err)
	_, err = h.rt.Schedule(ctx, "c", lazarus.ScheduleSpec{At: h.clock.Now(), Text: "x"}, user)
	require.ErrorIs(t, err, lazarus.ErrScheduleInPast)
	require.ErrorIs(t, err, journal.ErrInvalid)
	for name, spec := range map[string]lazarus.ScheduleSpec{
		"every":  {Every: lazarus.MinScheduleInterval - time.Nanosecond, Text: "x"},
		"@every": {Cron: fmt.Sprintf("@every %v", lazarus.MinScheduleInterval-time.Millisecond), Text: "x"},
	} {
		_, err = h.rt.Schedule(ctx, "c", spec, user)
		require.ErrorIs(t, err, lazarus.ErrBadSchedule, name)
		require.ErrorIs(t, err, journal.ErrInvalid, name)
	}
	listed, err := h.rt.Schedules(ctx, "c")
	require.NoError(t, err)
	require.Empty(t, listed, "nothing stored")

	at := h.clock.Now().Add(time.Nanosecond)
	for name, spec := range map[string]lazarus.ScheduleSpec{
		"at":     {ID: "at", At: at, Text: "x"},
		"every":  {ID: "every", Every: lazarus.MinScheduleInterval, Text: "x"},
		"@every": {ID: "cron", Cron: fmt.Sprintf("@every %v", lazarus.MinScheduleInterval), Text: "x"},
	} {
		sc, err := h.rt.Schedule(ctx, "c", spec, user)
		require.NoError(t, err, name)
		if name == "at" {
			require.True(t, at.Equal(sc.GetNext().AsTime()), "next %v", sc.GetNext().AsTime())
		} else {
			require.True(t, h.clock.Now().Add(lazarus.MinScheduleInterval).Equal(sc.GetNext().AsTime()), "%s: next %v", name, sc.GetNext().AsTime())
		}
	}
	listed, err = h.rt.Schedules(ctx, "c")
	require.NoError(t, err)
	require.Len(t, listed, 3)
}

// TestRBScheduledWakeWhileAHumanCallIsOpen: a scheduled wake is a user
// message: one that fires while a human call is open is written, and the
// model is not called before the call's result (the conversation stays
// SUSPENDED, its deadline armed); once answered, the turn sees the result
// and the wake's message, and runs once.
func TestRBScheduledWakeWhileAHumanCallIsOpen(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), nil)
		ctx := ctxT(t)
		t0 := h.clock.Now()
		end := h.suspendOnApproval("c", "refund order 42")
		id := end.Pending[0].GetToolCallId()
		_, err := h.rt.Schedule(ctx, "c", lazarus.ScheduleSpec{After: time.Minute, Text: "any news?"}, user)
		require.NoError(t, err)
		at := h.armedFor(t0.Add(time.Minute))
		require.Eventually(t, func() bool { return slices.ContainsFunc(h.clock.Dues(), at.Equal) }, wait, time.Millisecond)
		h.rt.Kill("c")
		h.clock.Advance(time.Minute)
		h.awaitEvent("c", end.Seq, func(ev *messages.Event) bool {
			return ev.GetUserMsg().GetContent()[0].GetText() == "any news?"
		})
		require.Equal(t, 1, h.model.Calls("c"), "no model call before the call's result")
		row, err := h.store.Conversation(ctx, "c")
		require.NoError(t, err)
		require.Equal(t, messages.ConversationStatus_CONVERSATION_STATUS_SUSPENDED, row.GetStatus())
		pending, _, err := h.rt.PendingCalls(ctx, "", 0)
		require.NoError(t, err)
		require.Len(t, pending, 1, "the call is still pending")

		h.model.Push("c", scripted.Text("refunded, and no news"))
		require.NoError(t, h.rt.Resolve(ctx, id, `{"approved":true}`, user))
		h.awaitEvent("c", end.Seq, isAssistantText("refunded, and no news"))
		require.Equal(t, 2, h.model.Calls("c"))
		turns := h.model.Turns("c")
		last := turns[len(turns)-1]
		require.Len(t, toolResults(last, id), 1)
		var texts []string
		for _, ev := range last.Context {
			if m := ev.GetUserMsg(); m != nil {
				texts = append(texts, m.GetContent()[0].GetText())
			}
		}
		require.Equal(t, []string{"refund order 42", "any news?"}, texts)
	})
}

// TestRBRetryPolicyFields: a RetryPolicy's fields as its doc gives them,
// through the runtime: MaximumInterval caps the growing delay;
// MaximumAttempts 1, or below 0, never retries.
func TestRBRetryPolicyFields(t *testing.T) {
	t.Run("capped", func(t *testing.T) {
		h := newHarness(t, openStore(t, "memory"), withRetry(lazarus.RetryPolicy{
			InitialInterval: time.Second, MaximumInterval: 3 * time.Second, MaximumAttempts: 5}))
		for range 4 {
			h.model.PushError("c", agent.ErrRateLimited)
		}
		h.model.Push("c", scripted.Text("finally"))
		sub := subscribeAndSendHi(t, h)
		for i, delay := range []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 3 * time.Second} {
			u := h.awaitUpdate(sub, isRetry)
			require.Equal(t, lazarus.Retry{Attempt: i + 1, Delay: delay}, *u.Retry)
			h.clock.Advance(delay)
		}
		u := h.awaitUpdate(sub, isTurnEnd)
		require.Equal(t, "finally", u.TurnEnd.Text)
		require.Equal(t, 5, h.model.Calls("c"))
	})
	for _, attempts := range []int{1, -1} {
		t.Run(fmt.Sprint("attempts ", attempts), func(t *testing.T) {
			h := newHarness(t, openStore(t, "memory"), withRetry(lazarus.RetryPolicy{MaximumAttempts: attempts}))
			h.model.PushError("c", agent.ErrRateLimited)
			end, err := h.rt.SendAndWait(ctxT(t), "c", "hi", user)
			require.ErrorIs(t, err, agent.ErrRateLimited)
			require.Equal(t, lazarus.TurnFailed, end.Outcome)
			var te *lazarus.TurnError
			require.ErrorAs(t, err, &te)
			require.Equal(t, 1, te.Attempts)
			require.Equal(t, 1, h.model.Calls("c"))
		})
	}
}

// TestRBWakeOfAConversationWithNothingStored: Wake of an id with nothing
// stored activates it empty and writes nothing (no row, no event, no
// model call); it passivates when idle like any other, and its first Send
// starts its log at seq 1.
func TestRBWakeOfAConversationWithNothingStored(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		// An idle time no other timer of the runtime shares (the expiry
		// actor's is actors.MaxTimerSpan, a minute), so the one found at
		// idleAt is the idle timer.
		const idle = 7*time.Minute + 13*time.Second
		h := newHarness(t, openStore(t, kind), func(o *lazarus.Options) { o.IdleTimeout = idle })
		ctx := ctxT(t)
		require.NoError(t, h.rt.Wake(ctx, "ghost"))
		require.True(t, h.rt.IsActive("ghost"))
		_, err := h.store.Conversation(ctx, "ghost")
		require.ErrorIs(t, err, journal.ErrNotFound, "no row written")
		require.Empty(t, h.history("ghost"))
		require.Equal(t, 0, h.model.Calls("ghost"))
		idleAt := h.clock.Now().Add(idle)
		require.Eventually(t, func() bool { return slices.ContainsFunc(h.clock.Dues(), idleAt.Equal) }, wait, time.Millisecond,
			"an idle timer (timers %v)", h.clock.Dues())
		h.clock.Advance(idle)
		require.Eventually(t, func() bool { return !h.rt.IsActive("ghost") }, wait, time.Millisecond, "passivated")
		_, err = h.store.Conversation(ctx, "ghost")
		require.ErrorIs(t, err, journal.ErrNotFound, "still no row")

		end, err := h.rt.SendAndWait(ctx, "ghost", "hello", user)
		require.NoError(t, err)
		require.Equal(t, uint64(2), end.Seq)
		require.Equal(t, []uint64{1, 2}, seqsOf(h.history("ghost")))
	})
}

// TestRBDeleteAndEditDuringARetryDelay: a Delete that meets a retry
// waiting its delay stops it (no call after the delay; the subscription
// ends with journal.ErrDeleted); an Edit restarts the turn at once on the
// edited message, its attempts counted from 1, as a new message does.
func TestRBDeleteAndEditDuringARetryDelay(t *testing.T) {
	t.Run("delete", func(t *testing.T) {
		h := newHarness(t, openStore(t, "memory"), nil)
		ctx := ctxT(t)
		h.model.PushError("c", agent.ErrUnavailable)
		sub := subscribeAndSendHi(t, h)
		h.awaitUpdate(sub, isRetry)
		require.NoError(t, h.rt.Delete(ctx, "c"))
		u := h.awaitUpdate(sub, func(u actors.Update) bool { return u.Err != nil && u.Retry == nil })
		require.ErrorIs(t, u.Err, journal.ErrDeleted)
		require.Eventually(t, func() bool { return h.clock.Timers() == 0 }, wait, time.Millisecond, "the retry's timer stopped")
		h.clock.Advance(time.Minute)
		require.Equal(t, 1, h.model.Calls("c"))
	})
	t.Run("edit", func(t *testing.T) {
		h := newHarness(t, openStore(t, "memory"), nil)
		ctx := ctxT(t)
		h.model.PushError("c", agent.ErrUnavailable)
		sub := subscribeAndSendHi(t, h)
		h.awaitUpdate(sub, isRetry)
		h.model.PushError("c", agent.ErrUnavailable)
		seq, err := h.rt.Edit(ctx, "c", 1, "hello", user)
		require.NoError(t, err)
		require.Equal(t, uint64(3), seq)
		u := h.awaitUpdate(sub, isRetry)
		require.Equal(t, lazarus.Retry{Attempt: 1, Delay: time.Second}, *u.Retry, "the edit restarted the count")
		require.Equal(t, 2, h.model.Calls("c"), "the edit's call ran without waiting out the delay")
		h.clock.Advance(time.Second)
		u = h.awaitUpdate(sub, isTurnEnd)
		require.Equal(t, lazarus.TurnAnswered, u.TurnEnd.Outcome)
		turns := h.model.Turns("c")
		last := turns[len(turns)-1].Context
		require.Len(t, last, 1)
		require.Equal(t, "hello", last[0].GetUserMsg().GetContent()[0].GetText())
		require.Equal(t, []string{"user_msg", "rewind", "user_msg", "assistant_msg"}, types(h.history("c")))
	})
}

// TestRBRewindCancelsARunningServerCall (guarantee 13a): a server call
// running when a rewind to before it lands is resolved in the rewind's
// write (its row errored, code canceled); the tool's later result is not
// written, the model is not called for it, and the next Send runs on the
// rewound context.
func TestRBRewindCancelsARunningServerCall(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), nil)
		h.chargeGate = make(chan struct{})
		ctx := ctxT(t)
		h.model.Push("c", scripted.Reply("", scripted.Call("charge", `{"amount":5}`)))
		_, err := h.rt.Send(ctx, "c", "charge it", user)
		require.NoError(t, err)
		id := recv(t, h.chargeStarted, "charge started")
		require.NoError(t, h.rt.Rewind(ctx, "c", 0, lazarus.RewindOptions{}, user))
		row, err := h.store.ToolCall(ctx, id)
		require.NoError(t, err)
		require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_ERRORED, row.GetStatus(), "resolved in the rewind's write")
		require.Equal(t, agent.CodeCanceled, row.GetResult().GetError().GetCode())
		close(h.chargeGate) // the tool, if still running, returns now

		h.model.Push("c", scripted.Text("fresh start"))
		end, err := h.rt.SendAndWait(ctx, "c", "hello", user)
		require.NoError(t, err)
		require.Equal(t, "fresh start", end.Text)
		require.Equal(t, 2, h.model.Calls("c"))
		turns := h.model.Turns("c")
		require.Len(t, turns[1].Context, 1, "the rewound span is not seen")
		for _, ev := range h.history("c") {
			if r := ev.GetToolResult(); r != nil && r.GetToolCallId() == id {
				require.Equal(t, agent.CodeCanceled, r.GetOutcome().GetError().GetCode(), "no result of the tool's run is written")
			}
		}
		row, err = h.store.ToolCall(ctx, id)
		require.NoError(t, err)
		require.Equal(t, agent.CodeCanceled, row.GetResult().GetError().GetCode(), "the row keeps the cancel")
	})
}

// TestRBResumeScanRerunsAKilledTurn ("What survives what"): a model call in
// flight when its conversation is killed is run again with no command, by
// the resume scan (Options.ResumeInterval), since the conversation is
// ACTIVE; the turn's answer is written once.
func TestRBResumeScanRerunsAKilledTurn(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), func(o *lazarus.Options) { o.ResumeInterval = 20 * time.Millisecond })
		ctx := ctxT(t)
		entered := h.model.Hold("c")
		_, err := h.rt.Send(ctx, "c", "hi", user)
		require.NoError(t, err)
		recv(t, entered, "model call entered")
		require.True(t, h.rt.Kill("c"))
		h.model.Release("c")
		h.awaitEvent("c", 1, func(ev *messages.Event) bool { return ev.GetAssistantMsg() != nil })
		require.Equal(t, []string{"user_msg", "assistant_msg"}, types(h.history("c")))
		require.Equal(t, 2, h.model.Calls("c"), "the killed call and its re-run")
	})
}

// subscribeAndSendHi subscribes to conversation "c" from its start, then
// sends it "hi" as user, and returns the subscription.
func subscribeAndSendHi(t *testing.T, h *harness) <-chan actors.Update {
	t.Helper()
	ctx := ctxT(t)
	sub, err := h.rt.Subscribe(ctx, "c", 0)
	require.NoError(t, err)
	_, err = h.rt.Send(ctx, "c", "hi", user)
	require.NoError(t, err)
	return sub
}
