package bench

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/pebblejournal"
	"github.com/lazarusrt/lazarus/messages"
)

// wait bounds every wait of a benchmark for the runtime; nothing sleeps.
const wait = 2 * time.Minute

var user = agent.Scope{UserID: "bench"}

// openStore opens a pebblejournal on the real disk in a temporary
// directory, closed when the benchmark ends.
func openStore(b *testing.B) *pebblejournal.Store {
	b.Helper()
	s, err := pebblejournal.Open(b.TempDir(), pebblejournal.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s
}

// newSystem returns a silent actor system, shut down when the benchmark
// ends.
func newSystem(b *testing.B) *actor.ActorSystem {
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.DiscardHandler)
	}))
	b.Cleanup(sys.Shutdown)
	return sys
}

var words = strings.Fields(`the agent will book a flight to Lisbon on Tuesday morning please
confirm budget hotel near river and late checkout if possible price is within limits tool
call result user said yes no maybe weather forecast sunny with light wind summary
conversation durable journal actor revived pending human answer order refund approve
seat window aisle gate terminal train station luggage fee discount offer breakfast dinner`)

// textLike returns n bytes of word-like text.
func textLike(rng *rand.Rand, n int) string {
	var sb strings.Builder
	for sb.Len() < n {
		if sb.Len() > 0 {
			sb.WriteByte(' ')
		}
		sb.WriteString(words[rng.IntN(len(words))])
	}
	return sb.String()[:n]
}

func textParts(s string) []*messages.ContentPart {
	return []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: s}}}
}

func userMessage(rng *rand.Rand, n int) *messages.UserMessage {
	return &messages.UserMessage{Content: textParts(textLike(rng, n))}
}

// Sizes of a realistic turn, as cmd/loadgen uses them.
const (
	userBytes   = 400
	answerBytes = 800
	resultBytes = 2048
	turnEvents  = 5 // user, assistant with a call, tool_call, tool_result, assistant
)

// model answers a user message with a call of the server tool "search"
// when the message starts with "search", else with ~800 B of text, and a
// tool result with ~800 B of text. It keeps nothing between calls.
var model = agent.ModelFunc(func(ctx context.Context, turn agent.Turn, onDelta func(string)) (*messages.AssistantMessage, error) {
	rng := rand.New(rand.NewPCG(rand.Uint64(), 0))
	last := turn.Context[len(turn.Context)-1]
	msg := &messages.AssistantMessage{Content: textParts(textLike(rng, answerBytes))}
	if u := last.GetUserMsg(); u != nil && strings.HasPrefix(u.GetContent()[0].GetText(), "search") {
		msg.Content = textParts(textLike(rng, answerBytes-200))
		msg.ToolCalls = []*messages.ToolCall{{Name: "search", Arguments: fmt.Sprintf(`{"query":%q}`, textLike(rng, 180))}}
	}
	if onDelta != nil {
		onDelta(msg.GetContent()[0].GetText())
	}
	return msg, ctx.Err()
})

// tools is the server tool of the workload: a ~2 KB JSON result.
var tools = []agent.Tool{{
	Name: "search", Description: "search offers", Executor: messages.Executor_EXECUTOR_SERVER,
	Run: func(ctx context.Context, inv agent.Invocation) (string, error) {
		rng := rand.New(rand.NewPCG(rand.Uint64(), 0))
		return fmt.Sprintf(`{"results":%q}`, textLike(rng, resultBytes-16)), ctx.Err()
	},
}}

// openRuntime opens a Runtime on store with the workload's model and tools,
// closed when the benchmark ends.
func openRuntime(b *testing.B, store journal.Store, mod func(*lazarus.Options)) *lazarus.Runtime {
	b.Helper()
	opts := lazarus.Options{Store: store, Model: model, Tools: tools, NoResume: true}
	if mod != nil {
		mod(&opts)
	}
	rt, err := lazarus.Open(opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = rt.Close() })
	return rt
}

