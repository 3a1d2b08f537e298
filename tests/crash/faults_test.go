package crash

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/pebblejournal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/snapshot"
)

// faultInjector is an errorfs.Injector that, once armed, fails the
// operations it matches.
type faultInjector struct {
	kinds   map[errorfs.OpKind]bool
	walOnly bool // only the write-ahead log (*.log)
	oneShot bool // fail one operation, then let the disk work again
	err     func(errorfs.Op) error

	armed atomic.Bool
	hits  atomic.Int64
}

var _ errorfs.Injector = (*faultInjector)(nil)

func (f *faultInjector) String() string { return "crash.faultInjector" }

func (f *faultInjector) MaybeError(op errorfs.Op) error {
	if !f.armed.Load() || !f.kinds[op.Kind] || (f.walOnly && !strings.HasSuffix(op.Path, ".log")) {
		return nil
	}
	if f.oneShot && !f.armed.CompareAndSwap(true, false) {
		return nil
	}
	f.hits.Add(1)
	return f.err(op)
}

var (
	writeOps = []errorfs.OpKind{errorfs.OpFileWrite, errorfs.OpFileWriteAt}
	syncOps  = []errorfs.OpKind{errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo}
)

func injected(errorfs.Op) error { return errorfs.ErrInjected }

// diskFull is what a full disk answers a write.
func diskFull(op errorfs.Op) error {
	return &os.PathError{Op: "write", Path: op.Path, Err: syscall.ENOSPC}
}

type faultCase struct {
	name             string
	kinds            []errorfs.OpKind
	walOnly, oneShot bool
	err              func(errorfs.Op) error
}

var faultCases = []faultCase{
	{name: "WAL write fails", kinds: writeOps, walOnly: true, err: injected},
	{name: "WAL sync fails", kinds: syncOps, walOnly: true, err: injected},
	{name: "one WAL sync fails then the disk recovers", kinds: syncOps, walOnly: true, oneShot: true, err: injected},
	{name: "disk full", kinds: append([]errorfs.OpKind{errorfs.OpFilePreallocate}, writeOps...), err: diskFull},
}

// TestIOFault injects write, sync and disk-full errors under a running
// Runtime on Pebble, at two points: between turns (every conversation
// idle, the next write fails) and under load (the fault is armed by the
// first server call that runs once N sends were acknowledged, with turns
// in flight in several conversations: unless only a sync failed, that
// call is interrupted, and the next Runtime runs it again under its id).
//
// Pebble is fail-stop on a WAL error; the runtime's documented behaviour,
// checked here:
//
//   - nothing is acknowledged that is not durable: every Send that returned
//     a seq, every event a subscriber saw and every answer Resolve
//     acknowledged is in a crash image holding only synced data;
//   - every call after the fault is refused with an error wrapping
//     journal.ErrClosed that says to reopen the store;
//   - Runtime.Close (and the store's Close) return;
//   - reopening the directory recovers: the invariants of verifyStore hold
//     on the synced image and on everything written, and a new Runtime on
//     it finishes every conversation.
func TestIOFault(t *testing.T) {
	// Server calls the fault interrupted under load, over every case. A
	// failed write (and a full disk) always interrupts the call that armed
	// it; a failed sync may not (the call's result was written, unsynced,
	// and the disk as written holds it). All together must, or the
	// re-dispatch after a reopen was never exercised.
	interrupted, loadCases := 0, 0
	for _, fc := range faultCases {
		for _, underLoad := range []bool{false, true} {
			point := "between turns"
			if underLoad {
				point = "under load"
			}
			t.Run(fc.name+"/"+point, func(t *testing.T) {
				n := testIOFault(t, fc, underLoad)
				if underLoad {
					interrupted += n
					loadCases++
				}
			})
		}
	}
	if loadCases == len(faultCases) && !t.Failed() {
		require.Positive(t, interrupted, "no fault under load interrupted a server call: the re-dispatch under the same id was not exercised")
	}
}

