package snapshot_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/snapshot"
)

// Policy.Due of a nil working set (nothing to summarize) is false, for
// every policy, never a panic.
func TestBBDueOfANilWorkingSet(t *testing.T) {
	for _, p := range []snapshot.Policy{{}, {MaxEvents: 1, MaxTokens: 1, KeepRecent: -1}, snapshot.TokenBudget(1)} {
		assert.False(t, p.Due(nil), "%+v", p)
	}
}

// Plan.Run returns a summary covering exactly p.FromSeq..p.ToSeq, so a
// plan whose span no summary may cover (FromSeq 0, FromSeq after ToSeq)
// or whose events go past ToSeq is refused with an error wrapping
// journal.ErrInvalid, and the summarizer is not called: it would return a
// summary that Rebuild refuses as corrupt.
func TestBBPlanRunRefusesABadSpan(t *testing.T) {
	ctx := context.Background()
	evs := []*messages.Event{bbUser(1, "a"), bbUser(2, "b")}
	for name, p := range map[string]snapshot.Plan{
		"zero":                 {},
		"from 0":               {FromSeq: 0, ToSeq: 2, Events: evs},
		"from after to":        {FromSeq: 3, ToSeq: 2, Events: evs},
		"events past to":       {FromSeq: 1, ToSeq: 1, Events: evs},
		"empty, from after to": {FromSeq: 2, ToSeq: 1},
		"prev past to":         {Prev: &messages.Summary{FromSeq: 1, ToSeq: 5}, FromSeq: 1, ToSeq: 2},
		"bad agent plan": {FromSeq: 1, ToSeq: 2, Events: evs,
			Agents: []snapshot.Plan{{Agent: "a", FromSeq: 1, ToSeq: 1, Events: evs}}},
	} {
		calls := 0
		s := summarizerFunc(func(ctx context.Context, conv string, prev *messages.Summary, evs []*messages.Event) (*messages.Summary, error) {
			calls++
			return snapshot.Deterministic{}.Summarize(ctx, conv, prev, evs)
		})
		sum, err := p.Run(ctx, s, "c")
		require.ErrorIs(t, err, journal.ErrInvalid, name)
		assert.Nil(t, sum, name)
		assert.Zero(t, calls, "%s: the summarizer is not called", name)
	}
	// The plans a working set makes still run.
	w, err := snapshot.Rebuild(nil, evs)
	require.NoError(t, err)
	p, ok := w.Plan(0)
	require.True(t, ok)
	sum, err := p.Run(ctx, snapshot.Deterministic{}, "c")
	require.NoError(t, err)
	_, err = snapshot.Rebuild(sum, nil)
	require.NoError(t, err, "the summary Run returns is one Rebuild takes")
}

type summarizerFunc func(ctx context.Context, conv string, prev *messages.Summary, evs []*messages.Event) (*messages.Summary, error)

func (f summarizerFunc) Summarize(ctx context.Context, conv string, prev *messages.Summary, evs []*messages.Event) (*messages.Summary, error) {
	return f(ctx, conv, prev, evs)
}

// Deterministic and LLM are safe for concurrent use (run under -race),
// give the same summary for the same inputs, and modify neither prev nor
// the events.
func TestBBSummarizersConcurrentAndReadOnly(t *testing.T) {
	ctx := context.Background()
	prev := &messages.Summary{FromSeq: 1, ToSeq: 2, Content: "earlier", Version: snapshot.DeterministicVersion}
	evs := []*messages.Event{bbUser(3, "a"), {Seq: 4, Body: &messages.Event_AssistantMsg{AssistantMsg: agent.Text("b")}}}
	prevCopy := proto.Clone(prev)
	evsCopy := make([]*messages.Event, len(evs))
	for i, ev := range evs {
		evsCopy[i] = proto.Clone(ev).(*messages.Event)
	}
	llm := snapshot.LLM{Model: modelFunc(func(context.Context, agent.Turn, func(string)) (*messages.AssistantMessage, error) {
		return agent.Text("folded"), nil
	})}
	for _, s := range []snapshot.Summarizer{snapshot.Deterministic{}, llm} {
		want, err := s.Summarize(ctx, "c", prev, evs)
		require.NoError(t, err)
		var wg sync.WaitGroup
		got := make([]*messages.Summary, 8)
		errs := make([]error, 8)
		for i := range got {
			wg.Go(func() { got[i], errs[i] = s.Summarize(ctx, "c", prev, evs) })
		}
		wg.Wait()
		for i := range got {
			require.NoError(t, errs[i])
			assert.True(t, proto.Equal(want, got[i]), "%T: the same inputs, the same summary", s)
		}
	}
	assert.True(t, proto.Equal(prevCopy, prev), "prev is unchanged")
	for i := range evs {
		assert.True(t, proto.Equal(evsCopy[i], evs[i]), "event %d is unchanged", i)
	}
}
