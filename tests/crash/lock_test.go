package crash

import (
	"bufio"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal/pebblejournal"
)

// TestSecondProcessIsLockedOut: while a child process holds a Runtime open
// on a directory (it has written a few turns and reported them), this
// process's lazarus.Open on the same directory fails with an error that
// names the lock, and so does opening the store directly. Once the child
// has closed its Runtime and exited, the directory opens, the child's
// acknowledged data is all there, and a new Runtime carries on.
func TestSecondProcessIsLockedOut(t *testing.T) {
	dir := t.TempDir()
	cfg := childConfig{Mode: modeHold, Dir: filepath.Join(dir, "db"), Side: filepath.Join(dir, "work-runs.log"), Convs: 3, Cycle: 1}
	cmd, err := childCommand(cfg)
	require.NoError(t, err)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	stderr := &tailBuffer{max: 16 << 10}
	cmd.Stderr = stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	l := newLedger()
	holding := make(chan struct{})
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			l.absorb(sc.Text(), cfg.Cycle)
			if strings.HasPrefix(sc.Text(), linePrefix+"holding") {
				close(holding)
			}
		}
	}()
	timer := time.NewTimer(time.Minute)
	defer timer.Stop()
	select {
	case <-holding:
	case <-read:
		t.Fatalf("the child exited before holding the directory; its stderr:\n%s", stderr.String())
	case <-timer.C:
		t.Fatalf("the child never held the directory; its stderr:\n%s", stderr.String())
	}

	_, err = lazarus.Open(lazarus.Options{Dir: cfg.Dir, Model: scripted.New(scripted.Options{})})
	require.Error(t, err, "a second process opened a directory another process holds")
	require.Contains(t, err.Error(), "lock", "the error names the lock")
	t.Logf("the second process's Open: %v", err)
	_, err = pebblejournal.Open(cfg.Dir, pebblejournal.Options{})
	require.Error(t, err)
	require.Contains(t, err.Error(), "locked")

	require.NoError(t, stdin.Close()) // the child closes its Runtime and exits
	select {
	case <-read:
	case <-timer.C:
		t.Fatalf("the child did not exit once released; its stderr:\n%s", stderr.String())
	}
	require.NoError(t, cmd.Wait(), "the holding child failed; its stderr:\n%s", stderr.String())
	require.Empty(t, l.problems)
	require.Len(t, l.sends, cfg.Convs)

	s, err := pebblejournal.Open(cfg.Dir, pebblejournal.Options{})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	v := verifyStore(ctx, s, checkInput{convs: convIDs(cfg.Convs), ledger: l, final: true})
	require.NoError(t, s.Close())
	require.Empty(t, v.violations, "%s", v)
	require.Positive(t, v.acks)

	rt, err := lazarus.Open(lazarus.Options{Dir: cfg.Dir, Model: scripted.New(scripted.Options{})})
	require.NoError(t, err, "the directory opens once the child is gone")
	defer func() { require.NoError(t, rt.Close()) }()
	seq, err := rt.Send(ctx, convIDs(cfg.Convs)[0], "still there?", agent.Scope{UserID: "u"})
	require.NoError(t, err)
	require.EqualValues(t, 3, seq, "the conversation carries on after the child's turn")
}
