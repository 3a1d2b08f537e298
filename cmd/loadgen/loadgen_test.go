package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestHistogramQuantiles(t *testing.T) {
	var h histogram
	require.Zero(t, h.Quantile(0.5))
	for i := 1; i <= 1000; i++ {
		h.Record(time.Duration(i) * time.Microsecond)
	}
	require.EqualValues(t, 1000, h.Count())
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 500 * time.Microsecond}, {0.99, 990 * time.Microsecond}, {0.999, 999 * time.Microsecond}} {
		got := h.Quantile(tc.q)
		require.InEpsilonf(t, float64(tc.want), float64(got), 0.04, "q%v: %v", tc.q, got)
	}
	require.Equal(t, 1000*time.Microsecond, h.Max())
	require.Equal(t, 500500*time.Nanosecond, h.Mean())
	h.Record(-time.Second) // counted as zero
	require.Zero(t, h.Quantile(0))
}

func TestHistogramQuantileSince(t *testing.T) {
	var h histogram
	got, snap := h.QuantileSince(nil, 0.99)
	require.Zero(t, got, "no data")
	for i := 0; i < 1000; i++ {
		h.Record(100 * time.Millisecond) // a slow first interval
	}
	got, snap = h.QuantileSince(snap, 0.99)
	require.InEpsilon(t, float64(100*time.Millisecond), float64(got), 0.04)
	for i := 0; i < 1000; i++ {
		h.Record(time.Millisecond) // a fast second one
	}
	got, snap = h.QuantileSince(snap, 0.99)
	require.InEpsilon(t, float64(time.Millisecond), float64(got), 0.04, "only the second interval's durations count")
	require.InEpsilon(t, float64(100*time.Millisecond), float64(h.Quantile(0.99)), 0.04, "the whole run's p99 is unchanged")
	got, _ = h.QuantileSince(snap, 0.99)
	require.Zero(t, got, "nothing recorded since")
}

func TestBuckets(t *testing.T) {
	prev := -1
	for _, ns := range []uint64{0, 1, 31, 32, 33, 63, 64, 1000, 1 << 20, 1<<40 + 12345, 1 << 62} {
		b := bucket(ns)
		require.Greater(t, b, prev, "buckets grow with the duration")
		require.LessOrEqual(t, lower(b), ns)
		require.Greater(t, lower(b+1), ns)
		prev = b
	}
}

func TestParseFlags(t *testing.T) {
	cfg, err := parseFlags(nil, nil)
	require.NoError(t, err)
	require.Equal(t, 1024, cfg.Conversations)
	require.Equal(t, 10*time.Second, cfg.Duration)
	require.Zero(t, cfg.Think)
	require.True(t, cfg.Baseline)
	// The rest of BENCHMARKS.md's "Defaults": the first second a warm-up, a
	// summary every 10 turns, 5% human turns answered after 20 ms, a kill
	// every 20 ms; and -h's for baseline (b).
	require.Equal(t, time.Second, cfg.Warmup)
	require.Equal(t, 10, cfg.SummaryEvery)
	require.Equal(t, 0.05, cfg.HumanFraction)
	require.Equal(t, 20*time.Millisecond, cfg.HumanDelay)
	require.Equal(t, 20*time.Millisecond, cfg.KillEvery)
	require.Equal(t, 100_000, cfg.RevivalEvents)
	require.Equal(t, 200, cfg.RevivalSamples)
	require.Equal(t, 5, cfg.ReplaySamples)
	require.Zero(t, cfg.Rate, "closed loop")
	require.Empty(t, cfg.Dir, "a temporary directory")
	_, err = parseFlags([]string{"--revival-events", "101"}, nil)
	require.Error(t, err)
	_, err = parseFlags([]string{"--conversations", "0"}, nil)
	require.Error(t, err)
	_, err = parseFlags([]string{"--gomaxprocs", "-1"}, nil)
	require.Error(t, err)
	_, err = parseFlags([]string{"--rate", "-1"}, nil)
	require.Error(t, err)
	_, err = parseFlags([]string{"--open-loop", "--rate", "100"}, nil)
	require.Error(t, err, "--open-loop sets the rates itself")
	_, err = parseFlags([]string{"--single", "--single-rounds", "0"}, nil)
	require.Error(t, err)
	_, err = parseFlags([]string{"--single", "--postgres", "postgres://127.0.0.1/x"}, nil)
	require.ErrorContains(t, err, "leave --postgres out", "--single measures Pebble only")
	// The trace window must start in the runtime phase, or the trace file
	// is left empty.
	_, err = parseFlags([]string{"--trace", "t.out", "--duration", "2s"}, nil)
	require.ErrorContains(t, err, "--trace-from must be within [0, --duration)", "the default --trace-from, 3s, is past a 2s phase")
	_, err = parseFlags([]string{"--trace", "t.out", "--trace-from", "-1s"}, nil)
	require.Error(t, err)
	_, err = parseFlags([]string{"--trace", "t.out", "--duration", "2s", "--trace-from", "0s"}, nil)
	require.NoError(t, err)
	_, err = parseFlags([]string{"--duration", "2s"}, nil)
	require.NoError(t, err, "--trace-from alone is no trace")
}

