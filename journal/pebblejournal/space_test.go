package pebblejournal

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/stretchr/testify/require"
)

// openWithin runs Open in a goroutine and fails the test if it has not
// returned within limit (generous: the point is that it returns at all).
func openWithin(t *testing.T, limit time.Duration, dir string, opts Options) (*Store, error) {
	t.Helper()
	type result struct {
		s   *Store
		err error
	}
	done := make(chan result, 1)
	go func() {
		s, err := Open(dir, opts)
		done <- result{s, err}
	}()
	select {
	case r := <-done:
		if r.s != nil {
			t.Cleanup(func() { _ = r.s.Close() })
		}
		return r.s, r.err
	case <-time.After(limit):
		t.Fatalf("Open did not return within %s", limit)
		return nil, nil
	}
}

// bigEvent is a user message of about n bytes of text-like content.
func bigEvent(i, n int) *messages.Event {
	return userEvent(fmt.Sprintf("%06d %s", i, strings.Repeat("lorem ipsum dolor sit amet ", n/27)))
}

// requireEvents checks that conv's log is exactly seqs 1..n.
func requireEvents(t *testing.T, s *Store, conv string, n uint64) {
	t.Helper()
	evs, err := s.Events(ctx, conv, journal.EventQuery{})
	require.NoError(t, err)
	require.Len(t, evs, int(n))
	for i, ev := range evs {
		require.EqualValues(t, i+1, ev.GetSeq())
	}
}

// TestOpenOnFullTmpfs reproduces issue 12 item 2 on a real full disk: an
// 8 MiB tmpfs. A store fills it and stops; Open before space is freed
// returns at once with ErrNoSpace (it used to spin forever retrying the
// replay flush); once space is freed, Open recovers every acknowledged
// event.
func TestOpenOnFullTmpfs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root; TestOpenOnFullDiskErrorFS covers the same path with an injected full disk")
	}
	mnt := t.TempDir()
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, "size=8m"); err != nil {
		t.Skipf("cannot mount a tmpfs here (%v); TestOpenOnFullDiskErrorFS covers the same path with an injected full disk", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(mnt, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", mnt, err)
		}
	})
	// Most of the disk is taken by something else; freeing it is the
	// operator's cure.
	filler := filepath.Join(mnt, "filler")
	require.NoError(t, os.WriteFile(filler, make([]byte, 5<<20), 0o644))
	dir := filepath.Join(mnt, "db")

	s, err := Open(dir, Options{})
	require.NoError(t, err)
	var acked uint64
	var werr error
	for i := 1; i < 10_000; i++ {
		_, werr = s.Append(ctx, &messages.AppendRequest{ConversationId: "c", ExpectedLast: acked, Events: []*messages.Event{bigEvent(i, 4096)}})
		if werr != nil {
			break
		}
		acked++
	}
	require.Error(t, werr, "the disk never filled")
	require.ErrorIs(t, werr, journal.ErrClosed)
	require.ErrorIs(t, werr, journal.ErrNoSpace)
	require.Positive(t, acked)
	_ = s.Close()

	// Still full: a bounded, clear refusal, not a spinning hang.
	_, err = openWithin(t, time.Minute, dir, Options{})
	require.ErrorIs(t, err, journal.ErrNoSpace)
	_, err = os.Stat(filepath.Join(dir, openReserveName))
	require.ErrorIs(t, err, os.ErrNotExist, "the reserve is removed")

	require.NoError(t, os.Remove(filler))
	s, err = openWithin(t, time.Minute, dir, Options{})
	require.NoError(t, err)
	requireEvents(t, s, "c", acked)
}

// fullDisk is an errorfs injector that fails every write-like operation
// with ENOSPC while on.
type fullDisk struct {
	mu    sync.Mutex
	on    bool
	match func(op errorfs.Op) bool
	hits  []time.Time
}

func (f *fullDisk) String() string { return "full disk" }

func (f *fullDisk) MaybeError(op errorfs.Op) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.on || !f.match(op) {
		return nil
	}
	f.hits = append(f.hits, time.Now())
	return &os.PathError{Op: "write", Path: op.Path, Err: syscall.ENOSPC}
}

func (f *fullDisk) set(on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.on = on
}

func (f *fullDisk) hitTimes() []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Time(nil), f.hits...)
}

