package pebblejournal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"log/slog"
	"math/bits"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"google.golang.org/protobuf/types/known/timestamppb"
)

var _ journal.Store = (*Store)(nil)

// Lock striping. See the lock-ordering comment on Store.
const (
	convStripes = 512
	idStripes   = 512
	// headsPerStripe bounds the head cache: at most this many conversations
	// per stripe (256Ki in all).
	headsPerStripe = 512
)

// layoutKey holds the version of the key layout; Open refuses a store
// written with a layout it cannot read.
var layoutKey = []byte{famMeta, 'l', 'a', 'y', 'o', 'u', 't'}

// layoutVersion is the layout this build writes. v2 added tool call rows
// whose result lives only in their tool_result event (result_seq), and
// moved the tool call owner index from family 0x20 to 0x22; v3 added the
// index of ACTIVE conversations (family 0x0a), which a v2 build would not
// keep, so a build that reads v1 or v2 must refuse a v3 store.
const layoutVersion = "lazarus.pebblejournal.v3"

// layoutV1 and layoutV2 are the layouts before v3. Open upgrades them: a
// v1 store's owner index moves (see upgradeV1), then a v1 or v2 store gets
// its active index and is recorded v3 in one batch (see buildActiveIndex).
const (
	layoutV1 = "lazarus.pebblejournal.v1"
	layoutV2 = "lazarus.pebblejournal.v2"
)

// upgradeChunk bounds the owner keys that one batch of upgradeV1 moves.
const upgradeChunk = 4096

var errClosed = fmt.Errorf("pebblejournal: %w", journal.ErrClosed)

// Store is a journal.Store on an embedded Pebble database. It is safe for
// concurrent use. Every write commits with a synced Pebble batch: a nil
// error means the write is durable.
//
// Locking. Pebble has no transactions, so every conditional write (append
// fence, resolve-only-if-pending, tool call id ownership, the tombstone
// check) holds locks across its read-check-commit:
//
//   - gate (RWMutex): every method holds it for reading for its whole
//     duration; Close holds it for writing. It is never taken twice by one
//     goroutine (Deadlines releases it between pages, before calling fn).
//   - convLocks[hash(conversation id) % convStripes]: held by every write
//     that reads or changes a conversation's keys, across the synced commit.
//   - idLocks[hash(tool call id) % idStripes]: held by every write that may
//     claim a tool call id for a conversation (the global owner index),
//     across the synced commit.
//   - dl.mu: guards the deadline low-water mark; never held across I/O or
//     while acquiring another lock.
//
// Order: gate, then conversation stripes in ascending stripe order, then id
// stripes in ascending stripe order, then dl.mu. A goroutine never acquires
// a lock earlier in this order while holding a later one, so there is no
// deadlock. Readers take only the gate: they see committed state through
// Pebble iterators (one iterator, one consistent view).
//
// Because the locks are held across the fsync, writes to different stripes
// commit concurrently and Pebble groups their syncs.
type Store struct {
	db       *pebble.DB
	fsCloser io.Closer
	log      *slog.Logger
	audit    bool
	readOnly bool // Options.ReadOnly
	now      func() time.Time

	// releaseProcs gives back the P the store added to GOMAXPROCS (procs.go).
	releaseProcs func()
	// releaseDir gives back the directory claimed in openDirs (dirlock.go).
	releaseDir func()

	gate   sync.RWMutex
	closed bool // guarded by gate

	failed atomic.Pointer[error] // set once by a fatal Pebble error

	// flushFailures counts consecutive failed flushes and flushFailed says
	// that the last flush failed (see space.go); closing is closed when
	// Close starts, ending a pause.
	flushFailures atomic.Int64
	flushFailed   atomic.Bool
	closing       chan struct{}

	seed      maphash.Seed
	convLocks [convStripes]sync.Mutex
	idLocks   [idStripes]sync.Mutex
	// fileLocks serialise, per blob (striped), its upload, the records
	// that name it and its sweep (files.go).
	fileLocks [fileStripes]sync.Mutex

	dl lowWater

	heads headCache
	calls callCache

	// batches keeps a few committed batches for reuse with their buffers.
	// Pebble pools batches in a sync.Pool, which every GC empties; a group
	// commit's batch of a few hundred KiB then regrows by doubling, which
	// was a quarter of all allocation in the load generator.
	batches chan *pebble.Batch

	// scheduleOwners says that the store held a key of the retired
	// schedule owner family when it opened (schedule.go): the delete and
	// the replace of a schedule then remove its id's key. Set by Open.
	scheduleOwners bool
}

