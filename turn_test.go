package lazarus_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/messages"
)

func openTurnRuntime(t *testing.T, model *scripted.Model) *lazarus.Runtime {
	t.Helper()
	rt, err := lazarus.Open(lazarus.Options{Model: model,
		Tools: []agent.Tool{{Name: "approve", Executor: messages.Executor_EXECUTOR_HUMAN}}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = rt.Close() })
	return rt
}

func TestSendAndWaitReturnsTheAnswer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	model := scripted.New(scripted.Options{})
	model.Push("c", scripted.Text("first"), scripted.Text("second"))
	rt := openTurnRuntime(t, model)

	for i, want := range []string{"first", "second"} {
		end, err := rt.SendAndWait(ctx, "c", "hi", agent.Scope{UserID: "u"})
		require.NoError(t, err)
		require.Equal(t, lazarus.TurnAnswered, end.Outcome)
		require.Equal(t, want, end.Text)
		require.Equal(t, uint64(2*(i+1)), end.Seq, "the seq of the answer")
	}
	evs, err := rt.History(ctx, "c", 0, 0)
	require.NoError(t, err)
	require.Equal(t, "second", evs[3].GetAssistantMsg().GetContent()[0].GetText())
}

func TestSendAndWaitSuspendsOnHumanCalls(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	model := scripted.New(scripted.Options{})
	model.Push("c", scripted.Reply("asking", scripted.Call("approve", `{}`)), scripted.Text("done"))
	rt := openTurnRuntime(t, model)

	end, err := rt.SendAndWait(ctx, "c", "pay", agent.Scope{UserID: "u"})
	require.NoError(t, err)
	require.Equal(t, lazarus.TurnSuspended, end.Outcome)
	require.Len(t, end.Pending, 1)
	require.Equal(t, "approve", end.Pending[0].GetKind())

	// The answer ends the resumed turn, seen by a subscriber.
	updates, err := rt.Subscribe(ctx, "c", end.Seq)
	require.NoError(t, err)
	require.NoError(t, rt.Resolve(ctx, end.Pending[0].GetToolCallId(), `true`, agent.Scope{UserID: "v"}))
	for u := range updates {
		if u.TurnEnd != nil {
			require.Equal(t, lazarus.TurnAnswered, u.TurnEnd.Outcome)
			require.Equal(t, "done", u.TurnEnd.Text)
			require.NotNil(t, u.Event.GetAssistantMsg())
			break
		}
	}
}

func TestSendAndWaitReportsAFailedTurn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	model := scripted.New(scripted.Options{})
	boom := errors.New("model unavailable")
	model.PushError("c", boom)
	rt := openTurnRuntime(t, model)

	end, err := rt.SendAndWait(ctx, "c", "hi", agent.Scope{UserID: "u"})
	require.ErrorIs(t, err, lazarus.ErrTurnFailed)
	require.ErrorContains(t, err, boom.Error())
	require.Equal(t, lazarus.TurnFailed, end.Outcome)
	// The end comes from the durable turn_failed event (an error of the
	// application's own model is not retried).
	require.Equal(t, uint64(2), end.Seq)
	var te *lazarus.TurnError
	require.ErrorAs(t, err, &te)
	require.Equal(t, actors.CodeModel, te.Code)
	require.Equal(t, 1, te.Attempts)
	evs, err := rt.History(ctx, "c", 0, 0)
	require.NoError(t, err)
	require.Len(t, evs, 2)
	require.Equal(t, actors.CodeModel, evs[1].GetTurnFailed().GetCode())
	conv, err := rt.Store().Conversation(ctx, "c")
	require.NoError(t, err)
	require.Equal(t, messages.ConversationStatus_CONVERSATION_STATUS_IDLE, conv.GetStatus(), "out of ACTIVE: a restart does not resume it")

	// The next send runs the turn again.
	end, err = rt.SendAndWait(ctx, "c", "again", agent.Scope{UserID: "u"})
	require.NoError(t, err)
	require.Equal(t, lazarus.TurnAnswered, end.Outcome)
	require.Equal(t, scripted.DefaultReply, end.Text)
}

