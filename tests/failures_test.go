package tests

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/messages"
)

// retryPolicy is the retry policy of these tests: 1s, then 2s, 3 attempts.
var retryPolicy = lazarus.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumAttempts: 3}

func withRetry(p lazarus.RetryPolicy) func(*lazarus.Options) {
	return func(o *lazarus.Options) { o.ModelRetry = p }
}

func isRetry(u actors.Update) bool { return u.Retry != nil }

func isTurnEnd(u actors.Update) bool { return u.TurnEnd != nil }

// A transient model failure is retried on the clock: each retry is an
// update with the error, the attempt and the delay; nothing is written for
// the failed calls, and the turn ends answered.
func TestModelRetryRetriesTransientErrors(t *testing.T) {
	h := newHarness(t, openStore(t, "memory"), withRetry(retryPolicy))
	ctx := ctxT(t)
	h.model.PushError("c", agent.ErrRateLimited)
	h.model.PushError("c", agent.ErrUnavailable)
	sub, err := h.rt.Subscribe(ctx, "c", 0)
	require.NoError(t, err)
	_, err = h.rt.Send(ctx, "c", "hi", user)
	require.NoError(t, err)

	u := h.awaitUpdate(sub, isRetry)
	require.ErrorIs(t, u.Err, agent.ErrRateLimited)
	require.Equal(t, lazarus.Retry{Attempt: 1, Delay: time.Second}, *u.Retry)
	require.Nil(t, u.TurnEnd, "a retry ends nothing")
	require.Equal(t, 1, h.model.Calls("c"), "no second call before the delay")
	h.clock.Advance(time.Second)

	u = h.awaitUpdate(sub, isRetry)
	require.ErrorIs(t, u.Err, agent.ErrUnavailable)
	require.Equal(t, lazarus.Retry{Attempt: 2, Delay: 2 * time.Second}, *u.Retry)
	require.Equal(t, 2, h.model.Calls("c"))
	h.clock.Advance(2 * time.Second)

	u = h.awaitUpdate(sub, isTurnEnd)
	require.Equal(t, lazarus.TurnAnswered, u.TurnEnd.Outcome)
	require.Equal(t, []string{"user_msg", "assistant_msg"}, types(h.history("c")))
	require.Equal(t, 3, h.model.Calls("c"))
}

// When the policy gives up, the turn fails durably: a turn_failed event
// (code, attempts, error), the conversation row out of ACTIVE, and a
// failed turn end that SendAndWait finds in the log. An explicit Wake runs
// the turn again, with a fresh count of attempts.
func TestModelRetryGivesUpDurably(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), withRetry(lazarus.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 2}))
		ctx := ctxT(t)
		h.model.PushError("c", agent.ErrUnavailable)
		h.model.PushError("c", agent.ErrUnavailable)
		sub, err := h.rt.Subscribe(ctx, "c", 0)
		require.NoError(t, err)
		_, err = h.rt.SendMessage(ctx, "c", agent.UserMessage(agent.TextPart("hi")), lazarus.SendOptions{RequestID: "r1"}, user)
		require.NoError(t, err)
		h.awaitUpdate(sub, isRetry)
		h.clock.Advance(time.Second)

		u := h.awaitUpdate(sub, isTurnEnd)
		require.Equal(t, lazarus.TurnFailed, u.TurnEnd.Outcome)
		require.NotNil(t, u.Event.GetTurnFailed(), "the end comes with its event")
		require.Equal(t, u.Event.GetSeq(), u.TurnEnd.Seq)
		require.ErrorIs(t, u.TurnEnd.Err, agent.ErrUnavailable, "the code maps back to the sentinel")
		var te *lazarus.TurnError
		require.ErrorAs(t, u.TurnEnd.Err, &te)
		require.Equal(t, actors.CodeUnavailable, te.Code)
		require.Equal(t, 2, te.Attempts)
		require.Equal(t, []string{"user_msg", "turn_failed:unavailable"}, types(h.history("c")))
		conv, err := h.store.Conversation(ctx, "c")
		require.NoError(t, err)
		require.Equal(t, messages.ConversationStatus_CONVERSATION_STATUS_IDLE, conv.GetStatus())

		// Durable: after a kill, SendAndWait of the same message finds the
		// failure in the log.
		h.rt.Kill("c")
		end, err := h.rt.SendMessageAndWait(ctx, "c", agent.UserMessage(agent.TextPart("hi")), lazarus.SendOptions{RequestID: "r1"}, user)
		require.ErrorIs(t, err, lazarus.ErrTurnFailed)
		require.ErrorIs(t, err, agent.ErrUnavailable)
		require.Equal(t, lazarus.TurnFailed, end.Outcome)
		require.Equal(t, uint64(2), end.Seq)

		// An explicit Wake runs the turn again: its first failure is
		// attempt 1 again, and the retry answers.
		h.model.PushError("c", agent.ErrRateLimited)
		h.model.Push("c", scripted.Text("back"))
		require.NoError(t, h.rt.Wake(ctx, "c"))
		u = h.awaitUpdate(sub, isRetry)
		require.Equal(t, 1, u.Retry.Attempt)
		h.clock.Advance(time.Second)
		h.awaitEvent("c", 2, isAssistantText("back"))
		require.Equal(t, []string{"user_msg", "turn_failed:unavailable", "assistant_msg"}, types(h.history("c")))
		turns := h.model.Turns("c")
		last := turns[len(turns)-1].Context
		require.Len(t, last, 1, "the model never sees a turn_failed event")
		require.NotNil(t, last[0].GetUserMsg())
	})
}