// faultRig is a Runtime on a Pebble store on an error-injecting, crashable
// in-memory filesystem.
type faultRig struct {
	t     *testing.T
	mem   *vfs.MemFS
	inj   *faultInjector
	store *pebblejournal.Store
	rt    *lazarus.Runtime
	side  string
	logs  *tailBuffer
	l     *ledger
	convs []string
	// ran, if set, is called by each run of the work tool of the first
	// Runtime once the run is recorded, before it returns.
	ran atomic.Pointer[func()]
}

func newFaultRig(t *testing.T, fc faultCase, convs []string) *faultRig {
	inj := &faultInjector{kinds: map[errorfs.OpKind]bool{}, walOnly: fc.walOnly, oneShot: fc.oneShot, err: fc.err}
	for _, k := range fc.kinds {
		inj.kinds[k] = true
	}
	r := &faultRig{t: t, mem: vfs.NewCrashableMem(), inj: inj, side: filepath.Join(t.TempDir(), "work-runs.log"),
		logs: &tailBuffer{max: 16 << 10}, l: newLedger(), convs: convs}
	var err error
	r.store, err = pebblejournal.Open("db", pebblejournal.Options{FS: errorfs.Wrap(r.mem, inj), Logger: r.logger()})
	require.NoError(t, err)
	r.rt = r.openRuntime(r.store, 1)
	return r
}

func (r *faultRig) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(r.logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// openRuntime opens a Runtime on s; cycle numbers its lifetime in the side
// file (a re-dispatch after a restart runs in a later cycle).
func (r *faultRig) openRuntime(s journal.Store, cycle int) *lazarus.Runtime {
	side, err := openSideFile(r.side)
	require.NoError(r.t, err)
	r.t.Cleanup(func() { _ = side.Close() })
	rt, err := lazarus.Open(lazarus.Options{
		Store:       s,
		Model:       workloadModel{},
		Tools:       r.tools(side, cycle),
		IdleTimeout: 20 * time.Millisecond,
		Summary:     snapshot.Policy{MaxEvents: 6, KeepRecent: 2},
		Summarizer:  snapshot.Deterministic{},
		CallTimeout: 20 * time.Second,
		Logger:      r.logger(),
	})
	require.NoError(r.t, err)
	return rt
}

// tools are the workload's tools; the first Runtime's work tool calls
// r.ran, if set, before it returns.
func (r *faultRig) tools(side *sideFile, cycle int) []agent.Tool {
	tools := workloadTools(side, cycle, 0, time.Hour)
	if cycle != 1 {
		return tools
	}
	for i := range tools {
		if tools[i].Name != toolWork {
			continue
		}
		run := tools[i].Run
		tools[i].Run = func(ctx context.Context, inv agent.Invocation) (string, error) {
			out, err := run(ctx, inv)
			if f := r.ran.Load(); f != nil {
				(*f)()
			}
			return out, err
		}
	}
	return tools
}

// turn sends one message and waits until the turn it starts ends: the
// model's final answer, a suspension, or a failed turn. It records what was
// acknowledged. A failed Send returns its error.
func (r *faultRig) turn(ctx context.Context, rt *lazarus.Runtime, conv, text, rid string) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sub, err := rt.Subscribe(sctx, conv, 0)
	if err != nil {
		return err
	}
	seq, err := rt.SendMessage(ctx, conv, userMessage(text), lazarus.SendOptions{RequestID: rid}, agent.Scope{UserID: "u"})
	if err != nil {
		return err
	}
	r.l.ackSend(conv, seq, rid)
	for u := range sub {
		switch {
		case u.Err != nil:
			return nil // the turn failed (the fault); the next send says more
		case u.Event != nil:
			r.l.ackEvent(conv, u.Event)
			if u.Event.GetSeq() > seq && (isFinal(u.Event) || u.Event.GetSuspension() != nil || u.Event.GetTurnFailed() != nil) {
				return nil
			}
		}
	}
	return fmt.Errorf("conversation %q: the turn of seq %d did not end: %w", conv, seq, ctx.Err())
}

// requireRefused checks an error returned after the fault.
func requireRefused(t *testing.T, err error, what string) {
	t.Helper()
	require.Error(t, err, "%s after the fault", what)
	require.ErrorIs(t, err, journal.ErrClosed, "%s after the fault: %v", what, err)
	require.Contains(t, err.Error(), "reopen", "%s: the error says what to do", what)
}

