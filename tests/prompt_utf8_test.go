package tests

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/messages"
)

// TestHumanCallWithABadPromptIsStillAsked: a human tool whose Prompt
// returns text that is not valid UTF-8 (a prompt cut at a byte count,
// inside a character) or larger than an event can hold: the call is
// still made and suspends, with the prompt made valid UTF-8 and cut, as
// a Prompt that panics still gets the call asked with the default prompt.
func TestHumanCallWithABadPromptIsStillAsked(t *testing.T) {
	for name, prompt := range map[string]string{
		"cut inside a character": "Approve the refund of 5 " + "\u20ac"[:2],
		"larger than an event":   strings.Repeat("x", 2<<20),
	} {
		t.Run(name, func(t *testing.T) {
			ask := agent.Tool{
				Name: "ask", Description: "asks a person", Executor: messages.Executor_EXECUTOR_HUMAN, Timeout: time.Hour,
				Prompt: func(string) string { return prompt },
			}
			h := newHarness(t, openStore(t, "memory"), func(o *lazarus.Options) { o.Tools = append(o.Tools, ask) })
			ctx := ctxT(t)
			h.model.Push("c", scripted.Reply("asking", scripted.Call("ask", `{}`)))
			_, err := h.rt.Send(ctx, "c", "refund me", user)
			require.NoError(t, err)
			susp := h.awaitEvent("c", 0, func(ev *messages.Event) bool { return isSuspension(ev) || ev.GetTurnFailed() != nil })
			require.NotNil(t, susp.GetSuspension(), "the call is asked, not the turn failed: %v", susp)
		})
	}
}