// An error that is not retryable (an application's own, a refusal) fails
// the turn at once; so does any error with MaximumAttempts 1.
func TestModelRetrySkipsPermanentErrors(t *testing.T) {
	h := newHarness(t, openStore(t, "memory"), withRetry(lazarus.RetryPolicy{
		// Even a policy that retries everything never retries a refusal.
		Retryable: func(error) bool { return true },
	}))
	ctx := ctxT(t)
	h.model.PushError("c", agent.ErrRefused)
	end, err := h.rt.SendAndWait(ctx, "c", "hi", user)
	require.ErrorIs(t, err, agent.ErrRefused)
	require.Equal(t, lazarus.TurnFailed, end.Outcome)
	require.Equal(t, 1, h.model.Calls("c"))
	require.Equal(t, []string{"user_msg", "turn_failed:refused"}, types(h.history("c")))
}

// A new message abandons a retry waiting its delay: the turn restarts with
// the message at once, and counts its attempts from 1 again.
func TestNewSendAbandonsTheRetry(t *testing.T) {
	h := newHarness(t, openStore(t, "memory"), withRetry(retryPolicy))
	ctx := ctxT(t)
	h.model.PushError("c", agent.ErrUnavailable)
	sub, err := h.rt.Subscribe(ctx, "c", 0)
	require.NoError(t, err)
	_, err = h.rt.Send(ctx, "c", "hi", user)
	require.NoError(t, err)
	u := h.awaitUpdate(sub, isRetry)
	require.Equal(t, 1, u.Retry.Attempt)

	h.model.PushError("c", agent.ErrUnavailable)
	_, err = h.rt.Send(ctx, "c", "hello?", user)
	require.NoError(t, err)
	u = h.awaitUpdate(sub, isRetry)
	require.Equal(t, 1, u.Retry.Attempt, "the new message restarted the count")
	require.Equal(t, 2, h.model.Calls("c"), "the new message was answered without waiting out the delay")
	turns := h.model.Turns("c")
	require.Len(t, turns[1].Context, 2, "the restarted turn sees both messages")

	h.clock.Advance(time.Second)
	u = h.awaitUpdate(sub, isTurnEnd)
	require.Equal(t, lazarus.TurnAnswered, u.TurnEnd.Outcome)
	require.Equal(t, 3, h.model.Calls("c"))
}

