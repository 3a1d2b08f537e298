package tests

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/snapshot"
)

// sendTo sends text to the named agent ("" the default one), privately.
func sendTo(t *testing.T, h *harness, name, text string) {
	t.Helper()
	msg := &messages.UserMessage{Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: text}}}}
	_, err := h.rt.SendMessage(ctxT(t), "c", msg, lazarus.SendOptions{Agent: name}, user)
	require.NoError(t, err)
}

// requireOwnView checks that a turn of agent name starts from that agent's
// summary in the stored record sum (its entry, or the record without the
// entries for the default agent) and sees exactly the later events of the
// log that are its own.
func requireOwnView(t *testing.T, name string, turn agent.Turn, sum *messages.Summary, log []*messages.Event) {
	t.Helper()
	require.Equal(t, name, turn.Agent)
	var want *messages.Summary
	if name == "" {
		want = proto.Clone(sum).(*messages.Summary)
		want.Agents = nil
	} else {
		for _, a := range sum.GetAgents() {
			if a.GetAgent() == name {
				want = a
			}
		}
		require.NotNil(t, want, "the record has agent %q's summary", name)
	}
	require.True(t, proto.Equal(want, turn.Summary), "agent %q starts from its own summary\nwant %v\ngot  %v", name, want, turn.Summary)
	require.NotEmpty(t, turn.Context)
	last := turn.Context[len(turn.Context)-1].GetSeq()
	var ctx []*messages.Event
	for _, ev := range log {
		if ev.GetSeq() > sum.GetToSeq() && ev.GetSeq() <= last && ev.GetAgent() == name {
			ctx = append(ctx, ev)
		}
	}
	require.Len(t, turn.Context, len(ctx), "agent %q sees its own events after the summary", name)
	for i := range ctx {
		require.True(t, proto.Equal(ctx[i], turn.Context[i]), "agent %q's context[%d]", name, i)
	}
}

