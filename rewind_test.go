package lazarus_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/render"
	"github.com/lazarusrt/lazarus/snapshot"
)

// texts returns the texts of the user and assistant messages of a model
// context, in order.
func texts(evs []*messages.Event) []string {
	var out []string
	for _, ev := range evs {
		switch {
		case ev.GetUserMsg() != nil:
			out = append(out, "u:"+ev.GetUserMsg().GetContent()[0].GetText())
		case ev.GetAssistantMsg() != nil && len(ev.GetAssistantMsg().GetContent()) > 0:
			out = append(out, "a:"+ev.GetAssistantMsg().GetContent()[0].GetText())
		}
	}
	return out
}

func TestRewindThenSendHidesTheSpanFromTheModel(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	model := scripted.New(scripted.Options{})
	model.Push("c", scripted.Text("one"), scripted.Text("two"), scripted.Text("three"))
	rt := openTurnRuntime(t, model)
	u := agent.Scope{UserID: "u"}

	_, err := rt.SendAndWait(ctx, "c", "first", u) // seqs 1, 2
	require.NoError(t, err)
	_, err = rt.SendAndWait(ctx, "c", "second", u) // seqs 3, 4
	require.NoError(t, err)
	require.NoError(t, rt.Rewind(ctx, "c", 2, lazarus.RewindOptions{Reason: "undo"}, u)) // seq 5
	end, err := rt.SendAndWait(ctx, "c", "other", u)                                     // seqs 6, 7
	require.NoError(t, err)
	require.Equal(t, "three", end.Text)

	turns := model.Turns("c")
	require.Len(t, turns, 3)
	require.Equal(t, []string{"u:first", "a:one", "u:other"}, texts(turns[2].Context), "the model does not see the rewound span")

	full, err := rt.History(ctx, "c", 0, 0)
	require.NoError(t, err)
	require.Len(t, full, 7, "the log keeps the rewound span")
	require.Equal(t, uint64(2), full[4].GetRewind().GetToSeq())
	require.Equal(t, "undo", full[4].GetRewind().GetReason())

	view, err := rt.HistoryView(ctx, "c", lazarus.HistoryOptions{})
	require.NoError(t, err)
	require.Len(t, view, 7)
	var rewound []uint64
	for _, e := range view {
		if e.Rewound {
			rewound = append(rewound, e.Event.GetSeq())
		}
	}
	require.Equal(t, []uint64{3, 4}, rewound, "the full view marks the rewound span")
	eff, err := rt.HistoryView(ctx, "c", lazarus.HistoryOptions{Effective: true})
	require.NoError(t, err)
	var seqs []uint64
	for _, e := range eff {
		require.False(t, e.Rewound)
		seqs = append(seqs, e.Event.GetSeq())
	}
	require.Equal(t, []uint64{1, 2, 6, 7}, seqs, "the effective view is what the model sees")
	page, err := rt.HistoryView(ctx, "c", lazarus.HistoryOptions{Effective: true, Before: 7, Limit: 2})
	require.NoError(t, err)
	require.Len(t, page, 2)
	require.Equal(t, uint64(2), page[0].Event.GetSeq())
	require.Equal(t, uint64(6), page[1].Event.GetSeq())
	_, err = rt.HistoryView(ctx, "c", lazarus.HistoryOptions{Limit: -1})
	require.ErrorIs(t, err, journal.ErrInvalid)
}