// reusedBatches is how many batches Store.batches keeps, and
// maxReusedBatchBytes the largest buffer a kept batch retains: a group
// commit of 1,024 requests after a slow sync reaches a few MiB.
const (
	reusedBatches       = 4
	maxReusedBatchBytes = 8 << 20
)

// ErrLocked is wrapped by the error of an Open whose directory another
// Store, in this process or another, has open.
var ErrLocked = errors.New("pebblejournal: the directory is locked")

// ErrUpgradeNeeded is wrapped by the error of a read-only Open
// (Options.ReadOnly) of a store that an Open that may write would upgrade
// first: a key layout before v3, or a metadata index never built. Such a
// store is sound; open it once without ReadOnly (a runtime, a command that
// writes) to upgrade it.
var ErrUpgradeNeeded = errors.New("pebblejournal: the store needs an upgrade, which a read-only open does not do")

// Open opens (creating if needed) the store in dir on opts.FS. Only one Store
// may have a directory open at a time: a second Open of the same directory,
// from this process or another, fails with an error wrapping ErrLocked
// while the first is open, whatever path names it (a symlink, a relative
// path). A directory holding a Pebble database that is not a Lazarus store
// (no layout version, and a key outside the layout's families) is refused with an error wrapping
// journal.ErrCorrupt, and left as it was; so are files Pebble cannot read
// as a database (garbage, a MANIFEST that is not there). A dir that is
// empty, holds a NUL byte, or names a file or a path under one is refused
// with an error wrapping journal.ErrInvalid, and so are Options outside the
// bounds their doc gives. With Options.ReadOnly it writes nothing: see
// there.
func Open(dir string, opts Options) (*Store, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Store{
		batches:  make(chan *pebble.Batch, reusedBatches),
		log:      o.Logger,
		audit:    o.Audit,
		readOnly: o.ReadOnly,
		now:      time.Now,
		seed:     maphash.MakeSeed(),
		closing:  make(chan struct{}),
	}
	fs := o.FS
	if err := checkIsDir(fs, dir); err != nil {
		return nil, err
	}
	releaseDir := func() {}
	if fs == nil || fs == vfs.Default {
		// Pebble's lock is keyed by the path as given (dirlock.go).
		if releaseDir, err = claimDir(dir, !o.ReadOnly); err != nil {
			return nil, err
		}
	}
	opened := false
	defer func() {
		if !opened {
			releaseDir()
		}
	}()
	var fsCloser io.Closer = nopCloser{}
	if fs == nil {
		if o.DiskSlowThreshold > 0 {
			fs, fsCloser = vfs.WithDiskHealthChecks(vfs.Default, o.DiskSlowThreshold, nil, func(info vfs.DiskSlowInfo) {
				s.log.Warn("pebblejournal: slow disk", "path", info.Path, "op", info.OpType.String(), "duration", info.Duration)
			})
		} else {
			fs = vfs.Default
		}
	}
	if !o.ReadOnly {
		if err := reserveForOpen(fs, dir); err != nil {
			_ = fsCloser.Close()
			return nil, err
		}
	}
	lower, upper := 1, o.MaxConcurrentCompactions
	popts := &pebble.Options{
		FS:                          fs,
		Logger:                      pebbleLogger{s},
		EventListener:               s.eventListener(o.EventListener),
		FormatMajorVersion:          FormatMajorVersion,
		CacheSize:                   o.CacheSize,
		MemTableSize:                o.MemTableSize,
		MemTableStopWritesThreshold: MemTableStopWritesThreshold,
		L0CompactionThreshold:       L0CompactionThreshold,
		L0StopWritesThreshold:       L0StopWritesThreshold,
		LBaseMaxBytes:               LBaseMaxBytes,
		CompactionConcurrencyRange:  func() (int, int) { return lower, upper },
		FlushDelayDeleteRange:       max(o.FlushDelayDeleteRange, 0),
		ReadOnly:                    o.ReadOnly,
	}
	SetLevelOptions(popts)
	db, err := pebble.Open(dir, popts)
	if err != nil {
		_ = fsCloser.Close()
		if strings.Contains(err.Error(), "lock") || errors.Is(err, syscall.EWOULDBLOCK) || errors.Is(err, syscall.EAGAIN) {
			return nil, fmt.Errorf("pebblejournal: open %q: %w: another Store, in this process or another, has it open (one Store per directory): %w", dir, ErrLocked, err)
		}
		return nil, openError(dir, err)
	}
	s.db = db
	s.fsCloser = fsCloser
	if err := s.checkLayout(); err != nil {
		if errors.Is(err, ErrUpgradeNeeded) {
			err = fmt.Errorf("pebblejournal: open %q read-only: %w", dir, err)
		}
		_ = db.Close()
		_ = fsCloser.Close()
		return nil, err
	}
	if err := s.ensureFindIndex(); err != nil {
		if errors.Is(err, ErrUpgradeNeeded) {
			err = fmt.Errorf("pebblejournal: open %q read-only: %w", dir, err)
		} else {
			err = fmt.Errorf("pebblejournal: build the metadata index: %w", err)
		}
		_ = db.Close()
		_ = fsCloser.Close()
		return nil, err
	}
	if s.scheduleOwners, err = s.hasScheduleOwners(); err != nil {
		err = fmt.Errorf("pebblejournal: open %q: %w", dir, err)
		_ = db.Close()
		_ = fsCloser.Close()
		return nil, err
	}
	s.releaseDir = releaseDir
	opened = true
	s.releaseProcs = func() {}
	if o.RaiseGOMAXPROCS {
		s.releaseProcs = raiseProcs()
	}
	s.log.Debug("pebblejournal: opened", "dir", dir, "options", o.String())
	return s, nil
}