func TestTextLike(t *testing.T) {
	require.Len(t, textLike(400), 400)
	require.GreaterOrEqual(t, len(jsonLike(2048)), 2048)
	require.Len(t, text(400), 400)
	require.NotEqual(t, text(400), text(400), "payloads are cut from random places")
	r := jsonResult(2048)
	require.GreaterOrEqual(t, len(r), 2048)
	require.True(t, json.Valid([]byte(r)))
}

// TestRunSmall runs every phase briefly, on a small workload: it checks
// that each produces figures, not how good they are. A starved machine can
// take seconds over the first turns, so the phases go on until they
// measured a few (--min-measured).
func TestRunSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the load generator for a few seconds")
	}
	cfg, err := parseFlags([]string{"--conversations", "8", "--duration", "1s", "--warmup", "200ms", "--min-measured", "3", "--kill-every", "50ms", "--human", "0.3",
		"--human-delay", "1ms", "--summary-every", "2", "--revival-events", "200", "--revival-samples", "3", "--replay-samples", "1",
		"--gomaxprocs", "3", "--dir", t.TempDir()}, nil)
	require.NoError(t, err)
	procs := runtime.GOMAXPROCS(0)
	rep, err := run(t.Context(), cfg)
	require.NoError(t, err)
	require.Equal(t, 3, rep.Machine.GoMaxProcs, "the run used the GOMAXPROCS asked for")
	require.Equal(t, procs, runtime.GOMAXPROCS(0), "and restored the process's")
	require.Positive(t, rep.Runtime.Events)
	require.GreaterOrEqual(t, rep.Runtime.Turns, uint64(3), "the phase lasts until 3 turns were measured")
	require.Positive(t, rep.Runtime.StoredEvents)
	require.Positive(t, rep.Runtime.SendAck.Count)
	require.NotNil(t, rep.RawPebble)
	require.GreaterOrEqual(t, rep.RawPebble.Events, uint64(3))
	require.NotNil(t, rep.Revival)
	require.EqualValues(t, 3, rep.Revival.LongRevival.Count)
	require.NotEmpty(t, rep.Targets)
}

