package crash

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/messages"
)

// The workload: what the child process of the kill -9 harness runs, and
// what the invariant checks know about it.
//
// Every user message is "<kind> <n>". The model is a pure function of the
// context it is given, so a turn re-run after a crash makes the same
// decision, and every tool call it makes carries a decision key: the
// conversation, the seq of the user message the turn answers, the round of
// tool calls and the call's index. The runtime mints a new tool call id for
// every model answer, so one decision key must only ever map to one id.

// Tool names of the workload.
const (
	toolWork    = "work"    // server: records its run in the side file
	toolApprove = "approve" // human: answered, rejected, double-clicked or left to expire
)

// Message kinds and what the model answers to each.
var kinds = []struct {
	name   string
	weight int
}{
	{"chat", 3},  // text
	{"tool", 3},  // one work call, then text
	{"multi", 2}, // two work calls in one answer, then text
	{"chain", 2}, // a work call, then another, then text
	{"human", 3}, // one approve call, then text
	{"mixed", 2}, // a work call and an approve call in one answer, then text
}

func pickKind(rng *rand.Rand) string {
	total := 0
	for _, k := range kinds {
		total += k.weight
	}
	n := rng.IntN(total)
	for _, k := range kinds {
		if n < k.weight {
			return k.name
		}
		n -= k.weight
	}
	return kinds[0].name
}

// hexID is how conversation ids travel in the line protocol and the side
// file: ids may hold spaces and any UTF-8.
func hexID(conv string) string { return hex.EncodeToString([]byte(conv)) }

func unhexID(s string) (string, error) {
	b, err := hex.DecodeString(s)
	return string(b), err
}

// decisionKey names call i of round round of the turn answering the user
// message at userSeq.
func decisionKey(conv string, userSeq uint64, round, i int) string {
	return fmt.Sprintf("%s.%d.%d.%d", hexID(conv), userSeq, round, i)
}

// convIDs returns the workload's conversation ids; some hold bytes a key
// layout must escape.
func convIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		switch i % 6 {
		case 1:
			ids[i] = fmt.Sprintf("team/a b/%02d", i)
		case 3:
			ids[i] = fmt.Sprintf("ü-%02d", i)
		case 5:
			ids[i] = fmt.Sprintf("conv-%02d\x00x", i)
		default:
			ids[i] = fmt.Sprintf("conv-%02d", i)
		}
	}
	return ids
}

// workloadModel answers from the context alone; see the comment at the top.
type workloadModel struct {
	// maxThink bounds a random pause before answering (honouring ctx), so
	// that a kill can land in the middle of a model call.
	maxThink time.Duration
}

func (m workloadModel) Generate(ctx context.Context, turn agent.Turn, _ func(string)) (*messages.AssistantMessage, error) {
	if err := pause(ctx, jitter(m.maxThink)); err != nil {
		return nil, err
	}
	evs := turn.Context
	ui := -1
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].GetUserMsg() != nil {
			ui = i
			break
		}
	}
	if ui < 0 {
		return scripted.Text("nothing to answer"), nil
	}
	userSeq := evs[ui].GetSeq()
	kind, _, _ := strings.Cut(textOf(evs[ui].GetUserMsg().GetContent()), " ")
	round := 0
	for _, ev := range evs[ui+1:] {
		if len(ev.GetAssistantMsg().GetToolCalls()) > 0 {
			round++
		}
	}
	call := func(name string, i int) *messages.ToolCall {
		args, _ := json.Marshal(map[string]string{"key": decisionKey(turn.ConversationID, userSeq, round, i)})
		return scripted.Call(name, string(args))
	}
	done := scripted.Text(fmt.Sprintf("done %s at %d", kind, userSeq))
	if round > 0 {
		if kind == "chain" && round < 2 {
			return scripted.Reply("again", call(toolWork, 0)), nil
		}
		return done, nil
	}
	switch kind {
	case "tool", "chain":
		return scripted.Reply("working", call(toolWork, 0)), nil
	case "multi":
		return scripted.Reply("working twice", call(toolWork, 0), call(toolWork, 1)), nil
	case "human":
		return scripted.Reply("asking", call(toolApprove, 0)), nil
	case "mixed":
		return scripted.Reply("working and asking", call(toolWork, 0), call(toolApprove, 1)), nil
	}
	return done, nil
}

