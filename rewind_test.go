package lazarus_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
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

	require.ErrorIs(t, rt.Rewind(ctx, "c", 4, lazarus.RewindOptions{}, u), journal.ErrInvalid, "the call is open at seq 5")
	require.NoError(t, rt.Rewind(ctx, "c", 2, lazarus.RewindOptions{}, u))

	err = rt.Resolve(ctx, id, `true`, agent.Scope{UserID: "v"})
	require.ErrorIs(t, err, journal.ErrStale, "a late answer to a rewound call is stale")
	row, err := rt.Store().ToolCall(ctx, id)
	require.NoError(t, err)
	require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_ERRORED, row.GetStatus())
	require.Equal(t, agent.CodeCanceled, row.GetResult().GetError().GetCode())
	pending, _, err := rt.PendingCalls(ctx, "", 0)
	require.NoError(t, err)
	require.Empty(t, pending)

	end, err = rt.SendAndWait(ctx, "c", "again", u)
	require.NoError(t, err)
	require.Equal(t, "after", end.Text)
	turns := model.Turns("c")
	require.Equal(t, []string{"u:hi", "a:hello", "u:again"}, texts(turns[len(turns)-1].Context))
}