// A kill abandons a retry waiting its delay: its timer is stopped, and the
// turn (still owed: the conversation is ACTIVE) runs again on the next
// wake.
func TestKillAbandonsTheRetry(t *testing.T) {
	h := newHarness(t, openStore(t, "memory"), withRetry(retryPolicy))
	ctx := ctxT(t)
	h.model.PushError("c", agent.ErrUnavailable)
	sub, err := h.rt.Subscribe(ctx, "c", 0)
	require.NoError(t, err)
	_, err = h.rt.Send(ctx, "c", "hi", user)
	require.NoError(t, err)
	h.awaitUpdate(sub, isRetry)
	require.Equal(t, 1, h.clock.Timers(), "the retry's timer")

	require.True(t, h.rt.Kill("c"))
	u := h.awaitUpdate(sub, isTurnEnd)
	require.Equal(t, lazarus.TurnCancelled, u.TurnEnd.Outcome)
	require.Equal(t, 0, h.clock.Timers(), "the kill stopped the retry's timer")
	require.Equal(t, 1, h.model.Calls("c"))

	require.NoError(t, h.rt.Wake(ctx, "c"))
	u = h.awaitUpdate(sub, isTurnEnd)
	require.Equal(t, lazarus.TurnAnswered, u.TurnEnd.Outcome)
	require.Equal(t, []string{"user_msg", "assistant_msg"}, types(h.history("c")))
}

// rateLimitedFor is a rate limit whose provider asked for a wait
// (agent.RetryAfter), as a 429 with Retry-After the provider gave up on.
type rateLimitedFor time.Duration

func (r rateLimitedFor) Error() string             { return "429: try again later" }
func (r rateLimitedFor) Unwrap() error             { return agent.ErrRateLimited }
func (r rateLimitedFor) RetryAfter() time.Duration { return time.Duration(r) }

// A retry waiting the wait the provider asked for (a minute, longer than
// the policy's second) survives the activation: its time is written to the
// row, and a conversation revived during the wait, by a wake after a kill
// or by Open's resume after a restart, does not call the model before
// that time (failure time plus the wait, on the runtime's clock), and does
// call it then.
func TestRevivalKeepsTheProvidersWait(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		for _, how := range []string{"kill", "restart"} {
			t.Run(how, func(t *testing.T) {
				store := openStore(t, kind)
				h := newHarness(t, store, func(o *lazarus.Options) { o.ModelRetry = retryPolicy; o.NoResume = true })
				ctx := ctxT(t)
				h.model.PushError("c", fmt.Errorf("provider: %w", rateLimitedFor(time.Minute)))
				sub, err := h.rt.Subscribe(ctx, "c", 0)
				require.NoError(t, err)
				_, err = h.rt.Send(ctx, "c", "hi", user)
				require.NoError(t, err)
				u := h.awaitUpdate(sub, isRetry)
				require.Equal(t, time.Minute, u.Retry.Delay, "the provider's wait, longer than the policy's")
				retryAt := h.clock.Now().Add(time.Minute)
				require.Eventually(t, func() bool {
					row, err := store.Conversation(ctx, "c")
					return err == nil && row.GetFsmState().GetRetryNotBefore().AsTime().Equal(retryAt)
				}, wait, time.Millisecond, "the retry's time in the row")

				model, clock := h.model, h.clock
				if how == "kill" {
					require.True(t, h.rt.Kill("c"))
					require.Equal(t, lazarus.TurnCancelled, h.awaitUpdate(sub, isTurnEnd).TurnEnd.Outcome)
					require.Equal(t, 0, clock.Timers(), "the kill stopped the retry's timer")
					clock.Advance(time.Second) // past the policy's delay, not the provider's
					model.Push("c", scripted.Text("back"))
					require.NoError(t, h.rt.Wake(ctx, "c"))
				} else {
					require.NoError(t, h.rt.Close())
					model = scripted.New(scripted.Options{})
					model.Push("c", scripted.Text("back"))
					// Open's resume revives the conversation (ACTIVE).
					h = newHarness(t, store, func(o *lazarus.Options) { o.Model = model; o.ModelRetry = retryPolicy })
					clock = h.clock
				}
				calls := model.Calls("c")
				require.Eventually(t, func() bool { return slices.ContainsFunc(clock.Dues(), retryAt.Equal) }, wait, time.Millisecond,
					"the revival waits for the provider's time (timers %v)", clock.Dues())
				clock.Advance(retryAt.Sub(clock.Now()) - time.Nanosecond)
				require.Equal(t, calls, model.Calls("c"), "no call before the provider's time")
				clock.Advance(time.Nanosecond)
				h.awaitEvent("c", 0, isAssistantText("back"))
				require.Equal(t, []string{"user_msg", "assistant_msg"}, types(h.history("c")))
			})
		}
	})
}