// checkLayout records the layout version in a new store, upgrades a v1 or
// v2 store to v3, and refuses a store written with another layout. A
// read-only store records nothing and refuses a v1 or v2 store
// (ErrUpgradeNeeded).
func (s *Store) checkLayout() error {
	if f := s.failure(); f != nil {
		return f
	}
	v, closer, err := s.db.Get(layoutKey)
	switch {
	case errors.Is(err, pebble.ErrNotFound):
		if err := s.refuseForeign(); err != nil {
			return err
		}
		if s.readOnly {
			return nil // read as the layout Open would record
		}
		return s.putLayout()
	case err != nil:
		return fmt.Errorf("pebblejournal: read layout version: %w", storageErr(err))
	}
	version := string(v)
	_ = closer.Close()
	if s.readOnly && (version == layoutV1 || version == layoutV2) {
		return fmt.Errorf("%w: the store has layout %s, which an Open that may write upgrades to v3 first",
			ErrUpgradeNeeded, strings.TrimPrefix(version, "lazarus.pebblejournal."))
	}
	switch version {
	case layoutVersion:
		return nil
	case layoutV1:
		if err := s.upgradeV1(); err != nil {
			return fmt.Errorf("pebblejournal: upgrade layout v1 to v2: %w", err)
		}
		fallthrough
	case layoutV2:
		if err := s.buildActiveIndex(); err != nil {
			return fmt.Errorf("pebblejournal: upgrade layout %s to v3: %w", strings.TrimPrefix(version, "lazarus.pebblejournal."), err)
		}
		return nil
	}
	return journal.Corruptf("pebblejournal: key %s: layout %q, this build reads %q, %q and %q", keyString(layoutKey), version, layoutV1, layoutV2, layoutVersion)
}

