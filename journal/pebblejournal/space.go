package pebblejournal

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/lazarusrt/lazarus/journal"
)

// A full disk.
//
// Pebble's Open replays the write-ahead logs into memtables and waits for
// them to be flushed to a table before it returns. When the disk is full
// the flush fails, and Pebble retries it at once, forever: Open neither
// returns nor stops using a CPU. Two defences:
//
//   - Before calling Pebble, Open reserves, in a file of its own
//     (openReserveName), about the space the replay flush needs (the size
//     of the directory's logs plus a margin). If the disk cannot hold it,
//     Open fails at once with an error wrapping journal.ErrNoSpace and
//     Pebble is never started. Otherwise the file is removed just before
//     Pebble opens, handing that space to the flush.
//   - Every failed flush is followed by a pause that doubles from
//     minBackgroundBackoff to maxBackgroundBackoff, reset by the next flush
//     that succeeds, so a flush that keeps failing for a reason the reserve
//     did not foresee is retried at most a few times a second, not
//     thousands of times.

// openReserveName is the file Open writes and removes to check for room.
// Pebble ignores files it does not name.
const openReserveName = "LAZARUS-OPEN-RESERVE"

// openReserveMargin is added to the size of the logs in the reservation:
// room for the MANIFEST, OPTIONS and the table's index and filter blocks.
const openReserveMargin = 512 << 10

// Pauses after a failed flush; see above.
const (
	minBackgroundBackoff = 10 * time.Millisecond
	maxBackgroundBackoff = time.Second
)

// backgroundBackoff is the pause after the n-th consecutive failed flush
// (n >= 1).
func backgroundBackoff(n int64) time.Duration {
	d := minBackgroundBackoff
	for i := int64(1); i < n && d < maxBackgroundBackoff; i++ {
		d *= 2
	}
	return min(d, maxBackgroundBackoff)
}

// openReserveSize is the space reserved before Open: the bytes of the
// directory's write-ahead logs (which the replay flush writes again as a
// table, uncompressed in L0), an eighth more, plus openReserveMargin. It
// may overestimate: logs Pebble keeps for recycling count too.
func openReserveSize(fs vfs.FS, dir string) (int64, error) {
	names, err := fs.List(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return 0, nil
		}
		return 0, err
	}
	var logs int64
	for _, n := range names {
		if !strings.HasSuffix(n, ".log") {
			continue
		}
		info, err := fs.Stat(fs.PathJoin(dir, n))
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			return 0, err
		}
		logs += info.Size()
	}
	return logs + logs/8 + openReserveMargin, nil
}

// isNoSpace reports whether err is the operating system's "no space left
// on device" (or a quota exceeded, which a writer experiences the same way).
func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// noSpaceText is how the operating system words ENOSPC, for errors Pebble
// has already turned into text.
var noSpaceText = syscall.ENOSPC.Error()

// reserveForOpen checks that dir's disk has room for Open: see the comment
// at the top of this file. It returns an error wrapping journal.ErrNoSpace
// if not. Other failures to reserve (a filesystem without preallocation
// that also refuses writes for another reason) are left for Pebble to meet
// and report.
func reserveForOpen(fs vfs.FS, dir string) error {
	path := fs.PathJoin(dir, openReserveName)
	// A crash between creating and removing the reserve leaves it behind.
	if err := fs.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("pebblejournal: open %q: remove a leftover %s: %w", dir, openReserveName, err)
	}
	size, err := openReserveSize(fs, dir)
	if err != nil || size <= openReserveMargin {
		// No directory, or no logs to replay: no flush to wait for, and
		// Pebble reports a full disk as an ordinary error.
		return nil
	}
	f, err := fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		if isNoSpace(err) {
			return noSpaceAtOpen(dir, size, err)
		}
		return nil
	}
	rerr := reserve(f, size)
	cerr := f.Close()
	if err := fs.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("pebblejournal: open %q: remove %s: %w", dir, openReserveName, err)
	}
	if rerr == nil {
		rerr = cerr
	}
	if isNoSpace(rerr) {
		return noSpaceAtOpen(dir, size, rerr)
	}
	return nil
}

// reserve allocates size bytes to f: with fallocate where the filesystem
// has it, else by writing zeros.
func reserve(f vfs.File, size int64) error {
	err := f.Preallocate(0, size)
	if err == nil || isNoSpace(err) {
		return err
	}
	// Writing allocates the blocks (filesystems with delayed allocation
	// reserve them at write time), so no sync is needed.
	zeros := make([]byte, 256<<10)
	for left := size; left > 0; {
		n := min(left, int64(len(zeros)))
		if _, err := f.Write(zeros[:n]); err != nil {
			return err
		}
		left -= n
	}
	return nil
}

func noSpaceAtOpen(dir string, size int64, cause error) error {
	return fmt.Errorf("pebblejournal: open %q: %w: replaying the write-ahead log needs about %d bytes free; "+
		"free space on that disk and open again (nothing was lost or changed): %w", dir, journal.ErrNoSpace, size, cause)
}

// Compact flushes the memtables and compacts every key of the store into
// the levels below L0, where tables are compressed (SetLevelOptions). It
// is what a long enough run reaches by itself, and lets a benchmark or an
// operator measure the store's footprint at steady state. It blocks until
// done, may take long on a large store, and leaves the data unchanged.
// Writes may run meanwhile.
func (s *Store) Compact(ctx context.Context) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	defer s.end()
	if ctx == nil {
		ctx = context.Background()
	}
	// Every key starts with a family byte below 0xff (keys.go).
	if err := s.db.Compact(ctx, []byte{famMeta}, []byte{0xff}, true); err != nil {
		return fmt.Errorf("pebblejournal: compact: %w", storageErr(err))
	}
	return s.failure()
}