// A new message abandons a revived retry's wait as it does a live one: the
// turn restarts at once with it, and the time written for the failed
// call's retry holds no more.
func TestNewSendAbandonsARevivedRetry(t *testing.T) {
	h := newHarness(t, openStore(t, "memory"), withRetry(retryPolicy))
	ctx := ctxT(t)
	h.model.PushError("c", rateLimitedFor(time.Minute))
	sub, err := h.rt.Subscribe(ctx, "c", 0)
	require.NoError(t, err)
	_, err = h.rt.Send(ctx, "c", "hi", user)
	require.NoError(t, err)
	h.awaitUpdate(sub, isRetry)
	retryAt := h.clock.Now().Add(time.Minute)
	require.Eventually(t, func() bool {
		row, err := h.store.Conversation(ctx, "c")
		return err == nil && row.GetFsmState().GetRetryNotBefore().AsTime().Equal(retryAt)
	}, wait, time.Millisecond, "the retry's time in the row")
	require.True(t, h.rt.Kill("c"))
	h.awaitUpdate(sub, isTurnEnd)

	h.model.Push("c", scripted.Text("at once"))
	end, err := h.rt.SendAndWait(ctx, "c", "still there?", user)
	require.NoError(t, err)
	require.Equal(t, "at once", end.Text)
	require.Equal(t, 2, h.model.Calls("c"))

	require.True(t, h.rt.Kill("c"))
	require.NoError(t, h.rt.Wake(ctx, "c"))
	require.Equal(t, 0, h.clock.Timers(), "a revival past the new message arms no retry")
	// A call the revival made would come before the next turn's (one
	// model call of a conversation at a time, its turns in order): once
	// that turn has ended, the count is final.
	h.model.Push("c", scripted.Text("later"))
	end, err = h.rt.SendAndWait(ctx, "c", "and now?", user)
	require.NoError(t, err)
	require.Equal(t, "later", end.Text)
	require.Equal(t, 3, h.model.Calls("c"), "the revival made no call: only the next turn's")
	require.Equal(t, []string{"user_msg", "user_msg", "assistant_msg", "user_msg", "assistant_msg"}, types(h.history("c")))
}

// Open resumes the conversations that were mid-turn, never one whose turn
// failed for good: its row is IDLE, so the resume (one pass over the
// ACTIVE conversations) never wakes it; "z-active", left mid-turn, shows
// that the resume ran.
func TestFailedTurnIsNotResumedOnOpen(t *testing.T) {
	store := openStore(t, "memory")
	first := newHarness(t, store, func(o *lazarus.Options) { o.NoResume = true })
	ctx := ctxT(t)
	first.model.PushError("a-failed", agent.ErrRequest)
	end, err := first.rt.SendAndWait(ctx, "a-failed", "hi", user)
	require.ErrorIs(t, err, agent.ErrRequest)
	require.Equal(t, lazarus.TurnFailed, end.Outcome)
	entered := first.model.Hold("z-active")
	_, err = first.rt.Send(ctx, "z-active", "hi", user)
	require.NoError(t, err)
	recv(t, entered, "model call entered")
	require.NoError(t, first.rt.Close()) // z-active is left mid-turn
	first.model.Release("z-active")

	second := newHarness(t, store, nil)
	require.NoError(t, second.model.WaitCalls(ctx, "z-active", 1))
	second.awaitEvent("z-active", 0, func(ev *messages.Event) bool { return ev.GetAssistantMsg() != nil })
	require.Equal(t, 0, second.model.Calls("a-failed"), "the failed turn is not run again")
	require.Equal(t, []string{"user_msg", "turn_failed:request"}, types(second.history("a-failed")))
}