func writeOps(op errorfs.Op) bool {
	switch op.Kind {
	case errorfs.OpCreate, errorfs.OpFileWrite, errorfs.OpFileWriteAt, errorfs.OpFilePreallocate, errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
		return true
	}
	return false
}

// TestOpenOnFullDiskErrorFS is TestOpenOnFullTmpfs with Pebble's errorfs:
// every write fails with ENOSPC once the store is closed, and Open returns
// ErrNoSpace at once; when writes work again, Open recovers everything.
func TestOpenOnFullDiskErrorFS(t *testing.T) {
	mem := vfs.NewMem()
	inj := &fullDisk{match: writeOps}
	fs := errorfs.Wrap(mem, inj)

	s, err := Open("db", Options{FS: fs})
	require.NoError(t, err)
	last := appendN(t, s, "c", 0, 50)
	require.NoError(t, s.Close())

	inj.set(true)
	_, err = openWithin(t, time.Minute, "db", Options{FS: fs})
	require.ErrorIs(t, err, journal.ErrNoSpace)
	require.Contains(t, err.Error(), syscall.ENOSPC.Error(), "the cause is kept")

	inj.set(false)
	s, err = openWithin(t, time.Minute, "db", Options{FS: fs})
	require.NoError(t, err)
	requireEvents(t, s, "c", last)
}

// TestOpenFlushFailureDoesNotSpin: when the replay flush fails although
// the reserve passed (here only table files cannot be created), Open
// retries the flush with a growing pause instead of at once (it used to
// retry thousands of times a second), and returns with every event once
// the flush can succeed.
func TestOpenFlushFailureDoesNotSpin(t *testing.T) {
	mem := vfs.NewMem()
	inj := &fullDisk{match: func(op errorfs.Op) bool {
		return op.Kind == errorfs.OpCreate && strings.HasSuffix(op.Path, ".sst")
	}}
	fs := errorfs.Wrap(mem, inj)

	s, err := Open("db", Options{FS: fs})
	require.NoError(t, err)
	last := appendN(t, s, "c", 0, 50)
	require.NoError(t, s.Close())

	inj.set(true)
	type result struct {
		s   *Store
		err error
	}
	done := make(chan result, 1)
	go func() {
		s, err := Open("db", Options{FS: fs})
		done <- result{s, err}
	}()
	const attempts = 6
	require.Eventually(t, func() bool { return len(inj.hitTimes()) >= attempts }, time.Minute, 5*time.Millisecond)
	hits := inj.hitTimes()
	// The pauses before attempts 2..6 add up to at least 10+20+40+80+160 ms;
	// without them the attempts come microseconds apart. A busy machine
	// only makes the gap longer.
	var minGap time.Duration
	for n := int64(1); n < attempts; n++ {
		minGap += backgroundBackoff(n)
	}
	require.GreaterOrEqual(t, hits[attempts-1].Sub(hits[0]), minGap-time.Millisecond)
	select {
	case r := <-done:
		t.Fatalf("Open returned while the flush could not succeed: %v", r.err)
	default:
	}

	inj.set(false)
	var r result
	select {
	case r = <-done:
	case <-time.After(time.Minute):
		t.Fatal("Open did not return once the flush could succeed")
	}
	require.NoError(t, r.err)
	t.Cleanup(func() { _ = r.s.Close() })
	requireEvents(t, r.s, "c", last)
}

func TestFlushBackoffBounded(t *testing.T) {
	require.Equal(t, minBackgroundBackoff, backgroundBackoff(1))
	require.Equal(t, 2*minBackgroundBackoff, backgroundBackoff(2))
	require.Equal(t, maxBackgroundBackoff, backgroundBackoff(1000))
}

// TestCompactKeepsData: Compact moves everything out of the memtables and
// L0 (the directory then holds no uncompressed flush of the log), the log
// reads back whole, writes go on after it, and a closed store refuses it.
func TestCompactKeepsData(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	require.NoError(t, err)
	last := appendN(t, s, "c", 0, 200)
	require.NoError(t, s.Compact(ctx))
	m := s.db.Metrics()
	require.Zero(t, m.Levels[0].TablesCount, "L0 tables after Compact")
	require.Positive(t, m.Levels[6].TablesCount, "bottom level tables after Compact")
	requireEvents(t, s, "c", last)
	last = appendN(t, s, "c", last, 1)
	requireEvents(t, s, "c", last)
	require.NoError(t, s.Close())
	require.ErrorIs(t, s.Compact(ctx), journal.ErrClosed)
}