// TestPerAgentSummariesAndRevival: a conversation with the default agent
// and a critic, each addressed privately, grows past the summary policy:
// every summary record holds the critic's own summary besides the default
// agent's, each folding only its agent's events; each agent's model starts
// from its own summary; a kill during the critic's turn revives it with
// the same summary and context, on every store.
func TestPerAgentSummariesAndRevival(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		crit := scripted.New(scripted.Options{})
		store := &countingStore{Store: openStore(t, kind)}
		h := newHarness(t, store, func(o *lazarus.Options) {
			withCritic(crit)(o)
			o.Summarizer = snapshot.Deterministic{}
			o.Summary = snapshot.Policy{MaxEvents: 6, KeepRecent: 2}
		})
		ctx := ctxT(t)
		round := func(i int) {
			h.model.Push("c", scripted.Text(fmt.Sprintf("default answer %d", i)))
			sendTo(t, h, "", fmt.Sprintf("to default %d", i))
			h.awaitEvent("c", 0, isAssistantText(fmt.Sprintf("default answer %d", i)))
			crit.Push("c", scripted.Text(fmt.Sprintf("critic answer %d", i)))
			sendTo(t, h, "critic", fmt.Sprintf("to critic %d", i))
			h.awaitEvent("c", 0, isAssistantText(fmt.Sprintf("critic answer %d", i)))
		}
		for i := range 6 {
			round(i)
		}
		var sum *messages.Summary
		require.Eventually(t, func() bool {
			s, err := store.LatestSummary(ctx, "c")
			sum = s
			return err == nil && s.GetToSeq() >= 12 && len(s.GetAgents()) == 1
		}, wait, time.Millisecond, "summaries with the critic's entry were written")
		// Summaries are made in the background, so on a slow machine every
		// turn so far may have started before the first one landed: a few
		// more rounds (at most 10) until each agent's model has started a
		// turn from a summary.
		fromSummary := func(m *scripted.Model) bool {
			return slices.ContainsFunc(m.Turns("c"), func(turn agent.Turn) bool { return turn.Summary != nil })
		}
		for i := 6; i < 16 && !(fromSummary(crit) && fromSummary(h.model)); i++ {
			round(i)
		}
		sum, err := store.LatestSummary(ctx, "c")
		require.NoError(t, err)
		require.Len(t, sum.GetAgents(), 1)
		critSum := sum.GetAgents()[0]
		require.Equal(t, "critic", critSum.GetAgent())
		require.Equal(t, sum.GetToSeq(), critSum.GetToSeq())
		require.Contains(t, critSum.GetContent(), "to critic 0")
		require.Contains(t, critSum.GetContent(), "critic answer 0")
		require.NotContains(t, critSum.GetContent(), "default", "the critic's summary folds none of the default agent's events")
		require.Contains(t, sum.GetContent(), "to default 0")
		require.NotContains(t, sum.GetContent(), "critic", "the default agent's summary folds none of the critic's events")

		// Both agents' models started from their own summaries.
		var critFromSummary, defFromSummary bool
		for _, turn := range crit.Turns("c") {
			if turn.Summary != nil {
				critFromSummary = true
				require.Equal(t, "critic", turn.Summary.GetAgent())
				require.NotContains(t, turn.Summary.GetContent(), "default")
			}
			for _, ev := range turn.Context {
				require.Equal(t, "critic", ev.GetAgent(), "the critic sees only its own events")
			}
		}
		for _, turn := range h.model.Turns("c") {
			if turn.Summary != nil {
				defFromSummary = true
				require.Empty(t, turn.Summary.GetAgents(), "the default agent never gets the critic's summary")
				require.NotContains(t, turn.Summary.GetContent(), "critic")
			}
			for _, ev := range turn.Context {
				require.Empty(t, ev.GetAgent(), "the default agent sees only its own events")
			}
		}
		require.True(t, critFromSummary, "a critic's turn started from its summary")
		require.True(t, defFromSummary, "a default agent's turn started from its summary")

		// Chapters are the conversation's, not one agent's: followed back
		// from the newest, they hold every event of the log, of both
		// agents, once, and each chapter's summary record carries the
		// critic's summary beside the default agent's.
		var paged []*messages.Event
		agents := map[string]bool{}
		for before := uint64(0); ; {
			ch, err := h.rt.Chapters(ctx, "c", before)
			require.NoError(t, err)
			paged = append(ch.Events, paged...)
			for _, ev := range ch.Events {
				agents[ev.GetAgent()] = true
			}
			if ch.Summary != nil {
				require.Len(t, ch.Summary.GetAgents(), 1, "chapter before %d", before)
				require.Equal(t, "critic", ch.Summary.GetAgents()[0].GetAgent())
			}
			if ch.Prev == 0 {
				break
			}
			before = ch.Prev
		}
		log := h.history("c")
		require.Len(t, paged, len(log))
		for i := range log {
			require.True(t, proto.Equal(log[i], paged[i]), "event %d", i)
		}
		require.Equal(t, map[string]bool{"": true, "critic": true}, agents)

		// A kill during the critic's turn: the revival gives it the same
		// summary and context (or, if a summary landed during the held
		// call, exactly its newer summary and the later events it sees).
		crit.Push("c", scripted.Text("critic final"))
		entered := crit.Hold("c")
		sendTo(t, h, "critic", "one more")
		recv(t, entered, "model call entered")
		before := crit.Turns("c")[crit.Calls("c")-1]
		require.True(t, h.rt.Kill("c"))
		store.reset()
		crit.Release("c")
		require.NoError(t, h.rt.Wake(ctx, "c"))
		h.awaitEvent("c", 0, isAssistantText("critic final"))
		after := crit.Turns("c")[crit.Calls("c")-1]
		store.mu.Lock()
		loaded := store.summary
		store.mu.Unlock()
		require.NotNil(t, loaded)
		requireOwnView(t, "critic", after, loaded, h.history("c"))
		if proto.Equal(before.Summary, after.Summary) {
			require.Len(t, after.Context, len(before.Context))
			for i := range before.Context {
				require.True(t, proto.Equal(before.Context[i], after.Context[i]), "context event %d", i)
			}
		}
		require.Contains(t, strings.Join(textsOf(after.Context), "|"), "one more")

		// The same for the default agent.
		h.model.Push("c", scripted.Text("default final"))
		entered = h.model.Hold("c")
		sendTo(t, h, "", "and you")
		recv(t, entered, "model call entered")
		before = h.model.Turns("c")[h.model.Calls("c")-1]
		require.True(t, h.rt.Kill("c"))
		store.reset()
		h.model.Release("c")
		require.NoError(t, h.rt.Wake(ctx, "c"))
		h.awaitEvent("c", 0, isAssistantText("default final"))
		after = h.model.Turns("c")[h.model.Calls("c")-1]
		store.mu.Lock()
		loaded = store.summary
		store.mu.Unlock()
		require.NotNil(t, loaded)
		requireOwnView(t, "", after, loaded, h.history("c"))
		if proto.Equal(before.Summary, after.Summary) {
			require.Len(t, after.Context, len(before.Context))
		}
		requireGapFree(t, h.history("c"))
	})
}

// textsOf returns the texts of the user messages of evs.
func textsOf(evs []*messages.Event) []string {
	var out []string
	for _, ev := range evs {
		for _, p := range ev.GetUserMsg().GetContent() {
			out = append(out, p.GetText())
		}
	}
	return out
}