func TestRewindCancelsAPendingHumanCall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	model := scripted.New(scripted.Options{})
	model.Push("c", scripted.Text("hello"), scripted.Reply("asking", scripted.Call("approve", `{}`)), scripted.Text("after"))
	rt := openTurnRuntime(t, model)
	u := agent.Scope{UserID: "u"}

	_, err := rt.SendAndWait(ctx, "c", "hi", u) // 1, 2
	require.NoError(t, err)
	end, err := rt.SendAndWait(ctx, "c", "pay", u) // 3, 4 (answer), 5 (call), 6 (suspension)
	require.NoError(t, err)
	require.Equal(t, lazarus.TurnSuspended, end.Outcome)
	id := end.Pending[0].GetToolCallId()
	far := time.Now().Add(365 * 24 * time.Hour)
	require.Equal(t, []string{id}, deadlines(ctx, t, rt, far), "the call has its default deadline")

	require.ErrorIs(t, rt.Rewind(ctx, "c", 4, lazarus.RewindOptions{}, u), journal.ErrInvalid, "the call is open at seq 5")
	require.NoError(t, rt.Rewind(ctx, "c", 2, lazarus.RewindOptions{}, u))

	err = rt.Resolve(ctx, id, `true`, agent.Scope{UserID: "v"})
	require.ErrorIs(t, err, journal.ErrStale, "a late answer to a rewound call is stale")
	row, err := rt.Store().ToolCall(ctx, id)
	require.NoError(t, err)
	require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_ERRORED, row.GetStatus())
	require.Equal(t, agent.CodeCanceled, row.GetResult().GetError().GetCode())
	require.Empty(t, deadlines(ctx, t, rt, far), "the rewind cancelled the call's deadline")
	pending, _, err := rt.PendingCalls(ctx, "", 0)
	require.NoError(t, err)
	require.Empty(t, pending)

	end, err = rt.SendAndWait(ctx, "c", "again", u)
	require.NoError(t, err)
	require.Equal(t, "after", end.Text)
	turns := model.Turns("c")
	require.Equal(t, []string{"u:hi", "a:hello", "u:again"}, texts(turns[len(turns)-1].Context))
}

func TestEditReplacesAUserMessageInOneWrite(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	model := scripted.New(scripted.Options{})
	model.Push("c", scripted.Text("one"), scripted.Text("two"), scripted.Text("edited"))
	rt := openTurnRuntime(t, model)
	u := agent.Scope{UserID: "u"}

	_, err := rt.SendAndWait(ctx, "c", "first", u) // 1, 2
	require.NoError(t, err)
	_, err = rt.SendAndWait(ctx, "c", "secnd", u) // 3, 4
	require.NoError(t, err)
	updates, err := rt.Subscribe(ctx, "c", 4)
	require.NoError(t, err)

	_, err = rt.Edit(ctx, "c", 2, "x", u)
	require.ErrorIs(t, err, journal.ErrInvalid, "seq 2 is the model's answer")
	_, err = rt.Edit(ctx, "c", 9, "x", u)
	require.ErrorIs(t, err, journal.ErrInvalid, "after the log")
	_, err = rt.Edit(ctx, "c", 3, "", u)
	require.ErrorIs(t, err, journal.ErrInvalid, "an empty text")

	seq, err := rt.Edit(ctx, "c", 3, "second", u)
	require.NoError(t, err)
	require.Equal(t, uint64(6), seq, "the rewind at 5, the new message at 6")
	// The turn follows: its answer ends it.
	for up := range updates {
		if up.TurnEnd != nil {
			require.Equal(t, "edited", up.TurnEnd.Text)
			break
		}
	}
	require.NoError(t, ctx.Err(), "the turn ended before the test's timeout")
	turns := model.Turns("c")
	require.Equal(t, []string{"u:first", "a:one", "u:second"}, texts(turns[len(turns)-1].Context))

	// One atomic write: the rewind and the new message landed together,
	// with the same time.
	evs, err := rt.History(ctx, "c", 0, 0)
	require.NoError(t, err)
	require.Equal(t, uint64(2), evs[4].GetRewind().GetToSeq())
	require.Equal(t, "second", evs[5].GetUserMsg().GetContent()[0].GetText())
	require.True(t, evs[4].GetTime().AsTime().Equal(evs[5].GetTime().AsTime()))
	require.Equal(t, "secnd", evs[2].GetUserMsg().GetContent()[0].GetText(), "the log keeps the old message")
}

