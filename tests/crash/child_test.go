package crash

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/snapshot"
)

// childEnv carries a child process's configuration (JSON). The test binary
// re-executes itself with -test.run=^TestCrashChild$ and this variable set.
const childEnv = "LAZARUS_CRASH_CHILD"

// Child modes.
const (
	modeWork   = "work"   // drive the workload until killed
	modeSettle = "settle" // send nothing new; answer every pending call; exit once every conversation settled
	modeHold   = "hold"   // write a little, report it, then hold the directory open until stdin closes
	modeFiles  = "files"  // a tool changes a file after its checkpoint, reports it, and waits to be killed (files_test.go)
)

// childConfig configures one child process.
type childConfig struct {
	Mode string `json:"mode"`
	Dir  string `json:"dir"` // the Pebble directory
	// Postgres is the DSN of the PostgreSQL journal, used instead of Dir
	// when set.
	Postgres string `json:"postgres"`
	Side     string `json:"side"` // the side file of work runs
	Seed     uint64 `json:"seed"`
	Cycle    int    `json:"cycle"`
	Convs    int    `json:"convs"`
	// IdleTimeout passivates idle conversations (small: passivation and
	// revival happen all the time).
	IdleTimeout time.Duration `json:"idle_timeout"`
	// HumanTimeout is the deadline of an approve call.
	HumanTimeout time.Duration `json:"human_timeout"`
	// MaxThink and MaxWork bound the model's and the work tool's random
	// pauses, so kills land mid-turn and mid-tool.
	MaxThink time.Duration `json:"max_think"`
	MaxWork  time.Duration `json:"max_work"`
	// SettleWithin bounds settle mode.
	SettleWithin time.Duration `json:"settle_within"`
	// FilesRoot is the file root of files mode.
	FilesRoot string `json:"files_root"`
}

// childCommand returns the command that runs cfg in a child process.
func childCommand(cfg childConfig) (*exec.Cmd, error) {
	b, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1", "-test.timeout=30m")
	cmd.Env = append(os.Environ(), childEnv+"="+string(b))
	return cmd, nil
}

// workloadOptions are the Runtime options of the workload.
func workloadOptions(cfg childConfig, side *sideFile, logger *slog.Logger) lazarus.Options {
	return lazarus.Options{
		Dir:         cfg.Dir,
		Postgres:    cfg.Postgres,
		Model:       workloadModel{maxThink: cfg.MaxThink},
		Tools:       workloadTools(side, cfg.Cycle, cfg.MaxWork, cfg.HumanTimeout),
		IdleTimeout: cfg.IdleTimeout,
		Summary:     snapshot.Policy{MaxEvents: 6, KeepRecent: 2},
		Summarizer:  snapshot.Deterministic{},
		CallTimeout: time.Minute,
		Logger:      logger,
	}
}

// TestCrashChild is the child process of TestKill9 and
// TestSecondProcessIsLockedOut. Run directly, it skips.
func TestCrashChild(t *testing.T) {
	raw := os.Getenv(childEnv)
	if raw == "" {
		t.Skip("the child process of the kill -9 harness; run by TestKill9")
	}
	var cfg childConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		t.Fatalf("bad %s: %v", childEnv, err)
	}
	rep := &reporter{w: os.Stdout}
	if cfg.Mode == modeFiles {
		filesChild(t, cfg, rep)
		return
	}
	side, err := openSideFile(cfg.Side)
	if err != nil {
		t.Fatalf("side file: %v", err)
	}
	defer side.Close()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	rt, err := lazarus.Open(workloadOptions(cfg, side, logger))
	if err != nil {
		rep.line("err open: %v", err)
		t.Fatalf("open: %v", err)
	}
	rep.line("ready")
	switch cfg.Mode {
	case modeHold:
		holdChild(t, rt, cfg, rep)
		return
	case modeWork, modeSettle:
	default:
		t.Fatalf("unknown mode %q", cfg.Mode)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var deadline <-chan time.Time
	if cfg.Mode == modeSettle {
		timer := time.NewTimer(cfg.SettleWithin)
		defer timer.Stop()
		deadline = timer.C
	}
	var wg sync.WaitGroup
	for i, conv := range convIDs(cfg.Convs) {
		d := &driver{
			rt: rt, conv: conv, rep: rep, cfg: cfg, deadline: deadline,
			rng: rand.New(rand.NewPCG(cfg.Seed, uint64(i))),
		}
		wg.Go(func() { d.run(ctx) })
	}
	if cfg.Mode == modeWork {
		// Runs until the parent kills the process.
		select {}
	}
	wg.Wait()
	cancel()
	if err := rt.Close(); err != nil {
		rep.line("err close: %v", err)
	}
	rep.line("settled")
}

