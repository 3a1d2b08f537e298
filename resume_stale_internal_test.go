package lazarus

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// TestResumeRevivesAStaleLiveActivation: a live activation, idle since
// before another writer (a member that owned the conversation meanwhile)
// appended a user message and left its turn owed, is not "live, needs
// nothing" to the resume scan: the scan's wake retires it, and the turn
// runs on a new activation revived from the log.
func TestResumeRevivesAStaleLiveActivation(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	model := agent.ModelFunc(func(_ context.Context, turn agent.Turn, _ func(string)) (*messages.AssistantMessage, error) {
		last := turn.Context[len(turn.Context)-1]
		return agent.Text("re: " + last.GetUserMsg().GetContent()[0].GetText()), nil
	})
	rt, err := Open(Options{Model: model, NoResume: true, IdleTimeout: -1})
	require.NoError(t, err)
	defer rt.Close()
	_, err = rt.SendAndWait(ctx, "c", "one", agent.Scope{UserID: "u"})
	require.NoError(t, err)
	require.True(t, rt.IsActive("c"), "live and idle")

	// Another writer moves the log on behind the activation's back.
	last, err := rt.Store().LastSeq(ctx, "c")
	require.NoError(t, err)
	_, err = rt.Store().Append(ctx, &messages.AppendRequest{
		ConversationId: "c", ExpectedLast: last,
		Status: messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE,
		Events: []*messages.Event{{RequestId: "elsewhere", Body: &messages.Event_UserMsg{UserMsg: &messages.UserMessage{
			Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: "two"}}}}}}},
	})
	require.NoError(t, err)

	rt.gcWG.Add(1)
	rt.resumeInterrupted(false)
	require.Eventually(t, func() bool {
		evs, err := rt.Store().Events(ctx, "c", journal.EventQuery{Limit: 1})
		if err != nil || len(evs) != 1 || len(evs[0].GetAssistantMsg().GetContent()) == 0 {
			return false
		}
		return evs[0].GetAssistantMsg().GetContent()[0].GetText() == "re: two"
	}, 20*time.Second, 5*time.Millisecond, "the owed turn ran")
	evs, err := rt.History(ctx, "c", 0, 0)
	require.NoError(t, err)
	require.Len(t, evs, 4, "user, answer, user, answer: nothing twice")
}