func TestRewindRefusesBadInput(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	model := scripted.New(scripted.Options{})
	model.Push("c", scripted.Text("one"), scripted.Text("two"))
	rt := openTurnRuntime(t, model)
	u := agent.Scope{UserID: "u"}
	_, err := rt.SendAndWait(ctx, "c", "first", u) // 1, 2
	require.NoError(t, err)

	require.ErrorIs(t, rt.Rewind(ctx, "c", 3, lazarus.RewindOptions{}, u), journal.ErrInvalid, "after the last seq")
	require.ErrorIs(t, rt.Rewind(ctx, "nobody", 0, lazarus.RewindOptions{}, u), journal.ErrNotFound)
	require.ErrorIs(t, rt.Rewind(ctx, "c", 0, lazarus.RewindOptions{Reason: strings.Repeat("r", journal.MaxEventBytes+1)}, u), journal.ErrInvalid, "a reason too large for an event")
	require.ErrorIs(t, rt.Rewind(ctx, "c", 0, lazarus.RewindOptions{Reason: "bad\xff"}, u), journal.ErrInvalid, "a reason that is not UTF-8")
	require.ErrorIs(t, rt.Rewind(ctx, "c", 0, lazarus.RewindOptions{}, agent.Scope{UserID: strings.Repeat("u", agent.MaxUserIDBytes+1)}), journal.ErrInvalid, "an oversized identity, refused as by Edit")
	evs, err := rt.History(ctx, "c", 0, 0)
	require.NoError(t, err)
	require.Len(t, evs, 2, "nothing was written by a refused rewind")
	_, err = rt.Edit(ctx, "nobody", 1, "x", u)
	require.ErrorIs(t, err, journal.ErrNotFound)

	// Rewinding to seq 0, then into the rewound span, is refused: the
	// span is no longer on the head.
	require.NoError(t, rt.Rewind(ctx, "c", 0, lazarus.RewindOptions{}, u)) // 3
	require.ErrorIs(t, rt.Rewind(ctx, "c", 1, lazarus.RewindOptions{}, u), journal.ErrInvalid)
	evs, err = rt.History(ctx, "c", 0, 0)
	require.NoError(t, err)
	require.Len(t, evs, 3, "nothing was written by a refused rewind")

	require.NoError(t, rt.Delete(ctx, "c"))
	require.Error(t, rt.Rewind(ctx, "c", 0, lazarus.RewindOptions{}, u))
}

// deadlines returns the tool call ids of the deadlines due by dueBy.
func deadlines(ctx context.Context, t *testing.T, rt *lazarus.Runtime, dueBy time.Time) []string {
	t.Helper()
	var ids []string
	require.NoError(t, rt.Store().Deadlines(ctx, dueBy, func(d *messages.Deadline) error {
		ids = append(ids, d.GetToolCallId())
		return nil
	}))
	return ids
}

