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

// longest returns the largest n for which fits(n) holds, fits being true
// from 0 up to it.
func longest(fits func(n int) bool) int {
	lo, hi := 0, journal.MaxEventBytes
	for lo < hi {
		m := (lo + hi + 1) / 2
		if fits(m) {
			lo = m
		} else {
			hi = m - 1
		}
	}
	return lo
}

// bigRewind is a rewind to seq to whose reason is the longest for which
// its bare event (no time, request id, cancelled_turn or seq) fits
// journal.MaxEventBytes: the core writes it too large.
func bigRewind(to uint64) *inCommand {
	n := longest(func(n int) bool {
		return journal.ValidateEvent(&messages.Event{Body: &messages.Event_Rewind{Rewind: &messages.Rewind{ToSeq: to, Reason: strings.Repeat("r", n)}}}) == nil
	})
	return &inCommand{sender: "rewinder", cmd: &Command{Scope: agent.Scope{UserID: "ann"},
		Msg: &messages.AgentRewind{ToSeq: to, RequestId: "rw", Reason: strings.Repeat("r", n)}}}
}

// bigEdit is an edit of seq whose message is the longest for which its
// event with its request id, but no author, time or seq, fits
// journal.MaxEventBytes: the core writes it too large.
func bigEdit(seq uint64) *inCommand {
	text := func(n int) *messages.UserMessage {
		return &messages.UserMessage{Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: strings.Repeat("e", n)}}}}
	}
	n := longest(func(n int) bool {
		return journal.ValidateEvent(&messages.Event{RequestId: "e1", Body: &messages.Event_UserMsg{UserMsg: text(n)}}) == nil
	})
	return &inCommand{sender: "editor", cmd: &Command{Scope: agent.Scope{UserID: "ann"},
		Msg: &messages.AgentRewind{EditSeq: seq, RequestId: "e1", Reason: "edit", Message: text(n)}}}
}

// TestCoreRefusesARewindThatDoesNotFitOnArrival: a rewind or an edit whose
// events do not fit journal.MaxEventBytes as the core would write them is
// refused when it arrives, before it touches the turn under way: a model
// call is not cancelled (no cancel-model, no publish of a Restart), an
// armed retry is not cancelled, a turn failure waiting to be written is
// not dropped, and the turn goes on (its answer is
// written, a retry runs). Without the check on arrival the core cancelled the model call
// and published a Restart, or cancelled the retry, and only then refused
// the rewind as it wrote it.
func TestCoreRefusesARewindThatDoesNotFitOnArrival(t *testing.T) {
	text := &messages.AssistantMessage{Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: "hi"}}}}
	for _, tc := range []struct {
		name  string
		log   []*messages.Event
		steps []coreStep
	}{{
		name: "while the model answers",
		log:  []*messages.Event{user("r1")},
		steps: []coreStep{
			{wake(false), []string{"reply", "model"}},
			{bigRewind(0), []string{"reply error retry=false"}},
			{bigEdit(1), []string{"reply error retry=false"}},
			{&inModelDone{turn: 1, msg: text}, []string{"write[" + wAnswer + "]"}},
		},
	}, {
		name: "while a retry of the model call is armed",
		log:  []*messages.Event{user("r1")},
		steps: []coreStep{
			{wake(false), []string{"reply", "model"}},
			{&inModelDone{turn: 1, err: agent.ErrRateLimited}, []string{"arm-retry", "publish"}},
			{bigRewind(0), []string{"reply error retry=false"}},
			{bigEdit(1), []string{"reply error retry=false"}},
			{&inRetryTick{gen: 1}, []string{"model"}},
		},
	}, {
		name: "while a turn failure waits for the write in flight",
		log:  []*messages.Event{user("r1")},
		steps: []coreStep{
			{wake(false), []string{"reply", "model"}},
			{&inCommand{sender: "configurer", cmd: &Command{Scope: agent.SystemScope, Msg: &messages.AgentConfigure{Settings: map[string]string{"k": "v"}}}},
				[]string{"write[]"}},
			{&inModelDone{turn: 1, err: agent.ErrRefused}, nil},
			{bigRewind(0), []string{"reply error retry=false"}},
			{bigEdit(1), []string{"reply error retry=false"}},
			{ok(1), []string{"reply", "write[TurnFailed]"}},
		},
	}, {
		name: "while a write is in flight and the model answers",
		log:  []*messages.Event{user("r1"), answer()},
		steps: []coreStep{
			{send("r2"), []string{"write[" + wUser + "]"}},
			{ok(1), []string{"reply seq=3", "model"}},
			{send("r3"), []string{"cancel-model", "publish", "write[" + wUser + "]"}},
			{bigRewind(1), []string{"reply error retry=false"}},
			{bigEdit(3), []string{"reply error retry=false"}},
			{ok(2), []string{"reply seq=4", "model"}},
			{&inModelDone{turn: 3, msg: text}, []string{"write[" + wAnswer + "]"}},
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCore(coreConfig{ID: "c", Policy: snapshot.Policy{}.WithDefaults(), Retry: RetryPolicy{}.WithDefaults(),
				NewID: func(time.Time) string { return "call_x" }}, slog.New(slog.DiscardHandler))
			for i, ev := range tc.log {
				ev.Seq = uint64(i + 1)
			}
			ws, err := snapshot.Rebuild(nil, tc.log)
			require.NoError(t, err)
			c.step(t0, &inLoaded{ws: ws, rows: map[string]*messages.ToolCallRecord{}, scope: agent.SystemScope})
			for i, st := range tc.steps {
				require.Equal(t, st.want, words(c.step(t0, st.in)), "step %d (%T)", i, st.in)
			}
		})
	}
}