// buildActiveIndex gives a store written before layout v3 its index of
// ACTIVE conversations: one synced batch clears family 0x0a (a v2 build
// may have run on a store whose upgrade never finished; it would not have
// kept the index), sets the key of every row whose status is ACTIVE, and
// records layout v3. It reads every row, once; the batch holds only the
// active ones. A crash before the commit leaves the store as it was, and
// the next Open builds the index again.
func (s *Store) buildActiveIndex() error {
	b := s.db.NewBatch()
	defer b.Close()
	_ = b.DeleteRange([]byte{famActive}, familyEnd(famActive), nil)
	prefix := []byte{famConv}
	rows, active := 0, 0
	err := s.scan(prefix, familyEnd(famConv), func(k, v []byte) error {
		id, err := parseIDKey(k, prefix)
		if err != nil {
			return err
		}
		row, err := decodeConversation(k, v, id)
		if err != nil {
			return err
		}
		rows++
		if isActive(row) {
			active++
			_ = b.Set(convKey(famActive, id), nil, nil)
		}
		return nil
	})
	if err != nil {
		return err
	}
	_ = b.Set(layoutKey, []byte(layoutVersion), nil)
	if err := s.commit(b); err != nil {
		return err
	}
	s.log.Info("pebblejournal: built the active-conversation index of layout v3", "rows", rows, "active", active)
	return nil
}

// upgradeV1 moves every key of the v1 owner index (0x20 | call) to the v2
// one (0x22 | call), upgradeChunk keys per synced batch, each batch setting
// the new keys and deleting the old ones. A crash in between leaves a v1
// store with part of its index moved, which the next Open finishes: reads
// of a v1 store happen only after the upgrade, and the layout is recorded
// as v2 only once no v1 key is left.
func (s *Store) upgradeV1() error {
	for {
		b := s.db.NewBatch()
		n := 0
		err := s.scan([]byte{famCallOwnerV1}, familyEnd(famCallOwnerV1), func(k, v []byte) error {
			if n == upgradeChunk {
				return errChunkFull
			}
			nk := append([]byte{famCallOwner}, k[1:]...)
			_ = b.Set(nk, v, nil)
			_ = b.Delete(k, nil)
			n++
			return nil
		})
		if err != nil && !errors.Is(err, errChunkFull) {
			_ = b.Close()
			return err
		}
		if n == 0 {
			return b.Close()
		}
		err = s.commit(b)
		_ = b.Close()
		if err != nil {
			return err
		}
		s.log.Info("pebblejournal: moved tool call owner keys to layout v2", "keys", n)
	}
}

var errChunkFull = errors.New("chunk full")

// refuseForeign refuses a database without a layout version whose first
// or last key lies outside every family of this layout: another program's
// Pebble database, which adopting would read as records and write into.
// Every store records its layout in its first write, so a database with no
// layout version is either empty (a crash before that first write: a new
// store) or damaged: a lost write-ahead log that held the layout key leaves
// the store's later keys, all in its families, and the store opens so that
// its reads report the gap (TestLostWALIsAGap).
func (s *Store) refuseForeign() error {
	it, err := s.newIter(nil, nil)
	if err != nil {
		return fmt.Errorf("pebblejournal: read the first key: %w", err)
	}
	var foreign []byte
	if it.First() && !knownKey(it.Key()) {
		foreign = append([]byte(nil), it.Key()...)
	} else if it.Last() && !knownKey(it.Key()) {
		foreign = append([]byte(nil), it.Key()...)
	}
	if err := closeIter(it, nil); err != nil {
		return fmt.Errorf("pebblejournal: read the first key: %w", err)
	}
	if foreign != nil {
		return journal.Corruptf("pebblejournal: the database holds a key outside this layout's families (%q) and no layout version (key %s): not a Lazarus store", foreign, keyString(layoutKey))
	}
	return nil
}

func (s *Store) putLayout() error {
	b := s.db.NewBatch()
	defer b.Close()
	_ = b.Set(layoutKey, []byte(layoutVersion), nil)
	return s.commit(b)
}