func TestRewindBelowASummary(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	model := scripted.New(scripted.Options{})
	model.Push("c", scripted.Text("one"), scripted.Text("two"), scripted.Text("three"), scripted.Text("again"), scripted.Text("edited"))
	rt, err := lazarus.Open(lazarus.Options{Model: model, Summarizer: snapshot.Deterministic{},
		Summary: snapshot.Policy{MaxEvents: 3, MaxTokens: -1, KeepRecent: 1}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = rt.Close() })
	u := agent.Scope{UserID: "u"}
	for _, text := range []string{"first", "second", "third"} { // seqs 1-6
		_, err := rt.SendAndWait(ctx, "c", text, u)
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		s, err := rt.Store().LatestSummary(ctx, "c")
		return err == nil && s.GetToSeq() >= 3
	}, 10*time.Second, 5*time.Millisecond, "a summary covers seq 3")

	require.NoError(t, rt.Rewind(ctx, "c", 2, lazarus.RewindOptions{}, u)) // 7
	end, err := rt.SendAndWait(ctx, "c", "other", u)                       // 8, 9
	require.NoError(t, err)
	require.Equal(t, "again", end.Text)
	turns := model.Turns("c")
	last := turns[len(turns)-1]
	require.Nil(t, last.Summary, "no summary ends at or before seq 2: the context starts from the log's start")
	require.Equal(t, []string{"u:first", "a:one", "u:other"}, texts(last.Context))

	// An edit below the summary: of seq 1, after another summary or not.
	seq, err := rt.Edit(ctx, "c", 1, "premier", u)
	require.NoError(t, err)
	if !assert.Eventually(t, func() bool { return len(model.Turns("c")) == len(turns)+1 }, 10*time.Second, 5*time.Millisecond, "the edit's turn ran") {
		// What the log and the row say, to find where the turn went.
		all, _ := rt.History(ctx, "c", 0, 0)
		for _, ev := range all {
			t.Logf("seq %d: %s", ev.GetSeq(), render.Event(ev, false))
		}
		row, err := rt.Store().Conversation(ctx, "c")
		t.Logf("row: %v (%v); active: %v; model calls: %d", row, err, rt.IsActive("c"), len(model.Turns("c")))
		s, err := rt.Store().LatestSummary(ctx, "c")
		t.Logf("latest summary: %d..%d (%v)", s.GetFromSeq(), s.GetToSeq(), err)
		t.FailNow()
	}
	turns = model.Turns("c")
	last = turns[len(turns)-1]
	require.Nil(t, last.Summary)
	require.Equal(t, []string{"u:premier"}, texts(last.Context))
	evs, err := rt.History(ctx, "c", 0, 0)
	require.NoError(t, err)
	require.Equal(t, "premier", evs[seq-1].GetUserMsg().GetContent()[0].GetText())

	_, err = rt.Edit(ctx, "c", 2, "x", u)
	require.ErrorIs(t, err, journal.ErrInvalid, "seq 2 is an answer, and no longer on the head")
}

func TestRewindSurvivesAKill(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	model := scripted.New(scripted.Options{})
	model.Push("c", scripted.Text("one"), scripted.Text("two"), scripted.Text("three"))
	rt := openTurnRuntime(t, model)
	u := agent.Scope{UserID: "u"}
	_, err := rt.SendAndWait(ctx, "c", "first", u) // 1, 2
	require.NoError(t, err)
	_, err = rt.SendAndWait(ctx, "c", "second", u) // 3, 4
	require.NoError(t, err)
	require.NoError(t, rt.Rewind(ctx, "c", 2, lazarus.RewindOptions{}, u)) // 5
	rt.Kill("c")
	require.Eventually(t, func() bool { return !rt.IsActive("c") }, 10*time.Second, 5*time.Millisecond)

	end, err := rt.SendAndWait(ctx, "c", "other", u) // revives from the log
	require.NoError(t, err)
	require.Equal(t, "three", end.Text)
	turns := model.Turns("c")
	require.Equal(t, []string{"u:first", "a:one", "u:other"}, texts(turns[len(turns)-1].Context), "the revived working set is the rewound one")
}