// TestRunPhasesSmall runs the footprint, open-loop and single-conversation
// phases briefly: each reports figures, and the open-loop phases offer the
// shares of the closed-loop throughput they say.
func TestRunPhasesSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the load generator for a few seconds")
	}
	cfg, err := parseFlags([]string{"--conversations", "8", "--duration", "1s", "--warmup", "200ms", "--min-measured", "3", "--kill-every", "0",
		"--baseline=false", "--compact", "--open-loop", "--single", "--single-rounds", "2", "--single-round", "100ms", "--dir", t.TempDir()}, nil)
	require.NoError(t, err)
	rep, err := run(t.Context(), cfg)
	require.NoError(t, err)
	require.NotNil(t, rep.Runtime.Compacted)
	require.Positive(t, rep.Runtime.Compacted.DiskBytes)
	require.Len(t, rep.OpenLoop, len(openLoopFractions))
	for i, o := range rep.OpenLoop {
		require.Equal(t, openLoopFractions[i], o.Fraction)
		require.InDelta(t, o.Fraction*rep.Runtime.EventsPerSec, o.Offered, 1e-6)
		require.GreaterOrEqual(t, o.Result.Turns, uint64(3))
		require.Positive(t, o.Result.OfferedTurns, "turns arrived while measuring")
		require.Positive(t, o.Result.SendAck.Count)
		require.NotNil(t, o.Naive, "the naive Sets under the same open loop")
		require.Positive(t, o.Naive.SetAck.Count)
	}
	require.NotNil(t, rep.Single)
	require.Len(t, rep.Single.Rounds, 2)
	for _, r := range rep.Single.Rounds {
		require.Positive(t, r.AppendEvents)
		require.Positive(t, r.SetEvents)
	}
	require.GreaterOrEqual(t, rep.Single.Runtime.Turns, uint64(3))
	var names []string
	for _, tg := range rep.Targets {
		names = append(names, tg.Name)
	}
	require.Contains(t, names, "disk per event, compacted")
	require.Contains(t, names, "open loop at 50%, Send ack p99")
	require.Contains(t, names, "one conversation, Append over Set")
}

// TestCLIUsage: -h is status 0 and lists the flags, once; bad flags, bad
// values, a stray argument (which would silently end the flags) and a --dir
// that cannot be created are status 2 with the reason on stderr once,
// prefixed "loadgen:", and a usage hint, as cmd/lazarus says them (the flag
// package used to print its parse errors itself, then loadgen again).
func TestCLIUsage(t *testing.T) {
	var stdout, stderr bytes.Buffer
	require.Equal(t, 0, cli(t.Context(), []string{"-h"}, &stdout, &stderr))
	for _, f := range []string{"-conversations", "-duration", "-warmup", "-baseline", "-json", "-dir", "-kill-every", "-min-measured"} {
		assert.Contains(t, stderr.String(), f)
	}
	assert.Equal(t, 1, strings.Count(stderr.String(), "-conversations int"), "the flags are listed once:\n%s", stderr.String())
	assert.Contains(t, stderr.String(), "130 interrupted (SIGINT, SIGTERM, SIGHUP)", "-h says the exit statuses")
	assert.Contains(t, stderr.String(), "141 stdout or stderr closed")
	assert.Empty(t, stdout.String())
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"--no-such-flag"}, "flag provided but not defined: -no-such-flag"},
		{[]string{"--duration", "soon"}, `invalid value "soon" for flag -duration`},
		{[]string{"--duration", "0"}, "--duration must be positive"},
		{[]string{"stray", "--duration", "1ms"}, `unexpected argument "stray"`},
		{[]string{"--duration", "1ms", "stray"}, `unexpected argument "stray"`},
		{[]string{"--dir", filepath.Join(file, "stores")}, "cannot be used"},
		// Negative times and counts mean nothing; they used to be taken
		// silently as 0 (no think time, an immediate human, no kills, no
		// summaries).
		{[]string{"--think", "-1s"}, "--think must not be negative"},
		{[]string{"--human-delay", "-1ms"}, "--human-delay must not be negative"},
		{[]string{"--kill-every", "-20ms"}, "--kill-every must not be negative"},
		{[]string{"--summary-every", "-1"}, "--summary-every must not be negative"},
		// A profile or trace file that cannot be created is a bad path, as
		// a --dir is; it used to be found only when the run came to it,
		// and fail the runtime phase (status 1).
		{[]string{"--cpuprofile", filepath.Join(file, "cpu.out")}, "--cpuprofile " + filepath.Join(file, "cpu.out") + " cannot be created"},
		{[]string{"--memprofile", filepath.Join(file, "mem.out")}, "--memprofile " + filepath.Join(file, "mem.out") + " cannot be created"},
		{[]string{"--trace", filepath.Join(file, "trace.out")}, "--trace " + filepath.Join(file, "trace.out") + " cannot be created"},
	} {
		stdout.Reset()
		stderr.Reset()
		assert.Equal(t, 2, cli(t.Context(), tc.args, &stdout, &stderr), "%q", tc.args)
		assert.Equal(t, 1, strings.Count(stderr.String(), tc.says), "%q: the reason is said once:\n%s", tc.args, stderr.String())
		assert.True(t, strings.HasPrefix(stderr.String(), "loadgen: "), "%q:\n%s", tc.args, stderr.String())
		assert.Contains(t, stderr.String(), "Run 'loadgen -h' for the flags.", "%q", tc.args)
		assert.NotContains(t, stderr.String(), "-conversations int", "%q: a hint, not the whole list of flags", tc.args)
		assert.Empty(t, stdout.String(), "%q", tc.args)
	}
}