// Close closes the database and releases the directory. It waits for calls
// in progress. Later calls to Close return nil; every other method returns
// an error wrapping journal.ErrClosed.
func (s *Store) Close() error {
	s.gate.Lock()
	defer s.gate.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	close(s.closing)
	err := s.db.Close()
	s.releaseProcs()
	if cerr := s.fsCloser.Close(); err == nil {
		err = cerr
	}
	s.releaseDir()
	if err != nil {
		return fmt.Errorf("pebblejournal: close: %w", err)
	}
	return nil
}

// begin admits a call: it holds the gate for reading until end. It fails
// when the store is closed (or closing), it failed, or ctx is done, checked
// in this order: a closed or failed store is reported as such (ErrClosed)
// even to a call whose ctx is done too.
func (s *Store) begin(ctx context.Context) error {
	// A Close that has begun holds the gate until it is done; a call
	// whose ctx is done does not wait for it to say ErrClosed.
	select {
	case <-s.closing:
		return errClosed
	default:
	}
	if f := s.failure(); f != nil {
		return f
	}
	if ctx != nil {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("pebblejournal: %w", err)
		}
	}
	s.gate.RLock()
	if s.closed {
		s.gate.RUnlock()
		return errClosed
	}
	if f := s.failure(); f != nil {
		s.gate.RUnlock()
		return f
	}
	return nil
}

func (s *Store) end() { s.gate.RUnlock() }

// failure returns the error of a fatal Pebble failure, or nil.
func (s *Store) failure() error {
	if p := s.failed.Load(); p != nil {
		return *p
	}
	return nil
}

// fail marks the store failed. Pebble calls it (through Logger.Fatalf) when
// it cannot continue, most importantly when a WAL write or sync failed: the
// batch being committed is then not durable even though Pebble's Commit
// returns nil. Every later call returns an error wrapping journal.ErrClosed;
// the caller must Close and reopen, which recovers from what is on disk.
//
// When the error is a full disk, the store's error wraps journal.ErrNoSpace
// too, and says to free space before reopening.
func (s *Store) fail(msg string, noSpace bool) {
	var err error
	if noSpace {
		err = fmt.Errorf("pebblejournal: store failed: the disk is full (%s); it accepts no more calls: free space, then close and reopen it: %w: %w", msg, journal.ErrNoSpace, journal.ErrClosed)
	} else {
		err = fmt.Errorf("pebblejournal: store failed after a fatal storage error and accepts no more calls; close and reopen it (%s): %w", msg, journal.ErrClosed)
	}
	if s.failed.CompareAndSwap(nil, &err) {
		s.log.Error("pebblejournal: fatal storage error; the store refuses every further call until reopened", "error", msg)
	} else {
		s.log.Error("pebblejournal: fatal storage error", "error", msg)
	}
}

// commit applies b with a WAL sync. It returns nil only if the batch is
// durable and the store has not failed.
func (s *Store) commit(b *pebble.Batch) error {
	if b.Empty() {
		return s.failure()
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("pebblejournal: commit: %w", storageErr(err))
	}
	// Pebble reports a failed WAL sync through Logger.Fatalf and then
	// returns nil from Commit; fail has run by now in this goroutine.
	return s.failure()
}

// pebbleLogger routes Pebble's logger into the store's slog.Logger.
type pebbleLogger struct{ s *Store }

func (l pebbleLogger) Infof(format string, args ...any) {
	l.s.log.Debug("pebble: " + strings.TrimSpace(fmt.Sprintf(format, args...)))
}

func (l pebbleLogger) Errorf(format string, args ...any) {
	l.s.log.Error("pebble: " + strings.TrimSpace(fmt.Sprintf(format, args...)))
}

// Fatalf does not exit the process and does not panic: it marks the store
// failed (see Store.fail) and returns, and Pebble carries on returning
// errors or, for a failed commit, nil, which Store.commit turns into an
// error.
func (l pebbleLogger) Fatalf(format string, args ...any) {
	msg := strings.TrimSpace(fmt.Sprintf(format, args...))
	noSpace := strings.Contains(msg, noSpaceText)
	for _, a := range args {
		if err, ok := a.(error); ok && isNoSpace(err) {
			noSpace = true
		}
	}
	l.s.fail(msg, noSpace)
}

