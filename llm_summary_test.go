package lazarus_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/actors/actorstest"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
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

// failingSummarizer counts its calls and fails each one.
type failingSummarizer struct{ calls *atomic.Int64 }

func (f failingSummarizer) Summarize(context.Context, string, *messages.Summary, []*messages.Event) (*messages.Summary, error) {
	f.calls.Add(1)
	return nil, errors.New("summarizer down")
}

// TestFailedSummaryIsTriedAgainByARevival: a summary that failed is not
// tried again by its activation until the log grows, but a revival, which
// knows nothing of the failure, tries it again for the same span
// (Options.Summarizer says so).
func TestFailedSummaryIsTriedAgainByARevival(t *testing.T) {
	var calls atomic.Int64
	rt, err := lazarus.Open(lazarus.Options{Model: scripted.New(scripted.Options{}), Summarizer: failingSummarizer{&calls},
		Summary: snapshot.Policy{MaxEvents: 2, KeepRecent: -1}})
	require.NoError(t, err)
	defer rt.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for range 2 {
		_, err := rt.SendAndWait(ctx, "c", "hi", agent.Scope{UserID: "u"})
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return calls.Load() >= 1 }, 10*time.Second, time.Millisecond)
	last, err := rt.Store().LastSeq(ctx, "c")
	require.NoError(t, err)
	n := calls.Load()
	require.True(t, rt.Kill("c"))
	require.NoError(t, rt.Wake(ctx, "c"))
	require.Eventually(t, func() bool { return calls.Load() > n }, 10*time.Second, time.Millisecond,
		"the revival tries the summary again")
	after, err := rt.Store().LastSeq(ctx, "c")
	require.NoError(t, err)
	require.Equal(t, last, after, "for the same span: the log did not grow")
	_, err = rt.Store().LatestSummary(ctx, "c")
	require.ErrorIs(t, err, journal.ErrNotFound)
}

// TestConversationPassivatesAfterAFailedSummary: a summary that fails
// leaves the activation with no work, so its idle timer runs and the
// conversation passivates (the failure armed no timer: the activation
// stayed live until its next command).
func TestConversationPassivatesAfterAFailedSummary(t *testing.T) {
	var calls atomic.Int64
	clock := actorstest.NewManualClock(time.Unix(1_700_000_000, 0))
	rt, err := lazarus.Open(lazarus.Options{Clock: clock, IdleTimeout: time.Minute,
		Model: scripted.New(scripted.Options{}), Summarizer: failingSummarizer{&calls},
		Summary: snapshot.Policy{MaxEvents: 2, KeepRecent: -1}})
	require.NoError(t, err)
	defer rt.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for range 2 {
		_, err := rt.SendAndWait(ctx, "c", "hi", agent.Scope{UserID: "u"})
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return calls.Load() >= 1 }, 10*time.Second, time.Millisecond)
	require.Eventually(t, func() bool {
		clock.Advance(time.Minute)
		return !rt.IsActive("c")
	}, 10*time.Second, time.Millisecond, "the idle conversation passivates")
}