// closeWithin runs f and fails the test if it does not return in time.
func closeWithin(t *testing.T, what string, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	timer := time.NewTimer(30 * time.Second)
	defer timer.Stop()
	select {
	case err := <-done:
		return err
	case <-timer.C:
		t.Fatalf("%s hung after the fault", what)
		return nil
	}
}

// testIOFault runs one case and returns how many server calls the fault
// left durable without a result (each was run again under its id).
func testIOFault(t *testing.T, fc faultCase, underLoad bool) int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	convs := convIDs(6)
	r := newFaultRig(t, fc, convs)

	// A human call that stays pending across the fault.
	human := convs[0]
	require.NoError(t, r.turn(ctx, r.rt, human, "human 1", "human-1"))
	pending, err := r.store.PendingToolCalls(ctx, human)
	require.NoError(t, err)
	require.Len(t, pending, 1)
	pendingID := pending[0].GetId()

	// Workers run turns in the other conversations until a send fails.
	const maxTurns = 400
	armAt := int64(3 * (len(convs) - 1)) // between turns: every worker has done 3 turns
	if underLoad {
		armAt = int64(2*(len(convs)-1) + 3)
	}
	var sent atomic.Int64
	var arrived sync.WaitGroup // between turns: workers wait at the barrier
	resume := make(chan struct{})
	armed := make(chan struct{})
	var armOnce sync.Once
	arm := func() { armOnce.Do(func() { r.inj.armed.Store(true); close(armed) }) }
	if !underLoad {
		arrived.Add(len(convs) - 1)
	} else {
		// Under load the fault is armed by the first run of the work tool
		// once armAt sends were acknowledged: that server call is durable
		// and running, so when writes fail its result is never written and
		// the next Runtime must run it again under its id (the re-dispatch
		// is exercised every time, not by chance).
		inFlight := func() {
			if sent.Load() >= armAt {
				arm()
			}
		}
		r.ran.Store(&inFlight)
	}
	failures := make([]error, len(convs))
	var wg sync.WaitGroup
	for i, conv := range convs[1:] {
		wg.Go(func() {
			atBarrier := sync.OnceFunc(func() {
				if !underLoad {
					arrived.Done()
				}
			})
			defer atBarrier() // a worker that fails early must not hold the others
			for n := 1; n <= maxTurns; n++ {
				if !underLoad && n == 4 {
					atBarrier()
					<-resume
				}
				rid := fmt.Sprintf("%s-%d", hexID(conv), n)
				err := r.turn(ctx, r.rt, conv, fmt.Sprintf("%s %d", []string{"tool", "chat", "multi", "chain"}[n%4], n), rid)
				if err != nil {
					failures[i+1] = err
					return
				}
				sent.Add(1)
			}
			r.l.problem("conversation %q: %d turns and no send failed", conv, maxTurns)
		})
	}
	if !underLoad {
		arrived.Wait()
		arm()
		close(resume)
	}
	wg.Wait()
	require.Empty(t, r.l.problems)
	select {
	case <-armed:
	default:
		t.Fatal("the fault was never armed")
	}
	require.Positive(t, r.inj.hits.Load(), "the fault was injected")
	t.Logf("fault injected %d times; %d sends acknowledged before it", r.inj.hits.Load(), sent.Load())

	// Every later call is refused, clearly.
	for i, err := range failures[1:] {
		requireRefused(t, err, fmt.Sprintf("the first failed send of %q", convs[i+1]))
	}
	t.Logf("a send after the fault: %v", failures[1])
	for _, conv := range convs {
		_, err := r.rt.Send(ctx, conv, "chat again", agent.Scope{UserID: "u"})
		requireRefused(t, err, "Send")
		_, err = r.rt.History(ctx, conv, 0, 0)
		requireRefused(t, err, "History")
	}
	requireRefused(t, r.rt.Resolve(ctx, pendingID, `{"approved":true}`, agent.Scope{UserID: "u"}), "Resolve")
	requireRefused(t, r.rt.Reject(ctx, pendingID, "no", agent.Scope{UserID: "u"}), "Reject")
	requireRefused(t, r.rt.Wake(ctx, human), "Wake")
	_, err = r.store.Append(ctx, &messages.AppendRequest{ConversationId: human, Unfenced: true})
	requireRefused(t, err, "the store's Append")

	// The runtime shuts down.
	require.NoError(t, closeWithin(t, "Runtime.Close", r.rt.Close))
	if err := closeWithin(t, "the store's Close", r.store.Close); err != nil {
		t.Logf("the failed store's Close: %v", err)
	}

	// What a crash now would leave: only synced data.
	synced := r.mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	r.inj.armed.Store(false)
	side, err := readSideFile(r.side)
	require.NoError(t, err)
	in := checkInput{convs: convs, ledger: r.l, side: side, keys: true}
	verifyFS := func(what string, fs vfs.FS) *pebblejournal.Store {
		s, err := pebblejournal.Open("db", pebblejournal.Options{FS: fs})
		require.NoError(t, err, "reopen %s", what)
		v := verifyStore(ctx, s, in)
		require.Empty(t, v.violations, "reopened %s: %s", what, v)
		t.Logf("reopened %s: %d events, %d acknowledged facts checked", what, v.events, v.acks)
		return s
	}
	require.NoError(t, verifyFS("the synced image", synced).Close())

	// Full recovery on what was written: a new Runtime finishes every
	// conversation.
	s := verifyFS("the disk as written", r.mem)
	defer func() { require.NoError(t, s.Close()) }()
	// The server calls the fault interrupted: durable, no result yet. The
	// next Runtime must run each again under its id (not ask the model
	// again, not write a result without running it).
	interrupted := map[string]string{} // tool call id -> conversation
	for _, conv := range convs {
		rows, err := s.PendingToolCalls(ctx, conv)
		require.NoError(t, err)
		for _, row := range rows {
			if row.GetExecutor() == messages.Executor_EXECUTOR_SERVER {
				interrupted[row.GetId()] = conv
			}
		}
	}
	rt := r.openRuntime(s, 2)
	require.NoError(t, rt.Resolve(ctx, pendingID, `{"approved":true}`, agent.Scope{UserID: "u"}))
	r.l.ackResolve(pendingID, messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED)
	for _, conv := range convs {
		require.NoError(t, r.turn(ctx, rt, conv, "chat after", hexID(conv)+"-after"))
	}
	require.NoError(t, r.awaitSettled(ctx, rt, convs))
	require.NoError(t, rt.Close())
	side, err = readSideFile(r.side)
	require.NoError(t, err)
	in.side, in.final = side, true
	v := verifyStore(ctx, s, in)
	require.Empty(t, v.violations, "after recovery: %s", v)
	rerun := map[string]bool{}
	for _, rec := range side {
		if rec.cycle == 2 {
			rerun[rec.id] = true
		}
	}
	for id, conv := range interrupted {
		require.True(t, rerun[id], "server call %s (conversation %q), interrupted by the fault, was not run again under its id by the next Runtime", id, conv)
	}
	t.Logf("after recovery: %d events, %d acknowledged facts checked, %d server calls interrupted by the fault, %d calls re-dispatched under their id",
		v.events, v.acks, len(interrupted), v.redispatches)
	return len(interrupted)
}

// awaitSettled waits until every conversation's log ends in the model's
// final answer.
func (r *faultRig) awaitSettled(ctx context.Context, rt *lazarus.Runtime, convs []string) error {
	for _, conv := range convs {
		sub, err := rt.Subscribe(ctx, conv, 0)
		if err != nil {
			return err
		}
		last, err := rt.History(ctx, conv, 0, 1)
		if err != nil {
			return err
		}
		want := last[0].GetSeq()
		settled := false
		for u := range sub {
			if u.Event != nil && u.Event.GetSeq() >= want && isFinal(u.Event) {
				settled = true
				break
			}
			if u.Event != nil && u.Event.GetSeq() >= want {
				want = u.Event.GetSeq() + 1
			}
		}
		if !settled {
			return errors.Join(fmt.Errorf("conversation %q never settled", conv), ctx.Err())
		}
	}
	return nil
}