// TestCLIRunTwiceInOneDir runs loadgen briefly with --json and a --dir,
// then again on the same --dir: the first prints a JSON report and keeps
// its stores; the second is refused (status 2) before it runs, rather than
// reopening the first run's stores, whose conversations collide with its
// own (it failed in baseline (b), after a runtime phase on a used store).
func TestCLIRunTwiceInOneDir(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the load generator for a second")
	}
	dir := filepath.Join(t.TempDir(), "stores")
	args := []string{"--conversations", "4", "--duration", "300ms", "--warmup", "0s", "--min-measured", "1", "--kill-every", "0",
		"--revival-events", "200", "--revival-samples", "1", "--replay-samples", "1", "--dir", dir, "--json"}
	var stdout, stderr bytes.Buffer
	require.Equal(t, 0, cli(t.Context(), args, &stdout, &stderr), "stderr:\n%s", stderr.String())
	var rep report
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &rep), "the report is JSON:\n%s", stdout.String())
	assert.Positive(t, rep.Runtime.Events)
	assert.NotNil(t, rep.RawPebble)
	assert.NotNil(t, rep.Revival)
	for _, d := range []string{"runtime", "raw", "revival"} {
		_, err := os.Stat(filepath.Join(dir, d))
		require.NoError(t, err, "a given --dir keeps every store: %s", d)
	}
	assert.Contains(t, stderr.String(), "loadgen: runtime phase: 4 conversations for 300ms in "+dir+"\n")

	stdout.Reset()
	stderr.Reset()
	require.Equal(t, 2, cli(t.Context(), args, &stdout, &stderr), "stderr:\n%s", stderr.String())
	assert.Contains(t, stderr.String(), "--dir "+dir+" holds an earlier run's runtime")
	assert.Empty(t, stdout.String())
}

// TestCLIInterrupted: a run whose context ends (a signal) stops, reports
// what it measured, says it was interrupted and exits with status 130, not
// as a whole run; the --dir it was given is kept.
func TestCLIInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	code := cli(ctx, []string{"--conversations", "2", "--duration", "30s", "--kill-every", "0", "--json", "--dir", dir}, &stdout, &stderr)
	assert.Equal(t, 130, code, "stderr:\n%s", stderr.String())
	assert.Contains(t, stderr.String(), "loadgen: interrupted")
	var rep report
	assert.NoError(t, json.Unmarshal(stdout.Bytes(), &rep), "the report of what was measured:\n%s", stdout.String())
	_, err := os.Stat(filepath.Join(dir, "runtime"))
	assert.NoError(t, err, "a --dir is kept, interrupted too")
}

// phaseWatch is a run's stderr that, at each line announcing a phase,
// lists what the run's temporary directory (under tmp) holds then.
type phaseWatch struct {
	tmp    string
	mu     sync.Mutex
	starts []phaseStart
}

// phaseStart is what the temporary directory held when a phase started.
type phaseStart struct {
	line string
	left []string // the entries, or what went wrong listing them
}

// phaseLines start the lines that announce a phase.
var phaseLines = []string{"loadgen: runtime phase:", "loadgen: open loop:", "loadgen: open loop, naive synced Sets:",
	"loadgen: single conversation:", "loadgen: baseline (a):", "loadgen: baseline (b):"}

// Write implements io.Writer.
func (w *phaseWatch) Write(b []byte) (int, error) {
	line := string(b)
	if !slices.ContainsFunc(phaseLines, func(p string) bool { return strings.HasPrefix(line, p) }) {
		return len(b), nil
	}
	s := phaseStart{line: strings.TrimSpace(line)}
	dirs, err := filepath.Glob(filepath.Join(w.tmp, "lazarus-loadgen-*"))
	switch {
	case err != nil:
		s.left = []string{err.Error()}
	case len(dirs) != 1:
		s.left = []string{fmt.Sprintf("%d temporary directories: %q", len(dirs), dirs)}
	default:
		entries, err := os.ReadDir(dirs[0])
		if err != nil {
			s.left = []string{err.Error()}
		}
		for _, e := range entries {
			s.left = append(s.left, e.Name())
		}
	}
	w.mu.Lock()
	w.starts = append(w.starts, s)
	w.mu.Unlock()
	return len(b), nil
}

