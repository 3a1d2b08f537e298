package actors

import (
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/snapshot"
)

// An activation touches the idle timer at most once a step, before the
// step's other effects (idleFirst), so the caller answered finds the
// timer the step left already armed. A wake that came after the revival
// was answered before its touch, so under a manual clock the timer the
// revival armed could be seen due at the idle time and the clock advanced
// past it before the wake's touch replaced it with one armed from the new
// time: the activation never passivated. A wake that came before the
// revival was answered between two touches of one step.
func TestAStepTouchesTheIdleTimerOnceFirst(t *testing.T) {
	performed := func(t *testing.T, what string, effs []effect) []effect {
		t.Helper()
		effs = idleFirst(effs)
		var at []int
		for i, e := range effs {
			if _, ok := e.(effTouchIdle); ok {
				at = append(at, i)
			}
		}
		require.Equal(t, []int{0}, at, "%s: the idle touches among %d effects", what, len(effs))
		return effs
	}
	revived := func(t *testing.T) (*core, *inLoaded) {
		c := newCore(coreConfig{ID: "c", Policy: snapshot.Policy{}.WithDefaults(), Retry: RetryPolicy{}.WithDefaults()},
			slog.New(slog.DiscardHandler))
		ws, err := snapshot.Rebuild(nil, nil)
		require.NoError(t, err)
		return c, &inLoaded{ws: ws, rows: map[string]*messages.ToolCallRecord{}, scope: agent.SystemScope}
	}
	t.Run("wake after the revival", func(t *testing.T) {
		c, loaded := revived(t)
		performed(t, "the revival", c.step(t0, loaded))
		effs := performed(t, "the wake", c.step(t0, wake(true)))
		require.IsType(t, effReply{}, effs[len(effs)-1], "the wake is answered")
		require.True(t, c.quiescent())
	})
	t.Run("wake before the revival", func(t *testing.T) {
		c, loaded := revived(t)
		require.Empty(t, c.step(t0, wake(true)), "buffered until the revival")
		effs := performed(t, "the revival that takes the wake", c.step(t0, loaded))
		require.IsType(t, effReply{}, effs[len(effs)-1], "the wake is answered")
	})
	t.Run("no touch", func(t *testing.T) {
		effs := []effect{effReply{to: "a"}, effHalt{}}
		require.Equal(t, []effect{effReply{to: "a"}, effHalt{}}, idleFirst(effs))
	})
}
