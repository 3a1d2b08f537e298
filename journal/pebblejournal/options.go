package pebblejournal

import (
	"fmt"
	"log/slog"
	"math"
	"runtime"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/lazarusrt/lazarus/journal"
)

// Defaults of Options. Each applies when its field is zero.
const (
	// DefaultCacheSize is the block cache size: 64 MiB.
	DefaultCacheSize = 64 << 20
	// DefaultMemTableSize is the memtable size: 64 MiB. Larger memtables
	// flush less often (see BENCHMARKS.md for the measured effect).
	DefaultMemTableSize = 64 << 20
	// DefaultMaxConcurrentCompactions caps background compactions; the
	// effective default is min(GOMAXPROCS, 4).
	DefaultMaxConcurrentCompactions = 4
	// DefaultFlushDelayDeleteRange is how soon a memtable holding a range
	// delete (a deleted conversation) is flushed so that compactions can
	// give the space back: 10s.
	DefaultFlushDelayDeleteRange = 10 * time.Second
	// DefaultDiskSlowThreshold is how long a disk operation may take before
	// the default filesystem logs it as slow: 5s.
	DefaultDiskSlowThreshold = 5 * time.Second
)

// Pebble settings every store uses (they are not Options). They suit the
// journal's write-heavy load: compactions wait for more L0 files and a
// larger first level, so each one merges more data at once and the log is
// rewritten fewer times on its way down the LSM; on the runtime's load
// generator they cut the CPU per event by about 10% (BENCHMARKS.md). The
// cost is more L0 tables for a read to consult, which the bloom filters and
// the caches of pebblejournal keep off the hot path.
const (
	// L0CompactionThreshold is how many L0 read-amplification units start
	// a compaction out of L0.
	L0CompactionThreshold = 8
	// L0StopWritesThreshold is the L0 read amplification at which Pebble
	// stops writes until compactions catch up.
	L0StopWritesThreshold = 24
	// LBaseMaxBytes is the target size of the first level below L0.
	LBaseMaxBytes = 256 << 20
	// MemTableStopWritesThreshold is how many memtables may be queued for
	// flushing before Pebble stops writes.
	MemTableStopWritesThreshold = 4
)

// Bounds of Options.MemTableSize, when it is not zero.
const (
	// MinMemTableSize is the smallest memtable: 64 KiB. Pebble panics on a
	// write into a memtable smaller than its own bookkeeping.
	MinMemTableSize = 64 << 10
	// MaxMemTableSize bounds the memtable from above (exclusive): Pebble's
	// limit, just under 4 GiB.
	MaxMemTableSize = math.MaxUint32
)

// LowerLevelBlockSize is the data block size of the levels below L0:
// 16 KiB (Pebble's default is 4 KiB). A larger block gives the compressor
// more of the log's text to find repeats in; see SetLevelOptions.
const LowerLevelBlockSize = 16 << 10

// SetLevelOptions sets the per-level Pebble options every store uses; it
// is exported so that a benchmark's plain Pebble baseline can share them.
//
//   - Bloom filters on every level: point lookups that miss (tombstones,
//     tool call owners) skip most tables.
//   - L0 tables, the output of memtable flushes, are not compressed. Every
//     L0 table is soon rewritten by a compaction, which compresses its
//     output, so compressing the flush too was work thrown away: on the
//     runtime's load generator it took ~7% of the CPU per event
//     (BENCHMARKS.md). The cost is disk space while data sits in L0: at
//     most L0StopWritesThreshold tables of about a memtable each, usually
//     L0CompactionThreshold.
//   - The levels below L0, where the log lives at steady state, use
//     Pebble's "Balanced" profile (zstd level 1 for data and value blocks,
//     kept only where it saves 5% or more) in LowerLevelBlockSize blocks.
//     On the load generator's workload a fully compacted store takes
//     about 400 bytes per event, against about 700 with Snappy in 4 KiB
//     blocks (BENCHMARKS.md). Each block names its compression, so a
//     store written with Snappy reads as before, and its tables move to
//     zstd as compactions rewrite them.
func SetLevelOptions(o *pebble.Options) {
	o.Levels[0].FilterPolicy = bloom.FilterPolicy(10) // L1+ inherit it
	o.Levels[0].Compression = func() *sstable.CompressionProfile { return sstable.NoCompression }
	for l := 1; l < len(o.Levels); l++ {
		o.Levels[l].Compression = func() *sstable.CompressionProfile { return sstable.BalancedCompression }
		o.Levels[l].BlockSize = LowerLevelBlockSize
	}
}

// FormatMajorVersion is the Pebble on-disk format every store is created
// with or ratcheted to on Open: the newest of Pebble v2.1.7. It is pinned
// deliberately (Pebble's zero value means an old format) and changes only
// with a reviewed upgrade of Pebble.
const FormatMajorVersion = pebble.FormatValueSeparation

