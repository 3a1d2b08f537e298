package actors

import (
	"fmt"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/snapshot"
)

// A caller whose write is in flight when its activation stops (passivated,
// killed) is answered with an error that wraps journal.ErrUnknownOutcome
// (the write may still land) and ErrAgentStopped, with retry set: the
// supervisor sends it again to a new activation, which reads from the log
// whether it landed. A caller whose command was queued behind it is
// answered ErrAgentStopped alone (nothing of it was handed over). The
// first said "write outcome unknown" in words only, wrapping no sentinel.
func TestStopAnswersAWriteInFlightAsUnknownOutcome(t *testing.T) {
	for _, stop := range []*inStop{
		{cause: fmt.Errorf("conversation %q: %w", "c", ErrAgentStopped)},
		{cause: fmt.Errorf("conversation %q killed: %w", "c", ErrAgentStopped), retire: true},
	} {
		t.Run(fmt.Sprintf("retire=%v", stop.retire), func(t *testing.T) {
			c := newCore(coreConfig{ID: "c", Policy: snapshot.Policy{}.WithDefaults(), Retry: RetryPolicy{}.WithDefaults()},
				slog.New(slog.DiscardHandler))
			ws, err := snapshot.Rebuild(nil, nil)
			require.NoError(t, err)
			c.step(t0, &inLoaded{ws: ws, rows: map[string]*messages.ToolCallRecord{}, scope: agent.SystemScope})
			require.Equal(t, []string{"write[" + wUser + "]"}, words(c.step(t0, send("r1"))))
			require.Empty(t, words(c.step(t0, send("r2"))), "queued behind the write in flight")
			replies := map[string]*messages.AgentSendReply{}
			for _, e := range c.step(t0, stop) {
				if r, ok := e.(effReply); ok {
					replies[r.to.(string)] = r.msg.(*messages.AgentSendReply)
				}
			}
			require.Len(t, replies, 2)
			inFlight, queued := replies["caller r1"], replies["caller r2"]
			for name, r := range map[string]*messages.AgentSendReply{"in flight": inFlight, "queued": queued} {
				require.True(t, r.GetRetry(), "%s: sent again to a new activation", name)
				require.NotNil(t, r.GetError(), name)
			}
			err = journal.ErrorFromProto(inFlight.GetError())
			require.ErrorIs(t, err, journal.ErrUnknownOutcome, "the write in flight: %v", err)
			require.ErrorContains(t, err, "write outcome unknown")
			require.ErrorContains(t, err, ErrAgentStopped.Error())
			err = journal.ErrorFromProto(queued.GetError())
			require.NotErrorIs(t, err, journal.ErrUnknownOutcome, "the queued command was not handed over: %v", err)
		})
	}
}