// TestRunFreesEachStore runs every phase briefly in loadgen's temporary
// directory: when each phase starts, the stores of the phases before it
// are gone, while the figures taken from a store after its phase (its disk
// per event, --compact's footprint) are in the report. Each store takes a
// few hundred MB (Pebble preallocates its WAL files), and a run used to
// keep all of them until its end, so that on a nearly full disk it failed
// part-way with ENOSPC.
func TestRunFreesEachStore(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the load generator for a few seconds")
	}
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	w := &phaseWatch{tmp: tmp}
	cfg, err := parseFlags([]string{"--conversations", "4", "--duration", "200ms", "--warmup", "0s", "--min-measured", "1", "--kill-every", "0",
		"--compact", "--open-loop", "--single", "--single-rounds", "1", "--single-round", "50ms",
		"--revival-events", "200", "--revival-samples", "1", "--replay-samples", "1"}, w)
	require.NoError(t, err)
	rep, err := run(t.Context(), cfg)
	require.NoError(t, err)

	w.mu.Lock()
	defer w.mu.Unlock()
	require.Len(t, w.starts, 1+2*len(openLoopFractions)+3, "every phase started: %q", w.starts)
	for _, s := range w.starts {
		assert.Empty(t, s.left, "%q: the stores of the phases before it are removed", s.line)
	}
	entries, err := os.ReadDir(tmp)
	require.NoError(t, err)
	assert.Empty(t, entries, "the temporary directory is removed at the end")

	// The figures taken from each store after its phase, before it went.
	require.Positive(t, rep.Runtime.DiskBytes)
	require.NotNil(t, rep.Runtime.Compacted)
	require.Positive(t, rep.Runtime.Compacted.DiskBytes)
	for _, o := range rep.OpenLoop {
		require.Positive(t, o.Result.DiskBytes)
		require.NotNil(t, o.Naive)
	}
	require.NotNil(t, rep.Single)
	require.NotNil(t, rep.RawPebble)
	require.Positive(t, rep.RawPebble.DiskBytes)
	require.NotNil(t, rep.RawPebble.Compacted)
	require.Positive(t, rep.RawPebble.Compacted.DiskBytes)
	require.NotNil(t, rep.Revival)
	require.EqualValues(t, 1, rep.Revival.LongRevival.Count)
}

// TestRunTraceThatCannotBeCreated: a --trace file that cannot be created
// fails the runtime phase before it opens a store or starts a driver,
// rather than returning with the Runtime, its store and the drivers of its
// conversations left running.
func TestRunTraceThatCannotBeCreated(t *testing.T) {
	dir := t.TempDir()
	trace := filepath.Join(dir, "no-such-dir", "trace.out")
	cfg, err := parseFlags([]string{"--conversations", "2", "--duration", "200ms", "--warmup", "0s", "--baseline=false",
		"--dir", dir, "--trace", trace, "--trace-from", "0s"}, io.Discard)
	require.NoError(t, err)
	_, err = run(t.Context(), cfg)
	require.ErrorContains(t, err, "--trace")
	require.ErrorIs(t, err, fs.ErrNotExist)
	_, err = os.Lstat(filepath.Join(dir, "runtime"))
	require.ErrorIs(t, err, fs.ErrNotExist, "the runtime phase opened no store")
}

// cancelAt is a run's stderr that cancels the run's context when a line
// starting with at is written: an interrupt as that phase begins.
type cancelAt struct {
	at     string
	cancel context.CancelFunc
	mu     sync.Mutex
	buf    bytes.Buffer
}

// Write implements io.Writer.
func (w *cancelAt) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if strings.HasPrefix(string(b), w.at) {
		w.cancel()
	}
	return w.buf.Write(b)
}