// holdChild writes a few turns, reports them, and keeps the Runtime (and
// so the directory) open until its stdin is closed.
func holdChild(t *testing.T, rt *lazarus.Runtime, cfg childConfig, rep *reporter) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i, conv := range convIDs(cfg.Convs) {
		sub, err := rt.Subscribe(ctx, conv, 0)
		if err != nil {
			t.Fatalf("subscribe: %v", err)
		}
		seq, err := rt.SendMessage(ctx, conv, userMessage("chat hold"), lazarus.SendOptions{RequestID: fmt.Sprintf("hold-%d", i)}, agent.Scope{UserID: "holder"})
		if err != nil {
			t.Fatalf("send: %v", err)
		}
		rep.line("send %s %d hold-%d", hexID(conv), seq, i)
		for u := range sub {
			if u.Event == nil {
				continue
			}
			rep.line("ev %s %d %s", hexID(conv), u.Event.GetSeq(), eventHash(u.Event))
			if am := u.Event.GetAssistantMsg(); am != nil && len(am.GetToolCalls()) == 0 {
				break
			}
		}
	}
	rep.line("holding")
	_, _ = io.Copy(io.Discard, os.Stdin) // until the parent closes our stdin
	if err := rt.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
}

func userMessage(text string) *messages.UserMessage {
	return &messages.UserMessage{Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: text}}}}
}

// driver runs the workload of one conversation: it sends a message once
// the previous one is fully answered, answers human calls by policy, and
// reports everything acknowledged.
type driver struct {
	rt       *lazarus.Runtime
	conv     string
	rep      *reporter
	cfg      childConfig
	rng      *rand.Rand
	deadline <-chan time.Time // settle mode: give up then

	seen     uint64          // last seq seen through the subscription
	last     *messages.Event // the event at seen
	answered map[string]bool
	sent     int
}

func (d *driver) settleMode() bool { return d.cfg.Mode == modeSettle }

func (d *driver) run(ctx context.Context) {
	d.answered = map[string]bool{}
	tail, err := d.rt.History(ctx, d.conv, 0, 1)
	if err != nil {
		d.rep.line("err history of %q: %v", d.conv, err)
		return
	}
	want := uint64(0) // the conversation is settled once seen >= want and the last event is a final answer
	if len(tail) > 0 {
		want = tail[0].GetSeq()
	}
	pending, err := d.rt.Store().PendingToolCalls(ctx, d.conv)
	if err != nil {
		d.rep.line("err pending of %q: %v", d.conv, err)
		return
	}
	for _, p := range pending {
		if p.GetExecutor() == messages.Executor_EXECUTOR_HUMAN {
			d.answer(ctx, p.GetId())
		}
	}
	sub, err := d.rt.Subscribe(ctx, d.conv, 0)
	if err != nil {
		d.rep.line("err subscribe to %q: %v", d.conv, err)
		return
	}
	for {
		if d.seen >= want && (d.last == nil || isFinal(d.last)) {
			if d.settleMode() {
				return
			}
			seq, ok := d.send(ctx)
			if !ok {
				return
			}
			want = seq + 1
		}
		select {
		case u, ok := <-sub:
			if !ok {
				if ctx.Err() != nil {
					return
				}
				// Ended by lag: subscribe again after what was seen.
				if sub, err = d.rt.Subscribe(ctx, d.conv, d.seen); err != nil {
					d.rep.line("err resubscribe to %q: %v", d.conv, err)
					return
				}
				continue
			}
			d.onUpdate(ctx, u)
		case <-d.deadline:
			d.rep.line("stuck %s seen %d, want %d, last event %s", hexID(d.conv), d.seen, want, typeOrNone(d.last))
			return
		}
	}
}