// TestEditRacesALateToolAnswer: an edit that rewinds past a pending human
// call and a late answer to that call race. The call is decided once:
// either the edit cancels it and the answer gets ErrStale, or the answer
// lands first; then the edit either finds the call closed in the Store and
// fails with ErrStale, writing nothing, or comes after the answer's result
// and rewinds it away. Never both decisions of the call, never neither,
// the answer's result in the log once if it won, and a failed side writes
// nothing.
// Run many times, so that the orders happen.
func TestEditRacesALateToolAnswer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	model := scripted.New(scripted.Options{})
	rt := openTurnRuntime(t, model)
	u := agent.Scope{UserID: "u"}
	const rounds = 30
	seen := map[string]int{}
	for i := range rounds {
		conv := fmt.Sprintf("race-%d", i)
		model.Push(conv, scripted.Reply("asking", scripted.Call("approve", `{}`)))
		end, err := rt.SendAndWait(ctx, conv, "pay", u) // 1 (user), 2 (call), 3 (suspension)
		require.NoError(t, err)
		require.Equal(t, lazarus.TurnSuspended, end.Outcome)
		id := end.Pending[0].GetToolCallId()

		start := make(chan struct{})
		var editErr, resolveErr error
		var editSeq uint64
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			editSeq, editErr = rt.Edit(ctx, conv, 1, "pay less", u)
		}()
		go func() {
			defer wg.Done()
			<-start
			resolveErr = rt.Resolve(ctx, id, `true`, agent.Scope{UserID: "v"})
		}()
		close(start)
		wg.Wait()

		row, err := rt.Store().ToolCall(ctx, id)
		require.NoError(t, err)
		switch {
		case resolveErr != nil:
			seen["edit won"]++
			require.NoError(t, editErr)
			require.ErrorIs(t, resolveErr, journal.ErrStale, "the edit landed first: the answer is stale")
			require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_ERRORED, row.GetStatus())
			require.Equal(t, agent.CodeCanceled, row.GetResult().GetError().GetCode())
		case editErr != nil:
			seen["answer won, edit refused"]++
			require.ErrorIs(t, editErr, journal.ErrStale, "the answer closed the call first: the edit is stale")
			require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED, row.GetStatus())
		default:
			seen["answer, then edit"]++
			require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED, row.GetStatus(), "the answer landed first: the call is resolved with it")
		}
		if row.GetStatus() == messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED {
			require.Equal(t, "true", row.GetResult().GetContent())
		}
		// Once the turn that follows ends, the log holds one result for
		// the call, and the model's view starts from the edit if it landed.
		require.Eventually(t, func() bool {
			evs, err := rt.History(ctx, conv, 0, 0)
			return err == nil && len(evs) > 3 && evs[len(evs)-1].GetAssistantMsg() != nil
		}, 20*time.Second, time.Millisecond, "the turn after the race is answered (edit: %v, answer: %v; outcomes so far %v)", editErr, resolveErr, seen)
		evs, err := rt.History(ctx, conv, 0, 0)
		require.NoError(t, err)
		results, rewinds := 0, 0
		for _, ev := range evs {
			if ev.GetToolResult().GetToolCallId() == id {
				results++
			}
			if ev.GetRewind() != nil {
				rewinds++
			}
		}
		if resolveErr == nil {
			require.Equal(t, 1, results, "the answer's result is in the log once (the edit may have rewound it since)")
		} else {
			require.Zero(t, results, "a call the edit cancelled has no result event: the rewind's write closed its row")
		}
		eff, err := rt.HistoryView(ctx, conv, lazarus.HistoryOptions{Effective: true})
		require.NoError(t, err)
		if editErr == nil {
			require.Equal(t, 1, rewinds)
			require.Equal(t, editSeq, eff[0].Event.GetSeq(), "the model's view starts from the edited message")
			require.Equal(t, "pay less", eff[0].Event.GetUserMsg().GetContent()[0].GetText())
		} else {
			require.Zero(t, rewinds, "a refused edit wrote nothing")
			require.Equal(t, "pay", eff[0].Event.GetUserMsg().GetContent()[0].GetText())
		}
		pending, _, err := rt.PendingCalls(ctx, "", 0)
		require.NoError(t, err)
		require.Empty(t, pending, "no call left open")
	}
	t.Logf("outcomes over %d rounds: %v", rounds, seen)
}

// maxPlainRewindReason returns the longest reason whose rewind event, bare
// (no time, request id or cancelled_turn), fits journal.MaxEventBytes: a
// reason that passes a check of the bare event, and that the event the
// conversation writes is too large for.
func maxPlainRewindReason(toSeq uint64) int {
	lo, hi := 0, journal.MaxEventBytes
	for lo < hi {
		m := (lo + hi + 1) / 2
		ev := &messages.Event{Body: &messages.Event_Rewind{Rewind: &messages.Rewind{ToSeq: toSeq, Reason: strings.Repeat("r", m)}}}
		if journal.ValidateEvent(ev) == nil {
			lo = m
		} else {
			hi = m - 1
		}
	}
	return lo
}

