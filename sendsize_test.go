package lazarus_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// TestRefusedSendLeavesTheTurnRunning: a message whose event does not fit
// journal.MaxEventBytes once the conversation adds its time, author and
// seq passes SendMessage's check of the bare event; the conversation
// refuses it (ErrInvalid, nothing written, its request id not taken) and
// goes on as it was: the turn under way finishes, undisturbed (no Restart,
// a model call under way is not made again).
// Before the fix the Store refused the write, the activation stopped, the
// subscriber got the write error and the turn never finished.
func TestRefusedSendLeavesTheTurnRunning(t *testing.T) {
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

	text := strings.Repeat("s", lazarus.MaxPlainEditText())
	_, err = rt.Send(ctx, "c", text, u)
	require.ErrorIs(t, err, journal.ErrInvalid, "the message does not fit as written")
	rid := strings.Repeat("0", 32)
	msg := &messages.UserMessage{Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: text}}}}
	_, err = rt.SendMessage(ctx, "c", msg, lazarus.SendOptions{RequestID: rid}, u)
	require.ErrorIs(t, err, journal.ErrInvalid, "the message does not fit as written")
	evs, err := rt.History(ctx, "c", 0, 0)
	require.NoError(t, err)
	require.Len(t, evs, 5, "the refused sends wrote nothing")

	close(release)
	waitFor(ctx, t, updates, "after")
	evs, err = rt.History(ctx, "c", 0, 0)
	require.NoError(t, err)
	require.Len(t, evs, 7)
	require.NotNil(t, evs[5].GetToolResult(), "the tool's result was written")

	// The refused request id was not taken: a message that fits is
	// written under it. While the model answers it, a message that does
	// not fit is refused without cancelling the model's call.
	entered := model.Hold("c")
	seq, err := rt.SendMessage(ctx, "c", agent.UserMessage(agent.TextPart("short")), lazarus.SendOptions{RequestID: rid}, u)
	require.NoError(t, err)
	require.Equal(t, uint64(8), seq)
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("the model was not called")
	}
	calls := model.Calls("c")
	_, err = rt.Send(ctx, "c", text, u)
	require.ErrorIs(t, err, journal.ErrInvalid, "the message does not fit as written")
	model.Release("c")
	waitFor(ctx, t, updates, "again")
	require.Equal(t, calls, model.Calls("c"), "the model's call was not cancelled and made again")
}

// waitFor reads updates until the assistant's answer text, failing on an
// error or a Restart: the conversation goes on undisturbed.
func waitFor(ctx context.Context, t *testing.T, updates <-chan lazarus.Update, text string) {
	t.Helper()
	for {
		select {
		case up, ok := <-updates:
			require.True(t, ok, "the subscription ended")
			require.NoError(t, up.Err, "the refused send disturbed the conversation")
			require.False(t, up.Restart, "the refused send restarted the turn")
			if m := up.Event.GetAssistantMsg(); m != nil && len(m.GetContent()) > 0 && m.GetContent()[0].GetText() == text {
				return
			}
		case <-ctx.Done():
			t.Fatalf("the turn did not end with %q after the refused send", text)
		}
	}
}
