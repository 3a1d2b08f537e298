package crash

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/pebblejournal"
	"github.com/lazarusrt/lazarus/journal/pgjournal"
	"github.com/lazarusrt/lazarus/journal/pgjournal/pgtest"
)

var long = flag.Bool("long", false, "run the kill -9 harness for 100 cycles (see RELIABILITY.md)")

// Environment of the kill -9 harness.
const (
	// cyclesEnv sets the number of kill cycles (default 3, 1 with -short).
	cyclesEnv = "LAZARUS_CRASH_CYCLES"
	// seedEnv replays a run: its value is the seed a run printed.
	seedEnv = "LAZARUS_CRASH_SEED"
)

// longCycles is the number of cycles of the long mode.
const longCycles = 100

// TestKill9 is the kill -9 harness (see the package doc). Every cycle runs
// the workload in a child process on the same directory and kills it with
// SIGKILL after a seeded random delay, then checks every invariant on what
// the disk holds (verifyStore). A last child runs in settle mode: it answers
// every pending call and exits once every conversation has its final
// answer, and the check then also requires every call to have exactly one
// result.
func TestKill9(t *testing.T) {
	dir := t.TempDir()
	kill9(t, childConfig{Dir: filepath.Join(dir, "db"), Side: filepath.Join(dir, "work-runs.log")})
}

// TestKill9Postgres is TestKill9 on the PostgreSQL journal: the children
// write a database of a PostgreSQL server the test starts (and which stays
// up: the runtime process is what is killed).
func TestKill9Postgres(t *testing.T) {
	srv, err := pgtest.Start()
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	kill9(t, childConfig{Postgres: srv.NewDatabase(t), Side: filepath.Join(t.TempDir(), "work-runs.log")})
}

// kill9 runs the harness on the store that base names (Dir or Postgres)
// with the side file base.Side.
func kill9(t *testing.T, base childConfig) {
	cycles := 3
	if testing.Short() {
		cycles = 1
	}
	if *long {
		cycles = longCycles
	}
	if v := os.Getenv(cyclesEnv); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err, "%s=%q", cyclesEnv, v)
		cycles = n
	}
	seed := rand.Uint64()
	if v := os.Getenv(seedEnv); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		require.NoError(t, err, "%s=%q", seedEnv, v)
		seed = n
	}
	t.Logf("seed %d (replay with %s=%d), %d cycles", seed, seedEnv, seed, cycles)
	rng := rand.New(rand.NewPCG(seed, 0x6b696c6c39))

	cfg := childConfig{
		Dir:          base.Dir,
		Postgres:     base.Postgres,
		Side:         base.Side,
		Convs:        12,
		IdleTimeout:  40 * time.Millisecond,
		HumanTimeout: 1200 * time.Millisecond,
		MaxThink:     15 * time.Millisecond,
		MaxWork:      40 * time.Millisecond,
		SettleWithin: 90 * time.Second,
	}
	require.Positive(t, cycles, "%s=%d: the harness needs at least one kill cycle", cyclesEnv, cycles)
	l := newLedger()
	start := time.Now()
	var kills, early, midWork, events, checks, redispatches, summaries int
	report := func(v *verdict) {
		events += v.events
		checks += v.acks
		summaries += v.summaries
		redispatches = v.redispatches // cumulative over the side file
	}
	for cycle := 1; cycle <= cycles; cycle++ {
		cfg.Mode, cfg.Cycle, cfg.Seed = modeWork, cycle, rng.Uint64()
		// From the child's start: some kills land while it opens the store
		// and resumes interrupted work, most while the workload runs.
		delay := 20*time.Millisecond + time.Duration(rng.Int64N(int64(2300*time.Millisecond)))
		if rng.IntN(100) < 15 {
			delay = time.Millisecond + time.Duration(rng.Int64N(int64(12*time.Millisecond)))
		}
		// The last work cycle, if no kill so far landed while the child was
		// writing, kills it once it has acknowledged writes of this cycle,
		// so the harness never passes with every kill before the workload
		// ran (a run of -short is one cycle, 15% of whose kills are early).
		killAtAcks := 0
		if cycle == cycles && midWork == 0 {
			killAtAcks = l.acks + 1 + rng.IntN(40)
		}
		acksBefore := l.acks
		run := runChild(t, cfg, l, delay, killAtAcks)
		require.True(t, run.killed, "cycle %d: the child exited before it was killed (%v); its stderr:\n%s", cycle, run.waitErr, run.stderr)
		kills++
		switch {
		case !l.ready:
			early++ // killed while opening the store or resuming
		case l.acks > acksBefore:
			midWork++ // killed while the workload ran, after acknowledged writes
		}
		v := verifyDir(t, cfg, l, false)
		report(v)
		require.Empty(t, l.problems, "cycle %d (seed %d): the child reported problems; its stderr:\n%s", cycle, seed, run.stderr)
		require.Empty(t, v.violations, "cycle %d (seed %d): %s", cycle, seed, v)
		when := fmt.Sprintf("after %v", delay.Round(time.Millisecond))
		if killAtAcks > 0 {
			when += fmt.Sprintf(" and %d acknowledged facts", killAtAcks)
		}
		t.Logf("cycle %d: killed %s (child ready: %t); %d events, %d acknowledged facts checked", cycle, when, l.ready, v.events, v.acks)
		l.ready = false
	}

	cfg.Mode, cfg.Cycle, cfg.Seed = modeSettle, cycles+1, rng.Uint64()
	run := runChild(t, cfg, l, 0, 0)
	require.NoError(t, run.waitErr, "the settling child failed; its stderr:\n%s", run.stderr)
	require.Empty(t, l.problems, "settle (seed %d): the child reported problems; its stderr:\n%s", seed, run.stderr)
	require.True(t, l.settled, "the settling child never reported settled; its stderr:\n%s", run.stderr)
	v := verifyDir(t, cfg, l, true)
	report(v)
	require.Empty(t, v.violations, "after settling (seed %d): %s", seed, v)
	side, err := readSideFile(cfg.Side)
	require.NoError(t, err)
	// Not vacuous: every cycle was a kill, at least one of them landed
	// while the workload was writing, and acknowledged writes were
	// compared with the store.
	require.Equal(t, cycles, kills, "every work cycle ended in a SIGKILL")
	require.Positive(t, midWork, "no kill landed after the child had acknowledged writes")
	require.Positive(t, l.acks, "the children acknowledged nothing")
	require.Positive(t, checks, "no acknowledged fact was compared with the store")
	require.Positive(t, v.events, "the store holds no event")
	require.NotEmpty(t, side, "the work tool never ran")
	if cycles >= longCycles/2 {
		// 54 to 87 re-dispatches in the recorded 100-cycle runs.
		require.Positive(t, redispatches, "%d cycles and no server call was re-dispatched after a kill", cycles)
	}
	t.Logf("kill -9 harness: cycles=%d kills=%d (%d before the child was ready, %d after acknowledged writes) violations=%d time=%s seed=%d; "+
		"at the end: %d events in %d conversations, %d acknowledged facts, %d tool runs, %d re-dispatched under the same id; "+
		"re-checked after every kill: %d event checks, %d fact checks, %d summary checks",
		cycles, kills, early, midWork, len(v.violations), time.Since(start).Round(time.Second), seed,
		v.events, cfg.Convs, l.acks, len(side), redispatches, events, checks, summaries)
}