// An answer that mixes a valid call and an invalid one: the valid call
// runs, the invalid one gets an error result in the answer's own write,
// and the model is called again once both have results, seeing both.
func TestInvalidToolCallGetsAnErrorResult(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), nil)
		ctx := ctxT(t)
		h.model.Push("c",
			scripted.Reply("", scripted.Call("lookup_order", `{"id":42}`), scripted.Call("no_such_tool", `{}`)),
			scripted.Text("done"))
		end, err := h.rt.SendAndWait(ctx, "c", "go", user)
		require.NoError(t, err)
		require.Equal(t, "done", end.Text)
		evs := h.history("c")
		require.Equal(t, []string{"user_msg", "assistant_msg", "tool_call:lookup_order", "tool_call:no_such_tool",
			"tool_result:no_such_tool", "tool_result:lookup_order", "assistant_msg"}, types(evs))
		require.Equal(t, agent.CodeInvalid, evs[4].GetToolResult().GetOutcome().GetError().GetCode())
		require.Len(t, h.runs.of("lookup_order"), 1)
		ids := map[string]bool{}
		for _, ev := range evs[2:4] {
			ids[ev.GetToolCall().GetCall().GetId()] = true
		}
		require.Len(t, ids, 2, "every call has its own id")
		turns := h.model.Turns("c")
		require.Len(t, turns, 2)
		last := turns[1].Context
		require.Len(t, last, 4, "user, answer, and both results")
		require.NotNil(t, last[2].GetToolResult())
		require.NotNil(t, last[3].GetToolResult())
		pending, err := h.store.PendingToolCalls(ctx, "c")
		require.NoError(t, err)
		require.Empty(t, pending)
	})
}

// Past Options.MaxInvalidToolAnswers answers in a row with invalid calls,
// the turn fails durably with ErrInvalidToolCalls; the answer over the
// bound is not written.
func TestTooManyInvalidToolAnswersFailTheTurn(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), func(o *lazarus.Options) { o.MaxInvalidToolAnswers = 2 })
		ctx := ctxT(t)
		bad := func() *messages.AssistantMessage { return scripted.Reply("", scripted.Call("lookup_order", `[1]`)) }
		h.model.Push("c", bad(), bad(), bad())
		end, err := h.rt.SendAndWait(ctx, "c", "go", user)
		require.ErrorIs(t, err, lazarus.ErrInvalidToolCalls)
		require.Equal(t, lazarus.TurnFailed, end.Outcome)
		var te *lazarus.TurnError
		require.ErrorAs(t, err, &te)
		require.Equal(t, actors.CodeInvalidToolCalls, te.Code)
		require.Equal(t, 3, te.Attempts)
		call := []string{"assistant_msg", "tool_call:lookup_order", "tool_result:lookup_order"}
		want := append(append(append([]string{"user_msg"}, call...), call...), "turn_failed:invalid_tool_calls")
		require.Equal(t, want, types(h.history("c")))
		require.Equal(t, 3, h.model.Calls("c"))
		require.Empty(t, h.runs.of("lookup_order"))

		// A valid answer in between resets the count; a new message
		// restarts the turn.
		h.model.Push("c", bad(), scripted.Reply("", scripted.Call("lookup_order", `{"id":1}`)), bad(), bad(), scripted.Text("ok"))
		end, err = h.rt.SendAndWait(ctx, "c", "again", user)
		require.NoError(t, err)
		require.Equal(t, "ok", end.Text)
	})
}

// Close abandons a retry waiting its delay: its timer is stopped with the
// actor.
func TestCloseAbandonsTheRetry(t *testing.T) {
	h := newHarness(t, openStore(t, "memory"), withRetry(retryPolicy))
	ctx := ctxT(t)
	h.model.PushError("c", agent.ErrUnavailable)
	sub, err := h.rt.Subscribe(ctx, "c", 0)
	require.NoError(t, err)
	_, err = h.rt.Send(ctx, "c", "hi", user)
	require.NoError(t, err)
	h.awaitUpdate(sub, isRetry)
	require.Equal(t, 1, h.clock.Timers(), "the retry's timer")
	require.NoError(t, h.rt.Close())
	require.Equal(t, 0, h.clock.Timers(), "Close stopped the retry's timer")
	require.Equal(t, 1, h.model.Calls("c"))
}

// A negative Options.MaxInvalidToolAnswers tolerates no invalid call: the
// first answer with one fails the turn, and nothing of it is written.
func TestNoInvalidToolAnswerTolerated(t *testing.T) {
	h := newHarness(t, openStore(t, "memory"), func(o *lazarus.Options) { o.MaxInvalidToolAnswers = -1 })
	ctx := ctxT(t)
	h.model.Push("c", scripted.Reply("", scripted.Call("no_such_tool", `{}`)))
	end, err := h.rt.SendAndWait(ctx, "c", "go", user)
	require.ErrorIs(t, err, lazarus.ErrInvalidToolCalls)
	require.Equal(t, lazarus.TurnFailed, end.Outcome)
	require.Equal(t, []string{"user_msg", "turn_failed:invalid_tool_calls"}, types(h.history("c")))
}