func TestKillMidTurnCancelsTheTurn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	model := scripted.New(scripted.Options{})
	held := model.Hold("c")
	rt := openTurnRuntime(t, model)

	type result struct {
		end lazarus.TurnEnd
		err error
	}
	done := make(chan result, 1)
	go func() {
		end, err := rt.SendAndWait(ctx, "c", "hi", agent.Scope{UserID: "u"})
		done <- result{end, err}
	}()
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatal("the model was never called")
	}
	require.True(t, rt.Kill("c"))
	res := <-done
	require.ErrorIs(t, res.err, lazarus.ErrTurnCancelled)
	require.Equal(t, lazarus.TurnCancelled, res.end.Outcome)
	model.Release("c")

	// Waking the conversation runs the turn again; a subscriber from the
	// start sees the durable end in the history.
	require.NoError(t, rt.Wake(ctx, "c"))
	updates, err := rt.Subscribe(ctx, "c", 0)
	require.NoError(t, err)
	for u := range updates {
		if u.TurnEnd != nil {
			require.Equal(t, lazarus.TurnAnswered, u.TurnEnd.Outcome)
			require.Equal(t, uint64(2), u.TurnEnd.Seq)
			break
		}
	}
}

func TestSendAndWaitHonoursContextAndClose(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	model := scripted.New(scripted.Options{})
	held := model.Hold("c")
	rt := openTurnRuntime(t, model)

	waitCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := rt.SendAndWait(waitCtx, "c", "hi", agent.Scope{UserID: "u"})
		done <- err
	}()
	<-held
	stop()
	require.ErrorIs(t, <-done, context.Canceled)
	model.Release("c")

	held = model.Hold("d")
	go func() {
		_, err := rt.SendAndWait(ctx, "d", "hi", agent.Scope{UserID: "u"})
		done <- err
	}()
	<-held // the model never answers: Close ends the wait
	require.NoError(t, rt.Close())
	err := <-done
	require.ErrorIs(t, err, lazarus.ErrClosed)
	_, err = rt.SendAndWait(ctx, "d", "hi", agent.Scope{UserID: "u"})
	require.ErrorIs(t, err, lazarus.ErrClosed)
}

func TestTurnEndOfHistory(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	model := scripted.New(scripted.Options{})
	model.Push("c", scripted.Reply("a", scripted.Call("approve", `{}`)))
	rt := openTurnRuntime(t, model)
	_, err := rt.SendAndWait(ctx, "c", "hi", agent.Scope{UserID: "u"})
	require.NoError(t, err)
	evs, err := rt.History(ctx, "c", 0, 0)
	require.NoError(t, err)
	var outcomes []lazarus.TurnOutcome
	for _, ev := range evs {
		if end := lazarus.TurnEndOf(ev); end != nil {
			outcomes = append(outcomes, end.Outcome)
		}
	}
	require.Equal(t, []lazarus.TurnOutcome{lazarus.TurnSuspended}, outcomes)
	require.Equal(t, "suspended", lazarus.TurnSuspended.String())
}

// A custom Model and a message built with package agent's constructors
// alone, sent through the Runtime.
func TestMessagesBuiltWithAgentConstructors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	model := agent.ModelFunc(func(_ context.Context, turn agent.Turn, _ func(string)) (*messages.AssistantMessage, error) {
		last := turn.Context[len(turn.Context)-1]
		if um := last.GetUserMsg(); um != nil {
			return agent.Reply("", agent.Call("approve", `{"parts":`+fmt.Sprint(len(um.GetContent()))+`}`)), nil
		}
		return agent.Text("approved"), nil
	})
	rt, err := lazarus.Open(lazarus.Options{Model: model,
		Tools: []agent.Tool{{Name: "approve", Executor: messages.Executor_EXECUTOR_HUMAN}}})
	require.NoError(t, err)
	defer rt.Close()
	end, err := rt.SendMessageAndWait(ctx, "c", agent.UserMessage(agent.TextPart("see"), agent.ImagePart("image/png", []byte{1}, "")),
		lazarus.SendOptions{}, agent.Scope{UserID: "u"})
	require.NoError(t, err)
	require.Equal(t, lazarus.TurnSuspended, end.Outcome)
	require.Equal(t, "approve {\"parts\":2}", end.Pending[0].GetPrompt())
}