func textOf(parts []*messages.ContentPart) string {
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.GetText())
	}
	return b.String()
}

// callKey returns the decision key in a workload tool call's arguments.
func callKey(args string) string {
	var a struct {
		Key string `json:"key"`
	}
	_ = json.Unmarshal([]byte(args), &a)
	return a.Key
}

// workloadTools returns the workload's tools. Every run of work is recorded
// in side, with its tool call id, before the tool returns.
func workloadTools(side *sideFile, cycle int, maxWork, humanTimeout time.Duration) []agent.Tool {
	return []agent.Tool{
		{
			Name: toolWork, Description: "does some work, once per idempotency key", Executor: messages.Executor_EXECUTOR_SERVER,
			Run: func(ctx context.Context, inv agent.Invocation) (string, error) {
				key := callKey(inv.Arguments)
				if err := side.record(sideRecord{conv: inv.ConversationID, id: inv.ToolCallID, key: key, cycle: cycle}); err != nil {
					return "", err
				}
				if err := pause(ctx, jitter(maxWork)); err != nil {
					return "", err
				}
				return fmt.Sprintf(`{"done":%q}`, key), nil
			},
		},
		{Name: toolApprove, Description: "a human approves", Executor: messages.Executor_EXECUTOR_HUMAN, Timeout: humanTimeout},
	}
}

// jitter returns a random duration in [0, max).
func jitter(max time.Duration) time.Duration {
	if max <= 0 {
		return 0
	}
	return time.Duration(rand.Int64N(int64(max)))
}

// pause waits d (workload timing, not synchronisation) or until ctx is done.
func pause(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// sideRecord is one run of the work tool.
type sideRecord struct {
	conv, id, key string
	cycle         int
}

// sideFile is the record of server tool runs: one line per run, appended
// with O_APPEND and fsynced before the tool goes on, so a run survives the
// kill of its process.
type sideFile struct {
	mu sync.Mutex
	f  *os.File
}

func openSideFile(path string) (*sideFile, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &sideFile{f: f}, nil
}

func (s *sideFile) record(r sideRecord) error {
	line := fmt.Sprintf("%s %s %s %d\n", hexID(r.conv), r.id, r.key, r.cycle)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.f.WriteString(line); err != nil {
		return err
	}
	return s.f.Sync()
}

func (s *sideFile) Close() error { return s.f.Close() }

// readSideFile parses a side file. A last line without its newline (a
// write cut by the kill) is ignored; any other malformed line is an error.
func readSideFile(path string) ([]sideRecord, error) {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	text := string(b)
	if i := strings.LastIndexByte(text, '\n'); i >= 0 {
		text = text[:i+1]
	} else {
		text = ""
	}
	var out []sideRecord
	for n, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		if line == "" {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 4 {
			return nil, fmt.Errorf("side file line %d: %q", n+1, line)
		}
		conv, err := unhexID(f[0])
		if err != nil {
			return nil, fmt.Errorf("side file line %d: %w", n+1, err)
		}
		cycle, err := strconv.Atoi(f[3])
		if err != nil {
			return nil, fmt.Errorf("side file line %d: %w", n+1, err)
		}
		out = append(out, sideRecord{conv: conv, id: f[1], key: f[2], cycle: cycle})
	}
	return out, nil
}

// eventHash is a digest of an event's deterministic encoding: what the
// child saw is compared with what the store holds.
func eventHash(ev *messages.Event) string {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(ev)
	if err != nil {
		return "unencodable:" + err.Error()
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:12])
}