func (w *cancelAt) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// TestCLIInterruptedInEachPhase interrupts a run as each phase after the
// first begins: as documented, the run exits with status 130, says
// "loadgen: interrupted" and prints the report of the phases measured
// before. An interrupt in the single-conversation phase or a baseline used
// to fail that phase with the context's error, so the run exited with
// status 1 ("a phase failed") and printed no report at all.
func TestCLIInterruptedInEachPhase(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the load generator for a few seconds")
	}
	for _, phase := range []string{"loadgen: open loop:", "loadgen: open loop, naive synced Sets:",
		"loadgen: single conversation:", "loadgen: baseline (a):", "loadgen: baseline (b):"} {
		t.Run(phase, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			stderr := &cancelAt{at: phase, cancel: cancel}
			var stdout bytes.Buffer
			code := cli(ctx, []string{"--conversations", "4", "--duration", "300ms", "--warmup", "0s", "--min-measured", "1", "--kill-every", "0",
				"--open-loop", "--single", "--single-rounds", "1", "--single-round", "50ms",
				"--revival-events", "200", "--revival-samples", "1", "--replay-samples", "1", "--json", "--dir", t.TempDir()}, &stdout, stderr)
			said := stderr.String()
			require.Contains(t, said, phase, "the phase began")
			after := said[strings.Index(said, phase)+len(phase):]
			for _, p := range phaseLines {
				assert.NotContains(t, after, "\n"+p, "the later phases are skipped")
			}
			assert.Equal(t, exitSignal, code, "stderr:\n%s", said)
			assert.Contains(t, said, "loadgen: interrupted: the report covers what was measured until then")
			var rep report
			require.NoError(t, json.Unmarshal(stdout.Bytes(), &rep), "the report of what was measured:\n%s", stdout.String())
			assert.Positive(t, rep.Runtime.Turns, "the runtime phase, measured before the interrupt, is reported")
			assert.NotEmpty(t, rep.Interrupted, "the report names the phase interrupted")
		})
	}
}

// openFDsTo returns the descriptors of this process open on path.
func openFDsTo(t *testing.T, path string) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	var open []string
	for _, e := range entries {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && target == path {
			open = append(open, e.Name())
		}
	}
	return open
}

// TestRunClosesTheCPUProfile: the --cpuprofile file is closed when the
// runtime phase ends, and when the profile cannot start (here, because
// one is already running); it used to stay open for the rest of the
// process in both cases. checkOutputs, which runs before, leaves no file
// behind.
func TestRunClosesTheCPUProfile(t *testing.T) {
	dir := t.TempDir()
	profile := filepath.Join(dir, "cpu.out")
	cfg, err := parseFlags([]string{"--conversations", "2", "--duration", "100ms", "--warmup", "0s", "--kill-every", "0", "--baseline=false",
		"--dir", filepath.Join(dir, "stores"), "--cpuprofile", profile}, io.Discard)
	require.NoError(t, err)
	require.NoError(t, checkOutputs(cfg))
	_, err = os.Lstat(profile)
	require.ErrorIs(t, err, fs.ErrNotExist, "checkOutputs leaves no file behind")

	_, err = run(t.Context(), cfg)
	require.NoError(t, err)
	info, err := os.Stat(profile)
	require.NoError(t, err)
	assert.Positive(t, info.Size(), "the profile is written")
	assert.Empty(t, openFDsTo(t, profile), "the profile is closed after the phase")

	var other bytes.Buffer
	require.NoError(t, pprof.StartCPUProfile(&other), "no other CPU profile runs in this test")
	defer pprof.StopCPUProfile()
	cfg.Dir = filepath.Join(dir, "stores-2")
	_, err = run(t.Context(), cfg)
	require.ErrorContains(t, err, "--cpuprofile")
	assert.Empty(t, openFDsTo(t, profile), "the profile is closed when it cannot start")
}