// turnLog returns n complete turns of a conversation's log: the events of
// a server-call turn with the workload's sizes.
func turnLog(rng *rand.Rand, conv string, firstTurn, n int) []*messages.Event {
	var evs []*messages.Event
	for i := range n {
		id := fmt.Sprintf("%s-call-%d", conv, firstTurn+i)
		call := &messages.ToolCall{Id: id, Name: "search", Arguments: fmt.Sprintf(`{"query":%q}`, textLike(rng, 180))}
		evs = append(evs,
			&messages.Event{Body: &messages.Event_UserMsg{UserMsg: userMessage(rng, userBytes)}},
			&messages.Event{Body: &messages.Event_AssistantMsg{AssistantMsg: &messages.AssistantMessage{Content: textParts(textLike(rng, answerBytes-200)), ToolCalls: []*messages.ToolCall{call}}}},
			&messages.Event{Body: &messages.Event_ToolCall{ToolCall: &messages.ToolCallEvent{Call: call, Executor: messages.Executor_EXECUTOR_SERVER}}},
			&messages.Event{Body: &messages.Event_ToolResult{ToolResult: &messages.ToolResultEvent{ToolCallId: id, Name: "search",
				Outcome: &messages.ToolOutcome{Outcome: &messages.ToolOutcome_Content{Content: fmt.Sprintf(`{"results":%q}`, textLike(rng, resultBytes-16))}}}}},
			&messages.Event{Body: &messages.Event_AssistantMsg{AssistantMsg: &messages.AssistantMessage{Content: textParts(textLike(rng, answerBytes))}}},
		)
	}
	now := journal.Timestamp(time.Now())
	for _, ev := range evs {
		ev.Time = now
	}
	return evs
}

// fill writes turns complete turns to conv directly in the Store, and, if
// recent >= 0, a summary covering all but the last recent events.
func fill(b *testing.B, store journal.Store, conv string, turns, recent int) {
	b.Helper()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(uint64(len(conv)), uint64(turns)))
	const perAppend = journal.MaxEventsPerAppend / turnEvents
	var last uint64
	for t := 0; t < turns; t += perAppend {
		k := min(perAppend, turns-t)
		evs := turnLog(rng, conv, t, k)
		res, err := store.Append(ctx, &messages.AppendRequest{
			ConversationId: conv, ExpectedLast: last, Events: evs, ToolCalls: callRows(conv, evs),
			Status: messages.ConversationStatus_CONVERSATION_STATUS_IDLE,
		})
		if err != nil {
			b.Fatalf("fill %s: %v", conv, err)
		}
		last = res.LastSeq
	}
	if recent < 0 {
		return
	}
	to := last - uint64(recent)
	err := store.PutSummary(ctx, conv, &messages.Summary{FromSeq: 1, ToSeq: to, Version: "bench/1",
		Content: fmt.Sprintf("summary of seq 1..%d\n%s", to, textLike(rng, 2048))})
	if err != nil {
		b.Fatal(err)
	}
}

// awaitAnswer reads sub until an assistant message without tool calls is
// durable.
func awaitAnswer(b *testing.B, sub <-chan actors.Update) {
	for u := range sub {
		if u.Err != nil {
			b.Errorf("turn failed: %v", u.Err)
			return
		}
		if m := u.Event.GetAssistantMsg(); m != nil && len(m.GetToolCalls()) == 0 {
			return
		}
	}
	b.Errorf("subscription ended before the answer")
}

// liveHeap returns the live heap after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	debug.FreeOSMemory()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// rss returns the process's resident set size (Linux; 0 elsewhere).
func rss() uint64 { return procStatus("VmRSS") }

// procStatus returns a field of /proc/self/status in bytes, or 0.
func procStatus(field string) uint64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(data)) {
		name, rest, ok := strings.Cut(line, ":")
		if !ok || name != field {
			continue
		}
		kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		if err != nil {
			return 0
		}
		return kb << 10
	}
	return 0
}

// reportRate reports n things per second of elapsed as metric unit.
func reportRate(b *testing.B, n int, elapsed time.Duration, unit string) {
	if elapsed > 0 {
		b.ReportMetric(float64(n)/elapsed.Seconds(), unit)
	}
}

// callRows returns the row of each tool_call event of evs, resolved (the
// turn's tool_result follows it), which a Store requires in the append
// that carries the event.
func callRows(conv string, evs []*messages.Event) []*messages.ToolCallRecord {
	var rows []*messages.ToolCallRecord
	for _, ev := range evs {
		if tc := ev.GetToolCall(); tc != nil {
			rows = append(rows, &messages.ToolCallRecord{Id: tc.GetCall().GetId(), ConversationId: conv, Name: tc.GetCall().GetName(),
				Executor: tc.GetExecutor(), Status: messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED, Args: tc.GetCall().GetArguments()})
		}
	}
	return rows
}
