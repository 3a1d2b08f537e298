package lazarus_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/snapshot"
)

// TestLLMSummaryUnderATokenBudget: with the LLM summarizer and a token
// budget, and no hand-written Summarizer, a conversation that passes the
// budget gets a summary written by the summarizing model, which records
// that model; a revival starts from it.
func TestLLMSummaryUnderATokenBudget(t *testing.T) {
	writer := scripted.New(scripted.Options{Default: func(string, agent.Turn) (*messages.AssistantMessage, error) {
		msg := scripted.Text("The user sent many long messages.")
		msg.Model = "summary-model"
		return msg, nil
	}})
	rt, err := lazarus.Open(lazarus.Options{
		Model:      scripted.New(scripted.Options{}),
		Summarizer: snapshot.LLM{Model: writer},
		Summary:    func() snapshot.Policy { p := snapshot.TokenBudget(200); p.KeepRecent = 2; return p }(),
	})
	require.NoError(t, err)
	defer rt.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := 0; i < 12; i++ {
		_, err := rt.Send(ctx, "c", strings.Repeat("word ", 40), agent.Scope{UserID: "u"})
		require.NoError(t, err)
	}
	var sum *messages.Summary
	require.Eventually(t, func() bool {
		sum, err = rt.Store().LatestSummary(ctx, "c")
		return err == nil && sum != nil
	}, 20*time.Second, 10*time.Millisecond)
	assert.Equal(t, "summary-model", snapshot.SummaryModel(sum))
	assert.Equal(t, "The user sent many long messages.", sum.GetContent())
	assert.Positive(t, writer.Calls("c"), "the summarizing model was asked")
}