// TestCLIInterruptedMidPhase interrupts the single-conversation phase after
// its first round, and baseline (b) after its first round of samples: the
// report has what the phase measured until then (the finished round, the
// samples taken), and names the phase as interrupted. Both used to be left
// out of the report, though the docs promise the report so far.
func TestCLIInterruptedMidPhase(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the load generator for a few seconds")
	}
	common := []string{"--conversations", "4", "--duration", "300ms", "--warmup", "0s", "--min-measured", "1", "--kill-every", "0", "--json"}
	for _, tc := range []struct {
		phase, interrupted string
		args               []string
		check              func(t *testing.T, rep report)
	}{
		{"single", "single conversation", []string{"--baseline=false", "--single", "--single-rounds", "3", "--single-round", "50ms"}, func(t *testing.T, rep report) {
			require.NotNil(t, rep.Single, "the single-conversation phase's finished round is reported")
			require.Len(t, rep.Single.Rounds, 1)
			assert.Positive(t, rep.Single.Rounds[0].AppendEvents)
			assert.Positive(t, rep.Single.Rounds[0].SetEvents)
			assert.Nil(t, rep.Single.Runtime, "the one-conversation runtime did not run")
		}},
		{"revival", "baseline (b)", []string{"--revival-events", "200", "--revival-samples", "3", "--replay-samples", "1"}, func(t *testing.T, rep report) {
			require.NotNil(t, rep.RawPebble, "baseline (a), before, is reported")
			require.NotNil(t, rep.Revival, "baseline (b)'s samples are reported")
			assert.Equal(t, 1, rep.Revival.Samples)
			assert.EqualValues(t, 1, rep.Revival.LongRevival.Count)
			assert.EqualValues(t, 1, rep.Revival.ShortRevival.Count)
			assert.EqualValues(t, 0, rep.Revival.FullReplay.Count, "the replays did not run")
		}},
	} {
		t.Run(tc.phase, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			defer func(f func(string, int)) { afterSample = f }(afterSample)
			afterSample = func(phase string, n int) {
				if phase == tc.phase && n == 1 {
					cancel()
				}
			}
			var stdout, stderr bytes.Buffer
			code := cli(ctx, append(append([]string(nil), common...), tc.args...), &stdout, &stderr)
			assert.Equal(t, exitSignal, code, "stderr:\n%s", stderr.String())
			var rep report
			require.NoError(t, json.Unmarshal(stdout.Bytes(), &rep), "the report of what was measured:\n%s", stdout.String())
			assert.Equal(t, tc.interrupted, rep.Interrupted)
			tc.check(t, rep)

			var text bytes.Buffer
			printReport(&text, &rep)
			assert.Contains(t, text.String(), "INTERRUPTED in the "+tc.interrupted+" phase")
		})
	}
}

// TestHelpAsAFlagValue: a help flag where a flag's value is expected
// (--postgres --help) prints the flags, status 0, for every flag taking a
// value, also after an unknown flag, as the package documents; the flag
// package took it as the value, and loadgen ran against a DSN "--help". A
// value that reads as a help flag is given with "=".
func TestHelpAsAFlagValue(t *testing.T) {
	var stdout, stderr bytes.Buffer
	require.Equal(t, 0, cli(t.Context(), []string{"-h"}, &stdout, &stderr))
	var valued []string
	for _, line := range strings.Split(stderr.String(), "\n") {
		// "  -conversations int": a flag taking a value.
		head, _, _ := strings.Cut(line, "\t")
		if f := strings.Fields(head); len(f) == 2 && strings.HasPrefix(head, "  -") {
			valued = append(valued, "-"+f[0])
		}
	}
	require.Subset(t, valued, []string{"--postgres", "--dir", "--conversations", "--duration"}, stderr.String())
	for _, fl := range valued {
		for _, h := range []string{"--help", "-h"} {
			for _, args := range [][]string{{fl, h}, {fl, h, "x"}, {"--json", fl, h}, {"--nope", fl, h}} {
				var stderr bytes.Buffer
				_, err := parseFlags(args, &stderr)
				require.ErrorIs(t, err, flag.ErrHelp, "%q", args)
				require.True(t, strings.HasPrefix(stderr.String(), "Usage: loadgen [flags]"), "%q prints the flags: %s", args, stderr.String())
			}
		}
	}
	cfg, err := parseFlags([]string{"--postgres=--help"}, io.Discard)
	require.NoError(t, err)
	require.Equal(t, "--help", cfg.Postgres, `with "=" it is the value`)
}
