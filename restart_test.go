package lazarus_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/messages"
)

// stallingModel streams "partial" on its first call, then waits for its
// context to end; later calls stream "fresh" and answer.
type stallingModel struct{ streamed chan struct{} }

func (m *stallingModel) Generate(ctx context.Context, turn agent.Turn, onDelta func(string)) (*messages.AssistantMessage, error) {
	select {
	case <-m.streamed:
		onDelta("fresh")
		return agent.Text("fresh"), nil
	default:
	}
	onDelta("partial")
	close(m.streamed)
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestAbandonedStreamsAreMarked: when a model call that streamed deltas is
// abandoned, by a newer message or by a kill, subscribers get an update
// with Restart set before the deltas of the call that replaces it, and the
// log holds one answer, the new call's.
func TestAbandonedStreamsAreMarked(t *testing.T) {
	for _, how := range []string{"newer message", "kill"} {
		t.Run(how, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			model := &stallingModel{streamed: make(chan struct{})}
			rt, err := lazarus.Open(lazarus.Options{Model: model, IdleTimeout: -1})
			require.NoError(t, err)
			defer func() { require.NoError(t, rt.Close()) }()
			updates, err := rt.Subscribe(ctx, "c", 0)
			require.NoError(t, err)
			_, err = rt.Send(ctx, "c", "one", user)
			require.NoError(t, err)
			next := func() lazarus.Update {
				t.Helper()
				select {
				case u := <-updates:
					return u
				case <-ctx.Done():
					t.Fatal("no update")
					return lazarus.Update{}
				}
			}
			for u := next(); u.Delta != "partial"; u = next() {
			}
			if how == "kill" {
				require.True(t, rt.Kill("c"))
				require.NoError(t, rt.Wake(ctx, "c"))
			} else {
				_, err = rt.Send(ctx, "c", "two", user)
				require.NoError(t, err)
			}
			var restarted bool
			for {
				u := next()
				if u.Restart {
					restarted = true
					if how == "kill" {
						require.Equal(t, lazarus.TurnCancelled, u.TurnEnd.Outcome, "the kill's cancelled end carries it")
					}
				}
				if u.Delta != "" {
					require.True(t, restarted, "the restart comes before the new call's deltas")
					require.Equal(t, "fresh", u.Delta)
				}
				if u.Event.GetAssistantMsg() != nil {
					require.True(t, restarted)
					break
				}
			}
			evs, err := rt.History(ctx, "c", 0, 0)
			require.NoError(t, err)
			var answers []string
			for _, ev := range evs {
				if a := ev.GetAssistantMsg(); a != nil {
					answers = append(answers, a.GetContent()[0].GetText())
				}
			}
			require.Equal(t, []string{"fresh"}, answers, "one answer, the new call's")
		})
	}
}