// childRun is the outcome of one child process.
type childRun struct {
	killed  bool
	waitErr error
	stderr  string
}

// runChild runs one child process with cfg, feeding its protocol lines to
// l. With killAfter > 0 it kills the child with SIGKILL that long after its
// start, or, with killAtAcks > 0, as soon as the ledger has counted
// killAtAcks acknowledged facts (whichever comes later); otherwise it waits
// for the child to exit (bounded).
func runChild(t *testing.T, cfg childConfig, l *ledger, killAfter time.Duration, killAtAcks int) childRun {
	t.Helper()
	cmd, err := childCommand(cfg)
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	stderr := &tailBuffer{max: 16 << 10}
	cmd.Stderr = stderr
	require.NoError(t, cmd.Start())

	// The reader owns the ledger until it is done.
	read := make(chan struct{})
	acked := make(chan struct{}) // closed once l.acks >= killAtAcks
	go func() {
		defer close(read)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		signalled := false
		for sc.Scan() {
			l.absorb(sc.Text(), cfg.Cycle)
			if killAtAcks > 0 && !signalled && l.acks >= killAtAcks {
				signalled = true
				close(acked)
			}
		}
	}()

	var kill <-chan time.Time
	if killAfter > 0 {
		// The kill's moment is the point of the harness, not synchronisation.
		timer := time.NewTimer(killAfter)
		defer timer.Stop()
		kill = timer.C
	}
	if killAtAcks > 0 {
		// Kill after both the delay and the acknowledgements: once the
		// timer fired, wait for the acks instead.
		timerDone := kill
		ackOrRead := make(chan time.Time, 1)
		go func() {
			if timerDone != nil {
				select {
				case <-timerDone:
				case <-read:
					return
				}
			}
			select {
			case <-acked:
				ackOrRead <- time.Now()
			case <-read:
			}
		}()
		kill = ackOrRead
	}
	bound := time.NewTimer(cfg.SettleWithin + 2*time.Minute)
	defer bound.Stop()
	run := childRun{}
	select {
	case <-kill:
		require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
		run.killed = true
	case <-read: // the child exited on its own
	case <-bound.C:
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-read
		_ = cmd.Wait()
		t.Fatalf("the child (cycle %d) did not finish within %v; its stderr:\n%s", cfg.Cycle, cfg.SettleWithin+2*time.Minute, stderr.String())
	}
	<-read
	run.waitErr = cmd.Wait()
	run.stderr = stderr.String()
	return run
}

// verifyDir opens the store the children write (no child is running) and
// checks it.
func verifyDir(t *testing.T, cfg childConfig, l *ledger, final bool) *verdict {
	t.Helper()
	s, err := openChildStore(cfg)
	require.NoError(t, err, "the parent opens the store after a kill")
	defer func() { require.NoError(t, s.Close()) }()
	side, err := readSideFile(cfg.Side)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return verifyStore(ctx, s, checkInput{convs: convIDs(cfg.Convs), ledger: l, side: side, final: final, keys: true})
}

// openChildStore opens the store the children of cfg write.
func openChildStore(cfg childConfig) (journal.Store, error) {
	if cfg.Postgres != "" {
		return pgjournal.Open(context.Background(), cfg.Postgres, pgjournal.Options{})
	}
	return pebblejournal.Open(cfg.Dir, pebblejournal.Options{})
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (w *tailBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b = append(w.b, p...)
	if len(w.b) > w.max {
		w.b = append([]byte(nil), w.b[len(w.b)-w.max:]...)
	}
	return len(p), nil
}

func (w *tailBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(w.b)
}