func typeOrNone(ev *messages.Event) string {
	if ev == nil {
		return "none"
	}
	return eventType(ev)
}

func isFinal(ev *messages.Event) bool {
	am := ev.GetAssistantMsg()
	return am != nil && len(am.GetToolCalls()) == 0
}

func (d *driver) onUpdate(ctx context.Context, u actors.Update) {
	switch {
	case u.Err != nil && errors.Is(u.Err, lazarus.ErrLagged):
	case u.Err != nil:
		if ctx.Err() == nil {
			d.rep.line("err conversation %q: a turn failed: %v", d.conv, u.Err)
		}
	case u.Event != nil:
		ev := u.Event
		if ev.GetSeq() != d.seen+1 {
			d.rep.line("err conversation %q: subscriber got seq %d after %d", d.conv, ev.GetSeq(), d.seen)
		}
		d.rep.line("ev %s %d %s", hexID(d.conv), ev.GetSeq(), eventHash(ev))
		d.seen, d.last = ev.GetSeq(), ev
		for _, p := range ev.GetSuspension().GetPending() {
			d.answer(ctx, p.GetToolCallId())
		}
	}
}

func (d *driver) send(ctx context.Context) (uint64, bool) {
	d.sent++
	rid := fmt.Sprintf("c%d-%s-%d", d.cfg.Cycle, hexID(d.conv), d.sent)
	text := fmt.Sprintf("%s %d", pickKind(d.rng), d.sent)
	seq, err := d.rt.SendMessage(ctx, d.conv, userMessage(text), lazarus.SendOptions{RequestID: rid}, agent.Scope{UserID: "driver"})
	if err != nil {
		d.rep.line("err send to %q: %v", d.conv, err)
		return 0, false
	}
	d.rep.line("send %s %d %s", hexID(d.conv), seq, rid)
	return seq, true
}

// answer decides, once per call, how a human answers it: resolve, reject,
// double-click, or let it expire. In settle mode every call is resolved at
// once.
func (d *driver) answer(ctx context.Context, id string) {
	if d.answered[id] {
		return
	}
	d.answered[id] = true
	clicks, reject := 1, false
	delay := time.Duration(d.rng.Int64N(int64(d.cfg.HumanTimeout)))
	if d.settleMode() {
		delay = 0
	} else {
		switch r := d.rng.Float64(); {
		case r < 0.45:
		case r < 0.55:
			reject = true
		case r < 0.75:
			clicks = 2
		default:
			return // left to expire
		}
	}
	for range clicks {
		go func() {
			if err := pause(ctx, delay); err != nil {
				return
			}
			var err error
			status := messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED
			if reject {
				status = messages.ToolCallStatus_TOOL_CALL_STATUS_ERRORED
				err = d.rt.Reject(ctx, id, "declined", agent.Scope{UserID: "human"})
			} else {
				err = d.rt.Resolve(ctx, id, `{"approved":true}`, agent.Scope{UserID: "human"})
			}
			switch {
			case err == nil:
				d.rep.line("resolve %s %s", id, status)
			case errors.Is(err, journal.ErrStale), ctx.Err() != nil:
			default:
				d.rep.line("err answer %s of %q: %v", id, d.conv, err)
			}
		}()
	}
}
