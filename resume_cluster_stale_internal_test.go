package lazarus

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

// TestPeriodicResumeRevivesAStaleLiveActivationInACluster: in a cluster,
// a live activation idle since before another writer (a member that still
// believed it owned the conversation) appended a user message is stale,
// with the turn owed unrun, and no membership change here runs a scan
// that would find it. The periodic scan asks live activations too, in a
// cluster: it retires the stale one and the turn runs on a new activation.
// It skipped every live one, and with passivation off the turn waited for
// the conversation's next command.
func TestPeriodicResumeRevivesAStaleLiveActivationInACluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	model := agent.ModelFunc(func(_ context.Context, turn agent.Turn, _ func(string)) (*messages.AssistantMessage, error) {
		last := turn.Context[len(turn.Context)-1]
		return agent.Text("re: " + last.GetUserMsg().GetContent()[0].GetText()), nil
	})
	store := memjournal.New(memjournal.Options{})
	rt := OpenAutoManagedMembers(t, 1, func(_, am int, seeds []string) (*Runtime, error) {
		sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
			return slog.New(slog.DiscardHandler)
		}))
		return Open(Options{Store: store, Model: model, ActorSystem: sys, IdleTimeout: -1, ResumeInterval: 20 * time.Millisecond,
			Logger:  slog.New(slog.DiscardHandler),
			Cluster: &ClusterOptions{AutoManagedPort: am, Seeds: seeds}})
	})[0]
	t.Cleanup(func() { _ = rt.Close() })
	// The first membership ran its scan: no later one runs here.
	require.Eventually(t, func() bool {
		rt.cl.mu.Lock()
		defer rt.cl.mu.Unlock()
		return rt.cl.topoGen > 0 && !rt.cl.resuming
	}, 30*time.Second, 5*time.Millisecond, "the membership formed")
	_, err := rt.SendAndWait(ctx, "c", "one", agent.Scope{UserID: "u"})
	require.NoError(t, err)
	require.True(t, rt.IsActive("c"), "live and idle")

	// Another writer moves the log on behind the activation's back.
	last, err := store.LastSeq(ctx, "c")
	require.NoError(t, err)
	_, err = store.Append(ctx, &messages.AppendRequest{
		ConversationId: "c", ExpectedLast: last,
		Status: messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE,
		Events: []*messages.Event{{RequestId: "elsewhere", Body: &messages.Event_UserMsg{UserMsg: &messages.UserMessage{
			Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: "two"}}}}}}},
	})
	require.NoError(t, err)

	require.Eventually(t, func() bool {
		evs, err := store.Events(ctx, "c", journal.EventQuery{Limit: 1})
		if err != nil || len(evs) != 1 || len(evs[0].GetAssistantMsg().GetContent()) == 0 {
			return false
		}
		return evs[0].GetAssistantMsg().GetContent()[0].GetText() == "re: two"
	}, 10*time.Second, 5*time.Millisecond, "the owed turn ran")
	evs, err := rt.History(ctx, "c", 0, 0)
	require.NoError(t, err)
	require.Len(t, evs, 4, "user, answer, user, answer: nothing twice")
}