// eventListener logs write stalls, slow disks, background errors and
// corruption, then forwards to user's listener if any.
func (s *Store) eventListener(user *pebble.EventListener) *pebble.EventListener {
	l := pebble.EventListener{
		WriteStallBegin: func(info pebble.WriteStallBeginInfo) {
			s.log.Warn("pebblejournal: write stall begins", "reason", info.Reason)
		},
		WriteStallEnd: func() {
			s.log.Info("pebblejournal: write stall ends")
		},
		DiskSlow: func(info pebble.DiskSlowInfo) {
			s.log.Warn("pebblejournal: slow disk", "path", info.Path, "op", info.OpType.String(), "duration", info.Duration)
		},
		BackgroundError: func(err error) {
			s.log.Error("pebblejournal: background error", "error", err)
			if s.flushFailed.Swap(false) {
				s.pauseAfterFailedFlush()
			}
		},
		FlushEnd: func(info pebble.FlushInfo) {
			if info.Err == nil {
				s.flushFailures.Store(0)
			}
			s.flushFailed.Store(info.Err != nil && !strings.Contains(info.Err.Error(), "empty table"))
		},
		// Damage fails the reads that touch it (storageErr), not the
		// whole store: see corrupt.go.
		DataCorruption: func(info pebble.DataCorruptionInfo) {
			s.log.Error("pebblejournal: data corruption", "info", info.String())
		},
	}
	if user != nil {
		l = pebble.TeeEventListener(l, *user)
	}
	return &l
}

// pauseAfterFailedFlush waits before Pebble retries a failed flush (see
// space.go): Pebble reports the flush's error (FlushEnd, then
// BackgroundError) from the goroutine that then schedules the retry, so a
// flush that keeps failing is retried at most a few times a second.
// Failed compactions are not paused: Pebble already avoids retrying their
// key span for a while. Close ends the pause.
func (s *Store) pauseAfterFailedFlush() {
	t := time.NewTimer(backgroundBackoff(s.flushFailures.Add(1)))
	defer t.Stop()
	select {
	case <-t.C:
	case <-s.closing:
	}
}

// openError wraps an error of pebble.Open: ErrNoSpace for a full disk,
// journal.ErrCorrupt for damaged files, as well as the cause.
func openError(dir string, err error) error {
	if isNoSpace(err) {
		return fmt.Errorf("pebblejournal: open %q: %w: free space on that disk and open again: %w", dir, journal.ErrNoSpace, err)
	}
	if pebble.IsCorruptionError(err) || strings.Contains(err.Error(), "unknown to the objstorage provider") ||
		strings.Contains(err.Error(), "could not open manifest file") {
		// Damaged files, or a MANIFEST naming tables that are not there,
		// or a MANIFEST that is not there.
		return fmt.Errorf("pebblejournal: open %q: the store's files are damaged (run lazarus check; see RELIABILITY.md): %w", dir, &corruptError{err})
	}
	if strings.Contains(err.Error(), "no longer supported") {
		// A CURRENT file without Pebble's format marker: another program's
		// database, or garbage. Every store is written in FormatMajorVersion.
		return fmt.Errorf("pebblejournal: open %q: not a Lazarus store: %w", dir, &corruptError{err})
	}
	return fmt.Errorf("pebblejournal: open %q: %w", dir, err)
}

// checkIsDir refuses, with ErrInvalid, an empty dir or one holding a NUL
// byte, and a dir that exists and is not a directory, or lies under a file.
func checkIsDir(fs vfs.FS, dir string) error {
	if dir == "" || strings.IndexByte(dir, 0) >= 0 {
		return journal.Invalidf("pebblejournal: open %q: not a directory name", dir)
	}
	if fs == nil {
		fs = vfs.Default
	}
	fi, err := fs.Stat(dir)
	if (err == nil && !fi.IsDir()) || errors.Is(err, syscall.ENOTDIR) {
		return journal.Invalidf("pebblejournal: open %q: not a directory", dir)
	}
	return nil
}