// Options configure Open. The zero value is ready to use; each field says
// what its zero value means. Open takes Options by value.
type Options struct {
	// FS is the filesystem the store lives on. Tests pass vfs.NewMem() or
	// vfs.NewCrashableMem(). Default: the operating system's filesystem
	// (vfs.Default) wrapped with Pebble's disk-health checks, which log a
	// disk operation slower than DiskSlowThreshold; the store closes the
	// wrapper when it closes (or when Open fails).
	FS vfs.FS
	// DiskSlowThreshold is the latency beyond which the default FS reports a
	// disk operation as slow. It applies only when FS is nil. Default:
	// DefaultDiskSlowThreshold; negative disables the health checks.
	DiskSlowThreshold time.Duration
	// Audit turns on the audit log of model calls. Default: off, and then
	// PutModelCall only checks its call (ErrInvalid) and stores nothing,
	// ModelCalls returns nothing and GCModelCalls removes nothing.
	Audit bool
	// Logger receives the store's own logs and Pebble's (Pebble's info lines
	// at Debug, its errors, write stalls, slow disks and background errors at
	// Warn or Error). Default: a logger that discards everything.
	Logger *slog.Logger
	// CacheSize is the size in bytes of Pebble's block cache (outside the Go
	// heap when cgo is on). Default: DefaultCacheSize; negative is invalid.
	CacheSize int64
	// MemTableSize is the size in bytes of one memtable; up to four may be
	// queued before writes stall. Default: DefaultMemTableSize; below
	// MinMemTableSize, or MaxMemTableSize or more, is invalid.
	MemTableSize uint64
	// MaxConcurrentCompactions bounds Pebble's background compactions.
	// Default: min(GOMAXPROCS, DefaultMaxConcurrentCompactions); negative is
	// invalid.
	MaxConcurrentCompactions int
	// FlushDelayDeleteRange is how long a memtable holding a range delete
	// may wait before it is flushed, so that deleted conversations give
	// their space back. Default: DefaultFlushDelayDeleteRange; negative
	// disables the forced flush.
	FlushDelayDeleteRange time.Duration
	// EventListener, if set, also receives Pebble's events (for metrics),
	// after the store's own listener has logged them. Default: nil.
	EventListener *pebble.EventListener
	// RaiseGOMAXPROCS makes the store raise GOMAXPROCS by one while it is
	// open: while at least one Store of the process that asked is open,
	// GOMAXPROCS is one more than it was when the first of them opened;
	// the last Close gives the old value back (unless GOMAXPROCS was
	// changed meanwhile by someone else). Pebble's WAL syncs block in
	// system calls that keep their P for as long as they last, so without
	// the extra P the rest of the process runs on one P less for much of
	// the time, which on a machine of few cores shows as ack tails below
	// saturation (see procs.go). When the GOMAXPROCS environment variable
	// is set, no store changes GOMAXPROCS whatever this field says.
	// Default: false (the store changes nothing process-wide; the
	// process's owner decides: this field, or GOMAXPROCS at the cores plus
	// one). The commands of this module that run a node set it.
	RaiseGOMAXPROCS bool
	// ReadOnly opens the store without writing to its directory, for a
	// tool that only reads (an offline check, say): Pebble opens it
	// read-only, and Open records, upgrades and builds nothing. Pebble
	// still takes the directory's lock (opening its LOCK file, created if
	// missing; nothing else is created), so a directory another Store has
	// open is refused at once with ErrLocked, as without ReadOnly. A
	// store that an Open that may write would first upgrade (a layout
	// before v3, a metadata index never built) is refused with an error
	// wrapping ErrUpgradeNeeded; a directory holding no store is refused
	// too (Pebble's ErrDBDoesNotExist). Every write fails with an error
	// wrapping pebble.ErrReadOnly. Default: false.
	ReadOnly bool
}

// withDefaults fills the zero fields and validates the rest.
func (o Options) withDefaults() (Options, error) {
	if o.CacheSize < 0 {
		return o, journal.Invalidf("pebblejournal: negative CacheSize %d", o.CacheSize)
	}
	if o.MaxConcurrentCompactions < 0 {
		return o, journal.Invalidf("pebblejournal: negative MaxConcurrentCompactions %d", o.MaxConcurrentCompactions)
	}
	if o.MemTableSize != 0 && (o.MemTableSize < MinMemTableSize || o.MemTableSize >= MaxMemTableSize) {
		return o, journal.Invalidf("pebblejournal: MemTableSize %d outside [%d, %d)", o.MemTableSize, MinMemTableSize, uint64(MaxMemTableSize))
	}
	if o.CacheSize == 0 {
		o.CacheSize = DefaultCacheSize
	}
	if o.MemTableSize == 0 {
		o.MemTableSize = DefaultMemTableSize
	}
	if o.MaxConcurrentCompactions == 0 {
		o.MaxConcurrentCompactions = min(runtime.GOMAXPROCS(0), DefaultMaxConcurrentCompactions)
	}
	if o.FlushDelayDeleteRange == 0 {
		o.FlushDelayDeleteRange = DefaultFlushDelayDeleteRange
	}
	if o.DiskSlowThreshold == 0 {
		o.DiskSlowThreshold = DefaultDiskSlowThreshold
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o, nil
}

// String describes the options for a startup log line.
func (o Options) String() string {
	return fmt.Sprintf("audit=%t cache=%d memtable=%d compactions=%d flush_delay_delete_range=%s raise_gomaxprocs=%t read_only=%t",
		o.Audit, o.CacheSize, o.MemTableSize, o.MaxConcurrentCompactions, o.FlushDelayDeleteRange, o.RaiseGOMAXPROCS, o.ReadOnly)
}