// A waiter that falls behind (many deltas, a buffer of one update) picks
// the log up again where it left it, and still finds its turn's end.
func TestSendAndWaitSurvivesALaggedSubscription(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	model := scripted.New(scripted.Options{Chunk: 1})
	long := strings.Repeat("streamed ", 200)
	model.Push("c", scripted.Text(long))
	rt, err := lazarus.Open(lazarus.Options{Model: model, SubscriberBuffer: 1})
	require.NoError(t, err)
	defer rt.Close()
	end, err := rt.SendAndWait(ctx, "c", "hi", agent.Scope{UserID: "u"})
	require.NoError(t, err)
	require.Equal(t, lazarus.TurnAnswered, end.Outcome)
	require.Equal(t, long, end.Text)
	require.Equal(t, uint64(2), end.Seq)
}

// A subscriber that joins mid-conversation gets each durable turn end
// once, whether it reads it as history or live.
func TestTurnEndsReachASubscriberOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rt := openTurnRuntime(t, scripted.New(scripted.Options{}))
	const turns = 6
	_, err := rt.SendAndWait(ctx, "c", "first", agent.Scope{UserID: "u"})
	require.NoError(t, err)
	updates, err := rt.Subscribe(ctx, "c", 0)
	require.NoError(t, err)
	for range turns - 1 {
		_, err := rt.SendAndWait(ctx, "c", "more", agent.Scope{UserID: "u"})
		require.NoError(t, err)
	}
	var ends []uint64
	for u := range updates {
		if u.TurnEnd != nil {
			require.Equal(t, lazarus.TurnAnswered, u.TurnEnd.Outcome)
			require.Equal(t, u.Event.GetSeq(), u.TurnEnd.Seq)
			ends = append(ends, u.TurnEnd.Seq)
			if len(ends) == turns {
				break
			}
		}
	}
	require.Equal(t, []uint64{2, 4, 6, 8, 10, 12}, ends)
}

// TestRewindMidTurnEndsSendAndWait: a Rewind or an Edit that lands while
// the turn of a SendAndWait's message runs takes that turn back (a rewind
// owes no turn): SendAndWait returns a TurnCancelled end, with the rewind
// event's seq, and an error wrapping ErrTurnCancelled; the rewind event
// records it, and subscribers get the same end with it. SendAndWait used
// to wait for an end that never came, until its ctx ended.
func TestRewindMidTurnEndsSendAndWait(t *testing.T) {
	for _, edit := range []bool{false, true} {
		t.Run(map[bool]string{false: "rewind", true: "edit"}[edit], func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			model := scripted.New(scripted.Options{})
			rt := openTurnRuntime(t, model)
			model.Push("c", scripted.Text("first"))
			_, err := rt.SendAndWait(ctx, "c", "hello", agent.Scope{UserID: "u"}) // 1, 2
			require.NoError(t, err)

			held := model.Hold("c")
			type result struct {
				end lazarus.TurnEnd
				err error
			}
			done := make(chan result, 1)
			go func() {
				end, err := rt.SendAndWait(ctx, "c", "second", agent.Scope{UserID: "u"}) // 3
				done <- result{end, err}
			}()
			select {
			case <-held:
			case <-ctx.Done():
				t.Fatal("the model was never called")
			}
			if edit {
				_, err = rt.Edit(ctx, "c", 3, "second, edited", agent.Scope{UserID: "u"}) // rewind 4, message 5
			} else {
				err = rt.Rewind(ctx, "c", 2, lazarus.RewindOptions{}, agent.Scope{UserID: "u"}) // 4
			}
			require.NoError(t, err)
			var res result
			select {
			case res = <-done:
			case <-ctx.Done():
				t.Fatal("SendAndWait still waits on the turn the rewind took back")
			}
			model.Release("c")
			require.ErrorIs(t, res.err, lazarus.ErrTurnCancelled)
			require.Equal(t, lazarus.TurnCancelled, res.end.Outcome)
			require.Equal(t, uint64(4), res.end.Seq, "the rewind event's seq")

			// Subscribers see the same end, with the rewind event, in
			// history as live.
			sub, err := rt.Subscribe(ctx, "c", 3)
			require.NoError(t, err)
			u := <-sub
			require.NotNil(t, u.Event)
			require.NotNil(t, u.Event.GetRewind())
			require.True(t, u.Event.GetRewind().GetCancelledTurn())
			require.NotNil(t, u.TurnEnd, "the rewind's update ends the turn")
			require.Equal(t, lazarus.TurnCancelled, u.TurnEnd.Outcome)
			require.Equal(t, uint64(4), u.TurnEnd.Seq)
			require.ErrorIs(t, u.TurnEnd.Err, lazarus.ErrTurnCancelled)
		})
	}
}