type nopCloser struct{}

func (nopCloser) Close() error { return nil }

// Striped locks.

func (s *Store) convStripe(conv string) int {
	return int(maphash.String(s.seed, conv) % convStripes)
}

func (s *Store) idStripe(id string) int {
	return int(maphash.String(s.seed, id) % idStripes)
}

// lockSet is a set of stripes to hold together, acquired in the documented
// order (conversation stripes, then id stripes, each in increasing order).
// It is a bitset, so that a request of one conversation locks and unlocks
// in a few word tests, not a scan of every stripe.
type lockSet struct {
	conv [convStripes / 64]uint64
	id   [idStripes / 64]uint64
}

func (ls *lockSet) addConv(stripe int) { ls.conv[stripe/64] |= 1 << (stripe % 64) }
func (ls *lockSet) addID(stripe int)   { ls.id[stripe/64] |= 1 << (stripe % 64) }

// eachStripe calls f with the index of every bit of set, in increasing order.
func eachStripe(set []uint64, f func(int)) {
	for w, bitsOf := range set {
		for bitsOf != 0 {
			b := bits.TrailingZeros64(bitsOf)
			f(w*64 + b)
			bitsOf &= bitsOf - 1
		}
	}
}

// eachStripeDown is eachStripe in decreasing order.
func eachStripeDown(set []uint64, f func(int)) {
	for w := len(set) - 1; w >= 0; w-- {
		for bitsOf := set[w]; bitsOf != 0; {
			b := 63 - bits.LeadingZeros64(bitsOf)
			f(w*64 + b)
			bitsOf &^= 1 << b
		}
	}
}

func (s *Store) lock(ls *lockSet) {
	eachStripe(ls.conv[:], func(i int) { s.convLocks[i].Lock() })
	eachStripe(ls.id[:], func(i int) { s.idLocks[i].Lock() })
}

func (s *Store) unlock(ls *lockSet) {
	eachStripeDown(ls.id[:], func(i int) { s.idLocks[i].Unlock() })
	eachStripeDown(ls.conv[:], func(i int) { s.convLocks[i].Unlock() })
}

// lockConv locks one conversation's stripe and returns its unlock.
func (s *Store) lockConv(conv string) func() {
	m := &s.convLocks[s.convStripe(conv)]
	m.Lock()
	return m.Unlock
}

// lockConvAndID locks one conversation stripe and one id stripe, in order.
func (s *Store) lockConvAndID(conv, id string) func() {
	c := &s.convLocks[s.convStripe(conv)]
	i := &s.idLocks[s.idStripe(id)]
	c.Lock()
	i.Lock()
	return func() {
		i.Unlock()
		c.Unlock()
	}
}

// head is what the head cache knows of a conversation that is not deleted.
type head struct {
	lastSeq uint64
	hasRow  bool
	// row is the conversation's row as last committed, if the txn that
	// wrote the entry had it (nil: read it from Pebble). Rows are replaced,
	// never mutated, so it is shared.
	row *messages.Conversation
	// dls, if not nil, is every deadline of the conversation as last
	// committed (tool call id -> time; empty: none), so that resolving or
	// cancelling a call need not look its deadline up; nil: unknown.
	// Replaced, never mutated, so shared.
	dls map[string]*timestamppb.Timestamp
}

// headCache remembers the last seq of recently written conversations, and
// that they have a row and no tombstone (and, usually, the row itself), so
// that an append need not seek to the end of the log (a seek that touches
// every overlapping table) nor read the tombstone or the row. The map of a
// stripe is read and written only under that stripe's conversation lock,
// and only this Store writes the directory (Pebble's lock file), so an
// entry stays true until the Store changes it: a successful commit updates
// it, a failed commit or a delete drops it.
type headCache struct {
	stripes [convStripes]map[string]head
}