// TestRefusedRewindLeavesTheTurnRunning: a rewind whose event does not fit
// journal.MaxEventBytes once the conversation adds its time and request id
// is refused (ErrInvalid, nothing written) before anything is written, and
// the conversation goes on as it was: the turn under way finishes,
// undisturbed (no Restart, a model call under way is not cancelled and
// made again). Before the fix the Store refused the write, the activation
// stopped, and the running tool's result and the turn's answer were lost;
// without the check on arrival the model call under way was cancelled
// (a Restart published) before the rewind was refused. An edit whose
// message does not fit once its author is added is refused the same way.
func TestRefusedRewindLeavesTheTurnRunning(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	model := scripted.New(scripted.Options{})
	model.Push("c", scripted.Text("hello"), scripted.Reply("working", scripted.Call("slow", `{}`)), scripted.Text("after"), scripted.Text("again"))
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	rt, err := lazarus.Open(lazarus.Options{Model: model,
		Tools: []agent.Tool{{Name: "slow", Executor: messages.Executor_EXECUTOR_SERVER, Run: func(ctx context.Context, inv agent.Invocation) (string, error) {
			started <- struct{}{}
			select {
			case <-release:
				return `"done"`, nil
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}}}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = rt.Close() })
	u := agent.Scope{UserID: "u"}
	_, err = rt.SendAndWait(ctx, "c", "hi", u) // 1, 2
	require.NoError(t, err)
	updates, err := rt.Subscribe(ctx, "c", 2)
	require.NoError(t, err)
	_, err = rt.Send(ctx, "c", "do", u) // 3, 4 (answer), 5 (call)
	require.NoError(t, err)
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("the tool did not start")
	}

	reason := strings.Repeat("r", maxPlainRewindReason(2))
	for _, rewind := range []func() error{
		func() error { return rt.Rewind(ctx, "c", 2, lazarus.RewindOptions{Reason: reason}, u) },
		func() error {
			_, err := rt.RewindWithReport(ctx, "c", 2, lazarus.RewindOptions{Reason: reason}, u)
			return err
		},
	} {
		require.ErrorIs(t, rewind(), journal.ErrInvalid, "the rewind event does not fit")
	}
	// An edit's message, checked with a request id, gains its author and
	// time as written.
	text := strings.Repeat("e", lazarus.MaxPlainEditText())
	_, err = rt.Edit(ctx, "c", 3, text, u)
	require.ErrorIs(t, err, journal.ErrInvalid, "the edited message does not fit")
	evs, err := rt.History(ctx, "c", 0, 0)
	require.NoError(t, err)
	require.Len(t, evs, 5, "the refused rewinds wrote nothing")

	close(release)
	// The turn went on from the tool's result.
	waitFor(ctx, t, updates, "after")
	evs, err = rt.History(ctx, "c", 0, 0)
	require.NoError(t, err)
	require.Len(t, evs, 7)
	require.NotNil(t, evs[5].GetToolResult(), "the tool's result was written")

	// While the model answers, a rewind or an edit that does not fit is
	// refused without cancelling the model's call (no Restart, the call
	// is not made again) and the answer is written.
	entered := model.Hold("c")
	_, err = rt.Send(ctx, "c", "more", u) // 8
	require.NoError(t, err)
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("the model was not called")
	}
	calls := model.Calls("c")
	reason = strings.Repeat("r", maxPlainRewindReason(7))
	require.ErrorIs(t, rt.Rewind(ctx, "c", 7, lazarus.RewindOptions{Reason: reason}, u), journal.ErrInvalid, "the rewind event does not fit")
	_, err = rt.Edit(ctx, "c", 8, text, u)
	require.ErrorIs(t, err, journal.ErrInvalid, "the edited message does not fit")
	model.Release("c")
	waitFor(ctx, t, updates, "again")
	require.Equal(t, calls, model.Calls("c"), "the model's call was not cancelled and made again")
	evs, err = rt.History(ctx, "c", 0, 0)
	require.NoError(t, err)
	require.Len(t, evs, 9, "the refused rewinds wrote nothing")
}
