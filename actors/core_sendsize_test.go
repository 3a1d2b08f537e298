package actors

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/snapshot"
)

// bigSend is a send of request id rid whose text is the longest for which
// its event, as the core writes it at time at with the given seq, fits
// journal.MaxEventBytes.
func bigSend(rid string, at time.Time, seq uint64) *inCommand {
	text := func(n int) *messages.UserMessage {
		return &messages.UserMessage{Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: strings.Repeat("x", n)}}}}
	}
	lo, hi := 0, journal.MaxEventBytes
	for lo < hi {
		m := (lo + hi + 1) / 2
		ev := &messages.Event{Seq: seq, Time: journal.Timestamp(at), RequestId: rid, Author: &messages.Identity{UserId: "ann"},
			Body: &messages.Event_UserMsg{UserMsg: text(m)}}
		if journal.ValidateEvent(ev) == nil {
			lo = m
		} else {
			hi = m - 1
		}
	}
	return &inCommand{sender: "caller " + rid, cmd: &Command{Scope: agent.Scope{UserID: "ann"},
		Msg: &messages.AgentSend{RequestId: rid, Message: text(lo)}}}
}

// TestCoreRefusesASendThatDoesNotFitAsWritten: the core checks a message's
// event as it writes it, with its time and seq (the Store counts both),
// and refuses one that does not fit (an error, not to retry) instead of
// writing it; the other sends of the append are written and the turn
// goes on. Every write it makes is one the Store accepts. Without the
// check, the Store refused the write and the activation stopped.
func TestCoreRefusesASendThatDoesNotFitAsWritten(t *testing.T) {
	// t1's nanoseconds make the event's time longer than t0's.
	t1 := t0.Add(time.Second - time.Nanosecond)
	for _, tc := range []struct {
		name  string
		steps []coreStep
		at    []time.Time
	}{{
		name: "a send that fits when it arrives, and not once its time is that of its write",
		steps: []coreStep{
			{send("r2"), []string{"write[" + wUser + "]"}},
			{bigSend("big", t0, 2), nil},
			{send("r3"), nil},
			{ok(1), []string{"reply seq=1", "reply error retry=false", "write[" + wUser + "]"}},
			{ok(2), []string{"reply seq=2", "model"}},
		},
		at: []time.Time{t0, t0, t0, t1, t1},
	}, {
		name: "a send that fits without its seq, and not with it",
		steps: []coreStep{
			{bigSend("big", t0, 0), []string{"reply error retry=false"}},
			{send("r2"), []string{"write[" + wUser + "]"}},
			{ok(1), []string{"reply seq=1", "model"}},
		},
		at: []time.Time{t0, t0, t0},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCore(coreConfig{ID: "c", Policy: snapshot.Policy{}.WithDefaults(), Retry: RetryPolicy{}.WithDefaults(),
				NewID: func(time.Time) string { return "call_x" }}, slog.New(slog.DiscardHandler))
			ws, err := snapshot.Rebuild(nil, nil) // a new conversation
			require.NoError(t, err)
			c.step(t0, &inLoaded{ws: ws, rows: map[string]*messages.ToolCallRecord{}, scope: agent.SystemScope})
			for i, st := range tc.steps {
				effs := c.step(tc.at[i], st.in)
				for _, e := range effs {
					if w, ok := e.(effWrite); ok {
						for _, ev := range w.req.GetEvents() {
							require.NoError(t, journal.ValidateEvent(ev), "step %d writes an event the Store refuses", i)
						}
					}
				}
				require.Equal(t, st.want, words(effs), "step %d (%T)", i, st.in)
			}
		})
	}
}