func (c *headCache) get(stripe int, id string) (head, bool) {
	h, ok := c.stripes[stripe][id]
	return h, ok
}

func (c *headCache) put(stripe int, id string, h head) {
	putBounded(&c.stripes[stripe], id, h, headsPerStripe)
}

// putBounded sets (*m)[id] = v, making the map if needed; when that would
// grow it beyond limit entries, it first evicts an arbitrary one.
func putBounded[V any](m *map[string]V, id string, v V, limit int) {
	if *m == nil {
		*m = make(map[string]V)
	}
	if _, ok := (*m)[id]; !ok && len(*m) >= limit {
		for k := range *m {
			delete(*m, k)
			break
		}
	}
	(*m)[id] = v
}

func (c *headCache) drop(stripe int, id string) { delete(c.stripes[stripe], id) }

// callsPerStripe bounds the pending-call cache: at most this many calls per
// id stripe (128Ki in all).
const callsPerStripe = 256

// cachedCall is what the call cache knows of a pending tool call: its
// owner and row (replaced, never mutated, so shared).
type cachedCall struct {
	owner string
	rec   *messages.ToolCallRecord
}

// callCache remembers the rows of recently written pending tool calls, so
// that resolving one (a server call resolves milliseconds after it was
// written) reads neither its owner nor its row. A call's row changes only
// under its owner's conversation lock (or, when an unowned id is claimed,
// the id's lock), and the writer updates the cache once its commit
// returned, still holding those locks, so an entry equals what Pebble
// holds. A call that leaves the
// pending state leaves the cache: terminal rows are never written again.
// Each stripe's map has its own mutex, held only for the map operation,
// because readers of one id may hold different conversation locks.
type callCache struct {
	mu      [idStripes]sync.Mutex
	stripes [idStripes]map[string]cachedCall
}

func (c *callCache) get(stripe int, id string) (cachedCall, bool) {
	c.mu[stripe].Lock()
	defer c.mu[stripe].Unlock()
	p, ok := c.stripes[stripe][id]
	return p, ok
}

func (c *callCache) put(stripe int, id string, p cachedCall) {
	c.mu[stripe].Lock()
	defer c.mu[stripe].Unlock()
	putBounded(&c.stripes[stripe], id, p, callsPerStripe)
}

func (c *callCache) drop(stripe int, id string) {
	c.mu[stripe].Lock()
	defer c.mu[stripe].Unlock()
	delete(c.stripes[stripe], id)
}

// lowWater is a lower bound of the keys of the deadline-by-time index that
// are live, so Deadlines skips the delete tombstones that resolved and
// cancelled deadlines leave at the front of the index (a queue-like
// pattern). Every live key is >= low. Writes that add keys lower it before
// they commit; a scan raises it only if no such write overlapped the scan.
type lowWater struct {
	mu       sync.Mutex
	low      []byte // nil: the start of the family
	inflight int    // writes adding index keys, between begin and end
	gen      uint64 // incremented when such a write ends
}

// beginAdd is called before committing a batch that adds the index key k
// (the smallest it adds).
func (w *lowWater) beginAdd(k []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.inflight++
	if w.low != nil && bytes.Compare(k, w.low) < 0 {
		w.low = k
	}
}

// endAdd is called after the commit returned, whatever its outcome.
func (w *lowWater) endAdd() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.inflight--
	w.gen++
}

// startScan returns where a scan starts and a token for raise.
func (w *lowWater) startScan() (low []byte, gen uint64, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.low, w.gen, w.inflight == 0
}

// raise moves the mark up to k, the first live key a scan started at
// startScan found (or the scan's end when it found none), unless a write
// adding keys overlapped the scan.
func (w *lowWater) raise(k []byte, gen uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.inflight == 0 && w.gen == gen && (w.low == nil || bytes.Compare(k, w.low) > 0) {
		w.low = k
	}
}

// AuditEnabled implements journal.AuditReporter: whether the Store was
// opened with Options.Audit.
func (s *Store) AuditEnabled() bool { return s.audit }

var _ journal.AuditReporter = (*Store)(nil)
